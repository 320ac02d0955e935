//! The [`Agent`] handle and its driver thread.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    self as core_agent, AgentOptions, AgentStatus, ApprovalOutcome, CancelCause, Checkpoint,
    FixedJitter, Hook, HookAnswer, HookCall, HookCx, HookError, Hooks, InboxTarget, InputError,
    Notification, Output, PostToolDecision, PreToolDecision, PreparedCall, Recovery, SeededJitter,
    ToolExecution,
};
use dsh_core::session::{EventData, Session, SessionEvent, SessionHeader, TurnEndReason};
use dsh_core::{
    ContentBlock, LlmCallConfig, LlmError, Message, SessionId, StreamChunk, TokenUsage,
};
use dsh_deepseek::CancelToken;
use dsh_store::{SessionStore, StoreError};

use crate::clock::{Clock, IdMode, ShellIds};
use crate::provider::ModelProvider;
use dsh_tools::{
    ApprovalDecision, ApprovalPolicy, CancelToken as ToolCancel, CollectingSink, PolicyHooks,
    ToolContext, ToolSet, Workspace,
};

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
    /// Provider route and model of the first request (+ effort, max tokens).
    pub call_config: LlmCallConfig,
    /// The system prompt (one section; `{{var}}` references are rendered).
    pub system_prompt: Option<String>,
    /// The tools.
    pub tools: ToolSet,
    /// The workspace the file tools are confined to (`None`: `cwd`).
    pub workspace: Option<PathBuf>,
    /// `ask | auto | deny` per tool.
    pub approval: ApprovalPolicy,
    /// Per-tool timeout when the tool's definition names none.
    pub tool_timeout: Duration,
    /// Working directory (the session header's `cwd`; where `bash` runs).
    pub cwd: PathBuf,
    /// Core loop options.
    pub loop_options: LoopOptions,
    /// Time source (test hook: [`Clock::Fixed`]).
    pub clock: Clock,
    /// Id source (test hook: [`IdMode::Sequential`]).
    pub ids: IdMode,
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
    /// a 120 s tool timeout, the system clock and UUID ids.
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        call_config: LlmCallConfig,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        let cwd = cwd.into();
        AgentConfig {
            provider,
            call_config,
            system_prompt: None,
            tools: ToolSet::builtin(),
            workspace: None,
            approval: ApprovalPolicy::default(),
            tool_timeout: Duration::from_secs(120),
            cwd,
            loop_options: LoopOptions::default(),
            clock: Clock::System,
            ids: IdMode::Uuid,
        }
    }

    /// The core's configuration derived from this one (fails on an invalid
    /// tool definition).
    pub fn core_config(&self) -> Result<core_agent::AgentConfig, ShellError> {
        let tools = self
            .tools
            .registry()
            .map_err(|e| ShellError::Config(format!("tool registry: {e}")))?;
        Ok(core_agent::AgentConfig {
            options: AgentOptions {
                provider: Some(self.call_config.provider.clone()),
                model: Some(self.call_config.model.clone()),
                max_tokens: self.call_config.max_tokens,
            },
            sections: self
                .system_prompt
                .iter()
                .map(|t| PromptSection::new("system", 0, t.clone()))
                .collect(),
            tools,
            retry_executor: self.loop_options.retry_executor,
            interrupted_prefix: self.loop_options.interrupted_prefix,
            wake_latch: self.loop_options.wake_latch,
            ..core_agent::AgentConfig::default()
        })
    }

    /// The tools' workspace.
    pub fn workspace(&self) -> Result<Workspace, ShellError> {
        let root = self.workspace.as_ref().unwrap_or(&self.cwd);
        Workspace::new(root)
            .map_err(|e| ShellError::Config(format!("workspace {}: {e}", root.display())))
    }
}

/// Identifies one pending approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApprovalRequestId(pub u64);

/// A live event of an agent.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AgentEvent {
    /// The public status changed.
    Status(AgentStatus),
    /// A session event was appended (in seq order; chunks included).
    Event(Arc<SessionEvent>),
    /// A tool with policy `ask` waits for [`Agent::answer_approval`].
    ApprovalRequested {
        /// Pass back with the answer.
        id: ApprovalRequestId,
        /// The tool name.
        tool: String,
        /// The raw argument text.
        arguments: String,
    },
    /// `agent/error`, a store failure, or another shell failure.
    Error(String),
}

/// How the last turn ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnSummary {
    /// The last turn number (0: none yet).
    pub turn: u64,
    /// The `turn/end` reason of that turn, if one was written.
    pub reason: Option<TurnEndReason>,
    /// The usage of the turn's last assistant message that had one.
    pub usage: Option<TokenUsage>,
}

/// Why a shell operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShellError {
    /// The session store failed.
    Store(StoreError),
    /// The stored log cannot drive an agent.
    Resume(String),
    /// The fork boundary or child is invalid.
    Fork(String),
    /// The core refused the input (duplicate id, invalid message).
    Input(InputError),
    /// The agent has been disposed (its driver is gone).
    Disposed,
    /// `wait_idle` timed out.
    Timeout,
    /// A thread could not be started.
    Spawn(String),
    /// The configuration is unusable (workspace, tool definitions).
    Config(String),
}

impl core::fmt::Display for ShellError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ShellError::Store(e) => write!(f, "session store: {e}"),
            ShellError::Resume(e) => write!(f, "cannot resume: {e}"),
            ShellError::Fork(e) => write!(f, "cannot fork: {e}"),
            ShellError::Input(e) => write!(f, "{e}"),
            ShellError::Disposed => f.write_str("the agent has been disposed"),
            ShellError::Timeout => f.write_str("timed out waiting for the agent to go idle"),
            ShellError::Spawn(e) => write!(f, "cannot start a thread: {e}"),
            ShellError::Config(e) => write!(f, "invalid agent config: {e}"),
        }
    }
}

impl std::error::Error for ShellError {}

impl From<StoreError> for ShellError {
    fn from(e: StoreError) -> Self {
        ShellError::Store(e)
    }
}

/// What reaches the driver thread.
enum Msg {
    Send {
        message: Message,
        target: InboxTarget,
        wakeup: bool,
        reply: SyncSender<Result<(), InputError>>,
    },
    Cancel {
        cause: CancelCause,
        keep_inbox: bool,
    },
    Approval {
        id: u64,
        decision: ApprovalDecision,
    },
    Subscribe(Sender<AgentEvent>),
    Snapshot(SyncSender<Vec<SessionEvent>>),
    Chunk {
        attempt: u64,
        chunk: StreamChunk,
    },
    End {
        attempt: u64,
    },
    ToolDone {
        token: u64,
        outcome: ToolOutcome,
        events: Vec<EventData>,
    },
    Dispose,
}

#[derive(Default)]
struct SharedState {
    status: Option<AgentStatus>,
    quiescent: bool,
    submitted: u64,
    processed: u64,
    summary: TurnSummary,
    stopped: bool,
}

struct Shared {
    state: Mutex<SharedState>,
    cv: Condvar,
}

/// The handle of a running agent (blocking std shell). Dropping it
/// disposes the agent: the turn is cancelled (`disposed`), running work
/// stops, the store is flushed, and the drop waits for quiescence.
pub struct Agent {
    id: SessionId,
    tx: Sender<Msg>,
    shared: Arc<Shared>,
    driver: Option<JoinHandle<()>>,
    ids: Mutex<ShellIds>,
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
    /// store; nothing is written until the first event).
    pub fn create(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session_id: SessionId,
    ) -> Result<Agent, ShellError> {
        let now = config.clock.now_ms();
        let mut header = SessionHeader::new(session_id, u64::try_from(now).unwrap_or(0));
        header.cwd = absolute(&config.cwd);
        store.create(header.clone())?;
        Agent::start(config, store, Session::new(header))
    }

    /// Resumes a stored session. The store's load repairs a crashed log (a
    /// torn tail dropped, an interrupted turn closed, persistence.md 6.5);
    /// turn numbering and the inbox continue (V30, IB-8).
    pub fn resume(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session_id: &SessionId,
    ) -> Result<Agent, ShellError> {
        let loaded = store.load(session_id)?;
        let session = Session::restore(loaded.header, loaded.events)
            .map_err(|e| ShellError::Resume(e.to_string()))?;
        Agent::start(config, store, session)
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
        let cancel = dsh_store::Cancel::new();
        let parent = store.inspect(from, &cancel)?;
        let parent = Session::restore(parent.header, parent.events)
            .map_err(|e| ShellError::Fork(e.to_string()))?;
        let now = config.clock.now_ms();
        let child = parent
            .fork(at_seq, new_id.clone(), now)
            .map_err(|e| ShellError::Fork(e.to_string()))?;
        store.create(child.header().clone())?;
        store.append(&new_id, child.events())?;
        Agent::start(config, store, child)
    }

    fn start(
        mut config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session: Session,
    ) -> Result<Agent, ShellError> {
        let workspace = config.workspace()?;
        let core = core_agent::Agent::new(config.core_config()?, session)
            .map_err(|e| ShellError::Resume(e.to_string()))?;
        let id = core.id().clone();
        let policy = Arc::new(Mutex::new(config.approval.clone()));
        let toolset = Arc::new(std::mem::take(&mut config.tools));
        let core = core
            .with_hooks(ShellHooks {
                policy: PolicyHooks::new(policy.clone()),
                provider: config.provider.clone(),
            })
            .with_ids(ShellIds::new(config.ids));
        // Retry jitter: random under UUID ids, the reference's fixed
        // middle sample under the deterministic test hook.
        let core = match config.ids {
            IdMode::Uuid => core.with_jitter(SeededJitter(crate::clock::Rng::from_os().next_u64())),
            IdMode::Sequential => core.with_jitter(FixedJitter::default()),
        };
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(SharedState {
                status: Some(AgentStatus::Idle),
                quiescent: true,
                summary: TurnSummary {
                    turn: core.turn(),
                    ..TurnSummary::default()
                },
                ..SharedState::default()
            }),
            cv: Condvar::new(),
        });
        let ids = Mutex::new(ShellIds::new(config.ids));
        let driver = Driver {
            core,
            config,
            toolset,
            workspace,
            policy,
            store,
            rx,
            tx: tx.clone(),
            shared: shared.clone(),
            subscribers: Vec::new(),
            streams: BTreeMap::new(),
            tools: BTreeMap::new(),
            approvals: BTreeMap::new(),
            deferred: VecDeque::new(),
            gate: None,
            threads: Vec::new(),
            disposing: false,
            summary_usage: None,
            retry_timer: None,
            handled: 0,
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
            Err(_) => crate::clock::Rng::from_os().uuid_v4().into(),
        };
        Message::user(id, vec![ContentBlock::text(text)])
    }

    fn submit(&self, msg: Msg) -> Result<(), ShellError> {
        if let Ok(mut s) = self.shared.state.lock() {
            s.submitted += 1;
        }
        self.tx.send(msg).map_err(|_| ShellError::Disposed)
    }

    /// Generic delivery (IB-6): `message` to `target`, waking the driver
    /// when `wakeup`.
    pub fn send_message(
        &self,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), ShellError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.submit(Msg::Send {
            message,
            target,
            wakeup,
            reply,
        })?;
        match answer.recv() {
            Ok(r) => r.map_err(ShellError::Input),
            Err(_) => Err(ShellError::Disposed),
        }
    }

    /// A user message that gets its own turn (`followup`); wakes the agent.
    pub fn send(&self, text: &str) -> Result<(), ShellError> {
        self.followup(text)
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
        let _ = self.submit(Msg::Cancel { cause, keep_inbox });
    }

    /// Answers an [`AgentEvent::ApprovalRequested`]. An unknown or stale id
    /// is ignored.
    pub fn answer_approval(&self, request: ApprovalRequestId, decision: ApprovalDecision) {
        let _ = self.submit(Msg::Approval {
            id: request.0,
            decision,
        });
    }

    /// A receiver of every live event from now on.
    pub fn subscribe(&self) -> Receiver<AgentEvent> {
        let (tx, rx) = mpsc::channel();
        let _ = self.submit(Msg::Subscribe(tx));
        rx
    }

    /// The session events so far (a copy).
    pub fn events(&self) -> Result<Vec<SessionEvent>, ShellError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.submit(Msg::Snapshot(reply))?;
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

    /// Waits until every call made before this one has been handled and
    /// the agent is idle with no latched wake (IB-13 `when_idle`); returns
    /// how the last turn ended.
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

    fn shutdown(&mut self) {
        if let Some(handle) = self.driver.take() {
            let _ = self.tx.send(Msg::Dispose);
            let _ = handle.join();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn absolute(p: &std::path::Path) -> Option<String> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(p)
    };
    abs.to_str().map(String::from)
}

/// The seams the std shell installs: the approval policy (`dsh-tools`
/// `PolicyHooks`: pre-execute decision, every `ask` deferred to the user)
/// and the provider's `prepare` (LC-15).
pub(crate) struct ShellHooks {
    pub(crate) policy: PolicyHooks,
    pub(crate) provider: Arc<dyn ModelProvider>,
}

impl Hooks for ShellHooks {
    fn prepare(
        &mut self,
        _cx: &mut HookCx<'_>,
        config: LlmCallConfig,
    ) -> Hook<Result<PreparedCall, HookError>> {
        Hook::Ready(
            self.provider
                .prepare(config)
                .map_err(|e| HookError::Llm(e.into_failure())),
        )
    }

    fn tool_pre_execute(
        &mut self,
        cx: &mut HookCx<'_>,
        exec: &ToolExecution,
    ) -> Hook<Result<PreToolDecision, HookError>> {
        self.policy.tool_pre_execute(cx, exec)
    }

    fn tool_approval(
        &mut self,
        cx: &mut HookCx<'_>,
        exec: &ToolExecution,
        reason: Option<&str>,
    ) -> Hook<ApprovalOutcome> {
        self.policy.tool_approval(cx, exec, reason)
    }

    fn tool_post_execute(
        &mut self,
        cx: &mut HookCx<'_>,
        exec: &ToolExecution,
        outcome: &ToolOutcome,
    ) -> Hook<Result<PostToolDecision, HookError>> {
        self.policy.tool_post_execute(cx, exec, outcome)
    }
}

/// How long the driver waits past a tool's timeout before it answers the
/// call itself.
const TOOL_GRACE: Duration = Duration::from_secs(2);

struct RunningTool {
    cancel: ToolCancel,
    deadline: Instant,
    name: String,
    timeout: Duration,
}

/// An input the driver applies after the current drain.
enum Deferred {
    FailModel { attempt: u64, error: LlmError },
    ToolResult { token: u64, outcome: ToolOutcome },
    Hook { id: u64, answer: HookAnswer },
}

struct Driver {
    core: core_agent::Agent,
    config: AgentConfig,
    toolset: Arc<ToolSet>,
    workspace: Workspace,
    policy: Arc<Mutex<ApprovalPolicy>>,
    store: Arc<dyn SessionStore>,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    shared: Arc<Shared>,
    subscribers: Vec<Sender<AgentEvent>>,
    streams: BTreeMap<u64, CancelToken>,
    tools: BTreeMap<u64, RunningTool>,
    /// Pending approvals: hook id → tool name.
    approvals: BTreeMap<u64, String>,
    deferred: VecDeque<Deferred>,
    /// A failed durability barrier: the next model call or tool body must
    /// not be dispatched (SM-14).
    gate: Option<String>,
    threads: Vec<JoinHandle<()>>,
    disposing: bool,
    summary_usage: Option<TokenUsage>,
    /// The armed retry deadline (core clock) and when it passes (monotonic).
    retry_timer: Option<(i64, Instant)>,
    /// Handle calls handled so far.
    handled: u64,
}

impl Driver {
    fn now(&self) -> i64 {
        self.config.clock.now_ms()
    }

    fn run(mut self) {
        loop {
            while let Some(d) = self.deferred.pop_front() {
                self.apply_deferred(d);
                self.drain();
            }
            self.publish_state();
            if self.disposing && self.core.is_quiescent() && self.tools.is_empty() {
                break;
            }
            let timeout = self.next_wake();
            let msg = match timeout {
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
                None => self.on_timers(),
            }
            self.drain();
        }
        // Quiescent (or orphaned): stop whatever still runs, persist, leave.
        for c in self.streams.values() {
            c.cancel();
        }
        for t in self.tools.values() {
            t.cancel.cancel();
        }
        if let Err(e) = self.store.release(self.core.id()) {
            self.broadcast(AgentEvent::Error(format!("session store: {e}")));
        }
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        if let Ok(mut s) = self.shared.state.lock() {
            s.stopped = true;
            s.quiescent = true;
            s.status = Some(AgentStatus::Idle);
        }
        self.shared.cv.notify_all();
    }

    fn next_wake(&mut self) -> Option<Duration> {
        let mut best: Option<Duration> = None;
        let now = Instant::now();
        match self.core.poll_timeout() {
            Some(deadline) => {
                let wake_at = match self.retry_timer {
                    Some((d, at)) if d == deadline => at,
                    _ => {
                        let ms = deadline.saturating_sub(self.now()).max(0);
                        let at = now + Duration::from_millis(ms as u64);
                        self.retry_timer = Some((deadline, at));
                        at
                    }
                };
                best = Some(wake_at.saturating_duration_since(now));
            }
            None => self.retry_timer = None,
        }
        for t in self.tools.values() {
            let d = t.deadline.saturating_duration_since(now);
            best = Some(best.map_or(d, |b| b.min(d)));
        }
        best
    }

    fn on_timers(&mut self) {
        let now = self.now();
        // The wait was measured against this clock; a fixed or manual test
        // clock does not move, so the deadline itself is the time.
        if let (Some(deadline), Some((_, at))) = (self.core.poll_timeout(), self.retry_timer)
            && Instant::now() >= at
        {
            self.retry_timer = None;
            let _ = self.core.handle_timeout(now.max(deadline));
            self.drain();
        }
        let instant = Instant::now();
        let expired: Vec<u64> = self
            .tools
            .iter()
            .filter(|(_, t)| instant >= t.deadline)
            .map(|(k, _)| *k)
            .collect();
        for token in expired {
            if let Some(t) = self.tools.remove(&token) {
                t.cancel.cancel();
                let outcome = ToolOutcome::error(format!(
                    "tool \"{}\" timed out after {} ms",
                    t.name,
                    t.timeout.as_millis()
                ));
                let _ = self.core.handle_tool_result(now, token, outcome);
                self.drain();
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        let now = self.now();
        let mut counted = true;
        match msg {
            Msg::Send {
                message,
                target,
                wakeup,
                reply,
            } => {
                let r = self.core.send(now, message, target, wakeup);
                self.drain();
                let _ = reply.send(r);
            }
            Msg::Cancel { cause, keep_inbox } => self.core.cancel(now, cause, keep_inbox),
            Msg::Approval { id, decision } => {
                if let Some(tool) = self.approvals.remove(&id) {
                    // TL-9 step 5; `AllowAlways` switches the tool to auto.
                    let outcome = match self.policy.lock() {
                        Ok(mut p) => p.resolve(&tool, Some(decision)),
                        Err(_) => ApprovalOutcome::Cancelled,
                    };
                    let _ = self
                        .core
                        .complete_hook(now, id, HookAnswer::ToolApproval(outcome));
                }
            }
            Msg::Subscribe(tx) => self.subscribers.push(tx),
            Msg::Snapshot(reply) => {
                let _ = reply.send(self.core.session().events().to_vec());
            }
            Msg::Chunk { attempt, chunk } => {
                counted = false;
                // A stale attempt (cancelled, retried) is refused: dropped.
                let _ = self.core.handle_chunk(now, attempt, chunk);
            }
            Msg::End { attempt } => {
                counted = false;
                self.streams.remove(&attempt);
                let _ = self.core.handle_stream_end(now, attempt);
            }
            Msg::ToolDone {
                token,
                outcome,
                events,
            } => {
                counted = false;
                // A result after the timeout answered the call is dropped.
                if self.tools.remove(&token).is_some() {
                    // Tool-owned events (TL-24) land before the result.
                    for data in events {
                        if let Err(e) = self.core.append_event(now, data, None) {
                            self.broadcast(AgentEvent::Error(format!("tool event refused: {e}")));
                        }
                    }
                    self.drain();
                    let _ = self.core.handle_tool_result(now, token, outcome);
                }
            }
            Msg::Dispose => {
                counted = false;
                if !self.disposing {
                    self.disposing = true;
                    self.core.cancel(now, CancelCause::Disposed, false);
                }
            }
        }
        if counted {
            // Published with the quiescence flag in `publish_state`, so a
            // waiter never sees the count without the state it produced.
            self.handled += 1;
        }
    }

    fn apply_deferred(&mut self, d: Deferred) {
        let now = self.now();
        match d {
            Deferred::FailModel { attempt, error } => {
                self.streams.remove(&attempt);
                let _ =
                    self.core
                        .handle_chunk(now, attempt, dsh_deepseek::error_finish(&error, false));
                let _ = self.core.handle_stream_end(now, attempt);
            }
            Deferred::ToolResult { token, outcome } => {
                let _ = self.core.handle_tool_result(now, token, outcome);
            }
            Deferred::Hook { id, answer } => {
                let _ = self.core.complete_hook(now, id, answer);
            }
        }
    }

    /// Drains the core's outputs completely (the single-mutation rule).
    fn drain(&mut self) {
        let mut batch: Vec<SessionEvent> = Vec::new();
        while let Some(out) = self.core.poll() {
            match out {
                Output::Appended(range) => {
                    let events = self
                        .core
                        .session()
                        .events()
                        .get(range.start as usize..range.end as usize)
                        .unwrap_or(&[]);
                    let start = batch.len();
                    batch.extend_from_slice(events);
                    for e in &batch[start..] {
                        self.note_event(e);
                        if !self.subscribers.is_empty() {
                            let ev = Arc::new(e.clone());
                            self.broadcast(AgentEvent::Event(ev));
                        }
                    }
                }
                Output::Status(status) => {
                    self.persist(&mut batch);
                    if let Ok(mut s) = self.shared.state.lock() {
                        s.status = Some(status);
                    }
                    self.broadcast(AgentEvent::Status(status));
                }
                Output::Notify(Notification::Error { error, .. }) => {
                    self.broadcast(AgentEvent::Error(error.message().to_string()));
                }
                Output::Notify(_) => {}
                Output::Flush(cp) => {
                    self.persist(&mut batch);
                    match self.store.flush(self.core.id()) {
                        // The barrier holds for whatever comes next.
                        Ok(()) => self.gate = None,
                        Err(e) => {
                            let text = format!("session store flush ({cp:?}): {e}");
                            self.broadcast(AgentEvent::Error(text.clone()));
                            if matches!(cp, Checkpoint::BeforeModel | Checkpoint::BeforeToolBody) {
                                self.gate = Some(text);
                            }
                        }
                    }
                }
                Output::CallModel(call) => {
                    self.persist(&mut batch);
                    if let Some(why) = self.gate.take() {
                        self.deferred.push_back(Deferred::FailModel {
                            attempt: call.attempt,
                            error: LlmError::coded("FLUSH_FAILED", &why),
                        });
                        continue;
                    }
                    self.start_stream(call.attempt, call.request);
                }
                Output::CancelModelCall { attempt } => {
                    if let Some(c) = self.streams.remove(&attempt) {
                        c.cancel();
                    }
                }
                Output::ExecuteTool(exec) => {
                    self.persist(&mut batch);
                    if let Some(why) = self.gate.take() {
                        self.deferred.push_back(Deferred::ToolResult {
                            token: exec.token,
                            outcome: ToolOutcome::error(why),
                        });
                        continue;
                    }
                    self.start_tool(exec);
                }
                Output::AbortTurn { .. } => {
                    for c in self.streams.values() {
                        c.cancel();
                    }
                    for t in self.tools.values() {
                        t.cancel.cancel();
                    }
                    for id in std::mem::take(&mut self.approvals).into_keys() {
                        self.deferred.push_back(Deferred::Hook {
                            id,
                            answer: HookAnswer::ToolApproval(ApprovalOutcome::Cancelled),
                        });
                    }
                }
                Output::Hook { id, call } => self.on_hook(id, call),
                _ => {}
            }
        }
        self.persist(&mut batch);
    }

    fn note_event(&mut self, e: &SessionEvent) {
        match e.data() {
            EventData::AssistantMessage(m) if m.usage.is_some() => self.summary_usage = m.usage,
            EventData::TurnStart(_) => self.summary_usage = None,
            EventData::TurnEnd(t) => {
                if let Ok(mut s) = self.shared.state.lock() {
                    s.summary = TurnSummary {
                        turn: t.turn,
                        reason: Some(t.reason.clone()),
                        usage: self.summary_usage,
                    };
                }
            }
            _ => {}
        }
    }

    /// Write-behind: hands the batch to the store's queue (flushed at the
    /// checkpoints).
    fn persist(&mut self, batch: &mut Vec<SessionEvent>) {
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.store.enqueue(self.core.id(), batch) {
            self.broadcast(AgentEvent::Error(format!("session store: {e}")));
        }
        batch.clear();
    }

    fn on_hook(&mut self, id: u64, call: HookCall) {
        let answer = match call {
            HookCall::ToolApproval { exec, .. } => {
                if self.disposing {
                    HookAnswer::ToolApproval(ApprovalOutcome::Cancelled)
                } else {
                    self.approvals.insert(id, exec.name.clone());
                    self.broadcast(AgentEvent::ApprovalRequested {
                        id: ApprovalRequestId(id),
                        tool: exec.name,
                        arguments: exec.raw_arguments,
                    });
                    return;
                }
            }
            // Only approvals are deferred by the shell's hooks; anything
            // else gets the reference default.
            HookCall::Assemble { default, .. } => HookAnswer::Assemble(Ok(default)),
            HookCall::PreStep { default, .. } => HookAnswer::PreStep(Ok(default)),
            HookCall::Request { seed, .. } => HookAnswer::Request(Ok(seed)),
            HookCall::Prepare { config } => HookAnswer::Prepare(Ok(PreparedCall::plain(config))),
            HookCall::RequestError { .. } => HookAnswer::RequestError(Ok(Recovery::GiveUp)),
            HookCall::TurnStopping { .. } => HookAnswer::TurnStopping(Ok(())),
            HookCall::ToolPreExecute { .. } => {
                HookAnswer::ToolPreExecute(Ok(PreToolDecision::Allow))
            }
            HookCall::ToolPostExecute { .. } => {
                HookAnswer::ToolPostExecute(Ok(PostToolDecision::accept()))
            }
            _ => {
                self.broadcast(AgentEvent::Error(String::from("unsupported deferred hook")));
                return;
            }
        };
        self.deferred.push_back(Deferred::Hook { id, answer });
    }

    fn broadcast(&mut self, event: AgentEvent) {
        if self.subscribers.is_empty() {
            return;
        }
        self.subscribers.retain(|s| s.send(event.clone()).is_ok());
    }

    fn start_stream(&mut self, attempt: u64, request: dsh_core::GenerateOptions) {
        let cancel = CancelToken::new();
        self.streams.insert(attempt, cancel.clone());
        let provider = self.config.provider.clone();
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("dsh-model-{attempt}"))
            .spawn(move || {
                match provider.stream(&request, &cancel) {
                    Ok(stream) => {
                        for item in stream {
                            let chunk = match item {
                                Ok(c) => c,
                                Err(e) => dsh_deepseek::error_finish(&e, cancel.is_cancelled()),
                            };
                            let last = matches!(chunk, StreamChunk::Finish { .. });
                            if tx.send(Msg::Chunk { attempt, chunk }).is_err() {
                                return;
                            }
                            if last && cancel.is_cancelled() {
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        let chunk = dsh_deepseek::error_finish(&e, cancel.is_cancelled());
                        let _ = tx.send(Msg::Chunk { attempt, chunk });
                    }
                }
                let _ = tx.send(Msg::End { attempt });
            });
        match spawned {
            Ok(h) => self.push_thread(h),
            Err(e) => self.deferred.push_back(Deferred::FailModel {
                attempt,
                error: LlmError::coded(
                    "UNKNOWN",
                    &format!("cannot start the model stream thread: {e}"),
                ),
            }),
        }
    }

    fn start_tool(&mut self, exec: ToolExecution) {
        let token = exec.token;
        let declared = self
            .core
            .config()
            .tools
            .get(&exec.name)
            .and_then(|d| d.timeout_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(|ms| Duration::from_millis(ms as u64));
        let timeout = declared.unwrap_or(self.config.tool_timeout);
        let cancel = ToolCancel::new();
        // The body enforces `timeout` itself (bash kills its group); the
        // driver answers for a body that overstays by the grace period.
        let deadline = Instant::now() + timeout + TOOL_GRACE;
        let sink = Arc::new(CollectingSink::new());
        let mut cx = ToolContext::new(self.workspace.clone())
            .with_cancel(cancel.clone())
            .with_events(sink.clone());
        cx.timeout = Some(timeout);
        self.tools.insert(
            token,
            RunningTool {
                cancel,
                deadline,
                name: exec.name.clone(),
                timeout,
            },
        );
        let tx = self.tx.clone();
        let toolset = self.toolset.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("dsh-tool-{}", exec.name))
            .spawn(move || {
                let outcome = toolset.execute(&exec, &cx);
                let events = sink.take();
                let _ = tx.send(Msg::ToolDone {
                    token,
                    outcome,
                    events,
                });
            });
        match spawned {
            Ok(h) => self.push_thread(h),
            Err(e) => {
                self.tools.remove(&token);
                self.deferred.push_back(Deferred::ToolResult {
                    token,
                    outcome: ToolOutcome::error(format!("cannot start the tool thread: {e}")),
                });
            }
        }
    }

    fn push_thread(&mut self, h: JoinHandle<()>) {
        self.threads.retain(|t| !t.is_finished());
        self.threads.push(h);
    }

    fn publish_state(&mut self) {
        let quiescent =
            self.core.is_quiescent() && self.deferred.is_empty() && self.tools.is_empty();
        if let Ok(mut s) = self.shared.state.lock() {
            s.processed = self.handled;
            s.quiescent = quiescent;
            s.status = Some(self.core.status());
        }
        self.shared.cv.notify_all();
    }
}
