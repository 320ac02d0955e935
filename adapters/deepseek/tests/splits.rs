//! Split invariance of the body decoder (SSE-2, SSE-1): any split of a body
//! into pieces gives the same chunks, and they always pass the validator.
//! Also the shared workload: `stream.sse` decodes to exactly `chunks.jsonl`.

use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_core::{StreamChunk, validate_stream};
use dsh_deepseek::{DecodeOptions, decode_body, decode_pieces, decode_pieces_with};
use proptest::prelude::*;

/// A realistic body: keep-alives, role delta, reasoning, multi-byte text,
/// CRLF and bare-CR line ends, a tool call in fragments, usage, [DONE].
fn sample_body() -> Vec<u8> {
    let mut s = String::from("\u{FEFF}: keep-alive\r\n\r\n");
    let events = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think 🤔"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"你好, \"world\"\n"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"é\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens_details":{"reasoning_tokens":4}}}"#,
    ];
    for (i, e) in events.iter().enumerate() {
        let nl = ["\n", "\r\n", "\r"][i % 3];
        s.push_str(&format!("data: {e}{nl}{nl}"));
        if i == 2 {
            s.push_str(":ping\n\n");
        }
    }
    s.push_str("data: [DONE]\r\r");
    s.into_bytes()
}

fn pieces<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        out.push(&body[last..p]);
        last = p;
    }
    out.push(&body[last..]);
    out
}

#[test]
fn sample_body_decodes_to_a_valid_stream() {
    let chunks = decode_body(&sample_body());
    assert!(validate_stream(&chunks).is_empty());
    let last = serde_json::to_string(chunks.last().unwrap()).unwrap();
    assert_eq!(last, r#"{"type":"finish","reason":{"kind":"tool-calls"}}"#);
    assert_eq!(chunks.len(), 12);
    // Byte-at-a-time gives the same.
    let body = sample_body();
    assert_eq!(decode_pieces(body.chunks(1)), chunks);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_split_gives_the_same_chunks(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
        let body = sample_body();
        let whole = decode_body(&body);
        let split = decode_pieces(pieces(&body, &cuts));
        prop_assert_eq!(&split, &whole);
    }

    #[test]
    fn truncated_bodies_fail_cleanly_at_any_split(
        len in 0usize..2000,
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let body = sample_body();
        let body = &body[..len.min(body.len())];
        let whole = decode_body(body);
        prop_assert!(validate_stream(&whole).is_empty(), "{:?}", validate_stream(&whole));
        prop_assert_eq!(decode_pieces(pieces(body, &cuts)), whole);
    }

    #[test]
    fn arbitrary_bytes_never_break_the_grammar(
        body in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let whole = decode_body(&body);
        prop_assert!(validate_stream(&whole).is_empty());
        let ends_in_finish = matches!(whole.last(), Some(StreamChunk::Finish { .. }));
        prop_assert!(ends_in_finish);
        prop_assert_eq!(decode_pieces(pieces(&body, &cuts)), whole);
    }
}

/// Pieces of the shapes other servers send, for the interop
/// profile: bodies are random sequences of them.
const INTEROP_PIECES: [&str; 14] = [
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"reasoning\":\"hmm\"}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"eos_token\"}]}\n\n",
    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n",
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"g\",\"arguments\":\"{\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
    "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n",
    "event: error\ndata: {\"message\":\"overloaded\"}\n\n",
    ": keep-alive\n\n",
    "data: [DONE]\n\n",
    "{\"choices\":[{\"message\":{\"content\":\"whole\"},\"finish_reason\":\"stop\"}]}",
    "  \n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The interop profile: every body made of other servers' shapes,
    /// cut anywhere and split anywhere, decodes to the same valid stream
    /// (ending in a finish) whatever the split, and never panics.
    #[test]
    fn interop_shapes_any_split_any_cut(
        picks in proptest::collection::vec(0usize..INTEROP_PIECES.len(), 0..12),
        len in 0usize..3000,
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        max in prop_oneof![Just(16usize), Just(64), Just(1 << 20)],
    ) {
        let body: String = picks.iter().map(|i| INTEROP_PIECES[*i]).collect();
        let body = &body.as_bytes()[..len.min(body.len())];
        let mut options = DecodeOptions::interop();
        options.max_event_bytes = max;
        let whole = decode_pieces_with(std::iter::once(body), &options);
        prop_assert!(validate_stream(&whole).is_empty(), "{:?}", validate_stream(&whole));
        let ends_in_finish = matches!(whole.last(), Some(StreamChunk::Finish { .. }));
        prop_assert!(ends_in_finish);
        prop_assert_eq!(decode_pieces_with(pieces(body, &cuts), &options), whole);
    }

    #[test]
    fn interop_arbitrary_bytes_never_break_the_grammar(
        body in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let options = DecodeOptions::interop();
        let whole = decode_pieces_with(std::iter::once(&body[..]), &options);
        prop_assert!(validate_stream(&whole).is_empty());
        let ends_in_finish = matches!(whole.last(), Some(StreamChunk::Finish { .. }));
        prop_assert!(ends_in_finish);
        prop_assert_eq!(decode_pieces_with(pieces(&body, &cuts), &options), whole);
    }
}

/// The vendored test data (`testdata/` at the repository root).
fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// The workload generator's note: `chunks.jsonl` is exactly what the
/// reference adapter produces from `stream.sse`.
#[test]
fn workload_stream_decodes_to_the_reference_chunks() {
    let dir = std::env::temp_dir().join(format!("dsh-deepseek-wl-{}", std::process::id()));
    let status = Command::new("python3")
        .arg(testdata_dir().join("bench/gen_workloads.py"))
        .arg("--out")
        .arg(&dir)
        .args(["--seed", "7", "--chunks", "3000", "--events", "50"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs gen_workloads.py");
    assert!(status.success());
    let sse = std::fs::read(dir.join("stream.sse")).unwrap();
    let expected = std::fs::read_to_string(dir.join("chunks.jsonl")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    for piece in [16 * 1024, 7, 1] {
        let chunks = decode_pieces(sse.chunks(piece));
        let got: String = chunks
            .iter()
            .map(|c| serde_json::to_string(c).unwrap() + "\n")
            .collect();
        assert_eq!(got, expected, "piece size {piece}");
        assert!(validate_stream(&chunks).is_empty());
    }
}

/// SSE-1: invalid UTF-8 becomes U+FFFD before the payload is parsed,
/// whether it sits in a used string, an ignored one, or outside strings.
#[test]
fn invalid_utf8_in_payloads_is_replaced() {
    let text = |body: &[u8]| {
        decode_body(body)
            .iter()
            .map(|c| serde_json::to_string(c).unwrap())
            .collect::<Vec<_>>()
    };
    let out =
        text(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\xFFb\"}}]}\n\ndata: [DONE]\n\n");
    assert_eq!(
        out[1],
        "{\"type\":\"text-delta\",\"index\":0,\"text\":\"a\u{FFFD}b\"}"
    );
    let out = text(b"data: {\"id\":\"\xE4\xBD\",\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n");
    assert_eq!(out[1], r#"{"type":"text-delta","index":0,"text":"ok"}"#);
    let out = text(b"data: {\"choices\":[{\"delta\":{\"c\xFFntent\":\"x\"}}]}\n\ndata: [DONE]\n\n");
    assert!(
        out[0].contains("EMPTY_RESPONSE"),
        "an unknown (replaced) key is ignored"
    );
    let out = text(b"data: {\xFF\n\n");
    assert_eq!(
        out[0],
        "{\"type\":\"finish\",\"reason\":{\"kind\":\"error\",\"failure\":{\"message\":\"malformed SSE payload: {\u{FFFD}\",\"code\":\"MALFORMED_RESPONSE\"}}}"
    );
}
