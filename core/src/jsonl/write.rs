//! Writing events and header lines as compact JSON, the way
//! `JSON.stringify` does (session.md J6) and in the E9 key order.

use alloc::vec::Vec;
use serde::Serialize;

use crate::session::{ChunkView, EventData, SessionEvent, SessionHeader, SurfaceOp};

/// Appends `s` as a JSON string: escapes only `"`, `\` and U+0000–U+001F
/// (`\b \t \n \f \r`, otherwise `\u00xx` in lowercase hex), like
/// `JSON.stringify` and serde_json.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends a non-negative integer.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends an integer.
pub(crate) fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

/// Appends `v` as `JSON.stringify` would write it (J6): numbers in
/// JavaScript form (`1`, not `1.0`; `1e+21`), strings escaped like
/// `JSON.stringify` (only `"`, `\` and U+0000–U+001F), no whitespace,
/// object keys in their order.
pub(crate) fn write_value_js(out: &mut Vec<u8>, v: &serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                push_u64(out, u);
            } else if let Some(i) = n.as_i64() {
                push_i64(out, i);
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                out.extend_from_slice(crate::json::js_number(f).as_bytes());
            }
        }
        Value::String(s) => push_str(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value_js(out, x);
            }
            out.push(b']');
        }
        Value::Object(o) => {
            out.push(b'{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_str(out, k);
                out.push(b':');
                write_value_js(out, x);
            }
            out.push(b'}');
        }
    }
}

/// Appends any serializable value as compact JSON through serde_json.
pub(crate) fn push_serde<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    match serde_json::to_vec(value) {
        Ok(v) => out.extend_from_slice(&v),
        // Serializing the core's own types cannot fail; keep the line valid JSON.
        Err(_) => out.extend_from_slice(b"null"),
    }
}

fn push_chunk(out: &mut Vec<u8>, turn: u64, step: u64, view: ChunkView<'_>) {
    out.extend_from_slice(b"{\"turn\":");
    push_u64(out, turn);
    out.extend_from_slice(b",\"step\":");
    push_u64(out, step);
    out.extend_from_slice(b",\"chunk\":");
    match view {
        ChunkView::TextDelta { index, text } | ChunkView::ReasoningDelta { index, text } => {
            if matches!(view, ChunkView::TextDelta { .. }) {
                out.extend_from_slice(b"{\"type\":\"text-delta\",\"index\":");
            } else {
                out.extend_from_slice(b"{\"type\":\"reasoning-delta\",\"index\":");
            }
            push_u64(out, index);
            out.extend_from_slice(b",\"text\":");
            push_str(out, text);
            out.push(b'}');
        }
        ChunkView::ToolCallDelta {
            index,
            id,
            name,
            arguments_delta,
        } => {
            out.extend_from_slice(b"{\"type\":\"tool-call-delta\",\"index\":");
            push_u64(out, index);
            out.extend_from_slice(b",\"id\":");
            push_str(out, id);
            if let Some(name) = name {
                out.extend_from_slice(b",\"name\":");
                push_str(out, name);
            }
            out.extend_from_slice(b",\"argumentsDelta\":");
            push_str(out, arguments_delta);
            out.push(b'}');
        }
        ChunkView::Other(c) => push_serde(out, c),
    }
    out.push(b'}');
}

fn push_data(out: &mut Vec<u8>, data: &EventData) {
    match data {
        EventData::AssistantChunk(c) => push_chunk(out, c.turn, c.step, c.view()),
        EventData::TurnStart(t) => {
            out.extend_from_slice(b"{\"turn\":");
            push_u64(out, t.turn);
            out.push(b'}');
        }
        EventData::StepStart(s) | EventData::StepEnd(s) => {
            out.extend_from_slice(b"{\"turn\":");
            push_u64(out, s.turn);
            out.extend_from_slice(b",\"step\":");
            push_u64(out, s.step);
            out.push(b'}');
        }
        EventData::EndSeed => out.extend_from_slice(b"{}"),
        EventData::Plugin(p) => out.extend_from_slice(p.data.get().as_bytes()),
        other => push_serde(out, other),
    }
}

fn push_surface_op(out: &mut Vec<u8>, op: SurfaceOp) {
    out.extend_from_slice(b",\"surfaceOp\":");
    match op {
        SurfaceOp::Append => out.extend_from_slice(b"\"append\""),
        SurfaceOp::Replace { start, end } => {
            out.extend_from_slice(b"{\"op\":\"replace\",\"start\":");
            push_u64(out, start);
            out.extend_from_slice(b",\"end\":");
            push_u64(out, end);
            out.push(b'}');
        }
    }
}

fn push_sources(out: &mut Vec<u8>, sources: &[u64]) {
    out.extend_from_slice(b",\"sourceEventSeqs\":[");
    for (i, s) in sources.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_u64(out, *s);
    }
    out.push(b']');
}

/// Appends `e` as one JSON object (no newline): the exact text it was read
/// with when it has one, else the E9 envelope
/// `type, seq, time, data, ignorable?, sourceEventSeqs?, surfaceOp?`
/// (`surfaceOp` before `sourceEventSeqs` for crash-repair results).
pub(crate) fn write_event_json(e: &SessionEvent, out: &mut Vec<u8>) {
    if let Some(raw) = e.verbatim() {
        out.extend_from_slice(raw.get().as_bytes());
        return;
    }
    write_event_canonical(e, out);
}

/// Appends the canonical line of `e` (E9), ignoring any source text it keeps.
pub(crate) fn write_event_canonical(e: &SessionEvent, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"type\":");
    push_str(out, e.event_type());
    out.extend_from_slice(b",\"seq\":");
    push_u64(out, e.seq());
    out.extend_from_slice(b",\"time\":");
    push_i64(out, e.time());
    out.extend_from_slice(b",\"data\":");
    push_data(out, e.data());
    if let Some(x) = e.extra() {
        if x.ignorable {
            out.extend_from_slice(b",\"ignorable\":true");
        }
        if x.op_first {
            if let Some(op) = x.surface_op {
                push_surface_op(out, op);
            }
            if let Some(src) = &x.sources {
                push_sources(out, src);
            }
        } else {
            if let Some(src) = &x.sources {
                push_sources(out, src);
            }
            if let Some(op) = x.surface_op {
                push_surface_op(out, op);
            }
        }
    }
    out.push(b'}');
}

/// Appends `e` as one log line (JSON and `\n`).
pub fn encode_event_line(e: &SessionEvent, out: &mut Vec<u8>) {
    write_event_json(e, out);
    out.push(b'\n');
}

/// Appends the JSONL header line (HL1, with `\n`): key order `type, version,
/// id, createdAt, cwd?, parentSession?, seedLength?, origin?,
/// delegationDepth, agentPreset?`; `delegationDepth` is always written.
pub fn encode_header_line(h: &SessionHeader, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"type\":\"session\",\"version\":0,\"id\":");
    push_str(out, h.id.as_str());
    out.extend_from_slice(b",\"createdAt\":");
    push_u64(out, h.created_at);
    if let Some(v) = &h.cwd {
        out.extend_from_slice(b",\"cwd\":");
        push_str(out, v);
    }
    if let Some(v) = &h.parent_session {
        out.extend_from_slice(b",\"parentSession\":");
        push_str(out, v.as_str());
    }
    if let Some(v) = h.seed_length {
        out.extend_from_slice(b",\"seedLength\":");
        push_u64(out, v);
    }
    if let Some(v) = &h.origin {
        out.extend_from_slice(b",\"origin\":");
        push_str(out, v);
    }
    out.extend_from_slice(b",\"delegationDepth\":");
    push_u64(out, h.delegation_depth.unwrap_or(0));
    if let Some(v) = &h.agent_preset {
        out.extend_from_slice(b",\"agentPreset\":");
        push_str(out, v);
    }
    out.extend_from_slice(b"}\n");
}
