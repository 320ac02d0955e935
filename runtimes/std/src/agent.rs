//! The [`Agent`] handle and its driver thread: a thin loop that carries the
//! kernel's effects to threads.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::workers::Workers;
use dsh_approval::ApprovalDecision;
use dsh_core::agent::{AgentStatus, CancelCause, InboxTarget, ModelCall, ToolExecution};
use dsh_core::session::{EventData, SessionEvent};
use dsh_core::{ContentBlock, Message, SessionId, Time};
pub use dsh_host::ShellError;
use dsh_host::{Clock, ModelProvider, job_token, run_model, run_side};
use dsh_runtime::exec::{self, Dispatch, Input, Job, Jobs};
use dsh_runtime::{AgentEvent, ApprovalRequestId, AskId, Ids, Kernel, Reply, TurnSummary};
use dsh_store::SessionStore;
use dsh_tools::{CancelToken as ToolCancel, ToolSet, Workspace};

pub use dsh_shell::{AgentConfig, LoopOptions};
use dsh_shell::{Answer, Callers, Host, Msg};

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
        let session = dsh_shell::create_session(&*store, session_id, &config.clock, &config.cwd)?;
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
        let (session, stored) = dsh_shell::resume_session(&*store, session_id, &config.clock)?;
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
        let child = dsh_shell::fork_session(&*store, from, at_seq, new_id, &config.clock)?;
        let stored = child.len();
        Agent::start(config, store, child, stored)
    }

    /// Runs an agent on a new session the caller built (a subagent's
    /// child, a seeded fork): its header is registered with the store and
    /// its seed events, if any, are written before the agent starts.
    pub fn adopt(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session: dsh_core::session::Session,
    ) -> Result<Agent, ShellError> {
        dsh_shell::adopt_session(&*store, &session)?;
        let stored = session.len();
        Agent::start(config, store, session, stored)
    }

    fn start(
        config: AgentConfig,
        store: Arc<dyn SessionStore>,
        session: dsh_core::session::Session,
        stored: u64,
    ) -> Result<Agent, ShellError> {
        let hosted = config.start(session, stored)?;
        let (kernel, ids) = (hosted.kernel, Mutex::new(hosted.ids));
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
        let io = Io {
            id: id.clone(),
            clock: hosted.clock,
            provider: hosted.provider,
            toolset: hosted.tools,
            workspace: hosted.workspace,
            store,
            tx: tx.clone(),
            shared: shared.clone(),
            callers: Callers::new(),
            jobs: Jobs::new(),
            workers: Workers::new(),
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
        let _ = self.submit(Msg::Feed(Box::new(input)));
    }

    /// Answers an [`AgentEvent::ApprovalRequested`]. An unknown or stale id
    /// is ignored.
    pub fn answer_approval(&self, request: ApprovalRequestId, decision: ApprovalDecision) {
        self.answer(request, Reply::Approval(decision));
    }

    /// Answers any ask ([`AgentEvent::ApprovalRequested`],
    /// [`AgentEvent::Asked`]). An unknown or stale id is ignored.
    pub fn answer(&self, request: ApprovalRequestId, reply: Reply) {
        let input = Input::Answer { id: request, reply };
        let _ = self.submit(Msg::Feed(Box::new(input)));
    }

    /// Appends a foreign event (a plugin's, e.g. `session/title`) at the
    /// end of the log; returns its seq. It is written with the next batch
    /// (at once when the agent is quiet).
    pub fn append_event(&self, data: EventData) -> Result<u64, ShellError> {
        let (reply, answer) = answer();
        self.submit(Msg::Append {
            data: Box::new(data),
            reply,
        })?;
        match answer.recv() {
            Ok(r) => r.map_err(ShellError::from),
            Err(_) => Err(ShellError::Disposed),
        }
    }

    /// A receiver of every live event from now on.
    pub fn subscribe(&self) -> Receiver<AgentEvent> {
        let (tx, rx) = mpsc::channel();
        let _ = self.submit(Msg::Subscribe(Box::new(move |e: &AgentEvent| {
            tx.send(e.clone()).is_ok()
        })));
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
        let (reply, answer) = answer();
        self.submit(Msg::Command {
            name: name.to_string(),
            args: Box::new(args),
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
        let (reply, answer) = answer();
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
            let _ = self.tx.send(Msg::Feed(Box::new(Input::Dispose)));
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
    let (reply, answer) = answer();
    submit(
        tx,
        shared,
        Msg::Send {
            message: Box::new(message),
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
    timer: Option<(Time, Instant)>,
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
    callers: Callers,
    jobs: Jobs,
    workers: Workers,
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
        self.io.settle(&mut self.kernel);
    }

    /// How long to wait for the kernel's next deadline: its distance from
    /// the kernel's clock when armed, measured on a monotonic clock (a
    /// wall clock that jumps, or a fixed test clock, moves no timer).
    fn next_wake(&mut self) -> Option<Duration> {
        let Some(deadline) = self.kernel.poll_timeout() else {
            self.timer = None;
            return None;
        };
        let now = Instant::now();
        let at = match self.timer {
            Some((d, at)) if d == deadline => at,
            _ => {
                // Capped (~35 years) so that `Instant` cannot overflow.
                let ms = deadline.millis_since(self.kernel.now()).min(1 << 40);
                let at = now + Duration::from_millis(ms);
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
        let counted = !matches!(msg, Msg::Work(_));
        // This shell tracks idleness and disposal itself: it sends neither
        // `WaitIdle` nor `Dispose`, so nothing comes back.
        let _ = dsh_shell::handle(&mut self.kernel, &mut self.io, msg);
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
    fn now(&mut self) -> Time {
        self.clock.now()
    }

    fn start_model(&mut self, call: ModelCall) -> Result<(), String> {
        let job = Job::Model(call.attempt);
        let cancel = job_token(&mut self.jobs, job);
        if !self.provider.blocks() {
            // A provider answering from memory: read in place on the
            // driver thread, its inputs queued for it, no hand-off.
            let tx = &self.tx;
            run_model(&*self.provider, &call, &cancel, |input| {
                tx.send(feed(input)).is_ok()
            });
            return Ok(());
        }
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

    fn start_side(&mut self, id: AskId, request: dsh_core::GenerateOptions) -> Result<(), String> {
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
        // Before anything the write releases (idle).
        if let Ok(mut s) = self.shared.state.lock() {
            s.store_error = store_error.map(str::to_string);
        }
    }

    fn command_done(&mut self, id: u64, result: &Result<serde_json::Value, String>) {
        self.callers.command_done(id, result);
    }

    fn publish(&mut self, event: AgentEvent) {
        if let AgentEvent::Status(s) = &event
            && let Ok(mut st) = self.shared.state.lock()
        {
            st.status = Some(*s);
        }
        self.callers.publish(&event);
    }
}

impl Host for Io {
    fn callers(&mut self) -> &mut Callers {
        &mut self.callers
    }

    /// Carries the call's effects before its caller is answered (the store
    /// is written on this thread, so no write is left running).
    fn settle(&mut self, kernel: &mut Kernel) {
        let _ = exec::carry(kernel, self);
        if !self.callers.has_subscribers() {
            kernel.set_publish_events(false);
        }
    }
}

/// An input from work (a stream, a tool body, a side call): not a handle
/// call, so not counted for `wait_idle`.
fn feed(input: Input) -> Msg {
    Msg::Work(Box::new(input))
}

/// A one-shot answer channel: the [`Answer`] a call carries and the
/// receiver its caller waits on.
fn answer<T: Send + 'static>() -> (Answer<T>, Receiver<T>) {
    let (tx, rx) = mpsc::sync_channel(1);
    (
        Box::new(move |value| {
            let _ = tx.send(value);
        }),
        rx,
    )
}
