//! The plugin API: ordered, composable handlers for the seams of loop.md §4
//! (design.md "The runtime kernel and plugins").
//!
//! A [`Plugin`] is registered when a [`Kernel`](crate::Kernel) is built and
//! runs unchanged in every runtime. For each seam the kernel runs the
//! plugins that declare it in [`Plugin::seams`], in registration order, as
//! around-middleware: each one receives the value so far and returns a
//! [`Flow`]:
//!
//! - [`Flow::Next`] passes the value (unchanged or rewritten) on;
//! - [`Flow::Done`] short-circuits: the value is final, later plugins do not
//!   run;
//! - [`Flow::Fail`] fails the seam (the core decides what a failure means
//!   there: a turn error, an error result, …);
//! - [`Flow::Ask`] needs I/O: the kernel publishes the ask, and when the
//!   answer arrives ([`Kernel::answer`](crate::Kernel::answer)) it calls the
//!   same method again with the same value and [`Cx::reply`] set. A plugin
//!   never blocks.
//!
//! A plugin may also contribute prompt sections ([`Plugin::sections`]) and
//! tools ([`Plugin::tools`]: the schema the model sees; the body is the
//! runtime's), and listen to every appended session event
//! ([`Plugin::on_event`]) and durability checkpoint ([`Plugin::on_flush`]).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::BitOr;

use dsh_core::LlmCallConfig;
use dsh_core::Message;
use dsh_core::agent::prompt::{Assembly, PromptSection};
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{
    ApprovalOutcome, CancelCause, Checkpoint, HookError, InboxTarget, PostToolDecision,
    PreStepDecision, PreStepPayload, PreToolDecision, PreparedCall, Recovery, RequestErrorPayload,
    ToolExecution,
};
use dsh_core::session::{EventData, Session, SessionEvent, SurfaceIntent};
use dsh_core::{GenerateOptions, StreamChunk, TokenUsage};
use serde_json::Value;

/// What a seam handler decided.
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a plugin's decision must be returned to the kernel"]
pub enum Flow<T> {
    /// Pass this value (maybe rewritten) to the next plugin.
    Next(T),
    /// This value is final: skip the remaining plugins.
    Done(T),
    /// The seam fails with this error.
    Fail(HookError),
    /// Ask the outside world; the method is called again with the reply.
    Ask(Ask),
}

/// An I/O request a plugin makes through the kernel.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Ask {
    /// A tool call needs a front end's approval (TL-10). Published as
    /// [`AgentEvent::ApprovalRequested`](crate::AgentEvent::ApprovalRequested).
    Approval {
        /// The call's id (`tool/call.callId`), so a front end can tie the
        /// question to the call it shows.
        call_id: String,
        /// The tool name.
        tool: String,
        /// The raw argument text.
        arguments: String,
        /// Why, when the policy gave a reason.
        reason: Option<String>,
    },
    /// A side model call through the agent's own provider (a compaction
    /// summary, …). Handed to the runtime as
    /// [`Effect::SideModel`](crate::Effect::SideModel); answered with
    /// [`Reply::Model`]. Not logged as a turn's request.
    Model {
        /// The asking plugin's name.
        plugin: String,
        /// The complete request (provider route, model, messages, system).
        request: Box<GenerateOptions>,
    },
    /// Anything else a plugin needs answered. Published as
    /// [`AgentEvent::Asked`](crate::AgentEvent::Asked).
    Plugin {
        /// The asking plugin's name.
        plugin: String,
        /// The request, free-form.
        request: Value,
    },
}

/// A front end's answer to an approval ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Run this call.
    Allow,
    /// Run this call and every later call of the same tool without asking.
    AllowAlways,
    /// Do not run it.
    Deny,
}

/// The answer to an [`Ask`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// The answer to [`Ask::Approval`].
    Approval(ApprovalDecision),
    /// The answer to [`Ask::Plugin`].
    Plugin(Value),
    /// The answer to [`Ask::Model`]: the reply, or the failure's message.
    Model(Result<SideReply, String>),
    /// The ask was withdrawn (the turn was aborted, the agent disposed).
    Cancelled,
}

/// The folded reply of a side model call ([`Ask::Model`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SideReply {
    /// The concatenated text deltas.
    pub text: String,
    /// The usage the provider reported, if any.
    pub usage: Option<TokenUsage>,
}

/// Most text a side reply keeps (bytes); more is cut at a char boundary.
pub const SIDE_REPLY_MAX_BYTES: usize = 256 * 1024;

/// Folds a side call's chunk stream into a [`SideReply`]: the one place
/// every runtime uses to answer [`Ask::Model`].
#[derive(Clone, Debug, Default)]
pub struct SideCollector {
    reply: SideReply,
    failure: Option<String>,
    finished: bool,
}

impl SideCollector {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one chunk; returns `true` once the stream has finished.
    #[must_use = "once `true`, answer the ask with `finish`"]
    pub fn push(&mut self, chunk: StreamChunk) -> bool {
        match chunk {
            StreamChunk::TextDelta { text, .. } => {
                let room = SIDE_REPLY_MAX_BYTES.saturating_sub(self.reply.text.len());
                let mut cut = text.len().min(room);
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.reply.text.push_str(&text[..cut]);
            }
            StreamChunk::Usage { usage } => self.reply.usage = Some(*usage),
            StreamChunk::Finish { reason, .. } => {
                self.finished = true;
                match *reason {
                    dsh_core::FinishReason::Error { failure }
                    | dsh_core::FinishReason::Aborted { failure } => {
                        self.failure =
                            Some(alloc::format!("{}: {}", failure.code, failure.message));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        self.finished
    }

    /// The reply: an error when the stream failed or never finished.
    pub fn finish(self) -> Result<SideReply, String> {
        if let Some(f) = self.failure {
            return Err(f);
        }
        if !self.finished {
            return Err(String::from("the side model call ended without a finish"));
        }
        Ok(self.reply)
    }
}

/// A set of seams (a bit set), as [`Plugin::seams`] declares them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seams(u16);

impl Seams {
    /// No seam.
    pub const NONE: Seams = Seams(0);
    /// `system-prompt/assemble`.
    pub const ASSEMBLE: Seams = Seams(1);
    /// `agent/pre-step` (and prompt submit: the first step, SM-8).
    pub const PRE_STEP: Seams = Seams(1 << 1);
    /// `agent/request`.
    pub const REQUEST: Seams = Seams(1 << 2);
    /// `llm.prepareCall`.
    pub const PREPARE: Seams = Seams(1 << 3);
    /// `agent/request-error`.
    pub const REQUEST_ERROR: Seams = Seams(1 << 4);
    /// `agent/turn-stopping`.
    pub const TURN_STOPPING: Seams = Seams(1 << 5);
    /// `tools/pre-execute`.
    pub const TOOL_PRE_EXECUTE: Seams = Seams(1 << 6);
    /// The approval service (TL-10).
    pub const TOOL_APPROVAL: Seams = Seams(1 << 7);
    /// `tools/execute` (around the body: rewrite the call or answer it).
    pub const TOOL_EXECUTE: Seams = Seams(1 << 8);
    /// `tools/post-execute`.
    pub const TOOL_POST_EXECUTE: Seams = Seams(1 << 9);
    /// Session-event listeners.
    pub const EVENTS: Seams = Seams(1 << 10);
    /// `session/flush` listeners.
    pub const FLUSH: Seams = Seams(1 << 11);
    /// Plugin commands ([`Kernel::command`](crate::Kernel::command)).
    pub const COMMAND: Seams = Seams(1 << 12);

    /// Whether every seam of `other` is in `self`.
    pub const fn contains(self, other: Seams) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }
}

impl BitOr for Seams {
    type Output = Seams;
    fn bitor(self, rhs: Seams) -> Seams {
        Seams(self.0 | rhs.0)
    }
}

/// What `tools/execute` passes around the body.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per tool call
pub enum ToolDispatch {
    /// Run the body with this call (arguments may have been rewritten; the
    /// logged `tool/call` keeps the model's text).
    Run(ToolExecution),
    /// Do not run the body: this is its result.
    Answer(ToolOutcome),
}

/// An action a plugin queued; applied right after its seam completes.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Action {
    Send {
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    },
    Cancel {
        cause: CancelCause,
        keep_inbox: bool,
    },
}

/// What a plugin can reach: the time, the session (read), appends at this
/// point of the log, queued agent calls, and the reply to its ask.
pub struct Cx<'a> {
    pub(crate) now: i64,
    pub(crate) session: &'a Session,
    pub(crate) reply: Option<Reply>,
    pub(crate) appends: &'a mut Vec<(EventData, Option<SurfaceIntent>)>,
    pub(crate) actions: &'a mut Vec<Action>,
}

impl Cx<'_> {
    /// The input's `now` (epoch ms).
    pub fn now(&self) -> i64 {
        self.now
    }

    /// The session, read-only.
    pub fn session(&self) -> &Session {
        self.session
    }

    /// The seq the next [`append`](Self::append) will get (appends queued
    /// at this seam land in order right after the session's last event).
    pub fn next_seq(&self) -> u64 {
        self.session.len() + self.appends.len() as u64
    }

    /// The answer to this plugin's [`Flow::Ask`], when the method is
    /// called again with it.
    pub fn reply(&self) -> Option<&Reply> {
        self.reply.as_ref()
    }

    /// Appends a plugin event at this point of the log (before the seam's
    /// result takes effect). Loop-owned types are refused by the core and
    /// reported as a live error.
    pub fn append(&mut self, data: EventData) {
        self.appends.push((data, None));
    }

    /// Appends a surface replacement (compaction, pruning: CP-1): a
    /// `user/message` or `tool/result` with a `replace` intent.
    pub fn append_surface(&mut self, data: EventData, intent: SurfaceIntent) {
        self.appends.push((data, Some(intent)));
    }

    /// Appends a plugin event with JSON data.
    pub fn append_plugin(&mut self, event_type: &str, data: &Value) {
        self.append(EventData::plugin(event_type, data));
    }

    /// Queues `steer(message)` (IB-6).
    pub fn steer(&mut self, message: Message) {
        self.send(message, InboxTarget::NextStep, true);
    }

    /// Queues `inject(message)`.
    pub fn inject(&mut self, message: Message) {
        self.send(message, InboxTarget::NextStep, false);
    }

    /// Queues `followup(message)`.
    pub fn followup(&mut self, message: Message) {
        self.send(message, InboxTarget::NextTurn, true);
    }

    /// Queues `send(message, target, wakeup)`.
    pub fn send(&mut self, message: Message, target: InboxTarget, wakeup: bool) {
        self.actions.push(Action::Send {
            message,
            target,
            wakeup,
        });
    }

    /// Queues `cancel(cause, keep_inbox)` (LC-33).
    pub fn cancel(&mut self, cause: CancelCause, keep_inbox: bool) {
        self.actions.push(Action::Cancel { cause, keep_inbox });
    }
}

/// A plugin: seam handlers plus contributions. Every method has a default
/// that passes the value on unchanged; a handler runs only for the seams
/// in [`seams`](Plugin::seams).
#[allow(unused_variables)]
pub trait Plugin: Send {
    /// A short name (diagnostics, [`Ask::Plugin`]).
    fn name(&self) -> &str;

    /// The seams this plugin handles.
    fn seams(&self) -> Seams;

    /// System-prompt sections added to the default assembly (SP-2), taken
    /// once when the kernel is built.
    fn sections(&mut self) -> Vec<PromptSection> {
        Vec::new()
    }

    /// Tool definitions added to the agent's registry, taken once when the
    /// kernel is built (the runtime provides the bodies).
    fn tools(&mut self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    /// `system-prompt/assemble`.
    fn assemble(
        &mut self,
        cx: &mut Cx<'_>,
        turn: u64,
        step: u64,
        value: Assembly,
    ) -> Flow<Assembly> {
        Flow::Next(value)
    }

    /// `agent/pre-step`; on step 1 this is prompt submit (SM-8):
    /// [`PreStepDecision::Reject`] blocks the turn.
    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        Flow::Next(value)
    }

    /// `agent/request`, before every model attempt.
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        turn: u64,
        step: u64,
        value: LlmCallConfig,
    ) -> Flow<LlmCallConfig> {
        Flow::Next(value)
    }

    /// `llm.prepareCall` (LC-15).
    fn prepare(&mut self, cx: &mut Cx<'_>, value: PreparedCall) -> Flow<PreparedCall> {
        Flow::Next(value)
    }

    /// `agent/request-error` (SM-4).
    fn request_error(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &RequestErrorPayload,
        value: Recovery,
    ) -> Flow<Recovery> {
        Flow::Next(value)
    }

    /// `agent/turn-stopping` (SM-5): acts through `cx.steer` / `cx.inject`.
    fn turn_stopping(&mut self, cx: &mut Cx<'_>, turn: u64) -> Flow<()> {
        Flow::Next(())
    }

    /// `tools/pre-execute` (TL-9 step 4).
    fn tool_pre_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        value: PreToolDecision,
    ) -> Flow<PreToolDecision> {
        Flow::Next(value)
    }

    /// The approval service for an `ask` (TL-10); the value starts as
    /// [`ApprovalOutcome::NoService`].
    fn tool_approval(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        reason: Option<&str>,
        value: ApprovalOutcome,
    ) -> Flow<ApprovalOutcome> {
        Flow::Next(value)
    }

    /// `tools/execute`, around the body (TL-9 step 9): rewrite the call the
    /// body receives, or answer it without running the body.
    fn tool_execute(&mut self, cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        Flow::Next(value)
    }

    /// `tools/post-execute` (TL-11).
    fn tool_post_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        outcome: &ToolOutcome,
        value: PostToolDecision,
    ) -> Flow<PostToolDecision> {
        Flow::Next(value)
    }

    /// A plugin command ([`Kernel::command`](crate::Kernel::command)), run
    /// as maintenance while the agent is idle: `value` starts as the
    /// command's arguments; the final value is its result. A plugin that
    /// does not know `name` passes the value on.
    fn command(&mut self, cx: &mut Cx<'_>, name: &str, value: Value) -> Flow<Value> {
        Flow::Next(value)
    }

    /// A session event was appended (every event, in seq order).
    fn on_event(&mut self, cx: &mut Cx<'_>, event: &SessionEvent) {}

    /// A durability checkpoint was reached (SM-13); called before the
    /// kernel asks the runtime to persist.
    fn on_flush(&mut self, checkpoint: Checkpoint) {}
}

impl<P: Plugin + ?Sized> Plugin for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn seams(&self) -> Seams {
        (**self).seams()
    }
    fn sections(&mut self) -> Vec<PromptSection> {
        (**self).sections()
    }
    fn tools(&mut self) -> Vec<ToolDefinition> {
        (**self).tools()
    }
    fn assemble(
        &mut self,
        cx: &mut Cx<'_>,
        turn: u64,
        step: u64,
        value: Assembly,
    ) -> Flow<Assembly> {
        (**self).assemble(cx, turn, step, value)
    }
    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        (**self).pre_step(cx, payload, value)
    }
    fn request(
        &mut self,
        cx: &mut Cx<'_>,
        turn: u64,
        step: u64,
        value: LlmCallConfig,
    ) -> Flow<LlmCallConfig> {
        (**self).request(cx, turn, step, value)
    }
    fn prepare(&mut self, cx: &mut Cx<'_>, value: PreparedCall) -> Flow<PreparedCall> {
        (**self).prepare(cx, value)
    }
    fn request_error(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &RequestErrorPayload,
        value: Recovery,
    ) -> Flow<Recovery> {
        (**self).request_error(cx, payload, value)
    }
    fn turn_stopping(&mut self, cx: &mut Cx<'_>, turn: u64) -> Flow<()> {
        (**self).turn_stopping(cx, turn)
    }
    fn tool_pre_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        value: PreToolDecision,
    ) -> Flow<PreToolDecision> {
        (**self).tool_pre_execute(cx, exec, value)
    }
    fn tool_approval(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        reason: Option<&str>,
        value: ApprovalOutcome,
    ) -> Flow<ApprovalOutcome> {
        (**self).tool_approval(cx, exec, reason, value)
    }
    fn tool_execute(&mut self, cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        (**self).tool_execute(cx, value)
    }
    fn tool_post_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        outcome: &ToolOutcome,
        value: PostToolDecision,
    ) -> Flow<PostToolDecision> {
        (**self).tool_post_execute(cx, exec, outcome, value)
    }
    fn command(&mut self, cx: &mut Cx<'_>, name: &str, value: Value) -> Flow<Value> {
        (**self).command(cx, name, value)
    }
    fn on_event(&mut self, cx: &mut Cx<'_>, event: &SessionEvent) {
        (**self).on_event(cx, event)
    }
    fn on_flush(&mut self, checkpoint: Checkpoint) {
        (**self).on_flush(checkpoint)
    }
}
