//! `dsh acp`: an Agent Client Protocol (version 1) agent over stdio.
//!
//! Editors (Zed and other ACP clients) start `dsh acp` and speak
//! newline-delimited JSON-RPC 2.0 on its stdin/stdout. The wire types are
//! the protocol's own Rust schema crate (`agent-client-protocol-schema`);
//! the transport ([`rpc`]) is a small blocking one of our own, because the
//! SDK crate (`agent-client-protocol`) is built around an async runtime
//! and `!Send` futures, while dsh's front end is the blocking std shell
//! (`dsh_std::Agent`) driven from plain threads. Stdout carries protocol
//! messages only; diagnostics go to stderr.
//!
//! Sessions live in the same store as `dsh chat`'s (`--store`,
//! `--store-dir`), so a session started in the editor resumes with
//! `dsh chat --resume ID` and the other way round.

use std::io;
use std::time::Duration;

use clap::Args;

use crate::Outcome;
use crate::provider::ProviderArgs;
use crate::store::StoreArgs;

mod files;
mod map;
mod server;
mod terminal;

use crate::sanitize::eprintln_safe;
use dsh_acp::{rpc, wire};

/// `dsh acp`
#[derive(Args)]
pub struct AcpArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    #[command(flatten)]
    store: StoreArgs,
    /// Run `bash` in the client's terminal when it offers one (the editor
    /// runs the command and shows it live; dsh's own `bash` limits on the
    /// process do not apply there).
    #[arg(long)]
    client_terminal: bool,
    /// Seconds the client may keep dsh waiting: for its answer to a
    /// request (`fs/*`, `terminal/create`, `terminal/output`; permission
    /// requests wait for the user), or to take dsh's output when it stops
    /// reading (then dsh takes it as gone) [default: 60].
    #[arg(long, value_name = "SECS", value_parser = crate::provider::seconds)]
    client_timeout: Option<f64>,
    #[command(flatten)]
    otel: crate::otel::OtelArgs,
}

/// Serves ACP on stdin/stdout until the client closes stdin.
pub fn run(args: AcpArgs) -> Outcome {
    let store = match args.store.open() {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let mut config = rpc::PeerConfig::default();
    if let Some(secs) = args.client_timeout {
        config.client_timeout = Duration::from_secs_f64(secs);
    }
    let peer = rpc::Peer::with_config(Box::new(io::stdout()), config);
    let options = server::Options {
        data_dir: args.store.dir().ok(),
        provider: args.provider,
        client_terminal: args.client_terminal,
        otel: args.otel,
    };
    server::serve(peer, io::stdin(), store, options);
    Outcome::Ok
}
