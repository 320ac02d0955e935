//! `dsh-std`: the blocking std runtime of dsh (see `docs/architecture.md`, "Floors").
//!
//! An [`Agent`] runs the runtime kernel (`dsh_runtime::Kernel`) on one
//! **driver thread**: a thin loop that feeds the kernel its inputs with
//! `now` and carries each effect to a thread. Every decision (the flush
//! gate and checkpoint batching, tool deadlines and abort, approvals,
//! create / resume / fork) is the kernel's, the same in every runtime.
//!
//! - each model attempt is read on a worker thread from a [`ModelProvider`]
//!   (the DeepSeek client), or in place on the driver thread when the
//!   provider answers from memory ([`ModelProvider::blocks`] `false`, as a
//!   [`ScriptedProvider`]); chunks are tagged with the attempt, so chunks
//!   of a cancelled attempt are refused as stale and dropped;
//! - tool bodies (`dsh_tools::ToolSet`) run on worker threads with
//!   cooperative cancellation; events a body logs itself (`todo/write`)
//!   are appended before its result;
//! - tools whose [`ApprovalPolicy`] mode is `ask` become
//!   [`AgentEvent::ApprovalRequested`], answered by
//!   [`Agent::answer_approval`] (the policy is a kernel plugin);
//! - session events are written to the [`SessionStore`](dsh_store::SessionStore)
//!   in one batch per durability checkpoint (loop.md SM-12 to SM-14);
//! - extra behaviour attaches as [`Plugin`]s ([`AgentConfig::plugins`]).
//!
//! Time is [`Clock`] (epoch milliseconds) and ids are UUID v4 from an
//! OS-seeded generator ([`IdMode`] is the test hook for byte-identical
//! logs).
//!
//! ```no_run
//! use std::sync::Arc;
//! use dsh_core::LlmCallConfig;
//! use dsh_std::{Agent, AgentConfig, ScriptedProvider, new_session_id};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(dsh_jsonl::open(dsh_jsonl::JsonlConfig::new("/tmp/sessions"))?);
//! let provider = Arc::new(ScriptedProvider::new([]));
//! let call = LlmCallConfig::new("deepseek", "deepseek-v4-flash");
//! let agent = Agent::create(AgentConfig::new(provider, call, "/tmp/work"), store, new_session_id())?;
//! let events = agent.subscribe();
//! agent.send("hello")?;
//! let summary = agent.wait_idle(None)?;
//! # drop((events, summary)); Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod agent;
mod clock;
pub mod subagents;
mod workers;

pub use agent::{Agent, AgentConfig, LoopOptions, Mailbox, ShellError};
pub use clock::{new_session_id, os_seed};
pub use dsh_approval::{ApprovalDecision, ApprovalMode, ApprovalPolicy};
pub use dsh_host::{ChunkStream, Clock, ModelProvider, ScriptedProvider, ScriptedReply};
pub use dsh_runtime::{
    AgentEvent, ApprovalRequestId, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STEPS_PER_TURN, IdMode,
    Plugin, Reply, Rng, TurnSummary,
};
pub use dsh_tools::ToolSet;

pub use dsh_core::agent::{AgentStatus, CancelCause, InboxTarget};
