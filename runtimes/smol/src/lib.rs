//! `dsh-smol`: the async dsh shell on [smol](https://docs.rs/smol).
//!
//! Each [`Agent`] is one task that owns its sans-IO core machine
//! ([`dsh_core::agent::Agent`]) and talks to the world through one channel:
//! handle calls, model-stream chunks, tool results and approval answers all
//! arrive as messages, are fed to the core as inputs, and the core's outputs
//! are drained completely after each one (design.md "Shells").
//!
//! Nothing blocks the executor:
//! - the DeepSeek client's blocking HTTP reader runs on the blocking pool
//!   (`smol::unblock`) and pushes chunks into the agent's channel; a
//!   cancelled attempt (`CancelModelCall`, `AbortTurn`, disposal) cancels
//!   the client's [`CancelToken`](dsh_deepseek::CancelToken), which
//!   interrupts the blocked read at once;
//! - tool bodies run on the blocking pool, raced against their timeout
//!   (TL-14), and are cancelled through their own token on `AbortTurn`;
//! - store writes run on the blocking pool. Appended events are kept in
//!   the core's log and written as one batch at each durability checkpoint
//!   (`Output::Flush`, loop.md SM-12/SM-13: before pre-step, before the
//!   model request, before a tool body, after `turn/end`) and at disposal;
//!   a failed write before the model request or a tool body stops that
//!   dispatch (SM-14);
//! - retry delays (`poll_timeout`) are `smol::Timer`s.
//!
//! Many agents share one executor: the test suite runs 200 in one process
//! against one mock server. Time comes from `SystemTime`, message ids are
//! UUID v4 from a per-agent RNG ([`ids::UuidIds`]).
//!
//! ```no_run
//! # async fn demo(config: dsh_smol::AgentConfig, store: std::sync::Arc<dyn dsh_store::SessionStore>) -> Result<(), dsh_smol::ShellError> {
//! use futures_core::Stream;
//! let agent = dsh_smol::Agent::create(config, store, "s1".into()).await?;
//! let events = agent.subscribe();
//! agent.send("list the files").await?;
//! let summary = agent.wait_idle(None).await?;
//! println!("turn {} ended {:?}", summary.turn, summary.reason);
//! agent.dispose().await;
//! # drop(events); Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod driver;
mod hooks;
pub mod ids;

use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_channel::{Receiver, Sender};
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::{AgentStatus, CancelCause, InboxTarget, InputError, ResumeError};
use dsh_core::session::{ForkError, SeedError, SessionEvent, TurnEndReason};
use dsh_core::{ContentBlock, LlmCallConfig, Message, SessionId, TokenUsage};
use dsh_deepseek::{ClientOptions, DeepSeekConfig};
use dsh_store::{SessionStore, StoreError};

pub use dsh_tools;
pub use dsh_tools::{ApprovalDecision, ApprovalMode, ApprovalPolicy, Tool, ToolSet};

use driver::Msg;

/// Everything needed to run an agent.
#[derive(Debug)]
pub struct AgentConfig {
    /// The DeepSeek adapter configuration (base URL, API-key variable,
    /// idle watchdog, models).
    pub model: DeepSeekConfig,
    /// Transport settings (credentials service, timeouts, proxy).
    pub client_options: ClientOptions,
    /// Provider route and model of the first request; effort, temperature
    /// and stop sequences fill the seed of every request that lacks them.
    pub call_config: LlmCallConfig,
    /// The system prompt, one section.
    pub system_prompt: Option<String>,
    /// The tools the model may call (`dsh-tools`); the file tools are
    /// confined to `cwd`.
    pub tools: ToolSet,
    /// `ask | auto | deny` per tool (TL-10); an `AllowAlways` answer
    /// switches the tool to `auto` for the rest of the session.
    pub approval: ApprovalPolicy,
    /// Deadline of a tool body without its own `timeoutMs` (TL-14);
    /// `Duration::ZERO`: none.
    pub tool_timeout: Duration,
    /// The working directory (recorded in the session header, given to tools).
    pub cwd: PathBuf,
    /// The route's retry policy (R-4); `None`: the R-3 defaults.
    pub retry_policy: Option<RetryPolicy>,
    /// Seed of the id/jitter RNG; `None`: random.
    pub id_seed: Option<u64>,
}

impl AgentConfig {
    /// A config for `call_config` over `model`, with no tools, auto
    /// approval, no tool deadline, the current directory, default retries.
    pub fn new(model: DeepSeekConfig, call_config: LlmCallConfig) -> Self {
        AgentConfig {
            model,
            client_options: ClientOptions::default(),
            call_config,
            system_prompt: None,
            tools: ToolSet::new(),
            approval: ApprovalPolicy::default(),
            tool_timeout: Duration::ZERO,
            cwd: std::env::current_dir().unwrap_or_default(),
            retry_policy: None,
            id_seed: None,
        }
    }
}

/// Why a shell call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShellError {
    /// The session store failed.
    Store(StoreError),
    /// The core refused the input (duplicate id, invalid message, ...).
    Input(InputError),
    /// The stored log cannot be resumed.
    Resume(ResumeError),
    /// The fork was refused (F4/F5/F7).
    Fork(ForkError),
    /// The stored log failed seed validation.
    Seed(SeedError),
    /// The configuration is invalid (adapter config, tool registry).
    Config(String),
    /// The agent's task has stopped (disposed).
    Closed,
    /// `wait_idle` gave up.
    Timeout,
}

impl fmt::Display for ShellError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShellError::Store(e) => write!(f, "session store: {e}"),
            ShellError::Input(e) => write!(f, "input refused: {e}"),
            ShellError::Resume(e) => write!(f, "cannot resume: {e}"),
            ShellError::Fork(e) => write!(f, "cannot fork: {e}"),
            ShellError::Seed(e) => write!(f, "stored log is invalid: {e}"),
            ShellError::Config(e) => write!(f, "invalid configuration: {e}"),
            ShellError::Closed => f.write_str("the agent has been disposed"),
            ShellError::Timeout => f.write_str("timed out waiting for the agent to go idle"),
        }
    }
}

impl std::error::Error for ShellError {}

impl From<StoreError> for ShellError {
    fn from(e: StoreError) -> Self {
        ShellError::Store(e)
    }
}

/// Identifies one pending approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ApprovalRequestId(pub u64);

/// What subscribers see, live.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AgentEvent {
    /// The public status changed (LC-3).
    Status(AgentStatus),
    /// A session event was appended (every event, in seq order; chunks
    /// included, so this is the live text).
    Event(Arc<SessionEvent>),
    /// A tool call waits for [`Agent::answer_approval`].
    ApprovalRequested {
        /// Pass back with the decision.
        id: ApprovalRequestId,
        /// The tool.
        tool: String,
        /// The raw argument text.
        arguments: String,
    },
    /// A failure with no log position (store write, `agent/error`).
    Error(String),
}

/// How the last turn ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnSummary {
    /// The turn number (0: no turn yet).
    pub turn: u64,
    /// Its `turn/end` reason (`None` before the first turn).
    pub reason: Option<TurnEndReason>,
    /// Usage of the turn's last model call, when reported.
    pub usage: Option<TokenUsage>,
}

/// A live event subscription: a [`futures_core::Stream`] of
/// [`AgentEvent`]s that ends when the agent stops.
#[derive(Debug)]
pub struct Subscription {
    rx: Pin<Box<Receiver<AgentEvent>>>,
}

impl Subscription {
    /// The next event, or `None` once the agent has stopped.
    pub async fn next(&self) -> Option<AgentEvent> {
        self.rx.recv().await.ok()
    }

    /// An event already queued, without waiting.
    pub fn try_next(&self) -> Option<AgentEvent> {
        self.rx.try_recv().ok()
    }
}

impl futures_core::Stream for Subscription {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        self.rx.as_mut().poll_next(cx)
    }
}

/// The handle of one running agent. Dropping it disposes the agent (the
/// turn is cancelled with cause `disposed`, the log is flushed, the task
/// stops) without waiting; [`Agent::dispose`] waits.
pub struct Agent {
    id: SessionId,
    tx: Sender<Msg>,
    running: Arc<AtomicBool>,
    task: Option<smol::Task<()>>,
    ids: std::sync::Mutex<ids::UuidIds>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// A fresh session `session_id` in `store` (nothing is written until
    /// the first checkpoint).
    pub async fn create(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session_id: SessionId,
    ) -> Result<Agent, ShellError> {
        let session = driver::create_session(&config, &store, session_id).await?;
        driver::spawn(config, store, session, 0)
    }

    /// Resumes a stored session: the store's load commits crash repair (an
    /// interrupted turn is closed), the core rebuilds turn numbering and
    /// the inbox (V30, IB-8), and a `session/end-seed` marker is appended
    /// unless the log already ends with one (ES3).
    pub async fn resume(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session_id: &SessionId,
    ) -> Result<Agent, ShellError> {
        let (session, flushed) = driver::resume_session(&store, session_id).await?;
        driver::spawn(config, store, session, flushed)
    }

    /// Forks stored session `from` at `at_seq` (default: its last event)
    /// into a new session `new_id` (session.md F3-F8): the child's seed is
    /// written to `store` at once.
    pub async fn fork(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        from: &SessionId,
        at_seq: Option<u64>,
        new_id: SessionId,
    ) -> Result<Agent, ShellError> {
        let session = driver::fork_session(&store, from, at_seq, new_id).await?;
        let flushed = session.len();
        driver::spawn(config, store, session, flushed)
    }

    fn user_message(&self, text: &str) -> Message {
        let id = match self.ids.lock() {
            Ok(mut ids) => ids.uuid(),
            Err(_) => ids::uuid_v4(&mut fastrand::Rng::new()),
        };
        Message::user(id, vec![ContentBlock::text(text)])
    }

    async fn deliver(
        &self,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), ShellError> {
        let (reply, answer) = async_channel::bounded(1);
        self.tx
            .send(Msg::Send {
                message,
                target,
                wakeup,
                reply,
            })
            .await
            .map_err(|_| ShellError::Closed)?;
        match answer.recv().await {
            Ok(r) => r.map_err(ShellError::Input),
            Err(_) => Err(ShellError::Closed),
        }
    }

    /// A user prompt that gets its own turn (`followup`, IB-6).
    pub async fn send(&self, text: &str) -> Result<(), ShellError> {
        self.followup(text).await
    }

    /// `followup(m)`: next-turn, wakes the agent.
    pub async fn followup(&self, text: &str) -> Result<(), ShellError> {
        let m = self.user_message(text);
        self.deliver(m, InboxTarget::NextTurn, true).await
    }

    /// `steer(m)`: entered at the next step boundary, wakes the agent.
    pub async fn steer(&self, text: &str) -> Result<(), ShellError> {
        let m = self.user_message(text);
        self.deliver(m, InboxTarget::NextStep, true).await
    }

    /// `inject(m)`: next-step context that does not wake the agent.
    pub async fn inject(&self, message: Message) -> Result<(), ShellError> {
        self.deliver(message, InboxTarget::NextStep, false).await
    }

    /// `cancel(cause, keep_inbox)` (LC-33): the running turn ends
    /// `aborted`; the model stream and tool body in flight are interrupted.
    pub async fn cancel(&self, cause: CancelCause, keep_inbox: bool) {
        let _ = self.tx.send(Msg::Cancel { cause, keep_inbox }).await;
    }

    /// Waits until the agent is idle with nothing pending (IB-13
    /// `when_idle`) and returns how the last turn ended.
    pub async fn wait_idle(&self, timeout: Option<Duration>) -> Result<TurnSummary, ShellError> {
        let (reply, answer) = async_channel::bounded(1);
        self.tx
            .send(Msg::WaitIdle(reply))
            .await
            .map_err(|_| ShellError::Closed)?;
        let wait = async { answer.recv().await.map_err(|_| ShellError::Closed) };
        match timeout {
            None => wait.await,
            Some(t) => {
                smol::future::or(wait, async {
                    smol::Timer::after(t).await;
                    Err(ShellError::Timeout)
                })
                .await
            }
        }
    }

    /// A new live subscription; it sees events from now on.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = async_channel::unbounded();
        let _ = self.tx.try_send(Msg::Subscribe(tx));
        Subscription { rx: Box::pin(rx) }
    }

    /// Answers [`AgentEvent::ApprovalRequested`] `request`.
    pub async fn answer_approval(&self, request: ApprovalRequestId, decision: ApprovalDecision) {
        let _ = self
            .tx
            .send(Msg::Approval {
                id: request.0,
                decision,
            })
            .await;
    }

    /// Idle or running (LC-3).
    pub fn status(&self) -> AgentStatus {
        if self.running.load(Ordering::Acquire) {
            AgentStatus::Running
        } else {
            AgentStatus::Idle
        }
    }

    /// The session id (also the agent id).
    pub fn session_id(&self) -> &SessionId {
        &self.id
    }

    /// Disposes the agent and waits: a running turn is cancelled with cause
    /// `disposed` (LC-40), in-flight work is interrupted, the log is
    /// flushed and the store releases the session.
    pub async fn dispose(mut self) {
        let (reply, done) = async_channel::bounded(1);
        if self.tx.send(Msg::Dispose(Some(reply))).await.is_ok() {
            let _ = done.recv().await;
        }
        if let Some(task) = self.task.take() {
            task.await;
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.tx.try_send(Msg::Dispose(None));
        if let Some(task) = self.task.take() {
            task.detach();
        }
    }
}
