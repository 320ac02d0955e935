//! The seam table's promise to an embedder of the core: claiming a seam
//! and answering its `Output::Hook` with the default value it carries
//! writes the same log as leaving the seam unclaimed (the machine then
//! applies the spec default inline). Checked over a turn with a parallel
//! tool group whose bodies finish out of order, a retried request error
//! and a denied call, so every step and tool seam is raised.

mod loop_support;

use dsh_core::Time;
use dsh_core::agent::ToolToken;
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{Agent, AgentConfig, HookCall, Output, Seams};
use dsh_core::session::{Session, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, StreamChunk};
use loop_support::*;
use serde_json::json;

fn look() -> dsh_core::agent::tools::ToolDefinition {
    let mut d = dsh_core::agent::tools::ToolDefinition::typed(
        "look",
        "Look",
        json!({"type":"object","properties":{"at":{"type":"string"}}}),
    );
    d.concurrency_safe = true;
    d
}

/// One response making tool calls `ids` (all `look`), in order.
fn looks(ids: &[&str]) -> Vec<StreamChunk> {
    let mut out = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        out.push(StreamChunk::block_start(i as u64, "tool-call"));
        out.push(StreamChunk::block_end(
            i as u64,
            ContentBlock::tool_call(*id, "look", r#"{"at":"x"}"#),
        ));
    }
    out.push(usage());
    out.push(finish(FinishReason::ToolCalls));
    out
}

/// Drives one turn: four parallel calls (limit 2), bodies answered newest
/// first; then text. Every `Output::Hook` is answered with its own value.
fn run(seams: Seams) -> (Vec<String>, usize) {
    let mut config: AgentConfig = f0_config(vec![look()]);
    config.max_parallel_tool_calls = 2;
    config.seams = seams;
    let mut agent = Agent::new(config, Session::new(SessionHeader::new("a1", 0))).unwrap();
    let mut now = Time::from_millis(1_000);
    agent.followup(now, m1()).unwrap();
    let mut replies = vec![text("done"), looks(&["a", "b", "c", "d"])];
    let mut bodies: Vec<ToolToken> = Vec::new();
    let mut hooks = 0;
    loop {
        now += 1;
        let mut progressed = false;
        while let Some(out) = agent.poll() {
            match out {
                Output::Hook { id, call } => {
                    hooks += 1;
                    assert!(seams.contains(call.seam()), "an unclaimed seam was raised");
                    let answer = match call {
                        HookCall::Prepare { mut value } => {
                            value.retry_policy = Some(f0_policy());
                            dsh_core::agent::HookAnswer::Prepare(Ok(value))
                        }
                        other => other.answer(),
                    };
                    agent.complete_hook(now, id, answer).unwrap();
                    progressed = true;
                }
                Output::CallModel(call) => {
                    for chunk in replies.pop().expect("a scripted reply") {
                        agent.handle_chunk(now, call.attempt, chunk).unwrap();
                    }
                    agent.handle_stream_end(now, call.attempt).unwrap();
                    progressed = true;
                }
                Output::ExecuteTool(exec) => bodies.push(exec.token),
                _ => {}
            }
        }
        if let Some(token) = bodies.pop() {
            let outcome = ToolOutcome::success(vec![ContentBlock::text("seen")]);
            agent.handle_tool_result(now, token, outcome).unwrap();
            continue;
        }
        if !progressed {
            break;
        }
    }
    assert!(agent.is_quiescent());
    let log = agent
        .session()
        .events()
        .iter()
        .map(|e| {
            let mut v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
            v.as_object_mut().unwrap().remove("time");
            v.to_string()
        })
        .collect();
    (log, hooks)
}

#[test]
fn a_claimed_seam_answered_with_its_default_logs_as_an_unclaimed_one() {
    let (inline, none) = run(Seams::NONE);
    assert_eq!(none, 0);
    // Every seam but the guard (a claimed guard takes a hook id, which
    // shows in no log but is not what this test is about).
    let claimed = scripted_seams();
    let (deferred, raised) = run(claimed);
    assert!(raised > 10, "only {raised} seams raised");
    assert_lines(&deferred, &inline);
    // With the guard too.
    let (all, _) = run(Seams::ALL);
    assert_lines(&all, &inline);
    assert!(inline.iter().any(|l| l.contains("tool/result")));
}
