//! Messages and their sources (streaming.md 1.2, 1.3).

use alloc::string::String;
use alloc::vec::Vec;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::ids::{CallId, MessageId};
use crate::json::JsonObject;
use crate::object::{Fields, deserialize_via_fields};

/// Who speaks a message (M-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Role {
    /// `"system"`.
    System,
    /// `"user"` (tool results travel as user messages, M-4).
    User,
    /// `"assistant"`.
    Assistant,
}

/// A message field, used to remember the key order a message was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MessageKey {
    /// `id`.
    Id,
    /// `role`.
    Role,
    /// `content`.
    Content,
    /// `source`.
    Source,
}

/// The order in which a message's four fields are written.
///
/// Logs written by the reference use different orders for different producers
/// (`content,source,role,id` for user input, `role,content,source,id` for model
/// output, `source,content,role,id` for tool results); keeping the order makes
/// a log round-trip byte for byte (session.md J4).
pub(crate) type MessageKeyOrder = [MessageKey; 4];

/// The reference's order for user and plugin input messages.
pub(crate) const USER_KEY_ORDER: MessageKeyOrder = [
    MessageKey::Content,
    MessageKey::Source,
    MessageKey::Role,
    MessageKey::Id,
];
/// The reference's order for assembled model messages.
pub(crate) const MODEL_KEY_ORDER: MessageKeyOrder = [
    MessageKey::Role,
    MessageKey::Content,
    MessageKey::Source,
    MessageKey::Id,
];
/// The reference's order for tool-result messages.
pub(crate) const TOOL_KEY_ORDER: MessageKeyOrder = [
    MessageKey::Source,
    MessageKey::Content,
    MessageKey::Role,
    MessageKey::Id,
];

/// An immutable conversation message (M-1).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Message {
    /// Message identity; a rewrite keeps it (M-3).
    pub id: MessageId,
    /// Who speaks.
    pub role: Role,
    /// The blocks; may be empty.
    pub content: Vec<ContentBlock>,
    /// Provenance.
    pub source: MessageSource,
    /// Extra top-level keys a producer added (session.md 4.4), written after
    /// the four fields.
    pub extra: JsonObject,
    /// The order the four fields are written in.
    pub key_order: MessageKeyOrder,
}

impl Message {
    /// A user-role message with a `user` source.
    pub fn user(id: impl Into<MessageId>, content: Vec<ContentBlock>) -> Self {
        Message {
            id: id.into(),
            role: Role::User,
            content,
            source: MessageSource::User,
            extra: JsonObject::new(),
            key_order: USER_KEY_ORDER,
        }
    }

    /// An assistant message produced by a model (M-5).
    pub fn model(
        id: impl Into<MessageId>,
        content: Vec<ContentBlock>,
        source: MessageSource,
    ) -> Self {
        Message {
            id: id.into(),
            role: Role::Assistant,
            content,
            source,
            extra: JsonObject::new(),
            key_order: MODEL_KEY_ORDER,
        }
    }

    /// A tool-result message of the exact M-4 shape; `isError` is always written.
    pub fn tool_result(
        id: impl Into<MessageId>,
        call_id: impl Into<CallId>,
        content: Vec<ContentBlock>,
        is_error: bool,
    ) -> Self {
        let call_id = call_id.into();
        Message {
            id: id.into(),
            role: Role::User,
            content: alloc::vec![ContentBlock::ToolResult {
                tool_call_id: call_id.clone(),
                content,
                is_error: Some(is_error),
            }],
            source: MessageSource::Tool { call_id },
            extra: JsonObject::new(),
            key_order: TOOL_KEY_ORDER,
        }
    }

    #[cfg(test)]
    /// Whether this is a tool-result message in the M-4 shape.
    pub(crate) fn is_tool_result(&self) -> bool {
        matches!(
            (&self.source, self.content.as_slice()),
            (MessageSource::Tool { call_id }, [ContentBlock::ToolResult { tool_call_id, .. }])
                if call_id == tool_call_id
        ) && self.role == Role::User
    }

    fn from_fields(mut fields: Fields) -> Result<Self, String> {
        let mut order = [MessageKey::Id; 4];
        let mut seen = 0usize;
        for (key, _) in &fields.entries {
            let k = match key.as_str() {
                "id" => MessageKey::Id,
                "role" => MessageKey::Role,
                "content" => MessageKey::Content,
                "source" => MessageKey::Source,
                _ => continue,
            };
            if seen < 4 {
                order[seen] = k;
                seen += 1;
            }
        }
        let id = match fields.take("id") {
            Some(Value::String(s)) => MessageId(s),
            Some(_) => return Err(String::from("message \"id\" must be a string")),
            None => return Err(String::from("message is missing \"id\"")),
        };
        let role = match fields.take("role") {
            Some(v) => Role::deserialize(v).map_err(|_| {
                String::from("message \"role\" must be \"system\", \"user\" or \"assistant\"")
            })?,
            None => return Err(String::from("message is missing \"role\"")),
        };
        let content = match fields.take("content") {
            Some(v @ Value::Array(_)) => Vec::<ContentBlock>::deserialize(v)
                .map_err(|e| alloc::format!("message content: {e}"))?,
            Some(_) => return Err(String::from("message \"content\" must be an array")),
            None => return Err(String::from("message is missing \"content\"")),
        };
        let source = match fields.take("source") {
            Some(v) => {
                MessageSource::deserialize(v).map_err(|e| alloc::format!("message source: {e}"))?
            }
            None => return Err(String::from("message is missing \"source\"")),
        };
        Ok(Message {
            id,
            role,
            content,
            source,
            extra: fields.into_object(),
            key_order: order,
        })
    }
}

deserialize_via_fields!(Message, "a message object", Message::from_fields);

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4 + self.extra.len()))?;
        for key in self.key_order {
            match key {
                MessageKey::Id => map.serialize_entry("id", &self.id)?,
                MessageKey::Role => map.serialize_entry("role", &self.role)?,
                MessageKey::Content => map.serialize_entry("content", &self.content)?,
                MessageKey::Source => map.serialize_entry("source", &self.source)?,
            }
        }
        for (k, v) in &self.extra {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// One named section of a `snapshot` context (CF-1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct Section {
    /// The contributing subsystem.
    pub name: String,
    /// Its model-facing text, exactly as assembled.
    pub text: String,
}

/// The context form a plugin source declares (CF-1, CF-2).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ContextForm {
    /// Instructions read from workspace files.
    Instructions,
    /// Items available this session.
    Catalog,
    /// Current state; replaces an earlier snapshot from the same producer.
    Snapshot {
        /// The ordered sections.
        sections: Vec<Section>,
    },
    /// A one-off account of something that just happened.
    Notice {
        /// One-line summary (at most 120 UTF-16 units, CF-4).
        summary: String,
    },
    /// A message another agent addressed to this one.
    Relay,
    /// Material lifted from another session's log.
    Recall,
}

impl ContextForm {
    /// The wire value of `form`.
    pub fn name(&self) -> &'static str {
        match self {
            ContextForm::Instructions => "instructions",
            ContextForm::Catalog => "catalog",
            ContextForm::Snapshot { .. } => "snapshot",
            ContextForm::Notice { .. } => "notice",
            ContextForm::Relay => "relay",
            ContextForm::Recall => "recall",
        }
    }

    /// A notice whose summary is capped as CF-4 says: longer than 120 UTF-16
    /// units becomes its first 119 units and `…`.
    pub fn notice(summary: &str) -> Self {
        ContextForm::Notice {
            summary: cap_summary(summary),
        }
    }
}

/// Caps a notice summary at 120 UTF-16 code units (CF-4).
pub(crate) fn cap_summary(summary: &str) -> String {
    let units: usize = summary.chars().map(char::len_utf16).sum();
    if units <= 120 {
        return String::from(summary);
    }
    let mut out = String::new();
    let mut used = 0usize;
    for c in summary.chars() {
        let n = c.len_utf16();
        if used + n > 119 {
            break;
        }
        out.push(c);
        used += n;
    }
    out.push('\u{2026}');
    out
}

/// Where a message came from (MS-1). The set is open; unknown kinds and
/// unknown form values are kept verbatim.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MessageSource {
    /// `{"kind":"user"}`.
    User,
    /// `{"kind":"plugin","plugin":…,"form"?…}`.
    Plugin {
        /// Producer name.
        plugin: String,
        /// Declared context form, if any.
        form: Option<ContextForm>,
    },
    /// `{"kind":"model","provider","model","replayState"?}`.
    Model {
        /// Provider route that produced the message.
        provider: String,
        /// Provider model id.
        model: String,
        /// Adapter-private replay state.
        replay_state: Option<Value>,
    },
    /// `{"kind":"tool","callId":…}`.
    Tool {
        /// The call this result answers.
        call_id: CallId,
    },
    /// Any other kind, or a known kind with fields this crate does not model.
    Other(JsonObject),
}

impl MessageSource {
    /// The `kind` discriminator.
    pub fn kind(&self) -> &str {
        match self {
            MessageSource::User => "user",
            MessageSource::Plugin { .. } => "plugin",
            MessageSource::Model { .. } => "model",
            MessageSource::Tool { .. } => "tool",
            MessageSource::Other(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// A plugin source without a form.
    pub fn plugin(name: impl Into<String>) -> Self {
        MessageSource::Plugin {
            plugin: name.into(),
            form: None,
        }
    }

    /// A model source without replay state.
    pub fn model(provider: impl Into<String>, model: impl Into<String>) -> Self {
        MessageSource::Model {
            provider: provider.into(),
            model: model.into(),
            replay_state: None,
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let Some(kind) = fields.str_of("kind") else {
            return Err(String::from("message source needs a string \"kind\""));
        };
        let typed = match kind {
            "user" if fields.only(&["kind"]) => Some(MessageSource::User),
            "tool" if fields.only(&["kind", "callId"]) => {
                fields.str_of("callId").map(|id| MessageSource::Tool {
                    call_id: CallId::from(id),
                })
            }
            "model" if fields.only(&["kind", "provider", "model", "replayState"]) => {
                match (fields.str_of("provider"), fields.str_of("model")) {
                    (Some(p), Some(m)) => Some(MessageSource::Model {
                        provider: String::from(p),
                        model: String::from(m),
                        replay_state: fields
                            .entries
                            .iter()
                            .find(|(k, _)| k == "replayState")
                            .map(|(_, v)| v.clone()),
                    }),
                    _ => None,
                }
            }
            "plugin" => plugin_source(&fields),
            _ => None,
        };
        Ok(typed.unwrap_or_else(|| MessageSource::Other(fields.into_object())))
    }
}

fn plugin_source(fields: &Fields) -> Option<MessageSource> {
    let plugin = String::from(fields.str_of("plugin")?);
    let form = match fields.entries.iter().find(|(k, _)| k == "form") {
        None => {
            return fields
                .only(&["kind", "plugin"])
                .then_some(MessageSource::Plugin { plugin, form: None });
        }
        Some((_, v)) => v.as_str()?,
    };
    let form = match form {
        "instructions" if fields.only(&["kind", "plugin", "form"]) => ContextForm::Instructions,
        "catalog" if fields.only(&["kind", "plugin", "form"]) => ContextForm::Catalog,
        "relay" if fields.only(&["kind", "plugin", "form"]) => ContextForm::Relay,
        "recall" if fields.only(&["kind", "plugin", "form"]) => ContextForm::Recall,
        "notice" if fields.only(&["kind", "plugin", "form", "summary"]) => ContextForm::Notice {
            summary: String::from(fields.str_of("summary")?),
        },
        "snapshot" if fields.only(&["kind", "plugin", "form", "sections"]) => {
            let sections = fields.entries.iter().find(|(k, _)| k == "sections")?;
            ContextForm::Snapshot {
                sections: Vec::<Section>::deserialize(&sections.1).ok()?,
            }
        }
        _ => return None,
    };
    Some(MessageSource::Plugin {
        plugin,
        form: Some(form),
    })
}

deserialize_via_fields!(
    MessageSource,
    "a message source object",
    MessageSource::from_fields
);

impl Serialize for MessageSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageSource::User => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("kind", "user")?;
                map.end()
            }
            MessageSource::Plugin { plugin, form } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("kind", "plugin")?;
                map.serialize_entry("plugin", plugin)?;
                if let Some(form) = form {
                    map.serialize_entry("form", form.name())?;
                    match form {
                        ContextForm::Snapshot { sections } => {
                            map.serialize_entry("sections", sections)?
                        }
                        ContextForm::Notice { summary } => {
                            map.serialize_entry("summary", summary)?
                        }
                        _ => {}
                    }
                }
                map.end()
            }
            MessageSource::Model {
                provider,
                model,
                replay_state,
            } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("kind", "model")?;
                map.serialize_entry("provider", provider)?;
                map.serialize_entry("model", model)?;
                if let Some(state) = replay_state {
                    map.serialize_entry("replayState", state)?;
                }
                map.end()
            }
            MessageSource::Tool { call_id } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("kind", "tool")?;
                map.serialize_entry("callId", call_id)?;
                map.end()
            }
            MessageSource::Other(object) => object.serialize(serializer),
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for MessageSource {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "MessageSource({=str})", self.kind())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for ContextForm {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "ContextForm({=str})", self.name())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Message {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "Message {{ id: {}, role: {}, blocks: {=usize}, source: {} }}",
            self.id,
            self.role,
            self.content.len(),
            self.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(json: &str) -> T {
        let value: T = serde_json::from_str(json).expect("parses");
        assert_eq!(serde_json::to_string(&value).unwrap(), json);
        value
    }

    #[test]
    fn messages_keep_their_key_order() {
        round_trip::<Message>(
            r#"{"id":"m","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#,
        );
        round_trip::<Message>(r#"{"content":[],"source":{"kind":"user"},"role":"user","id":"m"}"#);
        let m = round_trip::<Message>(
            r#"{"source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"ok"}],"isError":false}],"role":"user","id":"x"}"#,
        );
        assert!(m.is_tool_result());
        round_trip::<Message>(
            r#"{"role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m","replayState":{"a":[1,2]}},"id":"x","usage":{"z":1,"a":2}}"#,
        );
    }

    #[test]
    fn constructors_write_the_reference_shapes() {
        let m = Message::tool_result("i", "call_0", alloc::vec![ContentBlock::text("ok")], false);
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"source":{"kind":"tool","callId":"call_0"},"content":[{"type":"tool-result","toolCallId":"call_0","content":[{"type":"text","text":"ok"}],"isError":false}],"role":"user","id":"i"}"#
        );
    }

    #[test]
    fn message_errors_are_clear() {
        let err = serde_json::from_str::<Message>(
            r#"{"role":"user","content":[],"source":{"kind":"user"}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("missing \"id\""), "{err}");
        let err = serde_json::from_str::<Message>(
            r#"{"id":"a","role":"bot","content":[],"source":{"kind":"user"}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("role"), "{err}");
    }

    #[test]
    fn sources_and_forms_round_trip() {
        round_trip::<MessageSource>(r#"{"kind":"user"}"#);
        round_trip::<MessageSource>(
            r#"{"kind":"plugin","plugin":"dsh-goal","form":"notice","summary":"Goal updated: ship v1"}"#,
        );
        let s = round_trip::<MessageSource>(
            r#"{"kind":"plugin","plugin":"p","form":"snapshot","sections":[{"name":"env","text":"cwd=/repo"}]}"#,
        );
        assert!(matches!(
            s,
            MessageSource::Plugin {
                form: Some(ContextForm::Snapshot { .. }),
                ..
            }
        ));
        // CF-2: unknown forms and extra keys are preserved, not rejected.
        let o =
            round_trip::<MessageSource>(r#"{"kind":"plugin","plugin":"p","form":"dream","x":1}"#);
        assert!(matches!(o, MessageSource::Other(_)));
        round_trip::<MessageSource>(r#"{"kind":"goal","goalId":"g"}"#);
        round_trip::<MessageSource>(r#"{"kind":"plugin","plugin":"p","compactionId":"c"}"#);
    }

    #[test]
    fn notice_summaries_are_capped_in_utf16_units() {
        let short = "a".repeat(120);
        assert_eq!(cap_summary(&short), short);
        let long = "b".repeat(121);
        let capped = cap_summary(&long);
        assert_eq!(capped.chars().count(), 120);
        assert!(capped.ends_with('\u{2026}'));
        // An emoji is two UTF-16 units.
        let emoji = "😀".repeat(61);
        let capped = cap_summary(&emoji);
        assert_eq!(capped.chars().map(char::len_utf16).sum::<usize>(), 119);
    }
}
