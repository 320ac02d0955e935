//! `dsh replay --check [--fixture-tokens] PATH`: drive the agent loop with a
//! recorded session's inputs, model streams and tool results, and compare
//! the core events it writes with the recorded ones.

use std::path::PathBuf;

use clap::Args;
use dsh_core::agent::replay::{ReplayOptions, replay_jsonl};

use crate::Outcome;
use crate::input::read_input;
use crate::sanitize::{eprintln_safe, println_safe};

/// Arguments of `dsh replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// Compare the reproduced core events with the recording (the only mode).
    #[arg(long)]
    check: bool,
    /// Apply the conformance fixture-token substitutions before reading, and
    /// compare `request/header` events by their canonical header.
    #[arg(long)]
    fixture_tokens: bool,
    /// The recorded JSONL session log (`-` or absent: standard input).
    path: Option<PathBuf>,
}

/// Runs `dsh replay`.
pub fn run(args: ReplayArgs) -> Outcome {
    if !args.check {
        eprintln!("dsh replay: only --check is supported");
        return Outcome::BadInput;
    }
    let bytes = match read_input(args.path.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            eprintln_safe!("dsh replay: {e}");
            return Outcome::BadInput;
        }
    };
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = args.fixture_tokens;
        options
    };
    let report = match replay_jsonl(&bytes, options) {
        Ok(r) => r,
        Err(e) => {
            eprintln_safe!("dsh replay: cannot load the recording: {e}");
            return Outcome::BadInput;
        }
    };
    // The same text a `#[test]` shows with `ReplayReport::assert_ok`: the
    // seed and replayed counts, then every difference.
    println_safe!("{report}");
    if report.identical() {
        Outcome::Ok
    } else {
        Outcome::CheckFailed
    }
}
