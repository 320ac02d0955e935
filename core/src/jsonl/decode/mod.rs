//! Decoding one storage record (an event line or a packed row).
//!
//! A line is tried in order by three readers, from the cheapest to the most
//! explanatory: the canonical-line templates (`template` and
//! `super::canon`, the writer's exact text, no serde), one typed serde pass
//! (`typed`), and the slow path over a generic JSON tree (`value`) that
//! names the rule a line breaks. The [`Decoder`] here picks the reader and
//! keeps the source text when writing an event back would change a byte.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::de::Deserializer;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::MAX_SAFE_INTEGER;
use crate::session::{AppendError, SessionEvent, types};
use crate::text::ToolCallHead;

use super::packed::RowKind;
use super::write::write_event_json;

mod template;
mod typed;
mod value;

pub(super) use template::Cursor;
use template::{canonical_chunk_len, fast_chunk};
use typed::{EnvelopeVisitor, Parsed};
use value::{event_from_value, row_from_value};

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
