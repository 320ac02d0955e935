//! The tool set and approval policy driving the core agent loop, as a
//! shell would: `todo/write` lands between `tool/call` and `tool/result`
//! (TL-23, TL-24), `deny` gives the TL-10 denial (no `error` field), `ask`
//! is answered through the deferred approval hook.

use std::fs;
use std::sync::{Arc, Mutex};

use dsh_core::agent::{
    Agent, AgentConfig, AgentOptions, AgentStatus, HookAnswer, HookCall, Output,
};
use dsh_core::session::{Session, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, Message, StreamChunk};
use dsh_tools::{
    ApprovalDecision, ApprovalMode, ApprovalPolicy, CollectingSink, PolicyHooks, ToolContext,
    ToolSet, Workspace,
};
use serde_json::Value;

#[test]
fn a_turn_with_todo_write_a_denied_bash_and_an_approved_write() {
    let dir = tempfile::tempdir().unwrap();
    let set = ToolSet::builtin();
    let policy = Arc::new(Mutex::new(
        ApprovalPolicy::new(ApprovalMode::Auto)
            .with("bash", ApprovalMode::Deny)
            .with("write", ApprovalMode::Ask),
    ));
    let config = AgentConfig {
        options: AgentOptions {
            provider: Some("mock".into()),
            model: Some("mock".into()),
            max_tokens: None,
        },
        tools: set.registry().unwrap(),
        ..AgentConfig::default()
    };
    let mut agent = Agent::new(config, Session::new(SessionHeader::new("a1", 0)))
        .unwrap()
        .with_hooks(PolicyHooks::new(policy.clone()));
    let now = 1_000;
    agent
        .followup(now, Message::user("m1", vec![ContentBlock::text("go")]))
        .unwrap();
    let sink = Arc::new(CollectingSink::new());
    let ctx = ToolContext::new(Workspace::new(dir.path()).unwrap()).with_events(sink.clone());
    let mut calls = 0;
    let mut asked = Vec::new();
    loop {
        let Some(output) = agent.poll() else { break };
        match output {
            Output::CallModel(call) => {
                calls += 1;
                let chunks = if calls == 1 {
                    vec![
                        StreamChunk::BlockEnd {
                            index: 0,
                            block: ContentBlock::tool_call(
                                "c1",
                                "todo_write",
                                r#"{"todos":[{"content":"plan","status":"in_progress"}]}"#,
                            ),
                        },
                        StreamChunk::BlockEnd {
                            index: 1,
                            block: ContentBlock::tool_call(
                                "c2",
                                "bash",
                                r#"{"command":"touch pwned","description":"d"}"#,
                            ),
                        },
                        StreamChunk::BlockEnd {
                            index: 2,
                            block: ContentBlock::tool_call(
                                "c3",
                                "write",
                                r#"{"file_path":"out.txt","content":"ok"}"#,
                            ),
                        },
                        StreamChunk::finish(FinishReason::ToolCalls),
                    ]
                } else {
                    vec![
                        StreamChunk::TextDelta {
                            index: 0,
                            text: "done".into(),
                        },
                        StreamChunk::finish(FinishReason::Stop),
                    ]
                };
                for chunk in chunks {
                    agent.handle_chunk(now, call.attempt, chunk).unwrap();
                }
                agent.handle_stream_end(now, call.attempt).unwrap();
            }
            Output::ExecuteTool(exec) => {
                let outcome = set.execute(&exec, &ctx);
                for event in sink.take() {
                    agent.append_event(now, event, None).unwrap();
                }
                agent.handle_tool_result(now, exec.token, outcome).unwrap();
            }
            Output::Hook {
                id,
                call: HookCall::ToolApproval { exec, .. },
            } => {
                asked.push(exec.name.clone());
                let outcome = policy
                    .lock()
                    .unwrap()
                    .resolve(&exec.name, Some(ApprovalDecision::AllowAlways));
                agent
                    .complete_hook(now, id, HookAnswer::ToolApproval(outcome))
                    .unwrap();
            }
            Output::Status(AgentStatus::Idle) if calls >= 2 => break,
            _ => {}
        }
    }
    assert_eq!(calls, 2);
    assert_eq!(asked, ["write"]);
    assert_eq!(policy.lock().unwrap().mode_for("write"), ApprovalMode::Auto);
    assert!(!dir.path().join("pwned").exists(), "denied bash never ran");
    assert_eq!(
        fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "ok"
    );

    let events: Vec<Value> = agent
        .session()
        .events()
        .iter()
        .map(|e| serde_json::from_str(&e.to_json()).unwrap())
        .collect();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|t| t.starts_with("tool/") || t.starts_with("todo/"))
        .collect();
    assert_eq!(
        types,
        [
            "tool/call",
            "todo/write",
            "tool/result",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result"
        ]
    );
    let todo = events.iter().find(|e| e["type"] == "todo/write").unwrap();
    assert_eq!(
        todo["data"].to_string(),
        r#"{"todos":[{"content":"plan","status":"in_progress"}]}"#
    );
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .collect();
    let text = |r: &Value| r["data"]["message"]["content"][0]["content"][0]["text"].clone();
    assert_eq!(
        text(results[0]),
        "Updated todo list: 0 pending, 1 in progress, 0 completed."
    );
    // TL-10: a denial has no `error` field on the log.
    assert_eq!(
        text(results[1]),
        "Error: bash is disabled by policy in this session"
    );
    assert_eq!(results[1]["data"]["message"]["content"][0]["isError"], true);
    assert!(results[1]["data"].get("error").is_none());
    assert!(
        text(results[2])
            .as_str()
            .unwrap()
            .ends_with("Created file\n</content>")
    );
    assert_eq!(results[2]["data"]["meta"].to_string(), r#"{"diffs":[]}"#);
}
