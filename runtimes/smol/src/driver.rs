//! The agent task: a thin loop that owns the kernel, feeds it every input
//! that arrives on the agent's channel, and carries out its effects.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_channel::{Receiver, Sender};
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{AgentStatus, CancelCause, InboxTarget, ModelCall, ToolExecution};
use dsh_core::session::{EventData, Session, SessionEvent};
use dsh_core::{Message, SessionId, StreamChunk};
use dsh_deepseek::{CancelToken, DeepSeekClient};
use dsh_runtime::host::{ModelProvider, ProviderPrepare, pump};
use dsh_runtime::{AgentEvent, Effect, Ids, Kernel, KernelError, Plugin, Reply, TurnSummary};
use dsh_store::{Cancel, SessionStore, StoreError};

use crate::{Agent, AgentConfig, ShellError};
use dsh_tools::{ApprovalPlugin, CancelToken as ToolCancel, ToolSet, Workspace};

/// Everything that reaches an agent task.
/// The large payloads are boxed: every agent's channel keeps a block of
/// 31 slots of this size alive (issue 34: 9.7 KB per idle agent unboxed).
pub(crate) enum Msg {
    Send {
        message: Box<Message>,
        target: InboxTarget,
        wakeup: bool,
        reply: Sender<Result<(), KernelError>>,
    },
    Cancel {
        cause: CancelCause,
        keep_inbox: bool,
    },
    Subscribe(Sender<AgentEvent>),
    WaitIdle(Sender<TurnSummary>),
    Answer {
        id: u64,
        reply: Reply,
    },
    Dispose(Option<Sender<Option<String>>>),
    Command {
        name: String,
        args: Box<serde_json::Value>,
        reply: Sender<Result<serde_json::Value, String>>,
    },
    Chunk {
        attempt: u64,
        chunk: StreamChunk,
    },
    StreamEnd {
        attempt: u64,
    },
    ToolDone {
        token: u64,
        outcome: Box<ToolOutcome>,
        /// Tool-owned events the body emitted (TL-24), appended first.
        events: Vec<EventData>,
    },
}

#[allow(clippy::large_enum_variant)] // one per loop iteration, never stored
enum Wake {
    Msg(Msg),
    Timer(i64),
    Closed,
}

/// A new session registered in `store`.
pub(crate) async fn create_session(
    now: i64,
    cwd: Option<String>,
    store: &Arc<dyn SessionStore>,
    id: SessionId,
) -> Result<Session, ShellError> {
    let session = dsh_runtime::create_session(id, now, cwd)?;
    let store = store.clone();
    let h = session.header().clone();
    smol::unblock(move || store.create(h)).await?;
    Ok(session)
}

/// A stored session, repaired and marked resumed; returns how much of it
/// is already stored.
pub(crate) async fn resume_session(
    now: i64,
    store: &Arc<dyn SessionStore>,
    id: &SessionId,
) -> Result<(Session, u64), ShellError> {
    let store = store.clone();
    let sid = id.clone();
    let loaded = smol::unblock(move || store.load(&sid)).await?;
    let stored = loaded.events.len() as u64;
    let session = dsh_runtime::resume_session(loaded.header, loaded.events, now)?;
    Ok((session, stored))
}

/// The child of `from` at `at_seq`, with its seed written to `store`.
pub(crate) async fn fork_session(
    now: i64,
    store: &Arc<dyn SessionStore>,
    from: &SessionId,
    at_seq: Option<u64>,
    new_id: SessionId,
) -> Result<Session, ShellError> {
    let reader = store.clone();
    let parent_id = from.clone();
    let parent = smol::unblock(move || reader.inspect(&parent_id, &Cancel::new())).await?;
    let child = dsh_runtime::fork_session(parent.header, parent.events, at_seq, new_id, now)?;
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

/// Builds the kernel and starts the agent task.
pub(crate) fn spawn(
    mut config: AgentConfig,
    store: Arc<dyn SessionStore>,
    session: Session,
    flushed: u64,
) -> Result<Agent, ShellError> {
    let provider: Arc<dyn ModelProvider> = match config.provider.clone() {
        Some(p) => p,
        None => Arc::new(
            DeepSeekClient::with_options(config.model.clone(), config.client_options.clone())
                .map_err(|e| ShellError::Config(e.to_string()))?,
        ),
    };
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
    let seed = config.id_seed.unwrap_or_else(|| fastrand::u64(..));
    let mut k = dsh_runtime::AgentConfig::new(config.call_config.clone());
    k.system_prompt = config.system_prompt.clone();
    k.tools = registry;
    k.tool_timeout_ms = Some(config.tool_timeout.as_millis() as u64).filter(|ms| *ms > 0);
    k.retry_policy = config.retry_policy.clone();
    k.max_response_bytes = config.max_response_bytes;
    k.max_steps_per_turn = config.max_steps_per_turn;
    k.ids = config.ids;
    k.seed = seed;
    let mut plugins: Vec<Box<dyn Plugin>> = vec![
        Box::new(ProviderPrepare(provider.clone())),
        Box::new(ApprovalPlugin::new(Arc::new(Mutex::new(
            config.approval.clone(),
        )))),
    ];
    plugins.append(&mut config.plugins);
    let kernel = Kernel::new(k, session, flushed, plugins)?;
    let id = kernel.id().clone();
    let mut ids = Ids::new(config.ids, seed ^ 0xD1B5_4A32_D192_ED03);
    ids.continue_after(kernel.session());
    let (tx, rx) = async_channel::unbounded();
    let running = Arc::new(AtomicBool::new(false));
    let driver = Driver {
        kernel,
        clock: config.clock.clone(),
        store,
        provider,
        tools: Arc::new(std::mem::take(&mut config.tools)),
        workspace,
        rx,
        tx: tx.clone(),
        running: running.clone(),
        subscribers: Vec::new(),
        idle_waiters: Vec::new(),
        commands: std::collections::VecDeque::new(),
        streams: BTreeMap::new(),
        sides: BTreeMap::new(),
        bodies: BTreeMap::new(),
        disposing: None,
    };
    let task = smol::spawn(driver.run());
    Ok(Agent {
        id,
        tx,
        running,
        task: Some(task),
        ids: Mutex::new(ids),
    })
}

/// The next message, or the kernel's deadline (`(deadline, ms to wait)`)
/// passing.
async fn next(rx: &Receiver<Msg>, timer: Option<(i64, i64)>) -> Wake {
    let recv = async {
        match rx.recv().await {
            Ok(m) => Wake::Msg(m),
            Err(_) => Wake::Closed,
        }
    };
    match timer {
        None => recv.await,
        Some((deadline, wait)) => {
            let wait = u64::try_from(wait).unwrap_or(0);
            smol::future::or(recv, async move {
                smol::Timer::after(Duration::from_millis(wait)).await;
                Wake::Timer(deadline)
            })
            .await
        }
    }
}

struct Driver {
    kernel: Kernel,
    clock: dsh_runtime::host::Clock,
    store: Arc<dyn SessionStore>,
    provider: Arc<dyn ModelProvider>,
    tools: Arc<ToolSet>,
    workspace: Workspace,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    running: Arc<AtomicBool>,
    subscribers: Vec<Sender<AgentEvent>>,
    idle_waiters: Vec<Sender<TurnSummary>>,
    streams: BTreeMap<u64, CancelToken>,
    /// Side model calls in flight, by ask id.
    sides: BTreeMap<u64, CancelToken>,
    bodies: BTreeMap<u64, ToolCancel>,
    /// Set once disposal began: who waits for it.
    disposing: Option<Vec<Sender<Option<String>>>>,
    /// Callers of running plugin commands, in start order.
    commands: std::collections::VecDeque<Sender<Result<serde_json::Value, String>>>,
}

impl Driver {
    async fn run(mut self) {
        loop {
            self.drain().await;
            if self.kernel.is_idle() {
                self.kernel.trim();
                self.settle();
            }
            if self.kernel.is_finished() {
                break;
            }
            let timer = self
                .kernel
                .poll_timeout()
                .map(|d| (d, d.saturating_sub(self.clock.now_ms())));
            match next(&self.rx, timer).await {
                Wake::Msg(msg) => self.handle(msg),
                // A fixed test clock does not move: the deadline is the time.
                Wake::Timer(deadline) => {
                    let now = self.clock.now_ms().max(deadline);
                    self.kernel.handle_timeout(now);
                }
                Wake::Closed => break,
            }
        }
        self.finish().await;
    }

    fn report(&mut self, r: Result<(), KernelError>) {
        if let Err(e) = r
            && !e.is_stale()
        {
            self.publish(AgentEvent::Error(e.to_string()));
        }
    }

    fn handle(&mut self, msg: Msg) {
        let now = self.clock.now_ms();
        match msg {
            Msg::Send {
                message,
                target,
                wakeup,
                reply,
            } => {
                let r = self.kernel.send(now, *message, target, wakeup);
                let _ = reply.try_send(r);
            }
            Msg::Cancel { cause, keep_inbox } => self.kernel.cancel(now, cause, keep_inbox),
            Msg::Subscribe(tx) => {
                self.subscribers.push(tx);
                self.kernel.set_publish_events(true);
            }
            Msg::WaitIdle(reply) => self.idle_waiters.push(reply),
            Msg::Command { name, args, reply } => match self.kernel.command(now, &name, *args) {
                Ok(()) => self.commands.push_back(reply),
                Err(e) => {
                    let _ = reply.try_send(Err(e.to_string()));
                }
            },
            Msg::Answer { id, reply } => {
                self.sides.remove(&id);
                // An unknown or withdrawn id is ignored.
                let _ = self.kernel.answer(now, id, reply);
            }
            Msg::Dispose(reply) => {
                let waiters = self.disposing.get_or_insert_with(Vec::new);
                waiters.extend(reply);
                self.kernel.dispose(now);
            }
            Msg::Chunk { attempt, chunk } => {
                let r = self.kernel.model_chunk(now, attempt, chunk);
                self.report(r);
            }
            Msg::StreamEnd { attempt } => {
                self.streams.remove(&attempt);
                let r = self.kernel.model_end(now, attempt);
                self.report(r);
            }
            Msg::ToolDone {
                token,
                outcome,
                events,
            } => {
                self.bodies.remove(&token);
                let r = self.kernel.tool_done(now, token, *outcome, events);
                self.report(r);
            }
        }
    }

    /// Carries out the kernel's effects until it is drained.
    async fn drain(&mut self) {
        while let Some(effect) = self.kernel.poll() {
            match effect {
                Effect::StartModel(call) => self.start_model(call),
                Effect::SideModel { id, request, .. } => self.start_side_call(id, request),
                Effect::CancelSide { id } => {
                    if let Some(c) = self.sides.remove(&id) {
                        c.cancel();
                    }
                }
                Effect::CancelModel { attempt } => {
                    if let Some(c) = self.streams.remove(&attempt) {
                        c.cancel();
                    }
                }
                Effect::StartTool { exec, timeout_ms } => self.start_tool(exec, timeout_ms),
                Effect::CancelTool { token } => {
                    if let Some(c) = self.bodies.get(&token) {
                        c.cancel();
                    }
                }
                Effect::Persist { range, .. } => {
                    let batch: Vec<SessionEvent> = self
                        .kernel
                        .session()
                        .events()
                        .get(range.start as usize..range.end as usize)
                        .unwrap_or(&[])
                        .to_vec();
                    let store = self.store.clone();
                    let id = self.kernel.id().clone();
                    let r = smol::unblock(move || store.append(&id, &batch))
                        .await
                        .map_err(|e| e.to_string());
                    let r = self.kernel.persisted(self.clock.now_ms(), r);
                    self.report(r);
                }
                Effect::Publish(event) => {
                    if let AgentEvent::CommandDone { result, .. } = &event
                        && let Some(reply) = self.commands.pop_front()
                    {
                        let _ = reply.try_send(result.clone());
                    }
                    if let AgentEvent::Status(s) = &event {
                        self.running
                            .store(*s == AgentStatus::Running, Ordering::Release);
                    }
                    self.publish(event);
                }
                _ => {}
            }
        }
    }

    /// A plugin's side model call (a compaction summary) on the blocking
    /// pool; the answer comes back as an ordinary ask answer.
    fn start_side_call(&mut self, id: u64, request: dsh_core::GenerateOptions) {
        let tx = self.tx.clone();
        let provider = self.provider.clone();
        let cancel = CancelToken::new();
        self.sides.insert(id, cancel.clone());
        smol::unblock(move || {
            let r = dsh_runtime::host::side_call(&*provider, &request, &cancel);
            let _ = tx.send_blocking(Msg::Answer {
                id,
                reply: Reply::Model(r),
            });
        })
        .detach();
    }

    fn start_model(&mut self, call: ModelCall) {
        let cancel = CancelToken::new();
        self.streams.insert(call.attempt, cancel.clone());
        let tx = self.tx.clone();
        let provider = self.provider.clone();
        let attempt = call.attempt;
        let request = call.request;
        smol::unblock(move || {
            pump(&*provider, &request, &cancel, |chunk| {
                tx.send_blocking(Msg::Chunk { attempt, chunk }).is_ok()
            });
            let _ = tx.send_blocking(Msg::StreamEnd { attempt });
        })
        .detach();
    }

    /// Runs the body on the blocking pool; the kernel owns its deadline.
    fn start_tool(&mut self, exec: ToolExecution, timeout_ms: Option<u64>) {
        let cancel = ToolCancel::new();
        self.bodies.insert(exec.token, cancel.clone());
        let tools = self.tools.clone();
        let workspace = self.workspace.clone();
        let tx = self.tx.clone();
        let token = exec.token;
        let timeout = timeout_ms.map(Duration::from_millis);
        smol::spawn(async move {
            let (outcome, events) =
                smol::unblock(move || tools.run(&exec, workspace, cancel, timeout)).await;
            let _ = tx
                .send(Msg::ToolDone {
                    token,
                    outcome: Box::new(outcome),
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
        if self.subscribers.is_empty() {
            self.kernel.set_publish_events(false);
        }
    }

    /// The agent is idle: answer `wait_idle`.
    fn settle(&mut self) {
        if self.idle_waiters.is_empty() {
            return;
        }
        let summary = self.kernel.summary();
        for w in self.idle_waiters.drain(..) {
            let _ = w.try_send(summary.clone());
        }
    }

    /// Store release, disposal answers.
    async fn finish(mut self) {
        for c in self.streams.values().chain(self.sides.values()) {
            c.cancel();
        }
        for c in self.bodies.values() {
            c.cancel();
        }
        let store = self.store.clone();
        let id = self.kernel.id().clone();
        let _ = smol::unblock(move || store.release(&id)).await;
        let summary = self.kernel.summary();
        for w in self.idle_waiters.drain(..) {
            let _ = w.try_send(summary.clone());
        }
        let unsaved = self.kernel.store_error().map(str::to_string);
        for w in self.disposing.take().unwrap_or_default() {
            let _ = w.try_send(unsaved.clone());
        }
        self.rx.close();
    }
}

#[cfg(test)]
mod tests {
    /// Issue 34: an agent's channel keeps a block of 31 message slots
    /// alive while it idles; a slot stays small.
    #[test]
    fn a_channel_message_is_small() {
        let size = core::mem::size_of::<super::Msg>();
        assert!(size <= 128, "Msg is {size} bytes");
        eprintln!("Msg is {size} bytes");
    }
}
