//! The command-line arguments of `dsh chat`, `dsh run` and `dsh fork`, and
//! the prompt text they read.

use std::io::{self, IsTerminal};
use std::path::PathBuf;

use clap::Args;

use crate::provider::ProviderArgs;
use crate::render::RenderOptions;
use crate::store::StoreArgs;

/// Display flags.
#[derive(Args, Clone, Debug, Default)]
pub struct ViewArgs {
    /// Do not show the model's reasoning.
    #[arg(long)]
    pub hide_reasoning: bool,
    /// No ANSI colors (also when `NO_COLOR` is set).
    #[arg(long)]
    pub no_color: bool,
}

impl ViewArgs {
    /// The render options these flags select.
    pub fn options(&self) -> RenderOptions {
        let terminal = io::stdout().is_terminal();
        RenderOptions {
            hide_reasoning: self.hide_reasoning,
            color: !self.no_color
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && terminal,
            live: terminal,
            columns: terminal_columns(),
            ..RenderOptions::default()
        }
    }
}

/// The width of the terminal on stdout: `$COLUMNS` when set, else the
/// terminal's own size, else 80.
pub(super) fn terminal_columns() -> usize {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return c;
    }
    #[cfg(unix)]
    if let Ok(size) = rustix::termios::tcgetwinsize(io::stdout())
        && size.ws_col > 0
    {
        return usize::from(size.ws_col);
    }
    80
}

/// Flags every agent command takes.
#[derive(Args, Clone, Debug, Default)]
pub struct AgentArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub view: ViewArgs,
    /// The workspace tools work in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    #[command(flatten)]
    pub tools: crate::tool_args::ToolArgs,
    #[command(flatten)]
    pub otel: crate::otel::OtelArgs,
    /// Replace the identity section of the system prompt: TEXT, or @FILE
    /// to read it from a file.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub system: Option<String>,
    /// Append to the system prompt (after every section): TEXT, or @FILE.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub append_system: Option<String>,
    /// Do not ask the model for a session title after the first completed
    /// turn (config: `titles = false`).
    #[arg(long)]
    pub no_title: bool,
    /// Permission preset: approval and sandbox together, logged
    /// (`read-only`: writes and commands refused; `workspace-write`: they
    /// ask; `full-auto`: nothing asks).
    #[arg(long, value_enum, value_name = "PRESET")]
    pub preset: Option<crate::preset::Preset>,
    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,
}

/// Largest `@FILE` a prompt flag reads.
pub(super) const MAX_PROMPT_FILE_BYTES: u64 = 256 * 1024;

/// The text of a `TEXT|@FILE` flag value.
pub(super) fn text_or_file(flag: &str, value: &str) -> Result<String, String> {
    let Some(path) = value.strip_prefix('@') else {
        return Ok(value.to_string());
    };
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("dsh: {flag} @{path}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_PROMPT_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("dsh: {flag} @{path}: {e}"))?;
    if text.len() as u64 > MAX_PROMPT_FILE_BYTES {
        return Err(format!(
            "dsh: {flag} @{path}: larger than {MAX_PROMPT_FILE_BYTES} bytes"
        ));
    }
    Ok(text)
}

impl AgentArgs {
    /// The prompt settings of `--system` and `--append-system`, over the
    /// config file's `system` and `append_system`.
    pub fn prompt_settings(
        &self,
        file: &crate::config_file::ConfigFile,
    ) -> Result<crate::shell::PromptSettings, String> {
        let pick = |flag: &str, value: &Option<String>, key: &Option<String>| {
            value
                .as_deref()
                .map(|v| text_or_file(flag, v))
                .or_else(|| key.as_deref().map(|v| text_or_file(flag, v)))
                .transpose()
        };
        Ok(crate::shell::PromptSettings {
            system: pick("--system", &self.system, &file.system)?,
            append: pick("--append-system", &self.append_system, &file.append_system)?,
        })
    }
}

/// `dsh chat [--resume ID]`
#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Continue a stored session (an interrupted turn is closed first).
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// Start in plan mode: the model explores and presents a plan with
    /// `exit_plan_mode` before anything is written or run.
    #[arg(long)]
    pub plan: bool,
}

/// `dsh run PROMPT [--json]`
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Print the session events as JSON lines (exactly as the log stores
    /// them, chunks unpacked) instead of rendering them.
    #[arg(long)]
    pub json: bool,
    /// Allow tools whose policy is `ask` without asking (`run` cannot ask;
    /// without this flag they are denied).
    #[arg(long)]
    pub yes: bool,
    /// After the run, also write the whole session log (JSONL, as the
    /// store holds it) to FILE: a fixture for `dsh replay --check` and
    /// `dsh_runtime::replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Start in plan mode (writes and commands are refused; `run` cannot
    /// review a plan, so the turn ends with the plan presented).
    #[arg(long)]
    pub plan: bool,
    /// Attach an image (PNG, JPEG, GIF or WebP) to the prompt; the model
    /// must take images (`--images`). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub image: Vec<PathBuf>,
    /// The prompt.
    pub prompt: String,
}

/// `dsh fork ID [--at SEQ]`
#[derive(Args)]
pub struct ForkArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The session to fork.
    pub id: String,
    /// Fork at this seq (default: through the last completed turn).
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
}
