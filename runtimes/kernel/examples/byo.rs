//! Bring your own runtime: the kernel driven by a small hand-written loop,
//! with no dsh runtime crate, no threads and no network.
//!
//! ```text
//! cargo run -p dsh-runtime --example byo
//! ```
//!
//! The "model" is a canned script, the one tool (`add`) runs inline, the
//! "store" is a vector of JSON lines and time is a counter the loop moves.
//! Everything a real runtime does is here: feed inputs with `now`, drain
//! `poll`, carry each effect out, sleep until `poll_timeout`.

use std::collections::VecDeque;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::{AgentConfig, AgentEvent, Effect, IdMode, InboxTarget, Kernel, create_session};
use serde_json::json;

/// The scripted model: one tool call, then the answer.
fn script() -> VecDeque<Vec<StreamChunk>> {
    VecDeque::from([
        vec![
            StreamChunk::block_start(0, "tool-call"),
            StreamChunk::block_end(
                0,
                ContentBlock::tool_call("call_1", "add", r#"{"a":2,"b":3}"#),
            ),
            StreamChunk::finish(FinishReason::ToolCalls),
        ],
        vec![
            StreamChunk::block_start(0, "text"),
            StreamChunk::TextDelta {
                index: 0,
                text: "2 + 3 = 5".into(),
            },
            StreamChunk::block_end(0, ContentBlock::text("2 + 3 = 5")),
            StreamChunk::finish(FinishReason::Stop),
        ],
    ])
}

/// The one tool body.
fn add(arguments: &serde_json::Value) -> ToolOutcome {
    let a = arguments["a"].as_i64().unwrap_or(0);
    let b = arguments["b"].as_i64().unwrap_or(0);
    ToolOutcome::success(vec![ContentBlock::text(format!("{}", a + b))])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut tools = ToolRegistry::new();
    tools.register(ToolDefinition::untyped(
        "add",
        "Adds two integers",
        json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}),
    ))?;
    let mut config = AgentConfig::new(LlmCallConfig::new("scripted", "scripted-1"));
    config.tools = tools;
    config.system_prompt = Some("You add numbers.".into());
    config.ids = IdMode::Sequential;

    let mut now: i64 = 1_700_000_000_000; // our clock: moved by the loop
    let session = create_session("byo-1".into(), now, None)?;
    let mut kernel = Kernel::new(config, session, 0, Vec::new())?;
    kernel.set_publish_events(true);

    let mut model = script();
    let mut store: Vec<String> = Vec::new(); // the "durable" log
    let prompt = Message::user("u1", vec![ContentBlock::text("What is 2 + 3?")]);
    kernel.send(now, prompt, InboxTarget::NextTurn, true)?;

    // The runtime loop: drain, carry out, wait for the next deadline.
    loop {
        while let Some(effect) = kernel.poll() {
            match effect {
                Effect::StartModel(call) => {
                    // A real runtime streams from a provider (a thread, a
                    // task, a serial link) and feeds chunks as they come.
                    let chunks = model.pop_front().unwrap_or_default();
                    for chunk in chunks {
                        now += 1;
                        kernel.model_chunk(now, call.attempt, chunk)?;
                    }
                    kernel.model_end(now, call.attempt)?;
                }
                Effect::StartTool { exec, .. } => {
                    let outcome = add(&exec.arguments);
                    kernel.tool_done(now, exec.token, outcome, Vec::new())?;
                }
                Effect::CancelTool { .. } | Effect::CancelModel { .. } => {}
                Effect::Persist { range, checkpoint } => {
                    let events =
                        &kernel.session().events()[range.start as usize..range.end as usize];
                    store.extend(events.iter().map(|e| e.to_json()));
                    println!("persist {range:?} at {checkpoint:?}");
                    kernel.persisted(now, Ok(()))?;
                }
                Effect::Publish(AgentEvent::Status(s)) => println!("status {s:?}"),
                Effect::Publish(AgentEvent::Error(e)) => println!("error {e}"),
                Effect::Publish(_) => {}
                _ => {}
            }
        }
        match kernel.poll_timeout() {
            // Sleep until the deadline (here: jump the clock there).
            Some(deadline) => {
                now = now.max(deadline);
                kernel.handle_timeout(now);
            }
            None if kernel.is_idle() => break,
            None => return Err("the kernel waits for an input this loop never gives".into()),
        }
    }

    let summary = kernel.summary();
    println!("turn {} ended {:?}", summary.turn, summary.reason);
    println!("{} events stored:", store.len());
    for line in &store {
        println!("  {line}");
    }
    assert_eq!(store.len() as u64, kernel.session().len());
    Ok(())
}
