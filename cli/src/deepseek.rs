//! `dsh deepseek request`: GenerateOptions JSON in, the exact DeepSeek
//! chat-completions request body out, on one line (streaming.md 5.4–5.8).

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};
use dsh_core::GenerateOptions;
use dsh_deepseek::{DeepSeekConfig, Effort, Thinking, build_request_body};

use crate::Outcome;
use crate::input::read_input;
use crate::sanitize::eprintln_safe;

/// `dsh deepseek ...`
#[derive(Subcommand)]
pub enum DeepSeekCommand {
    /// Print the request body for a GenerateOptions JSON object.
    ///
    /// Exit 1 with `CODE: message` on stderr when the adapter rejects the
    /// request (e.g. UNSUPPORTED_REASONING_EFFORT, UNSUPPORTED_CONTENT).
    /// There is no attachment service here, so image requests are rejected.
    Request {
        /// GenerateOptions JSON; stdin when absent or `-`.
        path: Option<PathBuf>,
        /// Adapter configuration JSON file (streaming.md D-2).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Deployment thinking mode (overrides the config).
        #[arg(long, value_enum)]
        thinking: Option<ThinkingArg>,
        /// Default reasoning effort (overrides the config).
        #[arg(long, value_enum)]
        reasoning_effort: Option<EffortArg>,
    },
}

/// `--thinking` values.
#[derive(Clone, Copy, ValueEnum)]
pub enum ThinkingArg {
    /// `enabled`
    Enabled,
    /// `disabled`
    Disabled,
}

/// `--reasoning-effort` values.
#[derive(Clone, Copy, ValueEnum)]
pub enum EffortArg {
    /// `off`
    Off,
    /// `low`
    Low,
    /// `high`
    High,
    /// `max`
    Max,
}

/// Runs one `deepseek` subcommand.
pub fn run(cmd: DeepSeekCommand) -> Outcome {
    match cmd {
        DeepSeekCommand::Request {
            path,
            config,
            thinking,
            reasoning_effort,
        } => request(path, config, thinking, reasoning_effort),
    }
}

fn request(
    path: Option<PathBuf>,
    config_path: Option<PathBuf>,
    thinking: Option<ThinkingArg>,
    effort: Option<EffortArg>,
) -> Outcome {
    let mut config = match config_path {
        None => DeepSeekConfig::default(),
        Some(p) => match read_input(Some(&p)).and_then(|b| {
            serde_json::from_slice::<DeepSeekConfig>(&b)
                .map_err(|e| format!("{}: not a DeepSeek config: {e}", p.display()))
        }) {
            Ok(c) => c,
            Err(e) => {
                eprintln_safe!("{e}");
                return Outcome::BadInput;
            }
        },
    };
    if let Some(t) = thinking {
        config.thinking = Some(match t {
            ThinkingArg::Enabled => Thinking::Enabled,
            ThinkingArg::Disabled => Thinking::Disabled,
        });
    }
    if let Some(e) = effort {
        config.reasoning_effort = Some(match e {
            EffortArg::Off => Effort::Off,
            EffortArg::Low => Effort::Low,
            EffortArg::High => Effort::High,
            EffortArg::Max => Effort::Max,
        });
    }
    if let Err(e) = config.validate() {
        eprintln_safe!("{e}");
        return Outcome::BadInput;
    }
    let options = match read_input(path.as_deref()).and_then(|b| {
        serde_json::from_slice::<GenerateOptions>(&b)
            .map_err(|e| format!("not a GenerateOptions object: {e}"))
    }) {
        Ok(o) => o,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    match build_request_body(&options, &config, None) {
        Ok(body) => {
            // tty: JSON output (serde_json escapes control characters); sanitising would change the data.
            println!("{body}");
            Outcome::Ok
        }
        Err(e) => {
            eprintln_safe!("{e}");
            Outcome::CheckFailed
        }
    }
}
