//! The agent loop machine alone: a scripted 200-turn session (each turn a
//! tool step whose stream is `chunks.jsonl`, three tool results, then a
//! short text step) driven through `Agent` with an in-memory session log.
//!
//! - `agent/chunks`: throughput in chunks, so criterion's time per element
//!   is the per-chunk cost (append `assistant/chunk`, fold into the
//!   assembler).
//! - `agent/steps`: the same session with one-chunk streams, throughput in
//!   steps: the per-step cost (claim, hooks, request building with the
//!   history snapshot, header checks, message, tool phase, step/turn ends).
//!
//! `DSH_BENCH_CHUNKS` sets the workload's `--chunks` (default 400),
//! `DSH_BENCH_TURNS` the number of turns (default 200).

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::agent::{Agent, AgentConfig, AgentOptions, Output};
use dsh_core::session::{Session, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, Message, StreamChunk};

/// Turns per session; `DSH_BENCH_TURNS` overrides (default 200).
fn turns() -> u64 {
    std::env::var("DSH_BENCH_TURNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

fn config() -> AgentConfig {
    let mut tools = ToolRegistry::new();
    for name in ["bash", "edit", "write"] {
        tools
            .register(ToolDefinition::untyped(
                name,
                name,
                serde_json::json!({"type":"object"}),
            ))
            .unwrap();
    }
    {
        let mut config = AgentConfig::default();
        config.options = {
            let mut options = AgentOptions::default();
            options.provider = Some("deepseek".into());
            options.model = Some("deepseek-v4-flash".into());
            options
        };
        config.tools = tools;
        config
    }
}

fn text_step() -> Vec<StreamChunk> {
    vec![
        StreamChunk::TextDelta {
            index: 0,
            text: "done".into(),
        },
        StreamChunk::finish(FinishReason::Stop),
    ]
}

/// Runs the session; returns (chunks fed, steps run).
fn run(tool_stream: &[StreamChunk]) -> (u64, u64) {
    let mut agent = Agent::new(config(), Session::new(SessionHeader::new("bench", 0))).unwrap();
    let text = text_step();
    let mut now = dsh_core::Time::EPOCH;
    let (mut chunks, mut steps) = (0u64, 0u64);
    for turn in 0..turns() {
        now = now.add_millis(1);
        agent
            .followup(
                now,
                Message::user(format!("m{turn}"), vec![ContentBlock::text("go")]),
            )
            .unwrap();
        let mut tool_step = true;
        loop {
            let Some(output) = agent.poll() else { break };
            match output {
                Output::CallModel(call) => {
                    steps += 1;
                    let stream = if tool_step { tool_stream } else { &text[..] };
                    tool_step = false;
                    for c in stream {
                        agent.handle_chunk(now, call.attempt, c.clone()).unwrap();
                    }
                    chunks += stream.len() as u64;
                    agent.handle_stream_end(now, call.attempt).unwrap();
                }
                Output::ExecuteTool(exec) => {
                    let outcome = ToolOutcome::success(vec![ContentBlock::text("ok")]);
                    agent.handle_tool_result(now, exec.token, outcome).unwrap();
                }
                _ => {}
            }
        }
    }
    assert!(agent.faults().is_empty());
    (chunks, steps)
}

fn bench(c: &mut Criterion) {
    let n: u64 = std::env::var("DSH_BENCH_CHUNKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let workloads = Workloads::generate(1, n, 100);
    let stream: Vec<StreamChunk> = std::fs::read_to_string(workloads.chunks_jsonl())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (chunks, steps) = run(&stream);
    let mut group = c.benchmark_group("agent");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(chunks));
    group.bench_function("chunks", |b| b.iter(|| run(&stream)));
    // One-chunk tool streams: the three tool calls and the finish only.
    let small: Vec<StreamChunk> = stream
        .iter()
        .filter(|c| {
            matches!(c, StreamChunk::BlockEnd { block, .. }
                if matches!(**block, ContentBlock::ToolCall { .. }))
                || matches!(c, StreamChunk::Finish { .. })
        })
        .cloned()
        .collect();
    let (_, small_steps) = run(&small);
    assert_eq!(small_steps, steps);
    group.throughput(Throughput::Elements(steps));
    group.bench_function("steps", |b| b.iter(|| run(&small)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
