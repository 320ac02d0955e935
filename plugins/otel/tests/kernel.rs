//! The plugin in a real kernel: it sees every appended event through
//! `on_event`, builds the turn's spans, and leaves the log byte-identical
//! ("no change to the core"; session.md PB2: telemetry is an
//! observer notified after the append, which it cannot change).

use dsh_core::Time;
use std::sync::{Arc, Mutex};

use dsh_core::agent::InboxTarget;
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk, TokenUsage};
use dsh_otel::{OtelConfig, OtelPlugin, SpanData, attr};
use dsh_runtime::{AgentConfig, Effect, IdMode, Kernel, Plugin, create_session};

/// Runs one text turn; returns the log as JSON lines.
fn run(plugins: Vec<Box<dyn Plugin>>) -> Vec<String> {
    let mut config = AgentConfig::new(LlmCallConfig::new("deepseek", "deepseek-chat"));
    config.ids = IdMode::Sequential;
    let session = create_session("s1".into(), Time::from_millis(1_000), None).unwrap();
    let mut kernel = Kernel::new(config, session, 0, plugins).unwrap();
    let hi = Message::user("m1", vec![ContentBlock::text("a private prompt")]);
    kernel
        .send(Time::from_millis(1_000), hi, InboxTarget::NextTurn, true)
        .unwrap();
    while let Some(effect) = kernel.poll() {
        match effect {
            Effect::StartModel(call) => {
                let usage = {
                    let mut usage = TokenUsage::new(10, 3);
                    usage.cache_read_tokens = Some(4);
                    usage.cache_write_tokens = None;
                    usage.reasoning_tokens = None;
                    usage
                };
                let reply = [
                    StreamChunk::block_start(0, "text"),
                    StreamChunk::TextDelta {
                        index: 0,
                        text: "a private answer".into(),
                    },
                    StreamChunk::block_end(0, ContentBlock::text("a private answer")),
                    StreamChunk::Usage {
                        usage: Box::new(usage),
                    },
                    StreamChunk::finish(FinishReason::Stop),
                ];
                for chunk in reply {
                    kernel
                        .model_chunk(Time::from_millis(1_005), call.attempt, chunk)
                        .unwrap();
                }
                kernel
                    .model_end(Time::from_millis(1_010), call.attempt)
                    .unwrap();
            }
            Effect::Persist { .. } => kernel.persisted(Time::from_millis(1_010), Ok(())).unwrap(),
            _ => {}
        }
    }
    assert!(kernel.is_idle());
    kernel
        .session()
        .events()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

#[test]
fn in_a_kernel_the_plugin_traces_the_turn_and_leaves_the_log_unchanged() {
    let spans = Arc::new(Mutex::new(Vec::<SpanData>::new()));
    let sink = spans.clone();
    let plugin = OtelPlugin::new(OtelConfig::default(), move |s: SpanData| {
        sink.lock().unwrap().push(s)
    });
    let with = run(vec![Box::new(plugin)]);
    let without = run(Vec::new());
    assert_eq!(with, without, "the log changed");
    let spans = spans.lock().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["chat deepseek-chat", "step", "invoke_agent dsh"]);
    assert_eq!(spans[0].parent, Some(spans[1].span_id));
    assert_eq!(spans[1].parent, Some(spans[2].span_id));
    assert_eq!(
        spans[0].attr(attr::USAGE_INPUT_TOKENS),
        Some(&dsh_otel::AttrValue::Int(14))
    );
    assert_eq!(
        spans[2].attr(attr::CONVERSATION_ID),
        Some(&dsh_otel::AttrValue::Str("s1".into()))
    );
    let dump = format!("{spans:?}");
    assert!(!dump.contains("private"), "{dump}");
}
