//! The adapter kit of dsh: test a translator from a provider's wire format
//! to [`StreamChunk`](dsh_core::StreamChunk)s against the stream grammar (streaming.md 2.5) and
//! the adapter contract (3.1, 3.3).
//!
//! - [`check_translator`]: the harness. Give it one recorded response body
//!   and your translator; it checks the stream validates, that splitting the
//!   input at any byte boundary does not change the chunks, that a cut
//!   input never panics and ends in an error (or `Err`), and that
//!   [`BlockAssembler`](dsh_core::BlockAssembler) agrees with the
//!   `block-end` chunks. [`check_stream`] runs the stream checks alone.
//! - [`vectors`]: OpenAI-compatible response bodies with the chunks a
//!   conforming translator produces.
//! - `strategies` (feature `proptest`): strategies for chunks, well-formed
//!   streams and near-miss streams (one rule broken, with its id).
//! - `arbitrary` (feature `arbitrary`): the same as `Arbitrary` newtypes,
//!   for cargo-fuzz; `examples/fuzz_translator.rs` is a fuzz target to copy.
//!
//! The kit is its own crate so that `dsh-core` stays `no_std` and free of
//! test dependencies: the harness needs `std` (it catches panics).
//!
//! # Writing an adapter
//!
//! An adapter turns a provider's response into chunks: for each content
//! block a `block-start`, its deltas, a `block-end` with the whole block;
//! then at most one `usage`; then exactly one `finish`. A response that
//! breaks off ends in an `error` finish. Write the translator sans-IO (bytes
//! in, chunks out) and feed it what the transport reads, so it can be
//! tested on recorded bodies. A complete example, for a toy line protocol
//! where `t:` lines are text and `.` ends the response:
//!
//! ```
//! use dsh_core::{ContentBlock, FinishReason, LlmFailure, StreamChunk};
//! use dsh_testkit::check_translator;
//!
//! /// Incremental: bytes in, chunks out. Only whole lines are read, so a
//! /// piece may end anywhere.
//! #[derive(Default)]
//! struct Toy {
//!     line: Vec<u8>,
//!     text: String,
//!     open: bool,
//!     done: bool,
//! }
//!
//! impl Toy {
//!     fn push(&mut self, bytes: &[u8], out: &mut Vec<StreamChunk>) {
//!         for &b in bytes {
//!             if b != b'\n' {
//!                 self.line.push(b);
//!                 continue;
//!             }
//!             let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
//!             if let Some(t) = line.strip_prefix("t:") {
//!                 if !self.open {
//!                     self.open = true;
//!                     out.push(StreamChunk::block_start(0, "text"));
//!                 }
//!                 self.text.push_str(t);
//!                 out.push(StreamChunk::text_delta(0, t));
//!             } else if line == "." && !self.done {
//!                 self.done = true;
//!                 if self.open {
//!                     out.push(StreamChunk::block_end(0, ContentBlock::text(self.text.clone())));
//!                     out.push(StreamChunk::finish(FinishReason::Stop));
//!                 } else {
//!                     out.push(error("EMPTY_RESPONSE", "no content")); // AC-9
//!                 }
//!             }
//!         }
//!     }
//!
//!     /// The input is over: a response that did not end is an error.
//!     fn end(&mut self, out: &mut Vec<StreamChunk>) {
//!         if !self.done {
//!             out.push(error("TRANSPORT", "the response broke off"));
//!         }
//!     }
//! }
//!
//! fn error(code: &str, message: &str) -> StreamChunk {
//!     StreamChunk::finish(FinishReason::Error { failure: LlmFailure::new(code, message) })
//! }
//!
//! /// What the harness calls: all pieces of one response.
//! fn translate(pieces: &[&[u8]]) -> Result<Vec<StreamChunk>, std::convert::Infallible> {
//!     let mut toy = Toy::default();
//!     let mut out = Vec::new();
//!     for p in pieces {
//!         toy.push(p, &mut out);
//!     }
//!     toy.end(&mut out);
//!     Ok(out)
//! }
//!
//! let report = check_translator(b"t:Hello, \nt:w\xc3\xb6rld\n.\n", translate).unwrap();
//! assert_eq!(report.chunks.len(), 5);
//! assert!(report.warnings.is_empty());
//! ```
//!
//! In a test, run [`check_translator`] over every recorded body you have
//! (see `tests/deepseek.rs` of this crate for dsh's own SSE translator),
//! and over [`vectors::OPENAI`] if your provider speaks the OpenAI
//! chat-completions wire format. With the `proptest` feature, generate
//! inputs of your wire format from `strategies::well_formed_stream` (encode
//! the chunks back) and check the round trip. With a failure, the error
//! says which check failed, on which split or cut, and with which rule id.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(any(feature = "proptest", feature = "arbitrary"))]
mod build;
mod harness;
pub mod vectors;

#[cfg(feature = "arbitrary")]
#[cfg_attr(docsrs, doc(cfg(feature = "arbitrary")))]
pub mod arbitrary;
#[cfg(feature = "proptest")]
#[cfg_attr(docsrs, doc(cfg(feature = "proptest")))]
pub mod strategies;

#[cfg(any(feature = "proptest", feature = "arbitrary"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "proptest", feature = "arbitrary"))))]
pub use build::NEAR_MISS_RULES;
pub use harness::{
    CheckOptions, Feed, KitError, Report, check_stream, check_translator, check_translator_with,
};
