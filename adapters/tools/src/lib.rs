//! The built-in tools of dsh (loop.md §5.4): `bash`, `read`, `write`, `edit`
//! and `todo_write`, plus the search tools `grep` and `glob`, with std
//! implementations and workspace confinement for the file tools. The
//! `ask | auto | deny` approval policy (TL-9 steps 4-5) is a plugin of its
//! own, `dsh-approval`.
//!
//! The core ([`dsh_core::agent`]) runs the pipeline and emits
//! [`Output::ExecuteTool`](dsh_core::agent::Output::ExecuteTool); a shell
//! hands that [`ToolExecution`] to [`ToolSet::execute`] on a worker thread
//! with a [`ToolContext`], and feeds the [`ToolOutcome`] back through
//! `Agent::handle_tool_result`. Tool-owned events (`todo/write`, TL-24) go
//! through the context's [`EventSink`].
//!
//! Schemas are the reference's, as recorded in the conformance logs
//! (`request/header` tools of `examples-headless-agent__compaction-recovery`).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
// Bodies return their failure as the very `ToolOutcome` the model sees; the
// `Err` path is cold and ends the call, so boxing it buys nothing.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::agent::ToolExecution;
use dsh_core::agent::schema::validate_value;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry, ToolRegistryError};
use dsh_core::session::EventData;
use serde_json::Value;

pub mod background;
pub mod bash;
pub mod env;
pub mod fs;
pub mod image;
pub mod path;
pub mod reap;
pub mod sandbox;
pub mod search;
pub mod spill;
pub mod todo;

pub use background::{BackgroundConfig, BashOutputTool, BashStartTool, BashStopTool, Jobs};
pub use bash::{BashConfig, BashTool, CommandOutput, CommandRun, CommandRunner, Runner};
pub use env::{EnvPolicy, Inherit};
pub use fs::{EditConfig, EditTool, Files, ReadConfig, ReadTool, TextFiles, WriteTool};
pub use image::{Attachments, ReadImageTool};
pub use path::{PathError, Resolved, Workspace};
pub use sandbox::{SandboxMode, SandboxPolicy, SandboxRoots};
pub use search::{GlobTool, GrepTool, SearchConfig};
pub use spill::SpillConfig;
pub use todo::TodoWriteTool;

/// The cancellation token a running body observes: the one of
/// `dsh-host`, shared with model streams and editor requests.
pub use dsh_host::CancelToken;

/// Where tool bodies append their own log-only events (TL-24), e.g.
/// `todo/write`. The shell forwards them to `Agent::append_event` while the
/// call runs (between `tool/call` and `tool/result`).
pub trait EventSink: Send + Sync {
    /// Appends one event; `Err` carries a message for the model.
    fn append(&self, data: EventData) -> Result<(), String>;
}

/// An [`EventSink`] that collects events for the shell to append after the
/// body returns (and before it hands the outcome to the agent).
#[derive(Debug, Default)]
pub struct CollectingSink {
    events: Mutex<Vec<EventData>>,
}

impl CollectingSink {
    /// An empty sink.
    pub fn new() -> Self {
        CollectingSink::default()
    }

    /// Takes the events collected so far, in order.
    pub fn take(&self) -> Vec<EventData> {
        core::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl EventSink for CollectingSink {
    fn append(&self, data: EventData) -> Result<(), String> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(data);
        Ok(())
    }
}

/// Everything a body may use besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The workspace the file tools are confined to, and bash's default
    /// working directory.
    pub workspace: Workspace,
    /// Cancellation of this call (the turn's abort signal, TL-4).
    pub cancel: CancelToken,
    /// An overall deadline for the body; bash takes the smaller of this and
    /// its own `timeoutMs` (TL-14 enforcement stays cooperative elsewhere).
    pub timeout: Option<Duration>,
    /// The owning agent session's append channel (TL-24); `None` when the
    /// call has no owning session.
    pub events: Option<Arc<dyn EventSink>>,
    /// Directory for bash full-output spill files; `None` reports
    /// `(unavailable)` in the truncation marker.
    pub spill_dir: Option<PathBuf>,
}

impl ToolContext {
    /// A context for `workspace` with a fresh token, no deadline, no event
    /// sink and no spill directory.
    pub fn new(workspace: Workspace) -> Self {
        ToolContext {
            workspace,
            cancel: CancelToken::new(),
            timeout: None,
            events: None,
            spill_dir: None,
        }
    }

    /// Sets the event sink.
    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = Some(sink);
        self
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = cancel;
        self
    }
}

impl core::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace", &self.workspace)
            .field("cancel", &self.cancel.is_cancelled())
            .field("timeout", &self.timeout)
            .field("events", &self.events.is_some())
            .field("spill_dir", &self.spill_dir)
            .finish()
    }
}

/// One call as a body sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRequest {
    /// The tool name.
    pub name: String,
    /// The provider's call id.
    pub call_id: String,
    /// Parsed arguments (LC-22).
    pub arguments: Value,
}

impl From<&ToolExecution> for ToolCallRequest {
    fn from(exec: &ToolExecution) -> Self {
        ToolCallRequest {
            name: exec.name.clone(),
            call_id: exec.call_id.as_str().to_string(),
            arguments: exec.arguments.clone(),
        }
    }
}

/// A tool body with its definition.
pub trait Tool: Send + Sync {
    /// The definition registered with the core (schema, typed-ness,
    /// concurrency class).
    fn definition(&self) -> ToolDefinition;
    /// Runs the body. Must return promptly once `ctx.cancel` fires.
    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome;
}

/// A set of tools: builds the core's [`ToolRegistry`] and dispatches
/// [`ToolExecution`]s to the right body.
#[derive(Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Box<dyn Tool>>,
    spill_dir: Option<PathBuf>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        ToolSet::default()
    }

    /// The five built-in tools with their default configuration.
    pub fn builtin() -> Self {
        ToolSet::builtin_with(BashConfig::default())
    }

    /// The reference's five built-in tools, bash with `bash`.
    pub fn builtin_with(bash: BashConfig) -> Self {
        // The sandbox's writable roots are opened now, once.
        bash.sandbox_roots.pin(&bash.sandbox);
        let mut set = ToolSet::new();
        set.insert(Box::new(BashTool { config: bash }));
        set.insert(Box::new(ReadTool::default()));
        set.insert(Box::new(WriteTool::default()));
        set.insert(Box::new(EditTool::default()));
        set.insert(Box::new(TodoWriteTool::default()));
        set
    }

    /// What `dsh` gives a coding agent: the built-in five (bash with
    /// `bash`), the read-only search tools `grep` and `glob`, and the
    /// background jobs `bash_start`, `bash_output`, `bash_stop` (with
    /// `bash`'s shell, environment and sandbox).
    pub fn standard(bash: BashConfig) -> Self {
        let jobs = Jobs::new(BackgroundConfig {
            bash: bash.clone(),
            ..BackgroundConfig::default()
        });
        let mut set = ToolSet::builtin_with(bash);
        set.insert(Box::new(GrepTool::default()));
        set.insert(Box::new(GlobTool::default()));
        for tool in jobs.tools() {
            set.insert(tool);
        }
        set
    }

    /// Sets the folder bash keeps its full output in as it is acquired
    /// ([`ToolContext::spill_dir`] of every call [`run`](Self::run) makes).
    pub fn with_spill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spill_dir = Some(dir.into());
        self
    }

    /// Adds (or replaces) a tool under its definition's name.
    pub fn insert(&mut self, tool: Box<dyn Tool>) {
        let name = tool.definition().schema.name;
        self.tools.insert(name, tool);
    }

    /// Removes a tool.
    pub fn remove(&mut self, name: &str) -> Option<Box<dyn Tool>> {
        self.tools.remove(name)
    }

    /// The tool names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// The core registry of every tool in the set.
    pub fn registry(&self) -> Result<ToolRegistry, ToolRegistryError> {
        let mut registry = ToolRegistry::new();
        for tool in self.tools.values() {
            registry.register(tool.definition())?;
        }
        Ok(registry)
    }

    /// Runs `exec` (an [`Output::ExecuteTool`](dsh_core::agent::Output)
    /// payload). An unknown name gives TL-8's result; typed arguments are
    /// validated again (TL-6) so a direct caller gets the same errors as the
    /// core; a panicking body becomes an error result (TL-12); a success
    /// observed after cancellation becomes `ABORTED` (TL-9 step 9).
    pub fn execute(&self, exec: &ToolExecution, ctx: &ToolContext) -> ToolOutcome {
        self.execute_request(&ToolCallRequest::from(exec), ctx)
    }

    /// Runs one call the way every runtime does: in `workspace`, with the
    /// call's `cancel` signal and `timeout` in its context, collecting the
    /// tool-owned events it logs (TL-24) to append before the result.
    pub fn run(
        &self,
        exec: &ToolExecution,
        workspace: Workspace,
        cancel: CancelToken,
        timeout: Option<Duration>,
    ) -> (ToolOutcome, Vec<EventData>) {
        let sink = Arc::new(CollectingSink::new());
        let mut ctx = ToolContext::new(workspace)
            .with_cancel(cancel)
            .with_events(sink.clone());
        ctx.timeout = timeout;
        ctx.spill_dir = self.spill_dir.clone();
        let outcome = self.execute(exec, &ctx);
        (outcome, sink.take())
    }

    /// [`execute`](Self::execute) for a [`ToolCallRequest`].
    pub fn execute_request(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let Some(tool) = self.tools.get(&call.name) else {
            return ToolOutcome::unknown_tool(&call.name);
        };
        if ctx.cancel.is_cancelled() {
            return ToolOutcome::aborted_before_dispatch();
        }
        let definition = tool.definition();
        if definition.validate_arguments {
            let violations = validate_value(&definition.schema.parameters, &call.arguments, "");
            if !violations.is_empty() {
                return ToolOutcome::invalid_arguments(&violations);
            }
        }
        let outcome = match catch_unwind(AssertUnwindSafe(|| tool.execute(call, ctx))) {
            Ok(outcome) => outcome,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "<unprintable thrown value>".to_string());
                ToolOutcome::error(message)
            }
        };
        if !outcome.is_error() && ctx.cancel.is_cancelled() {
            return ToolOutcome::aborted();
        }
        outcome
    }
}

impl core::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ToolSet")
            .field("tools", &self.names())
            .finish()
    }
}

/// The `FsError` result every file tool failure uses: `Error: <message>`
/// with `{name:"FsError", code}` (session.md 4.8 shows this identity).
pub(crate) fn fs_error(message: impl Into<String>, code: &str) -> ToolOutcome {
    ToolOutcome::coded_error(message, "FsError", code)
}

/// A text-only content list.
pub(crate) fn text(t: impl Into<String>) -> Vec<dsh_core::ContentBlock> {
    vec![dsh_core::ContentBlock::text(t.into())]
}

/// The reference's schema for a property: `{"type", "description"}`.
pub(crate) fn prop(ty: &str, description: &str) -> Value {
    serde_json::json!({"type": ty, "description": description})
}
