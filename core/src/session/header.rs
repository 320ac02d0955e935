//! The session header (session.md 8.3) and the request epoch header with its
//! canonical form and equality (4.10, 7.1, 7.2).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::ids::SessionId;
use crate::json::MAX_SAFE_INTEGER;
use crate::object::{Fields, deserialize_via_fields};
use crate::options::{AdapterDefaults, LlmCallConfig, ToolSchema};

use super::fields::Strict;

/// The only session format version (`SESSION_FORMAT_VERSION`).
pub const SESSION_FORMAT_VERSION: u64 = 0;

/// Per-session metadata stored beside the log, never as an event (8.3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionHeader {
    /// The session id.
    pub id: SessionId,
    /// Creation time, epoch milliseconds (HD4: non-negative safe integer).
    pub created_at: u64,
    /// Working directory (HD5: absolute when present).
    pub cwd: Option<String>,
    /// The parent session of a fork or subagent.
    pub parent_session: Option<SessionId>,
    /// How many leading events were inherited from the parent (fork lineage).
    pub seed_length: Option<u64>,
    /// `Some("subagent")` or absent (HD8, presentation only).
    pub origin: Option<String>,
    /// Delegation depth; absent means 0 (HD9).
    pub delegation_depth: Option<u64>,
    /// The agent preset name (reference HEAD only).
    pub agent_preset: Option<String>,
}

impl SessionHeader {
    /// The header synthesized when none is supplied:
    /// `{"version":0,"id":…,"createdAt":now}` (8.3).
    pub fn new(id: impl Into<SessionId>, created_at: u64) -> Self {
        SessionHeader {
            id: id.into(),
            created_at,
            cwd: None,
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: None,
            agent_preset: None,
        }
    }

    /// Checks HD4–HD10 (HD1–HD3 hold by construction).
    pub fn validate(&self) -> Result<(), HeaderError> {
        if self.created_at > MAX_SAFE_INTEGER {
            return Err(HeaderError::new(
                "HD4",
                "createdAt must be a non-negative safe integer",
            ));
        }
        if let Some(cwd) = &self.cwd
            && !is_absolute_path(cwd)
        {
            return Err(HeaderError::new(
                "HD5",
                format!("cwd must be an absolute path, got \"{cwd}\""),
            ));
        }
        if self.seed_length.is_some_and(|n| n > MAX_SAFE_INTEGER) {
            return Err(HeaderError::new(
                "HD7",
                "seedLength must be a non-negative safe integer",
            ));
        }
        if let Some(origin) = &self.origin
            && origin != "subagent"
        {
            return Err(HeaderError::new(
                "HD8",
                format!("origin must be \"subagent\" when present, got \"{origin}\""),
            ));
        }
        if self.delegation_depth.is_some_and(|n| n > MAX_SAFE_INTEGER) {
            return Err(HeaderError::new(
                "HD9",
                "delegationDepth must be a non-negative safe integer",
            ));
        }
        Ok(())
    }
}

/// Whether `path` is absolute under POSIX rules (`/…`) or Windows rules
/// (`C:\…`, `C:/…`, `\\server\…`); session.md Q7 leaves the platform choice
/// to the port, and the core has no platform, so both are accepted.
pub(crate) fn is_absolute_path(path: &str) -> bool {
    let b = path.as_bytes();
    if b.first() == Some(&b'/') || path.starts_with("\\\\") {
        return true;
    }
    matches!(b, [drive, b':', sep, ..] if drive.is_ascii_alphabetic() && (*sep == b'\\' || *sep == b'/'))
}

impl Serialize for SessionHeader {
    /// The in-memory JSON of 8.3 (`version` first; the JSONL header line adds
    /// `type` and always writes `delegationDepth`, see the `jsonl` module).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("version", &SESSION_FORMAT_VERSION)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("createdAt", &self.created_at)?;
        if let Some(v) = &self.cwd {
            map.serialize_entry("cwd", v)?;
        }
        if let Some(v) = &self.parent_session {
            map.serialize_entry("parentSession", v)?;
        }
        if let Some(v) = &self.seed_length {
            map.serialize_entry("seedLength", v)?;
        }
        if let Some(v) = &self.origin {
            map.serialize_entry("origin", v)?;
        }
        if let Some(v) = &self.delegation_depth {
            map.serialize_entry("delegationDepth", v)?;
        }
        if let Some(v) = &self.agent_preset {
            map.serialize_entry("agentPreset", v)?;
        }
        map.end()
    }
}

/// A session header rule violation (HD-rules).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeaderError {
    /// The rule id, e.g. `"HD5"`.
    pub rule: &'static str,
    /// What is wrong.
    pub message: String,
}

impl HeaderError {
    pub(crate) fn new(rule: &'static str, message: impl Into<String>) -> Self {
        HeaderError {
            rule,
            message: message.into(),
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: invalid session header: {}", self.rule, self.message)
    }
}

impl core::error::Error for HeaderError {}

/// The request epoch header logged by `request/header` (4.10).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct EpochHeader {
    /// Provider route, model and call options.
    pub config: LlmCallConfig,
    /// Which config values the adapter supplied.
    pub adapter_defaults: Option<AdapterDefaults>,
    /// System prompt.
    pub system: Option<String>,
    /// Tools offered to the model.
    pub tools: Option<Vec<ToolSchema>>,
}

impl EpochHeader {
    /// A header with only a config.
    pub fn new(config: LlmCallConfig) -> Self {
        EpochHeader {
            config,
            adapter_defaults: None,
            system: None,
            tools: None,
        }
    }

    /// `canonical(h)` (7.1): `adapterDefaults` kept only when one of its
    /// members is `true`, `system` only when non-empty, `tools` only when
    /// non-empty.
    pub fn canonical(&self) -> EpochHeader {
        let adapter_defaults = self
            .adapter_defaults
            .filter(|d| d.reasoning_effort == Some(true) || d.max_tokens == Some(true));
        EpochHeader {
            config: self.config.clone(),
            adapter_defaults,
            system: self.system.clone().filter(|s| !s.is_empty()),
            tools: self.tools.clone().filter(|t| !t.is_empty()),
        }
    }

    /// Header equality (7.2), meant for canonical headers: config fields
    /// strictly equal, adapter-default flags strictly equal, same system, and
    /// the tools (absent = `[]`) equal position by position by their
    /// serialized JSON text.
    pub fn same_as(&self, other: &EpochHeader) -> bool {
        let flags = |h: &EpochHeader| {
            h.adapter_defaults
                .map(|d| (d.reasoning_effort, d.max_tokens))
                .unwrap_or((None, None))
        };
        let no_tools: &[ToolSchema] = &[];
        let a = self.tools.as_deref().unwrap_or(no_tools);
        let b = other.tools.as_deref().unwrap_or(no_tools);
        self.config.same_as(&other.config)
            && flags(self) == flags(other)
            && self.system == other.system
            && a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| serde_json::to_string(x).ok() == serde_json::to_string(y).ok())
    }

    /// Checks V4: non-empty `provider` and `model`, `reasoningEffort` absent
    /// or non-empty, `adapterDefaults` members literally `true` and naming a
    /// field present in `config`.
    pub fn validate(&self) -> Result<(), String> {
        if self.config.provider.is_empty() {
            return Err(String::from(
                "header config.provider must be a non-empty string",
            ));
        }
        if self.config.model.is_empty() {
            return Err(String::from(
                "header config.model must be a non-empty string",
            ));
        }
        if self
            .config
            .reasoning_effort
            .as_ref()
            .is_some_and(|e| e.as_str().is_empty())
        {
            return Err(String::from(
                "header config.reasoningEffort must be a non-empty string when present",
            ));
        }
        if let Some(d) = &self.adapter_defaults {
            if d.reasoning_effort == Some(false) || d.max_tokens == Some(false) {
                return Err(String::from(
                    "header adapterDefaults members must be literally true",
                ));
            }
            if d.reasoning_effort == Some(true) && self.config.reasoning_effort.is_none() {
                return Err(String::from(
                    "header adapterDefaults.reasoningEffort requires config.reasoningEffort",
                ));
            }
            if d.max_tokens == Some(true) && self.config.max_tokens.is_none() {
                return Err(String::from(
                    "header adapterDefaults.maxTokens requires config.maxTokens",
                ));
            }
        }
        Ok(())
    }

    fn from_fields(fields: Fields) -> Result<Self, String> {
        let mut f = Strict::new(
            fields,
            "request header",
            &["config", "adapterDefaults", "system", "tools"],
        )?;
        let config = f.typed("config")?;
        let adapter_defaults = match f.opt("adapterDefaults") {
            None => None,
            Some(Value::Object(map)) => {
                let mut d = AdapterDefaults::default();
                for (k, v) in map {
                    let flag = v.as_bool().ok_or_else(|| {
                        format!("header adapterDefaults.{k} must be literally true")
                    })?;
                    match k.as_str() {
                        "reasoningEffort" => d.reasoning_effort = Some(flag),
                        "maxTokens" => d.max_tokens = Some(flag),
                        _ => {
                            return Err(format!(
                                "header adapterDefaults has an unknown key \"{k}\""
                            ));
                        }
                    }
                }
                Some(d)
            }
            Some(_) => return Err(String::from("header adapterDefaults must be an object")),
        };
        let system = f.opt_string("system")?;
        let tools = f.opt_typed("tools")?;
        Ok(EpochHeader {
            config,
            adapter_defaults,
            system,
            tools,
        })
    }
}

deserialize_via_fields!(EpochHeader, "a request header", EpochHeader::from_fields);

impl Serialize for EpochHeader {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("config", &self.config)?;
        if let Some(d) = &self.adapter_defaults {
            map.serialize_entry("adapterDefaults", d)?;
        }
        if let Some(v) = &self.system {
            map.serialize_entry("system", v)?;
        }
        if let Some(v) = &self.tools {
            map.serialize_entry("tools", v)?;
        }
        map.end()
    }
}
