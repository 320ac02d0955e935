//! `dsh`: the DeepSeek Harness runtime in Rust.
//!
//! Exit codes for the inspection commands: 0 ok, 1 a check failed, 2 bad
//! usage or unreadable input.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod acp;
mod agent_cmd;
mod commands;
mod config_file;
mod data_dir;
mod deepseek;
mod demo;
mod diff;
mod extensions;
mod input;
mod interact;
mod line_edit;
mod log;
mod mcp;
mod mock_server;
mod otel;
mod preset;
mod provider;
mod render;
mod repl;
mod replay;
mod sanitize;
mod secrets;
mod shell;
mod signals;
mod sse;
mod store;
mod stream;
mod title;
mod tool_args;
mod trust;

/// dsh: a sans-IO agent runtime for the DeepSeek Harness.
#[derive(Parser)]
#[command(name = "dsh", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect StreamChunk JSON lines: assemble or check a stream.
    #[command(subcommand)]
    Stream(stream::StreamCommand),
    /// Translate raw DeepSeek SSE bodies into StreamChunk JSON lines.
    #[command(subcommand)]
    Sse(sse::SseCommand),
    /// DeepSeek adapter tools: print the request body for GenerateOptions.
    #[command(subcommand)]
    Deepseek(deepseek::DeepSeekCommand),
    /// Run the scripted mock DeepSeek server on 127.0.0.1.
    MockServer(mock_server::MockServerArgs),
    /// Check, derive from or repair JSONL session logs.
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Replay a recorded session through the agent loop and compare.
    Replay(replay::ReplayArgs),
    /// List stored sessions: id, cwd, created, last activity, first prompt.
    Sessions(store::SessionsArgs),
    /// Chat with the agent (interactive REPL).
    Chat(agent_cmd::ChatArgs),
    /// Run one prompt and exit: 0 when the turn completed.
    Run(agent_cmd::RunArgs),
    /// Fork a stored session (optionally at a seq) and chat on the fork.
    Fork(agent_cmd::ForkArgs),
    /// Offline demo: a real agent turn against the bundled mock server.
    Demo(demo::DemoArgs),
    /// Agent Client Protocol server on stdin/stdout (for editors such as Zed).
    Acp(acp::AcpArgs),
    /// Trust a folder so its own hooks run (`--list`, `--revoke`).
    Trust(trust::TrustArgs),
    /// MCP servers: list (with their tools), add, remove.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
}

/// What a command ended with.
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: a check failed.
    CheckFailed,
    /// Exit 2: bad usage or unreadable input (message already printed).
    BadInput,
}

fn main() -> ExitCode {
    // The provider's credentials leave the environment before anything
    // else runs (see `secrets`).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let file_key_env = config_file::load(&|n| std::env::var(n).ok())
        .ok()
        .and_then(|f| f.api_key_env);
    // SAFETY: the first thing main does: the process has one thread (std
    // starts none before main, and nothing above started one), so nothing
    // reads or writes the environment or the argument block concurrently;
    // the scrub runs before capture changes `environ`.
    let url_credentials_on_command_line = unsafe { secrets::scrub_base_url_args(&args) };
    // SAFETY: as above.
    unsafe { secrets::capture(&secrets::secret_names(&args, file_key_env.as_deref())) };
    if url_credentials_on_command_line {
        secrets::warn_credentials_on_command_line();
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let outcome = match cli.command {
        Command::Stream(cmd) => stream::run(cmd),
        Command::Sse(cmd) => sse::run(cmd),
        Command::Deepseek(cmd) => deepseek::run(cmd),
        Command::MockServer(args) => mock_server::run(args),
        Command::Log(cmd) => log::run(cmd),
        Command::Replay(args) => replay::run(args),
        Command::Sessions(args) => store::run_sessions(args),
        Command::Chat(args) => agent_cmd::chat(args),
        Command::Run(args) => agent_cmd::run(args),
        Command::Fork(args) => agent_cmd::fork(args),
        Command::Demo(args) => demo::run(args),
        Command::Acp(args) => acp::run(args),
        Command::Trust(args) => trust::run(args),
        Command::Mcp(cmd) => mcp::run(cmd),
    };
    // Whatever tool processes are left (an agent not dropped before exit,
    // their escaped children) do not outlive dsh.
    dsh_tools::reap::end_all();
    mcp::shutdown_all();
    otel::shutdown();
    match outcome {
        Outcome::Ok => ExitCode::SUCCESS,
        Outcome::CheckFailed => ExitCode::from(1),
        Outcome::BadInput => ExitCode::from(2),
    }
}
