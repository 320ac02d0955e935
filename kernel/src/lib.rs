//! `dsh-runtime`: the runtime kernel of dsh.
//!
//! # Which layer to drive
//!
//! This is the layer an embedder drives: a sans-IO loop with the decisions
//! every runtime shares (below) and the plugin chain ([`Plugin`], the one
//! extension API; its seam methods come from the seam table in
//! `dsh_core::agent::seams`). It has one config, [`AgentConfig`], whose
//! defaults for the loop itself are the core's one default set. Below it,
//! `dsh_core::agent::Agent` is the bare loop (no plugins, no persistence
//! batching, no tool deadlines): drive it only for replay or loop tests.
//! Above it, `dsh-std` (threads) and `dsh-smol` (async tasks) are
//! ready-made runtimes over this kernel.
//!
//! The floors, the seam model and the drain rule: docs/architecture.md.
//!
//! A [`Kernel`] owns one agent's sans-IO core machine plus every decision a
//! runtime used to make for itself: the flush gate and checkpoint batching
//! (SM-12 to SM-14), tool scheduling (deadlines, grace, cancel, abort,
//! several bodies in flight), approvals and other plugin asks, id and
//! jitter injection, live-event fan-out, and the [`Plugin`] chain. A
//! runtime is a loop: feed inputs with `now`, drain [`Kernel::poll`], carry
//! each [`Effect`] to a thread, a task or a link, sleep until
//! [`Kernel::poll_timeout`]. The carrying is written once, in [`exec`]: a
//! runtime implements [`exec::Dispatch`] for its I/O and calls
//! [`exec::carry`] and [`exec::feed`]; `dsh-std`, `dsh-smol` and
//! `dsh-embedded` are such loops. `examples/byo.rs` is a hand-written one
//! over [`Kernel::poll`] directly.
//!
//! The one behaviour for each thing the runtimes used to decide apart:
//!
//! | decision | behaviour |
//! |---|---|
//! | failed write before a model request (SM-14) | the request is not sent; the turn ends in error `FLUSH_FAILED` with the store's message |
//! | failed write before a tool body | the body does not run; the call gets an error result with the store's message |
//! | failed write while a response streams | the stream is stopped; the turn ends in error `FLUSH_FAILED`; what streamed stays in the log |
//! | failed write of the turn's end | published before idle; [`TurnSummary::store_error`] and [`Kernel::store_error`] carry it until a write succeeds |
//! | stream validation | with [`AgentConfig::validate_streams`] (default: on in debug builds, off in release) every chunk goes through a [`StreamValidator`](dsh_core::StreamValidator); on the first error (not a warning) the stream is stopped and the turn ends in error `INVARIANT` naming the rule |
//! | response size | past [`AgentConfig::max_response_bytes`] (text, reasoning, tool calls, plus [`CHUNK_OVERHEAD_BYTES`] a chunk; default 32 MiB) the stream is stopped, the chunk refused, and the turn ends in error `RESPONSE_TOO_LARGE` |
//! | steps per turn | at the pre-step of step [`AgentConfig::max_steps_per_turn`]` + 1` (default 200) the turn is cancelled with cause `{"kind":"hook","reason":"max steps per turn (N) reached"}` (SM-10 d) |
//! | tool deadline (TL-14) | the definition's `timeoutMs` (rounded up), else [`AgentConfig::tool_timeout_ms`] (default none); at the deadline the body is told to stop, and the result is `tool call timed out after <ms>ms` (`ToolTimeoutError` / `TOOL_TIMEOUT`) whether the body returns within the grace or not |
//! | abort during a body (LC-25, TL-13) | the body is told to stop and its result is awaited for the grace period (a success becomes `ABORTED` in the core); after it, the kernel answers `ABORTED` |
//! | deferred seams | every seam a plugin handles is answered by the plugin chain; asks are withdrawn (`Reply::Cancelled`) on abort and disposal |
//! | resume | the log gets `session/end-seed` (IB-14) |
//! | request config | `reasoning_effort`, `temperature`, `stop` of the config fill every request seed that lacks them |
//! | persistence | one batch per checkpoint, plus the rest when the agent goes quiet or is disposed |
//! | header `cwd` | the absolute working directory |
//!
//! The drain rule: drain [`Kernel::poll`] until `None`, carry out the
//! effects, and only then feed the kernel what they gave back; then drain
//! again. A minimal loop over a scripted model that stores the
//! log as JSONL (header line first), then reloads it and resumes
//! (`examples/byo.rs` is the complete version, with a tool and timers):
//!
//! ```
//! use dsh_core::agent::InboxTarget;
//! use dsh_core::jsonl::{encode_batch, encode_header_line, load_log};
//! use dsh_core::session::TurnEndReason;
//! use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
//! use dsh_runtime::{create_session, resume_session, AgentConfig, Effect, IdMode, Kernel, Time};
//!
//! /// One turn: drain, carry out, feed what came back, until idle. `now` is
//! /// the wall clock (a real loop reads it for every input).
//! fn turn(kernel: &mut Kernel, file: &mut Vec<u8>, now: Time, prompt: Message) {
//!     kernel.send(now, prompt, InboxTarget::NextTurn, true).unwrap();
//!     loop {
//!         let mut effects = Vec::new();
//!         while let Some(effect) = kernel.poll() {
//!             effects.push(effect); // no input while draining
//!         }
//!         if effects.is_empty() {
//!             assert!(kernel.is_idle());
//!             return;
//!         }
//!         for effect in effects {
//!             match effect {
//!                 Effect::StartModel(call) => {
//!                     let stream = [
//!                         StreamChunk::block_start(0, "text"),
//!                         StreamChunk::TextDelta { index: 0, text: "hello".into() },
//!                         StreamChunk::block_end(0, ContentBlock::text("hello")),
//!                         StreamChunk::finish(FinishReason::Stop),
//!                     ];
//!                     for chunk in stream {
//!                         kernel.model_chunk(now, call.attempt, chunk).unwrap();
//!                     }
//!                     kernel.model_end(now, call.attempt).unwrap();
//!                 }
//!                 Effect::Persist { range, .. } => {
//!                     let events = &kernel.session().events()[range.start as usize..range.end as usize];
//!                     encode_batch(events, false, file);
//!                     kernel.persisted(now, Ok(())).unwrap();
//!                 }
//!                 _ => {}
//!             }
//!         }
//!     }
//! }
//!
//! let mut config = AgentConfig::new(LlmCallConfig::new("mock", "mock"));
//! config.ids = IdMode::Sequential;
//! let t1 = Time::from_millis(1_700_000_000_000);
//! let session = create_session("s1".into(), t1, None).unwrap();
//! let mut file = Vec::new(); // the store: a JSONL file
//! encode_header_line(session.header(), &mut file);
//! let mut kernel = Kernel::new(config.clone(), session, 0, Vec::new()).unwrap();
//! turn(&mut kernel, &mut file, t1, Message::user("m1", vec![ContentBlock::text("hi")]));
//! assert_eq!(kernel.summary().reason, Some(TurnEndReason::Completed));
//!
//! // Later: reload the file and resume in a new kernel.
//! let log = load_log(&file, &[]).unwrap();
//! let stored = log.session.len();
//! let header = log.session.header().clone();
//! let t2 = t1 + 60_000;
//! let session = resume_session(header, log.session.events().to_vec(), t2).unwrap();
//! let mut kernel = Kernel::new(config, session, stored, Vec::new()).unwrap();
//! turn(&mut kernel, &mut file, t2, Message::user("m2", vec![ContentBlock::text("again")]));
//! assert_eq!(kernel.summary().turn, 2);
//! assert_eq!(load_log(&file, &[]).unwrap().session.len(), kernel.session().len());
//! ```
//!
//! # Features
//!
//! - `plugins` (default): the plugin chain. [`Kernel::new`] takes plugins
//!   and each seam a plugin declares runs through them (asks, approvals,
//!   side model calls, commands, event and flush listeners). A device
//!   build without plugins turns it off (`default-features = false`): the
//!   chain is left out of the binary, [`Kernel::new`] refuses any plugin
//!   (`KernelError::NoPluginChain`), every seam keeps the value it has with
//!   no plugin registered (as the default build does then), and
//!   [`Kernel::answer`] finds no ask pending.
//! - `stream-validation` (default): [`AgentConfig::validate_streams`] (on in
//!   debug builds) runs every chunk through a
//!   [`StreamValidator`](dsh_core::StreamValidator). Off, the validator is
//!   left out of the build and the flag reads as false (as in a release
//!   build's default).
//! - `error-texts` (default): [`KernelError`]'s `Display` names the attempt,
//!   token or ask and wraps the inner error's text, and the kernel's own
//!   messages (a tool timeout's result, a store failure, refusals) name
//!   their details (`dsh-core/error-texts`). Off, a fixed short text (an
//!   input or append error prints the core's short text): errors stay
//!   typed and codes unchanged, only messages are shorter.
//! - `std`: links `std` (serde_json's `std` feature). The host glue of the
//!   std runtimes (clock, model providers, the cancel token, their error
//!   type) is the crate `dsh-host`, one floor up.
//!
//! `plugins`, `stream-validation` and `error-texts` are on by default, and
//! with them the core's default features (`dsh-core/default`:
//! `float-roundtrip`, `tool-schema`, `retry-executor`, `head-deltas`,
//! `value-serializer`, `std-sort`, `error-texts`, `prompt-templates`,
//! `runtime-context`, `surface-replace`, `tool-order`): this crate names
//! the core with its default features off, so a device build
//! (`default-features = false`) leaves them out through this one.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

// `error_text!`: dsh-core's, expanded with this crate's `error-texts`.
#[macro_use]
extern crate dsh_core;
#[cfg(feature = "std")]
extern crate std;

pub mod exec;
mod ids;
mod kernel;
mod plugin;
pub mod replay;
mod session;
mod types;

pub use ids::{IdMode, Ids, Rng};
pub use kernel::Kernel;
pub use plugin::{
    ApprovalDecision, Ask, Cx, Flow, Plugin, Reply, SIDE_REPLY_MAX_BYTES, Seams, SideCollector,
    SideReply, ToolDispatch,
};
pub use session::{create_session, fork_session, resume_session};
pub use types::{
    AgentConfig, AgentEvent, ApprovalRequestId, AskId, CHUNK_OVERHEAD_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STEPS_PER_TURN, DEFAULT_TOOL_GRACE_MS,
    DEFAULT_WRITE_BATCH_MAX_DELAY_MS, Effect, KernelError, TurnSummary,
};

pub use dsh_core::Time;
pub use dsh_core::agent::{
    AgentStatus, AttemptId, CancelCause, Checkpoint, InboxTarget, ToolToken,
};
