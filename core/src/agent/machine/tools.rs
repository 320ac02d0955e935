//! The tool pipeline (LC-22..LC-25, TL-9).

use super::*;

impl Agent {
    // ------------------------------------------------------------------
    // Tools (LC-22..LC-25, TL-9)

    pub(super) fn tool_phase(&mut self) -> Option<&mut ToolPhase> {
        match self.stage_mut() {
            Some(Stage::Tools(t)) => Some(t),
            _ => None,
        }
    }

    /// Runs calls in model order until one waits (LC-23).
    pub(super) fn run_tools(&mut self, now: i64) {
        loop {
            let aborted = self.aborted();
            let (turn, step) = self.coords();
            let Some(phase) = self.tool_phase() else {
                return;
            };
            if phase.current.is_some() {
                return;
            }
            if phase.cursor >= phase.calls.len() {
                let concluded = phase.concluded;
                self.take_stage();
                self.step_finished(
                    now,
                    if concluded {
                        Some(StepEnd::Completed)
                    } else {
                        None
                    },
                );
                return;
            }
            let i = phase.cursor;
            let (call_id, name, raw) = {
                let c = &phase.calls[i];
                (c.call_id.clone(), c.name.clone(), c.raw.clone())
            };
            let call = ToolCall {
                turn,
                step,
                call_id: call_id.clone(),
                name: name.clone(),
                arguments: raw.clone(),
            };
            let call_seq = self.append(now, call, None).unwrap_or(0);
            if aborted {
                // LC-25: a synthetic pair for every call not yet started.
                self.commit_result(
                    now,
                    &call_id,
                    call_seq,
                    ToolOutcome::aborted_before_dispatch(),
                );
                if let Some(p) = self.tool_phase() {
                    p.cursor += 1;
                }
                continue;
            }
            let token = self.next_id();
            let exec = ToolExecution {
                token,
                turn,
                step,
                call_id,
                name,
                arguments: parse_arguments(&raw),
                raw_arguments: raw,
            };
            if let Some(p) = self.tool_phase() {
                p.current = Some(CallRun {
                    exec: exec.clone(),
                    call_seq,
                    stage: CallStage::Body,
                    body_invoked: false,
                    outcome: None,
                });
            }
            let hook = self.next_id();
            let answer = self.call_hook(now, |h, cx| h.tool_pre_execute(cx, &exec));
            let next = match answer {
                Hook::Ready(r) => {
                    self.apply_actions(now);
                    self.pre_execute_done(now, r)
                }
                Hook::Defer => {
                    self.set_call_stage(CallStage::PreExecute { hook });
                    self.emit(Output::Hook {
                        id: hook,
                        call: HookCall::ToolPreExecute { exec },
                    });
                    self.apply_actions(now);
                    Next::Wait
                }
            };
            if !self.advance_call(now, next) {
                return;
            }
        }
    }

    pub(super) fn set_call_stage(&mut self, stage: CallStage) {
        if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
            c.stage = stage;
        }
    }

    pub(super) fn current_exec(&mut self) -> Option<ToolExecution> {
        self.tool_phase()
            .and_then(|p| p.current.as_ref())
            .map(|c| c.exec.clone())
    }

    /// Drives the current call after an answer; then the next calls.
    pub(super) fn continue_call(&mut self, now: i64, next: Next) {
        if self.advance_call(now, next) {
            self.run_tools(now);
        }
    }

    /// Applies `next` to the current call. Returns whether the call was
    /// committed (so the phase may move on).
    pub(super) fn advance_call(&mut self, now: i64, mut next: Next) -> bool {
        loop {
            match next {
                Next::Wait => return false,
                Next::Commit(outcome) => {
                    let Some(c) = self.tool_phase().and_then(|p| p.current.take()) else {
                        return false;
                    };
                    let outcome = self.cancellation_replacement(outcome, c.body_invoked);
                    self.commit_result(now, &c.exec.call_id, c.call_seq, outcome);
                    if let Some(p) = self.tool_phase() {
                        p.cursor += 1;
                    }
                    return true;
                }
                Next::Post(outcome) => {
                    let Some(exec) = self.current_exec() else {
                        return false;
                    };
                    let hook = self.next_id();
                    let answer =
                        self.call_hook(now, |h, cx| h.tool_post_execute(cx, &exec, &outcome));
                    match answer {
                        Hook::Ready(r) => {
                            self.apply_actions(now);
                            if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
                                c.outcome = Some(outcome);
                            }
                            next = self.post_execute_done(r);
                        }
                        Hook::Defer => {
                            if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
                                c.outcome = Some(outcome.clone());
                                c.stage = CallStage::PostExecute { hook };
                            }
                            self.emit(Output::Hook {
                                id: hook,
                                call: HookCall::ToolPostExecute { exec, outcome },
                            });
                            self.apply_actions(now);
                            return false;
                        }
                    }
                }
            }
        }
    }

    /// TL-9 steps 4, 5, 7: the pre-execute decision.
    pub(super) fn pre_execute_done(
        &mut self,
        now: i64,
        result: Result<PreToolDecision, HookError>,
    ) -> Next {
        match result {
            Err(e) => Next::Commit(e.tool_outcome()),
            Ok(PreToolDecision::Deny { reason }) => Next::Post(ToolOutcome::error(reason)),
            Ok(PreToolDecision::Allow) => self.after_allow(now),
            Ok(PreToolDecision::Ask { reason }) => {
                let Some(exec) = self.current_exec() else {
                    return Next::Wait;
                };
                let hook = self.next_id();
                let answer =
                    self.call_hook(now, |h, cx| h.tool_approval(cx, &exec, reason.as_deref()));
                match answer {
                    Hook::Ready(outcome) => {
                        self.apply_actions(now);
                        self.approval_outcome(now, outcome, reason)
                    }
                    Hook::Defer => {
                        self.set_call_stage(CallStage::Approval { hook });
                        if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
                            // Keep the ask's reason for the no-service text.
                            c.outcome =
                                Some(ToolOutcome::error(reason.clone().unwrap_or_default()));
                        }
                        self.emit(Output::Hook {
                            id: hook,
                            call: HookCall::ToolApproval { exec, reason },
                        });
                        self.apply_actions(now);
                        Next::Wait
                    }
                }
            }
        }
    }

    pub(super) fn approval_done(&mut self, now: i64, outcome: ApprovalOutcome) -> Next {
        let reason = self
            .tool_phase()
            .and_then(|p| p.current.as_mut())
            .and_then(|c| c.outcome.take())
            .and_then(|o| o.error.map(|e| e.message))
            .filter(|r| !r.is_empty());
        self.approval_outcome(now, outcome, reason)
    }

    /// TL-10 approval outcomes, TL-9 step 6.
    pub(super) fn approval_outcome(
        &mut self,
        now: i64,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Next {
        let name = self.current_exec().map(|e| e.name).unwrap_or_default();
        let denial = match outcome {
            ApprovalOutcome::AllowedOnce => return self.after_allow(now),
            ApprovalOutcome::Rejected => format!("the user rejected tool \"{name}\""),
            ApprovalOutcome::Cancelled => {
                if self.aborted() {
                    return Next::Post(ToolOutcome::aborted_before_dispatch());
                }
                format!("approval for tool \"{name}\" was cancelled")
            }
            ApprovalOutcome::Unavailable => {
                format!("tool \"{name}\" requires approval, but no approval channel is available")
            }
            ApprovalOutcome::NoService => reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval (not yet supported)")
            }),
        };
        Next::Post(ToolOutcome::error(denial))
    }

    /// TL-9 steps 7..9 after an allow: guards, abort, lookup, validation,
    /// then the body.
    pub(super) fn after_allow(&mut self, now: i64) -> Next {
        let Some(exec) = self.current_exec() else {
            return Next::Wait;
        };
        if let Some(reason) = self.call_hook(now, |h, cx| h.tool_guard(cx, &exec)) {
            self.apply_actions(now);
            return Next::Post(ToolOutcome::error(reason));
        }
        self.apply_actions(now);
        if self.aborted() {
            return Next::Post(ToolOutcome::aborted_before_dispatch());
        }
        self.emit(Output::Flush(Checkpoint::BeforeToolBody));
        let Some(tool) = self.config.tools.get(&exec.name) else {
            return Next::Post(ToolOutcome::unknown_tool(&exec.name));
        };
        if tool.validate_arguments {
            let violations = validate_value(&tool.schema.parameters, &exec.arguments, "");
            if !violations.is_empty() {
                return Next::Post(ToolOutcome::invalid_arguments(&violations));
            }
        }
        if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
            c.stage = CallStage::Body;
            c.body_invoked = true;
        }
        self.emit(Output::ExecuteTool(exec));
        Next::Wait
    }

    /// TL-9 steps 9, 10: output check and cancellation replacement.
    pub(super) fn body_done(&mut self, mut outcome: ToolOutcome) -> Next {
        let Some(exec) = self.current_exec() else {
            return Next::Wait;
        };
        if !outcome.is_error() {
            if let (Some(value), Some(schema)) = (
                outcome.value.as_ref(),
                self.config
                    .tools
                    .get(&exec.name)
                    .and_then(|t| t.output_schema.as_ref()),
            ) {
                let violations = validate_value(schema, value, "value");
                if !violations.is_empty() {
                    let contexts = core::mem::take(&mut outcome.additional_contexts);
                    outcome = ToolOutcome::invalid_output(&exec.name, &violations)
                        .with_contexts(contexts);
                }
            }
        }
        let outcome = self.cancellation_replacement(outcome, true);
        Next::Post(outcome)
    }

    /// TL-9 steps 10 and 12: a success seen after cancellation becomes an
    /// abort result; contexts are kept.
    pub(super) fn cancellation_replacement(
        &self,
        outcome: ToolOutcome,
        body_invoked: bool,
    ) -> ToolOutcome {
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
    pub(super) fn post_execute_done(
        &mut self,
        result: Result<PostToolDecision, HookError>,
    ) -> Next {
        let Some(mut outcome) = self
            .tool_phase()
            .and_then(|p| p.current.as_mut())
            .and_then(|c| c.outcome.take())
        else {
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
    pub(super) fn commit_result(
        &mut self,
        now: i64,
        call_id: &CallId,
        call_seq: u64,
        outcome: ToolOutcome,
    ) {
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
        if !outcome.is_error() && outcome.concludes_turn {
            if let Some(p) = self.tool_phase() {
                p.concluded = true;
            }
        }
        for context in outcome.additional_contexts {
            if let Err(e) = self.send_queued(now, context, InboxTarget::NextStep, false) {
                self.faults.push(format!("a tool context was refused: {e}"));
            }
        }
    }
}
