//! Arbitrary input sequences into the agent loop (quinn-proto style): user
//! input, cancellations, model chunks and stream ends for any attempt id,
//! tool results for any token, hook answers of any kind for any id,
//! timeouts, plugin appends and maintenance. No input may panic, a refused
//! input must change nothing, and the session invariants (session.md 11)
//! must hold after every drain.
#![no_main]

use arbitrary::Arbitrary;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::agent::{
    Agent, AgentConfig, AgentOptions, ApprovalOutcome, AttemptId, CancelCause, HookAnswer, HookCall,
    HookError, InboxEdit, InboxTarget, Output, PostToolDecision, PreStepDecision, PreToolDecision,
    PreparedCall, Recovery, Seams, ToolToken,
};
use dsh_core::session::{EventData, InvariantChecker, Session, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, LlmFailure, Message, StreamChunk, TokenUsage};
use libfuzzer_sys::fuzz_target;

/// Which seams the fuzzer answers itself (bit i = seam i); the others
/// take their spec defaults inside the machine.
fn claimed(bits: u16) -> Seams {
    let table = [
        Seams::ASSEMBLE,
        Seams::PRE_STEP,
        Seams::REQUEST,
        Seams::PREPARE,
        Seams::REQUEST_ERROR,
        Seams::TURN_STOPPING,
        Seams::TOOL_PRE_EXECUTE,
        Seams::TOOL_APPROVAL,
        Seams::TOOL_POST_EXECUTE,
        Seams::TOOL_GUARD,
    ];
    let mut seams = Seams::NONE;
    for (i, seam) in table.into_iter().enumerate() {
        if bits & (1 << i) != 0 {
            seams = seams | seam;
        }
    }
    seams
}

#[derive(Arbitrary, Debug)]
enum FuzzFinish {
    Stop,
    ToolCalls,
    MaxTokens,
    Error(String),
    Aborted,
}

#[derive(Arbitrary, Debug)]
enum FuzzChunk {
    Start(u8, u8),
    Text(u8, String),
    Reasoning(u8, String),
    ToolDelta(u8, String, Option<String>, String),
    EndText(u8, String),
    EndCall(u8, String, u8, String),
    Usage(i64, i64),
    Finish(FuzzFinish),
}

#[derive(Arbitrary, Debug)]
enum FuzzAnswer {
    Default,
    Fail,
    Reject,
    EnterNothing,
    Retry,
    Deny(String),
    Block,
    NoAdapter,
    Approval(u8),
}

#[derive(Arbitrary, Debug)]
enum Input {
    Send(u8, bool, bool, String),
    Cancel(u8, bool),
    RemovePending(u8),
    Chunk(u8, FuzzChunk),
    StreamEnd(u8),
    StreamError(u8),
    ToolResult(u8, bool, bool, bool),
    ToolFailure(u8),
    Answer(u8, FuzzAnswer),
    Timeout(u32),
    Plugin(String),
    Maintenance(bool),
}

const NAMES: [&str; 5] = ["echo", "slow", "nope", "", "look"];

fn chunk(c: FuzzChunk) -> StreamChunk {
    let i = |x: u8| u64::from(x % 8);
    match c {
        FuzzChunk::Start(x, t) => StreamChunk::BlockStart {
            index: i(x),
            block_type: ["text", "reasoning", "tool-call", "image", "plugin"][usize::from(t) % 5].into(),
        },
        FuzzChunk::Text(x, text) => StreamChunk::TextDelta { index: i(x), text: text.into() },
        FuzzChunk::Reasoning(x, text) => StreamChunk::ReasoningDelta { index: i(x), text: text.into() },
        FuzzChunk::ToolDelta(x, id, name, arguments_delta) => StreamChunk::ToolCallDelta { index: i(x), head: dsh_core::ToolCallHead::owned(id, name), arguments_delta: arguments_delta.into() },
        FuzzChunk::EndText(x, text) => StreamChunk::block_end(i(x), ContentBlock::text(text)),
        FuzzChunk::EndCall(x, id, n, args) => StreamChunk::block_end(i(x), ContentBlock::tool_call(id, NAMES[usize::from(n) % NAMES.len()], args)),
        FuzzChunk::Usage(a, b) => StreamChunk::usage(TokenUsage::new(a, b)),
        FuzzChunk::Finish(f) => StreamChunk::finish(match f {
            FuzzFinish::Stop => FinishReason::Stop,
            FuzzFinish::ToolCalls => FinishReason::ToolCalls,
            FuzzFinish::MaxTokens => FinishReason::MaxTokens,
            FuzzFinish::Error(m) => FinishReason::Error { failure: LlmFailure::new("SERVER", m) },
            FuzzFinish::Aborted => FinishReason::Aborted { failure: LlmFailure::new("ABORTED", "gone") },
        }),
    }
}

fn answer(call: &HookCall, a: FuzzAnswer) -> HookAnswer {
    let fail = || HookError::msg("fuzz");
    match (call, a) {
        (HookCall::Assemble { .. }, FuzzAnswer::Fail) => HookAnswer::Assemble(Err(fail())),
        (HookCall::Assemble { value, .. }, _) => HookAnswer::Assemble(Ok(value.clone())),
        (HookCall::PreStep { .. }, FuzzAnswer::Fail) => HookAnswer::PreStep(Err(fail())),
        (HookCall::PreStep { .. }, FuzzAnswer::Reject) => HookAnswer::PreStep(Ok(PreStepDecision::Reject)),
        (HookCall::PreStep { .. }, FuzzAnswer::EnterNothing) => HookAnswer::PreStep(Ok(PreStepDecision::Enter(vec![]))),
        (HookCall::PreStep { value, .. }, _) => HookAnswer::PreStep(Ok(value.clone())),
        (HookCall::Request { .. }, FuzzAnswer::Fail) => HookAnswer::Request(Err(fail())),
        (HookCall::Request { .. }, FuzzAnswer::Reject) => HookAnswer::Request(Ok(LlmCallConfig::new("", ""))),
        (HookCall::Request { value, .. }, _) => HookAnswer::Request(Ok(value.clone())),
        (HookCall::Prepare { .. }, FuzzAnswer::NoAdapter) => HookAnswer::Prepare(Err(HookError::llm("NO_ADAPTER", "none"))),
        (HookCall::Prepare { .. }, FuzzAnswer::Fail) => HookAnswer::Prepare(Err(fail())),
        (HookCall::Prepare { value }, _) => HookAnswer::Prepare(Ok(PreparedCall::plain(value.config.clone()))),
        (HookCall::RequestError { .. }, FuzzAnswer::Retry) => HookAnswer::RequestError(Ok(Recovery::Retry)),
        (HookCall::RequestError { .. }, FuzzAnswer::Fail) => HookAnswer::RequestError(Err(fail())),
        (HookCall::RequestError { .. }, _) => HookAnswer::RequestError(Ok(Recovery::GiveUp)),
        (HookCall::TurnStopping { .. }, FuzzAnswer::Fail) => HookAnswer::TurnStopping(Err(fail())),
        (HookCall::TurnStopping { .. }, _) => HookAnswer::TurnStopping(Ok(())),
        (HookCall::ToolPreExecute { .. }, FuzzAnswer::Fail) => HookAnswer::ToolPreExecute(Err(fail())),
        (HookCall::ToolPreExecute { .. }, FuzzAnswer::Deny(r)) => HookAnswer::ToolPreExecute(Ok(PreToolDecision::Deny { reason: r })),
        (HookCall::ToolPreExecute { .. }, FuzzAnswer::Approval(_)) => HookAnswer::ToolPreExecute(Ok(PreToolDecision::Ask { reason: Some("why".into()) })),
        (HookCall::ToolPreExecute { .. }, _) => HookAnswer::ToolPreExecute(Ok(PreToolDecision::Allow)),
        (HookCall::ToolApproval { .. }, FuzzAnswer::Approval(k)) => HookAnswer::ToolApproval(Ok(
            [ApprovalOutcome::AllowedOnce, ApprovalOutcome::Rejected, ApprovalOutcome::Cancelled, ApprovalOutcome::Unavailable, ApprovalOutcome::NoService][usize::from(k) % 5],
        )),
        (HookCall::ToolApproval { .. }, FuzzAnswer::Fail) => HookAnswer::ToolApproval(Err(fail())),
        (HookCall::ToolApproval { .. }, _) => HookAnswer::ToolApproval(Ok(ApprovalOutcome::AllowedOnce)),
        (HookCall::ToolGuard { .. }, FuzzAnswer::Deny(r)) => HookAnswer::ToolGuard(Ok(Some(r))),
        (HookCall::ToolGuard { .. }, FuzzAnswer::Fail) => HookAnswer::ToolGuard(Err(fail())),
        (HookCall::ToolGuard { .. }, _) => HookAnswer::ToolGuard(Ok(None)),
        (HookCall::ToolPostExecute { .. }, FuzzAnswer::Fail) => HookAnswer::ToolPostExecute(Err(fail())),
        (HookCall::ToolPostExecute { .. }, FuzzAnswer::Block) => HookAnswer::ToolPostExecute(Ok(PostToolDecision::Block { feedback: vec![], additional_contexts: vec![] })),
        (HookCall::ToolPostExecute { .. }, _) => HookAnswer::ToolPostExecute(Ok(PostToolDecision::accept())),
        // Any other answer kind: a mismatch the agent must refuse.
        (_, _) => HookAnswer::TurnStopping(Ok(())),
    }
}

#[derive(Arbitrary, Debug)]
struct Case {
    defer: u16,
    retry_executor: bool,
    interrupted_prefix: bool,
    wake_latch: bool,
    inputs: Vec<Input>,
}

fuzz_target!(|case: Case| {
    let mut tools = ToolRegistry::new();
    let _ = tools.register(ToolDefinition::typed("echo", "", serde_json::json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})));
    let _ = tools.register(ToolDefinition::untyped("slow", "", serde_json::json!({})));
    // A parallel-safe tool: consecutive calls run as a group (LC-24).
    let mut look = ToolDefinition::untyped("look", "", serde_json::json!({}));
    look.concurrency_safe = true;
    let _ = tools.register(look);
    let mut options = AgentOptions::default();
    options.provider = Some("mock".into());
    options.model = Some("mock".into());
    let mut config = AgentConfig::default();
    config.options = options;
    config.tools = tools;
    config.retry_executor = case.retry_executor;
    config.interrupted_prefix = case.interrupted_prefix;
    config.wake_latch = case.wake_latch;
    config.max_parallel_tool_calls = usize::from(case.defer % 4);
    config.seams = claimed(case.defer);
    config.max_steps_per_turn = (case.defer & (1 << 15) != 0).then_some(3);
    let Ok(mut agent) = Agent::new(config, Session::new(SessionHeader::new("fuzz", 0))) else { return };
    let mut checker = InvariantChecker::new();
    let mut checked = 0u64;
    let mut attempts: Vec<u64> = vec![];
    let mut tokens: Vec<u64> = vec![];
    let mut hooks: Vec<(u64, HookCall)> = vec![];
    let mut now = dsh_core::Time::EPOCH;
    let mut n = 0u32;
    for input in case.inputs.into_iter().take(256) {
        now += 1;
        let before = agent.session().len();
        let pick = |v: &[u64], k: u8| v.get(v.len().wrapping_sub(1 + usize::from(k % 3))).copied().unwrap_or(u64::from(k));
        let refused = match input {
            Input::Send(text, to_turn, wake, body) => {
                n += 1;
                let m = Message::user(format!("m{}", n % 7 + u32::from(text % 2) * 100), vec![ContentBlock::text(body)]);
                let target = if to_turn { InboxTarget::NextTurn } else { InboxTarget::NextStep };
                agent.send(now, m, target, wake).is_err()
            }
            Input::Cancel(c, keep) => {
                let cause = [CancelCause::User, CancelCause::Parent, CancelCause::Disposed, CancelCause::Hook { reason: "x".into() }][usize::from(c % 4)].clone();
                agent.cancel(now, cause, keep);
                false
            }
            Input::RemovePending(k) => {
                let id = agent.inbox().list(InboxTarget::NextTurn).iter().chain(agent.inbox().list(InboxTarget::NextStep)).nth(usize::from(k % 4)).map(|m| m.id.clone());
                match id {
                    Some(id) => agent.edit_inbox(now, InboxEdit::Remove(id)).is_err(),
                    None => true,
                }
            }
            Input::Chunk(k, c) => agent.handle_chunk(now, AttemptId::new(pick(&attempts, k)), chunk(c)).is_err(),
            Input::StreamEnd(k) => agent.handle_stream_end(now, AttemptId::new(pick(&attempts, k))).is_err(),
            Input::StreamError(k) => agent.handle_stream_error(now, AttemptId::new(pick(&attempts, k)), HookError::msg("threw")).is_err(),
            Input::ToolResult(k, ok, conclude, ctx) => {
                let mut o = if ok { ToolOutcome::success(vec![ContentBlock::text("ok")]) } else { ToolOutcome::error("bad") };
                if conclude { o = o.concluding(); }
                if ctx { n += 1; o = o.with_contexts(vec![Message::user(format!("ctx{n}"), vec![])]); }
                agent.handle_tool_result(now, ToolToken::new(pick(&tokens, k)), o).is_err()
            }
            Input::ToolFailure(k) => agent.handle_tool_failure(now, ToolToken::new(pick(&tokens, k)), HookError::msg("died")).is_err(),
            Input::Answer(k, a) => {
                let idx = hooks.len().wrapping_sub(1 + usize::from(k % 2));
                match hooks.get(idx).cloned() {
                    Some((id, call)) => agent.complete_hook(now, id, answer(&call, a)).is_err(),
                    None => agent.complete_hook(now, u64::from(k), HookAnswer::TurnStopping(Ok(()))).is_err(),
                }
            }
            Input::Timeout(ms) => agent.handle_timeout(now + u64::from(ms)).is_err(),
            Input::Plugin(t) => agent.append_event(now, EventData::plugin(t, &serde_json::json!({})), None).is_err(),
            Input::Maintenance(begin) => if begin { agent.begin_maintenance(now).is_err() } else { agent.end_maintenance(now).is_err() },
        };
        if refused {
            assert_eq!(agent.session().len(), before, "a refused input changed the log");
        }
        while let Some(o) = agent.poll() {
            match o {
                Output::CallModel(c) => attempts.push(c.attempt.get()),
                Output::ExecuteTool(e) => tokens.push(e.token.get()),
                Output::Hook { id, call } => hooks.push((id, call)),
                _ => {}
            }
        }
        for e in agent.session().events_from(checked) {
            if let Err(v) = checker.push(e) {
                panic!("invariant violated: {v}");
            }
        }
        checked = agent.session().len();
        assert!(agent.faults().is_empty(), "faults: {:?}", agent.faults());
    }
});
