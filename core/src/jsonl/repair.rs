//! Crash repair: the synthetic closers of an interrupted turn
//! (persistence.md 6.4, CL1–CL5).

use alloc::string::String;
use alloc::vec::Vec;

use crate::content::ContentBlock;
use crate::message::MessageSource;
use crate::session::{EventData, SessionEvent};

use super::decode::{Decoded, Decoder, Record};
use super::write::{push_i64, push_str, push_u64};

/// The text of a synthetic result for a call that was recorded as started.
pub const TOOL_OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";

/// The text of a synthetic result for a call that never started.
pub const TOOL_NOT_STARTED_TEXT: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

struct Pending {
    call_id: String,
    step: u64,
    call_seq: Option<u64>,
}

/// `interrupted_turn_closers(events)` (6.4): the events that close a turn
/// left open at the end of `events` — a `tool/result` for every call the
/// open step's assistant message requested and nothing answered
/// (`TOOL_OUTCOME_UNKNOWN` when a `tool/call` was recorded, else
/// `TOOL_NOT_STARTED`), then `step/end` if a step is open, then
/// `turn/end {"kind":"interrupted"}`. All carry the last event's time.
/// Empty when no turn is open. Deterministic (CL5).
pub fn interrupted_turn_closers(events: &[SessionEvent]) -> Vec<SessionEvent> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    let mut pending: Vec<Pending> = Vec::new();
    // `turn/start` and `turn/end` reset every piece of state below: only
    // the events from the last of them on matter.
    let from = events
        .iter()
        .rposition(|e| matches!(e.data(), EventData::TurnStart(_) | EventData::TurnEnd(_)))
        .unwrap_or(0);
    for e in &events[from..] {
        match e.data() {
            EventData::TurnStart(t) => {
                open_turn = Some(t.turn);
                open_step = None;
                pending.clear();
            }
            EventData::TurnEnd(_) => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            EventData::StepStart(s) => open_step = Some(s.step),
            EventData::StepEnd(_) => {
                pending.clear();
                open_step = None;
            }
            EventData::AssistantMessage(a) => {
                for block in &a.message.content {
                    if let ContentBlock::ToolCall { id, .. } = block {
                        if let Some(p) = pending.iter_mut().find(|p| p.call_id == id.as_str()) {
                            // A JS Map.set replaces the value: the call seq is forgotten.
                            p.step = a.step;
                            p.call_seq = None;
                        } else {
                            pending.push(Pending {
                                call_id: String::from(id.as_str()),
                                step: a.step,
                                call_seq: None,
                            });
                        }
                    }
                }
            }
            EventData::ToolCall(c) => {
                if let Some(p) = pending.iter_mut().find(|p| p.call_id == c.call_id.as_str()) {
                    p.call_seq = Some(e.seq());
                }
            }
            EventData::ToolResult(r) => {
                let answered = match &r.message.source {
                    MessageSource::Tool { call_id } => Some(call_id.as_str()),
                    MessageSource::Other(o) => o.get("callId").and_then(|v| v.as_str()),
                    _ => None,
                };
                if let Some(c) = answered {
                    pending.retain(|p| p.call_id != c);
                }
            }
            _ => {}
        }
    }
    let (Some(turn), Some(last)) = (open_turn, events.last()) else {
        return Vec::new();
    };
    let mut next = last.seq() + 1;
    let t = last.time();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for p in &pending {
        lines.push(tool_result_line(turn, p, next, t));
        next += 1;
    }
    if let Some(step) = open_step {
        let mut l = Vec::new();
        l.extend_from_slice(b"{\"type\":\"step/end\",\"seq\":");
        push_u64(&mut l, next);
        l.extend_from_slice(b",\"time\":");
        push_i64(&mut l, t);
        l.extend_from_slice(b",\"data\":{\"turn\":");
        push_u64(&mut l, turn);
        l.extend_from_slice(b",\"step\":");
        push_u64(&mut l, step);
        l.extend_from_slice(b"}}");
        lines.push(l);
        next += 1;
    }
    let mut l = Vec::new();
    l.extend_from_slice(b"{\"type\":\"turn/end\",\"seq\":");
    push_u64(&mut l, next);
    l.extend_from_slice(b",\"time\":");
    push_i64(&mut l, t);
    l.extend_from_slice(b",\"data\":{\"turn\":");
    push_u64(&mut l, turn);
    l.extend_from_slice(b",\"reason\":{\"kind\":\"interrupted\"}}}");
    lines.push(l);
    // Decoding the reference text keeps its exact key order (CL1).
    let mut decoder = Decoder::new();
    lines
        .iter()
        .filter_map(|l| match decoder.decode_line(l) {
            Ok(Record::One(Decoded::Event(e))) => Some(e),
            _ => None,
        })
        .collect()
}

fn tool_result_line(turn: u64, p: &Pending, seq: u64, time: i64) -> Vec<u8> {
    let (name, code, text) = match p.call_seq {
        Some(_) => (
            "ToolOutcomeUnknownError",
            "TOOL_OUTCOME_UNKNOWN",
            TOOL_OUTCOME_UNKNOWN_TEXT,
        ),
        None => (
            "ToolNotStartedError",
            "TOOL_NOT_STARTED",
            TOOL_NOT_STARTED_TEXT,
        ),
    };
    let mut id = String::from("interrupted-tool-result-");
    id.push_str(&p.call_id);
    id.push('-');
    id.push_str(&alloc::format!("{seq}"));
    let mut l = Vec::new();
    l.extend_from_slice(b"{\"type\":\"tool/result\",\"seq\":");
    push_u64(&mut l, seq);
    l.extend_from_slice(b",\"time\":");
    push_i64(&mut l, time);
    l.extend_from_slice(b",\"data\":{\"turn\":");
    push_u64(&mut l, turn);
    l.extend_from_slice(b",\"step\":");
    push_u64(&mut l, p.step);
    l.extend_from_slice(b",\"message\":{\"id\":");
    push_str(&mut l, &id);
    l.extend_from_slice(b",\"role\":\"user\",\"source\":{\"kind\":\"tool\",\"callId\":");
    push_str(&mut l, &p.call_id);
    l.extend_from_slice(b"},\"content\":[{\"type\":\"tool-result\",\"toolCallId\":");
    push_str(&mut l, &p.call_id);
    l.extend_from_slice(b",\"isError\":true,\"content\":[{\"type\":\"text\",\"text\":");
    push_str(&mut l, text);
    l.extend_from_slice(b"}]}]},\"error\":{\"name\":\"");
    l.extend_from_slice(name.as_bytes());
    l.extend_from_slice(b"\",\"code\":\"");
    l.extend_from_slice(code.as_bytes());
    l.extend_from_slice(b"\"}},\"surfaceOp\":\"append\"");
    if let Some(call_seq) = p.call_seq {
        l.extend_from_slice(b",\"sourceEventSeqs\":[");
        push_u64(&mut l, call_seq);
        l.push(b']');
    }
    l.push(b'}');
    l
}
