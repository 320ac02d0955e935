//! `dsh-std`: the blocking std shell of dsh (design.md "Shells").
//!
//! An [`Agent`] runs the sans-IO core (`dsh_core::agent`) on one **driver
//! thread**. Everything else reaches that thread as a message:
//!
//! - each model attempt is read on its own thread from a [`ModelProvider`]
//!   (the DeepSeek client's iterator, or a [`ScriptedProvider`]); chunks
//!   are tagged with the attempt id, so chunks of a cancelled or retried
//!   attempt are refused by the core and dropped;
//! - tool bodies (`dsh_tools::ToolSet`) run on worker threads with
//!   cooperative cancellation and a per-tool timeout; events a body logs
//!   itself (`todo/write`) are appended before its result;
//! - tools whose `dsh_tools::ApprovalPolicy` mode is `ask` become
//!   [`AgentEvent::ApprovalRequested`], answered by
//!   [`Agent::answer_approval`];
//! - session events are handed to the [`SessionStore`](dsh_store::SessionStore)
//!   write-behind queue after every drain and flushed at the durability
//!   checkpoints the core emits (`Output::Flush`, loop.md 4.4); a failed
//!   flush before a model call or tool body stops that dispatch (SM-14).
//!
//! Time is `SystemTime` epoch milliseconds and ids are UUID v4 from a small
//! OS-seeded RNG, both supplied here, never in the core ([`Clock`],
//! [`IdMode`] are the test hooks for byte-identical logs).
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

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod agent;
mod clock;
mod provider;

pub use agent::{
    Agent, AgentConfig, AgentEvent, ApprovalRequestId, LoopOptions, ShellError, TurnSummary,
};
pub use clock::{Clock, IdMode, Rng, new_session_id};
pub use dsh_tools::{ApprovalDecision, ApprovalMode, ApprovalPolicy, ToolSet};
pub use provider::{ChunkStream, ModelProvider, ScriptedProvider, ScriptedReply};

pub use dsh_core::agent::{AgentStatus, CancelCause, InboxTarget};
