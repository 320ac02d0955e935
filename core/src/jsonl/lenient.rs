//! Lenient reading of core payloads (session.md Q1, E4).
//!
//! The reference validates only the message shapes (M1–M6) and the
//! request-header config (V4) when it loads a log; dsh's typed payloads are
//! stricter (section 4 exactly). A log the reference wrote with an extra key
//! or an older/newer shape of a field dsh does not interpret must still load:
//! [`reduce`] keeps the keys dsh owns (dropping the others, and fields whose
//! shape dsh cannot read but does not need), the typed decoder then reads
//! that, and the event keeps its source line so it writes back byte for byte.
//! What dsh owns (turn and step numbers, ids, messages, the header config) is
//! never dropped: when it is missing or malformed the event stays invalid.

use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use crate::chunk::TokenUsage;
use crate::options::ToolSchema;
use crate::session::{ToolError, types};

use super::write::write_value_js;

/// The keys of each core payload dsh reads (section 4), or `None` for a
/// type without a lenient reading.
fn owned_keys(event_type: &str) -> Option<&'static [&'static str]> {
    Some(match event_type {
        types::TURN_START => &["turn"],
        types::TURN_END => &["turn", "reason"],
        types::STEP_START | types::STEP_END => &["turn", "step"],
        types::ASSISTANT_MESSAGE => &["turn", "step", "message", "usage", "interrupted"],
        types::TOOL_CALL => &["turn", "step", "callId", "name", "arguments"],
        types::TOOL_RESULT => &["turn", "step", "message", "error", "meta"],
        types::TODO_WRITE => &["todos"],
        types::REQUEST_HEADER => &["header", "reason"],
        types::REQUEST_CONTEXT => &["provider", "model", "contextWindow"],
        types::END_SEED => &[],
        _ => return None,
    })
}

fn parses<T: serde::de::DeserializeOwned>(v: &Value) -> bool {
    T::deserialize(v).is_ok()
}

/// Keeps only `keys` of `o`, in their order.
fn only(o: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    o.iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The payload of a core `event_type` reduced to what dsh reads, or `None`
/// when there is no lenient reading (not an object, not a core type).
pub(crate) fn reduce(event_type: &str, data: &Value) -> Option<Value> {
    let keys = owned_keys(event_type)?;
    let Value::Object(o) = data else {
        return None;
    };
    // The reference's legacy `trigger` (persistence.md LG1): only beside
    // `turn`, and an object with a non-empty string `kind`; else malformed.
    if event_type == types::TURN_START
        && let Some(t) = o.get("trigger")
    {
        let kind = t.get("kind").and_then(Value::as_str);
        if o.len() != 2 || !t.is_object() || kind.is_none_or(str::is_empty) {
            return None;
        }
    }
    let mut r = only(o, keys);
    match event_type {
        types::ASSISTANT_MESSAGE => {
            // Token accounting of another shape, or `interrupted:false`.
            if r.get("usage").is_some_and(|u| !parses::<TokenUsage>(u)) {
                r.shift_remove("usage");
            }
            if r.get("interrupted")
                .is_some_and(|v| *v != Value::Bool(true))
            {
                r.shift_remove("interrupted");
            }
        }
        types::TOOL_CALL => {
            // Arguments as a JSON value (an older shape): its JSON text.
            if let Some(args) = r.get_mut("arguments")
                && !args.is_string()
            {
                let mut text = Vec::new();
                write_value_js(&mut text, args);
                *args = Value::String(String::from_utf8(text).ok()?);
            }
        }
        types::TOOL_RESULT => {
            if let Some(Value::Object(e)) = r.get("error") {
                let e = Value::Object(only(e, &["name", "code"]));
                if parses::<ToolError>(&e) {
                    r.insert(String::from("error"), e);
                } else {
                    r.shift_remove("error");
                }
            } else if r.contains_key("error") {
                r.shift_remove("error");
            }
        }
        types::TODO_WRITE => {
            if let Some(Value::Array(items)) = r.get_mut("todos") {
                for item in items {
                    if let Value::Object(i) = item {
                        *i = only(i, &["content", "status"]);
                    }
                }
            }
        }
        types::REQUEST_HEADER => {
            if let Some(Value::Object(h)) = r.get_mut("header") {
                *h = only(h, &["config", "adapterDefaults", "system", "tools"]);
                if let Some(Value::Object(d)) = h.get_mut("adapterDefaults") {
                    *d = only(d, &["reasoningEffort", "maxTokens"]);
                }
                if h.get("system").is_some_and(|s| !s.is_string()) {
                    h.shift_remove("system");
                }
                // A list of tools as names (or in any other shape than
                // schemas): dsh cannot rebuild the schemas, so it reads no
                // tools. A non-list (the conformance data's scrubbed
                // `"{{tools}}"`) stays an error.
                if h.get("tools")
                    .is_some_and(|t| t.is_array() && !parses::<Vec<ToolSchema>>(t))
                {
                    h.shift_remove("tools");
                }
            }
        }
        types::REQUEST_CONTEXT => {
            let safe = |v: &Value| {
                v.as_u64()
                    .is_some_and(|n| n <= crate::json::MAX_SAFE_INTEGER)
            };
            if r.get("contextWindow").is_some_and(|w| !safe(w)) {
                r.shift_remove("contextWindow");
            }
        }
        _ => {}
    }
    Some(Value::Object(r))
}
