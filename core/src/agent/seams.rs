//! The seam table: every interception seam (loop.md §4) declared once.
//!
//! [`seam_table!`](crate::seam_table) holds one row per seam: its method
//! name, its variant name, its [`Seams`] flag and bit, the payload fields
//! (stored type `=>` the type a plugin method receives), and the value the
//! seam's chain carries (starting at the spec default). Everything else is
//! derived from it:
//!
//! - here, in the core: the [`Seams`] flags, [`HookCall`] (a deferred seam
//!   with its payload and default value) and [`HookAnswer`];
//! - in the kernel (`dsh-runtime`): the `Plugin` trait's seam methods,
//!   their forwarding through `Box`, and the dispatch that runs a plugin
//!   chain over a [`HookCall`] and turns the final value into its answer.
//!
//! The core machine raises a seam at one place: when the seam is in
//! [`AgentConfig::seams`](super::AgentConfig::seams) it emits
//! [`Output::Hook`](super::Output::Hook) and waits for
//! [`Agent::complete_hook`](super::Agent::complete_hook); otherwise it
//! takes the default value at once. Adding a seam therefore touches two
//! places: a row here and the machine step that raises it.
//!
//! Row groups: `deferred` seams are raised by the core machine;
//! `kernel` seams are raised by the kernel itself (around a tool body, a
//! plugin command); `listeners` are flags for notifications without a
//! value.

use core::ops::BitOr;

use super::hooks::HookError;

/// A set of seams (a bit set): the seams a plugin handles, or the seams an
/// embedder of the core answers itself ([`AgentConfig::seams`](super::AgentConfig::seams)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seams(u32);

impl Seams {
    /// No seam.
    pub const NONE: Seams = Seams(0);

    /// Whether every seam of `other` is in `self` (false for
    /// [`NONE`](Self::NONE)).
    pub const fn contains(self, other: Seams) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// The union of two sets.
    pub(crate) const fn union(self, other: Seams) -> Seams {
        Seams(self.0 | other.0)
    }
}

impl BitOr for Seams {
    type Output = Seams;
    fn bitor(self, rhs: Seams) -> Seams {
        self.union(rhs)
    }
}

/// The seam table. Calls `$callback! { deferred { rows } kernel { rows }
/// listeners { rows } }`; see the [module docs](crate::agent::seams).
///
/// A row: `doc; method Variant CONST bit "name" (payload fields) mode
/// ValueType;` where a payload field is `doc field: Stored => Lent` and
/// `mode` is `value` (the plugin method takes the value) or `unit` (the
/// value is `()` and the method takes none).
#[doc(hidden)]
#[macro_export]
macro_rules! seam_table {
    ($callback:ident) => {
        $callback! {
            deferred {
                /// `system-prompt/assemble`, once per proposed step; the value
                /// starts as the agent's configured assembly. A failure ends
                /// the turn before a step opens.
                assemble Assemble ASSEMBLE 0 "assemble" (
                    /// The turn.
                    turn: u64 => u64,
                    /// The proposed step.
                    step: u64 => u64,
                ) value $crate::agent::prompt::Assembly;
                /// `agent/pre-step` (SM-3); on step 1 this is prompt submit
                /// (SM-8). The value starts as the claimed batch plus the
                /// runtime-context message, if any;
                /// `Reject` blocks
                /// the turn.
                pre_step PreStep PRE_STEP 1 "pre-step" (
                    /// The payload.
                    payload: $crate::agent::PreStepPayload => &$crate::agent::PreStepPayload,
                ) value $crate::agent::PreStepDecision;
                /// `agent/request`, before every model attempt (LC-13); the
                /// value starts as the frozen seed, filled from
                /// `AgentConfig::request_fill`.
                request Request REQUEST 2 "request" (
                    /// The turn.
                    turn: u64 => u64,
                    /// The step.
                    step: u64 => u64,
                ) value $crate::LlmCallConfig;
                /// `llm.prepareCall` (LC-15): resolve the config against the
                /// serving adapter; the value starts as the config unchanged
                /// with `AgentConfig::retry_policy`.
                /// An error with code `NO_ADAPTER` falls back to the proposed
                /// config.
                prepare Prepare PREPARE 3 "prepare" () value $crate::agent::PreparedCall;
                /// `agent/request-error` (SM-4); the value starts as
                /// `GiveUp`. With the retry
                /// executor this runs after (normal mode) or before (always
                /// mode) the executor's own decision (streaming.md ).
                request_error RequestError REQUEST_ERROR 4 "request-error" (
                    /// The payload.
                    payload: $crate::agent::RequestErrorPayload => &$crate::agent::RequestErrorPayload,
                ) value $crate::agent::Recovery;
                /// `agent/turn-stopping` (SM-5): acts only through `steer` /
                /// `inject` (or `cancel`).
                turn_stopping TurnStopping TURN_STOPPING 5 "turn-stopping" (
                    /// The turn.
                    turn: u64 => u64,
                ) unit ();
                /// `tools/pre-execute` (TL-9 step 4); the value starts as
                /// `Allow`.
                tool_pre_execute ToolPreExecute TOOL_PRE_EXECUTE 6 "tool pre-execute" (
                    /// The call.
                    exec: $crate::agent::ToolExecution => &$crate::agent::ToolExecution,
                ) value $crate::agent::PreToolDecision;
                /// The approval service for an `ask` (TL-10); the value starts
                /// as `NoService`.
                /// A failure counts as
                /// `Unavailable`.
                tool_approval ToolApproval TOOL_APPROVAL 7 "tool approval" (
                    /// The call.
                    exec: $crate::agent::ToolExecution => &$crate::agent::ToolExecution,
                    /// The ask's reason.
                    reason: Option<alloc::string::String> => Option<&str>,
                ) value $crate::agent::ApprovalOutcome;
                /// `tools/post-execute` (TL-11); the value starts as
                /// `accept`.
                tool_post_execute ToolPostExecute TOOL_POST_EXECUTE 9 "tool post-execute" (
                    /// The call.
                    exec: $crate::agent::ToolExecution => &$crate::agent::ToolExecution,
                    /// The result so far.
                    outcome: $crate::agent::tools::ToolOutcome => &$crate::agent::tools::ToolOutcome,
                ) value $crate::agent::PostToolDecision;
                /// Tool guards (TL-9 step 7), after an allow: the value starts
                /// as `None`; a denial reason (`Some`) stops the call, which
                /// the model sees as `Error: <reason>`.
                tool_guard ToolGuard TOOL_GUARD 13 "tool guard" (
                    /// The call.
                    exec: $crate::agent::ToolExecution => &$crate::agent::ToolExecution,
                ) value Option<alloc::string::String>;
            }
            kernel {
                /// `tools/execute`, around the body (TL-9 step 9): rewrite the
                /// call the body receives, or answer it without running the
                /// body.
                tool_execute ToolExecute TOOL_EXECUTE 8 "tool execute" () value ToolDispatch;
                /// A plugin command (`Kernel::command`), run as maintenance
                /// while the agent is idle: the value starts as the command's
                /// arguments; the final value is its result. A plugin that
                /// does not know `name` passes the value on.
                command Command COMMAND 12 "command" (
                    /// The command's name.
                    name: alloc::string::String => &str,
                ) value serde_json::Value;
            }
            listeners {
                /// Session-event listeners (`Plugin::on_event`).
                EVENTS 10;
                /// `session/flush` listeners (`Plugin::on_flush`).
                FLUSH 11;
            }
        }
    };
}

macro_rules! core_seams {
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
        listeners { $(
            $(#[$lm:meta])*
            $lflag:ident $lbit:literal;
        )* }
    ) => {
        impl Seams {
            $( $(#[$m])* pub const $flag: Seams = Seams(1 << $bit); )*
            $( $(#[$km])* pub const $kflag: Seams = Seams(1 << $kbit); )*
            $( $(#[$lm])* pub const $lflag: Seams = Seams(1 << $lbit); )*
            /// Every seam.
            pub const ALL: Seams = Seams(0 $(| (1 << $bit))* $(| (1 << $kbit))* $(| (1 << $lbit))*);
        }

        /// A deferred seam: the shell answers it with
        /// [`Agent::complete_hook`](super::Agent::complete_hook). `value`
        /// is the spec default (what the seam answers with no listener).
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        #[allow(clippy::large_enum_variant)] // answered once per seam, never stored in bulk
        pub enum HookCall {
            $(
                $(#[$m])*
                $var {
                    $( $(#[$fm])* $field: $stored, )*
                    /// The default value, which a plugin chain starts from.
                    value: $value,
                },
            )*
        }

        /// The answer to a [`HookCall`], variant for variant.
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub enum HookAnswer {
            $(
                #[doc = concat!("Answers [`HookCall::", stringify!($var), "`].")]
                $var(Result<$value, HookError>),
            )*
        }

        impl HookCall {
            /// The seam's flag.
            pub fn seam(&self) -> Seams {
                match self { $( HookCall::$var { .. } => Seams::$flag, )* }
            }

            /// The seam's name (diagnostics).
            pub fn name(&self) -> &'static str {
                match self { $( HookCall::$var { .. } => $label, )* }
            }

            /// The answer carrying this call's value (the default, or what a
            /// chain made of it).
            pub fn answer(self) -> HookAnswer {
                match self { $( HookCall::$var { value, .. } => HookAnswer::$var(Ok(value)), )* }
            }

            /// The answer failing this seam with `error`.
            pub fn fail(&self, error: HookError) -> HookAnswer {
                match self { $( HookCall::$var { .. } => HookAnswer::$var(Err(error)), )* }
            }
        }

        impl HookAnswer {
            /// The seam's name (diagnostics).
            pub fn name(&self) -> &'static str {
                match self { $( HookAnswer::$var(_) => $label, )* }
            }
        }
    };
}

crate::seam_table!(core_seams);
