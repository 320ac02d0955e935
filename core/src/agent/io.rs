//! What the agent asks of its shell ([`Output`]) and why an input can be
//! refused ([`InputError`]).

use alloc::string::String;
use core::fmt;
use core::ops::Range;

use crate::ids::MessageId;
use crate::message::Message;
use crate::options::GenerateOptions;
use crate::session::AppendError;

use super::handle::{AttemptId, ToolToken};
use super::hooks::{CancelCause, HookError, ToolExecution};
use super::inbox::InboxError;
pub use super::seams::{HookAnswer, HookCall};

/// Public activity status (SM-6, LC-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum AgentStatus {
    /// No driver runs (also during maintenance).
    Idle,
    /// A driver runs turns.
    Running,
}

/// A durability barrier the shell may honour (SM-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Checkpoint {
    /// Before `agent/pre-step`: the previous step's results.
    PreStep,
    /// Before the model request is dispatched.
    BeforeModel,
    /// Before a top-level tool body runs (TL-9 step 9).
    BeforeToolBody,
    /// After `turn/end` (Q7).
    AfterTurnEnd,
}

/// A live notification (never logged, SM-1 `emit` seams).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Notification {
    /// `agent/inbox/inserted`.
    Inserted {
        /// The message.
        message: Message,
    },
    /// `agent/inbox/claimed`.
    Claimed {
        /// The message.
        message: Message,
        /// The turn that claimed it.
        turn: u64,
    },
    /// `agent/inbox/discarded`.
    Discarded {
        /// The message.
        message: Message,
    },
    /// `agent/error`, before the `turn/end` of an errored turn (LC-36).
    Error {
        /// The turn.
        turn: u64,
        /// The last opened step, 0 if none.
        step: u64,
        /// The error.
        error: HookError,
    },
}

/// One model attempt to dispatch (LC-15).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ModelCall {
    /// Identifies the attempt: pass it with every chunk and the stream end,
    /// so chunks of an earlier (cancelled or failed) attempt are refused.
    pub attempt: AttemptId,
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The frozen request.
    pub request: GenerateOptions,
}

/// Something for the shell to do or know. Drain with
/// [`Agent::poll`](super::Agent::poll) after every input.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
#[must_use = "an output is work the shell must carry out or note"]
#[allow(clippy::large_enum_variant)] // drained one at a time, never stored in bulk
pub enum Output {
    /// Session events `range` (seqs) were appended; read them with
    /// `agent.session().events()`. Consecutive appends are coalesced.
    Appended(Range<u64>),
    /// The public status changed (LC-3).
    Status(AgentStatus),
    /// A live notification.
    Notify(Notification),
    /// A durability barrier (SM-13); the shell may flush before its next
    /// completion.
    Flush(Checkpoint),
    /// Start a model stream; feed it back with
    /// [`Agent::handle_chunk`](super::Agent::handle_chunk) and
    /// [`Agent::handle_stream_end`](super::Agent::handle_stream_end).
    CallModel(ModelCall),
    /// Stop the stream of this attempt; its later chunks are refused.
    CancelModelCall {
        /// The attempt.
        attempt: AttemptId,
    },
    /// Run a tool body; answer with
    /// [`Agent::handle_tool_result`](super::Agent::handle_tool_result).
    ExecuteTool(ToolExecution),
    /// Abort the signal shared by in-flight hooks and tools (LC-33).
    AbortTurn {
        /// The first cause.
        cause: CancelCause,
    },
    /// Answer this seam with
    /// [`Agent::complete_hook`](super::Agent::complete_hook).
    Hook {
        /// Pass back with the answer.
        id: u64,
        /// What to answer.
        call: HookCall,
    },
}

/// Why an input was refused. The agent is unchanged when this is returned.
/// [`is_benign`](Self::is_benign) separates late answers to something that
/// ended (drop them) from misuse (report it).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum InputError {
    /// A chunk or stream end arrived while no model stream is open.
    NoOpenStream,
    /// A chunk or stream end names an attempt that is not the open one
    /// (for example one that was cancelled).
    StaleAttempt {
        /// The attempt named.
        attempt: AttemptId,
    },
    /// A tool result names a token this agent never issued.
    UnknownToolCall {
        /// The token named.
        token: ToolToken,
    },
    /// A tool result (or runner failure) names a call that no longer runs:
    /// its result was already taken, or the turn ended (an abort, a turn
    /// error) before it arrived. Benign: the late result is dropped.
    StaleToolCall {
        /// The token named.
        token: ToolToken,
    },
    /// A hook answer names an id this agent never issued.
    UnknownHook {
        /// The id named.
        id: u64,
    },
    /// A hook answer names a hook that is no longer pending: it was
    /// answered already, or the stage that asked ended (a turn error, a
    /// runner failure). Benign: the late answer is dropped.
    StaleHook {
        /// The id named.
        id: u64,
    },
    /// A hook answer of the wrong kind for the pending hook.
    HookMismatch {
        /// The pending hook's kind.
        expected: &'static str,
        /// The answer's kind.
        got: &'static str,
    },
    /// A timeout arrived while no timer is armed. Benign.
    /// [`handle_timeout`](super::Agent::handle_timeout) no longer returns
    /// it (a spurious wake-up is `Ok`); kept for compatibility.
    NoTimer,
    /// IB-1: the message id is already pending.
    DuplicateMessage(MessageId),
    /// IB-5: the message is not a valid user message.
    InvalidMessage(String),
    /// The session refused the event (the agent is unchanged).
    Append(AppendError),
    /// An appended event type belongs to the loop (turns, steps, chunks,
    /// tool calls, inbox splices, request records).
    LoopOwnedType(String),
    /// `begin_maintenance` outside `Idle`, or `end_maintenance` outside
    /// maintenance (LC-39).
    NotAllowedNow(&'static str),
}

impl InputError {
    /// Whether this refusal is a harmless race rather than misuse: the
    /// input answers something that ended meanwhile (a stream of a
    /// cancelled or superseded attempt, a tool result or hook answer that
    /// arrives after the call or turn ended, a timer that is no longer
    /// armed). A runtime may drop a benign refusal silently; any other
    /// refusal is a bug in the caller and worth reporting. Either way the
    /// agent is unchanged.
    pub fn is_benign(&self) -> bool {
        matches!(
            self,
            InputError::StaleAttempt { .. }
                | InputError::StaleToolCall { .. }
                | InputError::StaleHook { .. }
                | InputError::NoTimer
        )
    }
}

impl From<InboxError> for InputError {
    fn from(e: InboxError) -> Self {
        match e {
            InboxError::Duplicate(id) => InputError::DuplicateMessage(id),
            other => InputError::InvalidMessage(error_text!("invalid inbox splice", "{other}")),
        }
    }
}

#[cfg(feature = "error-texts")]
impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::NoOpenStream => f.write_str("no model stream is open"),
            InputError::StaleAttempt { attempt } => {
                write!(f, "model attempt {attempt} is not the open stream")
            }
            InputError::UnknownToolCall { token } => {
                write!(f, "no running tool call has token {token}")
            }
            InputError::StaleToolCall { token } => {
                write!(f, "tool call {token} no longer runs (a late result)")
            }
            InputError::UnknownHook { id } => write!(f, "no pending hook has id {id}"),
            InputError::StaleHook { id } => {
                write!(f, "hook {id} is no longer pending (a late answer)")
            }
            InputError::HookMismatch { expected, got } => {
                write!(f, "the pending hook is {expected}, not {got}")
            }
            InputError::NoTimer => f.write_str("no timer is armed"),
            InputError::DuplicateMessage(id) => write!(f, "message \"{id}\" is already pending"),
            InputError::InvalidMessage(why) => write!(f, "invalid message: {why}"),
            InputError::Append(e) => write!(f, "the session refused the event: {e}"),
            InputError::LoopOwnedType(t) => {
                write!(f, "event type \"{t}\" is written only by the agent loop")
            }
            InputError::NotAllowedNow(why) => f.write_str(why),
        }
    }
}

/// Feature `error-texts` off: a fixed text per variant (no attempt, token,
/// id or message; the fields are still there to match on).
#[cfg(not(feature = "error-texts"))]
impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputError::NoOpenStream => "no model stream is open",
            InputError::StaleAttempt { .. } => "stale model attempt",
            InputError::UnknownToolCall { .. } => "unknown tool call",
            InputError::StaleToolCall { .. } => "stale tool call",
            InputError::UnknownHook { .. } => "unknown hook",
            InputError::StaleHook { .. } => "stale hook",
            InputError::HookMismatch { .. } => "wrong hook answer",
            InputError::NoTimer => "no timer is armed",
            InputError::DuplicateMessage(_) => "message already pending",
            InputError::InvalidMessage(_) => "invalid message",
            InputError::Append(e) => return fmt::Display::fmt(e, f),
            InputError::LoopOwnedType(_) => "event type written only by the agent loop",
            InputError::NotAllowedNow(why) => why,
        })
    }
}

impl core::error::Error for InputError {}

#[cfg(test)]
mod error_text_tests {
    use super::InputError;
    use crate::session::AppendError;
    use alloc::string::ToString;

    /// The default build's texts name the id and wrap the append error's
    /// text; with `error-texts` off, a fixed text per variant.
    #[test]
    fn input_error_texts() {
        let hook = InputError::UnknownHook { id: 7 };
        let append = InputError::Append(AppendError::SeqMismatch {
            expected: 3,
            got: 5,
        });
        #[cfg(feature = "error-texts")]
        {
            assert_eq!(hook.to_string(), "no pending hook has id 7");
            assert_eq!(
                append.to_string(),
                "the session refused the event: S1: expected seq 3, got 5"
            );
        }
        #[cfg(not(feature = "error-texts"))]
        {
            assert_eq!(hook.to_string(), "unknown hook");
            assert_eq!(append.to_string(), "S1: seq mismatch");
        }
    }
}
