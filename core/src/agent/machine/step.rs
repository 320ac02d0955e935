//! The step pipeline: claim, assemble, pre-step, request, stream
//! (LC-9..LC-21).

use super::{Agent, Failed, PlannedCall, Stage, StepEnd, Stream};
use crate::agent::handle::AttemptId;
use crate::agent::hooks::{
    CancelCause, HookError, IdPurpose, PreStepDecision, PreStepPayload, PreparedCall,
};
use crate::agent::inbox::InboxTarget;
use crate::agent::io::{Checkpoint, HookAnswer, HookCall, ModelCall, Notification, Output};
use crate::agent::prompt::{Assembly, runtime_context_candidate};
use crate::assembler::BlockAssembler;
use crate::chunk::FinishReason;
use crate::content::ContentBlock;
use crate::ids::CallId;
use crate::message::{Message, MessageSource};
use crate::options::{AdapterDefaults, GenerateOptions, LlmCallConfig};
use crate::session::{
    AssistantMessage, EpochHeader, EventData, HeaderReason, RequestContext, RequestHeader, Step,
    SurfaceIntent, TurnEndReason,
};
use crate::time::Time;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

impl Agent {
    /// LC-9 and IB-10: claim, then assemble.
    pub(super) fn propose_step(&mut self, now: Time) {
        let Some(r) = self.run() else { return };
        let (turn, proposed, target) = (r.turn, r.step + 1, r.target);
        let mut claimed: Vec<Message> = Vec::new();
        let step_len = self.inbox.list(InboxTarget::NextStep).len() as i64;
        if let Ok(Some(s)) = self
            .inbox
            .plan(InboxTarget::NextStep, 0, step_len, Vec::new(), true)
        {
            claimed.extend(s.removed.iter().cloned());
            self.commit_splice(now, s);
        }
        if target == InboxTarget::NextTurn
            && let Ok(Some(s)) = self
                .inbox
                .plan(InboxTarget::NextTurn, 0, 1, Vec::new(), true)
        {
            claimed.extend(s.removed.iter().cloned());
            self.commit_splice(now, s);
        }
        for message in &claimed {
            self.emit(Output::Notify(Notification::Claimed {
                message: message.clone(),
                turn,
            }));
        }
        let default = match self.default_assembly() {
            Ok(a) => a,
            Err(e) => {
                self.turn_error(now, HookError::msg(e));
                return;
            }
        };
        let call = HookCall::Assemble {
            turn,
            step: proposed,
            value: default,
        };
        self.raise(now, call, move |a, now, answer| {
            if let HookAnswer::Assemble(r) = answer {
                a.assembly_done(now, proposed, claimed, r);
            }
        });
    }

    pub(super) fn default_assembly(&self) -> Result<Assembly, String> {
        let tools = match &self.config.tool_order {
            #[cfg(feature = "tool-order")]
            Some(order) => self.config.tools.ordered_schemas(order)?,
            // Feature `tool-order` off: tools in name order, always.
            _ => self.config.tools.schemas(),
        };
        #[cfg(feature = "prompt-templates")]
        let mut variables = self.config.variables.clone();
        #[cfg(feature = "prompt-templates")]
        variables
            .entry(String::from("provider"))
            .or_insert_with(|| self.config.options.provider.clone());
        #[cfg(feature = "prompt-templates")]
        variables
            .entry(String::from("model"))
            .or_insert_with(|| self.config.options.model.clone());
        #[cfg(feature = "prompt-templates")]
        variables
            .entry(String::from("cwd"))
            .or_insert_with(|| self.session.header().cwd.clone());
        // Feature `prompt-templates` off: sections are not interpolated,
        // so the assembly carries no variables.
        #[cfg(not(feature = "prompt-templates"))]
        let variables = alloc::collections::BTreeMap::new();
        Ok(Assembly {
            sections: self.config.sections.clone(),
            contexts: self.config.contexts.clone(),
            tools,
            variables,
        })
    }

    /// LC-10.
    pub(super) fn assembly_done(
        &mut self,
        now: Time,
        proposed: u64,
        claimed: Vec<Message>,
        result: Result<Assembly, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let assembly = match result {
            Ok(a) => a,
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
        };
        let turn = self.coords().0;
        let mut default = claimed.clone();
        // Feature `runtime-context` off: no snapshot message (LC-12).
        if cfg!(feature = "runtime-context")
            && let Some((text, source)) =
                runtime_context_candidate(&self.retained_context(), &assembly.context_sections())
        {
            let id = self.ids.message_id(IdPurpose::RuntimeContext {
                turn,
                step: proposed,
            });
            let mut m = Message::user(id, alloc::vec![ContentBlock::text(text)]);
            m.source = source;
            default.push(m);
        }
        self.emit(Output::Flush(Checkpoint::PreStep));
        let payload = PreStepPayload {
            turn,
            step: proposed,
            messages: claimed,
        };
        let default = PreStepDecision::Enter(default);
        if let Some(max) = self.config.max_steps_per_turn
            && proposed > max
        {
            // A runaway turn is stopped the way loop.md SM-10 d says a
            // plugin stops one, before the step opens.
            let reason = error_text!(
                "max steps per turn reached",
                "max steps per turn ({max}) reached"
            );
            self.cancel_inner(now, CancelCause::Hook { reason }, true);
            self.pre_step_done(now, proposed, assembly, Ok(default));
            return;
        }
        let call = HookCall::PreStep {
            payload,
            value: default,
        };
        self.raise(now, call, move |a, now, answer| {
            if let HookAnswer::PreStep(r) = answer {
                a.pre_step_done(now, proposed, assembly, r);
            }
        });
    }

    /// LC-11.
    pub(super) fn pre_step_done(
        &mut self,
        now: Time,
        proposed: u64,
        assembly: Assembly,
        result: Result<PreStepDecision, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let messages = match result {
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
            Ok(PreStepDecision::Reject) => {
                self.end_turn(now, TurnEndReason::Blocked, false);
                return;
            }
            Ok(PreStepDecision::Enter(m)) => m,
        };
        let Some(r) = self.run() else { return };
        if messages.is_empty() {
            if let Some(end) = r.turn_end {
                let reason = match end {
                    StepEnd::Completed => TurnEndReason::Completed,
                    StepEnd::MaxTokens => TurnEndReason::MaxTokens,
                };
                self.end_turn(now, reason, true);
                return;
            }
            if r.step == 0 {
                self.end_turn(now, TurnEndReason::Completed, false);
                return;
            }
        }
        // Entered messages become user/message events; refuse the step
        // rather than write an event the session would reject.
        for m in &messages {
            if let Err(e) = self.check_user_message(m) {
                self.turn_error(
                    now,
                    HookError::msg(error_text!(
                        "pre-step entered an invalid message",
                        "pre-step entered an {e}"
                    )),
                );
                return;
            }
        }
        let Some(r) = self.run_mut() else { return };
        r.step = proposed;
        r.step_open = true;
        let step = Step {
            turn: r.turn,
            step: proposed,
        };
        self.append(now, EventData::StepStart(step), None);
        for m in messages {
            self.append(now, m, Some(SurfaceIntent::append()));
        }
        let system = match assembly.render() {
            Ok(s) => s,
            Err(e) => {
                self.turn_error(now, HookError::msg(e));
                return;
            }
        };
        if let Some(r) = self.run_mut() {
            r.system = system;
            r.tools = assembly.tools;
        }
        self.request(now);
    }

    // ------------------------------------------------------------------
    // Requests (LC-13..LC-18)

    /// LC-13.
    pub(super) fn request(&mut self, now: Time) {
        let messages: Vec<Arc<Message>> = self.session.derive_messages().to_vec();
        let seed = self.config.request_fill.fill(self.seed());
        let (turn, step) = self.coords();
        let call = HookCall::Request {
            turn,
            step,
            value: seed,
        };
        self.raise(now, call, move |a, now, answer| {
            if let HookAnswer::Request(r) = answer {
                a.request_config_done(now, messages, r);
            }
        });
    }

    pub(super) fn seed(&self) -> LlmCallConfig {
        let folded = self.session.request_header();
        if self.header_logged
            && let Some(h) = folded
        {
            let mut config = h.config.clone();
            if let Some(d) = h.adapter_defaults {
                if d.reasoning_effort == Some(true) {
                    config.reasoning_effort = None;
                }
                if d.max_tokens == Some(true) {
                    config.max_tokens = None;
                }
            }
            return config;
        }
        let o = &self.config.options;
        let mut config = LlmCallConfig::new(
            o.provider.clone().unwrap_or_default(),
            o.model.clone().unwrap_or_default(),
        );
        config.max_tokens = o.max_tokens;
        if let Some(h) = folded {
            let effort_from_adapter = h
                .adapter_defaults
                .is_some_and(|d| d.reasoning_effort == Some(true));
            if h.config.provider == config.provider
                && h.config.model == config.model
                && !effort_from_adapter
            {
                config.reasoning_effort = h.config.reasoning_effort.clone();
            }
        }
        config
    }

    /// LC-14.
    pub(super) fn request_config_done(
        &mut self,
        now: Time,
        messages: Vec<Arc<Message>>,
        result: Result<LlmCallConfig, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let config = match result {
            Ok(c) => c,
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
        };
        if config.provider.is_empty() || config.model.is_empty() {
            let msg = error_text!(
                "agent has no provider/model",
                "agent \"{}\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall",
                self.id
            );
            self.turn_error(now, HookError::msg(msg));
            return;
        }
        let mut plain = PreparedCall::plain(config.clone());
        plain.retry_policy = Some(self.config.retry_policy.clone());
        let call = HookCall::Prepare { value: plain };
        self.raise(now, call, move |a, now, answer| {
            if let HookAnswer::Prepare(r) = answer {
                a.prepare_done(now, config, messages, r);
            }
        });
    }

    /// LC-15..LC-18: header, context, checkpoint, `CallModel`.
    pub(super) fn prepare_done(
        &mut self,
        now: Time,
        proposed: LlmCallConfig,
        messages: Vec<Arc<Message>>,
        result: Result<PreparedCall, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let prepared = match result {
            Ok(p) => p,
            Err(HookError::Llm(f)) if f.code == "NO_ADAPTER" => PreparedCall {
                config: proposed,
                adapter_defaults: AdapterDefaults::default(),
                retry_policy: None,
                context_window: None,
            },
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
        };
        let Some(r) = self.run() else { return };
        let header = EpochHeader {
            config: prepared.config.clone(),
            adapter_defaults: Some(prepared.adapter_defaults),
            system: Some(r.system.clone()),
            tools: Some(r.tools.clone()),
        }
        .canonical();
        let reason = if !self.header_logged {
            Some(if self.session.request_header().is_some() {
                HeaderReason::Resume
            } else {
                HeaderReason::Initial
            })
        } else if self
            .session
            .request_header()
            .is_none_or(|folded| !folded.same_as(&header))
        {
            Some(HeaderReason::Change)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.append(
                now,
                RequestHeader {
                    header: header.clone(),
                    reason,
                },
                None,
            );
            self.header_logged = true;
        }
        let context = RequestContext {
            provider: prepared.config.provider.clone(),
            model: prepared.config.model.clone(),
            context_window: prepared.context_window,
        };
        if self
            .session
            .request_context()
            .is_none_or(|c| **c != context)
        {
            self.append(now, context, None);
        }
        self.emit(Output::Flush(Checkpoint::BeforeModel));
        let config = prepared.config;
        let mut request =
            GenerateOptions::new(config.provider.clone(), config.model.clone(), messages);
        request.reasoning_effort = config.reasoning_effort.clone();
        request.temperature = config.temperature;
        request.max_tokens = config.max_tokens;
        request.stop = config.stop.clone();
        request.system = header.system.clone();
        request.tools = header.tools.clone();
        request.session_id = Some(self.id.clone());
        let attempt = AttemptId::new(self.next_id());
        let (turn, step) = self.coords();
        self.set_stage(Stage::Streaming(Box::new(Stream {
            attempt,
            assembler: BlockAssembler::new(),
            chunk_seqs: Vec::new(),
            provider: config.provider,
            model: config.model,
            policy: prepared.retry_policy,
        })));
        self.emit(Output::CallModel(ModelCall {
            attempt,
            turn,
            step,
            request,
        }));
    }

    // ------------------------------------------------------------------
    // Streaming (LC-19..LC-21)

    /// LC-20.
    pub(super) fn stream_ended(&mut self, now: Time, stream: Stream) {
        let finish = stream.assembler.finish();
        if let Some(failure) = finish.failure() {
            let failed = Failed {
                failure: failure.clone(),
                provider: stream.provider,
                policy: stream.policy,
            };
            self.request_failed(now, failed);
            return;
        }
        let mut content = match stream.assembler.blocks() {
            Ok(c) => c,
            Err(e) => {
                self.turn_error(
                    now,
                    HookError::msg(error_text!("invalid response blocks", "{e}")),
                );
                return;
            }
        };
        // Judgement call: a provider may send an empty call id (C-4), but a
        // tool/result must name a non-empty one (session.md M6, enforced at
        // append). An empty id is treated like a missing one (BB-2) and
        // replaced by `call-<position>` before the message is recorded, so
        // the call and its result stay paired.
        for (i, block) in content.iter_mut().enumerate() {
            if let ContentBlock::ToolCall { id, .. } = block
                && id.0.is_empty()
            {
                *id = CallId(format!("call-{i}"));
            }
        }
        let replay_state = stream
            .assembler
            .replay_state()
            .ok()
            .flatten()
            .and_then(|r| crate::json::to_value(&r).ok());
        let (turn, step) = self.coords();
        let id = self.ids.message_id(IdPurpose::Assistant { turn, step });
        let source = MessageSource::Model {
            provider: stream.provider.clone(),
            model: stream.model.clone(),
            replay_state,
        };
        let calls: Vec<PlannedCall> = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some(PlannedCall {
                    call_id: id.clone(),
                    name: name.clone(),
                    raw: arguments.clone(),
                }),
                _ => None,
            })
            .collect();
        let mut data = AssistantMessage::new(turn, step, Message::model(id, content, source));
        data.usage = stream.assembler.usage().copied();
        self.append(
            now,
            data,
            Some(SurfaceIntent::append_citing(stream.chunk_seqs)),
        );
        // LC-21.
        if matches!(finish, FinishReason::MaxTokens) {
            self.step_finished(now, Some(StepEnd::MaxTokens));
        } else if calls.is_empty() {
            self.step_finished(now, Some(StepEnd::Completed));
        } else {
            self.start_tools(now, calls);
        }
    }
}
