//! Request options, call config, tool schemas and reasoning efforts
//! (streaming.md 7).

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{ReasoningEffortId, SessionId};
use crate::json::serialize_js_f64_opt;
use crate::message::Message;

/// A tool definition offered to the model (TS-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema object of the arguments, passed through verbatim (TS-2).
    pub parameters: Value,
}

impl ToolSchema {
    /// A schema of this name, description and parameters.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolSchema {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// What an auxiliary model call is for (7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Purpose {
    /// Conversation compaction.
    Compaction,
    /// Generating a session title (DeepSeek forces thinking off).
    SessionTitle,
}

/// One fully assembled model request (7.1). The cancellation signal is a
/// runtime concern of the shells and is not part of this value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct GenerateOptions {
    /// Registered provider route.
    pub provider: String,
    /// Model id passed to the adapter.
    pub model: String,
    /// Adapter-owned effort id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffortId>,
    /// History after the system slot, exactly as the provider should see it.
    /// Messages are immutable and shared with the session's derived history,
    /// so building a request does not copy them.
    pub messages: Vec<Arc<Message>>,
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tools offered to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSchema>>,
    /// Sampling temperature.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_js_f64_opt"
    )]
    pub temperature: Option<f64>,
    /// Output token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Session identity stamped by the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// Auxiliary-call classification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<Purpose>,
}

impl GenerateOptions {
    /// A request for `provider`/`model` with the given history and nothing else.
    pub fn new(
        provider: impl Into<String>,
        model: impl Into<String>,
        messages: Vec<Arc<Message>>,
    ) -> Self {
        GenerateOptions {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
            messages,
            system: None,
            tools: None,
            temperature: None,
            max_tokens: None,
            stop: None,
            session_id: None,
            purpose: None,
        }
    }
}

/// The per-conversation part of a request, logged in the request header (CC-1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LlmCallConfig {
    /// Provider route.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Reasoning effort id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffortId>,
    /// Sampling temperature.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_js_f64_opt"
    )]
    pub temperature: Option<f64>,
    /// Output token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
}

impl LlmCallConfig {
    /// A config naming only a provider route and model.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        LlmCallConfig {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
        }
    }

    /// Equality as CC-3 defines it: strict on every field; `stop` element by
    /// element, with absent equal only to absent.
    pub fn same_as(&self, other: &LlmCallConfig) -> bool {
        self.provider == other.provider
            && self.model == other.model
            && self.reasoning_effort == other.reasoning_effort
            && self.temperature == other.temperature
            && self.max_tokens == other.max_tokens
            && self.stop == other.stop
    }
}

/// Which config fields the adapter filled in rather than the caller (CC-2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct AdapterDefaults {
    /// `reasoningEffort` came from the adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<bool>,
    /// `maxTokens` came from the adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<bool>,
}

#[cfg(feature = "defmt")]
mod defmt_impls {
    use super::*;

    impl defmt::Format for ToolSchema {
        fn format(&self, f: defmt::Formatter<'_>) {
            defmt::write!(f, "ToolSchema({=str})", self.name.as_str())
        }
    }

    impl defmt::Format for GenerateOptions {
        fn format(&self, f: defmt::Formatter<'_>) {
            defmt::write!(
                f,
                "GenerateOptions({=str}/{=str}, {=usize} messages)",
                self.provider.as_str(),
                self.model.as_str(),
                self.messages.len()
            )
        }
    }

    impl defmt::Format for LlmCallConfig {
        fn format(&self, f: defmt::Formatter<'_>) {
            defmt::write!(
                f,
                "LlmCallConfig({=str}/{=str})",
                self.provider.as_str(),
                self.model.as_str()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_config_matches_the_spec_example() {
        let json = r#"{"provider":"deepseek-official","model":"deepseek-v4-flash","reasoningEffort":"high","maxTokens":256000}"#;
        let c: LlmCallConfig = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::to_string(&c).unwrap(), json);
    }

    #[test]
    fn config_equality_follows_cc3() {
        let a = LlmCallConfig::new("p", "m");
        let mut b = a.clone();
        assert!(a.same_as(&b));
        b.stop = Some(Vec::new());
        assert!(!a.same_as(&b), "[] is not equal to absent");
    }

    #[test]
    fn generate_options_omit_unset_fields() {
        let mut o = GenerateOptions::new("p", "m", Vec::new());
        o.temperature = Some(1.0);
        o.purpose = Some(Purpose::SessionTitle);
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"provider":"p","model":"m","messages":[],"temperature":1,"purpose":"session-title"}"#
        );
    }
}
