//! The DeepSeek SSE framer and translator on arbitrary bytes, split at
//! arbitrary points: no panic, the same chunks whatever the split, and the
//! output (closed by AC-6 on failure) always passes the stream validator;
//! the hand-written payload reader never reads a `data:` line differently
//! from serde.
#![no_main]

use arbitrary::Arbitrary;
use dsh_core::{StreamChunk, validate_stream};
use dsh_deepseek::fuzz_support::{FastState, fast_reader_agrees};
use dsh_deepseek::{decode_body, decode_pieces};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Body {
    /// Raw bytes.
    Raw(Vec<u8>),
    /// Payloads framed as `data: …\n\n` events, optionally ended by `[DONE]`.
    Events(Vec<String>, bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    body: Body,
    cuts: Vec<u16>,
}

fuzz_target!(|input: Input| {
    let body = match input.body {
        Body::Raw(bytes) => bytes,
        Body::Events(events, done) => {
            let mut s = String::new();
            for e in events {
                s.push_str("data: ");
                s.push_str(&e);
                s.push_str("\n\n");
            }
            if done {
                s.push_str("data: [DONE]\n\n");
            }
            s.into_bytes()
        }
    };
    // The hand-written payload reader agrees with serde on every `data:`
    // line, each read with what the lines before left, as in a stream.
    let mut state = FastState::default();
    for line in body.split(|b| *b == b'\n') {
        if let Some(p) = line.strip_prefix(b"data: ") {
            let p = p.strip_suffix(b"\r").unwrap_or(p);
            if let Err(e) = fast_reader_agrees(p, &mut state) {
                panic!("{e}");
            }
        }
    }
    let whole = decode_body(&body);
    let violations = validate_stream(&whole);
    assert!(violations.is_empty(), "{violations:?}");
    assert!(matches!(whole.last(), Some(StreamChunk::Finish { .. })));
    let mut points: Vec<usize> = input
        .cuts
        .iter()
        .map(|c| usize::from(*c) % (body.len() + 1))
        .collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut last = 0;
    for p in points {
        pieces.push(&body[last..p]);
        last = p;
    }
    pieces.push(&body[last..]);
    assert_eq!(decode_pieces(pieces), whole, "split changed the chunks");
});
