//! Anthropic Messages stream vectors (tests/vectors, written from the
//! documented event shapes) through the codec: the chunks do
//! not depend on how the body is split, every sequence passes the stream
//! grammar (`validate_stream`) and the `BlockAssembler` agrees with the
//! `block-end` chunks.

use dsh_anthropic::decode_pieces;
use dsh_core::{
    BlockAssembler, ContentBlock, FinishReason, StreamChunk, TokenUsage, validate_stream,
};

const MAX: usize = 1 << 20;

fn body(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn decode(name: &str) -> Vec<StreamChunk> {
    let b = body(name);
    let whole = decode_pieces(std::iter::once(&b[..]), MAX);
    assert_eq!(
        decode_pieces(b.chunks(1), MAX),
        whole,
        "{name}: 1-byte split"
    );
    assert_eq!(
        decode_pieces(b.chunks(7), MAX),
        whole,
        "{name}: 7-byte split"
    );
    let violations = validate_stream(&whole);
    assert!(violations.is_empty(), "{name}: {violations:?}");
    // The assembler folds the deltas into the blocks the adapter ended
    // (a failed stream ends no block: its deltas are partial).
    let mut a = BlockAssembler::new();
    a.extend(&whole);
    if !matches!(finish(&whole), FinishReason::Error { .. }) {
        assert_eq!(a.blocks().unwrap(), ended(&whole), "{name}: assembler");
    }
    assert_eq!(&a.finish(), finish(&whole), "{name}");
    whole
}

fn ended(chunks: &[StreamChunk]) -> Vec<ContentBlock> {
    dsh_anthropic::check_support::ended_blocks(chunks)
}

fn finish(chunks: &[StreamChunk]) -> &FinishReason {
    match chunks.last() {
        Some(StreamChunk::Finish { reason, .. }) => reason,
        other => panic!("no finish: {other:?}"),
    }
}

fn code(chunks: &[StreamChunk]) -> String {
    match finish(chunks) {
        FinishReason::Error { failure } => failure.code.clone(),
        other => panic!("not an error: {other:?}"),
    }
}

fn usage(chunks: &[StreamChunk]) -> Option<TokenUsage> {
    chunks.iter().find_map(|c| match c {
        StreamChunk::Usage { usage } => Some(**usage),
        _ => None,
    })
}

fn replay_blocks(chunks: &[StreamChunk]) -> serde_json::Value {
    match chunks.last() {
        Some(StreamChunk::Finish {
            replay_state: Some(r),
            ..
        }) => serde_json::json!(r.blocks),
        other => panic!("no replay state: {other:?}"),
    }
}

#[test]
fn text_stream() {
    let c = decode("text.sse");
    assert_eq!(ended(&c), vec![ContentBlock::text("Hello! 你好 🙂")]);
    assert_eq!(finish(&c), &FinishReason::Stop);
    assert_eq!(usage(&c), Some(TokenUsage::new(25, 15)));
}

#[test]
fn thinking_text_and_tool_use() {
    let c = decode("thinking_tool_use.sse");
    assert_eq!(
        ended(&c),
        vec![
            ContentBlock::Reasoning {
                text: "The user wants the weather. I will call the tool.".into()
            },
            ContentBlock::text("Let me check."),
            ContentBlock::tool_call(
                "toolu_01T1x",
                "get_weather",
                r#"{"location": "San Francisco, CA"}"#
            ),
        ]
    );
    assert_eq!(finish(&c), &FinishReason::ToolCalls);
    let u = usage(&c).unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (472, 89));
    assert_eq!(u.cache_read_tokens, Some(2048));
    assert_eq!(u.cache_write_tokens, Some(0));
    // The signature rides in the replay envelope, one entry per block.
    assert_eq!(
        replay_blocks(&c),
        serde_json::json!([{"signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}, {}, {}])
    );
}

#[test]
fn redacted_thinking_keeps_its_data() {
    let c = decode("redacted_thinking.sse");
    assert_eq!(
        ended(&c),
        vec![
            ContentBlock::Reasoning { text: "".into() },
            ContentBlock::text("Done."),
        ]
    );
    assert_eq!(
        replay_blocks(&c),
        serde_json::json!([{"redactedData": "EmwKAhgBEgy3va3pzix/LafPsn4a"}, {}])
    );
}

#[test]
fn stop_reasons_errors_and_truncation() {
    assert_eq!(finish(&decode("max_tokens.sse")), &FinishReason::MaxTokens);
    let c = decode("error_overloaded.sse");
    assert_eq!(code(&c), "SERVER", "overloaded_error is retried");
    assert!(
        c.iter().any(
            |x| matches!(x, StreamChunk::TextDelta { text, .. } if text.as_str() == "Partial")
        )
    );
    assert_eq!(code(&decode("no_message_stop.sse")), "STREAM_CLOSED");
    assert_eq!(code(&decode("empty.sse")), "EMPTY_RESPONSE");
}

#[test]
fn malformed_and_oversized_events_are_typed_errors() {
    for (data, want) in [
        ("not json", "MALFORMED_RESPONSE"),
        (
            r#"{"type":"content_block_delta","index":9,"delta":{"type":"text_delta","text":"x"}}"#,
            "MALFORMED_RESPONSE",
        ),
        (
            r#"{"type":"content_block_start","index":0}"#,
            "MALFORMED_RESPONSE",
        ),
        (r#"{"type":"message_start"}"#, "MALFORMED_RESPONSE"),
    ] {
        let b = format!("event: x\ndata: {data}\n\n");
        let c = decode_pieces(std::iter::once(b.as_bytes()), MAX);
        assert_eq!(code(&c), want, "{data}");
        assert!(validate_stream(&c).is_empty());
    }
    // A block opened twice, and a text delta for a tool block.
    let start = r#"data: {"type":"message_start","message":{"id":"m"}}"#;
    let open = r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#;
    for next in [
        open,
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
    ] {
        let b = format!("{start}\n\n{open}\n\n{next}\n\n");
        let c = decode_pieces(std::iter::once(b.as_bytes()), MAX);
        assert_eq!(code(&c), "MALFORMED_RESPONSE", "{next}");
        assert!(validate_stream(&c).is_empty(), "{c:?}");
    }
    // An endless line is cut at the bound, whatever the split.
    let endless = vec![b'a'; 4096];
    for split in [1, 100, 4096] {
        let c = decode_pieces(endless.chunks(split), 1024);
        assert_eq!(code(&c), "RESPONSE_TOO_LARGE");
    }
}

/// A gateway that ignores `stream: true` (the LiteLLM proxy's mock
/// responses) sends one Message JSON body: translated as if streamed; a
/// JSON error body is the stream's error.
#[test]
fn a_json_body_is_one_reply_or_its_error() {
    let c = decode("json_message.json");
    assert_eq!(
        ended(&c),
        vec![
            ContentBlock::Reasoning {
                text: "Short.".into()
            },
            ContentBlock::text("Hello from a JSON body."),
            ContentBlock::tool_call("toolu_j", "read", r#"{"file_path":"a.txt"}"#),
        ]
    );
    assert_eq!(finish(&c), &FinishReason::ToolCalls);
    assert_eq!(
        replay_blocks(&c),
        serde_json::json!([{"signature": "sig-json"}, {}, {}])
    );
    let u = usage(&c).unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (20, 9));
    assert_eq!(code(&decode("json_error.json")), "SERVER");
    // Bounded like an event.
    let b = body("json_message.json");
    assert_eq!(code(&decode_pieces(b.chunks(16), 64)), "RESPONSE_TOO_LARGE");
}

/// Found by the fuzzer: a block whose `content_block_stop` was garbled and
/// a block start of no known shape. The open block ends at `message_stop`,
/// after the later ones, and keeps its first-seen place in the message;
/// the deltas of the unknown block are skipped.
#[test]
fn a_lost_block_stop_keeps_the_block_in_place() {
    let c = decode("lost_block_stop.sse");
    assert_eq!(finish(&c), &FinishReason::ToolCalls);
    let mut a = BlockAssembler::new();
    a.extend(&c);
    assert_eq!(
        a.blocks().unwrap(),
        vec![
            ContentBlock::Reasoning {
                text: "The user wants the weather. I will call the tool.".into()
            },
            ContentBlock::tool_call(
                "toolu_01T1x",
                "get_weather",
                r#"{"location": "San Francisco, CA"}"#
            ),
        ]
    );
}

/// Found by the fuzzer: a tool call with no input (a tool without
/// parameters) has `{}` arguments, and its deltas add up to them (AC-3).
#[test]
fn a_tool_call_without_input_has_empty_object_arguments() {
    let c = decode("tool_use_without_input.sse");
    assert_eq!(
        ended(&c),
        vec![ContentBlock::tool_call("toolu_n", "list_todos", "{}")]
    );
}

/// Found by the fuzzer: blank lines before a (here malformed) JSON body.
/// Whatever the split, the blanks are part of the same body and the error
/// is the same.
#[test]
fn blanks_before_a_json_body_do_not_depend_on_the_split() {
    let b = body("blank_prefixed_bad_json.json");
    let whole = decode_pieces(std::iter::once(&b[..]), MAX);
    assert_eq!(code(&whole), "MALFORMED_RESPONSE");
    for split in 1..=16 {
        assert_eq!(decode_pieces(b.chunks(split), MAX), whole, "split {split}");
    }
    // Blanks before an SSE body are still SSE.
    let mut sse = b"\r\n\r\n".to_vec();
    sse.extend(body("text.sse"));
    let c = decode_pieces(sse.chunks(1), MAX);
    assert_eq!(ended(&c), vec![ContentBlock::text("Hello! 你好 🙂")]);
}
