//! Stateless per-event rules: lossless JSON (J1/J2), message shapes (M1–M6),
//! request-header config (V4), retired formats (A2/V6), envelope ranges (V3).

use alloc::string::String;
use serde_json::Value;

use crate::chunk::{FinishReason, LlmFailure, StreamChunk};
use crate::content::ContentBlock;
use crate::json::{JsonObject, MAX_SAFE_INTEGER};
use crate::message::{Message, MessageSource, Role};

use super::error::AppendError;
use super::event::{EventData, SessionEvent, types};
use super::payload::{AbortCause, HeaderReason, TurnEndReason};

/// Runs every stateless rule on `e`, in V-rule order (V1, V3, V4, V5, V6).
pub(crate) fn check_event(e: &SessionEvent) -> Result<(), AppendError> {
    check_lossless(e.data())?;
    check_envelope(e)?;
    match e.data() {
        EventData::RequestHeader(h) => h
            .header
            .validate()
            .map_err(|detail| AppendError::InvalidRequestHeader { detail })?,
        EventData::UserMessage(m) => check_message(types::USER_MESSAGE, m)?,
        EventData::AssistantMessage(a) => check_message(types::ASSISTANT_MESSAGE, &a.message)?,
        EventData::ToolResult(r) => check_message(types::TOOL_RESULT, &r.message)?,
        _ => {}
    }
    check_retired(e.data())
}

/// V3: `seq` a non-negative safe integer, `time` a safe integer.
pub(crate) fn check_envelope(e: &SessionEvent) -> Result<(), AppendError> {
    if e.seq() > MAX_SAFE_INTEGER {
        return Err(AppendError::InvalidEnvelope {
            detail: error_text!(
                "seq is not a safe integer",
                "seq {} is not a non-negative safe integer",
                e.seq()
            ),
        });
    }
    if e.time().unsigned_abs() > MAX_SAFE_INTEGER {
        return Err(AppendError::InvalidEnvelope {
            detail: error_text!(
                "time is not a safe integer",
                "time {} is not a safe integer",
                e.time()
            ),
        });
    }
    Ok(())
}

/// A2/V6: `request/header-delta`, `request/header` with reason `fallback`.
pub(crate) fn check_retired(data: &EventData) -> Result<(), AppendError> {
    match data {
        EventData::Plugin(p) if p.event_type == types::REQUEST_HEADER_DELTA => {
            Err(AppendError::Retired {
                what: String::from("request/header-delta"),
            })
        }
        EventData::RequestHeader(h) if h.reason == HeaderReason::Other("fallback".into()) => {
            Err(AppendError::Retired {
                what: String::from("request/header reason \"fallback\""),
            })
        }
        _ => Ok(()),
    }
}

fn invalid(rule: &'static str, detail: String) -> AppendError {
    AppendError::InvalidMessage { rule, detail }
}

/// M1–M6 for the message of a surface event of type `event_type`.
pub(crate) fn check_message(event_type: &str, msg: &Message) -> Result<(), AppendError> {
    if msg.id.as_str().is_empty() {
        return Err(invalid(
            "M1",
            error_text!(
                "message without id",
                "{event_type} lacks an identified message (empty id)"
            ),
        ));
    }
    let want = if event_type == types::ASSISTANT_MESSAGE {
        Role::Assistant
    } else {
        Role::User
    };
    if msg.role != want {
        let name = if want == Role::Assistant {
            "assistant"
        } else {
            "user"
        };
        return Err(invalid(
            "M2",
            error_text!(
                "message with the wrong role",
                "{event_type} message must have role \"{name}\""
            ),
        ));
    }
    if msg.source.kind().is_empty() {
        return Err(invalid(
            "M3",
            error_text!(
                "message source without kind",
                "{event_type} message source needs a non-empty kind"
            ),
        ));
    }
    if event_type == types::ASSISTANT_MESSAGE {
        let ok = match &msg.source {
            MessageSource::Model {
                provider, model, ..
            } => !provider.is_empty() && !model.is_empty(),
            MessageSource::Other(o) => {
                o.get("kind").and_then(Value::as_str) == Some("model")
                    && non_empty_str(o, "provider")
                    && non_empty_str(o, "model")
            }
            _ => false,
        };
        if !ok {
            return Err(invalid(
                "M5",
                String::from(
                    "assistant/message source must be {kind:\"model\"} with non-empty provider and model",
                ),
            ));
        }
    }
    if event_type == types::TOOL_RESULT {
        let call_id = match &msg.source {
            MessageSource::Tool { call_id } => Some(call_id.as_str()),
            MessageSource::Other(o) if o.get("kind").and_then(Value::as_str) == Some("tool") => {
                o.get("callId").and_then(Value::as_str)
            }
            _ => None,
        };
        let Some(call_id) = call_id.filter(|c| !c.is_empty()) else {
            return Err(invalid(
                "M6",
                String::from(
                    "tool/result message source must be {kind:\"tool\"} with a non-empty callId",
                ),
            ));
        };
        let block_ok = match msg.content.as_slice() {
            [ContentBlock::ToolResult { tool_call_id, .. }] => tool_call_id.as_str() == call_id,
            [ContentBlock::Unknown(o)] => {
                o.get("type").and_then(Value::as_str) == Some("tool-result")
                    && o.get("content").is_some_and(Value::is_array)
                    && o.get("toolCallId").and_then(Value::as_str) == Some(call_id)
            }
            _ => false,
        };
        if !block_ok {
            return Err(invalid(
                "M6",
                error_text!(
                    "tool/result must hold one tool-result block",
                    "tool/result message must hold exactly one tool-result block answering \"{call_id}\""
                ),
            ));
        }
    }
    Ok(())
}

fn non_empty_str(o: &JsonObject, key: &str) -> bool {
    o.get(key)
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

fn lossless_err(detail: &str) -> AppendError {
    AppendError::NotLosslessJson {
        detail: String::from(detail),
    }
}

fn check_f64(v: f64, what: &str) -> Result<(), AppendError> {
    if !v.is_finite() {
        return Err(lossless_err(&error_text!(
            "not a finite number",
            "{what} is not a finite number"
        )));
    }
    if v == 0.0 && v.is_sign_negative() {
        return Err(lossless_err(&error_text!(
            "negative zero",
            "{what} is negative zero"
        )));
    }
    Ok(())
}

/// J1/J2 over a JSON value: no negative zero (non-finite numbers cannot be
/// held by a `Value`).
pub(crate) fn check_value(v: &Value) -> Result<(), AppendError> {
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                check_f64(f, "a number")?;
            }
            Ok(())
        }
        Value::Array(a) => a.iter().try_for_each(check_value),
        Value::Object(o) => o.values().try_for_each(check_value),
        _ => Ok(()),
    }
}

fn check_object(o: &JsonObject) -> Result<(), AppendError> {
    o.values().try_for_each(check_value)
}

/// J2 over raw JSON text: rejects any `-0` number (`-0`, `-0.0`, `-0e5`).
pub(crate) fn check_raw(text: &str) -> Result<(), AppendError> {
    if has_negative_zero(text.as_bytes()) {
        return Err(lossless_err("a number is negative zero"));
    }
    Ok(())
}

/// Whether JSON text contains a negative-zero number token.
pub fn has_negative_zero(b: &[u8]) -> bool {
    let mut i = 0;
    let mut in_string = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'-' => {
                let mut j = i + 1;
                let mut all_zero = true;
                while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                    if b[j].is_ascii_digit() && b[j] != b'0' {
                        all_zero = false;
                    }
                    j += 1;
                }
                if j > i + 1 && all_zero {
                    return true;
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    false
}

fn check_blocks(blocks: &[ContentBlock]) -> Result<(), AppendError> {
    for b in blocks {
        match b {
            ContentBlock::Unknown(o) => check_object(o)?,
            ContentBlock::ToolResult { content, .. } => check_blocks(content)?,
            _ => {}
        }
    }
    Ok(())
}

fn check_source(s: &MessageSource) -> Result<(), AppendError> {
    match s {
        MessageSource::Other(o) => check_object(o),
        MessageSource::Model {
            replay_state: Some(v),
            ..
        } => check_value(v),
        _ => Ok(()),
    }
}

pub(crate) fn check_message_json(m: &Message) -> Result<(), AppendError> {
    check_blocks(&m.content)?;
    check_source(&m.source)?;
    check_object(&m.extra)
}

fn check_failure(f: &LlmFailure) -> Result<(), AppendError> {
    match f.provider_retry_after_ms {
        Some(v) => check_f64(v, "providerRetryAfterMs"),
        None => Ok(()),
    }
}

fn check_chunk(c: &StreamChunk) -> Result<(), AppendError> {
    match c {
        StreamChunk::BlockEnd { block, .. } => check_blocks(core::slice::from_ref(&**block)),
        StreamChunk::Finish {
            reason,
            replay_state,
        } => {
            match &**reason {
                FinishReason::Other(o) => check_object(o)?,
                FinishReason::Aborted { failure } | FinishReason::Error { failure } => {
                    check_failure(failure)?
                }
                _ => {}
            }
            if let Some(r) = replay_state {
                check_value(&r.response)?;
                if let Some(blocks) = &r.blocks {
                    blocks.iter().try_for_each(check_value)?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// J1/J2 over typed event data (A1, V1).
pub(crate) fn check_lossless(data: &EventData) -> Result<(), AppendError> {
    match data {
        EventData::UserMessage(m) => check_message_json(m),
        EventData::AssistantMessage(a) => check_message_json(&a.message),
        EventData::ToolResult(r) => {
            check_message_json(&r.message)?;
            match &r.meta {
                Some(raw) => check_raw(raw.get()),
                None => Ok(()),
            }
        }
        // Deltas carry only strings and indexes: nothing to check (and no
        // view to build, which costs a UTF-8 check of inline text).
        EventData::AssistantChunk(c) => match c.chunk_ref() {
            StreamChunk::TextDelta { .. }
            | StreamChunk::ReasoningDelta { .. }
            | StreamChunk::ToolCallDelta { .. } => Ok(()),
            chunk => check_chunk(chunk),
        },
        EventData::TurnEnd(t) => match &t.reason {
            TurnEndReason::Other(o) => check_object(o),
            TurnEndReason::Error { error } => check_failure(error),
            TurnEndReason::Aborted {
                cause: AbortCause::Other(o),
            } => check_object(o),
            _ => Ok(()),
        },
        EventData::RequestHeader(h) => {
            if let Some(t) = h.header.config.temperature {
                check_f64(t, "config.temperature")?;
            }
            if let Some(tools) = &h.header.tools {
                tools.iter().try_for_each(|t| check_value(&t.parameters))?;
            }
            Ok(())
        }
        EventData::LlmRetry(r) => {
            check_f64(r.delay_ms, "delayMs")?;
            check_failure(&r.failure)
        }
        EventData::InboxSpliced(s) => s.inserted.iter().try_for_each(|m| check_message_json(m)),
        EventData::Plugin(p) => check_raw(p.data.get()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::has_negative_zero;

    #[test]
    fn negative_zero_tokens_are_found_outside_strings() {
        for t in [
            r#"{"v":-0}"#,
            r#"[-0.0]"#,
            r#"-0e5"#,
            r#"{"a":"x","b":-0.000}"#,
        ] {
            assert!(has_negative_zero(t.as_bytes()), "{t}");
        }
        for t in [
            r#"{"v":0}"#,
            r#"{"v":-1}"#,
            r#"{"v":-0.5}"#,
            r#"{"s":"-0"}"#,
            r#""a\"-0""#,
            r#"-10"#,
        ] {
            assert!(!has_negative_zero(t.as_bytes()), "{t}");
        }
    }
}
