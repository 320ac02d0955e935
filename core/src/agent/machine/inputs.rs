//! The inputs of the Agent surface (loop.md §3) and the completions the
//! shell feeds back.

use super::{Agent, InboxEdit, Phase, Stage, append_foreign, append_foreign_marked};
use crate::agent::handle::{AttemptId, ToolToken};
use crate::agent::hooks::{CancelCause, HookError};
use crate::agent::inbox::InboxTarget;
use crate::agent::io::{HookAnswer, InputError};
use crate::agent::tools::ToolOutcome;
use crate::chunk::StreamChunk;
use crate::message::Message;
use crate::session::{AssistantChunk, EventData, LlmRetryStarted, SurfaceIntent};
use crate::time::Time;
use alloc::vec::Vec;

impl Agent {
    // ------------------------------------------------------------------
    // Inputs: the Agent surface (§3)

    /// `send(message, target, wakeup)` (IB-6).
    pub fn send(
        &mut self,
        now: Time,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), InputError> {
        self.check_user_message(&message)?;
        let target = if wakeup && self.activity_aborted() {
            InboxTarget::NextTurn
        } else {
            target
        };
        let len = self.inbox.list(target).len() as i64;
        let splice = self
            .inbox
            .plan(target, len, 0, alloc::vec![message], false)?;
        if let Some(splice) = splice {
            self.commit_splice(now, splice);
        }
        if wakeup {
            self.wake(now);
        }
        self.after_input();
        Ok(())
    }

    /// `followup(m)`: `send(m, next-turn, wake)`.
    pub fn followup(&mut self, now: Time, message: Message) -> Result<(), InputError> {
        self.send(now, message, InboxTarget::NextTurn, true)
    }

    /// `steer(m)`: `send(m, next-step, wake)`.
    pub fn steer(&mut self, now: Time, message: Message) -> Result<(), InputError> {
        self.send(now, message, InboxTarget::NextStep, true)
    }

    /// `inject(m)`: `send(m, next-step, no wake)`.
    pub fn inject(&mut self, now: Time, message: Message) -> Result<(), InputError> {
        self.send(now, message, InboxTarget::NextStep, false)
    }

    /// `cancel(cause, keep_inbox)` (LC-33).
    pub fn cancel(&mut self, now: Time, cause: CancelCause, keep_inbox: bool) {
        self.cancel_inner(now, cause, keep_inbox);
        self.after_input();
    }

    /// Direct inbox edits (IB-7); they never wake the driver. Returns
    /// whether the edit found its target (always true for inserts).
    pub fn edit_inbox(&mut self, now: Time, edit: InboxEdit) -> Result<bool, InputError> {
        let (splice, found) = match edit {
            InboxEdit::Replace(id, message) => {
                self.check_user_message(&message)?;
                match self.inbox.find(&id) {
                    None => (None, false),
                    Some((target, i)) => (
                        self.inbox
                            .plan(target, i as i64, 1, alloc::vec![message], false)?,
                        true,
                    ),
                }
            }
            InboxEdit::Remove(id) => match self.inbox.find(&id) {
                None => (None, false),
                Some((target, i)) => (
                    self.inbox.plan(target, i as i64, 1, Vec::new(), false)?,
                    true,
                ),
            },
            InboxEdit::Append(target, message) => {
                self.check_user_message(&message)?;
                let len = self.inbox.list(target).len() as i64;
                (
                    self.inbox
                        .plan(target, len, 0, alloc::vec![message], false)?,
                    true,
                )
            }
            InboxEdit::Prepend(target, message) => {
                self.check_user_message(&message)?;
                (
                    self.inbox.plan(target, 0, 0, alloc::vec![message], false)?,
                    true,
                )
            }
        };
        if let Some(s) = splice {
            self.commit_splice(now, s);
        }
        self.after_input();
        Ok(found)
    }

    /// Appends a plugin or tool-owned event (TL-24), or a surface
    /// replacement (compaction, CP-1). Loop-owned types are refused.
    pub fn append_event(
        &mut self,
        now: Time,
        data: EventData,
        intent: Option<SurfaceIntent>,
    ) -> Result<u64, InputError> {
        let seq = append_foreign(&mut self.session, now, data, intent)?;
        self.after_input();
        Ok(seq)
    }

    /// [`append_event`](Self::append_event), keeping a recorded event's
    /// `"ignorable": true` (E7) when `ignorable` is set (replay).
    pub(crate) fn append_event_marked(
        &mut self,
        now: Time,
        data: EventData,
        intent: Option<SurfaceIntent>,
        ignorable: bool,
    ) -> Result<u64, InputError> {
        let seq = append_foreign_marked(&mut self.session, now, data, intent, ignorable)?;
        self.after_input();
        Ok(seq)
    }

    /// `MaintenanceBegin` (LC-39): only from `Idle`.
    pub fn begin_maintenance(&mut self, _now: Time) -> Result<(), InputError> {
        match self.phase {
            Phase::Idle { last_turn } => {
                self.phase = Phase::Maintenance {
                    last_turn,
                    aborted: None,
                    wake_requested: false,
                };
                Ok(())
            }
            _ => Err(InputError::NotAllowedNow(
                "maintenance can begin only while idle",
            )),
        }
    }

    /// `MaintenanceEnd` (LC-39): back to `Idle`, then a requested wake.
    pub fn end_maintenance(&mut self, now: Time) -> Result<(), InputError> {
        let Phase::Maintenance {
            last_turn,
            wake_requested,
            ..
        } = self.phase
        else {
            return Err(InputError::NotAllowedNow("no maintenance is running"));
        };
        self.phase = Phase::Idle { last_turn };
        if wake_requested && (!self.config.latches_wakes() || !self.inbox.is_empty()) {
            self.wake(now);
        }
        self.after_input();
        Ok(())
    }

    // ------------------------------------------------------------------
    // Inputs: completions

    /// A chunk of model attempt `attempt` (LC-19).
    pub fn handle_chunk(
        &mut self,
        now: Time,
        attempt: AttemptId,
        chunk: StreamChunk,
    ) -> Result<(), InputError> {
        let (turn, step) = self.open_stream(attempt)?;
        if let Some(Stage::Streaming(s)) = self.stage_mut() {
            s.assembler.push(&chunk);
        }
        match self.session.append(
            AssistantChunk::new(turn, step, chunk),
            None,
            now.as_millis(),
        ) {
            Ok(e) => {
                let seq = e.seq();
                if let Some(Stage::Streaming(s)) = self.stage_mut() {
                    s.chunk_seqs.push(seq);
                }
            }
            Err(e) => self.faults.push(error_text!(
                "assistant/chunk refused",
                "assistant/chunk refused: {e}"
            )),
        }
        Ok(())
    }

    /// The model stream of `attempt` ended normally (LC-20).
    pub fn handle_stream_end(&mut self, now: Time, attempt: AttemptId) -> Result<(), InputError> {
        self.open_stream(attempt)?;
        let Some(Stage::Streaming(stream)) = self.take_stage() else {
            return Err(InputError::NoOpenStream);
        };
        self.stream_ended(now, *stream);
        self.after_input();
        Ok(())
    }

    /// The model stream of `attempt` failed outside the adapter (a throwing
    /// stream middleware or consumer, `ModelThrew`): a turn error (LC-27).
    /// Adapter failures must arrive as a terminal `finish` chunk instead.
    pub fn handle_stream_error(
        &mut self,
        now: Time,
        attempt: AttemptId,
        error: HookError,
    ) -> Result<(), InputError> {
        self.open_stream(attempt)?;
        self.take_stage();
        self.turn_error(now, error);
        self.after_input();
        Ok(())
    }

    /// The result of the tool body started by [`Output::ExecuteTool`](crate::agent::Output::ExecuteTool)
    /// `token`. Bodies of a parallel group (LC-24) may answer in any order;
    /// results are written in call order.
    pub fn handle_tool_result(
        &mut self,
        now: Time,
        token: ToolToken,
        outcome: ToolOutcome,
    ) -> Result<(), InputError> {
        let i = self.running_body(token)?;
        self.tool_body_done(now, i, outcome);
        self.after_input();
        Ok(())
    }

    /// The tool runner itself failed (`ToolRunnerFailed`): no result is
    /// written for the call and the turn ends in error (LC-36). Other
    /// bodies of its parallel group that still run are awaited first; their
    /// results are taken but not written.
    pub fn handle_tool_failure(
        &mut self,
        now: Time,
        token: ToolToken,
        error: HookError,
    ) -> Result<(), InputError> {
        let i = self.running_body(token)?;
        self.tool_runner_failed(now, i, error);
        self.after_input();
        Ok(())
    }

    /// The answer to [`Output::Hook`](crate::agent::Output::Hook) `id`.
    pub fn complete_hook(
        &mut self,
        now: Time,
        id: u64,
        answer: HookAnswer,
    ) -> Result<(), InputError> {
        let expected = self.pending_hook(id)?;
        let got = answer.name();
        if expected != got {
            return Err(InputError::HookMismatch { expected, got });
        }
        if let Some((i, _)) = self.tools_ref().and_then(|t| t.hook(id)) {
            // The seams of a tool call (pre-execute, approval, guard,
            // post-execute).
            self.tool_hook_done(now, i, answer);
        } else if let Some(Stage::Seam { resume, .. }) = self.take_stage() {
            resume(self, now, answer);
        }
        self.after_input();
        Ok(())
    }

    /// The deadline of [`poll_timeout`](Self::poll_timeout) may have
    /// passed (the retry wait, R-14). Idempotent: a spurious wake-up (no
    /// timer armed, `now` before the deadline, or a second call for a
    /// timer already fired) is `Ok` and changes nothing. It never returns
    /// an error today; the `Result` leaves room for one.
    pub fn handle_timeout(&mut self, now: Time) -> Result<(), InputError> {
        match self.poll_timeout() {
            Some(deadline) if now >= deadline => {}
            _ => return Ok(()),
        }
        if let Some(Stage::RetryWait { record, .. }) = self.take_stage() {
            let started = LlmRetryStarted {
                retry_id: record.retry_id.clone(),
                turn: record.turn,
                step: record.step,
                retry: record.retry,
            };
            self.append(now, started, None);
            self.request(now);
        }
        self.after_input();
        Ok(())
    }
}
