//! The event envelope (session.md 3) and the typed event data (4).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::message::Message;

use super::chunk_event::AssistantChunk;
use super::error::AppendError;
use super::payload::{
    AssistantMessage, InboxSpliced, LlmRetry, LlmRetryStarted, PluginEvent, RequestContext,
    RequestHeader, Step, TodoWrite, ToolCall, ToolResult, TurnEnd, TurnStart,
};

/// The event `type` strings of the core and runtime events.
pub mod types {
    /// `turn/start`.
    pub const TURN_START: &str = "turn/start";
    /// `turn/end`.
    pub const TURN_END: &str = "turn/end";
    /// `step/start`.
    pub const STEP_START: &str = "step/start";
    /// `step/end`.
    pub const STEP_END: &str = "step/end";
    /// `user/message` (surface).
    pub const USER_MESSAGE: &str = "user/message";
    /// `assistant/chunk`.
    pub const ASSISTANT_CHUNK: &str = "assistant/chunk";
    /// `assistant/message` (surface).
    pub const ASSISTANT_MESSAGE: &str = "assistant/message";
    /// `tool/call`.
    pub const TOOL_CALL: &str = "tool/call";
    /// `tool/result` (surface).
    pub const TOOL_RESULT: &str = "tool/result";
    /// `todo/write`.
    pub const TODO_WRITE: &str = "todo/write";
    /// `request/header`.
    pub const REQUEST_HEADER: &str = "request/header";
    /// `request/context`.
    pub const REQUEST_CONTEXT: &str = "request/context";
    /// `session/end-seed`.
    pub const END_SEED: &str = "session/end-seed";
    /// `llm/retry` (retry plugin, typed by the runtime).
    pub const LLM_RETRY: &str = "llm/retry";
    /// `llm/retry-started` (retry plugin, typed by the runtime).
    pub const LLM_RETRY_STARTED: &str = "llm/retry-started";
    /// `agent/inbox/spliced` (agent core, typed by the runtime).
    pub const INBOX_SPLICED: &str = "agent/inbox/spliced";
    /// Retired: always rejected (A2, V6).
    pub const REQUEST_HEADER_DELTA: &str = "request/header-delta";
}

/// Every event type a reader knows (session.md Appendix A and B, Q5): the
/// core types, the runtime types and the plugin types the reference ships.
/// A persisted event of any other type must carry `ignorable: true`
/// (persistence.md 6.5 step 5).
pub const KNOWN_EVENT_TYPES: &[&str] = &[
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "assistant/chunk",
    "assistant/message",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/start",
    "compaction/summary",
    "compaction/prune",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "request/context",
    "request/header",
    "sandbox/mode",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "step/end",
    "step/start",
    "subagent/descriptor",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/call",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool/result",
    "turn/end",
    "turn/start",
    "user/message",
    "agent-preset/selected",
    "feedback/record",
    "schedule/change",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "web/deepseek-search-llm-request",
];

/// How a surface event changes the surface (5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SurfaceOp {
    /// `"append"`: join the tail of the surface.
    Append,
    /// `{"op":"replace","start":S,"end":E}`: take the place of the surface
    /// run from node `start` through node `end` (surface order, inclusive).
    Replace {
        /// Seq of the first shadowed node.
        start: u64,
        /// Seq of the last shadowed node.
        end: u64,
    },
}

impl Serialize for SurfaceOp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SurfaceOp::Append => s.serialize_str("append"),
            SurfaceOp::Replace { start, end } => {
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("op", "replace")?;
                map.serialize_entry("start", start)?;
                map.serialize_entry("end", end)?;
                map.end()
            }
        }
    }
}

/// The surface intent of a live append (5.1): required for the three
/// surface-eligible types, forbidden for all others.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SurfaceIntent {
    /// The operation.
    pub op: SurfaceOp,
    /// `sourceEventSeqs`: earlier events this one derives from.
    pub sources: Option<Vec<u64>>,
}

impl SurfaceIntent {
    /// `{surfaceOp:"append"}` without sources.
    pub fn append() -> Self {
        SurfaceIntent {
            op: SurfaceOp::Append,
            sources: None,
        }
    }

    /// `{surfaceOp:"append", sourceEventSeqs: sources}`.
    pub fn append_citing(sources: Vec<u64>) -> Self {
        SurfaceIntent {
            op: SurfaceOp::Append,
            sources: Some(sources),
        }
    }

    /// A replacement of the surface run `start..=end` citing `sources`
    /// (which must cover every shadowed node, S7).
    pub fn replace(start: u64, end: u64, sources: Vec<u64>) -> Self {
        SurfaceIntent {
            op: SurfaceOp::Replace { start, end },
            sources: Some(sources),
        }
    }
}

/// The typed `data` of an event, by `type` (section 4).
///
/// Large payloads sit behind an [`Arc`], so cloning an event is cheap and the
/// messages are shared with the derived history (C4). Types the core does
/// not interpret are [`EventData::Plugin`], carried byte for byte.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EventData {
    /// `turn/start`.
    TurnStart(TurnStart),
    /// `turn/end`.
    TurnEnd(Arc<TurnEnd>),
    /// `step/start`.
    StepStart(Step),
    /// `step/end`.
    StepEnd(Step),
    /// `user/message` (surface): the data is the message itself.
    UserMessage(Arc<Message>),
    /// `assistant/chunk`.
    AssistantChunk(AssistantChunk),
    /// `assistant/message` (surface).
    AssistantMessage(Arc<AssistantMessage>),
    /// `tool/call`.
    ToolCall(Arc<ToolCall>),
    /// `tool/result` (surface).
    ToolResult(Arc<ToolResult>),
    /// `todo/write`.
    TodoWrite(Arc<TodoWrite>),
    /// `request/header`.
    RequestHeader(Arc<RequestHeader>),
    /// `request/context`.
    RequestContext(Arc<RequestContext>),
    /// `session/end-seed` (data `{}`).
    EndSeed,
    /// `llm/retry`.
    LlmRetry(Arc<LlmRetry>),
    /// `llm/retry-started`.
    LlmRetryStarted(Arc<LlmRetryStarted>),
    /// `agent/inbox/spliced`.
    InboxSpliced(Arc<InboxSpliced>),
    /// Any other type (plugin or unknown), kept verbatim.
    Plugin(Arc<PluginEvent>),
}

impl EventData {
    /// The event `type` string.
    pub fn event_type(&self) -> &str {
        use types::*;
        match self {
            EventData::TurnStart(_) => TURN_START,
            EventData::TurnEnd(_) => TURN_END,
            EventData::StepStart(_) => STEP_START,
            EventData::StepEnd(_) => STEP_END,
            EventData::UserMessage(_) => USER_MESSAGE,
            EventData::AssistantChunk(_) => ASSISTANT_CHUNK,
            EventData::AssistantMessage(_) => ASSISTANT_MESSAGE,
            EventData::ToolCall(_) => TOOL_CALL,
            EventData::ToolResult(_) => TOOL_RESULT,
            EventData::TodoWrite(_) => TODO_WRITE,
            EventData::RequestHeader(_) => REQUEST_HEADER,
            EventData::RequestContext(_) => REQUEST_CONTEXT,
            EventData::EndSeed => END_SEED,
            EventData::LlmRetry(_) => LLM_RETRY,
            EventData::LlmRetryStarted(_) => LLM_RETRY_STARTED,
            EventData::InboxSpliced(_) => INBOX_SPLICED,
            EventData::Plugin(p) => &p.event_type,
        }
    }

    /// Whether the type is surface-eligible (`user/message`,
    /// `assistant/message`, `tool/result`).
    pub(crate) fn is_surface_eligible(&self) -> bool {
        matches!(
            self,
            EventData::UserMessage(_) | EventData::AssistantMessage(_) | EventData::ToolResult(_)
        )
    }

    /// The message this data carries, if it is one of the surface types
    /// (`data` for `user/message`, `data.message` otherwise).
    pub fn message(&self) -> Option<&Arc<Message>> {
        match self {
            EventData::UserMessage(m) => Some(m),
            EventData::AssistantMessage(a) => Some(&a.message),
            EventData::ToolResult(r) => Some(&r.message),
            _ => None,
        }
    }

    /// A plugin event with `data` given as a JSON value.
    pub fn plugin(event_type: impl Into<String>, data: &serde_json::Value) -> Self {
        EventData::Plugin(Arc::new(PluginEvent::new(event_type, data)))
    }
}

impl Serialize for EventData {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            EventData::TurnStart(d) => d.serialize(s),
            EventData::TurnEnd(d) => d.serialize(s),
            EventData::StepStart(d) | EventData::StepEnd(d) => d.serialize(s),
            EventData::UserMessage(d) => d.serialize(s),
            EventData::AssistantChunk(d) => d.serialize(s),
            EventData::AssistantMessage(d) => d.serialize(s),
            EventData::ToolCall(d) => d.serialize(s),
            EventData::ToolResult(d) => d.serialize(s),
            EventData::TodoWrite(d) => d.serialize(s),
            EventData::RequestHeader(d) => d.serialize(s),
            EventData::RequestContext(d) => d.serialize(s),
            EventData::EndSeed => s.serialize_map(Some(0))?.end(),
            EventData::LlmRetry(d) => d.serialize(s),
            EventData::LlmRetryStarted(d) => d.serialize(s),
            EventData::InboxSpliced(d) => d.serialize(s),
            EventData::Plugin(p) => p.data.serialize(s),
        }
    }
}

macro_rules! from_payload {
    ($($ty:ty => $variant:ident),* $(,)?) => {
        $(impl From<$ty> for EventData {
            fn from(d: $ty) -> Self {
                EventData::$variant(Arc::new(d))
            }
        })*
    };
}

from_payload!(
    TurnEnd => TurnEnd,
    AssistantMessage => AssistantMessage,
    ToolCall => ToolCall,
    ToolResult => ToolResult,
    TodoWrite => TodoWrite,
    RequestHeader => RequestHeader,
    RequestContext => RequestContext,
    LlmRetry => LlmRetry,
    LlmRetryStarted => LlmRetryStarted,
    InboxSpliced => InboxSpliced,
    PluginEvent => Plugin,
);

impl From<TurnStart> for EventData {
    fn from(d: TurnStart) -> Self {
        EventData::TurnStart(d)
    }
}

impl From<AssistantChunk> for EventData {
    fn from(d: AssistantChunk) -> Self {
        EventData::AssistantChunk(d)
    }
}

impl From<Message> for EventData {
    /// A `user/message`.
    fn from(m: Message) -> Self {
        EventData::UserMessage(Arc::new(m))
    }
}

/// Envelope fields most events do not have, boxed to keep events small.
#[derive(Clone, Debug, Default)]
pub(crate) struct Extra {
    pub(crate) surface_op: Option<SurfaceOp>,
    pub(crate) sources: Option<Vec<u64>>,
    pub(crate) ignorable: bool,
    /// `surfaceOp` is written before `sourceEventSeqs` (crash-repair order, E9).
    pub(crate) op_first: bool,
    /// The exact JSON text the event was read with, when the canonical
    /// serialization would differ (J7, key orders); written back as is.
    pub(crate) verbatim: Option<Box<RawValue>>,
    /// How the payload deviates from section 4 when it was read leniently.
    pub(crate) deviation: Option<AppendError>,
}

/// One immutable event of the session log (section 3).
///
/// `seq` is the event's index in its log; `time` is epoch milliseconds. An
/// event read from a log keeps the exact text it was read with when the
/// canonical serialization (E9 key order) would not reproduce it, so a loaded
/// log writes back byte for byte.
#[derive(Clone, Debug)]
pub struct SessionEvent {
    seq: u64,
    time: i64,
    data: EventData,
    extra: Option<Box<Extra>>,
}

impl SessionEvent {
    /// An event with no surface marker.
    pub fn new(seq: u64, time: i64, data: impl Into<EventData>) -> Self {
        SessionEvent {
            seq,
            time,
            data: data.into(),
            extra: None,
        }
    }

    /// Adds a surface marker (`surfaceOp`, optional `sourceEventSeqs`).
    pub fn with_surface(mut self, op: SurfaceOp, sources: Option<Vec<u64>>) -> Self {
        let extra = self.extra.get_or_insert_with(Box::default);
        extra.surface_op = Some(op);
        extra.sources = sources;
        extra.verbatim = None;
        self
    }

    /// Adds `sourceEventSeqs` without a `surfaceOp` (invalid for appends;
    /// useful to build rejected candidates in tests and fuzzers).
    pub fn with_sources(mut self, sources: Vec<u64>) -> Self {
        let extra = self.extra.get_or_insert_with(Box::default);
        extra.sources = Some(sources);
        extra.verbatim = None;
        self
    }

    /// Marks the event `"ignorable": true` (E7).
    pub fn with_ignorable(mut self) -> Self {
        let extra = self.extra.get_or_insert_with(Box::default);
        extra.ignorable = true;
        extra.verbatim = None;
        self
    }

    pub(crate) fn set_verbatim(&mut self, raw: Box<RawValue>) {
        self.extra.get_or_insert_with(Box::default).verbatim = Some(raw);
    }

    pub(crate) fn verbatim(&self) -> Option<&RawValue> {
        self.extra.as_ref().and_then(|e| e.verbatim.as_deref())
    }

    pub(crate) fn extra(&self) -> Option<&Extra> {
        self.extra.as_deref()
    }

    pub(crate) fn from_parts(
        seq: u64,
        time: i64,
        data: EventData,
        extra: Option<Box<Extra>>,
    ) -> Self {
        SessionEvent {
            seq,
            time,
            data,
            extra,
        }
    }

    /// The zero-based position in the log.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Epoch milliseconds when it was appended.
    pub fn time(&self) -> i64 {
        self.time
    }

    /// The typed data.
    pub fn data(&self) -> &EventData {
        &self.data
    }

    /// The event `type`.
    pub fn event_type(&self) -> &str {
        self.data.event_type()
    }

    /// The `surfaceOp`, when present.
    pub fn surface_op(&self) -> Option<SurfaceOp> {
        self.extra.as_ref().and_then(|e| e.surface_op)
    }

    /// The `sourceEventSeqs`, when present (may be empty only on
    /// `assistant/message`).
    pub fn source_event_seqs(&self) -> Option<&[u64]> {
        self.extra.as_ref().and_then(|e| e.sources.as_deref())
    }

    /// Whether the envelope says `"ignorable": true`.
    pub fn ignorable(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.ignorable)
    }

    /// The per-event projection `deriveEventMessage` (6.1): the message of a
    /// `user/message` or `tool/result`, the message of an `assistant/message`
    /// with non-empty content, otherwise `None`.
    pub fn derived_message(&self) -> Option<&Arc<Message>> {
        match &self.data {
            EventData::UserMessage(m) => Some(m),
            EventData::AssistantMessage(a) if !a.message.content.is_empty() => Some(&a.message),
            EventData::ToolResult(r) => Some(&r.message),
            _ => None,
        }
    }

    /// How the stored payload deviates from the exact shape of section 4
    /// (rule E4: an extra key, an older or newer shape of a field dsh does
    /// not interpret), when the event was read leniently; `None` for events
    /// in the exact shape and events built in memory. Such an event keeps its
    /// source text, so it writes back unchanged.
    pub fn deviation(&self) -> Option<&AppendError> {
        self.extra.as_ref().and_then(|e| e.deviation.as_ref())
    }

    /// The event as dsh models it, as one line of JSON: the canonical
    /// serialization of the typed data (E9), ignoring the source text kept
    /// for a byte-exact write-back. Differs from [`to_json`](Self::to_json)
    /// only for events read from a log.
    pub fn to_canonical_json(&self) -> String {
        let mut out = Vec::with_capacity(128);
        super::super::jsonl::write_event_canonical(self, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The event as one line of JSON (no newline), exactly as a log stores it.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(128);
        super::super::jsonl::write_event_json(self, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl PartialEq for SessionEvent {
    /// Value equality of the logical event: envelope values and data; the
    /// remembered source text and key order do not take part.
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.time == other.time
            && self.surface_op() == other.surface_op()
            && self.source_event_seqs() == other.source_event_seqs()
            && self.ignorable() == other.ignorable()
            && self.data == other.data
    }
}

impl Serialize for SessionEvent {
    /// The envelope in E9 order (`type, seq, time, data, ignorable?,
    /// sourceEventSeqs?, surfaceOp?`), or the exact text the event was read with.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(raw) = self.verbatim() {
            return raw.serialize(s);
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", self.event_type())?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("time", &self.time)?;
        map.serialize_entry("data", &self.data)?;
        if let Some(e) = &self.extra {
            if e.ignorable {
                map.serialize_entry("ignorable", &true)?;
            }
            if e.op_first {
                if let Some(op) = &e.surface_op {
                    map.serialize_entry("surfaceOp", op)?;
                }
                if let Some(src) = &e.sources {
                    map.serialize_entry("sourceEventSeqs", src)?;
                }
            } else {
                if let Some(src) = &e.sources {
                    map.serialize_entry("sourceEventSeqs", src)?;
                }
                if let Some(op) = &e.surface_op {
                    map.serialize_entry("surfaceOp", op)?;
                }
            }
        }
        map.end()
    }
}
