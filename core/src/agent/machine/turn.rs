//! Turns: waking, cancellation, closing and continuation (LC-7, LC-8,
//! LC-28..LC-38).

use super::{Agent, Phase, Run, Stage, StepEnd, Stream};
use crate::agent::hooks::{CancelCause, HookError, IdPurpose};
use crate::agent::inbox::InboxTarget;
use crate::agent::io::{AgentStatus, Checkpoint, HookAnswer, HookCall, Notification, Output};
use crate::message::{Message, MessageSource};
use crate::session::{
    AssistantMessage, EventData, Step, SurfaceIntent, TurnEnd, TurnEndReason, TurnStart,
};
use crate::time::Time;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

impl Agent {
    // ------------------------------------------------------------------
    // Cancellation (LC-33, LC-34)

    pub(super) fn clear_inbox(&mut self, now: Time) {
        for target in [InboxTarget::NextStep, InboxTarget::NextTurn] {
            let len = self.inbox.list(target).len() as i64;
            if let Ok(Some(splice)) = self.inbox.plan(target, 0, len, Vec::new(), false) {
                self.commit_splice(now, splice);
            }
        }
    }

    pub(super) fn cancel_inner(&mut self, now: Time, cause: CancelCause, keep_inbox: bool) {
        if !keep_inbox {
            self.clear_inbox(now);
            match &mut self.phase {
                Phase::Running(r) => r.wake_requested = false,
                Phase::Maintenance { wake_requested, .. } => *wake_requested = false,
                Phase::Idle { .. } => {}
            }
        }
        match &mut self.phase {
            Phase::Idle { .. } => {}
            Phase::Maintenance { aborted, .. } => {
                if aborted.is_none() {
                    *aborted = Some(cause.clone());
                    self.emit(Output::AbortTurn { cause });
                }
            }
            Phase::Running(r) => {
                if r.abort.is_some() {
                    return;
                }
                r.abort = Some(cause.clone());
                self.emit(Output::AbortTurn { cause });
                match self.run().map(|r| &r.stage) {
                    Some(Stage::Streaming(_)) => {
                        if let Some(Stage::Streaming(s)) = self.take_stage() {
                            self.emit(Output::CancelModelCall { attempt: s.attempt });
                            if self.config.keeps_interrupted_prefix() {
                                self.interrupted_message(now, &s);
                            }
                        }
                        self.close_aborted(now);
                    }
                    Some(Stage::RetryWait { .. }) => {
                        // the wait is cancelled; no started event.
                        self.take_stage();
                        self.close_aborted(now);
                    }
                    _ => {}
                }
            }
        }
    }

    /// [HEAD Δ H-1] The delivered prefix of a cancelled stream.
    pub(super) fn interrupted_message(&mut self, now: Time, s: &Stream) {
        let content = s.assembler.interrupted_blocks();
        if content.is_empty() {
            return;
        }
        let (turn, step) = self.coords();
        let id = self.ids.message_id(IdPurpose::Assistant { turn, step });
        let message = Message::model(id, content, MessageSource::model(&s.provider, &s.model));
        let mut data = AssistantMessage::new(turn, step, message);
        data.usage = s.assembler.usage().copied();
        data.interrupted = true;
        self.append(
            now,
            data,
            Some(SurfaceIntent::append_citing(s.chunk_seqs.clone())),
        );
    }

    /// Closing as aborted (LC-34): `step/end` if a step is open, then
    /// `turn/end aborted`, then stop. No `agent/error`.
    pub(super) fn close_aborted(&mut self, now: Time) {
        let cause = self
            .run()
            .and_then(|r| r.abort.clone())
            .unwrap_or(CancelCause::User);
        self.close_step(now);
        self.end_turn(
            now,
            TurnEndReason::Aborted {
                cause: cause.to_abort_cause(),
            },
            false,
        );
    }

    pub(super) fn close_step(&mut self, now: Time) {
        let Some(r) = self.run_mut() else { return };
        if !r.step_open {
            return;
        }
        r.step_open = false;
        let step = Step {
            turn: r.turn,
            step: r.step,
        };
        self.append(now, EventData::StepEnd(step), None);
    }

    /// LC-36.
    pub(super) fn turn_error(&mut self, now: Time, error: HookError) {
        if self.aborted() {
            // LC-35: a failure while aborting is an abort.
            self.close_aborted(now);
            return;
        }
        self.close_step(now);
        let (turn, step) = self.coords();
        let failure = error.failure();
        self.emit(Output::Notify(Notification::Error { turn, step, error }));
        self.end_turn(now, TurnEndReason::Error { error: failure }, false);
    }

    /// Appends `turn/end`, emits the checkpoint and continues the driver
    /// (LC-37): `may_continue` is true only for `completed`/`max-tokens`
    /// reached through LC-30 or LC-11 case 4.
    pub(super) fn end_turn(&mut self, now: Time, reason: TurnEndReason, may_continue: bool) {
        let Some(r) = self.run_mut() else { return };
        r.stage = Stage::Busy;
        let turn = r.turn;
        self.append(now, TurnEnd { turn, reason }, None);
        self.emit(Output::Flush(Checkpoint::AfterTurnEnd));
        if may_continue && !self.inbox.is_empty() {
            if let Some(r) = self.run_mut() {
                r.abort = None;
                r.step = 0;
                r.wake_requested = false;
            }
            self.open_turn(now);
        } else {
            self.stop_driver(now);
        }
    }

    /// LC-38.
    pub(super) fn stop_driver(&mut self, now: Time) {
        let (last_turn, latched) = match &self.phase {
            Phase::Running(r) => (r.turn, r.wake_requested),
            Phase::Idle { last_turn } | Phase::Maintenance { last_turn, .. } => (*last_turn, false),
        };
        self.phase = Phase::Idle { last_turn };
        self.emit(Output::Status(AgentStatus::Idle));
        if latched && self.config.latches_wakes() && !self.inbox.is_empty() {
            self.wake(now);
        }
    }

    // ------------------------------------------------------------------
    // Waking and turns (LC-7..LC-12)

    /// LC-7.
    pub(super) fn wake(&mut self, now: Time) {
        match &mut self.phase {
            Phase::Idle { last_turn } => {
                let turn = *last_turn;
                self.phase = Phase::Running(Box::new(Run {
                    turn,
                    step: 0,
                    step_open: false,
                    abort: None,
                    turn_end: None,
                    target: InboxTarget::NextTurn,
                    wake_requested: false,
                    system: String::new(),
                    tools: Vec::new(),
                    stage: Stage::Busy,
                }));
                self.emit(Output::Status(AgentStatus::Running));
                self.open_turn(now);
            }
            Phase::Running(r) => {
                // [HEAD Δ H-2] latch a wake that arrives while aborting;
                // disposal never latches.
                if self.config.latches_wakes()
                    && r.abort
                        .as_ref()
                        .is_some_and(|c| *c != CancelCause::Disposed)
                {
                    r.wake_requested = true;
                }
            }
            Phase::Maintenance {
                aborted,
                wake_requested,
                ..
            } => {
                if aborted.is_none()
                    || (self.config.latches_wakes() && *aborted != Some(CancelCause::Disposed))
                {
                    *wake_requested = true;
                }
            }
        }
    }

    /// LC-8.
    pub(super) fn open_turn(&mut self, now: Time) {
        if self.aborted() {
            self.stop_driver(now);
            return;
        }
        let Some(r) = self.run_mut() else { return };
        r.turn += 1;
        r.target = InboxTarget::NextTurn;
        r.step = 0;
        r.step_open = false;
        r.turn_end = None;
        let turn = r.turn;
        self.append(now, TurnStart { turn }, None);
        self.propose_step(now);
    }

    // ------------------------------------------------------------------
    // Steps end; continuation (LC-28..LC-30)

    pub(super) fn step_finished(&mut self, now: Time, outcome: Option<StepEnd>) {
        if let Some(r) = self.run_mut() {
            // LC-28: a sticky max-tokens is never overwritten.
            if r.turn_end != Some(StepEnd::MaxTokens) {
                r.turn_end = outcome;
            }
        }
        self.close_step(now);
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        self.continue_turn(now);
    }

    /// LC-30.
    pub(super) fn continue_turn(&mut self, now: Time) {
        let step_input = !self.inbox.list(InboxTarget::NextStep).is_empty();
        let Some(r) = self.run() else { return };
        if r.turn_end.is_none() || step_input {
            if let Some(r) = self.run_mut() {
                r.target = InboxTarget::NextStep;
            }
            self.propose_step(now);
            return;
        }
        let turn = r.turn;
        let call = HookCall::TurnStopping { turn, value: () };
        self.raise(now, call, |a, now, answer| {
            if let HookAnswer::TurnStopping(r) = answer {
                a.turn_stopping_done(now, r);
            }
        });
    }

    pub(super) fn turn_stopping_done(&mut self, now: Time, result: Result<(), HookError>) {
        if let Err(e) = result {
            self.turn_error(now, e);
            return;
        }
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        if !self.inbox.list(InboxTarget::NextStep).is_empty() {
            if let Some(r) = self.run_mut() {
                r.target = InboxTarget::NextStep;
            }
            self.propose_step(now);
            return;
        }
        let reason = match self.run().and_then(|r| r.turn_end) {
            Some(StepEnd::MaxTokens) => TurnEndReason::MaxTokens,
            _ => TurnEndReason::Completed,
        };
        self.end_turn(now, reason, true);
    }
}
