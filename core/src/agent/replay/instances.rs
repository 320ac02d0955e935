//! Cutting a recorded log into its seed and the parts each loop instance
//! wrote, and reading the parallel tool groups it ran.

use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;

use crate::session::{EventData, HeaderReason, SessionEvent, SessionHeader, TurnEndReason};

use super::compare::is_core_event;

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
pub(super) fn instances(events: &[SessionEvent], seed_len: usize) -> Vec<(usize, usize)> {
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
pub(super) fn closers_ending_at(events: &[SessionEvent], from: usize, i: usize) -> Option<usize> {
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

/// The tools the recording ran in parallel groups (LC-24), and the most
/// calls it had in flight at once. A `tool/call` appended while an earlier
/// call of the same step has no result yet shows a group: every call open
/// at that moment was classified `parallel` (TL-15).
pub(super) fn parallel_tools(live: &[SessionEvent]) -> (BTreeSet<String>, usize) {
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
