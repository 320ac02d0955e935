//! Adapter configuration (5.1, D-2/D-3).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

/// The provider route this adapter owns (D-1).
pub const PROVIDER_ROUTE: &str = "deepseek-official";
/// The default API key variable name (D-2).
pub const DEFAULT_API_KEY_ENV: &str = "DEEPSEEK_API_KEY";
/// The variable that supplies a base URL when the config has none (D-2).
pub const BASE_URL_ENV: &str = "DEEPSEEK_BASE_URL";
/// The default base URL (D-2).
pub const DEFAULT_BASE_URL: &str = "https://api.deepseek.com";
/// The default idle budget, 5 minutes (AC-11).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;

/// Deployment thinking mode (D-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Thinking {
    /// `"enabled"`.
    Enabled,
    /// `"disabled"`: a deployment lock; only effort `off` is allowed (D-3).
    Disabled,
}

impl Thinking {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Enabled => "enabled",
            Thinking::Disabled => "disabled",
        }
    }
}

/// A DeepSeek reasoning effort id (RE-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Effort {
    /// `off`: thinking disabled on the wire.
    Off,
    /// `low`.
    Low,
    /// `high`.
    High,
    /// `max`.
    Max,
}

impl Effort {
    /// Parses an effort id; `None` for anything but `off/low/high/max`.
    pub fn parse(id: &str) -> Option<Effort> {
        match id {
            "off" => Some(Effort::Off),
            "low" => Some(Effort::Low),
            "high" => Some(Effort::High),
            "max" => Some(Effort::Max),
            _ => None,
        }
    }

    /// The id.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Off => "off",
            Effort::Low => "low",
            Effort::High => "high",
            Effort::Max => "max",
        }
    }
}

/// An input modality of a catalog model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Modality {
    /// Text input.
    Text,
    /// Image input.
    Image,
}

/// One advisory catalog entry (D-2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelEntry {
    /// Model id (non-empty, unique).
    pub id: String,
    /// Display name; defaults to `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Context window in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Default output cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Input modalities; `["text"]` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_modalities: Option<Vec<Modality>>,
}

impl ModelEntry {
    fn new(id: &str, name: &str) -> Self {
        ModelEntry {
            id: String::from(id),
            name: Some(String::from(name)),
            description: None,
            context_window: Some(1_000_000),
            max_tokens: None,
            input_modalities: None,
        }
    }

    /// Whether the model accepts image input.
    pub fn accepts_images(&self) -> bool {
        self.input_modalities
            .as_ref()
            .is_some_and(|m| m.contains(&Modality::Image))
    }
}

/// The adapter configuration (D-2). Every field has the spec's default, so
/// `{}` deserializes to the default configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DeepSeekConfig {
    /// The *name* of the environment variable (or credential) holding the
    /// API key, never a literal key.
    pub api_key_env: String,
    /// Base URL; absent means `$DEEPSEEK_BASE_URL`, else
    /// `https://api.deepseek.com`. Any OpenAI-compatible endpoint works.
    #[serde(rename = "baseURL", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Deployment thinking mode; absent means the provider default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Default reasoning effort (`D` of D-15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<Effort>,
    /// Default output cap for model metadata (not sent unless the request
    /// sets `maxTokens`).
    pub max_tokens: u64,
    /// Context window for models without an exact value.
    pub default_context_window: u64,
    /// Advisory model catalog.
    pub models: Vec<ModelEntry>,
    /// Idle budget of the watchdog, in milliseconds (AC-11).
    pub stream_idle_timeout_ms: u64,
    /// Image budget of one request, in base64 bytes (I-2).
    pub max_request_image_bytes: u64,
}

impl Default for DeepSeekConfig {
    fn default() -> Self {
        DeepSeekConfig {
            api_key_env: String::from(DEFAULT_API_KEY_ENV),
            base_url: None,
            thinking: None,
            reasoning_effort: None,
            max_tokens: 256_000,
            default_context_window: 1_000_000,
            models: vec![
                ModelEntry::new("deepseek-v4-flash", "DeepSeek-V4-Flash"),
                ModelEntry::new("deepseek-v4-pro", "DeepSeek-V4-Pro"),
            ],
            stream_idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            max_request_image_bytes: 20 * 1024 * 1024,
        }
    }
}

/// A configuration the adapter rejects (D-3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `thinking: "disabled"` with a `reasoningEffort` other than `off`.
    EffortWithThinkingDisabled(Effort),
    /// A numeric field outside its bounds.
    OutOfRange {
        /// The field name, e.g. `streamIdleTimeoutMs`.
        field: &'static str,
        /// The rejected value.
        value: u64,
    },
    /// `apiKeyEnv` is empty.
    EmptyApiKeyEnv,
    /// A catalog entry is invalid (empty or duplicate id, empty name, empty
    /// or repeated modalities, zero limits).
    InvalidModel(String),
    /// The base URL is not an `http://` or `https://` URL.
    InvalidBaseUrl,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::EffortWithThinkingDisabled(e) => write!(
                f,
                "llm-deepseek: reasoningEffort \"{}\" requires thinking, which is disabled",
                e.as_str()
            ),
            ConfigError::OutOfRange { field, value } => {
                write!(f, "llm-deepseek: {field} {value} is out of range")
            }
            ConfigError::EmptyApiKeyEnv => f.write_str("llm-deepseek: apiKeyEnv must not be empty"),
            ConfigError::InvalidModel(why) => write!(f, "llm-deepseek: models: {why}"),
            ConfigError::InvalidBaseUrl => {
                f.write_str("llm-deepseek: baseURL must start with http:// or https://")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

const MAX_SAFE: u64 = dsh_core::json::MAX_SAFE_INTEGER;

fn bound(field: &'static str, value: u64, max: u64) -> Result<(), ConfigError> {
    if value == 0 || value > max {
        Err(ConfigError::OutOfRange { field, value })
    } else {
        Ok(())
    }
}

/// Whether `url` is an `http://` or `https://` URL with a host part.
pub fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
}

impl DeepSeekConfig {
    /// D-3 validation.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.thinking == Some(Thinking::Disabled)
            && let Some(e) = self.reasoning_effort.filter(|e| *e != Effort::Off)
        {
            return Err(ConfigError::EffortWithThinkingDisabled(e));
        }
        if self.api_key_env.is_empty() {
            return Err(ConfigError::EmptyApiKeyEnv);
        }
        bound("maxTokens", self.max_tokens, MAX_SAFE)?;
        bound(
            "defaultContextWindow",
            self.default_context_window,
            MAX_SAFE,
        )?;
        bound(
            "streamIdleTimeoutMs",
            self.stream_idle_timeout_ms,
            2_147_483_647,
        )?;
        bound(
            "maxRequestImageBytes",
            self.max_request_image_bytes,
            MAX_SAFE,
        )?;
        if let Some(url) = &self.base_url
            && !is_http_url(url)
        {
            return Err(ConfigError::InvalidBaseUrl);
        }
        for (i, m) in self.models.iter().enumerate() {
            let bad = |why: &str| Err(ConfigError::InvalidModel(alloc::format!("#{i} {why}")));
            if m.id.is_empty() {
                return bad("has an empty id");
            }
            if self.models[..i].iter().any(|o| o.id == m.id) {
                return bad("repeats an id");
            }
            if m.name.as_deref() == Some("") {
                return bad("has an empty name");
            }
            if m.context_window == Some(0) || m.max_tokens == Some(0) {
                return bad("has a zero limit");
            }
            if let Some(mods) = &m.input_modalities {
                let repeated = mods.len() == 2 && mods[0] == mods[1];
                if mods.is_empty() || mods.len() > 2 || repeated {
                    return bad("needs unique inputModalities");
                }
            }
        }
        Ok(())
    }

    /// The catalog entry for `model`, if listed.
    pub fn model(&self, model: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.id == model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_d3() {
        let c: DeepSeekConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, DeepSeekConfig::default());
        assert_eq!(c.validate(), Ok(()));
        let locked: DeepSeekConfig =
            serde_json::from_str(r#"{"thinking":"disabled","reasoningEffort":"high"}"#).unwrap();
        assert_eq!(
            locked.validate(),
            Err(ConfigError::EffortWithThinkingDisabled(Effort::High))
        );
        let ok: DeepSeekConfig =
            serde_json::from_str(r#"{"thinking":"disabled","reasoningEffort":"off"}"#).unwrap();
        assert_eq!(ok.validate(), Ok(()));
        let c: DeepSeekConfig =
            serde_json::from_str(r#"{"streamIdleTimeoutMs":2147483648}"#).unwrap();
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        assert!(serde_json::from_str::<DeepSeekConfig>(r#"{"reasoningEffort":"medium"}"#).is_err());
        assert!(serde_json::from_str::<DeepSeekConfig>(r#"{"apiKey":"sk-1"}"#).is_err());
        let c: DeepSeekConfig =
            serde_json::from_str(r#"{"models":[{"id":"a"},{"id":"a"}]}"#).unwrap();
        assert!(matches!(c.validate(), Err(ConfigError::InvalidModel(_))));
        let c: DeepSeekConfig = serde_json::from_str(r#"{"baseURL":"ftp://x"}"#).unwrap();
        assert_eq!(c.validate(), Err(ConfigError::InvalidBaseUrl));
    }
}
