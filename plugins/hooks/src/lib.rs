//! Command hooks for dsh: the hooks users wrote for Claude Code
//! (`.claude/settings.json`) and Codex (`.codex/hooks.json`), run at the
//! agent's seams as those tools run them.
//!
//! - [`protocol`]: exit code 2 blocks with stderr as the reason; exit 0
//!   may print JSON (`decision`, `continue`, `stopReason`,
//!   `systemMessage`, `hookSpecificOutput` with `permissionDecision`,
//!   `additionalContext`, `updatedInput`); several hooks merge
//!   deny > ask > allow; matchers as each dialect defines them.
//! - [`config`]: the two JSON shapes and where the files are found;
//!   project files load only for a trusted folder.
//! - [`runner`]: a hook is `bash -c command` outside the tool sandbox,
//!   with the tool environment policy (never the API key), a timeout
//!   (600 s unless the hook sets one) and capped output.
//! - [`HooksPlugin`]: one dialect's hooks on the kernel's seams:
//!   `UserPromptSubmit` and `SessionStart` at pre-step, `PreToolUse` at
//!   tools/pre-execute (a block gives the model `Error: <reason>`),
//!   `PostToolUse` at tools/post-execute, `Stop` (`SubagentStop` in a
//!   child) at turn-stopping (a block continues the turn with a plugin
//!   user message, at most [`DEFAULT_STOP_BLOCK_CAP`] times a turn).
//!   Every run inside a turn is logged as `hook/invoked` and
//!   `hook/result`, exactly as the reference logs them.

pub mod config;
mod plugin;
pub mod protocol;
pub mod runner;

pub use config::{HookConfig, Origin, Source};
pub use plugin::{
    DEFAULT_STOP_BLOCK_CAP, HooksPlugin, MAX_MODEL_TEXT_BYTES, STOP_CAPPED, Settings,
    claude_tool_name,
};
pub use protocol::Dialect;
pub use runner::{HookRunner, ProcessRunner, RunRequest, RunResult};
