//! `dsh-host`: what every std runtime shares around the kernel: the clock,
//! model providers and their stream pump, the provider's `prepare` as a
//! plugin, the one cancel token, and the one error type of the hosted
//! runtimes' handles.
//!
//! This crate sits on the "host" floor (docs/architecture.md): above the
//! core and the kernel, below every adapter. It depends on no adapter;
//! model providers implement [`ModelProvider`] (`dsh-deepseek` does for
//! its client), and tool bodies, model streams and editor requests all
//! observe the same [`CancelToken`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cancel;
mod provider;

pub use cancel::{CancelGuard, CancelToken};
pub use provider::{
    ChunkStream, Clock, ModelProvider, ProviderPrepare, ScriptedProvider, ScriptedReply,
    ShellError, absolute_cwd, job_token, pump, run_model, run_side, side_call,
};
