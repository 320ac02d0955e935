//! Packed chunk rows (persistence.md 5.4, CK1–CK17): runs of three or more
//! consecutive text, reasoning or tool-call deltas stored as one line.

use alloc::string::String;
use alloc::vec::Vec;

use crate::chunk::StreamChunk;
use crate::json::MAX_SAFE_INTEGER;
use crate::session::{AssistantChunk, ChunkView, EventData, SessionEvent};
use crate::text::{ChunkText, ToolCallHead};

use super::write::{encode_event_line, push_i64, push_str, push_u64};

/// The storage tag of a text-delta run.
pub(crate) const TEXT_CHUNKS: &str = "text-chunks";
/// The storage tag of a reasoning-delta run.
pub(crate) const REASONING_CHUNKS: &str = "reasoning-chunks";
/// The storage tag of a tool-call-delta run.
pub(crate) const TOOL_CALL_CHUNKS: &str = "tool-call-chunks";
/// Runs shorter than this are written as individual events (CK8).
pub const MIN_RUN: usize = 3;

/// The delta kind of a packable chunk event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKind {
    /// `text-delta` (`text-chunks`).
    Text,
    /// `reasoning-delta` (`reasoning-chunks`).
    Reasoning,
    /// `tool-call-delta` (`tool-call-chunks`).
    ToolCall,
}

impl RowKind {
    /// The storage tag.
    pub fn tag(self) -> &'static str {
        match self {
            RowKind::Text => TEXT_CHUNKS,
            RowKind::Reasoning => REASONING_CHUNKS,
            RowKind::ToolCall => TOOL_CALL_CHUNKS,
        }
    }

    /// The kind of a storage tag.
    pub(crate) fn from_tag(tag: &str) -> Option<RowKind> {
        match tag {
            TEXT_CHUNKS => Some(RowKind::Text),
            REASONING_CHUNKS => Some(RowKind::Reasoning),
            TOOL_CALL_CHUNKS => Some(RowKind::ToolCall),
            _ => None,
        }
    }
}

/// A packable event, seen through CK1–CK6.
struct Delta<'a> {
    kind: RowKind,
    seq: u64,
    time: i64,
    turn: u64,
    step: u64,
    index: u64,
    payload: &'a str,
    id: &'a str,
    name: Option<&'a str>,
}

fn safe_i(n: i64) -> bool {
    n.unsigned_abs() <= MAX_SAFE_INTEGER
}

/// CK1–CK6: the delta fields of `e` when it may be packed. Events read with
/// a non-canonical text are not packed (they are kept byte for byte).
fn eligible(e: &SessionEvent) -> Option<Delta<'_>> {
    let EventData::AssistantChunk(c) = e.data() else {
        return None;
    };
    if e.extra().is_some() || e.seq() > MAX_SAFE_INTEGER || !safe_i(e.time()) {
        return None;
    }
    let base = |kind, index, payload, id, name| Delta {
        kind,
        seq: e.seq(),
        time: e.time(),
        turn: c.turn,
        step: c.step,
        index,
        payload,
        id,
        name,
    };
    Some(match c.view() {
        ChunkView::TextDelta { index, text } => base(RowKind::Text, index, text, "", None),
        ChunkView::ReasoningDelta { index, text } => {
            base(RowKind::Reasoning, index, text, "", None)
        }
        ChunkView::ToolCallDelta {
            index,
            id,
            name,
            arguments_delta,
        } => base(RowKind::ToolCall, index, arguments_delta, id, name),
        ChunkView::Other(_) => return None,
    })
}

/// CK7: whether `next` extends a run whose last member is `prev`.
fn extends(prev: &Delta<'_>, next: &Delta<'_>) -> bool {
    next.kind == prev.kind
        && prev.seq.checked_add(1) == Some(next.seq)
        && next.time.checked_sub(prev.time).is_some_and(safe_i)
        && next.turn == prev.turn
        && next.step == prev.step
        && next.index == prev.index
        && (next.kind != RowKind::ToolCall || (next.id == prev.id && next.name == prev.name))
}

/// Encodes one write batch (AP1): every event on its own line, or, with
/// `pack`, runs of at least [`MIN_RUN`] packable deltas as one row each
/// (CK7–CK9). Packing is per batch: a run split across batches packs each
/// part separately.
pub fn encode_batch(events: &[SessionEvent], pack: bool, out: &mut Vec<u8>) {
    if !pack {
        for e in events {
            encode_event_line(e, out);
        }
        return;
    }
    let mut run: Vec<(usize, Delta<'_>)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let d = eligible(e);
        let continues = match (&d, run.last()) {
            (Some(d), Some((_, prev))) => extends(prev, d),
            _ => false,
        };
        if !continues {
            flush_run(&run, events, out);
            run.clear();
        }
        match d {
            Some(d) => run.push((i, d)),
            None => encode_event_line(e, out),
        }
    }
    flush_run(&run, events, out);
}

fn flush_run(run: &[(usize, Delta<'_>)], events: &[SessionEvent], out: &mut Vec<u8>) {
    if run.len() < MIN_RUN {
        for (i, _) in run {
            if let Some(e) = events.get(*i) {
                encode_event_line(e, out);
            }
        }
        return;
    }
    let members: Vec<&Delta<'_>> = run.iter().map(|(_, d)| d).collect();
    write_row(&members, out);
}

/// CK10–CK13: one row line for a run (keys in the spec's order).
fn write_row(run: &[&Delta<'_>], out: &mut Vec<u8>) {
    let Some(first) = run.first() else { return };
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(first.kind.tag().as_bytes());
    out.extend_from_slice(b"\",\"seq0\":");
    push_u64(out, first.seq);
    out.extend_from_slice(b",\"time0\":");
    push_i64(out, first.time);
    out.extend_from_slice(b",\"data\":{\"turn\":");
    push_u64(out, first.turn);
    out.extend_from_slice(b",\"step\":");
    push_u64(out, first.step);
    out.extend_from_slice(b",\"index\":");
    push_u64(out, first.index);
    out.extend_from_slice(b",\"dt\":[");
    for (k, pair) in run.windows(2).enumerate() {
        if k > 0 {
            out.push(b',');
        }
        push_i64(out, pair[1].time - pair[0].time);
    }
    out.push(b']');
    if first.kind == RowKind::ToolCall {
        out.extend_from_slice(b",\"id\":");
        push_str(out, first.id);
        if let Some(name) = first.name {
            out.extend_from_slice(b",\"name\":");
            push_str(out, name);
        }
        out.extend_from_slice(b",\"args\":[");
    } else {
        out.extend_from_slice(b",\"texts\":[");
    }
    for (k, d) in run.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        push_str(out, d.payload);
    }
    out.extend_from_slice(b"]}}\n");
}

/// A decoded row before expansion (CK15 already checked).
pub(crate) struct Row {
    pub(crate) kind: RowKind,
    pub(crate) seq0: u64,
    pub(crate) time0: i64,
    pub(crate) turn: u64,
    pub(crate) step: u64,
    pub(crate) index: u64,
    pub(crate) dt: Vec<i64>,
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) payloads: Vec<String>,
}

impl Row {
    /// CK15's numeric checks: member count, `dt` length, safe seqs and
    /// safe running times.
    pub(crate) fn check(&self) -> Result<(), String> {
        let tag = self.kind.tag();
        let n = self.payloads.len();
        if n == 0 {
            return Err(alloc::format!("malformed {tag} storage row: no members"));
        }
        if self.dt.len() != n - 1 {
            return Err(alloc::format!(
                "malformed {tag} storage row: dt has {} entries for {n} members",
                self.dt.len()
            ));
        }
        if self.seq0 > MAX_SAFE_INTEGER || self.seq0 + (n as u64 - 1) > MAX_SAFE_INTEGER {
            return Err(alloc::format!(
                "malformed {tag} storage row: seqs are not safe integers"
            ));
        }
        let mut t = self.time0;
        if !safe_i(t) {
            return Err(alloc::format!(
                "malformed {tag} storage row: time0 is not a safe integer"
            ));
        }
        for d in &self.dt {
            if !safe_i(*d) {
                return Err(alloc::format!(
                    "malformed {tag} storage row: dt is not a safe integer"
                ));
            }
            t = match t.checked_add(*d).filter(|x| safe_i(*x)) {
                Some(x) => x,
                None => {
                    return Err(alloc::format!(
                        "malformed {tag} storage row: a running time is not a safe integer"
                    ));
                }
            };
        }
        Ok(())
    }

    /// CK16: the member events.
    pub(crate) fn expand(self, last: &mut Option<ToolCallHead>) -> Vec<SessionEvent> {
        let mut out = Vec::with_capacity(self.payloads.len());
        let mut time = self.time0;
        let mut dt = self.dt.iter();
        for (k, payload) in self.payloads.into_iter().enumerate() {
            if k > 0 {
                time += dt.next().copied().unwrap_or(0);
            }
            let chunk = match self.kind {
                RowKind::Text => StreamChunk::TextDelta {
                    index: self.index,
                    text: ChunkText::from(payload),
                },
                RowKind::Reasoning => StreamChunk::ReasoningDelta {
                    index: self.index,
                    text: ChunkText::from(payload),
                },
                RowKind::ToolCall => StreamChunk::ToolCallDelta {
                    index: self.index,
                    head: ToolCallHead::reuse(last, &self.id, self.name.as_deref()),
                    arguments_delta: ChunkText::from(payload),
                },
            };
            let data = AssistantChunk::new_interned(self.turn, self.step, chunk, last);
            out.push(SessionEvent::new(self.seq0 + k as u64, time, data));
        }
        out
    }
}
