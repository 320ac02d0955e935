//! The kernel's outputs: draining effects, the flush gate, write-behind.

use super::*;

impl Kernel {
    /// The next effect, or `None` when drained (or when a
    /// [`Effect::Persist`] awaits [`persisted`](Self::persisted)).
    #[must_use = "drain effects until `None` and carry each out"]
    pub fn poll(&mut self) -> Option<Effect> {
        loop {
            if let Some(e) = self.effects.pop_front() {
                return Some(e);
            }
            if self.persisting.is_some() || self.finished {
                return None;
            }
            let len = self.core.session().len();
            let out = match self.held.take() {
                Some(out) => out,
                None => match self.core.poll() {
                    Some(out) => out,
                    None => {
                        if let Some(cp) = self.checkpoint.take()
                            && self.persisted < len
                        {
                            return Some(self.persist(Some(cp)));
                        }
                        return self.settle();
                    }
                },
            };
            // SM-14: the checkpoint's write comes before the dispatch; the
            // turn's end is written before idle is reported, so a failed
            // write reaches subscribers first.
            if matches!(
                out,
                Output::CallModel(_) | Output::ExecuteTool(_) | Output::Status(AgentStatus::Idle)
            ) && let Some(cp) = self.checkpoint.take()
                && self.persisted < len
            {
                self.held = Some(out);
                return Some(self.persist(Some(cp)));
            }
            self.on_output(out);
        }
    }

    /// The core is drained: persist what is left when it is quiet, finish
    /// a disposal.
    pub(super) fn settle(&mut self) -> Option<Effect> {
        if !self.core.is_quiescent() || !self.tools.is_empty() {
            // W2/W3: between checkpoints (a response streaming in, a tool
            // running), what was appended is written once the window that
            // opened with the first unwritten event has passed.
            let len = self.core.session().len();
            if self.persisted >= len || self.failed_at == Some(len) {
                self.behind_since = None;
                return None;
            }
            let since = *self.behind_since.get_or_insert(self.now);
            let due = self
                .write_behind_ms
                .is_some_and(|ms| self.now >= since.add_millis(ms));
            return due.then(|| self.persist(None));
        }
        let len = self.core.session().len();
        if self.persisted < len && self.failed_at != Some(len) {
            return Some(self.persist(None));
        }
        if self.disposing && !self.finished {
            self.finished = true;
            return Some(Effect::Finished);
        }
        None
    }

    pub(super) fn persist(&mut self, checkpoint: Option<Checkpoint>) -> Effect {
        let len = self.core.session().len();
        self.persisting = Some((len, checkpoint));
        self.behind_since = None;
        Effect::Persist {
            range: self.persisted..len,
            checkpoint,
        }
    }

    pub(super) fn publish(&mut self, event: AgentEvent) {
        self.effects.push_back(Effect::Publish(event));
    }

    /// When the open write-behind window closes (W2), if one is open.
    pub(super) fn write_behind_deadline(&self) -> Option<Time> {
        if self.persisting.is_some() {
            return None;
        }
        let since = self.behind_since?;
        let ms = self.write_behind_ms?;
        Some(since.add_millis(ms))
    }

    pub(super) fn on_output(&mut self, out: Output) {
        let now = self.now;
        match out {
            Output::Appended(range) => self.appended(range.start, range.end),
            Output::Status(status) => {
                self.status = status;
                self.publish(AgentEvent::Status(status));
            }
            Output::Notify(Notification::Error { error, .. }) => {
                self.publish(AgentEvent::Error(error.message().to_string()));
            }
            Output::Notify(_) => {}
            Output::Flush(cp) => {
                #[cfg(feature = "plugins")]
                for p in self.plugins.iter_mut() {
                    if p.seams().contains(Seams::FLUSH) {
                        p.on_flush(cp);
                    }
                }
                self.checkpoint = Some(cp);
            }
            Output::CallModel(call) => match self.flush_failed.take() {
                // SM-14: the request is not dispatched; the turn ends in
                // error with the store's failure.
                Some(message) => {
                    self.model = Some(call.attempt);
                    let error = HookError::llm("FLUSH_FAILED", message);
                    if let Err(e) = self.model_error(now, call.attempt, error) {
                        self.publish(AgentEvent::Error(error_text!(
                            "store failure refused",
                            "{e}"
                        )));
                    }
                }
                None => {
                    self.model = Some(call.attempt);
                    self.response = ResponseSize::default();
                    self.validator =
                        (STREAM_VALIDATION && self.validate_streams).then(StreamValidator::new);
                    self.effects.push_back(Effect::StartModel(call));
                }
            },
            Output::CancelModelCall { attempt } if self.model == Some(attempt) => {
                self.model = None;
                self.effects.push_back(Effect::CancelModel { attempt });
            }
            Output::ExecuteTool(exec) => match self.flush_failed.take() {
                Some(message) => {
                    if let Err(e) =
                        self.core
                            .handle_tool_result(now, exec.token, ToolOutcome::error(message))
                    {
                        self.publish(AgentEvent::Error(error_text!(
                            "store failure refused",
                            "{e}"
                        )));
                    }
                }
                None => self.execute(exec),
            },
            Output::AbortTurn { .. } => {
                let until = now.add_millis(self.grace_ms);
                for (token, t) in self.tools.iter_mut() {
                    if t.phase == Phase::Running {
                        t.phase = Phase::Aborting { until };
                        self.effects.push_back(Effect::CancelTool { token: *token });
                    }
                }
                self.withdraw_asks();
            }
            Output::Hook { id, call } => self.hook(id, call),
            _ => {}
        }
    }

    pub(super) fn appended(&mut self, start: u64, end: u64) {
        let listen = self.seams().contains(Seams::EVENTS);
        if !listen && !self.publish_events {
            return;
        }
        // Plugin appends and actions (none without the plugin chain).
        #[cfg_attr(not(feature = "plugins"), allow(unused_mut))]
        let mut appends = Vec::new();
        #[cfg_attr(not(feature = "plugins"), allow(unused_mut))]
        let mut actions = Vec::new();
        for seq in start..end {
            let Some(event) = self.core.session().event(seq) else {
                continue;
            };
            #[cfg(feature = "plugins")]
            if listen {
                let session = self.core.session();
                let mut cx = Cx {
                    now: self.now,
                    session,
                    reply: None,
                    appends: &mut appends,
                    actions: &mut actions,
                };
                for p in self.plugins.iter_mut() {
                    if p.seams().contains(Seams::EVENTS) {
                        p.on_event(&mut cx, event);
                    }
                }
            }
            if self.publish_events && seq >= self.publish_from {
                let e = Arc::new(event.clone());
                self.effects
                    .push_back(Effect::Publish(AgentEvent::Event(e)));
            }
        }
        self.apply(appends, actions);
    }

    pub(super) fn apply(
        &mut self,
        appends: Vec<(EventData, Option<SurfaceIntent>)>,
        actions: Vec<Action>,
    ) {
        let now = self.now;
        for (data, intent) in appends {
            if let Err(e) = self.core.append_event(now, data, intent) {
                self.publish(AgentEvent::Error(error_text!(
                    "plugin event refused",
                    "plugin event refused: {e}"
                )));
            }
        }
        for a in actions {
            match a {
                Action::Send {
                    message,
                    target,
                    wakeup,
                } => {
                    if let Err(e) = self.core.send(now, message, target, wakeup) {
                        self.publish(AgentEvent::Error(error_text!(
                            "plugin send refused",
                            "plugin send refused: {e}"
                        )));
                    }
                }
                Action::Cancel { cause, keep_inbox } => self.core.cancel(now, cause, keep_inbox),
            }
        }
    }

    /// Withdraws every pending ask: each plugin sees [`Reply::Cancelled`];
    /// side calls in flight are stopped ([`Effect::CancelSide`]).
    pub(super) fn withdraw_asks(&mut self) {
        #[cfg(feature = "plugins")]
        while let Some((id, pending)) = self.asks.pop_first() {
            if pending.side {
                self.effects.push_back(Effect::CancelSide { id });
            }
            self.resume_chain(pending, Reply::Cancelled);
        }
    }
}
