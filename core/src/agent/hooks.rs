//! The seams' value and payload types (loop.md §4), plus the injected
//! sources of ids and jitter.
//!
//! The seams themselves are declared once in the
//! [seam table](super::seams): the core raises a seam the embedder claimed
//! ([`AgentConfig::seams`](super::AgentConfig::seams)) as
//! [`Output::Hook`](super::Output::Hook) and waits for
//! [`Agent::complete_hook`](super::Agent::complete_hook); any other seam
//! takes its spec default at once. While a seam is pending the embedder
//! may act on the agent (append events, `send`, `cancel`) before it
//! answers; those calls land at this point of the log (loop.md Q3).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde_json::Value;

use crate::chunk::LlmFailure;
use crate::content::ContentBlock;
use crate::ids::{CallId, MessageId, RetryId};
use crate::message::Message;
use crate::options::{AdapterDefaults, LlmCallConfig};

use super::handle::ToolToken;
use super::retry::RetryPolicy;
use super::tools::ToolOutcome;

/// A seam's answer inside the machine: now (the default), or later
/// through [`Agent::complete_hook`](super::Agent::complete_hook).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Hook<T> {
    /// The default answer.
    Ready(T),
    /// Emitted as [`Output::Hook`](super::Output::Hook).
    Defer,
}

/// A failure raised by a hook, a listener, or the model stream's consumer.
///
/// A turn error records it as an `LlmFailure` (LC-36): an [`HookError::Llm`]
/// verbatim, anything else as `{"message": <chain>, "code": "UNKNOWN"}`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum HookError {
    /// A typed LLM error (`LlmError`): its failure is recorded verbatim.
    Llm(LlmFailure),
    /// Any other error.
    Error {
        /// The error chain text (see [`HookError::chain`]).
        message: String,
        /// Error class name of a structured harness error.
        name: Option<String>,
        /// Machine code of a structured harness error.
        code: Option<String>,
    },
}

impl HookError {
    /// A plain error with this message.
    pub fn msg(message: impl Into<String>) -> Self {
        HookError::Error {
            message: message.into(),
            name: None,
            code: None,
        }
    }

    /// A structured harness error (`name` and `code` become a tool result's
    /// `error` info, TL-12).
    pub fn coded(
        message: impl Into<String>,
        name: impl Into<String>,
        code: impl Into<String>,
    ) -> Self {
        HookError::Error {
            message: message.into(),
            name: Some(name.into()),
            code: Some(code.into()),
        }
    }

    /// An LLM error with this code and message.
    pub fn llm(code: impl Into<String>, message: impl Into<String>) -> Self {
        HookError::Llm(LlmFailure::new(code, message))
    }

    /// `error_chain` (LC-36): each message joined with its causes by `": "`,
    /// leaving out a cause whose text equals its wrapper's. `messages` runs
    /// from the outermost error inwards; an empty message is replaced by the
    /// error's name in the caller's hands.
    pub fn chain<'a>(messages: impl IntoIterator<Item = &'a str>) -> Self {
        let mut out: Vec<&str> = Vec::new();
        for m in messages {
            if out.last() != Some(&m) {
                out.push(m);
            }
        }
        HookError::msg(out.join(": "))
    }

    /// The failure a turn error records (LC-36 step 3).
    pub fn failure(&self) -> LlmFailure {
        match self {
            HookError::Llm(f) => f.clone(),
            HookError::Error { message, .. } => LlmFailure::new("UNKNOWN", message.clone()),
        }
    }

    /// The message text.
    pub fn message(&self) -> &str {
        match self {
            HookError::Llm(f) => &f.message,
            HookError::Error { message, .. } => message,
        }
    }

    /// The error as a tool result (TL-12): `Error: <message>`, with info
    /// only for structured errors.
    pub fn tool_outcome(&self) -> ToolOutcome {
        match self {
            HookError::Error {
                message,
                name: Some(name),
                code: Some(code),
            } => ToolOutcome::coded_error(message.clone(), name.clone(), code.clone()),
            HookError::Llm(f) => {
                ToolOutcome::coded_error(f.message.clone(), "LlmError", f.code.clone())
            }
            other => ToolOutcome::error(other.message().to_string()),
        }
    }
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookError::Llm(failure) => write!(f, "{}: {}", failure.code, failure.message),
            HookError::Error { message, .. } => f.write_str(message),
        }
    }
}

impl core::error::Error for HookError {}

/// The final value of the `agent/pre-step` waterfall (SM-3).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PreStepDecision {
    /// Block the turn: it ends `blocked` (LC-11 case 3).
    Reject,
    /// Open the step with these messages, in order (may drop, rewrite, add).
    Enter(Vec<Message>),
}

/// What `agent/request-error` decided (LC-26).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Recovery {
    /// Retry the request inside the same step.
    Retry,
    /// The failure is terminal.
    GiveUp,
}

/// The result of `llm.prepareCall` (LC-15).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PreparedCall {
    /// The effective config (the adapter may fill `maxTokens` and effort).
    pub config: LlmCallConfig,
    /// Which fields the adapter filled in.
    pub adapter_defaults: AdapterDefaults,
    /// The serving route's retry policy.
    pub retry_policy: Option<RetryPolicy>,
    /// The route's advertised context window.
    pub context_window: Option<u64>,
}

impl PreparedCall {
    /// The config unchanged, no defaults, the default retry policy, no
    /// context window.
    pub fn plain(config: LlmCallConfig) -> Self {
        PreparedCall {
            config,
            adapter_defaults: AdapterDefaults::default(),
            retry_policy: Some(RetryPolicy::default()),
            context_window: None,
        }
    }
}

/// The final value of `tools/pre-execute` (TL-9 step 4).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreToolDecision {
    /// Run the tool.
    Allow,
    /// Do not run it; the model sees `Error: <reason>` (TL-10).
    Deny {
        /// Shown to the model.
        reason: String,
    },
    /// Ask for approval (the `tool_approval` seam).
    Ask {
        /// Why, shown to the approver.
        reason: Option<String>,
    },
}

/// An approval outcome (TL-10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ApprovalOutcome {
    /// Proceed once.
    AllowedOnce,
    /// The user rejected the call.
    Rejected,
    /// The approval was cancelled.
    Cancelled,
    /// No approval channel is available.
    Unavailable,
    /// No approval service exists at all (the default).
    NoService,
}

/// The final value of `tools/post-execute` (TL-11).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PostToolDecision {
    /// Keep the result, optionally replacing its content; contexts are added
    /// after the existing ones.
    Accept {
        /// Replacement content.
        content: Option<Vec<ContentBlock>>,
        /// Extra next-step context.
        additional_contexts: Vec<Message>,
    },
    /// Turn the result into an error showing `feedback`; only these contexts
    /// survive.
    Block {
        /// What the model sees.
        feedback: Vec<ContentBlock>,
        /// The only contexts kept.
        additional_contexts: Vec<Message>,
    },
}

impl PostToolDecision {
    /// `{"kind":"accept"}`.
    pub fn accept() -> Self {
        PostToolDecision::Accept {
            content: None,
            additional_contexts: Vec::new(),
        }
    }
}

/// One tool call going through the pipeline (TL-4).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolExecution {
    /// Correlates [`Output::ExecuteTool`](super::Output::ExecuteTool) with
    /// [`Agent::handle_tool_result`](super::Agent::handle_tool_result).
    pub token: ToolToken,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The provider's call id.
    pub call_id: CallId,
    /// The tool name (may be unknown or empty).
    pub name: String,
    /// Parsed arguments (LC-22).
    pub arguments: Value,
    /// The raw argument text logged on `tool/call`.
    pub raw_arguments: String,
}

/// `agent/pre-step` payload.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PreStepPayload {
    /// The turn.
    pub turn: u64,
    /// The proposed step.
    pub step: u64,
    /// The claimed batch (the runtime-context message is only in the
    /// default decision).
    pub messages: Vec<Message>,
}

/// `agent/request-error` payload (SM-4).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RequestErrorPayload {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// Provider of the failed request.
    pub provider: String,
    /// The failure.
    pub failure: LlmFailure,
    /// The serving route's policy; `None` when the call was never prepared.
    pub retry_policy: Option<RetryPolicy>,
}

/// Why a turn was cancelled (loop.md 1.5).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelCause {
    /// `{"kind":"user"}`.
    User,
    /// `{"kind":"parent"}`.
    Parent,
    /// `{"kind":"hook","reason":…}`.
    Hook {
        /// The hook's reason.
        reason: String,
    },
    /// `{"kind":"disposed"}` (LC-40).
    Disposed,
}

impl CancelCause {
    /// The session's abort cause for `turn/end`.
    pub(crate) fn to_abort_cause(&self) -> crate::session::AbortCause {
        use crate::session::AbortCause;
        match self {
            CancelCause::User => AbortCause::User,
            CancelCause::Parent => AbortCause::Parent,
            CancelCause::Hook { reason } => AbortCause::Hook {
                reason: reason.clone(),
            },
            CancelCause::Disposed => AbortCause::Disposed,
        }
    }
}

/// What an id is for, so an id source can mint meaningful ids (and a replay
/// can hand back recorded ones).
///
/// Exhaustive on purpose: an id source must mint an id for every purpose,
/// so a new one is a compile error rather than a fallback id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdPurpose<'a> {
    /// The `assistant/message` of a model call.
    Assistant {
        /// Turn.
        turn: u64,
        /// Step.
        step: u64,
    },
    /// The message of a `tool/result`.
    ToolResult {
        /// Turn.
        turn: u64,
        /// Step.
        step: u64,
        /// The call answered.
        call_id: &'a CallId,
    },
    /// A runtime-context message (LC-12).
    RuntimeContext {
        /// Turn.
        turn: u64,
        /// Proposed step.
        step: u64,
    },
}

/// Injected identity (loop.md Q12): the core never invents ids itself.
pub trait IdSource {
    /// A new message id.
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId;
    /// A new retry-chain id.
    fn retry_id(&mut self) -> RetryId;
}

/// Deterministic ids as the test vectors use them: assistant messages `A1`,
/// `A2`, …; tool results `R1`, …; runtime contexts `X1`, …; retry chains
/// `retry-1`, ….
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SequentialIds {
    assistant: u64,
    tool: u64,
    context: u64,
    retry: u64,
}

/// The counter of a sequential id: `n` when `id` is `prefix` followed by
/// a number (a looser reading only moves the counter further).
fn sequential_counter(id: &str, prefix: &str) -> Option<u64> {
    id.strip_prefix(prefix)?.parse().ok()
}

impl SequentialIds {
    /// Moves past `id` when it has one of this scheme's message forms
    /// (`A<n>`, `R<n>`, `X<n>`), so no later id repeats it (a resumed or
    /// forked log's ids, loop.md Q12).
    pub fn observe_message_id(&mut self, id: &str) {
        for (prefix, n) in [
            ("A", &mut self.assistant),
            ("R", &mut self.tool),
            ("X", &mut self.context),
        ] {
            if let Some(seen) = sequential_counter(id, prefix) {
                *n = (*n).max(seen);
            }
        }
    }

    /// Moves past retry-chain id `id` when it has the form `retry-<n>`.
    pub fn observe_retry_id(&mut self, id: &str) {
        if let Some(seen) = sequential_counter(id, "retry-") {
            self.retry = self.retry.max(seen);
        }
    }
}

impl IdSource for SequentialIds {
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId {
        let (prefix, n) = match purpose {
            IdPurpose::Assistant { .. } => ("A", &mut self.assistant),
            IdPurpose::ToolResult { .. } => ("R", &mut self.tool),
            IdPurpose::RuntimeContext { .. } => ("X", &mut self.context),
        };
        // Saturates only after a log that already holds `u64::MAX`.
        *n = n.saturating_add(1);
        MessageId(format!("{prefix}{n}"))
    }

    fn retry_id(&mut self) -> RetryId {
        self.retry = self.retry.saturating_add(1);
        RetryId(format!("retry-{}", self.retry))
    }
}

/// Injected randomness for retry jitter: samples in `[0, 1]`.
pub trait JitterSource {
    /// One sample.
    fn sample(&mut self) -> f64;
}

/// A constant jitter sample (0.5 gives the R-13 table's middle column).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FixedJitter(pub f64);

impl Default for FixedJitter {
    fn default() -> Self {
        FixedJitter(0.5)
    }
}

impl JitterSource for FixedJitter {
    fn sample(&mut self) -> f64 {
        self.0
    }
}

/// A small deterministic generator (xorshift64*) for shells without a
/// randomness source of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeededJitter(pub u64);

impl JitterSource for SeededJitter {
    fn sample(&mut self) -> f64 {
        let mut x = if self.0 == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            self.0
        };
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}
