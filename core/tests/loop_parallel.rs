//! Parallel tool groups (loop.md LC-24, TL-15): calls of tools marked
//! concurrency-safe start as a rolling pool of at most
//! `maxParallelToolCalls`; `tool/call` at each start and `tool/result` in
//! call order; exclusive calls stay barriers (LC-23); cancel (LC-25), a
//! failing or timed-out member, deferred policy seams, and determinism.

mod loop_support;

use dsh_core::agent::ToolToken;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{
    AgentConfig, HookAnswer, HookError, InputError, PostToolDecision, PreToolDecision,
};
use dsh_core::{ContentBlock, StreamChunk};
use loop_support::*;
use serde_json::{Value, json};

/// `read`: a typed tool marked concurrency-safe (TL-16).
fn read() -> ToolDefinition {
    let mut d = ToolDefinition::typed(
        "read",
        "Read a file",
        json!({"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}),
    );
    d.concurrency_safe = true;
    d
}

fn config(limit: usize) -> AgentConfig {
    let mut c = f0_config(vec![read(), plain_tool("bash")]);
    c.max_parallel_tool_calls = limit;
    c
}

/// One response with these calls `(id, name, args)`, in order.
fn calls(list: &[(&str, &str, &str)]) -> Vec<StreamChunk> {
    let mut out = Vec::new();
    for (i, (id, name, args)) in list.iter().enumerate() {
        out.push(StreamChunk::BlockStart {
            index: i as u64,
            block_type: "tool-call".into(),
        });
        out.push(StreamChunk::block_end(
            i as u64,
            ContentBlock::tool_call(*id, *name, *args),
        ));
    }
    out.push(usage());
    out.push(finish(dsh_core::FinishReason::ToolCalls));
    out
}

fn reads(ids: &[&'static str]) -> Vec<(&'static str, &'static str, &'static str)> {
    ids.iter()
        .map(|id| (*id, "read", r#"{"file_path":"f"}"#))
        .collect()
}

/// Starts a turn whose first response makes `list`.
fn start(limit: usize, list: &[(&str, &str, &str)]) -> T {
    let mut t = T::with(config(limit));
    t.followup(&m1());
    t.model(&calls(list));
    t
}

/// The tool events from `seq` on, briefly: `call a`, `result a ok`,
/// `result b ABORTED`, and the step/turn closers.
fn tool_events(t: &T, from: usize) -> Vec<String> {
    t.agent.session().events()[from..]
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(&e.to_json()).unwrap();
            let d = &v["data"];
            match v["type"].as_str().unwrap() {
                "tool/call" => format!("call {}", d["callId"].as_str().unwrap()),
                "tool/result" => {
                    let block = &d["message"]["content"][0];
                    let id = block["toolCallId"].as_str().unwrap();
                    let how = if block["isError"] == json!(true) {
                        d["error"]["code"].as_str().unwrap_or("error").to_string()
                    } else {
                        "ok".to_string()
                    };
                    format!("result {id} {how}")
                }
                "turn/end" => format!("turn/end {}", d["reason"]["kind"].as_str().unwrap()),
                other => other.to_string(),
            }
        })
        .collect()
}

/// Seq of the first `tool/call`.
fn first_call(t: &T) -> usize {
    t.agent
        .session()
        .events()
        .iter()
        .position(|e| e.event_type() == "tool/call")
        .expect("a tool/call")
}

fn token(t: &T, call_id: &str) -> ToolToken {
    t.tools
        .iter()
        .find(|e| e.call_id.0 == call_id)
        .unwrap_or_else(|| panic!("{call_id} was not executed"))
        .token
}

fn result(t: &mut T, call_id: &str, outcome: ToolOutcome) {
    let token = token(t, call_id);
    let now = t.tick();
    t.agent.handle_tool_result(now, token, outcome).unwrap();
    t.drain();
}

fn executed(t: &T) -> Vec<String> {
    t.tools.iter().map(|e| e.call_id.0.clone()).collect()
}

#[test]
fn lc24_group_starts_every_call_then_commits_results_in_call_order() {
    let mut t = start(10, &reads(&["a", "b", "c"]));
    let from = first_call(&t);
    // Every body is out before any result: three tool/calls, no result.
    assert_eq!(executed(&t), ["a", "b", "c"]);
    assert_eq!(tool_events(&t, from), ["call a", "call b", "call c"]);
    // Results settle in reverse order; nothing commits before `a`.
    result(&mut t, "c", echo_result("C"));
    result(&mut t, "b", echo_result("B"));
    assert_eq!(tool_events(&t, from), ["call a", "call b", "call c"]);
    assert_eq!(t.calls.len(), 1);
    result(&mut t, "a", echo_result("A"));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "call c",
            "result a ok",
            "result b ok",
            "result c ok",
            "step/end",
            "step/start",
        ]
    );
    // Each result cites its own call (LC-23 step 4) and the follow-up
    // request sees them in call order.
    let events = t.agent.session().events();
    for (k, id) in ["a", "b", "c"].iter().enumerate() {
        let r = &events[from + 3 + k];
        assert_eq!(
            r.source_event_seqs(),
            Some(&[(from + k) as u64][..]),
            "{id}"
        );
    }
    assert_eq!(t.calls.len(), 2);
    // Post-execute ran in model order (LC-24), though bodies ended c, b, a.
    let posts: Vec<String> = t
        .seen()
        .into_iter()
        .filter(|s| s.starts_with("post-execute"))
        .collect();
    assert_eq!(
        posts,
        ["post-execute a", "post-execute b", "post-execute c"]
    );
}

#[test]
fn lc24_the_pool_rolls_at_max_parallel_tool_calls() {
    let mut t = start(2, &reads(&["a", "b", "c", "d"]));
    let from = first_call(&t);
    assert_eq!(executed(&t), ["a", "b"]);
    // `b` settles first: it waits for `a`; no slot frees up.
    result(&mut t, "b", echo_result("B"));
    assert_eq!(executed(&t), ["a", "b"]);
    // `a` commits, then the settled `b` (commits go first); two slots
    // free, `c` and `d` start.
    result(&mut t, "a", echo_result("A"));
    assert_eq!(executed(&t), ["a", "b", "c", "d"]);
    result(&mut t, "d", echo_result("D"));
    result(&mut t, "c", echo_result("C"));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "result a ok",
            "result b ok",
            "call c",
            "call d",
            "result c ok",
            "result d ok",
            "step/end",
            "step/start",
        ]
    );
}

#[test]
fn lc23_exclusive_calls_are_barriers_and_the_default_for_unmarked_tools() {
    let list = [
        ("a", "read", r#"{"file_path":"f"}"#),
        ("b", "read", r#"{"file_path":"f"}"#),
        ("x", "bash", "{}"),
        ("c", "read", r#"{"file_path":"f"}"#),
        ("d", "read", r#"{"file_path":"f"}"#),
    ];
    let mut t = start(10, &list);
    let from = first_call(&t);
    assert_eq!(executed(&t), ["a", "b"]);
    result(&mut t, "a", echo_result("A"));
    assert_eq!(executed(&t), ["a", "b"], "bash waits for the group");
    result(&mut t, "b", echo_result("B"));
    assert_eq!(executed(&t), ["a", "b", "x"]);
    result(&mut t, "x", echo_result("X"));
    assert_eq!(executed(&t), ["a", "b", "x", "c", "d"]);
    result(&mut t, "c", echo_result("C"));
    result(&mut t, "d", echo_result("D"));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "result a ok",
            "result b ok",
            "call x",
            "result x ok",
            "call c",
            "call d",
            "result c ok",
            "result d ok",
            "step/end",
            "step/start",
        ]
    );
}

#[test]
#[cfg_attr(
    not(feature = "tool-schema"),
    ignore = "needs the `tool-schema` feature"
)]
fn tl15_a_call_whose_arguments_do_not_validate_is_exclusive() {
    // The second `read` lacks `file_path`: not parallel (TL-15), so it
    // waits for `a` and ends the group; `c` waits for it in turn.
    let list = [
        ("a", "read", r#"{"file_path":"f"}"#),
        ("b", "read", "{}"),
        ("c", "read", r#"{"file_path":"f"}"#),
    ];
    let mut t = start(10, &list);
    let from = first_call(&t);
    assert_eq!(executed(&t), ["a"]);
    result(&mut t, "a", echo_result("A"));
    // `b` fails validation before any body runs; then `c` starts.
    assert_eq!(executed(&t), ["a", "c"]);
    result(&mut t, "c", echo_result("C"));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "result a ok",
            "call b",
            "result b INVALID_ARGS",
            "call c",
            "result c ok",
            "step/end",
            "step/start",
        ]
    );
}

#[test]
fn lc25_cancel_during_a_group_drains_started_calls_then_skips_the_rest() {
    let mut t = start(2, &reads(&["a", "b", "c"]));
    let from = first_call(&t);
    assert_eq!(executed(&t), ["a", "b"]);
    t.cancel(false);
    assert!(t.take_trace().iter().any(|l| l.starts_with("abort")));
    // Nothing more starts; `b`'s success after the cancel becomes an
    // abort result (TL-9 step 10); `a` reports its own abort.
    result(&mut t, "b", echo_result("B"));
    assert_eq!(executed(&t), ["a", "b"]);
    assert_eq!(tool_events(&t, from), ["call a", "call b"]);
    result(&mut t, "a", ToolOutcome::aborted());
    assert_eq!(executed(&t), ["a", "b"], "c never runs");
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "result a ABORTED",
            "result b ABORTED",
            "call c",
            "result c ABORTED_BEFORE_DISPATCH",
            "step/end",
            "turn/end aborted",
        ]
    );
    // A result for a call that no longer runs is a benign refusal.
    let late = t
        .agent
        .handle_tool_result(t.now, token(&t, "a"), echo_result("late"));
    assert_eq!(
        late,
        Err(InputError::StaleToolCall {
            token: token(&t, "a")
        })
    );
    assert!(late.unwrap_err().is_benign());
}

#[test]
fn tl14_a_member_that_times_out_fails_alone() {
    let mut t = start(10, &reads(&["a", "b", "c"]));
    let from = first_call(&t);
    result(&mut t, "a", echo_result("A"));
    result(&mut t, "c", echo_result("C"));
    // The shell's timer fired for `b` (TL-14): an error result.
    result(
        &mut t,
        "b",
        ToolOutcome::coded_error(
            "tool \"read\" timed out after 5 ms",
            "TimeoutError",
            "TIMEOUT",
        ),
    );
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "call c",
            "result a ok",
            "result b TIMEOUT",
            "result c ok",
            "step/end",
            "step/start",
        ]
    );
}

#[test]
fn lc36_a_runner_failure_in_a_group_waits_for_the_other_bodies_and_writes_no_result() {
    let mut t = start(10, &reads(&["a", "b", "c"]));
    let from = first_call(&t);
    let now = t.tick();
    t.agent
        .handle_tool_failure(now, token(&t, "b"), HookError::msg("runner died"))
        .unwrap();
    t.drain();
    // `a` and `c` still run: the turn waits for them.
    assert_eq!(tool_events(&t, from), ["call a", "call b", "call c"]);
    result(&mut t, "a", echo_result("A"));
    assert_eq!(tool_events(&t, from), ["call a", "call b", "call c"]);
    result(&mut t, "c", echo_result("C"));
    assert_eq!(
        tool_events(&t, from),
        ["call a", "call b", "call c", "step/end", "turn/end error"]
    );
    assert!(t.trace.iter().any(|l| l.contains("runner died")));
}

#[test]
fn lc24_pre_execute_runs_in_model_order_before_the_next_call_starts() {
    let mut t = T::with(config(10));
    t.defer("pre-execute");
    t.followup(&m1());
    t.model(&calls(&reads(&["a", "b"])));
    let from = first_call(&t);
    // `b` has not started: `a`'s policy is pending.
    assert_eq!(tool_events(&t, from), ["call a"]);
    assert_eq!(t.pending.len(), 1);
    t.answer(HookAnswer::ToolPreExecute(Ok(PreToolDecision::Allow)));
    // `a`'s body runs; `b` starts and asks its own policy.
    assert_eq!(executed(&t), ["a"]);
    assert_eq!(tool_events(&t, from), ["call a", "call b"]);
    t.undefer("pre-execute");
    t.answer(HookAnswer::ToolPreExecute(Ok(PreToolDecision::Deny {
        reason: "no".into(),
    })));
    // `b` was denied; its result waits for `a`.
    assert_eq!(tool_events(&t, from), ["call a", "call b"]);
    result(&mut t, "a", echo_result("A"));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "result a ok",
            "result b error",
            "step/end",
            "step/start"
        ]
    );
}

#[test]
fn lc24_a_deferred_post_execute_holds_later_results() {
    let mut t = T::with(config(10));
    t.defer("post-execute");
    t.followup(&m1());
    t.model(&calls(&reads(&["a", "b"])));
    let from = first_call(&t);
    result(&mut t, "b", echo_result("B"));
    // Post-execute runs for the oldest call first: none asked yet.
    assert!(t.pending.is_empty());
    result(&mut t, "a", echo_result("A"));
    assert_eq!(t.pending.len(), 1);
    assert_eq!(tool_events(&t, from), ["call a", "call b"]);
    t.answer(HookAnswer::ToolPostExecute(Ok(PostToolDecision::accept())));
    assert_eq!(tool_events(&t, from), ["call a", "call b", "result a ok"]);
    t.answer(HookAnswer::ToolPostExecute(Ok(PostToolDecision::accept())));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "result a ok",
            "result b ok",
            "step/end",
            "step/start"
        ]
    );
    let posts: Vec<String> = t
        .seen()
        .into_iter()
        .filter(|s| s.starts_with("post-execute"))
        .collect();
    assert_eq!(posts, ["post-execute a", "post-execute b"]);
}

/// One scripted run with results out of order; the whole log as JSONL.
fn scripted_log() -> String {
    let mut t = start(2, &reads(&["a", "b", "c"]));
    result(&mut t, "b", echo_result("B"));
    result(&mut t, "a", echo_result("A"));
    result(&mut t, "c", echo_result("C"));
    t.model(&text("done"));
    t.agent
        .session()
        .events()
        .iter()
        .map(|e| e.to_json() + "\n")
        .collect()
}

#[test]
fn lc24_same_script_twice_gives_a_byte_identical_log() {
    let a = scripted_log();
    let b = scripted_log();
    assert!(a.contains("\"type\":\"turn/end\""));
    assert_eq!(a, b);
}

#[test]
fn lc24_a_pending_approval_holds_the_next_start_but_not_running_bodies() {
    let mut t = T::with(config(10));
    t.script().pre_execute = Some(Box::new(|exec| {
        Ok(if exec.call_id.as_str() == "b" {
            PreToolDecision::Ask { reason: None }
        } else {
            PreToolDecision::Allow
        })
    }));
    t.defer("approval");
    t.followup(&m1());
    t.model(&calls(&reads(&["a", "b", "c"])));
    let from = first_call(&t);
    // `a` runs; `b` waits for its approval, so `c` has not started.
    assert_eq!(executed(&t), ["a"]);
    assert_eq!(tool_events(&t, from), ["call a", "call b"]);
    result(&mut t, "a", echo_result("A"));
    assert_eq!(tool_events(&t, from), ["call a", "call b", "result a ok"]);
    t.answer(HookAnswer::ToolApproval(Ok(
        dsh_core::agent::ApprovalOutcome::AllowedOnce,
    )));
    assert_eq!(executed(&t), ["a", "b", "c"]);
    result(&mut t, "c", echo_result("C"));
    result(&mut t, "b", echo_result("B"));
    assert_eq!(
        tool_events(&t, from),
        [
            "call a",
            "call b",
            "result a ok",
            "call c",
            "result b ok",
            "result c ok",
            "step/end",
            "step/start"
        ]
    );
}
