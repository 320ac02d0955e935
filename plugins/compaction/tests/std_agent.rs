//! The compaction plugin in the std runtime (`dsh_std::Agent`): the
//! summary is a side call through the agent's own provider, the manual run
//! is `compact_now` (CP-3 c), and the stored log reloads and replays.

use std::sync::Arc;
use std::time::Duration;

use dsh_compaction::{Compaction, CompactionConfig};
use dsh_core::agent::replay::{ReplayOptions, replay};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, SessionId, StreamChunk, TokenUsage};
use dsh_std::{Agent, AgentConfig, ScriptedProvider, ScriptedReply};

fn answer(text: &str, input: i64) -> ScriptedReply {
    ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: text.into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(text)),
        StreamChunk::usage(TokenUsage::new(input, 10)),
        StreamChunk::finish(FinishReason::Stop),
    ])
}

#[test]
fn compact_now_summarises_through_the_provider_and_the_log_replays() {
    let provider = Arc::new(
        ScriptedProvider::new([
            answer("one", 10),
            answer("two", 10),
            answer("summary of one and two", 5),
            answer("three", 10),
        ])
        .with_context_window(1_000_000),
    );
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn dsh_store::SessionStore> = Arc::new(
        dsh_jsonl::open(
            dsh_jsonl::JsonlConfig::new(dir.path()).with_compression(dsh_jsonl::Compression::None),
        )
        .unwrap(),
    );
    let mut config = AgentConfig::new(
        provider.clone(),
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        work.path(),
    );
    config
        .plugins
        .push(Box::new(Compaction::new(CompactionConfig::default())));
    let id = SessionId::from("std-compact");
    let agent = Agent::create(config, store.clone(), id.clone()).unwrap();
    let wait = Some(Duration::from_secs(10));
    for text in ["first", "second"] {
        agent.send(text).unwrap();
        agent.wait_idle(wait).unwrap();
    }
    let result = agent.compact_now(wait).unwrap();
    assert_eq!(result, serde_json::json!({"compacted": true}));
    agent.send("third").unwrap();
    agent.wait_idle(wait).unwrap();
    // The summary request went through the same provider, with the
    // compaction purpose and the shadowed history.
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[2].purpose, Some(dsh_core::Purpose::Compaction));
    // The last turn saw the summary instead of the first exchange: 4
    // messages (summary, "second", "two", "third") instead of 5.
    assert_eq!(requests[3].messages.len(), 4);
    drop(agent);
    let stored = store.load(&id).unwrap();
    let types: Vec<&str> = stored.events.iter().map(|e| e.event_type()).collect();
    assert!(types.contains(&"compaction/summary"), "{types:?}");
    let report = replay(stored.header, stored.events, ReplayOptions::default());
    assert!(report.identical(), "{report:?}");
}
