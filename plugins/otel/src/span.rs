//! The span model the plugin builds and an exporter sends: plain data, no
//! I/O, with ids derived from the session (no randomness).

use alloc::string::String;
use alloc::vec::Vec;

use sha2::{Digest, Sha256};

/// A 16-byte trace id.
pub type TraceId = [u8; 16];
/// An 8-byte span id.
pub type SpanId = [u8; 8];

/// The trace id of turn `turn` of session `session`: the first 16 bytes of
/// SHA-256 over a domain tag, the session id and the turn. The same session
/// and turn give the same id in every run and every runtime.
pub fn trace_id(session: &str, turn: u64) -> TraceId {
    let d = digest(b"dsh-otel trace", session, turn);
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    nonzero(&mut id);
    id
}

/// The span id of the span a session event opens: the first 8 bytes of
/// SHA-256 over a domain tag, the session id and the event's seq (unique in
/// a session, so unique in its traces).
pub fn span_id(session: &str, seq: u64) -> SpanId {
    let d = digest(b"dsh-otel span", session, seq);
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    nonzero(&mut id);
    id
}

fn digest(tag: &[u8], session: &str, n: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tag);
    h.update([0u8]);
    h.update((session.len() as u64).to_le_bytes());
    h.update(session.as_bytes());
    h.update(n.to_le_bytes());
    h.finalize().into()
}

/// An all-zero id is invalid in OTLP; the last byte becomes 1.
fn nonzero(id: &mut [u8]) {
    if id.iter().all(|b| *b == 0)
        && let Some(last) = id.last_mut()
    {
        *last = 1;
    }
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// A signed integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// An array of strings.
    StrArray(Vec<String>),
}

/// One attribute: a semantic-convention key and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    /// The key, e.g. `gen_ai.request.model`.
    pub key: &'static str,
    /// The value.
    pub value: AttrValue,
}

/// Something that happened at a point in a span (a retry, an exception).
#[derive(Clone, Debug, PartialEq)]
pub struct SpanEvent {
    /// The event name, e.g. `exception`.
    pub name: &'static str,
    /// When (Unix ns).
    pub time_ns: u64,
    /// Its attributes.
    pub attributes: Vec<Attribute>,
}

/// The span status (OTLP `Status`).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum Status {
    /// Not set (the default for a span that did not fail).
    #[default]
    Unset,
    /// Failed, with a short description (a code, never prompt or tool text
    /// unless content capture is on).
    Error(String),
}

/// What kind of span (OTLP `SpanKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpanKind {
    /// Work inside the agent (turn, step, tool).
    Internal,
    /// A call to a remote service (the model).
    Client,
}

/// One finished span.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SpanData {
    /// The trace (one per turn).
    pub trace_id: TraceId,
    /// This span.
    pub span_id: SpanId,
    /// The parent span; `None` for the turn's root span.
    pub parent: Option<SpanId>,
    /// The span name, e.g. `chat deepseek-chat`.
    pub name: String,
    /// The kind.
    pub kind: SpanKind,
    /// Start (Unix ns, from the opening event's `time`).
    pub start_ns: u64,
    /// End (Unix ns, from the closing event's `time`; never before start).
    pub end_ns: u64,
    /// Attributes, in the order they were set.
    pub attributes: Vec<Attribute>,
    /// Events, in time order.
    pub events: Vec<SpanEvent>,
    /// The status.
    pub status: Status,
}

impl SpanData {
    /// A span with no attributes, events or status yet; `end_ns` starts at
    /// `start_ns`.
    pub fn new(
        trace_id: TraceId,
        span_id: SpanId,
        parent: Option<SpanId>,
        name: String,
        kind: SpanKind,
        start_ns: u64,
    ) -> Self {
        SpanData {
            trace_id,
            span_id,
            parent,
            name,
            kind,
            start_ns,
            end_ns: start_ns,
            attributes: Vec::new(),
            events: Vec::new(),
            status: Status::Unset,
        }
    }

    /// The value of attribute `key`, if set.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
    }

    /// Sets `key` (replacing an earlier value of the same key).
    pub fn set(&mut self, key: &'static str, value: AttrValue) {
        match self.attributes.iter_mut().find(|a| a.key == key) {
            Some(a) => a.value = value,
            None => self.attributes.push(Attribute { key, value }),
        }
    }

    /// Sets a string attribute.
    pub fn set_str(&mut self, key: &'static str, value: &str) {
        self.set(key, AttrValue::Str(String::from(value)));
    }

    /// Sets an integer attribute.
    pub fn set_int(&mut self, key: &'static str, value: i64) {
        self.set(key, AttrValue::Int(value));
    }

    /// Ends the span at `end_ns` (clamped to its start: recorded clocks may
    /// step back).
    pub fn end_at(&mut self, end_ns: u64) {
        self.end_ns = end_ns.max(self.start_ns);
    }
}

/// Event `time` (Unix ms) as Unix ns; a negative time is 0.
pub fn ms_to_ns(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_distinct() {
        assert_eq!(trace_id("s1", 1), trace_id("s1", 1));
        assert_ne!(trace_id("s1", 1), trace_id("s1", 2));
        assert_ne!(trace_id("s1", 1), trace_id("s2", 1));
        assert_eq!(span_id("s1", 7), span_id("s1", 7));
        assert_ne!(span_id("s1", 7), span_id("s1", 8));
        // The session/number boundary is unambiguous.
        assert_ne!(span_id("s1", 1), span_id("s", 1));
        assert!(trace_id("", 0).iter().any(|b| *b != 0));
    }

    #[test]
    fn end_never_precedes_start_and_times_saturate() {
        let mut s = SpanData::new([1; 16], [1; 8], None, "x".into(), SpanKind::Internal, 50);
        s.end_at(10);
        assert_eq!(s.end_ns, 50);
        assert_eq!(ms_to_ns(-5), 0);
        assert_eq!(ms_to_ns(i64::MAX), u64::MAX);
        assert_eq!(ms_to_ns(2), 2_000_000);
    }
}
