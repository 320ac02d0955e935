//! The `StreamChunk` protocol (streaming.md 2): chunks, finish reasons,
//! failures, token usage and replay envelopes.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::json::{JsonObject, serialize_js_f64_opt};
use crate::object::{Fields, deserialize_via_fields};
use crate::text::{ChunkText, ToolCallHead};

/// Token counts for one model call (TU-1..TU-4).
///
/// Input counts are disjoint: billed input is `input + cache_read +
/// cache_write`. `reasoning_tokens` is already included in `output_tokens`.
/// Counts are signed because the reference does not clamp a provider's
/// inconsistent numbers (Q-8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct TokenUsage {
    /// Uncached input tokens.
    pub input_tokens: i64,
    /// Output tokens, reasoning included.
    pub output_tokens: i64,
    /// Input tokens read from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<i64>,
    /// Input tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<i64>,
    /// The reasoning share of `output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<i64>,
}

impl TokenUsage {
    /// These input and output counts, no cache or reasoning counts (set
    /// those fields after).
    pub fn new(input_tokens: i64, output_tokens: i64) -> Self {
        TokenUsage {
            input_tokens,
            output_tokens,
            ..TokenUsage::default()
        }
    }

    /// Billed input: uncached plus cache reads and writes (TU-2).
    pub fn billed_input(&self) -> i64 {
        self.input_tokens
            + self.cache_read_tokens.unwrap_or(0)
            + self.cache_write_tokens.unwrap_or(0)
    }
}

/// The serializable record of one failure (LF-1).
///
/// Failures read from a stream are not re-validated (LF-4); use
/// [`LlmError::new`] to build a validated one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LlmFailure {
    /// Human-readable message.
    pub message: String,
    /// Stable machine code (streaming.md 3.4), e.g. `RATE_LIMIT`.
    pub code: String,
    /// HTTP status seen at the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The delay the provider asked for, in milliseconds.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_js_f64_opt"
    )]
    pub provider_retry_after_ms: Option<f64>,
    /// The provider's opaque request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl LlmFailure {
    /// A failure with just a message and a code (not validated).
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        LlmFailure {
            message: message.into(),
            code: code.into(),
            status: None,
            provider_retry_after_ms: None,
            request_id: None,
        }
    }
}

/// Why an [`LlmError`] could not be built (LF-3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidFailure {
    /// `message` was empty.
    EmptyMessage,
    /// `code` was empty.
    EmptyCode,
    /// `status` was outside 100–599.
    StatusOutOfRange(u16),
    /// `providerRetryAfterMs` was not finite and positive.
    BadRetryAfter,
    /// `requestId` was empty.
    EmptyRequestId,
}

impl fmt::Display for InvalidFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidFailure::EmptyMessage => f.write_str("failure message must not be empty"),
            InvalidFailure::EmptyCode => f.write_str("failure code must not be empty"),
            InvalidFailure::StatusOutOfRange(s) => {
                write!(f, "failure status {s} is outside 100-599")
            }
            InvalidFailure::BadRetryAfter => {
                f.write_str("providerRetryAfterMs must be finite and greater than 0")
            }
            InvalidFailure::EmptyRequestId => f.write_str("failure requestId must not be empty"),
        }
    }
}

impl core::error::Error for InvalidFailure {}

/// A typed LLM error: a validated [`LlmFailure`] (LF-3, AC-7).
#[derive(Clone, Debug, PartialEq)]
pub struct LlmError {
    failure: LlmFailure,
}

impl LlmError {
    /// Validates `failure` (LF-3) and wraps it.
    pub fn new(failure: LlmFailure) -> Result<Self, InvalidFailure> {
        if failure.message.is_empty() {
            return Err(InvalidFailure::EmptyMessage);
        }
        if failure.code.is_empty() {
            return Err(InvalidFailure::EmptyCode);
        }
        if let Some(status) = failure.status
            && !(100..=599).contains(&status)
        {
            return Err(InvalidFailure::StatusOutOfRange(status));
        }
        if let Some(ms) = failure.provider_retry_after_ms
            && (!ms.is_finite() || ms <= 0.0)
        {
            return Err(InvalidFailure::BadRetryAfter);
        }
        if failure.request_id.as_deref() == Some("") {
            return Err(InvalidFailure::EmptyRequestId);
        }
        Ok(LlmError { failure })
    }

    /// An error with a code and message; an empty message becomes
    /// `"LLM adapter failed"` and an empty code `UNKNOWN` (AC-7).
    pub fn coded(code: &str, message: &str) -> Self {
        let code = if code.is_empty() { "UNKNOWN" } else { code };
        let message = if message.is_empty() {
            "LLM adapter failed"
        } else {
            message
        };
        LlmError {
            failure: LlmFailure::new(code, message),
        }
    }

    /// The embedded failure.
    pub fn failure(&self) -> &LlmFailure {
        &self.failure
    }

    /// Unwraps the embedded failure.
    pub fn into_failure(self) -> LlmFailure {
        self.failure
    }
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.failure.code, self.failure.message)
    }
}

impl core::error::Error for LlmError {}

/// Why a model call finished (FR-1). Open set: unknown kinds are kept (FR-2).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FinishReason {
    /// Natural completion.
    Stop,
    /// The model stopped to call tools.
    ToolCalls,
    /// Output hit the token cap.
    MaxTokens,
    /// Cancelled.
    Aborted {
        /// What happened.
        failure: LlmFailure,
    },
    /// Provider or transport failure.
    Error {
        /// What happened.
        failure: LlmFailure,
    },
    /// A kind this crate does not know, kept verbatim.
    Other(JsonObject),
}

impl FinishReason {
    /// The `kind` discriminator.
    pub fn kind(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool-calls",
            FinishReason::MaxTokens => "max-tokens",
            FinishReason::Aborted { .. } => "aborted",
            FinishReason::Error { .. } => "error",
            FinishReason::Other(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The failure of an `error` or `aborted` finish.
    pub fn failure(&self) -> Option<&LlmFailure> {
        match self {
            FinishReason::Aborted { failure } | FinishReason::Error { failure } => Some(failure),
            _ => None,
        }
    }

    /// Whether this is an `error` or `aborted` finish.
    pub fn is_failure(&self) -> bool {
        self.failure().is_some()
    }

    fn from_fields(mut fields: Fields) -> Result<Self, String> {
        let Some(kind) = fields.str_of("kind") else {
            return Err(String::from("finish reason needs a string \"kind\""));
        };
        let typed = match kind {
            "stop" if fields.only(&["kind"]) => Some(FinishReason::Stop),
            "tool-calls" if fields.only(&["kind"]) => Some(FinishReason::ToolCalls),
            "max-tokens" if fields.only(&["kind"]) => Some(FinishReason::MaxTokens),
            "aborted" | "error" if fields.only(&["kind", "failure"]) => {
                let is_error = kind == "error";
                let failure = fields
                    .entries
                    .iter()
                    .find(|(k, _)| k == "failure")
                    .and_then(|(_, v)| LlmFailure::deserialize(v).ok());
                match failure {
                    Some(failure) if round_trips(&failure, &mut fields) => Some(if is_error {
                        FinishReason::Error { failure }
                    } else {
                        FinishReason::Aborted { failure }
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
        Ok(typed.unwrap_or_else(|| FinishReason::Other(fields.into_object())))
    }
}

/// Whether a failure read leniently writes back exactly as it was read
/// (known keys, canonical order); if not, the reason is kept verbatim.
fn round_trips(failure: &LlmFailure, fields: &mut Fields) -> bool {
    let original = fields.take("failure");
    let same = match (&original, crate::json::to_value(failure)) {
        (Some(Value::Object(a)), Ok(Value::Object(b))) => {
            a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x == y)
        }
        _ => false,
    };
    if let Some(v) = original {
        fields.entries.push((String::from("failure"), v));
    }
    same
}

deserialize_via_fields!(
    FinishReason,
    "a finish reason object",
    FinishReason::from_fields
);

impl Serialize for FinishReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            FinishReason::Aborted { failure } | FinishReason::Error { failure } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("kind", self.kind())?;
                map.serialize_entry("failure", failure)?;
                map.end()
            }
            FinishReason::Other(object) => object.serialize(serializer),
            _ => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("kind", self.kind())?;
                map.end()
            }
        }
    }
}

/// An adapter-private replay envelope carried by a `finish` chunk (RP-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplayEnvelope {
    /// Response-level metadata.
    pub response: Value,
    /// One entry per emitted block, in first-seen order, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<Value>>,
}

impl ReplayEnvelope {
    /// An envelope of this response metadata and per-block entries.
    pub fn new(response: Value, blocks: Option<Vec<Value>>) -> Self {
        ReplayEnvelope { response, blocks }
    }
}

/// One chunk of a model response stream (SC-2). The set is closed (SC-1).
///
/// Compact: the delta variants hold their text inline when it is short
/// ([`ChunkText`]) and a tool call's id and name by a shared pointer
/// ([`ToolCallHead`]); the rare variants box their payload. A chunk is at most
/// 40 bytes.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamChunk {
    /// `block-start`: opens block `index` of type `block_type`.
    BlockStart {
        /// Block index (G-1).
        index: u64,
        /// A content-block `type`, possibly one this crate does not know.
        block_type: String,
    },
    /// `text-delta`: appends visible text.
    TextDelta {
        /// Block index.
        index: u64,
        /// The fragment.
        text: ChunkText,
    },
    /// `reasoning-delta`: appends reasoning text.
    ReasoningDelta {
        /// Block index.
        index: u64,
        /// The fragment.
        text: ChunkText,
    },
    /// `tool-call-delta`: call id, optional name and an arguments fragment.
    ToolCallDelta {
        /// Block index.
        index: u64,
        /// Call id (may be empty) and tool name (when this delta carries
        /// one), shared by the deltas of one call.
        head: ToolCallHead,
        /// Raw JSON text fragment of the arguments.
        arguments_delta: ChunkText,
    },
    /// `block-end`: the complete, authoritative block.
    BlockEnd {
        /// Block index.
        index: u64,
        /// The final block.
        block: Box<ContentBlock>,
    },
    /// `usage`: token counts.
    Usage {
        /// The counts.
        usage: Box<TokenUsage>,
    },
    /// `finish`: terminal chunk.
    Finish {
        /// Why the call finished.
        reason: Box<FinishReason>,
        /// Adapter-private replay envelope.
        replay_state: Option<Box<ReplayEnvelope>>,
    },
}

impl StreamChunk {
    /// The wire `type` of this chunk.
    pub(crate) fn chunk_type(&self) -> &'static str {
        match self {
            StreamChunk::BlockStart { .. } => "block-start",
            StreamChunk::TextDelta { .. } => "text-delta",
            StreamChunk::ReasoningDelta { .. } => "reasoning-delta",
            StreamChunk::ToolCallDelta { .. } => "tool-call-delta",
            StreamChunk::BlockEnd { .. } => "block-end",
            StreamChunk::Usage { .. } => "usage",
            StreamChunk::Finish { .. } => "finish",
        }
    }

    /// The block index, for chunks that carry one.
    pub fn index(&self) -> Option<u64> {
        match self {
            StreamChunk::BlockStart { index, .. }
            | StreamChunk::TextDelta { index, .. }
            | StreamChunk::ReasoningDelta { index, .. }
            | StreamChunk::ToolCallDelta { index, .. }
            | StreamChunk::BlockEnd { index, .. } => Some(*index),
            StreamChunk::Usage { .. } | StreamChunk::Finish { .. } => None,
        }
    }

    #[cfg(test)]
    /// The first-token predicate `isTokenDelta` (M-6).
    pub(crate) fn is_token_delta(&self) -> bool {
        match self {
            StreamChunk::TextDelta { text, .. } | StreamChunk::ReasoningDelta { text, .. } => {
                !text.is_empty()
            }
            StreamChunk::ToolCallDelta {
                head,
                arguments_delta,
                ..
            } => !arguments_delta.is_empty() || head.name().is_some(),
            _ => false,
        }
    }

    /// A `finish` chunk without replay state.
    pub fn finish(reason: FinishReason) -> Self {
        StreamChunk::Finish {
            reason: Box::new(reason),
            replay_state: None,
        }
    }

    /// AC-6: the terminal `finish` chunk for an error an adapter raised:
    /// `aborted` when the caller cancelled or the code is `ABORTED`,
    /// otherwise `error`.
    pub fn error_finish(error: &crate::LlmError, caller_cancelled: bool) -> Self {
        let failure = error.failure().clone();
        let reason = if caller_cancelled || failure.code == "ABORTED" {
            FinishReason::Aborted { failure }
        } else {
            FinishReason::Error { failure }
        };
        StreamChunk::finish(reason)
    }

    /// A `finish` chunk with optional replay state.
    pub fn finish_with(reason: FinishReason, replay_state: Option<ReplayEnvelope>) -> Self {
        StreamChunk::Finish {
            reason: Box::new(reason),
            replay_state: replay_state.map(Box::new),
        }
    }

    /// A `text-delta` chunk.
    pub fn text_delta(index: u64, text: &str) -> Self {
        StreamChunk::TextDelta {
            index,
            text: ChunkText::new(text),
        }
    }

    /// A `reasoning-delta` chunk.
    pub fn reasoning_delta(index: u64, text: &str) -> Self {
        StreamChunk::ReasoningDelta {
            index,
            text: ChunkText::new(text),
        }
    }

    /// A `tool-call-delta` chunk with a head of its own (producers of many
    /// deltas share one head instead, see [`ToolCallHead::reuse`]).
    pub fn tool_call_delta(
        index: u64,
        id: &str,
        name: Option<&str>,
        arguments_delta: &str,
    ) -> Self {
        StreamChunk::ToolCallDelta {
            index,
            head: ToolCallHead::new(id, name),
            arguments_delta: ChunkText::new(arguments_delta),
        }
    }

    /// This chunk with its tool head replaced by `last` when they are equal,
    /// else remembered in `last`: run over a sequence of chunks read one by
    /// one (from JSON), the deltas of one call share one head again, as the
    /// decoder's do.
    pub fn share_head(self, last: &mut Option<ToolCallHead>) -> Self {
        match self {
            StreamChunk::ToolCallDelta {
                index,
                head,
                arguments_delta,
            } => {
                let head = match last {
                    Some(h) if *h == head => h.clone(),
                    _ => {
                        *last = Some(head.clone());
                        head
                    }
                };
                StreamChunk::ToolCallDelta {
                    index,
                    head,
                    arguments_delta,
                }
            }
            other => other,
        }
    }

    /// A `block-start` chunk.
    pub fn block_start(index: u64, block_type: &str) -> Self {
        StreamChunk::BlockStart {
            index,
            block_type: String::from(block_type),
        }
    }

    /// A `block-end` chunk.
    pub fn block_end(index: u64, block: ContentBlock) -> Self {
        StreamChunk::BlockEnd {
            index,
            block: Box::new(block),
        }
    }

    /// A `usage` chunk.
    pub fn usage(usage: TokenUsage) -> Self {
        StreamChunk::Usage {
            usage: Box::new(usage),
        }
    }
}

impl Serialize for StreamChunk {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", self.chunk_type())?;
        match self {
            StreamChunk::BlockStart { index, block_type } => {
                map.serialize_entry("index", index)?;
                map.serialize_entry("blockType", block_type)?;
            }
            StreamChunk::TextDelta { index, text }
            | StreamChunk::ReasoningDelta { index, text } => {
                map.serialize_entry("index", index)?;
                map.serialize_entry("text", text)?;
            }
            StreamChunk::ToolCallDelta {
                index,
                head,
                arguments_delta,
            } => {
                map.serialize_entry("index", index)?;
                map.serialize_entry("id", head.id())?;
                if let Some(name) = head.name() {
                    map.serialize_entry("name", name)?;
                }
                map.serialize_entry("argumentsDelta", arguments_delta)?;
            }
            StreamChunk::BlockEnd { index, block } => {
                map.serialize_entry("index", index)?;
                map.serialize_entry("block", block)?;
            }
            StreamChunk::Usage { usage } => map.serialize_entry("usage", usage)?,
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                map.serialize_entry("reason", reason)?;
                if let Some(state) = replay_state {
                    map.serialize_entry("replayState", state)?;
                }
            }
        }
        map.end()
    }
}

#[derive(Clone, Copy)]
enum ChunkField {
    Type,
    Index,
    BlockType,
    Text,
    Id,
    Name,
    ArgumentsDelta,
    Block,
    Usage,
    Reason,
    ReplayState,
    Other,
}

impl<'de> Deserialize<'de> for ChunkField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ChunkField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ChunkField, E> {
                Ok(match v {
                    "type" => ChunkField::Type,
                    "index" => ChunkField::Index,
                    "blockType" => ChunkField::BlockType,
                    "text" => ChunkField::Text,
                    "id" => ChunkField::Id,
                    "name" => ChunkField::Name,
                    "argumentsDelta" => ChunkField::ArgumentsDelta,
                    "block" => ChunkField::Block,
                    "usage" => ChunkField::Usage,
                    "reason" => ChunkField::Reason,
                    "replayState" => ChunkField::ReplayState,
                    _ => ChunkField::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

struct ChunkVisitor;

impl<'de> Visitor<'de> for ChunkVisitor {
    type Value = StreamChunk;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a stream chunk object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StreamChunk, A::Error> {
        let mut kind: Option<ChunkText> = None;
        let mut index: Option<u64> = None;
        let mut block_type: Option<String> = None;
        let mut text: Option<ChunkText> = None;
        let mut id: Option<ChunkText> = None;
        let mut name: Option<Option<ChunkText>> = None;
        let mut arguments_delta: Option<ChunkText> = None;
        let mut block: Option<ContentBlock> = None;
        let mut usage: Option<TokenUsage> = None;
        let mut reason: Option<FinishReason> = None;
        let mut replay: Option<Option<ReplayEnvelope>> = None;
        while let Some(field) = map.next_key::<ChunkField>()? {
            match field {
                ChunkField::Type => kind = Some(map.next_value()?),
                ChunkField::Index => {
                    index = Some(map.next_value().map_err(|_: A::Error| {
                        de::Error::custom("\"index\" must be a non-negative integer (G-1)")
                    })?)
                }
                ChunkField::BlockType => block_type = Some(map.next_value()?),
                ChunkField::Text => text = Some(map.next_value()?),
                ChunkField::Id => id = Some(map.next_value()?),
                ChunkField::Name => name = Some(map.next_value()?),
                ChunkField::ArgumentsDelta => arguments_delta = Some(map.next_value()?),
                ChunkField::Block => block = Some(map.next_value()?),
                ChunkField::Usage => usage = Some(map.next_value()?),
                ChunkField::Reason => reason = Some(map.next_value()?),
                ChunkField::ReplayState => replay = Some(map.next_value()?),
                ChunkField::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let kind = kind.ok_or_else(|| de::Error::custom("chunk is missing \"type\""))?;
        fn need<T, E: de::Error>(v: Option<T>, kind: &str, field: &str) -> Result<T, E> {
            v.ok_or_else(|| {
                de::Error::custom(error_text!(
                    "chunk field missing",
                    "{kind} chunk is missing \"{field}\""
                ))
            })
        }
        Ok(match kind.as_str() {
            "block-start" => StreamChunk::BlockStart {
                index: need(index, &kind, "index")?,
                block_type: need(block_type, &kind, "blockType")?,
            },
            "text-delta" => StreamChunk::TextDelta {
                index: need(index, &kind, "index")?,
                text: need(text, &kind, "text")?,
            },
            "reasoning-delta" => StreamChunk::ReasoningDelta {
                index: need(index, &kind, "index")?,
                text: need(text, &kind, "text")?,
            },
            "tool-call-delta" => StreamChunk::ToolCallDelta {
                index: need(index, &kind, "index")?,
                head: ToolCallHead::new(&need(id, &kind, "id")?, name.flatten().as_deref()),
                arguments_delta: need(arguments_delta, &kind, "argumentsDelta")?,
            },
            "block-end" => StreamChunk::BlockEnd {
                index: need(index, &kind, "index")?,
                block: Box::new(need(block, &kind, "block")?),
            },
            "usage" => StreamChunk::usage(need(usage, &kind, "usage")?),
            "finish" => StreamChunk::finish_with(need(reason, &kind, "reason")?, replay.flatten()),
            other => {
                return Err(de::Error::custom(error_text!(
                    "unknown chunk type",
                    "unknown chunk type \"{other}\" (SC-1: the chunk set is closed)"
                )));
            }
        })
    }
}

impl<'de> Deserialize<'de> for StreamChunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ChunkVisitor)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for StreamChunk {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "StreamChunk({=str})", self.chunk_type())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for FinishReason {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "FinishReason({=str})", self.kind())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for LlmFailure {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "LlmFailure({=str}: {=str})",
            self.code.as_str(),
            self.message.as_str()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(json: &str) -> StreamChunk {
        let chunk: StreamChunk = serde_json::from_str(json).expect("parses");
        assert_eq!(serde_json::to_string(&chunk).unwrap(), json);
        chunk
    }

    #[test]
    fn every_chunk_variant_round_trips() {
        round_trip(r#"{"type":"block-start","index":0,"blockType":"text"}"#);
        round_trip(r#"{"type":"text-delta","index":0,"text":"Hel"}"#);
        round_trip(r#"{"type":"reasoning-delta","index":1,"text":"thinking"}"#);
        round_trip(
            r#"{"type":"tool-call-delta","index":2,"id":"call_1","name":"read_file","argumentsDelta":"{\"pa"}"#,
        );
        round_trip(
            r#"{"type":"tool-call-delta","index":2,"id":"call_1","argumentsDelta":"th\":\"a\"}"}"#,
        );
        round_trip(r#"{"type":"block-end","index":0,"block":{"type":"text","text":"Hello"}}"#);
        round_trip(
            r#"{"type":"usage","usage":{"inputTokens":27,"outputTokens":69,"cacheReadTokens":256,"reasoningTokens":24}}"#,
        );
        round_trip(r#"{"type":"finish","reason":{"kind":"tool-calls"}}"#);
        round_trip(
            r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"slow down","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":2000,"requestId":"req-429"}}}"#,
        );
        round_trip(
            r#"{"type":"finish","reason":{"kind":"stop"},"replayState":{"response":{"id":"resp_1"},"blocks":[{"sig":"x"},null]}}"#,
        );
    }

    #[test]
    fn chunks_are_compact() {
        // A chunk array is walked once per chunk; 192 bytes before.
        assert!(core::mem::size_of::<StreamChunk>() <= 40);
        let c = round_trip(r#"{"type":"text-delta","index":0,"text":"a short fragment"}"#);
        let StreamChunk::TextDelta { text, .. } = c else {
            panic!()
        };
        assert!(text.is_inline(), "a short delta needs no allocation");
        // The inline buffer is zero past the text (the assembler copies it
        // whole, then cuts it).
        let (padded, len) = text.inline_padded().expect("inline");
        assert_eq!(&padded[..len], b"a short fragment");
        assert!(padded[len..].iter().all(|b| *b == 0));
        assert_eq!(text.len(), 16);
        assert_eq!(&*text, "a short fragment");
        let long = round_trip(
            r#"{"type":"text-delta","index":0,"text":"a fragment longer than twenty-three bytes"}"#,
        );
        assert_eq!(
            long,
            StreamChunk::text_delta(0, "a fragment longer than twenty-three bytes")
        );
    }

    #[test]
    fn share_head_makes_one_calls_deltas_share_one_head() {
        let head = |c: &StreamChunk| match c {
            StreamChunk::ToolCallDelta { head, .. } => head.clone(),
            _ => panic!("not a tool-call delta"),
        };
        let mut last = None;
        let mut read = |s: &str| {
            serde_json::from_str::<StreamChunk>(s)
                .unwrap()
                .share_head(&mut last)
        };
        let a = read(
            r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"f","argumentsDelta":"{"}"#,
        );
        let b = read(
            r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"f","argumentsDelta":"}"}"#,
        );
        let c = read(r#"{"type":"tool-call-delta","index":0,"id":"c1","argumentsDelta":""}"#);
        assert!(head(&a).same(&head(&b)));
        assert!(!head(&b).same(&head(&c)));
        assert_eq!(head(&c).name(), None);
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"f","argumentsDelta":"}"}"#
        );
    }

    #[test]
    fn unknown_finish_kinds_are_kept() {
        let c = round_trip(r#"{"type":"finish","reason":{"kind":"paused","why":{"b":1,"a":2}}}"#);
        let StreamChunk::Finish { reason, .. } = c else {
            panic!()
        };
        assert_eq!(reason.kind(), "paused");
        // A failure with an extra key survives unchanged too.
        round_trip(
            r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"","extra":1}}}"#,
        );
    }

    #[test]
    fn malformed_chunks_are_typed_errors() {
        for bad in [
            r#"{"type":"nope","index":0}"#,
            r#"{"type":"text-delta","text":"x"}"#,
            r#"{"type":"text-delta","index":-1,"text":"x"}"#,
            r#"{"type":"text-delta","index":1.5,"text":"x"}"#,
            r#"{"index":0}"#,
            r#"[]"#,
            r#"{"type":"block-end","index":0,"block":{"text":"no type"}}"#,
        ] {
            assert!(serde_json::from_str::<StreamChunk>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn token_delta_predicate() {
        let c = |s: &str| {
            serde_json::from_str::<StreamChunk>(s)
                .unwrap()
                .is_token_delta()
        };
        assert!(!c(r#"{"type":"text-delta","index":0,"text":""}"#));
        assert!(c(r#"{"type":"text-delta","index":0,"text":"a"}"#));
        assert!(c(
            r#"{"type":"tool-call-delta","index":0,"id":"","name":"","argumentsDelta":""}"#
        ));
        assert!(!c(
            r#"{"type":"tool-call-delta","index":0,"id":"x","argumentsDelta":""}"#
        ));
        assert!(!c(r#"{"type":"block-start","index":0,"blockType":"text"}"#));
    }

    #[test]
    fn llm_error_validates_its_failure() {
        let mut f = LlmFailure::new("SERVER", "boom");
        assert!(LlmError::new(f.clone()).is_ok());
        f.status = Some(99);
        assert_eq!(
            LlmError::new(f.clone()),
            Err(InvalidFailure::StatusOutOfRange(99))
        );
        f.status = Some(500);
        f.provider_retry_after_ms = Some(0.0);
        assert_eq!(LlmError::new(f.clone()), Err(InvalidFailure::BadRetryAfter));
        f.provider_retry_after_ms = None;
        f.request_id = Some(String::new());
        assert_eq!(LlmError::new(f), Err(InvalidFailure::EmptyRequestId));
        assert_eq!(
            LlmError::coded("", "").failure().message,
            "LLM adapter failed"
        );
    }
}
