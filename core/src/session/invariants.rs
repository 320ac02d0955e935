//! The optional invariant checker (session.md 11, I1–I12): turn and step
//! numbering, enclosure, and same-step call/result pairing.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::content::ContentBlock;
use crate::message::MessageSource;

use super::event::{EventData, SessionEvent, SurfaceOp};

/// An invariant violation: the rule and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvariantViolation {
    /// The rule id, e.g. `"I7"`.
    pub rule: &'static str,
    /// The seq of the offending event.
    pub seq: u64,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at seq {}: {}", self.rule, self.seq, self.message)
    }
}

impl core::error::Error for InvariantViolation {}

/// The invariant checker's state (section 11). Feed events in order with
/// [`push`](Self::push); [`check`](Self::check) validates without mutating
/// (I12).
#[derive(Clone, Debug, Default)]
pub struct InvariantChecker {
    last_seq: Option<u64>,
    open_turn: Option<u64>,
    open_step: Option<u64>,
    next_turn: u64,
    next_step: u64,
    pending_calls: Vec<String>,
}

enum Change<'a> {
    None,
    TurnStart(u64),
    TurnEnd,
    StepStart(u64),
    StepEnd,
    AddCall(&'a str),
    RemoveCall(&'a str),
}

impl InvariantChecker {
    /// A checker for an empty log.
    pub fn new() -> Self {
        InvariantChecker {
            next_turn: 1,
            next_step: 1,
            ..Default::default()
        }
    }

    /// Whether a turn is open.
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn
    }

    /// Validates `e` as the next event without changing state (I12).
    pub fn check(&self, e: &SessionEvent) -> Result<(), InvariantViolation> {
        self.plan(e).map(|_| ())
    }

    /// Validates `e` and, when it passes, commits its transition.
    pub fn push(&mut self, e: &SessionEvent) -> Result<(), InvariantViolation> {
        let change = self.plan(e)?;
        self.last_seq = Some(e.seq());
        match change {
            Change::None => {}
            Change::TurnStart(t) => {
                self.open_turn = Some(t);
                self.next_step = 1;
            }
            Change::TurnEnd => {
                self.open_turn = None;
                self.next_turn += 1;
            }
            Change::StepStart(s) => self.open_step = Some(s),
            Change::StepEnd => {
                self.pending_calls.clear();
                self.open_step = None;
                self.next_step += 1;
            }
            Change::AddCall(c) => self.pending_calls.push(String::from(c)),
            Change::RemoveCall(c) => {
                if let Some(p) = self.pending_calls.iter().position(|x| x == c) {
                    self.pending_calls.remove(p);
                }
            }
        }
        Ok(())
    }

    /// Checks a whole log from seq 0.
    pub fn check_log(events: &[SessionEvent]) -> Result<(), InvariantViolation> {
        let mut c = InvariantChecker::new();
        events.iter().try_for_each(|e| c.push(e))
    }

    fn plan<'a>(&self, e: &'a SessionEvent) -> Result<Change<'a>, InvariantViolation> {
        let seq = e.seq();
        let fail = |rule: &'static str, message: String| InvariantViolation { rule, seq, message };
        if self.last_seq.is_some_and(|l| seq <= l) {
            return Err(fail("I1", alloc::format!("seq {seq} does not increase")));
        }
        let in_step = |turn: u64, step: u64, what: &str| {
            if self.open_turn == Some(turn) && self.open_step == Some(step) {
                Ok(())
            } else {
                Err(fail(
                    "I6",
                    alloc::format!(
                        "{what} names turn {turn} step {step}, but the open turn/step is {:?}/{:?}",
                        self.open_turn,
                        self.open_step
                    ),
                ))
            }
        };
        let in_turn = |what: &str| {
            if self.open_turn.is_some() {
                Ok(())
            } else {
                Err(fail("I9", alloc::format!("{what} requires an open turn")))
            }
        };
        Ok(match e.data() {
            EventData::TurnStart(t) => {
                if let Some(open) = self.open_turn {
                    return Err(fail("I2", alloc::format!("turn {open} is still open")));
                }
                if t.turn != self.next_turn {
                    return Err(fail(
                        "I2",
                        alloc::format!(
                            "turn/start {} but the next turn is {}",
                            t.turn,
                            self.next_turn
                        ),
                    ));
                }
                Change::TurnStart(t.turn)
            }
            EventData::TurnEnd(t) => {
                if self.open_turn != Some(t.turn) {
                    return Err(fail(
                        "I3",
                        alloc::format!(
                            "turn/end {} but the open turn is {:?}",
                            t.turn,
                            self.open_turn
                        ),
                    ));
                }
                if let Some(s) = self.open_step {
                    return Err(fail("I3", alloc::format!("step {s} is still open")));
                }
                Change::TurnEnd
            }
            EventData::StepStart(s) => {
                if self.open_turn != Some(s.turn) {
                    return Err(fail(
                        "I4",
                        alloc::format!(
                            "step/start names turn {} but the open turn is {:?}",
                            s.turn,
                            self.open_turn
                        ),
                    ));
                }
                if let Some(open) = self.open_step {
                    return Err(fail("I4", alloc::format!("step {open} is still open")));
                }
                if s.step != self.next_step {
                    return Err(fail(
                        "I4",
                        alloc::format!(
                            "step/start {} but the next step is {}",
                            s.step,
                            self.next_step
                        ),
                    ));
                }
                Change::StepStart(s.step)
            }
            EventData::StepEnd(s) => {
                if self.open_turn != Some(s.turn) || self.open_step != Some(s.step) {
                    return Err(fail(
                        "I5",
                        alloc::format!(
                            "step/end {}/{} but the open turn/step is {:?}/{:?}",
                            s.turn,
                            s.step,
                            self.open_turn,
                            self.open_step
                        ),
                    ));
                }
                Change::StepEnd
            }
            EventData::AssistantChunk(c) => {
                in_step(c.turn, c.step, "assistant/chunk")?;
                Change::None
            }
            EventData::AssistantMessage(a) => {
                in_step(a.turn, a.step, "assistant/message")?;
                Change::None
            }
            EventData::ToolCall(c) => {
                in_step(c.turn, c.step, "tool/call")?;
                Change::AddCall(c.call_id.as_str())
            }
            EventData::ToolResult(r) => {
                if e.surface_op() != Some(SurfaceOp::Append) {
                    in_turn("a tool/result rewrite")?;
                    return Ok(Change::None);
                }
                in_step(r.turn, r.step, "tool/result").map_err(|mut v| {
                    v.rule = "I7";
                    v
                })?;
                let call_id = match &r.message.source {
                    MessageSource::Tool { call_id } => call_id.as_str(),
                    _ => "",
                };
                let not_started = r
                    .error
                    .as_ref()
                    .is_some_and(|er| er.code == "TOOL_NOT_STARTED")
                    && matches!(
                        r.message.content.first(),
                        Some(ContentBlock::ToolResult {
                            is_error: Some(true),
                            ..
                        })
                    );
                if !not_started && !self.pending_calls.iter().any(|c| c == call_id) {
                    return Err(fail(
                        "I7",
                        alloc::format!(
                            "tool/result for \"{call_id}\" has no prior tool/call in this step"
                        ),
                    ));
                }
                Change::RemoveCall(call_id)
            }
            EventData::TodoWrite(_) => {
                in_turn("todo/write")?;
                Change::None
            }
            EventData::RequestHeader(_) => {
                in_turn("request/header")?;
                Change::None
            }
            EventData::RequestContext(_) => {
                in_turn("request/context")?;
                Change::None
            }
            _ => Change::None,
        })
    }
}
