//! The agent task: one loop that owns the core machine, feeds it every
//! input that arrives on the agent's channel, and drains its outputs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_channel::{Receiver, Sender};
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    Agent as Core, AgentConfig as CoreConfig, AgentOptions, AgentStatus, ApprovalOutcome,
    CancelCause, Checkpoint, HookAnswer, HookCall, HookError, InboxTarget, InputError, ModelCall,
    Notification, Output, ToolExecution, prompt::PromptSection,
};
use dsh_core::session::{EventData, Session, SessionEvent, SessionHeader};
use dsh_core::{Message, SessionId, StreamChunk};
use dsh_deepseek::{CancelToken, DeepSeekClient};
use dsh_store::{Cancel, SessionStore, StoreError};

use crate::hooks::ShellHooks;
use crate::ids::{UuidIds, now_ms};
use crate::{Agent, AgentConfig, AgentEvent, ApprovalRequestId, ShellError, TurnSummary};
use dsh_tools::{
    ApprovalDecision, ApprovalPolicy, CancelToken as ToolCancel, CollectingSink, ToolContext,
    ToolSet, Workspace,
};

/// Everything that reaches an agent task.
pub(crate) enum Msg {
    Send {
        message: Message,
        target: InboxTarget,
        wakeup: bool,
        reply: Sender<Result<(), InputError>>,
    },
    Cancel {
        cause: CancelCause,
        keep_inbox: bool,
    },
    Subscribe(Sender<AgentEvent>),
    WaitIdle(Sender<TurnSummary>),
    Approval {
        id: u64,
        decision: ApprovalDecision,
    },
    Dispose(Option<Sender<()>>),
    Chunk {
        attempt: u64,
        chunk: StreamChunk,
    },
    StreamEnd {
        attempt: u64,
    },
    ToolDone {
        token: u64,
        outcome: ToolOutcome,
        /// Tool-owned events the body emitted (TL-24), appended first.
        events: Vec<EventData>,
    },
}

#[allow(clippy::large_enum_variant)] // one per loop iteration, never stored
enum Wake {
    Msg(Msg),
    Timer,
    Closed,
}

fn unix_ms_u64() -> u64 {
    u64::try_from(now_ms()).unwrap_or(0)
}

/// A new session registered in `store`.
pub(crate) async fn create_session(
    config: &AgentConfig,
    store: &Arc<dyn SessionStore>,
    id: SessionId,
) -> Result<Session, ShellError> {
    let mut header = SessionHeader::new(id, unix_ms_u64());
    header.cwd = Some(config.cwd.to_string_lossy().into_owned());
    header
        .validate()
        .map_err(|e| ShellError::Config(e.to_string()))?;
    let store = store.clone();
    let h = header.clone();
    smol::unblock(move || store.create(h)).await?;
    Ok(Session::new(header))
}

/// A stored session, repaired and marked resumed; returns how much of it
/// is already stored.
pub(crate) async fn resume_session(
    store: &Arc<dyn SessionStore>,
    id: &SessionId,
) -> Result<(Session, u64), ShellError> {
    let store = store.clone();
    let sid = id.clone();
    let loaded = smol::unblock(move || store.load(&sid)).await?;
    let stored = loaded.events.len() as u64;
    let mut session = Session::restore(loaded.header, loaded.events).map_err(ShellError::Seed)?;
    session
        .mark_end_seed(now_ms())
        .map_err(|e| ShellError::Input(InputError::Append(e)))?;
    Ok((session, stored))
}

/// The child of `from` at `at_seq`, with its seed written to `store`.
pub(crate) async fn fork_session(
    store: &Arc<dyn SessionStore>,
    from: &SessionId,
    at_seq: Option<u64>,
    new_id: SessionId,
) -> Result<Session, ShellError> {
    let reader = store.clone();
    let parent_id = from.clone();
    let parent = smol::unblock(move || reader.inspect(&parent_id, &Cancel::new())).await?;
    let parent = Session::restore(parent.header, parent.events).map_err(ShellError::Seed)?;
    let child = parent
        .fork(at_seq, new_id, now_ms())
        .map_err(ShellError::Fork)?;
    let writer = store.clone();
    let header = child.header().clone();
    let events = child.events().to_vec();
    smol::unblock(move || -> Result<(), StoreError> {
        let id = header.id.clone();
        writer.create(header)?;
        writer.append(&id, &events)
    })
    .await?;
    Ok(child)
}

/// Builds the core machine and starts the agent task.
pub(crate) fn spawn(
    config: AgentConfig,
    store: Arc<dyn SessionStore>,
    session: Session,
    flushed: u64,
) -> Result<Agent, ShellError> {
    let client = DeepSeekClient::with_options(config.model.clone(), config.client_options.clone())
        .map_err(|e| ShellError::Config(e.to_string()))?;
    let registry = config
        .tools
        .registry()
        .map_err(|e| ShellError::Config(format!("{e:?}")))?;
    let workspace = Workspace::new(config.cwd.clone()).map_err(|e| {
        ShellError::Config(format!(
            "workspace {} is not usable: {e}",
            config.cwd.display()
        ))
    })?;
    let policy = Arc::new(Mutex::new(config.approval));
    let call = &config.call_config;
    let core_config = CoreConfig {
        options: AgentOptions {
            provider: Some(call.provider.clone()),
            model: Some(call.model.clone()),
            max_tokens: call.max_tokens,
        },
        sections: config
            .system_prompt
            .iter()
            .map(|text| PromptSection::new("system", 0, text.clone()))
            .collect(),
        tools: registry,
        retry_executor: true,
        ..CoreConfig::default()
    };
    let (core_ids, jitter, handle_ids) = match config.id_seed {
        Some(seed) => (
            UuidIds::with_seed(seed),
            UuidIds::with_seed(seed ^ 0x9E37_79B9_7F4A_7C15),
            UuidIds::with_seed(seed ^ 0xD1B5_4A32_D192_ED03),
        ),
        None => (UuidIds::new(), UuidIds::new(), UuidIds::new()),
    };
    let hooks = ShellHooks {
        policy: policy.clone(),
        retry_policy: config.retry_policy.clone().unwrap_or_default(),
        call_config: config.call_config.clone(),
    };
    let core = Core::new(core_config, session)
        .map_err(ShellError::Resume)?
        .with_hooks(hooks)
        .with_ids(core_ids)
        .with_jitter(jitter);
    let id = core.id().clone();
    let (tx, rx) = async_channel::unbounded();
    let running = Arc::new(AtomicBool::new(false));
    let driver = Driver {
        core,
        id: id.clone(),
        store,
        client: Arc::new(client),
        tools: Arc::new(config.tools),
        workspace,
        policy,
        tool_timeout: config.tool_timeout,
        rx,
        tx: tx.clone(),
        running: running.clone(),
        subscribers: Vec::new(),
        idle_waiters: Vec::new(),
        flushed,
        flush_failed: None,
        model: None,
        tool: None,
        approvals: BTreeMap::new(),
        disposing: None,
    };
    let task = smol::spawn(driver.run());
    Ok(Agent {
        id,
        tx,
        running,
        task: Some(task),
        ids: Mutex::new(handle_ids),
    })
}

/// The next message, or the retry timer (`poll_timeout`) firing.
async fn next(rx: &Receiver<Msg>, deadline: Option<i64>) -> Wake {
    let recv = async {
        match rx.recv().await {
            Ok(m) => Wake::Msg(m),
            Err(_) => Wake::Closed,
        }
    };
    match deadline {
        None => recv.await,
        Some(deadline) => {
            let wait = u64::try_from(deadline.saturating_sub(now_ms())).unwrap_or(0);
            smol::future::or(recv, async move {
                smol::Timer::after(Duration::from_millis(wait)).await;
                Wake::Timer
            })
            .await
        }
    }
}

struct Driver {
    core: Core,
    id: SessionId,
    store: Arc<dyn SessionStore>,
    client: Arc<DeepSeekClient>,
    tools: Arc<ToolSet>,
    tool_timeout: Duration,
    workspace: Workspace,
    policy: Arc<Mutex<ApprovalPolicy>>,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    running: Arc<AtomicBool>,
    subscribers: Vec<Sender<AgentEvent>>,
    idle_waiters: Vec<Sender<TurnSummary>>,
    /// Events with `seq < flushed` are in the store.
    flushed: u64,
    /// A failed checkpoint write that must stop the next dispatch (SM-14).
    flush_failed: Option<String>,
    /// The model attempt in flight and its cancel token.
    model: Option<(u64, CancelToken)>,
    /// The tool body in flight (core token) and its cancel token.
    tool: Option<(u64, ToolCancel)>,
    /// Pending approval requests: hook id to tool name.
    approvals: BTreeMap<u64, String>,
    /// Set once disposal began: who waits for it.
    disposing: Option<Vec<Sender<()>>>,
}

impl Driver {
    async fn run(mut self) {
        loop {
            let deadline = self.core.poll_timeout();
            match next(&self.rx, deadline).await {
                Wake::Msg(msg) => self.handle(msg),
                Wake::Timer => {
                    let _ = self.core.handle_timeout(now_ms());
                }
                Wake::Closed => break,
            }
            self.drain().await;
            if self.core.is_quiescent() {
                self.settle().await;
                if self.disposing.is_some() {
                    break;
                }
            }
        }
        self.finish().await;
    }

    fn handle(&mut self, msg: Msg) {
        let now = now_ms();
        match msg {
            Msg::Send {
                message,
                target,
                wakeup,
                reply,
            } => {
                let r = if self.disposing.is_some() {
                    Err(InputError::NotAllowedNow("the agent is being disposed"))
                } else {
                    self.core.send(now, message, target, wakeup)
                };
                let _ = reply.try_send(r);
            }
            Msg::Cancel { cause, keep_inbox } => self.core.cancel(now, cause, keep_inbox),
            Msg::Subscribe(tx) => self.subscribers.push(tx),
            Msg::WaitIdle(reply) => self.idle_waiters.push(reply),
            Msg::Approval { id, decision } => {
                if let Some(tool) = self.approvals.remove(&id) {
                    let outcome = self
                        .policy
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .resolve(&tool, Some(decision));
                    let _ = self
                        .core
                        .complete_hook(now, id, HookAnswer::ToolApproval(outcome));
                }
            }
            Msg::Dispose(reply) => {
                let waiters = self.disposing.get_or_insert_with(Vec::new);
                waiters.extend(reply);
                self.core.cancel(now, CancelCause::Disposed, false);
                if let Some((_, cancel)) = self.model.take() {
                    cancel.cancel();
                }
            }
            Msg::Chunk { attempt, chunk } => {
                if self.model.as_ref().is_some_and(|(a, _)| *a == attempt) {
                    let _ = self.core.handle_chunk(now, attempt, chunk);
                }
            }
            Msg::StreamEnd { attempt } => {
                if self.model.as_ref().is_some_and(|(a, _)| *a == attempt) {
                    self.model = None;
                    let _ = self.core.handle_stream_end(now, attempt);
                }
            }
            Msg::ToolDone {
                token,
                outcome,
                events,
            } => {
                if self.tool.as_ref().is_some_and(|(t, _)| *t == token) {
                    self.tool = None;
                    for data in events {
                        if let Err(e) = self.core.append_event(now, data, None) {
                            self.publish(AgentEvent::Error(format!("tool event refused: {e}")));
                        }
                    }
                    let _ = self.core.handle_tool_result(now, token, outcome);
                }
            }
        }
    }

    /// Drains the core completely, carrying out each output.
    async fn drain(&mut self) {
        while let Some(output) = self.core.poll() {
            match output {
                Output::Appended(range) => self.publish_events(range.start, range.end),
                Output::Status(status) => {
                    self.running
                        .store(status == AgentStatus::Running, Ordering::Release);
                    self.publish(AgentEvent::Status(status));
                }
                Output::Notify(Notification::Error { error, .. }) => {
                    self.publish(AgentEvent::Error(error.to_string()));
                }
                Output::Notify(_) => {}
                Output::Flush(checkpoint) => {
                    if let Err(e) = self.flush().await {
                        let message = format!("session store write failed: {e}");
                        self.publish(AgentEvent::Error(message.clone()));
                        if matches!(
                            checkpoint,
                            Checkpoint::BeforeModel | Checkpoint::BeforeToolBody
                        ) {
                            self.flush_failed = Some(message);
                        }
                    }
                }
                Output::CallModel(call) => match self.flush_failed.take() {
                    // SM-14: a failed checkpoint stops the dispatch.
                    Some(message) => {
                        let _ = self.core.handle_stream_error(
                            now_ms(),
                            call.attempt,
                            HookError::msg(message),
                        );
                    }
                    None => self.start_model(call),
                },
                Output::CancelModelCall { attempt } => {
                    if self.model.as_ref().is_some_and(|(a, _)| *a == attempt)
                        && let Some((_, cancel)) = self.model.take()
                    {
                        cancel.cancel();
                    }
                }
                Output::ExecuteTool(exec) => match self.flush_failed.take() {
                    Some(message) => {
                        let _ = self.core.handle_tool_result(
                            now_ms(),
                            exec.token,
                            ToolOutcome::error(message),
                        );
                    }
                    None => self.start_tool(exec),
                },
                Output::AbortTurn { .. } => self.abort_in_flight(),
                Output::Hook { id, call } => self.hook(id, call),
                _ => {}
            }
        }
    }

    /// `AbortTurn`: the tool body is told to stop and the call is answered
    /// as aborted at once; pending approvals are cancelled (TL-10).
    fn abort_in_flight(&mut self) {
        let now = now_ms();
        if let Some((token, cancel)) = self.tool.take() {
            cancel.cancel();
            let _ = self
                .core
                .handle_tool_result(now, token, ToolOutcome::aborted());
        }
        for (id, tool) in std::mem::take(&mut self.approvals) {
            let outcome = self
                .policy
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .resolve(&tool, None);
            let _ = self
                .core
                .complete_hook(now, id, HookAnswer::ToolApproval(outcome));
        }
    }

    fn hook(&mut self, id: u64, call: HookCall) {
        match call {
            HookCall::ToolApproval { exec, .. } => {
                if self.disposing.is_some() {
                    let _ = self.core.complete_hook(
                        now_ms(),
                        id,
                        HookAnswer::ToolApproval(ApprovalOutcome::Cancelled),
                    );
                    return;
                }
                self.approvals.insert(id, exec.name.clone());
                self.publish(AgentEvent::ApprovalRequested {
                    id: ApprovalRequestId(id),
                    tool: exec.name,
                    arguments: exec.raw_arguments,
                });
            }
            other => {
                // The shell's hooks defer nothing else.
                self.publish(AgentEvent::Error(format!(
                    "unexpected deferred hook: {other:?}"
                )));
            }
        }
    }

    fn start_model(&mut self, call: ModelCall) {
        let cancel = CancelToken::new();
        self.model = Some((call.attempt, cancel.clone()));
        let tx = self.tx.clone();
        let client = self.client.clone();
        let attempt = call.attempt;
        let request = call.request;
        smol::unblock(move || {
            // AC-6: adapter failures arrive as the terminal `finish` chunk.
            for chunk in client.stream_chunks(&request, &cancel) {
                if tx.send_blocking(Msg::Chunk { attempt, chunk }).is_err() {
                    return;
                }
            }
            let _ = tx.send_blocking(Msg::StreamEnd { attempt });
        })
        .detach();
    }

    /// Runs the body on the blocking pool (`dsh-tools` dispatch: unknown
    /// tools, argument validation, panics, cancellation), raced against its
    /// deadline (TL-14). Tool-owned events are collected and appended before
    /// the result.
    fn start_tool(&mut self, exec: ToolExecution) {
        let deadline = self
            .core
            .config()
            .tools
            .get(&exec.name)
            .and_then(|d| d.timeout_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(|ms| Duration::from_millis(ms.ceil() as u64))
            .or_else(|| Some(self.tool_timeout).filter(|d| !d.is_zero()));
        let cancel = ToolCancel::new();
        self.tool = Some((exec.token, cancel.clone()));
        let sink = Arc::new(CollectingSink::new());
        let mut ctx = ToolContext::new(self.workspace.clone())
            .with_cancel(cancel.clone())
            .with_events(sink.clone());
        ctx.timeout = deadline;
        let tools = self.tools.clone();
        let tx = self.tx.clone();
        let token = exec.token;
        smol::spawn(async move {
            let body = smol::unblock(move || {
                let outcome = tools.execute(&exec, &ctx);
                (outcome, sink.take())
            });
            let (outcome, events) = match deadline {
                None => body.await,
                Some(limit) => {
                    smol::future::or(body, async move {
                        smol::Timer::after(limit).await;
                        cancel.cancel();
                        let ms = limit.as_millis();
                        // TL-14.
                        let outcome = ToolOutcome::coded_error(
                            format!("tool call timed out after {ms}ms"),
                            "ToolTimeoutError",
                            "TOOL_TIMEOUT",
                        );
                        (outcome, Vec::new())
                    })
                    .await
                }
            };
            let _ = tx
                .send(Msg::ToolDone {
                    token,
                    outcome,
                    events,
                })
                .await;
        })
        .detach();
    }

    fn publish(&mut self, event: AgentEvent) {
        if self.subscribers.is_empty() {
            return;
        }
        self.subscribers
            .retain(|s| s.try_send(event.clone()).is_ok());
    }

    fn publish_events(&mut self, start: u64, end: u64) {
        if self.subscribers.is_empty() {
            return;
        }
        for seq in start..end {
            if let Some(e) = self.core.session().event(seq) {
                let event = AgentEvent::Event(Arc::new(e.clone()));
                self.publish(event);
            }
        }
    }

    /// Writes every event not yet stored as one batch.
    async fn flush(&mut self) -> Result<(), StoreError> {
        let len = self.core.session().len();
        if self.flushed >= len {
            return Ok(());
        }
        let batch: Vec<SessionEvent> = self.core.session().events_from(self.flushed).to_vec();
        let store = self.store.clone();
        let id = self.id.clone();
        smol::unblock(move || store.append(&id, &batch)).await?;
        self.flushed = len;
        Ok(())
    }

    /// The agent is idle: answer `wait_idle`.
    async fn settle(&mut self) {
        if self.idle_waiters.is_empty() {
            return;
        }
        let summary = self.summary();
        for w in self.idle_waiters.drain(..) {
            let _ = w.try_send(summary.clone());
        }
    }

    fn summary(&self) -> TurnSummary {
        let mut s = TurnSummary::default();
        for e in self.core.session().events().iter().rev() {
            match e.data() {
                EventData::TurnEnd(t) if s.reason.is_none() => {
                    s.turn = t.turn;
                    s.reason = Some(t.reason.clone());
                }
                EventData::AssistantMessage(m) if s.reason.is_some() => {
                    s.usage = m.usage;
                    break;
                }
                EventData::TurnStart(_) if s.reason.is_some() => break,
                _ => {}
            }
        }
        s
    }

    /// Final flush, store release, disposal answers.
    async fn finish(mut self) {
        if let Some((_, cancel)) = self.model.take() {
            cancel.cancel();
        }
        if let Some((_, cancel)) = self.tool.take() {
            cancel.cancel();
        }
        if let Err(e) = self.flush().await {
            self.publish(AgentEvent::Error(format!(
                "session store write failed: {e}"
            )));
        }
        let store = self.store.clone();
        let id = self.id.clone();
        let _ = smol::unblock(move || store.release(&id)).await;
        let summary = self.summary();
        for w in self.idle_waiters.drain(..) {
            let _ = w.try_send(summary.clone());
        }
        for w in self.disposing.take().unwrap_or_default() {
            let _ = w.try_send(());
        }
        self.rx.close();
    }
}
