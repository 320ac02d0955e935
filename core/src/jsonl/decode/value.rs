//! The slow path: a line parsed into a generic JSON tree, read rule by rule
//! so a line that is not an event names the rule it breaks.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use serde::de::DeserializeSeed;
use serde_json::Value;

use crate::json::MAX_SAFE_INTEGER;
use crate::jsonl::packed::{Row, RowKind};
use crate::message::Message;
use crate::session::{
    AppendError, AssistantMessage, ChunkDataSeed, EventData, Extra, InboxSpliced, LlmRetry,
    LlmRetryStarted, PluginEvent, RequestContext, RequestHeader, SessionEvent, Step, SurfaceOp,
    TodoWrite, ToolCall, ToolResult, TurnEnd, TurnStart, types,
};
use crate::text::ToolCallHead;

use super::{Kind, Unparsable, classify};

fn envelope(detail: impl Into<String>) -> AppendError {
    AppendError::InvalidEnvelope {
        detail: detail.into(),
    }
}

const ENVELOPE_KEYS: [&str; 7] = [
    "type",
    "seq",
    "time",
    "data",
    "surfaceOp",
    "sourceEventSeqs",
    "ignorable",
];

/// Builds an event from a parsed JSON object, naming the first broken rule
/// (V2, V3, S5, S6, then the payload shape).
pub(super) fn event_from_value(
    mut obj: serde_json::Map<String, Value>,
    last: &mut Option<ToolCallHead>,
    lenient: bool,
) -> Result<SessionEvent, AppendError> {
    if let Some(k) = obj.keys().find(|k| !ENVELOPE_KEYS.contains(&k.as_str())) {
        return Err(AppendError::UnknownEnvelopeKey { key: k.clone() });
    }
    let event_type = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(envelope("\"type\" must be a string")),
    };
    let seq = obj
        .get("seq")
        .and_then(Value::as_u64)
        .filter(|n| *n <= MAX_SAFE_INTEGER)
        .ok_or_else(|| envelope("\"seq\" must be a non-negative safe integer"))?;
    let time = obj
        .get("time")
        .and_then(Value::as_i64)
        .filter(|n| n.unsigned_abs() <= MAX_SAFE_INTEGER)
        .ok_or_else(|| envelope("\"time\" must be a safe integer"))?;
    let data = obj
        .shift_remove("data")
        .ok_or_else(|| envelope("\"data\" is required"))?;
    let ignorable = match obj.get("ignorable") {
        None => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(AppendError::InvalidIgnorable),
    };
    let surface_op = match obj.get("surfaceOp") {
        None => None,
        Some(v) => Some(surface_op_from_value(v)?),
    };
    let sources = match obj.get("sourceEventSeqs") {
        None => None,
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for v in a {
                match v.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER) {
                    Some(n) => out.push(n),
                    None => {
                        return Err(AppendError::InvalidSources {
                            detail: format!(
                                "sourceEventSeqs element {v} is not a non-negative safe integer"
                            ),
                        });
                    }
                }
            }
            Some(out)
        }
        Some(_) => {
            return Err(AppendError::InvalidSources {
                detail: String::from("sourceEventSeqs must be an array"),
            });
        }
    };
    let op_first = match (
        obj.keys().position(|k| k == "surfaceOp"),
        obj.keys().position(|k| k == "sourceEventSeqs"),
    ) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    };
    let (data, deviation) = data_from_value(&event_type, data, last, lenient)?;
    let extra = (surface_op.is_some() || sources.is_some() || ignorable || deviation.is_some())
        .then(|| {
            Box::new(Extra {
                surface_op,
                sources,
                ignorable,
                op_first,
                verbatim: None,
                deviation,
            })
        });
    Ok(SessionEvent::from_parts(seq, time, data, extra))
}

pub(super) fn surface_op_from_value(v: &Value) -> Result<SurfaceOp, AppendError> {
    match v {
        Value::String(s) if s == "append" => Ok(SurfaceOp::Append),
        Value::Object(o) => {
            let ok = o.len() == 3 && o.get("op").and_then(Value::as_str) == Some("replace");
            let num = |k: &str| {
                o.get(k)
                    .and_then(Value::as_u64)
                    .filter(|n| *n <= MAX_SAFE_INTEGER)
            };
            match (ok, num("start"), num("end")) {
                (true, Some(start), Some(end)) => Ok(SurfaceOp::Replace { start, end }),
                _ => Err(AppendError::InvalidSurfaceOp {
                    detail: String::from("invalid replace surfaceOp"),
                }),
            }
        }
        _ => Err(AppendError::InvalidSurfaceOp {
            detail: String::from("invalid surfaceOp"),
        }),
    }
}

fn payload_err(event_type: &str, e: impl fmt::Display) -> AppendError {
    let detail = format!("{e}");
    let message_rule = |d: &str| {
        if d.contains("\"id\"") {
            "M1"
        } else if d.contains("role") {
            "M2"
        } else if d.contains("source") {
            "M3"
        } else {
            "M4"
        }
    };
    match event_type {
        types::USER_MESSAGE | types::ASSISTANT_MESSAGE | types::TOOL_RESULT
            if detail.contains("message") =>
        {
            AppendError::InvalidMessage {
                rule: message_rule(&detail),
                detail: format!("{event_type}: {detail}"),
            }
        }
        types::REQUEST_HEADER => AppendError::InvalidRequestHeader { detail },
        _ => AppendError::InvalidPayload {
            event_type: String::from(event_type),
            detail,
        },
    }
}

/// The typed data of an event. When `lenient` and the strict reading of a
/// core payload fails, the payload reduced to what dsh owns is read instead
/// (see [`crate::jsonl::lenient`]); the strict error comes back as the deviation
/// (rule E4). What the reduced payload still breaks is the error.
pub(super) fn data_from_value(
    event_type: &str,
    data: Value,
    last: &mut Option<ToolCallHead>,
    lenient: bool,
) -> Result<(EventData, Option<AppendError>), AppendError> {
    let reduced = if lenient {
        crate::jsonl::lenient::reduce(event_type, &data)
    } else {
        None
    };
    let strict = match strict_data_from_value(event_type, data, last) {
        Ok(d) => return Ok((d, None)),
        Err(e) => e,
    };
    let Some(reduced) = reduced else {
        return Err(strict);
    };
    let typed = strict_data_from_value(event_type, reduced, last)?;
    let deviation = match strict {
        e @ AppendError::InvalidPayload { .. } => e,
        other => AppendError::InvalidPayload {
            event_type: String::from(event_type),
            detail: format!("{other}"),
        },
    };
    Ok((typed, Some(deviation)))
}

fn strict_data_from_value(
    event_type: &str,
    data: Value,
    last: &mut Option<ToolCallHead>,
) -> Result<EventData, AppendError> {
    fn typed<T: serde::de::DeserializeOwned>(t: &str, v: Value) -> Result<T, AppendError> {
        serde_json::from_value(v).map_err(|e| payload_err(t, e))
    }
    let t = event_type;
    Ok(match classify(t) {
        Kind::TurnStart => EventData::TurnStart(typed::<TurnStart>(t, data)?),
        Kind::TurnEnd => EventData::TurnEnd(Arc::new(typed::<TurnEnd>(t, data)?)),
        Kind::StepStart => EventData::StepStart(typed::<Step>(t, data)?),
        Kind::StepEnd => EventData::StepEnd(typed::<Step>(t, data)?),
        Kind::UserMessage => EventData::UserMessage(Arc::new(
            serde_json::from_value::<Message>(data)
                .map_err(|e| payload_err(t, format!("message {e}")))?,
        )),
        Kind::AssistantChunk => EventData::AssistantChunk(
            ChunkDataSeed {
                last,
                canonical: &mut false,
            }
            .deserialize(data)
            .map_err(|e| payload_err(t, e))?,
        ),
        Kind::AssistantMessage => {
            EventData::AssistantMessage(Arc::new(typed::<AssistantMessage>(t, data)?))
        }
        Kind::ToolCall => EventData::ToolCall(Arc::new(typed::<ToolCall>(t, data)?)),
        Kind::ToolResult => EventData::ToolResult(Arc::new(typed::<ToolResult>(t, data)?)),
        Kind::TodoWrite => EventData::TodoWrite(Arc::new(typed::<TodoWrite>(t, data)?)),
        Kind::RequestHeader => EventData::RequestHeader(Arc::new(typed::<RequestHeader>(t, data)?)),
        Kind::RequestContext => {
            EventData::RequestContext(Arc::new(typed::<RequestContext>(t, data)?))
        }
        Kind::EndSeed => match data {
            Value::Object(o) if o.is_empty() => EventData::EndSeed,
            _ => {
                return Err(AppendError::InvalidPayload {
                    event_type: String::from(t),
                    detail: String::from("session/end-seed data must be {}"),
                });
            }
        },
        // Runtime types fall back to opaque when their shape is unexpected.
        Kind::LlmRetry => match serde_json::from_value::<LlmRetry>(data.clone()) {
            Ok(d) => EventData::LlmRetry(Arc::new(d)),
            Err(_) => plugin_from_value(t, &data)?,
        },
        Kind::LlmRetryStarted => match serde_json::from_value::<LlmRetryStarted>(data.clone()) {
            Ok(d) => EventData::LlmRetryStarted(Arc::new(d)),
            Err(_) => plugin_from_value(t, &data)?,
        },
        Kind::InboxSpliced => match serde_json::from_value::<InboxSpliced>(data.clone()) {
            Ok(d) => EventData::InboxSpliced(Arc::new(d)),
            Err(_) => plugin_from_value(t, &data)?,
        },
        Kind::Row(_) | Kind::Plugin => plugin_from_value(t, &data)?,
    })
}

fn plugin_from_value(t: &str, data: &Value) -> Result<EventData, AppendError> {
    let raw = serde_json::value::to_raw_value(data).map_err(|e| AppendError::NotLosslessJson {
        detail: format!("{e}"),
    })?;
    Ok(EventData::Plugin(Arc::new(PluginEvent {
        event_type: String::from(t),
        data: raw,
    })))
}

fn row_err(kind: RowKind, why: &str) -> Unparsable {
    Unparsable {
        reason: format!("malformed {} storage row: {why}", kind.tag()),
    }
}

/// CK15 on a generically parsed row.
pub(super) fn row_from_value(
    kind: RowKind,
    obj: serde_json::Map<String, Value>,
) -> Result<Row, Unparsable> {
    let keys_are = |o: &serde_json::Map<String, Value>, want: &[&str]| {
        o.len() == want.len() && want.iter().all(|k| o.contains_key(*k))
    };
    if !keys_are(&obj, &["type", "seq0", "time0", "data"]) {
        return Err(row_err(
            kind,
            "keys must be exactly type, seq0, time0, data",
        ));
    }
    let seq0 = obj
        .get("seq0")
        .and_then(Value::as_u64)
        .filter(|n| *n <= MAX_SAFE_INTEGER)
        .ok_or_else(|| row_err(kind, "seq0 must be a non-negative safe integer"))?;
    let time0 = obj
        .get("time0")
        .and_then(Value::as_i64)
        .filter(|n| n.unsigned_abs() <= MAX_SAFE_INTEGER)
        .ok_or_else(|| row_err(kind, "time0 must be a safe integer"))?;
    let Some(Value::Object(data)) = obj.get("data") else {
        return Err(row_err(kind, "data must be an object"));
    };
    let (payload_key, ok) = match kind {
        RowKind::ToolCall => (
            "args",
            keys_are(data, &["turn", "step", "index", "id", "dt", "args"])
                || keys_are(data, &["turn", "step", "index", "id", "name", "dt", "args"]),
        ),
        _ => (
            "texts",
            keys_are(data, &["turn", "step", "index", "dt", "texts"]),
        ),
    };
    if !ok {
        return Err(row_err(kind, "unexpected data keys"));
    }
    let int = |k: &str| {
        data.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| row_err(kind, "turn, step and index must be integers"))
    };
    let strings = |k: &str| -> Result<Vec<String>, Unparsable> {
        match data.get(k) {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| row_err(kind, "payload list must hold strings")),
            _ => Err(row_err(kind, "payload list must be an array")),
        }
    };
    let dt = match data.get("dt") {
        Some(Value::Array(a)) => a
            .iter()
            .map(Value::as_i64)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| row_err(kind, "dt must hold safe integers"))?,
        _ => return Err(row_err(kind, "dt must be an array")),
    };
    let (id, name) = if kind == RowKind::ToolCall {
        let id = data
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| row_err(kind, "id must be a string"))?;
        let name = match data.get("name") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(row_err(kind, "name must be a string")),
        };
        (String::from(id), name)
    } else {
        (String::new(), None)
    };
    let row = Row {
        kind,
        seq0,
        time0,
        turn: int("turn")?,
        step: int("step")?,
        index: int("index")?,
        dt,
        id,
        name,
        payloads: strings(payload_key)?,
    };
    row.check().map_err(|reason| Unparsable { reason })?;
    Ok(row)
}
