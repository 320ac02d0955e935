//! `dsh-acp`: the Agent Client Protocol (version 1) wire layer of `dsh acp`.
//!
//! - [`rpc`]: newline-delimited JSON-RPC 2.0 over stdio, bounded per line,
//!   with request/response routing for the requests this side sends;
//! - [`wire`]: the typed reading of each request and notification into the
//!   protocol schema's types, and of a prompt's blocks into text.
//!
//! The ACP server itself (sessions, the agent, the editor's files and
//! terminals) lives in the `dsh` binary; this crate is what it shares with
//! the `acp_rpc` fuzz target, which drives it without a process.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod rpc;
pub mod wire;
