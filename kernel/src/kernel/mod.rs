//! The [`Kernel`]: one agent's core machine plus every decision a runtime
//! used to make for itself. The inputs, the outputs, the tool bodies and the
//! seam chains each have their own file below this one.

mod inputs;
mod outputs;
mod seams;
mod tools;

use alloc::boxed::Box;
#[cfg(feature = "plugins")]
use alloc::collections::BTreeMap;
use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;

use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{
    Agent as Core, AgentStatus, AttemptId, CancelCause, Checkpoint, HookCall, HookError,
    InboxTarget, Notification, Output, ToolExecution, ToolToken,
};
use dsh_core::session::{EventData, Session, SurfaceIntent};
use dsh_core::{ContentBlock, Message, SessionId, StreamChunk, StreamValidator, Time};

use crate::ids::{Ids, Jitter};
use crate::plugin::{Action, KernelCall, Plugin, Reply, Seams, ToolDispatch};
#[cfg(feature = "plugins")]
use crate::plugin::{Ask, Cx, Step, run_hook, run_kernel};
use crate::types::{
    AgentConfig, AgentEvent, AskId, CHUNK_OVERHEAD_BYTES, Effect, KernelError, TurnSummary,
};

/// The runtime kernel of one agent: sans-IO, `no_std`, deterministic.
///
/// # Contract
///
/// **Inputs** are method calls that take `now`, the host's wall clock as a
/// [`Time`] (epoch milliseconds): user calls ([`send`](Self::send),
/// [`cancel`](Self::cancel), [`answer`](Self::answer),
/// [`dispose`](Self::dispose)) and completions of earlier effects
/// ([`model_chunk`](Self::model_chunk), [`model_end`](Self::model_end),
/// [`model_error`](Self::model_error), [`tool_done`](Self::tool_done),
/// [`persisted`](Self::persisted), [`handle_timeout`](Self::handle_timeout)).
/// The kernel never reads a clock. Its own clock is the running maximum of
/// every `now` and every deadline reported reached
/// ([`handle_timeout`](Self::handle_timeout)); it is what the log's `time`s
/// and every new deadline are computed from, so logged times never
/// decrease and a wall clock that goes back neither delays nor drops a
/// timer. Before the first input it reads [`Time::MIN`].
///
/// **Outputs** are [`Effect`]s from [`poll`](Self::poll). After **every**
/// input, drain `poll` until it returns `None` and carry each effect out
/// (start a model stream, run or stop a tool body, write a batch, publish a
/// live event) before the next input. Completions may arrive in any order
/// and at any later time; several tool bodies may be in flight at once.
///
/// **Timers**: [`poll_timeout`](Self::poll_timeout) is the earliest
/// deadline (a retry delay, a tool deadline or grace period), on the
/// kernel's clock. Wait for it on a monotonic timer (for `deadline - now`
/// ms, measured when armed), then call
/// [`handle_timeout`](Self::handle_timeout) with that deadline; never
/// compare the wall clock with it. A deadline that is no longer the
/// earliest changes nothing.
///
/// **The flush gate**: a [`Effect::Persist`] must be answered with
/// [`persisted`](Self::persisted) before `poll` releases anything else;
/// a failed write at the checkpoint before a model request or tool body
/// stops that dispatch (SM-14).
///
/// **Errors**: an input impossible in the current state returns a
/// [`KernelError`] and changes nothing; [`KernelError::is_stale`] marks the
/// harmless ones (an input that raced with a cancel, timeout or abort).
///
/// The same inputs (with the same `now`s, ids and seeds) give a
/// byte-identical session log, whatever runtime carries the effects.
pub struct Kernel {
    core: Core,
    #[cfg(feature = "plugins")]
    plugins: Vec<Box<dyn Plugin>>,
    seams: Seams,
    tool_timeout_ms: Option<u64>,
    grace_ms: u64,
    now: Time,
    effects: VecDeque<Effect>,
    /// Events with `seq < persisted` were written by the runtime.
    persisted: u64,
    /// The pending `Persist`: its end and checkpoint.
    persisting: Option<(u64, Option<Checkpoint>)>,
    /// A checkpoint reached but not written yet: written before the next
    /// dispatch (model request, tool body) or when the core is drained,
    /// so the checkpoints of one step coalesce into one write.
    checkpoint: Option<Checkpoint>,
    /// A dispatch held back until the checkpoint's write is reported.
    held: Option<Output>,
    /// A failed checkpoint write that stops the next dispatch (SM-14).
    flush_failed: Option<String>,
    /// The store's message of the last failed write, until a write
    /// succeeds (reported in [`TurnSummary::store_error`]).
    store_error: Option<String>,
    /// The log length at which the last write failed: the quiet-time write
    /// is not retried until the log grows (a checkpoint still retries).
    failed_at: Option<u64>,
    /// The write-behind window (W2), ms.
    write_behind_ms: Option<u64>,
    /// When unwritten events were first seen with no write pending: the
    /// window runs from here (W2; later events do not move it).
    behind_since: Option<Time>,
    model: Option<AttemptId>,
    /// The response cap ([`AgentConfig::max_response_bytes`]).
    max_response_bytes: u64,
    /// What the attempt in flight counted so far, and the delta bytes of
    /// each of its blocks (a `block-end` counts only what its deltas did
    /// not bring).
    response: ResponseSize,
    /// The checker of the attempt in flight
    /// ([`AgentConfig::validate_streams`]); `None` when off.
    validator: Option<StreamValidator>,
    validate_streams: bool,
    tools: InFlight,
    #[cfg(feature = "plugins")]
    asks: BTreeMap<AskId, Pending>,
    #[cfg(feature = "plugins")]
    next_ask: u64,
    /// The id of the last plugin command started.
    next_command: u64,
    status: AgentStatus,
    publish_events: bool,
    /// The log length when publishing was last turned on: events before
    /// it are not published.
    publish_from: u64,
    disposing: bool,
    finished: bool,
}

impl core::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kernel")
            .field("id", self.core.id())
            .field("status", &self.status)
            .field("tools_in_flight", &self.tools.len())
            .finish_non_exhaustive()
    }
}

/// The tool bodies in flight by token, in token order: a sorted `Vec` (a
/// few at a time; less code than a `BTreeMap` for a device build).
#[derive(Default)]
struct InFlight(Vec<(ToolToken, Running)>);

impl InFlight {
    fn find(&self, token: &ToolToken) -> Result<usize, usize> {
        self.0.binary_search_by(|(t, _)| t.cmp(token))
    }

    /// Adds (or replaces) the body of `token`.
    fn insert(&mut self, token: ToolToken, running: Running) {
        match self.find(&token) {
            Ok(i) => {
                if let Some(slot) = self.0.get_mut(i) {
                    slot.1 = running;
                }
            }
            Err(i) => self.0.insert(i, (token, running)),
        }
    }

    /// Removes the body of `token`.
    fn remove(&mut self, token: &ToolToken) -> Option<Running> {
        let i = self.find(token).ok()?;
        Some(self.0.remove(i).1)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&ToolToken, &mut Running)> {
        self.0.iter_mut().map(|(t, r)| (&*t, r))
    }

    fn values(&self) -> impl Iterator<Item = &Running> {
        self.0.iter().map(|(_, r)| r)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A tool body in flight.
struct Running {
    timeout_ms: Option<u64>,
    deadline: Option<Time>,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Its deadline fired; answered with the TL-14 error whatever it
    /// returns, or at `until`.
    TimedOut {
        until: Time,
    },
    /// The turn was aborted; answered `ABORTED` at `until` if still running.
    Aborting {
        until: Time,
    },
}

/// The size of the response in flight, as it counts towards the cap.
#[derive(Default)]
struct ResponseSize {
    total: u64,
    /// Delta bytes by block index (a few blocks; a `Vec` is less code
    /// than a `BTreeMap` for a device build).
    blocks: Vec<(u64, u64)>,
}

impl ResponseSize {
    /// Counts `chunk`; returns the new total.
    fn add(&mut self, chunk: &StreamChunk) -> u64 {
        let len = |s: &str| s.len() as u64;
        let delta = |blocks: &mut Vec<(u64, u64)>, index: u64, n: u64| {
            match blocks.iter_mut().find(|(i, _)| *i == index) {
                Some((_, seen)) => *seen = seen.saturating_add(n),
                None => blocks.push((index, n)),
            }
            n
        };
        let n = match chunk {
            StreamChunk::TextDelta { index, text }
            | StreamChunk::ReasoningDelta { index, text } => {
                delta(&mut self.blocks, *index, len(text))
            }
            StreamChunk::ToolCallDelta {
                index,
                head,
                arguments_delta,
            } => {
                let n = len(head.id()) + head.name().map_or(0, len) + len(arguments_delta);
                delta(&mut self.blocks, *index, n)
            }
            StreamChunk::BlockEnd { index, block } => {
                let size = match block.as_ref() {
                    ContentBlock::Text { text } | ContentBlock::Reasoning { text } => len(text),
                    ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                    } => len(id.as_str()) + len(name) + len(arguments),
                    _ => 0,
                };
                let seen = self
                    .blocks
                    .iter()
                    .find(|(i, _)| i == index)
                    .map_or(0, |(_, seen)| *seen);
                size.saturating_sub(seen)
            }
            _ => 0,
        };
        self.total = self
            .total
            .saturating_add(n)
            .saturating_add(CHUNK_OVERHEAD_BYTES);
        self.total
    }
}

/// A seam's chain: which seam, with its payload and the value so far.
#[allow(clippy::large_enum_variant)] // one per pending seam
enum Seat {
    /// A deferred core seam.
    Hook { id: u64, call: HookCall },
    /// A kernel seam; `token` is the tool call's for `tools/execute`.
    Kernel { token: u64, call: KernelCall },
}

impl Seat {
    #[cfg(feature = "plugins")]
    fn seam(&self) -> Seams {
        match self {
            Seat::Hook { call, .. } => call.seam(),
            Seat::Kernel { call, .. } => call.seam(),
        }
    }
}

/// A chain stopped at a plugin's ask.
#[cfg(feature = "plugins")]
struct Pending {
    seat: Seat,
    plugin: usize,
    /// A side model call is in flight for it.
    side: bool,
}

enum ChainEnd {
    Final(Result<(), HookError>),
    #[cfg(feature = "plugins")]
    Asked {
        plugin: usize,
        ask: Ask,
    },
}

/// The plugins with what they add to the config: their sections, their
/// tools, and the seams they handle (deferred by the core).
#[cfg(feature = "plugins")]
#[allow(clippy::type_complexity)]
fn take_plugins(
    mut plugins: Vec<Box<dyn Plugin>>,
) -> Result<
    (
        Vec<Box<dyn Plugin>>,
        Vec<PromptSection>,
        Vec<ToolDefinition>,
        Seams,
    ),
    KernelError,
> {
    let mut sections = Vec::new();
    let mut tools = Vec::new();
    let mut seams = Seams::NONE;
    for p in plugins.iter_mut() {
        sections.extend(p.sections());
        tools.extend(p.tools());
        seams = seams | p.seams();
    }
    Ok((plugins, sections, tools, seams))
}

/// Without the plugin chain (feature `plugins` off) there are no plugins
/// to take: any is refused ([`KernelError::NoPluginChain`]).
#[cfg(not(feature = "plugins"))]
#[allow(clippy::type_complexity)]
fn take_plugins(
    plugins: Vec<Box<dyn Plugin>>,
) -> Result<((), Vec<PromptSection>, Vec<ToolDefinition>, Seams), KernelError> {
    if plugins.is_empty() {
        Ok(((), Vec::new(), Vec::new(), Seams::NONE))
    } else {
        Err(KernelError::NoPluginChain)
    }
}

/// Whether [`AgentConfig::validate_streams`] is acted on (feature
/// `stream-validation`, on by default); without it the validator is left
/// out of the build and the flag reads as false.
const STREAM_VALIDATION: bool = cfg!(feature = "stream-validation");

/// A positive finite `timeoutMs` rounded up to whole milliseconds.
fn ceil_ms(ms: f64) -> u64 {
    let whole = ms as u64; // saturating
    if (whole as f64) < ms {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// The TL-14 timeout result.
pub(crate) fn timeout_outcome(ms: u64) -> ToolOutcome {
    ToolOutcome::coded_error(
        error_text!("tool call timed out", "tool call timed out after {ms}ms"),
        "ToolTimeoutError",
        "TOOL_TIMEOUT",
    )
}

impl Kernel {
    /// A kernel over `session`, of which the first `persisted` events are
    /// already stored, with `plugins` in order (their sections and tools
    /// are added to the config's). Its ids continue after those the log
    /// holds ([`Ids::continue_after`]).
    pub fn new(
        config: AgentConfig,
        session: Session,
        persisted: u64,
        plugins: Vec<Box<dyn Plugin>>,
    ) -> Result<Kernel, KernelError> {
        let (plugins, sections, tools, seams) = take_plugins(plugins)?;
        #[cfg(not(feature = "plugins"))]
        let () = plugins;
        let mut core_config = config.core_config_with(sections, tools)?;
        // The core defers exactly the seams a plugin handles.
        core_config.seams = seams;
        // Ids continue after the ones a resumed or forked log holds.
        let mut ids = Ids::new(config.ids, config.seed);
        ids.continue_after(&session);
        let core = Core::new(core_config, session)
            .map_err(KernelError::Resume)?
            .with_ids(ids)
            .with_jitter(Jitter::new(config.ids, config.seed));
        let persisted = persisted.min(core.session().len());
        Ok(Kernel {
            core,
            #[cfg(feature = "plugins")]
            plugins,
            seams,
            tool_timeout_ms: config.tool_timeout_ms,
            grace_ms: config.tool_grace_ms,
            now: Time::MIN,
            effects: VecDeque::new(),
            persisted,
            persisting: None,
            write_behind_ms: config.write_batch_max_delay_ms,
            behind_since: None,
            checkpoint: None,
            held: None,
            flush_failed: None,
            store_error: None,
            failed_at: None,
            model: None,
            max_response_bytes: config.max_response_bytes,
            response: ResponseSize::default(),
            validator: None,
            validate_streams: config.validate_streams,
            tools: InFlight::default(),
            #[cfg(feature = "plugins")]
            asks: BTreeMap::new(),
            #[cfg(feature = "plugins")]
            next_ask: 0,
            next_command: 0,
            status: AgentStatus::Idle,
            publish_events: false,
            publish_from: 0,
            disposing: false,
            finished: false,
        })
    }

    /// Uses `ids` for the core's message and retry ids instead of the
    /// config's [`IdMode`](crate::IdMode) (a device's own scheme).
    #[must_use = "the kernel is returned, not changed in place"]
    pub fn with_ids(mut self, ids: impl dsh_core::agent::IdSource + Send + 'static) -> Self {
        self.core = self.core.with_ids(ids);
        self
    }

    /// The seams the plugins handle ([`Seams::NONE`] without the plugin
    /// chain, so the code behind them is left out of such a build).
    fn seams(&self) -> Seams {
        if cfg!(feature = "plugins") {
            self.seams
        } else {
            Seams::NONE
        }
    }

    /// Consumes the kernel into its core machine (and its session).
    pub fn into_core(self) -> Core {
        self.core
    }

    // ------------------------------------------------------------------
    // Read access

    /// The agent id (the session id).
    pub fn id(&self) -> &SessionId {
        self.core.id()
    }

    /// The session log.
    pub fn session(&self) -> &Session {
        self.core.session()
    }

    /// The core machine (read-only).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The public status (LC-3).
    #[must_use]
    pub fn status(&self) -> AgentStatus {
        self.status
    }

    /// Gives back the spare capacity of the empty queues (the kernel's
    /// effects, the core's outputs): hosts call it when the agent is idle
    /// ([`Kernel::is_idle`]) so ten thousand idle agents do not each keep
    /// their busiest step's buffers. Changes nothing observable.
    pub fn trim(&mut self) {
        if self.effects.is_empty() {
            self.effects = VecDeque::new();
        }
        self.core.trim();
    }

    /// Idle with nothing in flight and nothing left to persist or publish:
    /// `when_idle()` resolves (IB-13).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        let len = self.core.session().len();
        self.core.is_quiescent()
            && self.tools.is_empty()
            && self.persisting.is_none()
            && self.held.is_none()
            && self.effects.is_empty()
            && (self.persisted >= len || self.failed_at == Some(len))
    }

    /// Whether disposal finished ([`Effect::Finished`] was emitted).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Publish every appended session event as [`AgentEvent::Event`]
    /// (runtimes turn it on while anyone subscribes; statuses, asks and
    /// errors are always published).
    ///
    /// Turned on when the log holds `n` events, it publishes each event
    /// with seq `n` or later once, in seq order, and none before `n` (a
    /// subscriber reads those from the log). Turned off, it drops the
    /// event publications not yet drained.
    pub fn set_publish_events(&mut self, on: bool) {
        if on && !self.publish_events {
            self.publish_from = self.core.session().len();
        }
        if !on {
            self.effects
                .retain(|e| !matches!(e, Effect::Publish(AgentEvent::Event(_))));
        }
        self.publish_events = on;
    }

    /// The message of the last failed store write while part of the log is
    /// unwritten; `None` once a write succeeds.
    pub fn store_error(&self) -> Option<&str> {
        self.store_error.as_deref()
    }

    /// How the last turn ended.
    #[must_use]
    pub fn summary(&self) -> TurnSummary {
        let mut s = TurnSummary {
            turn: self.core.turn(),
            store_error: self.store_error.clone(),
            ..TurnSummary::default()
        };
        let mut seen_end = false;
        for e in self.core.session().events().iter().rev() {
            match e.data() {
                EventData::TurnEnd(t) if !seen_end => {
                    seen_end = true;
                    s.turn = t.turn;
                    s.reason = Some(t.reason.clone());
                }
                EventData::AssistantMessage(m) if seen_end && m.usage.is_some() => {
                    s.usage = m.usage;
                    break;
                }
                EventData::TurnStart(_) if seen_end => break,
                _ => {}
            }
        }
        s
    }

    /// The earliest deadline on the kernel's clock: a retry delay, a tool
    /// deadline, a grace period, a write-behind window. Arm a monotonic
    /// timer for it and call [`handle_timeout`](Self::handle_timeout) with
    /// it when it runs out.
    #[must_use = "arm a timer for this deadline"]
    pub fn poll_timeout(&self) -> Option<Time> {
        let mut best = self.core.poll_timeout();
        if let Some(d) = self.write_behind_deadline() {
            best = Some(best.map_or(d, |b: Time| b.min(d)));
        }
        for t in self.tools.values() {
            let d = match t.phase {
                Phase::Running => t.deadline,
                Phase::TimedOut { until } | Phase::Aborting { until } => Some(until),
            };
            if let Some(d) = d {
                best = Some(best.map_or(d, |b: Time| b.min(d)));
            }
        }
        best
    }

    /// The kernel's clock: the running maximum of every input's `now` and
    /// every deadline reported reached ([`Time::MIN`] before the first
    /// input). Deadlines from [`poll_timeout`](Self::poll_timeout) are on
    /// this clock: a timer armed now waits
    /// `deadline.millis_since(kernel.now())` ms.
    #[must_use]
    pub fn now(&self) -> Time {
        self.now
    }
}

#[cfg(test)]
mod tests {
    /// The default build says how long; with `error-texts` off the message
    /// is fixed (the code stays).
    #[test]
    fn timeout_text() {
        let error = super::timeout_outcome(250).error.unwrap();
        #[cfg(feature = "error-texts")]
        assert_eq!(error.message, "tool call timed out after 250ms");
        #[cfg(not(feature = "error-texts"))]
        assert_eq!(error.message, "tool call timed out");
        assert_eq!(error.info.unwrap().code, "TOOL_TIMEOUT");
    }
}
