//! `dsh log check | derive | repair`: JSONL session logs.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Subcommand;
use dsh_core::jsonl::{self, LogError};
use dsh_core::session::InvariantChecker;

use crate::Outcome;
use crate::input::read_input;
use crate::sanitize::{eprintln_safe, writeln_safe};

/// `dsh log ...`
#[derive(Subcommand)]
pub enum LogCommand {
    /// Check logs: load and validate, byte-exact round trip, packed rows,
    /// re-assembly of every model call, invariants. Prints `<path>: ok` or
    /// `<path>: FAIL <reason>` per file. Core payloads with extra keys or
    /// other shapes load leniently (as the reference's logs need); `--strict`
    /// fails on them and lists each with its rule id. Exit 1 when a check
    /// fails, 2 when a file cannot be read.
    Check {
        /// Apply the conformance fixture-token substitutions before reading.
        #[arg(long)]
        fixture_tokens: bool,
        /// Also fail on core payloads that are not in the exact shapes of
        /// session.md section 4 (for producers), one line per event.
        #[arg(long)]
        strict: bool,
        /// Log files.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print the derived message history, one Message JSON per line.
    Derive {
        /// Apply the conformance fixture-token substitutions before reading.
        #[arg(long)]
        fixture_tokens: bool,
        /// Log file; stdin when `-`.
        path: PathBuf,
    },
    /// Print the repaired log of a possibly torn file: the header line, then
    /// one event per line (unpacked), the closers of an interrupted turn
    /// included. Fails when the file is corrupt rather than torn.
    Repair {
        /// Log file; stdin when `-`.
        path: PathBuf,
    },
}

/// Runs one `log` subcommand.
pub fn run(cmd: LogCommand) -> Outcome {
    match cmd {
        LogCommand::Check {
            fixture_tokens,
            strict,
            paths,
        } => check(&paths, fixture_tokens, strict),
        LogCommand::Derive {
            fixture_tokens,
            path,
        } => derive(&path, fixture_tokens),
        LogCommand::Repair { path } => repair(&path),
    }
}

fn read(path: &Path, fixture_tokens: bool) -> Result<Vec<u8>, String> {
    let bytes = read_input(Some(path))?;
    Ok(if fixture_tokens {
        jsonl::fixture_tokens(&bytes)
    } else {
        bytes
    })
}

fn check(paths: &[PathBuf], fixture_tokens: bool, strict: bool) -> Outcome {
    let mut out = io::stdout().lock();
    let mut failed = false;
    let mut unreadable = false;
    for path in paths {
        let bytes = match read(path, fixture_tokens) {
            Ok(b) => b,
            Err(why) => {
                unreadable = true;
                let _ = writeln_safe!(out, "{}: FAIL {why}", path.display());
                continue;
            }
        };
        let result = jsonl::verify_log(&bytes);
        let line = match result {
            Ok(report) if strict && !report.deviations.is_empty() => {
                failed = true;
                let mut line = format!(
                    "{}: FAIL strict: {} event(s) not in the exact shape of session.md 4",
                    path.display(),
                    report.deviations.len()
                );
                for (seq, why) in &report.deviations {
                    line.push_str(&format!("\n  seq {seq}: {} {why}", why.rule()));
                }
                line
            }
            Ok(_) => format!("{}: ok", path.display()),
            Err(why) => {
                failed = true;
                format!("{}: FAIL {why}", path.display())
            }
        };
        let _ = writeln_safe!(out, "{line}");
    }
    if unreadable {
        Outcome::BadInput
    } else if failed {
        Outcome::CheckFailed
    } else {
        Outcome::Ok
    }
}

fn derive(path: &Path, fixture_tokens: bool) -> Outcome {
    let bytes = match read(path, fixture_tokens) {
        Ok(b) => b,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let mut loaded = match jsonl::load_log(&bytes, &[]) {
        Ok(l) => l,
        Err(e) => {
            eprintln_safe!("{}: {e}", path.display());
            return Outcome::CheckFailed;
        }
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    for m in loaded.session.derive_messages() {
        match serde_json::to_string(&**m) {
            Ok(s) => {
                // tty: JSON output (serde_json escapes control characters); sanitising would change the data.
                let _ = writeln!(out, "{s}");
            }
            Err(e) => {
                eprintln_safe!("cannot serialize a message: {e}");
                return Outcome::CheckFailed;
            }
        }
    }
    Outcome::Ok
}

fn repair(path: &Path) -> Outcome {
    let bytes = match read(path, false) {
        Ok(b) => b,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let loaded = match jsonl::load_log(&bytes, &[]) {
        Ok(l) => l,
        Err(e) => {
            let kind = match &e {
                LogError::FormatUnsupported { .. } => "unsupported",
                _ => "corrupt",
            };
            eprintln_safe!("{}: {kind}: {e}", path.display());
            return Outcome::CheckFailed;
        }
    };
    // Loading closes an interrupted turn; a log whose turns are not enclosed
    // (session.md 11) is corrupt, not torn, and repair does not print it.
    if let Err(v) = InvariantChecker::check_log(loaded.session.events()) {
        eprintln_safe!("{}: corrupt: invariant {v}", path.display());
        return Outcome::CheckFailed;
    }
    let mut buf = Vec::with_capacity(bytes.len() + 1024);
    jsonl::encode_header_line(loaded.session.header(), &mut buf);
    jsonl::encode_batch(loaded.session.events(), false, &mut buf);
    let mut out = io::stdout().lock();
    if out.write_all(&buf).is_err() {
        return Outcome::BadInput;
    }
    Outcome::Ok
}
