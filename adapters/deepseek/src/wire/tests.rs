use super::fast::{FastState, fast_reader_agrees, read_shape};
use super::*;
use alloc::format;

/// Canonical DeepSeek payloads (the shapes of the bench workload).
const CANONICAL: [&str; 6] = [
    r#"{"id":"a","object":"chat.completion.chunk","created":1785772482,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" we"},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"content":"你好 🙂","reasoning_content":null},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_00_x","type":"function","function":{"name":"bash","arguments":""}}]},"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"arguments":"_confi"}}]},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#,
];

/// Kept strings with escapes (tool-call arguments are JSON text), as
/// servers write them; every one is read by the fast path.
const ESCAPED: [&str; 6] = [
    r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pattern\": \"parse_cache\\\\(\", \"path\": \"src/\"}"}}]},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"content":"line one\nline two\ttab \\ back \/ slash \b\f\r"},"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"content":"caf\u00e9 \u4f60\u597D \ud83d\ude80 \u0000 \u001f"},"finish_reason":null}]}"#,
    r#"{"id":"a","choices":[{"index":0,"delta":{"reasoning_content":"\"quoted\""}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_\u0031","function":{"name":"b\u0061sh","arguments":"\\"}}]}}]}"#,
    r#"{"choices":[{"delta":{"content":"\"","reasoning":"\\n"}}]}"#,
];

/// Unusual but valid (or nearly valid) payloads.
const ODD: [&str; 32] = [
    r#" { "choices" : [ { "delta" : { "content" : "x" } } ] } "#,
    r#"{"choices":[{"delta":{"content":"a"},"delta":{"reasoning_content":"b"}}]}"#,
    r#"{"choices":[{"delta":{"content":5,"reasoning":true,"reasoning_content":[1,{"a":null}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":"1"},{"index":null},{"index":true},{"index":[]},{"index":{}},{}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":1.0},{"index":-0},{"index":1e2},{"index":12345678901234567890}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[1]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":{"index":0}}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":null}}],"choices":null}"#,
    r#"{"choices":[1,{"delta":{}}]}"#,
    r#"{"choices":"x"}"#,
    r#"{"choices":[{"delta":"x","finish_reason":7}]}"#,
    r#"{"choices":[{"message":{"content":"x"}}]}"#,
    r#"{"choices":[{"delta":{},"message":{"content":"x"},"delta":null}]}"#,
    r#"{"choices":[{"delta":{"content":"a\"b"}}]}"#,
    r#"{"choices":[{"delta":{"content":"a\u0041"}}]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
    r#"{"choices":[],"error":{"message":"boom"}}"#,
    r#"{"choices":[],"error":null,"x":[[[[]]]],"y":-1.5e-3,"z":"q"}"#,
    r#"{"choices":[{"delta":{"content":"x"}}]} x"#,
    r#"{"choices":[{"delta":{"content":"x"}}]"#,
    r#"[{"choices":[]}]"#,
    r#""x""#,
    r#"{"choices":[{"delta":{"content":1e999}}]}"#,
    r#"{"a":01,"choices":[]}"#,
    // Escapes serde refuses (or reads differently): the serde path.
    r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\udc00x"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud800\u0041"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud800\n"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\u12g4"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\x41"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\u004"}}]}"#,
    r#"{"choices":[{"delta":{"content":"tab\	raw"}}]}"#,
];

fn sse_payloads(body: &str) -> impl Iterator<Item = &str> {
    body.split('\n')
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data: "))
        .filter(|p| *p != "[DONE]")
}

/// Whenever the fast reader accepts, serde accepts the same bytes and
/// reads the same payload.
fn agrees(bytes: &[u8]) -> bool {
    agrees_after(bytes, &mut FastState::default())
}

/// [`agrees`] with what earlier payloads left in `state`.
fn agrees_after(bytes: &[u8], state: &mut FastState) -> bool {
    fast_reader_agrees(bytes, state).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether `bytes` fits the remembered shape.
fn shaped(bytes: &[u8], state: &FastState) -> bool {
    state
        .shape
        .as_ref()
        .is_some_and(|s| read_shape(s, bytes, &mut Payload::default()))
}

#[test]
fn the_fast_reader_reads_canonical_payloads_as_serde_does() {
    let mut corpus: Vec<&str> = CANONICAL.to_vec();
    for body in [
        include_str!("../../tests/interop/unindexed_tool_calls.sse"),
        include_str!("../../tests/interop/reasoning_field_then_text.sse"),
        include_str!("../../tests/interop/tool_call_without_id.sse"),
        include_str!("../../tests/interop/crlf_no_done_stop.sse"),
    ] {
        corpus.extend(sse_payloads(body));
    }
    assert!(corpus.len() > 10);
    corpus.extend(ESCAPED);
    for p in &corpus {
        if !p.contains("\"usage\":{") {
            assert!(agrees(p.as_bytes()), "the fast path should take {p}");
        }
    }
    let taken = ODD.iter().filter(|p| agrees(p.as_bytes())).count();
    assert!(taken >= 8, "only {taken} odd payloads taken");
}

#[test]
fn a_remembered_prefix_is_used_only_when_it_matches() {
    let mut state = FastState::default();
    assert!(agrees_after(CANONICAL[0].as_bytes(), &mut state));
    let expected = r#"{"id":"a","object":"chat.completion.chunk","created":1785772482,"model":"m","system_fingerprint":"fp","#;
    assert_eq!(state.prefix, expected.as_bytes());
    // The next payload of the stream is read after the prefix.
    let next = format!(r#"{expected}"choices":[{{"delta":{{"content":"x"}}}}]}}"#);
    assert!(!shaped(next.as_bytes(), &state));
    assert!(agrees_after(next.as_bytes(), &mut state));
    // A payload that differs inside the prefix is read from its start.
    assert!(agrees_after(CANONICAL[1].as_bytes(), &mut state));
    assert!(
        state
            .prefix
            .starts_with(br#"{"id":"a","object":"chat.completion.chunk","created":1,"#)
    );
    // A remembered prefix followed by a bad tail is still rejected.
    let bad = format!(r#"{expected}}}"#);
    assert!(!agrees_after(bad.as_bytes(), &mut state.clone()));
}

#[test]
fn a_payload_of_the_last_shape_is_read_from_its_string() {
    // One delta text: the next payloads differ only in that text.
    let mut state = FastState::default();
    assert!(agrees_after(CANONICAL[1].as_bytes(), &mut state));
    for text in [" more", "", "你好 🙂", "x y z"] {
        let next = CANONICAL[1].replace(" we", text);
        assert!(shaped(next.as_bytes(), &state), "{next}");
        assert!(agrees_after(next.as_bytes(), &mut state), "{next}");
    }
    // A string the shape cannot take alone is read in full, and agrees.
    for text in [r#"a\"b"#, r#"a\\b"#, r#"tab\tx"#, r#"bad\u"#, r#"x\u0001"#] {
        let next = CANONICAL[1].replace(" we", text);
        assert!(!shaped(next.as_bytes(), &state), "{next}");
        agrees_after(next.as_bytes(), &mut state.clone());
    }
    let raw_quote = CANONICAL[1].replace(" we", "a\"b");
    assert!(!shaped(raw_quote.as_bytes(), &state));
    assert!(!agrees_after(raw_quote.as_bytes(), &mut state.clone()));
    let control = CANONICAL[1].replace(" we", "a\u{1}b");
    assert!(!shaped(control.as_bytes(), &state));
    // One tool call's arguments, with its index as the key.
    let mut state = FastState::default();
    assert!(agrees_after(CANONICAL[4].as_bytes(), &mut state));
    let next = CANONICAL[4].replace("_confi", "g: 1}");
    assert!(shaped(next.as_bytes(), &state));
    assert!(agrees_after(next.as_bytes(), &mut state));
    // Payloads with more than one text, a finish reason, an id or a
    // name leave no shape.
    for p in [CANONICAL[3], CANONICAL[5], ESCAPED[5]] {
        let mut state = FastState::default();
        assert!(agrees_after(p.as_bytes(), &mut state), "{p}");
        assert!(state.shape.is_none(), "{p}");
    }
}

#[test]
fn a_whole_stream_reads_as_serde_does() {
    // A DeepSeek-like stream: the role chunk, reasoning, text, two tool
    // calls whose arguments are JSON text (escapes), a finish with usage.
    let head = r#"{"id":"6f1c","object":"chat.completion.chunk","created":1785046653,"model":"deepseek-v4-flash","system_fingerprint":"fp_1","choices":[{"index":0,"delta":"#;
    let tail = r#","logprobs":null,"finish_reason":null}]}"#;
    let mut payloads = alloc::vec![format!(
        r#"{head}{{"role":"assistant","content":null,"reasoning_content":""}}{tail}"#
    )];
    let words = [
        "车", " -", " stre", "am", " 🚀", "", "x y", r#"a\\b"#, r#"\"q\""#, r#"\n"#,
    ];
    for w in words.iter().cycle().take(40) {
        payloads.push(format!(
            r#"{head}{{"content":null,"reasoning_content":"{w}"}}{tail}"#
        ));
    }
    for w in words.iter().cycle().take(40) {
        payloads.push(format!(
            r#"{head}{{"content":"{w}","reasoning_content":null}}{tail}"#
        ));
    }
    for call in 0..2 {
        payloads.push(format!(
            r#"{head}{{"tool_calls":[{{"index":{call},"id":"call_0{call}","type":"function","function":{{"name":"grep","arguments":""}}}}]}}{tail}"#
        ));
        for a in [
            "{\\\"pattern\\\": \\\"",
            "parse",
            "_cache",
            "\\\\(",
            "\\\"}",
        ] {
            payloads.push(format!(
                r#"{head}{{"tool_calls":[{{"index":{call},"function":{{"arguments":"{a}"}}}}]}}{tail}"#
            ));
        }
    }
    payloads.push(String::from(
        r#"{"id":"6f1c","choices":[{"index":0,"delta":{"content":""},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9}}"#,
    ));
    let mut state = FastState::default();
    let (mut fast, mut hits) = (0, 0);
    for p in &payloads {
        let p = p.as_bytes();
        hits += usize::from(shaped(p, &state));
        fast += usize::from(agrees_after(p, &mut state));
    }
    // All but the usage payload take the fast path. By shape: every
    // delta without an escape that follows one of its kind (27 + 27
    // of the 40 + 40, whose first and 12 escaped ones are read in
    // full), and 2 of each call's 5 argument fragments.
    assert_eq!(fast, payloads.len() - 1);
    assert_eq!(hits, 58, "of {}", payloads.len());
}

#[test]
fn the_fast_reader_never_accepts_more_than_serde() {
    // Every one-byte replacement and deletion of every test payload,
    // read from scratch and after the payload's own prefix.
    const BYTES: &[u8] = b"\"\\{}[],:0-1e. \tnx\x01\xff\xe4";
    let mut resumed = 0;
    let mut reshaped = 0;
    for p in CANONICAL.iter().chain(ESCAPED.iter()).chain(ODD.iter()) {
        let p = p.as_bytes();
        let mut state = FastState::default();
        agrees_after(p, &mut state);
        let mut check = |v: &[u8]| {
            agrees(v);
            if v.starts_with(&state.prefix) && !state.prefix.is_empty() {
                resumed += 1;
            }
            if shaped(v, &state) {
                reshaped += 1;
            }
            agrees_after(v, &mut state.clone());
        };
        for i in 0..p.len() {
            let mut v = p.to_vec();
            v.remove(i);
            check(&v);
            for &b in BYTES {
                let mut v = p.to_vec();
                v[i] = b;
                check(&v);
            }
        }
    }
    assert!(resumed > 1000, "the resumed path ran {resumed} times");
    assert!(reshaped > 100, "the shape path ran {reshaped} times");
    // Deep nesting takes the serde path (and its recursion limit).
    let deep = format!(
        "{{\"x\":{}{},\"choices\":[]}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(!agrees(deep.as_bytes()));
}
