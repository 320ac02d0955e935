//! The agent task: a thin loop that owns the kernel, feeds it every input
//! that arrives on the agent's channel, and carries out its effects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender};
use dsh_core::SessionId;
use dsh_core::Time;
use dsh_core::agent::{AgentStatus, ModelCall, ToolExecution};
use dsh_core::session::{Session, SessionEvent};
use dsh_host::{ModelProvider, job_token, run_model, run_side};
use dsh_runtime::exec::{self, Carry, Dispatch, Input, Job, Jobs};
use dsh_runtime::{AgentEvent, AskId, Kernel, TurnSummary};
use dsh_shell::{Answer, Callers, Host, Msg};
use dsh_store::SessionStore;

use crate::{Agent, AgentConfig, ShellError};
use dsh_tools::{CancelToken as ToolCancel, ToolSet, Workspace};

#[allow(clippy::large_enum_variant)] // one per loop iteration, never stored
enum Wake {
    Msg(Msg),
    Timer(Time),
    Closed,
}

/// Builds the kernel and starts the agent task.
pub(crate) fn spawn(
    config: AgentConfig,
    store: Arc<dyn SessionStore>,
    session: Session,
    flushed: u64,
) -> Result<Agent, ShellError> {
    let started = config.start(session, flushed)?;
    let kernel = started.kernel;
    let id = kernel.id().clone();
    let (tx, rx) = async_channel::unbounded();
    let running = Arc::new(AtomicBool::new(false));
    let io = Io {
        id: id.clone(),
        clock: started.clock,
        store,
        provider: started.provider,
        tools: started.tools,
        workspace: started.workspace,
        tx: tx.clone(),
        running: running.clone(),
        callers: Callers::new(),
        jobs: Jobs::new(),
        batch: None,
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
        ids: Mutex::new(started.ids),
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
    idle_waiters: Vec<Answer<TurnSummary>>,
    /// Set once disposal began: who waits for it.
    disposing: Option<Vec<Answer<Option<String>>>>,
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
    callers: Callers,
    jobs: Jobs,
    /// The batch [`Dispatch::persist`] left for the driver to write.
    batch: Option<Vec<SessionEvent>>,
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
            let r = if self.io.store.append_blocks() {
                let store = self.io.store.clone();
                let id = self.io.id.clone();
                smol::unblock(move || store.append(&id, &batch)).await
            } else {
                // A store in memory: written in place, no hand-off.
                self.io.store.append(&self.io.id, &batch)
            };
            let r = r.map_err(|e| e.to_string());
            exec::written(&mut self.kernel, &mut self.io, r);
        }
        if !self.io.callers.has_subscribers() {
            self.kernel.set_publish_events(false);
        }
    }

    fn handle(&mut self, msg: Msg) {
        match dsh_shell::handle(&mut self.kernel, &mut self.io, msg) {
            Some(Msg::WaitIdle(reply)) => self.idle_waiters.push(reply),
            Some(Msg::Dispose(reply)) => {
                let waiters = self.disposing.get_or_insert_with(Vec::new);
                waiters.extend(reply);
                let _ = exec::feed(&mut self.kernel, &mut self.io, Input::Dispose);
            }
            _ => {}
        }
    }

    /// The agent is idle: answer `wait_idle`.
    fn settle(&mut self) {
        if self.idle_waiters.is_empty() {
            return;
        }
        let summary = self.kernel.summary();
        for w in self.idle_waiters.drain(..) {
            w(summary.clone());
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
            w(summary.clone());
        }
        let unsaved = self.kernel.store_error().map(str::to_string);
        for w in self.disposing.take().unwrap_or_default() {
            w(unsaved.clone());
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
        if !self.provider.blocks() {
            // A provider answering from memory: read in place, its inputs
            // queued for the driver (the channel is unbounded), no hand-off.
            let tx = &self.tx;
            run_model(&*self.provider, &call, &cancel, |input| {
                tx.try_send(Msg::Work(Box::new(input))).is_ok()
            });
            return Ok(());
        }
        let tx = self.tx.clone();
        let provider = self.provider.clone();
        smol::unblock(move || {
            run_model(&*provider, &call, &cancel, |input| {
                tx.send_blocking(Msg::Work(Box::new(input))).is_ok()
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
        // One hop: the body and the hand-back both run on the blocking
        // pool (the channel is unbounded, so the send never waits).
        smol::unblock(move || {
            let (outcome, events) = tools.run(&exec, workspace, cancel, timeout);
            let input = Input::ToolDone {
                token,
                outcome: Box::new(outcome),
                events,
            };
            let _ = tx.send_blocking(Msg::Work(Box::new(input)));
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
                let _ = tx.send_blocking(Msg::Work(Box::new(input)));
            });
        })
        .detach();
        Ok(())
    }

    fn jobs(&mut self) -> Option<&mut Jobs> {
        Some(&mut self.jobs)
    }

    /// The batch is written by the driver ([`Driver::carry`]): on the
    /// blocking pool, or in place for a store that does not block.
    fn persist(&mut self, events: &[SessionEvent]) -> Option<Result<(), String>> {
        self.batch = Some(events.to_vec());
        None
    }

    fn command_done(&mut self, id: u64, result: &Result<serde_json::Value, String>) {
        self.callers.command_done(id, result);
    }

    fn publish(&mut self, event: AgentEvent) {
        if let AgentEvent::Status(s) = &event {
            self.running
                .store(*s == AgentStatus::Running, Ordering::Release);
        }
        self.callers.publish(&event);
    }
}

impl Host for Io {
    fn callers(&mut self) -> &mut Callers {
        &mut self.callers
    }
}

#[cfg(test)]
mod tests {
    /// An agent's channel keeps a block of 31 message slots
    /// alive while it idles; a slot stays small.
    #[test]
    fn a_channel_message_is_small() {
        let size = core::mem::size_of::<dsh_shell::Msg>();
        assert!(size <= 64, "Msg is {size} bytes");
        eprintln!("Msg is {size} bytes");
    }
}
