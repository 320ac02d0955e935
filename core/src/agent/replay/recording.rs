//! The recording as the outside world's answers: lookups over the log, the
//! recorded message ids, tool outcomes, cancellations and errors.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::chunk::LlmFailure;
use crate::ids::{MessageId, RetryId};
use crate::session::{
    AbortCause, EpochHeader, EventData, InboxSpliced, SessionEvent, SurfaceIntent, TurnEndReason,
};

use super::compare::is_core_event;
use crate::agent::hooks::{CancelCause, HookError, IdPurpose, IdSource};
use crate::agent::inbox::InboxTarget;
use crate::agent::tools::{ErrorInfo, ToolError, ToolOutcome};

/// The recording and lookups over it, shared by the driver, the hooks and
/// the id source.
pub(super) struct Recording {
    pub(super) events: Vec<SessionEvent>,
}

impl Recording {
    pub(super) fn get(&self, seq: u64) -> Option<&SessionEvent> {
        usize::try_from(seq).ok().and_then(|i| self.events.get(i))
    }

    /// The first core event at or after `from`.
    pub(super) fn next_core(&self, from: u64) -> Option<&SessionEvent> {
        self.events
            .iter()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .find(|e| is_core_event(e))
    }

    /// The core events at or after `from`, in order.
    pub(super) fn cores_from(&self, from: u64) -> impl Iterator<Item = &SessionEvent> {
        self.events
            .iter()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .filter(|e| is_core_event(e))
    }

    /// Whether, from `from` on, the loop writes only what a cancellation
    /// writes (canceled splices, an interrupted message, synthetic
    /// not-dispatched tool pairs, `step/end`) before `turn/end aborted`.
    pub(super) fn cancels_at(&self, from: u64) -> Option<(CancelCause, bool)> {
        let mut keep_inbox = true;
        let mut first = true;
        for e in self.cores_from(from) {
            match e.data() {
                EventData::InboxSpliced(s) if s.outcome.is_some() && s.inserted.is_empty() => {
                    if first {
                        keep_inbox = false;
                    }
                }
                EventData::AssistantMessage(a) if a.interrupted => {}
                EventData::StepEnd(_) => {}
                EventData::ToolCall(_) => {}
                EventData::ToolResult(r)
                    if r.error
                        .as_ref()
                        .is_some_and(|e| e.code == "ABORTED_BEFORE_DISPATCH") => {}
                EventData::TurnEnd(t) => {
                    return match &t.reason {
                        TurnEndReason::Aborted { cause } => Some((cancel_cause(cause), keep_inbox)),
                        _ => None,
                    };
                }
                _ => return None,
            }
            first = false;
        }
        None
    }

    /// The `request/header` in force for a request starting at `from`: one
    /// logged before the next chunk or message of this attempt, else the
    /// last one before `from`.
    pub(super) fn header_for(&self, from: u64) -> Option<EpochHeader> {
        for e in self.cores_from(from) {
            match e.data() {
                EventData::RequestHeader(h) => return Some(h.header.canonical()),
                EventData::RequestContext(_) => {}
                _ => break,
            }
        }
        let upto = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        self.events[..upto]
            .iter()
            .rev()
            .find_map(|e| match e.data() {
                EventData::RequestHeader(h) => Some(h.header.canonical()),
                _ => None,
            })
    }

    /// The `contextWindow` in force for a request starting at `from`.
    pub(super) fn context_window_for(&self, from: u64) -> Option<u64> {
        for e in self.cores_from(from) {
            match e.data() {
                EventData::RequestContext(c) => return c.context_window,
                EventData::RequestHeader(_) => {}
                _ => break,
            }
        }
        let upto = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        self.events[..upto]
            .iter()
            .rev()
            .find_map(|e| match e.data() {
                EventData::RequestContext(c) => Some(c.context_window),
                _ => None,
            })?
    }

    /// The recorded failure of a turn that ends in error at `from`.
    pub(super) fn error_at(&self, from: u64) -> Option<HookError> {
        for e in self.cores_from(from) {
            match e.data() {
                EventData::StepEnd(_) => {}
                EventData::TurnEnd(t) => {
                    return match &t.reason {
                        TurnEndReason::Error { error } => Some(hook_error(error)),
                        _ => None,
                    };
                }
                _ => return None,
            }
        }
        None
    }
}

pub(super) fn cancel_cause(cause: &AbortCause) -> CancelCause {
    match cause {
        AbortCause::Parent => CancelCause::Parent,
        AbortCause::Hook { reason } => CancelCause::Hook {
            reason: reason.clone(),
        },
        AbortCause::Disposed => CancelCause::Disposed,
        _ => CancelCause::User,
    }
}

pub(super) fn hook_error(f: &LlmFailure) -> HookError {
    if f.code == "UNKNOWN" {
        HookError::msg(f.message.clone())
    } else {
        HookError::Llm(f.clone())
    }
}

pub(super) fn intent_of(e: &SessionEvent) -> Option<SurfaceIntent> {
    e.surface_op().map(|op| SurfaceIntent {
        op,
        sources: e.source_event_seqs().map(<[u64]>::to_vec),
    })
}

pub(super) fn target_of(s: &InboxSpliced) -> InboxTarget {
    match s.target {
        crate::session::InboxTarget::NextStep => InboxTarget::NextStep,
        _ => InboxTarget::NextTurn,
    }
}

/// Recorded message ids, handed out in log order.
pub(super) struct ReplayIds {
    pub(super) assistant: Vec<MessageId>,
    pub(super) tool: Vec<MessageId>,
    pub(super) next_assistant: usize,
    pub(super) next_tool: usize,
    pub(super) fallback: u64,
}

impl IdSource for ReplayIds {
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId {
        let (list, next) = match purpose {
            IdPurpose::Assistant { .. } => (&self.assistant, &mut self.next_assistant),
            IdPurpose::ToolResult { .. } => (&self.tool, &mut self.next_tool),
            IdPurpose::RuntimeContext { .. } => {
                self.fallback += 1;
                return MessageId(format!("replay-{}", self.fallback));
            }
        };
        let id = list.get(*next).cloned();
        *next += 1;
        id.unwrap_or_else(|| {
            self.fallback += 1;
            MessageId(format!("replay-{}", self.fallback))
        })
    }

    fn retry_id(&mut self) -> RetryId {
        self.fallback += 1;
        RetryId(format!("replay-{}", self.fallback))
    }
}

/// A recorded `tool/result` as the tool body's outcome (what a replay
/// answers a call with when tools are not run).
pub fn recorded_outcome(r: &crate::session::ToolResult) -> ToolOutcome {
    outcome_of(r)
}

pub(super) fn outcome_of(r: &crate::session::ToolResult) -> ToolOutcome {
    let (content, is_error) = match r.message.content.first() {
        Some(crate::content::ContentBlock::ToolResult {
            content, is_error, ..
        }) => (content.clone(), is_error.unwrap_or(false)),
        _ => (Vec::new(), false),
    };
    let mut outcome = ToolOutcome::success(content);
    if is_error {
        outcome.error = Some(ToolError {
            message: String::new(),
            info: r
                .error
                .as_ref()
                .map(|e| ErrorInfo::new(e.name.clone(), e.code.clone())),
        });
    }
    outcome.meta = r
        .meta
        .as_ref()
        .and_then(|m| serde_json::from_str(m.get()).ok());
    outcome
}
