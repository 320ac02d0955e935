//! The tool pipeline (LC-22..LC-25, TL-9) and its scheduler.
//!
//! Calls start in model order. An exclusive call (TL-15) runs alone
//! (LC-23). A call the registry classifies as parallel starts while the
//! calls before it are still running, as long as every running call is
//! parallel too and fewer than `max_parallel_tool_calls` are in flight
//! (LC-24, a rolling pool). Only bodies overlap: pre-execute and approval
//! finish before the next call starts, and post-execute, `tool/result` and
//! context staging run for the oldest call first; an outcome that settles
//! early waits in [`CallStage::Settled`].

use super::{Agent, Stage, StepEnd};
use crate::agent::handle::ToolToken;
use crate::agent::hooks::{
    ApprovalOutcome, Hook, HookError, IdPurpose, PostToolDecision, PreToolDecision, ToolExecution,
};
use crate::agent::inbox::InboxTarget;
use crate::agent::io::{Checkpoint, HookAnswer, HookCall, Output};
use crate::agent::schema::validate_value;
use crate::agent::seams::Seams;
use crate::agent::tools::{ExecutionMode, SCHEMAS, ToolOutcome, feedback_text, parse_arguments};
use crate::ids::CallId;
use crate::message::Message;
use crate::session::{SurfaceIntent, ToolCall, ToolError, ToolResult};
use crate::time::Time;
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;

/// A tool call of the recorded assistant message, in content order.
pub(super) struct PlannedCall {
    pub(super) call_id: CallId,
    pub(super) name: String,
    pub(super) raw: String,
}

/// The tool phase of a step.
pub(super) struct ToolPhase {
    calls: Vec<PlannedCall>,
    /// The next call to start.
    cursor: usize,
    concluded: bool,
    /// Started calls not yet committed, oldest first (model order).
    running: VecDeque<CallRun>,
    /// In-flight limit of the current parallel group, read when the group
    /// starts (H-3).
    limit: usize,
    /// The tool runner failed (LC-36): bodies still running are awaited,
    /// their results dropped, then the turn ends in this error.
    failed: Option<HookError>,
}

impl ToolPhase {
    pub(super) fn new(calls: Vec<PlannedCall>) -> Self {
        ToolPhase {
            calls,
            cursor: 0,
            concluded: false,
            running: VecDeque::new(),
            limit: 1,
            failed: None,
        }
    }

    /// The index of the running call whose body has `token`.
    pub(super) fn body(&self, token: ToolToken) -> Option<usize> {
        self.running
            .iter()
            .position(|c| c.exec.token == token && matches!(c.stage, CallStage::Body))
    }

    /// The index and kind of the call waiting for hook `id`.
    pub(super) fn hook(&self, id: u64) -> Option<(usize, &'static str)> {
        self.running
            .iter()
            .enumerate()
            .find_map(|(i, c)| match c.stage {
                CallStage::PreExecute { hook } if hook == id => Some((i, "tool pre-execute")),
                CallStage::Approval { hook } if hook == id => Some((i, "tool approval")),
                CallStage::PostExecute { hook } if hook == id => Some((i, "tool post-execute")),
                CallStage::Guard { hook } if hook == id => Some((i, "tool guard")),
                _ => None,
            })
    }
}

enum CallStage {
    PreExecute {
        hook: u64,
    },
    Approval {
        hook: u64,
    },
    Guard {
        hook: u64,
    },
    Body,
    /// The outcome is known; it waits for the earlier calls (LC-24).
    Settled(Box<Next>),
    PostExecute {
        hook: u64,
    },
}

struct CallRun {
    exec: ToolExecution,
    call_seq: u64,
    stage: CallStage,
    body_invoked: bool,
    /// Classified parallel when it started (TL-15).
    parallel: bool,
    /// The outcome under post-execute, or the ask's reason while an
    /// approval is pending.
    outcome: Option<ToolOutcome>,
}

/// What to do with a call after a pipeline stage (TL-9).
pub(super) enum Next {
    /// Waiting for an answer.
    Wait,
    /// Run post-execute on this outcome.
    Post(ToolOutcome),
    /// Commit this outcome without post-execute.
    Commit(ToolOutcome),
}

impl Agent {
    pub(super) fn tool_phase(&mut self) -> Option<&mut ToolPhase> {
        match self.stage_mut() {
            Some(Stage::Tools(t)) => Some(t),
            _ => None,
        }
    }

    fn call_mut(&mut self, i: usize) -> Option<&mut CallRun> {
        self.tool_phase().and_then(|p| p.running.get_mut(i))
    }

    fn exec_of(&mut self, i: usize) -> Option<ToolExecution> {
        self.call_mut(i).map(|c| c.exec.clone())
    }

    /// Enters the tool phase with `calls` (LC-21 step 4).
    pub(super) fn start_tools(&mut self, now: Time, calls: Vec<PlannedCall>) {
        self.set_stage(Stage::Tools(Box::new(ToolPhase::new(calls))));
        self.pump_tools(now);
    }

    /// The body of running call `i` returned (TL-9 steps 9, 10).
    pub(super) fn tool_body_done(&mut self, now: Time, i: usize, outcome: ToolOutcome) {
        if self.tool_phase().is_some_and(|p| p.failed.is_some()) {
            // LC-36: a drained body of a failed runner writes no result.
            if let Some(p) = self.tool_phase() {
                p.running.remove(i);
            }
        } else {
            let next = self.body_done(i, outcome);
            self.settle_call(i, next);
        }
        self.pump_tools(now);
    }

    /// The tool runner failed on call `i` (`ToolRunnerFailed`, LC-36): no
    /// result is written for it; other bodies still running are awaited
    /// (and write no result either), the rest are dropped.
    pub(super) fn tool_runner_failed(&mut self, now: Time, i: usize, error: HookError) {
        if let Some(p) = self.tool_phase() {
            p.running.remove(i);
            p.running.retain(|c| matches!(c.stage, CallStage::Body));
            if p.failed.is_none() {
                p.failed = Some(error);
            }
        }
        self.pump_tools(now);
    }

    /// The answer to the tool seam `hook` of running call `i`.
    pub(super) fn tool_hook_done(&mut self, now: Time, i: usize, answer: HookAnswer) {
        let next = match answer {
            HookAnswer::ToolPreExecute(r) => self.pre_execute_done(now, i, r),
            // A failing approver means no approval channel (TL-10).
            HookAnswer::ToolApproval(r) => {
                self.approval_done(now, i, r.unwrap_or(ApprovalOutcome::Unavailable))
            }
            HookAnswer::ToolGuard(r) => self.guard_done(now, i, r),
            HookAnswer::ToolPostExecute(r) => self.post_execute_done(i, r),
            _ => Next::Wait,
        };
        self.settle_call(i, next);
        self.pump_tools(now);
    }

    /// Records a known outcome of call `i`; it commits in model order.
    fn settle_call(&mut self, i: usize, next: Next) {
        if matches!(next, Next::Wait) {
            return;
        }
        if let Some(c) = self.call_mut(i) {
            c.stage = CallStage::Settled(Box::new(next));
        }
    }

    /// Moves the phase on as far as it goes without an answer: commits the
    /// oldest settled calls, starts the next ones (LC-23, LC-24, LC-25),
    /// and ends the step when every call is committed.
    fn pump_tools(&mut self, now: Time) {
        loop {
            let aborted = self.aborted();
            let max = self.config.max_parallel_tool_calls.max(1);
            let Some(phase) = self.tool_phase() else {
                return;
            };
            if phase.failed.is_some() {
                if phase.running.is_empty() {
                    let error = phase.failed.take();
                    self.take_stage();
                    if let Some(error) = error {
                        self.turn_error(now, error);
                    }
                }
                return;
            }
            if matches!(
                phase.running.front().map(|c| &c.stage),
                Some(CallStage::Settled(_))
            ) {
                self.advance_oldest(now);
                continue;
            }
            if phase.cursor >= phase.calls.len() {
                if phase.running.is_empty() {
                    let concluded = phase.concluded;
                    self.take_stage();
                    self.step_finished(now, concluded.then_some(StepEnd::Completed));
                }
                return;
            }
            if phase.running.is_empty() {
                if aborted {
                    // LC-25: started calls are drained; a synthetic pair
                    // for every call not yet started, in model order.
                    self.skip_call(now);
                    continue;
                }
                // A new group (or an exclusive call): read the limit now.
                phase.limit = max;
                self.start_call(now);
                continue;
            }
            // Joining the running group: only while every running call is
            // parallel, past its pre-execute policy and not in post-execute
            // (a seam answered later must order the log as one answered at
            // once), below the limit, and when this call is parallel too
            // (reclassified now).
            let joinable = !aborted
                && phase.running.len() < phase.limit
                && phase.running.iter().all(|c| {
                    c.parallel
                        && !matches!(
                            c.stage,
                            CallStage::PreExecute { .. }
                                | CallStage::Approval { .. }
                                | CallStage::Guard { .. }
                                | CallStage::PostExecute { .. }
                        )
                });
            if !joinable {
                return;
            }
            let next = &phase.calls[phase.cursor];
            let (name, arguments) = (next.name.clone(), parse_arguments(&next.raw));
            if self.config.tools.execution_mode(&name, &arguments) != ExecutionMode::Parallel {
                // An exclusive call is its own barrier.
                return;
            }
            self.start_call(now);
        }
    }

    /// Appends the `tool/call` of the next call (LC-23 step 2).
    fn append_next_call(&mut self, now: Time) -> Option<(PlannedCall, u64)> {
        let (turn, step) = self.coords();
        let phase = self.tool_phase()?;
        let planned = phase.calls.get_mut(phase.cursor)?;
        let planned = PlannedCall {
            call_id: planned.call_id.clone(),
            name: planned.name.clone(),
            raw: core::mem::take(&mut planned.raw),
        };
        phase.cursor += 1;
        let call = ToolCall {
            turn,
            step,
            call_id: planned.call_id.clone(),
            name: planned.name.clone(),
            arguments: planned.raw.clone(),
        };
        let call_seq = self.append(now, call, None).unwrap_or(0);
        Some((planned, call_seq))
    }

    /// LC-25: `tool/call` and a synthetic result for a call never started.
    fn skip_call(&mut self, now: Time) {
        if let Some((planned, call_seq)) = self.append_next_call(now) {
            self.commit_result(
                now,
                &planned.call_id,
                call_seq,
                ToolOutcome::aborted_before_dispatch(),
            );
        }
    }

    /// Starts the next call: `tool/call`, then pre-execute (TL-9).
    fn start_call(&mut self, now: Time) {
        let (turn, step) = self.coords();
        let Some((planned, call_seq)) = self.append_next_call(now) else {
            return;
        };
        let arguments = parse_arguments(&planned.raw);
        let parallel =
            self.config.tools.execution_mode(&planned.name, &arguments) == ExecutionMode::Parallel;
        let token = ToolToken::new(self.next_id());
        let exec = ToolExecution {
            token,
            turn,
            step,
            call_id: planned.call_id,
            name: planned.name,
            arguments,
            raw_arguments: planned.raw,
        };
        let hook = self.next_id();
        let Some(phase) = self.tool_phase() else {
            return;
        };
        phase.running.push_back(CallRun {
            exec: exec.clone(),
            call_seq,
            stage: CallStage::PreExecute { hook },
            body_invoked: false,
            parallel,
            outcome: None,
        });
        let i = phase.running.len() - 1;
        let answer = self.seam(Seams::TOOL_PRE_EXECUTE, || Ok(PreToolDecision::Allow));
        let next = match answer {
            Hook::Ready(r) => self.pre_execute_done(now, i, r),
            Hook::Defer => {
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::ToolPreExecute {
                        exec,
                        value: PreToolDecision::Allow,
                    },
                });
                Next::Wait
            }
        };
        self.settle_call(i, next);
    }

    /// Post-execute or commit for the oldest call, whose outcome settled.
    fn advance_oldest(&mut self, now: Time) {
        let Some(c) = self.call_mut(0) else { return };
        let next = core::mem::replace(&mut c.stage, CallStage::Body);
        let CallStage::Settled(next) = next else {
            c.stage = next;
            return;
        };
        match *next {
            Next::Wait => {}
            Next::Commit(outcome) => {
                let Some(c) = self.tool_phase().and_then(|p| p.running.pop_front()) else {
                    return;
                };
                let outcome = self.cancellation_replacement(outcome, c.body_invoked);
                self.commit_result(now, &c.exec.call_id, c.call_seq, outcome);
            }
            Next::Post(outcome) => {
                let Some(exec) = self.exec_of(0) else { return };
                let hook = self.next_id();
                let answer = self.seam(Seams::TOOL_POST_EXECUTE, || Ok(PostToolDecision::accept()));
                match answer {
                    Hook::Ready(r) => {
                        if let Some(c) = self.call_mut(0) {
                            c.outcome = Some(outcome);
                        }
                        let next = self.post_execute_done(0, r);
                        self.settle_call(0, next);
                    }
                    Hook::Defer => {
                        if let Some(c) = self.call_mut(0) {
                            c.outcome = Some(outcome.clone());
                            c.stage = CallStage::PostExecute { hook };
                        }
                        self.emit(Output::Hook {
                            id: hook,
                            call: HookCall::ToolPostExecute {
                                exec,
                                outcome,
                                value: PostToolDecision::accept(),
                            },
                        });
                    }
                }
            }
        }
    }

    /// TL-9 steps 4, 5, 7: the pre-execute decision.
    fn pre_execute_done(
        &mut self,
        now: Time,
        i: usize,
        result: Result<PreToolDecision, HookError>,
    ) -> Next {
        match result {
            Err(e) => Next::Commit(e.tool_outcome()),
            Ok(PreToolDecision::Deny { reason }) => Next::Post(ToolOutcome::error(reason)),
            Ok(PreToolDecision::Allow) => self.after_allow(now, i),
            Ok(PreToolDecision::Ask { reason }) => {
                let Some(exec) = self.exec_of(i) else {
                    return Next::Wait;
                };
                let hook = self.next_id();
                let answer = self.seam(Seams::TOOL_APPROVAL, || ApprovalOutcome::NoService);
                match answer {
                    Hook::Ready(outcome) => self.approval_outcome(now, i, outcome, reason),
                    Hook::Defer => {
                        if let Some(c) = self.call_mut(i) {
                            c.stage = CallStage::Approval { hook };
                            // Keep the ask's reason for the no-service text.
                            c.outcome =
                                Some(ToolOutcome::error(reason.clone().unwrap_or_default()));
                        }
                        self.emit(Output::Hook {
                            id: hook,
                            call: HookCall::ToolApproval {
                                exec,
                                reason,
                                value: ApprovalOutcome::NoService,
                            },
                        });
                        Next::Wait
                    }
                }
            }
        }
    }

    fn approval_done(&mut self, now: Time, i: usize, outcome: ApprovalOutcome) -> Next {
        let reason = self
            .call_mut(i)
            .and_then(|c| c.outcome.take())
            .and_then(|o| o.error.map(|e| e.message))
            .filter(|r| !r.is_empty());
        self.approval_outcome(now, i, outcome, reason)
    }

    /// TL-10 approval outcomes, TL-9 step 6.
    fn approval_outcome(
        &mut self,
        now: Time,
        i: usize,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Next {
        let name = self.exec_of(i).map(|e| e.name).unwrap_or_default();
        let denial = match outcome {
            ApprovalOutcome::AllowedOnce => return self.after_allow(now, i),
            ApprovalOutcome::Rejected => error_text!(
                "the user rejected the tool",
                "the user rejected tool \"{name}\""
            ),
            ApprovalOutcome::Cancelled => {
                if self.aborted() {
                    return Next::Post(ToolOutcome::aborted_before_dispatch());
                }
                error_text!(
                    "tool approval was cancelled",
                    "approval for tool \"{name}\" was cancelled"
                )
            }
            ApprovalOutcome::Unavailable => {
                error_text!(
                    "tool requires approval, but no approval channel is available",
                    "tool \"{name}\" requires approval, but no approval channel is available"
                )
            }
            ApprovalOutcome::NoService => reason.unwrap_or_else(|| {
                error_text!(
                    "tool requires approval (not yet supported)",
                    "tool \"{name}\" requires approval (not yet supported)"
                )
            }),
        };
        Next::Post(ToolOutcome::error(denial))
    }

    /// TL-9 step 7 after an allow: the guards.
    fn after_allow(&mut self, now: Time, i: usize) -> Next {
        let Some(exec) = self.exec_of(i) else {
            return Next::Wait;
        };
        match self.seam(Seams::TOOL_GUARD, || Ok(None)) {
            Hook::Ready(r) => self.guard_done(now, i, r),
            Hook::Defer => {
                // Only a claimed guard takes an id, so attempt and token
                // numbers stay as they were without one.
                let hook = self.next_id();
                if let Some(c) = self.call_mut(i) {
                    c.stage = CallStage::Guard { hook };
                }
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::ToolGuard { exec, value: None },
                });
                Next::Wait
            }
        }
    }

    /// TL-9 steps 7..9 after the guards: a denial, abort, lookup,
    /// validation, then the body. A failing guard fails the call like a
    /// failing pre-execute (TL-12).
    fn guard_done(
        &mut self,
        _now: Time,
        i: usize,
        result: Result<Option<String>, HookError>,
    ) -> Next {
        match result {
            Err(e) => return Next::Commit(e.tool_outcome()),
            Ok(Some(reason)) => return Next::Post(ToolOutcome::error(reason)),
            Ok(None) => {}
        }
        let Some(exec) = self.exec_of(i) else {
            return Next::Wait;
        };
        if self.aborted() {
            return Next::Post(ToolOutcome::aborted_before_dispatch());
        }
        self.emit(Output::Flush(Checkpoint::BeforeToolBody));
        let Some(tool) = self.config.tools.get(&exec.name) else {
            return Next::Post(ToolOutcome::unknown_tool(&exec.name));
        };
        if SCHEMAS && tool.validate_arguments {
            let violations = validate_value(&tool.schema.parameters, &exec.arguments, "");
            if !violations.is_empty() {
                return Next::Post(ToolOutcome::invalid_arguments(&violations));
            }
        }
        if let Some(c) = self.call_mut(i) {
            c.stage = CallStage::Body;
            c.body_invoked = true;
        }
        self.emit(Output::ExecuteTool(exec));
        Next::Wait
    }

    /// TL-9 steps 9, 10: output check and cancellation replacement.
    fn body_done(&mut self, i: usize, mut outcome: ToolOutcome) -> Next {
        let Some(exec) = self.exec_of(i) else {
            return Next::Wait;
        };
        if !outcome.is_error()
            && let (Some(value), Some(schema)) = (
                outcome.value.as_ref(),
                self.config
                    .tools
                    .get(&exec.name)
                    .and_then(|t| t.output_schema.as_ref())
                    .filter(|_| SCHEMAS),
            )
        {
            let violations = validate_value(schema, value, "value");
            if !violations.is_empty() {
                let contexts = core::mem::take(&mut outcome.additional_contexts);
                outcome =
                    ToolOutcome::invalid_output(&exec.name, &violations).with_contexts(contexts);
            }
        }
        let outcome = self.cancellation_replacement(outcome, true);
        Next::Post(outcome)
    }

    /// TL-9 steps 10 and 12: a success seen after cancellation becomes an
    /// abort result; contexts are kept.
    fn cancellation_replacement(&self, outcome: ToolOutcome, body_invoked: bool) -> ToolOutcome {
        if !self.aborted() || outcome.is_error() {
            return outcome;
        }
        let replaced = if body_invoked {
            ToolOutcome::aborted()
        } else {
            ToolOutcome::aborted_before_dispatch()
        };
        replaced.with_contexts(outcome.additional_contexts)
    }

    /// TL-11.
    fn post_execute_done(&mut self, i: usize, result: Result<PostToolDecision, HookError>) -> Next {
        let Some(mut outcome) = self.call_mut(i).and_then(|c| c.outcome.take()) else {
            return Next::Wait;
        };
        match result {
            Ok(PostToolDecision::Accept {
                content,
                additional_contexts,
            }) => {
                if let Some(content) = content {
                    outcome.content = content;
                }
                outcome.additional_contexts.extend(additional_contexts);
                Next::Commit(outcome)
            }
            Ok(PostToolDecision::Block {
                feedback,
                additional_contexts,
            }) => {
                let text = feedback_text(&feedback);
                let message = if text.is_empty() {
                    String::from("tool result blocked by post-execute policy")
                } else {
                    text
                };
                let mut blocked = ToolOutcome::error(message);
                blocked.content = feedback;
                blocked.meta = outcome.meta;
                blocked.additional_contexts = additional_contexts;
                Next::Commit(blocked)
            }
            Err(e) => {
                let mut failed = e.tool_outcome();
                failed.additional_contexts = outcome.additional_contexts;
                Next::Commit(failed)
            }
        }
    }

    /// LC-23 steps 4..6.
    fn commit_result(&mut self, now: Time, call_id: &CallId, call_seq: u64, outcome: ToolOutcome) {
        let (turn, step) = self.coords();
        let id = self.ids.message_id(IdPurpose::ToolResult {
            turn,
            step,
            call_id,
        });
        let message = Message::tool_result(
            id,
            call_id.clone(),
            outcome.content.clone(),
            outcome.is_error(),
        );
        let mut data = ToolResult::new(turn, step, message);
        data.error = outcome
            .error
            .as_ref()
            .and_then(|e| e.info.as_ref())
            .map(|i| ToolError::new(i.name.clone(), i.code.clone()));
        data.meta = outcome
            .meta
            .as_ref()
            .and_then(|m| serde_json::value::to_raw_value(m).ok());
        self.append(
            now,
            data,
            Some(SurfaceIntent::append_citing(alloc::vec![call_seq])),
        );
        if !outcome.is_error()
            && outcome.concludes_turn
            && let Some(p) = self.tool_phase()
        {
            p.concluded = true;
        }
        for context in outcome.additional_contexts {
            if let Err(e) = self.send_queued(now, context, InboxTarget::NextStep, false) {
                self.faults.push(error_text!(
                    "a tool context was refused",
                    "a tool context was refused: {e}"
                ));
            }
        }
    }
}
