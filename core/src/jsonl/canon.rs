//! Canonical lines read without serde.
//!
//! Most lines of a log are exactly what `write::write_event_json` writes: the
//! E9 envelope, the payload keys in their written order, integers without a
//! sign or leading zero where they cannot have one, strings with only the
//! escapes the writer uses, no whitespace. For the common event types this
//! module reads such a line with a template that mirrors the writer, builds
//! the typed event directly (no `Value` trees), and needs no check that the
//! event writes back identically: a template accepts only what the writer
//! produces. Anything else returns `None` and takes the general path, which
//! reads every shape and keeps the source text when it must.
//!
//! `template_agrees` checks the mirror: for a line a template accepts, the
//! general path must build the same event and the writer must give the line
//! back.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::chunk::{FinishReason, StreamChunk, TokenUsage};
use crate::content::ContentBlock;
use crate::ids::{CallId, MessageId};
use crate::json::{JsonObject, MAX_SAFE_INTEGER};
use crate::message::{Message, MessageKey, MessageSource, Role};
use crate::session::{
    AssistantChunk, AssistantMessage, EventData, Extra, SessionEvent, Step, SurfaceOp, ToolCall,
    ToolResult, TurnEnd, TurnEndReason, TurnStart,
};
use crate::text::ToolCallHead;

use super::decode::Cursor;

/// The largest chunk index the templates read (as the delta template).
const MAX_INDEX: u64 = u32::MAX as u64;

impl Cursor<'_> {
    /// A safe non-negative integer (turn, step, seq).
    fn safe(&mut self) -> Option<u64> {
        self.uint(MAX_SAFE_INTEGER)
    }

    /// A JSON string at the cursor, as the writer escapes it.
    fn string(&mut self) -> Option<String> {
        self.lit(b"\"")?;
        let start = self.i;
        if let Some(plain) = self.plain_str() {
            return Some(String::from(plain));
        }
        self.i = start;
        let mut out = String::new();
        self.canonical_str(&mut out)?;
        // Exact capacity, as a serde read gives (a shrink in place).
        out.shrink_to_fit();
        Some(out)
    }

    /// `{"kind":"user"}`, `{"kind":"model","provider":…,"model":…}` or
    /// `{"kind":"tool","callId":…}`.
    fn source(&mut self) -> Option<MessageSource> {
        self.lit(b"{\"kind\":\"")?;
        let source = if self.lit(b"user\"").is_some() {
            MessageSource::User
        } else if self.lit(b"model\",\"provider\":").is_some() {
            let provider = self.string()?;
            self.lit(b",\"model\":")?;
            let model = self.string()?;
            MessageSource::Model {
                provider,
                model,
                replay_state: None,
            }
        } else {
            self.lit(b"tool\",\"callId\":")?;
            MessageSource::Tool {
                call_id: CallId(self.string()?),
            }
        };
        self.lit(b"}")?;
        Some(source)
    }

    /// A text, reasoning or tool-call block, or (unless `nested`) a
    /// tool-result block whose content holds only those.
    fn block(&mut self, nested: bool) -> Option<ContentBlock> {
        self.lit(b"{\"type\":\"")?;
        let block = if self.lit(b"text\",\"text\":").is_some() {
            ContentBlock::Text {
                text: self.string()?,
            }
        } else if self.lit(b"reasoning\",\"text\":").is_some() {
            ContentBlock::Reasoning {
                text: self.string()?,
            }
        } else if self.lit(b"tool-call\",\"id\":").is_some() {
            let id = CallId(self.string()?);
            self.lit(b",\"name\":")?;
            let name = self.string()?;
            self.lit(b",\"arguments\":")?;
            let arguments = self.string()?;
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            }
        } else if !nested {
            self.lit(b"tool-result\",\"toolCallId\":")?;
            let tool_call_id = CallId(self.string()?);
            self.lit(b",\"content\":")?;
            let content = self.blocks(true)?;
            let is_error = if self.lit(b",\"isError\":true").is_some() {
                Some(true)
            } else if self.lit(b",\"isError\":false").is_some() {
                Some(false)
            } else {
                None
            };
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            }
        } else {
            return None;
        };
        self.lit(b"}")?;
        Some(block)
    }

    /// `[block,…]`.
    fn blocks(&mut self, nested: bool) -> Option<Vec<ContentBlock>> {
        self.lit(b"[")?;
        let mut blocks = Vec::new();
        if self.lit(b"]").is_some() {
            return Some(blocks);
        }
        loop {
            blocks.push(self.block(nested)?);
            if self.lit(b"]").is_some() {
                blocks.shrink_to_fit();
                return Some(blocks);
            }
            self.lit(b",")?;
        }
    }

    /// A message of exactly the four fields, in any order (kept).
    fn message(&mut self) -> Option<Message> {
        self.lit(b"{")?;
        let (mut id, mut role, mut content, mut source) = (None, None, None, None);
        let mut order = [MessageKey::Id; 4];
        for (n, slot) in order.iter_mut().enumerate() {
            if n > 0 {
                self.lit(b",")?;
            }
            if id.is_none() && self.lit(b"\"id\":").is_some() {
                id = Some(MessageId(self.string()?));
                *slot = MessageKey::Id;
            } else if role.is_none() && self.lit(b"\"role\":\"").is_some() {
                role = Some(if self.lit(b"user\"").is_some() {
                    Role::User
                } else if self.lit(b"assistant\"").is_some() {
                    Role::Assistant
                } else {
                    self.lit(b"system\"")?;
                    Role::System
                });
                *slot = MessageKey::Role;
            } else if content.is_none() && self.lit(b"\"content\":").is_some() {
                content = Some(self.blocks(false)?);
                *slot = MessageKey::Content;
            } else if source.is_none() && self.lit(b"\"source\":").is_some() {
                source = Some(self.source()?);
                *slot = MessageKey::Source;
            } else {
                return None;
            }
        }
        self.lit(b"}")?;
        Some(Message {
            id: id?,
            role: role?,
            content: content?,
            source: source?,
            extra: JsonObject::new(),
            key_order: order,
        })
    }

    /// `{"inputTokens":…,"outputTokens":…}` and the optional counts, in
    /// their written order.
    fn usage(&mut self) -> Option<TokenUsage> {
        self.lit(b"{\"inputTokens\":")?;
        let input_tokens = self.int()?;
        self.lit(b",\"outputTokens\":")?;
        let output_tokens = self.int()?;
        let opt = |c: &mut Self, key: &[u8]| -> Option<Option<i64>> {
            match c.lit(key) {
                Some(()) => c.int().map(Some),
                None => Some(None),
            }
        };
        let cache_read_tokens = opt(self, b",\"cacheReadTokens\":")?;
        let cache_write_tokens = opt(self, b",\"cacheWriteTokens\":")?;
        let reasoning_tokens = opt(self, b",\"reasoningTokens\":")?;
        self.lit(b"}")?;
        Some(TokenUsage {
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
        })
    }

    /// `"turn":U,"step":V` after the data's `{`.
    fn turn_step(&mut self) -> Option<(u64, u64)> {
        self.lit(b"{\"turn\":")?;
        let turn = self.safe()?;
        self.lit(b",\"step\":")?;
        let step = self.safe()?;
        Some((turn, step))
    }

    /// The chunks other than deltas (the delta template reads those):
    /// `block-start`, `block-end`, `usage`, and `finish` without replay state.
    fn chunk(&mut self) -> Option<StreamChunk> {
        self.lit(b"{\"type\":\"")?;
        let chunk = if self.lit(b"block-start\",\"index\":").is_some() {
            let index = self.uint(MAX_INDEX)?;
            self.lit(b",\"blockType\":")?;
            StreamChunk::BlockStart {
                index,
                block_type: self.string()?,
            }
        } else if self.lit(b"block-end\",\"index\":").is_some() {
            let index = self.uint(MAX_INDEX)?;
            self.lit(b",\"block\":")?;
            StreamChunk::BlockEnd {
                index,
                block: alloc::boxed::Box::new(self.block(false)?),
            }
        } else if self.lit(b"usage\",\"usage\":").is_some() {
            StreamChunk::usage(self.usage()?)
        } else {
            self.lit(b"finish\",\"reason\":{\"kind\":\"")?;
            let reason = if self.lit(b"stop\"").is_some() {
                FinishReason::Stop
            } else if self.lit(b"tool-calls\"").is_some() {
                FinishReason::ToolCalls
            } else {
                self.lit(b"max-tokens\"")?;
                FinishReason::MaxTokens
            };
            self.lit(b"}")?;
            StreamChunk::finish(reason)
        };
        self.lit(b"}")?;
        Some(chunk)
    }

    /// The data object of an event of type `t`.
    fn data(&mut self, t: Type, last: &mut Option<ToolCallHead>) -> Option<EventData> {
        let data = match t {
            Type::UserMessage => return Some(EventData::UserMessage(Arc::new(self.message()?))),
            Type::TurnStart => {
                self.lit(b"{\"turn\":")?;
                EventData::TurnStart(TurnStart { turn: self.safe()? })
            }
            Type::StepStart | Type::StepEnd => {
                let (turn, step) = self.turn_step()?;
                let s = Step { turn, step };
                if t == Type::StepStart {
                    EventData::StepStart(s)
                } else {
                    EventData::StepEnd(s)
                }
            }
            Type::TurnEnd => {
                self.lit(b"{\"turn\":")?;
                let turn = self.safe()?;
                self.lit(b",\"reason\":{\"kind\":\"")?;
                let reason = if self.lit(b"completed\"").is_some() {
                    TurnEndReason::Completed
                } else if self.lit(b"max-tokens\"").is_some() {
                    TurnEndReason::MaxTokens
                } else if self.lit(b"blocked\"").is_some() {
                    TurnEndReason::Blocked
                } else {
                    self.lit(b"interrupted\"")?;
                    TurnEndReason::Interrupted
                };
                self.lit(b"}")?;
                EventData::TurnEnd(Arc::new(TurnEnd { turn, reason }))
            }
            Type::AssistantChunk => {
                let (turn, step) = self.turn_step()?;
                self.lit(b",\"chunk\":")?;
                let chunk = self.chunk()?;
                EventData::AssistantChunk(AssistantChunk::new_interned(turn, step, chunk, last))
            }
            Type::AssistantMessage => {
                let (turn, step) = self.turn_step()?;
                self.lit(b",\"message\":")?;
                let message = Arc::new(self.message()?);
                let usage = match self.lit(b",\"usage\":") {
                    Some(()) => Some(self.usage()?),
                    None => None,
                };
                let interrupted = self.lit(b",\"interrupted\":true").is_some();
                EventData::AssistantMessage(Arc::new(AssistantMessage {
                    turn,
                    step,
                    message,
                    usage,
                    interrupted,
                }))
            }
            Type::ToolCall => {
                let (turn, step) = self.turn_step()?;
                self.lit(b",\"callId\":")?;
                let call_id = CallId(self.string()?);
                self.lit(b",\"name\":")?;
                let name = self.string()?;
                self.lit(b",\"arguments\":")?;
                let arguments = self.string()?;
                EventData::ToolCall(Arc::new(ToolCall {
                    turn,
                    step,
                    call_id,
                    name,
                    arguments,
                }))
            }
            Type::ToolResult => {
                let (turn, step) = self.turn_step()?;
                self.lit(b",\"message\":")?;
                let message = Arc::new(self.message()?);
                EventData::ToolResult(Arc::new(ToolResult {
                    turn,
                    step,
                    message,
                    error: None,
                    meta: None,
                }))
            }
        };
        self.lit(b"}")?;
        Some(data)
    }

    /// `,"sourceEventSeqs":[…]` and `,"surfaceOp":"append"`, in either
    /// order, each optional; `None` when neither is there.
    fn extra(&mut self) -> Option<Option<alloc::boxed::Box<Extra>>> {
        let mut sources = None;
        let mut surface_op = None;
        let mut op_first = false;
        for _ in 0..2 {
            if sources.is_none() && self.lit(b",\"sourceEventSeqs\":[").is_some() {
                let mut seqs = Vec::new();
                if self.lit(b"]").is_none() {
                    loop {
                        seqs.push(self.safe()?);
                        if self.lit(b"]").is_some() {
                            break;
                        }
                        self.lit(b",")?;
                    }
                }
                seqs.shrink_to_fit();
                sources = Some(seqs);
            } else if surface_op.is_none() && self.lit(b",\"surfaceOp\":\"append\"").is_some() {
                surface_op = Some(SurfaceOp::Append);
                op_first = sources.is_none();
            }
        }
        if sources.is_none() && surface_op.is_none() {
            return Some(None);
        }
        let op_first = op_first && sources.is_some() && surface_op.is_some();
        Some(Some(alloc::boxed::Box::new(Extra {
            surface_op,
            sources,
            ignorable: false,
            op_first,
            verbatim: None,
            deviation: None,
        })))
    }
}

/// The event types with a template.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    UserMessage,
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    AssistantChunk,
    AssistantMessage,
    ToolCall,
    ToolResult,
}

/// `"<type>","seq":` after `{"type":`.
const TYPES: [(&[u8], Type); 9] = [
    (b"\"assistant/chunk\",\"seq\":", Type::AssistantChunk),
    (b"\"step/start\",\"seq\":", Type::StepStart),
    (b"\"step/end\",\"seq\":", Type::StepEnd),
    (b"\"assistant/message\",\"seq\":", Type::AssistantMessage),
    (b"\"tool/call\",\"seq\":", Type::ToolCall),
    (b"\"tool/result\",\"seq\":", Type::ToolResult),
    (b"\"user/message\",\"seq\":", Type::UserMessage),
    (b"\"turn/start\",\"seq\":", Type::TurnStart),
    (b"\"turn/end\",\"seq\":", Type::TurnEnd),
];

/// Reads `line` when it is the canonical line of an event with a template
/// (delta chunks excepted: `decode::fast_chunk` reads those); `None`
/// otherwise. `text` is `line` when it is known to be UTF-8.
pub(super) fn read_line(
    line: &[u8],
    text: Option<&str>,
    last: &mut Option<ToolCallHead>,
) -> Option<SessionEvent> {
    let mut c = Cursor::new(line, text);
    c.lit(b"{\"type\":")?;
    let t = TYPES.iter().find_map(|(lit, t)| c.lit(lit).map(|()| *t))?;
    let seq = c.safe()?;
    c.lit(b",\"time\":")?;
    let time = c.int()?;
    c.lit(b",\"data\":")?;
    // A template reads `last` only for tool-call deltas, which it never
    // sees; a line it then rejects has changed nothing.
    let data = c.data(t, last)?;
    let extra = c.extra()?;
    c.lit(b"}")?;
    if c.i != line.len() {
        return None;
    }
    Some(SessionEvent::from_parts(seq, time, data, extra))
}
