//! Server configuration, compatible with codex's `config.toml` section
//! `[mcp_servers.NAME]` so a user can copy theirs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Default deadline of the handshake and the first listing (seconds).
pub const DEFAULT_STARTUP_TIMEOUT_SEC: f64 = 10.0;

/// Default deadline of one `tools/call` (seconds).
pub const DEFAULT_TOOL_TIMEOUT_SEC: f64 = 60.0;

/// One `[mcp_servers.NAME]` table. A stdio server names `command`; a
/// streamable-HTTP server names `url`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The program to run (stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables set for it, on top of the tool environment policy (a
    /// variable named here reaches the server even if the policy would
    /// drop it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Names of variables of dsh's own environment passed through as they
    /// are (codex's `env_vars`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_vars: Vec<String>,
    /// Its working directory (default: the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The server's URL (streamable HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The variable holding a bearer token for `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env_var: Option<String>,
    /// Extra HTTP headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http_headers: BTreeMap<String, String>,
    /// HTTP headers whose values come from variables (header → variable).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_http_headers: BTreeMap<String, String>,
    /// `false`: configured but not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// When set, only these tools (raw names) are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// Tools (raw names) never offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
    /// Deadline of the handshake and first listing, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_sec: Option<f64>,
    /// The same in milliseconds (codex's older key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_ms: Option<u64>,
    /// Deadline of one tool call, seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_sec: Option<f64>,
    /// dsh: run tools the server annotates `readOnlyHint` without asking
    /// (default `false`: every MCP tool asks, as any tool under `ask`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve_read_only: Option<bool>,
}

impl ServerConfig {
    /// A stdio server running `command` with `args`.
    pub fn stdio(command: impl Into<String>, args: Vec<String>) -> Self {
        ServerConfig {
            command: Some(command.into()),
            args,
            ..ServerConfig::default()
        }
    }

    /// A streamable-HTTP server at `url`.
    pub fn http(url: impl Into<String>) -> Self {
        ServerConfig {
            url: Some(url.into()),
            ..ServerConfig::default()
        }
    }

    /// Whether the server is to be started.
    pub fn is_enabled(&self) -> bool {
        self.enabled != Some(false)
    }

    /// Checks the table: exactly one of `command` and `url`, positive
    /// finite timeouts.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => return Err("set either `command` or `url`, not both".into()),
            (None, None) => return Err("set `command` (stdio) or `url` (streamable HTTP)".into()),
            (Some(c), None) if c.is_empty() => return Err("`command` is empty".into()),
            _ => {}
        }
        for (key, v) in [
            ("startup_timeout_sec", self.startup_timeout_sec),
            ("tool_timeout_sec", self.tool_timeout_sec),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0 && v <= 86_400.0)
            {
                return Err(format!("`{key}` must be a number of seconds in (0, 86400]"));
            }
        }
        Ok(())
    }

    /// The startup deadline.
    pub fn startup_timeout(&self) -> std::time::Duration {
        if let Some(s) = self.startup_timeout_sec {
            return std::time::Duration::from_secs_f64(s);
        }
        if let Some(ms) = self.startup_timeout_ms {
            return std::time::Duration::from_millis(ms.clamp(1, 86_400_000));
        }
        std::time::Duration::from_secs_f64(DEFAULT_STARTUP_TIMEOUT_SEC)
    }

    /// The per-call deadline.
    pub fn tool_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(
            self.tool_timeout_sec.unwrap_or(DEFAULT_TOOL_TIMEOUT_SEC),
        )
    }

    /// Whether raw tool `name` is offered (`enabled_tools`, then
    /// `disabled_tools`).
    pub fn offers(&self, name: &str) -> bool {
        if let Some(only) = &self.enabled_tools
            && !only.iter().any(|t| t == name)
        {
            return false;
        }
        !self.disabled_tools.iter().any(|t| t == name)
    }
}

/// The `[mcp_servers]` table: server name → its config.
pub type ServersConfig = BTreeMap<String, ServerConfig>;
