//! The interop wire-shape corpus (`tests/interop/`) through the
//! decoder: the interop profile reads every shape; the reference profile
//! keeps the spec's behaviour (E-1, SSE-7, T-5, 5.12).

use dsh_core::{ContentBlock, FinishReason, StreamChunk, validate_stream};
use dsh_deepseek::{DecodeOptions, decode_pieces_with};

fn body(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/interop/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes `name` whole, then split at every byte and into 7-byte reads:
/// the chunks must not depend on the split. Every sequence passes the
/// stream grammar.
fn decode(name: &str, options: &DecodeOptions) -> Vec<StreamChunk> {
    let b = body(name);
    let whole = decode_pieces_with(std::iter::once(&b[..]), options);
    assert_eq!(
        decode_pieces_with(b.chunks(1), options),
        whole,
        "{name}: 1-byte split"
    );
    assert_eq!(
        decode_pieces_with(b.chunks(7), options),
        whole,
        "{name}: 7-byte split"
    );
    let violations = validate_stream(&whole);
    assert!(violations.is_empty(), "{name}: {violations:?}");
    whole
}

fn interop(name: &str) -> Vec<StreamChunk> {
    decode(name, &DecodeOptions::interop())
}

fn reference(name: &str) -> Vec<StreamChunk> {
    decode(name, &DecodeOptions::default())
}

fn finish(chunks: &[StreamChunk]) -> &FinishReason {
    match chunks.last() {
        Some(StreamChunk::Finish { reason, .. }) => reason,
        other => panic!("no finish: {other:?}"),
    }
}

/// `(code, message)` of an error or aborted finish.
fn failure(chunks: &[StreamChunk]) -> (String, String) {
    match finish(chunks) {
        FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
            (failure.code.clone(), failure.message.clone())
        }
        other => panic!("not a failure: {other:?}"),
    }
}

fn blocks(chunks: &[StreamChunk]) -> Vec<ContentBlock> {
    chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::BlockEnd { block, .. } => Some((**block).clone()),
            _ => None,
        })
        .collect()
}

fn text(chunks: &[StreamChunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn item1_inband_error_after_text_is_the_servers_error() {
    let c = interop("inband_error_after_text.sse");
    assert_eq!(text(&c), "One two", "the partial text is still delivered");
    assert_eq!(
        failure(&c),
        ("SERVER".into(), "upstream model crashed".into())
    );
    // E-1 (reference): ignored, the partial text is a finished turn.
    assert_eq!(
        finish(&reference("inband_error_after_text.sse")),
        &FinishReason::Stop
    );
}

#[test]
fn item1_inband_error_alone_is_classified_not_empty() {
    let (code, message) = failure(&interop("inband_error_alone.sse"));
    assert_eq!(code, "CONTEXT_WINDOW_EXCEEDED");
    assert!(message.contains("maximum context length"), "{message}");
    // TV-8 (reference): EMPTY_RESPONSE.
    assert_eq!(
        failure(&reference("inband_error_alone.sse")).0,
        "EMPTY_RESPONSE"
    );
}

#[test]
fn item1_event_error_frame_is_the_servers_error() {
    let c = interop("event_error_frame.sse");
    assert_eq!(text(&c), "partial");
    assert_eq!(
        failure(&c),
        ("PROVIDER_ERROR".into(), "overloaded, try later".into())
    );
    // SV-12 (reference): the event type is ignored; the data has no choices
    // and the body ends without [DONE].
    assert_eq!(
        failure(&reference("event_error_frame.sse")).0,
        "STREAM_CLOSED"
    );
}

#[test]
fn item2_no_done_after_a_finish_reason_completes() {
    for name in ["no_done_after_stop.sse", "crlf_no_done_stop.sse"] {
        let c = interop(name);
        assert_eq!(finish(&c), &FinishReason::Stop, "{name}");
        assert_eq!(failure(&reference(name)).0, "STREAM_CLOSED", "SSE-7 {name}");
    }
    let c = interop("no_done_after_stop.sse");
    assert_eq!(text(&c), "Hello world");
    assert!(c.iter().any(|c| matches!(c, StreamChunk::Usage { .. })));
    // Without a finish reason the body really was cut: still STREAM_CLOSED.
    assert_eq!(
        failure(&interop("no_done_no_finish.sse")).0,
        "STREAM_CLOSED"
    );
}

#[test]
fn item3_tool_calls_without_index_stay_apart() {
    let calls: Vec<(String, String, String)> = blocks(&interop("unindexed_tool_calls.sse"))
        .into_iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.0, name, arguments)),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            ("fc_1".into(), "read".into(), r#"{"path":"a.txt"}"#.into()),
            ("fc_2".into(), "read".into(), r#"{"path":"b.txt"}"#.into()),
        ]
    );
    // T-5 (reference): one absent index is one key, so one merged call.
    let merged = blocks(&reference("unindexed_tool_calls.sse"));
    assert_eq!(merged.len(), 1);
}

#[test]
fn item4_a_tool_call_without_id_gets_a_unique_one() {
    let ids = |options: &DecodeOptions| -> Vec<String> {
        blocks(&decode("tool_call_without_id.sse", options))
            .into_iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall { id, .. } => Some(id.0),
                _ => None,
            })
            .collect()
    };
    let mut a = DecodeOptions::interop();
    a.call_id_prefix = "call_a_".into();
    let mut b = DecodeOptions::interop();
    b.call_id_prefix = "call_b_".into();
    assert_eq!(ids(&a), vec!["call_a_0"]);
    assert_ne!(ids(&a), ids(&b), "two calls (steps) never share an id");
    // TV-7 (reference): the id stays empty.
    assert_eq!(ids(&DecodeOptions::default()), vec![""]);
}

#[test]
fn item5_stop_synonyms_complete_and_other_reasons_keep_t6() {
    for name in [
        "finish_eos_token.sse",
        "finish_stop_sequence.sse",
        "finish_end_turn.sse",
        "finish_stop.sse",
    ] {
        assert_eq!(finish(&interop(name)), &FinishReason::Stop, "{name}");
        assert_eq!(text(&interop(name)), "Done.");
    }
    assert_eq!(
        failure(&reference("finish_eos_token.sse")).0,
        "EOS_TOKEN",
        "5.12"
    );
    // T-6 / 5.12: a reason that is not a stop synonym keeps its error.
    assert_eq!(
        failure(&interop("finish_content_filter.sse")),
        (
            "CONTENT_FILTER".into(),
            "model stopped: content_filter".into()
        )
    );
}

#[test]
fn item6_the_reasoning_field_is_reasoning() {
    let c = interop("reasoning_field_only.sse");
    assert_eq!(finish(&c), &FinishReason::Stop, "not EMPTY_RESPONSE");
    assert_eq!(
        blocks(&c),
        vec![ContentBlock::Reasoning {
            text: "Thinking hard about it".into()
        }]
    );
    assert_eq!(
        failure(&reference("reasoning_field_only.sse")).0,
        "EMPTY_RESPONSE"
    );
    let c = interop("reasoning_field_then_text.sse");
    assert_eq!(
        blocks(&c),
        vec![
            ContentBlock::Reasoning {
                text: "Let me see.".into()
            },
            ContentBlock::Text { text: "42".into() },
        ]
    );
}

#[test]
fn item7_a_json_body_is_one_reply_or_its_error() {
    let c = interop("json_completion.json");
    assert_eq!(text(&c), "A full answer.");
    assert_eq!(finish(&c), &FinishReason::Stop);
    assert!(c.iter().any(|c| matches!(c, StreamChunk::Usage { .. })));
    let calls = blocks(&interop("json_completion_tool_call.json"));
    assert_eq!(
        calls,
        vec![ContentBlock::tool_call("t1", "read", r#"{"path":"a.txt"}"#)]
    );
    let (code, message) = failure(&interop("json_error_200.json"));
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("AUTH", "Invalid API key provided")
    );
    // Reference: not SSE at all, so the stream "ended without [DONE]".
    assert_eq!(
        failure(&reference("json_completion.json")).0,
        "STREAM_CLOSED"
    );
}

#[test]
fn a_json_body_is_bounded_too() {
    let mut options = DecodeOptions::interop();
    options.max_event_bytes = 32;
    let b = body("json_completion.json");
    let c = decode_pieces_with(b.chunks(5), &options);
    assert_eq!(failure(&c).0, "RESPONSE_TOO_LARGE");
    let endless = vec![b'a'; 1000];
    for opts in [options.clone(), {
        let mut r = DecodeOptions::default();
        r.max_event_bytes = 32;
        r
    }] {
        let c = decode_pieces_with(endless.chunks(10), &opts);
        let (code, message) = failure(&c);
        assert_eq!(code, "RESPONSE_TOO_LARGE");
        assert!(message.contains("32 bytes"), "{message}");
    }
}

/// A chunk whose choice carries `message` instead of
/// `delta` (sent by some proxies) is read as the delta by the interop
/// profile; a choice with both keeps `delta`. The reference ignores
/// `message`, so the same body is `EMPTY_RESPONSE` there (T-7).
#[test]
fn message_instead_of_delta_is_read() {
    let c = interop("message_instead_of_delta.sse");
    assert_eq!(finish(&c), &FinishReason::ToolCalls, "not EMPTY_RESPONSE");
    assert_eq!(
        blocks(&c),
        vec![
            ContentBlock::Reasoning {
                text: "Counting.".into()
            },
            ContentBlock::Text {
                text: "Hello!".into()
            },
            ContentBlock::tool_call("call_1", "read", r#"{"path":"a.txt"}"#),
        ]
    );
    // The reference reads only the one `delta`.
    assert_eq!(text(&reference("message_instead_of_delta.sse")), "!");
    let c = interop("message_only.sse");
    assert_eq!(finish(&c), &FinishReason::Stop, "not EMPTY_RESPONSE");
    assert_eq!(text(&c), "Hello");
    assert_eq!(failure(&reference("message_only.sse")).0, "EMPTY_RESPONSE");
}
