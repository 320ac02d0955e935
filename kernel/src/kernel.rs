//! The [`Kernel`]: one agent's core machine plus every decision a runtime
//! used to make for itself.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    Agent as Core, AgentStatus, CancelCause, Checkpoint, HookCall, HookError, InboxTarget,
    Notification, Output, ToolExecution,
};
use dsh_core::session::{EventData, Session, SurfaceIntent};
use dsh_core::{ContentBlock, Message, SessionId, StreamChunk, StreamValidator};

use crate::ids::{Ids, Jitter};
use crate::plugin::{
    Action, Ask, Cx, KernelCall, Plugin, Reply, Seams, Step, ToolDispatch, run_hook, run_kernel,
};
use crate::types::{
    AgentConfig, AgentEvent, ApprovalRequestId, CHUNK_OVERHEAD_BYTES, Effect, KernelError,
    TurnSummary,
};

/// The runtime kernel of one agent: sans-IO, `no_std`, deterministic.
///
/// # Contract
///
/// **Inputs** are method calls that take `now`, the runtime's clock in
/// epoch milliseconds: user calls ([`send`](Self::send),
/// [`cancel`](Self::cancel), [`answer`](Self::answer),
/// [`dispose`](Self::dispose)) and completions of earlier effects
/// ([`model_chunk`](Self::model_chunk), [`model_end`](Self::model_end),
/// [`model_error`](Self::model_error), [`tool_done`](Self::tool_done),
/// [`persisted`](Self::persisted), [`handle_timeout`](Self::handle_timeout)).
/// The kernel never reads a clock: `now` is the only time it knows, and it
/// is written into the log. It should not go backwards; an earlier `now`
/// than the last input's is raised to it, so logged times never decrease.
///
/// **Outputs** are [`Effect`]s from [`poll`](Self::poll). After **every**
/// input, drain `poll` until it returns `None` and carry each effect out
/// (start a model stream, run or stop a tool body, write a batch, publish a
/// live event) before the next input. Completions may arrive in any order
/// and at any later time; several tool bodies may be in flight at once.
///
/// **Timers**: [`poll_timeout`](Self::poll_timeout) is the earliest
/// deadline (a retry delay, a tool deadline or grace period). When it
/// passes, call [`handle_timeout`](Self::handle_timeout); a call before any
/// deadline (a spurious wake-up) changes nothing.
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
    plugins: Vec<Box<dyn Plugin>>,
    seams: Seams,
    tool_timeout_ms: Option<u64>,
    grace_ms: u64,
    now: i64,
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
    behind_since: Option<i64>,
    model: Option<u64>,
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
    tools: BTreeMap<u64, Running>,
    asks: BTreeMap<u64, Pending>,
    next_ask: u64,
    /// The id of the last plugin command started.
    next_command: u64,
    status: AgentStatus,
    publish_events: bool,
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

/// A tool body in flight.
struct Running {
    timeout_ms: Option<u64>,
    deadline: Option<i64>,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Its deadline fired; answered with the TL-14 error whatever it
    /// returns, or at `until`.
    TimedOut {
        until: i64,
    },
    /// The turn was aborted; answered `ABORTED` at `until` if still running.
    Aborting {
        until: i64,
    },
}

/// The size of the response in flight, as it counts towards the cap.
#[derive(Default)]
struct ResponseSize {
    total: u64,
    /// Delta bytes by block index.
    blocks: BTreeMap<u64, u64>,
}

impl ResponseSize {
    /// Counts `chunk`; returns the new total.
    fn add(&mut self, chunk: &StreamChunk) -> u64 {
        let len = |s: &str| s.len() as u64;
        let delta = |blocks: &mut BTreeMap<u64, u64>, index: u64, n: u64| {
            let seen = blocks.entry(index).or_default();
            *seen = seen.saturating_add(n);
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
                let seen = self.blocks.get(index).copied().unwrap_or(0);
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
    fn seam(&self) -> Seams {
        match self {
            Seat::Hook { call, .. } => call.seam(),
            Seat::Kernel { call, .. } => call.seam(),
        }
    }
}

/// A chain stopped at a plugin's ask.
struct Pending {
    seat: Seat,
    plugin: usize,
    /// A side model call is in flight for it.
    side: bool,
}

enum ChainEnd {
    Final(Result<(), HookError>),
    Asked { plugin: usize, ask: Ask },
}

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
        format!("tool call timed out after {ms}ms"),
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
        mut plugins: Vec<Box<dyn Plugin>>,
    ) -> Result<Kernel, KernelError> {
        let mut sections = Vec::new();
        let mut tools = Vec::new();
        let mut seams = Seams::NONE;
        for p in plugins.iter_mut() {
            sections.extend(p.sections());
            tools.extend(p.tools());
            seams = seams | p.seams();
        }
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
            plugins,
            seams,
            tool_timeout_ms: config.tool_timeout_ms,
            grace_ms: config.tool_grace_ms,
            now: i64::MIN,
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
            tools: BTreeMap::new(),
            asks: BTreeMap::new(),
            next_ask: 0,
            next_command: 0,
            status: AgentStatus::Idle,
            publish_events: false,
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
    pub fn status(&self) -> AgentStatus {
        self.status
    }

    /// Gives back the spare capacity of the empty queues (the kernel's
    /// effects, the core's outputs): hosts call it when the agent is idle
    /// ([`Kernel::is_idle`]) so ten thousand idle agents do not each keep
    /// their busiest step's buffers (issue 34). Changes nothing observable.
    pub fn trim(&mut self) {
        if self.effects.is_empty() {
            self.effects = VecDeque::new();
        }
        self.core.trim();
    }

    /// Idle with nothing in flight and nothing left to persist or publish:
    /// `when_idle()` resolves (IB-13).
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
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Publish every appended session event as [`AgentEvent::Event`]
    /// (runtimes turn it on while anyone subscribes; statuses, asks and
    /// errors are always published).
    pub fn set_publish_events(&mut self, on: bool) {
        self.publish_events = on;
    }

    /// The message of the last failed store write while part of the log is
    /// unwritten; `None` once a write succeeds.
    pub fn store_error(&self) -> Option<&str> {
        self.store_error.as_deref()
    }

    /// How the last turn ended.
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

    /// The earliest deadline (epoch ms): a retry delay, a tool deadline, a
    /// grace period. Call [`handle_timeout`](Self::handle_timeout) when it
    /// passes.
    #[must_use = "arm a timer for this deadline"]
    pub fn poll_timeout(&self) -> Option<i64> {
        let mut best = self.core.poll_timeout();
        if let Some(d) = self.write_behind_deadline() {
            best = Some(best.map_or(d, |b: i64| b.min(d)));
        }
        for t in self.tools.values() {
            let d = match t.phase {
                Phase::Running => t.deadline,
                Phase::TimedOut { until } | Phase::Aborting { until } => Some(until),
            };
            if let Some(d) = d {
                best = Some(best.map_or(d, |b: i64| b.min(d)));
            }
        }
        best
    }

    // ------------------------------------------------------------------
    // Inputs

    fn tick(&mut self, now: i64) -> i64 {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    /// Delivers `message` (IB-6) to `target`, waking the driver when
    /// `wakeup`.
    pub fn send(
        &mut self,
        now: i64,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.disposing {
            return Err(KernelError::Disposed);
        }
        self.core.send(now, message, target, wakeup)?;
        Ok(())
    }

    /// Cancels the running turn (LC-33).
    pub fn cancel(&mut self, now: i64, cause: CancelCause, keep_inbox: bool) {
        let now = self.tick(now);
        self.core.cancel(now, cause, keep_inbox);
    }

    /// Appends a foreign event (plugin, tool-owned) at the end of the log.
    pub fn append_event(&mut self, now: i64, data: EventData) -> Result<u64, KernelError> {
        let now = self.tick(now);
        Ok(self.core.append_event(now, data, None)?)
    }

    /// Disposes the agent (LC-40): the running turn is cancelled with cause
    /// `disposed`, pending asks are withdrawn, running bodies are told to
    /// stop; [`Effect::Finished`] follows once everything is persisted.
    pub fn dispose(&mut self, now: i64) {
        let now = self.tick(now);
        if self.disposing {
            return;
        }
        self.disposing = true;
        self.core.cancel(now, CancelCause::Disposed, false);
        self.withdraw_asks();
    }

    /// A chunk of model attempt `attempt` (LC-19).
    pub fn model_chunk(
        &mut self,
        now: i64,
        attempt: u64,
        chunk: StreamChunk,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.model != Some(attempt) {
            return Err(KernelError::StaleAttempt { attempt });
        }
        let max = self.max_response_bytes;
        if self.response.add(&chunk) > max {
            // Issue 25: a response is bounded; this chunk and the rest of
            // the stream are refused, what came before stays.
            self.effects.push_back(Effect::CancelModel { attempt });
            let error = HookError::llm(
                "RESPONSE_TOO_LARGE",
                format!("the model response exceeded {max} bytes"),
            );
            return self.model_error(now, attempt, error);
        }
        if let Some(validator) = &mut self.validator {
            // The reference's library adapter ends a `max-tokens` stream
            // with the cut tool call still open (the recording
            // `max-tokens-continue` breaks G-7 so); the assembler drops
            // that call (BB-3), so this one rule is let through there.
            let truncated = |v: &dsh_core::Violation| {
                v.rule == dsh_core::Rule::G7
                    && matches!(&chunk, StreamChunk::Finish { reason, .. } if reason.kind() == "max-tokens")
            };
            if let Some(violation) = validator.push(&chunk).err().filter(|v| !truncated(v)) {
                // The reference's development invariant checker: a stream
                // that breaks the grammar ends the step (INVARIANT).
                self.effects.push_back(Effect::CancelModel { attempt });
                let error = HookError::llm(
                    "INVARIANT",
                    format!("provider stream broke rule {violation}"),
                );
                return self.model_error(now, attempt, error);
            }
        }
        Ok(self.core.handle_chunk(now, attempt, chunk)?)
    }

    /// The stream of `attempt` ended (adapter failures arrive before as a
    /// terminal `finish` chunk, AC-6).
    pub fn model_end(&mut self, now: i64, attempt: u64) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.model != Some(attempt) {
            return Err(KernelError::StaleAttempt { attempt });
        }
        self.model = None;
        Ok(self.core.handle_stream_end(now, attempt)?)
    }

    /// The consumer of `attempt`'s stream failed outside the adapter: a
    /// turn error (LC-27).
    pub fn model_error(
        &mut self,
        now: i64,
        attempt: u64,
        error: HookError,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.model != Some(attempt) {
            return Err(KernelError::StaleAttempt { attempt });
        }
        self.model = None;
        Ok(self.core.handle_stream_error(now, attempt, error)?)
    }

    /// The body of call `token` returned `outcome`; `events` are the
    /// tool-owned events it logged (TL-24), appended before the result. A
    /// call the kernel already answered (timeout or abort grace passed) is
    /// [`KernelError::StaleTool`].
    pub fn tool_done(
        &mut self,
        now: i64,
        token: u64,
        outcome: ToolOutcome,
        events: Vec<EventData>,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        let Some(running) = self.tools.remove(&token) else {
            return Err(KernelError::StaleTool { token });
        };
        for data in events {
            if let Err(e) = self.core.append_event(now, data, None) {
                self.publish(AgentEvent::Error(format!("tool event refused: {e}")));
            }
        }
        let outcome = match running.phase {
            // TL-14: the wrapper's own deadline fired, so its error replaces
            // whatever the body returned.
            Phase::TimedOut { .. } => timeout_outcome(running.timeout_ms.unwrap_or(0)),
            _ => outcome,
        };
        Ok(self.core.handle_tool_result(now, token, outcome)?)
    }

    /// The write of the pending [`Effect::Persist`] finished; `Err` carries
    /// the store's message.
    pub fn persisted(&mut self, now: i64, result: Result<(), String>) -> Result<(), KernelError> {
        self.tick(now);
        let Some((end, checkpoint)) = self.persisting.take() else {
            return Err(KernelError::NoPersistPending);
        };
        match result {
            Ok(()) => {
                self.persisted = self.persisted.max(end);
                self.flush_failed = None;
                self.store_error = None;
                self.failed_at = None;
            }
            Err(e) => {
                self.failed_at = Some(end);
                let at = match checkpoint {
                    Some(cp) => format!(" at {cp:?}"),
                    None => String::new(),
                };
                let message = format!("session store write failed{at}: {e}");
                self.publish(AgentEvent::Error(message.clone()));
                self.store_error = Some(message.clone());
                match self.model {
                    // Issue 25: a response that cannot be stored is not
                    // read on; the turn ends in error, keeping what
                    // streamed so far (the write is retried at its end).
                    Some(attempt) => {
                        self.effects.push_back(Effect::CancelModel { attempt });
                        let error = HookError::llm("FLUSH_FAILED", message);
                        let now = self.now;
                        if let Err(e) = self.model_error(now, attempt, error) {
                            self.publish(AgentEvent::Error(e.to_string()));
                        }
                    }
                    None if matches!(
                        checkpoint,
                        Some(Checkpoint::BeforeModel | Checkpoint::BeforeToolBody)
                    ) =>
                    {
                        self.flush_failed = Some(message);
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// Runs plugin command `name` with `args` as maintenance (LC-39): only
    /// while idle; every plugin with [`Seams::COMMAND`] sees it in order
    /// ([`Plugin::command`]); the value starts as `null`. The result is
    /// published as [`AgentEvent::CommandDone`] with the id returned here;
    /// input sent meanwhile waits for the end of the maintenance.
    pub fn command(
        &mut self,
        now: i64,
        name: &str,
        args: serde_json::Value,
    ) -> Result<u64, KernelError> {
        self.tick(now);
        if self.disposing {
            return Err(KernelError::Disposed);
        }
        self.core.begin_maintenance(self.now)?;
        self.next_command += 1;
        let id = self.next_command;
        // A command's seat carries its id where a tool's carries its token.
        let seat = Seat::Kernel {
            token: id,
            call: KernelCall::Command {
                name: String::from(name),
                value: args,
            },
        };
        self.run_and_end(seat, 0, None);
        Ok(id)
    }

    /// Answers ask `id` ([`AgentEvent::ApprovalRequested`] or
    /// [`AgentEvent::Asked`]).
    pub fn answer(&mut self, now: i64, id: u64, reply: Reply) -> Result<(), KernelError> {
        self.tick(now);
        let Some(pending) = self.asks.remove(&id) else {
            return Err(KernelError::StaleAsk { id });
        };
        let reply = if self.disposing {
            Reply::Cancelled
        } else {
            reply
        };
        self.resume_chain(pending, reply);
        Ok(())
    }

    /// A timer from [`poll_timeout`](Self::poll_timeout) may have passed:
    /// fires every deadline `<= now`. Idempotent: a spurious wake-up
    /// changes nothing.
    pub fn handle_timeout(&mut self, now: i64) {
        let now = self.tick(now);
        if self.core.poll_timeout().is_some_and(|d| d <= now) {
            // Cannot fail: a timer is armed.
            let _ = self.core.handle_timeout(now);
        }
        let mut answer = Vec::new();
        for (token, t) in self.tools.iter_mut() {
            match t.phase {
                Phase::Running if t.deadline.is_some_and(|d| d <= now) => {
                    t.phase = Phase::TimedOut {
                        until: now.saturating_add(self.grace_ms as i64),
                    };
                    self.effects.push_back(Effect::CancelTool { token: *token });
                }
                Phase::TimedOut { until } if until <= now => {
                    answer.push((*token, timeout_outcome(t.timeout_ms.unwrap_or(0))));
                }
                Phase::Aborting { until } if until <= now => {
                    answer.push((*token, ToolOutcome::aborted()));
                }
                _ => {}
            }
        }
        for (token, outcome) in answer {
            self.tools.remove(&token);
            // The call is in flight in the core: it was started by it.
            if let Err(e) = self.core.handle_tool_result(now, token, outcome) {
                self.publish(AgentEvent::Error(format!("tool answer refused: {e}")));
            }
        }
    }

    // ------------------------------------------------------------------
    // Outputs

    /// The next effect, or `None` when drained (or when a
    /// [`Effect::Persist`] awaits [`persisted`](Self::persisted)).
    #[must_use = "drain effects until `None` and carry each out"]
    pub fn poll(&mut self) -> Option<Effect> {
        loop {
            if let Some(e) = self.effects.pop_front() {
                return Some(e);
            }
            if self.persisting.is_some() || self.finished {
                return None;
            }
            let len = self.core.session().len();
            let out = match self.held.take() {
                Some(out) => out,
                None => match self.core.poll() {
                    Some(out) => out,
                    None => {
                        if let Some(cp) = self.checkpoint.take()
                            && self.persisted < len
                        {
                            return Some(self.persist(Some(cp)));
                        }
                        return self.settle();
                    }
                },
            };
            // SM-14: the checkpoint's write comes before the dispatch; the
            // turn's end is written before idle is reported, so a failed
            // write reaches subscribers first (issue 25).
            if matches!(
                out,
                Output::CallModel(_) | Output::ExecuteTool(_) | Output::Status(AgentStatus::Idle)
            ) && let Some(cp) = self.checkpoint.take()
                && self.persisted < len
            {
                self.held = Some(out);
                return Some(self.persist(Some(cp)));
            }
            self.on_output(out);
        }
    }

    /// The core is drained: persist what is left when it is quiet, finish
    /// a disposal.
    fn settle(&mut self) -> Option<Effect> {
        if !self.core.is_quiescent() || !self.tools.is_empty() {
            // W2/W3: between checkpoints (a response streaming in, a tool
            // running), what was appended is written once the window that
            // opened with the first unwritten event has passed.
            let len = self.core.session().len();
            if self.persisted >= len || self.failed_at == Some(len) {
                self.behind_since = None;
                return None;
            }
            let since = *self.behind_since.get_or_insert(self.now);
            let due = self
                .write_behind_ms
                .is_some_and(|ms| self.now >= since.saturating_add(ms as i64));
            return due.then(|| self.persist(None));
        }
        let len = self.core.session().len();
        if self.persisted < len && self.failed_at != Some(len) {
            return Some(self.persist(None));
        }
        if self.disposing && !self.finished {
            self.finished = true;
            return Some(Effect::Finished);
        }
        None
    }

    fn persist(&mut self, checkpoint: Option<Checkpoint>) -> Effect {
        let len = self.core.session().len();
        self.persisting = Some((len, checkpoint));
        self.behind_since = None;
        Effect::Persist {
            range: self.persisted..len,
            checkpoint,
        }
    }

    fn publish(&mut self, event: AgentEvent) {
        self.effects.push_back(Effect::Publish(event));
    }

    /// When the open write-behind window closes (W2), if one is open.
    fn write_behind_deadline(&self) -> Option<i64> {
        if self.persisting.is_some() {
            return None;
        }
        let since = self.behind_since?;
        let ms = self.write_behind_ms?;
        Some(since.saturating_add(ms as i64))
    }

    fn on_output(&mut self, out: Output) {
        let now = self.now;
        match out {
            Output::Appended(range) => self.appended(range.start, range.end),
            Output::Status(status) => {
                self.status = status;
                self.publish(AgentEvent::Status(status));
            }
            Output::Notify(Notification::Error { error, .. }) => {
                self.publish(AgentEvent::Error(error.message().to_string()));
            }
            Output::Notify(_) => {}
            Output::Flush(cp) => {
                for p in self.plugins.iter_mut() {
                    if p.seams().contains(Seams::FLUSH) {
                        p.on_flush(cp);
                    }
                }
                self.checkpoint = Some(cp);
            }
            Output::CallModel(call) => match self.flush_failed.take() {
                // SM-14: the request is not dispatched; the turn ends in
                // error with the store's failure.
                Some(message) => {
                    self.model = Some(call.attempt);
                    let error = HookError::llm("FLUSH_FAILED", message);
                    if let Err(e) = self.model_error(now, call.attempt, error) {
                        self.publish(AgentEvent::Error(e.to_string()));
                    }
                }
                None => {
                    self.model = Some(call.attempt);
                    self.response = ResponseSize::default();
                    self.validator = self.validate_streams.then(StreamValidator::new);
                    self.effects.push_back(Effect::StartModel(call));
                }
            },
            Output::CancelModelCall { attempt } if self.model == Some(attempt) => {
                self.model = None;
                self.effects.push_back(Effect::CancelModel { attempt });
            }
            Output::ExecuteTool(exec) => match self.flush_failed.take() {
                Some(message) => {
                    if let Err(e) =
                        self.core
                            .handle_tool_result(now, exec.token, ToolOutcome::error(message))
                    {
                        self.publish(AgentEvent::Error(e.to_string()));
                    }
                }
                None => self.execute(exec),
            },
            Output::AbortTurn { .. } => {
                let until = now.saturating_add(self.grace_ms as i64);
                for (token, t) in self.tools.iter_mut() {
                    if t.phase == Phase::Running {
                        t.phase = Phase::Aborting { until };
                        self.effects.push_back(Effect::CancelTool { token: *token });
                    }
                }
                self.withdraw_asks();
            }
            Output::Hook { id, call } => self.hook(id, call),
            _ => {}
        }
    }

    fn appended(&mut self, start: u64, end: u64) {
        let listen = self.seams.contains(Seams::EVENTS);
        if !listen && !self.publish_events {
            return;
        }
        let mut appends = Vec::new();
        let mut actions = Vec::new();
        for seq in start..end {
            let Some(event) = self.core.session().event(seq) else {
                continue;
            };
            if listen {
                let session = self.core.session();
                let mut cx = Cx {
                    now: self.now,
                    session,
                    reply: None,
                    appends: &mut appends,
                    actions: &mut actions,
                };
                for p in self.plugins.iter_mut() {
                    if p.seams().contains(Seams::EVENTS) {
                        p.on_event(&mut cx, event);
                    }
                }
            }
            if self.publish_events {
                let e = Arc::new(event.clone());
                self.effects
                    .push_back(Effect::Publish(AgentEvent::Event(e)));
            }
        }
        self.apply(appends, actions);
    }

    fn apply(&mut self, appends: Vec<(EventData, Option<SurfaceIntent>)>, actions: Vec<Action>) {
        let now = self.now;
        for (data, intent) in appends {
            if let Err(e) = self.core.append_event(now, data, intent) {
                self.publish(AgentEvent::Error(format!("plugin event refused: {e}")));
            }
        }
        for a in actions {
            match a {
                Action::Send {
                    message,
                    target,
                    wakeup,
                } => {
                    if let Err(e) = self.core.send(now, message, target, wakeup) {
                        self.publish(AgentEvent::Error(format!("plugin send refused: {e}")));
                    }
                }
                Action::Cancel { cause, keep_inbox } => self.core.cancel(now, cause, keep_inbox),
            }
        }
    }

    /// Withdraws every pending ask: each plugin sees [`Reply::Cancelled`];
    /// side calls in flight are stopped ([`Effect::CancelSide`]).
    fn withdraw_asks(&mut self) {
        while let Some((id, pending)) = self.asks.pop_first() {
            if pending.side {
                self.effects.push_back(Effect::CancelSide { id });
            }
            self.resume_chain(pending, Reply::Cancelled);
        }
    }

    // ------------------------------------------------------------------
    // Tools

    fn execute(&mut self, exec: ToolExecution) {
        if !self.seams.contains(Seams::TOOL_EXECUTE) {
            self.start_tool(exec);
            return;
        }
        let seat = Seat::Kernel {
            token: exec.token,
            call: KernelCall::ToolExecute {
                value: ToolDispatch::Run(exec),
            },
        };
        self.run_and_end(seat, 0, None);
    }

    fn start_tool(&mut self, exec: ToolExecution) {
        let declared = self
            .core
            .config()
            .tools
            .get(&exec.name)
            .and_then(|d| d.timeout_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(ceil_ms);
        let timeout_ms = declared.or(self.tool_timeout_ms.filter(|ms| *ms > 0));
        let deadline = timeout_ms.map(|ms| self.now.saturating_add(ms.min(i64::MAX as u64) as i64));
        self.tools.insert(
            exec.token,
            Running {
                timeout_ms,
                deadline,
                phase: Phase::Running,
            },
        );
        self.effects
            .push_back(Effect::StartTool { exec, timeout_ms });
    }

    // ------------------------------------------------------------------
    // Seams

    fn hook(&mut self, id: u64, call: HookCall) {
        self.run_and_end(Seat::Hook { id, call }, 0, None);
    }

    fn resume_chain(&mut self, pending: Pending, reply: Reply) {
        let Pending { seat, plugin, .. } = pending;
        self.run_and_end(seat, plugin, Some(reply));
    }

    fn run_and_end(&mut self, seat: Seat, start: usize, reply: Option<Reply>) {
        let (seat, end, actions) = self.run_chain(seat, start, reply);
        self.chain_end(seat, end, actions);
    }

    /// Runs the plugins from `start` on; `reply` goes to the first one.
    fn run_chain(
        &mut self,
        mut seat: Seat,
        start: usize,
        mut reply: Option<Reply>,
    ) -> (Seat, ChainEnd, Vec<Action>) {
        let mut appends = Vec::new();
        let mut actions = Vec::new();
        let wanted = seat.seam();
        let mut end = None;
        for i in start..self.plugins.len() {
            let plugin = &mut self.plugins[i];
            if !plugin.seams().contains(wanted) {
                continue;
            }
            let mut cx = Cx {
                now: self.now,
                session: self.core.session(),
                reply: reply.take(),
                appends: &mut appends,
                actions: &mut actions,
            };
            let step;
            (seat, step) = match seat {
                Seat::Hook { id, call } => {
                    let (call, step) = run_hook(plugin.as_mut(), &mut cx, call);
                    (Seat::Hook { id, call }, step)
                }
                Seat::Kernel { token, call } => {
                    let (call, step) = run_kernel(plugin.as_mut(), &mut cx, call);
                    (Seat::Kernel { token, call }, step)
                }
            };
            match step {
                Step::Next => {}
                Step::Done => {
                    end = Some(ChainEnd::Final(Ok(())));
                    break;
                }
                Step::Fail(e) => {
                    end = Some(ChainEnd::Final(Err(e)));
                    break;
                }
                Step::Ask(ask) => {
                    end = Some(ChainEnd::Asked { plugin: i, ask });
                    break;
                }
            }
        }
        // Plugin appends land here, before the seam's result takes effect.
        self.apply(appends, Vec::new());
        (seat, end.unwrap_or(ChainEnd::Final(Ok(()))), actions)
    }

    /// Completes a chain; queued calls apply after the seam completes
    /// (loop.md Q3).
    fn chain_end(&mut self, seat: Seat, end: ChainEnd, actions: Vec<Action>) {
        match end {
            ChainEnd::Asked { plugin, ask } => {
                if self.disposing {
                    // Nobody will answer: the plugin sees the withdrawal at
                    // once; asking again then fails the seam.
                    self.apply(Vec::new(), actions);
                    let (seat, end, actions) = self.run_chain(seat, plugin, Some(Reply::Cancelled));
                    let end = match end {
                        ChainEnd::Asked { .. } => ChainEnd::Final(Err(HookError::msg(
                            "a plugin asked while the agent is being disposed",
                        ))),
                        done => done,
                    };
                    self.chain_end(seat, end, actions);
                    return;
                }
                self.next_ask += 1;
                let id = self.next_ask;
                let event = match ask {
                    Ask::Approval {
                        call_id,
                        tool,
                        arguments,
                        reason,
                    } => AgentEvent::ApprovalRequested {
                        id: ApprovalRequestId(id),
                        call_id,
                        tool,
                        arguments,
                        reason,
                    },
                    Ask::Plugin { plugin, request } => AgentEvent::Asked {
                        id: ApprovalRequestId(id),
                        plugin,
                        request,
                    },
                    Ask::Model {
                        plugin: name,
                        request,
                    } => {
                        self.asks.insert(
                            id,
                            Pending {
                                seat,
                                plugin,
                                side: true,
                            },
                        );
                        self.effects.push_back(Effect::SideModel {
                            id,
                            plugin: name,
                            request: *request,
                        });
                        self.apply(Vec::new(), actions);
                        return;
                    }
                };
                self.asks.insert(
                    id,
                    Pending {
                        seat,
                        plugin,
                        side: false,
                    },
                );
                self.publish(event);
                self.apply(Vec::new(), actions);
            }
            ChainEnd::Final(result) => {
                let now = self.now;
                let mut actions = actions;
                match seat {
                    Seat::Hook { id, call } => {
                        // Queued calls land before the answer takes
                        // effect, as when the core runs the seam itself
                        // (it applies them right after the hook returns):
                        // turn-stopping acts through steer / inject (SM-5)
                        // and the core reads the inbox on the answer; a
                        // cancel from tools/post-execute stops the turn
                        // before the next step starts.
                        self.apply(Vec::new(), core::mem::take(&mut actions));
                        let answer = match result {
                            Ok(()) => call.answer(),
                            Err(e) => call.fail(e),
                        };
                        if let Err(e) = self.core.complete_hook(now, id, answer) {
                            self.publish(AgentEvent::Error(format!("seam answer refused: {e}")));
                        }
                    }
                    Seat::Kernel {
                        token: id,
                        call: KernelCall::Command { name, value },
                    } => {
                        let result = result.map(|()| value).map_err(|e| e.to_string());
                        if let Err(e) = self.core.end_maintenance(now) {
                            self.publish(AgentEvent::Error(format!(
                                "maintenance end refused: {e}"
                            )));
                        }
                        self.publish(AgentEvent::CommandDone { id, name, result });
                    }
                    Seat::Kernel {
                        token,
                        call: KernelCall::ToolExecute { value },
                    } => {
                        let answered = match result {
                            Ok(()) => match value {
                                ToolDispatch::Run(e) => {
                                    self.start_tool(e);
                                    None
                                }
                                ToolDispatch::Answer(o) => Some(o),
                            },
                            Err(e) => Some(e.tool_outcome()),
                        };
                        if let Some(outcome) = answered
                            && let Err(e) = self.core.handle_tool_result(now, token, outcome)
                        {
                            self.publish(AgentEvent::Error(format!("tool answer refused: {e}")));
                        }
                    }
                }
                self.apply(Vec::new(), actions);
            }
        }
    }
}
