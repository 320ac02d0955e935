//! Arbitrary chunk sequences into the BlockAssembler and the StreamValidator:
//! no panic, memory bounded by the input, `blocks()` idempotent (BB-6).
#![no_main]

use arbitrary::Arbitrary;
use dsh_core::{
    BlockAssembler, ContentBlock, FinishReason, LlmFailure, ReplayEnvelope, StreamChunk,
    StreamValidator, TokenUsage,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum FuzzBlock {
    Text(String),
    Reasoning(String),
    ToolCall(String, String, String),
    Plugin(String),
}

#[derive(Arbitrary, Debug)]
enum FuzzFinish {
    Stop,
    ToolCalls,
    MaxTokens,
    Error(String),
    Aborted(String),
}

#[derive(Arbitrary, Debug)]
enum FuzzChunk {
    Start(u8, u8),
    Text(u8, String),
    Reasoning(u8, String),
    ToolCall(u8, String, Option<String>, String),
    End(u8, FuzzBlock),
    Usage(i64, i64, Option<i64>),
    Finish(FuzzFinish, Option<u8>),
}

const BLOCK_TYPES: [&str; 6] = ["text", "reasoning", "tool-call", "tool-result", "image", "video"];

fn chunk(c: FuzzChunk) -> StreamChunk {
    let index = |i: u8| u64::from(i % 16);
    match c {
        FuzzChunk::Start(i, t) => StreamChunk::BlockStart {
            index: index(i),
            block_type: BLOCK_TYPES[usize::from(t) % BLOCK_TYPES.len()].into(),
        },
        FuzzChunk::Text(i, text) => StreamChunk::TextDelta { index: index(i), text: text.into() },
        FuzzChunk::Reasoning(i, text) => StreamChunk::ReasoningDelta { index: index(i), text: text.into() },
        FuzzChunk::ToolCall(i, id, name, arguments_delta) => StreamChunk::ToolCallDelta {
            index: index(i),
            head: dsh_core::ToolCallHead::owned(id, name),
            arguments_delta: arguments_delta.into(),
        },
        FuzzChunk::End(i, b) => StreamChunk::block_end(index(i), match b {
                FuzzBlock::Text(t) => ContentBlock::text(t),
                FuzzBlock::Reasoning(t) => ContentBlock::reasoning(t),
                FuzzBlock::ToolCall(id, n, a) => ContentBlock::tool_call(id, n, a),
                FuzzBlock::Plugin(t) => {
                    let mut m = dsh_core::json::JsonObject::new();
                    m.insert("type".into(), serde_json::Value::String(format!("x-{t}")));
                    ContentBlock::Unknown(m)
                }
            }),
        FuzzChunk::Usage(i, o, r) => StreamChunk::usage({
                let mut usage = TokenUsage::new(i, o);
                usage.reasoning_tokens = r;
                usage
            }),
        FuzzChunk::Finish(f, blocks) => StreamChunk::finish_with(match f {
                FuzzFinish::Stop => FinishReason::Stop,
                FuzzFinish::ToolCalls => FinishReason::ToolCalls,
                FuzzFinish::MaxTokens => FinishReason::MaxTokens,
                FuzzFinish::Error(m) => FinishReason::Error { failure: LlmFailure::new("X", m) },
                FuzzFinish::Aborted(m) => FinishReason::Aborted { failure: LlmFailure::new("ABORTED", m) },
            }, blocks.map(|n| ReplayEnvelope::new(
                serde_json::Value::Null,
                Some((0..n % 8).map(|k| serde_json::Value::from(k)).collect()),
            ))),
    }
}

fuzz_target!(|input: Vec<FuzzChunk>| {
    let chunks: Vec<StreamChunk> = input.into_iter().map(chunk).collect();
    let input_bytes: usize = chunks
        .iter()
        .map(|c| serde_json::to_string(c).map(|s| s.len()).unwrap_or(0))
        .sum();
    let mut assembler = BlockAssembler::new();
    let mut validator = StreamValidator::new();
    for c in &chunks {
        assembler.push(c);
        let _ = validator.push(c);
        // Serialization of every chunk round-trips through the parser.
        let text = serde_json::to_string(c).expect("chunks serialize");
        let back: StreamChunk = serde_json::from_str(&text).expect("serialized chunks parse");
        assert_eq!(&back, c);
    }
    let _ = validator.end();
    let first = assembler.blocks();
    assert_eq!(first, assembler.blocks(), "blocks() is idempotent");
    let replay = assembler.replay_state();
    let _ = assembler.interrupted_blocks();
    // The by-value variants agree with the borrowed ones.
    let mut owned = BlockAssembler::new();
    for c in chunks.iter().cloned() {
        owned.push_owned(c);
    }
    assert_eq!(owned.blocks(), first, "push_owned matches push");
    assert_eq!(owned.replay_state(), replay, "push_owned replay state");
    assert_eq!(owned.finish(), assembler.finish());
    assert_eq!(owned.usage(), assembler.usage());
    assert_eq!(owned.interrupted_blocks(), assembler.interrupted_blocks());
    assert_eq!(assembler.clone().into_blocks(), first, "into_blocks matches blocks");
    if let Ok(blocks) = first {
        let out: usize = blocks
            .iter()
            .map(|b| serde_json::to_string(b).map(|s| s.len()).unwrap_or(0))
            .sum();
        // Output is bounded by input (each block's text came from some chunk);
        // the constant covers synthesized ids and JSON framing.
        assert!(out <= input_bytes * 2 + 64 * blocks.len() + 64, "output {out} vs input {input_bytes}");
    }
});
