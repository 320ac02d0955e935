//! The subagents plugin on the runtime kernel alone (no runtime, no I/O):
//! what every runtime gets. The body receives the parent's link (SA-1,
//! SA-3 boundary), a call past the depth cap is answered without running
//! the body, and a child logs its descriptor before its first step.

use dsh_core::Time;
use dsh_core::agent::tools::{ToolOutcome, ToolRegistry};
use dsh_core::session::{Session, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::{AgentConfig, Effect, IdMode, InboxTarget, Kernel, Plugin};
use dsh_subagents::{LINK_KEY, Mode, Subagents, definition};
use serde_json::{Value, json};

const NOW: Time = Time::from_millis(1_000_000);

fn kernel(depth: Option<u64>, plugin: Subagents) -> Kernel {
    let mut tools = ToolRegistry::new();
    tools.register(definition(Mode::Spawn)).unwrap();
    tools.register(definition(Mode::Fork)).unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config.tools = tools;
    config.ids = IdMode::Sequential;
    let mut header = SessionHeader::new("parent", NOW.as_millis() as u64);
    header.delegation_depth = depth;
    let plugins: Vec<Box<dyn Plugin>> = vec![Box::new(plugin)];
    let mut k = Kernel::new(config, Session::new(header), 0, plugins).unwrap();
    let hi = Message::user("u1", vec![ContentBlock::text("hi")]);
    k.send(NOW, hi, InboxTarget::NextTurn, true).unwrap();
    k
}

/// Drives the kernel: each model call gets the next reply; each tool body
/// is recorded and answered with `body`. Returns the bodies' arguments.
fn run(k: &mut Kernel, mut replies: Vec<Vec<StreamChunk>>) -> Vec<Value> {
    let mut bodies = Vec::new();
    replies.reverse();
    while let Some(effect) = k.poll() {
        match effect {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::StartModel(call) => {
                for chunk in replies.pop().expect("a scripted reply") {
                    k.model_chunk(NOW, call.attempt, chunk).unwrap();
                }
                k.model_end(NOW, call.attempt).unwrap();
            }
            Effect::StartTool { exec, .. } => {
                bodies.push(exec.arguments.clone());
                let done = ToolOutcome::success(vec![ContentBlock::text("child answer")]);
                k.tool_done(NOW, exec.token, done, Vec::new()).unwrap();
            }
            _ => {}
        }
    }
    bodies
}

fn call(name: &str) -> Vec<StreamChunk> {
    let args = json!({"description": "d", "prompt": "p"}).to_string();
    vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::block_end(0, ContentBlock::tool_call("c1", name, &args)),
        StreamChunk::finish(FinishReason::ToolCalls),
    ]
}

fn text(t: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: t.into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(t)),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

fn types(k: &Kernel) -> Vec<String> {
    k.session()
        .events()
        .iter()
        .map(|e| e.event_type().to_string())
        .collect()
}

#[test]
fn sa1_the_body_receives_the_parent_link_and_the_log_keeps_the_model_arguments() {
    let mut k = kernel(None, Subagents::default());
    // Turn 1 completes; the model delegates in turn 2.
    assert!(run(&mut k, vec![text("first")]).is_empty());
    let again = Message::user("u2", vec![ContentBlock::text("delegate")]);
    k.send(NOW, again, InboxTarget::NextTurn, true).unwrap();
    let bodies = run(&mut k, vec![call("subagent_fork"), text("done")]);
    assert_eq!(bodies.len(), 1);
    let first_end = k
        .session()
        .events()
        .iter()
        .find(|e| e.event_type() == "turn/end")
        .unwrap()
        .seq();
    assert_eq!(
        bodies[0][LINK_KEY],
        json!({"session": "parent", "depth": 0, "forkAt": first_end})
    );
    assert_eq!(bodies[0]["prompt"], "p");
    // The logged call keeps what the model sent.
    let logged = k
        .session()
        .events()
        .iter()
        .find(|e| e.event_type() == "tool/call")
        .unwrap()
        .to_json();
    assert!(!logged.contains(LINK_KEY), "{logged}");
}

#[test]
fn sa1_a_call_past_the_depth_cap_is_answered_without_the_body() {
    let mut k = kernel(Some(3), Subagents::new(3));
    let bodies = run(&mut k, vec![call("subagent"), text("ok, myself")]);
    assert!(bodies.is_empty(), "the body must not run");
    let result = k
        .session()
        .events()
        .iter()
        .find(|e| e.event_type() == "tool/result")
        .unwrap()
        .to_json();
    assert!(
        result.contains("subagent depth cap reached") && result.contains("\"isError\":true"),
        "{result}"
    );
}

#[test]
fn sa1_a_child_logs_its_descriptor_once_before_its_first_step() {
    let mut k = kernel(Some(1), Subagents::child(3, Mode::Spawn, "Label"));
    run(&mut k, vec![text("one")]);
    let again = Message::user("u2", vec![ContentBlock::text("more")]);
    k.send(NOW, again, InboxTarget::NextTurn, true).unwrap();
    run(&mut k, vec![text("two")]);
    let t = types(&k);
    let at: Vec<usize> = t
        .iter()
        .enumerate()
        .filter(|(_, t)| *t == "subagent/descriptor")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "{t:?}");
    assert_eq!(
        &t[at[0] - 1..=at[0] + 1],
        ["agent/inbox/spliced", "subagent/descriptor", "step/start"]
    );
    let data: Value = serde_json::from_str(&k.session().events()[at[0]].to_json()).unwrap();
    assert_eq!(
        data["data"],
        json!({"version": 2, "mode": "one-shot", "provider": "spawn", "label": "Label"})
    );
}

#[test]
fn a_child_is_told_it_is_a_delegated_subagent_and_a_parent_is_not() {
    for (plugin, delegated) in [
        (Subagents::child(3, Mode::Fork, "Label"), true),
        (Subagents::new(3), false),
    ] {
        let mut k = kernel(Some(1), plugin);
        run(&mut k, vec![text("one")]);
        let context = k
            .session()
            .events()
            .iter()
            .map(|e| e.to_json())
            .find(|j| j.contains("Current runtime context"));
        match context {
            Some(j) => {
                assert!(delegated, "{j}");
                assert!(j.contains(dsh_subagents::DELEGATION_SECTION), "{j}");
                assert!(j.contains("You are a delegated subagent"), "{j}");
            }
            None => assert!(!delegated, "the child got no runtime context"),
        }
    }
}
