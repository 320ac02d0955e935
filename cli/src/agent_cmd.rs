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
    if let Ok(size) = rustix::termios::tcgetwinsize(io::stdout()) {
        if size.ws_col > 0 {
            return usize::from(size.ws_col);
        }
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
    /// The agent's subagents: attach the agent so that its background
    /// children can report back (a REPL; `run` ends after one turn).
    pub delegation: Arc<dsh_subagents::std_runner::Delegation>,
}

fn env_lookup(name: &str) -> Option<String> {
    crate::secrets::lookup(name)
}

/// Resolves provider and store and builds the agent configuration.
pub fn setup(args: &AgentArgs, interactive: bool, approve_all: bool) -> Result<Setup, String> {
    let file = crate::config_file::load(&env_lookup)?;
    let provider = crate::provider::resolve_with(&args.provider, &file, &env_lookup)?;
    let cwd = match &args.cwd {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| format!("dsh: no current directory: {e}"))?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .map_err(|e| format!("dsh: workspace {}: {e}", cwd.display()))?;
    let prompt = args.prompt_settings(&file)?;
    let store = args.store.open()?;
    let bash = args
        .tools
        .over(&file.tools)
        .bash_config(&provider.api_key_env);
    crate::tool_args::warn_unenforced(&bash);
    let max_retry_wait_ms = provider.client.max_retry_wait_ms();
    let tracing = crate::otel::tracing(&args.otel, &file)?;
    // MCP servers start once; subagents share their connections.
    let mcp_servers = crate::mcp::servers(&file, &args.mcp)?;
    let mcp = crate::mcp::start(&mcp_servers, &cwd, bash.env.clone());
    let mcp_reported = std::sync::atomic::AtomicBool::new(false);
    // The agent, and each subagent it starts, are built alike.
    let build = move || {
        let mut config =
            crate::shell::agent_config(&provider, cwd.clone(), interactive, approve_all, &prompt)?;
        config.tools = dsh_tools::ToolSet::standard(bash.clone());
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
        if let Some(m) = &mcp {
            let first = !mcp_reported.swap(true, std::sync::atomic::Ordering::Relaxed);
            crate::mcp::install(m, &mut config, first);
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

fn spawn_stdin(tx: Sender<Ui>) {
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
    let events = agent.events().unwrap_or_default();
    Titler::new(provider, call, &events, enabled)
}

/// `dsh run PROMPT`.
pub fn run(args: RunArgs) -> Outcome {
    let setup = match setup(&args.agent, false, args.yes) {
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
    let result = drive_one_turn(&agent, &args.prompt, setup.render, args.json, args.yes);
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
    if let Some(file) = &args.record {
        if let Err(e) = record(setup.store.as_ref(), &id, file) {
            eprintln_safe!("dsh run: cannot record to {}: {e}", file.display());
            return Outcome::CheckFailed;
        }
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

/// Sends `prompt`, renders (or prints as JSON) until the turn ends; answers
/// approvals with `approve_all` (allow) or deny. Ctrl-C cancels the turn.
pub fn drive_one_turn(
    agent: &Agent,
    prompt: &str,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    let (tx, rx) = mpsc::channel();
    spawn_forwarder(agent, tx.clone());
    install_ctrlc(tx);
    let mut out = io::stdout().lock();
    agent.send(prompt).map_err(|e| e.to_string())?;
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
            Ui::Line(_) | Ui::Eof => {}
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
    let setup = match setup(&args.agent, true, false) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let provider = setup.config.provider.clone();
    let call = setup.config.call_config.clone();
    let agent = match &args.resume {
        Some(id) => Agent::resume(
            setup.config,
            setup.store.clone(),
            &SessionId::new(id.clone()),
        ),
        None => Agent::create(setup.config, setup.store.clone(), new_session_id(now_ms())),
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
    let titler = titler_for(provider, call, &agent, setup.titles);
    let outcome = repl(
        agent,
        setup.store,
        &args.agent.store,
        setup.render,
        args.resume.is_some(),
        titler,
    );
    // Background subagents end with their parent (cause `parent`).
    setup.delegation.shutdown(SUBAGENT_SHUTDOWN);
    outcome
}

/// How long `dsh chat` and `dsh fork` wait for background subagents to
/// stop and persist at exit.
const SUBAGENT_SHUTDOWN: Duration = Duration::from_secs(3);

/// `dsh fork ID [--at SEQ]`: forks the stored session and chats on the fork.
pub fn fork(args: ForkArgs) -> Outcome {
    let setup = match setup(&args.agent, true, false) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let parent = SessionId::new(args.id.clone());
    let at = match args.at {
        Some(at) => at,
        None => match last_completed_turn(&*setup.store, &parent) {
            Ok(at) => at,
            Err(e) => {
                eprintln_safe!("dsh fork: {e}");
                return Outcome::BadInput;
            }
        },
    };
    let new_id = new_session_id(now_ms());
    let provider = setup.config.provider.clone();
    let call = setup.config.call_config.clone();
    let agent = match Agent::fork(
        setup.config,
        setup.store.clone(),
        &parent,
        Some(at),
        new_id.clone(),
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln_safe!("dsh fork: {e}");
            return Outcome::BadInput;
        }
    };
    setup
        .delegation
        .attach(agent.session_id().clone(), agent.mailbox());
    eprintln_safe!("forked {} → {}", args.id, new_id.as_str());
    let titler = titler_for(provider, call, &agent, setup.titles);
    let outcome = repl(
        agent,
        setup.store,
        &args.agent.store,
        setup.render,
        true,
        titler,
    );
    setup.delegation.shutdown(SUBAGENT_SHUTDOWN);
    outcome
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

const HELP: &str = "commands: /followup (lines typed during a turn queue as follow-ups), \
/steer (they steer the running turn; the default), /followup TEXT, /cancel, \
/compact (summarise the older history now), /mcp:SERVER:PROMPT key=value (an MCP prompt), /quit; \
Ctrl-C cancels a turn, Ctrl-C twice or Ctrl-D quits";

/// How long `/compact` waits for the summary.
const COMPACT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// The interactive loop.
fn repl(
    agent: Agent,
    store: Arc<dyn SessionStore>,
    store_args: &StoreArgs,
    render: RenderOptions,
    resumed: bool,
    mut titler: Titler,
) -> Outcome {
    let (tx, rx): (Sender<Ui>, Receiver<Ui>) = mpsc::channel();
    spawn_forwarder(&agent, tx.clone());
    spawn_stdin(tx.clone());
    install_ctrlc(tx);
    let mut out = io::stdout().lock();
    let mut r = Renderer::new(render);
    let id = agent.session_id().clone();
    let _ = writeln_safe!(
        out,
        "dsh chat: session {}{} (/help for commands)",
        id.as_str(),
        if resumed { " (resumed)" } else { "" }
    );
    if resumed && let Ok(events) = agent.events() {
        for line in crate::render::recap(&events, 4, render.width) {
            let _ = r.notice(&mut out, &line);
        }
        // The surface so far, for the token estimate (issue 32).
        for e in &events {
            r.observe(e);
        }
    }
    let spinner = io::stdout().is_terminal();
    let mut running = false;
    let mut waiting = false;
    let mut steer = true;
    let mut armed = false;
    // Piped input: at its end, let the running turn finish, then exit.
    let mut quit_when_idle = false;
    let mut approvals: VecDeque<ApprovalRequestId> = VecDeque::new();
    let mut errors = PendingErrors::default();
    // Piped input is a script of what the user would type, in order: a
    // line that arrives while a turn runs waits here and answers the next
    // approval question, or becomes the next prompt when the turn ends. (On
    // a terminal a line typed during a turn steers it, and only a line typed
    // after an approval question answers it.)
    let piped = !io::stdin().is_terminal();
    let mut held: VecDeque<String> = VecDeque::new();
    let mut input_ended = false;
    prompt(&mut out, running);
    loop {
        let _ = titler.poll(&agent, Duration::ZERO);
        let next_held = if !approvals.is_empty() || !running {
            held.pop_front()
        } else {
            None
        };
        let received = match next_held {
            Some(line) => Ok(Ui::Line(line)),
            None => rx.recv_timeout(Duration::from_millis(120)),
        };
        let msg = match received {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if spinner && waiting && approvals.is_empty() {
                    let _ = r.tick(&mut out);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Ui::Event(AgentEvent::Event(ev)) => {
                if first_output(&ev) {
                    waiting = false;
                }
                if let EventData::StepStart(_) | EventData::LlmRetry(_) = ev.data() {
                    waiting = true;
                }
                let _ = r.event(&mut out, &ev);
                if let EventData::TurnEnd(_) = ev.data() {
                    for e in errors.after_turn(&ev) {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                    titler.turn_ended(&agent);
                }
            }
            Ui::Event(AgentEvent::Status(status)) => {
                let now_running = !matches!(status, AgentStatus::Idle);
                if running && !now_running && quit_when_idle && held.is_empty() {
                    break;
                }
                if running && !now_running {
                    waiting = false;
                    for e in errors.take() {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                    let _ = r.clear_status(&mut out);
                    prompt(&mut out, false);
                }
                if now_running {
                    armed = false;
                }
                running = now_running;
            }
            Ui::Event(AgentEvent::ApprovalRequested {
                id,
                tool,
                arguments,
                ..
            }) => {
                let _ = r.clear_status(&mut out);
                let _ = r.end_line(&mut out);
                // tty: approval_prompt() shows every value through sanitize::approval_value.
                let _ = write!(out, "{}", crate::render::approval_prompt(&tool, &arguments));
                let _ = out.flush();
                if input_ended && held.is_empty() {
                    // Nobody is left to answer: the call is denied.
                    let _ = writeln!(out);
                    let _ = r.notice(&mut out, "(input ended: denied)");
                    agent.answer_approval(id, dsh_std::ApprovalDecision::Deny);
                    continue;
                }
                approvals.push_back(id);
            }
            Ui::Event(AgentEvent::Error(e)) => {
                if running {
                    errors.push(e);
                } else {
                    let _ = r.notice(&mut out, &format!("error: {e}"));
                }
            }
            Ui::Event(_) => {}
            Ui::Line(line) => {
                armed = false;
                if piped && running && approvals.is_empty() {
                    held.push_back(line);
                    continue;
                }
                if let Some(req) = approvals.pop_front() {
                    if piped {
                        // Show the scripted answer as if it had been typed.
                        let _ = writeln!(out, "{}", crate::sanitize::terminal(line.trim()));
                    }
                    let answer = line.trim().to_ascii_lowercase();
                    let decision = match answer.as_str() {
                        "y" | "yes" => dsh_std::ApprovalDecision::Allow,
                        "a" | "always" => dsh_std::ApprovalDecision::AllowAlways,
                        _ => dsh_std::ApprovalDecision::Deny,
                    };
                    agent.answer_approval(req, decision);
                    waiting = true;
                    continue;
                }
                let text = line.trim();
                match text {
                    "" => {
                        if !running {
                            prompt(&mut out, running);
                        }
                    }
                    "/quit" | "/exit" => break,
                    "/help" => {
                        let _ = r.notice(&mut out, HELP);
                        if let Some(h) = crate::mcp::prompt_help() {
                            let _ = r.notice(&mut out, &h);
                        }
                        if !running {
                            prompt(&mut out, running);
                        }
                    }
                    "/followup" => {
                        steer = false;
                        let _ = r.notice(
                            &mut out,
                            "lines typed during a turn now queue as follow-ups",
                        );
                    }
                    "/steer" => {
                        steer = true;
                        let _ = r.notice(&mut out, "lines typed during a turn now steer it");
                    }
                    "/cancel" => agent.cancel(CancelCause::User, false),
                    "/compact" if running => {
                        let _ = r.notice(&mut out, "(/compact runs between turns)");
                    }
                    "/compact" => {
                        let _ = r.notice(&mut out, "compacting…");
                        let notice = match agent.compact_now(Some(COMPACT_TIMEOUT)) {
                            Ok(v) if v["compacted"] == true => {
                                "compacted: the older history is now a summary".to_string()
                            }
                            Ok(v) => format!(
                                "not compacted: {}",
                                v["reason"].as_str().unwrap_or("no compaction plugin")
                            ),
                            Err(e) => format!("error: {e}"),
                        };
                        let _ = r.notice(&mut out, &notice);
                        prompt(&mut out, running);
                    }
                    _ => {
                        // `/mcp:SERVER:PROMPT key=value ...`: an MCP prompt.
                        let expanded = match crate::mcp::expand_prompt(text) {
                            Some(Ok(t)) => t,
                            Some(Err(e)) => {
                                let _ = r.notice(&mut out, &format!("error: {e}"));
                                if !running {
                                    prompt(&mut out, running);
                                }
                                continue;
                            }
                            None => text.to_string(),
                        };
                        let text = expanded.as_str();
                        let (followup, body) = match text.strip_prefix("/followup ") {
                            Some(rest) => (true, rest),
                            None => (!steer, text),
                        };
                        let result = if !running {
                            waiting = true;
                            running = true;
                            if followup {
                                agent.followup(body)
                            } else {
                                agent.send(body)
                            }
                        } else if followup {
                            let _ = r.notice(&mut out, "(queued as a follow-up)");
                            agent.followup(body)
                        } else {
                            let _ = r.notice(&mut out, "(steering the running turn)");
                            agent.steer(body)
                        };
                        if let Err(e) = result {
                            let _ = r.notice(&mut out, &format!("error: {e}"));
                        }
                    }
                }
            }
            Ui::Interrupt => {
                if running && !armed {
                    armed = true;
                    approvals.clear();
                    let _ = r.notice(&mut out, "cancelling… (Ctrl-C again or Ctrl-D to quit)");
                    agent.cancel(CancelCause::User, false);
                } else if armed {
                    break;
                } else {
                    armed = true;
                    let _ = r.notice(&mut out, "(Ctrl-C again or Ctrl-D to quit)");
                    prompt(&mut out, running);
                }
            }
            Ui::Eof => {
                if running && piped {
                    quit_when_idle = true;
                    input_ended = true;
                    if held.is_empty() {
                        // Questions already asked get no answer: deny them,
                        // so the turn can end.
                        for req in approvals.drain(..) {
                            let _ = writeln!(out);
                            let _ = r.notice(&mut out, "(input ended: denied)");
                            agent.answer_approval(req, dsh_std::ApprovalDecision::Deny);
                        }
                    }
                } else {
                    break;
                }
            }
            // Like Ctrl-C twice: the running turn is cancelled below and
            // the session is saved.
            Ui::Terminate => break,
        }
    }
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
        return Outcome::CheckFailed;
    }
    let _ = writeln_safe!(stdout, "session {} saved: {location}", id.as_str());
    let _ = writeln_safe!(stdout, "resume with: dsh chat --resume {}", id.as_str());
    Outcome::Ok
}

fn prompt(out: &mut dyn Write, running: bool) {
    if !running {
        let _ = write!(out, "> ");
        let _ = out.flush();
    }
}
