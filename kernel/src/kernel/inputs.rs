//! The kernel's inputs: user calls and completions of earlier effects.

use super::*;

impl Kernel {
    pub(super) fn tick(&mut self, now: Time) -> Time {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    /// Delivers `message` (IB-6) to `target`, waking the driver when
    /// `wakeup`.
    pub fn send(
        &mut self,
        now: Time,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.disposing {
            return Err(KernelError::Disposed);
        }
        self.core.send(now, message, target, wakeup)?;
        Ok(())
    }

    /// Cancels the running turn (LC-33).
    pub fn cancel(&mut self, now: Time, cause: CancelCause, keep_inbox: bool) {
        let now = self.tick(now);
        self.core.cancel(now, cause, keep_inbox);
    }

    /// Appends a foreign event (plugin, tool-owned) at the end of the log.
    pub fn append_event(&mut self, now: Time, data: EventData) -> Result<u64, KernelError> {
        let now = self.tick(now);
        Ok(self.core.append_event(now, data, None)?)
    }

    /// Disposes the agent (LC-40): the running turn is cancelled with cause
    /// `disposed`, pending asks are withdrawn, running bodies are told to
    /// stop; [`Effect::Finished`] follows once everything is persisted.
    pub fn dispose(&mut self, now: Time) {
        let now = self.tick(now);
        if self.disposing {
            return;
        }
        self.disposing = true;
        self.core.cancel(now, CancelCause::Disposed, false);
        self.withdraw_asks();
    }

    /// A chunk of model attempt `attempt` (LC-19).
    pub fn model_chunk(
        &mut self,
        now: Time,
        attempt: AttemptId,
        chunk: StreamChunk,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.model != Some(attempt) {
            return Err(KernelError::StaleAttempt { attempt });
        }
        let max = self.max_response_bytes;
        if self.response.add(&chunk) > max {
            // A response is bounded; this chunk and the rest of
            // the stream are refused, what came before stays.
            self.effects.push_back(Effect::CancelModel { attempt });
            let error = HookError::llm(
                "RESPONSE_TOO_LARGE",
                error_text!(
                    "the model response is too large",
                    "the model response exceeded {max} bytes"
                ),
            );
            return self.model_error(now, attempt, error);
        }
        if STREAM_VALIDATION && let Some(validator) = &mut self.validator {
            // The reference's library adapter ends a `max-tokens` stream
            // with the cut tool call still open (the recording
            // `max-tokens-continue` breaks G-7 so); the assembler drops
            // that call (BB-3), so this one rule is let through there.
            let truncated = |v: &dsh_core::Violation| {
                v.rule == dsh_core::Rule::G7
                    && matches!(&chunk, StreamChunk::Finish { reason, .. } if reason.kind() == "max-tokens")
            };
            if let Some(violation) = validator.push(&chunk).err().filter(|v| !truncated(v)) {
                // The reference's development invariant checker: a stream
                // that breaks the grammar ends the step (INVARIANT).
                self.effects.push_back(Effect::CancelModel { attempt });
                let error = HookError::llm(
                    "INVARIANT",
                    error_text!(
                        "provider stream broke a rule",
                        "provider stream broke rule {violation}"
                    ),
                );
                return self.model_error(now, attempt, error);
            }
        }
        Ok(self.core.handle_chunk(now, attempt, chunk)?)
    }

    /// The stream of `attempt` ended (adapter failures arrive before as a
    /// terminal `finish` chunk, AC-6). The end of the live attempt is
    /// accepted even when the turn already left it (a cancel waiting
    /// behind a write); no [`Effect::CancelModel`] follows then.
    pub fn model_end(&mut self, now: Time, attempt: AttemptId) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.model != Some(attempt) {
            return Err(KernelError::StaleAttempt { attempt });
        }
        self.model = None;
        let ended = self.core.handle_stream_end(now, attempt);
        Ok(Self::left_by_the_turn(ended)?)
    }

    /// The end of the kernel's live attempt that the turn already left (a
    /// cancel whose [`Effect::CancelModel`] still waits behind a pending
    /// write) is that attempt's end, not a stale input: it is accepted,
    /// and no cancel follows for a stream that is over.
    fn left_by_the_turn(
        result: Result<(), dsh_core::agent::InputError>,
    ) -> Result<(), dsh_core::agent::InputError> {
        match result {
            Err(dsh_core::agent::InputError::StaleAttempt { .. }) => Ok(()),
            other => other,
        }
    }

    /// The consumer of `attempt`'s stream failed outside the adapter: a
    /// turn error (LC-27).
    pub fn model_error(
        &mut self,
        now: Time,
        attempt: AttemptId,
        error: HookError,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        if self.model != Some(attempt) {
            return Err(KernelError::StaleAttempt { attempt });
        }
        self.model = None;
        let ended = self.core.handle_stream_error(now, attempt, error);
        Ok(Self::left_by_the_turn(ended)?)
    }

    /// The body of call `token` returned `outcome`; `events` are the
    /// tool-owned events it logged (TL-24), appended before the result. A
    /// call the kernel already answered (timeout or abort grace passed) is
    /// [`KernelError::StaleTool`].
    pub fn tool_done(
        &mut self,
        now: Time,
        token: ToolToken,
        outcome: ToolOutcome,
        events: Vec<EventData>,
    ) -> Result<(), KernelError> {
        let now = self.tick(now);
        let Some(running) = self.tools.remove(&token) else {
            return Err(KernelError::StaleTool { token });
        };
        for data in events {
            if let Err(e) = self.core.append_event(now, data, None) {
                self.publish(AgentEvent::Error(error_text!(
                    "tool event refused",
                    "tool event refused: {e}"
                )));
            }
        }
        let outcome = match running.phase {
            // TL-14: the wrapper's own deadline fired, so its error replaces
            // whatever the body returned.
            Phase::TimedOut { .. } => timeout_outcome(running.timeout_ms.unwrap_or(0)),
            _ => outcome,
        };
        Ok(self.core.handle_tool_result(now, token, outcome)?)
    }

    /// The write of the pending [`Effect::Persist`] finished; `Err` carries
    /// the store's message.
    pub fn persisted(&mut self, now: Time, result: Result<(), String>) -> Result<(), KernelError> {
        self.tick(now);
        let Some((end, checkpoint)) = self.persisting.take() else {
            return Err(KernelError::NoPersistPending);
        };
        match result {
            Ok(()) => {
                self.persisted = self.persisted.max(end);
                self.flush_failed = None;
                self.store_error = None;
                self.failed_at = None;
            }
            Err(e) => {
                self.failed_at = Some(end);
                let at = match checkpoint {
                    Some(cp) => error_text!("", " at {cp:?}"),
                    None => String::new(),
                };
                let message = error_text!(
                    "session store write failed",
                    "session store write failed{at}: {e}"
                );
                self.publish(AgentEvent::Error(message.clone()));
                self.store_error = Some(message.clone());
                match self.model {
                    // A response that cannot be stored is not
                    // read on; the turn ends in error, keeping what
                    // streamed so far (the write is retried at its end).
                    Some(attempt) => {
                        self.effects.push_back(Effect::CancelModel { attempt });
                        let error = HookError::llm("FLUSH_FAILED", message);
                        let now = self.now;
                        if let Err(e) = self.model_error(now, attempt, error) {
                            self.publish(AgentEvent::Error(error_text!(
                                "model error refused",
                                "{e}"
                            )));
                        }
                    }
                    None if matches!(
                        checkpoint,
                        Some(Checkpoint::BeforeModel | Checkpoint::BeforeToolBody)
                    ) =>
                    {
                        self.flush_failed = Some(message);
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// Runs plugin command `name` with `args` as maintenance (LC-39): only
    /// while idle; every plugin with [`Seams::COMMAND`] sees it in order
    /// ([`Plugin::command`]); the value starts as `null`. The result is
    /// published as [`AgentEvent::CommandDone`] with the id returned here;
    /// input sent meanwhile waits for the end of the maintenance.
    pub fn command(
        &mut self,
        now: Time,
        name: &str,
        args: serde_json::Value,
    ) -> Result<u64, KernelError> {
        self.tick(now);
        if self.disposing {
            return Err(KernelError::Disposed);
        }
        self.core.begin_maintenance(self.now)?;
        self.next_command += 1;
        let id = self.next_command;
        // A command's seat carries its id where a tool's carries its token.
        let seat = Seat::Kernel {
            token: id,
            call: KernelCall::Command {
                name: String::from(name),
                value: args,
            },
        };
        self.run_and_end(seat, 0, None);
        Ok(id)
    }

    /// Answers ask `id` ([`AgentEvent::ApprovalRequested`] or
    /// [`AgentEvent::Asked`]).
    pub fn answer(&mut self, now: Time, id: AskId, reply: Reply) -> Result<(), KernelError> {
        self.tick(now);
        #[cfg(not(feature = "plugins"))]
        {
            // Without the plugin chain nothing asks.
            let _ = reply;
            Err(KernelError::StaleAsk { id })
        }
        #[cfg(feature = "plugins")]
        self.answer_pending(id, reply)
    }

    #[cfg(feature = "plugins")]
    fn answer_pending(&mut self, id: AskId, reply: Reply) -> Result<(), KernelError> {
        let Some(pending) = self.asks.remove(&id) else {
            return Err(KernelError::StaleAsk { id });
        };
        let reply = if self.disposing {
            Reply::Cancelled
        } else {
            reply
        };
        self.resume_chain(pending, reply);
        Ok(())
    }

    /// The timer the runtime armed for `deadline` (a
    /// [`poll_timeout`](Self::poll_timeout) value) ran out on the runtime's
    /// own monotonic clock. The kernel treats `deadline` as reached even
    /// when `now` (the wall clock) reads earlier: its clock rises to
    /// `deadline`, and every deadline up to it fires. A deadline that moved
    /// later meanwhile, or one already fired, changes nothing (a spurious
    /// wake-up is harmless).
    ///
    /// ```
    /// # fn wake(kernel: &mut dsh_runtime::Kernel, wall_clock: impl Fn() -> dsh_runtime::Time) {
    /// if let Some(deadline) = kernel.poll_timeout() {
    ///     let wait_ms = deadline.millis_since(kernel.now());
    ///     // ... a monotonic timer runs for `wait_ms` ...
    ///     kernel.handle_timeout(wall_clock(), deadline);
    /// }
    /// # }
    /// ```
    ///
    /// The wall clock alone is not a timer input, and a bare number is not
    /// a [`Time`]:
    ///
    /// ```compile_fail
    /// # fn wake(kernel: &mut dsh_runtime::Kernel, wall_clock_ms: i64) {
    /// kernel.handle_timeout(wall_clock_ms);
    /// # }
    /// ```
    pub fn handle_timeout(&mut self, now: Time, deadline: Time) {
        self.tick(now);
        let now = self.tick(deadline);
        if self.core.poll_timeout().is_some_and(|d| d <= now) {
            // Cannot fail: a timer is armed.
            let _ = self.core.handle_timeout(now);
        }
        let mut answer = Vec::new();
        for (token, t) in self.tools.iter_mut() {
            match t.phase {
                Phase::Running if t.deadline.is_some_and(|d| d <= now) => {
                    t.phase = Phase::TimedOut {
                        until: now.add_millis(self.grace_ms),
                    };
                    self.effects.push_back(Effect::CancelTool { token: *token });
                }
                Phase::TimedOut { until } if until <= now => {
                    answer.push((*token, timeout_outcome(t.timeout_ms.unwrap_or(0))));
                }
                Phase::Aborting { until } if until <= now => {
                    answer.push((*token, ToolOutcome::aborted()));
                }
                _ => {}
            }
        }
        for (token, outcome) in answer {
            self.tools.remove(&token);
            // The call is in flight in the core: it was started by it.
            if let Err(e) = self.core.handle_tool_result(now, token, outcome) {
                self.publish(AgentEvent::Error(error_text!(
                    "tool answer refused",
                    "tool answer refused: {e}"
                )));
            }
        }
    }
}
