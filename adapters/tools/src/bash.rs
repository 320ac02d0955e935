//! `bash` (TL-21): `bash -c <command>` in its own session (`setsid`, so
//! no controlling terminal), with stdin from `/dev/null`, no descriptor of
//! dsh's beyond its pipes, a timeout, cancellation, and per-stream output
//! capped to its tail.
//!
//! On timeout or cancellation the whole group gets `SIGKILL`; after a normal
//! exit the group is killed too, and so is everything else the command
//! started, even outside its group or session ([`crate::reap`]), so nothing
//! outlives the call (each call is a fresh shell).
//!
//! A tool given a [`CommandRunner`] runs the command through it instead
//! (e.g. an editor's terminal over ACP `terminal/*`), with the same
//! argument checks, timeout and result text.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::json::js_number;
use serde_json::{Map, Value, json};

use crate::env::EnvPolicy;
use crate::path::Workspace;
use crate::sandbox::{self, SandboxPolicy, SandboxRoots};
use crate::{CancelToken, Tool, ToolCallRequest, ToolContext, prop, text};

/// One command for a [`CommandRunner`].
#[derive(Clone, Debug, PartialEq)]
pub struct CommandRun<'a> {
    /// The provider's call id.
    pub call_id: &'a str,
    /// The command line, for `bash -c`.
    pub command: &'a str,
    /// The working directory (absolute, an existing directory).
    pub workdir: &'a Path,
    /// Kill the command after this long.
    pub timeout: Duration,
    /// Bytes of output to keep (the tail).
    pub max_output_bytes: usize,
}

/// What a [`CommandRunner`] reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandOutput {
    /// The output (stdout and stderr as the runner combines them), its
    /// tail when truncated.
    pub output: String,
    /// Whether output was dropped.
    pub truncated: bool,
    /// The exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// The signal name (e.g. `SIGKILL`), when a signal ended it.
    pub signal: Option<String>,
    /// The timeout killed it.
    pub timed_out: bool,
}

/// Runs `bash -c` commands somewhere else than a local child process.
pub trait CommandRunner: Send + Sync {
    /// Runs `run` to its end, its timeout or `cancel` (then `Ok` or `Err`
    /// promptly). `Err` is a message for the model.
    fn run(&self, run: &CommandRun<'_>, cancel: &CancelToken) -> Result<CommandOutput, String>;
}

/// Executor limits.
#[derive(Clone, Debug, PartialEq)]
pub struct BashConfig {
    /// Timeout when the call gives none (120000 ms).
    pub default_timeout_ms: f64,
    /// Largest timeout a call may ask for (600000 ms); larger ones are
    /// clamped.
    pub max_timeout_ms: f64,
    /// Bytes kept of each stream (its tail); 64000.
    pub max_output_bytes: usize,
    /// The shell binary (`bash`).
    pub shell: PathBuf,
    /// How long to wait for the pipes to close after the process group was
    /// killed (a process that escaped the group may hold them); 1 s.
    pub drain_grace: Duration,
    /// Where commands run instead of a local child process group (e.g. an
    /// editor's terminal); `None` by default.
    pub runner: Option<Runner>,
    /// The environment the command starts with: by default the parent's,
    /// less the API key and names that look like secrets.
    pub env: EnvPolicy,
    /// The Landlock sandbox: by default writes confined to the workspace
    /// and the temp directories.
    pub sandbox: SandboxPolicy,
    /// The sandbox's writable roots, opened once and shared by the clones
    /// of this configuration (the tool sets built from it pin them).
    pub sandbox_roots: SandboxRoots,
}

impl Default for BashConfig {
    fn default() -> Self {
        BashConfig {
            default_timeout_ms: 120_000.0,
            max_timeout_ms: 600_000.0,
            max_output_bytes: 64_000,
            shell: PathBuf::from("bash"),
            drain_grace: Duration::from_secs(1),
            runner: None,
            env: EnvPolicy::default(),
            sandbox: SandboxPolicy::default(),
            sandbox_roots: SandboxRoots::default(),
        }
    }
}

/// The `bash` tool (exclusive).
#[derive(Clone, Debug, Default)]
pub struct BashTool {
    /// Its limits.
    pub config: BashConfig,
}

/// A shared [`CommandRunner`] for [`BashConfig::runner`] (equal when it is
/// the same runner).
#[derive(Clone)]
pub struct Runner(pub Arc<dyn CommandRunner>);

impl core::fmt::Debug for Runner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Runner(..)")
    }
}

impl PartialEq for Runner {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

const DESCRIPTION: &str = "Execute a bash command (`bash -c`) and return its stdout/stderr. Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls \u{2014} pass `workdir` instead of using `cd`. Non-zero exits are reported as `[exit code: N]`. Long output is truncated to its tail; the full output is saved to a file whose path is reported when available.";

impl Tool for BashTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "bash",
            DESCRIPTION,
            json!({
                "type": "object",
                "properties": {
                    "command": prop("string", "The bash command to execute."),
                    "description": prop("string", "Clear, concise description of what this command does in active voice, 5-10 words (shown in the UI). Examples: \"ls\" \u{2192} \"List files in current directory\"; \"git status\" \u{2192} \"Show working tree status\"; \"npm install\" \u{2192} \"Install package dependencies\"."),
                    "timeoutMs": prop("number", "Timeout in milliseconds. The executor applies its configured default and cap, and kills the command on expiry."),
                    "workdir": prop("string", "Working directory for this command. Defaults to the session workspace; a relative path is resolved against it."),
                },
                "required": ["command", "description"]
            }),
        )
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        match self.run(call, ctx) {
            Ok(o) | Err(o) => o,
        }
    }
}

/// One collected stream: its tail, whether bytes were dropped, and where
/// the full output went.
#[derive(Debug, Default)]
struct Collected {
    tail: Vec<u8>,
    truncated: bool,
    spill: Option<PathBuf>,
}

impl Collected {
    fn value(&self) -> Value {
        let mut m = Map::new();
        m.insert("text".into(), Value::String(self.text()));
        m.insert("truncated".into(), Value::Bool(self.truncated));
        if let Some(p) = &self.spill {
            m.insert("spillPath".into(), Value::String(p.display().to_string()));
        }
        Value::Object(m)
    }

    /// The kept tail, starting at a character boundary.
    fn text(&self) -> String {
        let mut start = 0;
        if self.truncated {
            while start < self.tail.len() && start < 3 && (self.tail[start] & 0xC0) == 0x80 {
                start += 1;
            }
        }
        String::from_utf8_lossy(&self.tail[start..]).into_owned()
    }

    /// The stream's text with its truncation marker (TL-21).
    fn rendered(&self) -> String {
        let t = self.text();
        if !self.truncated {
            return t;
        }
        let path = self
            .spill
            .as_ref()
            .map_or_else(|| "(unavailable)".to_string(), |p| p.display().to_string());
        format!("{t}\n[output truncated; full output: {path}]")
    }
}

/// Most bytes one stream's spill file receives (1 GiB); the rest is dropped.
pub const MAX_SPILL_FILE_BYTES: u64 = 1 << 30;

/// Creates a new owner-only spill file at `path` (its directory made 0700),
/// or at `path` with `-1`, `-2`, … before the extension when taken: an
/// earlier call's file is never replaced, and a planted link never followed.
fn create_spill(path: &Path) -> Option<(File, PathBuf)> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .ok()?;
    let stem = path.file_stem()?.to_string_lossy().into_owned();
    for n in 0..100u32 {
        let candidate = if n == 0 {
            path.to_path_buf()
        } else {
            dir.join(format!("{stem}-{n}.txt"))
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&candidate)
        {
            Ok(f) => return Some((f, candidate)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Reads `src` to the end into `out`, keeping the last `cap` bytes; with
/// a spill path, everything is also written there once the cap is first
/// exceeded. `out` is shared so the caller can take what was read even if
/// an escaped process keeps the pipe open.
fn collect(mut src: impl Read, cap: usize, spill_path: Option<PathBuf>, out: &Mutex<Collected>) {
    let mut spill: Option<File> = None;
    let mut spilled: u64 = 0;
    let mut buf = [0u8; 8192];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = buf.get(..n).unwrap_or(&[]);
        if let Some(f) = spill.as_mut() {
            // The file is capped too: past the cap the rest is dropped.
            if spilled.saturating_add(n as u64) <= MAX_SPILL_FILE_BYTES {
                let _ = f.write_all(chunk);
                spilled += n as u64;
            }
        }
        let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
        out.tail.extend_from_slice(chunk);
        if out.tail.len() > cap {
            if !out.truncated {
                out.truncated = true;
                if let Some((mut f, p)) = spill_path.as_deref().and_then(create_spill) {
                    // The tail still holds everything read so far.
                    if f.write_all(&out.tail).is_ok() {
                        spilled = out.tail.len() as u64;
                        spill = Some(f);
                        out.spill = Some(p);
                    }
                }
            }
            let excess = out.tail.len() - cap;
            out.tail.drain(..excess);
        }
    }
}

/// A stream being collected on its own thread.
struct Reader {
    state: Arc<Mutex<Collected>>,
    done: mpsc::Receiver<()>,
}

impl Reader {
    fn spawn(src: impl Read + Send + 'static, cap: usize, spill: Option<PathBuf>) -> Reader {
        let state = Arc::new(Mutex::new(Collected::default()));
        let (tx, done) = mpsc::channel();
        let shared = Arc::clone(&state);
        thread::spawn(move || {
            collect(src, cap, spill, &shared);
            let _ = tx.send(());
        });
        Reader { state, done }
    }

    /// Waits for end of stream until `deadline`, then takes what was read.
    /// A process that left the group (`setsid`) may hold the pipe open;
    /// its reader thread is then left behind rather than blocking the call.
    fn finish(self, deadline: Instant) -> Collected {
        let wait = deadline.saturating_duration_since(Instant::now());
        let _ = self.done.recv_timeout(wait);
        core::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The signal's name, e.g. `SIGKILL`.
fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("SIG{sig}"),
    };
    name.to_string()
}

/// A number as JavaScript would hold it: integral values as integers.
fn json_number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::from(v as i64)
    } else {
        Value::from(v)
    }
}

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// The `workdir` argument resolved against the workspace (default: its
/// root); an error unless it is a directory.
pub(crate) fn workdir(args: &Value, ctx: &ToolContext) -> Result<PathBuf, ToolOutcome> {
    let workdir = match args.get("workdir").and_then(Value::as_str) {
        Some(w) if !w.is_empty() => {
            let p = Path::new(w);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                ctx.workspace.root().join(p)
            }
        }
        _ => ctx.workspace.root().to_path_buf(),
    };
    if !workdir.is_dir() {
        return Err(ToolOutcome::error(format!(
            "invalid workdir: \"{}\" is not a directory",
            workdir.display()
        )));
    }
    Ok(workdir)
}

/// Starts `shell -c command` in `workdir` as the leader of a new session
/// (and process group) without a controlling terminal, with the configured
/// environment and sandbox, stdin from `/dev/null`, both output streams
/// piped and every other descriptor closed at `exec`.
///
/// The sandbox rules and the working directory come from the workspace's
/// handle: a `workdir` inside the workspace is entered with `fchdir` on the
/// handle (then the relative rest), never through the root path again. A
/// workspace whose path no longer leads to that directory is refused.
pub(crate) fn spawn_local(
    config: &BashConfig,
    command: &str,
    workdir: &Path,
    workspace: &Workspace,
) -> Result<std::process::Child, String> {
    workspace
        .check_handle()
        .map_err(|e| format!("failed to start bash: {e}"))?;
    let confinement = sandbox::prepare(&config.sandbox, workspace.dir_fd(), &config.sandbox_roots)
        .map_err(|e| format!("failed to start bash: {e}"))?;
    let inside = workdir
        .strip_prefix(workspace.root())
        .or_else(|_| workdir.strip_prefix(workspace.canonical_root()))
        .ok()
        .map(|rel| {
            std::ffi::CString::new(rel.as_os_str().as_encoded_bytes())
                .map_err(|_| "failed to start bash: the workdir contains a NUL byte".to_string())
        })
        .transpose()?;
    let mut cmd = Command::new(&config.shell);
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .envs(config.env.current())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if inside.is_none() {
        cmd.current_dir(workdir);
    }
    let handle = workspace.clone();
    // SAFETY: the closure makes only async-signal-safe system calls
    // (setsid, close_range, fcntl, fchdir, chdir, prctl,
    // landlock_restrict_self) on descriptors and a C string prepared
    // before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // A new session: no controlling terminal, so `/dev/tty` fails
            // (ENXIO) and the terminal's job control cannot be reached.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            close_inherited_fds();
            if let Some(rel) = &inside {
                if libc::fchdir(handle.dir_fd().as_raw_fd()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if !rel.is_empty() && libc::chdir(rel.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            confinement.apply_in_child()
        });
    }
    crate::reap::spawn(&mut cmd).map_err(|e| format!("failed to start bash: {e}"))
}

/// Marks every descriptor above stderr close-on-exec, so nothing dsh holds
/// (a terminal, a socket, a log) reaches the command. Async-signal-safe.
/// `close_range(CLOSE_RANGE_CLOEXEC)` (Linux 5.11); on older kernels each
/// of the first 4096 descriptors is marked with `fcntl`.
fn close_inherited_fds() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range and fcntl take integers only; marking a
    // descriptor close-on-exec cannot affect memory safety.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return;
        }
        for fd in 3..4096 {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

impl BashTool {
    fn run(&self, call: &ToolCallRequest, ctx: &ToolContext) -> Result<ToolOutcome, ToolOutcome> {
        let args = &call.arguments;
        let command = match args.get("command").and_then(Value::as_str) {
            Some(c) if !c.trim().is_empty() => c,
            _ => {
                return Err(ToolOutcome::error(
                    "invalid command: expected a non-empty string",
                ));
            }
        };
        match args.get("description").and_then(Value::as_str) {
            Some(d) if !d.trim().is_empty() => {}
            _ => {
                return Err(ToolOutcome::error(
                    "invalid description: expected a non-empty string",
                ));
            }
        }
        let mut timeout_ms = match args.get("timeoutMs") {
            None => self.config.default_timeout_ms,
            Some(v) => match v.as_f64() {
                Some(n) if n.is_finite() && n > 0.0 => n.min(self.config.max_timeout_ms),
                _ => {
                    return Err(ToolOutcome::error(format!(
                        "invalid timeoutMs: expected a positive number, got {}",
                        match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        }
                    )));
                }
            },
        };
        if let Some(t) = ctx.timeout {
            timeout_ms = timeout_ms.min(t.as_secs_f64() * 1000.0);
        }
        if args.get("run_in_background") == Some(&Value::Bool(true)) {
            return Err(ToolOutcome::error(
                "background execution is disabled for this bash tool",
            ));
        }
        let workdir = workdir(args, ctx)?;
        if let Some(Runner(runner)) = &self.config.runner {
            let run = CommandRun {
                call_id: &call.call_id,
                command,
                workdir: &workdir,
                timeout: Duration::from_secs_f64(timeout_ms / 1000.0),
                max_output_bytes: self.config.max_output_bytes,
            };
            let out = runner.run(&run, &ctx.cancel).map_err(ToolOutcome::error)?;
            if ctx.cancel.is_cancelled() {
                return Err(ToolOutcome::aborted());
            }
            let stdout = Collected {
                tail: out.output.into_bytes(),
                truncated: out.truncated,
                spill: None,
            };
            return Ok(outcome(
                stdout,
                Collected::default(),
                out.exit_code,
                out.signal,
                out.timed_out,
                timeout_ms,
            ));
        }
        let mut child = spawn_local(&self.config, command, &workdir, &ctx.workspace)
            .map_err(ToolOutcome::error)?;
        let pgid = child.id();
        let cap = self.config.max_output_bytes;
        let spill = |stream: &str| {
            ctx.spill_dir
                .as_ref()
                .map(|d| d.join(format!("bash-{}-{stream}.txt", sanitize(&call.call_id))))
        };
        let stdout_reader = child
            .stdout
            .take()
            .map(|s| Reader::spawn(s, cap, spill("stdout")));
        let stderr_reader = child
            .stderr
            .take()
            .map(|s| Reader::spawn(s, cap, spill("stderr")));
        // `None`: too far to represent, so no deadline.
        let deadline = Duration::try_from_secs_f64(timeout_ms / 1000.0)
            .ok()
            .and_then(|t| Instant::now().checked_add(t));
        // A waiter thread blocks until the shell exits, then wakes this
        // thread, which waits on the cancel token until the exit, the
        // cancellation or the deadline. The shell is reaped only after the
        // sweep: until then its pid, the session id, cannot be taken by
        // another process.
        let exited = Arc::new(AtomicBool::new(false));
        let waiter = {
            let exited = Arc::clone(&exited);
            let cancel = ctx.cancel.clone();
            thread::Builder::new()
                .name("dsh-bash-wait".into())
                .spawn(move || {
                    crate::reap::wait_exited(pgid);
                    exited.store(true, Ordering::SeqCst);
                    cancel.wake();
                })
        };
        let waiter = match waiter {
            Ok(w) => w,
            Err(e) => {
                crate::reap::end_session(pgid);
                let _ = child.wait();
                return Err(ToolOutcome::error(format!("failed to wait for bash: {e}")));
            }
        };
        let aborted = ctx.cancel.wait_until(deadline, &exited);
        let timed_out = !aborted && !exited.load(Ordering::SeqCst);
        // The group on timeout or cancellation, and whatever the command
        // left running (in its group, its session, or escaped from both),
        // so the pipes close and nothing outlives the call. The group's
        // SIGKILL ends the shell (a session leader cannot leave its group),
        // so the waiter returns; it is joined before the shell is reaped,
        // so it never waits on a reused pid.
        crate::reap::end_session(pgid);
        let _ = waiter.join();
        let status = child.wait().ok();
        let drain = Instant::now() + self.config.drain_grace;
        let stdout = stdout_reader.map(|r| r.finish(drain)).unwrap_or_default();
        let stderr = stderr_reader.map(|r| r.finish(drain)).unwrap_or_default();
        if aborted {
            return Err(ToolOutcome::aborted());
        }
        let exit_code = status.and_then(|s| s.code());
        let signal = status.and_then(|s| s.signal()).map(signal_name);
        Ok(outcome(
            stdout, stderr, exit_code, signal, timed_out, timeout_ms,
        ))
    }
}

/// The result text and value of a finished command (TL-21).
fn outcome(
    stdout: Collected,
    stderr: Collected,
    exit_code: Option<i32>,
    signal: Option<String>,
    timed_out: bool,
    timeout_ms: f64,
) -> ToolOutcome {
    let mut body = stdout.rendered();
    let err = stderr.rendered();
    if !err.is_empty() {
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str("[stderr]\n");
        body.push_str(&err);
    }
    if body.is_empty() {
        body.push_str("(no output)");
    }
    let ms = js_number(timeout_ms);
    let mut markers = Vec::new();
    if timed_out {
        markers.push(format!("[timed out after {ms}ms]"));
    }
    if let Some(sig) = &signal {
        markers.push(format!("[killed by signal: {sig}]"));
    } else if let Some(code) = exit_code.filter(|c| *c != 0) {
        markers.push(format!("[exit code: {code}]"));
    }
    if !markers.is_empty() {
        if !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str(&markers.join("\n"));
    }
    let value = json!({
        "kind": "foreground",
        "exitCode": exit_code,
        "signal": signal,
        "timedOut": timed_out,
        "aborted": false,
        "timeoutMs": json_number(timeout_ms),
        "stdout": stdout.value(),
        "stderr": stderr.value(),
    });
    ToolOutcome::success(text(body)).with_value(value)
}
