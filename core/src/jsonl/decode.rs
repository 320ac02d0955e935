//! Decoding one storage record (an event line or a packed row) with typed
//! visitors, and the slow path that explains why a line is not an event.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::MAX_SAFE_INTEGER;
use crate::message::Message;
use crate::session::{
    AppendError, AssistantMessage, ChunkDataSeed, EventData, Extra, InboxSpliced, LlmRetry,
    LlmRetryStarted, PluginEvent, RequestContext, RequestHeader, SessionEvent, Step, SurfaceOp,
    TodoWrite, ToolCall, ToolResult, TurnEnd, TurnStart, types,
};
use crate::text::ToolCallHead;

use super::packed::{Row, RowKind};
use super::write::write_event_json;

/// A line that is not JSON, or a malformed packed row (SC1).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unparsable {
    /// Why.
    pub reason: String,
}

impl fmt::Display for Unparsable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A JSON line that parses but is not a valid event of this format (its
/// envelope or core payload breaks a rule). It still has a place in the
/// scan: its `seq` and `type` take part in the contiguity and `turn/end`
/// checks (SC2, SC3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidEvent {
    /// The `seq`, when it is a non-negative safe integer.
    pub seq: Option<u64>,
    /// The `type`, when it is a string.
    pub event_type: Option<String>,
    /// The rule it breaks.
    pub error: AppendError,
}

/// One decoded event of a record.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Decoded {
    /// A well-formed event.
    Event(SessionEvent),
    /// A parsed line that is not a valid event.
    Invalid(InvalidEvent),
}

impl Decoded {
    /// The seq, when known.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Decoded::Event(e) => Some(e.seq()),
            Decoded::Invalid(i) => i.seq,
        }
    }

    /// The type, when known.
    pub fn event_type(&self) -> Option<&str> {
        match self {
            Decoded::Event(e) => Some(e.event_type()),
            Decoded::Invalid(i) => i.event_type.as_deref(),
        }
    }
}

/// What one storage line decodes to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// An event line.
    One(Decoded),
    /// A packed row: the run of `assistant/chunk` events it stands for.
    Run(Vec<SessionEvent>),
}

/// Decodes storage lines. It keeps a little state between lines (the tool
/// head shared by consecutive tool-call deltas, a scratch buffer), so reuse
/// one decoder for a whole log.
///
/// By default a core payload with keys or shapes dsh does not model (an
/// extra key, an older or newer shape of a field it does not interpret) is
/// read leniently: the event keeps what dsh owns, keeps its source line, and
/// reports the deviation ([`SessionEvent::deviation`], rule E4).
/// [`Decoder::strict`] turns such a payload into an invalid event.
#[derive(Debug, Default)]
pub struct Decoder {
    last_head: Option<ToolCallHead>,
    scratch: Vec<u8>,
    /// The unescaped payload of a fast-path chunk line.
    text: String,
    strict: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    UserMessage,
    AssistantChunk,
    AssistantMessage,
    ToolCall,
    ToolResult,
    TodoWrite,
    RequestHeader,
    RequestContext,
    EndSeed,
    LlmRetry,
    LlmRetryStarted,
    InboxSpliced,
    Row(RowKind),
    Plugin,
}

fn classify(t: &str) -> Kind {
    use types::*;
    match t {
        ASSISTANT_CHUNK => Kind::AssistantChunk,
        TURN_START => Kind::TurnStart,
        TURN_END => Kind::TurnEnd,
        STEP_START => Kind::StepStart,
        STEP_END => Kind::StepEnd,
        USER_MESSAGE => Kind::UserMessage,
        ASSISTANT_MESSAGE => Kind::AssistantMessage,
        TOOL_CALL => Kind::ToolCall,
        TOOL_RESULT => Kind::ToolResult,
        TODO_WRITE => Kind::TodoWrite,
        REQUEST_HEADER => Kind::RequestHeader,
        REQUEST_CONTEXT => Kind::RequestContext,
        END_SEED => Kind::EndSeed,
        LLM_RETRY => Kind::LlmRetry,
        LLM_RETRY_STARTED => Kind::LlmRetryStarted,
        INBOX_SPLICED => Kind::InboxSpliced,
        other => match RowKind::from_tag(other) {
            Some(k) => Kind::Row(k),
            None => Kind::Plugin,
        },
    }
}

impl Decoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// A decoder that accepts core payloads only in the exact shapes of
    /// session.md section 4 (for producers checking what they write).
    pub fn strict() -> Self {
        Decoder {
            strict: true,
            ..Decoder::default()
        }
    }

    /// Decodes one storage line (without its `\n`): an event, an invalid
    /// event, or a packed row's run; `Err` when the line is not JSON or is a
    /// malformed row (CK14–CK16, SC1).
    pub fn decode_line(&mut self, line: &[u8]) -> Result<Record, Unparsable> {
        match self.decode_canonical(line, None) {
            Some(e) => Ok(Record::One(Decoded::Event(e))),
            None => self.decode_general(line, None),
        }
    }

    /// [`decode_line`](Self::decode_line) for a line already known to be
    /// UTF-8 (skips the per-string UTF-8 validation).
    pub fn decode_line_str(&mut self, line: &str) -> Result<Record, Unparsable> {
        match self.decode_canonical(line.as_bytes(), Some(line)) {
            Some(e) => Ok(Record::One(Decoded::Event(e))),
            None => self.decode_general(line.as_bytes(), Some(line)),
        }
    }

    /// The canonical-line templates alone (delta chunks, then `canon`): the
    /// event when one reads `line`. `text` is `line` when it is known to be
    /// UTF-8.
    #[inline]
    pub(super) fn decode_canonical(
        &mut self,
        line: &[u8],
        text: Option<&str>,
    ) -> Option<SessionEvent> {
        fast_chunk(line, text, &mut self.text, &mut self.last_head)
            .or_else(|| super::canon::read_line(line, text, &mut self.last_head))
    }

    /// The general path of [`decode_line`](Self::decode_line), without the
    /// canonical-line templates.
    pub(super) fn decode_general(
        &mut self,
        line: &[u8],
        text: Option<&str>,
    ) -> Result<Record, Unparsable> {
        let fast = match text {
            Some(t) => {
                let mut de = serde_json::Deserializer::from_str(t);
                self.fast(&mut de)
            }
            None => {
                let mut de = serde_json::Deserializer::from_slice(line);
                self.fast(&mut de)
            }
        };
        self.finish(fast, line)
    }

    /// Checks the canonical-line templates on `line` (for tests and fuzz
    /// targets): `Ok(true)` when a template reads it, builds the event the
    /// general path builds, and that event writes back as `line`; `Ok(false)`
    /// when no template reads it; `Err` with the difference otherwise.
    #[doc(hidden)]
    pub fn template_agrees(line: &[u8]) -> Result<bool, String> {
        let mut last = None;
        let text = core::str::from_utf8(line).ok();
        let Some(fast) = super::canon::read_line(line, text, &mut last) else {
            return Ok(false);
        };
        let general = Decoder::new().decode_general(line, None);
        let general = match general {
            Ok(Record::One(Decoded::Event(e)))
                if e == fast && e.verbatim().is_none() && e.deviation().is_none() =>
            {
                e
            }
            other => {
                return Err(format!(
                    "template read {fast:?}, the general path {other:?}"
                ));
            }
        };
        // Both write back as the line: the parts equality leaves out (key
        // orders, the surfaceOp position) agree too.
        for (who, e) in [("template", &fast), ("general path", &general)] {
            let mut out = Vec::new();
            super::write::write_event_canonical(e, &mut out);
            if out != line {
                return Err(format!(
                    "the {who}'s event writes {:?}",
                    String::from_utf8_lossy(&out)
                ));
            }
        }
        Ok(true)
    }

    fn fast<'de, R: serde_json::de::Read<'de>>(
        &mut self,
        de: &mut serde_json::Deserializer<R>,
    ) -> Result<(Parsed, bool), serde_json::Error> {
        let mut canonical = true;
        let parsed = de.deserialize_map(EnvelopeVisitor {
            last: &mut self.last_head,
            canonical: &mut canonical,
        })?;
        de.end()?;
        Ok((parsed, canonical))
    }

    fn finish(
        &mut self,
        fast: Result<(Parsed, bool), serde_json::Error>,
        line: &[u8],
    ) -> Result<Record, Unparsable> {
        match fast {
            Ok((Parsed::Row(row), _)) => Ok(Record::Run(row.expand(&mut self.last_head))),
            Ok((Parsed::Event(mut e), canonical)) => {
                // A canonical chunk line (E9 key order, integers, strings
                // without escapes) writes back identically exactly when the
                // lengths agree (whitespace is the only freedom left).
                if !(canonical && canonical_chunk_len(&e) == Some(line.len())) {
                    self.keep_text(&mut e, line);
                }
                Ok(Record::One(Decoded::Event(e)))
            }
            Err(_) => self.slow(line),
        }
    }

    /// Keeps the source text when the canonical serialization differs (J7,
    /// key orders), so the event writes back byte for byte.
    fn keep_text(&mut self, e: &mut SessionEvent, line: &[u8]) {
        self.scratch.clear();
        write_event_json(e, &mut self.scratch);
        if self.scratch.as_slice() != line
            && let Ok(raw) = core::str::from_utf8(line)
                .map_err(|_| ())
                .and_then(|s| RawValue::from_string(s.to_owned()).map_err(|_| ()))
        {
            e.set_verbatim(raw);
        }
    }

    /// The slow path: parse generically and name the broken rule.
    fn slow(&mut self, line: &[u8]) -> Result<Record, Unparsable> {
        let value: Value = serde_json::from_slice(line).map_err(|e| Unparsable {
            reason: format!("not valid JSON: {e}"),
        })?;
        let Value::Object(obj) = value else {
            return Ok(Record::One(Decoded::Invalid(InvalidEvent {
                seq: None,
                event_type: None,
                error: AppendError::InvalidEnvelope {
                    detail: String::from("an event must be a JSON object"),
                },
            })));
        };
        let event_type = obj.get("type").and_then(Value::as_str).map(String::from);
        if let Some(kind) = event_type.as_deref().and_then(RowKind::from_tag) {
            let row = row_from_value(kind, obj)?;
            return Ok(Record::Run(row.expand(&mut self.last_head)));
        }
        let seq = obj
            .get("seq")
            .and_then(Value::as_u64)
            .filter(|n| *n <= MAX_SAFE_INTEGER);
        match event_from_value(obj, &mut self.last_head, !self.strict) {
            Ok(mut e) => {
                self.keep_text(&mut e, line);
                Ok(Record::One(Decoded::Event(e)))
            }
            Err(error) => Ok(Record::One(Decoded::Invalid(InvalidEvent {
                seq,
                event_type,
                error,
            }))),
        }
    }
}

/// The position of the first byte of `bytes` that ends the plain run of a
/// JSON string: `"`, `\\` or a control character (below 0x20).
///
/// Eight bytes per step: for each `u64` word, a byte lane's high bit is set
/// exactly when that byte matches (the zero-byte test on `x & 0x7f..` plus
/// `| x` cannot carry across lanes), so the lowest set lane is the answer.
pub(super) fn find_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    /// High bit of each lane set where the lane of `x` is zero.
    fn zero_lanes(x: u64) -> u64 {
        !(((x & LOW7) + LOW7) | x) & HIGH
    }
    let mut words = bytes.chunks_exact(8);
    let mut base = 0;
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_le_bytes(w);
        let hits = zero_lanes(x ^ (ONES * u64::from(b'"')))
            | zero_lanes(x ^ (ONES * u64::from(b'\\')))
            | zero_lanes(x & (ONES * 0xe0));
        if hits != 0 {
            return Some(base + (hits.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    words
        .remainder()
        .iter()
        .position(|c| *c == b'"' || *c == b'\\' || *c < 0x20)
        .map(|i| base + i)
}

/// A cursor over one line for the canonical-line templates.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    /// The same line when it is known to be UTF-8.
    pub(super) s: Option<&'a str>,
    pub(super) i: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `line`; `text` is `line` when it is known
    /// to be UTF-8.
    pub(super) fn new(line: &'a [u8], text: Option<&'a str>) -> Self {
        Cursor {
            b: line,
            s: text,
            i: 0,
        }
    }

    pub(super) fn lit(&mut self, s: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + s.len())? == s {
            self.i += s.len();
            Some(())
        } else {
            None
        }
    }

    /// A canonical non-negative integer (no leading zero) within `max`,
    /// which is at most [`MAX_SAFE_INTEGER`].
    pub(super) fn uint(&mut self, max: u64) -> Option<u64> {
        // Sixteen digits hold every value up to MAX_SAFE_INTEGER, and
        // seventeen fit a u64 unchecked: a longer run is out of range.
        let rest = self.b.get(self.i..)?;
        let mut n = 0u64;
        let mut len = 0;
        while let Some(&c) = rest.get(len) {
            let d = c.wrapping_sub(b'0');
            if d > 9 || len == 17 {
                break;
            }
            n = n * 10 + u64::from(d);
            len += 1;
        }
        if len == 0 || len > 16 || (len > 1 && rest[0] == b'0') || n > max.min(MAX_SAFE_INTEGER) {
            return None;
        }
        self.i += len;
        Some(n)
    }

    /// A canonical safe integer; `-0` is left to the general path.
    pub(super) fn int(&mut self) -> Option<i64> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
            let n = self.uint(MAX_SAFE_INTEGER)?;
            if n == 0 {
                return None;
            }
            return Some(-(n as i64));
        }
        self.uint(MAX_SAFE_INTEGER).map(|n| n as i64)
    }

    /// The body of a string without escapes or control characters, after
    /// its opening quote; consumes the closing quote.
    pub(super) fn plain_str(&mut self) -> Option<&'a str> {
        let start = self.i;
        let rel = find_special(self.b.get(start..)?)?;
        let end = start + rel;
        if self.b[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        self.text(start, end)
    }

    /// The text of `b[start..end]`, where both ends sit next to ASCII bytes.
    pub(super) fn text(&self, start: usize, end: usize) -> Option<&'a str> {
        match self.s {
            // Both ends are char boundaries: no second UTF-8 scan.
            Some(s) => s.get(start..end),
            None => core::str::from_utf8(&self.b[start..end]).ok(),
        }
    }

    /// The body of a string after its opening quote, as
    /// [`canonical_str`](Self::canonical_str) reads it: borrowed from the
    /// line when it has no escape, else unescaped into `buf`.
    pub(super) fn body<'s>(&mut self, buf: &'s mut String) -> Option<&'s str>
    where
        'a: 's,
    {
        let start = self.i;
        if let Some(plain) = self.plain_str() {
            return Some(plain);
        }
        self.i = start;
        self.canonical_str(buf)?;
        Some(buf.as_str())
    }

    /// The body of a string after its opening quote, unescaped into `out`,
    /// accepted only when every escape is the one `write::push_str` writes
    /// (so the line writes back identically); consumes the closing quote.
    pub(super) fn canonical_str(&mut self, out: &mut String) -> Option<()> {
        out.clear();
        loop {
            let start = self.i;
            let rel = find_special(self.b.get(start..)?)?;
            let end = start + rel;
            out.push_str(self.text(start, end)?);
            match self.b[end] {
                b'"' => {
                    self.i = end + 1;
                    return Some(());
                }
                b'\\' => {}
                _ => return None,
            }
            let (c, len) = match *self.b.get(end + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'u' => {
                    // `\u00XX` in lower-case hex, only for the control
                    // characters without a short form.
                    let hex = self.b.get(end + 2..end + 6)?;
                    let digit = |c: u8| match c {
                        b'0'..=b'9' => Some(c - b'0'),
                        b'a'..=b'f' => Some(c - b'a' + 10),
                        _ => None,
                    };
                    if hex[0] != b'0' || hex[1] != b'0' || hex[2] > b'1' {
                        return None;
                    }
                    let v = digit(hex[2])? * 16 + digit(hex[3])?;
                    if matches!(v, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                        return None;
                    }
                    (char::from(v), 6)
                }
                _ => return None,
            };
            out.push(c);
            self.i = end + len;
        }
    }
}

/// The canonical `assistant/chunk` delta line, read without serde: exactly
/// the text `write_event_json` produces (ids and names without escapes, the
/// payload with the escapes `write` uses). Such a line writes back
/// identically, so no source text is kept. Any other line returns `None`
/// and takes the general path. `text` is `line` when it is known to be UTF-8;
/// `buf` is scratch space for the unescaped payload.
fn fast_chunk(
    line: &[u8],
    text: Option<&str>,
    buf: &mut String,
    last: &mut Option<ToolCallHead>,
) -> Option<SessionEvent> {
    let mut c = Cursor::new(line, text);
    c.lit(b"{\"type\":\"assistant/chunk\",\"seq\":")?;
    let seq = c.uint(MAX_SAFE_INTEGER)?;
    c.lit(b",\"time\":")?;
    let time = c.int()?;
    c.lit(b",\"data\":{\"turn\":")?;
    let turn = c.uint(MAX_SAFE_INTEGER)?;
    c.lit(b",\"step\":")?;
    let step = c.uint(MAX_SAFE_INTEGER)?;
    c.lit(b",\"chunk\":{\"type\":\"")?;
    let kind = if c.lit(b"text-delta\"").is_some() {
        0
    } else if c.lit(b"reasoning-delta\"").is_some() {
        1
    } else {
        c.lit(b"tool-call-delta\"")?;
        2
    };
    c.lit(b",\"index\":")?;
    let index = c.uint(u64::from(u32::MAX))?;
    let (mut id, mut name) = ("", None);
    if kind == 2 {
        c.lit(b",\"id\":\"")?;
        id = c.plain_str()?;
        if c.lit(b",\"name\":\"").is_some() {
            name = Some(c.plain_str()?);
        }
        c.lit(b",\"argumentsDelta\":\"")?;
    } else {
        c.lit(b",\"text\":\"")?;
    }
    let payload = c.body(buf)?;
    c.lit(b"}}}")?;
    if c.i != line.len() {
        return None;
    }
    let data =
        crate::session::AssistantChunk::delta(turn, step, kind, index, id, name, payload, last);
    Some(SessionEvent::new(seq, time, data))
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The length of the canonical line of a delta `assistant/chunk` event
/// whose strings need no escapes (see `write::write_event_json`).
fn canonical_chunk_len(e: &SessionEvent) -> Option<usize> {
    let EventData::AssistantChunk(c) = e.data() else {
        return None;
    };
    if e.extra().is_some() {
        return None;
    }
    let time = digits(e.time().unsigned_abs()) + usize::from(e.time() < 0);
    // {"type":"assistant/chunk","seq":S,"time":T,"data":{"turn":U,"step":V,"chunk":C}}
    let envelope =
        32 + digits(e.seq()) + 8 + time + 8 + 8 + digits(c.turn) + 8 + digits(c.step) + 9 + 2;
    let chunk = match c.view() {
        // {"type":"text-delta","index":I,"text":"X"}
        crate::session::ChunkView::TextDelta { index, text } => {
            30 + digits(index) + 8 + text.len() + 2
        }
        crate::session::ChunkView::ReasoningDelta { index, text } => {
            35 + digits(index) + 8 + text.len() + 2
        }
        // {"type":"tool-call-delta","index":I,"id":"D"[,"name":"N"],"argumentsDelta":"A"}
        crate::session::ChunkView::ToolCallDelta {
            index,
            id,
            name,
            arguments_delta,
        } => {
            35 + digits(index)
                + 6
                + id.len()
                + 2
                + name.map_or(0, |n| 8 + n.len() + 2)
                + 18
                + arguments_delta.len()
                + 2
        }
        crate::session::ChunkView::Other(_) => return None,
    };
    Some(envelope + chunk)
}

fn envelope(detail: impl Into<String>) -> AppendError {
    AppendError::InvalidEnvelope {
        detail: detail.into(),
    }
}

const ENVELOPE_KEYS: [&str; 7] = [
    "type",
    "seq",
    "time",
    "data",
    "surfaceOp",
    "sourceEventSeqs",
    "ignorable",
];

/// Builds an event from a parsed JSON object, naming the first broken rule
/// (V2, V3, S5, S6, then the payload shape).
fn event_from_value(
    mut obj: serde_json::Map<String, Value>,
    last: &mut Option<ToolCallHead>,
    lenient: bool,
) -> Result<SessionEvent, AppendError> {
    if let Some(k) = obj.keys().find(|k| !ENVELOPE_KEYS.contains(&k.as_str())) {
        return Err(AppendError::UnknownEnvelopeKey { key: k.clone() });
    }
    let event_type = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(envelope("\"type\" must be a string")),
    };
    let seq = obj
        .get("seq")
        .and_then(Value::as_u64)
        .filter(|n| *n <= MAX_SAFE_INTEGER)
        .ok_or_else(|| envelope("\"seq\" must be a non-negative safe integer"))?;
    let time = obj
        .get("time")
        .and_then(Value::as_i64)
        .filter(|n| n.unsigned_abs() <= MAX_SAFE_INTEGER)
        .ok_or_else(|| envelope("\"time\" must be a safe integer"))?;
    let data = obj
        .shift_remove("data")
        .ok_or_else(|| envelope("\"data\" is required"))?;
    let ignorable = match obj.get("ignorable") {
        None => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(AppendError::InvalidIgnorable),
    };
    let surface_op = match obj.get("surfaceOp") {
        None => None,
        Some(v) => Some(surface_op_from_value(v)?),
    };
    let sources = match obj.get("sourceEventSeqs") {
        None => None,
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for v in a {
                match v.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER) {
                    Some(n) => out.push(n),
                    None => {
                        return Err(AppendError::InvalidSources {
                            detail: format!(
                                "sourceEventSeqs element {v} is not a non-negative safe integer"
                            ),
                        });
                    }
                }
            }
            Some(out)
        }
        Some(_) => {
            return Err(AppendError::InvalidSources {
                detail: String::from("sourceEventSeqs must be an array"),
            });
        }
    };
    let op_first = match (
        obj.keys().position(|k| k == "surfaceOp"),
        obj.keys().position(|k| k == "sourceEventSeqs"),
    ) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    };
    let (data, deviation) = data_from_value(&event_type, data, last, lenient)?;
    let extra = (surface_op.is_some() || sources.is_some() || ignorable || deviation.is_some())
        .then(|| {
            Box::new(Extra {
                surface_op,
                sources,
                ignorable,
                op_first,
                verbatim: None,
                deviation,
            })
        });
    Ok(SessionEvent::from_parts(seq, time, data, extra))
}

fn surface_op_from_value(v: &Value) -> Result<SurfaceOp, AppendError> {
    match v {
        Value::String(s) if s == "append" => Ok(SurfaceOp::Append),
        Value::Object(o) => {
            let ok = o.len() == 3 && o.get("op").and_then(Value::as_str) == Some("replace");
            let num = |k: &str| {
                o.get(k)
                    .and_then(Value::as_u64)
                    .filter(|n| *n <= MAX_SAFE_INTEGER)
            };
            match (ok, num("start"), num("end")) {
                (true, Some(start), Some(end)) => Ok(SurfaceOp::Replace { start, end }),
                _ => Err(AppendError::InvalidSurfaceOp {
                    detail: String::from("invalid replace surfaceOp"),
                }),
            }
        }
        _ => Err(AppendError::InvalidSurfaceOp {
            detail: String::from("invalid surfaceOp"),
        }),
    }
}

fn payload_err(event_type: &str, e: impl fmt::Display) -> AppendError {
    let detail = format!("{e}");
    let message_rule = |d: &str| {
        if d.contains("\"id\"") {
            "M1"
        } else if d.contains("role") {
            "M2"
        } else if d.contains("source") {
            "M3"
        } else {
            "M4"
        }
    };
    match event_type {
        types::USER_MESSAGE | types::ASSISTANT_MESSAGE | types::TOOL_RESULT
            if detail.contains("message") =>
        {
            AppendError::InvalidMessage {
                rule: message_rule(&detail),
                detail: format!("{event_type}: {detail}"),
            }
        }
        types::REQUEST_HEADER => AppendError::InvalidRequestHeader { detail },
        _ => AppendError::InvalidPayload {
            event_type: String::from(event_type),
            detail,
        },
    }
}

/// The typed data of an event. When `lenient` and the strict reading of a
/// core payload fails, the payload reduced to what dsh owns is read instead
/// (see [`super::lenient`]); the strict error comes back as the deviation
/// (rule E4). What the reduced payload still breaks is the error.
fn data_from_value(
    event_type: &str,
    data: Value,
    last: &mut Option<ToolCallHead>,
    lenient: bool,
) -> Result<(EventData, Option<AppendError>), AppendError> {
    let reduced = if lenient {
        super::lenient::reduce(event_type, &data)
    } else {
        None
    };
    let strict = match strict_data_from_value(event_type, data, last) {
        Ok(d) => return Ok((d, None)),
        Err(e) => e,
    };
    let Some(reduced) = reduced else {
        return Err(strict);
    };
    let typed = strict_data_from_value(event_type, reduced, last)?;
    let deviation = match strict {
        e @ AppendError::InvalidPayload { .. } => e,
        other => AppendError::InvalidPayload {
            event_type: String::from(event_type),
            detail: format!("{other}"),
        },
    };
    Ok((typed, Some(deviation)))
}

fn strict_data_from_value(
    event_type: &str,
    data: Value,
    last: &mut Option<ToolCallHead>,
) -> Result<EventData, AppendError> {
    fn typed<T: serde::de::DeserializeOwned>(t: &str, v: Value) -> Result<T, AppendError> {
        serde_json::from_value(v).map_err(|e| payload_err(t, e))
    }
    let t = event_type;
    Ok(match classify(t) {
        Kind::TurnStart => EventData::TurnStart(typed::<TurnStart>(t, data)?),
        Kind::TurnEnd => EventData::TurnEnd(Arc::new(typed::<TurnEnd>(t, data)?)),
        Kind::StepStart => EventData::StepStart(typed::<Step>(t, data)?),
        Kind::StepEnd => EventData::StepEnd(typed::<Step>(t, data)?),
        Kind::UserMessage => EventData::UserMessage(Arc::new(
            serde_json::from_value::<Message>(data)
                .map_err(|e| payload_err(t, format!("message {e}")))?,
        )),
        Kind::AssistantChunk => EventData::AssistantChunk(
            ChunkDataSeed {
                last,
                canonical: &mut false,
            }
            .deserialize(data)
            .map_err(|e| payload_err(t, e))?,
        ),
        Kind::AssistantMessage => {
            EventData::AssistantMessage(Arc::new(typed::<AssistantMessage>(t, data)?))
        }
        Kind::ToolCall => EventData::ToolCall(Arc::new(typed::<ToolCall>(t, data)?)),
        Kind::ToolResult => EventData::ToolResult(Arc::new(typed::<ToolResult>(t, data)?)),
        Kind::TodoWrite => EventData::TodoWrite(Arc::new(typed::<TodoWrite>(t, data)?)),
        Kind::RequestHeader => EventData::RequestHeader(Arc::new(typed::<RequestHeader>(t, data)?)),
        Kind::RequestContext => {
            EventData::RequestContext(Arc::new(typed::<RequestContext>(t, data)?))
        }
        Kind::EndSeed => match data {
            Value::Object(o) if o.is_empty() => EventData::EndSeed,
            _ => {
                return Err(AppendError::InvalidPayload {
                    event_type: String::from(t),
                    detail: String::from("session/end-seed data must be {}"),
                });
            }
        },
        // Runtime types fall back to opaque when their shape is unexpected.
        Kind::LlmRetry => match serde_json::from_value::<LlmRetry>(data.clone()) {
            Ok(d) => EventData::LlmRetry(Arc::new(d)),
            Err(_) => plugin_from_value(t, &data)?,
        },
        Kind::LlmRetryStarted => match serde_json::from_value::<LlmRetryStarted>(data.clone()) {
            Ok(d) => EventData::LlmRetryStarted(Arc::new(d)),
            Err(_) => plugin_from_value(t, &data)?,
        },
        Kind::InboxSpliced => match serde_json::from_value::<InboxSpliced>(data.clone()) {
            Ok(d) => EventData::InboxSpliced(Arc::new(d)),
            Err(_) => plugin_from_value(t, &data)?,
        },
        Kind::Row(_) | Kind::Plugin => plugin_from_value(t, &data)?,
    })
}

fn plugin_from_value(t: &str, data: &Value) -> Result<EventData, AppendError> {
    let raw = serde_json::value::to_raw_value(data).map_err(|e| AppendError::NotLosslessJson {
        detail: format!("{e}"),
    })?;
    Ok(EventData::Plugin(Arc::new(PluginEvent {
        event_type: String::from(t),
        data: raw,
    })))
}

fn row_err(kind: RowKind, why: &str) -> Unparsable {
    Unparsable {
        reason: format!("malformed {} storage row: {why}", kind.tag()),
    }
}

/// CK15 on a generically parsed row.
fn row_from_value(kind: RowKind, obj: serde_json::Map<String, Value>) -> Result<Row, Unparsable> {
    let keys_are = |o: &serde_json::Map<String, Value>, want: &[&str]| {
        o.len() == want.len() && want.iter().all(|k| o.contains_key(*k))
    };
    if !keys_are(&obj, &["type", "seq0", "time0", "data"]) {
        return Err(row_err(
            kind,
            "keys must be exactly type, seq0, time0, data",
        ));
    }
    let seq0 = obj
        .get("seq0")
        .and_then(Value::as_u64)
        .filter(|n| *n <= MAX_SAFE_INTEGER)
        .ok_or_else(|| row_err(kind, "seq0 must be a non-negative safe integer"))?;
    let time0 = obj
        .get("time0")
        .and_then(Value::as_i64)
        .filter(|n| n.unsigned_abs() <= MAX_SAFE_INTEGER)
        .ok_or_else(|| row_err(kind, "time0 must be a safe integer"))?;
    let Some(Value::Object(data)) = obj.get("data") else {
        return Err(row_err(kind, "data must be an object"));
    };
    let (payload_key, ok) = match kind {
        RowKind::ToolCall => (
            "args",
            keys_are(data, &["turn", "step", "index", "id", "dt", "args"])
                || keys_are(data, &["turn", "step", "index", "id", "name", "dt", "args"]),
        ),
        _ => (
            "texts",
            keys_are(data, &["turn", "step", "index", "dt", "texts"]),
        ),
    };
    if !ok {
        return Err(row_err(kind, "unexpected data keys"));
    }
    let int = |k: &str| {
        data.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| row_err(kind, "turn, step and index must be integers"))
    };
    let strings = |k: &str| -> Result<Vec<String>, Unparsable> {
        match data.get(k) {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| row_err(kind, "payload list must hold strings")),
            _ => Err(row_err(kind, "payload list must be an array")),
        }
    };
    let dt = match data.get("dt") {
        Some(Value::Array(a)) => a
            .iter()
            .map(Value::as_i64)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| row_err(kind, "dt must hold safe integers"))?,
        _ => return Err(row_err(kind, "dt must be an array")),
    };
    let (id, name) = if kind == RowKind::ToolCall {
        let id = data
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| row_err(kind, "id must be a string"))?;
        let name = match data.get("name") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(row_err(kind, "name must be a string")),
        };
        (String::from(id), name)
    } else {
        (String::new(), None)
    };
    let row = Row {
        kind,
        seq0,
        time0,
        turn: int("turn")?,
        step: int("step")?,
        index: int("index")?,
        dt,
        id,
        name,
        payloads: strings(payload_key)?,
    };
    row.check().map_err(|reason| Unparsable { reason })?;
    Ok(row)
}

// ---------------------------------------------------------------------------
// Fast path: one typed pass over the line.

enum Parsed {
    Event(SessionEvent),
    Row(Row),
}

struct EnvelopeVisitor<'s> {
    last: &'s mut Option<ToolCallHead>,
    /// Cleared unless the line is provably in canonical form (an
    /// `assistant/chunk` in E9 order whose strings needed no escapes).
    canonical: &'s mut bool,
}

#[derive(Clone, Copy)]
enum Key {
    Type,
    Seq,
    Time,
    Data,
    SurfaceOp,
    Sources,
    Ignorable,
    Seq0,
    Time0,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an envelope key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "type" => Key::Type,
                    "seq" => Key::Seq,
                    "time" => Key::Time,
                    "data" => Key::Data,
                    "surfaceOp" => Key::SurfaceOp,
                    "sourceEventSeqs" => Key::Sources,
                    "ignorable" => Key::Ignorable,
                    "seq0" => Key::Seq0,
                    "time0" => Key::Time0,
                    _ => return Err(E::custom("unknown envelope key")),
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// An event type: its kind, and its name only when it is not a core type.
struct TypeName(Kind, Option<String>);

impl<'de> Deserialize<'de> for TypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TypeName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event type string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TypeName, E> {
                let kind = classify(v);
                let name = matches!(kind, Kind::Plugin).then(|| String::from(v));
                Ok(TypeName(kind, name))
            }
        }
        d.deserialize_str(V)
    }
}

fn kind_name(kind: Kind) -> &'static str {
    use types::*;
    match kind {
        Kind::TurnStart => TURN_START,
        Kind::TurnEnd => TURN_END,
        Kind::StepStart => STEP_START,
        Kind::StepEnd => STEP_END,
        Kind::UserMessage => USER_MESSAGE,
        Kind::AssistantChunk => ASSISTANT_CHUNK,
        Kind::AssistantMessage => ASSISTANT_MESSAGE,
        Kind::ToolCall => TOOL_CALL,
        Kind::ToolResult => TOOL_RESULT,
        Kind::TodoWrite => TODO_WRITE,
        Kind::RequestHeader => REQUEST_HEADER,
        Kind::RequestContext => REQUEST_CONTEXT,
        Kind::EndSeed => END_SEED,
        Kind::LlmRetry => LLM_RETRY,
        Kind::LlmRetryStarted => LLM_RETRY_STARTED,
        Kind::InboxSpliced => INBOX_SPLICED,
        Kind::Row(k) => k.tag(),
        Kind::Plugin => "",
    }
}

enum DataSlot<'de> {
    None,
    Typed(EventData),
    Row(RowData),
    Raw(&'de RawValue),
}

impl<'de> Visitor<'de> for EnvelopeVisitor<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a session event or storage row")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut kind: Option<(Kind, Option<String>)> = None;
        let mut seq: Option<u64> = None;
        let mut time: Option<i64> = None;
        let mut seq0: Option<u64> = None;
        let mut time0: Option<i64> = None;
        let mut data = DataSlot::None;
        let mut surface_op: Option<SurfaceOp> = None;
        let mut sources: Option<Vec<u64>> = None;
        let mut ignorable = false;
        let mut op_first = false;
        let mut seen = 0u16;
        let mut position = 0u16;
        while let Some(key) = map.next_key::<Key>()? {
            let bit = 1u16 << (key as u16);
            if seen & bit != 0 {
                return Err(de::Error::custom("duplicate key"));
            }
            seen |= bit;
            if key as u16 != position {
                *self.canonical = false;
            }
            position += 1;
            match key {
                Key::Type => {
                    let TypeName(k, name) = map.next_value::<TypeName>()?;
                    kind = Some((k, name));
                }
                Key::Seq => seq = Some(map.next_value()?),
                Key::Time => time = Some(map.next_value()?),
                Key::Seq0 => seq0 = Some(map.next_value()?),
                Key::Time0 => time0 = Some(map.next_value()?),
                Key::Data => {
                    data = match &kind {
                        None => DataSlot::Raw(map.next_value::<&'de RawValue>()?),
                        Some((Kind::Row(k), _)) => {
                            DataSlot::Row(map.next_value_seed(RowDataSeed(*k))?)
                        }
                        Some((k, name)) => {
                            if *k != Kind::AssistantChunk {
                                *self.canonical = false;
                            }
                            DataSlot::Typed(map.next_value_seed(DataSeed {
                                kind: *k,
                                name: name.as_deref().unwrap_or_else(|| kind_name(*k)),
                                last: &mut *self.last,
                                canonical: &mut *self.canonical,
                            })?)
                        }
                    }
                }
                Key::SurfaceOp => {
                    surface_op = Some(map.next_value::<FastSurfaceOp>()?.0);
                    op_first = sources.is_none();
                }
                Key::Sources => sources = Some(map.next_value()?),
                Key::Ignorable => {
                    if !map.next_value::<bool>()? {
                        return Err(de::Error::custom("ignorable must be true"));
                    }
                    ignorable = true;
                }
            }
        }
        let Some((kind, name)) = kind else {
            return Err(de::Error::custom("missing type"));
        };
        let name = name.as_deref().unwrap_or_else(|| kind_name(kind));
        if let Kind::Row(rk) = kind {
            let (Some(seq0), Some(time0), DataSlot::Row(d)) = (seq0, time0, data) else {
                return Err(de::Error::custom("incomplete row"));
            };
            if seq.is_some()
                || time.is_some()
                || surface_op.is_some()
                || sources.is_some()
                || ignorable
            {
                return Err(de::Error::custom("row with event keys"));
            }
            let row = Row {
                kind: rk,
                seq0,
                time0,
                turn: d.turn,
                step: d.step,
                index: d.index,
                dt: d.dt,
                id: d.id.unwrap_or_default(),
                name: d.name,
                payloads: d.payloads,
            };
            if (rk == RowKind::ToolCall) != d.tool || row.check().is_err() {
                return Err(de::Error::custom("malformed row"));
            }
            return Ok(Parsed::Row(row));
        }
        let (Some(seq), Some(time)) = (seq, time) else {
            return Err(de::Error::custom("missing seq or time"));
        };
        if seq0.is_some()
            || time0.is_some()
            || seq > MAX_SAFE_INTEGER
            || time.unsigned_abs() > MAX_SAFE_INTEGER
        {
            return Err(de::Error::custom("bad envelope"));
        }
        let data = match data {
            DataSlot::Typed(d) => d,
            DataSlot::Raw(raw) => {
                let v: Value = serde_json::from_str(raw.get()).map_err(de::Error::custom)?;
                *self.canonical = false;
                // Strict here: a lenient reading takes the slow path,
                // which records the deviation.
                data_from_value(name, v, self.last, false)
                    .map_err(de::Error::custom)?
                    .0
            }
            DataSlot::None | DataSlot::Row(_) => return Err(de::Error::custom("missing data")),
        };
        let op_first = op_first && surface_op.is_some() && sources.is_some();
        let extra = (surface_op.is_some() || sources.is_some() || ignorable).then(|| {
            Box::new(Extra {
                surface_op,
                sources,
                ignorable,
                op_first,
                verbatim: None,
                deviation: None,
            })
        });
        Ok(Parsed::Event(SessionEvent::from_parts(
            seq, time, data, extra,
        )))
    }
}

struct FastSurfaceOp(SurfaceOp);

impl<'de> Deserialize<'de> for FastSurfaceOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        surface_op_from_value(&v)
            .map(FastSurfaceOp)
            .map_err(de::Error::custom)
    }
}

struct DataSeed<'a, 's> {
    kind: Kind,
    name: &'a str,
    last: &'s mut Option<ToolCallHead>,
    canonical: &'s mut bool,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_, '_> {
    type Value = EventData;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EventData, D::Error> {
        Ok(match self.kind {
            Kind::AssistantChunk => EventData::AssistantChunk(
                ChunkDataSeed {
                    last: self.last,
                    canonical: self.canonical,
                }
                .deserialize(d)?,
            ),
            Kind::TurnStart => EventData::TurnStart(TurnStart::deserialize(d)?),
            Kind::TurnEnd => EventData::TurnEnd(Arc::new(TurnEnd::deserialize(d)?)),
            Kind::StepStart => EventData::StepStart(Step::deserialize(d)?),
            Kind::StepEnd => EventData::StepEnd(Step::deserialize(d)?),
            Kind::UserMessage => EventData::UserMessage(Arc::new(Message::deserialize(d)?)),
            Kind::AssistantMessage => {
                EventData::AssistantMessage(Arc::new(AssistantMessage::deserialize(d)?))
            }
            Kind::ToolCall => EventData::ToolCall(Arc::new(ToolCall::deserialize(d)?)),
            Kind::ToolResult => EventData::ToolResult(Arc::new(ToolResult::deserialize(d)?)),
            Kind::TodoWrite => EventData::TodoWrite(Arc::new(TodoWrite::deserialize(d)?)),
            Kind::RequestHeader => {
                EventData::RequestHeader(Arc::new(RequestHeader::deserialize(d)?))
            }
            Kind::RequestContext => {
                EventData::RequestContext(Arc::new(RequestContext::deserialize(d)?))
            }
            Kind::EndSeed => {
                let m: serde_json::Map<String, Value> = Deserialize::deserialize(d)?;
                if !m.is_empty() {
                    return Err(de::Error::custom("session/end-seed data must be {}"));
                }
                EventData::EndSeed
            }
            Kind::LlmRetry
            | Kind::LlmRetryStarted
            | Kind::InboxSpliced
            | Kind::Plugin
            | Kind::Row(_) => {
                let raw = <&RawValue>::deserialize(d)?;
                runtime_or_plugin(self.kind, self.name, raw).map_err(de::Error::custom)?
            }
        })
    }
}

fn runtime_or_plugin(kind: Kind, name: &str, raw: &RawValue) -> Result<EventData, String> {
    let text = raw.get();
    let typed = match kind {
        Kind::LlmRetry => serde_json::from_str::<LlmRetry>(text)
            .ok()
            .map(|d| EventData::LlmRetry(Arc::new(d))),
        Kind::LlmRetryStarted => serde_json::from_str::<LlmRetryStarted>(text)
            .ok()
            .map(|d| EventData::LlmRetryStarted(Arc::new(d))),
        Kind::InboxSpliced => serde_json::from_str::<InboxSpliced>(text)
            .ok()
            .map(|d| EventData::InboxSpliced(Arc::new(d))),
        _ => None,
    };
    Ok(typed.unwrap_or_else(|| {
        EventData::Plugin(Arc::new(PluginEvent {
            event_type: String::from(name),
            data: raw.to_owned(),
        }))
    }))
}

struct RowData {
    tool: bool,
    turn: u64,
    step: u64,
    index: u64,
    dt: Vec<i64>,
    id: Option<String>,
    name: Option<String>,
    payloads: Vec<String>,
}

struct RowDataSeed(RowKind);

impl<'de> DeserializeSeed<'de> for RowDataSeed {
    type Value = RowData;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RowData, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RowDataSeed {
    type Value = RowData;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("packed row data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RowData, A::Error> {
        let (mut turn, mut step, mut index, mut dt) = (None, None, None, None);
        let (mut id, mut name, mut payloads) = (None, None, None);
        let payload_key = if self.0 == RowKind::ToolCall {
            "args"
        } else {
            "texts"
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "turn" if turn.is_none() => turn = Some(map.next_value::<u64>()?),
                "step" if step.is_none() => step = Some(map.next_value::<u64>()?),
                "index" if index.is_none() => index = Some(map.next_value::<u64>()?),
                "dt" if dt.is_none() => dt = Some(map.next_value::<Vec<i64>>()?),
                "id" if self.0 == RowKind::ToolCall && id.is_none() => {
                    id = Some(map.next_value::<String>()?)
                }
                "name" if self.0 == RowKind::ToolCall && name.is_none() => {
                    name = Some(map.next_value::<String>()?)
                }
                k if k == payload_key && payloads.is_none() => {
                    payloads = Some(map.next_value::<Vec<String>>()?)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    return Err(de::Error::custom("unexpected row key"));
                }
            }
        }
        match (turn, step, index, dt, payloads) {
            (Some(turn), Some(step), Some(index), Some(dt), Some(payloads)) => {
                if self.0 == RowKind::ToolCall && id.is_none() {
                    return Err(de::Error::custom("row without id"));
                }
                Ok(RowData {
                    tool: self.0 == RowKind::ToolCall,
                    turn,
                    step,
                    index,
                    dt,
                    id,
                    name,
                    payloads,
                })
            }
            _ => Err(de::Error::custom("incomplete row data")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cursor, find_special};

    #[test]
    fn canonical_integers_and_nothing_else() {
        let read = |text: &str, max: u64| {
            let mut c = Cursor::new(text.as_bytes(), Some(text));
            c.uint(max).map(|n| (n, c.i))
        };
        let safe = crate::json::MAX_SAFE_INTEGER;
        assert_eq!(read("0}", safe), Some((0, 1)));
        assert_eq!(read("7", safe), Some((7, 1)));
        assert_eq!(read("1785246131791,", safe), Some((1_785_246_131_791, 13)));
        assert_eq!(read("9007199254740991", safe), Some((safe, 16)));
        // Out of range, a leading zero, no digit, too long for any safe value.
        assert_eq!(read("9007199254740992", safe), None);
        assert_eq!(read("4294967296", u64::from(u32::MAX)), None);
        assert_eq!(
            read("4294967295", u64::from(u32::MAX)),
            Some((4_294_967_295, 10))
        );
        assert_eq!(read("01", safe), None);
        assert_eq!(read("-1", safe), None);
        assert_eq!(read("", safe), None);
        assert_eq!(read("00000000000000000001", safe), None);
        assert_eq!(read("123456789012345678901234", safe), None);
    }

    #[test]
    fn special_byte_search_matches_the_naive_one() {
        // Bytes around each special one (0x1f/0x20, 0x21/0x23, 0x5b/0x5d,
        // 0xa2/0xdc with the high bit) trip inexact lane tricks.
        let alphabet = [
            b'"', b'\\', 0x00, 0x1f, 0x20, 0x21, 0x23, 0x5b, 0x5d, 0xa2, 0xdc, 0x7f, 0xff, b'a',
        ];
        let mut state = 7u32;
        for len in 0..80 {
            for _ in 0..200 {
                let bytes: alloc::vec::Vec<u8> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        // Mostly plain bytes, so the first special one
                        // lands at every position of a word.
                        let r = (state >> 16) as usize;
                        if r.is_multiple_of(4) {
                            alphabet[(r / 4) % alphabet.len()]
                        } else {
                            b'a' + (r % 26) as u8
                        }
                    })
                    .collect();
                let naive = bytes
                    .iter()
                    .position(|c| *c == b'"' || *c == b'\\' || *c < 0x20);
                assert_eq!(find_special(&bytes), naive, "{bytes:?}");
            }
        }
    }
}
