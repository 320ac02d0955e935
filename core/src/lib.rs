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
//!
//! # Features
//!
//! - `defmt`: derives `defmt::Format` on the public types, for logging from a
//!   microcontroller.
//!
//! No feature is on by default.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

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
mod validator;

pub use assembler::{ASSEMBLER_SOURCE_PLUGIN, AssembleError, BlockAssembler};
pub use chunk::{
    CHUNK_TYPES, FinishReason, InvalidFailure, LlmError, LlmFailure, ReplayEnvelope, StreamChunk,
    TokenUsage,
};
pub use content::{ContentBlock, ImageAttachment};
pub use ids::{
    AttachmentId, CallId, MessageId, ProviderRequestId, ReasoningEffortId, RetryId, SessionId,
};
pub use message::{
    ContextForm, MODEL_KEY_ORDER, Message, MessageKey, MessageKeyOrder, MessageSource, Role,
    SPEC_KEY_ORDER, Section, TOOL_KEY_ORDER, USER_KEY_ORDER, cap_summary,
};
pub use options::{
    AdapterDefaults, DEEPSEEK_EFFORTS, GenerateOptions, LlmCallConfig, Purpose,
    ReasoningEffortInfo, ToolSchema,
};
pub use serde_json;
pub use session::{
    AppendError, EventData, Session, SessionEvent, SessionHeader, SurfaceIntent, SurfaceOp,
};
pub use text::{ChunkText, ToolCallHead};
pub use validator::{Rule, StreamValidator, Violation, validate_stream};
