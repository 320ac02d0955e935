//! `dsh-smol`: the async dsh runtime on [smol](https://docs.rs/smol).
//!
//! Each [`Agent`] is one task that owns a runtime kernel
//! ([`dsh_runtime::Kernel`]) and talks to the world through one channel:
//! handle calls, model-stream chunks and tool results arrive as messages,
//! are fed to the kernel with `now`, and its effects are drained completely
//! after each one. Every decision (the flush gate and checkpoint batching,
//! tool deadlines and abort, approvals, create / resume / fork) is the
//! kernel's, the same as in `dsh-std` (see `docs/architecture.md`, "Floors").
//!
//! Nothing blocks the executor:
//! - model streams ([`AgentConfig::provider`], a [`ModelProvider`] such as
//!   the DeepSeek client) are read on the blocking pool
//!   (`smol::unblock`); a cancelled attempt cancels the stream's
//!   [`CancelToken`](dsh_host::CancelToken), which interrupts the
//!   blocked read at once. A provider that answers from memory
//!   ([`ModelProvider::blocks`] `false`, such as
//!   [`dsh_host::ScriptedProvider`]) is read in place by the agent task;
//! - tool bodies run on the blocking pool and are told to stop through
//!   their own token;
//! - store writes (one batch per durability checkpoint, SM-12 to SM-14)
//!   run on the blocking pool, or in place for a store in memory
//!   ([`SessionStore::append_blocks`] `false`);
//! - the kernel's deadlines (`poll_timeout`) are `smol::Timer`s.
//!
//! Many agents share one executor: the test suite runs 200 in one process
//! against one mock server.
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

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod driver;

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_channel::{Receiver, Sender};
use dsh_core::agent::{AgentStatus, CancelCause, InboxTarget};
use dsh_core::{ContentBlock, Message, SessionId};
use dsh_runtime::Ids;
use dsh_store::SessionStore;

pub use dsh_approval::{ApprovalDecision, ApprovalMode, ApprovalPolicy};
pub use dsh_host::{Clock, ModelProvider, ShellError};
pub use dsh_runtime::{AgentEvent, ApprovalRequestId, IdMode, Plugin, Reply, TurnSummary};
pub use dsh_shell::{AgentConfig, LoopOptions};
pub use dsh_tools;
pub use dsh_tools::{Tool, ToolSet};

use dsh_runtime::exec::Input;
use dsh_shell::{Answer, Msg};

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
    ids: std::sync::Mutex<Ids>,
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
        let (s, clock, cwd) = (store.clone(), config.clock.clone(), config.cwd.clone());
        let session =
            smol::unblock(move || dsh_shell::create_session(&*s, session_id, &clock, &cwd)).await?;
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
        let (s, clock, id) = (store.clone(), config.clock.clone(), session_id.clone());
        let (session, flushed) =
            smol::unblock(move || dsh_shell::resume_session(&*s, &id, &clock)).await?;
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
        let (s, clock, from) = (store.clone(), config.clock.clone(), from.clone());
        let session =
            smol::unblock(move || dsh_shell::fork_session(&*s, &from, at_seq, new_id, &clock))
                .await?;
        let flushed = session.len();
        driver::spawn(config, store, session, flushed)
    }

    fn user_message(&self, text: &str) -> Message {
        let id = match self.ids.lock() {
            Ok(mut ids) => ids.user_message_id(),
            Err(e) => e.into_inner().user_message_id(),
        };
        Message::user(id, vec![ContentBlock::text(text)])
    }

    async fn deliver(
        &self,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), ShellError> {
        let (reply, answer) = answer();
        self.tx
            .send(Msg::Send {
                message: Box::new(message),
                target,
                wakeup,
                reply,
            })
            .await
            .map_err(|_| ShellError::Disposed)?;
        match answer.recv().await {
            Ok(r) => r.map_err(ShellError::from),
            Err(_) => Err(ShellError::Disposed),
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
        let input = Input::Cancel { cause, keep_inbox };
        let _ = self.tx.send(Msg::Feed(Box::new(input))).await;
    }

    /// Waits until the agent is idle with nothing pending (IB-13
    /// `when_idle`) and returns how the last turn ended.
    pub async fn wait_idle(&self, timeout: Option<Duration>) -> Result<TurnSummary, ShellError> {
        let (reply, answer) = answer();
        self.tx
            .send(Msg::WaitIdle(reply))
            .await
            .map_err(|_| ShellError::Disposed)?;
        let wait = async { answer.recv().await.map_err(|_| ShellError::Disposed) };
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

    /// Runs plugin command `name` (maintenance while idle, LC-39) and
    /// returns its result.
    pub async fn command(
        &self,
        name: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, ShellError> {
        let (reply, answer) = answer();
        self.tx
            .send(Msg::Command {
                name: name.to_string(),
                args: Box::new(args),
                reply,
            })
            .await
            .map_err(|_| ShellError::Disposed)?;
        let result = answer.recv().await.map_err(|_| ShellError::Disposed)?;
        result.map_err(ShellError::Command)
    }

    /// `compactNow` (loop.md CP-3 c): the compaction plugin's manual run
    /// (command `"compact"`), while idle.
    pub async fn compact_now(&self) -> Result<serde_json::Value, ShellError> {
        self.command("compact", serde_json::json!({})).await
    }

    /// A new live subscription; it sees events from now on.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = async_channel::unbounded();
        let sink = move |e: &AgentEvent| tx.try_send(e.clone()).is_ok();
        let _ = self.tx.try_send(Msg::Subscribe(Box::new(sink)));
        Subscription { rx: Box::pin(rx) }
    }

    /// Answers [`AgentEvent::ApprovalRequested`] `request`.
    pub async fn answer_approval(&self, request: ApprovalRequestId, decision: ApprovalDecision) {
        self.answer(request, Reply::Approval(decision)).await;
    }

    /// Answers any ask ([`AgentEvent::ApprovalRequested`],
    /// [`AgentEvent::Asked`]); an unknown or stale id is ignored.
    pub async fn answer(&self, request: ApprovalRequestId, reply: Reply) {
        let _ = self
            .tx
            .send(Msg::Feed(Box::new(Input::Answer { id: request, reply })))
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
    pub async fn dispose(self) {
        let _ = self.close().await;
    }

    /// [`dispose`](Self::dispose), then reports whether the whole log
    /// reached the store: [`ShellError::NotSaved`] with the last failed
    /// write's message when it did not.
    pub async fn close(mut self) -> Result<(), ShellError> {
        let (reply, done) = answer();
        let mut unsaved = None;
        if self.tx.send(Msg::Dispose(Some(reply))).await.is_ok() {
            unsaved = done.recv().await.ok().flatten();
        }
        if let Some(task) = self.task.take() {
            task.await;
        }
        unsaved.map_or(Ok(()), |e| Err(ShellError::NotSaved(e)))
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

/// A one-shot answer channel: the [`Answer`] a call carries and the
/// receiver its caller waits on.
fn answer<T: Send + 'static>() -> (Answer<T>, Receiver<T>) {
    let (tx, rx) = async_channel::bounded(1);
    (
        Box::new(move |value| {
            let _ = tx.try_send(value);
        }),
        rx,
    )
}
