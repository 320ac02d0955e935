//! SSE events of a streaming Messages response → dsh stream chunks.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use dsh_core::{
    ChunkText, ContentBlock, FinishReason, LlmError, LlmFailure, ReplayEnvelope, StreamChunk,
    TokenUsage, ToolCallHead,
};
use dsh_deepseek::{DEFAULT_MAX_EVENT_BYTES, SseEvent, SseFramer, SseLimitError, codes};
use serde_json::{Map, Value, json};

use crate::classify::classify_error_body;

/// The finish reason for a `stop_reason`: `end_turn`, `stop_sequence` and
/// `pause_turn` stop, `tool_use` is tool calls, `max_tokens` (and
/// `model_context_window_exceeded`) the token cap; anything else
/// (`refusal`, …) an error coded by its upper-cased name.
pub fn map_stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::MaxTokens,
        other => FinishReason::Error {
            failure: LlmFailure::new(
                other.to_ascii_uppercase(),
                alloc::format!("model stopped: {other}"),
            ),
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Reasoning,
    ToolCall,
}

#[derive(Debug)]
struct Block {
    index: u64,
    kind: Kind,
    buf: String,
    head: Option<ToolCallHead>,
    id: String,
    name: String,
    /// The replay entry: `signature` / `redactedData`.
    replay: Map<String, Value>,
    open: bool,
}

/// Translates the events of one response, in order.
#[derive(Debug, Default)]
pub struct Translator {
    /// Blocks in opening order; the position is the dsh block index.
    blocks: Vec<Block>,
    /// Wire `index` → position in `blocks`.
    wire: BTreeMap<u64, usize>,
    usage: TokenUsage,
    saw_usage: bool,
    stop: Option<FinishReason>,
    response: Map<String, Value>,
    started: bool,
    done: bool,
}

fn malformed(data: &str) -> LlmError {
    let excerpt: String = data.chars().take(120).collect();
    LlmError::coded(
        codes::MALFORMED_RESPONSE,
        &alloc::format!("anthropic: malformed stream event: {excerpt}"),
    )
}

fn int(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

impl Translator {
    /// A translator for a new response.
    pub fn new() -> Self {
        Translator::default()
    }

    /// Whether `message_stop` (or an error) ended the response.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn usage_from(&mut self, u: &Value) {
        if let Some(n) = int(u.get("input_tokens")) {
            self.usage.input_tokens = n;
            self.saw_usage = true;
        }
        if let Some(n) = int(u.get("output_tokens")) {
            self.usage.output_tokens = n;
            self.saw_usage = true;
        }
        if let Some(n) = int(u.get("cache_read_input_tokens")) {
            self.usage.cache_read_tokens = Some(n);
        }
        if let Some(n) = int(u.get("cache_creation_input_tokens")) {
            self.usage.cache_write_tokens = Some(n);
        }
    }

    fn open(&mut self, wire: u64, kind: Kind, out: &mut Vec<StreamChunk>) -> usize {
        let index = self.blocks.len() as u64;
        out.push(StreamChunk::BlockStart {
            index,
            block_type: String::from(match kind {
                Kind::Text => "text",
                Kind::Reasoning => "reasoning",
                Kind::ToolCall => "tool-call",
            }),
        });
        self.blocks.push(Block {
            index,
            kind,
            buf: String::new(),
            head: None,
            id: String::new(),
            name: String::new(),
            replay: Map::new(),
            open: true,
        });
        self.wire.insert(wire, self.blocks.len() - 1);
        self.blocks.len() - 1
    }

    fn append(&mut self, slot: usize, text: &str, out: &mut Vec<StreamChunk>) {
        let Some(b) = self.blocks.get_mut(slot) else {
            return;
        };
        if text.is_empty() && b.kind != Kind::ToolCall {
            return;
        }
        b.buf.push_str(text);
        out.push(match b.kind {
            Kind::Text => StreamChunk::text_delta(b.index, text),
            Kind::Reasoning => StreamChunk::reasoning_delta(b.index, text),
            Kind::ToolCall => {
                let head = b
                    .head
                    .get_or_insert_with(|| ToolCallHead::new(&b.id, Some(&b.name)))
                    .clone();
                StreamChunk::ToolCallDelta {
                    index: b.index,
                    head,
                    arguments_delta: ChunkText::new(text),
                }
            }
        });
    }

    fn close(&mut self, slot: usize, out: &mut Vec<StreamChunk>) {
        if self
            .blocks
            .get(slot)
            .is_some_and(|b| b.open && b.kind == Kind::ToolCall && b.buf.is_empty())
        {
            // A call without input (no parameters): its arguments are `{}`,
            // streamed like any other so the deltas add up to the block.
            self.append(slot, "{}", out);
        }
        let Some(b) = self.blocks.get_mut(slot) else {
            return;
        };
        if !b.open {
            return;
        }
        b.open = false;
        let text = core::mem::take(&mut b.buf);
        let block = match b.kind {
            Kind::Text => ContentBlock::Text { text },
            Kind::Reasoning => ContentBlock::Reasoning { text },
            Kind::ToolCall => ContentBlock::tool_call(b.id.as_str(), b.name.as_str(), text),
        };
        out.push(StreamChunk::block_end(b.index, block));
    }

    /// The slot of wire block `data.index`, which must be open.
    fn slot_of(&self, data: &Value) -> Option<usize> {
        let wire = data.get("index")?.as_u64()?;
        let slot = *self.wire.get(&wire)?;
        self.blocks.get(slot).filter(|b| b.open).map(|_| slot)
    }

    fn finish(&mut self, out: &mut Vec<StreamChunk>) {
        self.done = true;
        for slot in 0..self.blocks.len() {
            self.close(slot, out);
        }
        if self.saw_usage {
            out.push(StreamChunk::usage(self.usage));
        }
        let reason = match self.stop.take() {
            None | Some(FinishReason::Stop) if self.blocks.is_empty() => FinishReason::Error {
                failure: LlmFailure::new(
                    codes::EMPTY_RESPONSE,
                    "model returned a completed response with no content",
                ),
            },
            Some(r) => r,
            None => FinishReason::Stop,
        };
        let blocks: Vec<Value> = self
            .blocks
            .iter()
            .map(|b| Value::Object(b.replay.clone()))
            .collect();
        let replay = (!self.response.is_empty()
            || self.blocks.iter().any(|b| !b.replay.is_empty()))
        .then(|| ReplayEnvelope::new(Value::Object(self.response.clone()), Some(blocks)));
        out.push(StreamChunk::finish_with(reason, replay));
    }

    /// Translates one event's data, appending chunks to `out`. Returns
    /// whether the response is over (`message_stop`). On an `error` event
    /// or a malformed one, returns the error and emits nothing more.
    pub fn push_event(&mut self, data: &str, out: &mut Vec<StreamChunk>) -> Result<bool, LlmError> {
        if self.done {
            return Ok(true);
        }
        let Ok(Value::Object(event)) = serde_json::from_str::<Value>(data) else {
            return Err(malformed(data));
        };
        let event = Value::Object(event);
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "ping" => {}
            "error" => {
                self.done = true;
                return Err(classify_error_body(0, data.as_bytes()));
            }
            "message_start" => {
                let Some(message) = event.get("message").filter(|m| m.is_object()) else {
                    return Err(malformed(data));
                };
                self.started = true;
                for key in ["id", "model"] {
                    if let Some(v) = message.get(key).filter(|v| v.is_string()) {
                        self.response.insert(key.into(), v.clone());
                    }
                }
                if let Some(u) = message.get("usage") {
                    self.usage_from(u);
                }
            }
            "content_block_start" => {
                let wire = event.get("index").and_then(Value::as_u64);
                let block = event.get("content_block").filter(|b| b.is_object());
                let (Some(wire), Some(block)) = (wire, block) else {
                    return Err(malformed(data));
                };
                if self.wire.contains_key(&wire) {
                    return Err(malformed(data));
                }
                let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
                match s("type") {
                    "text" => {
                        let slot = self.open(wire, Kind::Text, out);
                        self.append(slot, s("text"), out);
                    }
                    "thinking" => {
                        let slot = self.open(wire, Kind::Reasoning, out);
                        if !s("signature").is_empty() {
                            self.blocks[slot]
                                .replay
                                .insert("signature".into(), json!(s("signature")));
                        }
                        self.append(slot, s("thinking"), out);
                    }
                    "redacted_thinking" => {
                        let slot = self.open(wire, Kind::Reasoning, out);
                        self.blocks[slot]
                            .replay
                            .insert("redactedData".into(), json!(s("data")));
                    }
                    "tool_use" | "server_tool_use" => {
                        let slot = self.open(wire, Kind::ToolCall, out);
                        self.blocks[slot].id = String::from(s("id"));
                        self.blocks[slot].name = String::from(s("name"));
                        // A complete input in the start (some gateways):
                        // sent as the arguments.
                        match block.get("input") {
                            Some(Value::Object(o)) if !o.is_empty() => {
                                let text = Value::Object(o.clone()).to_string();
                                self.append(slot, &text, out);
                            }
                            _ => self.append(slot, "", out),
                        }
                    }
                    // Other block types (web search results, …): no dsh
                    // block; their deltas are ignored.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = event.get("delta").filter(|d| d.is_object()) else {
                    return Err(malformed(data));
                };
                let Some(slot) = self.slot_of(&event) else {
                    let known = event
                        .get("index")
                        .and_then(Value::as_u64)
                        .is_some_and(|w| !self.wire.contains_key(&w));
                    // A delta for a block never opened is malformed unless
                    // that block's start was of a type dsh skips.
                    return if known && self.started {
                        Ok(false)
                    } else {
                        Err(malformed(data))
                    };
                };
                let s = |k: &str| delta.get(k).and_then(Value::as_str);
                let kind = self.blocks[slot].kind;
                match (delta.get("type").and_then(Value::as_str), kind) {
                    (Some("text_delta"), Kind::Text) => {
                        self.append(slot, s("text").unwrap_or(""), out)
                    }
                    (Some("thinking_delta"), Kind::Reasoning) => {
                        self.append(slot, s("thinking").unwrap_or(""), out)
                    }
                    (Some("signature_delta"), Kind::Reasoning) => {
                        let b = &mut self.blocks[slot];
                        let mut sig = b
                            .replay
                            .get("signature")
                            .and_then(Value::as_str)
                            .map(String::from)
                            .unwrap_or_default();
                        sig.push_str(s("signature").unwrap_or(""));
                        b.replay.insert("signature".into(), Value::String(sig));
                    }
                    (Some("input_json_delta"), Kind::ToolCall) => {
                        self.append(slot, s("partial_json").unwrap_or(""), out)
                    }
                    (Some("text_delta" | "thinking_delta" | "input_json_delta"), _) => {
                        return Err(malformed(data));
                    }
                    // citations_delta and future delta types.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(slot) = self.slot_of(&event) {
                    self.close(slot, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = event
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                {
                    self.stop = Some(map_stop_reason(reason));
                }
                if let Some(u) = event.get("usage") {
                    self.usage_from(u);
                }
            }
            "message_stop" => {
                self.finish(out);
                return Ok(true);
            }
            _ => {}
        }
        Ok(false)
    }

    /// The body ended: an error unless `message_stop` came.
    pub fn end(&self) -> Result<(), LlmError> {
        if self.done {
            Ok(())
        } else {
            Err(LlmError::coded(
                codes::STREAM_CLOSED,
                "anthropic: the stream ended before message_stop",
            ))
        }
    }
}

/// A response body, fed in pieces of any size, into chunks: the DeepSeek
/// adapter's SSE framer (lines and events bounded) and the [`Translator`].
///
/// A body whose first non-blank byte is `{` is not SSE but one JSON
/// document (a gateway that ignores `stream: true`, e.g. the LiteLLM
/// proxy's mock responses, or an error sent with status 200): it is read
/// whole, within the same bound, and a complete `message` is translated as
/// if streamed; an `error` object is the stream's error.
#[derive(Debug)]
pub struct StreamDecoder {
    framer: SseFramer,
    translator: Translator,
    /// `None` until the first non-blank byte; then whether it is JSON.
    json: Option<bool>,
    body: Vec<u8>,
    max: usize,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        StreamDecoder::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

struct Stop(LlmError);

impl From<SseLimitError> for Stop {
    fn from(e: SseLimitError) -> Self {
        Stop(LlmError::coded(
            codes::RESPONSE_TOO_LARGE,
            &alloc::format!("anthropic: {e}"),
        ))
    }
}

impl StreamDecoder {
    /// A decoder bounding SSE lines and events to `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        StreamDecoder {
            framer: SseFramer::with_options(max_event_bytes, false),
            translator: Translator::new(),
            json: None,
            body: Vec::new(),
            max: max_event_bytes.max(1),
        }
    }

    /// Feeds one piece; returns whether the response is over.
    pub fn push(&mut self, piece: &[u8], out: &mut Vec<StreamChunk>) -> Result<bool, LlmError> {
        if self.translator.is_done() {
            return Ok(true);
        }
        let max = self.max;
        let too_large = || {
            LlmError::coded(
                codes::RESPONSE_TOO_LARGE,
                &alloc::format!("anthropic: a JSON body over {max} bytes"),
            )
        };
        if self.json.is_none() {
            let blank = |b: &u8| b.is_ascii_whitespace() || [0xEF, 0xBB, 0xBF].contains(b);
            match piece.iter().find(|b| !blank(b)) {
                // Only blanks so far: kept until the body says what it is,
                // so the split cannot change the outcome.
                None => {
                    if self.body.len() + piece.len() > self.max {
                        return Err(too_large());
                    }
                    self.body.extend_from_slice(piece);
                    return Ok(false);
                }
                Some(first) => {
                    self.json = Some(*first == b'{');
                    if *first != b'{' && !self.body.is_empty() {
                        let blanks = core::mem::take(&mut self.body);
                        self.push_sse(&blanks, out)?;
                    }
                }
            }
        }
        if self.json == Some(true) {
            if self.body.len() + piece.len() > self.max {
                return Err(too_large());
            }
            self.body.extend_from_slice(piece);
            return Ok(false);
        }
        self.push_sse(piece, out)
    }

    /// Frames and translates a piece of an SSE body.
    fn push_sse(&mut self, piece: &[u8], out: &mut Vec<StreamChunk>) -> Result<bool, LlmError> {
        if self.translator.is_done() {
            return Ok(true);
        }
        let translator = &mut self.translator;
        let result = self.framer.push(piece, &mut |event| match event {
            SseEvent::Data(data) if !translator.is_done() => {
                translator.push_event(data, out).map(drop).map_err(Stop)
            }
            _ => Ok(()),
        });
        match result {
            Ok(()) => Ok(self.translator.is_done()),
            Err(Stop(e)) => Err(e),
        }
    }

    /// The body ended: a JSON body is translated now (into `out`); then an
    /// error unless the response was complete.
    pub fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        if self.json == Some(true) && !self.translator.is_done() {
            self.push_json_body(out)?;
        }
        self.translator.end()
    }

    /// A whole JSON body: a `message` as its events, an `error` as the
    /// error, anything else malformed.
    fn push_json_body(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        let text = String::from_utf8_lossy(&self.body).into_owned();
        let Ok(Value::Object(root)) = serde_json::from_str::<Value>(&text) else {
            return Err(malformed(&text));
        };
        match root.get("type").and_then(Value::as_str) {
            Some("error") => return Err(classify_error_body(0, text.as_bytes())),
            Some("message") => {}
            _ => return Err(malformed(&text)),
        }
        let mut start = root.clone();
        start.insert("content".into(), Value::Array(Vec::new()));
        let mut events = alloc::vec![json!({"type": "message_start", "message": start})];
        if let Some(Value::Array(blocks)) = root.get("content") {
            for (i, block) in blocks.iter().enumerate() {
                events.push(
                    json!({"type": "content_block_start", "index": i, "content_block": block}),
                );
                events.push(json!({"type": "content_block_stop", "index": i}));
            }
        }
        let mut delta =
            json!({"type": "message_delta", "delta": {"stop_reason": root.get("stop_reason")}});
        if let Some(u) = root.get("usage") {
            delta["usage"] = u.clone();
        }
        events.push(delta);
        events.push(json!({"type": "message_stop"}));
        for event in events {
            self.translator.push_event(&event.to_string(), out)?;
        }
        Ok(())
    }
}

/// Decodes a whole body given in `pieces`; the sequence always ends in a
/// `finish` chunk, a failure included (AC-6).
pub fn decode_pieces<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
    max_event_bytes: usize,
) -> Vec<StreamChunk> {
    let mut decoder = StreamDecoder::new(max_event_bytes);
    let mut out = Vec::new();
    for piece in pieces {
        match decoder.push(piece, &mut out) {
            Ok(true) => return out,
            Ok(false) => {}
            Err(e) => {
                out.push(dsh_deepseek::error_finish(&e, false));
                return out;
            }
        }
    }
    if let Err(e) = decoder.finish_into(&mut out) {
        out.push(dsh_deepseek::error_finish(&e, false));
    }
    out
}
