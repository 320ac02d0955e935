//! Property tests over random input scripts (loop.md LC-41): whatever the
//! order of user input, cancellations, model chunks, tool results and hook
//! answers, the log always passes the invariant checker (checked after every
//! drain by the harness), every `tool/call` gets exactly one `tool/result`
//! in its step (unless the runner itself failed, LC-36) and results come
//! in call order even when a parallel group's bodies end out of order
//! (LC-24), a cancel at any point leaves a balanced log once pending work
//! is answered, and nothing panics.

mod loop_support;

use dsh_core::agent::AttemptId;
use std::collections::HashMap;

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    AgentStatus, ApprovalOutcome, CancelCause, HookAnswer, HookCall, HookError, InboxEdit,
    InboxTarget, PostToolDecision, PreToolDecision, PreparedCall, Recovery,
};
use dsh_core::session::EventData;
use dsh_core::{ContentBlock, FinishReason, StreamChunk};
use loop_support::*;
use proptest::prelude::*;

const CASES: u32 = 2048;

#[derive(Clone, Debug)]
enum Op {
    Followup(u8),
    Steer(u8),
    Inject(u8),
    RemovePending(u8),
    Cancel(u8, bool),
    Text(u8),
    Call(u8, u8),
    BadCall,
    End(u8),
    StreamError,
    ToolOk(u8, bool, bool),
    ToolErr(u8),
    ToolFail(u8),
    Answer(bool),
    Timeout(u16),
    Plugin,
    Maintenance,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u8>().prop_map(Op::Followup),
        1 => any::<u8>().prop_map(Op::Steer),
        1 => any::<u8>().prop_map(Op::Inject),
        1 => any::<u8>().prop_map(Op::RemovePending),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(c, k)| Op::Cancel(c, k)),
        3 => any::<u8>().prop_map(Op::Text),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(i, n)| Op::Call(i, n)),
        1 => Just(Op::BadCall),
        4 => any::<u8>().prop_map(Op::End),
        1 => Just(Op::StreamError),
        4 => (any::<u8>(), any::<bool>(), any::<bool>()).prop_map(|(k, c, x)| Op::ToolOk(k, c, x)),
        1 => any::<u8>().prop_map(Op::ToolErr),
        1 => any::<u8>().prop_map(Op::ToolFail),
        4 => any::<bool>().prop_map(Op::Answer),
        1 => any::<u16>().prop_map(Op::Timeout),
        1 => Just(Op::Plugin),
        1 => Just(Op::Maintenance),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    defer: Vec<&'static str>,
    retry_executor: bool,
    interrupted_prefix: bool,
    wake_latch: bool,
    always_retry: bool,
    ask: bool,
    /// `maxParallelToolCalls` (LC-24).
    max_parallel: usize,
}

fn setup() -> impl Strategy<Value = Setup> {
    const SEAMS: [&str; 9] = [
        "assemble",
        "pre-step",
        "request",
        "request-error",
        "turn-stopping",
        "pre-execute",
        "approval",
        "post-execute",
        "none",
    ];
    (
        proptest::collection::vec(0usize..SEAMS.len(), 0..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1usize..4,
    )
        .prop_map(|(d, r, i, w, a, ask, max_parallel)| Setup {
            defer: d.into_iter().map(|i| SEAMS[i]).collect(),
            retry_executor: r,
            interrupted_prefix: i,
            wake_latch: w,
            always_retry: a,
            ask,
            max_parallel,
        })
}

fn cause(c: u8) -> CancelCause {
    match c % 4 {
        0 => CancelCause::User,
        1 => CancelCause::Parent,
        2 => CancelCause::Hook {
            reason: "runaway".into(),
        },
        _ => CancelCause::Disposed,
    }
}

fn harness(s: &Setup) -> T {
    // `look` may run in parallel groups (TL-15); the others run alone.
    let mut look = dsh_core::agent::tools::ToolDefinition::untyped(
        "look",
        "look",
        serde_json::json!({"type":"object"}),
    );
    look.concurrency_safe = true;
    let mut config = f0_config(vec![echo(), plain_tool("slow"), look]);
    config.max_parallel_tool_calls = s.max_parallel;
    config.retry_executor = s.retry_executor;
    config.interrupted_prefix = s.interrupted_prefix;
    config.wake_latch = s.wake_latch;
    let t = T::with(config);
    for d in &s.defer {
        if *d != "none" {
            t.defer(d);
        }
    }
    if s.always_retry {
        t.script().policy = Some(
            dsh_core::agent::retry::RetryPolicy::resolve(
                Some(&serde_json::json!({"mode":"always","backoff":{"initialDelayMs":1,"maxDelayMs":4}})),
                "p",
            )
            .unwrap(),
        );
    }
    if s.ask {
        t.script().pre_execute = Some(Box::new(|exec| {
            Ok(if exec.call_id.as_str().ends_with('1') {
                PreToolDecision::Ask { reason: None }
            } else {
                PreToolDecision::Allow
            })
        }));
        t.script().approval = Some(ApprovalOutcome::AllowedOnce);
    }
    t.script().post_execute = Some(Box::new(|exec, _| {
        Ok(if exec.call_id.as_str().ends_with('3') {
            PostToolDecision::Block {
                feedback: vec![ContentBlock::text("no")],
                additional_contexts: vec![],
            }
        } else {
            PostToolDecision::accept()
        })
    }));
    t
}

/// The answer a shell with default listeners gives.
fn default_answer(call: &HookCall, fail: bool) -> HookAnswer {
    let err = || HookError::msg("listener failed");
    match call {
        HookCall::Assemble { value, .. } => {
            HookAnswer::Assemble(if fail { Err(err()) } else { Ok(value.clone()) })
        }
        HookCall::PreStep { value, .. } => {
            HookAnswer::PreStep(if fail { Err(err()) } else { Ok(value.clone()) })
        }
        HookCall::Request { value, .. } => {
            HookAnswer::Request(if fail { Err(err()) } else { Ok(value.clone()) })
        }
        HookCall::Prepare { value } => {
            HookAnswer::Prepare(Ok(PreparedCall::plain(value.config.clone())))
        }
        HookCall::RequestError { .. } => HookAnswer::RequestError(if fail {
            Err(err())
        } else {
            Ok(Recovery::Retry)
        }),
        HookCall::TurnStopping { .. } => {
            HookAnswer::TurnStopping(if fail { Err(err()) } else { Ok(()) })
        }
        HookCall::ToolPreExecute { .. } => HookAnswer::ToolPreExecute(if fail {
            Err(err())
        } else {
            Ok(PreToolDecision::Allow)
        }),
        HookCall::ToolApproval { .. } => HookAnswer::ToolApproval(Ok(if fail {
            ApprovalOutcome::Cancelled
        } else {
            ApprovalOutcome::AllowedOnce
        })),
        HookCall::ToolPostExecute { .. } => HookAnswer::ToolPostExecute(if fail {
            Err(err())
        } else {
            Ok(PostToolDecision::accept())
        }),
        other => panic!("unexpected hook {other:?}"),
    }
}

struct Run {
    t: T,
    next_message: u32,
    call_seq: u32,
    runner_failed: Vec<(u64, u64)>,
    open_attempt: Option<AttemptId>,
}

impl Run {
    fn message(&mut self, text: u8) -> dsh_core::Message {
        self.next_message += 1;
        user(&format!("u{}", self.next_message), &format!("t{text}"))
    }

    /// The open model attempt, if the agent streams.
    fn attempt(&self) -> Option<AttemptId> {
        self.open_attempt
    }

    fn track(&mut self) {
        // The last CallModel is the open attempt until an end is accepted.
        if let Some(c) = self.t.calls.last()
            && self.open_attempt.is_none_or(|a| a < c.attempt)
        {
            self.open_attempt = Some(c.attempt);
        }
    }

    /// One of the last few executed tools (a parallel group has several
    /// bodies out; stale ones are refused harmlessly).
    fn pick_tool(&self, k: u8) -> Option<dsh_core::agent::ToolExecution> {
        let n = self.t.tools.len();
        if n == 0 {
            return None;
        }
        let back = usize::from(k % 4).min(n - 1);
        self.t.tools.get(n - 1 - back).cloned()
    }

    fn apply(&mut self, op: Op) {
        let now = self.t.tick();
        self.track();
        match op {
            Op::Followup(x) => {
                let m = self.message(x);
                let _ = self.t.agent.followup(now, m);
            }
            Op::Steer(x) => {
                let m = self.message(x);
                let _ = self.t.agent.steer(now, m);
            }
            Op::Inject(x) => {
                let m = self.message(x);
                let _ = self.t.agent.inject(now, m);
            }
            Op::RemovePending(i) => {
                let ids: Vec<_> = [InboxTarget::NextTurn, InboxTarget::NextStep]
                    .iter()
                    .flat_map(|t| self.t.agent.inbox().list(*t).iter().map(|m| m.id.clone()))
                    .collect();
                if !ids.is_empty() {
                    let id = ids[usize::from(i) % ids.len()].clone();
                    let _ = self.t.agent.edit_inbox(now, InboxEdit::Remove(id));
                }
            }
            Op::Cancel(c, keep) => self.t.agent.cancel(now, cause(c), keep),
            Op::Text(x) => {
                if let Some(a) = self.attempt() {
                    for c in text(&format!("x{x}")).into_iter().take(3) {
                        let _ = self.t.agent.handle_chunk(now, a, c);
                    }
                }
            }
            Op::Call(i, n) => {
                if let Some(a) = self.attempt() {
                    self.call_seq += 1;
                    let name = ["echo", "slow", "nope", "", "look", "look"][usize::from(n) % 6];
                    let id = format!("c{}", self.call_seq);
                    let index = u64::from(i % 4) + 1;
                    let _ = self.t.agent.handle_chunk(
                        now,
                        a,
                        StreamChunk::block_end(
                            index,
                            ContentBlock::tool_call(id, name, r#"{"text":"a"}"#),
                        ),
                    );
                }
            }
            Op::BadCall => {
                if let Some(a) = self.attempt() {
                    let _ = self.t.agent.handle_chunk(
                        now,
                        a,
                        StreamChunk::ToolCallDelta {
                            index: 9,
                            head: dsh_core::ToolCallHead::owned(String::new(), None),
                            arguments_delta: "{\"te".into(),
                        },
                    );
                }
            }
            Op::End(k) => {
                if let Some(a) = self.attempt() {
                    let reason = match k % 6 {
                        0 | 1 => FinishReason::Stop,
                        2 => FinishReason::ToolCalls,
                        3 => FinishReason::MaxTokens,
                        4 => FinishReason::Error {
                            failure: failure("RATE_LIMIT", "busy"),
                        },
                        _ => FinishReason::Aborted {
                            failure: failure("ABORTED", "gone"),
                        },
                    };
                    let _ = self
                        .t
                        .agent
                        .handle_chunk(now, a, StreamChunk::finish(reason));
                    if self.t.agent.handle_stream_end(now, a).is_ok() {
                        self.open_attempt = Some(AttemptId::new(u64::MAX));
                    }
                }
            }
            Op::StreamError => {
                if let Some(a) = self.attempt()
                    && self
                        .t
                        .agent
                        .handle_stream_error(now, a, HookError::msg("consumer failed"))
                        .is_ok()
                {
                    self.open_attempt = Some(AttemptId::new(u64::MAX));
                }
            }
            Op::ToolOk(k, conclude, ctx) => {
                if let Some(exec) = self.pick_tool(k) {
                    let mut o = echo_result("ok");
                    if conclude {
                        o = o.concluding();
                    }
                    if ctx {
                        let m = self.message(7);
                        o = o.with_contexts(vec![m]);
                    }
                    let _ = self.t.agent.handle_tool_result(now, exec.token, o);
                }
            }
            Op::ToolErr(k) => {
                if let Some(exec) = self.pick_tool(k) {
                    let _ = self.t.agent.handle_tool_result(
                        now,
                        exec.token,
                        ToolOutcome::error("boom"),
                    );
                }
            }
            Op::ToolFail(k) => {
                if let Some(exec) = self.pick_tool(k)
                    && self
                        .t
                        .agent
                        .handle_tool_failure(now, exec.token, HookError::msg("runner died"))
                        .is_ok()
                {
                    self.runner_failed.push((exec.turn, exec.step));
                }
            }
            Op::Answer(fail) => {
                if let Some((id, call)) = self.t.pending.first().cloned()
                    && self
                        .t
                        .agent
                        .complete_hook(now, id, default_answer(&call, fail))
                        .is_ok()
                {
                    self.t.pending.remove(0);
                }
            }
            Op::Timeout(ms) => {
                let _ = self.t.agent.handle_timeout(now + u64::from(ms));
            }
            Op::Plugin => {
                let _ = self.t.agent.append_event(
                    now,
                    EventData::plugin("plugin/note", &serde_json::json!({"n": now})),
                    None,
                );
            }
            Op::Maintenance => {
                if self.t.agent.begin_maintenance(now).is_err() {
                    let _ = self.t.agent.end_maintenance(now);
                }
            }
        }
        self.t.drain();
        self.track();
    }

    /// Cancels, then answers everything until the agent is idle.
    fn settle(&mut self) {
        let now = self.t.tick();
        let _ = self.t.agent.end_maintenance(now);
        self.t.agent.cancel(now, CancelCause::Disposed, false);
        self.t.drain();
        for _ in 0..64 {
            if self.t.agent.status() == AgentStatus::Idle && self.t.agent.is_quiescent() {
                break;
            }
            let now = self.t.tick();
            if let Some((id, call)) = self.t.pending.first().cloned() {
                self.t.pending.remove(0);
                let _ = self
                    .t
                    .agent
                    .complete_hook(now, id, default_answer(&call, false));
            } else {
                // Answer the newest body that still runs.
                for exec in self.t.tools.clone().iter().rev() {
                    match self
                        .t
                        .agent
                        .handle_tool_result(now, exec.token, echo_result("late"))
                    {
                        Ok(()) => break,
                        Err(e) => assert!(e.is_benign(), "{e}"),
                    }
                }
            }
            self.t.drain();
        }
    }
}

/// Every tool/call is answered by exactly one tool/result of its step.
fn check_tool_pairs(t: &T, runner_failed: &[(u64, u64)]) {
    let events = t.agent.session().events();
    let mut calls: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut answers: HashMap<u64, usize> = HashMap::new();
    for e in events {
        match e.data() {
            EventData::ToolCall(c) => {
                calls.insert(e.seq(), (c.turn, c.step));
            }
            EventData::ToolResult(r) => {
                let src = e.source_event_seqs().expect("a tool/result cites its call");
                assert_eq!(src.len(), 1);
                let (turn, step) = calls[&src[0]];
                assert_eq!((r.turn, r.step), (turn, step), "result in the call's step");
                *answers.entry(src[0]).or_default() += 1;
            }
            _ => {}
        }
    }
    // LC-24: within a step, results commit in call order.
    let mut last: HashMap<(u64, u64), u64> = HashMap::new();
    for e in events {
        if let EventData::ToolResult(r) = e.data() {
            let src = e.source_event_seqs().expect("a tool/result cites its call")[0];
            if let Some(prev) = last.insert((r.turn, r.step), src) {
                assert!(
                    prev < src,
                    "result for call #{src} after #{prev}\n{}",
                    t.log().join("\n")
                );
            }
        }
    }
    for (seq, (turn, step)) in calls {
        let n = answers.get(&seq).copied().unwrap_or(0);
        if runner_failed.contains(&(turn, step)) {
            assert!(n <= 1, "call #{seq} answered {n} times");
        } else {
            assert_eq!(
                n,
                1,
                "call #{seq} answered {n} times\n{}",
                t.log().join("\n")
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn random_scripts_keep_the_log_valid(s in setup(), ops in proptest::collection::vec(op(), 1..80)) {
        let mut run = Run {
            t: harness(&s),
            next_message: 0,
            call_seq: 0,
            runner_failed: vec![],
            open_attempt: None,
        };
        for op in ops {
            run.apply(op);
        }
        run.settle();
        prop_assert_eq!(run.t.agent.status(), AgentStatus::Idle);
        prop_assert!(run.t.checker.open_turn().is_none(), "balanced after cancel:\n{}", run.t.log().join("\n"));
        check_tool_pairs(&run.t, &run.runner_failed);
    }
}
