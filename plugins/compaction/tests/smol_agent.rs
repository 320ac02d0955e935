//! The compaction plugin in the smol runtime: pressure compaction before a
//! step with the summary as a side call on the blocking pool, then the
//! manual run (`compact_now`), and the stored log replays.

use std::sync::Arc;
use std::time::Duration;

use dsh_compaction::{Compaction, CompactionConfig};
use dsh_core::agent::replay::{ReplayOptions, replay};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, SessionId, StreamChunk, TokenUsage};
use dsh_host::{ScriptedProvider, ScriptedReply};
use dsh_smol::{Agent, AgentConfig};

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
fn pressure_then_manual_compaction_in_smol() {
    // Window 1000 (the provider's): turn 2 reports 900 >= 800.
    let provider = Arc::new(
        ScriptedProvider::new([
            answer("one", 100),
            answer("two", 890),
            answer("pressure summary", 5),
            answer("three", 100),
            answer("manual summary", 5),
            answer("four", 100),
        ])
        .with_context_window(1_000),
    );
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
        std::env::temp_dir(),
    );
    config.tools = dsh_smol::ToolSet::new();
    config
        .plugins
        .push(Box::new(Compaction::new(CompactionConfig::default())));
    let id = SessionId::from("smol-compact");
    let wait = Some(Duration::from_secs(10));
    smol::block_on(async {
        let agent = Agent::create(config, store.clone(), id.clone())
            .await
            .unwrap();
        for text in ["first", "second", "third"] {
            agent.send(text).await.unwrap();
            agent.wait_idle(wait).await.unwrap();
        }
        let r = agent.compact_now().await.unwrap();
        assert_eq!(r, serde_json::json!({"compacted": true}));
        agent.send("fourth").await.unwrap();
        agent.wait_idle(wait).await.unwrap();
        agent.dispose().await;
    });
    let requests = provider.requests();
    assert_eq!(requests.len(), 6);
    assert_eq!(requests[2].purpose, Some(dsh_core::Purpose::Compaction));
    assert_eq!(requests[4].purpose, Some(dsh_core::Purpose::Compaction));
    let stored = store.load(&id).unwrap();
    let summaries = stored
        .events
        .iter()
        .filter(|e| e.event_type() == "compaction/summary")
        .count();
    assert_eq!(summaries, 2);
    let report = replay(stored.header, stored.events, ReplayOptions::default());
    assert!(report.identical(), "{report:?}");
}
