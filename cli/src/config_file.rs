//! The config file: `$XDG_CONFIG_HOME/dsh/config.toml` (else
//! `$HOME/.config/dsh/config.toml`), TOML. Every key is optional; a flag
//! overrides its key. An unknown key, a wrong type or a bad value is an
//! error naming the file and the key.
//!
//! ```toml
//! model = "deepseek-v4-pro"
//! effort = "high"          # off | low | high | max
//! temperature = 0.2        # 0 to 2
//! max_tokens = 8192
//! base_url = "https://api.deepseek.com"   # credentials (user:pass@) go here, not on the command line
//! api_key_env = "DEEPSEEK_API_KEY"
//! idle_timeout = 300       # seconds
//! attempts = 6
//! max_retry_wait = 10      # seconds
//! max_event_bytes = 16777216
//! max_response_bytes = 33554432
//! max_steps = 200          # steps per turn; 0: no limit
//! system = "@/path/to/identity.md"   # TEXT or @FILE
//! append_system = "Answer briefly."
//! titles = true            # false: as --no-title
//! otlp_endpoint = "http://127.0.0.1:4318"   # trace export
//! otel_content = false      # true: as --otel-content
//! provider = "openai"      # openai | anthropic (the API spoken)
//! context_window = 32768   # tokens, any model without its own entry
//! hooks = "/path/to/settings.json"    # more hooks, Claude Code dialect (user level)
//! skills = ["/path/to/skills"]        # more skill folders
//! trusted_folders = ["/home/me/src"]  # folders whose own hooks run
//!
//! [models."smollm2"]
//! context_window = 8192    # tokens, for this model id only
//!
//! [tools]
//! sandbox = "workspace-write"          # workspace-write | off
//! writable_roots = ["/tmp/cache"]
//! no_network = false
//! tool_env = "all"                     # all | core | none
//! tool_env_exclude = ["AWS_*"]
//! tool_env_keep_secrets = false
//!
//! [mcp_servers.everything]                 # codex's format (see `mcp`)
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything"]
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Largest config file read.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The parsed config file (every key optional).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `--model`.
    pub model: Option<String>,
    /// `--effort`.
    pub effort: Option<String>,
    /// `--temperature`.
    pub temperature: Option<f64>,
    /// `--max-tokens`.
    pub max_tokens: Option<u64>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--api-key-env`.
    pub api_key_env: Option<String>,
    /// `--idle-timeout` (seconds).
    pub idle_timeout: Option<f64>,
    /// `--attempts`.
    pub attempts: Option<u64>,
    /// `--max-retry-wait` (seconds).
    pub max_retry_wait: Option<f64>,
    /// `--max-event-bytes`.
    pub max_event_bytes: Option<usize>,
    /// `--max-response-bytes`.
    pub max_response_bytes: Option<u64>,
    /// `--max-steps`.
    pub max_steps: Option<u64>,
    /// `--system` (TEXT or @FILE).
    pub system: Option<String>,
    /// `--append-system` (TEXT or @FILE).
    pub append_system: Option<String>,
    /// `false`: as `--no-title`.
    pub titles: Option<bool>,
    /// `--otlp-endpoint` (trace export).
    pub otlp_endpoint: Option<String>,
    /// `true`: as `--otel-content`.
    pub otel_content: Option<bool>,
    /// `--provider` (`openai` or `anthropic`).
    pub provider: Option<String>,
    /// `--context-window`, for every model without its own entry.
    pub context_window: Option<u64>,
    /// Per-model settings, by model id.
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, ModelFile>,
    /// The `[tools]` table.
    #[serde(default)]
    pub tools: ToolsFile,
    /// A hooks file (Claude Code dialect) of the user's, run everywhere.
    pub hooks: Option<PathBuf>,
    /// More skill folders, after the project's and before the user's.
    pub skills: Option<Vec<PathBuf>>,
    /// Folders whose own hooks run (as `dsh trust`).
    pub trusted_folders: Option<Vec<PathBuf>>,
    /// `[mcp_servers.NAME]` tables (codex's format).
    #[serde(default)]
    pub mcp_servers: dsh_mcp::ServersConfig,
}

/// A `[models."ID"]` table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// `--context-window` for this model.
    pub context_window: Option<u64>,
    /// `--images`: the model takes image input.
    pub images: Option<bool>,
}

/// The `[tools]` table: the keys of the tool flags.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsFile {
    /// `--sandbox`.
    pub sandbox: Option<String>,
    /// `--writable-root` (each).
    pub writable_roots: Option<Vec<PathBuf>>,
    /// `--no-network`.
    pub no_network: Option<bool>,
    /// `--tool-env`.
    pub tool_env: Option<String>,
    /// `--tool-env-exclude` (each).
    pub tool_env_exclude: Option<Vec<String>>,
    /// `--tool-env-keep-secrets`.
    pub tool_env_keep_secrets: Option<bool>,
}

/// Where the config file is, from `env`: `$XDG_CONFIG_HOME/dsh/config.toml`,
/// else `$HOME/.config/dsh/config.toml`; `None` when neither is set.
pub fn path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
    let base = match nonempty("XDG_CONFIG_HOME") {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(nonempty("HOME")?).join(".config"),
    };
    Some(base.join("dsh").join("config.toml"))
}

/// The config file located through `env`; the defaults when there is none.
pub fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<ConfigFile, String> {
    match path(env) {
        Some(p) if p.exists() => read(&p),
        _ => Ok(ConfigFile::default()),
    }
}

/// Reads and checks the config file at `path`.
pub fn read(path: &Path) -> Result<ConfigFile, String> {
    let fail = |what: String| format!("dsh: config file {}: {what}", path.display());
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(e.to_string()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    parse(&text).map_err(fail)
}

/// Parses and checks config text (the error names the key).
pub fn parse(text: &str) -> Result<ConfigFile, String> {
    let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
    file.check()?;
    Ok(file)
}

impl ConfigFile {
    /// The context window set for `model`: its `[models."ID"]` entry, else
    /// the top-level `context_window`.
    pub fn context_window_for(&self, model: &str) -> Option<u64> {
        self.models
            .get(model)
            .and_then(|m| m.context_window)
            .or(self.context_window)
    }

    /// Checks every value with the flag's own rule.
    fn check(&self) -> Result<(), String> {
        use crate::provider as p;
        fn key<T>(
            name: &str,
            value: Option<T>,
            ok: impl Fn(&T) -> Result<(), String>,
        ) -> Result<(), String> {
            match value {
                Some(v) => ok(&v).map_err(|e| format!("key `{name}`: {e}")),
                None => Ok(()),
            }
        }
        let number =
            |f: fn(&str) -> Result<f64, String>| move |v: &f64| f(&v.to_string()).map(drop);
        key("model", self.model.as_ref(), |m| {
            if m.trim().is_empty() {
                Err("must not be empty".into())
            } else {
                Ok(())
            }
        })?;
        key("effort", self.effort.as_deref(), |e| p::effort(e).map(drop))?;
        key("temperature", self.temperature, number(p::temperature))?;
        key("max_tokens", self.max_tokens, |n| {
            p::max_tokens(&n.to_string()).map(drop)
        })?;
        key("idle_timeout", self.idle_timeout, number(p::seconds))?;
        key("attempts", self.attempts, |n| {
            p::attempts(&n.to_string()).map(drop)
        })?;
        key("max_retry_wait", self.max_retry_wait, number(p::seconds))?;
        key("max_event_bytes", self.max_event_bytes, |n| {
            p::event_bytes(&n.to_string()).map(drop)
        })?;
        key("max_response_bytes", self.max_response_bytes, |n| {
            p::response_bytes(&n.to_string()).map(drop)
        })?;
        key("max_steps", self.max_steps, |n| {
            p::steps(&n.to_string()).map(drop)
        })?;
        key("provider", self.provider.as_deref(), |v| match *v {
            "openai" | "anthropic" => Ok(()),
            _ => Err("must be openai or anthropic".into()),
        })?;
        let window = |n: &u64| p::context_window(&n.to_string()).map(drop);
        key("context_window", self.context_window, window)?;
        for (id, m) in &self.models {
            key(
                &format!("models.{id:?}.context_window"),
                m.context_window,
                window,
            )?;
        }
        key("tools.sandbox", self.tools.sandbox.as_deref(), |v| {
            crate::tool_args::sandbox(v).map(drop)
        })?;
        key("tools.tool_env", self.tools.tool_env.as_deref(), |v| {
            crate::tool_args::inherit(v).map(drop)
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_parses() {
        let f = parse(
            r#"
model = "m"
effort = "high"
temperature = 0.5
max_tokens = 100
base_url = "http://h"
api_key_env = "K"
idle_timeout = 1.5
attempts = 2
max_retry_wait = 3
max_event_bytes = 2048
max_response_bytes = 4096
max_steps = 50
system = "S"
append_system = "A"
[tools]
sandbox = "off"
writable_roots = ["/x"]
no_network = true
tool_env = "core"
tool_env_exclude = ["A*"]
tool_env_keep_secrets = true
"#,
        )
        .unwrap();
        assert_eq!(f.model.as_deref(), Some("m"));
        assert_eq!(f.effort.as_deref(), Some("high"));
        assert_eq!(f.temperature, Some(0.5));
        assert_eq!(f.max_tokens, Some(100));
        assert_eq!(f.idle_timeout, Some(1.5));
        assert_eq!(f.attempts, Some(2));
        assert_eq!(f.max_retry_wait, Some(3.0));
        assert_eq!(f.max_event_bytes, Some(2048));
        assert_eq!(f.max_response_bytes, Some(4096));
        assert_eq!(f.max_steps, Some(50));
        assert_eq!(f.tools.sandbox.as_deref(), Some("off"));
        assert_eq!(f.tools.no_network, Some(true));
        assert_eq!(parse("").unwrap(), ConfigFile::default());
    }

    /// A context window for every model, and one per model id.
    #[test]
    fn context_windows_per_model() {
        let f = parse(
            "context_window = 32768\n[models.\"smollm2\"]\ncontext_window = 8192\n[models.\"other\"]\n",
        )
        .unwrap();
        assert_eq!(f.context_window_for("smollm2"), Some(8192));
        assert_eq!(f.context_window_for("other"), Some(32768));
        assert_eq!(f.context_window_for("x"), Some(32768));
        assert_eq!(ConfigFile::default().context_window_for("x"), None);
        let e = parse("[models.\"m\"]\ncontext_window = 5").unwrap_err();
        assert!(e.starts_with("key `models.\"m\".context_window`: "), "{e}");
        let e = parse("context_window = 0").unwrap_err();
        assert!(e.starts_with("key `context_window`: "), "{e}");
        let e = parse("[models.\"m\"]\nwindow = 5").unwrap_err();
        assert!(e.contains("window"), "{e}");
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let e = parse("modle = \"x\"").unwrap_err();
        assert!(e.contains("modle"), "{e}");
        let e = parse("temperature = \"hot\"").unwrap_err();
        assert!(e.contains("temperature"), "{e}");
        let e = parse("temperature = 3.5").unwrap_err();
        assert!(e.starts_with("key `temperature`: "), "{e}");
        let e = parse("effort = \"medium\"").unwrap_err();
        assert!(e.starts_with("key `effort`: "), "{e}");
        let e = parse("attempts = 0").unwrap_err();
        assert!(e.starts_with("key `attempts`: "), "{e}");
        let e = parse("[tools]\nsandbox = \"none\"").unwrap_err();
        assert!(e.starts_with("key `tools.sandbox`: "), "{e}");
        let e = parse("[tools]\nshell = 1").unwrap_err();
        assert!(e.contains("shell"), "{e}");
        let e = parse("max_tokens = 0").unwrap_err();
        assert!(e.starts_with("key `max_tokens`: "), "{e}");
    }

    #[test]
    fn located_by_xdg_then_home() {
        let env = |k: &str| match k {
            "XDG_CONFIG_HOME" => Some("/x".to_string()),
            "HOME" => Some("/h".to_string()),
            _ => None,
        };
        assert_eq!(path(&env), Some(PathBuf::from("/x/dsh/config.toml")));
        let env = |k: &str| (k == "HOME").then(|| "/h".to_string());
        assert_eq!(
            path(&env),
            Some(PathBuf::from("/h/.config/dsh/config.toml"))
        );
        assert_eq!(path(&|_| None), None);
    }

    #[test]
    fn a_bad_file_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, "effort = \"ultra\"\n").unwrap();
        let e = read(&p).unwrap_err();
        assert!(
            e.starts_with(&format!("dsh: config file {}: key `effort`", p.display())),
            "{e}"
        );
    }
}
