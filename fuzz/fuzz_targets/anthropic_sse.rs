//! The Anthropic Messages SSE decoder (dsh-anthropic) on arbitrary bytes:
//! no panic, the same chunks whether the body comes whole, byte by byte or
//! in pieces of a length the input picks, and the output (closed by AC-6
//! on failure) always passes the stream validator; the block assembler
//! agrees with the `block-end` chunks (by index) of a stream that did not
//! fail. The input is the body itself, so the corpus seeds are plain SSE
//! files.
#![no_main]

use dsh_anthropic::decode_pieces;
use dsh_core::{BlockAssembler, FinishReason, StreamChunk, validate_stream};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 64 * 1024;

fuzz_target!(|body: &[u8]| {
    let whole = decode_pieces(std::iter::once(body), MAX);
    let violations = validate_stream(&whole);
    assert!(violations.is_empty(), "{violations:?}");
    let Some(StreamChunk::Finish { reason, .. }) = whole.last() else {
        panic!("no finish: {whole:?}");
    };
    let step = body.len() % 13 + 1;
    assert_eq!(decode_pieces(body.chunks(step), MAX), whole, "split {step}");
    if body.len() < 4096 {
        assert_eq!(decode_pieces(body.chunks(1), MAX), whole, "1-byte split");
    }
    if !matches!(**reason, FinishReason::Error { .. } | FinishReason::Aborted { .. }) {
        let mut a = BlockAssembler::new();
        a.extend(&whole);
        let ended = dsh_anthropic::check_support::ended_blocks(&whole);
        assert_eq!(a.blocks().ok(), Some(ended));
    }
});
