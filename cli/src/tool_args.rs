//! Flags for the tool processes' sandbox and environment.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use dsh_tools::{BashConfig, EnvPolicy, Inherit, SandboxMode, SandboxPolicy};

/// How `bash` commands are confined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum SandboxArg {
    /// Writes only beneath the workspace, the temp dirs and `--writable-root`s
    /// (Linux Landlock).
    #[default]
    WorkspaceWrite,
    /// No confinement.
    Off,
}

/// Which part of dsh's environment tool processes start from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum InheritArg {
    /// Every variable (less secrets).
    #[default]
    All,
    /// PATH, HOME, USER, locale, terminal, temp dir.
    Core,
    /// Nothing.
    None,
}

/// Tool process flags.
#[derive(Args, Clone, Debug, Default)]
pub struct ToolArgs {
    /// Sandbox of bash commands.
    #[arg(long, value_enum, default_value_t = SandboxArg::WorkspaceWrite)]
    pub sandbox: SandboxArg,
    /// Another directory bash commands may write beneath (repeatable).
    #[arg(long, value_name = "DIR")]
    pub writable_root: Vec<PathBuf>,
    /// Deny bash commands TCP connections (Landlock ABI 4+).
    #[arg(long)]
    pub no_network: bool,
    /// Environment tool processes start from.
    #[arg(long, value_enum, default_value_t = InheritArg::All, value_name = "SET")]
    pub tool_env: InheritArg,
    /// A variable name pattern (`*` and `?`, any case) kept from tool
    /// processes (repeatable). The API key variable is always kept out.
    #[arg(long, value_name = "PATTERN")]
    pub tool_env_exclude: Vec<String>,
    /// Pass variables whose names look like secrets (`*KEY*`, `*TOKEN*`,
    /// `*SECRET*`, ...) to tool processes; the API key variable still never
    /// passes.
    #[arg(long)]
    pub tool_env_keep_secrets: bool,
}

impl ToolArgs {
    /// The bash configuration these flags select; `api_key_env` never
    /// reaches a tool process.
    pub fn bash_config(&self, api_key_env: &str) -> BashConfig {
        let env = EnvPolicy {
            inherit: match self.tool_env {
                InheritArg::All => Inherit::All,
                InheritArg::Core => Inherit::Core,
                InheritArg::None => Inherit::None,
            },
            ignore_default_excludes: self.tool_env_keep_secrets,
            exclude: self.tool_env_exclude.clone(),
            ..EnvPolicy::default()
        }
        .with_secret(api_key_env);
        let sandbox = SandboxPolicy {
            mode: match self.sandbox {
                SandboxArg::WorkspaceWrite => SandboxMode::WorkspaceWrite,
                SandboxArg::Off => SandboxMode::Off,
            },
            writable_roots: self.writable_root.clone(),
            network: !self.no_network,
            ..SandboxPolicy::default()
        };
        BashConfig {
            env,
            sandbox,
            ..BashConfig::default()
        }
    }
}

/// Says once, on stderr, what this kernel cannot enforce of `config`.
pub fn warn_unenforced(config: &BashConfig) {
    if let Some(w) = dsh_tools::sandbox::support().warning(&config.sandbox) {
        eprintln!("dsh: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_confine_and_hide_the_key() {
        let c = ToolArgs {
            sandbox: SandboxArg::WorkspaceWrite,
            ..ToolArgs::default()
        }
        .bash_config("MY_KEY_VAR");
        assert_eq!(c.sandbox.mode, SandboxMode::WorkspaceWrite);
        assert!(c.sandbox.network);
        assert!(c.env.secrets.contains(&"MY_KEY_VAR".to_string()));
        assert!(c.env.secrets.contains(&"DEEPSEEK_API_KEY".to_string()));
        assert!(!c.env.ignore_default_excludes);
    }
}
