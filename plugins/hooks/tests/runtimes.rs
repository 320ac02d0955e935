//! A real hook script (bash, Claude Code's "block Stop once" pattern) run
//! by the hooks plugin in the std and the smol runtime: the turn goes on
//! once with the hook's reason, then ends; the log holds the
//! `hook/invoked` / `hook/result` pairs.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, SessionId, StreamChunk};
use dsh_hooks::config::parse;
use dsh_hooks::{Dialect, HooksPlugin, ProcessRunner, Settings};
use dsh_host::{ScriptedProvider, ScriptedReply};

const STOP_ONCE: &str = "INPUT=$(cat); if echo \"$INPUT\" | grep -q '\"stop_hook_active\":true'; then exit 0; fi; echo 'Also say SECOND.' >&2; exit 2";

fn answer(text: &str) -> ScriptedReply {
    ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::text_delta(0, text),
        StreamChunk::block_end(0, ContentBlock::text(text)),
        StreamChunk::finish(FinishReason::Stop),
    ])
}

fn plugin() -> HooksPlugin {
    let cfg = serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": STOP_ONCE}]}]}});
    HooksPlugin::new(
        Dialect::ClaudeCode,
        parse(&cfg, Dialect::ClaudeCode).unwrap().config,
        Box::new(ProcessRunner::new(dsh_tools::EnvPolicy::default())),
        Settings::default(),
    )
}

fn store(dir: &std::path::Path) -> Arc<dyn dsh_store::SessionStore> {
    Arc::new(
        dsh_jsonl::open(
            dsh_jsonl::JsonlConfig::new(dir).with_compression(dsh_jsonl::Compression::None),
        )
        .unwrap(),
    )
}

fn check(provider: &ScriptedProvider, log: &[dsh_core::session::SessionEvent]) {
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(format!("{:?}", requests[1].messages).contains("Also say SECOND."));
    let results: Vec<String> = log
        .iter()
        .filter(|e| e.event_type() == "hook/result")
        .map(|e| e.to_json())
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("\"decision\":\"block\"") && results[0].contains("\"exitCode\":2"));
    assert!(results[1].contains("\"decision\":\"pass\""));
}

#[test]
fn stop_once_in_the_std_runtime() {
    let provider = Arc::new(ScriptedProvider::new([answer("FIRST"), answer("SECOND")]));
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut config = dsh_std::AgentConfig::new(
        provider.clone(),
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        work.path(),
    );
    config.plugins.push(Box::new(plugin()));
    let agent = dsh_std::Agent::create(config, store, SessionId::from("std-hooks")).unwrap();
    agent.send("Say FIRST.").unwrap();
    agent.wait_idle(Some(Duration::from_secs(20))).unwrap();
    let log = agent.events().unwrap();
    check(&provider, &log);
}

#[test]
fn stop_once_in_the_smol_runtime() {
    let provider = Arc::new(ScriptedProvider::new([answer("FIRST"), answer("SECOND")]));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut config = dsh_smol::AgentConfig::new(
        provider.clone(),
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        std::env::temp_dir(),
    );
    config.tools = dsh_smol::ToolSet::new();
    config.plugins.push(Box::new(plugin()));
    let id = SessionId::from("smol-hooks");
    smol::block_on(async {
        let agent = dsh_smol::Agent::create(config, store.clone(), id.clone())
            .await
            .unwrap();
        agent.send("Say FIRST.").await.unwrap();
        agent
            .wait_idle(Some(Duration::from_secs(20)))
            .await
            .unwrap();
        agent.close().await.unwrap();
    });
    let (_, log) = store.read_from(&id, 0, &dsh_store::Cancel::new()).unwrap();
    check(&provider, &log);
}
