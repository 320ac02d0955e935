//! The agent front end on the std shell: `dsh chat`, `dsh run`, `dsh fork`
//! and the shared event loop that renders a running agent.
//!
//! Exit codes of `run`: 0 the turn completed; 1 it ended otherwise (error,
//! cancel, max-tokens, blocked) or its log could not be written in full;
//! 2 bad usage or setup failure. `chat` exits 1 when its log could not be
//! written in full (and does not say "saved").

use std::collections::VecDeque;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

use clap::Args;
use dsh_core::SessionId;
use dsh_core::session::{EventData, SessionEvent, completed_boundary};
use dsh_std::{Agent, AgentConfig, AgentEvent, AgentStatus, ApprovalRequestId, CancelCause};
use dsh_store::SessionStore;

use crate::Outcome;
use crate::provider::ProviderArgs;
use crate::render::{RenderOptions, Renderer, TurnOutcome};
use crate::sanitize::{eprintln_safe, writeln_safe};
use crate::store::{StoreArgs, describe_location, new_session_id, now_ms};
use crate::title::Titler;

/// Display flags.
#[derive(Args, Clone, Debug, Default)]
pub struct ViewArgs {
    /// Do not show the model's reasoning.
    #[arg(long)]
    pub hide_reasoning: bool,
    /// No ANSI colors (also when `NO_COLOR` is set).
    #[arg(long)]
    pub no_color: bool,
}

impl ViewArgs {
    /// The render options these flags select.
    pub fn options(&self) -> RenderOptions {
        let terminal = io::stdout().is_terminal();
        RenderOptions {
            hide_reasoning: self.hide_reasoning,
            color: !self.no_color
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && terminal,
            live: terminal,
            columns: terminal_columns(),
            ..RenderOptions::default()
        }
    }
}

/// The width of the terminal on stdout: `$COLUMNS` when set, else the
/// terminal's own size, else 80.
fn terminal_columns() -> usize {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return c;
    }
    #[cfg(unix)]
    if let Ok(size) = rustix::termios::tcgetwinsize(io::stdout())
        && size.ws_col > 0
    {
        return usize::from(size.ws_col);
    }
    80
}

/// Flags every agent command takes.
#[derive(Args, Clone, Debug, Default)]
pub struct AgentArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub view: ViewArgs,
    /// The workspace tools work in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    #[command(flatten)]
    pub tools: crate::tool_args::ToolArgs,
    #[command(flatten)]
    pub otel: crate::otel::OtelArgs,
    /// Replace the identity section of the system prompt: TEXT, or @FILE
    /// to read it from a file.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub system: Option<String>,
    /// Append to the system prompt (after every section): TEXT, or @FILE.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub append_system: Option<String>,
    /// Do not ask the model for a session title after the first completed
    /// turn (config: `titles = false`).
    #[arg(long)]
    pub no_title: bool,
    /// Permission preset: approval and sandbox together, logged
    /// (`read-only`: writes and commands refused; `workspace-write`: they
    /// ask; `full-auto`: nothing asks).
    #[arg(long, value_enum, value_name = "PRESET")]
    pub preset: Option<crate::preset::Preset>,
    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,
}

/// Largest `@FILE` a prompt flag reads.
const MAX_PROMPT_FILE_BYTES: u64 = 256 * 1024;

/// The text of a `TEXT|@FILE` flag value.
fn text_or_file(flag: &str, value: &str) -> Result<String, String> {
    let Some(path) = value.strip_prefix('@') else {
        return Ok(value.to_string());
    };
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("dsh: {flag} @{path}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_PROMPT_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("dsh: {flag} @{path}: {e}"))?;
    if text.len() as u64 > MAX_PROMPT_FILE_BYTES {
        return Err(format!(
            "dsh: {flag} @{path}: larger than {MAX_PROMPT_FILE_BYTES} bytes"
        ));
    }
    Ok(text)
}

impl AgentArgs {
    /// The prompt settings of `--system` and `--append-system`, over the
    /// config file's `system` and `append_system`.
    pub fn prompt_settings(
        &self,
        file: &crate::config_file::ConfigFile,
    ) -> Result<crate::shell::PromptSettings, String> {
        let pick = |flag: &str, value: &Option<String>, key: &Option<String>| {
            value
                .as_deref()
                .map(|v| text_or_file(flag, v))
                .or_else(|| key.as_deref().map(|v| text_or_file(flag, v)))
                .transpose()
        };
        Ok(crate::shell::PromptSettings {
            system: pick("--system", &self.system, &file.system)?,
            append: pick("--append-system", &self.append_system, &file.append_system)?,
        })
    }
}

/// `dsh chat [--resume ID]`
#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Continue a stored session (an interrupted turn is closed first).
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// Start in plan mode: the model explores and presents a plan with
    /// `exit_plan_mode` before anything is written or run.
    #[arg(long)]
    pub plan: bool,
}

/// `dsh run PROMPT [--json]`
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Print the session events as JSON lines (exactly as the log stores
    /// them, chunks unpacked) instead of rendering them.
    #[arg(long)]
    pub json: bool,
    /// Allow tools whose policy is `ask` without asking (`run` cannot ask;
    /// without this flag they are denied).
    #[arg(long)]
    pub yes: bool,
    /// After the run, also write the whole session log (JSONL, as the
    /// store holds it) to FILE: a fixture for `dsh replay --check` and
    /// `dsh_runtime::replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Start in plan mode (writes and commands are refused; `run` cannot
    /// review a plan, so the turn ends with the plan presented).
    #[arg(long)]
    pub plan: bool,
    /// Attach an image (PNG, JPEG, GIF or WebP) to the prompt; the model
    /// must take images (`--images`). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub image: Vec<PathBuf>,
    /// The prompt.
    pub prompt: String,
}

/// `dsh fork ID [--at SEQ]`
#[derive(Args)]
pub struct ForkArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The session to fork.
    pub id: String,
    /// Fork at this seq (default: through the last completed turn).
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
}

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

fn env_lookup(name: &str) -> Option<String> {
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
    // Images (issue 31) are kept content-addressed beside the sessions.
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
    // Oversized tool results are kept out of the context (issue 31): whole
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
    // The user's hooks and skills (issue 29); children inherit them.
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

/// What the event loop receives.
enum Ui {
    Event(AgentEvent),
    Line(String),
    Eof,
    Interrupt,
    /// SIGTERM or SIGHUP: end the command the way Ctrl-C does (cancel a
    /// running turn, stop its tools' process groups, save the session),
    /// without asking twice.
    Terminate,
    /// An event of the chat's agent number `.0` (`dsh chat` switches
    /// agents on `/resume` and `/fork`: a late event of an earlier one is
    /// dropped).
    Of(u64, AgentEvent),
}

/// Forwards `agent`'s events tagged with `generation`.
fn spawn_tagged_forwarder(agent: &Agent, generation: u64, tx: Sender<Ui>) {
    let rx = agent.subscribe();
    thread::spawn(move || {
        while let Ok(ev) = rx.recv() {
            if tx.send(Ui::Of(generation, ev)).is_err() {
                break;
            }
        }
    });
}

/// The input side of `dsh chat`, made once for every agent it switches
/// through: one stdin reader, one signal handler.
struct ChatInput {
    tx: Sender<Ui>,
    rx: Receiver<Ui>,
    generation: u64,
    /// Lines read ahead by the previous agent's REPL, and whether the
    /// input ended.
    leftover: (VecDeque<String>, bool),
}

impl ChatInput {
    fn start() -> Self {
        let (tx, rx) = mpsc::channel();
        spawn_stdin(tx.clone());
        install_ctrlc(tx.clone());
        ChatInput {
            tx,
            rx,
            generation: 0,
            leftover: (VecDeque::new(), false),
        }
    }
}

fn spawn_forwarder(agent: &Agent, tx: Sender<Ui>) {
    let rx = agent.subscribe();
    thread::spawn(move || {
        while let Ok(ev) = rx.recv() {
            if tx.send(Ui::Event(ev)).is_err() {
                break;
            }
        }
    });
}

/// Reads stdin with the line editor (Tab completes commands) when stdin
/// and stdout are a terminal; `false` when it cannot.
#[cfg(unix)]
fn spawn_editor(tx: Sender<Ui>) -> bool {
    use std::io::Read;
    if !(io::stdin().is_terminal() && io::stdout().is_terminal() && crate::line_edit::enter()) {
        return false;
    }
    thread::spawn(move || {
        let mut editor = crate::line_edit::LineEditor::new(crate::commands::Registry::standard());
        let stdin = io::stdin();
        let mut lock = stdin.lock();
        let mut byte = [0u8; 1];
        loop {
            match lock.read(&mut byte) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Ui::Eof);
                    break;
                }
                Ok(_) => {}
            }
            for edit in editor.byte(byte[0]) {
                let sent = match edit {
                    crate::line_edit::Edit::Echo(s) => {
                        // tty: the user's own keystrokes (control bytes are not echoed).
                        crate::line_edit::echo(&s);
                        true
                    }
                    crate::line_edit::Edit::Show(list) => {
                        crate::line_edit::echo(&format!("\n{list}\n> {}", editor.line()));
                        true
                    }
                    crate::line_edit::Edit::Line(l) => tx.send(Ui::Line(l)).is_ok(),
                    crate::line_edit::Edit::Eof => {
                        let _ = tx.send(Ui::Eof);
                        return;
                    }
                };
                if !sent {
                    return;
                }
            }
        }
    });
    true
}

fn spawn_stdin(tx: Sender<Ui>) {
    #[cfg(unix)]
    if spawn_editor(tx.clone()) {
        return;
    }
    thread::spawn(move || {
        let stdin = io::stdin();
        let mut lock = stdin.lock();
        loop {
            let mut line = String::new();
            match lock.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Ui::Eof);
                    break;
                }
                Ok(_) => {
                    let text = line.trim_end_matches(['\n', '\r']).to_string();
                    if tx.send(Ui::Line(text)).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

fn install_ctrlc(tx: Sender<Ui>) {
    install_sigterm(tx.clone());
    // Only the first handler of a process is installed; a failure leaves
    // the default (the process ends), which is still a way out.
    let _ = ctrlc::set_handler(move || {
        let _ = tx.send(Ui::Interrupt);
    });
}

/// Forwards SIGTERM and SIGHUP (the terminal went away) as
/// [`Ui::Terminate`]; where that cannot be installed the default stays,
/// which ends the process and would leave a running tool's processes
/// behind.
fn install_sigterm(tx: Sender<Ui>) {
    crate::signals::forward(crate::signals::Set::TermHup, move || {
        tx.send(Ui::Terminate).is_ok()
    });
}

/// Whether a turn outcome counts as success for an exit code.
pub fn completed(outcome: &TurnOutcome) -> bool {
    outcome.reason == "completed"
}

/// How long a command waits for a pending title before it exits.
const TITLE_WAIT: Duration = Duration::from_secs(5);

/// A titler for `agent`, which runs with `config`'s provider and call.
fn titler_for(
    provider: Arc<dyn dsh_std::ModelProvider>,
    call: dsh_core::LlmCallConfig,
    agent: &Agent,
    enabled: bool,
) -> Titler {
    Titler::for_agent(provider, call, agent, enabled)
}

/// `dsh run PROMPT`.
pub fn run(args: RunArgs) -> Outcome {
    let setup = match setup_with(&args.agent, false, args.yes, args.plan) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let id = new_session_id(now_ms());
    let mut titler = Titler::new(
        setup.config.provider.clone(),
        setup.config.call_config.clone(),
        &[],
        setup.titles,
    );
    let agent = match Agent::create(setup.config, setup.store.clone(), id.clone()) {
        Ok(a) => a,
        Err(e) => {
            eprintln_safe!("dsh run: cannot start the agent: {e}");
            return Outcome::BadInput;
        }
    };
    let mut content = vec![dsh_core::ContentBlock::text(args.prompt.clone())];
    for path in &args.image {
        match attach_image(setup.images.as_ref(), path) {
            Ok(block) => content.push(block),
            Err(e) => {
                eprintln_safe!("dsh run: {e}");
                let _ = agent.close();
                return Outcome::BadInput;
            }
        }
    }
    let result = log_preset(&agent, args.agent.preset, &setup.sandbox)
        .and_then(|()| drive_content(&agent, content, setup.render, args.json, args.yes));
    // The answer is out; the title gets a bounded wait before exit.
    titler.turn_ended(&agent);
    let title = titler.poll(&agent, TITLE_WAIT);
    if args.json
        && let Some(seq) = title
        && let Ok(events) = agent.events()
        && let Some(ev) = events.get(seq as usize)
    {
        // `--json` prints the whole log: the title too.
        let mut line = Vec::new();
        dsh_core::jsonl::encode_event_line(ev, &mut line);
        let _ = io::stdout().write_all(&line);
    }
    let closed = agent.close();
    let location = describe_location(setup.store.as_ref(), &args.agent.store, &id);
    if let Err(e) = closed {
        // Issue 25: what the store did not take is not claimed as saved.
        if let Err(e) = &result {
            eprintln!("dsh run: {}", crate::sanitize::terminal(e));
        }
        eprintln!(
            "dsh run: {}",
            crate::sanitize::terminal(&format!(
                "{e}; session {} at {location} is incomplete",
                id.as_str()
            ))
        );
        return Outcome::CheckFailed;
    }
    if let Some(file) = &args.record
        && let Err(e) = record(setup.store.as_ref(), &id, file)
    {
        eprintln_safe!("dsh run: cannot record to {}: {e}", file.display());
        return Outcome::CheckFailed;
    }
    match result {
        Ok(outcome) => {
            if !args.json {
                eprintln_safe!("session {} → {location}", id.as_str());
            }
            if completed(&outcome) {
                Outcome::Ok
            } else {
                Outcome::CheckFailed
            }
        }
        Err(e) => {
            eprintln_safe!("dsh run: {e}");
            Outcome::CheckFailed
        }
    }
}

/// Logs the permission preset chosen with `--preset`, if any.
fn log_preset(
    agent: &Agent,
    preset: Option<crate::preset::Preset>,
    sandbox: &str,
) -> Result<(), String> {
    for e in preset.map(|p| p.events(sandbox)).unwrap_or_default() {
        agent
            .append_event(e)
            .map_err(|e| format!("cannot log the permission preset: {e}"))?;
    }
    Ok(())
}

/// Writes session `id`'s stored log (header and events, JSONL) to `file`.
fn record(store: &dyn SessionStore, id: &SessionId, file: &std::path::Path) -> Result<(), String> {
    let stored = store.load(id).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    dsh_core::jsonl::encode_header_line(&stored.header, &mut bytes);
    for e in &stored.events {
        dsh_core::jsonl::encode_event_line(e, &mut bytes);
    }
    std::fs::write(file, bytes).map_err(|e| e.to_string())
}

/// An image block for the file at `path`, stored in `store`; an error
/// when the model takes no images or the file is not an image dsh takes.
pub fn attach_image(
    store: Option<&dsh_tools::Attachments>,
    path: &std::path::Path,
) -> Result<dsh_core::ContentBlock, String> {
    let shown = path.display();
    let Some(store) = store else {
        return Err(format!(
            "cannot attach {shown}: the model does not take images (pass --images, or set `images = true` in its [models.\"ID\"] table, for one that does)"
        ));
    };
    let declared = dsh_tools::image::media_type_for_path(&path.to_string_lossy());
    let file = std::fs::File::open(path).map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let mut data = Vec::new();
    io::Read::read_to_end(
        &mut io::Read::take(file, dsh_tools::image::MAX_IMAGE_BYTES + 1),
        &mut data,
    )
    .map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    store
        .save_image(&data, declared, name)
        .map(|attachment| dsh_core::ContentBlock::Image { attachment })
        .map_err(|e| format!("cannot attach {shown}: {e}"))
}

/// [`drive_one_turn`] with a prompt of any content (text and images).
pub fn drive_content(
    agent: &Agent,
    content: Vec<dsh_core::ContentBlock>,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    drive(agent, Prompt::Content(content), render, json, approve_all)
}

enum Prompt<'a> {
    Text(&'a str),
    Content(Vec<dsh_core::ContentBlock>),
}

/// Sends `prompt`, renders (or prints as JSON) until the turn ends; answers
/// approvals with `approve_all` (allow) or deny. Ctrl-C cancels the turn.
pub fn drive_one_turn(
    agent: &Agent,
    prompt: &str,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    drive(agent, Prompt::Text(prompt), render, json, approve_all)
}

fn drive(
    agent: &Agent,
    prompt: Prompt<'_>,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    let (tx, rx) = mpsc::channel();
    spawn_forwarder(agent, tx.clone());
    install_ctrlc(tx);
    let mut out = io::stdout().lock();
    match prompt {
        Prompt::Text(text) => agent.send(text),
        Prompt::Content(content) => agent.send_content(content),
    }
    .map_err(|e| e.to_string())?;
    let mut renderer = Renderer::new(render);
    let spinner = !json && io::stdout().is_terminal();
    let mut waiting = true;
    let mut cancelled = false;
    let mut outcome = None;
    let mut errors = PendingErrors::default();
    loop {
        let msg = match rx.recv_timeout(Duration::from_millis(120)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if spinner && waiting {
                    let _ = renderer.tick(&mut out);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Ui::Event(AgentEvent::Event(ev)) => {
                if json {
                    let mut line = Vec::new();
                    dsh_core::jsonl::encode_event_line(&ev, &mut line);
                    let _ = out.write_all(&line);
                    let _ = out.flush();
                } else {
                    if first_output(&ev) {
                        waiting = false;
                    }
                    if let EventData::LlmRetry(_) = ev.data() {
                        waiting = true;
                    }
                    let _ = renderer.event(&mut out, &ev);
                }
                if let EventData::TurnEnd(_) = ev.data() {
                    outcome = Some(turn_outcome(&ev, &renderer));
                    for e in errors.after_turn(&ev) {
                        eprintln!("error: {}", crate::sanitize::terminal(&e.to_string()));
                    }
                }
            }
            Ui::Event(AgentEvent::ApprovalRequested {
                id,
                tool,
                arguments,
                ..
            }) => {
                let decision = if approve_all {
                    dsh_std::ApprovalDecision::Allow
                } else {
                    dsh_std::ApprovalDecision::Deny
                };
                if !json {
                    let verb = if approve_all {
                        "allowed"
                    } else {
                        "denied (use --yes to allow)"
                    };
                    let _ = renderer.notice(
                        &mut out,
                        &format!(
                            "{tool} {}: {verb}",
                            crate::render::summarize_arguments(&arguments, 60)
                        ),
                    );
                }
                agent.answer_approval(id, decision);
            }
            Ui::Event(AgentEvent::Status(AgentStatus::Idle)) if outcome.is_some() => break,
            Ui::Event(AgentEvent::Error(e)) => errors.push(e),
            Ui::Event(_) => {}
            Ui::Interrupt | Ui::Terminate => {
                if cancelled {
                    // Second Ctrl-C: leave now.
                    break;
                }
                cancelled = true;
                if !json {
                    let _ = renderer.notice(&mut out, "cancelling… (Ctrl-C again to quit)");
                }
                agent.cancel(CancelCause::User, false);
            }
            Ui::Line(_) | Ui::Eof | Ui::Of(..) => {}
        }
    }
    for e in errors.take() {
        eprintln!("error: {}", crate::sanitize::terminal(&e.to_string()));
    }
    outcome.ok_or_else(|| "the agent stopped before the turn ended".to_string())
}

/// Runtime error notifications, held so that the one repeating the turn's
/// own error is not shown twice.
#[derive(Default)]
struct PendingErrors(Vec<String>);

impl PendingErrors {
    fn push(&mut self, e: String) {
        self.0.push(e);
    }

    /// The held errors other than the one `turn_end` reports.
    fn after_turn(&mut self, turn_end: &SessionEvent) -> Vec<String> {
        let shown = match turn_end.data() {
            EventData::TurnEnd(end) => match &end.reason {
                dsh_core::session::TurnEndReason::Error { error } => Some(error.message.clone()),
                _ => None,
            },
            _ => None,
        };
        let mut rest = self.take();
        rest.retain(|e| Some(e) != shown.as_ref());
        rest
    }

    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.0)
    }
}

/// The renderer's outcome, or one read from the `turn/end` event itself
/// (JSON mode does not render).
fn turn_outcome(ev: &SessionEvent, renderer: &Renderer) -> TurnOutcome {
    let _ = renderer;
    match ev.data() {
        EventData::TurnEnd(end) => TurnOutcome {
            turn: end.turn,
            reason: end.reason.kind().to_string(),
            error: None,
            usage: Default::default(),
        },
        _ => TurnOutcome::default(),
    }
}

/// Whether `ev` is the first visible output of a step (ends the spinner).
fn first_output(ev: &SessionEvent) -> bool {
    matches!(
        ev.data(),
        EventData::AssistantChunk(_) | EventData::ToolCall(_) | EventData::TurnEnd(_)
    )
}

/// `dsh chat`.
pub fn chat(args: ChatArgs) -> Outcome {
    let start = match args.resume {
        Some(id) => Start::Resume(SessionId::new(id)),
        None => Start::New,
    };
    chat_loop(&args.agent, start, args.plan)
}

/// How `dsh chat` gets its session.
enum Start {
    New,
    Resume(SessionId),
    Fork { parent: SessionId, at: Option<u64> },
}

/// How long `dsh chat` and `dsh fork` wait for background subagents to
/// stop and persist at exit.
const SUBAGENT_SHUTDOWN: Duration = Duration::from_secs(3);

/// Chats on the session `start` names, then on the one `/resume` or
/// `/fork` switches to, until the user quits.
fn chat_loop(args: &AgentArgs, mut start: Start, plan: bool) -> Outcome {
    /// Gives the terminal its mode back however the chat ends.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::line_edit::restore();
        }
    }
    let _restore = Restore;
    let mut input = ChatInput::start();
    loop {
        let setup = match setup_with(args, true, false, plan) {
            Ok(s) => s,
            Err(e) => {
                eprintln_safe!("{e}");
                return Outcome::BadInput;
            }
        };
        let provider = setup.config.provider.clone();
        let call = setup.config.call_config.clone();
        let facts = Facts {
            call: call.clone(),
            store: args.store.describe(),
            sandbox: setup.sandbox.clone(),
            cwd: setup.cwd.clone(),
            skills: setup.extensions.skills(),
        };
        let resumed = !matches!(start, Start::New);
        let agent = match &start {
            Start::New => {
                Agent::create(setup.config, setup.store.clone(), new_session_id(now_ms()))
            }
            Start::Resume(id) => Agent::resume(setup.config, setup.store.clone(), id),
            Start::Fork { parent, at } => {
                let at = match at {
                    Some(at) => *at,
                    None => match last_completed_turn(&*setup.store, parent) {
                        Ok(at) => at,
                        Err(e) => {
                            eprintln_safe!("dsh fork: {e}");
                            return Outcome::BadInput;
                        }
                    },
                };
                let new_id = new_session_id(now_ms());
                let forked = Agent::fork(
                    setup.config,
                    setup.store.clone(),
                    parent,
                    Some(at),
                    new_id.clone(),
                );
                if forked.is_ok() {
                    eprintln_safe!("forked {} → {}", parent.as_str(), new_id.as_str());
                }
                forked
            }
        };
        let agent = match agent {
            Ok(a) => a,
            Err(e) => {
                eprintln_safe!("dsh chat: cannot start the agent: {e}");
                return Outcome::BadInput;
            }
        };
        setup
            .delegation
            .attach(agent.session_id().clone(), agent.mailbox());
        if let Err(e) = log_preset(&agent, args.preset, &setup.sandbox) {
            eprintln_safe!("dsh chat: {e}");
        }
        let current = agent.session_id().clone();
        let titler = titler_for(provider, call, &agent, setup.titles);
        let end = repl(
            &mut input,
            agent,
            setup.store,
            &args.store,
            setup.render,
            resumed,
            titler,
            &facts,
            setup.images,
        );
        // Background subagents end with their parent (cause `parent`).
        setup.delegation.shutdown(SUBAGENT_SHUTDOWN);
        start = match end.switch {
            None => return end.outcome,
            Some(crate::commands::Switch::Resume(id)) => Start::Resume(SessionId::new(id)),
            Some(_) => Start::Fork {
                parent: current,
                at: None,
            },
        };
    }
}

/// `dsh fork ID [--at SEQ]`: forks the stored session and chats on the fork.
pub fn fork(args: ForkArgs) -> Outcome {
    let start = Start::Fork {
        parent: SessionId::new(args.id.clone()),
        at: args.at,
    };
    chat_loop(&args.agent, start, false)
}

/// Where `dsh fork` cuts by default (loop.md SA-3): through the stored
/// log's last `turn/end`. The log is read as stored, without the closers a
/// load would add, so a turn another process is still writing is left out
/// rather than copied as interrupted.
fn last_completed_turn(store: &dyn SessionStore, id: &SessionId) -> Result<u64, String> {
    let (_, events) = store
        .read_from(id, 0, &dsh_store::Cancel::new())
        .map_err(|e| e.to_string())?;
    completed_boundary(&events).ok_or_else(|| {
        format!(
            "session {id} has no completed turn to fork yet (its first turn is still open); pass --at SEQ"
        )
    })
}

/// The REPL's image hook (issue 31): `/image FILE`, or a line that is just
/// the path of an image file (pasted or dropped), queues the image for the
/// next prompt; returns the notice to show, `None` when the line is not
/// about an image.
fn image_line(
    text: &str,
    store: Option<&dsh_tools::Attachments>,
    pending: &mut Vec<dsh_core::ContentBlock>,
) -> Option<String> {
    let unquote = |s: &str| s.trim().trim_matches(|c| c == '\'' || c == '"').to_string();
    let path = match text.strip_prefix("/image") {
        Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
            let p = unquote(rest);
            if p.is_empty() {
                return Some("usage: /image FILE (PNG, JPEG, GIF or WebP)".into());
            }
            p
        }
        _ => {
            let p = unquote(text);
            let is_image = dsh_tools::image::media_type_for_path(&p).is_some()
                && !p.contains('\n')
                && std::path::Path::new(&p).is_file();
            if !is_image {
                return None;
            }
            p
        }
    };
    Some(match attach_image(store, std::path::Path::new(&path)) {
        Ok(block) => {
            let shown = match &block {
                dsh_core::ContentBlock::Image { attachment: a } => {
                    format!("{}x{} {}", a.width, a.height, a.media_type)
                }
                _ => String::new(),
            };
            pending.push(block);
            format!("image attached ({shown}); it goes with your next prompt")
        }
        Err(e) => format!("error: {e}"),
    })
}

/// How long `/compact` waits for the summary.
const COMPACT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// How long a plugin command (`/plan`, `/permissions`) may take.
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What `/status` and `/model` show that the agent does not know.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The provider route and model.
    pub call: dsh_core::LlmCallConfig,
    /// Where the session is stored.
    pub store: String,
    /// The sandbox mode of `bash`.
    pub sandbox: String,
    /// The workspace (write and edit diffs read the files there).
    pub cwd: PathBuf,
    /// The user-invocable skills, name and description (`/skills`).
    pub skills: Vec<(String, String)>,
}

/// The command host of `dsh chat` and `dsh acp`: the agent and the facts.
pub struct AgentHost<'a> {
    /// The agent the commands act on.
    pub agent: &'a Agent,
    /// The store (`/sessions`).
    pub store: &'a dyn SessionStore,
    /// What the agent does not know.
    pub facts: &'a Facts,
}

impl crate::commands::Host for AgentHost<'_> {
    fn log(&mut self, data: EventData) -> Result<(), String> {
        self.agent
            .append_event(data)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn plugin(&mut self, name: &str, args: serde_json::Value) -> Result<serde_json::Value, String> {
        self.agent
            .command(name, args, Some(COMMAND_TIMEOUT))
            .map_err(|e| e.to_string())
    }

    fn builtin(&mut self, builtin: crate::commands::Builtin, args: &str) -> crate::commands::Done {
        use crate::commands::{Builtin, Done, Switch};
        let call = &self.facts.call;
        let effort = call.reasoning_effort.as_ref().map_or_else(
            || "default".to_string(),
            |e| {
                serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            },
        );
        let change = |what: &str| {
            Done::error(format!(
                "changing the {what} inside a chat is not supported yet; restart with \
                 `dsh chat --resume {} --{what} VALUE`",
                self.agent.session_id().as_str()
            ))
        };
        match builtin {
            Builtin::Model if args.trim().is_empty() => {
                Done::success(format!("model: {} ({})", call.model, call.provider))
            }
            Builtin::Model => change("model"),
            Builtin::Effort if args.trim().is_empty() => {
                Done::success(format!("reasoning effort: {effort}"))
            }
            Builtin::Effort => change("effort"),
            Builtin::Status => {
                let events = self.agent.events().unwrap_or_default();
                let (mut input, mut output, mut last) = (0i64, 0i64, 0i64);
                for e in &events {
                    if let EventData::AssistantMessage(m) = e.data()
                        && let Some(u) = &m.usage
                    {
                        let this = u.input_tokens + u.cache_read_tokens.unwrap_or(0);
                        input += this;
                        output += u.output_tokens;
                        last = this;
                    }
                }
                Done::success(format!(
                    "model: {} ({}), effort {effort}\ntokens used: input {input}, output {output}; \
                     last request input {last}\nsession: {} ({} events)\nstore: {}\nsandbox: {}",
                    call.model,
                    call.provider,
                    self.agent.session_id().as_str(),
                    events.len(),
                    self.facts.store,
                    self.facts.sandbox
                ))
            }
            Builtin::Sessions => match crate::store::rows(self.store) {
                Ok(rows) if rows.is_empty() => Done::success("no sessions"),
                Ok(rows) => Done::success(
                    rows.iter()
                        .take(50)
                        .map(|r| {
                            format!(
                                "{}{}  {}",
                                "  ".repeat(r.depth),
                                r.id,
                                if r.title.is_empty() {
                                    &r.prompt
                                } else {
                                    &r.title
                                }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                Err(e) => Done::error(e),
            },
            Builtin::Resume => {
                let id = args.trim();
                if id.is_empty() {
                    return Done::error("usage: /resume ID (/sessions lists them)");
                }
                Done {
                    ok: true,
                    text: Some(format!("resuming {id}")),
                    message: None,
                    switch: Some(Switch::Resume(id.to_string())),
                }
            }
            Builtin::Fork => Done {
                ok: true,
                text: Some("forking this session".into()),
                message: None,
                switch: Some(Switch::Fork),
            },
            Builtin::Compact => match self.agent.compact_now(Some(COMPACT_TIMEOUT)) {
                Ok(v) if v["compacted"] == true => {
                    Done::success("compacted: the older history is now a summary")
                }
                Ok(v) => Done::success(format!(
                    "not compacted: {}",
                    v["reason"].as_str().unwrap_or("no compaction plugin")
                )),
                Err(e) => Done::error(e.to_string()),
            },
            Builtin::Help => Done::success(crate::mcp::prompt_help().unwrap_or_default()),
            // `/NAME` goes to the model as typed and the skills plugin
            // loads that skill.
            Builtin::Skills if self.facts.skills.is_empty() => Done::success("no skills found"),
            Builtin::Skills => Done::success(
                self.facts
                    .skills
                    .iter()
                    .map(|(name, description)| format!("/{name}: {description}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }
    }
}

/// How a chat ended: its exit, and the session to continue in (`/resume`,
/// `/fork`).
pub struct ChatEnd {
    /// The exit.
    pub outcome: Outcome,
    /// A session change the user asked for.
    pub switch: Option<crate::commands::Switch>,
}

/// The interactive loop: feeds the [`crate::repl::Repl`] machine and
/// carries out its actions.
#[allow(clippy::too_many_arguments)]
fn repl(
    input: &mut ChatInput,
    agent: Agent,
    store: Arc<dyn SessionStore>,
    store_args: &StoreArgs,
    render: RenderOptions,
    resumed: bool,
    mut titler: Titler,
    facts: &Facts,
    images: Option<dsh_tools::Attachments>,
) -> ChatEnd {
    // Images queued by `/image FILE` or a pasted image path (issue 31) go
    // with the next prompt.
    let mut pending_images: Vec<dsh_core::ContentBlock> = Vec::new();
    use crate::repl::{Action, Input, Repl};
    input.generation += 1;
    let generation = input.generation;
    spawn_tagged_forwarder(&agent, generation, input.tx.clone());
    let rx = &input.rx;
    let mut out = io::stdout().lock();
    let mut r = Renderer::new(render);
    let id = agent.session_id().clone();
    let _ = writeln_safe!(
        out,
        "dsh chat: session {}{} (/help for commands)",
        id.as_str(),
        if resumed { " (resumed)" } else { "" }
    );
    // The recap and the surface so far (for the token estimate), read in
    // place: a copy of a long log would double the resume's memory.
    let width = render.width;
    if resumed
        && let Ok((recap, surface)) = agent.with_events(move |events| {
            let recap = crate::render::recap(events, 4, width);
            (recap, crate::render::LogSurface::of(events))
        })
    {
        for line in recap {
            let _ = r.notice(&mut out, &line);
        }
        r.adopt_surface(surface);
    }
    // Piped input is a script of what the user would type, in order: a
    // line that arrives while a turn runs waits and answers the next
    // question, or becomes the next prompt when the turn ends. (On a
    // terminal a line typed during a turn steers it, and only a line typed
    // after a question answers it.)
    let piped = !io::stdin().is_terminal();
    // The skills go to the model as typed (`/NAME`: the skills plugin
    // loads that skill).
    let mut registry = crate::commands::Registry::standard();
    for (name, description) in &facts.skills {
        let _ = registry.register(crate::commands::Command::new(
            name,
            description,
            None,
            crate::commands::Handler::Prompt,
        ));
    }
    let mut machine: Repl<ApprovalRequestId> =
        Repl::new(registry, piped, io::stdout().is_terminal());
    let (held, ended) = std::mem::take(&mut input.leftover);
    machine.take_over(held, ended);
    let mut ids = crate::commands::CommandIds::new(now_ms());
    let mut errors = PendingErrors::default();
    let mut switch = None;
    let mut pending: VecDeque<Input<ApprovalRequestId>> = VecDeque::new();
    prompt(&mut out, false);
    'outer: loop {
        let _ = titler.poll(&agent, Duration::ZERO);
        if machine.finished() && pending.is_empty() {
            break;
        }
        let input = match pending.pop_front() {
            Some(i) => i,
            None => match machine.next_held() {
                Some(line) => Input::Line(line),
                None => match rx.recv_timeout(Duration::from_millis(120)) {
                    // This agent's events; an earlier agent's are dropped.
                    Ok(Ui::Of(g, _)) if g != generation => continue,
                    Ok(Ui::Of(_, ev)) => match to_input(
                        Ui::Event(ev),
                        &mut r,
                        &mut out,
                        &mut errors,
                        &mut titler,
                        &Where {
                            agent: &agent,
                            running: machine.running(),
                            facts,
                            color: render.color,
                        },
                    ) {
                        Some(i) => i,
                        None => continue,
                    },
                    Ok(msg) => match to_input(
                        msg,
                        &mut r,
                        &mut out,
                        &mut errors,
                        &mut titler,
                        &Where {
                            agent: &agent,
                            running: machine.running(),
                            facts,
                            color: render.color,
                        },
                    ) {
                        Some(i) => i,
                        None => continue,
                    },
                    Err(RecvTimeoutError::Timeout) => Input::Tick,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
            },
        };
        // `/image FILE` or a pasted image path (issue 31), unless the line
        // answers an approval or a question.
        let input = match input {
            Input::Line(line) if !machine.answering() => {
                match image_line(line.trim(), images.as_ref(), &mut pending_images) {
                    Some(notice) => {
                        let _ = r.notice(&mut out, &notice);
                        if !machine.running() {
                            prompt(&mut out, false);
                        }
                        continue;
                    }
                    None => Input::Line(line),
                }
            }
            other => other,
        };
        for action in machine.handle(input) {
            match action {
                Action::Send { text, followup } => {
                    // `/mcp:SERVER:PROMPT key=value ...`: an MCP prompt.
                    let text = match crate::mcp::expand_prompt(text.trim()) {
                        Some(Ok(t)) => t,
                        Some(Err(e)) => {
                            let _ = r.notice(&mut out, &format!("error: {e}"));
                            // No turn started.
                            pending.push_back(Input::Running(false));
                            continue;
                        }
                        None => text,
                    };
                    let result = if !pending_images.is_empty() {
                        let mut content = vec![dsh_core::ContentBlock::text(text)];
                        content.append(&mut pending_images);
                        agent.send_content(content)
                    } else if followup {
                        agent.followup(&text)
                    } else {
                        agent.send(&text)
                    };
                    if let Err(e) = result {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                }
                Action::Steer(text) => {
                    if let Err(e) = agent.steer(&text) {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                }
                Action::Followup(text) => {
                    if let Err(e) = agent.followup(&text) {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                }
                Action::Cancel => agent.cancel(CancelCause::User, false),
                Action::Answer(req, decision) => agent.answer_approval(req, decision),
                Action::Reply(req, value) => agent.answer(req, dsh_std::Reply::Plugin(value)),
                Action::Dismiss(req) => agent.answer(req, dsh_std::Reply::Cancelled),
                Action::Command { name, args } => {
                    let mut host = AgentHost {
                        agent: &agent,
                        store: store.as_ref(),
                        facts,
                    };
                    let done = machine
                        .registry()
                        .execute(&mut host, &mut ids, &name, &args);
                    if done.switch.is_some() && done.ok {
                        let _ = r.notice(&mut out, done.text.as_deref().unwrap_or(""));
                        switch = done.switch;
                        break 'outer;
                    }
                    pending.push_back(Input::CommandDone(done));
                }
                Action::Notice(text) => {
                    let _ = r.notice(&mut out, &text);
                }
                Action::Print(text) => {
                    let _ = writeln_safe!(out, "{text}");
                }
                Action::Prompt => prompt(&mut out, machine.running()),
                Action::Tick => {
                    let _ = r.tick(&mut out);
                }
                Action::Idle => {
                    for e in errors.take() {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                    let _ = r.clear_status(&mut out);
                }
                Action::Quit => break 'outer,
            }
        }
    }
    let running = machine.running();
    input.leftover = machine.leftover();
    let _ = r.clear_status(&mut out);
    let _ = writeln!(out);
    drop(out);
    if running {
        agent.cancel(CancelCause::User, false);
    }
    let _ = titler.poll(&agent, TITLE_WAIT);
    let closed = agent.close();
    // After a hang-up the terminal may be gone: a failed write is ignored
    // (println! would panic).
    let mut stdout = io::stdout();
    let location = describe_location(store.as_ref(), store_args, &id);
    if let Err(e) = closed {
        // Issue 25: no "saved" for a log the store did not take in full.
        let _ = writeln_safe!(
            stdout,
            "error: {e}; session {} at {location} is incomplete",
            id.as_str()
        );
        return ChatEnd {
            outcome: Outcome::CheckFailed,
            switch: None,
        };
    }
    let _ = writeln_safe!(stdout, "session {} saved: {location}", id.as_str());
    if switch.is_none() {
        let _ = writeln_safe!(stdout, "resume with: dsh chat --resume {}", id.as_str());
    }
    ChatEnd {
        outcome: Outcome::Ok,
        switch,
    }
}

/// What [`to_input`] reads about the chat.
struct Where<'a> {
    agent: &'a Agent,
    running: bool,
    facts: &'a Facts,
    color: bool,
}

/// Renders what needs rendering of `msg` and turns it into the machine's
/// input (`None`: nothing for the machine).
fn to_input(
    msg: Ui,
    r: &mut Renderer,
    out: &mut dyn Write,
    errors: &mut PendingErrors,
    titler: &mut Titler,
    at: &Where<'_>,
) -> Option<crate::repl::Input<ApprovalRequestId>> {
    use crate::repl::Input;
    Some(match msg {
        Ui::Event(AgentEvent::Event(ev)) => {
            let _ = r.event(out, &ev);
            if let EventData::TurnEnd(_) = ev.data() {
                for e in errors.after_turn(&ev) {
                    let _ = r.notice(out, &format!("error: {e}"));
                }
                titler.turn_ended(at.agent);
            }
            if let EventData::StepStart(_) | EventData::LlmRetry(_) = ev.data() {
                Input::Waiting
            } else if first_output(&ev) {
                Input::Output
            } else {
                return None;
            }
        }
        Ui::Event(AgentEvent::Status(status)) => {
            Input::Running(!matches!(status, AgentStatus::Idle))
        }
        Ui::Event(AgentEvent::ApprovalRequested {
            id,
            tool,
            arguments,
            ..
        }) => {
            let _ = r.clear_status(out);
            let _ = r.end_line(out);
            if let Some(diff) = crate::diff::for_call(&tool, &arguments, &at.facts.cwd, at.color) {
                // tty: diff::unified sanitises every line; the colours are ours.
                let _ = write!(out, "{diff}");
            }
            // tty: approval_prompt() shows every value through sanitize::approval_value.
            let _ = write!(out, "{}", crate::render::approval_prompt(&tool, &arguments));
            let _ = out.flush();
            Input::Approval(id)
        }
        Ui::Event(AgentEvent::Asked {
            id,
            plugin,
            request,
        }) if plugin == crate::interact::PLUGIN => {
            let _ = r.clear_status(out);
            let _ = r.end_line(out);
            Input::Question(id, request)
        }
        Ui::Event(AgentEvent::Asked { id, .. }) => {
            // No front end for this plugin's asks: withdraw it.
            at.agent.answer(id, dsh_std::Reply::Cancelled);
            return None;
        }
        Ui::Event(AgentEvent::Error(e)) => {
            if at.running {
                errors.push(e);
            } else {
                let _ = r.notice(out, &format!("error: {e}"));
            }
            return None;
        }
        Ui::Event(_) | Ui::Of(..) => return None,
        Ui::Line(line) => Input::Line(line),
        Ui::Eof => Input::Eof,
        Ui::Interrupt => Input::Interrupt,
        Ui::Terminate => Input::Terminate,
    })
}

fn prompt(out: &mut dyn Write, running: bool) {
    if !running {
        let _ = write!(out, "> ");
        let _ = out.flush();
    }
}
