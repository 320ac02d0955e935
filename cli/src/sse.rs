//! `dsh sse translate`: a raw DeepSeek (or, with `--provider anthropic`,
//! Anthropic Messages) SSE body to the StreamChunk JSON lines
//! the adapter yields (streaming.md 5.10–5.14). A stream failure is shown as
//! the terminal `finish` chunk with `reason.kind` `error` and its `failure`
//! (AC-6), so the output always ends in a `finish`.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;

use clap::Subcommand;
use dsh_deepseek::{DecodeOptions, StreamDecoder, error_finish};

use crate::Outcome;
use crate::sanitize::eprintln_safe;

/// `dsh sse ...`
#[derive(Subcommand)]
pub enum SseCommand {
    /// Translate a raw SSE response body into StreamChunk JSON lines.
    Translate {
        /// The body; stdin when absent or `-`. Read and translated
        /// incrementally, so a live stream can be piped in.
        path: Option<PathBuf>,
        /// Decode as `dsh chat`/`run` do for any OpenAI-compatible server
        /// (in-band errors, no `[DONE]`, tool calls without index or id,
        /// stop synonyms, `reasoning`, JSON bodies); without it, exactly
        /// the reference DeepSeek adapter (streaming.md 5.10–5.14).
        #[arg(long)]
        interop: bool,
        /// The wire: `deepseek` (OpenAI-compatible chat completions) or
        /// `anthropic` (Anthropic Messages events).
        #[arg(long, value_name = "WIRE", default_value = "deepseek", value_parser = ["deepseek", "anthropic"])]
        provider: String,
        /// Largest SSE line or event (or JSON body) accepted, in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = dsh_deepseek::DEFAULT_MAX_EVENT_BYTES)]
        max_event_bytes: usize,
    },
}

/// Runs one `sse` subcommand.
pub fn run(cmd: SseCommand) -> Outcome {
    match cmd {
        SseCommand::Translate {
            path,
            interop,
            provider,
            max_event_bytes,
        } => {
            let mut options = if interop {
                DecodeOptions::interop()
            } else {
                DecodeOptions::default()
            };
            options.max_event_bytes = max_event_bytes;
            let decoder = if provider == "anthropic" {
                Decoder::Anthropic(Box::new(dsh_anthropic::StreamDecoder::new(max_event_bytes)))
            } else {
                Decoder::DeepSeek(Box::new(StreamDecoder::with_options(&options)))
            };
            translate(path, decoder)
        }
    }
}

/// The decoder of one wire.
enum Decoder {
    DeepSeek(Box<StreamDecoder>),
    Anthropic(Box<dsh_anthropic::StreamDecoder>),
}

impl Decoder {
    /// Feeds a piece; whether the response is over.
    fn push(
        &mut self,
        piece: &[u8],
        out: &mut Vec<dsh_core::StreamChunk>,
    ) -> Result<bool, dsh_core::LlmError> {
        match self {
            Decoder::DeepSeek(d) => d.push(piece, out).map(|o| o.finished),
            Decoder::Anthropic(d) => d.push(piece, out),
        }
    }

    /// The body ended.
    fn finish_into(
        &mut self,
        out: &mut Vec<dsh_core::StreamChunk>,
    ) -> Result<(), dsh_core::LlmError> {
        match self {
            Decoder::DeepSeek(d) => d.finish_into(out),
            Decoder::Anthropic(d) => d.finish_into(out),
        }
    }
}

fn translate(path: Option<PathBuf>, mut decoder: Decoder) -> Outcome {
    let mut input: Box<dyn Read> = match path {
        Some(p) if p.as_os_str() != "-" => match File::open(&p) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln_safe!("cannot read {}: {e}", p.display());
                return Outcome::BadInput;
            }
        },
        _ => Box::new(io::stdin().lock()),
    };
    let mut out = BufWriter::new(io::stdout().lock());
    let mut chunks = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let failure = loop {
        let n = match input.read(&mut buf) {
            Ok(0) => {
                let result = decoder.finish_into(&mut chunks);
                for chunk in chunks.drain(..) {
                    write_chunk(&mut out, &chunk);
                }
                break result.err();
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = out.flush();
                eprintln_safe!("cannot read input: {e}");
                return Outcome::BadInput;
            }
        };
        let result = decoder.push(&buf[..n], &mut chunks);
        for chunk in chunks.drain(..) {
            write_chunk(&mut out, &chunk);
        }
        match result {
            Ok(true) => break None,
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
        // tty: JSON output (serde_json escapes control characters); sanitising would change the data.
        let _ = writeln!(out, "{line}");
    }
}
