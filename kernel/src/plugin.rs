//! The plugin API: ordered, composable handlers for the seams of loop.md §4,
//! declared once in the seam table (`dsh_core::agent::seams`).
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
// Without the plugin chain the seam runners are not called.
#![cfg_attr(not(feature = "plugins"), allow(dead_code))]

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use dsh_core::Message;
use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{CancelCause, Checkpoint, HookCall, HookError, InboxTarget, ToolExecution};
use dsh_core::session::{EventData, Session, SessionEvent, SurfaceIntent};
use dsh_core::{GenerateOptions, StreamChunk, Time, TokenUsage};
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
#[non_exhaustive]
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
#[non_exhaustive]
pub struct SideReply {
    /// The concatenated text deltas.
    pub text: String,
    /// The usage the provider reported, if any.
    pub usage: Option<TokenUsage>,
}

impl SideReply {
    /// A reply of this text and usage.
    pub fn new(text: impl Into<String>, usage: Option<TokenUsage>) -> Self {
        SideReply {
            text: text.into(),
            usage,
        }
    }
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

pub use dsh_core::agent::Seams;

/// What `tools/execute` passes around the body.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per tool call
#[non_exhaustive]
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
    pub(crate) now: Time,
    pub(crate) session: &'a Session,
    pub(crate) reply: Option<Reply>,
    pub(crate) appends: &'a mut Vec<(EventData, Option<SurfaceIntent>)>,
    pub(crate) actions: &'a mut Vec<Action>,
}

impl Cx<'_> {
    /// The kernel's clock at this input (see [`Time`]).
    pub fn now(&self) -> Time {
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

/// Lends a stored payload field to a plugin method the way its signature
/// takes it (by copy, by reference, as `&str`).
trait Lend<'a, T> {
    fn lend(&'a self) -> T;
}

impl Lend<'_, u64> for u64 {
    fn lend(&self) -> u64 {
        *self
    }
}

impl<'a, T> Lend<'a, &'a T> for T {
    fn lend(&'a self) -> &'a T {
        self
    }
}

impl<'a> Lend<'a, Option<&'a str>> for Option<String> {
    fn lend(&'a self) -> Option<&'a str> {
        self.as_deref()
    }
}

impl<'a> Lend<'a, &'a str> for String {
    fn lend(&'a self) -> &'a str {
        self.as_str()
    }
}

/// One plugin's step in a seam's chain; the value stays in the call.
pub(crate) enum Step {
    Next,
    Done,
    Fail(HookError),
    Ask(Ask),
}

/// Puts a plugin's value back: a failure or an ask keeps the value the
/// plugin was given.
fn settle<T>(flow: Flow<T>, given: T) -> (T, Step) {
    match flow {
        Flow::Next(v) => (v, Step::Next),
        Flow::Done(v) => (v, Step::Done),
        Flow::Fail(e) => (given, Step::Fail(e)),
        Flow::Ask(a) => (given, Step::Ask(a)),
    }
}

/// A seam method of [`Plugin`], from a row of the seam table.
macro_rules! plugin_method {
    (value $(#[$m:meta])* $name:ident ($($arg:ident : $aty:ty),*) $vty:ty) => {
        $(#[$m])*
        fn $name(&mut self, cx: &mut Cx<'_>, $($arg: $aty,)* value: $vty) -> Flow<$vty> {
            Flow::Next(value)
        }
    };
    (unit $(#[$m:meta])* $name:ident ($($arg:ident : $aty:ty),*) $vty:ty) => {
        $(#[$m])*
        fn $name(&mut self, cx: &mut Cx<'_>, $($arg: $aty),*) -> Flow<$vty> {
            Flow::Next(())
        }
    };
}

/// The `Box` forwarding of a seam method.
macro_rules! plugin_forward {
    (value $name:ident ($($arg:ident : $aty:ty),*) $vty:ty) => {
        fn $name(&mut self, cx: &mut Cx<'_>, $($arg: $aty,)* value: $vty) -> Flow<$vty> {
            (**self).$name(cx, $($arg,)* value)
        }
    };
    (unit $name:ident ($($arg:ident : $aty:ty),*) $vty:ty) => {
        fn $name(&mut self, cx: &mut Cx<'_>, $($arg: $aty),*) -> Flow<$vty> {
            (**self).$name(cx $(, $arg)*)
        }
    };
}

/// A call of a seam method with the chain's value.
macro_rules! plugin_call {
    (value $p:ident . $name:ident ($cx:ident $(, $a:expr)*) $v:ident) => {
        $p.$name($cx, $($a,)* $v)
    };
    (unit $p:ident . $name:ident ($cx:ident $(, $a:expr)*) $v:ident) => {{
        let () = $v;
        $p.$name($cx $(, $a)*)
    }};
}

/// The plugin API from the seam table: the [`Plugin`] trait, its `Box`
/// forwarding, the kernel's own seam calls ([`KernelCall`]) and the
/// dispatch of one plugin over a deferred core seam or a kernel seam.
macro_rules! plugin_api {
    (
        deferred { $(
            $(#[$m:meta])*
            $name:ident $var:ident $flag:ident $bit:literal $label:literal (
                $( $(#[$fm:meta])* $field:ident : $stored:ty => $lent:ty ),* $(,)?
            ) $mode:ident $value:ty;
        )* }
        kernel { $(
            $(#[$km:meta])*
            $kname:ident $kvar:ident $kflag:ident $kbit:literal $klabel:literal (
                $( $(#[$kfm:meta])* $kfield:ident : $kstored:ty => $klent:ty ),* $(,)?
            ) $kmode:ident $kvalue:ty;
        )* }
        listeners { $( $(#[$lm:meta])* $lflag:ident $lbit:literal; )* }
    ) => {
        /// A plugin: seam handlers plus contributions. Every seam method has
        /// a default that passes the value on unchanged; a handler runs only
        /// for the seams in [`seams`](Plugin::seams). The seam methods come
        /// from the seam table (`dsh_core::agent::seams`).
        #[allow(unused_variables)]
        pub trait Plugin: Send {
            /// A short name (diagnostics, [`Ask::Plugin`]).
            fn name(&self) -> &str;

            /// The seams this plugin handles.
            fn seams(&self) -> Seams;

            /// System-prompt sections added to the default assembly (SP-2),
            /// taken once when the kernel is built.
            fn sections(&mut self) -> Vec<PromptSection> {
                Vec::new()
            }

            /// Tool definitions added to the agent's registry, taken once
            /// when the kernel is built (the runtime provides the bodies).
            fn tools(&mut self) -> Vec<ToolDefinition> {
                Vec::new()
            }

            $( plugin_method!($mode $(#[$m])* $name ($($field: $lent),*) $value); )*
            $( plugin_method!($kmode $(#[$km])* $kname ($($kfield: $klent),*) $kvalue); )*

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
            $( plugin_forward!($mode $name ($($field: $lent),*) $value); )*
            $( plugin_forward!($kmode $kname ($($kfield: $klent),*) $kvalue); )*
            fn on_event(&mut self, cx: &mut Cx<'_>, event: &SessionEvent) {
                (**self).on_event(cx, event)
            }
            fn on_flush(&mut self, checkpoint: Checkpoint) {
                (**self).on_flush(checkpoint)
            }
        }

        /// A seam the kernel raises itself, with its value.
        #[allow(clippy::large_enum_variant)] // one per pending seam
        pub(crate) enum KernelCall {
            $( $kvar { $( $kfield: $kstored, )* value: $kvalue }, )*
        }

        impl KernelCall {
            /// The seam's flag.
            pub(crate) fn seam(&self) -> Seams {
                match self { $( KernelCall::$kvar { .. } => Seams::$kflag, )* }
            }
        }

        /// Runs plugin `p` over deferred core seam `call`.
        pub(crate) fn run_hook(p: &mut dyn Plugin, cx: &mut Cx<'_>, call: HookCall) -> (HookCall, Step) {
            match call {
                $(
                    HookCall::$var { $($field,)* value } => {
                        let given = value.clone();
                        let flow = plugin_call!($mode p.$name(cx $(, Lend::lend(&$field))*) value);
                        let (value, step) = settle(flow, given);
                        (HookCall::$var { $($field,)* value }, step)
                    }
                )*
                other => (other, Step::Next),
            }
        }

        /// Runs plugin `p` over kernel seam `call`.
        pub(crate) fn run_kernel(p: &mut dyn Plugin, cx: &mut Cx<'_>, call: KernelCall) -> (KernelCall, Step) {
            match call {
                $(
                    KernelCall::$kvar { $($kfield,)* value } => {
                        let given = value.clone();
                        let flow = plugin_call!($kmode p.$kname(cx $(, Lend::lend(&$kfield))*) value);
                        let (value, step) = settle(flow, given);
                        (KernelCall::$kvar { $($kfield,)* value }, step)
                    }
                )*
            }
        }
    };
}

dsh_core::seam_table!(plugin_api);
