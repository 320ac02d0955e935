//! Tool bodies and the approval policy as the shell sees them.
//!
//! This is the shell-side seam until `dsh-tools` (branch `tools`) lands: a
//! [`ShellTool`] is a blocking body plus its core [`ToolDefinition`]; the
//! shell runs bodies on the blocking pool (`smol::unblock`), never on the
//! executor. [`ApprovalPolicy`] maps a tool name to `auto`, `ask` or `deny`
//! (TL-10), answered through `tools/pre-execute` and the approval hook.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::CallId;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_deepseek::CancelToken;
use serde_json::Value;

/// One call handed to a tool body.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// The provider's call id.
    pub call_id: CallId,
    /// The tool name.
    pub name: String,
    /// Parsed arguments (LC-22).
    pub arguments: Value,
    /// The agent's working directory.
    pub cwd: PathBuf,
}

/// A tool body. `run` blocks (file and process I/O); the shell calls it on
/// the blocking pool and cancels it through `cancel` (LC-33, TL-14).
pub trait ShellTool: Send + Sync {
    /// The model-facing schema and pipeline settings.
    fn definition(&self) -> ToolDefinition;
    /// Runs the body. Should return promptly once `cancel` is cancelled.
    fn run(&self, call: &ToolCall, cancel: &CancelToken) -> ToolOutcome;
}

/// The tools an agent may call, by name.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn ShellTool>>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        ToolSet::default()
    }

    /// Adds (or replaces) a tool under its definition's name.
    pub fn with(mut self, tool: Arc<dyn ShellTool>) -> Self {
        self.insert(tool);
        self
    }

    /// Adds (or replaces) a tool under its definition's name.
    pub fn insert(&mut self, tool: Arc<dyn ShellTool>) {
        let name = tool.definition().name().to_string();
        self.tools.insert(name, tool);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn ShellTool>> {
        self.tools.get(name)
    }

    /// Every definition, by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.values().map(|t| t.definition()).collect()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// What the policy says about one tool (TL-10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApprovalMode {
    /// Run without asking.
    #[default]
    Auto,
    /// Ask: the agent emits [`AgentEvent::ApprovalRequested`](crate::AgentEvent::ApprovalRequested)
    /// and waits for [`Agent::answer_approval`](crate::Agent::answer_approval).
    Ask,
    /// Never run; the model sees the denial.
    Deny,
}

/// Approval modes per tool, with a default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Mode for tools not listed.
    pub default: ApprovalMode,
    /// Per-tool modes.
    pub per_tool: BTreeMap<String, ApprovalMode>,
}

impl ApprovalPolicy {
    /// Every tool runs without asking.
    pub fn auto() -> Self {
        ApprovalPolicy::default()
    }

    /// Every tool asks.
    pub fn ask() -> Self {
        ApprovalPolicy {
            default: ApprovalMode::Ask,
            per_tool: BTreeMap::new(),
        }
    }

    /// The mode for `tool`.
    pub fn mode(&self, tool: &str) -> ApprovalMode {
        self.per_tool.get(tool).copied().unwrap_or(self.default)
    }
}

/// A human's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Run the call once.
    Allow,
    /// Do not run it; the model sees the rejection.
    Reject,
}
