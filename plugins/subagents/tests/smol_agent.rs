//! The subagents plugin in the smol runtime: the same
//! kernel plugin and tool bodies; the smol parent's spawned child is linked
//! to it, logs its descriptor, and its answer is the tool's result.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::agent::replay::{ReplayOptions, replay};
use dsh_core::session::EventData;
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, SessionId, StreamChunk};
use dsh_host::{ScriptedProvider, ScriptedReply};
use dsh_std::subagents::Delegation;
use dsh_store::{Cancel, SessionStore};

fn answer(text: &str) -> ScriptedReply {
    ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: text.into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(text)),
        StreamChunk::finish(FinishReason::Stop),
    ])
}

fn call_subagent() -> ScriptedReply {
    let args = r#"{"description":"Say hi","prompt":"Reply with HI."}"#;
    ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::tool_call_delta(0, "call_1", Some("subagent"), args),
        StreamChunk::block_end(0, ContentBlock::tool_call("call_1", "subagent", args)),
        StreamChunk::finish(FinishReason::ToolCalls),
    ])
}

#[test]
fn smol_parent_spawns_a_linked_child() {
    let parent_model = Arc::new(ScriptedProvider::new([call_subagent(), answer("DONE")]));
    let child_model = Arc::new(ScriptedProvider::new([answer("HI")]));
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(
        dsh_jsonl::open(
            dsh_jsonl::JsonlConfig::new(dir.path()).with_compression(dsh_jsonl::Compression::None),
        )
        .unwrap(),
    );
    let call = LlmCallConfig::new("deepseek", "deepseek-v4-flash");
    let root = work.path().to_path_buf();
    let (model, child_call) = (child_model.clone(), call.clone());
    let factory = Arc::new(move || {
        Ok(dsh_std::AgentConfig::new(
            model.clone(),
            child_call.clone(),
            root.clone(),
        ))
    });
    let delegation = Delegation::new(store.clone(), factory);
    let mut config = dsh_smol::AgentConfig::new(parent_model.clone(), call, work.path());
    config.tools = dsh_smol::ToolSet::new();
    config.plugins.push(Box::new(delegation.plugin()));
    for tool in delegation.tools() {
        config.tools.insert(tool);
    }
    let id = SessionId::from("smol-parent");
    smol::block_on(async {
        let agent = dsh_smol::Agent::create(config, store.clone(), id.clone())
            .await
            .unwrap();
        agent.send("Delegate.").await.unwrap();
        agent
            .wait_idle(Some(Duration::from_secs(20)))
            .await
            .unwrap();
        agent.dispose().await;
    });
    let stored = store.load(&id).unwrap();
    let result = stored
        .events
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => Some(serde_json::to_string(&r.message.content).unwrap()),
            _ => None,
        })
        .unwrap();
    assert!(result.contains(r#""text":"HI""#), "{result}");
    assert!(!result.contains(r#""isError":true"#), "{result}");
    let report = replay(stored.header, stored.events, ReplayOptions::default());
    assert!(report.identical(), "{report:?}");
    let child = store
        .list(&Cancel::new())
        .unwrap()
        .into_iter()
        .find(|h| h.id != id)
        .unwrap();
    assert_eq!(child.parent_session, Some(id));
    assert_eq!(child.delegation_depth, Some(1));
    let events = store.load(&child.id).unwrap().events;
    assert!(
        events
            .iter()
            .any(|e| e.event_type() == "subagent/descriptor")
    );
    assert_eq!(child_model.requests().len(), 1);
}
