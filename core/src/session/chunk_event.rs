//! `assistant/chunk` data, stored compactly (session.md 4.5).
//!
//! Chunk events are almost all of a long log (97% in the bench workload).
//! A [`StreamChunk`] is itself compact (short delta text inline, the call id
//! and tool name of a call's deltas shared), so the event holds the chunk as
//! it came; heads read back from a log are shared again as they are read.

use alloc::string::String;
use core::fmt;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chunk::StreamChunk;
use crate::json::MAX_SAFE_INTEGER;
use crate::text::{ChunkText, ToolCallHead};

/// `assistant/chunk` data: `{"turn":n,"step":k,"chunk":StreamChunk}`.
///
/// Build one with [`AssistantChunk::new`]; read the chunk back with
/// [`AssistantChunk::chunk_ref`] (borrowed), [`AssistantChunk::chunk`] (an
/// owned copy, cheap) or [`AssistantChunk::view`] (borrowed parts).
#[derive(Clone, Debug, PartialEq)]
pub struct AssistantChunk {
    /// The turn of the model call.
    pub turn: u64,
    /// The step of the model call.
    pub step: u64,
    chunk: StreamChunk,
}

/// A borrowed view of an `assistant/chunk`'s chunk.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
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
        AssistantChunk { turn, step, chunk }
    }

    /// Like [`new`](Self::new) but reusing `last`'s tool head when equal.
    pub(crate) fn new_interned(
        turn: u64,
        step: u64,
        chunk: StreamChunk,
        last: &mut Option<ToolCallHead>,
    ) -> Self {
        AssistantChunk {
            turn,
            step,
            chunk: chunk.share_head(last),
        }
    }

    /// A text (`kind` 0), reasoning (1) or tool-call (2) delta built from
    /// borrowed parts; used by the line decoder's fast path.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn delta(
        turn: u64,
        step: u64,
        kind: u8,
        index: u64,
        id: &str,
        name: Option<&str>,
        payload: &str,
        last: &mut Option<ToolCallHead>,
    ) -> Self {
        let chunk = match kind {
            0 => StreamChunk::text_delta(index, payload),
            1 => StreamChunk::reasoning_delta(index, payload),
            _ => StreamChunk::ToolCallDelta {
                index,
                head: ToolCallHead::reuse(last, id, name),
                arguments_delta: ChunkText::new(payload),
            },
        };
        AssistantChunk { turn, step, chunk }
    }

    /// A borrowed view of the chunk.
    pub fn view(&self) -> ChunkView<'_> {
        match &self.chunk {
            StreamChunk::TextDelta { index, text } => ChunkView::TextDelta {
                index: *index,
                text,
            },
            StreamChunk::ReasoningDelta { index, text } => ChunkView::ReasoningDelta {
                index: *index,
                text,
            },
            StreamChunk::ToolCallDelta {
                index,
                head,
                arguments_delta,
            } => ChunkView::ToolCallDelta {
                index: *index,
                id: head.id(),
                name: head.name(),
                arguments_delta,
            },
            other => ChunkView::Other(other),
        }
    }

    /// The chunk.
    pub fn chunk_ref(&self) -> &StreamChunk {
        &self.chunk
    }

    /// The chunk as an owned [`StreamChunk`] (a clone: short text is
    /// inline and heads are shared, so a delta allocates nothing).
    pub fn chunk(&self) -> StreamChunk {
        self.chunk.clone()
    }

    /// Whether this is a `finish` chunk.
    pub fn is_finish(&self) -> bool {
        matches!(self.chunk, StreamChunk::Finish { .. })
    }
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
///
/// `canonical` is cleared when the input may not be the exact canonical
/// text (keys out of order, escaped strings, unknown keys, non-delta
/// chunks), so the caller knows whether to compare the re-serialization.
pub(crate) struct ChunkDataSeed<'s> {
    pub(crate) last: &'s mut Option<ToolCallHead>,
    pub(crate) canonical: &'s mut bool,
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
        let mut position = 0u8;
        while let Some(key) = map.next_key::<DataKey>()? {
            let expected = match key {
                DataKey::Turn => 0,
                DataKey::Step => 1,
                DataKey::Chunk => 2,
            };
            if expected != position {
                *self.canonical = false;
            }
            position += 1;
            match key {
                DataKey::Turn => turn = Some(safe(map.next_value::<u64>(), "turn")?),
                DataKey::Step => step = Some(safe(map.next_value::<u64>(), "step")?),
                DataKey::Chunk => {
                    chunk = Some(map.next_value_seed(ChunkSeed {
                        last: &mut *self.last,
                        canonical: &mut *self.canonical,
                    })?)
                }
            }
        }
        let turn =
            turn.ok_or_else(|| de::Error::custom("assistant/chunk data is missing \"turn\""))?;
        let step =
            step.ok_or_else(|| de::Error::custom("assistant/chunk data is missing \"step\""))?;
        let chunk =
            chunk.ok_or_else(|| de::Error::custom("assistant/chunk data is missing \"chunk\""))?;
        Ok(AssistantChunk { turn, step, chunk })
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
}

impl<'de> Deserialize<'de> for DataKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DataKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("turn, step or chunk")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DataKey, E> {
                Ok(match v {
                    "turn" => DataKey::Turn,
                    "step" => DataKey::Step,
                    "chunk" => DataKey::Chunk,
                    other => {
                        return Err(E::custom(alloc::format!(
                            "assistant/chunk data has an unknown key \"{other}\""
                        )));
                    }
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// A string value, noting whether it was read without escapes.
struct Text {
    text: ChunkText,
    borrowed: bool,
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text, E> {
                Ok(Text {
                    text: ChunkText::new(v),
                    borrowed: true,
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text {
                    text: ChunkText::new(v),
                    borrowed: false,
                })
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text {
                    text: ChunkText::from(v),
                    borrowed: false,
                })
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Clone, PartialEq, Eq)]
enum ChunkKey {
    Type,
    Index,
    Text,
    Id,
    Name,
    ArgumentsDelta,
    Other(String),
}

impl ChunkKey {
    fn name(self) -> String {
        String::from(match self {
            ChunkKey::Type => "type",
            ChunkKey::Index => "index",
            ChunkKey::Text => "text",
            ChunkKey::Id => "id",
            ChunkKey::Name => "name",
            ChunkKey::ArgumentsDelta => "argumentsDelta",
            ChunkKey::Other(s) => return s,
        })
    }
}

impl<'de> Deserialize<'de> for ChunkKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ChunkKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a chunk key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ChunkKey, E> {
                Ok(match v {
                    "type" => ChunkKey::Type,
                    "index" => ChunkKey::Index,
                    "text" => ChunkKey::Text,
                    "id" => ChunkKey::Id,
                    "name" => ChunkKey::Name,
                    "argumentsDelta" => ChunkKey::ArgumentsDelta,
                    other => ChunkKey::Other(String::from(other)),
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

#[derive(Clone, PartialEq, Eq)]
enum DeltaType {
    Text,
    Reasoning,
    ToolCall,
    Other(serde_json::Value),
}

impl<'de> Deserialize<'de> for DeltaType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DeltaType;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a chunk type")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DeltaType, E> {
                Ok(match v {
                    "text-delta" => DeltaType::Text,
                    "reasoning-delta" => DeltaType::Reasoning,
                    "tool-call-delta" => DeltaType::ToolCall,
                    other => DeltaType::Other(serde_json::Value::String(String::from(other))),
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DeltaType, E> {
                Ok(DeltaType::Other(v.into()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DeltaType, E> {
                Ok(DeltaType::Other(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DeltaType, E> {
                Ok(DeltaType::Other(v.into()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<DeltaType, E> {
                Ok(DeltaType::Other(v.into()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<DeltaType, E> {
                Ok(DeltaType::Other(serde_json::Value::Null))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<DeltaType, A::Error> {
                let v = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(DeltaType::Other(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DeltaType, A::Error> {
                let v = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(DeltaType::Other(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads a chunk: the three delta kinds straight into the compact form when
/// `type` comes first; anything else through [`StreamChunk`]'s own reader.
struct ChunkSeed<'s> {
    last: &'s mut Option<ToolCallHead>,
    canonical: &'s mut bool,
}

impl<'de> DeserializeSeed<'de> for ChunkSeed<'_> {
    type Value = StreamChunk;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<StreamChunk, D::Error> {
        d.deserialize_map(self)
    }
}

/// Reads the rest of a chunk object whose first entry (`key`, `value`) was
/// already taken, with the typed chunk visitor (no `Value` tree of the rest).
fn rest_as_chunk<'de, A: MapAccess<'de>>(
    map: A,
    key: String,
    value: serde_json::Value,
) -> Result<StreamChunk, A::Error> {
    StreamChunk::deserialize(de::value::MapAccessDeserializer::new(Prefixed {
        first: Some((key, value)),
        value: None,
        rest: map,
    }))
}

/// A map access that yields one entry read ahead, then the rest of `rest`.
struct Prefixed<A> {
    first: Option<(String, serde_json::Value)>,
    value: Option<serde_json::Value>,
    rest: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Prefixed<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.first.take() {
            Some((k, v)) => {
                self.value = Some(v);
                let key: de::value::StringDeserializer<A::Error> = k.into_deserializer();
                seed.deserialize(key).map(Some)
            }
            None => self.rest.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.value.take() {
            Some(v) => seed.deserialize(v).map_err(de::Error::custom),
            None => self.rest.next_value_seed(seed),
        }
    }
}

impl<'de> Visitor<'de> for ChunkSeed<'_> {
    type Value = StreamChunk;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a stream chunk object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StreamChunk, A::Error> {
        let first = map.next_key::<ChunkKey>()?;
        if first != Some(ChunkKey::Type) {
            // Not the canonical layout: collect and read generically.
            *self.canonical = false;
            let chunk = match first {
                Some(k) => {
                    let v: serde_json::Value = map.next_value()?;
                    rest_as_chunk(map, k.name(), v)?
                }
                None => StreamChunk::deserialize(serde_json::Value::Object(serde_json::Map::new()))
                    .map_err(de::Error::custom)?,
            };
            return Ok(chunk.share_head(self.last));
        }
        let kind = map.next_value::<DeltaType>()?;
        if let DeltaType::Other(kind_value) = kind {
            *self.canonical = false;
            let chunk = rest_as_chunk(map, String::from("type"), kind_value)?;
            return Ok(chunk.share_head(self.last));
        }
        let (mut index, mut text, mut id, mut name, mut args) = (None, None, None, None, None);
        let order: &[ChunkKey] = match kind {
            DeltaType::ToolCall => &[
                ChunkKey::Index,
                ChunkKey::Id,
                ChunkKey::Name,
                ChunkKey::ArgumentsDelta,
            ],
            _ => &[ChunkKey::Index, ChunkKey::Text],
        };
        let mut pos = 0usize;
        while let Some(key) = map.next_key::<ChunkKey>()? {
            match order[pos.min(order.len())..].iter().position(|k| *k == key) {
                Some(skip) => pos += skip + 1,
                None => *self.canonical = false,
            }
            let mut take = |slot: &mut Option<ChunkText>, t: Text| {
                if !t.borrowed {
                    *self.canonical = false;
                }
                *slot = Some(t.text);
            };
            match key {
                ChunkKey::Index => index = Some(map.next_value::<u64>()?),
                ChunkKey::Text => take(&mut text, map.next_value::<Text>()?),
                ChunkKey::Id => take(&mut id, map.next_value::<Text>()?),
                ChunkKey::ArgumentsDelta => take(&mut args, map.next_value::<Text>()?),
                ChunkKey::Name => match map.next_value::<Option<Text>>()? {
                    Some(t) => take(&mut name, t),
                    None => *self.canonical = false,
                },
                ChunkKey::Type | ChunkKey::Other(_) => {
                    *self.canonical = false;
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let kind_name = match kind {
            DeltaType::Text => "text-delta",
            DeltaType::Reasoning => "reasoning-delta",
            _ => "tool-call-delta",
        };
        let need = |field: &str| {
            de::Error::custom(alloc::format!("{kind_name} chunk is missing \"{field}\""))
        };
        let index = index.ok_or_else(|| need("index"))?;
        Ok(match kind {
            DeltaType::Text => StreamChunk::TextDelta {
                index,
                text: text.ok_or_else(|| need("text"))?,
            },
            DeltaType::Reasoning => StreamChunk::ReasoningDelta {
                index,
                text: text.ok_or_else(|| need("text"))?,
            },
            _ => {
                let id = id.ok_or_else(|| need("id"))?;
                StreamChunk::ToolCallDelta {
                    index,
                    head: ToolCallHead::reuse(self.last, &id, name.as_deref()),
                    arguments_delta: args.ok_or_else(|| need("argumentsDelta"))?,
                }
            }
        })
    }
}

impl<'de> Deserialize<'de> for AssistantChunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut last = None;
        let mut canonical = true;
        ChunkDataSeed {
            last: &mut last,
            canonical: &mut canonical,
        }
        .deserialize(d)
    }
}
