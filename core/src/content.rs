//! Content blocks (streaming.md 1.1).

use alloc::string::String;
use alloc::vec::Vec;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::ids::{AttachmentId, CallId};
use crate::json::JsonObject;
use crate::object::{Fields, deserialize_via_fields, field_as};

/// One content block: a JSON object discriminated by `type` (C-1).
///
/// The set is open (C-7): a block of a type this crate does not know, or a
/// known type carrying keys it does not model, is kept as
/// [`ContentBlock::Unknown`] and writes back unchanged.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ContentBlock {
    /// `{"type":"text","text":…}`: visible text (C-2).
    Text {
        /// The text; may be empty.
        text: String,
    },
    /// `{"type":"reasoning","text":…}`: model thinking (C-3).
    Reasoning {
        /// The reasoning text; may be empty.
        text: String,
    },
    /// `{"type":"tool-call","id","name","arguments"}` (C-4).
    ToolCall {
        /// Provider-issued call id; may be empty.
        id: CallId,
        /// Tool name; may be empty.
        name: String,
        /// Raw argument JSON text exactly as the model produced it.
        arguments: String,
    },
    /// `{"type":"tool-result","toolCallId","content","isError"?}` (C-5).
    ToolResult {
        /// The `id` of the call this result answers.
        tool_call_id: CallId,
        /// Nested blocks, usually text and images; may be empty.
        content: Vec<ContentBlock>,
        /// `Some(true)` marks an error; absent means not an error.
        is_error: Option<bool>,
    },
    /// `{"type":"image","attachment":{…}}` (C-6).
    Image {
        /// The stored image reference.
        attachment: ImageAttachment,
    },
    /// A block of a plugin type (or an irregular known one), kept verbatim.
    Unknown(JsonObject),
}

/// A durable reference to stored image bytes (C-6). Written with the
/// reference's key order: `attachmentId, mediaType, width, height, bytes`
/// (then `name`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ImageAttachment {
    /// Content-addressed id, e.g. `"sha256:<64 hex>"`.
    pub attachment_id: AttachmentId,
    /// `image/png`, `image/jpeg`, `image/webp` or `image/gif`.
    pub media_type: String,
    /// Pixel width.
    pub width: u64,
    /// Pixel height.
    pub height: u64,
    /// Exact encoded byte length.
    pub bytes: u64,
    /// Optional display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ImageAttachment {
    /// An attachment with no display name (set [`name`](Self::name) after).
    pub fn new(
        attachment_id: AttachmentId,
        media_type: impl Into<String>,
        width: u64,
        height: u64,
        bytes: u64,
    ) -> Self {
        ImageAttachment {
            attachment_id,
            media_type: media_type.into(),
            width,
            height,
            bytes,
            name: None,
        }
    }
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A reasoning block.
    pub fn reasoning(text: impl Into<String>) -> Self {
        ContentBlock::Reasoning { text: text.into() }
    }

    /// A tool-call block.
    pub fn tool_call(
        id: impl Into<CallId>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The block's `type` discriminator (`""` for an unknown block without one).
    pub fn block_type(&self) -> &str {
        match self {
            ContentBlock::Text { .. } => "text",
            ContentBlock::Reasoning { .. } => "reasoning",
            ContentBlock::ToolCall { .. } => "tool-call",
            ContentBlock::ToolResult { .. } => "tool-result",
            ContentBlock::Image { .. } => "image",
            ContentBlock::Unknown(map) => map.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The text of a text or reasoning block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text } => Some(text),
            _ => None,
        }
    }

    fn from_fields(mut fields: Fields) -> Result<Self, String> {
        let Some(kind) = fields.str_of("type") else {
            return Err(String::from("content block needs a string \"type\""));
        };
        let known = match kind {
            "text" | "reasoning" if fields.only(&["type", "text"]) => {
                match fields.str_of("text").is_some() {
                    true => Some(kind == "text"),
                    false => None,
                }
            }
            _ => None,
        };
        if let Some(is_text) = known {
            let text = match fields.take("text") {
                Some(Value::String(s)) => s,
                _ => unreachable_text(),
            };
            return Ok(if is_text {
                ContentBlock::Text { text }
            } else {
                ContentBlock::Reasoning { text }
            });
        }
        match kind {
            "tool-call"
                if fields.only(&["type", "id", "name", "arguments"])
                    && fields.str_of("id").is_some()
                    && fields.str_of("name").is_some()
                    && fields.str_of("arguments").is_some() =>
            {
                let id = take_string(&mut fields, "id");
                let name = take_string(&mut fields, "name");
                let arguments = take_string(&mut fields, "arguments");
                Ok(ContentBlock::ToolCall {
                    id: CallId(id),
                    name,
                    arguments,
                })
            }
            "tool-result" if fields.only(&["type", "toolCallId", "content", "isError"]) => {
                let field = |key: &str| fields.entries.iter().find(|(k, _)| k == key);
                let valid_error = field("isError").is_none_or(|(_, v)| v.is_boolean());
                let content_is_array = field("content").is_some_and(|(_, v)| v.is_array());
                if !valid_error || !content_is_array || fields.str_of("toolCallId").is_none() {
                    // Kept whole, in its original key order.
                    return Ok(ContentBlock::Unknown(fields.into_object()));
                }
                let content_value = fields.take("content").unwrap_or_default();
                let content: Vec<ContentBlock> =
                    match Vec::<ContentBlock>::deserialize(content_value) {
                        Ok(c) => c,
                        Err(e) => return Err(alloc::format!("tool-result content: {e}")),
                    };
                let tool_call_id = take_string(&mut fields, "toolCallId");
                let is_error = fields.take("isError").and_then(|v| v.as_bool());
                Ok(ContentBlock::ToolResult {
                    tool_call_id: CallId(tool_call_id),
                    content,
                    is_error,
                })
            }
            "image" if fields.only(&["type", "attachment"]) => {
                let attachment = fields.take("attachment");
                match attachment.clone().and_then(field_as::<ImageAttachment>) {
                    Some(attachment) => Ok(ContentBlock::Image { attachment }),
                    None => {
                        if let Some(a) = attachment {
                            fields.entries.push((String::from("attachment"), a));
                        }
                        Ok(ContentBlock::Unknown(fields.into_object()))
                    }
                }
            }
            _ => Ok(ContentBlock::Unknown(fields.into_object())),
        }
    }
}

fn take_string(fields: &mut Fields, key: &str) -> String {
    match fields.take(key) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    }
}

#[cold]
fn unreachable_text() -> String {
    String::new()
}

deserialize_via_fields!(
    ContentBlock,
    "a content block object",
    ContentBlock::from_fields
);

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentBlock::Text { text } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
                map.end()
            }
            ContentBlock::Reasoning { text } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("type", "reasoning")?;
                map.serialize_entry("text", text)?;
                map.end()
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                let mut map = serializer.serialize_map(Some(4))?;
                map.serialize_entry("type", "tool-call")?;
                map.serialize_entry("id", id)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("arguments", arguments)?;
                map.end()
            }
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let mut map =
                    serializer.serialize_map(Some(3 + usize::from(is_error.is_some())))?;
                map.serialize_entry("type", "tool-result")?;
                map.serialize_entry("toolCallId", tool_call_id)?;
                map.serialize_entry("content", content)?;
                if let Some(flag) = is_error {
                    map.serialize_entry("isError", flag)?;
                }
                map.end()
            }
            ContentBlock::Image { attachment } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("type", "image")?;
                map.serialize_entry("attachment", attachment)?;
                map.end()
            }
            ContentBlock::Unknown(object) => object.serialize(serializer),
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for ContentBlock {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "ContentBlock({=str})", self.block_type())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(json: &str) -> ContentBlock {
        let block: ContentBlock = serde_json::from_str(json).expect("parses");
        assert_eq!(serde_json::to_string(&block).unwrap(), json, "round trip");
        block
    }

    #[test]
    fn core_blocks_round_trip() {
        assert_eq!(
            round_trip(r#"{"type":"text","text":"Hello"}"#),
            ContentBlock::text("Hello")
        );
        assert_eq!(
            round_trip(r#"{"type":"reasoning","text":""}"#),
            ContentBlock::reasoning("")
        );
        round_trip(
            r#"{"type":"tool-call","id":"call_00_x","name":"read_file","arguments":"{\"path\":\"README.md\"}"}"#,
        );
        let r = round_trip(
            r#"{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"Title"}],"isError":false}"#,
        );
        assert!(matches!(
            r,
            ContentBlock::ToolResult {
                is_error: Some(false),
                ..
            }
        ));
        round_trip(r#"{"type":"tool-result","toolCallId":"c","content":[]}"#);
        // The reference's key order.
        let i = round_trip(
            r#"{"type":"image","attachment":{"attachmentId":"sha256:aa","mediaType":"image/png","width":1,"height":2,"bytes":3}}"#,
        );
        assert!(matches!(i, ContentBlock::Image { .. }));
        let built = ContentBlock::Image {
            attachment: ImageAttachment {
                attachment_id: "sha256:aa".into(),
                media_type: "image/png".into(),
                width: 1,
                height: 2,
                bytes: 3,
                name: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&built).unwrap(),
            r#"{"type":"image","attachment":{"attachmentId":"sha256:aa","mediaType":"image/png","width":1,"height":2,"bytes":3}}"#
        );
    }

    #[test]
    fn unknown_and_irregular_blocks_are_kept_verbatim() {
        // C-7: plugin block types, key order included.
        let v = round_trip(r#"{"url":"x","type":"video","n":1.5}"#);
        assert_eq!(v.block_type(), "video");
        // A known type with an extra key is kept whole rather than losing the key.
        let t = round_trip(r#"{"type":"text","text":"a","cache":true}"#);
        assert!(matches!(t, ContentBlock::Unknown(_)));
        // A known type whose field has the wrong type is kept too, keys in place.
        round_trip(r#"{"content":"x","type":"tool-result","toolCallId":"c"}"#);
        round_trip(r#"{"type":"text","text":5}"#);
    }

    #[test]
    fn a_block_needs_a_type() {
        assert!(serde_json::from_str::<ContentBlock>(r#"{"text":"x"}"#).is_err());
        assert!(serde_json::from_str::<ContentBlock>(r#"[1]"#).is_err());
    }
}
