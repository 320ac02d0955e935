//! The tool set and the approval-policy plugin driving the runtime kernel,
//! as a runtime would: `todo/write` lands between `tool/call` and
//! `tool/result` (TL-23, TL-24), `deny` gives the TL-10 denial (no `error`
//! field), `ask` is answered through the kernel's approval ask.

use dsh_core::Time;
use std::fs;
use std::sync::{Arc, Mutex};

use dsh_approval::{ApprovalDecision, ApprovalMode, ApprovalPlugin, ApprovalPolicy};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::{
    AgentConfig as KernelConfig, AgentEvent, Effect, IdMode, InboxTarget, Kernel, Plugin, Reply,
};
use dsh_tools::{CancelToken, ToolSet, Workspace};
use serde_json::Value;

#[test]
fn a_turn_with_todo_write_a_denied_bash_and_an_approved_write() {
    // The approval policy as a kernel plugin (TL-9, TL-10), driven by a
    // hand-written loop over the kernel's effects.
    let dir = tempfile::tempdir().unwrap();
    let set = ToolSet::builtin();
    let policy = Arc::new(Mutex::new(
        ApprovalPolicy::new(ApprovalMode::Auto)
            .with("bash", ApprovalMode::Deny)
            .with("write", ApprovalMode::Ask),
    ));
    let mut config = KernelConfig::new(LlmCallConfig::new("mock", "mock"));
    config.tools = set.registry().unwrap();
    config.ids = IdMode::Sequential;
    let session = dsh_runtime::create_session("a1".into(), Time::from_millis(0), None).unwrap();
    let plugins: Vec<Box<dyn Plugin>> = vec![Box::new(ApprovalPlugin::new(policy.clone()))];
    let mut agent = Kernel::new(config, session, 0, plugins).unwrap();
    let now = Time::from_millis(1_000);
    agent
        .send(
            now,
            Message::user("m1", vec![ContentBlock::text("go")]),
            InboxTarget::NextTurn,
            true,
        )
        .unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let mut calls = 0;
    let mut asked = Vec::new();
    while let Some(effect) = agent.poll() {
        match effect {
            Effect::StartModel(call) => {
                calls += 1;
                let chunks = if calls == 1 {
                    vec![
                        StreamChunk::block_start(0, "tool-call"),
                        StreamChunk::block_start(1, "tool-call"),
                        StreamChunk::block_start(2, "tool-call"),
                        StreamChunk::block_end(
                            0,
                            ContentBlock::tool_call(
                                "c1",
                                "todo_write",
                                r#"{"todos":[{"content":"plan","status":"in_progress"}]}"#,
                            ),
                        ),
                        StreamChunk::block_end(
                            1,
                            ContentBlock::tool_call(
                                "c2",
                                "bash",
                                r#"{"command":"touch pwned","description":"d"}"#,
                            ),
                        ),
                        StreamChunk::block_end(
                            2,
                            ContentBlock::tool_call(
                                "c3",
                                "write",
                                r#"{"file_path":"out.txt","content":"ok"}"#,
                            ),
                        ),
                        StreamChunk::finish(FinishReason::ToolCalls),
                    ]
                } else {
                    vec![
                        StreamChunk::block_start(0, "text"),
                        StreamChunk::TextDelta {
                            index: 0,
                            text: "done".into(),
                        },
                        StreamChunk::block_end(0, ContentBlock::text("done")),
                        StreamChunk::finish(FinishReason::Stop),
                    ]
                };
                for chunk in chunks {
                    agent.model_chunk(now, call.attempt, chunk).unwrap();
                }
                agent.model_end(now, call.attempt).unwrap();
            }
            Effect::StartTool { exec, timeout_ms } => {
                let timeout = timeout_ms.map(std::time::Duration::from_millis);
                let (outcome, events) =
                    set.run(&exec, workspace.clone(), CancelToken::new(), timeout);
                agent.tool_done(now, exec.token, outcome, events).unwrap();
            }
            Effect::Persist { .. } => agent.persisted(now, Ok(())).unwrap(),
            Effect::Publish(AgentEvent::ApprovalRequested { id, tool, .. }) => {
                asked.push(tool);
                agent
                    .answer(now, id, Reply::Approval(ApprovalDecision::AllowAlways))
                    .unwrap();
            }
            _ => {}
        }
    }
    assert!(agent.is_idle());
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
