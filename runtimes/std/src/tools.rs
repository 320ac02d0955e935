//! Tool bodies as the std shell runs them, the approval policy, and two
//! minimal built-ins (`bash`, `read`).
//!
//! The full std tool set and approval policy live in `dsh-tools` (branch
//! `tools`); until it is merged, this module carries the same shape
//! ([`Tool`], [`ToolSet`], [`ApprovalPolicy`], [`ApprovalDecision`]) so the
//! shell and its tests run.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use serde_json::{Value, json};

/// Cooperative cancellation of one tool body: set when the turn is aborted
/// or the per-tool timeout passed. Bodies poll it.
#[derive(Clone, Debug, Default)]
pub struct ToolCancel(Arc<AtomicBool>);

impl ToolCancel {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        ToolCancel::default()
    }
    /// Cancels.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a tool body gets besides its arguments.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The workspace root paths are confined to.
    pub root: PathBuf,
    /// The working directory for processes.
    pub cwd: PathBuf,
    /// Fired on abort or timeout; the body must return soon after.
    pub cancel: ToolCancel,
    /// When the per-tool timeout passes.
    pub deadline: Instant,
}

/// A tool body the shell runs on a worker thread.
pub trait Tool: Send + Sync {
    /// The model-facing definition (name, schema, validation).
    fn definition(&self) -> ToolDefinition;
    /// Runs the body. A failure is an error outcome, never a panic.
    fn run(&self, arguments: &Value, cx: &ToolContext) -> ToolOutcome;
}

/// The tools of an agent and the workspace root they are confined to.
#[derive(Clone)]
pub struct ToolSet {
    root: PathBuf,
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl core::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ToolSet")
            .field("root", &self.root)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ToolSet {
    /// An empty set over `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ToolSet {
            root: root.into(),
            tools: BTreeMap::new(),
        }
    }

    /// The built-ins (`bash`, `read`) over `root`.
    pub fn builtin(root: impl Into<PathBuf>) -> Self {
        ToolSet::new(root).with(BashTool).with(ReadTool)
    }

    /// Adds (or replaces) a tool.
    pub fn with(mut self, tool: impl Tool + 'static) -> Self {
        self.insert(Arc::new(tool));
        self
    }

    /// Adds (or replaces) a shared tool.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.definition().schema.name.clone();
        self.tools.insert(name, tool);
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every tool, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Arc<dyn Tool>)> {
        self.tools.iter()
    }
}

/// What the policy says about one tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Run without asking.
    Auto,
    /// Ask the user ([`AgentEvent::ApprovalRequested`](crate::AgentEvent::ApprovalRequested)).
    Ask,
    /// Never run.
    Deny,
}

/// `ask | auto | deny` per tool, with a default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// For tools not listed.
    pub default: Approval,
    /// Per tool name.
    pub tools: BTreeMap<String, Approval>,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        ApprovalPolicy::all(Approval::Auto)
    }
}

impl ApprovalPolicy {
    /// The same rule for every tool.
    pub fn all(rule: Approval) -> Self {
        ApprovalPolicy {
            default: rule,
            tools: BTreeMap::new(),
        }
    }

    /// Sets the rule of one tool.
    pub fn with(mut self, tool: impl Into<String>, rule: Approval) -> Self {
        self.tools.insert(tool.into(), rule);
        self
    }

    /// The rule for `tool`.
    pub fn rule(&self, tool: &str) -> Approval {
        self.tools.get(tool).copied().unwrap_or(self.default)
    }
}

/// A user's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Run the tool this once.
    Allow,
    /// Do not run it (the model sees the rejection).
    Deny,
}

/// Resolves `path` (absolute, or relative to `root`) lexically and refuses
/// anything outside `root`, then refuses symlink escapes of the existing
/// prefix.
pub fn confine(root: &Path, path: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err(String::from("path must not be empty"));
    }
    if path.contains('\0') {
        return Err(String::from("path must not contain NUL"));
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("workspace root {}: {e}", root.display()))?;
    let p = Path::new(path);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return Err(format!("path \"{path}\" is outside the workspace"));
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    if !out.starts_with(&root) {
        return Err(format!("path \"{path}\" is outside the workspace"));
    }
    if let Ok(real) = out.canonicalize()
        && !real.starts_with(&root)
    {
        return Err(format!("path \"{path}\" resolves outside the workspace"));
    }
    Ok(out)
}

/// `read {"path"}`: a UTF-8 file inside the workspace.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadTool;

impl Tool for ReadTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "read",
            "Read a UTF-8 text file inside the workspace.",
            json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        )
    }

    fn run(&self, arguments: &Value, cx: &ToolContext) -> ToolOutcome {
        let Some(path) = arguments.get("path").and_then(Value::as_str) else {
            return ToolOutcome::error("read: \"path\" must be a string");
        };
        let full = match confine(&cx.root, path) {
            Ok(p) => p,
            Err(e) => return ToolOutcome::error(format!("read: {e}")),
        };
        match std::fs::read_to_string(&full) {
            Ok(text) => ToolOutcome::success(vec![ContentBlock::text(text)]),
            Err(e) => ToolOutcome::error(format!("read: {path}: {e}")),
        }
    }
}

/// `bash {"command"}`: `sh -c` in the working directory, in its own process
/// group, killed (the whole group) on cancel or timeout.
#[derive(Clone, Copy, Debug, Default)]
pub struct BashTool;

impl Tool for BashTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "bash",
            "Run a shell command in the workspace.",
            json!({"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}),
        )
    }

    fn run(&self, arguments: &Value, cx: &ToolContext) -> ToolOutcome {
        let Some(command) = arguments.get("command").and_then(Value::as_str) else {
            return ToolOutcome::error("bash: \"command\" must be a string");
        };
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&cx.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return ToolOutcome::error(format!("bash: cannot start sh: {e}")),
        };
        let pid = child.id();
        let out_reader = child.stdout.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = s.read_to_end(&mut v);
                v
            })
        });
        let err_reader = child.stderr.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = s.read_to_end(&mut v);
                v
            })
        });
        let mut stopped: Option<&'static str> = None;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => {}
                Err(_) => break None,
            }
            if stopped.is_none() && (cx.cancel.is_cancelled() || Instant::now() >= cx.deadline) {
                stopped = Some(if cx.cancel.is_cancelled() {
                    "cancelled"
                } else {
                    "timed out"
                });
                kill_group(pid);
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // Stray members of the group may hold the pipes open; kill the
        // group before joining the readers (the leader is already reaped,
        // but its pid stays reserved as the group id while members live).
        kill_group(pid);
        let stdout = out_reader.and_then(|h| h.join().ok()).unwrap_or_default();
        let stderr = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
        let mut text = String::from_utf8_lossy(&stdout).into_owned();
        if !stderr.is_empty() {
            text.push_str(&String::from_utf8_lossy(&stderr));
        }
        if let Some(why) = stopped {
            return ToolOutcome::error(format!("bash: command {why}"));
        }
        match status {
            Some(s) if s.success() => ToolOutcome::success(vec![ContentBlock::text(text)]),
            Some(s) => ToolOutcome::error(format!(
                "bash: exit status {}\n{text}",
                s.code()
                    .map_or_else(|| String::from("signal"), |c| c.to_string())
            )),
            None => ToolOutcome::error("bash: lost the child process"),
        }
    }
}

fn kill_group(pid: u32) {
    // SIGKILL to the child's own process group (it was started with
    // `process_group(0)`, so the group id is its pid). Never through the
    // `kill` binary: some versions misparse a negative pid after a signal
    // name.
    #[cfg(unix)]
    if let Some(pgid) = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 1)
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}
