//! `dsh-shell`: what the hosted shells ([`dsh-std`](https://docs.rs/dsh-std),
//! threads; [`dsh-smol`](https://docs.rs/dsh-smol), an async executor)
//! share, so each writes only how it waits and where work runs:
//!
//! - [`AgentConfig`], the one config of a hosted agent (both shells
//!   re-export it under that name), with [`AgentConfig::start`], which
//!   builds the kernel with the shell's own plugins (the provider's
//!   `prepare`, the approval policy) and the handle's id source;
//! - [`Msg`], the calls a handle sends its driver, answered by [`handle`]
//!   through a shell's [`Host`] (its [`Dispatch`](dsh_runtime::exec::Dispatch)
//!   plus the [`Callers`] it keeps);
//! - where a session comes from: [`create_session`], [`resume_session`],
//!   [`fork_session`], [`adopt_session`] (blocking store calls).
//!
//! An embedder uses a shell, not this crate; a new hosted shell uses both
//! this crate and the kernel's effect executor ([`dsh_runtime::exec`]).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod handle;
mod session;

pub use config::{AgentConfig, LoopOptions, Started, os_seed};
pub use handle::{Answer, Callers, CommandResult, Host, Msg, Sink, Visitor, handle};
pub use session::{adopt_session, create_session, fork_session, resume_session};
