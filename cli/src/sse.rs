//! `dsh sse translate`: a raw DeepSeek SSE body to the StreamChunk JSON lines
//! the adapter yields (streaming.md 5.10–5.14). A stream failure is shown as
//! the terminal `finish` chunk with `reason.kind` `error` and its `failure`
//! (AC-6), so the output always ends in a `finish`.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;

use clap::Subcommand;
use dsh_deepseek::{StreamDecoder, error_finish};

use crate::Outcome;

/// `dsh sse ...`
#[derive(Subcommand)]
pub enum SseCommand {
    /// Translate a raw SSE response body into StreamChunk JSON lines.
    Translate {
        /// The body; stdin when absent or `-`. Read and translated
        /// incrementally, so a live stream can be piped in.
        path: Option<PathBuf>,
    },
}

/// Runs one `sse` subcommand.
pub fn run(cmd: SseCommand) -> Outcome {
    match cmd {
        SseCommand::Translate { path } => translate(path),
    }
}

fn translate(path: Option<PathBuf>) -> Outcome {
    let mut input: Box<dyn Read> = match path {
        Some(p) if p.as_os_str() != "-" => match File::open(&p) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("cannot read {}: {e}", p.display());
                return Outcome::BadInput;
            }
        },
        _ => Box::new(io::stdin().lock()),
    };
    let mut out = BufWriter::new(io::stdout().lock());
    let mut decoder = StreamDecoder::new();
    let mut chunks = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let failure = loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break decoder.finish().err(),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = out.flush();
                eprintln!("cannot read input: {e}");
                return Outcome::BadInput;
            }
        };
        let result = decoder.push(&buf[..n], &mut chunks);
        for chunk in chunks.drain(..) {
            write_chunk(&mut out, &chunk);
        }
        match result {
            Ok(o) if o.finished => break None,
            Ok(_) => {
                let _ = out.flush();
            }
            Err(e) => break Some(e),
        }
    };
    if let Some(e) = failure {
        write_chunk(&mut out, &error_finish(&e, false));
    }
    let _ = out.flush();
    Outcome::Ok
}

fn write_chunk(out: &mut impl Write, chunk: &dsh_core::StreamChunk) {
    if let Ok(line) = serde_json::to_string(chunk) {
        let _ = writeln!(out, "{line}");
    }
}
