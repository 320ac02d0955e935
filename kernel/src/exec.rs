//! The one effect executor every runtime shares (`dsh-std`, `dsh-smol`,
//! `dsh-embedded`, a hand-written loop).
//!
//! A runtime implements [`Dispatch`]: how it starts a model stream, a tool
//! body and a side call, how it stops one, how it writes a batch, and where
//! live events go. Everything else is here, once:
//!
//! - [`carry`] drains [`Kernel::poll`] and carries each [`Effect`] to the
//!   runtime: a start that fails is answered to the kernel at once (a model
//!   error, a tool error result, a failed side answer); a write that the
//!   runtime finishes later returns [`Carry::Writing`] and is reported with
//!   [`written`];
//! - [`feed`] gives the kernel one [`Input`] (a chunk, a stream end, a tool
//!   result, an answer, a timer, a cancel, disposal), tells the runtime
//!   which [`Job`] ended, and hands every refusal that is not stale to
//!   [`Dispatch::refused`] (default: published as [`AgentEvent::Error`]);
//! - plugin commands are answered by id ([`Kernel::command`] returns it,
//!   [`AgentEvent::CommandDone`] carries it), not by order;
//! - [`Jobs`] is the table of stop handles of the work in flight, by job.
//!
//! The executor is sans-IO: it never blocks, reads no clock itself
//! ([`Dispatch::now`]) and holds no state besides what the runtime gives it.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{AttemptId, CancelCause, HookError, ModelCall, ToolExecution, ToolToken};
use dsh_core::session::{EventData, SessionEvent};
use dsh_core::{GenerateOptions, StreamChunk, Time};
use serde_json::Value;

use crate::kernel::Kernel;
use crate::plugin::Reply;
use crate::types::{AgentEvent, AskId, Effect, KernelError};

/// A piece of work a runtime carries for the kernel, by kind and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// The model stream of this attempt.
    Model(AttemptId),
    /// The tool body of this call token.
    Tool(ToolToken),
    /// The side model call of this ask id.
    Side(AskId),
}

/// A stop handle of work in flight (a cancel token); any `Fn()` closure,
/// e.g. `move || token.cancel()`.
pub trait Stop: Send {
    /// Tells the work to stop; it must end promptly. Idempotent.
    fn stop(&self);
}

impl<F: Fn() + Send> Stop for F {
    fn stop(&self) {
        self()
    }
}

/// The stop handles of the work in flight, by [`Job`].
#[derive(Default)]
pub struct Jobs {
    map: BTreeMap<Job, Box<dyn Stop>>,
}

impl core::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.map.keys()).finish()
    }
}

impl Jobs {
    /// An empty table.
    pub fn new() -> Self {
        Jobs::default()
    }

    /// Records the stop handle of `job`.
    pub fn insert(&mut self, job: Job, stop: impl Stop + 'static) {
        self.map.insert(job, Box::new(stop));
    }

    /// `job` ended: forgets its handle.
    pub fn done(&mut self, job: Job) {
        self.map.remove(&job);
    }

    /// Tells `job` to stop. A model stream or side call is forgotten at
    /// once (its later answers are stale); a tool body stays until its
    /// result comes ([`done`](Self::done)).
    pub fn stop(&mut self, job: Job) {
        match job {
            Job::Tool(_) => {
                if let Some(s) = self.map.get(&job) {
                    s.stop();
                }
            }
            Job::Model(_) | Job::Side(_) => {
                if let Some(s) = self.map.remove(&job) {
                    s.stop();
                }
            }
        }
    }

    /// Tells every job to stop (the runtime is ending).
    pub fn stop_all(&mut self) {
        for s in self.map.values() {
            s.stop();
        }
    }

    /// How many jobs are in flight.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// What a runtime does with the kernel's effects: its I/O. Every method
/// returns at once; work that takes time runs elsewhere and comes back as
/// an [`Input`].
pub trait Dispatch {
    /// The host's wall clock ([`Time`]) for the kernel calls the executor
    /// makes.
    fn now(&mut self) -> Time;

    /// Starts the model stream of `call`; its chunks come back as
    /// [`Input::Chunk`], its end as [`Input::ModelEnd`]. An `Err` (the
    /// stream could not be started) ends the attempt with that message.
    fn start_model(&mut self, call: ModelCall) -> Result<(), String>;

    /// Starts the body of `exec` (`timeout_ms`: the deadline the body may
    /// enforce itself); its result comes back as [`Input::ToolDone`]. An
    /// `Err` becomes the call's error result.
    fn start_tool(&mut self, exec: ToolExecution, timeout_ms: Option<u64>) -> Result<(), String>;

    /// Starts a plugin's side model call for ask `id`; its answer comes
    /// back as [`Input::Answer`] with [`Reply::Model`]. An `Err` is
    /// answered as the call's failure.
    fn start_side(&mut self, id: AskId, request: GenerateOptions) -> Result<(), String>;

    /// The runtime's table of stop handles, when it keeps one: the
    /// default [`stop`](Self::stop) and [`done`](Self::done) use it.
    /// Default: none.
    fn jobs(&mut self) -> Option<&mut Jobs> {
        None
    }

    /// Tells `job` to stop; default: [`Jobs::stop`] on [`jobs`](Self::jobs).
    fn stop(&mut self, job: Job) {
        if let Some(jobs) = self.jobs() {
            jobs.stop(job);
        }
    }

    /// `job` ended (its last input was fed); default: [`Jobs::done`] on
    /// [`jobs`](Self::jobs).
    fn done(&mut self, job: Job) {
        if let Some(jobs) = self.jobs() {
            jobs.done(job);
        }
    }

    /// Writes `events` durably as one batch. `Some(result)` when the write
    /// finished; `None` when it runs on: report it with [`written`].
    fn persist(&mut self, events: &[SessionEvent]) -> Option<Result<(), String>>;

    /// A write was reported to the kernel; `store_error` is the failure it
    /// keeps until a write succeeds. Default: nothing.
    fn persisted(&mut self, store_error: Option<&str>) {
        let _ = store_error;
    }

    /// Plugin command `id` finished with `result`: answer its caller.
    /// Called before the [`AgentEvent::CommandDone`] is published.
    fn command_done(&mut self, id: u64, result: &Result<Value, String>);

    /// A live event for subscribers (status changes, errors, command
    /// results, ...).
    fn publish(&mut self, event: AgentEvent);

    /// The kernel refused an input or a report, and not as stale (see
    /// [`KernelError::is_stale`]). Default: published as
    /// [`AgentEvent::Error`] with its message (a fixed text without feature
    /// `error-texts`).
    fn refused(&mut self, error: &KernelError) {
        self.publish(AgentEvent::Error(error_text!("input refused", "{error}")));
    }
}

/// How [`carry`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a write still running must be reported with `written`"]
pub enum Carry {
    /// The kernel is drained.
    Drained,
    /// A batch is being written ([`Dispatch::persist`] returned `None`);
    /// nothing more is released until [`written`] reports it.
    Writing,
}

/// Carries out the kernel's effects until it is drained or waits for a
/// write.
pub fn carry<D: Dispatch + ?Sized>(kernel: &mut Kernel, d: &mut D) -> Carry {
    while let Some(effect) = kernel.poll() {
        match effect {
            Effect::StartModel(call) => {
                let attempt = call.attempt;
                if let Err(e) = d.start_model(call) {
                    let now = d.now();
                    let r = kernel.model_error(now, attempt, HookError::msg(e));
                    report(d, &r);
                }
            }
            Effect::StartTool { exec, timeout_ms } => {
                let token = exec.token;
                if let Err(e) = d.start_tool(exec, timeout_ms) {
                    let now = d.now();
                    let r = kernel.tool_done(now, token, ToolOutcome::error(e), Vec::new());
                    report(d, &r);
                }
            }
            Effect::SideModel { id, request, .. } => {
                if let Err(e) = d.start_side(id, request) {
                    let now = d.now();
                    let r = kernel.answer(now, id, Reply::Model(Err(e)));
                    report(d, &r);
                }
            }
            Effect::CancelModel { attempt } => d.stop(Job::Model(attempt)),
            Effect::CancelTool { token } => d.stop(Job::Tool(token)),
            Effect::CancelSide { id } => d.stop(Job::Side(id)),
            Effect::Persist { range, .. } => {
                let (Ok(start), Ok(end)) =
                    (usize::try_from(range.start), usize::try_from(range.end))
                else {
                    written(kernel, d, Err(String::from("batch beyond memory")));
                    continue;
                };
                let events = kernel.session().events().get(start..end).unwrap_or(&[]);
                match d.persist(events) {
                    Some(r) => written(kernel, d, r),
                    None => return Carry::Writing,
                }
            }
            Effect::Publish(event) => {
                if let AgentEvent::CommandDone { id, result, .. } = &event {
                    d.command_done(*id, result);
                }
                d.publish(event);
            }
            // Nothing runs any more; the runtime sees `is_finished`.
            Effect::Finished => {}
        }
    }
    Carry::Drained
}

/// Reports the write [`carry`] left running ([`Carry::Writing`]).
#[inline]
pub fn written<D: Dispatch + ?Sized>(kernel: &mut Kernel, d: &mut D, result: Result<(), String>) {
    let now = d.now();
    let r = kernel.persisted(now, result);
    report(d, &r);
    d.persisted(kernel.store_error());
}

/// Hands a kernel refusal that is not stale to [`Dispatch::refused`].
pub fn report<D: Dispatch + ?Sized>(d: &mut D, r: &Result<(), KernelError>) {
    if let Err(e) = r
        && !e.is_stale()
    {
        d.refused(e);
    }
}

/// One input for the kernel that needs no answer to a caller.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// A chunk of attempt `attempt`'s stream.
    Chunk {
        /// The attempt.
        attempt: AttemptId,
        /// The chunk.
        chunk: StreamChunk,
    },
    /// The stream of attempt `attempt` ended.
    ModelEnd {
        /// The attempt.
        attempt: AttemptId,
    },
    /// A tool body returned.
    ToolDone {
        /// The call's token.
        token: ToolToken,
        /// Its result (boxed: it is large, and every chunk travels in the
        /// same enum).
        outcome: Box<ToolOutcome>,
        /// Tool-owned events the body emitted (TL-24), appended first.
        events: Vec<EventData>,
    },
    /// The answer to ask `id` (an approval, a side call's result).
    Answer {
        /// The ask id.
        id: AskId,
        /// The answer.
        reply: Reply,
    },
    /// The timer armed for the kernel's deadline `deadline`
    /// ([`Kernel::poll_timeout`]) ran out on the runtime's monotonic clock;
    /// the kernel takes `deadline` as reached ([`Kernel::handle_timeout`]).
    Timeout {
        /// The deadline the timer was armed for.
        deadline: Time,
    },
    /// Cancel the running turn (IB-13).
    Cancel {
        /// Why.
        cause: CancelCause,
        /// Keep queued input for the next turn.
        keep_inbox: bool,
    },
    /// Dispose of the agent.
    Dispose,
}

/// Feeds one input to the kernel (see [`Input`]); a refusal that is not
/// stale goes to [`Dispatch::refused`]; either is returned.
pub fn feed<D: Dispatch + ?Sized>(
    kernel: &mut Kernel,
    d: &mut D,
    input: Input,
) -> Result<(), KernelError> {
    let now = d.now();
    let r = match input {
        Input::Chunk { attempt, chunk } => kernel.model_chunk(now, attempt, chunk),
        Input::ModelEnd { attempt } => {
            d.done(Job::Model(attempt));
            kernel.model_end(now, attempt)
        }
        Input::ToolDone {
            token,
            outcome,
            events,
        } => {
            d.done(Job::Tool(token));
            kernel.tool_done(now, token, *outcome, events)
        }
        Input::Answer { id, reply } => {
            d.done(Job::Side(id));
            kernel.answer(now, id, reply)
        }
        Input::Timeout { deadline } => {
            kernel.handle_timeout(now, deadline);
            Ok(())
        }
        Input::Cancel { cause, keep_inbox } => {
            kernel.cancel(now, cause, keep_inbox);
            Ok(())
        }
        Input::Dispose => {
            kernel.dispose(now);
            Ok(())
        }
    };
    report(d, &r);
    r
}

/// The runtime released the session in its store (its last store call):
/// a failure is published as [`AgentEvent::Error`].
pub fn released<D: Dispatch + ?Sized>(d: &mut D, result: Result<(), String>) {
    if let Err(e) = result {
        d.publish(AgentEvent::Error(error_text!(
            "session store write failed",
            "session store: {e}"
        )));
    }
}
