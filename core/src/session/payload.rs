//! The payloads (`data`) of the core session events (session.md 4).
//!
//! Every payload serializes to the exact JSON the spec shows, keys in the
//! order the reference writes them. Reading is strict about the shape (an
//! unknown key in a core payload is an error that names it) except where the
//! spec declares an open set (turn-end reasons, messages, content blocks),
//! which are kept losslessly. The log reader ([`crate::jsonl::Decoder`])
//! falls back to a lenient reading of a payload that fails this, keeping the
//! event's source text and reporting the deviation.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::chunk::{LlmFailure, TokenUsage};
use crate::ids::{CallId, RetryId};
use crate::json::{JsonObject, serialize_js_f64};
use crate::message::Message;
use crate::object::{Fields, deserialize_via_fields};

use super::fields::Strict;

/// `turn/start` data: `{"turn":n}` (4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct TurnStart {
    /// The turn number, 1 for the first turn (I2, I11).
    pub turn: u64,
}

impl TurnStart {
    /// The start of turn `turn`.
    pub fn new(turn: u64) -> Self {
        TurnStart { turn }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(fields, "turn/start data", &["turn"])?;
        Ok(TurnStart {
            turn: f.u64("turn")?,
        })
    }
}

deserialize_via_fields!(TurnStart, "turn/start data", TurnStart::from_fields);

impl Serialize for TurnStart {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("turn", &self.turn)?;
        map.end()
    }
}

/// `step/start` and `step/end` data: `{"turn":n,"step":k}` (4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct Step {
    /// The enclosing turn.
    pub turn: u64,
    /// The step number within the turn, from 1.
    pub step: u64,
}

impl Step {
    /// Step `step` of turn `turn`.
    pub fn new(turn: u64, step: u64) -> Self {
        Step { turn, step }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(fields, "step data", &["turn", "step"])?;
        Ok(Step {
            turn: f.u64("turn")?,
            step: f.u64("step")?,
        })
    }
}

deserialize_via_fields!(Step, "step data", Step::from_fields);

impl Serialize for Step {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.end()
    }
}

/// Why a turn was aborted: the cancel cause (4.2). Open set.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AbortCause {
    /// `{"kind":"user"}`.
    User,
    /// `{"kind":"parent"}`: the parent agent cancelled.
    Parent,
    /// `{"kind":"hook","reason":…}`.
    Hook {
        /// Hook-supplied text.
        reason: String,
    },
    /// `{"kind":"disposed"}`.
    Disposed,
    /// `{"kind":"legacy"}`: imported from a record that named no cause.
    Legacy,
    /// Any other shape, kept verbatim.
    Other(JsonObject),
}

impl AbortCause {
    fn from_fields(fields: Fields) -> Result<Self, String> {
        let Some(kind) = fields.str_of("kind") else {
            return Err(String::from("abort cause needs a string \"kind\""));
        };
        let typed = match kind {
            "user" if fields.only(&["kind"]) => Some(AbortCause::User),
            "parent" if fields.only(&["kind"]) => Some(AbortCause::Parent),
            "disposed" if fields.only(&["kind"]) => Some(AbortCause::Disposed),
            "legacy" if fields.only(&["kind"]) => Some(AbortCause::Legacy),
            "hook" if fields.only(&["kind", "reason"]) && first_is_kind(&fields) => {
                fields.str_of("reason").map(|r| AbortCause::Hook {
                    reason: String::from(r),
                })
            }
            _ => None,
        };
        Ok(typed.unwrap_or_else(|| AbortCause::Other(fields.into_object())))
    }
}

fn first_is_kind(fields: &Fields) -> bool {
    fields.entries.first().is_some_and(|(k, _)| k == "kind")
}

deserialize_via_fields!(AbortCause, "an abort cause", AbortCause::from_fields);

impl Serialize for AbortCause {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let kind = match self {
            AbortCause::User => "user",
            AbortCause::Parent => "parent",
            AbortCause::Disposed => "disposed",
            AbortCause::Legacy => "legacy",
            AbortCause::Hook { reason } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("kind", "hook")?;
                map.serialize_entry("reason", reason)?;
                return map.end();
            }
            AbortCause::Other(o) => return o.serialize(s),
        };
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("kind", kind)?;
        map.end()
    }
}

/// Why a turn ended (4.2). Open set: unknown kinds are kept unchanged.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TurnEndReason {
    /// `{"kind":"completed"}`.
    Completed,
    /// `{"kind":"aborted","reason":cause}`.
    Aborted {
        /// The cancel cause.
        cause: AbortCause,
    },
    /// `{"kind":"blocked"}`: a pre-step hook rejected the turn.
    Blocked,
    /// `{"kind":"error","error":LlmFailure}`.
    Error {
        /// The failure (non-provider failures use code `UNKNOWN`).
        error: LlmFailure,
    },
    /// `{"kind":"max-tokens"}`: some step of the turn hit the output cap.
    MaxTokens,
    /// `{"kind":"interrupted"}`: written only by crash repair.
    Interrupted,
    /// Any other kind (or a known kind with an irregular shape), verbatim.
    Other(JsonObject),
}

impl TurnEndReason {
    /// The `kind` discriminator.
    pub fn kind(&self) -> &str {
        match self {
            TurnEndReason::Completed => "completed",
            TurnEndReason::Aborted { .. } => "aborted",
            TurnEndReason::Blocked => "blocked",
            TurnEndReason::Error { .. } => "error",
            TurnEndReason::MaxTokens => "max-tokens",
            TurnEndReason::Interrupted => "interrupted",
            TurnEndReason::Other(o) => o.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let Some(kind) = fields.str_of("kind") else {
            return Err(String::from("turn-end reason needs a string \"kind\""));
        };
        let only_kind = fields.only(&["kind"]);
        let typed = match kind {
            "completed" if only_kind => Some(TurnEndReason::Completed),
            "blocked" if only_kind => Some(TurnEndReason::Blocked),
            "max-tokens" if only_kind => Some(TurnEndReason::MaxTokens),
            "interrupted" if only_kind => Some(TurnEndReason::Interrupted),
            "aborted" if fields.only(&["kind", "reason"]) && first_is_kind(&fields) => fields
                .entries
                .iter()
                .find(|(k, _)| k == "reason")
                .and_then(|(_, v)| AbortCause::deserialize(v).ok())
                .map(|cause| TurnEndReason::Aborted { cause }),
            "error" if fields.only(&["kind", "error"]) && first_is_kind(&fields) => fields
                .entries
                .iter()
                .find(|(k, _)| k == "error")
                .and_then(|(_, v)| failure_exactly(v))
                .map(|error| TurnEndReason::Error { error }),
            _ => None,
        };
        Ok(typed.unwrap_or_else(|| TurnEndReason::Other(fields.into_object())))
    }
}

/// An `LlmFailure` only when it writes back exactly as read (keys, order).
pub(crate) fn failure_exactly(v: &Value) -> Option<LlmFailure> {
    let failure = LlmFailure::deserialize(v).ok()?;
    let back = crate::json::to_value(&failure).ok()?;
    match (v, &back) {
        (Value::Object(a), Value::Object(b))
            if a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x == y) =>
        {
            Some(failure)
        }
        _ => None,
    }
}

deserialize_via_fields!(
    TurnEndReason,
    "a turn-end reason",
    TurnEndReason::from_fields
);

impl Serialize for TurnEndReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TurnEndReason::Aborted { cause } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("kind", "aborted")?;
                map.serialize_entry("reason", cause)?;
                map.end()
            }
            TurnEndReason::Error { error } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("kind", "error")?;
                map.serialize_entry("error", error)?;
                map.end()
            }
            TurnEndReason::Other(o) => o.serialize(s),
            other => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("kind", other.kind())?;
                map.end()
            }
        }
    }
}

/// `turn/end` data: `{"turn":n,"reason":TurnEndReason}` (4.2).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TurnEnd {
    /// The turn being closed.
    pub turn: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
}

impl TurnEnd {
    /// The end of turn `turn`, for `reason`.
    pub fn new(turn: u64, reason: TurnEndReason) -> Self {
        TurnEnd { turn, reason }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(fields, "turn/end data", &["turn", "reason"])?;
        let turn = f.u64("turn")?;
        let reason = f.typed("reason")?;
        Ok(TurnEnd { turn, reason })
    }
}

deserialize_via_fields!(TurnEnd, "turn/end data", TurnEnd::from_fields);

impl Serialize for TurnEnd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("reason", &self.reason)?;
        map.end()
    }
}

/// `assistant/message` data (4.6).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AssistantMessage {
    /// The turn of the model call.
    pub turn: u64,
    /// The step of the model call.
    pub step: u64,
    /// The assembled assistant message (shared with the derived history).
    pub message: Arc<Message>,
    /// Token accounting, when the adapter reported it.
    pub usage: Option<TokenUsage>,
    /// `true`: the turn was cancelled mid-stream and this is the delivered
    /// prefix (written as `"interrupted":true`, absent otherwise).
    pub interrupted: bool,
}

impl AssistantMessage {
    /// A message of `turn`/`step` without usage.
    pub fn new(turn: u64, step: u64, message: Message) -> Self {
        AssistantMessage {
            turn,
            step,
            message: Arc::new(message),
            usage: None,
            interrupted: false,
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "assistant/message data",
            &["turn", "step", "message", "usage", "interrupted"],
        )?;
        let turn = f.u64("turn")?;
        let step = f.u64("step")?;
        let message: Message = f.typed("message")?;
        let usage = f.opt_typed("usage")?;
        let interrupted = match f.opt("interrupted") {
            None => false,
            Some(Value::Bool(true)) => true,
            Some(_) => {
                return Err(String::from(
                    "assistant/message \"interrupted\" must be literally true when present",
                ));
            }
        };
        Ok(AssistantMessage {
            turn,
            step,
            message: Arc::new(message),
            usage,
            interrupted,
        })
    }
}

deserialize_via_fields!(
    AssistantMessage,
    "assistant/message data",
    AssistantMessage::from_fields
);

impl Serialize for AssistantMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("message", &*self.message)?;
        if let Some(usage) = &self.usage {
            map.serialize_entry("usage", usage)?;
        }
        if self.interrupted {
            map.serialize_entry("interrupted", &true)?;
        }
        map.end()
    }
}

/// `tool/call` data (4.7).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCall {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The call id from the model's `tool-call` block.
    pub call_id: CallId,
    /// The tool name.
    pub name: String,
    /// The raw arguments text exactly as the model produced it (never parsed).
    pub arguments: String,
}

impl ToolCall {
    /// The call `call_id` of tool `name` with `arguments` (the model's text).
    pub fn new(
        turn: u64,
        step: u64,
        call_id: CallId,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            turn,
            step,
            call_id,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "tool/call data",
            &["turn", "step", "callId", "name", "arguments"],
        )?;
        Ok(ToolCall {
            turn: f.u64("turn")?,
            step: f.u64("step")?,
            call_id: CallId(f.string("callId")?),
            name: f.string("name")?,
            arguments: f.string("arguments")?,
        })
    }
}

deserialize_via_fields!(ToolCall, "tool/call data", ToolCall::from_fields);

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(5))?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("callId", &self.call_id)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("arguments", &self.arguments)?;
        map.end()
    }
}

/// The internal failure identity of a tool result: `{"name","code"}` (4.8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolError {
    /// Error class name, e.g. `ToolOutcomeUnknownError`.
    pub name: String,
    /// Stable code, e.g. `TOOL_NOT_STARTED`.
    pub code: String,
}

impl ToolError {
    /// An error identity.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> Self {
        ToolError {
            name: name.into(),
            code: code.into(),
        }
    }
}

/// `tool/result` data (4.8).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolResult {
    /// The turn.
    pub turn: u64,
    /// The step (the same as the call's, I7).
    pub step: u64,
    /// The user-role tool-result message (shared with the derived history).
    pub message: Arc<Message>,
    /// Internal failure identity, not shown to the model.
    pub error: Option<ToolError>,
    /// Opaque tool-owned metadata, kept as its JSON text.
    pub meta: Option<Box<RawValue>>,
}

impl PartialEq for ToolResult {
    fn eq(&self, other: &Self) -> bool {
        self.turn == other.turn
            && self.step == other.step
            && self.message == other.message
            && self.error == other.error
            && self.meta.as_ref().map(|m| m.get()) == other.meta.as_ref().map(|m| m.get())
    }
}

impl ToolResult {
    /// A result without error identity or metadata.
    pub fn new(turn: u64, step: u64, message: Message) -> Self {
        ToolResult {
            turn,
            step,
            message: Arc::new(message),
            error: None,
            meta: None,
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "tool/result data",
            &["turn", "step", "message", "error", "meta"],
        )?;
        let turn = f.u64("turn")?;
        let step = f.u64("step")?;
        let message: Message = f.typed("message")?;
        let error = f.opt_typed("error")?;
        let meta = match f.opt("meta") {
            None => None,
            Some(v) => Some(
                serde_json::value::to_raw_value(&v)
                    .map_err(|e| alloc::format!("tool/result \"meta\": {e}"))?,
            ),
        };
        Ok(ToolResult {
            turn,
            step,
            message: Arc::new(message),
            error,
            meta,
        })
    }
}

deserialize_via_fields!(ToolResult, "tool/result data", ToolResult::from_fields);

impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("message", &*self.message)?;
        if let Some(error) = &self.error {
            map.serialize_entry("error", error)?;
        }
        if let Some(meta) = &self.meta {
            map.serialize_entry("meta", meta)?;
        }
        map.end()
    }
}

/// A todo item's status (4.9). Unknown values are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TodoStatus {
    /// `"pending"`.
    Pending,
    /// `"in_progress"` (several items may be in progress).
    InProgress,
    /// `"completed"`.
    Completed,
    /// Any other string.
    Other(String),
}

impl TodoStatus {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            TodoStatus::Pending => "pending",
            TodoStatus::InProgress => "in_progress",
            TodoStatus::Completed => "completed",
            TodoStatus::Other(s) => s,
        }
    }
}

impl Serialize for TodoStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TodoStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "pending" => TodoStatus::Pending,
            "in_progress" => TodoStatus::InProgress,
            "completed" => TodoStatus::Completed,
            _ => TodoStatus::Other(s),
        })
    }
}

/// One todo item: `{"content","status"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TodoItem {
    /// What to do.
    pub content: String,
    /// Its status.
    pub status: TodoStatus,
}

impl TodoItem {
    /// A todo of this text and status.
    pub fn new(content: impl Into<String>, status: TodoStatus) -> Self {
        TodoItem {
            content: content.into(),
            status,
        }
    }
}

/// `todo/write` data: the whole list; the latest one wins (4.9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TodoWrite {
    /// The items.
    pub todos: Vec<TodoItem>,
}

impl TodoWrite {
    /// The whole todo list, replacing the previous one.
    pub fn new(todos: Vec<TodoItem>) -> Self {
        TodoWrite { todos }
    }
}

/// Why a `request/header` was logged (4.10).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderReason {
    /// The first header of the log.
    Initial,
    /// The first request of a new loop instance over a log with headers.
    Resume,
    /// A later request whose canonical header differs.
    Change,
    /// Any other string (`"fallback"` is retired and rejected, A2/V6).
    Other(String),
}

impl HeaderReason {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            HeaderReason::Initial => "initial",
            HeaderReason::Resume => "resume",
            HeaderReason::Change => "change",
            HeaderReason::Other(s) => s,
        }
    }
}

impl Serialize for HeaderReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for HeaderReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "initial" => HeaderReason::Initial,
            "resume" => HeaderReason::Resume,
            "change" => HeaderReason::Change,
            _ => HeaderReason::Other(s),
        })
    }
}

/// `request/header` data: `{"header":EpochHeader,"reason":…}` (4.10).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RequestHeader {
    /// The header of this request epoch.
    pub header: super::header::EpochHeader,
    /// Why it was logged.
    pub reason: HeaderReason,
}

impl RequestHeader {
    /// A header epoch written for `reason`.
    pub fn new(header: super::header::EpochHeader, reason: HeaderReason) -> Self {
        RequestHeader { header, reason }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(fields, "request/header data", &["header", "reason"])?;
        let header = f.typed("header")?;
        let reason = f.typed("reason")?;
        Ok(RequestHeader { header, reason })
    }
}

deserialize_via_fields!(
    RequestHeader,
    "request/header data",
    RequestHeader::from_fields
);

impl Serialize for RequestHeader {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("header", &self.header)?;
        map.serialize_entry("reason", &self.reason)?;
        map.end()
    }
}

/// `request/context` data: route metadata (4.11).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestContext {
    /// Provider route.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Advertised context window; absent means "not advertised".
    pub context_window: Option<u64>,
}

impl RequestContext {
    /// The request context of `provider` and `model`.
    pub fn new(
        provider: impl Into<String>,
        model: impl Into<String>,
        context_window: Option<u64>,
    ) -> Self {
        RequestContext {
            provider: provider.into(),
            model: model.into(),
            context_window,
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "request/context data",
            &["provider", "model", "contextWindow"],
        )?;
        Ok(RequestContext {
            provider: f.string("provider")?,
            model: f.string("model")?,
            context_window: f.opt_u64("contextWindow")?,
        })
    }
}

deserialize_via_fields!(
    RequestContext,
    "request/context data",
    RequestContext::from_fields
);

impl Serialize for RequestContext {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("provider", &self.provider)?;
        map.serialize_entry("model", &self.model)?;
        if let Some(w) = self.context_window {
            map.serialize_entry("contextWindow", &w)?;
        }
        map.end()
    }
}

/// `llm/retry` data: a scheduled provider retry (streaming.md R-15).
#[derive(Clone, Debug, PartialEq)]
pub struct LlmRetry {
    /// Stable id of one retry chain (absent in older logs).
    pub retry_id: Option<RetryId>,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// Provider route.
    pub provider: String,
    /// `"normal"` or `"always"`.
    pub mode: String,
    /// The policy key (compact JSON text, R-11).
    pub policy_key: String,
    /// This retry's number, from 1.
    pub retry: u64,
    /// The budget (absent in `always` mode).
    pub max_retries: Option<u64>,
    /// The delay in milliseconds, unrounded.
    pub delay_ms: f64,
    /// The failure that is retried.
    pub failure: LlmFailure,
}

impl LlmRetry {
    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "llm/retry data",
            &[
                "retryId",
                "turn",
                "step",
                "provider",
                "mode",
                "policyKey",
                "retry",
                "maxRetries",
                "delayMs",
                "failure",
            ],
        )?;
        let retry_id = f.opt_string("retryId")?.map(RetryId);
        let turn = f.u64("turn")?;
        let step = f.u64("step")?;
        let provider = f.string("provider")?;
        let mode = f.string("mode")?;
        let policy_key = f.string("policyKey")?;
        let retry = f.u64("retry")?;
        let max_retries = f.opt_u64("maxRetries")?;
        let delay_ms = f
            .req("delayMs")?
            .as_f64()
            .ok_or_else(|| String::from("llm/retry \"delayMs\" must be a number"))?;
        let failure = failure_exactly(&f.req("failure")?)
            .ok_or_else(|| String::from("llm/retry \"failure\" is not an LlmFailure"))?;
        Ok(LlmRetry {
            retry_id,
            turn,
            step,
            provider,
            mode,
            policy_key,
            retry,
            max_retries,
            delay_ms,
            failure,
        })
    }
}

deserialize_via_fields!(LlmRetry, "llm/retry data", LlmRetry::from_fields);

impl Serialize for LlmRetry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Js(f64);
        impl Serialize for Js {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serialize_js_f64(&self.0, s)
            }
        }
        let mut map = s.serialize_map(None)?;
        if let Some(id) = &self.retry_id {
            map.serialize_entry("retryId", id)?;
        }
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("provider", &self.provider)?;
        map.serialize_entry("mode", &self.mode)?;
        map.serialize_entry("policyKey", &self.policy_key)?;
        map.serialize_entry("retry", &self.retry)?;
        if let Some(m) = self.max_retries {
            map.serialize_entry("maxRetries", &m)?;
        }
        map.serialize_entry("delayMs", &Js(self.delay_ms))?;
        map.serialize_entry("failure", &self.failure)?;
        map.end()
    }
}

/// `llm/retry-started` data: the retry's wait elapsed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LlmRetryStarted {
    /// The chain id of the matching `llm/retry`.
    pub retry_id: RetryId,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The retry number.
    pub retry: u64,
}

impl LlmRetryStarted {
    /// The wait of retry `retry` (id `retry_id`) at `turn`/`step` ended.
    pub fn new(retry_id: RetryId, turn: u64, step: u64, retry: u64) -> Self {
        LlmRetryStarted {
            retry_id,
            turn,
            step,
            retry,
        }
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "llm/retry-started data",
            &["retryId", "turn", "step", "retry"],
        )?;
        Ok(LlmRetryStarted {
            retry_id: RetryId(f.string("retryId")?),
            turn: f.u64("turn")?,
            step: f.u64("step")?,
            retry: f.u64("retry")?,
        })
    }
}

deserialize_via_fields!(
    LlmRetryStarted,
    "llm/retry-started data",
    LlmRetryStarted::from_fields
);

impl Serialize for LlmRetryStarted {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("retryId", &self.retry_id)?;
        map.serialize_entry("turn", &self.turn)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("retry", &self.retry)?;
        map.end()
    }
}

/// Which pending inbox an `agent/inbox/spliced` event edits (loop.md IB-2).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InboxTarget {
    /// `"next-turn"`.
    NextTurn,
    /// `"next-step"`.
    NextStep,
    /// Any other string.
    Other(String),
}

impl InboxTarget {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            InboxTarget::NextTurn => "next-turn",
            InboxTarget::NextStep => "next-step",
            InboxTarget::Other(s) => s,
        }
    }
}

/// `agent/inbox/spliced` data: one pending-inbox mutation (loop.md 1.7, IB-2).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InboxSpliced {
    /// The inbox edited.
    pub target: InboxTarget,
    /// Splice position.
    pub start: u64,
    /// How many pending messages were removed (absent when none).
    pub removed_count: Option<u64>,
    /// The user messages inserted at `start`.
    pub inserted: Vec<Arc<Message>>,
    /// `Some("canceled")` when removed messages were discarded.
    pub outcome: Option<String>,
}

impl InboxSpliced {
    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "agent/inbox/spliced data",
            &["target", "start", "removedCount", "inserted", "outcome"],
        )?;
        let target = match f.string("target")?.as_str() {
            "next-turn" => InboxTarget::NextTurn,
            "next-step" => InboxTarget::NextStep,
            other => InboxTarget::Other(String::from(other)),
        };
        let start = f.u64("start")?;
        let removed_count = f.opt_u64("removedCount")?;
        let inserted: Vec<Message> = f.typed("inserted")?;
        let outcome = f.opt_string("outcome")?;
        Ok(InboxSpliced {
            target,
            start,
            removed_count,
            inserted: inserted.into_iter().map(Arc::new).collect(),
            outcome,
        })
    }
}

deserialize_via_fields!(
    InboxSpliced,
    "agent/inbox/spliced data",
    InboxSpliced::from_fields
);

impl Serialize for InboxSpliced {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("target", self.target.as_str())?;
        map.serialize_entry("start", &self.start)?;
        if let Some(r) = self.removed_count {
            map.serialize_entry("removedCount", &r)?;
        }
        map.serialize_entry("inserted", &ArcMessages(&self.inserted))?;
        if let Some(o) = &self.outcome {
            map.serialize_entry("outcome", o)?;
        }
        map.end()
    }
}

struct ArcMessages<'a>(&'a [Arc<Message>]);

impl Serialize for ArcMessages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|m| &**m))
    }
}

/// An event of a type the core does not interpret (plugin or unknown), kept
/// verbatim: its `data` is the exact JSON text it was read or built with.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PluginEvent {
    /// The event `type`.
    pub event_type: String,
    /// The `data` JSON text, byte for byte.
    pub data: Box<RawValue>,
}

impl PluginEvent {
    /// A plugin event whose data is `value` written as `JSON.stringify`
    /// would (J6: `1` not `1.0`). A non-finite or negative-zero number is
    /// kept as `-0`/`null` text and then refused by the append rules (J2).
    pub fn new(event_type: impl Into<String>, value: &Value) -> Self {
        let mut text = alloc::vec::Vec::new();
        crate::jsonl::write_value_js(&mut text, value);
        if has_negative_zero_value(value) {
            // Keep J2 detectable on the text: JavaScript would print `0`.
            text = serde_json::to_vec(value).unwrap_or_default();
        }
        let data = String::from_utf8(text)
            .ok()
            .and_then(|t| RawValue::from_string(t).ok())
            .unwrap_or_default();
        PluginEvent {
            event_type: event_type.into(),
            data,
        }
    }

    /// A plugin event from JSON text; errors when `json` is not one JSON value.
    pub fn from_json(
        event_type: impl Into<String>,
        json: impl Into<String>,
    ) -> Result<Self, serde_json::Error> {
        Ok(PluginEvent {
            event_type: event_type.into(),
            data: RawValue::from_string(json.into())?,
        })
    }

    /// The data parsed as a JSON value.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.data.get()).unwrap_or(Value::Null)
    }
}

fn has_negative_zero_value(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()),
        Value::Array(a) => a.iter().any(has_negative_zero_value),
        Value::Object(o) => o.values().any(has_negative_zero_value),
        _ => false,
    }
}

impl PartialEq for PluginEvent {
    fn eq(&self, other: &Self) -> bool {
        self.event_type == other.event_type && self.data.get() == other.data.get()
    }
}
