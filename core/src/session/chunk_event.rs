//! `assistant/chunk` data, stored compactly (session.md 4.5).
//!
//! Chunk events are almost all of a long log (97% in the bench workload), so
//! the three delta kinds are kept as a small enum of boxed strings rather than
//! a full [`StreamChunk`]; the call id and tool name of consecutive
//! tool-call deltas share one allocation. Other chunks are boxed whole.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use core::fmt;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chunk::StreamChunk;
use crate::json::MAX_SAFE_INTEGER;

/// The call id and optional tool name shared by a run of tool-call deltas.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ToolHead {
    pub(crate) id: Box<str>,
    pub(crate) name: Option<Box<str>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Repr {
    Text {
        index: u32,
        text: Box<str>,
    },
    Reasoning {
        index: u32,
        text: Box<str>,
    },
    ToolCall {
        index: u32,
        head: Arc<ToolHead>,
        args: Box<str>,
    },
    Other(Box<StreamChunk>),
}

/// `assistant/chunk` data: `{"turn":n,"step":k,"chunk":StreamChunk}`.
///
/// Build one with [`AssistantChunk::new`]; read the chunk back with
/// [`AssistantChunk::chunk`] (an owned copy) or [`AssistantChunk::view`]
/// (borrowed, no allocation).
#[derive(Clone, Debug, PartialEq)]
pub struct AssistantChunk {
    /// The turn of the model call.
    pub turn: u64,
    /// The step of the model call.
    pub step: u64,
    repr: Repr,
}

/// A borrowed view of an `assistant/chunk`'s chunk.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChunkView<'a> {
    /// `text-delta`.
    TextDelta {
        /// Block index.
        index: u64,
        /// The fragment.
        text: &'a str,
    },
    /// `reasoning-delta`.
    ReasoningDelta {
        /// Block index.
        index: u64,
        /// The fragment.
        text: &'a str,
    },
    /// `tool-call-delta`.
    ToolCallDelta {
        /// Block index.
        index: u64,
        /// Call id.
        id: &'a str,
        /// Tool name when present.
        name: Option<&'a str>,
        /// Arguments fragment.
        arguments_delta: &'a str,
    },
    /// Any other chunk.
    Other(&'a StreamChunk),
}

impl AssistantChunk {
    /// Wraps `chunk` for `turn`/`step`.
    pub fn new(turn: u64, step: u64, chunk: StreamChunk) -> Self {
        AssistantChunk {
            turn,
            step,
            repr: Repr::from_chunk(chunk, &mut None),
        }
    }

    /// Like [`new`](Self::new) but reusing `last`'s tool head when equal.
    pub(crate) fn new_interned(
        turn: u64,
        step: u64,
        chunk: StreamChunk,
        last: &mut Option<Arc<ToolHead>>,
    ) -> Self {
        AssistantChunk {
            turn,
            step,
            repr: Repr::from_chunk(chunk, last),
        }
    }

    /// A borrowed view of the chunk.
    pub fn view(&self) -> ChunkView<'_> {
        match &self.repr {
            Repr::Text { index, text } => ChunkView::TextDelta {
                index: u64::from(*index),
                text,
            },
            Repr::Reasoning { index, text } => ChunkView::ReasoningDelta {
                index: u64::from(*index),
                text,
            },
            Repr::ToolCall { index, head, args } => ChunkView::ToolCallDelta {
                index: u64::from(*index),
                id: &head.id,
                name: head.name.as_deref(),
                arguments_delta: args,
            },
            Repr::Other(c) => ChunkView::Other(c),
        }
    }

    /// The chunk as an owned [`StreamChunk`].
    pub fn chunk(&self) -> StreamChunk {
        match self.view() {
            ChunkView::TextDelta { index, text } => StreamChunk::TextDelta {
                index,
                text: String::from(text),
            },
            ChunkView::ReasoningDelta { index, text } => StreamChunk::ReasoningDelta {
                index,
                text: String::from(text),
            },
            ChunkView::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => StreamChunk::ToolCallDelta {
                index,
                id: String::from(id),
                name: name.map(String::from),
                arguments_delta: String::from(arguments_delta),
            },
            ChunkView::Other(c) => c.clone(),
        }
    }

    /// The chunk's wire `type`.
    pub fn chunk_type(&self) -> &'static str {
        match &self.repr {
            Repr::Text { .. } => "text-delta",
            Repr::Reasoning { .. } => "reasoning-delta",
            Repr::ToolCall { .. } => "tool-call-delta",
            Repr::Other(c) => c.chunk_type(),
        }
    }

    /// Whether this is a `finish` chunk.
    pub fn is_finish(&self) -> bool {
        matches!(&self.repr, Repr::Other(c) if matches!(**c, StreamChunk::Finish { .. }))
    }
}

impl Repr {
    fn from_chunk(chunk: StreamChunk, last: &mut Option<Arc<ToolHead>>) -> Repr {
        let small = |index: u64| u32::try_from(index).ok();
        match chunk {
            StreamChunk::TextDelta { index, text } if small(index).is_some() => Repr::Text {
                index: index as u32,
                text: text.into_boxed_str(),
            },
            StreamChunk::ReasoningDelta { index, text } if small(index).is_some() => {
                Repr::Reasoning {
                    index: index as u32,
                    text: text.into_boxed_str(),
                }
            }
            StreamChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } if small(index).is_some() => {
                let head = intern(last, &id, name.as_deref());
                Repr::ToolCall {
                    index: index as u32,
                    head,
                    args: arguments_delta.into_boxed_str(),
                }
            }
            other => Repr::Other(Box::new(other)),
        }
    }
}

fn intern(last: &mut Option<Arc<ToolHead>>, id: &str, name: Option<&str>) -> Arc<ToolHead> {
    if let Some(h) = last {
        if &*h.id == id && h.name.as_deref() == name {
            return h.clone();
        }
    }
    let head = Arc::new(ToolHead {
        id: Box::from(id),
        name: name.map(Box::from),
    });
    *last = Some(head.clone());
    head
}

impl Serialize for AssistantChunk {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("chunk", &ViewSer(self.view()))?;
        map.end()
    }
}

struct ViewSer<'a>(ChunkView<'a>);

impl Serialize for ViewSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ChunkView::TextDelta { index, text } | ChunkView::ReasoningDelta { index, text } => {
                let kind = if matches!(self.0, ChunkView::TextDelta { .. }) {
                    "text-delta"
                } else {
                    "reasoning-delta"
                };
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("type", kind)?;
                map.serialize_entry("index", &index)?;
                map.serialize_entry("text", text)?;
                map.end()
            }
            ChunkView::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let mut map = s.serialize_map(None)?;
                map.serialize_entry("type", "tool-call-delta")?;
                map.serialize_entry("index", &index)?;
                map.serialize_entry("id", id)?;
                if let Some(name) = name {
                    map.serialize_entry("name", name)?;
                }
                map.serialize_entry("argumentsDelta", arguments_delta)?;
                map.end()
            }
            ChunkView::Other(c) => c.serialize(s),
        }
    }
}

/// Deserializes `assistant/chunk` data, sharing tool heads through `last`.
pub(crate) struct ChunkDataSeed<'s> {
    pub(crate) last: &'s mut Option<Arc<ToolHead>>,
}

impl<'de> DeserializeSeed<'de> for ChunkDataSeed<'_> {
    type Value = AssistantChunk;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<AssistantChunk, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChunkDataSeed<'_> {
    type Value = AssistantChunk;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("assistant/chunk data {turn, step, chunk}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AssistantChunk, A::Error> {
        let mut turn = None;
        let mut step = None;
        let mut chunk: Option<StreamChunk> = None;
        while let Some(key) = map.next_key::<DataKey>()? {
            match key {
                DataKey::Turn => turn = Some(safe(map.next_value::<u64>(), "turn")?),
                DataKey::Step => step = Some(safe(map.next_value::<u64>(), "step")?),
                DataKey::Chunk => chunk = Some(map.next_value::<StreamChunk>()?),
                DataKey::Other(k) => {
                    return Err(de::Error::custom(alloc::format!(
                        "assistant/chunk data has an unknown key \"{k}\""
                    )));
                }
            }
        }
        let turn =
            turn.ok_or_else(|| de::Error::custom("assistant/chunk data is missing \"turn\""))?;
        let step =
            step.ok_or_else(|| de::Error::custom("assistant/chunk data is missing \"step\""))?;
        let chunk =
            chunk.ok_or_else(|| de::Error::custom("assistant/chunk data is missing \"chunk\""))?;
        Ok(AssistantChunk::new_interned(turn, step, chunk, self.last))
    }
}

fn safe<E: de::Error>(v: Result<u64, E>, what: &str) -> Result<u64, E> {
    match v {
        Ok(n) if n <= MAX_SAFE_INTEGER => Ok(n),
        _ => Err(de::Error::custom(alloc::format!(
            "assistant/chunk \"{what}\" must be a non-negative safe integer"
        ))),
    }
}

enum DataKey {
    Turn,
    Step,
    Chunk,
    Other(String),
}

impl<'de> Deserialize<'de> for DataKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DataKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DataKey, E> {
                Ok(match v {
                    "turn" => DataKey::Turn,
                    "step" => DataKey::Step,
                    "chunk" => DataKey::Chunk,
                    other => DataKey::Other(String::from(other)),
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de> Deserialize<'de> for AssistantChunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut last = None;
        ChunkDataSeed { last: &mut last }.deserialize(d)
    }
}
