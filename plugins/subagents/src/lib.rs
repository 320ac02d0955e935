//! `dsh-subagents`: delegation to child agents (loop.md SA-1 to SA-3).
//!
//! A subagent is an ordinary second agent with its own session; the parent
//! loop knows nothing about it. Delegation is a tool:
//!
//! - `subagent` (**spawn**, SA-2): the child starts from a fresh session;
//! - `subagent_fork` (**fork**, SA-3): the child is seeded with the
//!   parent's log through its last `turn/end`, followed by
//!   `session/end-seed`.
//!
//! Both take `description` and `prompt` (required) and `run_in_background`
//! (optional: the call returns at once and the child's result arrives
//! later as a `subagent-settled` message, [`settled_message`]). The child's header carries `parentSession`,
//! `origin: "subagent"` and `delegationDepth` = the parent's + 1 (SA-1);
//! its first turn logs a `subagent/descriptor` before its first request.
//!
//! This crate is `no_std`: the pure parts (tool definitions, argument
//! parsing, child sessions, the descriptor, the outcome mapping of SA-2)
//! and [`Subagents`], a kernel [`Plugin`] that runs unchanged in every
//! runtime. In the parent it enforces the depth cap (a clear tool error,
//! the body does not run) and hands the body the parent's link (session id,
//! depth, fork boundary) through `tools/execute`; in a child it appends the
//! descriptor. The tool bodies belong to a runtime (this crate depends on
//! none): `dsh_std::subagents` runs a child `dsh_std::Agent` per call.
//!
//! # Features
//!
//! - `std`: links `std`.
//!
//! No feature is on by default.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use dsh_core::agent::prompt::{Assembly, PromptSection};
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{PreStepDecision, PreStepPayload};
use dsh_core::session::{EventData, Session, SessionEvent, SessionHeader, TurnEndReason};
use dsh_core::{ContentBlock, SessionId, Time};
use dsh_runtime::{Cx, Flow, Plugin, Seams, ToolDispatch};
use serde_json::{Value, json};

/// The spawn tool's name (SA-1).
pub const SPAWN_TOOL: &str = "subagent";
/// The fork tool's name (as the reference records it).
pub const FORK_TOOL: &str = "subagent_fork";
/// The child's log-only descriptor event (session.md, SA-1).
pub const DESCRIPTOR: &str = "subagent/descriptor";
/// The header `origin` of a child (HD8).
pub const ORIGIN: &str = "subagent";
/// The default cap on `delegationDepth` (SA-1).
pub const DEFAULT_MAX_DEPTH: u64 = 3;
/// The argument key under which [`Subagents`] hands the body the parent's
/// link (a value the model sends under it is replaced).
pub const LINK_KEY: &str = "_dshParent";
/// The plugin name.
pub const PLUGIN: &str = "subagents";

/// How a child starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A fresh session (SA-2).
    Spawn,
    /// Seeded with the parent's completed turns (SA-3).
    Fork,
}

impl Mode {
    /// The mode of tool `name`, if it is one of ours.
    pub fn of_tool(name: &str) -> Option<Mode> {
        match name {
            SPAWN_TOOL => Some(Mode::Spawn),
            FORK_TOOL => Some(Mode::Fork),
            _ => None,
        }
    }

    /// The tool's name.
    pub fn tool(self) -> &'static str {
        match self {
            Mode::Spawn => SPAWN_TOOL,
            Mode::Fork => FORK_TOOL,
        }
    }

    /// The descriptor's `provider` (`spawn` or `fork`).
    pub fn provider(self) -> &'static str {
        match self {
            Mode::Spawn => "spawn",
            Mode::Fork => "fork",
        }
    }
}

const SPAWN_DESCRIPTION: &str = "Delegate a self-contained subtask to a child agent that starts with a fresh, empty conversation and the same tools. Give it everything it needs in `prompt`: it cannot see this conversation. Its final answer comes back as this tool's result. Use it for focused work whose details would clutter this conversation.";

const FORK_DESCRIPTION: &str = "Delegate a subtask to a forked child agent that inherits this conversation up to the end of the last completed turn (not the current one) and has the same tools. State the subtask in `prompt`; the child can rely on what was said before. Its final answer comes back as this tool's result.";

/// The definition of the tool of `mode` (SA-1): `description` and `prompt`
/// required, `run_in_background` optional; typed and exclusive (TL-16).
pub fn definition(mode: Mode) -> ToolDefinition {
    let description = match mode {
        Mode::Spawn => SPAWN_DESCRIPTION,
        Mode::Fork => FORK_DESCRIPTION,
    };
    let parameters = json!({
        "type": "object",
        "properties": {
            "description": {
                "type": "string",
                "description": "A short (3-5 word) label of the subtask"
            },
            "prompt": {
                "type": "string",
                "description": "The subtask for the child agent, with everything it needs to do it"
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Start the child and return at once; its answer arrives later as a message (default false)"
            }
        },
        "required": ["description", "prompt"]
    });
    ToolDefinition::typed(mode.tool(), description, parameters)
}

/// The arguments of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The label (the descriptor's `label`).
    pub description: String,
    /// The child's prompt (sent as its one `followup`).
    pub prompt: String,
    /// Run without waiting for the answer.
    pub run_in_background: bool,
}

/// Why a call's arguments or link are unusable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgsError {
    /// The arguments are not a JSON object.
    NotAnObject,
    /// A required string field is missing or not a string.
    Missing(&'static str),
    /// A required string field is empty.
    Empty(&'static str),
    /// `run_in_background` is not a boolean.
    NotBoolean(&'static str),
    /// The parent link is absent or malformed: the [`Subagents`] plugin is
    /// not registered on the parent agent.
    NoLink,
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::NotAnObject => f.write_str("the arguments must be a JSON object"),
            ArgsError::Missing(k) => write!(f, "\"{k}\" is required and must be a string"),
            ArgsError::Empty(k) => write!(f, "\"{k}\" must not be empty"),
            ArgsError::NotBoolean(k) => write!(f, "\"{k}\" must be a boolean"),
            ArgsError::NoLink => {
                f.write_str("the subagents plugin is not registered on this agent (no parent link)")
            }
        }
    }
}

impl core::error::Error for ArgsError {}

/// Parses a call's arguments (SA-1).
pub fn parse_request(arguments: &Value) -> Result<Request, ArgsError> {
    let obj = arguments.as_object().ok_or(ArgsError::NotAnObject)?;
    let text = |k: &'static str| -> Result<String, ArgsError> {
        let s = obj
            .get(k)
            .and_then(Value::as_str)
            .ok_or(ArgsError::Missing(k))?;
        if s.trim().is_empty() {
            return Err(ArgsError::Empty(k));
        }
        Ok(s.to_string())
    };
    let run_in_background = match obj.get("run_in_background") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ArgsError::NotBoolean("run_in_background")),
    };
    Ok(Request {
        description: text("description")?,
        prompt: text("prompt")?,
        run_in_background,
    })
}

/// What the body needs to know about the parent, handed over by
/// [`Subagents`] under [`LINK_KEY`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentLink {
    /// The parent's session id.
    pub session: SessionId,
    /// The parent's `delegationDepth`.
    pub depth: u64,
    /// The seq of the parent's last `turn/end` when the call was made (the
    /// fork boundary, SA-3); `None`: no completed turn yet.
    pub fork_at: Option<u64>,
}

impl ParentLink {
    /// The link of the agent whose session is `session`.
    pub fn of(session: &Session) -> ParentLink {
        ParentLink {
            session: session.id().clone(),
            depth: session.header().delegation_depth.unwrap_or(0),
            fork_at: last_turn_end(session.events()),
        }
    }

    /// The JSON form put under [`LINK_KEY`].
    pub fn to_value(&self) -> Value {
        json!({"session": self.session.as_str(), "depth": self.depth, "forkAt": self.fork_at})
    }

    /// Reads the link from a call's arguments.
    pub fn from_arguments(arguments: &Value) -> Result<ParentLink, ArgsError> {
        let link = arguments.get(LINK_KEY).ok_or(ArgsError::NoLink)?;
        let session = link
            .get("session")
            .and_then(Value::as_str)
            .ok_or(ArgsError::NoLink)?;
        let depth = link
            .get("depth")
            .and_then(Value::as_u64)
            .ok_or(ArgsError::NoLink)?;
        let fork_at = match link.get("forkAt") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or(ArgsError::NoLink)?),
        };
        Ok(ParentLink {
            session: SessionId::from(session),
            depth,
            fork_at,
        })
    }
}

/// The seq of the last `turn/end` in `events` (the end of the balanced
/// prefix of completed turns a fork copies, SA-3).
pub fn last_turn_end(events: &[SessionEvent]) -> Option<u64> {
    events
        .iter()
        .rev()
        .find(|e| matches!(e.data(), EventData::TurnEnd(_)))
        .map(SessionEvent::seq)
}

/// The depth a child of a parent at `parent_depth` gets, or the clear
/// error when that passes `max_depth` (SA-1).
pub fn child_depth(parent_depth: u64, max_depth: u64) -> Result<u64, DepthError> {
    let depth = parent_depth.saturating_add(1);
    if depth > max_depth {
        return Err(DepthError {
            parent_depth,
            max_depth,
        });
    }
    Ok(depth)
}

/// A delegation past the depth cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthError {
    /// The delegating session's depth.
    pub parent_depth: u64,
    /// The cap.
    pub max_depth: u64,
}

impl fmt::Display for DepthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "subagent depth cap reached: this session is at delegation depth {} and the cap is {}; do this work yourself instead of delegating it",
            self.parent_depth, self.max_depth
        )
    }
}

impl core::error::Error for DepthError {}

impl DepthError {
    /// The tool result the model sees.
    pub fn outcome(&self) -> ToolOutcome {
        ToolOutcome::coded_error(self.to_string(), "SubagentError", "DEPTH_CAP")
    }
}

/// Why a child session cannot be built.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ChildError {
    /// The header is invalid (a relative cwd, an unsafe time).
    Header(String),
    /// The parent's log cannot be forked at the boundary.
    Fork(String),
}

impl fmt::Display for ChildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildError::Header(e) => write!(f, "invalid child header: {e}"),
            ChildError::Fork(e) => write!(f, "cannot fork the parent: {e}"),
        }
    }
}

impl core::error::Error for ChildError {}

fn mark_child(header: &mut SessionHeader, parent: &SessionId, depth: u64) {
    header.parent_session = Some(parent.clone());
    header.origin = Some(String::from(ORIGIN));
    header.delegation_depth = Some(depth);
}

/// A spawned child's fresh session (SA-1, SA-2): `parentSession`,
/// `origin: "subagent"`, `delegationDepth`, no seed.
pub fn spawn_session(
    id: SessionId,
    created_at: u64,
    cwd: Option<String>,
    parent: &SessionId,
    depth: u64,
) -> Result<Session, ChildError> {
    let mut header = SessionHeader::new(id, created_at);
    header.cwd = cwd;
    mark_child(&mut header, parent, depth);
    header
        .validate()
        .map_err(|e| ChildError::Header(e.to_string()))?;
    Ok(Session::new(header))
}

/// A forked child's session (SA-3): the parent's events through `fork_at`
/// (its last `turn/end`), then `session/end-seed`; the header records
/// `seedLength` besides the spawn fields. With no completed turn
/// (`fork_at: None`) the seed is empty.
pub fn fork_session(
    parent: Session,
    fork_at: Option<u64>,
    id: SessionId,
    now: Time,
    depth: u64,
) -> Result<Session, ChildError> {
    let parent_id = parent.id().clone();
    let child = match fork_at {
        Some(at) => parent
            .fork(Some(at), id, now.as_millis())
            .map_err(|e| ChildError::Fork(e.to_string()))?,
        None => {
            let created = u64::try_from(now.as_millis())
                .map_err(|_| ChildError::Header(format!("{now} is not a valid time")))?;
            let mut header = SessionHeader::new(id, created);
            header.cwd = parent.header().cwd.clone();
            Session::new(header)
        }
    };
    let mut header = child.header().clone();
    mark_child(&mut header, &parent_id, depth);
    header
        .validate()
        .map_err(|e| ChildError::Header(e.to_string()))?;
    Session::restore(header, child.into_events()).map_err(|e| ChildError::Fork(e.to_string()))
}

/// The `subagent/descriptor` data (SA-1), as the reference records it:
/// `{"version":2,"mode":"one-shot","provider":"spawn"|"fork","label"}`.
pub fn descriptor(mode: Mode, label: &str) -> Value {
    json!({"version": 2, "mode": "one-shot", "provider": mode.provider(), "label": label})
}

/// The text of the last assistant message in `events` (its text blocks,
/// joined): a completed child's output (SA-2).
pub fn final_output(events: &[SessionEvent]) -> Option<String> {
    events.iter().rev().find_map(|e| match e.data() {
        EventData::AssistantMessage(m) => Some(
            m.message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .concat(),
        ),
        _ => None,
    })
}

/// Maps the child's final `turn/end` to the tool's result (SA-2):
/// `completed` → success with `output`; every other reason → an error
/// result with no partial output. `None`: the child never ended a turn.
pub fn outcome(reason: Option<&TurnEndReason>, output: Option<String>) -> ToolOutcome {
    let error =
        |message: String, code: &str| ToolOutcome::coded_error(message, "SubagentError", code);
    match reason {
        Some(TurnEndReason::Completed) => {
            ToolOutcome::success(alloc::vec![ContentBlock::text(output.unwrap_or_default())])
        }
        Some(TurnEndReason::Aborted { .. }) => {
            error(String::from("the subagent was aborted"), "ABORTED")
        }
        Some(TurnEndReason::Error { error: e }) => error(
            format!("the subagent failed: {}: {}", e.code, e.message),
            "ERROR",
        ),
        Some(TurnEndReason::MaxTokens) => error(
            String::from("the subagent stopped at the output token limit before finishing"),
            "MAX_TOKENS",
        ),
        Some(other) => error(
            format!("the subagent's turn ended {}", other.kind()),
            "NOT_COMPLETED",
        ),
        None => error(
            String::from("the subagent ended without finishing a turn"),
            "NOT_COMPLETED",
        ),
    }
}

/// The `source.kind` of the message that brings a background child's
/// result to its parent (session.md 4.4 lists it).
pub const SETTLED_KIND: &str = "subagent-settled";

/// The tool's result when a child starts in the background.
pub fn started_outcome(child: &SessionId, description: &str) -> ToolOutcome {
    ToolOutcome::success(alloc::vec![ContentBlock::text(format!(
        "Started background subagent \"{description}\" (session {}). Its answer will arrive as a message when it finishes; continue with other work meanwhile.",
        child.as_str()
    ))])
}

/// The message that delivers a background child's result (`outcome`, as
/// [`outcome`] maps it) to the parent: a user message with source
/// `{"kind":"subagent-settled","session":child}` whose text names the child
/// and carries its answer or its failure.
pub fn settled_message(
    id: &str,
    child: &SessionId,
    description: &str,
    outcome: &ToolOutcome,
) -> dsh_core::Message {
    let text: String = outcome
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .concat();
    let head = format!(
        "Background subagent \"{description}\" (session {})",
        child.as_str()
    );
    let body = if outcome.is_error() {
        format!("{head} did not finish: {text}")
    } else {
        format!("{head} finished. Its answer:\n\n{text}")
    };
    let mut message = dsh_core::Message::user(id, alloc::vec![ContentBlock::text(body)]);
    let mut source = serde_json::Map::new();
    source.insert(String::from("kind"), Value::from(SETTLED_KIND));
    source.insert(String::from("session"), Value::from(child.as_str()));
    message.source = dsh_core::MessageSource::Other(source);
    message
}

/// The subagents plugin (a kernel [`Plugin`], every runtime).
///
/// - `tools/execute`, for `subagent` and `subagent_fork`: a call past the
///   depth cap is answered with [`DepthError`]'s result and the body does
///   not run; otherwise the body receives the call with the parent's
///   [`ParentLink`] under [`LINK_KEY`] (the logged `tool/call` keeps the
///   model's arguments).
/// - `agent/pre-step`, in a child: the `subagent/descriptor` is appended
///   before the first step of its first turn (SA-1).
/// - `system-prompt/assemble`, in a child: the runtime-context section
///   [`DELEGATION_SECTION`].
#[derive(Clone, Debug)]
pub struct Subagents {
    max_depth: u64,
    descriptor: Option<Value>,
    delegated: bool,
    token: Option<String>,
}

/// The runtime-context section a child gets (name).
pub const DELEGATION_SECTION: &str = "subagent:delegation";

/// The sort order of [`DELEGATION_SECTION`] (after the workspace facts).
pub const DELEGATION_ORDER: i64 = 900;

/// The runtime-context section a child gets (text).
pub const DELEGATION_TEXT: &str = "You are a delegated subagent: another agent handed you this task, and your final message is returned to it as your result. Your permissions were fixed when you were started and cannot be widened here; operations that need approval are refused automatically. If the task needs more than that, do not retry the refused operation; say so in your answer so the delegating agent can handle it.";

impl Subagents {
    /// The plugin of an agent that may delegate, up to `max_depth`.
    pub fn new(max_depth: u64) -> Self {
        Subagents {
            max_depth,
            descriptor: None,
            delegated: false,
            token: None,
        }
    }

    /// The plugin of a child started by tool `mode` with `label`: it logs
    /// the descriptor once, and tells the model it is a delegated subagent
    /// (the runtime-context section [`DELEGATION_SECTION`]).
    pub fn child(max_depth: u64, mode: Mode, label: &str) -> Self {
        Subagents {
            max_depth,
            descriptor: Some(descriptor(mode, label)),
            delegated: true,
            token: None,
        }
    }

    /// Adds `token` to every link under [`LINK_KEY`] (as `"token"`), so a
    /// body can tell a link this plugin made from one the model wrote.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The cap.
    pub fn max_depth(&self) -> u64 {
        self.max_depth
    }
}

impl Default for Subagents {
    fn default() -> Self {
        Subagents::new(DEFAULT_MAX_DEPTH)
    }
}

impl Plugin for Subagents {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn seams(&self) -> Seams {
        Seams::TOOL_EXECUTE | Seams::PRE_STEP | Seams::ASSEMBLE
    }

    fn assemble(
        &mut self,
        _cx: &mut Cx<'_>,
        _turn: u64,
        _step: u64,
        mut value: Assembly,
    ) -> Flow<Assembly> {
        if self.delegated {
            value.contexts.push(PromptSection::new(
                DELEGATION_SECTION,
                DELEGATION_ORDER,
                DELEGATION_TEXT,
            ));
        }
        Flow::Next(value)
    }

    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        if payload.step == 1
            && let Some(d) = self.descriptor.take()
        {
            cx.append_plugin(DESCRIPTOR, &d);
        }
        Flow::Next(value)
    }

    fn tool_execute(&mut self, cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        let ToolDispatch::Run(mut exec) = value else {
            return Flow::Next(value);
        };
        if Mode::of_tool(&exec.name).is_none() {
            return Flow::Next(ToolDispatch::Run(exec));
        }
        let link = ParentLink::of(cx.session());
        if let Err(e) = child_depth(link.depth, self.max_depth) {
            return Flow::Next(ToolDispatch::Answer(e.outcome()));
        }
        if let Some(obj) = exec.arguments.as_object_mut() {
            let mut value = link.to_value();
            if let (Some(token), Some(v)) = (&self.token, value.as_object_mut()) {
                v.insert(String::from("token"), Value::from(token.as_str()));
            }
            obj.insert(String::from(LINK_KEY), value);
        }
        Flow::Next(ToolDispatch::Run(exec))
    }
}
