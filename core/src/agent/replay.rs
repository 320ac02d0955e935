//! Replaying a recorded session through the [`Agent`] (a pure driver).
//!
//! The recorded log is split into what the outside world did and what the
//! loop wrote:
//!
//! - **inputs**: inbox insertions (`send`), cancellations, plugin and
//!   tool-owned events (appended at their positions), surface replacements
//!   (compaction);
//! - **the outside world's answers**: model streams (per attempt), tool
//!   results (per call), and seam decisions that show in the log (the
//!   messages a pre-step entered, the config of each request, whether a
//!   failed request was retried, a rejection or an error);
//! - **core events**: everything the loop writes (turns, steps, chunks,
//!   messages, tool calls and results, request records, inbox splices).
//!
//! [`replay`] feeds the inputs and answers to a fresh agent over the
//! recording's seed (the events up to its last `session/end-seed`) and
//! compares every core event it produces with the recorded one (all fields
//! but `time`, which recordings normalise). The first difference stops the
//! replay and is reported with a reason.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use serde_json::Value;

use crate::chunk::LlmFailure;
use crate::ids::{MessageId, RetryId};
use crate::options::AdapterDefaults;
use crate::session::{
    AbortCause, EpochHeader, EventData, HeaderReason, InboxSpliced, Session, SessionEvent,
    SessionHeader, SurfaceIntent, SurfaceOp, TurnEndReason,
};

use super::hooks::{
    CancelCause, HookError, IdPurpose, IdSource, PreStepDecision, PreparedCall, Recovery,
};
use super::inbox::InboxTarget;
use super::io::{HookAnswer, HookCall, Output};
use super::machine::{Agent, AgentConfig, AgentOptions, is_loop_owned};
use super::prompt::{Assembly, PromptSection};
use super::seams::Seams;
use super::tools::{ErrorInfo, ToolDefinition, ToolError, ToolOutcome, ToolRegistry};

/// How to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// [HEAD Δ H-1]: the recording keeps interrupted prefixes.
    pub interrupted_prefix: bool,
    /// [HEAD Δ H-2]: the recording latches wakes.
    pub wake_latch: bool,
    /// The recording went through the conformance fixture-token
    /// substitution, which leaves `"tools":[]` where the scrubbed tool list
    /// was: compare `request/header` events by their canonical header
    /// (session.md 7.1) instead of their text.
    pub fixture_tokens: bool,
}

impl Default for ReplayOptions {
    /// The reference's newest behaviour (both HEAD deltas), which the
    /// conformance recordings show.
    fn default() -> Self {
        ReplayOptions {
            interrupted_prefix: true,
            wake_latch: true,
            fixture_tokens: false,
        }
    }
}

/// A core event that differs between the recording and the replay.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Difference {
    /// The seq where the logs part.
    pub seq: u64,
    /// The JSON path where the two events first differ (`.data.message`),
    /// when both exist and have the same type.
    pub path: Option<String>,
    /// The recorded event (without `time`), if any.
    pub expected: Option<String>,
    /// The produced event (without `time`), if any.
    pub produced: Option<String>,
    /// Why they differ, in words.
    pub reason: String,
}

impl Difference {
    /// Compares a recorded and a produced event at `seq` by their
    /// [`comparable`] form; `None` when they agree (absent on both sides
    /// included).
    pub fn between(
        seq: u64,
        expected: Option<&SessionEvent>,
        produced: Option<&SessionEvent>,
    ) -> Option<Difference> {
        match (expected, produced) {
            (None, None) => None,
            (Some(e), None) => Some(Difference::at(
                seq,
                Some(comparable(e)),
                None,
                String::from("the agent did not write this recorded event"),
            )),
            (None, Some(p)) => Some(Difference::at(
                seq,
                None,
                Some(comparable(p)),
                String::from("the agent wrote an event the recording does not have"),
            )),
            (Some(e), Some(p)) => {
                let (a, b) = (comparable(e), comparable(p));
                (a != b).then(|| Difference {
                    seq,
                    path: json_path(e, p),
                    expected: Some(a),
                    produced: Some(b),
                    reason: explain(e, p),
                })
            }
        }
    }

    /// A difference at `seq` that is not between two events (the replay
    /// could not go on), explained by `reason`.
    pub fn stopped(seq: u64, reason: impl Into<String>) -> Difference {
        Difference::at(seq, None, None, reason.into())
    }

    /// A difference at `seq` with no path.
    fn at(seq: u64, expected: Option<String>, produced: Option<String>, reason: String) -> Self {
        Difference {
            seq,
            path: None,
            expected,
            produced,
            reason,
        }
    }
}

impl core::fmt::Display for Difference {
    /// Three lines: `difference at seq N[ (path P)]: reason`, then the
    /// recorded and the produced event.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "difference at seq {}", self.seq)?;
        if let Some(p) = &self.path {
            write!(f, " (path {p})")?;
        }
        writeln!(f, ": {}", self.reason)?;
        writeln!(
            f,
            "  recorded: {}",
            self.expected.as_deref().unwrap_or("(no event)")
        )?;
        write!(
            f,
            "  produced: {}",
            self.produced.as_deref().unwrap_or("(no event)")
        )
    }
}

/// The outcome of a replay.
///
/// Each loop instance of the log (see [`replay`]) is replayed on its own,
/// so a difference in one instance does not hide one in another; within an
/// instance the replay stops at its first difference (what follows no
/// longer has the recorded inputs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// Core events reproduced identically.
    pub reproduced: usize,
    /// Core events in the replayed part of the recording.
    pub total: usize,
    /// Events of the recording's seed (restored, not replayed).
    pub seed: usize,
    /// Loop instances replayed.
    pub instances: usize,
    /// The first difference, if any (the first of [`Self::differences`]).
    pub first_difference: Option<Difference>,
    /// Every difference found, at most one per loop instance, in log order.
    pub differences: Vec<Difference>,
}

impl ReplayReport {
    /// Whether every core event was reproduced and nothing else produced.
    pub fn identical(&self) -> bool {
        self.first_difference.is_none() && self.reproduced == self.total
    }

    /// Panics with the report's [`Display`](core::fmt::Display) unless the
    /// replay was [identical](Self::identical); for `#[test]`s.
    ///
    /// # Panics
    ///
    /// When the replay is not identical.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.identical() {
            panic!("the replay differs from the recording:\n{self}");
        }
    }

    /// An empty report over `seed` seed events (no instance replayed yet).
    pub fn new(seed: usize) -> Self {
        ReplayReport {
            reproduced: 0,
            total: 0,
            seed,
            instances: 0,
            first_difference: None,
            differences: Vec::new(),
        }
    }

    /// Adds a difference (the first one also becomes
    /// [`Self::first_difference`]).
    pub fn push(&mut self, d: Difference) {
        if self.first_difference.is_none() {
            self.first_difference = Some(d.clone());
        }
        self.differences.push(d);
    }
}

impl core::fmt::Display for ReplayReport {
    /// A summary line (seed events, replayed events, reproduced), then each
    /// difference.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "reproduced {}/{} core events ({} seed events not replayed, {} loop instance{} replayed)",
            self.reproduced,
            self.total,
            self.seed,
            self.instances,
            if self.instances == 1 { "" } else { "s" }
        )?;
        for d in &self.differences {
            write!(f, "\n{d}")?;
        }
        if self.differences.is_empty() && !self.identical() {
            write!(f, "\nthe replay stopped before the end of the recording")?;
        }
        Ok(())
    }
}

/// Asserts that a [`ReplayReport`] is identical; on failure the panic
/// message is the report's `Display` (every difference).
#[macro_export]
macro_rules! assert_replays {
    ($report:expr $(,)?) => {
        $crate::agent::replay::ReplayReport::assert_ok(&$report)
    };
}

/// Whether a recorded event is written by the loop (a *core event*), as
/// opposed to an input (plugin events, tool-owned events, surface
/// replacements, the seed marker).
pub fn is_core_event(e: &SessionEvent) -> bool {
    match e.data() {
        EventData::UserMessage(_) | EventData::ToolResult(_) => {
            matches!(e.surface_op(), Some(SurfaceOp::Append))
        }
        EventData::EndSeed => false,
        d => is_loop_owned(d.event_type()),
    }
}

/// The comparable form of an event: its JSON line without `time`.
pub fn comparable(e: &SessionEvent) -> String {
    comparable_with(e, false)
}

/// [`comparable`], with `request/header` reduced to its canonical header
/// when `canonical_headers` is set.
fn comparable_with(e: &SessionEvent, canonical_headers: bool) -> String {
    // A payload read leniently compares by what dsh owns (issue 17).
    let line = if e.deviation().is_some() {
        e.to_canonical_json()
    } else {
        e.to_json()
    };
    match serde_json::from_str::<Value>(&line) {
        Ok(Value::Object(mut m)) => {
            m.shift_remove("time");
            if let (true, EventData::RequestHeader(h)) = (canonical_headers, e.data())
                && let (Some(Value::Object(data)), Ok(header)) = (
                    m.get_mut("data"),
                    serde_json::to_value(h.header.canonical()),
                )
            {
                data.insert("header".into(), header);
            }
            Value::Object(m).to_string()
        }
        _ => line,
    }
}

/// The recording and lookups over it, shared by the driver, the hooks and
/// the id source.
struct Recording {
    events: Vec<SessionEvent>,
}

impl Recording {
    fn get(&self, seq: u64) -> Option<&SessionEvent> {
        usize::try_from(seq).ok().and_then(|i| self.events.get(i))
    }

    /// The first core event at or after `from`.
    fn next_core(&self, from: u64) -> Option<&SessionEvent> {
        self.events
            .iter()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .find(|e| is_core_event(e))
    }

    /// The core events at or after `from`, in order.
    fn cores_from(&self, from: u64) -> impl Iterator<Item = &SessionEvent> {
        self.events
            .iter()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .filter(|e| is_core_event(e))
    }

    /// Whether, from `from` on, the loop writes only what a cancellation
    /// writes (canceled splices, an interrupted message, synthetic
    /// not-dispatched tool pairs, `step/end`) before `turn/end aborted`.
    fn cancels_at(&self, from: u64) -> Option<(CancelCause, bool)> {
        let mut keep_inbox = true;
        let mut first = true;
        for e in self.cores_from(from) {
            match e.data() {
                EventData::InboxSpliced(s) if s.outcome.is_some() && s.inserted.is_empty() => {
                    if first {
                        keep_inbox = false;
                    }
                }
                EventData::AssistantMessage(a) if a.interrupted => {}
                EventData::StepEnd(_) => {}
                EventData::ToolCall(_) => {}
                EventData::ToolResult(r)
                    if r.error
                        .as_ref()
                        .is_some_and(|e| e.code == "ABORTED_BEFORE_DISPATCH") => {}
                EventData::TurnEnd(t) => {
                    return match &t.reason {
                        TurnEndReason::Aborted { cause } => Some((cancel_cause(cause), keep_inbox)),
                        _ => None,
                    };
                }
                _ => return None,
            }
            first = false;
        }
        None
    }

    /// The `request/header` in force for a request starting at `from`: one
    /// logged before the next chunk or message of this attempt, else the
    /// last one before `from`.
    fn header_for(&self, from: u64) -> Option<EpochHeader> {
        for e in self.cores_from(from) {
            match e.data() {
                EventData::RequestHeader(h) => return Some(h.header.canonical()),
                EventData::RequestContext(_) => {}
                _ => break,
            }
        }
        let upto = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        self.events[..upto]
            .iter()
            .rev()
            .find_map(|e| match e.data() {
                EventData::RequestHeader(h) => Some(h.header.canonical()),
                _ => None,
            })
    }

    /// The `contextWindow` in force for a request starting at `from`.
    fn context_window_for(&self, from: u64) -> Option<u64> {
        for e in self.cores_from(from) {
            match e.data() {
                EventData::RequestContext(c) => return c.context_window,
                EventData::RequestHeader(_) => {}
                _ => break,
            }
        }
        let upto = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        self.events[..upto]
            .iter()
            .rev()
            .find_map(|e| match e.data() {
                EventData::RequestContext(c) => Some(c.context_window),
                _ => None,
            })?
    }

    /// The recorded failure of a turn that ends in error at `from`.
    fn error_at(&self, from: u64) -> Option<HookError> {
        for e in self.cores_from(from) {
            match e.data() {
                EventData::StepEnd(_) => {}
                EventData::TurnEnd(t) => {
                    return match &t.reason {
                        TurnEndReason::Error { error } => Some(hook_error(error)),
                        _ => None,
                    };
                }
                _ => return None,
            }
        }
        None
    }
}

fn cancel_cause(cause: &AbortCause) -> CancelCause {
    match cause {
        AbortCause::Parent => CancelCause::Parent,
        AbortCause::Hook { reason } => CancelCause::Hook {
            reason: reason.clone(),
        },
        AbortCause::Disposed => CancelCause::Disposed,
        _ => CancelCause::User,
    }
}

fn hook_error(f: &LlmFailure) -> HookError {
    if f.code == "UNKNOWN" {
        HookError::msg(f.message.clone())
    } else {
        HookError::Llm(f.clone())
    }
}

/// Appends the recorded foreign events at the current position; returns
/// how many.
fn flush_foreign(rec: &Recording, agent: &mut Agent, now: i64) -> usize {
    let mut n = 0;
    loop {
        let pos = agent.session().len();
        let Some(e) = rec.get(pos) else { return n };
        if is_core_event(e) {
            return n;
        }
        if agent
            .append_event_marked(now, e.data().clone(), intent_of(e), e.ignorable())
            .is_err()
        {
            return n;
        }
        n += 1;
    }
}

fn intent_of(e: &SessionEvent) -> Option<SurfaceIntent> {
    e.surface_op().map(|op| SurfaceIntent {
        op,
        sources: e.source_event_seqs().map(<[u64]>::to_vec),
    })
}

/// A call a seam answer queues: applied after the answer is computed and
/// before it is given (loop.md Q3).
#[allow(clippy::large_enum_variant)] // a few per seam, applied at once
enum Queued {
    Send(crate::message::Message, InboxTarget, bool),
    Cancel(CancelCause, bool),
}

fn target_of(s: &InboxSpliced) -> InboxTarget {
    match s.target {
        crate::session::InboxTarget::NextStep => InboxTarget::NextStep,
        _ => InboxTarget::NextTurn,
    }
}

/// Template variables that make `text` render to itself.
fn literal_assembly(system: &str, header: Option<&EpochHeader>) -> Assembly {
    let mut a = Assembly::default();
    let mut rest = system;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else { break };
        let name = &after[..close];
        a.variables
            .insert(name.to_string(), Some(format!("{{{{{name}}}}}")));
        rest = &after[close + 2..];
    }
    a.sections.push(PromptSection::new("recorded", 0, system));
    a.tools = header.and_then(|h| h.tools.clone()).unwrap_or_default();
    a
}

impl Driver {
    /// Common prologue of most seams: foreign events, an insertion queued
    /// as a send, a cancellation that lands here.
    fn sync(&mut self, now: i64) -> Vec<Queued> {
        flush_foreign(&self.rec, &mut self.agent, now);
        let pos = self.pos();
        let mut queued = Vec::new();
        if let Some(e) = self.rec.get(pos)
            && let EventData::InboxSpliced(s) = e.data()
            && s.outcome.is_none()
            && s.removed_count.is_none()
        {
            for m in &s.inserted {
                let target = target_of(s);
                let wake = target == InboxTarget::NextStep;
                queued.push(Queued::Send((**m).clone(), target, wake));
            }
            return queued;
        }
        if let Some((cause, keep)) = self.rec.cancels_at(pos) {
            queued.push(Queued::Cancel(cause, keep));
        }
        queued
    }

    /// Answers a seam from the recording: the agent claims every seam.
    fn answer_hook(&mut self, id: u64, call: HookCall) {
        let now = self.now();
        let mut queued = Vec::new();
        let answer = match call {
            HookCall::Assemble { .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                // The step's request header: the one logged after its messages.
                let after_messages = self
                    .rec
                    .cores_from(pos)
                    .find(|e| {
                        !matches!(
                            e.data(),
                            EventData::StepStart(_)
                                | EventData::UserMessage(_)
                                | EventData::InboxSpliced(_)
                        )
                    })
                    .map_or(pos, SessionEvent::seq);
                let header = self.rec.header_for(after_messages);
                let system = header
                    .as_ref()
                    .and_then(|h| h.system.clone())
                    .unwrap_or_default();
                HookAnswer::Assemble(Ok(literal_assembly(&system, header.as_ref())))
            }
            HookCall::PreStep { value, .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                let mut cores = self.rec.cores_from(pos);
                let decision = match cores.next().map(SessionEvent::data) {
                    Some(EventData::StepStart(_)) => {
                        let entered = cores
                            .map_while(|e| match e.data() {
                                EventData::UserMessage(m) => Some((**m).clone()),
                                _ => None,
                            })
                            .collect();
                        Ok(PreStepDecision::Enter(entered))
                    }
                    Some(EventData::TurnEnd(t)) => match &t.reason {
                        TurnEndReason::Blocked => Ok(PreStepDecision::Reject),
                        TurnEndReason::Error { error } => Err(hook_error(error)),
                        _ => Ok(PreStepDecision::Enter(Vec::new())),
                    },
                    _ => Ok(value),
                };
                HookAnswer::PreStep(decision)
            }
            HookCall::Request { value, .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                HookAnswer::Request(match self.rec.error_at(pos) {
                    Some(e) => Err(e),
                    None => match self.rec.header_for(pos) {
                        None => Ok(value),
                        Some(header) => {
                            let mut config = header.config.clone();
                            if let Some(d) = header.adapter_defaults {
                                if d.reasoning_effort == Some(true) {
                                    config.reasoning_effort = None;
                                }
                                if d.max_tokens == Some(true) {
                                    config.max_tokens = None;
                                }
                            }
                            Ok(config)
                        }
                    },
                })
            }
            HookCall::Prepare { value, .. } => {
                let pos = self.pos();
                let config = value.config;
                let header = self.rec.header_for(pos);
                let (config, adapter_defaults) = match header {
                    Some(h)
                        if h.config.provider == config.provider
                            && h.config.model == config.model =>
                    {
                        (h.config.clone(), h.adapter_defaults.unwrap_or_default())
                    }
                    _ => (config, AdapterDefaults::default()),
                };
                HookAnswer::Prepare(Ok(PreparedCall {
                    config,
                    adapter_defaults,
                    retry_policy: None,
                    context_window: self.rec.context_window_for(pos),
                }))
            }
            HookCall::RequestError { .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                let retried = !matches!(
                    self.rec.next_core(pos).map(SessionEvent::data),
                    Some(EventData::StepEnd(_) | EventData::TurnEnd(_)) | None
                );
                HookAnswer::RequestError(Ok(if retried {
                    Recovery::Retry
                } else {
                    Recovery::GiveUp
                }))
            }
            HookCall::TurnStopping { .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                HookAnswer::TurnStopping(match self.rec.error_at(pos) {
                    Some(e) => Err(e),
                    None => Ok(()),
                })
            }
            HookCall::ToolPreExecute { value, .. } => {
                flush_foreign(&self.rec, &mut self.agent, now);
                HookAnswer::ToolPreExecute(Ok(value))
            }
            other => other.answer(),
        };
        for q in queued {
            match q {
                Queued::Send(message, target, wake) => {
                    if let Err(e) = self.agent.send(now, message, target, wake) {
                        let reason = format!("the agent refused a recorded insertion: {e}");
                        self.differ(self.pos(), None, reason);
                    }
                }
                Queued::Cancel(cause, keep) => self.cancel(now, cause, keep),
            }
        }
        if let Err(e) = self.agent.complete_hook(now, id, answer) {
            let reason = format!("the agent refused a seam answer: {e}");
            self.differ(self.pos(), None, reason);
        }
    }
}

/// Recorded message ids, handed out in log order.
struct ReplayIds {
    assistant: Vec<MessageId>,
    tool: Vec<MessageId>,
    next_assistant: usize,
    next_tool: usize,
    fallback: u64,
}

impl IdSource for ReplayIds {
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId {
        let (list, next) = match purpose {
            IdPurpose::Assistant { .. } => (&self.assistant, &mut self.next_assistant),
            IdPurpose::ToolResult { .. } => (&self.tool, &mut self.next_tool),
            IdPurpose::RuntimeContext { .. } => {
                self.fallback += 1;
                return MessageId(format!("replay-{}", self.fallback));
            }
        };
        let id = list.get(*next).cloned();
        *next += 1;
        id.unwrap_or_else(|| {
            self.fallback += 1;
            MessageId(format!("replay-{}", self.fallback))
        })
    }

    fn retry_id(&mut self) -> RetryId {
        self.fallback += 1;
        RetryId(format!("replay-{}", self.fallback))
    }
}

/// What the driver is waiting for.
enum Waiting {
    Nothing,
    Model { attempt: u64 },
}

/// Reads a raw JSONL recording (persistence.md 6) and replays it. With
/// `options.fixture_tokens` the conformance substitutions are applied first
/// ([`fixture_tokens`](crate::jsonl::fixture_tokens)). Only the stored
/// events are replayed (no crash-repair closers).
pub fn replay_jsonl(
    bytes: &[u8],
    options: ReplayOptions,
) -> Result<ReplayReport, crate::jsonl::LogError> {
    let substituted;
    let bytes = if options.fixture_tokens {
        substituted = crate::jsonl::fixture_tokens(bytes);
        &substituted[..]
    } else {
        bytes
    };
    let loaded = crate::jsonl::load_log(bytes, &[])?;
    let header = loaded.session.header().clone();
    // A torn tail or an open last turn: the recording stops mid-way, so
    // reproducing what it holds does not check it (`dsh log check` fails it
    // too; the repaired log replays).
    let incomplete = match loaded.truncate_to {
        Some(at) => Some(format!(
            "the recording has a torn tail ({} bytes after offset {at} are not committed); replay the repaired log",
            bytes.len() - at
        )),
        None if !loaded.closers.is_empty() => Some(String::from(
            "the recording ends inside an open turn; replay the repaired log",
        )),
        None => None,
    };
    let mut events = loaded.session.into_events();
    events.truncate(loaded.stored);
    let stored = events.len() as u64;
    let mut report = replay(header, events, options);
    if let (Some(reason), None) = (incomplete, &report.first_difference) {
        report.push(Difference::at(stored, None, None, reason));
    }
    Ok(report)
}

/// Replays `events` (a whole recorded log) under `header`.
///
/// A log can hold the work of several loop instances, and every one is
/// replayed:
///
/// - the seed ([`seed_length`]) is restored, not replayed;
/// - each later `session/end-seed` (a resume: the constructor marks the
///   stored history it reopened, session.md 8.1) ends one instance and the
///   next starts after it;
/// - a crash repair's closers (persistence.md 6.4) end one, and a turn
///   whose `request/header` says `resume` starts another.
///
/// Each instance's part is replayed by a fresh loop over the session
/// restored from the recorded events before it, so the closers, markers and
/// seed are inputs, never mismatches, and a difference in one instance does
/// not stop the others.
pub fn replay(
    header: SessionHeader,
    events: Vec<SessionEvent>,
    options: ReplayOptions,
) -> ReplayReport {
    let seed_len = seed_length(&header, &events);
    let parts = instances(&events, seed_len);
    let core_in = |(a, b): (usize, usize)| events[a..b].iter().filter(|e| is_core_event(e)).count();
    let mut report = ReplayReport {
        reproduced: 0,
        total: parts.iter().map(|p| core_in(*p)).sum(),
        seed: seed_len,
        instances: parts.len(),
        first_difference: None,
        differences: Vec::new(),
    };
    for (start, end) in parts {
        let part = replay_from(header.clone(), events[..end].to_vec(), start, options);
        report.reproduced += part.reproduced;
        if let Some(d) = part.first_difference {
            report.push(d);
        } else if part.reproduced != core_in((start, end)) {
            report.push(Difference::at(
                end as u64,
                None,
                None,
                String::from("the replay stopped before the end of this loop instance"),
            ));
        }
    }
    report
}

/// How many leading events of a recorded log are its seed (restored, not
/// replayed):
///
/// - a fork's inheritance: through the first `session/end-seed` at or after
///   the header's `seedLength` (SA-3);
/// - else, when the events before the first `session/end-seed` hold no
///   `assistant/chunk` (history handed to the constructor, not streamed by
///   a loop of this log): through that marker;
/// - else none: a marker written when the session was resumed follows the
///   work of an earlier instance, which is replayed.
pub fn seed_length(header: &SessionHeader, events: &[SessionEvent]) -> usize {
    let marker = |from: usize| {
        events
            .iter()
            .skip(from)
            .position(|e| matches!(e.data(), EventData::EndSeed))
            .map(|i| from + i)
    };
    if let Some(n) = header.seed_length {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(i) = marker(n) {
            return i + 1;
        }
    }
    match marker(0) {
        Some(i)
            if !events[..i]
                .iter()
                .any(|e| matches!(e.data(), EventData::AssistantChunk(_))) =>
        {
            i + 1
        }
        _ => 0,
    }
}

/// The parts `(start, end)` of `events` after the seed that one loop
/// instance wrote: a part ends at a `session/end-seed` (the next starts
/// after it), where crash-repair closers begin (the next starts after
/// them), and after the last `turn/end` before a `request/header` with
/// reason `resume` (the new instance's first request).
fn instances(events: &[SessionEvent], seed_len: usize) -> Vec<(usize, usize)> {
    let mut parts = Vec::new();
    let mut start = seed_len;
    // Just after the last turn/end of the current part, if any.
    let mut after_turn = None;
    for i in seed_len..events.len() {
        match events[i].data() {
            EventData::TurnEnd(_) => after_turn = Some(i + 1),
            EventData::EndSeed => {
                parts.push((start, i));
                start = i + 1;
                after_turn = None;
                continue;
            }
            EventData::RequestHeader(h) if h.reason == HeaderReason::Resume => {
                if let Some(cut) = after_turn.take() {
                    parts.push((start, cut));
                    start = cut;
                }
            }
            _ => {}
        }
        if let Some(first) = closers_ending_at(events, start, i) {
            parts.push((start, first));
            start = i + 1;
            after_turn = None;
        }
    }
    parts.push((start, events.len()));
    parts.retain(|(a, b)| a < b);
    parts
}

/// When `events[i]` is the `turn/end` of crash-repair closers of the events
/// before them (and after `from`), the index of the first closer.
fn closers_ending_at(events: &[SessionEvent], from: usize, i: usize) -> Option<usize> {
    match events[i].data() {
        EventData::TurnEnd(t) if t.reason == TurnEndReason::Interrupted => {}
        _ => return None,
    }
    // Closers: one result per unanswered call, a step end, the turn end;
    // the earliest start that matches takes them all.
    (from.max(i.saturating_sub(64))..=i).find(|&first| {
        let closers = crate::jsonl::interrupted_turn_closers(&events[..first]);
        closers.len() == i + 1 - first
            && closers
                .iter()
                .zip(&events[first..=i])
                .all(|(a, b)| a.data() == b.data())
    })
}

/// Replays `events[seed_len..]` with a fresh loop over the session restored
/// from `events[..seed_len]`.
fn replay_from(
    header: SessionHeader,
    events: Vec<SessionEvent>,
    seed_len: usize,
    options: ReplayOptions,
) -> ReplayReport {
    let total = events[seed_len..]
        .iter()
        .filter(|e| is_core_event(e))
        .count();
    let mut report = ReplayReport {
        reproduced: 0,
        total,
        seed: seed_len,
        instances: 1,
        first_difference: None,
        differences: Vec::new(),
    };
    let session = match Session::restore(header, events[..seed_len].to_vec()) {
        Ok(s) => s,
        Err(e) => {
            report.push(Difference::at(
                0,
                None,
                None,
                format!("the recording's seed does not load: {e}"),
            ));
            return report;
        }
    };
    let live = &events[seed_len..];
    let assistant = live
        .iter()
        .filter_map(|e| match e.data() {
            EventData::AssistantMessage(a) => Some(a.message.id.clone()),
            _ => None,
        })
        .collect();
    let tool = live
        .iter()
        .filter(|e| is_core_event(e))
        .filter_map(|e| match e.data() {
            EventData::ToolResult(r) => Some(r.message.id.clone()),
            _ => None,
        })
        .collect();
    let names: BTreeSet<String> = live
        .iter()
        .filter_map(|e| match e.data() {
            EventData::ToolCall(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect();
    let (parallel, widest) = parallel_tools(live);
    let mut registry = ToolRegistry::new();
    for name in names {
        let mut tool = ToolDefinition::untyped(name, "", Value::Object(Default::default()));
        tool.concurrency_safe = parallel.contains(&tool.schema.name);
        let _ = registry.register(tool);
    }
    let first_header = live.iter().find_map(|e| match e.data() {
        EventData::RequestHeader(h) => Some(h.header.config.clone()),
        _ => None,
    });
    let config = AgentConfig {
        options: AgentOptions {
            provider: first_header.as_ref().map(|c| c.provider.clone()),
            model: first_header.as_ref().map(|c| c.model.clone()),
            max_tokens: None,
        },
        tools: registry,
        interrupted_prefix: options.interrupted_prefix,
        wake_latch: options.wake_latch,
        max_parallel_tool_calls: widest.max(super::DEFAULT_MAX_PARALLEL_TOOL_CALLS),
        // The replay answers every seam from the recording, retries
        // included (no executor), and follows the recording's step count.
        seams: Seams::ALL,
        retry_executor: false,
        max_steps_per_turn: None,
        ..AgentConfig::default()
    };
    let rec = Arc::new(Recording { events });
    let mut agent = match Agent::new(config, session) {
        Ok(a) => a,
        Err(e) => {
            report.push(Difference::at(
                seed_len as u64,
                None,
                None,
                format!("the recording cannot be resumed: {e}"),
            ));
            return report;
        }
    };
    agent = agent.with_ids(ReplayIds {
        assistant,
        tool,
        next_assistant: 0,
        next_tool: 0,
        fallback: 0,
    });
    let mut driver = Driver {
        fixture_tokens: options.fixture_tokens,
        agent,
        rec,
        waiting: Waiting::Nothing,
        bodies: Vec::new(),
        checked: seed_len as u64,
        report,
    };
    driver.run();
    driver.report
}

/// The tools the recording ran in parallel groups (LC-24), and the most
/// calls it had in flight at once. A `tool/call` appended while an earlier
/// call of the same step has no result yet shows a group: every call open
/// at that moment was classified `parallel` (TL-15).
fn parallel_tools(live: &[SessionEvent]) -> (BTreeSet<String>, usize) {
    let mut parallel = BTreeSet::new();
    let mut open: Vec<(String, String)> = Vec::new();
    let mut widest = 0;
    for e in live {
        match e.data() {
            EventData::ToolCall(c) => {
                open.push((c.call_id.0.clone(), c.name.clone()));
                if open.len() > 1 {
                    parallel.extend(open.iter().map(|(_, name)| name.clone()));
                }
                widest = widest.max(open.len());
            }
            EventData::ToolResult(r) if is_core_event(e) => {
                if let Some(crate::content::ContentBlock::ToolResult { tool_call_id, .. }) =
                    r.message.content.first()
                {
                    open.retain(|(id, _)| *id != tool_call_id.0);
                }
            }
            EventData::StepEnd(_) | EventData::TurnEnd(_) => open.clear(),
            _ => {}
        }
    }
    (parallel, widest)
}

struct Driver {
    fixture_tokens: bool,
    agent: Agent,
    rec: Arc<Recording>,
    waiting: Waiting,
    /// Tool bodies the agent started and the recording has not answered:
    /// (token, call id), in start order.
    bodies: Vec<(u64, String)>,
    checked: u64,
    report: ReplayReport,
}

impl Driver {
    fn pos(&self) -> u64 {
        self.agent.session().len()
    }

    fn now(&self) -> i64 {
        self.rec.get(self.pos()).map_or(0, SessionEvent::time)
    }

    fn differ(&mut self, seq: u64, produced: Option<String>, reason: String) {
        self.differ_at(seq, None, produced, reason);
    }

    fn differ_at(
        &mut self,
        seq: u64,
        path: Option<String>,
        produced: Option<String>,
        reason: String,
    ) {
        if self.report.first_difference.is_none() {
            let mut d = Difference::at(seq, self.rec.get(seq).map(comparable), produced, reason);
            d.path = path;
            self.report.push(d);
        }
    }

    /// Drains outputs and compares the events appended since the last
    /// check. Returns false once a difference was found.
    fn settle(&mut self) -> bool {
        while let Some(o) = self.agent.poll() {
            match o {
                Output::CallModel(call) => {
                    self.waiting = Waiting::Model {
                        attempt: call.attempt,
                    }
                }
                Output::ExecuteTool(exec) => self.bodies.push((exec.token, exec.call_id.0)),
                Output::CancelModelCall { .. } => self.waiting = Waiting::Nothing,
                Output::Hook { id, call } => self.answer_hook(id, call),
                _ => {}
            }
        }
        if let Some(f) = self.agent.faults().first() {
            let reason = format!("the agent refused an append: {f}");
            self.differ(self.checked, None, reason);
            return false;
        }
        while self.checked < self.pos() {
            let seq = self.checked;
            let produced = self.agent.session().event(seq).cloned();
            let Some(produced) = produced else { break };
            match self.rec.get(seq) {
                None => {
                    self.differ(
                        seq,
                        Some(comparable(&produced)),
                        String::from("the agent wrote an event the recording does not have"),
                    );
                    return false;
                }
                Some(expected) => {
                    let canonical = self.fixture_tokens;
                    let (a, b) = (
                        comparable_with(expected, canonical),
                        comparable_with(&produced, canonical),
                    );
                    if a != b {
                        let reason = explain(expected, &produced);
                        let path = json_path(expected, &produced);
                        self.differ_at(seq, path, Some(b), reason);
                        return false;
                    }
                    if is_core_event(expected) {
                        self.report.reproduced += 1;
                    }
                }
            }
            self.checked += 1;
        }
        true
    }

    fn run(&mut self) {
        let mut guard = 0usize;
        while self.settle() {
            guard += 1;
            if guard > self.rec.events.len() * 4 + 16 {
                self.differ(
                    self.pos(),
                    None,
                    String::from("the replay stopped making progress"),
                );
                return;
            }
            let pos = self.pos();
            let Some(next) = self.rec.get(pos).cloned() else {
                return;
            };
            if !self.step(&next) {
                if !self.bodies.is_empty() && matches!(next.data(), EventData::ToolCall(_)) {
                    let reason = String::from(
                        "the recording starts this tool call while another one runs (a parallel tool group, LC-24); the agent waits for the running call first",
                    );
                    self.differ(pos, None, reason);
                    return;
                }
                let reason = format!(
                    "no input explains the recorded {} here (the agent is {})",
                    next.event_type(),
                    match self.waiting {
                        Waiting::Model { .. } => "streaming",
                        Waiting::Nothing if !self.bodies.is_empty() => "running a tool",
                        Waiting::Nothing => "waiting for input",
                    }
                );
                self.differ(pos, None, reason);
                return;
            }
        }
    }

    /// Feeds the input that explains the recorded event `next`. Returns
    /// false when none does.
    fn step(&mut self, next: &SessionEvent) -> bool {
        let now = self.now();
        let pos = self.pos();
        if !is_core_event(next) {
            if let Waiting::Model { attempt } = self.waiting {
                // A foreign event between the finish chunk and the message
                // the stream's end writes arrived on its own (a session
                // title from a side call): it goes in first. Otherwise the
                // stream's end wrote it (a retry, a compaction).
                let message_next = matches!(
                    self.rec.next_core(pos).map(SessionEvent::data),
                    Some(EventData::AssistantMessage(_))
                );
                if self.stream_finished() && !message_next {
                    return self.end_stream(now, attempt, next);
                }
            }
            return self
                .agent
                .append_event_marked(now, next.data().clone(), intent_of(next), next.ignorable())
                .is_ok();
        }
        if let EventData::InboxSpliced(s) = next.data() {
            if s.outcome.is_none() && s.removed_count.is_none() && !s.inserted.is_empty() {
                return self.insert(now, s);
            }
            if s.outcome.is_some() && s.inserted.is_empty() {
                // A cancellation (clearing the inbox), or a removal.
                if let Some((cause, keep)) = self.rec.cancels_at(pos) {
                    self.cancel(now, cause, keep);
                    return true;
                }
                if !matches!(self.waiting, Waiting::Model { .. }) && self.agent.is_quiescent() {
                    self.agent.cancel(now, CancelCause::User, false);
                    return true;
                }
            }
        }
        if let Waiting::Model { attempt } = self.waiting {
            // Nothing follows a finish chunk (AC-1): end the stream first.
            if self.stream_finished() {
                return self.end_stream(now, attempt, next);
            }
        }
        match self.waiting {
            Waiting::Model { attempt } => self.model(now, attempt, next),
            Waiting::Nothing => self.tool(now, next),
        }
    }

    fn insert(&mut self, now: i64, s: &InboxSpliced) -> bool {
        let target = target_of(s);
        let idle = self.agent.is_quiescent();
        // While idle, a send wakes only if a turn starts right after it.
        let wake = if idle {
            let after = self.pos() + 1;
            matches!(
                self.rec.next_core(after).map(SessionEvent::data),
                Some(EventData::TurnStart(_))
            )
        } else {
            target == InboxTarget::NextTurn
        };
        let mut ok = true;
        for m in &s.inserted {
            ok &= self.agent.send(now, (**m).clone(), target, wake).is_ok();
        }
        ok
    }

    fn cancel(&mut self, now: i64, cause: CancelCause, keep: bool) {
        if matches!(self.waiting, Waiting::Model { .. }) {
            self.waiting = Waiting::Nothing;
        }
        self.agent.cancel(now, cause, keep);
    }

    /// Whether the open attempt's last delivered chunk was its `finish`.
    fn stream_finished(&self) -> bool {
        self.agent
            .session()
            .events()
            .last()
            .is_some_and(|e| match e.data() {
                EventData::AssistantChunk(c) => c.is_finish(),
                _ => false,
            })
    }

    fn model(&mut self, now: i64, attempt: u64, next: &SessionEvent) -> bool {
        if let EventData::AssistantChunk(c) = next.data() {
            return self.agent.handle_chunk(now, attempt, c.chunk()).is_ok();
        }
        let pos = self.pos();
        if let Some((cause, keep)) = self.rec.cancels_at(pos) {
            self.cancel(now, cause, keep);
            return true;
        }
        self.end_stream(now, attempt, next)
    }

    fn end_stream(&mut self, now: i64, attempt: u64, next: &SessionEvent) -> bool {
        let pos = self.pos();
        // A stream that ends without a failure finish and is followed by a
        // turn error threw (ModelThrew, LC-27).
        let failed_finish = self
            .agent
            .session()
            .events()
            .last()
            .is_some_and(|e| match e.data() {
                EventData::AssistantChunk(c) => matches!(
                    c.chunk(),
                    crate::chunk::StreamChunk::Finish { reason, .. } if reason.is_failure()
                ),
                _ => false,
            });
        self.waiting = Waiting::Nothing;
        if !failed_finish
            && let Some(e) = self.rec.error_at(pos)
            && matches!(next.data(), EventData::StepEnd(_))
        {
            return self.agent.handle_stream_error(now, attempt, e).is_ok();
        }
        self.agent.handle_stream_end(now, attempt).is_ok()
    }

    /// Answers the running body whose call the recorded `tool/result`
    /// `next` names.
    fn tool(&mut self, now: i64, next: &SessionEvent) -> bool {
        let EventData::ToolResult(r) = next.data() else {
            return false;
        };
        if r.message.source.kind() != "tool" {
            return false;
        }
        let Some(i) = self.bodies.iter().position(|(_, id)| {
            matches!(
                r.message.content.first(),
                Some(crate::content::ContentBlock::ToolResult { tool_call_id, .. })
                    if tool_call_id.0 == *id
            )
        }) else {
            return false;
        };
        let (token, _) = self.bodies.remove(i);
        let pos = self.pos();
        let mut outcome = outcome_of(r);
        // Contexts staged right after the result came with it (LC-23.5).
        let mut after = pos + 1;
        while let Some(e) = self.rec.get(after) {
            match e.data() {
                EventData::InboxSpliced(s)
                    if s.outcome.is_none()
                        && s.removed_count.is_none()
                        && target_of(s) == InboxTarget::NextStep =>
                {
                    outcome
                        .additional_contexts
                        .extend(s.inserted.iter().map(|m| (**m).clone()));
                    after += 1;
                }
                _ if !is_core_event(e) => after += 1,
                _ => break,
            }
        }
        // A concluding result: the step ends and the turn with it.
        let mut cores = self.rec.cores_from(after);
        if !outcome.is_error()
            && matches!(
                cores.next().map(SessionEvent::data),
                Some(EventData::StepEnd(_))
            )
            && matches!(
                cores.next().map(SessionEvent::data),
                Some(EventData::TurnEnd(t)) if !matches!(t.reason, TurnEndReason::Aborted { .. })
            )
        {
            outcome.concludes_turn = true;
        }
        // A call aborted in flight: the cancel came first.
        if r.error.as_ref().is_some_and(|e| e.code == "ABORTED")
            && let Some((cause, keep)) = self.rec.cancels_at(after)
        {
            self.agent.cancel(now, cause, keep);
        }
        self.agent.handle_tool_result(now, token, outcome).is_ok()
    }
}

/// A recorded `tool/result` as the tool body's outcome (what a replay
/// answers a call with when tools are not run).
pub fn recorded_outcome(r: &crate::session::ToolResult) -> ToolOutcome {
    outcome_of(r)
}

fn outcome_of(r: &crate::session::ToolResult) -> ToolOutcome {
    let (content, is_error) = match r.message.content.first() {
        Some(crate::content::ContentBlock::ToolResult {
            content, is_error, ..
        }) => (content.clone(), is_error.unwrap_or(false)),
        _ => (Vec::new(), false),
    };
    let mut outcome = ToolOutcome::success(content);
    if is_error {
        outcome.error = Some(ToolError {
            message: String::new(),
            info: r
                .error
                .as_ref()
                .map(|e| ErrorInfo::new(e.name.clone(), e.code.clone())),
        });
    }
    outcome.meta = r
        .meta
        .as_ref()
        .and_then(|m| serde_json::from_str(m.get()).ok());
    outcome
}

/// Why two events differ, in words.
fn explain(expected: &SessionEvent, produced: &SessionEvent) -> String {
    if expected.event_type() != produced.event_type() {
        let what = match expected.event_type() {
            "turn/start" if is_legacy_turn_start(expected) => {
                " (a legacy turn/start with a trigger the core does not write)"
            }
            _ => "",
        };
        return format!(
            "the recording has {} here{what}, the agent wrote {}",
            expected.event_type(),
            produced.event_type()
        );
    }
    let a: Value = serde_json::from_str(&comparable(expected)).unwrap_or_default();
    let b: Value = serde_json::from_str(&comparable(produced)).unwrap_or_default();
    match first_json_difference(&a, &b, String::new()) {
        Some(path) if a == b => format!(
            "same values, different key order or number text at {}",
            if path.is_empty() { "the top" } else { &path }
        ),
        Some(path) => format!(
            "{} differs at {}",
            expected.event_type(),
            if path.is_empty() { "the top" } else { &path }
        ),
        None => format!(
            "{} differs in key order or number text",
            expected.event_type()
        ),
    }
}

/// The JSON path where two events of the same type first differ.
fn json_path(expected: &SessionEvent, produced: &SessionEvent) -> Option<String> {
    if expected.event_type() != produced.event_type() {
        return None;
    }
    let a: Value = serde_json::from_str(&comparable(expected)).ok()?;
    let b: Value = serde_json::from_str(&comparable(produced)).ok()?;
    first_json_difference(&a, &b, String::new())
        .map(|p| if p.is_empty() { String::from(".") } else { p })
}

fn is_legacy_turn_start(e: &SessionEvent) -> bool {
    serde_json::from_str::<Value>(&e.to_json())
        .ok()
        .and_then(|v| v.get("data").and_then(|d| d.get("trigger")).cloned())
        .is_some()
}

fn first_json_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let kx: Vec<&String> = x.keys().collect();
            let ky: Vec<&String> = y.keys().collect();
            if kx != ky {
                return Some(format!("{path} (keys {kx:?} vs {ky:?})"));
            }
            for (k, v) in x {
                let sub = format!("{path}.{k}");
                if let Some(p) = y
                    .get(k)
                    .and_then(|w| first_json_difference(v, w, sub.clone()))
                {
                    return Some(p);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path} (length {} vs {})", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (v, w))| first_json_difference(v, w, format!("{path}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(path),
    }
}
