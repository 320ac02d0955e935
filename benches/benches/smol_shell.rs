//! The smol shell (`dsh-smol`) end to end against the mock DeepSeek server
//! on loopback: real HTTP, SSE decoding, the agent task, tools on the
//! blocking pool, JSONL store writes at the checkpoints.
//!
//! - `smol_shell/chunks`: one agent, one turn whose first stream is the
//!   workload's `stream.sse` (`DSH_BENCH_CHUNKS` chunks, default 20000;
//!   its three tool calls go to unknown tools), then a one-word answer.
//!   Throughput in chunks: time per element is the per-chunk cost.
//! - `smol_shell/client_only_chunks`: the same SSE body read with the
//!   blocking DeepSeek client alone (no agent, no store): the baseline the
//!   shell's per-chunk overhead is measured against.
//! - `smol_shell/steps`: one agent, one turn of 20 tool steps (a one-call
//!   stream, an echo tool, the next request) and a final answer.
//!   Throughput in steps: the per-step cost, one HTTP request included.
//! - `smol_shell/chunks_nostore`, `smol_shell/steps_nostore`: the same with
//!   a store that discards writes, isolating the checkpoint writes (zstd
//!   frame + fsync each) from the shell and transport.
//! - `smol_shell/agents200` (and `_nostore`): 200 agents at once, each
//!   one tool turn (two requests). Throughput in turns; the bench prints
//!   the chunks per turn (chunks/s = turns/s x that).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::{SessionEvent, SessionHeader, TurnEndReason};
use dsh_core::{ContentBlock, GenerateOptions, LlmCallConfig, Message, SessionId};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig};
use dsh_smol::{Agent, AgentConfig};
use dsh_store::{SessionStore, StoreError};
use dsh_tools::{Tool, ToolCallRequest, ToolContext, ToolSet};
use serde_json::{Value, json};

const STEPS: u64 = 20;
const AGENTS: usize = 200;

fn chunk_count() -> u64 {
    std::env::var("DSH_BENCH_CHUNKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

struct Echo;

impl Tool for Echo {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::untyped("echo", "Echo", json!({"type":"object"}))
    }

    fn execute(&self, _call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        ToolOutcome::success(vec![ContentBlock::text("ok")])
    }
}

fn deepseek(url: String) -> DeepSeekConfig {
    DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: 60_000,
        ..DeepSeekConfig::default()
    }
}

fn client_options() -> ClientOptions {
    ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from("sk-bench")))),
        proxy_from_env: false,
        ..ClientOptions::default()
    }
}

fn config(server: &MockServer, cwd: &std::path::Path) -> AgentConfig {
    let client =
        DeepSeekClient::with_options(deepseek(server.url()), client_options()).expect("client");
    let mut c = AgentConfig::new(
        Arc::new(client),
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        cwd,
    );
    let mut tools = ToolSet::new();
    tools.insert(Box::new(Echo));
    c.tools = tools;
    c
}

fn server(script: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<Script>(script).expect("script")).expect("mock")
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn fresh_id() -> SessionId {
    SessionId::new(format!("bench-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)))
}

/// Runs one agent through one turn; panics unless it completed.
async fn one_turn(server: &MockServer, store: Arc<dyn SessionStore>, cwd: &std::path::Path) {
    let agent = Agent::create(config(server, cwd), store, fresh_id())
        .await
        .expect("agent");
    agent.send("go").await.expect("send");
    let summary = agent
        .wait_idle(Some(Duration::from_secs(120)))
        .await
        .expect("idle");
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    agent.dispose().await;
}

/// A store that discards every write: isolates the shell and transport
/// from the disk (fsync per checkpoint) in the `*_nostore` variants.
struct NullStore;

impl SessionStore for NullStore {
    fn kind(&self) -> &'static str {
        "null"
    }
    fn locate(&self, _header: &SessionHeader) -> Option<dsh_store::Location> {
        None
    }
    fn create(&self, _header: SessionHeader) -> Result<(), StoreError> {
        Ok(())
    }
    fn append(&self, _id: &SessionId, _events: &[SessionEvent]) -> Result<(), StoreError> {
        Ok(())
    }
    fn load(&self, id: &SessionId) -> Result<dsh_store::Inspection, StoreError> {
        Err(not_found(id))
    }
    fn inspect(
        &self,
        id: &SessionId,
        _cancel: &dsh_store::Cancel,
    ) -> Result<dsh_store::Inspection, StoreError> {
        Err(not_found(id))
    }
    fn read_from(
        &self,
        id: &SessionId,
        _from_seq: u64,
        _cancel: &dsh_store::Cancel,
    ) -> Result<(SessionHeader, Vec<SessionEvent>), StoreError> {
        Err(not_found(id))
    }
    fn list(&self, _cancel: &dsh_store::Cancel) -> Result<Vec<SessionHeader>, StoreError> {
        Ok(Vec::new())
    }
    fn list_snapshots(
        &self,
        _cancel: &dsh_store::Cancel,
    ) -> Result<Vec<dsh_store::Snapshot>, StoreError> {
        Ok(Vec::new())
    }
    fn revision(&self, id: &SessionId) -> Result<dsh_store::Revision, StoreError> {
        Err(not_found(id))
    }
    fn release(&self, _id: &SessionId) -> Result<(), StoreError> {
        Ok(())
    }
}

fn not_found(id: &SessionId) -> StoreError {
    StoreError::NotFound {
        id: id.as_str().to_string(),
    }
}

fn store(dir: &std::path::Path) -> Arc<dyn SessionStore> {
    Arc::new(dsh_jsonl::open(dsh_jsonl::JsonlConfig::new(dir)).expect("store"))
}

fn bench(c: &mut Criterion) {
    let n = chunk_count();
    let workloads = Workloads::generate(1, n, 100);
    let sse = std::fs::read_to_string(workloads.stream_sse()).expect("stream.sse");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(dir.path());
    let cwd = dir.path().join("ws");
    std::fs::create_dir_all(&cwd).expect("workspace");

    let mut group = c.benchmark_group("smol_shell");
    group.sample_size(10);

    // Per chunk: the workload stream, then a short answer.
    let chunk_server = server(json!({"perSession": true, "responses": [
        {"fault": {"kind": "raw", "body": sse, "chunkSize": 16384}},
        {"turn": {"text": ["done"]}}
    ]}));
    group.throughput(Throughput::Elements(n));
    group.bench_function("chunks", |b| {
        b.iter(|| smol::block_on(one_turn(&chunk_server, store.clone(), &cwd)))
    });
    let null: Arc<dyn SessionStore> = Arc::new(NullStore);
    group.bench_function("chunks_nostore", |b| {
        b.iter(|| smol::block_on(one_turn(&chunk_server, null.clone(), &cwd)))
    });

    let client = DeepSeekClient::with_options(deepseek(chunk_server.url()), client_options())
        .expect("client");
    group.bench_function("client_only_chunks", |b| {
        b.iter(|| {
            let mut options = GenerateOptions::new(
                "deepseek",
                "deepseek-v4-flash",
                vec![std::sync::Arc::new(Message::user(
                    "m1",
                    vec![ContentBlock::text("go")],
                ))],
            );
            // A fresh session id: the first scripted response again.
            options.session_id = Some(fresh_id());
            let count = client.stream_chunks(&options, &CancelToken::new()).count();
            assert!(count as u64 >= n);
        })
    });

    // Per step: STEPS one-call tool steps, then an answer.
    let mut responses: Vec<Value> = (0..STEPS)
        .map(|i| {
            json!({"turn": {"toolCalls": [
                {"id": format!("c{i}"), "name": "echo", "arguments": ["{}"]}
            ]}})
        })
        .collect();
    responses.push(json!({"turn": {"text": ["done"]}}));
    let step_server = server(json!({"perSession": true, "responses": responses}));
    group.throughput(Throughput::Elements(STEPS + 1));
    group.bench_function("steps", |b| {
        b.iter(|| smol::block_on(one_turn(&step_server, store.clone(), &cwd)))
    });
    group.bench_function("steps_nostore", |b| {
        b.iter(|| smol::block_on(one_turn(&step_server, null.clone(), &cwd)))
    });

    // 200 agents at once, one tool turn each.
    let turn_server = server(json!({"perSession": true, "responses": [
        {"turn": {
            "toolCalls": [{"id": "c1", "name": "echo", "arguments": ["{\"text\":", "\"ping\"}"]}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        }},
        {"turn": {
            "text": ["do", "ne"],
            "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
        }}
    ]}));
    // Chunks per tool turn, counted from one stored log.
    let probe = fresh_id();
    smol::block_on(async {
        let agent = Agent::create(config(&turn_server, &cwd), store.clone(), probe.clone())
            .await
            .expect("agent");
        agent.send("go").await.expect("send");
        agent.wait_idle(None).await.expect("idle");
        agent.dispose().await;
    });
    let per_turn = store
        .inspect(&probe, &dsh_store::Cancel::new())
        .expect("probe log")
        .events
        .iter()
        .filter(|e| e.event_type() == "assistant/chunk")
        .count();
    eprintln!("smol_shell/agents200: {per_turn} assistant/chunk events per tool turn");
    group.throughput(Throughput::Elements(AGENTS as u64));
    for (name, store) in [
        ("agents200", store.clone()),
        ("agents200_nostore", null.clone()),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    smol::block_on(many_agents(&turn_server, &store, &cwd));
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

/// `AGENTS` agents at once on the global executor, one turn each.
async fn many_agents(server: &MockServer, store: &Arc<dyn SessionStore>, cwd: &std::path::Path) {
    let tasks: Vec<_> = (0..AGENTS)
        .map(|_| {
            let store = store.clone();
            let cfg = config(server, cwd);
            smol::spawn(async move {
                let agent = Agent::create(cfg, store, fresh_id()).await.expect("agent");
                agent.send("go").await.expect("send");
                let s = agent
                    .wait_idle(Some(Duration::from_secs(120)))
                    .await
                    .expect("idle");
                assert_eq!(s.reason, Some(TurnEndReason::Completed));
                agent.dispose().await;
            })
        })
        .collect();
    for t in tasks {
        t.await;
    }
}
criterion_group!(benches, bench);
criterion_main!(benches);
