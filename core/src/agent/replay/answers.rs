//! The driver's answers to the seams whose decisions show in the log.

use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;

use crate::options::AdapterDefaults;
use crate::session::{EpochHeader, EventData, SessionEvent, TurnEndReason};

use super::{
    driver::{Driver, Queued, flush_foreign},
    recording::{hook_error, target_of},
};
use crate::agent::hooks::{PreStepDecision, PreparedCall, Recovery};
use crate::agent::inbox::InboxTarget;
use crate::agent::io::{HookAnswer, HookCall};
use crate::agent::prompt::{Assembly, PromptSection};
use crate::time::Time;

/// Template variables that make `text` render to itself.
pub(super) fn literal_assembly(system: &str, header: Option<&EpochHeader>) -> Assembly {
    let mut a = Assembly::default();
    let mut rest = system;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else { break };
        let name = &after[..close];
        a.variables
            .insert(name.to_string(), Some(format!("{{{{{name}}}}}")));
        rest = &after[close + 2..];
    }
    a.sections.push(PromptSection::new("recorded", 0, system));
    a.tools = header.and_then(|h| h.tools.clone()).unwrap_or_default();
    a
}

impl Driver {
    /// Common prologue of most seams: foreign events, an insertion queued
    /// as a send, a cancellation that lands here.
    pub(super) fn sync(&mut self, now: Time) -> Vec<Queued> {
        flush_foreign(&self.rec, &mut self.agent, now);
        let pos = self.pos();
        let mut queued = Vec::new();
        if let Some(e) = self.rec.get(pos)
            && let EventData::InboxSpliced(s) = e.data()
            && s.outcome.is_none()
            && s.removed_count.is_none()
        {
            for m in &s.inserted {
                let target = target_of(s);
                let wake = target == InboxTarget::NextStep;
                queued.push(Queued::Send((**m).clone(), target, wake));
            }
            return queued;
        }
        if let Some((cause, keep)) = self.rec.cancels_at(pos) {
            queued.push(Queued::Cancel(cause, keep));
        }
        queued
    }

    /// Answers a seam from the recording: the agent claims every seam.
    pub(super) fn answer_hook(&mut self, id: u64, call: HookCall) {
        let now = self.now();
        let mut queued = Vec::new();
        let answer = match call {
            HookCall::Assemble { .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                // The step's request header: the one logged after its messages.
                let after_messages = self
                    .rec
                    .cores_from(pos)
                    .find(|e| {
                        !matches!(
                            e.data(),
                            EventData::StepStart(_)
                                | EventData::UserMessage(_)
                                | EventData::InboxSpliced(_)
                        )
                    })
                    .map_or(pos, SessionEvent::seq);
                let header = self.rec.header_for(after_messages);
                let system = header
                    .as_ref()
                    .and_then(|h| h.system.clone())
                    .unwrap_or_default();
                HookAnswer::Assemble(Ok(literal_assembly(&system, header.as_ref())))
            }
            HookCall::PreStep { value, .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                let mut cores = self.rec.cores_from(pos);
                let decision = match cores.next().map(SessionEvent::data) {
                    Some(EventData::StepStart(_)) => {
                        let entered = cores
                            .map_while(|e| match e.data() {
                                EventData::UserMessage(m) => Some((**m).clone()),
                                _ => None,
                            })
                            .collect();
                        Ok(PreStepDecision::Enter(entered))
                    }
                    Some(EventData::TurnEnd(t)) => match &t.reason {
                        TurnEndReason::Blocked => Ok(PreStepDecision::Reject),
                        TurnEndReason::Error { error } => Err(hook_error(error)),
                        _ => Ok(PreStepDecision::Enter(Vec::new())),
                    },
                    _ => Ok(value),
                };
                HookAnswer::PreStep(decision)
            }
            HookCall::Request { value, .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                HookAnswer::Request(match self.rec.error_at(pos) {
                    Some(e) => Err(e),
                    None => match self.rec.header_for(pos) {
                        None => Ok(value),
                        Some(header) => {
                            let mut config = header.config.clone();
                            if let Some(d) = header.adapter_defaults {
                                if d.reasoning_effort == Some(true) {
                                    config.reasoning_effort = None;
                                }
                                if d.max_tokens == Some(true) {
                                    config.max_tokens = None;
                                }
                            }
                            Ok(config)
                        }
                    },
                })
            }
            HookCall::Prepare { value, .. } => {
                let pos = self.pos();
                let config = value.config;
                let header = self.rec.header_for(pos);
                let (config, adapter_defaults) = match header {
                    Some(h)
                        if h.config.provider == config.provider
                            && h.config.model == config.model =>
                    {
                        (h.config.clone(), h.adapter_defaults.unwrap_or_default())
                    }
                    _ => (config, AdapterDefaults::default()),
                };
                HookAnswer::Prepare(Ok(PreparedCall {
                    config,
                    adapter_defaults,
                    retry_policy: None,
                    context_window: self.rec.context_window_for(pos),
                }))
            }
            HookCall::RequestError { .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                let retried = !matches!(
                    self.rec.next_core(pos).map(SessionEvent::data),
                    Some(EventData::StepEnd(_) | EventData::TurnEnd(_)) | None
                );
                HookAnswer::RequestError(Ok(if retried {
                    Recovery::Retry
                } else {
                    Recovery::GiveUp
                }))
            }
            HookCall::TurnStopping { .. } => {
                queued = self.sync(now);
                let pos = self.pos();
                HookAnswer::TurnStopping(match self.rec.error_at(pos) {
                    Some(e) => Err(e),
                    None => Ok(()),
                })
            }
            HookCall::ToolPreExecute { value, .. } => {
                flush_foreign(&self.rec, &mut self.agent, now);
                HookAnswer::ToolPreExecute(Ok(value))
            }
            other => other.answer(),
        };
        for q in queued {
            match q {
                Queued::Send(message, target, wake) => {
                    if let Err(e) = self.agent.send(now, message, target, wake) {
                        let reason = format!("the agent refused a recorded insertion: {e}");
                        self.differ(self.pos(), None, reason);
                    }
                }
                Queued::Cancel(cause, keep) => self.cancel(now, cause, keep),
            }
        }
        if let Err(e) = self.agent.complete_hook(now, id, answer) {
            let reason = format!("the agent refused a seam answer: {e}");
            self.differ(self.pos(), None, reason);
        }
    }
}
