//! The request body (5.4–5.8): messages, reasoning passback, tool calls and
//! results, the system slot, tools, sampling fields, thinking and effort.
//!
//! The body is compact JSON with keys in the reference order (D-14), e.g.
//! `{"model":…,"messages":[…],"stream":true,"stream_options":{"include_usage":true},…}`.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use dsh_core::{ContentBlock, GenerateOptions, ImageAttachment, LlmError, Message, Purpose, Role};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::codes;
use crate::config::{DeepSeekConfig, Effort, Thinking};

/// Reads stored image bytes for the image path (I-3): the "durable
/// attachment service" of D-10.
pub trait AttachmentSource {
    /// The encoded bytes of `attachment`. A store failure keeps its own code
    /// (e.g. `ATTACHMENT_NOT_FOUND`).
    fn read(&mut self, attachment: &ImageAttachment) -> Result<Vec<u8>, LlmError>;
}

/// The text that replaces an offloaded image (I-2).
pub const IMAGE_OMITTED: &str = "[image omitted to keep the request within its image limit; older images are omitted first. If this image is still needed, read its file again when a path is available; otherwise ask the user to attach it again.]";

fn unsupported(message: String) -> LlmError {
    LlmError::coded(codes::UNSUPPORTED_CONTENT, &message)
}

fn blocks_have_image(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|b| match b {
        ContentBlock::Image { .. } => true,
        ContentBlock::ToolResult { content, .. } => blocks_have_image(content),
        _ => false,
    })
}

/// Whether any message contains an image, nested tool-result content
/// included (D-10 step 2).
pub fn has_images(messages: &[Arc<Message>]) -> bool {
    messages.iter().any(|m| blocks_have_image(&m.content))
}

/// D-10 step 2, the image pre-checks, which run before any credential lookup
/// or I/O. Only applies when a message contains an image.
pub fn precheck_images(
    options: &GenerateOptions,
    config: &DeepSeekConfig,
    attachments_available: bool,
) -> Result<(), LlmError> {
    if !has_images(&options.messages) {
        return Ok(());
    }
    if !config
        .model(&options.model)
        .is_some_and(|m| m.accepts_images())
    {
        return Err(unsupported(format!(
            "DeepSeek model \"{}\" does not accept image input.",
            options.model
        )));
    }
    if !attachments_available {
        return Err(unsupported(String::from(
            "DeepSeek image conversion requires the durable attachment service.",
        )));
    }
    Ok(())
}

/// The wire `thinking` and `reasoning_effort` (D-15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireThinking {
    /// `thinking.type`, when sent.
    pub thinking: Option<Thinking>,
    /// `reasoning_effort`, when sent (never `off`).
    pub reasoning_effort: Option<Effort>,
}

/// D-15: decides the thinking fields, or raises `UNSUPPORTED_REASONING_EFFORT`.
pub fn wire_thinking(
    options: &GenerateOptions,
    config: &DeepSeekConfig,
) -> Result<WireThinking, LlmError> {
    let none = WireThinking {
        thinking: None,
        reasoning_effort: None,
    };
    // Rule 1: titles never think, and R is not even validated.
    if options.purpose == Some(Purpose::SessionTitle) {
        return Ok(WireThinking {
            thinking: Some(Thinking::Disabled),
            ..none
        });
    }
    // Rule 2.
    let requested = match &options.reasoning_effort {
        None => None,
        Some(id) => match Effort::parse(id.as_str()) {
            Some(e) => Some(e),
            None => {
                return Err(LlmError::coded(
                    codes::UNSUPPORTED_REASONING_EFFORT,
                    &format!(
                        "DeepSeek does not support reasoning effort \"{}\"",
                        id.as_str()
                    ),
                ));
            }
        },
    };
    // Rule 3.
    let effort = requested.or(config.reasoning_effort);
    // Rule 4.
    if let (Some(Thinking::Disabled), Some(e)) = (config.thinking, effort)
        && e != Effort::Off
    {
        return Err(LlmError::coded(
            codes::UNSUPPORTED_REASONING_EFFORT,
            &format!(
                "DeepSeek deployment does not support reasoning effort \"{}\"",
                e.as_str()
            ),
        ));
    }
    Ok(match effort {
        // Rule 5.
        Some(Effort::Off) => WireThinking {
            thinking: Some(Thinking::Disabled),
            ..none
        },
        // Rule 6.
        Some(e) => WireThinking {
            thinking: Some(Thinking::Enabled),
            reasoning_effort: Some(e),
        },
        // Rule 7.
        None => WireThinking {
            thinking: config.thinking,
            ..none
        },
    })
}

/// One part of an array `content`.
#[derive(Debug)]
enum Part {
    Text(String),
    /// A `data:` URL.
    Image(String),
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        match self {
            Part::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Part::Image(url) => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", &ImageUrl(url))?;
            }
        }
        map.end()
    }
}

struct ImageUrl<'a>(&'a str);

impl Serialize for ImageUrl<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("url", self.0)?;
        map.end()
    }
}

#[derive(Debug)]
enum UserContent {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug)]
struct ToolCallRef<'a> {
    id: &'a str,
    name: &'a str,
    arguments: &'a str,
}

/// One wire message.
#[derive(Debug)]
enum WireMessage<'a> {
    System(String),
    User(UserContent),
    Assistant {
        content: String,
        reasoning: String,
        tool_calls: Vec<ToolCallRef<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

struct Function<'a>(&'a ToolCallRef<'a>);

impl Serialize for Function<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("name", self.0.name)?;
        map.serialize_entry("arguments", self.0.arguments)?;
        map.end()
    }
}

impl Serialize for ToolCallRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("id", self.id)?;
        map.serialize_entry("type", "function")?;
        map.serialize_entry("function", &Function(self))?;
        map.end()
    }
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self {
            WireMessage::System(text) => {
                map.serialize_entry("role", "system")?;
                map.serialize_entry("content", text)?;
            }
            WireMessage::User(content) => {
                map.serialize_entry("role", "user")?;
                match content {
                    UserContent::Text(text) => map.serialize_entry("content", text)?,
                    UserContent::Parts(parts) => map.serialize_entry("content", parts)?,
                }
            }
            WireMessage::Assistant {
                content,
                reasoning,
                tool_calls,
            } => {
                map.serialize_entry("role", "assistant")?;
                // W-4: always a string, never null.
                map.serialize_entry("content", content)?;
                if !reasoning.is_empty() {
                    map.serialize_entry("reasoning_content", reasoning)?;
                }
                if !tool_calls.is_empty() {
                    map.serialize_entry("tool_calls", tool_calls)?;
                }
            }
            WireMessage::Tool {
                tool_call_id,
                content,
            } => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", tool_call_id)?;
                map.serialize_entry("content", content)?;
            }
        }
        map.end()
    }
}

fn concat_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            out.push_str(text);
        }
    }
    out
}

/// W-3 (and I-7).
fn system_message(m: &Message) -> WireMessage<'_> {
    WireMessage::System(concat_text(&m.content))
}

/// W-4 (and I-7): text, reasoning passback on every turn (Q-1, newer source),
/// tool calls in block order; other blocks are dropped.
fn assistant_message(m: &Message) -> WireMessage<'_> {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    for b in &m.content {
        match b {
            ContentBlock::Text { text } => content.push_str(text),
            ContentBlock::Reasoning { text } => reasoning.push_str(text),
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => tool_calls.push(ToolCallRef {
                id: id.as_str(),
                name,
                arguments,
            }),
            _ => {}
        }
    }
    WireMessage::Assistant {
        content,
        reasoning,
        tool_calls,
    }
}

/// W-5: the text-only user message.
fn text_user_message<'a>(m: &'a Message, out: &mut Vec<WireMessage<'a>>) {
    let text = concat_text(&m.content);
    let results: Vec<(&'a str, &'a [ContentBlock])> = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_call_id,
                content,
                ..
            } => Some((tool_call_id.as_str(), content.as_slice())),
            _ => None,
        })
        .collect();
    if !text.is_empty() || results.is_empty() {
        out.push(WireMessage::User(UserContent::Text(text)));
    }
    for (id, content) in results {
        // W-12: direct text children only; W-6: `isError` is not sent.
        let mut text = concat_text(content);
        if text.is_empty() {
            text = String::from("(no output)");
        }
        out.push(WireMessage::Tool {
            tool_call_id: id,
            content: text,
        });
    }
}

/// 5.7: the text-only path.
fn text_messages(messages: &[Arc<Message>]) -> Result<Vec<WireMessage<'_>>, LlmError> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        // W-2
        if blocks_have_image(&m.content) {
            return Err(unsupported(String::from(
                "The DeepSeek chat-completions adapter does not support image content.",
            )));
        }
        match m.role {
            Role::System => out.push(system_message(m)),
            Role::Assistant => out.push(assistant_message(m)),
            Role::User => text_user_message(m, &mut out),
        }
    }
    Ok(out)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard padded base64.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The I-2 cost of one image: its base64 length.
fn image_cost(a: &ImageAttachment) -> u64 {
    a.bytes.div_ceil(3).saturating_mul(4)
}

/// Every image block in request order (I-2 step 1).
fn walk_images<'a>(blocks: &'a [ContentBlock], out: &mut Vec<&'a ContentBlock>) {
    for b in blocks {
        match b {
            ContentBlock::Image { .. } => out.push(b),
            ContentBlock::ToolResult { content, .. } => walk_images(content, out),
            _ => {}
        }
    }
}

struct ImagePath<'s> {
    omitted: Vec<*const ContentBlock>,
    source: &'s mut dyn AttachmentSource,
}

impl ImagePath<'_> {
    fn is_omitted(&self, b: &ContentBlock) -> bool {
        self.omitted.iter().any(|p| core::ptr::eq(*p, b))
    }

    fn image_part(&mut self, a: &ImageAttachment) -> Result<Part, LlmError> {
        let bytes = self.source.read(a)?;
        Ok(Part::Image(format!(
            "data:{};base64,{}",
            a.media_type,
            base64(&bytes)
        )))
    }

    /// I-5: a tool result's content, recursively flattened.
    fn flatten(
        &mut self,
        blocks: &[ContentBlock],
        text: &mut String,
        images: &mut Vec<Part>,
    ) -> Result<(), LlmError> {
        for b in blocks {
            match b {
                ContentBlock::Text { text: t } => text.push_str(t),
                ContentBlock::Image { .. } if self.is_omitted(b) => text.push_str(IMAGE_OMITTED),
                ContentBlock::Image { attachment } => images.push(self.image_part(attachment)?),
                ContentBlock::ToolResult { content, .. } => self.flatten(content, text, images)?,
                _ => {}
            }
        }
        Ok(())
    }
}

fn flush_images(pending: &mut Vec<Part>, out: &mut Vec<WireMessage<'_>>) {
    if pending.is_empty() {
        return;
    }
    let mut parts = Vec::with_capacity(pending.len() + 1);
    parts.push(Part::Text(String::from(
        "Attached image(s) from tool result:",
    )));
    parts.append(pending);
    out.push(WireMessage::User(UserContent::Parts(parts)));
}

/// 5.8: the image-capable path.
fn image_messages<'a>(
    messages: &'a [Arc<Message>],
    config: &DeepSeekConfig,
    source: &mut dyn AttachmentSource,
) -> Result<Vec<WireMessage<'a>>, LlmError> {
    // I-1
    for m in messages {
        if matches!(m.role, Role::System | Role::Assistant) && blocks_have_image(&m.content) {
            let role = if m.role == Role::System {
                "system"
            } else {
                "assistant"
            };
            return Err(unsupported(format!(
                "The DeepSeek chat-completions adapter cannot represent image content in a {role} message."
            )));
        }
    }
    // I-2: offload the oldest images until the rest fit.
    let mut images = Vec::new();
    for m in messages {
        walk_images(&m.content, &mut images);
    }
    let mut total: u64 = images
        .iter()
        .map(|b| match b {
            ContentBlock::Image { attachment } => image_cost(attachment),
            _ => 0,
        })
        .fold(0, u64::saturating_add);
    let mut omitted = Vec::new();
    for b in &images {
        if total <= config.max_request_image_bytes {
            break;
        }
        if let ContentBlock::Image { attachment } = b {
            total = total.saturating_sub(image_cost(attachment));
        }
        omitted.push(*b as *const ContentBlock);
    }
    let mut path = ImagePath { omitted, source };
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut pending: Vec<Part> = Vec::new();
    for m in messages {
        match m.role {
            Role::System => {
                flush_images(&mut pending, &mut out);
                out.push(system_message(m));
            }
            Role::Assistant => {
                flush_images(&mut pending, &mut out);
                out.push(assistant_message(m));
            }
            Role::User => {
                // I-4
                let mut parts = Vec::new();
                let mut has_image = false;
                let mut has_results = false;
                for b in &m.content {
                    match b {
                        ContentBlock::Text { text } if !text.is_empty() => {
                            parts.push(Part::Text(text.clone()))
                        }
                        ContentBlock::Image { .. } if path.is_omitted(b) => {
                            parts.push(Part::Text(String::from(IMAGE_OMITTED)))
                        }
                        ContentBlock::Image { attachment } => {
                            has_image = true;
                            parts.push(path.image_part(attachment)?);
                        }
                        ContentBlock::ToolResult { .. } => has_results = true,
                        _ => {}
                    }
                }
                let content = if has_image {
                    UserContent::Parts(parts)
                } else {
                    let mut text = String::new();
                    for p in parts {
                        if let Part::Text(t) = p {
                            text.push_str(&t);
                        }
                    }
                    UserContent::Text(text)
                };
                let non_empty = match &content {
                    UserContent::Text(t) => !t.is_empty(),
                    UserContent::Parts(p) => !p.is_empty(),
                };
                if non_empty || !has_results {
                    flush_images(&mut pending, &mut out);
                    out.push(WireMessage::User(content));
                }
                // I-5
                for b in &m.content {
                    if let ContentBlock::ToolResult {
                        tool_call_id,
                        content,
                        ..
                    } = b
                    {
                        let mut text = String::new();
                        let mut images = Vec::new();
                        path.flatten(content, &mut text, &mut images)?;
                        if text.is_empty() {
                            text = String::from(if images.is_empty() {
                                "(no output)"
                            } else {
                                "(see attached image)"
                            });
                        }
                        out.push(WireMessage::Tool {
                            tool_call_id: tool_call_id.as_str(),
                            content: text,
                        });
                        pending.append(&mut images);
                    }
                }
            }
        }
    }
    flush_images(&mut pending, &mut out);
    Ok(out)
}

struct Tools<'a>(&'a [dsh_core::ToolSchema]);

struct ToolFunction<'a>(&'a dsh_core::ToolSchema);

impl Serialize for ToolFunction<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("name", &self.0.name)?;
        map.serialize_entry("description", &self.0.description)?;
        map.serialize_entry("parameters", &self.0.parameters)?;
        map.end()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for tool in self.0 {
            seq.serialize_element(&TypedFunction(tool))?;
        }
        seq.end()
    }
}

struct TypedFunction<'a>(&'a dsh_core::ToolSchema);

impl Serialize for TypedFunction<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("type", "function")?;
        map.serialize_entry("function", &ToolFunction(self.0))?;
        map.end()
    }
}

struct TypeOnly(&'static str);

impl Serialize for TypeOnly {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("type", self.0)?;
        map.end()
    }
}

struct IncludeUsage;

impl Serialize for IncludeUsage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("include_usage", &true)?;
        map.end()
    }
}

struct Temperature(f64);

impl Serialize for Temperature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        dsh_core::json::serialize_js_f64(&self.0, s)
    }
}

struct Body<'a> {
    options: &'a GenerateOptions,
    messages: Vec<WireMessage<'a>>,
    thinking: WireThinking,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let o = self.options;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", &o.model)?;
        map.serialize_entry("messages", &self.messages)?;
        map.serialize_entry("stream", &true)?;
        map.serialize_entry("stream_options", &IncludeUsage)?;
        if let Some(t) = self.thinking.thinking {
            map.serialize_entry("thinking", &TypeOnly(t.as_str()))?;
        }
        if let Some(e) = self.thinking.reasoning_effort {
            map.serialize_entry("reasoning_effort", e.as_str())?;
        }
        if let Some(tools) = o.tools.as_deref().filter(|t| !t.is_empty()) {
            map.serialize_entry("tools", &Tools(tools))?;
        }
        if let Some(t) = o.temperature {
            map.serialize_entry("temperature", &Temperature(t))?;
        }
        if let Some(n) = o.max_tokens {
            map.serialize_entry("max_tokens", &n)?;
        }
        if let Some(stop) = &o.stop {
            map.serialize_entry("stop", stop)?;
        }
        map.end()
    }
}

/// Builds the exact request body (5.5): D-10 image pre-checks, D-15
/// thinking, then the text-only (5.7) or image (5.8) message path.
///
/// `attachments` is the attachment service; without one an image request
/// fails with `UNSUPPORTED_CONTENT`.
pub fn build_request_body(
    options: &GenerateOptions,
    config: &DeepSeekConfig,
    attachments: Option<&mut dyn AttachmentSource>,
) -> Result<String, LlmError> {
    precheck_images(options, config, attachments.is_some())?;
    let thinking = wire_thinking(options, config)?;
    let history = match attachments {
        Some(source) if has_images(&options.messages) => {
            image_messages(&options.messages, config, source)?
        }
        _ => text_messages(&options.messages)?,
    };
    let mut messages = Vec::with_capacity(history.len() + 1);
    // W-1: the system option is the first message, even when empty.
    if let Some(system) = &options.system {
        messages.push(WireMessage::System(system.clone()));
    }
    messages.extend(history);
    let body = Body {
        options,
        messages,
        thinking,
    };
    serde_json::to_string(&body).map_err(|e| {
        LlmError::coded(
            codes::UNSUPPORTED_CONTENT,
            &format!("cannot serialize the DeepSeek request: {e}"),
        )
    })
}
