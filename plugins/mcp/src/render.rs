//! A `tools/call` result as the model sees it, rendered as the reference
//! renders it: text blocks joined with newlines, resource links as
//! `Resource link: <name> (<uri>)`, placeholders for images, audio and
//! embedded resources, `(<tool> returned no model-visible content)` for an
//! empty result; `isError` makes an error result.

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use serde_json::Value;

/// Most bytes of rendered text kept; more is cut with a marker.
pub const MAX_RENDERED_BYTES: usize = 1024 * 1024;

/// The model-visible text of an MCP content array.
pub fn content_text(content: &[Value], tool: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in content {
        let Some(obj) = block.as_object() else {
            parts.push("[unsupported MCP content block: expected an object]".into());
            continue;
        };
        let field = |k: &str| obj.get(k).and_then(Value::as_str);
        match field("type").unwrap_or("") {
            "text" => {
                if let Some(t) = field("text") {
                    parts.push(t.to_string());
                }
            }
            "image" => parts.push(format!(
                "[image unavailable: {}; this result was not admitted to durable model context; raw image data remains available to programmatic callers]",
                field("mimeType").unwrap_or("unknown media type")
            )),
            "resource_link" => match (field("name"), field("uri")) {
                (Some(name), Some(uri)) => parts.push(format!("Resource link: {name} ({uri})")),
                _ => parts.push(
                    "[resource link unavailable: the MCP block is missing its name or URI]".into(),
                ),
            },
            "audio" => parts.push(format!(
                "[audio result unsupported: {}; raw audio data remains available to programmatic callers]",
                field("mimeType").unwrap_or("unknown media type")
            )),
            "resource" => parts.push(
                "[embedded resource unsupported; raw resource data remains available to programmatic callers]"
                    .into(),
            ),
            other => {
                let shown = match obj.get("type") {
                    Some(Value::String(_)) => other.to_string(),
                    Some(v) => v.to_string(),
                    None => "undefined".to_string(),
                };
                parts.push(format!("[unsupported MCP content type: {shown}]"));
            }
        }
    }
    if parts.is_empty() {
        return format!("({tool} returned no model-visible content)");
    }
    parts.join("\n")
}

/// The outcome of a `tools/call` result of tool `tool` (its raw name).
pub fn render_result(result: &Value, tool: &str) -> ToolOutcome {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    let text = match result.get("content").and_then(Value::as_array) {
        None => match result.get("toolResult") {
            Some(v) => v.to_string(),
            None => match structured {
                Some(s) => s.to_string(),
                None => "(no output)".to_string(),
            },
        },
        Some(content) if content.is_empty() && structured.is_some() => {
            structured.map(Value::to_string).unwrap_or_default()
        }
        Some(content) => content_text(content, tool),
    };
    let text = cap_text(text);
    if is_error {
        ToolOutcome::error(text)
    } else {
        ToolOutcome::success(vec![ContentBlock::text(text)])
    }
}

/// `text` cut to [`MAX_RENDERED_BYTES`] with a marker.
pub fn cap_text(mut text: String) -> String {
    if text.len() <= MAX_RENDERED_BYTES {
        return text;
    }
    let total = text.len();
    let mut cut = MAX_RENDERED_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(
        "\n[MCP result truncated: {total} bytes, first {cut} kept]"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_of(o: &ToolOutcome) -> String {
        match o.content.first() {
            Some(ContentBlock::Text { text, .. }) => text.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn text_links_and_placeholders_join_with_newlines() {
        let r = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "resource_link", "name": "n", "uri": "file:///x"},
            {"type": "image", "mimeType": "image/png", "data": "AA=="},
            {"type": "audio", "mimeType": "audio/wav", "data": ""},
            {"type": "resource", "resource": {"uri": "x", "text": "t"}},
            {"type": "weird"},
            7
        ]});
        let o = render_result(&r, "t");
        assert!(!o.is_error());
        assert_eq!(
            text_of(&o),
            "a\nResource link: n (file:///x)\n[image unavailable: image/png; this result was not admitted to durable model context; raw image data remains available to programmatic callers]\n[audio result unsupported: audio/wav; raw audio data remains available to programmatic callers]\n[embedded resource unsupported; raw resource data remains available to programmatic callers]\n[unsupported MCP content type: weird]\n[unsupported MCP content block: expected an object]"
        );
    }

    #[test]
    fn empty_error_structured_and_legacy_results() {
        assert_eq!(
            text_of(&render_result(&json!({"content": []}), "echo")),
            "(echo returned no model-visible content)"
        );
        let e = render_result(
            &json!({"content": [{"type": "text", "text": "bad"}], "isError": true}),
            "x",
        );
        assert!(e.is_error());
        assert_eq!(text_of(&e), "Error: bad");
        let s = render_result(&json!({"content": [], "structuredContent": {"n": 1}}), "x");
        assert_eq!(text_of(&s), "{\"n\":1}");
        assert_eq!(
            text_of(&render_result(&json!({"toolResult": [1]}), "x")),
            "[1]"
        );
        assert_eq!(text_of(&render_result(&json!({}), "x")), "(no output)");
    }

    #[test]
    fn huge_text_is_capped() {
        let big = "é".repeat(MAX_RENDERED_BYTES);
        let o = render_result(&json!({"content": [{"type": "text", "text": big}]}), "x");
        let t = text_of(&o);
        assert!(t.len() < MAX_RENDERED_BYTES + 100);
        assert!(t.ends_with("kept]"));
    }
}
