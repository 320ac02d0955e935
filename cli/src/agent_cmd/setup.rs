//! Building the agent a command drives: provider, store, tools, plugins.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_std::AgentConfig;
use dsh_store::SessionStore;

use crate::render::RenderOptions;

use super::args::AgentArgs;

/// Everything a command needs to start an agent.
pub struct Setup {
    /// The store.
    pub store: Arc<dyn SessionStore>,
    /// The agent configuration.
    pub config: AgentConfig,
    /// Render options.
    pub render: RenderOptions,
    /// Whether to title the session (`--no-title`, `titles`).
    pub titles: bool,
    /// Where attached images go (`None`: the model takes none).
    pub images: Option<dsh_tools::Attachments>,
    /// The agent's subagents: attach the agent so that its background
    /// children can report back (a REPL; `run` ends after one turn).
    pub delegation: Arc<dsh_std::subagents::Delegation>,
    /// The user's hooks and skills for this workspace.
    pub extensions: Arc<crate::extensions::Extensions>,
    /// The sandbox `bash` runs under, for `/status`.
    pub sandbox: String,
    /// The workspace.
    pub cwd: PathBuf,
}

pub(super) fn env_lookup(name: &str) -> Option<String> {
    crate::secrets::lookup(name)
}

/// The plugins of working with the user (plan mode, questions) for an
/// agent; `interactive`: a front end answers questions; `plan`: start in
/// plan mode. One place, so that other plugins wire next to it.
pub fn interaction_plugins(config: &mut AgentConfig, interactive: bool, plan: bool) {
    let answerer = if interactive {
        crate::interact::Answerer::Interactive
    } else {
        crate::interact::Answerer::Headless
    };
    config.plugins.push(Box::new(
        crate::interact::Interaction::new(answerer).start_in_plan(plan),
    ));
}

/// Resolves provider and store and builds the agent configuration,
/// starting in plan mode when `plan`.
pub fn setup_with(
    args: &AgentArgs,
    interactive: bool,
    approve_all: bool,
    plan: bool,
) -> Result<Setup, String> {
    let file = crate::config_file::load(&env_lookup)?;
    let mut provider = crate::provider::resolve_with(&args.provider, &file, &env_lookup)?;
    // Images are kept content-addressed beside the sessions.
    provider.attachments = args.store.dir().ok().map(|d| d.join("attachments"));
    let cwd = match &args.cwd {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| format!("dsh: no current directory: {e}"))?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .map_err(|e| format!("dsh: workspace {}: {e}", cwd.display()))?;
    let prompt = args.prompt_settings(&file)?;
    let workspace = cwd.clone();
    let store = args.store.open()?;
    let tool_args = args.tools.over(&file.tools);
    let bash = tool_args.bash_config(&provider.api_key_env);
    // Oversized tool results are kept out of the context: whole
    // under `<store dir>/spill/` (`session-<id>/`; bash's as it is read).
    let spill = args.store.dir().ok().map(|d| d.join("spill"));
    let spill_bytes = tool_args
        .spill_bytes
        .unwrap_or(dsh_tools::spill::DEFAULT_MAX_INLINE_BYTES);
    crate::tool_args::warn_unenforced(&bash);
    let sandbox = match bash.sandbox.mode {
        dsh_tools::sandbox::SandboxMode::Off => "danger-full-access",
        _ => "workspace-write",
    }
    .to_string();
    let preset = args.preset;
    let approve_all = approve_all || preset.is_some_and(|p| p.approve_all());
    let max_retry_wait_ms = provider.client.max_retry_wait_ms();
    let tracing = crate::otel::tracing(&args.otel, &file)?;
    // The user's hooks and skills; children inherit them.
    let ask = if interactive {
        crate::extensions::Ask::Terminal
    } else {
        crate::extensions::Ask::Never
    };
    let extensions = Arc::new(crate::extensions::load_for(
        &cwd,
        &file,
        bash.env.clone(),
        &provider.model,
        ask,
    ));
    let installed = extensions.clone();
    let images = crate::shell::image_store(&provider);
    // MCP servers start once; subagents share their connections.
    let mcp_servers = crate::mcp::servers(&file, &args.mcp, &cwd)?;
    let mcp = crate::mcp::start(&mcp_servers, &cwd, bash.env.clone());
    let mcp_reported = std::sync::atomic::AtomicBool::new(false);
    // The agent, and each subagent it starts, are built alike.
    let build = move || {
        let mut config =
            crate::shell::agent_config(&provider, cwd.clone(), interactive, approve_all, &prompt)?;
        config.tools = dsh_tools::ToolSet::standard(bash.clone());
        crate::shell::add_image_tools(&mut config.tools, &provider);
        crate::shell::add_web(&mut config, &provider, &tool_args);
        // Pressure and overflow compaction against the model's context
        // window (loop.md CP-3 a, b); `/compact` in chat runs it by hand
        // (CP-3 c).
        // A server that reports no usage is measured by estimate (issue
        // 32); the estimate is never logged as usage.
        config
            .plugins
            .push(Box::new(dsh_compaction::Compaction::new(
                dsh_compaction::CompactionConfig {
                    estimate_unreported: true,
                    ..dsh_compaction::CompactionConfig::default()
                },
            )));
        if let Some(t) = &tracing {
            t.install(&mut config);
        }
        installed.install(&mut config);
        if let Some(p) = preset {
            p.apply(&mut config.approval);
        }
        interaction_plugins(&mut config, interactive, plan);
        if let Some(m) = &mcp {
            let first = !mcp_reported.swap(true, std::sync::atomic::Ordering::Relaxed);
            crate::mcp::install(m, &mut config, first);
        }
        // Last, so it bounds what the other plugins made of a result.
        if let Some(root) = &spill {
            crate::shell::add_spill(&mut config, root, spill_bytes);
        }
        Ok(config)
    };
    let (config, delegation) = crate::shell::delegating(store.clone(), build)?;
    let mut render = args.view.options();
    render.max_retry_wait_ms = max_retry_wait_ms;
    // `run` keeps stdout for the answer: notices and errors go to stderr.
    render.stderr_notices = !interactive;
    Ok(Setup {
        store,
        config,
        delegation,
        render,
        titles: !args.no_title && file.titles.unwrap_or(true),
        extensions,
        sandbox,
        cwd: workspace,
        images,
    })
}
