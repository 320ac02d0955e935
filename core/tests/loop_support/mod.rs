//! Shared harness for the agent-loop tests: fixture F0 of loop.md §8, a
//! scripted embedder that claims every seam and answers each
//! `Output::Hook` as it drains (or leaves it pending), chunk macros and
//! renderers for events and effects.

#![allow(dead_code, clippy::too_many_arguments)]

use dsh_core::agent::AttemptId;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use dsh_core::Time;
use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::agent::{
    Agent, AgentConfig, AgentOptions, AgentStatus, ApprovalOutcome, CancelCause, HookAnswer,
    HookCall, HookError, InboxTarget, ModelCall, Notification, Output, PostToolDecision,
    PreStepDecision, PreStepPayload, PreToolDecision, Recovery, RequestErrorPayload, Seams,
    ToolExecution,
};
use dsh_core::session::{InvariantChecker, Session, SessionHeader};
use dsh_core::{
    ContentBlock, FinishReason, LlmCallConfig, LlmFailure, Message, MessageSource, StreamChunk,
    TokenUsage,
};
use serde_json::{Value, json};

pub const SYS: &str = "You are an AI agent powered by the DeepSeek Harness SDK.";

type PreStepFn =
    Box<dyn FnMut(&PreStepPayload, PreStepDecision) -> Result<PreStepDecision, HookError> + Send>;
type RequestFn = Box<dyn FnMut(u64, u64, LlmCallConfig) -> Result<LlmCallConfig, HookError> + Send>;
type RequestErrorFn = Box<dyn FnMut(&RequestErrorPayload) -> Result<Recovery, HookError> + Send>;
type PreExecFn = Box<dyn FnMut(&ToolExecution) -> Result<PreToolDecision, HookError> + Send>;
type PostExecFn =
    Box<dyn FnMut(&ToolExecution, &ToolOutcome) -> Result<PostToolDecision, HookError> + Send>;
type StopFn = Box<dyn FnMut(&mut HookCx, u64) -> Result<(), HookError> + Send>;

/// What a scripted seam may do to the agent besides answering: calls
/// applied before the answer is given (loop.md Q3).
#[derive(Default)]
pub struct HookCx {
    cancels: Vec<(CancelCause, bool)>,
}

impl HookCx {
    /// Queues `cancel(cause, keep_inbox)`.
    pub fn cancel(&mut self, cause: CancelCause, keep_inbox: bool) {
        self.cancels.push((cause, keep_inbox));
    }
}

/// Every seam but the tool guard (which takes an id only when claimed).
pub fn scripted_seams() -> Seams {
    Seams::ASSEMBLE
        | Seams::PRE_STEP
        | Seams::REQUEST
        | Seams::PREPARE
        | Seams::REQUEST_ERROR
        | Seams::TURN_STOPPING
        | Seams::TOOL_PRE_EXECUTE
        | Seams::TOOL_APPROVAL
        | Seams::TOOL_POST_EXECUTE
}

/// What the scripted hooks do. Every seam defaults to the reference default.
#[derive(Default)]
pub struct Script {
    /// Seam names to defer (answered with `complete_hook`).
    pub defer: HashSet<&'static str>,
    pub pre_step: Option<PreStepFn>,
    pub request: Option<RequestFn>,
    pub policy: Option<RetryPolicy>,
    pub request_error: Option<RequestErrorFn>,
    pub pre_execute: Option<PreExecFn>,
    pub post_execute: Option<PostExecFn>,
    pub turn_stopping: Option<StopFn>,
    pub approval: Option<ApprovalOutcome>,
    pub guard: Option<String>,
    /// Every seam invocation, e.g. `pre-step 1/2 [x1,x2]`.
    pub seen: Vec<String>,
}

#[derive(Clone)]
pub struct ScriptHooks(pub Arc<Mutex<Script>>);

fn ids<M: std::borrow::Borrow<Message>>(messages: &[M]) -> String {
    let ids: Vec<&str> = messages.iter().map(|m| m.borrow().id.as_str()).collect();
    format!("[{}]", ids.join(","))
}

impl ScriptHooks {
    /// The scripted answer to `call`, or `None` when the script defers it
    /// to the test (`t.answer`).
    fn answer(&self, cx: &mut HookCx, call: &HookCall) -> Option<HookAnswer> {
        let mut s = self.0.lock().unwrap();
        let name = hook_name(call);
        match call {
            HookCall::Assemble { turn, step, .. } => s.seen.push(format!("assemble {turn}/{step}")),
            HookCall::PreStep { payload: p, .. } => s.seen.push(format!(
                "pre-step {}/{} {}",
                p.turn,
                p.step,
                ids(&p.messages)
            )),
            HookCall::Request { turn, step, value } => s.seen.push(format!(
                "request {turn}/{step} {}",
                serde_json::to_string(value).unwrap()
            )),
            HookCall::RequestError { payload: p, .. } => s.seen.push(format!(
                "request-error {}/{} {}",
                p.turn, p.step, p.failure.code
            )),
            HookCall::TurnStopping { turn, .. } => s.seen.push(format!("turn-stopping {turn}")),
            HookCall::ToolPreExecute { exec, .. } => {
                s.seen.push(format!("pre-execute {}", exec.call_id))
            }
            HookCall::ToolApproval { exec, .. } => {
                s.seen.push(format!("approval {}", exec.call_id))
            }
            HookCall::ToolPostExecute { exec, .. } => {
                s.seen.push(format!("post-execute {}", exec.call_id))
            }
            _ => {}
        }
        if s.defer.contains(name) {
            return None;
        }
        Some(match call.clone() {
            HookCall::PreStep { payload, value } => {
                HookAnswer::PreStep(match s.pre_step.as_mut() {
                    Some(f) => f(&payload, value),
                    None => Ok(value),
                })
            }
            HookCall::Request { turn, step, value } => {
                HookAnswer::Request(match s.request.as_mut() {
                    Some(f) => f(turn, step, value),
                    None => Ok(value),
                })
            }
            HookCall::Prepare { mut value } => {
                value.retry_policy = Some(s.policy.clone().unwrap_or_else(f0_policy));
                HookAnswer::Prepare(Ok(value))
            }
            HookCall::RequestError { payload, value } => {
                HookAnswer::RequestError(match s.request_error.as_mut() {
                    Some(f) => f(&payload),
                    None => Ok(value),
                })
            }
            HookCall::TurnStopping { turn, .. } => {
                HookAnswer::TurnStopping(match s.turn_stopping.as_mut() {
                    Some(f) => f(cx, turn),
                    None => Ok(()),
                })
            }
            HookCall::ToolPreExecute { exec, value } => {
                HookAnswer::ToolPreExecute(match s.pre_execute.as_mut() {
                    Some(f) => f(&exec),
                    None => Ok(value),
                })
            }
            HookCall::ToolGuard { .. } => HookAnswer::ToolGuard(Ok(s.guard.clone())),
            HookCall::ToolApproval { value, .. } => {
                HookAnswer::ToolApproval(Ok(s.approval.unwrap_or(value)))
            }
            HookCall::ToolPostExecute {
                exec,
                outcome,
                value,
            } => HookAnswer::ToolPostExecute(match s.post_execute.as_mut() {
                Some(f) => f(&exec, &outcome),
                None => Ok(value),
            }),
            other => other.answer(),
        })
    }
}

/// F0's prepared policy: `{"mode":"normal","maxRetries":2,…}`.
pub fn f0_policy() -> RetryPolicy {
    RetryPolicy::resolve(Some(&json!({"mode":"normal","maxRetries":2})), "mock").unwrap()
}

/// The test driver.
pub struct T {
    pub agent: Agent,
    pub script: Arc<Mutex<Script>>,
    pub now: Time,
    pub keep_flush: bool,
    /// Effects since the last `take_trace`.
    pub trace: Vec<String>,
    /// Every `CallModel`, in order.
    pub calls: Vec<ModelCall>,
    /// Every `ExecuteTool`, in order.
    pub tools: Vec<ToolExecution>,
    /// Deferred hooks not yet answered.
    pub pending: Vec<(u64, HookCall)>,
    /// The status trace.
    pub statuses: Vec<AgentStatus>,
    /// Invariants checked incrementally over every appended event.
    pub checker: InvariantChecker,
    pub checked: u64,
}

pub fn f0_config(tools: Vec<ToolDefinition>) -> AgentConfig {
    let mut registry = ToolRegistry::new();
    for t in tools {
        registry.register(t).unwrap();
    }
    {
        let mut config = AgentConfig::default();
        config.options = {
            let mut options = AgentOptions::default();
            options.provider = Some("mock".into());
            options.model = Some("mock".into());
            options
        };
        config.sections = vec![PromptSection::new("harness:identity", -100, SYS)];
        config.tools = registry;
        // F0 is the base loop: no retry executor, no HEAD deltas, no cap.
        config.retry_executor = false;
        config.interrupted_prefix = false;
        config.wake_latch = false;
        config.max_steps_per_turn = None;
        config
    }
}

pub fn echo() -> ToolDefinition {
    ToolDefinition::typed(
        "echo",
        "Echo text",
        json!({"type":"object","properties":{"text":{"type":"string"}}}),
    )
}

pub fn plain_tool(name: &str) -> ToolDefinition {
    ToolDefinition::typed(name, name, json!({"type":"object"}))
}

impl T {
    pub fn f0() -> T {
        T::with(f0_config(vec![]))
    }

    pub fn with_tools(tools: Vec<ToolDefinition>) -> T {
        T::with(f0_config(tools))
    }

    pub fn with(config: AgentConfig) -> T {
        T::over(config, Session::new(SessionHeader::new("a1", 0)))
    }

    pub fn over(config: AgentConfig, session: Session) -> T {
        let script = Arc::new(Mutex::new(Script::default()));
        let mut checker = InvariantChecker::new();
        for e in session.events() {
            checker.push(e).expect("seed passes the invariants");
        }
        let checked = session.len();
        let mut config = config;
        config.seams = config.seams | scripted_seams();
        let agent = Agent::new(config, session).unwrap();
        T {
            agent,
            script,
            now: Time::from_millis(1000),
            keep_flush: false,
            trace: vec![],
            calls: vec![],
            tools: vec![],
            pending: vec![],
            statuses: vec![],
            checker,
            checked,
        }
    }

    pub fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }

    pub fn defer(&self, seam: &'static str) {
        self.script().defer.insert(seam);
    }

    pub fn undefer(&self, seam: &'static str) {
        self.script().defer.remove(seam);
    }

    /// Drains every output into the trace; checks invariants on new events.
    pub fn drain(&mut self) {
        while let Some(o) = self.agent.poll() {
            match o {
                Output::Appended(_) => {}
                Output::Status(s) => {
                    self.statuses.push(s);
                    self.trace.push(format!(
                        "status {}",
                        if s == AgentStatus::Running {
                            "running"
                        } else {
                            "idle"
                        }
                    ));
                }
                Output::Notify(n) => self.trace.push(match n {
                    Notification::Inserted { message } => format!("inserted {}", message.id),
                    Notification::Claimed { message, turn } => {
                        format!("claimed {}@{turn}", message.id)
                    }
                    Notification::Discarded { message } => format!("discarded {}", message.id),
                    Notification::Error { turn, step, error } => {
                        let f = error.failure();
                        format!("error {turn}/{step} {}: {}", f.code, f.message)
                    }
                    other => format!("{other:?}"),
                }),
                Output::Flush(c) => {
                    if self.keep_flush {
                        self.trace.push(format!("flush {c:?}"));
                    }
                }
                Output::CallModel(call) => {
                    self.trace.push(format!(
                        "call-model {} {} {}",
                        call.attempt,
                        call.request.model,
                        ids(&call.request.messages)
                    ));
                    self.calls.push(call);
                }
                Output::CancelModelCall { attempt } => {
                    self.trace.push(format!("cancel-model {attempt}"))
                }
                Output::ExecuteTool(exec) => {
                    self.trace
                        .push(format!("execute {} {}", exec.call_id, exec.arguments));
                    self.tools.push(exec);
                }
                Output::AbortTurn { cause } => self.trace.push(format!("abort {cause:?}")),
                Output::Hook { id, call } => {
                    let mut cx = HookCx::default();
                    match ScriptHooks(self.script.clone()).answer(&mut cx, &call) {
                        Some(answer) => {
                            for (cause, keep) in cx.cancels {
                                self.agent.cancel(self.now, cause, keep);
                            }
                            self.agent.complete_hook(self.now, id, answer).unwrap();
                        }
                        None => {
                            self.trace.push(format!("hook {}", hook_name(&call)));
                            self.pending.push((id, call));
                        }
                    }
                }
                other => self.trace.push(format!("{other:?}")),
            }
        }
        let events = self.agent.session().events();
        for e in &events[self.checked as usize..] {
            if let Err(v) = self.checker.push(e) {
                panic!("invariant violated: {v}\nlog:\n{}", self.log().join("\n"));
            }
        }
        self.checked = events.len() as u64;
        assert!(
            self.agent.faults().is_empty(),
            "faults: {:?}",
            self.agent.faults()
        );
    }

    pub fn take_trace(&mut self) -> Vec<String> {
        std::mem::take(&mut self.trace)
    }

    pub fn tick(&mut self) -> Time {
        self.now += 1;
        self.now
    }

    pub fn send(&mut self, m: &Message, target: InboxTarget, wake: bool) {
        let now = self.tick();
        self.agent.send(now, m.clone(), target, wake).unwrap();
        self.drain();
    }

    pub fn followup(&mut self, m: &Message) {
        self.send(m, InboxTarget::NextTurn, true)
    }

    pub fn steer(&mut self, m: &Message) {
        self.send(m, InboxTarget::NextStep, true)
    }

    pub fn inject(&mut self, m: &Message) {
        self.send(m, InboxTarget::NextStep, false)
    }

    pub fn cancel(&mut self, keep_inbox: bool) {
        let now = self.tick();
        self.agent.cancel(now, CancelCause::User, keep_inbox);
        self.drain();
    }

    /// The attempt of the last `CallModel`.
    pub fn attempt(&self) -> AttemptId {
        self.calls.last().expect("a model call").attempt
    }

    pub fn chunks(&mut self, chunks: &[StreamChunk]) {
        let attempt = self.attempt();
        for c in chunks {
            let now = self.tick();
            self.agent.handle_chunk(now, attempt, c.clone()).unwrap();
            self.drain();
        }
    }

    pub fn end(&mut self) {
        let attempt = self.attempt();
        let now = self.tick();
        self.agent.handle_stream_end(now, attempt).unwrap();
        self.drain();
    }

    /// Streams `chunks` into the last model call and ends it.
    pub fn model(&mut self, chunks: &[StreamChunk]) {
        self.chunks(chunks);
        self.end();
    }

    pub fn tool(&mut self, outcome: ToolOutcome) {
        let token = self.tools.last().expect("a tool call").token;
        let now = self.tick();
        self.agent.handle_tool_result(now, token, outcome).unwrap();
        self.drain();
    }

    /// Answers the oldest deferred hook.
    pub fn answer(&mut self, answer: HookAnswer) {
        let (id, _) = self.pending.remove(0);
        let now = self.tick();
        self.agent.complete_hook(now, id, answer).unwrap();
        self.drain();
    }

    /// The log, one line per event, `time` left out.
    pub fn log(&self) -> Vec<String> {
        render(self.agent.session().events().iter().map(|e| e.to_json()))
    }

    /// The log from `seq` on.
    pub fn log_from(&self, seq: usize) -> Vec<String> {
        self.log()[seq..].to_vec()
    }

    pub fn derived(&self) -> Vec<String> {
        self.agent
            .session()
            .derive_messages_uncached()
            .iter()
            .map(|m| m.id.to_string())
            .collect()
    }

    pub fn seen(&self) -> Vec<String> {
        self.script().seen.clone()
    }
}

pub fn hook_name(call: &HookCall) -> &'static str {
    match call {
        HookCall::Assemble { .. } => "assemble",
        HookCall::PreStep { .. } => "pre-step",
        HookCall::Request { .. } => "request",
        HookCall::Prepare { .. } => "prepare",
        HookCall::RequestError { .. } => "request-error",
        HookCall::TurnStopping { .. } => "turn-stopping",
        HookCall::ToolPreExecute { .. } => "pre-execute",
        HookCall::ToolApproval { .. } => "approval",
        HookCall::ToolPostExecute { .. } => "post-execute",
        HookCall::ToolGuard { .. } => "guard",
        _ => "other",
    }
}

/// Renders event JSON lines as `#seq type data[ src=[..]][ append]`.
pub fn render(lines: impl Iterator<Item = String>) -> Vec<String> {
    lines
        .map(|line| {
            let v: Value = serde_json::from_str(&line).unwrap();
            let mut s = format!(
                "#{} {} {}",
                v["seq"],
                v["type"].as_str().unwrap(),
                serde_json::to_string(&v["data"]).unwrap()
            );
            if let Some(src) = v.get("sourceEventSeqs") {
                s.push_str(&format!(" src={src}"));
            }
            if let Some(op) = v.get("surfaceOp") {
                s.push_str(&format!(" op={op}"));
            }
            s
        })
        .collect()
}

// ----------------------------------------------------------------------
// Messages and chunks of F0

pub fn user(id: &str, text: &str) -> Message {
    Message::user(id, vec![ContentBlock::text(text)])
}

pub fn m1() -> Message {
    user("m1", "hi")
}
pub fn m2() -> Message {
    user("m2", "second")
}
pub fn m3() -> Message {
    user("m3", "third")
}
pub fn s1() -> Message {
    user("s1", "change of plans")
}
pub fn plugin_ctx(id: &str, text: &str) -> Message {
    let mut m = user(id, text);
    m.source = MessageSource::plugin("p");
    m
}
pub fn x1() -> Message {
    plugin_ctx("x1", "context one")
}
pub fn x2() -> Message {
    plugin_ctx("x2", "context two")
}

/// JSON text of a message.
pub fn j(m: &Message) -> String {
    serde_json::to_string(m).unwrap()
}

pub fn usage() -> StreamChunk {
    StreamChunk::usage(TokenUsage::new(10, 5))
}

pub fn finish(reason: FinishReason) -> StreamChunk {
    StreamChunk::finish(reason)
}

/// `TEXT(t)`: 5 chunks.
pub fn text(t: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: t.into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(t)),
        usage(),
        finish(FinishReason::Stop),
    ]
}

/// `CALL(id, name, args)`: 5 chunks.
pub fn call(id: &str, name: &str, args: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "tool-call".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 0,
            head: dsh_core::ToolCallHead::owned(id.into(), Some(name.into())),
            arguments_delta: args.into(),
        },
        StreamChunk::block_end(0, ContentBlock::tool_call(id, name, args)),
        usage(),
        finish(FinishReason::ToolCalls),
    ]
}

/// Two calls in one response: 6 chunks (V03, V13).
pub fn two_calls(a: (&str, &str, &str), b: (&str, &str, &str)) -> Vec<StreamChunk> {
    vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "tool-call".into(),
        },
        StreamChunk::block_end(0, ContentBlock::tool_call(a.0, a.1, a.2)),
        StreamChunk::BlockStart {
            index: 1,
            block_type: "tool-call".into(),
        },
        StreamChunk::block_end(1, ContentBlock::tool_call(b.0, b.1, b.2)),
        usage(),
        finish(FinishReason::ToolCalls),
    ]
}

pub fn failure(code: &str, message: &str) -> LlmFailure {
    LlmFailure::new(code, message)
}

pub fn echo_result(text: &str) -> ToolOutcome {
    ToolOutcome::success(vec![ContentBlock::text(text)])
}

// ----------------------------------------------------------------------
// Expected-event builders (the spec's `S #n type {...}` lines)

pub fn ev(seq: u64, ty: &str, data: &str) -> String {
    let data: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{data}: {e}"));
    format!("#{seq} {ty} {}", serde_json::to_string(&data).unwrap())
}

pub fn insert(seq: u64, target: &str, start: u64, m: &Message) -> String {
    ev(
        seq,
        "agent/inbox/spliced",
        &format!(
            r#"{{"target":"{target}","start":{start},"inserted":[{}]}}"#,
            j(m)
        ),
    )
}

pub fn claim(seq: u64, target: &str, count: u64) -> String {
    ev(
        seq,
        "agent/inbox/spliced",
        &format!(r#"{{"target":"{target}","start":0,"removedCount":{count},"inserted":[]}}"#),
    )
}

pub fn canceled(seq: u64, target: &str, start: u64, count: u64) -> String {
    ev(
        seq,
        "agent/inbox/spliced",
        &format!(
            r#"{{"target":"{target}","start":{start},"removedCount":{count},"inserted":[],"outcome":"canceled"}}"#
        ),
    )
}

pub fn turn_start(seq: u64, turn: u64) -> String {
    ev(seq, "turn/start", &format!(r#"{{"turn":{turn}}}"#))
}

pub fn step_start(seq: u64, turn: u64, step: u64) -> String {
    ev(
        seq,
        "step/start",
        &format!(r#"{{"turn":{turn},"step":{step}}}"#),
    )
}

pub fn step_end(seq: u64, turn: u64, step: u64) -> String {
    ev(
        seq,
        "step/end",
        &format!(r#"{{"turn":{turn},"step":{step}}}"#),
    )
}

pub fn turn_end(seq: u64, turn: u64, reason: &str) -> String {
    ev(
        seq,
        "turn/end",
        &format!(r#"{{"turn":{turn},"reason":{reason}}}"#),
    )
}

pub const COMPLETED: &str = r#"{"kind":"completed"}"#;
pub const ABORTED_USER: &str = r#"{"kind":"aborted","reason":{"kind":"user"}}"#;

pub fn user_message(seq: u64, m: &Message) -> String {
    format!("{} op=\"append\"", ev(seq, "user/message", &j(m)))
}

/// `request/header` with F0's header (mock/mock, SYS, `tools`).
pub fn header(seq: u64, reason: &str, model: &str, tools: &str) -> String {
    let tools = if tools.is_empty() {
        String::new()
    } else {
        format!(r#","tools":{tools}"#)
    };
    ev(
        seq,
        "request/header",
        &format!(
            r#"{{"header":{{"config":{{"provider":"mock","model":"{model}"}},"system":"{SYS}"{tools}}},"reason":"{reason}"}}"#
        ),
    )
}

pub fn context(seq: u64, model: &str) -> String {
    ev(
        seq,
        "request/context",
        &format!(r#"{{"provider":"mock","model":"{model}"}}"#),
    )
}

pub fn chunk_events(first: u64, turn: u64, step: u64, chunks: &[StreamChunk]) -> Vec<String> {
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            ev(
                first + i as u64,
                "assistant/chunk",
                &format!(
                    r#"{{"turn":{turn},"step":{step},"chunk":{}}}"#,
                    serde_json::to_string(c).unwrap()
                ),
            )
        })
        .collect()
}

pub const USAGE: &str = r#"{"inputTokens":10,"outputTokens":5}"#;

/// `assistant/message` with content JSON, optional usage, citing `src`.
pub fn assistant(
    seq: u64,
    turn: u64,
    step: u64,
    id: &str,
    content: &str,
    model: &str,
    usage: Option<&str>,
    src: std::ops::Range<u64>,
) -> String {
    let usage = usage
        .map(|u| format!(r#","usage":{u}"#))
        .unwrap_or_default();
    let src: Vec<String> = src.map(|s| s.to_string()).collect();
    format!(
        "{} src=[{}] op=\"append\"",
        ev(
            seq,
            "assistant/message",
            &format!(
                r#"{{"turn":{turn},"step":{step},"message":{{"role":"assistant","content":{content},"source":{{"kind":"model","provider":"mock","model":"{model}"}},"id":"{id}"}}{usage}}}"#
            )
        ),
        src.join(",")
    )
}

pub fn text_content(t: &str) -> String {
    format!(r#"[{{"type":"text","text":"{t}"}}]"#)
}

pub fn call_content(calls: &[(&str, &str, &str)]) -> String {
    let blocks: Vec<String> = calls
        .iter()
        .map(|(id, name, args)| {
            serde_json::to_string(&ContentBlock::tool_call(*id, *name, *args)).unwrap()
        })
        .collect();
    format!("[{}]", blocks.join(","))
}

pub fn tool_call(seq: u64, turn: u64, step: u64, id: &str, name: &str, args: &str) -> String {
    ev(
        seq,
        "tool/call",
        &format!(
            r#"{{"turn":{turn},"step":{step},"callId":"{id}","name":"{name}","arguments":{}}}"#,
            serde_json::to_string(args).unwrap()
        ),
    )
}

/// `tool/result` with text content.
pub fn tool_result(
    seq: u64,
    turn: u64,
    step: u64,
    rid: &str,
    call_id: &str,
    text: &str,
    is_error: bool,
    error: Option<(&str, &str)>,
    call_seq: u64,
) -> String {
    let error = error
        .map(|(n, c)| format!(r#","error":{{"name":"{n}","code":"{c}"}}"#))
        .unwrap_or_default();
    format!(
        "{} src=[{call_seq}] op=\"append\"",
        ev(
            seq,
            "tool/result",
            &format!(
                r#"{{"turn":{turn},"step":{step},"message":{{"source":{{"kind":"tool","callId":"{call_id}"}},"content":[{{"type":"tool-result","toolCallId":"{call_id}","content":[{{"type":"text","text":{}}}],"isError":{is_error}}}],"role":"user","id":"{rid}"}}{error}}}"#,
                serde_json::to_string(text).unwrap()
            )
        )
    )
}

/// Asserts `actual == expected` line by line with a readable diff.
#[track_caller]
pub fn assert_lines(actual: &[String], expected: &[String]) {
    if actual != expected {
        let mut report = String::new();
        for i in 0..actual.len().max(expected.len()) {
            let a = actual.get(i).map(String::as_str).unwrap_or("<none>");
            let e = expected.get(i).map(String::as_str).unwrap_or("<none>");
            let mark = if a == e { "  " } else { "!!" };
            report.push_str(&format!("{mark} got:  {a}\n{mark} want: {e}\n"));
        }
        panic!("mismatch:\n{report}");
    }
}

/// The prologue P(m, n, k) up to `user/message` (5 events).
pub fn prologue(m: &Message, turn: u64, k: u64) -> Vec<String> {
    vec![
        insert(k, "next-turn", 0, m),
        turn_start(k + 1, turn),
        claim(k + 2, "next-turn", 1),
        step_start(k + 3, turn, 1),
        user_message(k + 4, m),
    ]
}

pub fn concat(parts: Vec<Vec<String>>) -> Vec<String> {
    parts.into_iter().flatten().collect()
}
