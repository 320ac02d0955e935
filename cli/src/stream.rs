//! `dsh stream assemble` and `dsh stream check`.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::Subcommand;
use dsh_core::{BlockAssembler, StreamChunk, StreamValidator};
use serde_json::json;

use crate::Outcome;
use crate::input::{numbered_lines, read_input};
use crate::sanitize::eprintln_safe;

/// `dsh stream ...`
#[derive(Subcommand)]
pub enum StreamCommand {
    /// Fold StreamChunk JSON lines into blocks, finish, usage and replay state.
    Assemble {
        /// Input file of StreamChunk JSON lines; stdin when absent or `-`.
        path: Option<PathBuf>,
    },
    /// Check StreamChunk JSON lines against the stream grammar and adapter contract.
    Check {
        /// Input file of StreamChunk JSON lines; stdin when absent or `-`.
        path: Option<PathBuf>,
    },
}

/// Runs one `stream` subcommand.
pub fn run(cmd: StreamCommand) -> Outcome {
    match cmd {
        StreamCommand::Assemble { path } => assemble(path),
        StreamCommand::Check { path } => check(path),
    }
}

/// Parses every line; on the first bad one prints `line N: <why>` and fails.
fn parse_chunks(path: Option<PathBuf>) -> Result<Vec<(usize, StreamChunk)>, Outcome> {
    let bytes = read_input(path.as_deref()).map_err(|e| {
        eprintln_safe!("{e}");
        Outcome::BadInput
    })?;
    let mut chunks = Vec::new();
    for (line_no, line) in numbered_lines(&bytes) {
        let parsed = line.and_then(|l| {
            serde_json::from_str::<StreamChunk>(l)
                .map_err(|e| format!("not a valid chunk: {}", describe(&e)))
        });
        match parsed {
            Ok(chunk) => chunks.push((line_no, chunk)),
            Err(why) => {
                eprintln_safe!("line {line_no}: {why}");
                return Err(Outcome::BadInput);
            }
        }
    }
    Ok(chunks)
}

/// A serde_json error without its "at line 1 column C" suffix (each input
/// line is parsed alone, so the line is always 1): `<why> (column C)`.
fn describe(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match full.strip_suffix(&suffix) {
        Some(why) => format!("{why} (column {})", e.column()),
        None => full,
    }
}

fn assemble(path: Option<PathBuf>) -> Outcome {
    let chunks = match parse_chunks(path) {
        Ok(c) => c,
        Err(outcome) => return outcome,
    };
    let mut assembler = BlockAssembler::new();
    for (_, chunk) in &chunks {
        assembler.push(chunk);
    }
    let result = assembler
        .blocks()
        .and_then(|blocks| Ok((blocks, assembler.replay_state()?)));
    let out = match result {
        Ok((blocks, replay)) => json!({
            "blocks": blocks,
            "finish": assembler.finish(),
            "usage": assembler.usage(),
            "replayState": replay,
        }),
        Err(e) => {
            print_line(&json!({ "error": e.to_string() }).to_string());
            return Outcome::CheckFailed;
        }
    };
    print_line(&out.to_string());
    Outcome::Ok
}

fn check(path: Option<PathBuf>) -> Outcome {
    let chunks = match parse_chunks(path) {
        Ok(c) => c,
        Err(outcome) => return outcome,
    };
    let mut validator = StreamValidator::new();
    let mut failed = false;
    let mut last_line = 0;
    for (line_no, chunk) in &chunks {
        last_line = *line_no;
        if let Err(v) = validator.push(chunk) {
            failed = true;
            print_line(&format!("line {line_no}: {}: {}", v.rule.id(), v.message));
        }
    }
    if let Err(v) = validator.end() {
        failed = true;
        print_line(&format!(
            "line {}: {}: {}",
            last_line + 1,
            v.rule.id(),
            v.message
        ));
    }
    if failed {
        Outcome::CheckFailed
    } else {
        print_line("ok");
        Outcome::Ok
    }
}

fn print_line(s: &str) {
    let mut out = io::stdout().lock();
    // tty: JSON output (serde_json escapes control characters); sanitising would change the data.
    let _ = writeln!(out, "{s}");
}
