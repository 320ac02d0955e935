//! End-to-end overhead of the blocking std shell (`dsh-std`) against the
//! mock DeepSeek server on loopback, with a JSONL store (plain, fsync'd at
//! the checkpoints) in a temp dir.
//!
//! - `std_shell/chunks`: one turn per iteration whose first step streams
//!   `stream.sse` of the shared workload (`DSH_BENCH_CHUNKS` chunks,
//!   default 2000) over HTTP, then three stub tools and a one-chunk text
//!   step. Throughput in chunks: time per chunk, end to end (HTTP, SSE
//!   decoding, reader thread → driver channel, core, live event, store
//!   queue).
//! - `std_shell/steps`: one turn of `DSH_BENCH_STEPS` (default 50) tool
//!   steps (each a one-call stream, a stub tool on a worker thread) plus a
//!   final text step. Throughput in steps: time per step (HTTP request and
//!   response, request building, checkpoint flushes, tool thread, events).
//!
//! - `std_shell/steps_scripted`: the same turn with the model streams
//!   served in memory by `ScriptedProvider` (the chunks the transport
//!   decodes from the same script): the shell's own share of a step,
//!   without HTTP.
//!
//! Every iteration gets a fresh agent and session, so history does not
//! grow across iterations; only `send` → `wait_idle` is timed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::{ContentBlock, LlmCallConfig};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{ClientOptions, DeepSeekClient, DeepSeekConfig};
use dsh_std::{Agent, AgentConfig, ModelProvider, ScriptedProvider, ScriptedReply, ToolSet};
use dsh_store::SessionStore;
use dsh_tools::{Tool, ToolCallRequest, ToolContext};
use serde_json::json;

/// A tool that answers `ok` at once.
struct Stub(&'static str);

impl Tool for Stub {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::untyped(self.0, self.0, json!({"type":"object"}))
    }
    fn execute(&self, _call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        ToolOutcome::success(vec![ContentBlock::text("ok")])
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn client(server: &MockServer) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(server.url()),
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from("sk-bench")))),
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).expect("client config")
}

/// Runs one turn on a fresh agent against `script` (or the scripted
/// replies); returns the time from `send` to idle.
fn one_turn(script: &Script, work: &std::path::Path) -> Duration {
    let server = MockServer::start(script.clone()).expect("mock server");
    turn_with(Arc::new(client(&server)), work)
}

fn turn_with(provider: Arc<dyn ModelProvider>, work: &std::path::Path) -> Duration {
    let store_dir = tempfile::tempdir().expect("store dir");
    let cfg = dsh_jsonl::JsonlConfig::new(store_dir.path())
        .with_compression(dsh_jsonl::Compression::None);
    let store: Arc<dyn SessionStore> = Arc::new(dsh_jsonl::open(cfg).expect("store"));
    let mut config = AgentConfig::new(
        provider,
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        work,
    );
    let mut tools = ToolSet::new();
    for name in ["bash", "write", "edit", "noop"] {
        tools.insert(Box::new(Stub(name)));
    }
    config.tools = tools;
    let agent = Agent::create(config, store, dsh_std::new_session_id()).expect("agent");
    let start = Instant::now();
    agent.send("go").expect("send");
    let summary = agent
        .wait_idle(Some(Duration::from_secs(120)))
        .expect("idle");
    let elapsed = start.elapsed();
    assert_eq!(
        summary.reason,
        Some(dsh_core::session::TurnEndReason::Completed)
    );
    drop(agent);
    elapsed
}

fn bench(c: &mut Criterion) {
    let work = tempfile::tempdir().expect("work dir");
    let n = env_u64("DSH_BENCH_CHUNKS", 2000);
    let workloads = Workloads::generate(1, n, 100);
    let sse = std::fs::read_to_string(workloads.stream_sse()).expect("stream.sse");
    let chunks = std::fs::read_to_string(workloads.chunks_jsonl())
        .expect("chunks.jsonl")
        .lines()
        .count() as u64;
    let text = json!({"turn": {"text": ["done"]}});
    let chunk_script: Script = serde_json::from_value(json!({"responses": [
        {"fault": {"kind": "raw", "body": sse}},
        text,
    ]}))
    .expect("script");

    let steps = env_u64("DSH_BENCH_STEPS", 50);
    let mut responses: Vec<serde_json::Value> = (0..steps)
        .map(|i| {
            json!({"turn": {"toolCalls": [
                {"id": format!("c{i}"), "name": "noop", "arguments": ["{}"]}
            ]}})
        })
        .collect();
    responses.push(text);
    let step_script: Script =
        serde_json::from_value(json!({ "responses": responses })).expect("script");

    let mut group = c.benchmark_group("std_shell");
    group.sample_size(10);
    group.throughput(Throughput::Elements(chunks));
    group.bench_function("chunks", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| one_turn(&chunk_script, work.path()))
                .sum()
        })
    });
    group.throughput(Throughput::Elements(steps + 1));
    group.bench_function("steps", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| one_turn(&step_script, work.path()))
                .sum()
        })
    });
    // The chunks the transport decodes from the step script, served from
    // memory.
    let server = MockServer::start(step_script.clone()).expect("mock server");
    let decoder = client(&server);
    let replies: Vec<Vec<dsh_core::StreamChunk>> = (0..=steps)
        .map(|_| {
            let opts = dsh_core::GenerateOptions::new(
                "deepseek",
                "deepseek-v4-flash",
                vec![std::sync::Arc::new(dsh_core::Message::user(
                    "m",
                    vec![ContentBlock::text("x")],
                ))],
            );
            decoder
                .stream_chunks(&opts, &dsh_deepseek::CancelToken::new())
                .collect()
        })
        .collect();
    group.bench_function("steps_scripted", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let provider =
                        ScriptedProvider::new(replies.iter().cloned().map(ScriptedReply::Chunks));
                    turn_with(Arc::new(provider), work.path())
                })
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
