//! Payload → `StreamChunk` translation (5.11–5.14) and the body decoder that
//! chains the SSE framer and the translator.

use alloc::string::String;
use alloc::vec::Vec;
use dsh_core::{
    ChunkText, ContentBlock, FinishReason, LlmError, LlmFailure, StreamChunk, TokenUsage,
    ToolCallHead,
};

use crate::classify::classify_inband_error;
use crate::codes;
use crate::sse::{DEFAULT_MAX_EVENT_BYTES, DONE, RawEvent as SseEvent, SseFramer, SseLimitError};
use crate::wire::{self, List, ToolKey, WireUsage};

/// Which servers' wire shapes the decoder accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// Exactly the reference DeepSeek adapter (5.10–5.14), quirks included:
    /// the spec's vectors. The default.
    #[default]
    Reference,
    /// The reference plus tolerance for other OpenAI-compatible servers
    /// (vLLM, llama.cpp, Ollama, LM Studio, TGI, LiteLLM, OpenRouter,
    /// Gemini). Where the reference would lose an answer or hide an error:
    ///
    /// - an in-band `{"error":…}` payload or an `event: error` frame ends the
    ///   stream with the server's error ([`crate::classify_inband_error`]),
    ///   after the chunks before it;
    /// - a body that ends without `[DONE]` after a `finish_reason` arrived is
    ///   complete (flushed as if `[DONE]` had come);
    /// - tool-call deltas without `index` are told apart by `id` (a new id,
    ///   or a new name without id, opens a new call) instead of being merged;
    /// - a tool call that never gets an `id` gets `<callIdPrefix><index>`;
    /// - the stop synonyms `eos_token`, `eos`, `stop_sequence`, `end_turn`
    ///   and any case of `stop` map to `stop`; every other reason keeps the
    ///   reference mapping (T-6, 5.12);
    /// - the `reasoning` delta field counts as `reasoning_content` when that
    ///   is absent or empty;
    /// - a choice with `message` instead of `delta` (some proxies) is read
    ///   as if `message` were its `delta`; a choice with both keeps `delta`;
    /// - a body that is a JSON document instead of SSE (a non-streaming
    ///   `chat.completion`, or an error object sent with status 200) is
    ///   translated as one complete reply, or as that error.
    Interop,
}

/// Decoder settings.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// Which wire shapes are accepted.
    pub profile: Profile,
    /// Bound on one SSE line, one event's data and a JSON body, in bytes.
    pub max_event_bytes: usize,
    /// Interop: the prefix of the id given to a tool call that has none;
    /// the block index follows. Make it unique per call (the client does).
    pub call_id_prefix: String,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            profile: Profile::Reference,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            call_id_prefix: String::from("call_"),
        }
    }
}

impl DecodeOptions {
    /// The interop profile with the default limits.
    pub fn interop() -> Self {
        DecodeOptions {
            profile: Profile::Interop,
            ..DecodeOptions::default()
        }
    }
}

/// Interop: finish reasons other servers use for a normal stop.
const STOP_SYNONYMS: [&str; 4] = ["eos_token", "eos", "stop_sequence", "end_turn"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Reasoning,
    ToolCall,
}

#[derive(Clone, Debug)]
struct Block {
    index: u64,
    kind: Kind,
    /// Text, reasoning or tool arguments.
    buf: String,
    id: Option<String>,
    name: Option<String>,
    /// The head the last delta of this tool call carried (id and name as
    /// they were then), shared by the deltas until either changes.
    head: Option<ToolCallHead>,
}

/// The payload translator (5.11): one per model call.
///
/// Feed it each dispatched SSE payload with [`Translator::push_payload`]; at
/// `[DONE]` it emits every `block-end`, then the usage, then the finish.
#[derive(Clone, Debug, Default)]
pub struct Translator {
    next_index: u64,
    text: Option<usize>,
    reasoning: Option<usize>,
    /// Tool-call keys and their blocks, sorted by key (a sorted `Vec`
    /// rather than a `BTreeMap`: less code on a device, the same lookups).
    tools: Vec<(ToolKey, usize)>,
    blocks: Vec<Block>,
    pending_finish: Option<FinishReason>,
    pending_usage: Option<TokenUsage>,
    done: bool,
    profile: Profile,
    call_id_prefix: String,
    /// Interop: the block of the last tool-call delta without `index`, and
    /// the wire id it got.
    unindexed: Option<(usize, Option<String>)>,
    /// What the fast reader remembers from the last payloads (see
    /// `wire::FastState`; at most 3 KiB).
    fast: wire::FastState,
}

/// T-1: the `MALFORMED_RESPONSE` error for `payload`, quoting its first 120
/// characters counted in UTF-16 code units as the reference does (Q-20); a
/// surrogate pair that would be split at the cut is left out whole.
pub fn malformed(payload: &str) -> LlmError {
    // Feature `error-texts` off: no excerpt.
    if !cfg!(feature = "error-texts") {
        return LlmError::coded(codes::MALFORMED_RESPONSE, "malformed SSE payload");
    }
    let mut units = 0;
    let excerpt: String = payload
        .chars()
        .take_while(|c| {
            units += c.len_utf16();
            units <= 120
        })
        .collect();
    let mut message = String::from("malformed SSE payload: ");
    message.push_str(&excerpt);
    LlmError::coded(codes::MALFORMED_RESPONSE, &message)
}

/// [`map_finish_reason`] under `profile`: the interop profile also maps the
/// stop synonyms of other servers to `stop`.
pub fn map_finish_reason_for(reason: &str, profile: Profile) -> FinishReason {
    if profile == Profile::Interop
        && (reason.eq_ignore_ascii_case("stop") || STOP_SYNONYMS.contains(&reason))
    {
        return FinishReason::Stop;
    }
    map_finish_reason(reason)
}

/// 5.12: a wire `finish_reason` as a [`FinishReason`].
pub fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "tool_calls" => FinishReason::ToolCalls,
        "length" => FinishReason::MaxTokens,
        other => {
            let mut message = String::from("model stopped: ");
            message.push_str(other);
            FinishReason::Error {
                failure: LlmFailure::new(other.to_uppercase(), message),
            }
        }
    }
}

fn map_usage(u: &WireUsage) -> TokenUsage {
    // U-1: `cached_tokens` wins when present (even 0), else the hit count.
    let cache_read = u.cached_tokens.0.or(u.prompt_cache_hit_tokens.0);
    let prompt = u.prompt_tokens.0.unwrap_or(0);
    // U-2 (no clamp, Q-8); saturating instead of overflowing.
    let mut usage = TokenUsage::new(
        prompt.saturating_sub(cache_read.unwrap_or(0)),
        u.completion_tokens.0.unwrap_or(0),
    );
    usage.cache_read_tokens = cache_read;
    usage.reasoning_tokens = u.reasoning_tokens.0;
    usage
}

/// The EMPTY_RESPONSE finish of T-9 / AC-9.
pub fn empty_response_finish() -> FinishReason {
    FinishReason::Error {
        failure: LlmFailure::new(
            codes::EMPTY_RESPONSE,
            "model returned a completed response with no content",
        ),
    }
}

impl Translator {
    /// A translator for a new call (the reference profile).
    pub fn new() -> Self {
        Translator::default()
    }

    /// A translator for a new call with `options`.
    pub fn with_options(options: &DecodeOptions) -> Self {
        Translator {
            profile: options.profile,
            call_id_prefix: options.call_id_prefix.clone(),
            ..Translator::default()
        }
    }

    fn interop(&self) -> bool {
        self.profile == Profile::Interop
    }

    /// Interop: an `event: error` frame's data, as the stream's error.
    /// Nothing is emitted.
    pub fn push_error_event(&mut self, data: &str) -> LlmError {
        self.done = true;
        classify_inband_error(data)
    }

    /// Whether `[DONE]` was translated.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn open(&mut self, kind: Kind, out: &mut Vec<StreamChunk>) -> usize {
        let index = self.next_index;
        self.next_index += 1;
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
            id: None,
            name: None,
            head: None,
        });
        self.blocks.len() - 1
    }

    /// Translates one payload, appending chunks to `out`. Returns whether it
    /// was `[DONE]` (after which the call is over and further payloads are
    /// ignored). On error nothing from this payload was emitted.
    pub fn push_payload(
        &mut self,
        payload: &str,
        out: &mut Vec<StreamChunk>,
    ) -> Result<bool, LlmError> {
        if self.done {
            return Ok(true);
        }
        if payload == DONE {
            self.flush(out);
            return Ok(true);
        }
        let mut parsed = wire::Payload::default();
        match wire::parse_into(payload, &mut parsed) {
            Ok(true) => {}
            // Q-9 recommendation: any non-object payload, and any `choices`
            // or `tool_calls` that is not an array of objects, is malformed.
            Ok(false) | Err(_) => return Err(malformed(payload)),
        }
        if parsed.error && self.interop() {
            return Err(self.push_error_event(payload));
        }
        if !self.apply(&parsed, out) {
            return Err(malformed(payload));
        }
        Ok(false)
    }

    /// [`Translator::push_payload`] for a payload still in bytes, as the
    /// framer delivers it: parsed straight from the bytes when they are
    /// valid (serde_json checks the UTF-8 of every string it reads), and
    /// through the lossy UTF-8 decoding of SSE-1 only when they are not.
    pub(crate) fn push_payload_bytes(
        &mut self,
        payload: &[u8],
        out: &mut Vec<StreamChunk>,
    ) -> Result<bool, LlmError> {
        if self.done || payload == DONE.as_bytes() {
            return self.push_payload(DONE, out);
        }
        let mut parsed = wire::Payload::default();
        // The hand-written reader takes the usual payload; serde the rest.
        let object = (cfg!(feature = "fast-reader")
            && wire::parse_slice_fast(payload, &mut parsed, &mut self.fast))
            || {
                parsed = wire::Payload::default();
                matches!(wire::parse_slice_into(payload, &mut parsed), Ok(true))
            };
        if object && !(parsed.error && self.interop()) && self.apply(&parsed, out) {
            return Ok(false);
        }
        drop(parsed);
        // Invalid UTF-8 outside ignored strings, or a malformed payload.
        match core::str::from_utf8(payload) {
            Ok(text) => self.push_payload(text, out),
            Err(_) => self.push_payload(&String::from_utf8_lossy(payload), out),
        }
    }

    /// T-2..T-7 for a parsed payload. Returns false, emitting nothing, for
    /// the Q-9 structural errors.
    fn apply(&mut self, parsed: &wire::Payload<'_>, out: &mut Vec<StreamChunk>) -> bool {
        let List::Items(choices) = &parsed.choices else {
            return false;
        };
        if choices
            .iter()
            .any(|c| matches!(self.delta_of(c).tool_calls, List::NotAnArray))
        {
            return false;
        }
        for choice in choices.iter() {
            let delta = self.delta_of(choice);
            // T-3
            let reasoning = match delta.reasoning_content.0.as_deref() {
                Some(t) if !t.is_empty() => Some(t),
                _ if self.interop() => delta.reasoning.0.as_deref().filter(|t| !t.is_empty()),
                _ => None,
            };
            if let Some(text) = reasoning {
                let slot = match self.reasoning {
                    Some(slot) => slot,
                    None => {
                        let slot = self.open(Kind::Reasoning, out);
                        self.reasoning = Some(slot);
                        slot
                    }
                };
                if let Some(block) = self.blocks.get_mut(slot) {
                    block.buf.push_str(text);
                    out.push(StreamChunk::reasoning_delta(block.index, text));
                }
            }
            // T-4
            if let Some(text) = delta.content.0.as_deref().filter(|t| !t.is_empty()) {
                let slot = match self.text {
                    Some(slot) => slot,
                    None => {
                        let slot = self.open(Kind::Text, out);
                        self.text = Some(slot);
                        slot
                    }
                };
                if let Some(block) = self.blocks.get_mut(slot) {
                    block.buf.push_str(text);
                    out.push(StreamChunk::text_delta(block.index, text));
                }
            }
            // T-5
            if let List::Items(calls) = &delta.tool_calls {
                for call in calls.iter() {
                    let slot = match &call.key {
                        ToolKey::Absent if self.interop() => self.unindexed_slot(call, out),
                        ToolKey::Unique => self.open(Kind::ToolCall, out),
                        key => match self.tools.binary_search_by(|(k, _)| k.cmp(key)) {
                            Ok(at) => self.tools[at].1,
                            Err(at) => {
                                let slot = self.open(Kind::ToolCall, out);
                                self.tools.insert(at, (key.clone(), slot));
                                slot
                            }
                        },
                    };
                    let Some(block) = self.blocks.get_mut(slot) else {
                        continue;
                    };
                    // T-5: the latest id and name win.
                    if let Some(id) = call.id.0.as_deref()
                        && block.id.as_deref() != Some(id)
                    {
                        block.id = Some(String::from(id));
                        block.head = None;
                    }
                    if let Some(name) = call.name.0.as_deref()
                        && block.name.as_deref() != Some(name)
                    {
                        block.name = Some(String::from(name));
                        block.head = None;
                    }
                    if block.id.as_deref().is_none_or(str::is_empty)
                        && self.profile == Profile::Interop
                    {
                        // Interop: a call without id gets one unique to this call.
                        block.id = Some(alloc::format!("{}{}", self.call_id_prefix, block.index));
                        block.head = None;
                    }
                    let fragment = call.arguments.0.as_deref().unwrap_or_default();
                    block.buf.push_str(fragment);
                    let head = block
                        .head
                        .get_or_insert_with(|| {
                            ToolCallHead::new(
                                block.id.as_deref().unwrap_or_default(),
                                block.name.as_deref(),
                            )
                        })
                        .clone();
                    out.push(StreamChunk::ToolCallDelta {
                        index: block.index,
                        head,
                        arguments_delta: ChunkText::new(fragment),
                    });
                }
            }
            // T-6, with the Q-7 choice: an empty string is treated as absent.
            if let Some(reason) = choice.finish_reason.0.as_deref().filter(|r| !r.is_empty()) {
                self.pending_finish = Some(map_finish_reason_for(reason, self.profile));
            }
        }
        // T-7
        if let Some(usage) = &parsed.usage {
            self.pending_usage = Some(map_usage(usage));
        }
        true
    }

    /// The delta a choice carries: its `delta`, or with the interop profile
    /// its `message` when it has no `delta` object.
    fn delta_of<'c, 'a>(&self, choice: &'c wire::Choice<'a>) -> &'c wire::Delta<'a> {
        match &choice.message {
            Some(message) if self.interop() && !choice.has_delta => message,
            _ => &choice.delta,
        }
    }

    /// Interop: the block for a tool-call delta without `index`: the last
    /// such block, unless this delta starts another call (an id other than
    /// the block's, or a name when the block already has one and no id
    /// came).
    fn unindexed_slot(&mut self, call: &wire::ToolCall<'_>, out: &mut Vec<StreamChunk>) -> usize {
        let id = call.id.0.as_deref().filter(|i| !i.is_empty());
        if let Some((slot, wire_id)) = &self.unindexed {
            let has_name = self.blocks.get(*slot).is_some_and(|b| b.name.is_some());
            let other_id = id.is_some_and(|i| wire_id.as_deref().is_some_and(|w| w != i));
            let another_name =
                call.name.0.is_some() && has_name && (id.is_none() || id != wire_id.as_deref());
            if !other_id && !another_name {
                let slot = *slot;
                if let (Some(i), Some((_, w))) = (id, self.unindexed.as_mut()) {
                    *w = Some(String::from(i));
                }
                return slot;
            }
        }
        let slot = self.open(Kind::ToolCall, out);
        self.unindexed = Some((slot, id.map(String::from)));
        slot
    }

    /// The body ended: like [`Translator::end`], but the interop profile
    /// completes a stream that already received a `finish_reason` (flushing
    /// it into `out`) instead of failing.
    pub fn end_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        if !self.done && self.interop() && self.pending_finish.is_some() {
            self.flush(out);
        }
        self.end()
    }

    /// Interop: translates a whole JSON body (a non-streaming
    /// `chat.completion`, or an error object) into `out`.
    fn push_json_body(&mut self, body: &[u8], out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        use serde_json::{Map, Value};
        let text = String::from_utf8_lossy(body);
        let Ok(Value::Object(root)) = serde_json::from_slice::<Value>(text.as_bytes()) else {
            return Err(malformed(&text));
        };
        if root.get("error").is_some_and(|e| !e.is_null()) || root.get("choices").is_none() {
            if root.get("error").is_some_and(|e| !e.is_null()) {
                return Err(self.push_error_event(&text));
            }
            return Err(malformed(&text));
        }
        let mut choices = Vec::new();
        if let Some(Value::Array(items)) = root.get("choices") {
            for item in items {
                let Value::Object(choice) = item else {
                    continue;
                };
                let mut delta = match choice.get("message").or_else(|| choice.get("delta")) {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                if let Some(Value::Array(calls)) = delta.get_mut("tool_calls") {
                    for (i, call) in calls.iter_mut().enumerate() {
                        let Value::Object(call) = call else { continue };
                        call.entry("index").or_insert(Value::from(i));
                        if let Some(Value::Object(f)) = call.get_mut("function")
                            && let Some(args) = f.get_mut("arguments")
                            && !args.is_string()
                            && !args.is_null()
                        {
                            *args = Value::String(json_text(args));
                        }
                    }
                }
                let mut c = Map::new();
                c.insert(String::from("delta"), Value::Object(delta));
                if let Some(reason) = choice.get("finish_reason") {
                    c.insert(String::from("finish_reason"), reason.clone());
                }
                choices.push(Value::Object(c));
            }
        }
        let mut payload = Map::new();
        payload.insert(String::from("choices"), Value::Array(choices));
        if let Some(usage) = root.get("usage") {
            payload.insert(String::from("usage"), usage.clone());
        }
        let payload = json_text(&Value::Object(payload));
        self.push_payload(&payload, out)?;
        self.flush(out);
        Ok(())
    }

    /// T-9: block-ends in opening order, usage, finish.
    fn flush(&mut self, out: &mut Vec<StreamChunk>) {
        self.done = true;
        let opened = !self.blocks.is_empty();
        for block in core::mem::take(&mut self.blocks) {
            let content = match block.kind {
                Kind::Text => ContentBlock::Text { text: block.buf },
                Kind::Reasoning => ContentBlock::Reasoning { text: block.buf },
                Kind::ToolCall => ContentBlock::tool_call(
                    block.id.unwrap_or_default(),
                    block.name.unwrap_or_default(),
                    block.buf,
                ),
            };
            out.push(StreamChunk::block_end(block.index, content));
        }
        if let Some(usage) = self.pending_usage.take() {
            out.push(StreamChunk::usage(usage));
        }
        let reason = match self.pending_finish.take() {
            None | Some(FinishReason::Stop) if !opened => empty_response_finish(),
            Some(reason) => reason,
            None => FinishReason::Stop,
        };
        out.push(StreamChunk::finish(reason));
    }

    /// T-10: the payload source ended; an error unless `[DONE]` was seen.
    pub fn end(&self) -> Result<(), LlmError> {
        if self.done {
            Ok(())
        } else {
            Err(LlmError::coded(
                codes::STREAM_CLOSED,
                "SSE payload stream ended without [DONE]",
            ))
        }
    }
}

/// What one [`StreamDecoder::push`] saw besides chunks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushOutcome {
    /// SSE comment lines seen (activity for the idle watchdog, WD-3).
    pub comments: usize,
    /// `[DONE]` was reached: the call is complete and the rest of the body
    /// must not be read (SSE-6).
    pub finished: bool,
}

/// The response body decoder: SSE framing plus translation.
///
/// ```
/// use dsh_deepseek::StreamDecoder;
/// let mut decoder = StreamDecoder::new();
/// let mut chunks = Vec::new();
/// let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// for piece in body.chunks(7) {
///     decoder.push(piece, &mut chunks).unwrap();
/// }
/// decoder.finish().unwrap();
/// assert_eq!(chunks.len(), 4); // block-start, text-delta, block-end, finish
/// ```
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    framer: SseFramer,
    translator: Translator,
    failed: Option<LlmError>,
    /// Interop: how the body is read.
    body: BodyKind,
    max_event_bytes: usize,
}

/// What the body turned out to be (interop sniffs its first byte).
#[derive(Clone, Debug, Default)]
enum BodyKind {
    /// Reference profile: always SSE.
    #[default]
    Sse,
    /// Interop, nothing but whitespace or a BOM seen yet.
    Sniffing,
    /// Interop: a JSON document, buffered whole.
    Json(Vec<u8>),
}

impl StreamDecoder {
    /// A decoder for a new response body (the reference profile).
    pub fn new() -> Self {
        StreamDecoder::with_options(&DecodeOptions::default())
    }

    /// A decoder for a new response body with `options`.
    pub fn with_options(options: &DecodeOptions) -> Self {
        let interop = options.profile == Profile::Interop;
        StreamDecoder {
            framer: SseFramer::with_options(options.max_event_bytes, interop),
            translator: Translator::with_options(options),
            failed: None,
            body: if interop {
                BodyKind::Sniffing
            } else {
                BodyKind::Sse
            },
            max_event_bytes: options.max_event_bytes.max(1),
        }
    }

    /// Whether `[DONE]` was reached.
    pub fn is_finished(&self) -> bool {
        self.translator.is_done()
    }

    fn fail(&mut self, e: LlmError) -> Result<PushOutcome, LlmError> {
        self.failed = Some(e.clone());
        Err(e)
    }

    /// Feeds one piece of the body, appending the chunks it completes to
    /// `out`.
    ///
    /// On error, `out` still holds every chunk of the payloads before the bad
    /// one (deliver them, then the error); the decoder then stays failed and
    /// returns the same error again.
    pub fn push(
        &mut self,
        mut bytes: &[u8],
        out: &mut Vec<StreamChunk>,
    ) -> Result<PushOutcome, LlmError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.translator.is_done() {
            return Ok(PushOutcome {
                comments: 0,
                finished: true,
            });
        }
        match &mut self.body {
            BodyKind::Sse => {}
            BodyKind::Sniffing => {
                let skip = bytes
                    .iter()
                    .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0xEF | 0xBB | 0xBF));
                match skip {
                    Some(i) if bytes[i] == b'{' => {
                        self.body = BodyKind::Json(Vec::new());
                        bytes = &bytes[i..];
                    }
                    Some(_) => self.body = BodyKind::Sse,
                    None => {}
                }
            }
            BodyKind::Json(_) => {}
        }
        if let BodyKind::Json(buf) = &mut self.body {
            if buf.len() + bytes.len() > self.max_event_bytes {
                let limit = self.max_event_bytes;
                return self.fail(SseLimitError { limit }.into());
            }
            buf.extend_from_slice(bytes);
            return Ok(PushOutcome::default());
        }
        let mut outcome = PushOutcome::default();
        let translator = &mut self.translator;
        let result = self.framer.push_raw(bytes, &mut |event| match event {
            SseEvent::Comment(_) => {
                outcome.comments += 1;
                Ok(())
            }
            SseEvent::Data(payload) => translator.push_payload_bytes(payload, out).map(|_| ()),
            SseEvent::Error(data) => {
                Err(translator.push_error_event(&String::from_utf8_lossy(data)))
            }
        });
        if let Err(e) = result {
            return self.fail(e);
        }
        outcome.finished = self.translator.is_done();
        Ok(outcome)
    }

    /// The body ended (SSE-7): `STREAM_CLOSED` unless `[DONE]` was reached.
    /// Chunks the interop profile completes only at the end of the body are
    /// dropped here: with that profile, call [`StreamDecoder::finish_into`].
    pub fn finish(&mut self) -> Result<(), LlmError> {
        self.finish_into(&mut Vec::new())
    }

    /// [`StreamDecoder::finish`] for the interop profile, which may still
    /// complete the reply at the end of the body (a `finish_reason` without
    /// `[DONE]`, a JSON body): its last chunks go to `out`.
    pub fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.translator.is_done() {
            return Ok(());
        }
        if let BodyKind::Json(body) = core::mem::take(&mut self.body) {
            if let Err(e) = self.translator.push_json_body(&body, out) {
                self.failed = Some(e.clone());
                return Err(e);
            }
            return Ok(());
        }
        if self.translator.end_into(out).is_ok() {
            return Ok(());
        }
        let e = LlmError::coded(codes::STREAM_CLOSED, "SSE stream ended without [DONE]");
        self.failed = Some(e.clone());
        Err(e)
    }
}

/// AC-6: the terminal `finish` chunk for an error raised by the adapter:
/// `aborted` when the caller's signal is aborted or the code is `ABORTED`,
/// otherwise `error`.
/// (The rule lives in [`StreamChunk::error_finish`].)
pub fn error_finish(error: &LlmError, caller_cancelled: bool) -> StreamChunk {
    StreamChunk::error_finish(error, caller_cancelled)
}

/// Decodes a whole body given in `pieces` (any split) and applies AC-6: the
/// chunk sequence always ends in a `finish`, a failure included.
pub fn decode_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Vec<StreamChunk> {
    decode_pieces_with(pieces, &DecodeOptions::default())
}

/// [`decode_pieces`] with decoder `options`.
pub fn decode_pieces_with<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
    options: &DecodeOptions,
) -> Vec<StreamChunk> {
    let mut decoder = StreamDecoder::with_options(options);
    let mut out = Vec::new();
    for piece in pieces {
        match decoder.push(piece, &mut out) {
            Ok(o) if o.finished => return out,
            Ok(_) => {}
            Err(e) => {
                out.push(error_finish(&e, false));
                return out;
            }
        }
    }
    if let Err(e) = decoder.finish_into(&mut out) {
        out.push(error_finish(&e, false));
    }
    out
}

/// [`decode_pieces`] for a body in one piece.
pub fn decode_body(body: &[u8]) -> Vec<StreamChunk> {
    decode_pieces(core::iter::once(body))
}

/// `value` as compact JSON text: what `Value`'s `Display` writes, through
/// the `Vec` writer the request body already links (one copy of the
/// `Value` serializer on a device instead of three).
fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod error_text_tests {
    /// The default build quotes the payload; with `error-texts` off the
    /// message is fixed (the code stays).
    #[test]
    fn malformed_text() {
        let e = super::malformed("{oops");
        #[cfg(feature = "error-texts")]
        assert_eq!(e.failure().message, "malformed SSE payload: {oops");
        #[cfg(not(feature = "error-texts"))]
        assert_eq!(e.failure().message, "malformed SSE payload");
        assert_eq!(e.failure().code, crate::codes::MALFORMED_RESPONSE);
    }
}
