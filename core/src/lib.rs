//! `dsh-core`: the sans-IO core of dsh, a Rust implementation of the DeepSeek
//! Harness agent runtime.
//!
//! The crate is `#![no_std]` with `alloc`. It never reads a clock, a socket, a
//! file or a random number: time and ids come in as arguments, so the same
//! inputs give byte-identical outputs.
//!
//! - The LLM vocabulary of `spec/streaming.md`: [`ContentBlock`], [`Message`],
//!   [`MessageSource`], [`StreamChunk`], [`FinishReason`], [`TokenUsage`],
//!   [`LlmFailure`], [`GenerateOptions`], [`LlmCallConfig`], [`ToolSchema`].
//! - [`BlockAssembler`]: the fold from a chunk stream to blocks and a message.
//! - [`StreamValidator`]: the stream grammar and adapter contract as a checker,
//!   for people writing and fuzzing adapters.
//! - [`session`]: the event-sourced session log ([`Session`], [`SessionEvent`],
//!   every core payload, the surface, derived history, request folds, fork,
//!   invariants).
//! - [`jsonl`]: the JSONL logical format as pure functions over bytes (header
//!   and event lines, packed chunk rows, the line scanner, crash repair).
//! - [`agent`]: the agent loop of `spec/loop.md` as a sans-IO state machine
//!   ([`agent::Agent`], one config [`agent::AgentConfig`]), the seam table
//!   ([`agent::seams`]) and recorded-session [`agent::replay`].
//! - [`time`]: [`Time`], the one `now` every driving API takes, and how
//!   deadlines relate to it.
//!
//! # Which layer to drive
//!
//! - **The kernel** (`dsh-runtime`'s `Kernel`): what most embedders drive
//!   with their own loop. It wraps [`agent::Agent`] with what every runtime
//!   needs (the flush gate and write batching, tool deadlines and grace,
//!   approvals and plugin asks, live events) and the plugin chain:
//!   `Plugin` is the one extension API. `dsh-std` and `dsh-smol` are ready
//!   loops over it.
//! - **The core machine** ([`agent::Agent`]): for a minimal loop without
//!   plugins, for replay, and for tests of loop behaviour. It has no
//!   extension trait: it raises the seams you claim in
//!   [`agent::AgentConfig::seams`] as [`agent::Output::Hook`] and answers
//!   every other one with the spec default.
//!
//! # Features
//!
//! - `float-roundtrip` (default): exact float parsing, serde_json's
//!   `float_roundtrip` (below). A device build may turn it off
//!   (`default-features = false`): a float read from a log, a tool call or
//!   a response may then be one ulp off, for about 9 KB less code.
//! - `tool-schema` (default): tools' JSON schemas are checked at
//!   registration and arguments and outputs validated against them
//!   ([`agent::tools::ToolDefinition::validate_arguments`]). Off, every tool
//!   takes its arguments unvalidated, as an untyped tool does.
//! - `retry-executor` (default): the `llm-retry` executor
//!   ([`agent::AgentConfig::retry_executor`]). Off, it is left out and the
//!   flag reads as false.
//! - `head-deltas` (default): the HEAD deltas H-1 and H-2
//!   ([`agent::AgentConfig::interrupted_prefix`],
//!   [`agent::AgentConfig::wake_latch`]). Off, they are left out and both
//!   flags read as false.
//! - `value-serializer` (default): serde_json's `Value` serializer
//!   (`serde_json::to_value`) for the core's own types (a tool result's
//!   message, replay state, failures, inbox splices, the tool-result
//!   rewrite check). Off, such a value is written as JSON text and read
//!   back: the same `Value` (with `float-roundtrip` off, a float may read
//!   one ulp off), and serde_json's `Value` serializer (`to_value` and its
//!   raw value emitters) is left out.
//! - `std-sort` (default): the standard sort (`sort_unstable_by` on key and
//!   position) for the core's one stable sort (prompt sections and
//!   contexts, retry codes). Off, a binary insertion over
//!   `partition_point` and `Vec::insert`: the same order, O(n^2) moves for
//!   the few items sorted, about 2 KB less code.
//! - `error-texts` (default): the `Display` of [`session::AppendError`],
//!   [`session::SeedError`], [`agent::InputError`] and [`agent::InboxError`]
//!   names the seqs, ids, keys and details, and so do the details and
//!   messages the core builds (an append error's `detail`, a tool error
//!   result such as `unknown tool "x"`, a turn error). Off, each prints or
//!   builds a fixed short text (an append error still after its rule, e.g.
//!   `S1: seq mismatch`; `unknown tool`): the errors stay typed with their
//!   fields and codes, only the messages are shorter, for about 3.5 KB less
//!   code.
//! - `prompt-templates` (default): `{{name}}` references in system-prompt
//!   sections are interpolated (SP-3) from
//!   [`agent::AgentConfig::variables`] and the `provider`, `model` and
//!   `cwd` variables, strictly. Off, a section's text is used as it is
//!   (`{{name}}` included, never an error), [`agent::AgentConfig::variables`]
//!   is not read and the default assembly has no variables, for about 3 KB
//!   less code.
//! - `runtime-context` (default): the runtime-context snapshot (LC-12):
//!   non-empty [`agent::AgentConfig::contexts`] (or an assembly's) enter the
//!   request as a snapshot message, and a snapshot in the log is cleared
//!   when they go. Off, contexts are not sent and no snapshot or clearing
//!   message is written, for about 1 KB less code.
//! - `surface-replace` (default): surface replacements (S5-S8: compaction,
//!   tool-result rewrites). Off, an event whose `surfaceOp` is a replace is
//!   refused ([`AppendError::InvalidSurfaceOp`], S5), and so is a log or
//!   seed holding one, for about 1.5 KB less code.
//! - `tool-order` (default): `toolOrder` (SP-4,
//!   [`agent::AgentConfig::tool_order`]). Off, the order is not read and
//!   tools are always sent in name order (an order naming an unknown tool
//!   is no error).
//! - `defmt`: derives `defmt::Format` on the public types, for logging from a
//!   microcontroller.
//!
//! `float-roundtrip`, `tool-schema`, `retry-executor`, `head-deltas`,
//! `value-serializer`, `std-sort`, `error-texts`, `prompt-templates`,
//! `runtime-context`, `surface-replace` and `tool-order` are on by default.
//! Each default feature keeps code a device may not need; `dsh-embedded`'s
//! `examples/firmware` builds without them (its README says what each
//! saves).
//!
//! # serde_json
//!
//! Public types carry `serde_json` 1 values ([`serde_json::Value`], and
//! [`json::JsonObject`], a `serde_json::Map`), so `serde_json` 1 is part of this
//! crate's API: add `serde_json = "1"` to build them (Cargo unifies it with
//! the copy this crate uses). This crate turns on three of its features (the
//! third with its default feature `float-roundtrip`), and
//! Cargo features are additive, so every crate in the same build sees them:
//!
//! - `preserve_order`: a `Map` keeps the order its keys were read or
//!   inserted in. Session events are compared and stored as text, and
//!   plugin blocks, plugin events and unknown fields are written back in
//!   their source key order (session.md J4); a sorted map would change the
//!   bytes of a log on every load and save.
//! - `float_roundtrip`: a float read from a log is the float written, to the
//!   last bit (J6, J7); the default parser may be one ulp off.
//! - `raw_value`: the JSONL reader keeps a payload as its source text where
//!   writing it again would change a byte (J7), and borrows event data
//!   without building a `Value` tree.
//!
//! For other users of `serde_json` in the same build, maps iterate in
//! insertion order instead of sorted order, and float parsing is exact (and
//! slightly slower). Code that needs sorted keys should sort them itself.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

/// An error message: `format!` with feature `error-texts` (default), else
/// the fixed `short` text (the arguments are neither evaluated nor
/// formatted; the dead `format_args!` keeps them used). Shared by dsh's
/// own crates (not an API): the feature tested is the one of the crate
/// where it expands, which must have `extern crate alloc`.
#[doc(hidden)]
#[macro_export]
macro_rules! error_text {
    ($short:literal, $($fmt:tt)+) => {{
        #[cfg(feature = "error-texts")]
        {
            alloc::format!($($fmt)+)
        }
        #[cfg(not(feature = "error-texts"))]
        {
            if false {
                let _ = core::format_args!($($fmt)+);
            }
            alloc::string::String::from($short)
        }
    }};
}

pub mod agent;
mod assembler;
mod chunk;
mod content;
mod ids;
pub mod json;
pub mod jsonl;
mod message;
mod object;
mod options;
pub mod session;
mod text;
pub mod time;
mod validator;

pub use assembler::{AssembleError, BlockAssembler};
pub use chunk::{
    FinishReason, InvalidFailure, LlmError, LlmFailure, ReplayEnvelope, StreamChunk, TokenUsage,
};
pub use content::{ContentBlock, ImageAttachment};
pub use ids::{
    AttachmentId, CallId, MessageId, ProviderRequestId, ReasoningEffortId, RetryId, SessionId,
};
pub use message::{ContextForm, Message, MessageKey, MessageSource, Role, Section};
pub use options::{AdapterDefaults, GenerateOptions, LlmCallConfig, Purpose, ToolSchema};
pub use session::{
    AppendError, EventData, Session, SessionEvent, SessionHeader, SurfaceIntent, SurfaceOp,
};
pub use text::{ChunkText, ToolCallHead};
pub use time::Time;
pub use validator::{Rule, Severity, StreamValidator, Violation, lint_stream, validate_stream};
