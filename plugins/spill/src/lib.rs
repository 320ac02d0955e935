//! The spill plugin of dsh: keeps oversized plain-text tool results out of
//! the model's context (the reference's `spill-policy`).
//!
//! [`SpillPlugin`] handles `tools/post-execute`: when a result's text
//! (every block a text block) is over [`SpillConfig::max_inline_bytes`],
//! the whole text is saved to a private file under the session's folder
//! and the model gets a head/tail preview plus the reference's notice,
//! all within the cap ([`dsh_tools::spill`] does the storing). It works on
//! the result, not on the tool: built-in, MCP and web tools alike; `read`
//! is left alone (it pages by itself). Register it after the plugins that
//! rewrite results, so it bounds what they produced.

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{PostToolDecision, ToolExecution};
use dsh_runtime::{Cx, Flow, Plugin, Seams};
pub use dsh_tools::spill::{DEFAULT_MAX_INLINE_BYTES, SpillConfig};
use dsh_tools::spill::{plain_text, session_dir, spill_text};

/// The `tools/post-execute` spill policy; see the module docs.
#[derive(Clone, Debug)]
pub struct SpillPlugin {
    config: SpillConfig,
}

impl SpillPlugin {
    /// A policy with `config`.
    pub fn new(config: SpillConfig) -> Self {
        SpillPlugin { config }
    }
}

impl Plugin for SpillPlugin {
    fn name(&self) -> &str {
        "spill-policy"
    }

    fn seams(&self) -> Seams {
        Seams::TOOL_POST_EXECUTE
    }

    fn tool_post_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        outcome: &ToolOutcome,
        value: PostToolDecision,
    ) -> Flow<PostToolDecision> {
        let PostToolDecision::Accept {
            content,
            additional_contexts,
        } = value
        else {
            return Flow::Next(value);
        };
        let keep = |content| {
            Flow::Next(PostToolDecision::Accept {
                content,
                additional_contexts: additional_contexts.clone(),
            })
        };
        if exec.name == "read" {
            return keep(content);
        }
        let Some(text) = plain_text(content.as_deref().unwrap_or(&outcome.content)) else {
            return keep(content);
        };
        let dir = session_dir(&self.config.root, cx.session().id().as_str());
        match spill_text(
            &text,
            self.config.max_inline_bytes,
            &dir,
            &exec.name,
            exec.call_id.as_str(),
        ) {
            Some(replaced) => keep(Some(vec![ContentBlock::Text { text: replaced }])),
            None => keep(content),
        }
    }
}
