//! The agent task: a thin loop that owns the kernel, feeds it every input
//! that arrives on the agent's channel, and carries out its effects.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender};
use dsh_core::agent::{AgentStatus, InboxTarget, ModelCall, ToolExecution};
use dsh_core::session::{Session, SessionEvent};
use dsh_core::{Message, SessionId, Time};
use dsh_deepseek::DeepSeekClient;
use dsh_host::{ModelProvider, ProviderPrepare, job_token, run_model, run_side};
use dsh_runtime::exec::{self, Carry, Dispatch, Input, Job, Jobs};
use dsh_runtime::{AgentEvent, AskId, Ids, Kernel, KernelError, Plugin, TurnSummary};
use dsh_store::{Cancel, SessionStore, StoreError};

use crate::{Agent, AgentConfig, ShellError};
use dsh_approval::ApprovalPlugin;
use dsh_tools::{CancelToken as ToolCancel, ToolSet, Workspace};

/// Everything that reaches an agent task.
/// The large payloads are boxed: every agent's channel keeps a block of
/// 31 slots of this size alive (issue 34: 9.7 KB per idle agent unboxed).
pub(crate) enum Msg {
    /// An input for the kernel (a handle call, or work in flight).
    Feed(Input),
    Send {
        message: Box<Message>,
        target: InboxTarget,
        wakeup: bool,
        reply: Sender<Result<(), KernelError>>,
    },
    Subscribe(Sender<AgentEvent>),
    WaitIdle(Sender<TurnSummary>),
    Dispose(Option<Sender<Option<String>>>),
    Command {
        name: String,
        args: Box<serde_json::Value>,
        reply: Sender<Result<serde_json::Value, String>>,
    },
}

#[allow(clippy::large_enum_variant)] // one per loop iteration, never stored
enum Wake {
    Msg(Msg),
    Timer(Time),
    Closed,
}

/// A new session registered in `store`.
pub(crate) async fn create_session(
    now: Time,
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
    now: Time,
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
    now: Time,
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
    let io = Io {
        id: id.clone(),
        clock: config.clock.clone(),
        store,
        provider,
        tools: Arc::new(std::mem::take(&mut config.tools)),
        workspace,
        tx: tx.clone(),
        running: running.clone(),
        subscribers: Vec::new(),
        jobs: Jobs::new(),
        batch: None,
        commands: BTreeMap::new(),
    };
    let driver = Driver {
        kernel,
        rx,
        io,
        idle_waiters: Vec::new(),
        disposing: None,
        timer: None,
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

/// The next message, or the kernel's deadline (`(deadline, when it
/// passes on the monotonic clock)`) passing.
async fn next(rx: &Receiver<Msg>, timer: Option<(Time, Instant)>) -> Wake {
    let recv = async {
        match rx.recv().await {
            Ok(m) => Wake::Msg(m),
            Err(_) => Wake::Closed,
        }
    };
    match timer {
        None => recv.await,
        Some((deadline, at)) => {
            smol::future::or(recv, async move {
                smol::Timer::at(at).await;
                Wake::Timer(deadline)
            })
            .await
        }
    }
}

struct Driver {
    kernel: Kernel,
    rx: Receiver<Msg>,
    io: Io,
    idle_waiters: Vec<Sender<TurnSummary>>,
    /// Set once disposal began: who waits for it.
    disposing: Option<Vec<Sender<Option<String>>>>,
    /// The kernel deadline waited for, and when it passes (monotonic).
    timer: Option<(Time, Instant)>,
}

/// The smol runtime's I/O for the shared executor: streams, tool bodies,
/// side calls and store writes on the blocking pool.
struct Io {
    id: SessionId,
    clock: dsh_host::Clock,
    store: Arc<dyn SessionStore>,
    provider: Arc<dyn ModelProvider>,
    tools: Arc<ToolSet>,
    workspace: Workspace,
    tx: Sender<Msg>,
    running: Arc<AtomicBool>,
    subscribers: Vec<Sender<AgentEvent>>,
    jobs: Jobs,
    /// The batch [`Dispatch::persist`] left for the driver to write.
    batch: Option<Vec<SessionEvent>>,
    /// Callers of running plugin commands, by command id.
    commands: BTreeMap<u64, Sender<Result<serde_json::Value, String>>>,
}

impl Driver {
    /// The kernel's next deadline and when it passes: its distance from
    /// the kernel's clock when first seen, on the monotonic clock (a wall
    /// clock that jumps, or a fixed test clock, moves no timer).
    fn next_wake(&mut self) -> Option<(Time, Instant)> {
        let Some(deadline) = self.kernel.poll_timeout() else {
            self.timer = None;
            return None;
        };
        match self.timer {
            Some((d, at)) if d == deadline => Some((d, at)),
            _ => {
                // Capped (~35 years) so that `Instant` cannot overflow.
                let ms = deadline.millis_since(self.kernel.now()).min(1 << 40);
                let at = Instant::now() + Duration::from_millis(ms);
                self.timer = Some((deadline, at));
                self.timer
            }
        }
    }

    async fn run(mut self) {
        loop {
            self.carry().await;
            if self.kernel.is_idle() {
                self.kernel.trim();
                self.settle();
            }
            if self.kernel.is_finished() {
                break;
            }
            let timer = self.next_wake();
            match next(&self.rx, timer).await {
                Wake::Msg(msg) => self.handle(msg),
                Wake::Timer(deadline) => {
                    self.timer = None;
                    let _ = exec::feed(&mut self.kernel, &mut self.io, Input::Timeout { deadline });
                }
                Wake::Closed => break,
            }
        }
        self.finish().await;
    }

    /// Carries out the kernel's effects until it is drained; each batch is
    /// written on the blocking pool while this agent waits.
    async fn carry(&mut self) {
        while exec::carry(&mut self.kernel, &mut self.io) == Carry::Writing {
            let batch = self.io.batch.take().unwrap_or_default();
            let store = self.io.store.clone();
            let id = self.io.id.clone();
            let r = smol::unblock(move || store.append(&id, &batch))
                .await
                .map_err(|e| e.to_string());
            exec::written(&mut self.kernel, &mut self.io, r);
        }
        if self.io.subscribers.is_empty() {
            self.kernel.set_publish_events(false);
        }
    }

    fn handle(&mut self, msg: Msg) {
        let now = self.io.now();
        match msg {
            Msg::Feed(input) => {
                let _ = exec::feed(&mut self.kernel, &mut self.io, input);
            }
            Msg::Send {
                message,
                target,
                wakeup,
                reply,
            } => {
                let r = self.kernel.send(now, *message, target, wakeup);
                let _ = reply.try_send(r);
            }
            Msg::Subscribe(tx) => {
                self.io.subscribers.push(tx);
                self.kernel.set_publish_events(true);
            }
            Msg::WaitIdle(reply) => self.idle_waiters.push(reply),
            Msg::Command { name, args, reply } => match self.kernel.command(now, &name, *args) {
                Ok(id) => {
                    self.io.commands.insert(id, reply);
                }
                Err(e) => {
                    let _ = reply.try_send(Err(e.to_string()));
                }
            },
            Msg::Dispose(reply) => {
                let waiters = self.disposing.get_or_insert_with(Vec::new);
                waiters.extend(reply);
                let _ = exec::feed(&mut self.kernel, &mut self.io, Input::Dispose);
            }
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
        self.io.jobs.stop_all();
        let store = self.io.store.clone();
        let id = self.io.id.clone();
        let released = smol::unblock(move || store.release(&id)).await;
        exec::released(&mut self.io, released.map_err(|e| e.to_string()));
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

impl Dispatch for Io {
    fn now(&mut self) -> Time {
        self.clock.now()
    }

    fn start_model(&mut self, call: ModelCall) -> Result<(), String> {
        let cancel = job_token(&mut self.jobs, Job::Model(call.attempt));
        let tx = self.tx.clone();
        let provider = self.provider.clone();
        smol::unblock(move || {
            run_model(&*provider, &call, &cancel, |input| {
                tx.send_blocking(Msg::Feed(input)).is_ok()
            });
        })
        .detach();
        Ok(())
    }

    /// Runs the body on the blocking pool; the kernel owns its deadline.
    fn start_tool(&mut self, exec: ToolExecution, timeout_ms: Option<u64>) -> Result<(), String> {
        let cancel = ToolCancel::new();
        let stop = cancel.clone();
        self.jobs
            .insert(Job::Tool(exec.token), move || stop.cancel());
        let tools = self.tools.clone();
        let workspace = self.workspace.clone();
        let tx = self.tx.clone();
        let token = exec.token;
        let timeout = timeout_ms.map(Duration::from_millis);
        smol::spawn(async move {
            let (outcome, events) =
                smol::unblock(move || tools.run(&exec, workspace, cancel, timeout)).await;
            let input = Input::ToolDone {
                token,
                outcome: Box::new(outcome),
                events,
            };
            let _ = tx.send(Msg::Feed(input)).await;
        })
        .detach();
        Ok(())
    }

    /// A plugin's side model call (a compaction summary) on the blocking
    /// pool; the answer comes back as an ordinary ask answer.
    fn start_side(&mut self, id: AskId, request: dsh_core::GenerateOptions) -> Result<(), String> {
        let cancel = job_token(&mut self.jobs, Job::Side(id));
        let tx = self.tx.clone();
        let provider = self.provider.clone();
        smol::unblock(move || {
            run_side(&*provider, id, &request, &cancel, |input| {
                let _ = tx.send_blocking(Msg::Feed(input));
            });
        })
        .detach();
        Ok(())
    }

    fn jobs(&mut self) -> Option<&mut Jobs> {
        Some(&mut self.jobs)
    }

    /// The store is blocking: the batch is written by the driver on the
    /// blocking pool ([`Driver::carry`]).
    fn persist(&mut self, events: &[SessionEvent]) -> Option<Result<(), String>> {
        self.batch = Some(events.to_vec());
        None
    }

    fn command_done(&mut self, id: u64, result: &Result<serde_json::Value, String>) {
        if let Some(reply) = self.commands.remove(&id) {
            let _ = reply.try_send(result.clone());
        }
    }

    fn publish(&mut self, event: AgentEvent) {
        if let AgentEvent::Status(s) = &event {
            self.running
                .store(*s == AgentStatus::Running, Ordering::Release);
        }
        if self.subscribers.is_empty() {
            return;
        }
        self.subscribers
            .retain(|s| s.try_send(event.clone()).is_ok());
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
