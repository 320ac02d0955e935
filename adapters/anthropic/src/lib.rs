//! `dsh-anthropic`: the Anthropic Messages API adapter of dsh.
//!
//! `#![no_std]` + `alloc`, no I/O, like the DeepSeek codec whose SSE
//! framer it reuses:
//!
//! - [`build_request_body`]: `GenerateOptions` → the `POST /v1/messages`
//!   body: `system`, `messages` (text, `tool_use`, `tool_result`, images,
//!   signed `thinking` replayed from the message's replay state),
//!   `max_tokens`, `stop_sequences`, `thinking`, and `cache_control`
//!   markers on the cache-stable prefix (system, tools, the conversation);
//! - [`Translator`]: the SSE events (`message_start`,
//!   `content_block_start/delta/stop`, `message_delta`, `message_stop`,
//!   `ping`, `error`) → dsh [`StreamChunk`]s;
//! - [`StreamDecoder`] / [`decode_pieces`]: framer and translator chained,
//!   fed with body pieces of any split, bounded like the DeepSeek decoder;
//! - [`classify_http_error`]: a non-2xx response (or an in-band `error`
//!   event) → the canonical [`LlmError`]: `overloaded_error` and 529 are
//!   `SERVER` (retried), 429 `RATE_LIMIT` with `retry-after`, a too-long
//!   prompt `CONTEXT_WINDOW_EXCEEDED`.
//!
//! Feature `std` adds [`AnthropicWire`]: the codec as a
//! `dsh_deepseek::Wire`, so `dsh_deepseek::DeepSeekClient` carries it over
//! its own transport (ureq, idle watchdog, cancellation, size caps, key
//! redaction) instead of a second HTTP client. The key goes in `x-api-key`
//! with `anthropic-version`.
//!
//! Every chunk sequence the decoder emits passes
//! `dsh_core::StreamValidator` and assembles with `BlockAssembler` (tested
//! on vectors written from the documented event shapes, and fuzzed).
//!
//! Choices:
//! - A `thinking` block's `signature` (and a `redacted_thinking` block's
//!   `data`) cannot live in dsh's reasoning block; it travels in the
//!   `finish` chunk's replay envelope (`blocks[i]`, one entry per block),
//!   which the message source keeps as `replayState`. Reasoning without a
//!   signature is not sent back (the API would reject it).
//! - Tool arguments that are not a JSON object are sent as `{}` input.
//! - Unknown event types and delta types are ignored, as the API docs ask;
//!   a delta for a block that is not open is `MALFORMED_RESPONSE`.
//!
//! # Features
//!
//! - `std`: `AnthropicWire`, this codec as a `dsh_deepseek::Wire` for the
//!   DeepSeek adapter's blocking client. Without it the crate is `no_std`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

mod classify;
mod request;
mod translate;
#[cfg(feature = "std")]
mod wire;

pub use classify::{classify_error_body, classify_http_error, error_code};
pub use request::{
    ANTHROPIC_VERSION, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS, RequestOptions,
    build_request_body, is_anthropic_url, thinking_budget,
};
pub use translate::{StreamDecoder, Translator, decode_pieces, map_stop_reason};
#[cfg(feature = "std")]
pub use wire::{AnthropicWire, messages_url, provider_route};

pub use dsh_core::{LlmError, StreamChunk};

/// Checks shared by the tests and the fuzz target; not a stable API.
#[doc(hidden)]
pub mod check_support {
    use alloc::vec::Vec;
    use dsh_core::{ContentBlock, StreamChunk};

    /// The blocks of the `block-end` chunks, by block index (a block whose
    /// stop was lost ends last but keeps its place in the message).
    pub fn ended_blocks(chunks: &[StreamChunk]) -> Vec<ContentBlock> {
        let mut ended: Vec<(u64, ContentBlock)> = chunks
            .iter()
            .filter_map(|c| match c {
                StreamChunk::BlockEnd { index, block } => Some((*index, (**block).clone())),
                _ => None,
            })
            .collect();
        ended.sort_by_key(|(i, _)| *i);
        ended.into_iter().map(|(_, b)| b).collect()
    }
}
