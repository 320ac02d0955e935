//! The `BlockAssembler` (streaming.md 4): the one shared fold from a chunk
//! sequence to content blocks, usage, finish reason, replay state and an
//! assistant message.
//!
//! It is deliberately lenient: streams that break the grammar of 2.5 are
//! folded by the BA rules instead of being rejected (use
//! [`StreamValidator`](crate::StreamValidator) to check a stream). Memory is
//! bounded by the input: chunks aimed at a closed block are dropped (BA-7).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use hashbrown::HashMap;

use crate::chunk::{FinishReason, ReplayEnvelope, StreamChunk, TokenUsage};
use crate::content::ContentBlock;
use crate::ids::{CallId, MessageId};
use crate::message::{Message, MessageSource};

/// The plugin name of the default assembler message source (MSG-1).
pub const ASSEMBLER_SOURCE_PLUGIN: &str = "dsh-llm/assembler";

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
}

/// One block being assembled (BS-1).
#[derive(Clone, Debug)]
struct Partial {
    index: u64,
    kind: Kind,
    text: String,
    tool_call_id: Option<String>,
    tool_call_name: Option<String>,
    args: String,
    closed: Option<ContentBlock>,
}

impl Partial {
    fn new(index: u64, kind: Kind) -> Self {
        Partial {
            index,
            kind,
            text: String::new(),
            tool_call_id: None,
            tool_call_name: None,
            args: String::new(),
            closed: None,
        }
    }

    /// BB-2: the block this partial produces.
    fn produce(&self) -> Result<ContentBlock, AssembleError> {
        if let Some(block) = &self.closed {
            return Ok(block.clone());
        }
        match &self.kind {
            Kind::Text => Ok(ContentBlock::Text {
                text: self.text.clone(),
            }),
            Kind::Reasoning => Ok(ContentBlock::Reasoning {
                text: self.text.clone(),
            }),
            Kind::ToolCall => Ok(ContentBlock::ToolCall {
                id: CallId(match &self.tool_call_id {
                    Some(id) => id.clone(),
                    None => alloc::format!("call-{}", self.index),
                }),
                name: self.tool_call_name.clone().unwrap_or_default(),
                arguments: self.args.clone(),
            }),
            Kind::Other(kind) => Err(AssembleError::IncompleteBlock { kind: kind.clone() }),
        }
    }

    /// IB-1: the closed block's type, else the partial's kind.
    fn effective_is_textual(&self) -> bool {
        match &self.closed {
            Some(block) => matches!(
                block,
                ContentBlock::Text { .. } | ContentBlock::Reasoning { .. }
            ),
            None => matches!(self.kind, Kind::Text | Kind::Reasoning),
        }
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
    /// Partials in first-seen order (BS-2).
    partials: Vec<Partial>,
    /// Index → position in `partials` (BS-1).
    positions: HashMap<u64, usize>,
    /// The last index looked up, and its position: consecutive deltas almost
    /// always target the same block.
    last: Option<(u64, usize)>,
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
    #[inline]
    fn slot(&mut self, index: u64, kind: impl FnOnce() -> Kind) -> (usize, bool) {
        if let Some((last_index, pos)) = self.last {
            if last_index == index {
                return (pos, false);
            }
        }
        let (pos, created) = match self.positions.get(&index) {
            Some(&pos) => (pos, false),
            None => {
                let pos = self.partials.len();
                self.partials.push(Partial::new(index, kind()));
                self.positions.insert(index, pos);
                (pos, true)
            }
        };
        self.last = Some((index, pos));
        (pos, created)
    }

    /// Applies one chunk (BA-1..BA-10). Nothing is rejected for bad ordering;
    /// the chunk set is closed in Rust, so BA-11 cannot arise here.
    pub fn push(&mut self, chunk: &StreamChunk) {
        match chunk {
            StreamChunk::BlockStart { index, block_type } => {
                // BA-3: a start for a known index is ignored entirely.
                self.slot(*index, || Kind::from_type(block_type));
            }
            StreamChunk::TextDelta { index, text }
            | StreamChunk::ReasoningDelta { index, text } => {
                let is_text = matches!(chunk, StreamChunk::TextDelta { .. });
                let (pos, _) =
                    self.slot(
                        *index,
                        || {
                            if is_text { Kind::Text } else { Kind::Reasoning }
                        },
                    );
                let partial = &mut self.partials[pos];
                // BA-4: both delta kinds share the text buffer; closed ignores.
                if partial.closed.is_none() {
                    partial.text.push_str(text);
                }
            }
            StreamChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let (pos, _) = self.slot(*index, || Kind::ToolCall);
                let partial = &mut self.partials[pos];
                if partial.closed.is_none() {
                    // BA-5: the latest id wins, "" included.
                    match &mut partial.tool_call_id {
                        Some(current) if current == id => {}
                        slot => *slot = Some(id.clone()),
                    }
                    if let Some(name) = name.as_deref().filter(|n| !n.is_empty()) {
                        if partial.tool_call_name.as_deref() != Some(name) {
                            partial.tool_call_name = Some(String::from(name));
                        }
                    }
                    partial.args.push_str(arguments_delta);
                }
            }
            StreamChunk::BlockEnd { index, block } => {
                let (pos, _) = self.slot(*index, || Kind::from_type(block.block_type()));
                let partial = &mut self.partials[pos];
                // BA-6: the first close wins and overrides the deltas.
                if partial.closed.is_none() {
                    partial.closed = Some(block.clone());
                    // The buffers are dead from here on (BA-7); free them.
                    partial.text = String::new();
                    partial.args = String::new();
                }
            }
            StreamChunk::Usage { usage } => self.usage = Some(*usage),
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                // BA-9: finish and envelope are replaced together.
                self.finish = Some(reason.clone());
                self.replay = replay_state.clone();
            }
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

    /// Whether the stored finish (or the default) is `max-tokens`.
    fn truncated(&self) -> bool {
        matches!(self.finish, Some(FinishReason::MaxTokens))
    }

    /// Whether any chunk has mentioned a block index.
    pub fn has_blocks(&self) -> bool {
        !self.partials.is_empty()
    }

    /// All produced blocks before the BB-3 filter (BB-4: errors come first).
    fn produce_all(&self) -> Result<Vec<ContentBlock>, AssembleError> {
        self.partials.iter().map(Partial::produce).collect()
    }

    /// The assembled blocks in first-seen order (BB-1..BB-7). Idempotent and
    /// free of side effects; may be called mid-stream.
    pub fn blocks(&self) -> Result<Vec<ContentBlock>, AssembleError> {
        let mut all = self.produce_all()?;
        if self.truncated() {
            // BB-3: drop by produced type.
            all.retain(|b| !matches!(b, ContentBlock::ToolCall { .. }));
        }
        Ok(all)
    }

    /// The pruned replay envelope (RS-1).
    pub fn replay_state(&self) -> Result<Option<ReplayEnvelope>, AssembleError> {
        let all = self.produce_all()?;
        let Some(envelope) = &self.replay else {
            return Ok(None);
        };
        let Some(entries) = &envelope.blocks else {
            return Ok(Some(envelope.clone()));
        };
        if entries.len() != all.len() {
            return Ok(None);
        }
        if !self.truncated()
            || !all
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolCall { .. }))
        {
            return Ok(Some(envelope.clone()));
        }
        let kept = all
            .iter()
            .zip(entries)
            .filter(|(b, _)| !matches!(b, ContentBlock::ToolCall { .. }))
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
            .filter(|p| p.effective_is_textual())
            .filter_map(|p| p.produce().ok())
            .filter(|b| b.as_text().is_some_and(|t| !t.trim().is_empty()))
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
