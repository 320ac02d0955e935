//! The test vectors V01–V30 of loop.md §8, each asserting the exact durable
//! event sequence and the effects that matter (fixture F0).

mod loop_support;

use dsh_core::Time;
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    ApprovalOutcome, HookAnswer, HookError, InboxTarget, PostToolDecision, PreStepDecision,
    PreToolDecision, Recovery,
};
use dsh_core::agent::{AttemptId, ToolToken};
use dsh_core::session::{Session, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, StreamChunk};
use loop_support::*;

/// The first events of every vector: P(m1,1,0), header, context.
fn start_v01(t: &mut T) {
    t.followup(&m1());
}

#[test]
fn v01_plain_text_turn() {
    let mut t = T::f0();
    t.followup(&m1());
    let want = [
        "inserted m1".to_string(),
        "status running".into(),
        "claimed m1@1".into(),
        format!("call-model {} mock [m1]", t.attempt()),
    ];
    assert_eq!(t.take_trace(), want);
    let req = &t.calls[0].request;
    assert_eq!(req.system.as_deref(), Some(SYS));
    assert_eq!(req.session_id.as_ref().map(|s| s.as_str()), Some("a1"));
    assert!(req.tools.is_none());
    t.model(&text("hello"));
    assert_eq!(t.take_trace(), ["status idle"]);
    assert_eq!(t.seen().last().map(String::as_str), Some("turn-stopping 1"));
    assert_lines(
        &t.log(),
        &concat(vec![
            prologue(&m1(), 1, 0),
            vec![header(5, "initial", "mock", ""), context(6, "mock")],
            chunk_events(7, 1, 1, &text("hello")),
            vec![
                assistant(
                    12,
                    1,
                    1,
                    "A1",
                    &text_content("hello"),
                    "mock",
                    Some(USAGE),
                    7..12,
                ),
                step_end(13, 1, 1),
                turn_end(14, 1, COMPLETED),
            ],
        ]),
    );
    assert_eq!(t.derived(), ["m1", "A1"]);
}

#[test]
fn v01_checkpoints() {
    let mut t = T::f0();
    t.keep_flush = true;
    t.followup(&m1());
    t.model(&text("hello"));
    let flushes: Vec<String> = t
        .take_trace()
        .into_iter()
        .filter(|s| s.starts_with("flush"))
        .collect();
    assert_eq!(
        flushes,
        ["flush PreStep", "flush BeforeModel", "flush AfterTurnEnd"]
    );
}

#[test]
fn v02_tool_call_then_text() {
    let mut t = T::with_tools(vec![echo()]);
    t.followup(&m1());
    t.model(&call("c1", "echo", r#"{"text":"ping"}"#));
    assert_eq!(t.tools.len(), 1);
    assert_eq!(t.tools[0].arguments, serde_json::json!({"text":"ping"}));
    t.tool(echo_result("echo: ping"));
    assert_eq!(t.calls.len(), 2);
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "A1", "R1"]);
    t.model(&text("done"));
    let tools = r#"[{"name":"echo","description":"Echo text","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}]"#;
    assert_lines(
        &t.log(),
        &concat(vec![
            prologue(&m1(), 1, 0),
            vec![header(5, "initial", "mock", tools), context(6, "mock")],
            chunk_events(7, 1, 1, &call("c1", "echo", r#"{"text":"ping"}"#)),
            vec![
                assistant(
                    12,
                    1,
                    1,
                    "A1",
                    &call_content(&[("c1", "echo", r#"{"text":"ping"}"#)]),
                    "mock",
                    Some(USAGE),
                    7..12,
                ),
                tool_call(13, 1, 1, "c1", "echo", r#"{"text":"ping"}"#),
                tool_result(14, 1, 1, "R1", "c1", "echo: ping", false, None, 13),
                step_end(15, 1, 1),
                step_start(16, 1, 2),
            ],
            chunk_events(17, 1, 2, &text("done")),
            vec![
                assistant(
                    22,
                    1,
                    2,
                    "A2",
                    &text_content("done"),
                    "mock",
                    Some(USAGE),
                    17..22,
                ),
                step_end(23, 1, 2),
                turn_end(24, 1, COMPLETED),
            ],
        ]),
    );
    // No TurnStopping after step 1: a follow-up was owed.
    let seen = t.seen();
    assert_eq!(
        seen.iter()
            .filter(|s| s.starts_with("turn-stopping"))
            .count(),
        1
    );
    assert!(seen.contains(&"pre-step 1/2 []".to_string()));
}

#[test]
fn v03_two_calls_with_post_execute_contexts() {
    let mut t = T::with_tools(vec![echo()]);
    t.script().post_execute = Some(Box::new(|exec, _| {
        let ctx = if exec.call_id.as_str() == "c1" {
            x1()
        } else {
            x2()
        };
        Ok(PostToolDecision::Accept {
            content: None,
            additional_contexts: vec![ctx],
        })
    }));
    t.followup(&m1());
    let calls = two_calls(
        ("c1", "echo", r#"{"text":"a"}"#),
        ("c2", "echo", r#"{"text":"b"}"#),
    );
    t.model(&calls);
    t.tool(echo_result("echo: a"));
    t.tool(echo_result("echo: b"));
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "A1", "R1", "R2", "x1", "x2"]);
    t.model(&text("done"));
    assert_lines(
        &t.log_from(13),
        &[
            assistant(
                13,
                1,
                1,
                "A1",
                &call_content(&[
                    ("c1", "echo", r#"{"text":"a"}"#),
                    ("c2", "echo", r#"{"text":"b"}"#),
                ]),
                "mock",
                Some(USAGE),
                7..13,
            ),
            tool_call(14, 1, 1, "c1", "echo", r#"{"text":"a"}"#),
            tool_result(15, 1, 1, "R1", "c1", "echo: a", false, None, 14),
            insert(16, "next-step", 0, &x1()),
            tool_call(17, 1, 1, "c2", "echo", r#"{"text":"b"}"#),
            tool_result(18, 1, 1, "R2", "c2", "echo: b", false, None, 17),
            insert(19, "next-step", 1, &x2()),
            step_end(20, 1, 1),
            claim(21, "next-step", 2),
            step_start(22, 1, 2),
            user_message(23, &x1()),
            user_message(24, &x2()),
        ]
        .iter()
        .cloned()
        .chain(chunk_events(25, 1, 2, &text("done")))
        .chain([
            assistant(
                30,
                1,
                2,
                "A2",
                &text_content("done"),
                "mock",
                Some(USAGE),
                25..30,
            ),
            step_end(31, 1, 2),
            turn_end(32, 1, COMPLETED),
        ])
        .collect::<Vec<_>>(),
    );
    assert!(t.seen().contains(&"pre-step 1/2 [x1,x2]".to_string()));
}

#[test]
fn v04_steering_while_text_step_streams() {
    let mut t = T::f0();
    t.followup(&m1());
    let c = text("first");
    t.chunks(&c[..2]);
    t.take_trace();
    t.steer(&s1());
    assert_eq!(t.take_trace(), ["inserted s1"], "no status event");
    t.chunks(&c[2..]);
    t.end();
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "A1", "s1"]);
    t.model(&text("second"));
    assert_lines(
        &t.log_from(7),
        &concat(vec![
            chunk_events(7, 1, 1, &c[..2]),
            vec![insert(9, "next-step", 0, &s1())],
            chunk_events(10, 1, 1, &c[2..]),
            vec![
                assistant(
                    13,
                    1,
                    1,
                    "A1",
                    &text_content("first"),
                    "mock",
                    Some(USAGE),
                    7..9,
                )
                .replace("src=[7,8]", "src=[7,8,10,11,12]"),
                step_end(14, 1, 1),
                claim(15, "next-step", 1),
                step_start(16, 1, 2),
                user_message(17, &s1()),
            ],
            chunk_events(18, 1, 2, &text("second")),
            vec![
                assistant(
                    23,
                    1,
                    2,
                    "A2",
                    &text_content("second"),
                    "mock",
                    Some(USAGE),
                    18..23,
                ),
                step_end(24, 1, 2),
                turn_end(25, 1, COMPLETED),
            ],
        ]),
    );
    // The first step did not reach turn-stopping: next-step was non-empty.
    assert_eq!(
        t.seen()
            .iter()
            .filter(|s| s.starts_with("turn-stopping"))
            .count(),
        1
    );
}

#[test]
fn v05_steering_during_a_tool_call() {
    let mut t = T::with_tools(vec![echo()]);
    t.followup(&m1());
    t.model(&call("c1", "echo", r#"{"text":"ping"}"#));
    t.steer(&s1());
    t.tool(echo_result("echo: ping"));
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "A1", "R1", "s1"]);
    t.model(&text("done"));
    assert_lines(
        &t.log()[13..20],
        &[
            tool_call(13, 1, 1, "c1", "echo", r#"{"text":"ping"}"#),
            insert(14, "next-step", 0, &s1()),
            tool_result(15, 1, 1, "R1", "c1", "echo: ping", false, None, 13),
            step_end(16, 1, 1),
            claim(17, "next-step", 1),
            step_start(18, 1, 2),
            user_message(19, &s1()),
        ],
    );
    assert!(t.log().last().unwrap().contains(r#""kind":"completed""#));
}

#[test]
fn v06_followup_queued_while_running() {
    let mut t = T::f0();
    t.followup(&m1());
    let a = text("a");
    t.chunks(&a[..2]);
    t.take_trace();
    t.followup(&m2());
    assert_eq!(t.take_trace(), ["inserted m2"]);
    t.chunks(&a[2..]);
    t.end();
    // The second turn's request logs no header or context.
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "A1", "m2"]);
    t.model(&text("b"));
    assert_lines(
        &t.log_from(9),
        &concat(vec![
            vec![insert(9, "next-turn", 0, &m2())],
            chunk_events(10, 1, 1, &a[2..]),
            vec![
                assistant(
                    13,
                    1,
                    1,
                    "A1",
                    &text_content("a"),
                    "mock",
                    Some(USAGE),
                    7..9,
                )
                .replace("src=[7,8]", "src=[7,8,10,11,12]"),
                step_end(14, 1, 1),
                turn_end(15, 1, COMPLETED),
                turn_start(16, 2),
                claim(17, "next-turn", 1),
                step_start(18, 2, 1),
                user_message(19, &m2()),
            ],
            chunk_events(20, 2, 1, &text("b")),
            vec![
                assistant(
                    25,
                    2,
                    1,
                    "A2",
                    &text_content("b"),
                    "mock",
                    Some(USAGE),
                    20..25,
                ),
                step_end(26, 2, 1),
                turn_end(27, 2, COMPLETED),
            ],
        ]),
    );
    assert_eq!(
        t.statuses,
        [
            dsh_core::agent::AgentStatus::Running,
            dsh_core::agent::AgentStatus::Idle
        ]
    );
    assert!(t.seen().contains(&"turn-stopping 1".to_string()));
}

#[test]
fn v07_inject_idle_then_followup() {
    let mut t = T::f0();
    t.inject(&x1());
    assert_eq!(t.take_trace(), ["inserted x1"], "no status, no turn");
    t.followup(&m1());
    assert_eq!(
        t.take_trace()[..4],
        [
            "inserted m1",
            "status running",
            "claimed x1@1",
            "claimed m1@1"
        ]
    );
    let ids: Vec<&str> = t.calls[0]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["x1", "m1"]);
    t.model(&text("ok"));
    assert_lines(
        &t.log()[..10],
        &[
            insert(0, "next-step", 0, &x1()),
            insert(1, "next-turn", 0, &m1()),
            turn_start(2, 1),
            claim(3, "next-step", 1),
            claim(4, "next-turn", 1),
            step_start(5, 1, 1),
            user_message(6, &x1()),
            user_message(7, &m1()),
            header(8, "initial", "mock", ""),
            context(9, "mock"),
        ],
    );
    assert!(t.seen().contains(&"pre-step 1/1 [x1,m1]".to_string()));
}

#[test]
fn v08_inject_while_the_last_step_streams() {
    let mut t = T::f0();
    t.followup(&m1());
    let c = text("hello");
    t.chunks(&c[..2]);
    t.inject(&x1());
    t.chunks(&c[2..]);
    t.end();
    t.model(&text("again"));
    assert_lines(
        &t.log_from(9),
        &concat(vec![
            vec![insert(9, "next-step", 0, &x1())],
            chunk_events(10, 1, 1, &c[2..]),
            vec![
                assistant(
                    13,
                    1,
                    1,
                    "A1",
                    &text_content("hello"),
                    "mock",
                    Some(USAGE),
                    7..9,
                )
                .replace("src=[7,8]", "src=[7,8,10,11,12]"),
                step_end(14, 1, 1),
                claim(15, "next-step", 1),
                step_start(16, 1, 2),
                user_message(17, &x1()),
            ],
            chunk_events(18, 1, 2, &text("again")),
            vec![
                assistant(
                    23,
                    1,
                    2,
                    "A2",
                    &text_content("again"),
                    "mock",
                    Some(USAGE),
                    18..23,
                ),
                step_end(24, 1, 2),
                turn_end(25, 1, COMPLETED),
            ],
        ]),
    );
}

#[test]
fn v09_steer_idle_then_second_steer_before_step_one() {
    let mut t = T::f0();
    t.defer("assemble");
    t.steer(&s1());
    let s2 = user("s2", "again");
    t.steer(&s2);
    t.undefer("assemble");
    t.answer(HookAnswer::Assemble(Ok(assembly_f0())));
    t.model(&text("first"));
    t.model(&text("second"));
    let log = t.log();
    assert_lines(
        &log[..8],
        &[
            insert(0, "next-step", 0, &s1()),
            turn_start(1, 1),
            claim(2, "next-step", 1),
            insert(3, "next-step", 0, &s2),
            step_start(4, 1, 1),
            user_message(5, &s1()),
            header(6, "initial", "mock", ""),
            context(7, "mock"),
        ],
    );
    assert_lines(
        &log[13..18],
        &[
            assistant(
                13,
                1,
                1,
                "A1",
                &text_content("first"),
                "mock",
                Some(USAGE),
                8..13,
            ),
            step_end(14, 1, 1),
            claim(15, "next-step", 1),
            step_start(16, 1, 2),
            user_message(17, &s2),
        ],
    );
    assert_eq!(log.iter().filter(|l| l.contains("turn/start")).count(), 1);
    assert_eq!(log.last().unwrap(), &turn_end(25, 1, COMPLETED));
}

fn assembly_f0() -> dsh_core::agent::prompt::Assembly {
    use dsh_core::agent::prompt::{Assembly, PromptSection};
    let mut a = {
        let mut assembly = Assembly::default();
        assembly.sections = vec![PromptSection::new("harness:identity", -100, SYS)];
        assembly
    };
    a.variables.insert("provider".into(), Some("mock".into()));
    a
}

#[test]
fn v10_cancel_before_the_first_step() {
    for keep in [false, true] {
        let mut t = T::f0();
        t.defer("assemble");
        t.followup(&m1());
        t.followup(&m2());
        t.take_trace();
        t.cancel(keep);
        t.answer(HookAnswer::Assemble(Ok(assembly_f0())));
        let mut want = vec![
            insert(0, "next-turn", 0, &m1()),
            turn_start(1, 1),
            claim(2, "next-turn", 1),
            insert(3, "next-turn", 0, &m2()),
        ];
        if keep {
            want.push(turn_end(4, 1, ABORTED_USER));
            assert_eq!(
                t.agent.inbox().list(InboxTarget::NextTurn).len(),
                1,
                "m2 parked"
            );
        } else {
            want.push(canceled(4, "next-turn", 0, 1));
            want.push(turn_end(5, 1, ABORTED_USER));
            assert!(t.agent.inbox().is_empty());
        }
        assert_lines(&t.log(), &want);
        let mut trace = vec![];
        if !keep {
            trace.push("discarded m2");
        }
        trace.extend(["abort User", "status idle"]);
        assert_eq!(t.take_trace(), trace);
        assert!(t.calls.is_empty());
    }
}

fn cancel_while_streaming(keep: bool, prefix: bool) -> T {
    let mut config = f0_config(vec![]);
    config.interrupted_prefix = prefix;
    let mut t = T::with(config);
    t.followup(&m1());
    t.chunks(&[
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: "partial".into(),
        },
    ]);
    t.followup(&m2());
    t.take_trace();
    t.cancel(keep);
    t
}

#[test]
fn v11_cancel_while_streaming() {
    let mut t = cancel_while_streaming(false, false);
    let want = [
        "discarded m2".to_string(),
        "abort User".into(),
        format!("cancel-model {}", t.attempt()),
        "status idle".into(),
    ];
    assert_eq!(t.take_trace(), want);
    assert_lines(
        &t.log_from(9),
        &[
            insert(9, "next-turn", 0, &m2()),
            canceled(10, "next-turn", 0, 1),
            step_end(11, 1, 1),
            turn_end(12, 1, ABORTED_USER),
        ],
    );
    // Later chunks of the cancelled attempt are refused and change nothing.
    let len = t.agent.session().len();
    let err = t
        .agent
        .handle_chunk(
            Time::from_millis(9999),
            t.attempt(),
            StreamChunk::finish(FinishReason::Stop),
        )
        .unwrap_err();
    assert!(matches!(
        err,
        dsh_core::agent::InputError::StaleAttempt { .. }
    ));
    assert_eq!(t.agent.session().len(), len);
}

#[test]
#[cfg_attr(
    not(feature = "head-deltas"),
    ignore = "needs the `head-deltas` feature"
)]
fn v11_head_interrupted_prefix() {
    let mut t = cancel_while_streaming(false, true);
    t.take_trace();
    assert_lines(
        &t.log_from(11),
        &[
            format!(
                "{} src=[7,8] op=\"append\"",
                ev(
                    11,
                    "assistant/message",
                    r#"{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"partial"}],"source":{"kind":"model","provider":"mock","model":"mock"},"id":"A1"},"interrupted":true}"#
                )
            ),
            step_end(12, 1, 1),
            turn_end(13, 1, ABORTED_USER),
        ],
    );
    assert_eq!(t.derived(), ["m1", "A1"]);
}

#[test]
fn v12_cancel_with_keep_inbox_then_later_wake() {
    let mut t = cancel_while_streaming(true, false);
    assert_lines(
        &t.log_from(9),
        &[
            insert(9, "next-turn", 0, &m2()),
            step_end(10, 1, 1),
            turn_end(11, 1, ABORTED_USER),
        ],
    );
    t.take_trace();
    t.followup(&m3());
    assert_eq!(
        t.take_trace()[..3],
        ["inserted m3", "status running", "claimed m2@2"]
    );
    t.model(&text("two"));
    t.model(&text("three"));
    let log = t.log();
    assert_lines(
        &log[12..16],
        &[
            insert(12, "next-turn", 1, &m3()),
            turn_start(13, 2),
            claim(14, "next-turn", 1),
            step_start(15, 2, 1),
        ],
    );
    assert_eq!(log.iter().filter(|l| l.contains("turn/start")).count(), 3);
    assert!(
        log.iter()
            .any(|l| l.contains(&j(&m3())) && l.contains("user/message"))
    );
    assert_eq!(t.take_trace().last().unwrap(), "status idle");
}

#[test]
#[cfg_attr(
    not(feature = "head-deltas"),
    ignore = "needs the `head-deltas` feature"
)]
fn v12_head_wake_latch() {
    let mut config = f0_config(vec![]);
    config.wake_latch = true;
    let mut t = T::with(config);
    t.defer("turn-stopping");
    t.followup(&m1());
    t.model(&text("one"));
    t.cancel(true);
    t.take_trace();
    // m3 arrives while turn 1 is aborted but not idle: next-turn, latched.
    t.followup(&m3());
    assert_eq!(t.take_trace(), ["inserted m3"]);
    t.undefer("turn-stopping");
    t.answer(HookAnswer::TurnStopping(Ok(())));
    assert_eq!(
        t.take_trace()[..3],
        ["status idle", "status running", "claimed m3@2"]
    );
    t.model(&text("three"));
    assert!(
        t.log()
            .last()
            .unwrap()
            .contains(r#"{"turn":2,"reason":{"kind":"completed"}}"#)
    );
}

#[test]
fn v13_cancel_during_the_first_of_two_tool_calls() {
    let mut t = T::with_tools(vec![plain_tool("slow")]);
    t.followup(&m1());
    t.model(&two_calls(("c1", "slow", "{}"), ("c2", "slow", "{}")));
    t.take_trace();
    t.cancel(false);
    assert_eq!(t.take_trace(), ["abort User"]);
    t.tool(ToolOutcome::aborted());
    assert_eq!(t.tools.len(), 1, "no ExecuteTool for c2");
    assert_lines(
        &t.log_from(14),
        &[
            tool_call(14, 1, 1, "c1", "slow", "{}"),
            tool_result(
                15,
                1,
                1,
                "R1",
                "c1",
                "Error: tool call aborted",
                true,
                Some(("AbortError", "ABORTED")),
                14,
            ),
            tool_call(16, 1, 1, "c2", "slow", "{}"),
            tool_result(
                17,
                1,
                1,
                "R2",
                "c2",
                "Error: tool call aborted before dispatch",
                true,
                Some(("AbortError", "ABORTED_BEFORE_DISPATCH")),
                16,
            ),
            step_end(18, 1, 1),
            turn_end(19, 1, ABORTED_USER),
        ],
    );
    assert_eq!(t.take_trace(), ["status idle"]);
}

#[test]
fn v13_success_after_abort_becomes_aborted() {
    // TL-9 step 10: a success observed after cancellation is replaced.
    let mut t = T::with_tools(vec![plain_tool("slow")]);
    t.followup(&m1());
    t.model(&call("c1", "slow", "{}"));
    t.cancel(true);
    t.tool(echo_result("finished anyway"));
    assert!(t.log()[14].contains("Error: tool call aborted"));
    assert!(t.log()[14].contains(r#""code":"ABORTED""#));
}

#[test]
fn v14_cancel_during_turn_stopping() {
    let mut t = T::f0();
    t.defer("turn-stopping");
    t.followup(&m1());
    t.model(&text("hello"));
    t.take_trace();
    t.cancel(false);
    t.answer(HookAnswer::TurnStopping(Ok(())));
    assert_lines(
        &t.log_from(13),
        &[step_end(13, 1, 1), turn_end(14, 1, ABORTED_USER)],
    );
    assert_eq!(t.take_trace(), ["abort User", "status idle"]);
}

#[test]
fn v15_cancel_during_continuation_pre_step() {
    let mut t = T::with_tools(vec![echo()]);
    t.followup(&m1());
    t.model(&call("c1", "echo", r#"{"text":"ping"}"#));
    t.defer("pre-step");
    t.tool(echo_result("echo: ping"));
    assert_eq!(t.pending.len(), 1);
    t.cancel(false);
    t.answer(HookAnswer::PreStep(Ok(PreStepDecision::Enter(vec![]))));
    assert_lines(
        &t.log_from(15),
        &[step_end(15, 1, 1), turn_end(16, 1, ABORTED_USER)],
    );
    assert_eq!(t.derived(), ["m1", "A1", "R1"]);
}

#[test]
fn v16_max_tokens_drops_tool_calls() {
    let mut t = T::with_tools(vec![echo()]);
    t.followup(&m1());
    let chunks = vec![
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
        StreamChunk::TextDelta {
            index: 0,
            text: "partial text".into(),
        },
        StreamChunk::block_end(0, ContentBlock::text("partial text")),
        StreamChunk::BlockStart {
            index: 1,
            block_type: "tool-call".into(),
        },
        StreamChunk::ToolCallDelta {
            index: 1,
            head: dsh_core::ToolCallHead::owned("c1".into(), Some("echo".into())),
            arguments_delta: "{\"text\"".into(),
        },
        finish(FinishReason::MaxTokens),
    ];
    t.model(&chunks);
    assert!(t.tools.is_empty());
    assert_lines(
        &t.log_from(13),
        &[
            assistant(
                13,
                1,
                1,
                "A1",
                &text_content("partial text"),
                "mock",
                None,
                7..13,
            ),
            step_end(14, 1, 1),
            turn_end(15, 1, r#"{"kind":"max-tokens"}"#),
        ],
    );
    assert_eq!(t.derived(), ["m1", "A1"]);
    // Variant: only a complete tool call → content [] and history [m1].
    let mut t = T::with_tools(vec![echo()]);
    t.followup(&m1());
    let mut c = call("c1", "echo", "{}");
    *c.last_mut().unwrap() = finish(FinishReason::MaxTokens);
    t.model(&c);
    assert!(t.log()[12].contains(r#""content":[]"#));
    assert_eq!(t.derived(), ["m1"]);
    assert!(t.log()[14].contains("max-tokens"));
}

#[test]
fn v17_sticky_max_tokens_across_forced_continuation() {
    let mut t = T::f0();
    t.defer("turn-stopping");
    t.followup(&m1());
    let mut first = text("first half");
    *first.last_mut().unwrap() = finish(FinishReason::MaxTokens);
    t.model(&first);
    t.steer(&s1());
    t.undefer("turn-stopping");
    t.answer(HookAnswer::TurnStopping(Ok(())));
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "A1", "s1"]);
    t.model(&text("second half"));
    assert_lines(
        &t.log_from(12),
        &concat(vec![
            vec![
                assistant(
                    12,
                    1,
                    1,
                    "A1",
                    &text_content("first half"),
                    "mock",
                    Some(USAGE),
                    7..12,
                ),
                step_end(13, 1, 1),
                insert(14, "next-step", 0, &s1()),
                claim(15, "next-step", 1),
                step_start(16, 1, 2),
                user_message(17, &s1()),
            ],
            chunk_events(18, 1, 2, &text("second half")),
            vec![
                assistant(
                    23,
                    1,
                    2,
                    "A2",
                    &text_content("second half"),
                    "mock",
                    Some(USAGE),
                    18..23,
                ),
                step_end(24, 1, 2),
                turn_end(25, 1, r#"{"kind":"max-tokens"}"#),
            ],
        ]),
    );
}

fn error_finish(code: &str, message: &str) -> StreamChunk {
    finish(FinishReason::Error {
        failure: failure(code, message),
    })
}

#[test]
fn v18_in_band_model_error_terminal() {
    let mut t = T::f0();
    t.followup(&m1());
    t.take_trace();
    t.model(&[error_finish("SERVER", "boom")]);
    assert_eq!(t.take_trace(), ["error 1/1 SERVER: boom", "status idle"]);
    assert!(t.seen().contains(&"request-error 1/1 SERVER".to_string()));
    assert_lines(
        &t.log_from(7),
        &[
            ev(
                7,
                "assistant/chunk",
                r#"{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"message":"boom","code":"SERVER"}}}}"#,
            ),
            step_end(8, 1, 1),
            turn_end(
                9,
                1,
                r#"{"kind":"error","error":{"message":"boom","code":"SERVER"}}"#,
            ),
        ],
    );
}

#[test]
fn v19_model_error_retried_in_the_same_step() {
    let mut t = T::f0();
    t.script().request_error = Some(Box::new(|_| Ok(Recovery::Retry)));
    t.followup(&m1());
    t.model(&[error_finish("RATE_LIMIT", "busy")]);
    assert_eq!(t.calls.len(), 2);
    assert!(
        t.calls[1].attempt > t.calls[0].attempt,
        "a fresh attempt id"
    );
    let ids: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["m1"]);
    t.model(&text("ok"));
    assert_lines(
        &t.log_from(7),
        &concat(vec![
            vec![ev(
                7,
                "assistant/chunk",
                r#"{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"message":"busy","code":"RATE_LIMIT"}}}}"#,
            )],
            chunk_events(8, 1, 1, &text("ok")),
            vec![
                assistant(
                    13,
                    1,
                    1,
                    "A1",
                    &text_content("ok"),
                    "mock",
                    Some(USAGE),
                    8..13,
                ),
                step_end(14, 1, 1),
                turn_end(15, 1, COMPLETED),
            ],
        ]),
    );
    assert_eq!(
        t.log().iter().filter(|l| l.contains("step/start")).count(),
        1
    );
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn v19_with_the_retry_executor() {
    let mut config = f0_config(vec![]);
    config.retry_executor = true;
    let mut t = T::with(config);
    t.followup(&m1());
    t.model(&[error_finish("RATE_LIMIT", "busy")]);
    assert_eq!(t.calls.len(), 1, "waiting for the retry delay");
    let deadline = t.agent.poll_timeout().expect("a timer");
    // F0 policy: normal, maxRetries 2, defaults; jitter 0.5 → 500 ms.
    assert_eq!(deadline, t.now + 500);
    let now = t.now + 499;
    t.agent.handle_timeout(now).unwrap();
    t.drain();
    assert_eq!(t.calls.len(), 1, "not yet");
    t.agent.handle_timeout(deadline).unwrap();
    t.drain();
    assert_eq!(t.calls.len(), 2);
    t.model(&text("ok"));
    let key = r#"[\"normal\",2,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],500,10000,0.1]"#;
    assert_lines(
        &t.log()[8..10],
        &[
            ev(
                8,
                "llm/retry",
                &format!(
                    r#"{{"retryId":"retry-1","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"{key}","retry":1,"maxRetries":2,"delayMs":500,"failure":{{"message":"busy","code":"RATE_LIMIT"}}}}"#
                ),
            ),
            ev(
                9,
                "llm/retry-started",
                r#"{"retryId":"retry-1","turn":1,"step":1,"retry":1}"#,
            ),
        ],
    );
    assert!(t.log()[15].contains("assistant/message"));
    assert!(t.log()[15].contains("src=[10,11,12,13,14]"));
    // The user hook was not consulted: the executor answered first (R-8).
    assert!(!t.seen().iter().any(|s| s.starts_with("request-error")));
}

#[test]
fn v19_cancel_while_request_error_pending() {
    let mut t = T::f0();
    t.defer("request-error");
    t.followup(&m1());
    t.model(&[error_finish("RATE_LIMIT", "busy")]);
    t.cancel(false);
    t.answer(HookAnswer::RequestError(Ok(Recovery::Retry)));
    assert_eq!(t.calls.len(), 1, "no second CallModel");
    assert_lines(
        &t.log_from(8),
        &[step_end(8, 1, 1), turn_end(9, 1, ABORTED_USER)],
    );
}

#[test]
fn v20_thrown_error_in_agent_request() {
    for (error, f) in [
        (
            HookError::llm("MIDDLEWARE", "middleware failed"),
            r#"{"message":"middleware failed","code":"MIDDLEWARE"}"#,
        ),
        (HookError::msg("x"), r#"{"message":"x","code":"UNKNOWN"}"#),
    ] {
        let mut t = T::f0();
        t.defer("request");
        t.followup(&m1());
        t.take_trace();
        t.answer(HookAnswer::Request(Err(error.clone())));
        assert_lines(
            &t.log_from(3),
            &[
                step_start(3, 1, 1),
                user_message(4, &m1()),
                step_end(5, 1, 1),
                turn_end(6, 1, &format!(r#"{{"kind":"error","error":{f}}}"#)),
            ],
        );
        let trace = t.take_trace();
        assert!(trace[0].starts_with("error 1/1 "), "{trace:?}");
        assert_eq!(trace[1], "status idle");
        assert!(!t.seen().iter().any(|s| s.starts_with("request-error")));
    }
}

#[test]
fn v21_pre_step_throws_with_second_followup_queued() {
    let mut t = T::f0();
    t.defer("assemble");
    t.defer("pre-step");
    t.followup(&m1());
    t.followup(&m2());
    t.answer(HookAnswer::Assemble(Ok(assembly_f0())));
    t.take_trace();
    t.answer(HookAnswer::PreStep(Err(HookError::msg(
        "prompt hook broke",
    ))));
    assert_eq!(
        t.take_trace(),
        ["error 1/0 UNKNOWN: prompt hook broke", "status idle"]
    );
    assert_lines(
        &t.log(),
        &[
            insert(0, "next-turn", 0, &m1()),
            turn_start(1, 1),
            claim(2, "next-turn", 1),
            insert(3, "next-turn", 0, &m2()),
            turn_end(
                4,
                1,
                r#"{"kind":"error","error":{"message":"prompt hook broke","code":"UNKNOWN"}}"#,
            ),
        ],
    );
    assert_eq!(
        t.agent.inbox().list(InboxTarget::NextTurn)[0].id.as_str(),
        "m2"
    );
    assert_eq!(
        t.statuses,
        [
            dsh_core::agent::AgentStatus::Running,
            dsh_core::agent::AgentStatus::Idle
        ]
    );
}

#[test]
fn v22_empty_response() {
    let mut t = T::f0();
    t.followup(&m1());
    t.model(&[finish(FinishReason::Stop)]);
    assert_lines(
        &t.log_from(8),
        &[
            assistant(8, 1, 1, "A1", "[]", "mock", None, 7..8),
            step_end(9, 1, 1),
            turn_end(10, 1, COMPLETED),
        ],
    );
    assert_eq!(t.derived(), ["m1"]);
    // Zero chunks: the same without #7, and `sourceEventSeqs: []`.
    let mut t = T::f0();
    t.followup(&m1());
    t.model(&[]);
    assert_lines(
        &t.log_from(7),
        &[
            assistant(7, 1, 1, "A1", "[]", "mock", None, 0..0),
            step_end(8, 1, 1),
            turn_end(9, 1, COMPLETED),
        ],
    );
}

#[test]
fn v23_pre_step_reject_with_second_prompt_queued() {
    let mut t = T::f0();
    t.defer("assemble");
    t.followup(&m1());
    t.followup(&m2());
    t.undefer("assemble");
    t.script().pre_step = Some(Box::new(|p, d| {
        Ok(if p.turn == 1 {
            PreStepDecision::Reject
        } else {
            d
        })
    }));
    t.answer(HookAnswer::Assemble(Ok(assembly_f0())));
    assert_lines(
        &t.log_from(3),
        &[
            insert(3, "next-turn", 0, &m2()),
            turn_end(4, 1, r#"{"kind":"blocked"}"#),
        ],
    );
    let trace = t.take_trace();
    assert_eq!(trace.last().unwrap(), "status idle");
    assert!(!trace.iter().any(|s| s.starts_with("error")));
    t.followup(&m3());
    t.model(&text("two"));
    t.model(&text("three"));
    let log = t.log();
    assert_lines(
        &log[5..10],
        &[
            insert(5, "next-turn", 1, &m3()),
            turn_start(6, 2),
            claim(7, "next-turn", 1),
            step_start(8, 2, 1),
            user_message(9, &m2()),
        ],
    );
    assert!(
        log.iter().any(|l| l == &user_message(23, &m3())),
        "{log:#?}"
    );
}

#[test]
fn v24_pre_step_rewrites_the_prompt_and_adds_context() {
    let mut t = T::f0();
    t.script().pre_step = Some(Box::new(|_, _| {
        Ok(PreStepDecision::Enter(vec![user("m1", "REWRITTEN"), x1()]))
    }));
    t.followup(&m1());
    assert_lines(
        &t.log_from(3),
        &[
            step_start(3, 1, 1),
            user_message(4, &user("m1", "REWRITTEN")),
            user_message(5, &x1()),
            header(6, "initial", "mock", ""),
            context(7, "mock"),
        ],
    );
    let texts: Vec<String> = t.calls[0]
        .request
        .messages
        .iter()
        .map(|m| m.content[0].as_text().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["REWRITTEN", "context one"]);
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn v25_unknown_tool() {
    let mut t = T::f0();
    t.followup(&m1());
    t.model(&call("c1", "nope", "{}"));
    assert!(t.tools.is_empty());
    assert_lines(
        &t.log_from(13),
        &[
            tool_call(13, 1, 1, "c1", "nope", "{}"),
            tool_result(
                14,
                1,
                1,
                "R1",
                "c1",
                "Error: unknown tool \"nope\"",
                true,
                Some(("ToolNotFoundError", "UNKNOWN_TOOL")),
                13,
            ),
            step_end(15, 1, 1),
            step_start(16, 1, 2),
        ],
    );
    assert!(t.seen().contains(&"pre-execute c1".to_string()));
    assert!(t.seen().contains(&"post-execute c1".to_string()));
    t.model(&text("sorry"));
    assert!(t.log().last().unwrap().contains("completed"));
}

#[test]
#[cfg_attr(
    not(all(feature = "tool-schema", feature = "error-texts")),
    ignore = "needs the `tool-schema`, `error-texts` features"
)]
fn v26_invalid_json_arguments() {
    let mut t = T::with_tools(vec![echo()]);
    t.followup(&m1());
    t.model(&call("c1", "echo", "{\"text\": "));
    assert!(t.tools.is_empty(), "the body never runs");
    assert_eq!(
        t.log()[14],
        tool_result(
            14,
            1,
            1,
            "R1",
            "c1",
            "Error: invalid arguments: \"arguments\" must be an object",
            true,
            Some(("ToolArgsError", "INVALID_ARGS")),
            13,
        )
    );
    assert!(t.log()[16].contains("step/start"));
    // Variant: `{}` for an echo whose `text` is required.
    let mut strict = echo();
    strict.schema.parameters = serde_json::json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]});
    let mut t = T::with_tools(vec![strict]);
    t.followup(&m1());
    t.model(&call("c1", "echo", "{}"));
    assert!(
        t.log()[14].contains(r#"Error: invalid arguments: missing required property \"text\""#)
    );
}

#[test]
fn v27_pre_execute_deny() {
    let mut t = T::with_tools(vec![plain_tool("danger")]);
    t.script().pre_execute = Some(Box::new(|_| {
        Ok(PreToolDecision::Deny {
            reason: "blocked dangerous tool".into(),
        })
    }));
    t.followup(&m1());
    t.model(&call("c1", "danger", "{}"));
    assert!(t.tools.is_empty());
    assert_eq!(
        t.log()[14],
        tool_result(
            14,
            1,
            1,
            "R1",
            "c1",
            "Error: blocked dangerous tool",
            true,
            None,
            13
        )
    );
    assert!(t.seen().contains(&"post-execute c1".to_string()));
    assert!(t.log()[16].contains("step/start"));
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn v27_approval_outcomes() {
    let cases = [
        (
            Some(ApprovalOutcome::Rejected),
            "Error: the user rejected tool \"danger\"",
        ),
        (
            Some(ApprovalOutcome::Cancelled),
            "Error: approval for tool \"danger\" was cancelled",
        ),
        (
            Some(ApprovalOutcome::Unavailable),
            "Error: tool \"danger\" requires approval, but no approval channel is available",
        ),
        (
            None,
            "Error: tool \"danger\" requires approval (not yet supported)",
        ),
    ];
    for (outcome, text) in cases {
        let mut t = T::with_tools(vec![plain_tool("danger")]);
        t.script().approval = outcome;
        t.script().pre_execute = Some(Box::new(|_| Ok(PreToolDecision::Ask { reason: None })));
        t.followup(&m1());
        t.model(&call("c1", "danger", "{}"));
        let escaped = serde_json::to_string(text).unwrap();
        assert!(
            t.log()[14].contains(escaped.trim_matches('"')),
            "{}",
            t.log()[14]
        );
        assert!(!t.log()[14].contains(r#""error""#));
    }
    // Allowed once: the body runs.
    let mut t = T::with_tools(vec![plain_tool("danger")]);
    t.script().approval = Some(ApprovalOutcome::AllowedOnce);
    t.script().pre_execute = Some(Box::new(|_| Ok(PreToolDecision::Ask { reason: None })));
    t.followup(&m1());
    t.model(&call("c1", "danger", "{}"));
    assert_eq!(t.tools.len(), 1);
}

#[test]
fn v28_tool_concludes_the_turn() {
    let mut t = T::with_tools(vec![plain_tool("finalize")]);
    t.followup(&m1());
    t.model(&call("c1", "finalize", "{}"));
    t.tool(echo_result("done").concluding());
    assert_eq!(t.calls.len(), 1, "exactly one CallModel");
    assert_lines(
        &t.log_from(14),
        &[
            tool_result(14, 1, 1, "R1", "c1", "done", false, None, 13),
            step_end(15, 1, 1),
            turn_end(16, 1, COMPLETED),
        ],
    );
    // Variant: steering arrives while c1 runs → step 2 with [s1].
    let mut t = T::with_tools(vec![plain_tool("finalize")]);
    t.followup(&m1());
    t.model(&call("c1", "finalize", "{}"));
    t.steer(&s1());
    t.tool(echo_result("done").concluding());
    assert_eq!(t.calls.len(), 2);
    t.model(&text("ok"));
    assert_eq!(t.log().iter().filter(|l| l.contains("turn/end")).count(), 1);
    // Variant: the concluding result carries additionalContexts [x1].
    let mut t = T::with_tools(vec![plain_tool("finalize")]);
    t.followup(&m1());
    t.model(&call("c1", "finalize", "{}"));
    t.tool(echo_result("done").concluding().with_contexts(vec![x1()]));
    assert_eq!(t.calls.len(), 2);
    let last: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(last, ["m1", "A1", "R1", "x1"]);
}

#[test]
fn v29_model_switch_on_step_two() {
    let mut t = T::with_tools(vec![echo()]);
    t.script().request = Some(Box::new(|_, step, seed| {
        Ok(if step == 2 {
            LlmCallConfig::new("mock", "other")
        } else {
            seed
        })
    }));
    t.followup(&m1());
    t.model(&call("c1", "echo", r#"{"text":"ping"}"#));
    t.tool(echo_result("echo: ping"));
    let tools = r#"[{"name":"echo","description":"Echo text","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}]"#;
    assert_lines(
        &t.log_from(16),
        &[
            step_start(16, 1, 2),
            header(17, "change", "other", tools),
            context(18, "other"),
        ],
    );
    assert_eq!(t.calls[1].request.model, "other");
    t.model(&text("done"));
    assert!(t.log()[24].contains(r#""model":"other"},"id":"A2""#));
    // The next turn's seed comes from the folded header.
    t.followup(&m2());
    assert!(
        t.seen()
            .contains(&r#"request 2/1 {"provider":"mock","model":"other"}"#.to_string())
    );
}

#[test]
fn v30_resume_with_a_parked_prompt() {
    // Build the stored log: a completed turn, then a parked prompt.
    let mut t = T::f0();
    t.followup(&m1());
    t.model(&text("one"));
    let p = user("p", "parked");
    t.send(&p, InboxTarget::NextTurn, false);
    let events = t.agent.into_session().into_events();
    let stored = events.len() as u64;
    let session = Session::from_seed(SessionHeader::new("a1", 0), events, 5000).unwrap();
    let mut t = T::over(f0_config(vec![]), session);
    assert_eq!(t.agent.status(), dsh_core::agent::AgentStatus::Idle);
    assert_eq!(
        t.agent.inbox().list(InboxTarget::NextTurn)[0].id.as_str(),
        "p"
    );
    assert!(t.agent.poll().is_none(), "no effects on construction");
    let m1b = user("m1b", "hi again");
    t.followup(&m1b);
    let k = stored + 1; // after session/end-seed
    assert_eq!(
        t.take_trace()[..3],
        ["inserted m1b", "status running", "claimed p@2"]
    );
    t.model(&text("two"));
    t.model(&text("three"));
    let log = t.log();
    assert!(log[stored as usize].contains("session/end-seed"));
    assert_lines(
        &log[k as usize..k as usize + 6],
        &[
            insert(k, "next-turn", 1, &m1b),
            turn_start(k + 1, 2),
            claim(k + 2, "next-turn", 1),
            step_start(k + 3, 2, 1),
            user_message(k + 4, &p),
            header(k + 5, "resume", "mock", ""),
        ],
    );
    assert!(!log[k as usize + 6].contains("request/context"));
    assert_eq!(
        log.iter().filter(|l| l.contains("request/header")).count(),
        2
    );
    assert!(
        log.last()
            .unwrap()
            .contains(r#"{"turn":3,"reason":{"kind":"completed"}}"#)
    );
    assert_eq!(t.take_trace().last().unwrap(), "status idle");
}

#[test]
fn runner_failure_leaves_the_call_open() {
    // LC-36: ToolRunnerFailed writes no result and ends the turn in error.
    let mut t = T::with_tools(vec![plain_tool("slow")]);
    t.followup(&m1());
    t.model(&call("c1", "slow", "{}"));
    let token = t.tools[0].token;
    let now = t.tick();
    t.agent
        .handle_tool_failure(now, token, HookError::msg("runner died"))
        .unwrap();
    while t.agent.poll().is_some() {}
    let log = t.log();
    assert!(log[13].contains("tool/call"));
    assert_lines(
        &log[14..],
        &[
            step_end(14, 1, 1),
            turn_end(
                15,
                1,
                r#"{"kind":"error","error":{"message":"runner died","code":"UNKNOWN"}}"#,
            ),
        ],
    );
}

#[test]
fn impossible_inputs_are_refused_and_change_nothing() {
    use dsh_core::agent::InputError;
    let mut t = T::f0();
    assert_eq!(
        t.agent.handle_chunk(
            Time::from_millis(1),
            AttemptId::new(7),
            StreamChunk::finish(FinishReason::Stop)
        ),
        Err(InputError::NoOpenStream)
    );
    assert_eq!(
        t.agent
            .handle_stream_end(Time::from_millis(1), AttemptId::new(7)),
        Err(InputError::NoOpenStream)
    );
    assert_eq!(
        t.agent.handle_tool_result(
            Time::from_millis(1),
            ToolToken::new(3),
            ToolOutcome::error("x")
        ),
        Err(InputError::UnknownToolCall {
            token: ToolToken::new(3)
        })
    );
    assert_eq!(
        t.agent
            .complete_hook(Time::from_millis(1), 9, HookAnswer::TurnStopping(Ok(()))),
        Err(InputError::UnknownHook { id: 9 })
    );
    // A spurious timer wake-up is harmless (no timer armed): Ok, no effect.
    assert_eq!(t.agent.handle_timeout(Time::from_millis(1)), Ok(()));
    assert!(t.agent.session().is_empty());
    assert!(t.agent.poll().is_none());
    // A duplicate pending id (IB-1).
    t.inject(&x1());
    assert_eq!(
        t.agent.inject(Time::from_millis(2), x1()),
        Err(InputError::DuplicateMessage("x1".into()))
    );
    // A hook answer of the wrong kind.
    t.defer("assemble");
    t.followup(&m1());
    let (id, _) = t.pending[0].clone();
    let len = t.agent.session().len();
    assert!(matches!(
        t.agent
            .complete_hook(Time::from_millis(3), id, HookAnswer::TurnStopping(Ok(()))),
        Err(InputError::HookMismatch { .. })
    ));
    assert_eq!(t.agent.session().len(), len);
    // Appending a loop-owned type is refused.
    assert!(matches!(
        t.agent.append_event(
            Time::from_millis(4),
            dsh_core::session::EventData::plugin("turn/start", &serde_json::json!({"turn":9})),
            None
        ),
        Err(InputError::LoopOwnedType(_))
    ));
    let _ = start_v01;
    let _ = ContentBlock::text("");
}
