//! Plugin chains over deferred core seams and kernel seams.

use super::*;

impl Kernel {
    pub(super) fn hook(&mut self, id: u64, call: HookCall) {
        self.run_and_end(Seat::Hook { id, call }, 0, None);
    }

    #[cfg(feature = "plugins")]
    pub(super) fn resume_chain(&mut self, pending: Pending, reply: Reply) {
        let Pending { seat, plugin, .. } = pending;
        self.run_and_end(seat, plugin, Some(reply));
    }

    pub(super) fn run_and_end(&mut self, seat: Seat, start: usize, reply: Option<Reply>) {
        let (seat, end, actions) = self.run_chain(seat, start, reply);
        self.chain_end(seat, end, actions);
    }

    /// Runs the plugins from `start` on; `reply` goes to the first one.
    #[cfg(feature = "plugins")]
    pub(super) fn run_chain(
        &mut self,
        mut seat: Seat,
        start: usize,
        mut reply: Option<Reply>,
    ) -> (Seat, ChainEnd, Vec<Action>) {
        let mut appends = Vec::new();
        let mut actions = Vec::new();
        let wanted = seat.seam();
        let mut end = None;
        for i in start..self.plugins.len() {
            let plugin = &mut self.plugins[i];
            if !plugin.seams().contains(wanted) {
                continue;
            }
            let mut cx = Cx {
                now: self.now,
                session: self.core.session(),
                reply: reply.take(),
                appends: &mut appends,
                actions: &mut actions,
            };
            let step;
            (seat, step) = match seat {
                Seat::Hook { id, call } => {
                    let (call, step) = run_hook(plugin.as_mut(), &mut cx, call);
                    (Seat::Hook { id, call }, step)
                }
                Seat::Kernel { token, call } => {
                    let (call, step) = run_kernel(plugin.as_mut(), &mut cx, call);
                    (Seat::Kernel { token, call }, step)
                }
            };
            match step {
                Step::Next => {}
                Step::Done => {
                    end = Some(ChainEnd::Final(Ok(())));
                    break;
                }
                Step::Fail(e) => {
                    end = Some(ChainEnd::Final(Err(e)));
                    break;
                }
                Step::Ask(ask) => {
                    end = Some(ChainEnd::Asked { plugin: i, ask });
                    break;
                }
            }
        }
        // Plugin appends land here, before the seam's result takes effect.
        self.apply(appends, Vec::new());
        (seat, end.unwrap_or(ChainEnd::Final(Ok(()))), actions)
    }

    /// Without the plugin chain no plugin handles the seam: its value is
    /// final as it came (what the chain gives when no plugin is registered).
    #[cfg(not(feature = "plugins"))]
    pub(super) fn run_chain(
        &mut self,
        seat: Seat,
        _start: usize,
        _reply: Option<Reply>,
    ) -> (Seat, ChainEnd, Vec<Action>) {
        (seat, ChainEnd::Final(Ok(())), Vec::new())
    }

    /// Completes a chain; queued calls apply after the seam completes
    /// (loop.md Q3).
    pub(super) fn chain_end(&mut self, seat: Seat, end: ChainEnd, actions: Vec<Action>) {
        match end {
            #[cfg(feature = "plugins")]
            ChainEnd::Asked { plugin, ask } => {
                if self.disposing {
                    // Nobody will answer: the plugin sees the withdrawal at
                    // once; asking again then fails the seam.
                    self.apply(Vec::new(), actions);
                    let (seat, end, actions) = self.run_chain(seat, plugin, Some(Reply::Cancelled));
                    let end = match end {
                        ChainEnd::Asked { .. } => ChainEnd::Final(Err(HookError::msg(
                            "a plugin asked while the agent is being disposed",
                        ))),
                        done => done,
                    };
                    self.chain_end(seat, end, actions);
                    return;
                }
                self.next_ask += 1;
                let id = AskId::new(self.next_ask);
                let event = match ask {
                    Ask::Approval {
                        call_id,
                        tool,
                        arguments,
                        reason,
                    } => AgentEvent::ApprovalRequested {
                        id,
                        call_id,
                        tool,
                        arguments,
                        reason,
                    },
                    Ask::Plugin { plugin, request } => AgentEvent::Asked {
                        id,
                        plugin,
                        request,
                    },
                    Ask::Model {
                        plugin: name,
                        request,
                    } => {
                        self.asks.insert(
                            id,
                            Pending {
                                seat,
                                plugin,
                                side: true,
                            },
                        );
                        self.effects.push_back(Effect::SideModel {
                            id,
                            plugin: name,
                            request: *request,
                        });
                        self.apply(Vec::new(), actions);
                        return;
                    }
                };
                self.asks.insert(
                    id,
                    Pending {
                        seat,
                        plugin,
                        side: false,
                    },
                );
                self.publish(event);
                self.apply(Vec::new(), actions);
            }
            ChainEnd::Final(result) => {
                let now = self.now;
                let mut actions = actions;
                match seat {
                    Seat::Hook { id, call } => {
                        // Queued calls land before the answer takes
                        // effect, as when the core runs the seam itself
                        // (it applies them right after the hook returns):
                        // turn-stopping acts through steer / inject (SM-5)
                        // and the core reads the inbox on the answer; a
                        // cancel from tools/post-execute stops the turn
                        // before the next step starts.
                        self.apply(Vec::new(), core::mem::take(&mut actions));
                        let answer = match result {
                            Ok(()) => call.answer(),
                            Err(e) => call.fail(e),
                        };
                        if let Err(e) = self.core.complete_hook(now, id, answer) {
                            self.publish(AgentEvent::Error(error_text!(
                                "seam answer refused",
                                "seam answer refused: {e}"
                            )));
                        }
                    }
                    Seat::Kernel {
                        token: id,
                        call: KernelCall::Command { name, value },
                    } => {
                        let result = result.map(|()| value).map_err(|e| e.to_string());
                        if let Err(e) = self.core.end_maintenance(now) {
                            self.publish(AgentEvent::Error(error_text!(
                                "maintenance end refused",
                                "maintenance end refused: {e}"
                            )));
                        }
                        self.publish(AgentEvent::CommandDone { id, name, result });
                    }
                    Seat::Kernel {
                        token,
                        call: KernelCall::ToolExecute { value },
                    } => {
                        let answered = match result {
                            Ok(()) => match value {
                                ToolDispatch::Run(e) => {
                                    self.start_tool(e);
                                    None
                                }
                                ToolDispatch::Answer(o) => Some(o),
                            },
                            Err(e) => Some(e.tool_outcome()),
                        };
                        if let Some(outcome) = answered
                            && let Err(e) =
                                self.core
                                    .handle_tool_result(now, ToolToken::new(token), outcome)
                        {
                            self.publish(AgentEvent::Error(error_text!(
                                "tool answer refused",
                                "tool answer refused: {e}"
                            )));
                        }
                    }
                }
                self.apply(Vec::new(), actions);
            }
        }
    }
}
