//! Flags for the tool processes' sandbox and environment.

use std::path::PathBuf;

use crate::sanitize::eprintln_safe;
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

/// A `--sandbox` / `tools.sandbox` value.
pub fn sandbox(text: &str) -> Result<SandboxArg, String> {
    SandboxArg::from_str(text, false)
        .map_err(|_| format!("{text:?} is not a sandbox (workspace-write, off)"))
}

/// A `--tool-env` / `tools.tool_env` value.
pub fn inherit(text: &str) -> Result<InheritArg, String> {
    InheritArg::from_str(text, false)
        .map_err(|_| format!("{text:?} is not an environment set (all, core, none)"))
}

/// Tool process flags.
#[derive(Args, Clone, Debug, Default)]
pub struct ToolArgs {
    /// Sandbox of bash commands [default: workspace-write].
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxArg>,
    /// Another directory bash commands may write beneath (repeatable).
    #[arg(long, value_name = "DIR")]
    pub writable_root: Vec<PathBuf>,
    /// Deny bash commands TCP connections (Landlock ABI 4+).
    #[arg(long)]
    pub no_network: bool,
    /// Environment tool processes start from [default: all].
    #[arg(long, value_enum, value_name = "SET")]
    pub tool_env: Option<InheritArg>,
    /// A variable name pattern (`*` and `?`, any case) kept from tool
    /// processes (repeatable). The API key variable is always kept out.
    #[arg(long, value_name = "PATTERN")]
    pub tool_env_exclude: Vec<String>,
    /// Pass variables whose names look like secrets (`*KEY*`, `*TOKEN*`,
    /// `*SECRET*`, ...) to tool processes; the API key variable still never
    /// passes.
    #[arg(long)]
    pub tool_env_keep_secrets: bool,
    /// Tool results over this many bytes are saved whole under the
    /// session's spill folder and the model gets a preview and the path
    /// (0: never) [default: 65536].
    #[arg(long, value_name = "BYTES")]
    pub spill_bytes: Option<usize>,
    /// Do not offer `web_fetch` and `web_search`.
    #[arg(long)]
    pub no_web: bool,
    /// A host `web_fetch` may reach though it resolves to a loopback,
    /// private or link-local address, and fetch from without asking
    /// (repeatable).
    #[arg(long, value_name = "HOST")]
    pub web_allow_host: Vec<String>,
    /// The `web_search` backend: `deepseek` (DeepSeek's own search, the
    /// DeepSeek key), `exa` (`$EXA_API_KEY`) or `none` [default: deepseek
    /// for DeepSeek's API, else exa when `$EXA_API_KEY` is set].
    #[arg(long, value_name = "PROVIDER", value_parser = ["deepseek", "exa", "none"])]
    pub web_search: Option<String>,
}

impl ToolArgs {
    /// These flags over the config file's `[tools]` table (already checked).
    pub fn over(&self, file: &crate::config_file::ToolsFile) -> ToolArgs {
        fn or_list<T: Clone>(flags: &[T], file: &Option<Vec<T>>) -> Vec<T> {
            if flags.is_empty() {
                file.clone().unwrap_or_default()
            } else {
                flags.to_vec()
            }
        }
        ToolArgs {
            sandbox: self
                .sandbox
                .or_else(|| file.sandbox.as_deref().and_then(|s| sandbox(s).ok())),
            writable_root: or_list(&self.writable_root, &file.writable_roots),
            no_network: self.no_network || file.no_network.unwrap_or(false),
            tool_env: self
                .tool_env
                .or_else(|| file.tool_env.as_deref().and_then(|s| inherit(s).ok())),
            tool_env_exclude: or_list(&self.tool_env_exclude, &file.tool_env_exclude),
            tool_env_keep_secrets: self.tool_env_keep_secrets
                || file.tool_env_keep_secrets.unwrap_or(false),
            spill_bytes: self.spill_bytes,
            no_web: self.no_web,
            web_allow_host: self.web_allow_host.clone(),
            web_search: self.web_search.clone(),
        }
    }

    /// The bash configuration these flags select; `api_key_env` never
    /// reaches a tool process.
    pub fn bash_config(&self, api_key_env: &str) -> BashConfig {
        let env = EnvPolicy {
            inherit: match self.tool_env.unwrap_or_default() {
                InheritArg::All => Inherit::All,
                InheritArg::Core => Inherit::Core,
                InheritArg::None => Inherit::None,
            },
            ignore_default_excludes: self.tool_env_keep_secrets,
            exclude: self.tool_env_exclude.clone(),
            ..EnvPolicy::default()
        }
        .with_secret(api_key_env)
        .with_secret(crate::store::STORE_URL_ENV);
        let sandbox = SandboxPolicy {
            mode: match self.sandbox.unwrap_or_default() {
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

/// Says once, on stderr, what this kernel cannot enforce of `config`, and
/// whether the runtime context's `git status` cannot run confined.
pub fn warn_unenforced(config: &BashConfig) {
    if let Some(w) = dsh_tools::sandbox::support().warning(&config.sandbox) {
        eprintln_safe!("dsh: {w}");
    }
    if let Some(w) = dsh_system_prompt::host::git_status_warning() {
        eprintln_safe!("dsh: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_confine_and_hide_the_key() {
        let c = ToolArgs::default().bash_config("MY_KEY_VAR");
        assert_eq!(c.sandbox.mode, SandboxMode::WorkspaceWrite);
        assert!(c.sandbox.network);
        assert!(c.env.secrets.contains(&"MY_KEY_VAR".to_string()));
        assert!(c.env.secrets.contains(&"DEEPSEEK_API_KEY".to_string()));
        // The store URL may carry a database password.
        assert!(c.env.secrets.contains(&"DSH_STORE_URL".to_string()));
        assert!(!c.env.ignore_default_excludes);
    }

    #[test]
    fn flags_override_the_tools_table() {
        let file = crate::config_file::parse(
            "[tools]\nsandbox = \"off\"\ntool_env = \"none\"\nwritable_roots = [\"/f\"]\nno_network = true",
        )
        .unwrap()
        .tools;
        let from_file = ToolArgs::default().over(&file);
        assert_eq!(from_file.sandbox, Some(SandboxArg::Off));
        assert_eq!(from_file.tool_env, Some(InheritArg::None));
        assert_eq!(from_file.writable_root, [PathBuf::from("/f")]);
        assert!(from_file.no_network);
        let c = from_file.bash_config("K");
        assert_eq!(c.sandbox.mode, SandboxMode::Off);
        assert!(!c.sandbox.network);
        let flags = ToolArgs {
            sandbox: Some(SandboxArg::WorkspaceWrite),
            tool_env: Some(InheritArg::Core),
            writable_root: vec![PathBuf::from("/g")],
            ..ToolArgs::default()
        }
        .over(&file);
        assert_eq!(flags.sandbox, Some(SandboxArg::WorkspaceWrite));
        assert_eq!(flags.tool_env, Some(InheritArg::Core));
        assert_eq!(flags.writable_root, [PathBuf::from("/g")]);
    }
}
