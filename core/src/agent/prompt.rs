//! System-prompt assembly and rendering (loop.md §7, SP-1..SP-5) and the
//! runtime-context snapshot (LC-12).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::message::{ContextForm, MessageSource, Section};
use crate::options::ToolSchema;

/// The harness identity section text (SP-2, band `-100`).
pub const HARNESS_IDENTITY: &str = "You are an AI agent powered by the DeepSeek Harness SDK.";
/// The plugin name on runtime-context messages (LC-12).
pub(crate) const RUNTIME_CONTEXT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";
/// The first line of a runtime-context snapshot (LC-12).
pub const RUNTIME_CONTEXT_HEADER: &str =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\n\n";
/// The text that clears an earlier snapshot (LC-12).
pub const RUNTIME_CONTEXT_CLEARED: &str =
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply.";

/// One ordered text section of the system prompt (SP-1).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptSection {
    /// Section name, used in render errors.
    pub name: String,
    /// Sort key; equal orders keep insertion order (SP-2).
    pub order: i64,
    /// Template text; `{{name}}` references are interpolated strictly (SP-3;
    /// without feature `prompt-templates` the text is used as it is).
    pub text: String,
}

impl PromptSection {
    /// A section.
    pub fn new(name: impl Into<String>, order: i64, text: impl Into<String>) -> Self {
        PromptSection {
            name: name.into(),
            order,
            text: text.into(),
        }
    }
}

/// One resolved prompt assembly (SP-1): sections, dynamic contexts, tool
/// schemas and variables, resolved once per proposed step.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Assembly {
    /// System-prompt sections.
    pub sections: Vec<PromptSection>,
    /// Dynamic context sections; they never enter `system` (SP-5) and reach
    /// the model only as the runtime-context message (LC-12).
    pub contexts: Vec<PromptSection>,
    /// Tool schemas in request order (LC-16).
    pub tools: Vec<ToolSchema>,
    /// Template variables; `None` is registered without a value.
    pub variables: BTreeMap<String, Option<String>>,
}

impl Assembly {
    /// Renders the system prompt (SP-3): sections sorted by `order`,
    /// interpolated strictly, empty ones dropped, joined with a blank line.
    /// An empty result means the request has no `system`.
    pub fn render(&self) -> Result<String, String> {
        let mut sections: Vec<&PromptSection> = self.sections.iter().collect();
        super::sort_stable_by(&mut sections, |a, b| a.order.cmp(&b.order));
        let mut parts: Vec<String> = Vec::new();
        for s in sections {
            let text = interpolate(&s.text, &s.name, &self.variables)?;
            if !text.is_empty() {
                parts.push(text);
            }
        }
        Ok(parts.join("\n\n"))
    }

    /// The runtime-context sections with non-empty text (LC-12), in `order`.
    pub(crate) fn context_sections(&self) -> Vec<Section> {
        let mut contexts: Vec<&PromptSection> = self
            .contexts
            .iter()
            .filter(|c| !c.text.is_empty())
            .collect();
        super::sort_stable_by(&mut contexts, |a, b| a.order.cmp(&b.order));
        contexts
            .into_iter()
            .map(|c| Section {
                name: c.name.clone(),
                text: c.text.clone(),
            })
            .collect()
    }
}

#[cfg(feature = "prompt-templates")]
fn valid_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

/// Feature `prompt-templates` off: a section's text as it is, `{{name}}`
/// included (nothing is interpolated, so nothing is refused).
#[cfg(not(feature = "prompt-templates"))]
pub(crate) fn interpolate(
    text: &str,
    _section: &str,
    _variables: &BTreeMap<String, Option<String>>,
) -> Result<String, String> {
    Ok(String::from(text))
}

/// Strict `{{name}}` interpolation (SP-3). Substituted values are not
/// rescanned.
#[cfg(feature = "prompt-templates")]
pub(crate) fn interpolate(
    text: &str,
    section: &str,
    variables: &BTreeMap<String, Option<String>>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            break;
        };
        let name = &after[..close];
        if !valid_variable_name(name) {
            return Err(format!(
                "malformed prompt variable reference \"{{{{{name}}}}}\" in section \"{section}\" (variable names match /^[a-z][a-z0-9_]*$/)"
            ));
        }
        match variables.get(name) {
            None => {
                let known: Vec<&str> = variables.keys().map(String::as_str).collect();
                let known = if known.is_empty() {
                    String::from("(none)")
                } else {
                    known.join(", ")
                };
                return Err(format!(
                    "unknown prompt variable \"{{{{{name}}}}}\" in section \"{section}\"; registered variables: {known}"
                ));
            }
            Some(None) => {
                return Err(format!(
                    "prompt variable \"{{{{{name}}}}}\" has no value for this assembly (section \"{section}\")"
                ));
            }
            Some(Some(value)) => {
                out.push_str(&rest[..open]);
                out.push_str(value);
                rest = &after[close + 2..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// What the agent remembers about the last runtime-context snapshot on the
/// surface (LC-12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RetainedContext {
    /// No snapshot message ever existed.
    Never,
    /// One existed, but a surface replacement shadowed it.
    Shadowed,
    /// The newest snapshot on the surface: its seq and text.
    Retained {
        /// Its `user/message` seq.
        seq: u64,
        /// Its text.
        text: String,
    },
}

/// The runtime-context candidate (LC-12): the text and source of the message
/// to add to the default pre-step decision, or `None`.
pub(crate) fn runtime_context_candidate(
    retained: &RetainedContext,
    sections: &[Section],
) -> Option<(String, MessageSource)> {
    let current = if sections.is_empty() {
        String::new()
    } else {
        let texts: Vec<&str> = sections.iter().map(|s| s.text.as_str()).collect();
        format!("{RUNTIME_CONTEXT_HEADER}{}", texts.join("\n\n"))
    };
    if *retained == RetainedContext::Never && current.is_empty() {
        return None;
    }
    let (snapshot, source) = if current.is_empty() {
        (
            String::from(RUNTIME_CONTEXT_CLEARED),
            MessageSource::plugin(RUNTIME_CONTEXT_PLUGIN),
        )
    } else {
        (
            current,
            MessageSource::Plugin {
                plugin: String::from(RUNTIME_CONTEXT_PLUGIN),
                form: Some(ContextForm::Snapshot {
                    sections: sections.to_vec(),
                }),
            },
        )
    };
    if let RetainedContext::Retained { text, .. } = retained
        && *text == snapshot
    {
        return None;
    }
    Some((snapshot, source))
}

/// Whether a message source is the runtime-context producer's.
pub(crate) fn is_runtime_context_source(source: &MessageSource) -> bool {
    matches!(source, MessageSource::Plugin { plugin, .. } if plugin == RUNTIME_CONTEXT_PLUGIN)
        || matches!(source, MessageSource::Other(o)
            if o.get("kind").and_then(|k| k.as_str()) == Some("plugin")
            && o.get("plugin").and_then(|p| p.as_str()) == Some(RUNTIME_CONTEXT_PLUGIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SP-3; with feature `prompt-templates` off, sections are sorted and
    /// joined, their text taken as it is.
    #[test]
    fn sp3_render() {
        let mut a = Assembly::default();
        a.sections
            .push(PromptSection::new("b", 100, "tool {{model}}"));
        a.sections
            .push(PromptSection::new("a", -100, HARNESS_IDENTITY));
        a.sections.push(PromptSection::new("empty", 0, ""));
        a.variables.insert("model".into(), Some("mock".into()));
        #[cfg(not(feature = "prompt-templates"))]
        assert_eq!(
            a.render().unwrap(),
            alloc::format!("{HARNESS_IDENTITY}\n\ntool {{{{model}}}}")
        );
        #[cfg(feature = "prompt-templates")]
        {
            assert_eq!(
                a.render().unwrap(),
                alloc::format!("{HARNESS_IDENTITY}\n\ntool mock")
            );
            a.sections.push(PromptSection::new("p", 0, "{{cwd}}"));
            a.variables.insert("cwd".into(), None);
            assert_eq!(
                a.render().unwrap_err(),
                "prompt variable \"{{cwd}}\" has no value for this assembly (section \"p\")"
            );
            a.sections.pop();
            a.sections.push(PromptSection::new("q", 0, "{{x}}"));
            assert_eq!(
                a.render().unwrap_err(),
                "unknown prompt variable \"{{x}}\" in section \"q\"; registered variables: cwd, model"
            );
        }
    }

    #[test]
    fn lc12_candidates() {
        let sections = [Section {
            name: "env".into(),
            text: "cwd=/repo".into(),
        }];
        assert_eq!(
            runtime_context_candidate(&RetainedContext::Never, &[]),
            None
        );
        let (text, source) = runtime_context_candidate(&RetainedContext::Never, &sections).unwrap();
        assert_eq!(text, alloc::format!("{RUNTIME_CONTEXT_HEADER}cwd=/repo"));
        assert!(is_runtime_context_source(&source));
        let retained = RetainedContext::Retained { seq: 4, text };
        assert_eq!(runtime_context_candidate(&retained, &sections), None);
        let (cleared, _) = runtime_context_candidate(&retained, &[]).unwrap();
        assert_eq!(cleared, RUNTIME_CONTEXT_CLEARED);
        assert_eq!(
            runtime_context_candidate(
                &RetainedContext::Retained {
                    seq: 9,
                    text: RUNTIME_CONTEXT_CLEARED.into()
                },
                &[]
            ),
            None
        );
    }
}
