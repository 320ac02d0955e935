//! The `BlockAssembler` (streaming.md 4): the one shared fold from a chunk
//! sequence to content blocks, usage, finish reason, replay state and an
//! assistant message.
//!
//! It is deliberately lenient: streams that break the grammar of 2.5 are
//! folded by the BA rules instead of being rejected (use
//! [`StreamValidator`](crate::StreamValidator) to check a stream). Memory is
//! bounded by the input: chunks aimed at a closed block are dropped (BA-7),
//! and so are delta fields that the partial's kind never reads (BA-4, BA-5).
//!
//! Performance: consecutive deltas almost always target the block the
//! previous delta targeted, so `push` keeps that block "hot" and appends to it
//! without a map lookup; everything else takes an out-of-line path.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::chunk::{FinishReason, ReplayEnvelope, StreamChunk, TokenUsage};
use crate::content::ContentBlock;
use crate::ids::{CallId, MessageId};
use crate::message::{Message, MessageSource};
use crate::text::{ChunkText, TextBuf, ToolCallHead};

/// The plugin name of the default assembler message source (MSG-1).
pub(crate) const ASSEMBLER_SOURCE_PLUGIN: &str = "dsh-llm/assembler";

/// Why assembly failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AssembleError {
    /// A block of a kind that cannot be built from deltas (an unknown plugin
    /// type, `tool-result` or `image`) was never closed (BB-2, BB-4).
    IncompleteBlock {
        /// The partial's kind.
        kind: String,
    },
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssembleError::IncompleteBlock { kind } => {
                write!(f, "cannot assemble incomplete block of type \"{kind}\"")
            }
        }
    }
}

impl core::error::Error for AssembleError {}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Reasoning,
    ToolCall,
    Other(String),
}

impl Kind {
    fn from_type(t: &str) -> Kind {
        match t {
            "text" => Kind::Text,
            "reasoning" => Kind::Reasoning,
            "tool-call" => Kind::ToolCall,
            other => Kind::Other(String::from(other)),
        }
    }

    /// What an open partial of this kind takes on the fast path.
    fn hot(&self) -> Hot {
        match self {
            Kind::Text | Kind::Reasoning => Hot::Text,
            Kind::ToolCall => Hot::Tool,
            Kind::Other(_) => Hot::None,
        }
    }
}

/// Which deltas the hot partial absorbs without a lookup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Hot {
    /// No hot partial.
    #[default]
    None,
    /// An open text or reasoning partial: text and reasoning deltas.
    Text,
    /// An open tool-call partial: tool-call deltas.
    Tool,
}

/// The JS `String.prototype.trim` whitespace set (WhiteSpace and
/// LineTerminator), which IB-3 uses; it differs from Unicode `White_Space`
/// in U+FEFF (JS only) and U+0085 (Unicode only).
fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{d}'
            | ' '
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
            | '\u{feff}'
    )
}

/// IB-3: whether a kept block is dropped as blank (its `text` is empty or
/// only whitespace, or it has no string `text` at all).
fn is_blank(block: &ContentBlock) -> bool {
    let text = match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text } => Some(text.as_str()),
        ContentBlock::Unknown(map) => map.get("text").and_then(serde_json::Value::as_str),
        _ => None,
    };
    text.is_none_or(|t| t.chars().all(is_js_whitespace))
}

/// Whether a produced block has `type` `tool-call` (BB-3 decides by type, so
/// an irregular tool-call kept as [`ContentBlock::Unknown`] counts too).
fn is_tool_call(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::ToolCall { .. }) || block.block_type() == "tool-call"
}

/// One block being assembled (BS-1).
///
/// Text and reasoning deltas append to `buf` only for a text or reasoning
/// kind, and tool-call deltas touch `buf`, `tool_call_id` and
/// `tool_call_name` only for a tool-call kind: BB-2 never reads those fields
/// for another kind, so keeping them would only grow memory.
///
/// While a partial is the assembler's hot one, its `buf` is checked out into
/// [`BlockAssembler::hot_buf`] and this one is empty.
#[derive(Clone, Debug)]
struct Partial {
    /// The text (text, reasoning) or the arguments (tool-call).
    buf: TextBuf,
    tool_call_id: Option<String>,
    tool_call_name: Option<String>,
    /// The head of the last tool-call delta applied: a delta sharing it (the
    /// usual case) changes neither id nor name, so they are not compared.
    head: Option<ToolCallHead>,
    closed: Option<ContentBlock>,
    kind: Kind,
    index: u64,
}

impl Partial {
    fn new(index: u64, kind: Kind) -> Self {
        Partial {
            buf: TextBuf::default(),
            tool_call_id: None,
            tool_call_name: None,
            head: None,
            closed: None,
            kind,
            index,
        }
    }

    /// What this partial takes on the fast path now.
    fn hot(&self) -> Hot {
        if self.closed.is_some() {
            Hot::None
        } else {
            self.kind.hot()
        }
    }

    /// BA-5's id and name part on an open tool-call partial (the caller
    /// appends the arguments fragment to the partial's buffer).
    #[inline]
    fn tool_head(&mut self, head: &ToolCallHead) {
        if !self.head.as_ref().is_some_and(|h| h.same(head)) {
            self.take_head(head);
        }
    }

    /// BA-5's id and name rules for a head other than the last one.
    #[inline(never)]
    fn take_head(&mut self, head: &ToolCallHead) {
        let (id, name) = (head.id(), head.name());
        // The latest id wins, "" included.
        match &mut self.tool_call_id {
            Some(current) => {
                if current != id {
                    current.clear();
                    current.push_str(id);
                }
            }
            None => self.tool_call_id = Some(String::from(id)),
        }
        // A non-empty name replaces; an empty or absent one never clears.
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            match &mut self.tool_call_name {
                Some(current) => {
                    if current != name {
                        current.clear();
                        current.push_str(name);
                    }
                }
                None => self.tool_call_name = Some(String::from(name)),
            }
        }
        self.head = Some(head.clone());
    }

    /// The `type` of the block this partial produces (BB-2), or the BB-4
    /// error, without building the block.
    fn produced_is_tool_call(&self) -> Result<bool, AssembleError> {
        match (&self.closed, &self.kind) {
            (Some(block), _) => Ok(is_tool_call(block)),
            (None, Kind::ToolCall) => Ok(true),
            (None, Kind::Text | Kind::Reasoning) => Ok(false),
            (None, Kind::Other(kind)) => Err(AssembleError::IncompleteBlock { kind: kind.clone() }),
        }
    }

    /// BB-2: the block this partial produces; `buf` is its buffer (its own,
    /// or the assembler's hot one).
    fn produce(&self, buf: &TextBuf) -> Result<ContentBlock, AssembleError> {
        if let Some(block) = &self.closed {
            return Ok(block.clone());
        }
        match &self.kind {
            Kind::Text => Ok(ContentBlock::Text {
                text: buf.to_owned_string(),
            }),
            Kind::Reasoning => Ok(ContentBlock::Reasoning {
                text: buf.to_owned_string(),
            }),
            Kind::ToolCall => Ok(ContentBlock::ToolCall {
                id: CallId(match &self.tool_call_id {
                    Some(id) => id.clone(),
                    None => alloc::format!("call-{}", self.index),
                }),
                name: self.tool_call_name.clone().unwrap_or_default(),
                arguments: buf.to_owned_string(),
            }),
            Kind::Other(kind) => Err(AssembleError::IncompleteBlock { kind: kind.clone() }),
        }
    }

    /// BB-2 by value: moves the buffers instead of copying them.
    fn into_block(self) -> Result<ContentBlock, AssembleError> {
        if let Some(block) = self.closed {
            return Ok(block);
        }
        match self.kind {
            Kind::Text => Ok(ContentBlock::Text {
                text: self.buf.into_string(),
            }),
            Kind::Reasoning => Ok(ContentBlock::Reasoning {
                text: self.buf.into_string(),
            }),
            Kind::ToolCall => Ok(ContentBlock::ToolCall {
                id: CallId(
                    self.tool_call_id
                        .unwrap_or_else(|| alloc::format!("call-{}", self.index)),
                ),
                name: self.tool_call_name.unwrap_or_default(),
                arguments: self.buf.into_string(),
            }),
            Kind::Other(kind) => Err(AssembleError::IncompleteBlock { kind }),
        }
    }

    /// BA-6: closes an open partial with `block`, which overrides whatever
    /// the deltas built (a copy of `block` costs no more than checking
    /// whether the deltas built exactly it).
    fn close(&mut self, block: ContentBlock) {
        self.closed = Some(block);
        self.release();
    }

    /// Frees the delta buffers, dead once the partial is closed (BA-7).
    fn release(&mut self) {
        self.buf = TextBuf::default();
        self.tool_call_id = None;
        self.tool_call_name = None;
        self.head = None;
    }
}

/// Folds a chunk stream into blocks (streaming.md 4).
///
/// ```
/// use dsh_core::{BlockAssembler, StreamChunk, ContentBlock};
/// let mut a = BlockAssembler::new();
/// a.push(&StreamChunk::TextDelta { index: 0, text: "Hi".into() });
/// assert_eq!(a.blocks().unwrap(), vec![ContentBlock::text("Hi")]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct BlockAssembler {
    /// Partials in first-seen order (BS-1, BS-2).
    partials: Vec<Partial>,
    /// Index → position in `partials`, sorted by index (a sorted `Vec`
    /// rather than a hash map: less code on a device, the same lookups).
    positions: Vec<(u64, usize)>,
    /// The hot partial's buffer, checked out of it while `hot` is not
    /// [`Hot::None`]: the fast path appends to a field of the assembler
    /// instead of reaching into `partials`.
    hot_buf: TextBuf,
    /// What the hot partial (`partials[hot_pos]`, block `hot_index`) takes on
    /// the fast path; [`Hot::None`] when there is none.
    hot: Hot,
    hot_index: u64,
    hot_pos: usize,
    usage: Option<TokenUsage>,
    finish: Option<FinishReason>,
    replay: Option<ReplayEnvelope>,
}

impl BlockAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Position of the partial for `index`, created with `kind` if new (BA-1).
    fn slot(&mut self, index: u64, kind: impl FnOnce() -> Kind) -> usize {
        if self.hot != Hot::None && self.hot_index == index {
            return self.hot_pos;
        }
        match self.positions.binary_search_by_key(&index, |&(i, _)| i) {
            Ok(at) => self.positions[at].1,
            Err(at) => {
                let pos = self.partials.len();
                self.partials.push(Partial::new(index, kind()));
                self.positions.insert(at, (index, pos));
                pos
            }
        }
    }

    /// Makes `partials[pos]` the hot partial (when it takes deltas), its
    /// buffer checked out into `hot_buf`.
    fn heat(&mut self, index: u64, pos: usize) {
        self.cool();
        if let Some(partial) = self.partials.get_mut(pos) {
            let hot = partial.hot();
            if hot != Hot::None {
                self.hot_buf = core::mem::take(&mut partial.buf);
                self.hot = hot;
                self.hot_index = index;
                self.hot_pos = pos;
            }
        }
    }

    /// Returns the hot buffer to its partial; no partial is hot after.
    fn cool(&mut self) {
        if self.hot != Hot::None {
            if let Some(partial) = self.partials.get_mut(self.hot_pos) {
                partial.buf = core::mem::take(&mut self.hot_buf);
            }
            self.hot = Hot::None;
        }
    }

    /// The buffer of `partials[pos]`: the hot buffer for the hot partial.
    fn buf_of<'a>(&'a self, pos: usize, partial: &'a Partial) -> &'a TextBuf {
        if self.hot != Hot::None && pos == self.hot_pos {
            &self.hot_buf
        } else {
            &partial.buf
        }
    }

    /// Applies one chunk (BA-1..BA-10). Nothing is rejected for bad ordering;
    /// the chunk set is closed in Rust, so BA-11 cannot arise here.
    // Always inlined: the hot path (a delta for the block that took the last
    // one) is a few instructions, and the call itself cost about a sixth of
    // a fold over 200k chunks (M1, `benches/assembler.rs`); every other
    // case is a call to an outlined function.
    #[inline(always)]
    pub fn push(&mut self, chunk: &StreamChunk) {
        match chunk {
            StreamChunk::TextDelta { index, text }
            | StreamChunk::ReasoningDelta { index, text } => {
                if self.hot == Hot::Text && self.hot_index == *index {
                    self.hot_buf.push(text);
                    return;
                }
                let is_text = matches!(chunk, StreamChunk::TextDelta { .. });
                self.text_delta(*index, text, is_text);
            }
            StreamChunk::ToolCallDelta {
                index,
                head,
                arguments_delta,
            } => {
                if self.hot == Hot::Tool
                    && self.hot_index == *index
                    && let Some(partial) = self.partials.get_mut(self.hot_pos)
                {
                    partial.tool_head(head);
                    self.hot_buf.push(arguments_delta);
                    return;
                }
                self.tool_call_delta(*index, head, arguments_delta);
            }
            _ => self.push_other(chunk),
        }
    }

    /// BA-4 off the fast path: a text or reasoning delta for a new, closed,
    /// other-kind or not-hot block.
    #[inline(never)]
    fn text_delta(&mut self, index: u64, text: &ChunkText, is_text: bool) {
        let pos = self.slot(index, || if is_text { Kind::Text } else { Kind::Reasoning });
        let Some(partial) = self.partials.get_mut(pos) else {
            return;
        };
        // Both delta kinds share the text buffer; a closed partial ignores.
        if partial.hot() == Hot::Text {
            self.heat(index, pos);
            self.hot_buf.push(text);
        }
    }

    /// BA-5 off the fast path.
    #[inline(never)]
    fn tool_call_delta(&mut self, index: u64, head: &ToolCallHead, arguments_delta: &ChunkText) {
        let pos = self.slot(index, || Kind::ToolCall);
        let Some(partial) = self.partials.get_mut(pos) else {
            return;
        };
        if partial.hot() == Hot::Tool {
            partial.tool_head(head);
            self.heat(index, pos);
            self.hot_buf.push(arguments_delta);
        }
    }

    /// `block-start`, `block-end`, `usage` and `finish`.
    #[inline(never)]
    fn push_other(&mut self, chunk: &StreamChunk) {
        match chunk {
            StreamChunk::BlockStart { index, block_type } => {
                // BA-3: a start for a known index is ignored entirely.
                self.slot(*index, || Kind::from_type(block_type));
            }
            StreamChunk::BlockEnd { index, block } => self.block_end(*index, block),
            StreamChunk::Usage { usage } => self.usage = Some(**usage),
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                // BA-9: finish and envelope are replaced together.
                self.finish = Some(FinishReason::clone(reason));
                self.replay = replay_state.as_deref().cloned();
            }
            // Deltas take the paths in `push`.
            StreamChunk::TextDelta { .. }
            | StreamChunk::ReasoningDelta { .. }
            | StreamChunk::ToolCallDelta { .. } => self.push(chunk),
        }
    }

    /// BA-6: the first close wins and overrides the deltas.
    fn block_end(&mut self, index: u64, block: &ContentBlock) {
        let pos = self.slot(index, || Kind::from_type(block.block_type()));
        if self.hot_pos == pos {
            self.cool();
        }
        if let Some(partial) = self.partials.get_mut(pos)
            && partial.closed.is_none()
        {
            partial.close(block.clone());
        }
    }

    /// [`push`](Self::push) taking the chunk by value: a `block-end` block
    /// and a `finish` reason are moved in instead of copied.
    pub fn push_owned(&mut self, chunk: StreamChunk) {
        match chunk {
            StreamChunk::BlockEnd { index, block } => {
                let pos = self.slot(index, || Kind::from_type(block.block_type()));
                if self.hot_pos == pos {
                    self.cool();
                }
                if let Some(partial) = self.partials.get_mut(pos)
                    && partial.closed.is_none()
                {
                    partial.close(*block);
                }
            }
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                self.finish = Some(*reason);
                self.replay = replay_state.map(|r| *r);
            }
            other => self.push(&other),
        }
    }

    /// Applies a run of chunks.
    pub fn extend<'a>(&mut self, chunks: impl IntoIterator<Item = &'a StreamChunk>) {
        for chunk in chunks {
            self.push(chunk);
        }
    }

    /// The stored usage (BU-1).
    pub fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// The finish reason, `{"kind":"stop"}` when none arrived (BF-1).
    pub fn finish(&self) -> FinishReason {
        self.finish.clone().unwrap_or(FinishReason::Stop)
    }

    /// BB-3: whether the finish kind is `max-tokens` (an irregular
    /// `max-tokens` reason kept verbatim counts too).
    fn truncated(&self) -> bool {
        self.finish
            .as_ref()
            .is_some_and(|f| matches!(f, FinishReason::MaxTokens) || f.kind() == "max-tokens")
    }

    /// The assembled blocks in first-seen order (BB-1..BB-7). Idempotent and
    /// free of side effects; may be called mid-stream.
    pub fn blocks(&self) -> Result<Vec<ContentBlock>, AssembleError> {
        let truncated = self.truncated();
        // BB-4: any incomplete block fails, before the BB-3 filter.
        let mut out = Vec::with_capacity(self.partials.len());
        for (pos, partial) in self.partials.iter().enumerate() {
            if partial.produced_is_tool_call()? && truncated {
                continue;
            }
            out.push(partial.produce(self.buf_of(pos, partial))?);
        }
        Ok(out)
    }

    /// [`blocks`](Self::blocks) by value: the buffers and closed blocks are
    /// moved out instead of copied.
    pub fn into_blocks(mut self) -> Result<Vec<ContentBlock>, AssembleError> {
        self.cool();
        let truncated = self.truncated();
        for partial in &self.partials {
            partial.produced_is_tool_call()?;
        }
        let mut out = Vec::with_capacity(self.partials.len());
        for partial in self.partials {
            let block = partial.into_block()?;
            if !(truncated && is_tool_call(&block)) {
                out.push(block);
            }
        }
        Ok(out)
    }

    /// The pruned replay envelope (RS-1).
    pub fn replay_state(&self) -> Result<Option<ReplayEnvelope>, AssembleError> {
        // BB-4 applies here too; `all` is one entry per partial.
        let tool_calls = self
            .partials
            .iter()
            .map(Partial::produced_is_tool_call)
            .collect::<Result<Vec<bool>, _>>()?;
        let Some(envelope) = &self.replay else {
            return Ok(None);
        };
        let Some(entries) = &envelope.blocks else {
            return Ok(Some(envelope.clone()));
        };
        if entries.len() != tool_calls.len() {
            return Ok(None);
        }
        if !self.truncated() || !tool_calls.contains(&true) {
            return Ok(Some(envelope.clone()));
        }
        let kept = tool_calls
            .iter()
            .zip(entries)
            .filter(|(is_call, _)| !**is_call)
            .map(|(_, e)| e.clone())
            .collect();
        Ok(Some(ReplayEnvelope {
            response: envelope.response.clone(),
            blocks: Some(kept),
        }))
    }

    /// An assistant message of the assembled blocks (MSG-1, MSG-2). The id
    /// comes from the caller (the core has no randomness); the source
    /// defaults to `{"kind":"plugin","plugin":"dsh-llm/assembler"}`.
    pub fn message(
        &self,
        id: impl Into<MessageId>,
        source: Option<MessageSource>,
    ) -> Result<Message, AssembleError> {
        let content = self.blocks()?;
        let source = source.unwrap_or_else(|| MessageSource::plugin(ASSEMBLER_SOURCE_PLUGIN));
        Ok(Message::model(id, content, source))
    }

    /// The safe prefix of an interrupted stream (IB-1..IB-4): non-blank text
    /// and reasoning only, never an error.
    pub fn interrupted_blocks(&self) -> Vec<ContentBlock> {
        self.partials
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                // IB-1: the closed block's type, else the kind; IB-2: keep
                // text and reasoning only.
                let effective = match &p.closed {
                    Some(block) => block.block_type(),
                    None => match p.kind {
                        Kind::Text => "text",
                        Kind::Reasoning => "reasoning",
                        _ => "",
                    },
                };
                matches!(effective, "text" | "reasoning")
            })
            .filter_map(|(pos, p)| p.produce(self.buf_of(pos, p)).ok())
            .filter(|b| !is_blank(b))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use serde_json::json;

    fn assemble(lines: &str) -> BlockAssembler {
        let mut a = BlockAssembler::new();
        for line in lines.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let chunk: StreamChunk = serde_json::from_str(line).expect("test chunk parses");
            a.push(&chunk);
        }
        a
    }

    fn blocks_json(a: &BlockAssembler) -> serde_json::Value {
        serde_json::to_value(a.blocks().expect("assembles")).unwrap()
    }

    fn finish_json(a: &BlockAssembler) -> serde_json::Value {
        serde_json::to_value(a.finish()).unwrap()
    }

    #[test]
    fn av01_plain_text_with_start_and_end() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"text-delta","index":0,"text":"Hi"}
            {"type":"text-delta","index":0,"text":" there"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"Hi there"}}
            {"type":"usage","usage":{"inputTokens":12,"outputTokens":2}}
            {"type":"finish","reason":{"kind":"stop"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"Hi there"}]));
        assert_eq!(finish_json(&a), json!({"kind":"stop"}));
        assert_eq!(
            serde_json::to_value(a.usage()).unwrap(),
            json!({"inputTokens":12,"outputTokens":2})
        );
    }

    #[test]
    fn av02_block_end_overrides_deltas() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"text-delta","index":0,"text":"abc"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"XYZ"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"XYZ"}]));
        assert_eq!(finish_json(&a), json!({"kind":"stop"}));
        assert!(a.usage().is_none());
    }

    #[test]
    fn av03_deltas_only() {
        let a = assemble(
            r#"{"type":"reasoning-delta","index":3,"text":"a"}
            {"type":"reasoning-delta","index":3,"text":"b"}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"reasoning","text":"ab"}]));
        assert_eq!(finish_json(&a), json!({"kind":"stop"}));
        assert!(a.usage().is_none());
    }

    #[test]
    fn av04_order_is_first_seen() {
        let a = assemble(
            r#"{"type":"text-delta","index":7,"text":"first seen"}
            {"type":"text-delta","index":2,"text":"second seen"}
            {"type":"text-delta","index":7,"text":"!"}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"text","text":"first seen!"},{"type":"text","text":"second seen"}])
        );
    }

    #[test]
    fn av05_interleaved_open_blocks() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"reasoning"}
            {"type":"block-start","index":1,"blockType":"text"}
            {"type":"reasoning-delta","index":0,"text":"r1"}
            {"type":"text-delta","index":1,"text":"t1"}
            {"type":"reasoning-delta","index":0,"text":"r2"}
            {"type":"text-delta","index":1,"text":"t2"}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"reasoning","text":"r1r2"},{"type":"text","text":"t1t2"}])
        );
    }

    #[test]
    fn av06_delta_after_end_is_ignored() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"text-delta","index":0,"text":"ok"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"ok"}}
            {"type":"text-delta","index":0,"text":" more"}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"ok"}]));
    }

    #[test]
    fn av07_closed_index_cannot_reopen() {
        let a = assemble(
            r#"{"type":"block-end","index":0,"block":{"type":"text","text":"a"}}
            {"type":"block-start","index":0,"blockType":"reasoning"}
            {"type":"reasoning-delta","index":0,"text":"b"}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"a"}]));
    }

    #[test]
    fn av08_first_close_wins() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"one"}}
            {"type":"block-end","index":0,"block":{"type":"text","text":"two"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"one"}]));
    }

    #[test]
    fn av09_name_only_on_first_delta() {
        let a = assemble(
            r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"read","argumentsDelta":"{\"p\":"}
            {"type":"tool-call-delta","index":0,"id":"c1","argumentsDelta":"\"x\"}"}
            {"type":"finish","reason":{"kind":"tool-calls"}}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"tool-call","id":"c1","name":"read","arguments":"{\"p\":\"x\"}"}])
        );
        assert_eq!(finish_json(&a), json!({"kind":"tool-calls"}));
    }

    #[test]
    fn av10_id_overwritten_empty_name_keeps_name() {
        let a = assemble(
            r#"{"type":"tool-call-delta","index":0,"id":"a","name":"f","argumentsDelta":""}
            {"type":"tool-call-delta","index":0,"id":"b","name":"","argumentsDelta":"{}"}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"tool-call","id":"b","name":"f","arguments":"{}"}])
        );
    }

    #[test]
    fn av11_open_tool_call_gets_synthesized_id() {
        let a = assemble(
            r#"{"type":"block-start","index":4,"blockType":"tool-call"}
            {"type":"finish","reason":{"kind":"tool-calls"}}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"tool-call","id":"call-4","name":"","arguments":""}])
        );
    }

    #[test]
    fn av12_max_tokens_drops_every_tool_call() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"text-delta","index":0,"text":"partial"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"partial"}}
            {"type":"block-start","index":1,"blockType":"tool-call"}
            {"type":"tool-call-delta","index":1,"id":"c1","name":"ls","argumentsDelta":"{}"}
            {"type":"block-end","index":1,"block":{"type":"tool-call","id":"c1","name":"ls","arguments":"{}"}}
            {"type":"block-start","index":2,"blockType":"tool-call"}
            {"type":"tool-call-delta","index":2,"id":"c2","name":"cat","argumentsDelta":"{\"a"}
            {"type":"usage","usage":{"inputTokens":5,"outputTokens":9}}
            {"type":"finish","reason":{"kind":"max-tokens"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"partial"}]));
        assert_eq!(finish_json(&a), json!({"kind":"max-tokens"}));
        assert_eq!(
            serde_json::to_value(a.usage()).unwrap(),
            json!({"inputTokens":5,"outputTokens":9})
        );
    }

    #[test]
    fn av13_truncation_uses_produced_type() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"block-end","index":0,"block":{"type":"tool-call","id":"z","name":"n","arguments":"{}"}}
            {"type":"finish","reason":{"kind":"max-tokens"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([]));
        let mirror = assemble(
            r#"{"type":"block-start","index":0,"blockType":"tool-call"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"t"}}
            {"type":"finish","reason":{"kind":"max-tokens"}}"#,
        );
        assert_eq!(blocks_json(&mirror), json!([{"type":"text","text":"t"}]));
    }

    #[test]
    fn av14_unknown_block_closed_passes_open_fails() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"video"}
            {"type":"block-end","index":0,"block":{"type":"video","url":"x"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"video","url":"x"}]));
        let open = assemble(r#"{"type":"block-start","index":0,"blockType":"video"}"#);
        let expected = "cannot assemble incomplete block of type \"video\"";
        assert_eq!(open.blocks().unwrap_err().to_string(), expected);
        assert_eq!(open.replay_state().unwrap_err().to_string(), expected);
        assert_eq!(open.message("m", None).unwrap_err().to_string(), expected);
        for kind in ["tool-result", "image"] {
            let line = alloc::format!(r#"{{"type":"block-start","index":0,"blockType":"{kind}"}}"#);
            let a = assemble(&line);
            assert_eq!(
                a.blocks().unwrap_err(),
                AssembleError::IncompleteBlock { kind: kind.into() }
            );
        }
        // BB-4: the error comes before the max-tokens filter.
        let truncated = assemble(
            r#"{"type":"block-start","index":0,"blockType":"video"}
            {"type":"finish","reason":{"kind":"max-tokens"}}"#,
        );
        assert!(truncated.blocks().is_err());
    }

    #[test]
    fn av15_kind_fixed_by_first_chunk() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"reasoning-delta","index":0,"text":"x"}
            {"type":"block-start","index":0,"blockType":"reasoning"}
            {"type":"text-delta","index":0,"text":"y"}
            {"type":"text-delta","index":1,"text":"t"}
            {"type":"tool-call-delta","index":1,"id":"c","name":"n","argumentsDelta":"{}"}
            {"type":"tool-call-delta","index":2,"id":"d","name":"m","argumentsDelta":"{}"}
            {"type":"text-delta","index":2,"text":"ignored"}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"text","text":"xy"},{"type":"text","text":"t"},{"type":"tool-call","id":"d","name":"m","arguments":"{}"}])
        );
    }

    #[test]
    fn av16_last_usage_and_finish_win() {
        let a = assemble(
            r#"{"type":"text-delta","index":0,"text":"a"}
            {"type":"usage","usage":{"inputTokens":1,"outputTokens":1}}
            {"type":"finish","reason":{"kind":"stop"}}
            {"type":"text-delta","index":0,"text":"b"}
            {"type":"usage","usage":{"inputTokens":2,"outputTokens":2}}
            {"type":"finish","reason":{"kind":"tool-calls"}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"ab"}]));
        assert_eq!(finish_json(&a), json!({"kind":"tool-calls"}));
        assert_eq!(
            serde_json::to_value(a.usage()).unwrap(),
            json!({"inputTokens":2,"outputTokens":2})
        );
    }

    #[test]
    fn av17_error_finish_keeps_partial_blocks() {
        let a = assemble(
            r#"{"type":"text-delta","index":0,"text":"half"}
            {"type":"finish","reason":{"kind":"error","failure":{"message":"boom","code":"TRANSPORT"}}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"half"}]));
        assert_eq!(
            finish_json(&a),
            json!({"kind":"error","failure":{"message":"boom","code":"TRANSPORT"}})
        );
    }

    #[test]
    fn av18_replay_entries_pruned_with_drop() {
        let a = assemble(
            r#"{"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{\"x"}}
            {"type":"block-end","index":1,"block":{"type":"text","text":"t"}}
            {"type":"finish","reason":{"kind":"max-tokens"},"replayState":{"response":{"r":1},"blocks":["m0","m1"]}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"t"}]));
        assert_eq!(
            serde_json::to_value(a.replay_state().unwrap()).unwrap(),
            json!({"response":{"r":1},"blocks":["m1"]})
        );
    }

    #[test]
    fn av19_misaligned_replay_entries_discarded() {
        let a = assemble(
            r#"{"type":"text-delta","index":0,"text":"t"}
            {"type":"finish","reason":{"kind":"stop"},"replayState":{"response":{"r":1},"blocks":["m0","m1"]}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"t"}]));
        assert_eq!(a.replay_state().unwrap(), None);
    }

    #[test]
    fn av20_envelope_without_blocks_passes_through() {
        let a = assemble(
            r#"{"type":"text-delta","index":0,"text":"t"}
            {"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{}"}
            {"type":"finish","reason":{"kind":"max-tokens"},"replayState":{"response":{"r":2}}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"t"}]));
        assert_eq!(
            serde_json::to_value(a.replay_state().unwrap()).unwrap(),
            json!({"response":{"r":2}})
        );
    }

    #[test]
    fn av21_later_finish_clears_replay_state() {
        let a = assemble(
            r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"f","argumentsDelta":"{}"}
            {"type":"finish","reason":{"kind":"stop"},"replayState":{"response":1}}
            {"type":"finish","reason":{"kind":"stop"}}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"tool-call","id":"c1","name":"f","arguments":"{}"}])
        );
        assert_eq!(a.replay_state().unwrap(), None);
    }

    #[test]
    fn av22_empty_stream() {
        let a = BlockAssembler::new();
        assert_eq!(blocks_json(&a), json!([]));
        assert_eq!(finish_json(&a), json!({"kind":"stop"}));
        assert!(a.usage().is_none());
        let m = a.message("m", None).unwrap();
        assert!(m.content.is_empty());
        assert_eq!(
            serde_json::to_value(&m.source).unwrap(),
            json!({"kind":"plugin","plugin":"dsh-llm/assembler"})
        );
        assert_eq!(m.role, crate::Role::Assistant);
    }

    #[test]
    fn av23_empty_id_kept_and_empty_block_kept() {
        let a = assemble(
            r#"{"type":"tool-call-delta","index":0,"id":"","argumentsDelta":"{}"}
            {"type":"block-start","index":1,"blockType":"text"}
            {"type":"finish","reason":{"kind":"stop"}}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"tool-call","id":"","name":"","arguments":"{}"},{"type":"text","text":""}])
        );
    }

    #[test]
    fn av24_interrupted_blocks() {
        let a = assemble(
            r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"text-delta","index":0,"text":" \n\t"}
            {"type":"block-start","index":1,"blockType":"mystery"}
            {"type":"reasoning-delta","index":2,"text":"plan"}
            {"type":"tool-call-delta","index":3,"id":"c","name":"n","argumentsDelta":"{}"}
            {"type":"block-end","index":4,"block":{"type":"text","text":"closed"}}"#,
        );
        assert_eq!(
            a.interrupted_blocks(),
            vec![
                ContentBlock::reasoning("plan"),
                ContentBlock::text("closed")
            ]
        );
        assert_eq!(
            a.blocks().unwrap_err().to_string(),
            "cannot assemble incomplete block of type \"mystery\""
        );
    }

    #[test]
    fn blocks_is_idempotent_mid_stream() {
        let mut a = assemble(r#"{"type":"text-delta","index":0,"text":"a"}"#);
        let first = a.blocks().unwrap();
        assert_eq!(a.blocks().unwrap(), first);
        a.push(&StreamChunk::TextDelta {
            index: 0,
            text: "b".into(),
        });
        assert_eq!(a.blocks().unwrap(), vec![ContentBlock::text("ab")]);
    }

    #[test]
    fn bb3_drops_by_produced_type_even_for_irregular_blocks() {
        // A tool-call block with an extra key is kept verbatim (C-7) but its
        // `type` is still `tool-call`; an irregular max-tokens reason (FR-2)
        // still has kind `max-tokens`.
        let a = assemble(
            r#"{"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{}","extra":true}}
            {"type":"text-delta","index":1,"text":"t"}
            {"type":"finish","reason":{"kind":"max-tokens","note":"cut"},"replayState":{"response":0,"blocks":["a","b"]}}"#,
        );
        assert_eq!(blocks_json(&a), json!([{"type":"text","text":"t"}]));
        assert_eq!(
            serde_json::to_value(a.replay_state().unwrap()).unwrap(),
            json!({"response":0,"blocks":["b"]})
        );
        assert_eq!(finish_json(&a), json!({"kind":"max-tokens","note":"cut"}));
    }

    #[test]
    fn ib3_blank_means_js_trim_whitespace() {
        // JS `trim` strips U+FEFF but not U+0085 (NEL); Rust's `trim` is the
        // other way round.
        let a = assemble(
            r#"{"type":"text-delta","index":0,"text":"\ufeff \u3000"}
            {"type":"text-delta","index":1,"text":"\u0085"}
            {"type":"block-end","index":2,"block":{"type":"text","text":"\u2028"}}
            {"type":"block-end","index":3,"block":{"type":"text","text":"kept","extra":1}}
            {"type":"block-end","index":4,"block":{"type":"reasoning","text":"","extra":1}}"#,
        );
        assert_eq!(
            serde_json::to_value(a.interrupted_blocks()).unwrap(),
            json!([{"type":"text","text":"\u{85}"},{"type":"text","text":"kept","extra":1}])
        );
    }

    #[test]
    fn a_hot_block_follows_interleaving_and_closing() {
        // Deltas alternate between blocks, a block is closed while hot, and a
        // delta of the other family hits the hot block (BA-4, BA-5, BA-7).
        let a = assemble(
            r#"{"type":"text-delta","index":0,"text":"a"}
            {"type":"text-delta","index":0,"text":"b"}
            {"type":"tool-call-delta","index":0,"id":"x","name":"n","argumentsDelta":"{}"}
            {"type":"tool-call-delta","index":1,"id":"c","name":"f","argumentsDelta":"{"}
            {"type":"text-delta","index":1,"text":"lost"}
            {"type":"reasoning-delta","index":0,"text":"c"}
            {"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"}"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"abc"}}
            {"type":"text-delta","index":0,"text":"late"}
            {"type":"tool-call-delta","index":1,"id":"d","name":"","argumentsDelta":""}
            {"type":"block-end","index":1,"block":{"type":"tool-call","id":"d","name":"f","arguments":"{}"}}
            {"type":"tool-call-delta","index":1,"id":"e","argumentsDelta":"x"}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([{"type":"text","text":"abc"},{"type":"tool-call","id":"d","name":"f","arguments":"{}"}])
        );
    }

    #[test]
    fn a_block_end_that_disagrees_with_the_deltas_wins() {
        // BA-6 for every kind; the close must not reuse the delta buffers.
        let a = assemble(
            r#"{"type":"reasoning-delta","index":0,"text":"r"}
            {"type":"block-end","index":0,"block":{"type":"reasoning","text":"R"}}
            {"type":"tool-call-delta","index":1,"id":"c","name":"f","argumentsDelta":"{}"}
            {"type":"block-end","index":1,"block":{"type":"tool-call","id":"c","name":"g","arguments":"{}"}}
            {"type":"tool-call-delta","index":2,"id":"c","argumentsDelta":"{}"}
            {"type":"block-end","index":2,"block":{"type":"tool-call","id":"c","name":"","arguments":"{}"}}
            {"type":"text-delta","index":3,"text":"t"}
            {"type":"block-end","index":3,"block":{"type":"reasoning","text":"t"}}"#,
        );
        assert_eq!(
            blocks_json(&a),
            json!([
                {"type":"reasoning","text":"R"},
                {"type":"tool-call","id":"c","name":"g","arguments":"{}"},
                {"type":"tool-call","id":"c","name":"","arguments":"{}"},
                {"type":"reasoning","text":"t"}
            ])
        );
    }

    #[test]
    fn owned_variants_match_the_borrowed_ones() {
        let lines = r#"{"type":"block-start","index":0,"blockType":"text"}
            {"type":"text-delta","index":0,"text":"ab"}
            {"type":"block-end","index":0,"block":{"type":"text","text":"ab"}}
            {"type":"block-end","index":0,"block":{"type":"text","text":"second close"}}
            {"type":"tool-call-delta","index":1,"id":"c","name":"f","argumentsDelta":"{"}
            {"type":"reasoning-delta","index":2,"text":"r"}
            {"type":"block-end","index":3,"block":{"type":"video","url":"u"}}
            {"type":"block-start","index":4,"blockType":"tool-call"}
            {"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}
            {"type":"finish","reason":{"kind":"stop"},"replayState":{"response":1}}"#;
        let borrowed = assemble(lines);
        let mut owned = BlockAssembler::new();
        for line in lines.lines().map(str::trim) {
            owned.push_owned(serde_json::from_str(line).unwrap());
        }
        let expected = json!([
            {"type":"text","text":"ab"},
            {"type":"tool-call","id":"c","name":"f","arguments":"{"},
            {"type":"reasoning","text":"r"},
            {"type":"video","url":"u"},
            {"type":"tool-call","id":"call-4","name":"","arguments":""}
        ]);
        assert_eq!(blocks_json(&borrowed), expected);
        assert_eq!(blocks_json(&owned), expected);
        assert_eq!(owned.finish(), borrowed.finish());
        assert_eq!(owned.usage(), borrowed.usage());
        assert_eq!(owned.replay_state(), borrowed.replay_state());
        assert_eq!(
            serde_json::to_value(owned.into_blocks().unwrap()).unwrap(),
            expected
        );
        // into_blocks applies BB-3 and BB-4 like blocks().
        let mut truncated = borrowed.clone();
        truncated.push(&StreamChunk::finish(FinishReason::MaxTokens));
        let kept = json!([{"type":"text","text":"ab"},{"type":"reasoning","text":"r"},{"type":"video","url":"u"}]);
        assert_eq!(blocks_json(&truncated), kept);
        assert_eq!(
            serde_json::to_value(truncated.into_blocks().unwrap()).unwrap(),
            kept
        );
        let open = assemble(
            r#"{"type":"text-delta","index":0,"text":"a"}
            {"type":"block-start","index":1,"blockType":"image"}
            {"type":"finish","reason":{"kind":"max-tokens"}}"#,
        );
        assert_eq!(
            open.into_blocks().unwrap_err(),
            AssembleError::IncompleteBlock {
                kind: "image".into()
            }
        );
    }

    #[test]
    fn ba4_fragments_of_every_length_concatenate_exactly() {
        // The fixed-size inline copy must cut each fragment at its length:
        // every length around the inline capacity, multi-byte characters,
        // text and tool-call buffers.
        let mut a = BlockAssembler::new();
        let mut text = String::new();
        let mut args = String::new();
        let head = ToolCallHead::new("c", Some("f"));
        let ascii = (0..=40).map(|n| (b'a'..=b'z').cycle().take(n).map(char::from).collect());
        let multi = (0..12).map(|n| "é🙂z".chars().cycle().take(n).collect());
        for fragment in ascii.chain(multi).collect::<Vec<String>>() {
            a.push(&StreamChunk::text_delta(0, &fragment));
            text.push_str(&fragment);
            a.push(&StreamChunk::ToolCallDelta {
                index: 1,
                head: head.clone(),
                arguments_delta: ChunkText::new(&fragment),
            });
            args.push_str(&fragment);
        }
        assert!(text.len() > 400);
        assert_eq!(
            a.blocks().unwrap(),
            vec![
                ContentBlock::text(text.as_str()),
                ContentBlock::tool_call("c", "f", args.as_str())
            ]
        );
    }

    #[test]
    fn message_uses_the_given_model_source() {
        let a = assemble(r#"{"type":"text-delta","index":0,"text":"a"}"#);
        let m = a
            .message("id-1", Some(MessageSource::model("p", "m")))
            .unwrap();
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"role":"assistant","content":[{"type":"text","text":"a"}],"source":{"kind":"model","provider":"p","model":"m"},"id":"id-1"}"#
        );
    }
}
