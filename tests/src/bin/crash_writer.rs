//! Crash-injection helper: appends a deterministic stream of turns to one
//! session, buffering N events and appending them as one batch, and
//! printing `F <seq>` after each append returns (so every event up to that
//! seq is durable). The crash test kills it with SIGKILL at random moments.
//!
//! Usage: `dsh-crash-writer <jsonl|jsonl-raw|redb|postgres> <path|schema> <session-id> <flush-every>`

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use dsh_core::SessionId;
use dsh_core::session::{EventData, SessionHeader};
use dsh_integration::crash::{TurnGen, open_store};
use dsh_store::StoreError;

fn run(args: &[String]) -> Result<(), StoreError> {
    let (Some(kind), Some(path), Some(id), Some(every)) =
        (args.get(1), args.get(2), args.get(3), args.get(4))
    else {
        return Err(StoreError::Invalid {
            message:
                "usage: dsh-crash-writer <jsonl|jsonl-raw|redb|postgres> <path|schema> <session-id> <flush-every>"
                    .into(),
        });
    };
    let every: usize = every.parse().unwrap_or(5).max(1);
    let store = open_store(kind, Path::new(path))?;
    let sid = SessionId::from(id.as_str());
    let (next_seq, next_turn) = match store.load(&sid) {
        Ok(loaded) => {
            let turns = loaded
                .events
                .iter()
                .filter(|e| matches!(e.data(), EventData::TurnStart(_)))
                .count() as u64;
            (loaded.events.len() as u64, turns + 1)
        }
        Err(StoreError::NotFound { .. }) => {
            let mut header = SessionHeader::new(id.as_str(), 1000);
            header.cwd = Some("/crash".into());
            store.create(header)?;
            (0, 1)
        }
        Err(e) => return Err(e),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {next_seq}");
    let _ = out.flush();
    let mut turns = TurnGen::new(next_seq, next_turn);
    // Events are buffered here and written as one batch every `every`.
    let mut batch = Vec::with_capacity(every);
    loop {
        let event = turns.next_event();
        let seq = event.seq();
        batch.push(event);
        if batch.len() >= every {
            store.append(&sid, &batch)?;
            batch.clear();
            let _ = writeln!(out, "F {seq}");
            let _ = out.flush();
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dsh-crash-writer: {e}");
            ExitCode::from(2)
        }
    }
}
