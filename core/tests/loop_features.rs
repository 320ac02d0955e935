//! Rules beyond the vectors: the retry executor in the loop (streaming.md
//! R-8..R-18), request building (LC-12..LC-18), tool pipeline branches
//! (TL-9..TL-11), thrown errors (LC-27, LC-36), inbox edits (IB-7).

mod loop_support;

use dsh_core::Time;
use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, UNLISTED_TOOLS};
use dsh_core::agent::{
    AgentStatus, HookAnswer, HookError, InboxEdit, InboxTarget, PostToolDecision, PreToolDecision,
    Recovery,
};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, LlmFailure, StreamChunk};
use loop_support::*;
use serde_json::json;

/// The text of an error: `full`, or the fixed `short` one a build without
/// the `error-texts` feature writes instead.
fn error_text<'a>(short: &'a str, full: &'a str) -> &'a str {
    if cfg!(feature = "error-texts") {
        full
    } else {
        short
    }
}

fn fail_with(code: &str, retry_after: Option<f64>) -> StreamChunk {
    let mut f = LlmFailure::new(code, "x");
    f.provider_retry_after_ms = retry_after;
    StreamChunk::finish(FinishReason::Error { failure: f })
}

fn executor() -> T {
    let mut config = f0_config(vec![]);
    config.retry_executor = true;
    let t = T::with(config);
    t.script().policy = Some(RetryPolicy::default());
    t
}

fn wait(t: &mut T) {
    let deadline = t.agent.poll_timeout().expect("a retry timer");
    t.agent.handle_timeout(deadline).unwrap();
    t.drain();
}

fn retry_records(t: &T) -> Vec<serde_json::Value> {
    t.agent
        .session()
        .events()
        .iter()
        .filter(|e| e.event_type() == "llm/retry")
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.to_json()).unwrap()["data"].clone())
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn r18_worked_sequence_through_the_loop() {
    let mut t = executor();
    t.followup(&m1());
    t.model(&[fail_with("SERVER", None)]);
    wait(&mut t);
    t.model(&[fail_with("SERVER", None)]);
    wait(&mut t);
    t.model(&[fail_with("RATE_LIMIT", Some(2000.0))]);
    let deadline = t.agent.poll_timeout().unwrap();
    assert_eq!(deadline, t.now + 2000, "exactly the provider's delay");
    wait(&mut t);
    t.model(&[fail_with("RATE_LIMIT", Some(15000.0))]);
    // Normal mode delegates: the user hook gives up, the turn errors.
    assert!(t.seen().iter().any(|s| s == "request-error 1/1 RATE_LIMIT"));
    let r = retry_records(&t);
    let summary: Vec<(u64, f64)> = r
        .iter()
        .map(|d| (d["retry"].as_u64().unwrap(), d["delayMs"].as_f64().unwrap()))
        .collect();
    assert_eq!(summary, [(1, 500.0), (2, 1000.0), (3, 2000.0)]);
    assert!(
        r.iter().all(|d| d["retryId"] == "retry-1"),
        "one chain, one id"
    );
    let starts = t
        .agent
        .session()
        .events()
        .iter()
        .filter(|e| e.event_type() == "llm/retry-started")
        .count();
    assert_eq!(starts, 3);
    assert!(t.log().last().unwrap().contains(r#""code":"RATE_LIMIT""#));
    assert_eq!(
        t.log().iter().filter(|l| l.contains("step/start")).count(),
        1
    );
}

#[test]
fn r8_non_retryable_codes_go_to_the_hook() {
    let mut t = executor();
    t.followup(&m1());
    t.model(&[fail_with("AUTH", None)]);
    assert!(retry_records(&t).is_empty());
    assert!(t.agent.poll_timeout().is_none());
    assert!(t.log().last().unwrap().contains(r#""code":"AUTH""#));
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn r16_budget_is_per_turn_step_provider_and_policy() {
    let mut t = executor();
    t.script().policy =
        Some(RetryPolicy::resolve(Some(&json!({"mode":"normal","maxRetries":1})), "p").unwrap());
    t.followup(&m1());
    t.model(&[fail_with("SERVER", None)]);
    wait(&mut t);
    t.model(&[fail_with("SERVER", None)]);
    assert_eq!(retry_records(&t).len(), 1, "budget of one exhausted");
    assert!(t.log().last().unwrap().contains(r#""kind":"error""#));
    // A new turn counts from 1 again.
    t.followup(&m2());
    t.model(&[fail_with("SERVER", None)]);
    let r = retry_records(&t);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[1]["turn"].as_u64(), r[1]["retry"].as_u64()),
        (Some(2), Some(1))
    );
    assert_ne!(r[0]["retryId"], r[1]["retryId"], "a new chain");
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn r9_always_mode_asks_downstream_first() {
    let mut t = executor();
    t.script().policy = Some(RetryPolicy::resolve(Some(&json!({"mode":"always"})), "p").unwrap());
    t.followup(&m1());
    t.model(&[fail_with("AUTH", None)]);
    // The user hook ran first and gave up; the policy retries anyway.
    assert!(t.seen().iter().any(|s| s == "request-error 1/1 AUTH"));
    let r = retry_records(&t);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["mode"], "always");
    assert!(r[0].get("maxRetries").is_none(), "absent in always mode");
    wait(&mut t);
    // Downstream answering retry wins without a record.
    t.script().request_error = Some(Box::new(|_| Ok(Recovery::Retry)));
    t.model(&[fail_with("AUTH", None)]);
    assert_eq!(retry_records(&t).len(), 1);
    assert_eq!(t.calls.len(), 3);
}

#[test]
fn no_adapter_falls_back_without_policy() {
    let mut t = executor();
    t.defer("prepare");
    t.followup(&m1());
    t.undefer("prepare");
    t.answer(HookAnswer::Prepare(Err(HookError::llm(
        "NO_ADAPTER",
        "none",
    ))));
    assert_eq!(t.calls.len(), 1, "the proposed config is used");
    t.model(&[fail_with("SERVER", None)]);
    assert!(retry_records(&t).is_empty(), "no policy, R-7 delegates");
    assert!(t.seen().iter().any(|s| s == "request-error 1/1 SERVER"));
}

/// Feature `runtime-context` off: contexts are not sent, no snapshot.
#[cfg(not(feature = "runtime-context"))]
#[test]
fn lc12_without_runtime_context() {
    let mut config = f0_config(vec![]);
    config.contexts = vec![PromptSection::new("env", 0, "cwd=/repo")];
    let mut t = T::with(config);
    t.followup(&m1());
    let first: Vec<&str> = t.calls[0]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(first, ["m1"]);
}

#[cfg(feature = "runtime-context")]
#[test]
fn lc12_runtime_context_snapshots() {
    use dsh_core::agent::prompt::{RUNTIME_CONTEXT_CLEARED, RUNTIME_CONTEXT_HEADER};
    let mut config = f0_config(vec![]);
    config.contexts = vec![PromptSection::new("env", 0, "cwd=/repo")];
    let mut t = T::with(config);
    t.followup(&m1());
    t.model(&text("a"));
    // The first step enters the snapshot after the prompt.
    let first: Vec<&str> = t.calls[0]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(first, ["m1", "X1"]);
    let snapshot = &t.calls[0].request.messages[1];
    assert_eq!(
        snapshot.content[0].as_text().unwrap(),
        format!("{RUNTIME_CONTEXT_HEADER}cwd=/repo")
    );
    assert_eq!(
        serde_json::to_string(&snapshot.source).unwrap(),
        r#"{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt","form":"snapshot","sections":[{"name":"env","text":"cwd=/repo"}]}"#
    );
    // Unchanged context: no new message in the next turn.
    t.followup(&m2());
    let second: Vec<&str> = t.calls[1]
        .request
        .messages
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(second, ["m1", "X1", "A1", "m2"]);
    t.model(&text("b"));
    // Context removed: the cleared marker, once.
    let mut config = f0_config(vec![]);
    config.contexts = vec![];
    let session = t.agent.into_session();
    let events = session.into_events();
    let session =
        dsh_core::session::Session::restore(dsh_core::session::SessionHeader::new("a1", 0), events)
            .unwrap();
    let mut t = T::over(config, session);
    t.followup(&m3());
    let last = t.calls[0].request.messages.last().unwrap();
    assert_eq!(last.content[0].as_text().unwrap(), RUNTIME_CONTEXT_CLEARED);
    t.model(&text("c"));
    t.followup(&user("m4", "again"));
    assert_eq!(
        t.calls[1].request.messages.last().unwrap().id.as_str(),
        "m4"
    );
}

#[test]
fn lc13_seed_and_lc14_missing_provider() {
    // No provider/model anywhere: a turn error with the LC-14 text.
    let mut config = f0_config(vec![]);
    config.options.provider = None;
    let mut t = T::with(config);
    t.followup(&m1());
    assert!(t.log().last().unwrap().contains(error_text(
        "agent has no provider/model",
        r#"agent \"a1\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall"#
    )));
    // maxTokens from the options reaches the first seed.
    let mut config = f0_config(vec![]);
    config.options.max_tokens = Some(256);
    let mut t = T::with(config);
    t.followup(&m1());
    assert_eq!(t.calls[0].request.max_tokens, Some(256));
    assert!(t.log()[5].contains(r#""config":{"provider":"mock","model":"mock","maxTokens":256}"#));
}

#[test]
fn lc13_reasoning_effort_comes_from_the_folded_header() {
    let mut t = T::f0();
    t.script().request = Some(Box::new(|_, _, mut seed| {
        if seed.reasoning_effort.is_none() && seed.model == "mock" {
            seed.reasoning_effort = Some("high".into());
        }
        Ok(seed)
    }));
    t.followup(&m1());
    t.model(&text("a"));
    let events = t.agent.into_session().into_events();
    let session = dsh_core::session::Session::from_seed(
        dsh_core::session::SessionHeader::new("a1", 0),
        events,
        0,
    )
    .unwrap();
    let mut t = T::over(f0_config(vec![]), session);
    t.followup(&m2());
    assert!(t.seen().contains(
        &r#"request 2/1 {"provider":"mock","model":"mock","reasoningEffort":"high"}"#.to_string()
    ));
}

/// The tool names the first model request carried, in order.
fn first_request_tools(t: &T) -> Vec<&str> {
    t.calls[0]
        .request
        .tools
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| s.name.as_str())
        .collect()
}

/// Feature `tool-order` off: the order is not read, tools by name.
#[cfg(not(feature = "tool-order"))]
#[test]
fn lc16_without_tool_order() {
    let mut config = f0_config(vec![plain_tool("zeta"), plain_tool("alpha"), echo()]);
    config.tool_order = Some(vec!["missing".into(), UNLISTED_TOOLS.into()]);
    let mut t = T::with(config);
    t.followup(&m1());
    let names = first_request_tools(&t);
    assert_eq!(names, ["alpha", "echo", "zeta"]);
}

#[cfg(feature = "tool-order")]
#[test]
fn lc16_tool_order() {
    let mut config = f0_config(vec![plain_tool("zeta"), plain_tool("alpha"), echo()]);
    let mut t = T::with(config.clone());
    t.followup(&m1());
    let names = first_request_tools(&t);
    assert_eq!(
        names,
        ["alpha", "echo", "zeta"],
        "lexicographic, not registration order"
    );
    config.tool_order = Some(vec!["zeta".into(), UNLISTED_TOOLS.into()]);
    let mut t = T::with(config.clone());
    t.followup(&m1());
    let names = first_request_tools(&t);
    assert_eq!(names, ["zeta", "alpha", "echo"]);
    // An unknown listed tool fails assembly: turn error before any step.
    config.tool_order = Some(vec!["missing".into(), UNLISTED_TOOLS.into()]);
    let mut t = T::with(config);
    t.followup(&m1());
    assert!(!t.log().iter().any(|l| l.contains("step/start")));
    assert!(
        t.log()
            .last()
            .unwrap()
            .contains("toolOrder lists unregistered tool")
    );
    assert!(t.take_trace().iter().any(|s| s.starts_with("error 1/0")));
}

#[test]
#[cfg_attr(
    not(feature = "prompt-templates"),
    ignore = "needs the `prompt-templates` feature"
)]
fn sp3_render_failure_ends_the_turn_with_the_step_open() {
    let mut config = f0_config(vec![]);
    config
        .sections
        .push(PromptSection::new("deployment:persona", 0, "in {{cwd}}"));
    let mut t = T::with(config);
    t.followup(&m1());
    let log = t.log();
    assert!(log[3].contains("step/start"));
    assert!(log[5].contains("step/end"));
    assert!(log[6].contains(
        r#"prompt variable \"{{cwd}}\" has no value for this assembly (section \"deployment:persona\")"#
    ));
}

#[test]
fn tl11_post_execute_block_and_replace() {
    let mut t = T::with_tools(vec![echo()]);
    t.script().post_execute = Some(Box::new(|exec, _| {
        Ok(if exec.call_id.as_str() == "c1" {
            PostToolDecision::Block {
                feedback: vec![
                    ContentBlock::text("not allowed"),
                    ContentBlock::reasoning("r"),
                ],
                additional_contexts: vec![x1()],
            }
        } else {
            PostToolDecision::Accept {
                content: Some(vec![ContentBlock::text("rewritten")]),
                additional_contexts: vec![],
            }
        })
    }));
    t.followup(&m1());
    t.model(&two_calls(
        ("c1", "echo", r#"{"text":"a"}"#),
        ("c2", "echo", r#"{"text":"b"}"#),
    ));
    t.tool(echo_result("a").with_contexts(vec![x2()]));
    t.tool(echo_result("b"));
    let log = t.log();
    // Block: feedback is the content, isError, no error info; only the
    // block's own contexts survive.
    assert!(log[15].contains(r#""content":[{"type":"text","text":"not allowed"},{"type":"reasoning","text":"r"}],"isError":true"#));
    assert!(!log[15].contains(r#""error""#));
    assert!(log[16].contains(r#""id":"x1""#) && !log.iter().any(|l| l.contains(r#""id":"x2""#)));
    assert!(log[18].contains(r#""content":[{"type":"text","text":"rewritten"}],"isError":false"#));
}

#[test]
fn tl9_pre_execute_failure_skips_post_execute() {
    let mut t = T::with_tools(vec![echo()]);
    t.script().pre_execute = Some(Box::new(|_| {
        Err(HookError::coded("policy crashed", "PolicyError", "POLICY"))
    }));
    t.followup(&m1());
    t.model(&call("c1", "echo", "{}"));
    assert!(t.tools.is_empty());
    assert!(!t.seen().iter().any(|s| s.starts_with("post-execute")));
    assert!(t.log()[14].contains(r#""text":"Error: policy crashed""#));
    assert!(t.log()[14].contains(r#""error":{"name":"PolicyError","code":"POLICY"}"#));
}

#[test]
fn tl9_guard_denial_after_allow() {
    // The guard is claimed only here: it takes a hook id when deferred.
    let mut config = f0_config(vec![echo()]);
    config.seams = dsh_core::agent::Seams::TOOL_GUARD;
    let mut t = T::with(config);
    t.script().guard = Some("guarded".into());
    t.followup(&m1());
    t.model(&call("c1", "echo", "{}"));
    assert!(t.tools.is_empty());
    assert!(t.log()[14].contains(r#""text":"Error: guarded""#));
    assert!(t.seen().iter().any(|s| s == "post-execute c1"));
}

#[test]
fn tl9_deferred_approval() {
    let mut t = T::with_tools(vec![echo()]);
    t.script().pre_execute = Some(Box::new(|_| {
        Ok(PreToolDecision::Ask {
            reason: Some("risky".into()),
        })
    }));
    t.defer("approval");
    t.followup(&m1());
    t.model(&call("c1", "echo", "{}"));
    assert_eq!(t.pending.len(), 1);
    t.answer(HookAnswer::ToolApproval(Ok(
        dsh_core::agent::ApprovalOutcome::NoService,
    )));
    assert!(
        t.log()[14].contains(r#""text":"Error: risky""#),
        "the ask's reason"
    );
}

#[test]
#[cfg_attr(
    not(feature = "tool-schema"),
    ignore = "needs the `tool-schema` feature"
)]
fn tl9_output_schema_is_checked() {
    let mut tool = ToolDefinition::typed("calc", "", json!({"type":"object"}));
    tool.output_schema =
        Some(json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}));
    let mut t = T::with_tools(vec![tool]);
    t.followup(&m1());
    t.model(&call("c1", "calc", "{}"));
    t.tool(echo_result("ok").with_value(json!({"n": 1.5})));
    assert!(t.log()[14].contains(error_text(
        "Error: tool returned invalid output",
        r#"Error: tool \"calc\" returned invalid output: \"value.n\" must be an integer"#
    )));
    assert!(t.log()[14].contains(r#""code":"INVALID_TOOL_OUTPUT""#));
}

#[test]
fn lc27_model_threw_is_a_turn_error() {
    let mut t = T::f0();
    t.followup(&m1());
    let a = t.attempt();
    let now = t.tick();
    t.agent
        .handle_stream_error(now, a, HookError::msg("middleware threw"))
        .unwrap();
    t.drain();
    assert!(
        t.log()
            .last()
            .unwrap()
            .contains(r#"{"message":"middleware threw","code":"UNKNOWN"}"#)
    );
    assert!(!t.seen().iter().any(|s| s.starts_with("request-error")));
}

#[test]
fn lc36_unknown_open_block_is_a_turn_error() {
    let mut t = T::f0();
    t.followup(&m1());
    t.model(&[StreamChunk::BlockStart {
        index: 0,
        block_type: "image".into(),
    }]);
    assert!(t.log().last().unwrap().contains(error_text(
        "invalid response blocks",
        r#"cannot assemble incomplete block of type \"image\""#
    )));
}

#[test]
fn ib7_inbox_edits() {
    let mut t = T::f0();
    t.send(&m1(), InboxTarget::NextTurn, false);
    t.send(&m2(), InboxTarget::NextTurn, false);
    t.take_trace();
    let now = t.tick();
    assert!(
        t.agent
            .edit_inbox(now, InboxEdit::Replace("m1".into(), m3()))
            .unwrap()
    );
    assert!(
        t.agent
            .edit_inbox(now, InboxEdit::Remove("m2".into()))
            .unwrap()
    );
    assert!(
        !t.agent
            .edit_inbox(now, InboxEdit::Remove("zz".into()))
            .unwrap()
    );
    assert!(
        t.agent
            .edit_inbox(now, InboxEdit::Prepend(InboxTarget::NextStep, x1()))
            .unwrap()
    );
    t.drain();
    assert_lines(
        &t.log_from(2),
        &[
            ev(
                2,
                "agent/inbox/spliced",
                &format!(
                    r#"{{"target":"next-turn","start":0,"removedCount":1,"inserted":[{}],"outcome":"canceled"}}"#,
                    j(&m3())
                ),
            ),
            canceled(3, "next-turn", 1, 1),
            insert(4, "next-step", 0, &x1()),
        ],
    );
    assert_eq!(
        t.take_trace(),
        ["discarded m1", "inserted m3", "discarded m2", "inserted x1"]
    );
    assert_eq!(t.agent.status(), AgentStatus::Idle, "edits never wake");
}

#[test]
fn ib5_invalid_messages_are_refused() {
    let mut t = T::f0();
    let mut bad = m1();
    bad.id = "".into();
    assert!(t.agent.followup(Time::from_millis(1), bad).is_err());
    let assistant = dsh_core::Message::model("a", vec![], dsh_core::MessageSource::model("p", "m"));
    assert!(t.agent.followup(Time::from_millis(1), assistant).is_err());
    assert!(t.agent.session().is_empty() && t.agent.poll().is_none());
    let _ = (LlmCallConfig::new("a", "b"), ToolOutcome::error("x"));
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn empty_response_is_retried_by_the_default_policy() {
    // AC-9 + R-5: production adapters turn an empty stop into
    // EMPTY_RESPONSE, which the default policy retries in the same step.
    let mut t = executor();
    t.followup(&m1());
    t.model(&[fail_with("EMPTY_RESPONSE", None)]);
    assert_eq!(retry_records(&t).len(), 1);
    wait(&mut t);
    t.model(&text("Recovered."));
    let log = t.log();
    assert!(log[8].contains("llm/retry"));
    assert!(log[9].contains("llm/retry-started"));
    assert!(log.last().unwrap().contains("completed"));
}

#[test]
fn h2_wake_latch_without_pending_work_starts_no_empty_turn() {
    let mut config = f0_config(vec![]);
    config.wake_latch = true;
    let mut t = T::with(config);
    t.defer("turn-stopping");
    t.followup(&m1());
    t.model(&text("one"));
    t.cancel(true);
    t.followup(&m2());
    // The latched prompt is removed before the driver stops.
    let now = t.tick();
    assert!(
        t.agent
            .edit_inbox(now, InboxEdit::Remove("m2".into()))
            .unwrap()
    );
    t.drain();
    t.answer(HookAnswer::TurnStopping(Ok(())));
    assert_eq!(t.agent.status(), AgentStatus::Idle);
    assert_eq!(
        t.log().iter().filter(|l| l.contains("turn/start")).count(),
        1
    );
}
