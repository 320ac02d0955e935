//! The one place the CLI builds a std-shell agent configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::LlmCallConfig;
use dsh_deepseek::{
    ClientOptions, DeepSeekClient, DeepSeekConfig, Modality, ModelEntry, Profile, SessionHeader,
    provider_route,
};
use dsh_std::{AgentConfig, ApprovalMode, ApprovalPolicy, ToolSet};

use crate::provider::Provider;

/// What the model is told beyond the defaults: `--system` replaces the
/// identity section, `--append-system` adds text after every section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptSettings {
    /// The identity section's replacement.
    pub system: Option<String>,
    /// Text appended to the system prompt.
    pub append: Option<String>,
}

/// The system-prompt plugin for an agent working in `cwd`: the default
/// sections with `settings` applied, the workspace facts from the host.
pub fn system_prompt(cwd: &Path, settings: &PromptSettings) -> dsh_system_prompt::SystemPrompt {
    let mut prompt = dsh_system_prompt::SystemPrompt::new()
        .with_facts(dsh_system_prompt::host::HostFacts::new(cwd));
    if let Some(text) = &settings.system {
        prompt = prompt.with_identity(text.clone());
    }
    if let Some(text) = &settings.append {
        prompt = prompt.with_appended(text.clone());
    }
    prompt
}

/// Tools never asked about: those that only read, and `todo_write`,
/// which changes nothing but the agent's own plan in its session log.
const READ_ONLY_TOOLS: &[&str] = &["read", "grep", "glob", "bash_output", "todo_write"];

/// The delegation tools: never asked about, since a subagent never asks
/// either (what would ask in its parent is refused in it), so delegating
/// cannot widen what runs unasked.
const DELEGATION_TOOLS: &[&str] = &[dsh_subagents::SPAWN_TOOL, dsh_subagents::FORK_TOOL];

/// Plugin tools that only read what the user put in place: `skill` loads
/// a `SKILL.md` the model was offered.
const PLUGIN_READ_TOOLS: &[&str] = &[dsh_skills::TOOL_NAME];
/// The tools that talk to the user: asking about them would ask
/// the user whether the model may ask the user.
const INTERACTION_TOOLS: &[&str] = &[
    crate::interact::EXIT_PLAN_MODE,
    crate::interact::ASK_USER_QUESTION,
];

/// The approval policy: everything `auto` when `approve_all`; otherwise
/// read-only tools, the plan and the delegation tools `auto`, every other
/// tool `ask` (in `chat` the user answers; `run` without `--yes` denies).
pub fn approval_policy(approve_all: bool) -> ApprovalPolicy {
    if approve_all {
        return ApprovalPolicy::new(ApprovalMode::Auto);
    }
    READ_ONLY_TOOLS
        .iter()
        .chain(DELEGATION_TOOLS)
        .chain(PLUGIN_READ_TOOLS)
        .chain(INTERACTION_TOOLS)
        .fold(ApprovalPolicy::new(ApprovalMode::Ask), |p, t| {
            p.with(*t, ApprovalMode::Auto)
        })
}

/// The workspace-instructions plugin for `cwd`: `AGENTS.md` (else
/// `CLAUDE.md`) from the repository root down to `cwd`, and the one in the
/// user's config directory (`$XDG_CONFIG_HOME/dsh`, else `~/.config/dsh`).
pub fn instructions(cwd: &Path) -> dsh_system_prompt::Instructions {
    let env = |name: &str| std::env::var(name).ok();
    let config_dir = crate::config_file::path(&env).and_then(|p| p.parent().map(Path::to_path_buf));
    dsh_system_prompt::Instructions::new(dsh_system_prompt::host::HostInstructions::new(
        cwd, config_dir,
    ))
}

/// The agent configuration for `provider` working in `cwd`, told what
/// [`system_prompt`] and [`instructions`] give.
pub fn agent_config(
    provider: &Provider,
    cwd: PathBuf,
    _interactive: bool,
    approve_all: bool,
    prompt: &PromptSettings,
) -> Result<AgentConfig, String> {
    let mut config = DeepSeekConfig {
        api_key_env: provider.api_key_env.clone(),
        base_url: provider.base_url.as_ref().map(|u| u.expose().to_string()),
        stream_idle_timeout_ms: provider.client.idle_timeout_ms(),
        ..DeepSeekConfig::default()
    };
    let store = image_store(provider);
    if store.is_some() {
        // The model takes images: the adapter sends them.
        match config.models.iter_mut().find(|m| m.id == provider.model) {
            Some(m) => m.input_modalities = Some(vec![Modality::Text, Modality::Image]),
            None => {
                let mut m: ModelEntry = serde_json::from_value(
                    serde_json::json!({"id": provider.model, "inputModalities": ["text", "image"]}),
                )
                .map_err(|e| format!("dsh: bad model entry: {e}"))?;
                m.context_window = Some(config.default_context_window);
                config.models.push(m);
            }
        }
    }
    // Any OpenAI-compatible server: the tolerant decoder, neutral errors,
    // the session id only where it helps.
    let mut options = ClientOptions {
        profile: Profile::Interop,
        session_header: SessionHeader::DeepSeekOnly,
        max_event_bytes: provider.client.max_event_bytes,
        ..ClientOptions::default()
    };
    let anthropic = provider.api == crate::provider::Api::Anthropic;
    if anthropic {
        // The Messages API over the same transport; no DeepSeek
        // session header.
        options.wire = Some(Arc::new(dsh_anthropic::AnthropicWire::default()));
        options.session_header = SessionHeader::Never;
    }
    if let Some(store) = store {
        options.attachments = Some(Arc::new(move |a: &dsh_core::ImageAttachment| {
            store
                .read(a)
                .map_err(|e| dsh_core::LlmError::coded("ATTACHMENT_NOT_FOUND", &e))
        }));
    }
    if let Some(placeholder) = provider.key_placeholder() {
        // A keyless endpoint (local server, the demo's mock) still gets a
        // syntactically valid bearer token.
        options.credentials = Some(Arc::new(move |_: &str| Some(placeholder.to_string())));
    } else {
        // The key was taken out of the environment at start-up.
        options.credentials = Some(Arc::new(crate::secrets::lookup));
    }
    let mut client = DeepSeekClient::with_options(config.clone(), options.clone())
        .map_err(|e| format!("dsh: bad provider settings: {e}"))?;
    let window = context_window(provider, &client);
    let current = config
        .model(&provider.model)
        .and_then(|m| m.context_window)
        .unwrap_or(config.default_context_window);
    if window.window != current {
        // Rebuilt once with the resolved window (the client is cheap to
        // make; it opens no connection until a call).
        let mut config = config;
        match config.models.iter_mut().find(|m| m.id == provider.model) {
            Some(m) => m.context_window = Some(window.window),
            None => config.default_context_window = window.window,
        }
        client = DeepSeekClient::with_options(config, options)
            .map_err(|e| format!("dsh: bad provider settings: {e}"))?;
    }
    // The route names the endpoint: `deepseek-official` for
    // DeepSeek's API, `openai-compatible:<host[:port]>` for any other.
    let route = if anthropic {
        dsh_anthropic::provider_route(&client.base_url())
    } else {
        provider_route(&client.base_url())
    };
    let mut call = LlmCallConfig::new(route, provider.model.clone());
    call.reasoning_effort = provider.effort.clone().map(Into::into);
    call.temperature = provider.temperature;
    call.max_tokens = provider.max_tokens;
    let mut agent = AgentConfig::new(Arc::new(client), call, cwd.clone());
    // The retry policy of the CLI settings (`--attempts`, `--max-retry-wait`).
    agent.retry_policy = Some(provider.client.retry_policy());
    agent.max_response_bytes = provider.client.max_response_bytes;
    agent.max_steps_per_turn = Some(provider.client.max_steps).filter(|n| *n > 0);
    agent.tools = ToolSet::standard(dsh_tools::BashConfig {
        env: dsh_tools::EnvPolicy::default().with_secret(provider.api_key_env.clone()),
        ..dsh_tools::BashConfig::default()
    });
    agent.plugins.push(Box::new(system_prompt(&cwd, prompt)));
    agent.plugins.push(Box::new(instructions(&cwd)));
    agent.workspace = Some(cwd);
    agent.approval = approval_policy(approve_all);
    Ok(agent)
}

/// The image store of a model that takes images (`None`: no images).
pub fn image_store(provider: &Provider) -> Option<dsh_tools::Attachments> {
    provider
        .attachments
        .as_ref()
        .filter(|_| provider.images)
        .map(dsh_tools::Attachments::new)
}

/// Adds `read_image` to `tools` when the model takes images.
pub fn add_image_tools(tools: &mut ToolSet, provider: &Provider) {
    if let Some(store) = image_store(provider) {
        tools.insert(Box::new(dsh_tools::ReadImageTool { store }));
    }
}

/// Keeps oversized tool results out of the context: bash's full
/// output and every result over `bytes` (0: never) go under `root`; push
/// it after every other plugin, so it bounds what they made of a result.
pub fn add_spill(config: &mut AgentConfig, root: &Path, bytes: usize) {
    config.tools = std::mem::take(&mut config.tools).with_spill_dir(root);
    if bytes > 0 {
        config.plugins.push(Box::new(dsh_spill::SpillPlugin::new(
            dsh_tools::SpillConfig::new(root).with_max_inline_bytes(bytes),
        )));
    }
}

/// Adds `web_fetch` and `web_search` to `config` unless
/// `--no-web`, with the approval plugin that asks before fetching from a
/// host not yet allowed in the session.
pub fn add_web(config: &mut AgentConfig, provider: &Provider, tools: &crate::tool_args::ToolArgs) {
    if tools.no_web {
        return;
    }
    let mut policy = dsh_web::AddressPolicy::default();
    for h in &tools.web_allow_host {
        policy.allowed_hosts.insert(dsh_web::net::bare_host(h));
    }
    let mut fetch = dsh_web::FetchConfig::default();
    fetch.policy = Arc::new(policy);
    let deepseek_api = provider
        .base_url
        .as_ref()
        .is_none_or(|u| u.expose().contains("api.deepseek.com"));
    let exa_key = || crate::secrets::lookup("EXA_API_KEY").filter(|k| !k.is_empty());
    let choice = tools.web_search.clone().unwrap_or_else(|| {
        if deepseek_api {
            "deepseek".into()
        } else if exa_key().is_some() {
            "exa".into()
        } else {
            "none".into()
        }
    });
    let search: Option<Arc<dyn dsh_web::SearchProvider>> = match choice.as_str() {
        "deepseek" => {
            let env = provider.api_key_env.clone();
            Some(Arc::new(dsh_web::DeepSeekSearch::new(Arc::new(
                move || crate::secrets::lookup(&env),
            ))))
        }
        "exa" => Some(Arc::new(dsh_web::ExaSearch::new(Arc::new(move || {
            crate::secrets::lookup("EXA_API_KEY")
        })))),
        _ => None,
    };
    for tool in dsh_web::tools(fetch, search) {
        config.tools.insert(tool);
    }
    // A fetch asks per host (the plugin below), not per call.
    if config.approval.mode_for("web_fetch") == ApprovalMode::Ask {
        config.approval = config
            .approval
            .clone()
            .with("web_fetch", ApprovalMode::Auto);
    }
    config.plugins.push(Box::new(dsh_web::WebFetchApproval::new(
        tools.web_allow_host.iter().cloned(),
    )));
}

/// The context window assumed when neither the user nor the server tells
/// it: 32768 tokens. Small enough that compaction runs before most local
/// servers overflow (llama.cpp, Ollama and LM Studio commonly run 4k to
/// 32k; a larger real window only compacts earlier than needed), large
/// enough for a useful session on an API model.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 32_768;

/// The context window assumed on Anthropic's own API.
pub const ANTHROPIC_CONTEXT_WINDOW: u64 = 200_000;

/// How long context-window discovery may take in all, and per request.
const DISCOVERY_BUDGET: std::time::Duration = std::time::Duration::from_secs(4);
const DISCOVERY_PER_REQUEST: std::time::Duration = std::time::Duration::from_millis(1500);

/// A resolved context window and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Tokens.
    pub window: u64,
    /// Where it came from, for the note.
    pub source: String,
}

/// The context window of `provider`'s model: the user's
/// setting (`--context-window`, the config file), else what the server
/// tells (tried once per process and endpoint), else DeepSeek's known
/// window for a catalog model, else [`DEFAULT_CONTEXT_WINDOW`], said once
/// on stderr.
pub fn context_window(provider: &Provider, client: &DeepSeekClient) -> Window {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<HashMap<(String, String), Window>>> = OnceLock::new();
    if let Some(n) = provider.context_window {
        return Window {
            window: n,
            source: "setting".into(),
        };
    }
    let base = client.base_url();
    let key = (base.clone(), provider.model.clone());
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(w) = seen.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return w;
    }
    let anthropic_api = provider.api == crate::provider::Api::Anthropic
        && dsh_anthropic::provider_route(&base) == "anthropic";
    let known = if anthropic_api {
        // Anthropic's API: every current model has at least 200k.
        Some(ANTHROPIC_CONTEXT_WINDOW)
    } else {
        client
            .config()
            .model(&provider.model)
            .and_then(|m| m.context_window)
    };
    let discovered = match known {
        // DeepSeek's own API: its catalog is the answer.
        Some(_) if dsh_deepseek::is_deepseek_url(&base) || anthropic_api => None,
        _ => {
            client.discover_context_window(&provider.model, DISCOVERY_PER_REQUEST, DISCOVERY_BUDGET)
        }
    };
    let window = match (discovered, known) {
        (Some((n, from)), _) => Window {
            window: n,
            source: from.as_str().into(),
        },
        (None, Some(n)) => Window {
            window: n,
            source: "known model".into(),
        },
        (None, None) => {
            eprintln!(
                "dsh: the server does not tell the context window of {}; assuming {} tokens (set --context-window N, or context_window in the config file)",
                crate::sanitize::terminal(&provider.model),
                DEFAULT_CONTEXT_WINDOW
            );
            Window {
                window: DEFAULT_CONTEXT_WINDOW,
                source: "default".into(),
            }
        }
    };
    if let Ok(mut m) = seen.lock() {
        m.insert(key, window.clone());
    }
    window
}

/// The configuration `build` makes, able to delegate to subagents
/// (loop.md SA-1 to SA-3): the `subagent` and `subagent_fork` tools, whose
/// children are built by `build` too (same provider, model, tools and
/// plugins) and stored in `store`, beside the parent.
///
/// Returns the delegation too: [`Delegation::attach`] an agent started
/// from the configuration to let its background children
/// (`run_in_background`) report back to it.
///
/// [`Delegation::attach`]: dsh_std::subagents::Delegation::attach
pub fn delegating(
    store: Arc<dyn dsh_store::SessionStore>,
    build: impl Fn() -> Result<AgentConfig, String> + Send + Sync + 'static,
) -> Result<(AgentConfig, Arc<dsh_std::subagents::Delegation>), String> {
    let build: dsh_std::subagents::ConfigFactory = Arc::new(build);
    let mut config = build()?;
    let delegation = dsh_std::subagents::Delegation::with_ids(
        store,
        build,
        dsh_std::subagents::Settings::default(),
        Arc::new(|| crate::store::new_session_id(crate::store::now_ms())),
    );
    delegation.install(&mut config);
    Ok((config, delegation))
}

/// Whether the built-in tool set has a tool named `name`.
pub fn has_tool(name: &str) -> bool {
    ToolSet::standard(dsh_tools::BashConfig::default())
        .names()
        .contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_asks_for_writers_only() {
        let p = approval_policy(false);
        assert_eq!(p.mode_for("read"), ApprovalMode::Auto);
        assert_eq!(p.mode_for("bash"), ApprovalMode::Ask);
        assert_eq!(p.mode_for("write"), ApprovalMode::Ask);
        assert_eq!(p.mode_for("edit"), ApprovalMode::Ask);
        assert_eq!(p.mode_for("bash_start"), ApprovalMode::Ask);
        assert_eq!(p.mode_for("todo_write"), ApprovalMode::Auto);
        assert_eq!(approval_policy(true).mode_for("bash"), ApprovalMode::Auto);
        // Delegating is not asked about; what the child would do is.
        let p = approval_policy(false);
        assert_eq!(p.mode_for("subagent"), ApprovalMode::Auto);
        assert_eq!(p.mode_for("subagent_fork"), ApprovalMode::Auto);
        assert_eq!(p.mode_for("skill"), ApprovalMode::Auto);
        let child = p.delegated();
        assert_eq!(child.mode_for("bash"), ApprovalMode::Deny);
        assert_eq!(child.mode_for("read"), ApprovalMode::Auto);
    }

    #[test]
    fn every_auto_approved_name_is_a_read_only_tool_that_exists() {
        for name in READ_ONLY_TOOLS {
            assert!(has_tool(name), "{name} is auto-approved but is not a tool");
        }
        assert!(has_tool("grep") && has_tool("glob"));
    }
}
