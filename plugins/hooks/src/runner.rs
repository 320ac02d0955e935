//! Running a hook command: a child process outside the tool sandbox, with
//! the tool environment policy, a timeout and capped output.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_tools::EnvPolicy;

/// One hook run to make.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunRequest {
    /// The shell command line.
    pub command: String,
    /// What the hook reads on stdin (the JSON payload).
    pub stdin: String,
    /// Variables set on top of the policy's environment
    /// (`CLAUDE_PROJECT_DIR`, ...).
    pub env: Vec<(String, String)>,
    /// The working directory (the session's workspace).
    pub cwd: PathBuf,
    /// When the run is killed.
    pub timeout: Duration,
    /// The hook point, for test runners.
    pub point: String,
}

/// What a run gave.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct RunResult {
    /// The exit code; `None` when it could not start, timed out or died by
    /// a signal.
    pub exit_code: Option<i32>,
    /// Stdout (capped).
    pub stdout: String,
    /// Stderr (capped); why it failed when it could not run.
    pub stderr: String,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: f64,
}

impl RunResult {
    /// A result with these fields.
    pub fn new(exit_code: Option<i32>, stdout: &str, stderr: &str, duration_ms: f64) -> Self {
        RunResult {
            exit_code,
            stdout: stdout.to_string(),
            stderr: stderr.to_string(),
            duration_ms,
        }
    }
}

/// Runs hook commands. The plugin calls it from a seam handler and waits:
/// hooks are synchronous in both dialects.
pub trait HookRunner: Send {
    /// Runs `req`; never panics, a failure is a result without exit code.
    fn run(&mut self, req: &RunRequest) -> RunResult;
}

impl<F: FnMut(&RunRequest) -> RunResult + Send> HookRunner for F {
    fn run(&mut self, req: &RunRequest) -> RunResult {
        self(req)
    }
}

/// Most bytes of a hook's stdout kept.
pub const MAX_STDOUT_BYTES: usize = 1024 * 1024;
/// Most bytes of a hook's stderr kept.
pub const MAX_STDERR_BYTES: usize = 64 * 1024;
/// How long to wait for a finished hook's output pipes to close before its
/// process group is killed (a background child may hold them).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs hooks as `shell -c command` in a new process group, with the
/// environment of `env` (the tool environment policy: never the API key).
#[derive(Clone, Debug)]
pub struct ProcessRunner {
    /// The environment policy.
    pub env: EnvPolicy,
    /// The shell (`/bin/bash` when present, else `/bin/sh`).
    pub shell: PathBuf,
}

impl ProcessRunner {
    /// A runner with `env`.
    pub fn new(env: EnvPolicy) -> Self {
        let bash = PathBuf::from("/bin/bash");
        let shell = if bash.exists() {
            bash
        } else {
            PathBuf::from("/bin/sh")
        };
        ProcessRunner { env, shell }
    }
}

fn reader(mut r: impl Read + Send + 'static, cap: usize) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(buf.get(..n.min(room)).unwrap_or_default());
                }
            }
        }
        let _ = tx.send(kept);
    });
    rx
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) with a negative pid signals the process group the
        // child leads (it was started with `process_group(0)`).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

impl HookRunner for ProcessRunner {
    fn run(&mut self, req: &RunRequest) -> RunResult {
        let started = Instant::now();
        let elapsed = |s: Instant| s.elapsed().as_secs_f64() * 1000.0;
        let mut cmd = Command::new(&self.shell);
        cmd.arg("-c")
            .arg(&req.command)
            .env_clear()
            .envs(self.env.current())
            .current_dir(&req.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in &req.env {
            if !self.env.secrets.iter().any(|s| s == k) {
                cmd.env(k, v);
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return RunResult::new(
                    None,
                    "",
                    &format!("failed to start hook: {e}"),
                    elapsed(started),
                );
            }
        };
        let pid = child.id();
        if let Some(mut stdin) = child.stdin.take() {
            let data = req.stdin.clone().into_bytes();
            std::thread::spawn(move || {
                let _ = stdin.write_all(&data);
            });
        }
        let out = child.stdout.take().map(|s| reader(s, MAX_STDOUT_BYTES));
        let err = child.stderr.take().map(|s| reader(s, MAX_STDERR_BYTES));
        let deadline = started + req.timeout;
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    kill_group(pid);
                    break child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => {
                    kill_group(pid);
                    break child.wait().ok();
                }
            }
        };
        let collect = |rx: Option<mpsc::Receiver<Vec<u8>>>| {
            let rx = rx?;
            match rx.recv_timeout(DRAIN_GRACE) {
                Ok(b) => Some(b),
                Err(_) => {
                    kill_group(pid);
                    rx.recv_timeout(DRAIN_GRACE).ok()
                }
            }
        };
        let stdout = collect(out).unwrap_or_default();
        let mut stderr = String::from_utf8_lossy(&collect(err).unwrap_or_default()).into_owned();
        if timed_out {
            if !stderr.is_empty() {
                stderr.push('\n');
            }
            stderr.push_str(&format!(
                "hook timed out after {} ms",
                req.timeout.as_millis()
            ));
        }
        RunResult {
            exit_code: if timed_out {
                None
            } else {
                status.and_then(|s| s.code())
            },
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr,
            duration_ms: elapsed(started),
        }
    }
}
