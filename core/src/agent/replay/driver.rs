//! The driver: runs one loop instance of the recording through a fresh
//! [`Agent`], feeding inputs and answers and checking each core event.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use serde_json::Value;

use crate::session::{
    EventData, InboxSpliced, Session, SessionEvent, SessionHeader, TurnEndReason,
};

use super::{
    ReplayOptions,
    compare::{
        Difference, ReplayReport, comparable, comparable_with, explain, is_core_event, json_path,
    },
    instances::parallel_tools,
    recording::{Recording, ReplayIds, intent_of, outcome_of, target_of},
};
use crate::agent::handle::{AttemptId, ToolToken};
use crate::agent::hooks::CancelCause;
use crate::agent::inbox::InboxTarget;
use crate::agent::io::Output;
use crate::agent::machine::{Agent, AgentConfig, AgentOptions};
use crate::agent::seams::Seams;
use crate::agent::tools::{ToolDefinition, ToolRegistry};
use crate::time::Time;

/// Appends the recorded foreign events at the current position; returns
/// how many.
pub(super) fn flush_foreign(rec: &Recording, agent: &mut Agent, now: Time) -> usize {
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

/// A call a seam answer queues: applied after the answer is computed and
/// before it is given (loop.md Q3).
#[allow(clippy::large_enum_variant)] // a few per seam, applied at once
pub(super) enum Queued {
    Send(crate::message::Message, InboxTarget, bool),
    Cancel(CancelCause, bool),
}

/// What the driver is waiting for.
pub(super) enum Waiting {
    Nothing,
    Model { attempt: AttemptId },
}

/// Replays `events[seed_len..]` with a fresh loop over the session restored
/// from `events[..seed_len]`.
pub(super) fn replay_from(
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

pub(super) struct Driver {
    pub(super) fixture_tokens: bool,
    pub(super) agent: Agent,
    pub(super) rec: Arc<Recording>,
    pub(super) waiting: Waiting,
    /// Tool bodies the agent started and the recording has not answered:
    /// (token, call id), in start order.
    bodies: Vec<(ToolToken, String)>,
    pub(super) checked: u64,
    pub(super) report: ReplayReport,
}

impl Driver {
    pub(super) fn pos(&self) -> u64 {
        self.agent.session().len()
    }

    pub(super) fn now(&self) -> Time {
        Time::from_millis(self.rec.get(self.pos()).map_or(0, SessionEvent::time))
    }

    pub(super) fn differ(&mut self, seq: u64, produced: Option<String>, reason: String) {
        self.differ_at(seq, None, produced, reason);
    }

    pub(super) fn differ_at(
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
    pub(super) fn settle(&mut self) -> bool {
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

    pub(super) fn run(&mut self) {
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
    pub(super) fn step(&mut self, next: &SessionEvent) -> bool {
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

    pub(super) fn insert(&mut self, now: Time, s: &InboxSpliced) -> bool {
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

    pub(super) fn cancel(&mut self, now: Time, cause: CancelCause, keep: bool) {
        if matches!(self.waiting, Waiting::Model { .. }) {
            self.waiting = Waiting::Nothing;
        }
        self.agent.cancel(now, cause, keep);
    }

    /// Whether the open attempt's last delivered chunk was its `finish`.
    pub(super) fn stream_finished(&self) -> bool {
        self.agent
            .session()
            .events()
            .last()
            .is_some_and(|e| match e.data() {
                EventData::AssistantChunk(c) => c.is_finish(),
                _ => false,
            })
    }

    pub(super) fn model(&mut self, now: Time, attempt: AttemptId, next: &SessionEvent) -> bool {
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

    pub(super) fn end_stream(
        &mut self,
        now: Time,
        attempt: AttemptId,
        next: &SessionEvent,
    ) -> bool {
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
    pub(super) fn tool(&mut self, now: Time, next: &SessionEvent) -> bool {
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
