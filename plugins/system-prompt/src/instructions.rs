//! The [`Instructions`] plugin: workspace instruction files (`AGENTS.md`,
//! else `CLAUDE.md`) delivered as plugin-sourced context with the
//! `instructions` form (session.md 4.4), once per turn when they changed.
//!
//! At the first pre-step of each turn the plugin asks its
//! [`InstructionSource`] for the files (on a std host,
//! [`crate::host::HostInstructions`]), renders them, and compares the text
//! with the newest message of this plugin in the session (so a resumed
//! session does not get them twice). When it differs, one user message is
//! added in front of the turn's messages: the files' text, or, once every
//! file is gone, a notice that the earlier instructions no longer apply.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write;

use dsh_core::agent::{PreStepDecision, PreStepPayload};
use dsh_core::session::EventData;
use dsh_core::{ContentBlock, ContextForm, Message, MessageSource};
use dsh_runtime::{Cx, Flow, Plugin, Seams};

/// The plugin name on instruction messages.
pub const INSTRUCTIONS_PLUGIN: &str = "@deepseek-ai/dsh-agent-instructions";
/// The first line of an instructions message.
pub const INSTRUCTIONS_HEADER: &str = "Instructions from the workspace's instruction files. \
Follow them; when they conflict, a file nearer to the working directory takes precedence. \
These supersede instructions delivered earlier.";
/// The text that withdraws earlier instructions.
pub const INSTRUCTIONS_GONE: &str = "The workspace instruction files delivered earlier are gone; their instructions no longer apply.";

/// One instruction file as the source found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstructionFile {
    /// Its path, as shown to the model.
    pub path: String,
    /// Its text (possibly cut), or why it could not be read.
    pub text: Result<String, String>,
    /// `Some(size)` when the text was cut from a file of `size` bytes.
    pub cut_from: Option<u64>,
}

/// Where the instruction files come from, least precedence first; called
/// once per turn.
pub trait InstructionSource: Send {
    /// The files now.
    fn gather(&mut self) -> Vec<InstructionFile>;
}

impl<F: FnMut() -> Vec<InstructionFile> + Send> InstructionSource for F {
    fn gather(&mut self) -> Vec<InstructionFile> {
        self()
    }
}

/// The message text for `files` (empty when there are none).
pub fn render(files: &[InstructionFile]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut out = String::from(INSTRUCTIONS_HEADER);
    for f in files {
        let _ = write!(out, "\n\n<instructions path=\"{}\">\n", f.path);
        match &f.text {
            Ok(text) => {
                out.push_str(text.trim_end());
                if let Some(size) = f.cut_from {
                    let _ = write!(
                        out,
                        "\n[dsh: this file is {size} bytes; only the first {} are shown]",
                        text.len()
                    );
                }
            }
            Err(e) => {
                let _ = write!(out, "[dsh: this file could not be read: {e}]");
            }
        }
        out.push_str("\n</instructions>");
    }
    out
}

/// The workspace-instructions plugin (see the module docs).
pub struct Instructions {
    source: alloc::boxed::Box<dyn InstructionSource>,
}

impl core::fmt::Debug for Instructions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Instructions").finish_non_exhaustive()
    }
}

impl Instructions {
    /// The plugin reading files from `source`.
    pub fn new(source: impl InstructionSource + 'static) -> Self {
        Instructions {
            source: alloc::boxed::Box::new(source),
        }
    }
}

/// Whether `source` is this plugin's.
pub fn is_instructions_source(source: &MessageSource) -> bool {
    matches!(source, MessageSource::Plugin { plugin, .. } if plugin == INSTRUCTIONS_PLUGIN)
}

/// The text of the newest instructions message in `cx`'s session.
fn delivered(cx: &Cx<'_>) -> Option<String> {
    cx.session()
        .events()
        .iter()
        .rev()
        .find_map(|e| match e.data() {
            EventData::UserMessage(m) if is_instructions_source(&m.source) => Some(
                m.content
                    .iter()
                    .filter_map(|b| b.as_text())
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        })
}

impl Plugin for Instructions {
    fn name(&self) -> &str {
        "agent-instructions"
    }

    fn seams(&self) -> Seams {
        Seams::PRE_STEP
    }

    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        let PreStepDecision::Enter(mut messages) = value else {
            return Flow::Next(value);
        };
        if payload.step != 1 || messages.is_empty() {
            return Flow::Next(PreStepDecision::Enter(messages));
        }
        let current = render(&self.source.gather());
        let before = delivered(cx);
        let text = match (&before, current.is_empty()) {
            (None, true) => None,
            (Some(old), true) if old == INSTRUCTIONS_GONE => None,
            (Some(_), true) => Some(String::from(INSTRUCTIONS_GONE)),
            (Some(old), false) if *old == current => None,
            (_, false) => Some(current),
        };
        if let Some(text) = text {
            let mut m = Message::user(
                format!("instructions-t{}", payload.turn),
                vec![ContentBlock::text(text)],
            );
            m.source = MessageSource::Plugin {
                plugin: String::from(INSTRUCTIONS_PLUGIN),
                form: Some(ContextForm::Instructions),
            };
            messages.insert(0, m);
        }
        Flow::Next(PreStepDecision::Enter(messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_files_cut_and_unreadable() {
        assert_eq!(render(&[]), "");
        let text = render(&[
            InstructionFile {
                path: "/u/AGENTS.md".into(),
                text: Ok("user rules\n".into()),
                cut_from: None,
            },
            InstructionFile {
                path: "/r/AGENTS.md".into(),
                text: Ok("abc".into()),
                cut_from: Some(10),
            },
            InstructionFile {
                path: "/r/sub/AGENTS.md".into(),
                text: Err("Is a directory".into()),
                cut_from: None,
            },
        ]);
        assert!(text.starts_with(INSTRUCTIONS_HEADER));
        assert!(text.contains(
            "<instructions path=\"/u/AGENTS.md\">\nuser rules\n</instructions>\n\n<instructions path=\"/r/AGENTS.md\">\nabc\n[dsh: this file is 10 bytes; only the first 3 are shown]\n</instructions>"
        ), "{text}");
        assert!(text.ends_with(
            "<instructions path=\"/r/sub/AGENTS.md\">\n[dsh: this file could not be read: Is a directory]\n</instructions>"
        ), "{text}");
    }
}
