//! The ACP server loop: one thread owns every session; the stdin reader,
//! the agents' event forwarders and the client's answers reach it as
//! messages.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    self as acp, AgentCapabilities, CancelNotification, ClientCapabilities, ClientNotification,
    ClientRequest, ErrorCode, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, LoadSessionResponse, NewSessionRequest, NewSessionResponse,
    PermissionOption, PermissionOptionKind, PromptCapabilities, PromptRequest, PromptResponse,
    RequestId, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SessionModeState, SessionNotification, SessionUpdate, SetSessionModeRequest,
    SetSessionModeResponse, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol_schema::v1::{
    AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, ContentChunk,
    CurrentModeUpdate, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, ToolCallContent,
    ToolKind, UnstructuredCommandInput,
};
use dsh_core::SessionId;
use dsh_core::session::EventData;
use dsh_std::{
    Agent, AgentEvent, AgentStatus, ApprovalDecision, ApprovalMode, ApprovalPolicy,
    ApprovalRequestId, CancelCause, ShellError,
};
use dsh_store::{SessionStore, StoreError};
use dsh_tools::{BashTool, EditTool, Files, ReadTool, Runner, WriteTool};
use serde_json::Value;

use super::files::ClientFiles;
use super::map::{self, Calls, Mode};
use super::rpc::{CallError, Incoming, Peer, read_loop, rpc_error};
use super::terminal::ClientTerminal;
use super::wire::{decode_notification, decode_request, invalid_params, prompt_text, supported};
use crate::provider::ProviderArgs;
use crate::sanitize::eprintln_safe;
use crate::store::{new_session_id, now_ms};

/// Option ids of a permission request.
const ALLOW_ONCE: &str = "allow_once";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT_ONCE: &str = "reject_once";

/// Most messages handled after the loop ends (what was already queued).
const SHUTDOWN_DRAIN: usize = 10_000;

/// What reaches the server loop.
enum Msg {
    Rpc(Incoming),
    Agent(String, AgentEvent),
    Permission {
        session: String,
        call_id: String,
        tool: String,
        approval: ApprovalRequestId,
        answer: Result<Value, CallError>,
    },
    /// The client answered a question (`ask_user_question`, a plan
    /// review) asked as a permission request.
    Question {
        session: String,
        answer: Result<Value, CallError>,
    },
    /// SIGTERM, SIGHUP or SIGINT: end as if the input had closed.
    Terminate,
}

/// The session modes offered: how much runs without asking. The CLI's
/// policy (`ask` for every tool but `read`) is the floor; a mode answers
/// the agent's approval requests itself for the tools it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionMode {
    /// Ask before every tool the policy asks about.
    Ask,
    /// Edits (`write`, `edit`) and plan updates (`todo_write`) run without
    /// asking; commands still ask.
    AcceptEdits,
    /// Every tool runs without asking.
    Auto,
    /// Plan mode: read and plan; writes and commands are
    /// refused until the user approves a plan (`exit_plan_mode`).
    Plan,
}

impl SessionMode {
    const ALL: [SessionMode; 4] = [
        SessionMode::Ask,
        SessionMode::AcceptEdits,
        SessionMode::Auto,
        SessionMode::Plan,
    ];

    fn id(self) -> &'static str {
        match self {
            SessionMode::Ask => "ask",
            SessionMode::AcceptEdits => "accept-edits",
            SessionMode::Auto => "auto",
            SessionMode::Plan => "plan",
        }
    }

    fn name(self) -> &'static str {
        match self {
            SessionMode::Ask => "Ask",
            SessionMode::AcceptEdits => "Accept edits",
            SessionMode::Auto => "Auto",
            SessionMode::Plan => "Plan",
        }
    }

    fn description(self) -> &'static str {
        match self {
            SessionMode::Ask => "Ask before running tools other than read",
            SessionMode::AcceptEdits => "Edit files without asking; ask before commands",
            SessionMode::Auto => "Run every tool without asking",
            SessionMode::Plan => {
                "Explore and plan; nothing is written or run until you approve a plan"
            }
        }
    }

    fn parse(id: &str) -> Option<SessionMode> {
        SessionMode::ALL.into_iter().find(|m| m.id() == id)
    }

    /// Whether this mode allows `tool` without asking the client.
    fn allows(self, tool: &str) -> bool {
        match self {
            SessionMode::Ask | SessionMode::Plan => false,
            SessionMode::AcceptEdits => matches!(tool, "write" | "edit" | "todo_write"),
            SessionMode::Auto => true,
        }
    }

    /// The modes and the current one, for `session/new` and `session/load`.
    fn state(self) -> SessionModeState {
        SessionModeState::new(
            self.id(),
            SessionMode::ALL
                .into_iter()
                .map(|m| acp::SessionMode::new(m.id(), m.name()).description(m.description()))
                .collect(),
        )
    }
}

/// One open session.
struct Live {
    agent: Agent,
    cwd: PathBuf,
    policy: ApprovalPolicy,
    calls: Calls,
    /// The running `session/prompt` request.
    prompt: Option<RequestId>,
    /// `session/cancel` arrived for the running prompt.
    cancel_requested: bool,
    /// The running prompt's answer, held from its `turn/end` until the
    /// agent is idle (the turn's end is written by then).
    ended: Option<Result<PromptResponse, acp::Error>>,
    /// The session mode (not stored: a loaded session starts in `ask`,
    /// or `plan` when its log says plan mode is on).
    mode: SessionMode,
    /// What `/status` shows.
    facts: crate::agent_cmd::Facts,
    /// The last `exit_plan_mode` or `ask_user_question` call (the tool
    /// call a question's permission request names).
    ask_call: Option<String>,
    /// The question being asked through permission requests.
    question: Option<Questioning>,
}

/// A question ask answered one permission request per question.
struct Questioning {
    ask: ApprovalRequestId,
    call_id: String,
    questions: Vec<Value>,
    answers: Vec<Value>,
}

/// How `dsh acp` was started.
pub struct Options {
    /// The store folder: spill files and image attachments go beneath it.
    pub data_dir: Option<PathBuf>,
    /// The model endpoint.
    pub provider: ProviderArgs,
    /// Run `bash` in the client's terminal when it offers one.
    pub client_terminal: bool,
    /// Trace export.
    pub otel: crate::otel::OtelArgs,
}

struct Server {
    peer: Arc<Peer>,
    tx: Sender<Msg>,
    store: Arc<dyn SessionStore>,
    options: Options,
    initialized: bool,
    client: ClientCapabilities,
    sessions: HashMap<String, Live>,
    /// MCP prompts to offer once the session/new or session/load response
    /// is out (the client knows the session id then).
    offers: Vec<(String, dsh_mcp::Mcp)>,
}

/// Serves until the input ends, the output fails or a termination signal
/// arrives (SIGTERM, SIGHUP, SIGINT); then disposes every agent (a running
/// turn closes as aborted, its tools' processes and background jobs are
/// stopped, the logs are flushed).
pub fn serve(
    peer: Arc<Peer>,
    input: impl Read + Send + 'static,
    store: Arc<dyn SessionStore>,
    options: Options,
) {
    let (tx, rx) = mpsc::channel();
    let reader_tx = tx.clone();
    let reader_peer = peer.clone();
    let spawned = thread::Builder::new()
        .name("dsh-acp-stdin".into())
        .spawn(move || {
            let input: Box<dyn BufRead> = Box::new(BufReader::with_capacity(1 << 16, input));
            read_loop(&reader_peer, input, |m| reader_tx.send(Msg::Rpc(m)).is_ok());
        });
    if let Err(e) = spawned {
        eprintln_safe!("dsh acp: cannot start the reader thread: {e}");
        return;
    }
    let signal_tx = tx.clone();
    let signal_peer = peer.clone();
    crate::signals::forward(crate::signals::Set::TermHupInt, move || {
        // A write waiting for a client that stopped reading gives up
        // within the exit grace, so the loop sees the message.
        signal_peer.begin_exit();
        signal_tx.send(Msg::Terminate).is_ok()
    });
    let mut server = Server {
        peer: peer.clone(),
        tx,
        store,
        options,
        initialized: false,
        client: ClientCapabilities::default(),
        sessions: HashMap::new(),
        offers: Vec::new(),
    };
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Rpc(Incoming::Closed) | Msg::Terminate => break,
            Msg::Rpc(Incoming::Invalid { id, error }) => peer.respond::<()>(&id, Err(error)),
            Msg::Rpc(Incoming::Request { id, method, params }) => {
                server.request(id, &method, &params)
            }
            Msg::Rpc(Incoming::Notification { method, params }) => {
                server.notification(&method, &params)
            }
            Msg::Agent(session, event) => server.agent_event(&session, event),
            Msg::Permission {
                session,
                call_id,
                tool,
                approval,
                answer,
            } => server.permission_answer(&session, call_id, &tool, approval, answer),
            Msg::Question { session, answer } => server.question_answer(&session, answer),
        }
        if peer.is_closed() {
            break;
        }
    }
    server.shut_down(&rx);
}

fn internal(message: impl Into<String>) -> acp::Error {
    acp::Error::internal_error().data(Value::String(message.into()))
}

impl Server {
    /// Ends the server: what the agents reported before the end is still
    /// forwarded (a turn that ended answers its prompt); requests read but
    /// not handled (a signal came first) get an error; every agent is
    /// disposed (a running turn closes as aborted) and its running prompt
    /// is answered `cancelled`; then the writer gets the exit grace to send
    /// what is queued.
    fn shut_down(&mut self, rx: &mpsc::Receiver<Msg>) {
        // Bounded: a running agent may still be adding events.
        for msg in rx.try_iter().take(SHUTDOWN_DRAIN) {
            match msg {
                Msg::Rpc(Incoming::Request { id, .. }) => self
                    .peer
                    .respond::<()>(&id, Err(internal("dsh acp is shutting down"))),
                Msg::Agent(session, event) => self.agent_event(&session, event),
                _ => {}
            }
        }
        for (_, live) in self.sessions.drain() {
            live.agent.dispose();
            if let Some(id) = live.prompt {
                self.peer
                    .respond(&id, Ok(PromptResponse::new(acp::StopReason::Cancelled)));
            }
        }
        let unsent = self.peer.finish();
        if unsent > 0 {
            // tty: our own number.
            eprintln!("dsh acp: {unsent} messages were not sent (the client stopped reading)");
        }
    }

    fn request(&mut self, id: RequestId, method: &str, params: &Value) {
        let not_found = || {
            rpc_error(
                ErrorCode::MethodNotFound,
                format!("Method not found: {method}"),
            )
        };
        if !supported(method) {
            return self.peer.respond::<()>(&id, Err(not_found()));
        }
        if !self.initialized && method != "initialize" {
            return self.peer.respond::<()>(
                &id,
                Err(rpc_error(
                    ErrorCode::InvalidRequest,
                    format!("Invalid Request: call `initialize` before `{method}`"),
                )),
            );
        }
        let request = match decode_request(method, params) {
            Ok(r) => r,
            Err(e) => return self.peer.respond::<()>(&id, Err(e)),
        };
        match request {
            ClientRequest::InitializeRequest(r) => self.initialize(&id, r),
            ClientRequest::NewSessionRequest(r) => {
                let result = self.new_session(r);
                let session = result.as_ref().ok().map(|r| r.session_id.0.to_string());
                self.peer.respond(&id, result);
                // The commands, once the client knows the session.
                if let Some(s) = session {
                    self.commands_update(&s);
                }
            }
            ClientRequest::LoadSessionRequest(r) => {
                let session = r.session_id.0.to_string();
                let result = self.load_session(r);
                let loaded = result.is_ok();
                self.peer.respond(&id, result);
                if loaded {
                    self.commands_update(&session);
                }
            }
            ClientRequest::PromptRequest(r) => self.prompt(id, r),
            ClientRequest::SetSessionModeRequest(r) => {
                let result = self.set_mode(r);
                self.peer.respond(&id, result)
            }
            _ => self.peer.respond::<()>(
                &id,
                Err(rpc_error(
                    ErrorCode::MethodNotFound,
                    format!("Method not found: {method}"),
                )),
            ),
        }
    }

    fn initialize(&mut self, id: &RequestId, r: InitializeRequest) {
        self.initialized = true;
        self.client = r.client_capabilities;
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            // `mcpServers` of session/new and session/load: stdio (always)
            // and streamable HTTP.
            .mcp_capabilities(acp::McpCapabilities::new().http(true))
            .prompt_capabilities(
                PromptCapabilities::new()
                    .embedded_context(true)
                    .image(self.image_store().is_some()),
            );
        let response = InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .agent_info(
                Implementation::new("dsh", env!("CARGO_PKG_VERSION"))
                    .title("dsh (DeepSeek Harness)"),
            );
        self.peer.respond(id, Ok(response));
    }

    /// The agent configuration for `session` in `cwd`: the CLI's, with the
    /// file tools reading and writing through the client when it offers
    /// both `fs` capabilities, and `bash` in the client's terminal when it
    /// offers one and `--client-terminal` was given.
    ///
    /// The agent can delegate (loop.md SA-1 to SA-3): its subagents are
    /// built the same way (their file and terminal tools go through the
    /// client under the parent's session id) and stored beside it.
    fn config(
        &self,
        cwd: &std::path::Path,
        session: &str,
        mcp_servers: &[acp::McpServer],
    ) -> Result<
        (
            dsh_std::AgentConfig,
            PathBuf,
            Arc<dsh_std::subagents::Delegation>,
            Option<dsh_mcp::Mcp>,
        ),
        acp::Error,
    > {
        if !cwd.is_absolute() {
            return Err(invalid_params("cwd must be an absolute path"));
        }
        let cwd = std::fs::canonicalize(cwd)
            .map_err(|e| invalid_params(format!("cwd {}: {e}", cwd.display())))?;
        let env = |name: &str| crate::secrets::lookup(name);
        let file = crate::config_file::load(&env).map_err(internal)?;
        let mut provider =
            crate::provider::resolve_with(&self.options.provider, &file, &env).map_err(internal)?;
        let data_dir = self.options.data_dir.clone();
        provider.attachments = data_dir.as_ref().map(|d| d.join("attachments"));
        // The config file's `system` / `append_system` apply here too.
        let prompt = crate::agent_cmd::AgentArgs::default()
            .prompt_settings(&file)
            .map_err(internal)?;
        let client_fs = self.client.fs.read_text_file && self.client.fs.write_text_file;
        let client_terminal = self.options.client_terminal && self.client.terminal;
        let tracing = crate::otel::tracing(&self.options.otel, &file).map_err(internal)?;
        // The config file's MCP servers, then the client's.
        let mut servers = file.mcp_servers.clone();
        servers.extend(crate::mcp::from_acp(mcp_servers));
        let mcp = crate::mcp::start(&servers, &cwd, crate::mcp::tool_env_policy(&provider));
        let mcp_reported = std::sync::atomic::AtomicBool::new(false);
        let session_mcp = mcp.clone();
        let peer = self.peer.clone();
        let session = session.to_string();
        let root = cwd.clone();
        // The user's hooks and skills: no terminal to ask on,
        // so an untrusted folder's own hooks do not run.
        let extensions = crate::extensions::load_for(
            &cwd,
            &file,
            dsh_tools::EnvPolicy::default()
                .with_secret(provider.api_key_env.clone())
                .with_secret(crate::store::STORE_URL_ENV),
            &provider.model,
            crate::extensions::Ask::Never,
        );
        let build = move || {
            let mut config =
                crate::shell::agent_config(&provider, root.clone(), true, false, &prompt)?;
            client_tools(&mut config, &peer, &session, client_fs, client_terminal);
            // Images, web tools, spill (last).
            crate::shell::add_image_tools(&mut config.tools, &provider);
            crate::shell::add_web(
                &mut config,
                &provider,
                &crate::tool_args::ToolArgs::default(),
            );
            if let Some(t) = &tracing {
                t.install(&mut config);
            }
            extensions.install(&mut config);
            crate::agent_cmd::interaction_plugins(&mut config, true, false);
            if let Some(m) = &mcp {
                let first = !mcp_reported.swap(true, std::sync::atomic::Ordering::Relaxed);
                crate::mcp::install(m, &mut config, first);
            }
            if let Some(d) = &data_dir {
                crate::shell::add_spill(
                    &mut config,
                    &d.join("spill"),
                    dsh_tools::spill::DEFAULT_MAX_INLINE_BYTES,
                );
            }
            Ok(config)
        };
        let (config, delegation) =
            crate::shell::delegating(self.store.clone(), build).map_err(internal)?;
        Ok((config, cwd, delegation, session_mcp))
    }

    /// Offers the MCP servers' prompts as commands (`available_commands`):
    /// `/mcp:SERVER:PROMPT key=value ...` in a prompt expands to the
    /// prompt's text.
    fn offer_mcp_prompts(&mut self, session: &str, mcp: Option<&dsh_mcp::Mcp>) {
        if let Some(m) = mcp {
            self.offers.push((session.to_string(), m.clone()));
        }
    }

    /// The MCP prompts of `session`'s servers as commands.
    fn mcp_commands(&self, session: &str) -> Vec<acp::AvailableCommand> {
        let mut out = Vec::new();
        for (s, mcp) in &self.offers {
            if s == session {
                out.extend(Self::prompt_commands(mcp));
            }
        }
        out
    }

    fn prompt_commands(mcp: &dsh_mcp::Mcp) -> Vec<acp::AvailableCommand> {
        mcp.prompts()
            .into_iter()
            .map(|p| {
                let hint: Vec<String> = p.arguments.iter().map(|a| format!("{a}=…")).collect();
                let mut c = acp::AvailableCommand::new(
                    format!("mcp:{}:{}", p.server, p.name),
                    if p.description.is_empty() {
                        format!("MCP prompt {} of {}", p.name, p.server)
                    } else {
                        p.description.clone()
                    },
                );
                if !hint.is_empty() {
                    c = c.input(acp::AvailableCommandInput::Unstructured(
                        acp::UnstructuredCommandInput::new(hint.join(" ")),
                    ));
                }
                c
            })
            .collect()
    }

    /// A prompt's content in order: each run of text blocks
    /// joined as [`prompt_text`] joins them, each image stored in `store`
    /// as an image block (the reference keeps the order too); images are
    /// refused when the model takes none.
    fn prompt_content(
        blocks: &[acp::ContentBlock],
        store: Option<&dsh_tools::Attachments>,
    ) -> Result<Vec<dsh_core::ContentBlock>, acp::Error> {
        use base64::Engine as _;
        let mut content = Vec::new();
        let mut run: Vec<acp::ContentBlock> = Vec::new();
        let mut images = 0usize;
        for b in blocks {
            let acp::ContentBlock::Image(i) = b else {
                run.push(b.clone());
                continue;
            };
            let Some(store) = store else {
                return Err(invalid_params("the model does not take images"));
            };
            let data = base64::engine::general_purpose::STANDARD
                .decode(i.data.as_bytes())
                .map_err(|e| invalid_params(format!("the image is not base64: {e}")))?;
            let attachment = store
                .save_image(&data, Some(i.mime_type.as_str()), None)
                .map_err(|e| invalid_params(format!("cannot take the image: {e}")))?;
            if !run.is_empty() {
                content.push(dsh_core::ContentBlock::text(prompt_text(&run)?));
                run.clear();
            }
            content.push(dsh_core::ContentBlock::Image { attachment });
            images += 1;
        }
        if !run.is_empty() || images == 0 {
            content.push(dsh_core::ContentBlock::text(prompt_text(&run)?));
        }
        Ok(content)
    }

    /// Starts forwarding `agent`'s events to the loop and keeps the
    /// session; fails (the agent is disposed) when no thread can start.
    fn register(
        &mut self,
        agent: Agent,
        cwd: PathBuf,
        policy: ApprovalPolicy,
        call: dsh_core::LlmCallConfig,
    ) -> Result<String, acp::Error> {
        let session = agent.session_id().as_str().to_string();
        let facts_cwd = cwd.clone();
        let events = agent.subscribe();
        let tx = self.tx.clone();
        let name = session.clone();
        thread::Builder::new()
            .name("dsh-acp-events".into())
            .spawn(move || {
                while let Ok(ev) = events.recv() {
                    if tx.send(Msg::Agent(name.clone(), ev)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| internal(format!("cannot start the event thread: {e}")))?;
        self.sessions.insert(
            session.clone(),
            Live {
                agent,
                cwd,
                policy,
                calls: Calls::default(),
                prompt: None,
                cancel_requested: false,
                ended: None,
                mode: SessionMode::Ask,
                facts: crate::agent_cmd::Facts {
                    call,
                    store: self.store.kind().to_string(),
                    sandbox: "the CLI's default".into(),
                    skills: crate::extensions::skill_commands(&facts_cwd),
                    cwd: facts_cwd,
                },
                ask_call: None,
                question: None,
            },
        );
        Ok(session)
    }

    /// Sends the command list (`available_commands_update`): the same
    /// registry `dsh chat` dispatches from.
    fn commands_update(&self, session: &str) {
        let list = crate::commands::Registry::standard()
            .list()
            .iter()
            .map(|c| {
                let mut a = AvailableCommand::new(c.name.clone(), c.description.clone());
                if let Some(h) = &c.hint {
                    a = a.input(AvailableCommandInput::Unstructured(
                        UnstructuredCommandInput::new(h.clone()),
                    ));
                }
                a
            })
            .chain(
                // The session's skills (`/NAME` loads one: the skills
                // plugin sees it in the prompt).
                self.sessions
                    .get(session)
                    .map(|live| crate::extensions::skill_commands(&live.cwd))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(name, description)| AvailableCommand::new(name, description)),
            )
            .chain(self.mcp_commands(session))
            .collect();
        notify(
            &self.peer,
            session,
            SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(list)),
        );
    }

    fn new_session(&mut self, r: NewSessionRequest) -> Result<NewSessionResponse, acp::Error> {
        let id = new_session_id(now_ms());
        let (config, cwd, delegation, mcp) = self.config(&r.cwd, id.as_str(), &r.mcp_servers)?;
        let policy = config.approval.clone();
        let call = config.call_config.clone();
        let agent = Agent::create(config, self.store.clone(), id)
            .map_err(|e| internal(format!("cannot start the agent: {e}")))?;
        delegation.attach(agent.session_id().clone(), agent.mailbox());
        let session = self.register(agent, cwd, policy, call)?;
        self.offer_mcp_prompts(&session, mcp.as_ref());
        Ok(NewSessionResponse::new(session).modes(SessionMode::Ask.state()))
    }

    fn load_session(&mut self, r: LoadSessionRequest) -> Result<LoadSessionResponse, acp::Error> {
        let session = r.session_id.0.to_string();
        if !self.sessions.contains_key(&session) {
            let (config, cwd, delegation, mcp) = self.config(&r.cwd, &session, &r.mcp_servers)?;
            let policy = config.approval.clone();
            let call = config.call_config.clone();
            let agent = Agent::resume(config, self.store.clone(), &SessionId::new(session.clone()))
                .map_err(|e| match e {
                    ShellError::Store(StoreError::NotFound { .. }) => {
                        acp::Error::session_not_found(session.clone())
                    }
                    e => internal(format!("cannot load session {session}: {e}")),
                })?;
            delegation.attach(agent.session_id().clone(), agent.mailbox());
            self.register(agent, cwd, policy, call)?;
            self.offer_mcp_prompts(&session, mcp.as_ref());
        }
        let Some(live) = self.sessions.get_mut(&session) else {
            return Err(acp::Error::session_not_found(session));
        };
        let events = live
            .agent
            .events()
            .map_err(|e| internal(format!("cannot read session {session}: {e}")))?;
        // The replay has its own call table; live calls keep theirs.
        let mut calls = Calls::default();
        for ev in &events {
            for update in map::updates(ev, Mode::Replay, &live.cwd, &mut calls, &|_| true) {
                notify(&self.peer, &session, update);
            }
            if let Some(active) = plan_mode(ev) {
                live.mode = if active {
                    SessionMode::Plan
                } else if live.mode == SessionMode::Plan {
                    SessionMode::Ask
                } else {
                    live.mode
                };
            }
        }
        Ok(LoadSessionResponse::new().modes(live.mode.state()))
    }

    /// The image store when the configured model takes images.
    fn image_store(&self) -> Option<dsh_tools::Attachments> {
        let env = |name: &str| crate::secrets::lookup(name);
        let file = crate::config_file::load(&env).ok()?;
        let mut provider =
            crate::provider::resolve_with(&self.options.provider, &file, &env).ok()?;
        provider.attachments = self
            .options
            .data_dir
            .as_ref()
            .map(|d| d.join("attachments"));
        crate::shell::image_store(&provider)
    }

    fn prompt(&mut self, id: RequestId, r: PromptRequest) {
        let store = self.image_store();
        let session = r.session_id.0.to_string();
        let Some(live) = self.sessions.get_mut(&session) else {
            return self
                .peer
                .respond::<()>(&id, Err(acp::Error::session_not_found(session)));
        };
        if live.prompt.is_some() {
            return self.peer.respond::<()>(
                &id,
                Err(rpc_error(
                    ErrorCode::InvalidRequest,
                    "Invalid Request: a prompt is already running in this session",
                )),
            );
        }
        let mut content = match Self::prompt_content(&r.prompt, store.as_ref()) {
            Ok(c) => c,
            Err(e) => return self.peer.respond::<()>(&id, Err(e)),
        };
        // A prompt of text only may be a slash command.
        let text = if r
            .prompt
            .iter()
            .any(|b| matches!(b, acp::ContentBlock::Image(_)))
        {
            String::new()
        } else {
            prompt_text(&r.prompt).unwrap_or_default()
        };
        let registry = crate::commands::Registry::standard();
        if let Some((name, args)) = crate::commands::parse(text.trim_start())
            && registry.get(name).is_some()
        {
            let mut host = crate::agent_cmd::AgentHost {
                agent: &live.agent,
                store: self.store.as_ref(),
                facts: &live.facts,
            };
            let mut ids = crate::commands::CommandIds::new(now_ms());
            let mut done = registry.execute(&mut host, &mut ids, name, args);
            if done.switch.is_some() {
                done = crate::commands::Done::error(
                    "switching sessions is the client's: use session/load",
                );
            }
            if name == "plan" && done.ok {
                // The mode changes now, before the prompt's answer (the
                // `plan/mode` event follows and finds it done).
                let now = if args.trim() == "off" {
                    if live.mode == SessionMode::Plan {
                        SessionMode::Ask
                    } else {
                        live.mode
                    }
                } else {
                    SessionMode::Plan
                };
                if now != live.mode {
                    live.mode = now;
                    notify(
                        &self.peer,
                        &session,
                        SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(now.id())),
                    );
                }
            }
            let shown = match (&done.text, done.ok) {
                (Some(t), true) => t.clone(),
                (Some(t), false) => format!("error: {t}"),
                (None, _) => String::new(),
            };
            if !shown.is_empty() {
                notify(
                    &self.peer,
                    &session,
                    SessionUpdate::AgentMessageChunk(ContentChunk::new(acp::ContentBlock::Text(
                        acp::TextContent::new(format!("{shown}\n")),
                    ))),
                );
            }
            match done.message {
                Some(message) => content = vec![dsh_core::ContentBlock::text(message)],
                None => {
                    return self
                        .peer
                        .respond(&id, Ok(PromptResponse::new(acp::StopReason::EndTurn)));
                }
            }
        }
        // `/mcp:SERVER:PROMPT key=value ...`: an MCP prompt.
        match crate::mcp::expand_prompt(text.trim()) {
            Some(Ok(t)) => content = vec![dsh_core::ContentBlock::text(t)],
            Some(Err(e)) => return self.peer.respond::<()>(&id, Err(invalid_params(e))),
            None => {}
        }
        match live.agent.send_content(content) {
            Ok(()) => {
                live.prompt = Some(id);
                live.cancel_requested = false;
            }
            Err(e) => self
                .peer
                .respond::<()>(&id, Err(internal(format!("cannot send the prompt: {e}")))),
        }
    }

    fn set_mode(&mut self, r: SetSessionModeRequest) -> Result<SetSessionModeResponse, acp::Error> {
        let session = r.session_id.0.to_string();
        let Some(live) = self.sessions.get_mut(&session) else {
            return Err(acp::Error::session_not_found(session));
        };
        let Some(mode) = SessionMode::parse(&r.mode_id.0) else {
            return Err(invalid_params(format!(
                "unknown mode {:?} (modes: ask, accept-edits, auto, plan)",
                r.mode_id.0
            )));
        };
        if (mode == SessionMode::Plan) != (live.mode == SessionMode::Plan) {
            if live.prompt.is_some() {
                return Err(invalid_params(
                    "plan mode is entered or left between prompts",
                ));
            }
            let args = if mode == SessionMode::Plan {
                ""
            } else {
                " off"
            };
            live.agent
                .command(
                    "plan",
                    serde_json::json!({"args": args}),
                    Some(COMMAND_TIMEOUT),
                )
                .map_err(|e| internal(format!("cannot switch plan mode: {e}")))?;
        }
        live.mode = mode;
        Ok(SetSessionModeResponse::new())
    }

    fn notification(&mut self, method: &str, params: &Value) {
        if !self.initialized {
            return;
        }
        match decode_notification(method, params) {
            Ok(ClientNotification::CancelNotification(CancelNotification {
                session_id, ..
            })) => {
                if let Some(live) = self.sessions.get_mut(session_id.0.as_ref())
                    && live.prompt.is_some()
                {
                    live.cancel_requested = true;
                    live.agent.cancel(CancelCause::User, false);
                }
            }
            Ok(_) => {}
            Err(e) => eprintln_safe!("dsh acp: ignored notification: {e}"),
        }
    }

    fn agent_event(&mut self, session: &str, event: AgentEvent) {
        let Some(live) = self.sessions.get_mut(session) else {
            return;
        };
        match event {
            AgentEvent::Event(ev) => {
                if let EventData::ToolCall(c) = ev.data()
                    && (c.name == crate::interact::EXIT_PLAN_MODE
                        || c.name == crate::interact::ASK_USER_QUESTION)
                {
                    live.ask_call = Some(c.call_id.0.to_string());
                }
                if let Some(active) = plan_mode(&ev) {
                    let now = if active {
                        SessionMode::Plan
                    } else if live.mode == SessionMode::Plan {
                        SessionMode::Ask
                    } else {
                        live.mode
                    };
                    if now != live.mode {
                        live.mode = now;
                        notify(
                            &self.peer,
                            session,
                            SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(now.id())),
                        );
                    }
                }
                let (policy, mode) = (&live.policy, live.mode);
                let asks =
                    |tool: &str| policy.mode_for(tool) == ApprovalMode::Ask && !mode.allows(tool);
                for update in map::updates(&ev, Mode::Live, &live.cwd, &mut live.calls, &asks) {
                    notify(&self.peer, session, update);
                }
                if let EventData::TurnEnd(end) = ev.data()
                    && live.prompt.is_some()
                    && live.ended.is_none()
                {
                    let result = map::stop_reason(&end.reason, live.cancel_requested)
                        .map(PromptResponse::new);
                    live.cancel_requested = false;
                    live.ended = Some(result);
                }
            }
            AgentEvent::Status(AgentStatus::Idle) => {
                if let Some(result) = live.ended.take()
                    && let Some(id) = live.prompt.take()
                {
                    // A turn whose log the store did not take is an error,
                    // whatever it ended with.
                    let result = match live.agent.store_error() {
                        Some(e) => Err(acp::Error::internal_error()
                            .data(serde_json::json!({"code": "FLUSH_FAILED", "message": e}))),
                        None => result,
                    };
                    self.peer.respond(&id, result);
                }
            }
            AgentEvent::ApprovalRequested { id, tool, .. } if live.mode.allows(&tool) => {
                // The mode answers; the call already shows in progress.
                live.agent.answer_approval(id, ApprovalDecision::Allow);
            }
            AgentEvent::ApprovalRequested {
                id,
                call_id,
                tool,
                arguments,
                ..
            } => {
                let args: Value = serde_json::from_str(&arguments).unwrap_or(Value::Null);
                let mut fields = map::call_fields(&tool, &args, &live.cwd);
                // A write or edit carries its change.
                if let Some((path, old, new)) = crate::diff::change(&tool, &arguments, &live.cwd) {
                    fields = fields.content(vec![ToolCallContent::Diff(
                        acp::Diff::new(live.cwd.join(path), new).old_text(old),
                    )]);
                }
                let request = RequestPermissionRequest::new(
                    session.to_string(),
                    ToolCallUpdate::new(call_id.clone(), fields),
                    vec![
                        PermissionOption::new(ALLOW_ONCE, "Allow", PermissionOptionKind::AllowOnce),
                        PermissionOption::new(
                            ALLOW_ALWAYS,
                            format!("Always allow {tool}"),
                            PermissionOptionKind::AllowAlways,
                        ),
                        PermissionOption::new(
                            REJECT_ONCE,
                            "Reject",
                            PermissionOptionKind::RejectOnce,
                        ),
                    ],
                );
                let tx = self.tx.clone();
                let session = session.to_string();
                self.peer
                    .request("session/request_permission", &request, move |answer| {
                        let _ = tx.send(Msg::Permission {
                            session,
                            call_id,
                            tool,
                            approval: id,
                            answer,
                        });
                    });
            }
            AgentEvent::Asked {
                id,
                plugin,
                request,
            } if plugin == crate::interact::PLUGIN => {
                let questions: Vec<Value> = request
                    .get("questions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if questions.is_empty() || live.question.is_some() {
                    live.agent.answer(id, dsh_std::Reply::Cancelled);
                    return;
                }
                live.question = Some(Questioning {
                    ask: id,
                    call_id: live.ask_call.clone().unwrap_or_default(),
                    questions,
                    answers: Vec::new(),
                });
                self.ask_next(session);
            }
            AgentEvent::Asked { id, .. } => live.agent.answer(id, dsh_std::Reply::Cancelled),
            AgentEvent::Error(e) => eprintln_safe!("dsh acp: session {session}: {e}"),
            _ => {}
        }
    }

    /// Asks the client the next unanswered question of the session's
    /// question ask: a permission request whose options are the choices
    /// (a plan review also sends the plan as a `plan` update and carries
    /// it as the request's content).
    fn ask_next(&mut self, session: &str) {
        let Some(live) = self.sessions.get_mut(session) else {
            return;
        };
        let Some(q) = &live.question else {
            return;
        };
        let Some(question) = q.questions.get(q.answers.len()) else {
            return;
        };
        let s = |k: &str| question.get(k).and_then(Value::as_str).unwrap_or("");
        let review = question
            .get("intent")
            .and_then(|i| i.get("kind"))
            .and_then(Value::as_str)
            == Some("plan-review");
        let labels: Vec<String> = question
            .get("options")
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .filter_map(|o| o.get("label")?.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let options: Vec<PermissionOption> =
            labels
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let kind = if review && i > 0 {
                        PermissionOptionKind::RejectOnce
                    } else {
                        PermissionOptionKind::AllowOnce
                    };
                    PermissionOption::new(format!("option-{i}"), l.clone(), kind)
                })
                .chain(labels.is_empty().then(|| {
                    PermissionOption::new("option-ok", "OK", PermissionOptionKind::AllowOnce)
                }))
                .collect();
        let mut content = Vec::new();
        if !s("detail").is_empty() {
            content.push(ToolCallContent::from(s("detail").to_string()));
        }
        if review {
            let entries: Vec<PlanEntry> = s("detail")
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("- "))
                .map(|l| PlanEntry::new(l, PlanEntryPriority::Medium, PlanEntryStatus::Pending))
                .collect();
            notify(&self.peer, session, SessionUpdate::Plan(Plan::new(entries)));
        }
        let title = if s("header").is_empty() {
            s("question").to_string()
        } else {
            format!("{}: {}", s("header"), s("question"))
        };
        let fields = ToolCallUpdateFields::new()
            .title(title)
            .kind(ToolKind::Think)
            .content(content);
        let request = RequestPermissionRequest::new(
            session.to_string(),
            ToolCallUpdate::new(q.call_id.clone(), fields),
            options,
        );
        let tx = self.tx.clone();
        let session = session.to_string();
        self.peer
            .request("session/request_permission", &request, move |answer| {
                let _ = tx.send(Msg::Question { session, answer });
            });
    }

    /// Records the client's choice for the current question; asks the
    /// next one or answers the agent.
    fn question_answer(&mut self, session: &str, answer: Result<Value, CallError>) {
        let Some(live) = self.sessions.get_mut(session) else {
            return;
        };
        let Some(q) = live.question.as_mut() else {
            return;
        };
        let selected = match answer.map(serde_json::from_value::<RequestPermissionResponse>) {
            Ok(Ok(RequestPermissionResponse {
                outcome: RequestPermissionOutcome::Selected(selected),
                ..
            })) => Some(selected.option_id.0.to_string()),
            _ => None,
        };
        let Some(selected) = selected else {
            // Dismissed or failed: the ask is withdrawn.
            let ask = q.ask;
            live.question = None;
            live.agent.answer(ask, dsh_std::Reply::Cancelled);
            return;
        };
        let question = q
            .questions
            .get(q.answers.len())
            .cloned()
            .unwrap_or(Value::Null);
        let label = selected
            .strip_prefix("option-")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| question.get("options")?.get(i)?.get("label")?.as_str());
        let picked: Vec<&str> = label.into_iter().collect();
        q.answers
            .push(serde_json::json!({"id": question.get("id").cloned().unwrap_or(Value::Null), "selected": picked}));
        if q.answers.len() < q.questions.len() {
            return self.ask_next(session);
        }
        let (ask, answers) = (q.ask, std::mem::take(&mut q.answers));
        live.question = None;
        live.agent.answer(
            ask,
            dsh_std::Reply::Plugin(serde_json::json!({"answers": answers})),
        );
    }

    fn permission_answer(
        &mut self,
        session: &str,
        call_id: String,
        tool: &str,
        approval: ApprovalRequestId,
        answer: Result<Value, CallError>,
    ) {
        let Some(live) = self.sessions.get_mut(session) else {
            return;
        };
        let decision = match answer.map(serde_json::from_value::<RequestPermissionResponse>) {
            Ok(Ok(RequestPermissionResponse {
                outcome: RequestPermissionOutcome::Selected(selected),
                ..
            })) => match selected.option_id.0.as_ref() {
                ALLOW_ONCE => ApprovalDecision::Allow,
                ALLOW_ALWAYS => ApprovalDecision::AllowAlways,
                _ => ApprovalDecision::Deny,
            },
            Ok(Ok(_)) => ApprovalDecision::Deny,
            Ok(Err(e)) => {
                eprintln_safe!("dsh acp: unreadable permission answer (denied): {e}");
                ApprovalDecision::Deny
            }
            Err(e) => {
                eprintln_safe!("dsh acp: permission request failed (denied): {e}");
                ApprovalDecision::Deny
            }
        };
        if decision == ApprovalDecision::AllowAlways {
            // The agent's policy switches the tool to auto; so does ours
            // (later calls of it start in progress).
            live.policy.set(tool, ApprovalMode::Auto);
        }
        if decision != ApprovalDecision::Deny && !live.cancel_requested {
            let fields = ToolCallUpdateFields::new().status(ToolCallStatus::InProgress);
            notify(
                &self.peer,
                session,
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id, fields)),
            );
        }
        live.agent.answer_approval(approval, decision);
    }
}

/// How long a plugin command (`/plan`, a plan mode switch) may take.
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The `active` of a `plan/mode` event.
fn plan_mode(ev: &dsh_core::session::SessionEvent) -> Option<bool> {
    match ev.data() {
        EventData::Plugin(p) if p.event_type == crate::interact::PLAN_MODE => {
            serde_json::from_str::<Value>(p.data.get())
                .ok()?
                .get("active")?
                .as_bool()
        }
        _ => None,
    }
}

fn notify(peer: &Peer, session: &str, update: SessionUpdate) {
    peer.notify(
        "session/update",
        &SessionNotification::new(session.to_string(), update),
    );
}

/// The file tools through the client's buffers when it offers both `fs`
/// capabilities (`client_fs`), and `bash` in the client's terminal
/// (`client_terminal`), for session `session`.
fn client_tools(
    config: &mut dsh_std::AgentConfig,
    peer: &Arc<Peer>,
    session: &str,
    client_fs: bool,
    client_terminal: bool,
) {
    if client_fs {
        let files: Files = Some(Arc::new(ClientFiles::new(
            peer.clone(),
            session.to_string(),
        )));
        config.tools.insert(Box::new(ReadTool {
            files: files.clone(),
            ..ReadTool::default()
        }));
        config.tools.insert(Box::new(WriteTool {
            files: files.clone(),
            ..WriteTool::default()
        }));
        config.tools.insert(Box::new(EditTool {
            files,
            ..EditTool::default()
        }));
    }
    if client_terminal {
        let runner = ClientTerminal::new(peer.clone(), session.to_string());
        let mut bash = BashTool::default();
        bash.config.runner = Some(Runner(Arc::new(runner)));
        config.tools.insert(Box::new(bash));
        // Commands run in the editor's terminal: no local background jobs
        // beside them.
        for name in ["bash_start", "bash_output", "bash_stop"] {
            config.tools.remove(name);
        }
    }
}
