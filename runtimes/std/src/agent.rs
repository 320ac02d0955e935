//! The [`Agent`] handle and its driver thread: a thin loop that carries the
//! kernel's effects to threads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::workers::Workers;
use dsh_approval::{ApprovalDecision, ApprovalPlugin, ApprovalPolicy};
use dsh_core::agent::{
    self as core_agent, AgentStatus, CancelCause, InboxTarget, ModelCall, ToolExecution,
};
use dsh_core::session::{EventData, SessionEvent};
use dsh_core::{ContentBlock, LlmCallConfig, Message, SessionId};
pub use dsh_host::ShellError;
use dsh_host::{
    Clock, ModelProvider, ProviderPrepare, absolute_cwd, job_token, run_model, run_side,
};
use dsh_runtime::exec::{self, Dispatch, Input, Job, Jobs};
use dsh_runtime::{
    AgentEvent, ApprovalRequestId, IdMode, Ids, Kernel, KernelError, Plugin, Reply, TurnSummary,
};
use dsh_store::SessionStore;
use dsh_tools::{CancelToken as ToolCancel, ToolSet, Workspace};

/// Loop options of the core (HEAD deltas and the retry executor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopOptions {
    /// Run the `llm-retry` executor at the request-error seam (logs
    /// `llm/retry`).
    pub retry_executor: bool,
    /// [HEAD Δ] keep the delivered text of a cancelled stream.
    pub interrupted_prefix: bool,
    /// [HEAD Δ] latch wakes that arrive while an aborted turn winds down.
    pub wake_latch: bool,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            retry_executor: true,
            interrupted_prefix: true,
            wake_latch: true,
        }
    }
}

/// Everything needed to run an agent.
pub struct AgentConfig {
    /// Where model calls go.
    pub provider: Arc<dyn ModelProvider>,
    /// The call config of every request: provider route, model, max
    /// tokens, and the effort, temperature and stop sequences that fill
    /// each request seed lacking them.
    pub call_config: LlmCallConfig,
    /// The system prompt (one section; `{{var}}` references are rendered).
    pub system_prompt: Option<String>,
    /// The tools.
    pub tools: ToolSet,
    /// The workspace the file tools are confined to (`None`: `cwd`).
    pub workspace: Option<PathBuf>,
    /// A workspace already opened (e.g. the parent's, for a subagent): the
    /// agent's tools use this handle instead of opening `workspace` (or
    /// `cwd`) by path, so a directory moved in at that path since it was
    /// opened is not followed. `None` (the default): opened at start.
    pub opened_workspace: Option<Workspace>,
    /// `ask | auto | deny` per tool.
    pub approval: ApprovalPolicy,
    /// Deadline of a tool body whose definition names none (TL-14);
    /// `Duration::ZERO` (the default): none. Bash keeps its own executor
    /// default (TL-21).
    pub tool_timeout: Duration,
    /// Working directory (the session header's `cwd`; where `bash` runs).
    pub cwd: PathBuf,
    /// Core loop options.
    pub loop_options: LoopOptions,
    /// Time source (test hook: [`Clock::Fixed`]).
    pub clock: Clock,
    /// Id source (test hook: [`IdMode::Sequential`]).
    pub ids: IdMode,
    /// Plugins, in order, after the shell's own (provider `prepare`,
    /// approval policy).
    pub plugins: Vec<Box<dyn Plugin>>,
    /// The retry policy; `None`: the kernel's default.
    pub retry_policy: Option<dsh_core::agent::retry::RetryPolicy>,
    /// The most one model response may add, in bytes
    /// ([`dsh_runtime::AgentConfig::max_response_bytes`]).
    pub max_response_bytes: u64,
    /// The most steps one turn may take, `None`: no limit
    /// ([`dsh_runtime::AgentConfig::max_steps_per_turn`]).
    pub max_steps_per_turn: Option<u64>,
}

impl core::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("call_config", &self.call_config)
            .field("tools", &self.tools.names())
            .field("approval", &self.approval)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl AgentConfig {
    /// A config with the built-in tools confined to `cwd`, policy `auto`,
    /// no tool deadline, the system clock and UUID ids.
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        call_config: LlmCallConfig,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        AgentConfig {
            provider,
            call_config,
            system_prompt: None,
            tools: ToolSet::builtin(),
            workspace: None,
            opened_workspace: None,
            approval: ApprovalPolicy::default(),
            tool_timeout: Duration::ZERO,
            cwd: cwd.into(),
            loop_options: LoopOptions::default(),
            clock: Clock::System,
            ids: IdMode::Uuid,
            plugins: Vec::new(),
            retry_policy: None,
            max_response_bytes: dsh_runtime::DEFAULT_MAX_RESPONSE_BYTES,
            max_steps_per_turn: Some(dsh_runtime::DEFAULT_MAX_STEPS_PER_TURN),
        }
    }

    /// The kernel's configuration derived from this one.
    pub fn kernel_config(&self) -> Result<dsh_runtime::AgentConfig, ShellError> {
        let tools = self
            .tools
            .registry()
            .map_err(|e| ShellError::Config(format!("tool registry: {e}")))?;
        let mut k = dsh_runtime::AgentConfig::new(self.call_config.clone());
        k.system_prompt = self.system_prompt.clone();
        k.tools = tools;
        k.tool_timeout_ms = Some(self.tool_timeout.as_millis() as u64).filter(|ms| *ms > 0);
        k.retry_executor = self.loop_options.retry_executor;
        k.interrupted_prefix = self.loop_options.interrupted_prefix;
        k.wake_latch = self.loop_options.wake_latch;
        k.retry_policy = self.retry_policy.clone();
        k.max_response_bytes = self.max_response_bytes;
        k.max_steps_per_turn = self.max_steps_per_turn;
        k.ids = self.ids;
        k.seed = crate::clock::os_seed();
        Ok(k)
    }

    /// The core's configuration derived from this one (fails on an invalid
    /// tool definition).
    pub fn core_config(&self) -> Result<core_agent::AgentConfig, ShellError> {
        self.kernel_config()?
            .core_config()
            .map_err(|e| ShellError::Config(e.to_string()))
    }

    /// The tools' workspace: [`opened_workspace`](Self::opened_workspace)
    /// when set (a clone sharing its handle), else opened now from
    /// `workspace` or `cwd`.
    pub fn workspace(&self) -> Result<Workspace, ShellError> {
        if let Some(opened) = &self.opened_workspace {
            return Ok(opened.clone());
        }
        let root = self.workspace.as_ref().unwrap_or(&self.cwd);
        Workspace::new(root)
            .map_err(|e| ShellError::Config(format!("workspace {}: {e}", root.display())))
    }
}

/// A reader of the session events, run on the driver thread.
type EventsReader = Box<dyn FnOnce(&[SessionEvent]) + Send>;

/// What reaches the driver thread.
enum Msg {
    /// An input for the kernel: from a handle call (`counted`, for
    /// `wait_idle`) or from work in flight (a stream, a tool body, a side
    /// call) and disposal.
    Feed {
        input: Input,
        counted: bool,
    },
    Send {
        message: Message,
        target: InboxTarget,
        wakeup: bool,
        reply: SyncSender<Result<(), KernelError>>,
    },
    Subscribe(Sender<AgentEvent>),
    Snapshot(SyncSender<Vec<SessionEvent>>),
    /// Runs a reader over the events in place (no copy of the log).
    Visit(EventsReader),
    Append {
        data: EventData,
        reply: SyncSender<Result<u64, KernelError>>,
    },
    Command {
        name: String,
        args: serde_json::Value,
        reply: SyncSender<Result<serde_json::Value, String>>,
    },
}

#[derive(Default)]
struct SharedState {
    status: Option<AgentStatus>,
    quiescent: bool,
    submitted: u64,
    processed: u64,
    summary: TurnSummary,
    stopped: bool,
    /// Set when the driver stopped with part of the log unwritten.
    store_error: Option<String>,
}

struct Shared {
    state: Mutex<SharedState>,
    cv: Condvar,
}

/// The handle of a running agent (blocking std shell). Dropping it
/// disposes the agent: the turn is cancelled (`disposed`), running work
/// stops, the log is persisted, and the drop waits for quiescence.
pub struct Agent {
    id: SessionId,
    tx: Sender<Msg>,
    shared: Arc<Shared>,
    driver: Option<JoinHandle<()>>,
    ids: Mutex<Ids>,
}

impl core::fmt::Debug for Agent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// A fresh agent over a new session `session_id` (registered with the
    /// store; nothing is written until the first checkpoint).
    pub fn create(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session_id: SessionId,
    ) -> Result<Agent, ShellError> {
        let now = config.clock.now_ms();
        let session = dsh_runtime::create_session(session_id, now, absolute_cwd(&config.cwd))?;
        store.create(session.header().clone())?;
        Agent::start(config, store, session, 0)
    }

    /// Resumes a stored session. The store's load repairs a crashed log (a
    /// torn tail dropped, an interrupted turn closed, persistence.md 6.5);
    /// a `session/end-seed` marker is appended unless the log ends with one
    /// (IB-14, ES3); turn numbering and the inbox continue (V30, IB-8).
    pub fn resume(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session_id: &SessionId,
    ) -> Result<Agent, ShellError> {
        let loaded = store.load(session_id)?;
        let stored = loaded.events.len() as u64;
        let now = config.clock.now_ms();
        let session = dsh_runtime::resume_session(loaded.header, loaded.events, now)?;
        Agent::start(config, store, session, stored)
    }

    /// Forks stored session `from` at seq `at_seq` (default: its last
    /// event) into a new session `new_id` (F3–F8) and runs an agent on it.
    pub fn fork(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        from: &SessionId,
        at_seq: Option<u64>,
        new_id: SessionId,
    ) -> Result<Agent, ShellError> {
        let parent = store.inspect(from, &dsh_store::Cancel::new())?;
        let now = config.clock.now_ms();
        let child = dsh_runtime::fork_session(parent.header, parent.events, at_seq, new_id, now)?;
        Agent::adopt(config, store, child)
    }

    /// Runs an agent on a new session the caller built (a subagent's
    /// child, a seeded fork): its header is registered with the store and
    /// its seed events, if any, are written before the agent starts.
    pub fn adopt(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session: dsh_core::session::Session,
    ) -> Result<Agent, ShellError> {
        store.create(session.header().clone())?;
        if !session.is_empty() {
            store.append(session.id(), session.events())?;
        }
        let stored = session.len();
        Agent::start(config, store, session, stored)
    }

    fn start(
        mut config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session: dsh_core::session::Session,
        stored: u64,
    ) -> Result<Agent, ShellError> {
        let workspace = config.workspace()?;
        let kernel_config = config.kernel_config()?;
        let mut plugins: Vec<Box<dyn Plugin>> = vec![
            Box::new(ProviderPrepare(config.provider.clone())),
            Box::new(ApprovalPlugin::new(Arc::new(Mutex::new(
                config.approval.clone(),
            )))),
        ];
        plugins.append(&mut config.plugins);
        let kernel = Kernel::new(kernel_config, session, stored, plugins)?;
        let id = kernel.id().clone();
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(SharedState {
                status: Some(AgentStatus::Idle),
                quiescent: true,
                summary: kernel.summary(),
                ..SharedState::default()
            }),
            cv: Condvar::new(),
        });
        let mut ids = Ids::new(config.ids, crate::clock::os_seed());
        ids.continue_after(kernel.session());
        let ids = Mutex::new(ids);
        let io = Io {
            id: id.clone(),
            clock: config.clock.clone(),
            provider: config.provider.clone(),
            toolset: Arc::new(std::mem::take(&mut config.tools)),
            workspace,
            store,
            tx: tx.clone(),
            shared: shared.clone(),
            subscribers: Vec::new(),
            jobs: Jobs::new(),
            workers: Workers::new(),
            commands: BTreeMap::new(),
        };
        let driver = Driver {
            kernel,
            rx,
            io,
            timer: None,
            handled: 0,
            published: None,
        };
        let handle = std::thread::Builder::new()
            .name(format!("dsh-agent-{id}"))
            .spawn(move || driver.run())
            .map_err(|e| ShellError::Spawn(e.to_string()))?;
        Ok(Agent {
            id,
            tx,
            shared,
            driver: Some(handle),
            ids,
        })
    }

    /// The session id (the agent id).
    pub fn session_id(&self) -> &SessionId {
        &self.id
    }

    fn user_message(&self, text: &str) -> Message {
        let id = match self.ids.lock() {
            Ok(mut ids) => ids.user_message_id(),
            Err(e) => e.into_inner().user_message_id(),
        };
        Message::user(id, vec![ContentBlock::text(text)])
    }

    fn submit(&self, msg: Msg) -> Result<(), ShellError> {
        submit(&self.tx, &self.shared, msg)
    }

    /// Generic delivery (IB-6): `message` to `target`, waking the driver
    /// when `wakeup`.
    pub fn send_message(
        &self,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), ShellError> {
        deliver(&self.tx, &self.shared, message, target, wakeup)
    }

    /// A handle that delivers messages to this agent from any thread (a
    /// background subagent's result). It does not keep the agent alive:
    /// once the agent is disposed, delivery fails with
    /// [`ShellError::Disposed`].
    pub fn mailbox(&self) -> Mailbox {
        Mailbox {
            tx: self.tx.clone(),
            shared: self.shared.clone(),
        }
    }

    /// A user message that gets its own turn (`followup`); wakes the agent.
    pub fn send(&self, text: &str) -> Result<(), ShellError> {
        self.followup(text)
    }

    /// Like [`send`](Self::send), with any content (text and images).
    pub fn send_content(&self, content: Vec<ContentBlock>) -> Result<(), ShellError> {
        let id = match self.ids.lock() {
            Ok(mut ids) => ids.user_message_id(),
            Err(e) => e.into_inner().user_message_id(),
        };
        let message = Message::user(id, content);
        self.send_message(message, InboxTarget::NextTurn, true)
    }

    /// `followup(text)`: queued for its own turn; wakes the agent.
    pub fn followup(&self, text: &str) -> Result<(), ShellError> {
        self.send_message(self.user_message(text), InboxTarget::NextTurn, true)
    }

    /// `steer(text)`: entered at the next step boundary; wakes the agent.
    pub fn steer(&self, text: &str) -> Result<(), ShellError> {
        self.send_message(self.user_message(text), InboxTarget::NextStep, true)
    }

    /// `inject(message)`: next-step context without waking the agent.
    pub fn inject(&self, message: Message) -> Result<(), ShellError> {
        self.send_message(message, InboxTarget::NextStep, false)
    }

    /// Cancels the running turn (LC-33); `keep_inbox` keeps pending input.
    pub fn cancel(&self, cause: CancelCause, keep_inbox: bool) {
        let input = Input::Cancel { cause, keep_inbox };
        let _ = self.submit(Msg::Feed {
            input,
            counted: true,
        });
    }

    /// Answers an [`AgentEvent::ApprovalRequested`]. An unknown or stale id
    /// is ignored.
    pub fn answer_approval(&self, request: ApprovalRequestId, decision: ApprovalDecision) {
        self.answer(request, Reply::Approval(decision));
    }

    /// Answers any ask ([`AgentEvent::ApprovalRequested`],
    /// [`AgentEvent::Asked`]). An unknown or stale id is ignored.
    pub fn answer(&self, request: ApprovalRequestId, reply: Reply) {
        let input = Input::Answer {
            id: request.0,
            reply,
        };
        let _ = self.submit(Msg::Feed {
            input,
            counted: true,
        });
    }

    /// Appends a foreign event (a plugin's, e.g. `session/title`) at the
    /// end of the log; returns its seq. It is written with the next batch
    /// (at once when the agent is quiet).
    pub fn append_event(&self, data: EventData) -> Result<u64, ShellError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.submit(Msg::Append { data, reply })?;
        match answer.recv() {
            Ok(r) => r.map_err(ShellError::from),
            Err(_) => Err(ShellError::Disposed),
        }
    }

    /// A receiver of every live event from now on.
    pub fn subscribe(&self) -> Receiver<AgentEvent> {
        let (tx, rx) = mpsc::channel();
        let _ = self.submit(Msg::Subscribe(tx));
        rx
    }

    /// Runs plugin command `name` (maintenance while idle, LC-39) and
    /// waits up to `timeout` for its result.
    pub fn command(
        &self,
        name: &str,
        args: serde_json::Value,
        timeout: Option<Duration>,
    ) -> Result<serde_json::Value, ShellError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.submit(Msg::Command {
            name: name.to_string(),
            args,
            reply,
        })?;
        let result = match timeout {
            Some(t) => answer.recv_timeout(t).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => ShellError::Timeout,
                mpsc::RecvTimeoutError::Disconnected => ShellError::Disposed,
            })?,
            None => answer.recv().map_err(|_| ShellError::Disposed)?,
        };
        result.map_err(ShellError::Command)
    }

    /// `compactNow` (loop.md CP-3 c): the compaction plugin's manual run
    /// (`dsh_compaction`'s command `"compact"`), while idle. The result is
    /// `{"compacted":bool,"reason"?}`; without the plugin it is `{}`
    /// unchanged.
    pub fn compact_now(&self, timeout: Option<Duration>) -> Result<serde_json::Value, ShellError> {
        self.command("compact", serde_json::json!({}), timeout)
    }

    /// The session events so far (a copy).
    pub fn events(&self) -> Result<Vec<SessionEvent>, ShellError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.submit(Msg::Snapshot(reply))?;
        answer.recv().map_err(|_| ShellError::Disposed)
    }

    /// What `read` makes of the session events so far, run on the agent's
    /// thread over the events in place: unlike [`Agent::events`] it copies
    /// none of the log, so a long resumed session is not held twice.
    pub fn with_events<R, F>(&self, read: F) -> Result<R, ShellError>
    where
        R: Send + 'static,
        F: FnOnce(&[SessionEvent]) -> R + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        self.submit(Msg::Visit(Box::new(move |events: &[SessionEvent]| {
            let _ = reply.send(read(events));
        })))?;
        answer.recv().map_err(|_| ShellError::Disposed)
    }

    /// The public status.
    pub fn status(&self) -> AgentStatus {
        self.shared
            .state
            .lock()
            .ok()
            .and_then(|s| s.status)
            .unwrap_or(AgentStatus::Idle)
    }

    /// The message of the last failed session-store write while part of
    /// the log is unwritten; set before the agent reports idle after it.
    pub fn store_error(&self) -> Option<String> {
        match self.shared.state.lock() {
            Ok(s) => s.store_error.clone(),
            Err(e) => e.into_inner().store_error.clone(),
        }
    }

    /// Waits until every call made before this one has been handled and
    /// the agent is idle with nothing in flight or left to persist (IB-13
    /// `when_idle`); returns how the last turn ended.
    pub fn wait_idle(&self, timeout: Option<Duration>) -> Result<TurnSummary, ShellError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let Ok(mut s) = self.shared.state.lock() else {
            return Err(ShellError::Disposed);
        };
        let target = s.submitted;
        loop {
            if s.processed >= target && s.quiescent {
                return Ok(s.summary.clone());
            }
            if s.stopped {
                return Err(ShellError::Disposed);
            }
            let wait = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(ShellError::Timeout);
                    }
                    d - now
                }
                None => Duration::from_secs(3600),
            };
            s = match self.shared.cv.wait_timeout(s, wait) {
                Ok((g, _)) => g,
                Err(_) => return Err(ShellError::Disposed),
            };
        }
    }

    /// Disposes the agent (LC-40) and waits for quiescence.
    pub fn dispose(mut self) {
        self.shutdown();
    }

    /// [`dispose`](Self::dispose), then reports whether the whole log
    /// reached the store: [`ShellError::NotSaved`] with the last failed
    /// write's message when it did not.
    pub fn close(mut self) -> Result<(), ShellError> {
        self.shutdown();
        self.store_error()
            .map_or(Ok(()), |e| Err(ShellError::NotSaved(e)))
    }

    fn shutdown(&mut self) {
        if let Some(handle) = self.driver.take() {
            let _ = self.tx.send(feed(Input::Dispose));
            let _ = handle.join();
        }
    }
}

fn submit(tx: &Sender<Msg>, shared: &Shared, msg: Msg) -> Result<(), ShellError> {
    if let Ok(mut s) = shared.state.lock() {
        s.submitted += 1;
    }
    tx.send(msg).map_err(|_| ShellError::Disposed)
}

fn deliver(
    tx: &Sender<Msg>,
    shared: &Shared,
    message: Message,
    target: InboxTarget,
    wakeup: bool,
) -> Result<(), ShellError> {
    let (reply, answer) = mpsc::sync_channel(1);
    submit(
        tx,
        shared,
        Msg::Send {
            message,
            target,
            wakeup,
            reply,
        },
    )?;
    match answer.recv() {
        Ok(r) => r.map_err(ShellError::from),
        Err(_) => Err(ShellError::Disposed),
    }
}

/// Delivers messages to an [`Agent`] from any thread
/// ([`Agent::mailbox`]); cheap to clone.
#[derive(Clone)]
pub struct Mailbox {
    tx: Sender<Msg>,
    shared: Arc<Shared>,
}

impl core::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mailbox").finish_non_exhaustive()
    }
}

impl Mailbox {
    /// [`Agent::send_message`] through this handle.
    pub fn send_message(
        &self,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), ShellError> {
        deliver(&self.tx, &self.shared, message, target, wakeup)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Driver {
    kernel: Kernel,
    rx: Receiver<Msg>,
    io: Io,
    /// The kernel deadline waited for, and when it passes (monotonic).
    timer: Option<(i64, Instant)>,
    /// Handle calls handled so far.
    handled: u64,
    /// What [`publish_state`](Self::publish_state) last published.
    published: Option<(u64, bool, AgentStatus)>,
}

/// The std runtime's I/O for the shared executor: worker threads for
/// streams, tool bodies and side calls; the store called on the driver
/// thread.
struct Io {
    id: SessionId,
    clock: Clock,
    provider: Arc<dyn ModelProvider>,
    toolset: Arc<ToolSet>,
    workspace: Workspace,
    store: Arc<dyn SessionStore>,
    tx: Sender<Msg>,
    shared: Arc<Shared>,
    subscribers: Vec<Sender<AgentEvent>>,
    jobs: Jobs,
    workers: Workers,
    /// Callers of running plugin commands, by command id.
    commands: BTreeMap<u64, SyncSender<Result<serde_json::Value, String>>>,
}

impl Driver {
    fn run(mut self) {
        loop {
            self.carry();
            self.publish_state();
            if self.kernel.is_finished() {
                break;
            }
            let msg = match self.next_wake() {
                Some(t) => match self.rx.recv_timeout(t) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match self.rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                },
            };
            match msg {
                Some(m) => self.handle(m),
                None => self.on_timer(),
            }
        }
        self.io.jobs.stop_all();
        let released = self.io.store.release(self.kernel.id());
        exec::released(&mut self.io, released.map_err(|e| e.to_string()));
        self.io.workers.join();
        if let Ok(mut s) = self.io.shared.state.lock() {
            s.store_error = self.kernel.store_error().map(str::to_string);
            s.stopped = true;
            s.quiescent = true;
            s.status = Some(AgentStatus::Idle);
        }
        self.io.shared.cv.notify_all();
    }

    /// Carries out the kernel's effects until it is drained (the store is
    /// called on this thread, so no write is left running).
    fn carry(&mut self) {
        let _ = exec::carry(&mut self.kernel, &mut self.io);
        if self.io.subscribers.is_empty() {
            self.kernel.set_publish_events(false);
        }
    }

    /// How long to wait for the kernel's next deadline (measured on a
    /// monotonic clock, so a fixed test clock still wakes up).
    fn next_wake(&mut self) -> Option<Duration> {
        let Some(deadline) = self.kernel.poll_timeout() else {
            self.timer = None;
            return None;
        };
        let now = Instant::now();
        let at = match self.timer {
            Some((d, at)) if d == deadline => at,
            _ => {
                let ms = deadline.saturating_sub(self.io.now()).max(0);
                let at = now + Duration::from_millis(ms as u64);
                self.timer = Some((deadline, at));
                at
            }
        };
        Some(at.saturating_duration_since(now))
    }

    fn on_timer(&mut self) {
        if let Some((deadline, at)) = self.timer
            && Instant::now() >= at
        {
            self.timer = None;
            let _ = exec::feed(&mut self.kernel, &mut self.io, Input::Timeout { deadline });
        }
    }

    fn handle(&mut self, msg: Msg) {
        let now = self.io.now();
        let counted = match msg {
            Msg::Feed { input, counted } => {
                let _ = exec::feed(&mut self.kernel, &mut self.io, input);
                counted
            }
            Msg::Send {
                message,
                target,
                wakeup,
                reply,
            } => {
                let r = self.kernel.send(now, message, target, wakeup);
                self.carry();
                let _ = reply.send(r);
                true
            }
            Msg::Subscribe(tx) => {
                self.io.subscribers.push(tx);
                self.kernel.set_publish_events(true);
                true
            }
            Msg::Snapshot(reply) => {
                let _ = reply.send(self.kernel.session().events().to_vec());
                true
            }
            Msg::Visit(read) => {
                read(self.kernel.session().events());
                true
            }
            Msg::Append { data, reply } => {
                let r = self.kernel.append_event(now, data);
                self.carry();
                let _ = reply.send(r);
                true
            }
            Msg::Command { name, args, reply } => {
                match self.kernel.command(now, &name, args) {
                    Ok(id) => {
                        self.io.commands.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.to_string()));
                    }
                }
                true
            }
        };
        if counted {
            // Published with the quiescence flag in `publish_state`, so a
            // waiter never sees the count without the state it produced.
            self.handled += 1;
        }
    }

    /// Publishes the count, quiescence and status to the handles; wakes
    /// waiters only when one of them changed.
    fn publish_state(&mut self) {
        let quiescent = self.kernel.is_idle();
        let state = (self.handled, quiescent, self.kernel.status());
        if self.published == Some(state) {
            return;
        }
        self.published = Some(state);
        if let Ok(mut s) = self.io.shared.state.lock() {
            s.processed = self.handled;
            s.quiescent = quiescent;
            s.status = Some(self.kernel.status());
            if quiescent {
                s.summary = self.kernel.summary();
            }
        }
        self.io.shared.cv.notify_all();
    }
}

impl Io {
    /// Runs `job`'s body on a worker thread; when no thread can be started
    /// the job is forgotten and the error says so.
    fn spawn(&mut self, job: Job, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
        let (name, what) = match job {
            Job::Model(a) => (format!("dsh-model-{a}"), "model stream"),
            Job::Tool(t) => (format!("dsh-tool-{t}"), "tool"),
            Job::Side(id) => (format!("dsh-side-{id}"), "side call"),
        };
        match self.workers.run(name, body) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.jobs.done(job);
                Err(format!("cannot start the {what} thread: {e}"))
            }
        }
    }
}

impl Dispatch for Io {
    fn now(&mut self) -> i64 {
        self.clock.now_ms()
    }

    fn start_model(&mut self, call: ModelCall) -> Result<(), String> {
        let job = Job::Model(call.attempt);
        let cancel = job_token(&mut self.jobs, job);
        let provider = self.provider.clone();
        let tx = self.tx.clone();
        self.spawn(job, move || {
            run_model(&*provider, &call, &cancel, |input| {
                tx.send(feed(input)).is_ok()
            });
        })
    }

    fn start_tool(&mut self, exec: ToolExecution, timeout_ms: Option<u64>) -> Result<(), String> {
        let token = exec.token;
        let cancel = ToolCancel::new();
        let stop = cancel.clone();
        self.jobs.insert(Job::Tool(token), move || stop.cancel());
        let tx = self.tx.clone();
        let toolset = self.toolset.clone();
        let workspace = self.workspace.clone();
        let timeout = timeout_ms.map(Duration::from_millis);
        self.spawn(Job::Tool(token), move || {
            let (outcome, events) = toolset.run(&exec, workspace, cancel, timeout);
            let _ = tx.send(feed(Input::ToolDone {
                token,
                outcome: Box::new(outcome),
                events,
            }));
        })
    }

    fn start_side(&mut self, id: u64, request: dsh_core::GenerateOptions) -> Result<(), String> {
        let job = Job::Side(id);
        let cancel = job_token(&mut self.jobs, job);
        let provider = self.provider.clone();
        let tx = self.tx.clone();
        self.spawn(job, move || {
            run_side(&*provider, id, &request, &cancel, |input| {
                let _ = tx.send(feed(input));
            });
        })
    }

    fn jobs(&mut self) -> Option<&mut Jobs> {
        Some(&mut self.jobs)
    }

    fn persist(&mut self, events: &[SessionEvent]) -> Option<Result<(), String>> {
        Some(
            self.store
                .append(&self.id, events)
                .map_err(|e| e.to_string()),
        )
    }

    fn persisted(&mut self, store_error: Option<&str>) {
        // Before anything the write releases (idle, issue 25).
        if let Ok(mut s) = self.shared.state.lock() {
            s.store_error = store_error.map(str::to_string);
        }
    }

    fn command_done(&mut self, id: u64, result: &Result<serde_json::Value, String>) {
        if let Some(reply) = self.commands.remove(&id) {
            let _ = reply.send(result.clone());
        }
    }

    fn publish(&mut self, event: AgentEvent) {
        if let AgentEvent::Status(s) = &event
            && let Ok(mut st) = self.shared.state.lock()
        {
            st.status = Some(*s);
        }
        if self.subscribers.is_empty() {
            return;
        }
        self.subscribers.retain(|s| s.send(event.clone()).is_ok());
    }
}

/// An input from work (a stream, a tool body, a side call): not a handle
/// call, so not counted for `wait_idle`.
fn feed(input: Input) -> Msg {
    Msg::Feed {
        input,
        counted: false,
    }
}
