//! The `POST /v1/messages` request body.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use dsh_core::{ContentBlock, GenerateOptions, LlmError, Message, MessageSource, Role};
use dsh_deepseek::{AttachmentSource, IMAGE_OMITTED, base64, codes};
use serde_json::{Map, Value, json};

/// The `anthropic-version` header value sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The default key variable.
pub const DEFAULT_API_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// `max_tokens` when the request sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 8_192;

/// Settings of the body beyond `GenerateOptions`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestOptions {
    /// `max_tokens` when the options set none.
    pub default_max_tokens: u64,
    /// Put `cache_control` markers on the system prompt, the last tool and
    /// the last message block (the cache-stable prefix).
    pub cache: bool,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            default_max_tokens: DEFAULT_MAX_TOKENS,
            cache: true,
        }
    }
}

/// Whether `url` is Anthropic's API: host `api.anthropic.com`, or a path
/// ending in `/v1/messages` (a gateway's Messages route).
pub fn is_anthropic_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = host.split(':').next().unwrap_or("").to_ascii_lowercase();
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    host == "api.anthropic.com" || path.ends_with("/v1/messages")
}

/// The thinking budget for a reasoning effort id (`None`: no thinking):
/// `low` 2048, `high` 16384, `max` 32000 tokens; `off` or unknown: none.
/// Kept below `max_tokens` (the API's rule) and at least 1024, else none.
pub fn thinking_budget(effort: Option<&str>, max_tokens: u64) -> Option<u64> {
    let want: u64 = match effort? {
        "low" => 2_048,
        "high" => 16_384,
        "max" => 32_000,
        _ => return None,
    };
    let budget = want.min(max_tokens.saturating_sub(1));
    (budget >= 1_024).then_some(budget)
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The signature (or redacted data) the replay state keeps for block `i`
/// of an assistant message.
fn replayed(message: &Message, i: usize) -> Option<(&str, &str)> {
    let MessageSource::Model {
        replay_state: Some(state),
        ..
    } = &message.source
    else {
        return None;
    };
    let entry = state.get("blocks")?.get(i)?;
    if let Some(s) = entry.get("signature").and_then(Value::as_str) {
        return Some(("signature", s));
    }
    entry
        .get("redactedData")
        .and_then(Value::as_str)
        .map(|d| ("redactedData", d))
}

fn image(
    attachment: &dsh_core::ImageAttachment,
    source: &mut Option<&mut dyn AttachmentSource>,
) -> Result<Value, LlmError> {
    match source {
        Some(s) => {
            let bytes = s.read(attachment)?;
            Ok(json!({"type": "image", "source": {
                "type": "base64", "media_type": attachment.media_type, "data": base64(&bytes)}}))
        }
        None => Ok(json!({"type": "text", "text": IMAGE_OMITTED})),
    }
}

fn blocks(
    message: &Message,
    source: &mut Option<&mut dyn AttachmentSource>,
) -> Result<Vec<Value>, LlmError> {
    let assistant = message.role == Role::Assistant;
    let mut out = Vec::new();
    for (i, block) in message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                out.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::Reasoning { text } if assistant => match replayed(message, i) {
                Some(("signature", sig)) => {
                    out.push(json!({"type": "thinking", "thinking": text, "signature": sig}))
                }
                Some((_, data)) => out.push(json!({"type": "redacted_thinking", "data": data})),
                None => {}
            },
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } if assistant => {
                let input = match serde_json::from_str::<Value>(arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => Value::Object(Map::new()),
                };
                out.push(json!({"type": "tool_use", "id": id.0, "name": name, "input": input}));
            }
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let mut inner = Vec::new();
                for c in content {
                    match c {
                        ContentBlock::Text { text } if !text.is_empty() => {
                            inner.push(json!({"type": "text", "text": text}));
                        }
                        ContentBlock::Image { attachment } => {
                            inner.push(image(attachment, source)?)
                        }
                        _ => {}
                    }
                }
                let mut r =
                    json!({"type": "tool_result", "tool_use_id": tool_call_id.0, "content": inner});
                if *is_error == Some(true) {
                    r["is_error"] = Value::Bool(true);
                }
                out.push(r);
            }
            ContentBlock::Image { attachment } if !assistant => {
                out.push(image(attachment, source)?)
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The JSON body of a streaming Messages request for `options`. System
/// messages join the `system` prompt; consecutive messages of one role are
/// merged (tool results travel in user messages); images are read from
/// `attachments` (without one, each is replaced by a note). An empty
/// conversation is `INVALID_REQUEST`.
pub fn build_request_body(
    options: &GenerateOptions,
    request: &RequestOptions,
    mut attachments: Option<&mut dyn AttachmentSource>,
) -> Result<String, LlmError> {
    let mut system: Vec<String> = options.system.iter().cloned().collect();
    let mut messages: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in &options.messages {
        if m.role == Role::System {
            for b in &m.content {
                if let ContentBlock::Text { text } = b {
                    system.push(text.clone());
                }
            }
            continue;
        }
        let content = blocks(m, &mut attachments)?;
        if content.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((role, c)) if *role == m.role => c.extend(content),
            _ => messages.push((m.role, content)),
        }
    }
    if messages.is_empty() {
        return Err(LlmError::coded(
            codes::INVALID_REQUEST,
            "anthropic: the request has no message with content",
        ));
    }
    if request.cache
        && let Some(last) = messages.last_mut().and_then(|(_, c)| c.last_mut())
        && let Some(o) = last.as_object_mut()
    {
        o.insert("cache_control".into(), ephemeral());
    }
    let max_tokens = options
        .max_tokens
        .unwrap_or(request.default_max_tokens)
        .max(1);
    let mut body = Map::new();
    body.insert("model".into(), Value::String(options.model.clone()));
    body.insert("max_tokens".into(), Value::from(max_tokens));
    body.insert("stream".into(), Value::Bool(true));
    let system = system.join("\n\n");
    if !system.is_empty() {
        let mut block = json!({"type": "text", "text": system});
        if request.cache {
            block["cache_control"] = ephemeral();
        }
        body.insert("system".into(), Value::Array(alloc::vec![block]));
    }
    let wire: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| {
            let role = if role == Role::Assistant {
                "assistant"
            } else {
                "user"
            };
            json!({"role": role, "content": content})
        })
        .collect();
    body.insert("messages".into(), Value::Array(wire));
    if let Some(tools) = options.tools.as_ref().filter(|t| !t.is_empty()) {
        let mut list: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        if request.cache
            && let Some(Value::Object(last)) = list.last_mut()
        {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(list));
    }
    if let Some(stop) = options.stop.as_ref().filter(|s| !s.is_empty()) {
        body.insert("stop_sequences".into(), json!(stop));
    }
    let effort = options.reasoning_effort.as_ref().map(|e| e.as_str());
    match thinking_budget(effort, max_tokens) {
        Some(budget) => {
            // The API refuses a temperature with thinking on.
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        None => {
            if let Some(t) = options.temperature.filter(|t| t.is_finite()) {
                body.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
            }
        }
    }
    Ok(Value::Object(body).to_string())
}
