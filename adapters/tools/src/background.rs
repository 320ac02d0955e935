//! Background `bash` jobs: `bash_start` starts a command in its own session
//! and returns at once with a job id; `bash_output` returns what the job
//! printed since the last read and whether it still runs; `bash_stop`
//! kills it and everything it started ([`crate::reap`]).
//!
//! Bounded: at most [`BackgroundConfig::max_running`] jobs run at once and
//! [`BackgroundConfig::max_jobs`] are kept; each job keeps the last
//! `max_output_bytes` of its combined stdout and stderr (bytes dropped
//! before a read are reported). Jobs run with the `bash` tool's
//! environment and sandbox, and every job still running is killed, with
//! what it started, when the tool set is dropped. Jobs need a local shell: with a
//! [`BashConfig::runner`] the tools refuse to start one.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use serde_json::{Value, json};

use crate::bash::{BashConfig, spawn_local, workdir};
use crate::{Tool, ToolCallRequest, ToolContext, prop};

/// Limits of background jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct BackgroundConfig {
    /// The shell, environment and sandbox jobs run with, and the output
    /// kept per job (`max_output_bytes`).
    pub bash: BashConfig,
    /// Jobs running at once (4).
    pub max_running: usize,
    /// Jobs kept, finished ones included (16); the oldest finished job is
    /// forgotten to make room.
    pub max_jobs: usize,
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        BackgroundConfig {
            bash: BashConfig::default(),
            max_running: 4,
            max_jobs: 16,
        }
    }
}

/// The last bytes a job printed.
#[derive(Debug, Default)]
struct Ring {
    /// Kept bytes; `data[0]` is byte number `base` of the output.
    data: Vec<u8>,
    base: u64,
    /// Bytes read so far (an absolute offset).
    read: u64,
}

impl Ring {
    fn push(&mut self, bytes: &[u8], cap: usize) {
        self.data.extend_from_slice(bytes);
        if self.data.len() > cap {
            let drop = self.data.len() - cap;
            self.data.drain(..drop);
            self.base += drop as u64;
        }
    }

    /// What was printed since the last read, and how many bytes of it were
    /// dropped before it could be read.
    fn take(&mut self) -> (String, u64) {
        let missed = self.base.saturating_sub(self.read);
        let from = (self.read.max(self.base) - self.base) as usize;
        let text = String::from_utf8_lossy(&self.data[from.min(self.data.len())..]).into_owned();
        self.read = self.base + self.data.len() as u64;
        (text, missed)
    }
}

struct Job {
    command: String,
    child: Child,
    pgid: u32,
    output: Arc<Mutex<Ring>>,
    started: Instant,
    /// `exit code N` / `killed by SIGKILL` once it ended.
    ended: Option<String>,
}

impl Job {
    /// Updates and returns whether it still runs.
    fn running(&mut self) -> bool {
        if self.ended.is_none() && crate::reap::exited(self.pgid) {
            // What the job started does not outlive it; the sweep runs
            // before the shell is reaped (its pid is the session id).
            crate::reap::end_session(self.pgid);
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    use std::os::unix::process::ExitStatusExt;
                    self.ended = Some(match (status.code(), status.signal()) {
                        (Some(c), _) => format!("exited with code {c}"),
                        (None, Some(s)) => format!("killed by signal {s}"),
                        _ => "ended".to_string(),
                    });
                }
                Ok(None) => {}
                Err(e) => self.ended = Some(format!("lost: {e}")),
            }
        }
        self.ended.is_none()
    }

    fn stop(&mut self) {
        if self.running() {
            crate::reap::end_session(self.pgid);
            let _ = self.child.wait();
            self.ended = Some("stopped".to_string());
        }
    }
}

/// The jobs of one tool set, shared by its three tools.
pub struct Jobs {
    config: BackgroundConfig,
    inner: Mutex<(u64, BTreeMap<u64, Job>)>,
}

impl core::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Jobs")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Jobs {
    fn drop(&mut self) {
        let jobs = match self.inner.get_mut() {
            Ok(inner) => &mut inner.1,
            Err(e) => &mut e.into_inner().1,
        };
        for job in jobs.values_mut() {
            job.stop();
        }
    }
}

impl Jobs {
    /// No jobs yet.
    pub fn new(config: BackgroundConfig) -> Arc<Jobs> {
        config.bash.sandbox_roots.pin(&config.bash.sandbox);
        Arc::new(Jobs {
            config,
            inner: Mutex::new((0, BTreeMap::new())),
        })
    }

    /// The three tools over these jobs.
    pub fn tools(self: &Arc<Self>) -> [Box<dyn Tool>; 3] {
        [
            Box::new(BashStartTool(self.clone())),
            Box::new(BashOutputTool(self.clone())),
            Box::new(BashStopTool(self.clone())),
        ]
    }

    fn start(&self, call: &ToolCallRequest, ctx: &ToolContext) -> Result<String, ToolOutcome> {
        let args = &call.arguments;
        let command = match args.get("command").and_then(Value::as_str) {
            Some(c) if !c.trim().is_empty() => c,
            _ => {
                return Err(ToolOutcome::error(
                    "invalid command: expected a non-empty string",
                ));
            }
        };
        if self.config.bash.runner.is_some() {
            return Err(ToolOutcome::error(
                "background jobs are not available with this bash runner",
            ));
        }
        let dir = workdir(args, ctx)?;
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| ToolOutcome::error("job table poisoned"))?;
        let (next, jobs) = &mut *guard;
        let mut running = 0;
        for job in jobs.values_mut() {
            if job.running() {
                running += 1;
            }
        }
        if running >= self.config.max_running {
            return Err(ToolOutcome::error(format!(
                "{running} background jobs are running (the limit); stop one with bash_stop first"
            )));
        }
        while jobs.len() >= self.config.max_jobs.max(1) {
            let oldest_done = jobs
                .iter()
                .find(|(_, j)| j.ended.is_some())
                .map(|(id, _)| *id);
            match oldest_done {
                Some(id) => {
                    jobs.remove(&id);
                }
                None => break,
            }
        }
        let mut child = spawn_local(&self.config.bash, command, &dir, &ctx.workspace)
            .map_err(ToolOutcome::error)?;
        let output = Arc::new(Mutex::new(Ring::default()));
        let cap = self.config.bash.max_output_bytes.max(1);
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ];
        for mut pipe in pipes.into_iter().flatten() {
            let output = output.clone();
            let _ = thread::Builder::new()
                .name("dsh-bash-job".into())
                .spawn(move || {
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = pipe.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if let Ok(mut ring) = output.lock() {
                            ring.push(&buf[..n], cap);
                        }
                    }
                });
        }
        *next += 1;
        let id = *next;
        let pgid = child.id();
        jobs.insert(
            id,
            Job {
                command: command.to_string(),
                child,
                pgid,
                output,
                started: Instant::now(),
                ended: None,
            },
        );
        Ok(format!("bg{id}"))
    }

    fn with_job<T>(
        &self,
        call: &ToolCallRequest,
        f: impl FnOnce(&mut Job) -> T,
    ) -> Result<T, ToolOutcome> {
        let id = call
            .arguments
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| s.strip_prefix("bg"))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| ToolOutcome::error("invalid id: expected a job id such as \"bg1\""))?;
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| ToolOutcome::error("job table poisoned"))?;
        let job = guard
            .1
            .get_mut(&id)
            .ok_or_else(|| ToolOutcome::error(format!("no background job bg{id}")))?;
        Ok(f(job))
    }
}

fn report(job: &mut Job) -> String {
    let running = job.running();
    let (text, missed) = match job.output.lock() {
        Ok(mut ring) => ring.take(),
        Err(_) => (String::new(), 0),
    };
    let state = match &job.ended {
        None => format!("running for {} s", job.started.elapsed().as_secs()),
        Some(end) => end.clone(),
    };
    let mut out = format!("[{state}: {}]", job.command);
    if missed > 0 {
        out.push_str(&format!(
            "\n[{missed} bytes of output were dropped before this read]"
        ));
    }
    if text.is_empty() {
        out.push_str(if running {
            "\n(no new output)"
        } else {
            "\n(no more output)"
        });
    } else {
        out.push('\n');
        out.push_str(&text);
    }
    out
}

/// `bash_start`: starts a background job.
#[derive(Debug)]
pub struct BashStartTool(pub Arc<Jobs>);

/// `bash_output`: a job's new output and state.
#[derive(Debug)]
pub struct BashOutputTool(pub Arc<Jobs>);

/// `bash_stop`: kills a job.
#[derive(Debug)]
pub struct BashStopTool(pub Arc<Jobs>);

fn id_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"id": prop("string", "The job id bash_start returned, e.g. \"bg1\".")},
        "required": ["id"]
    })
}

impl Tool for BashStartTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "bash_start",
            "Start a long-running bash command (a dev server, a watcher, a long build) in the background and return at once with its job id. Read its output with bash_output, end it with bash_stop. Output beyond the kept tail is dropped.",
            json!({
                "type": "object",
                "properties": {
                    "command": prop("string", "The bash command to run in the background."),
                    "workdir": prop("string", "Working directory. Defaults to the session workspace; a relative path is resolved against it."),
                },
                "required": ["command"]
            }),
        )
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        match self.0.start(call, ctx) {
            Ok(id) => ToolOutcome::success(crate::text(format!(
                "started background job {id}; read its output with bash_output {{\"id\":\"{id}\"}}"
            ))),
            Err(e) => e,
        }
    }
}

impl Tool for BashOutputTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "bash_output",
            "Return what a background job printed since the last read, and whether it is still running.",
            id_schema(),
        )
    }

    fn execute(&self, call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        match self.0.with_job(call, report) {
            Ok(text) => ToolOutcome::success(crate::text(text)),
            Err(e) => e,
        }
    }
}

impl Tool for BashStopTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "bash_stop",
            "Stop a background job (its whole process group) and return its last output.",
            id_schema(),
        )
    }

    fn execute(&self, call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        match self.0.with_job(call, |job| {
            job.stop();
            report(job)
        }) {
            Ok(text) => ToolOutcome::success(crate::text(text)),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_tail_and_counts_what_was_missed() {
        let mut r = Ring::default();
        r.push(b"hello ", 8);
        assert_eq!(r.take(), ("hello ".to_string(), 0));
        assert_eq!(r.take(), (String::new(), 0));
        r.push(b"world, again", 8);
        // 18 bytes written, 8 kept (offsets 10..18), 6 read: 4 missed.
        assert_eq!(r.take(), ("d, again".to_string(), 4));
    }
}
