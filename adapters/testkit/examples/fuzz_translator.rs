//! A cargo-fuzz template for an adapter's translator. Copy it:
//!
//! 1. `cargo install cargo-fuzz`, then `cargo fuzz init` in your crate;
//! 2. add to `fuzz/Cargo.toml`:
//!    `dsh-testkit = { version = "0.1", features = ["arbitrary"] }` and
//!    `dsh-core = "0.1"`;
//! 3. save this file as `fuzz/fuzz_targets/translator.rs`, replace
//!    [`translate`] with a call to your translator, and replace `main` by
//!
//!    ```text
//!    #![no_main]
//!    libfuzzer_sys::fuzz_target!(|data: &[u8]| raw_bytes(data));
//!    ```
//!
//!    (a second target file can do the same with `near_misses`);
//! 4. `cargo fuzz run translator`.
//!
//! Here `translate` is dsh's own OpenAI-compatible SSE decoder, and `main`
//! runs both targets over generated inputs:
//! `cargo run -p dsh-testkit --features arbitrary --example fuzz_translator`.

use std::convert::Infallible;

use arbitrary::{Arbitrary, Unstructured};
use dsh_core::{StreamChunk, lint_stream};
use dsh_testkit::arbitrary::NearMissStream;
use dsh_testkit::{CheckOptions, KitError, check_translator_with, vectors};

/// Your translator: all pieces of one response body in, chunks out.
fn translate(pieces: &[&[u8]]) -> Result<Vec<StreamChunk>, Infallible> {
    Ok(dsh_deepseek::decode_pieces_with(
        pieces.iter().copied(),
        &dsh_deepseek::DecodeOptions::interop(),
    ))
}

/// Target 1: any bytes. The translator may refuse them (`Err`), but it
/// never panics, and whatever it returns passes every check of the
/// harness. A few split and cut points keep each run fast.
fn raw_bytes(data: &[u8]) {
    match check_translator_with(&CheckOptions::with_max_points(16), data, translate) {
        Ok(_) | Err(KitError::Failed { .. }) => {}
        Err(e) => panic!("{e}\ninput: {}", String::from_utf8_lossy(data)),
    }
}

/// Target 2, for code that consumes chunks (a validator, an assembler, a
/// renderer): a stream that breaks exactly one rule is reported with that
/// rule.
fn near_misses(data: &[u8]) {
    let mut u = Unstructured::new(data);
    if let Ok(NearMissStream { chunks, rule, .. }) = NearMissStream::arbitrary(&mut u) {
        let found: Vec<_> = lint_stream(&chunks).into_iter().map(|v| v.rule).collect();
        assert_eq!(found, [rule]);
    }
}

fn main() {
    // A fixed-seed generator stands in for the fuzzer's inputs.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for v in vectors::OPENAI {
        raw_bytes(v.body);
        // The same body with a few bytes changed.
        let mut body = v.body.to_vec();
        for _ in 0..4 {
            let at = (next() % body.len() as u64) as usize;
            body[at] = next() as u8;
        }
        raw_bytes(&body);
    }
    for _ in 0..200 {
        let data: Vec<u8> = (0..256).map(|_| next() as u8).collect();
        near_misses(&data);
    }
    println!("fuzz_translator: all targets passed");
}
