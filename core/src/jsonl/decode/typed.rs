//! The general path: one typed serde pass over an event line or a packed
//! row, without a generic JSON tree.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::MAX_SAFE_INTEGER;
use crate::jsonl::packed::{Row, RowKind};
use crate::message::Message;
use crate::session::{
    AssistantMessage, ChunkDataSeed, EventData, Extra, InboxSpliced, LlmRetry, LlmRetryStarted,
    PluginEvent, RequestContext, RequestHeader, SessionEvent, Step, SurfaceOp, TodoWrite, ToolCall,
    ToolResult, TurnEnd, TurnStart,
};
use crate::text::ToolCallHead;

use super::value::{data_from_value, surface_op_from_value};
use super::{Kind, classify, kind_name};

pub(super) enum Parsed {
    Event(SessionEvent),
    Row(Row),
}

pub(super) struct EnvelopeVisitor<'s> {
    pub(super) last: &'s mut Option<ToolCallHead>,
    /// Cleared unless the line is provably in canonical form (an
    /// `assistant/chunk` in E9 order whose strings needed no escapes).
    pub(super) canonical: &'s mut bool,
}

#[derive(Clone, Copy)]
enum Key {
    Type,
    Seq,
    Time,
    Data,
    SurfaceOp,
    Sources,
    Ignorable,
    Seq0,
    Time0,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an envelope key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "type" => Key::Type,
                    "seq" => Key::Seq,
                    "time" => Key::Time,
                    "data" => Key::Data,
                    "surfaceOp" => Key::SurfaceOp,
                    "sourceEventSeqs" => Key::Sources,
                    "ignorable" => Key::Ignorable,
                    "seq0" => Key::Seq0,
                    "time0" => Key::Time0,
                    _ => return Err(E::custom("unknown envelope key")),
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// An event type: its kind, and its name only when it is not a core type.
struct TypeName(Kind, Option<String>);

impl<'de> Deserialize<'de> for TypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TypeName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event type string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TypeName, E> {
                let kind = classify(v);
                let name = matches!(kind, Kind::Plugin).then(|| String::from(v));
                Ok(TypeName(kind, name))
            }
        }
        d.deserialize_str(V)
    }
}

enum DataSlot<'de> {
    None,
    Typed(EventData),
    Row(RowData),
    Raw(&'de RawValue),
}

impl<'de> Visitor<'de> for EnvelopeVisitor<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a session event or storage row")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut kind: Option<(Kind, Option<String>)> = None;
        let mut seq: Option<u64> = None;
        let mut time: Option<i64> = None;
        let mut seq0: Option<u64> = None;
        let mut time0: Option<i64> = None;
        let mut data = DataSlot::None;
        let mut surface_op: Option<SurfaceOp> = None;
        let mut sources: Option<Vec<u64>> = None;
        let mut ignorable = false;
        let mut op_first = false;
        let mut seen = 0u16;
        let mut position = 0u16;
        while let Some(key) = map.next_key::<Key>()? {
            let bit = 1u16 << (key as u16);
            if seen & bit != 0 {
                return Err(de::Error::custom("duplicate key"));
            }
            seen |= bit;
            if key as u16 != position {
                *self.canonical = false;
            }
            position += 1;
            match key {
                Key::Type => {
                    let TypeName(k, name) = map.next_value::<TypeName>()?;
                    kind = Some((k, name));
                }
                Key::Seq => seq = Some(map.next_value()?),
                Key::Time => time = Some(map.next_value()?),
                Key::Seq0 => seq0 = Some(map.next_value()?),
                Key::Time0 => time0 = Some(map.next_value()?),
                Key::Data => {
                    data = match &kind {
                        None => DataSlot::Raw(map.next_value::<&'de RawValue>()?),
                        Some((Kind::Row(k), _)) => {
                            DataSlot::Row(map.next_value_seed(RowDataSeed(*k))?)
                        }
                        Some((k, name)) => {
                            if *k != Kind::AssistantChunk {
                                *self.canonical = false;
                            }
                            DataSlot::Typed(map.next_value_seed(DataSeed {
                                kind: *k,
                                name: name.as_deref().unwrap_or_else(|| kind_name(*k)),
                                last: &mut *self.last,
                                canonical: &mut *self.canonical,
                            })?)
                        }
                    }
                }
                Key::SurfaceOp => {
                    surface_op = Some(map.next_value::<FastSurfaceOp>()?.0);
                    op_first = sources.is_none();
                }
                Key::Sources => sources = Some(map.next_value()?),
                Key::Ignorable => {
                    if !map.next_value::<bool>()? {
                        return Err(de::Error::custom("ignorable must be true"));
                    }
                    ignorable = true;
                }
            }
        }
        let Some((kind, name)) = kind else {
            return Err(de::Error::custom("missing type"));
        };
        let name = name.as_deref().unwrap_or_else(|| kind_name(kind));
        if let Kind::Row(rk) = kind {
            let (Some(seq0), Some(time0), DataSlot::Row(d)) = (seq0, time0, data) else {
                return Err(de::Error::custom("incomplete row"));
            };
            if seq.is_some()
                || time.is_some()
                || surface_op.is_some()
                || sources.is_some()
                || ignorable
            {
                return Err(de::Error::custom("row with event keys"));
            }
            let row = Row {
                kind: rk,
                seq0,
                time0,
                turn: d.turn,
                step: d.step,
                index: d.index,
                dt: d.dt,
                id: d.id.unwrap_or_default(),
                name: d.name,
                payloads: d.payloads,
            };
            if (rk == RowKind::ToolCall) != d.tool || row.check().is_err() {
                return Err(de::Error::custom("malformed row"));
            }
            return Ok(Parsed::Row(row));
        }
        let (Some(seq), Some(time)) = (seq, time) else {
            return Err(de::Error::custom("missing seq or time"));
        };
        if seq0.is_some()
            || time0.is_some()
            || seq > MAX_SAFE_INTEGER
            || time.unsigned_abs() > MAX_SAFE_INTEGER
        {
            return Err(de::Error::custom("bad envelope"));
        }
        let data = match data {
            DataSlot::Typed(d) => d,
            DataSlot::Raw(raw) => {
                let v: Value = serde_json::from_str(raw.get()).map_err(de::Error::custom)?;
                *self.canonical = false;
                // Strict here: a lenient reading takes the slow path,
                // which records the deviation.
                data_from_value(name, v, self.last, false)
                    .map_err(de::Error::custom)?
                    .0
            }
            DataSlot::None | DataSlot::Row(_) => return Err(de::Error::custom("missing data")),
        };
        let op_first = op_first && surface_op.is_some() && sources.is_some();
        let extra = (surface_op.is_some() || sources.is_some() || ignorable).then(|| {
            Box::new(Extra {
                surface_op,
                sources,
                ignorable,
                op_first,
                verbatim: None,
                deviation: None,
            })
        });
        Ok(Parsed::Event(SessionEvent::from_parts(
            seq, time, data, extra,
        )))
    }
}

struct FastSurfaceOp(SurfaceOp);

impl<'de> Deserialize<'de> for FastSurfaceOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        surface_op_from_value(&v)
            .map(FastSurfaceOp)
            .map_err(de::Error::custom)
    }
}

struct DataSeed<'a, 's> {
    kind: Kind,
    name: &'a str,
    last: &'s mut Option<ToolCallHead>,
    canonical: &'s mut bool,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_, '_> {
    type Value = EventData;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EventData, D::Error> {
        Ok(match self.kind {
            Kind::AssistantChunk => EventData::AssistantChunk(
                ChunkDataSeed {
                    last: self.last,
                    canonical: self.canonical,
                }
                .deserialize(d)?,
            ),
            Kind::TurnStart => EventData::TurnStart(TurnStart::deserialize(d)?),
            Kind::TurnEnd => EventData::TurnEnd(Arc::new(TurnEnd::deserialize(d)?)),
            Kind::StepStart => EventData::StepStart(Step::deserialize(d)?),
            Kind::StepEnd => EventData::StepEnd(Step::deserialize(d)?),
            Kind::UserMessage => EventData::UserMessage(Arc::new(Message::deserialize(d)?)),
            Kind::AssistantMessage => {
                EventData::AssistantMessage(Arc::new(AssistantMessage::deserialize(d)?))
            }
            Kind::ToolCall => EventData::ToolCall(Arc::new(ToolCall::deserialize(d)?)),
            Kind::ToolResult => EventData::ToolResult(Arc::new(ToolResult::deserialize(d)?)),
            Kind::TodoWrite => EventData::TodoWrite(Arc::new(TodoWrite::deserialize(d)?)),
            Kind::RequestHeader => {
                EventData::RequestHeader(Arc::new(RequestHeader::deserialize(d)?))
            }
            Kind::RequestContext => {
                EventData::RequestContext(Arc::new(RequestContext::deserialize(d)?))
            }
            Kind::EndSeed => {
                let m: serde_json::Map<String, Value> = Deserialize::deserialize(d)?;
                if !m.is_empty() {
                    return Err(de::Error::custom("session/end-seed data must be {}"));
                }
                EventData::EndSeed
            }
            Kind::LlmRetry
            | Kind::LlmRetryStarted
            | Kind::InboxSpliced
            | Kind::Plugin
            | Kind::Row(_) => {
                let raw = <&RawValue>::deserialize(d)?;
                runtime_or_plugin(self.kind, self.name, raw).map_err(de::Error::custom)?
            }
        })
    }
}

fn runtime_or_plugin(kind: Kind, name: &str, raw: &RawValue) -> Result<EventData, String> {
    let text = raw.get();
    let typed = match kind {
        Kind::LlmRetry => serde_json::from_str::<LlmRetry>(text)
            .ok()
            .map(|d| EventData::LlmRetry(Arc::new(d))),
        Kind::LlmRetryStarted => serde_json::from_str::<LlmRetryStarted>(text)
            .ok()
            .map(|d| EventData::LlmRetryStarted(Arc::new(d))),
        Kind::InboxSpliced => serde_json::from_str::<InboxSpliced>(text)
            .ok()
            .map(|d| EventData::InboxSpliced(Arc::new(d))),
        _ => None,
    };
    Ok(typed.unwrap_or_else(|| {
        EventData::Plugin(Arc::new(PluginEvent {
            event_type: String::from(name),
            data: raw.to_owned(),
        }))
    }))
}

struct RowData {
    tool: bool,
    turn: u64,
    step: u64,
    index: u64,
    dt: Vec<i64>,
    id: Option<String>,
    name: Option<String>,
    payloads: Vec<String>,
}

struct RowDataSeed(RowKind);

impl<'de> DeserializeSeed<'de> for RowDataSeed {
    type Value = RowData;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RowData, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RowDataSeed {
    type Value = RowData;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("packed row data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RowData, A::Error> {
        let (mut turn, mut step, mut index, mut dt) = (None, None, None, None);
        let (mut id, mut name, mut payloads) = (None, None, None);
        let payload_key = if self.0 == RowKind::ToolCall {
            "args"
        } else {
            "texts"
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "turn" if turn.is_none() => turn = Some(map.next_value::<u64>()?),
                "step" if step.is_none() => step = Some(map.next_value::<u64>()?),
                "index" if index.is_none() => index = Some(map.next_value::<u64>()?),
                "dt" if dt.is_none() => dt = Some(map.next_value::<Vec<i64>>()?),
                "id" if self.0 == RowKind::ToolCall && id.is_none() => {
                    id = Some(map.next_value::<String>()?)
                }
                "name" if self.0 == RowKind::ToolCall && name.is_none() => {
                    name = Some(map.next_value::<String>()?)
                }
                k if k == payload_key && payloads.is_none() => {
                    payloads = Some(map.next_value::<Vec<String>>()?)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    return Err(de::Error::custom("unexpected row key"));
                }
            }
        }
        match (turn, step, index, dt, payloads) {
            (Some(turn), Some(step), Some(index), Some(dt), Some(payloads)) => {
                if self.0 == RowKind::ToolCall && id.is_none() {
                    return Err(de::Error::custom("row without id"));
                }
                Ok(RowData {
                    tool: self.0 == RowKind::ToolCall,
                    turn,
                    step,
                    index,
                    dt,
                    id,
                    name,
                    payloads,
                })
            }
            _ => Err(de::Error::custom("incomplete row data")),
        }
    }
}
