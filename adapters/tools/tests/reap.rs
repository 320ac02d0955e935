//! Nothing a tool starts outlives it (`set -m; sleep 300 &` once
//! escaped the process-group kill). A process that left the command's
//! process group (`set -m`) or its session (`setsid`) is still found and
//! killed when the call ends, when a job is stopped and when the tool set
//! is dropped; processes dsh started itself are left alone.
//!
//! A binary of its own: the sweep kills adopted processes in foreign
//! sessions, which no other test here should own.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::text_of;
use dsh_tools::{
    BackgroundConfig, BashConfig, BashTool, Jobs, SandboxPolicy, ToolContext, ToolSet, Workspace,
};
use serde_json::{Value, json};

/// SIGKILL to `pid` on drop, so a failing test leaves nothing behind.
struct Cleanup(i32);

impl Drop for Cleanup {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a positive pid has no memory preconditions.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
        }
    }
}

/// Whether `pid` is gone (not even a zombie), waiting up to 10 s for it.
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

fn config() -> BashConfig {
    BashConfig {
        sandbox: SandboxPolicy::off(),
        ..BashConfig::default()
    }
}

fn tools() -> ToolSet {
    let jobs = Jobs::new(BackgroundConfig {
        bash: config(),
        ..BackgroundConfig::default()
    });
    let mut set = ToolSet::new();
    set.insert(Box::new(BashTool { config: config() }));
    for t in jobs.tools() {
        set.insert(t);
    }
    set
}

fn call(set: &ToolSet, ws: &Path, name: &str, args: Value) -> String {
    let ctx = ToolContext::new(Workspace::new(ws).unwrap());
    text_of(&common::call(set, &ctx, name, args))
}

/// The first number after a `pid=` in `text`.
fn pid_in(text: &str) -> Option<i32> {
    text.split("pid=").skip(1).find_map(|rest| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

/// Runs `command` with `bash`; returns the pid it printed.
fn bash_pid(set: &ToolSet, ws: &Path, command: &str) -> i32 {
    let text = call(
        set,
        ws,
        "bash",
        json!({"command": command, "description": "t"}),
    );
    pid_in(&text).unwrap_or_else(|| panic!("no pid in {text:?}"))
}

/// Starts `command` with `bash_start`; returns the job id and the pid it
/// printed.
fn job_pid(set: &ToolSet, ws: &Path, command: &str) -> (String, i32) {
    let text = call(set, ws, "bash_start", json!({"command": command}));
    let id = text
        .split_whitespace()
        .find(|w| w.starts_with("bg"))
        .map(|w| w.trim_end_matches(';').to_string())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while Instant::now() < deadline {
        seen.push_str(&call(set, ws, "bash_output", json!({"id": id})));
        if let Some(pid) = pid_in(&seen) {
            return (id, pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no pid from {id}: {seen}");
}

/// Runs `command` (which prints the pid of what it leaves behind) with
/// `bash` and checks that this is gone once the call returned.
fn bash_call_reaps(command: &str) {
    let ws = tempfile::tempdir().unwrap();
    let set = tools();
    let pid = bash_pid(&set, ws.path(), command);
    let _cleanup = Cleanup(pid);
    assert!(gone(pid), "{pid} of `{command}` outlived the bash call");
}

#[test]
fn bash_kills_a_process_that_left_the_group() {
    bash_call_reaps("set -m; sleep 300 & echo pid=$!");
}

#[test]
fn bash_kills_a_process_that_left_the_session() {
    bash_call_reaps("setsid sleep 300 & echo pid=$!");
}

#[test]
fn bash_stop_kills_a_process_that_left_the_group() {
    let ws = tempfile::tempdir().unwrap();
    let set = tools();
    let (id, pid) = job_pid(&set, ws.path(), "set -m; sleep 300 & echo pid=$!; wait");
    let _cleanup = Cleanup(pid);
    assert!(running(pid));
    call(&set, ws.path(), "bash_stop", json!({"id": id}));
    assert!(gone(pid), "set -m child {pid} outlived bash_stop");
}

#[test]
fn dropping_the_tools_kills_what_a_job_started() {
    let ws = tempfile::tempdir().unwrap();
    let set = tools();
    let (_, grouped) = job_pid(
        &set,
        ws.path(),
        "set -m; sleep 300 & echo pid=$!; sleep 300",
    );
    let (_, escaped) = job_pid(&set, ws.path(), "setsid sleep 300 & echo pid=$!; sleep 300");
    let _cleanup = (Cleanup(grouped), Cleanup(escaped));
    assert!(running(grouped) && running(escaped));
    drop(set);
    assert!(gone(grouped), "set -m child {grouped} outlived the tools");
    assert!(gone(escaped), "setsid child {escaped} outlived the tools");
}

#[test]
fn a_job_that_ended_leaves_nothing_behind() {
    let ws = tempfile::tempdir().unwrap();
    let set = tools();
    // The job's shell exits at once; what it started must not stay.
    let (id, pid) = job_pid(&set, ws.path(), "set -m; sleep 300 & echo pid=$!");
    let _cleanup = Cleanup(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !call(&set, ws.path(), "bash_output", json!({"id": id})).contains("exited")
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone(pid), "set -m child {pid} outlived its job");
}

/// Processes dsh starts itself (in its own session, grouped or not) are
/// not tool processes: tool sweeps leave them running.
#[test]
fn processes_dsh_started_itself_are_left_alone() {
    use std::os::unix::process::CommandExt;
    let ws = tempfile::tempdir().unwrap();
    let mut plain = Command::new("sleep")
        .arg("300")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut grouped = Command::new("sleep")
        .arg("300")
        .process_group(0)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let set = tools();
    bash_pid(&set, ws.path(), "set -m; sleep 300 & echo pid=$!");
    let (id, _) = job_pid(&set, ws.path(), "setsid sleep 300 & echo pid=$!; wait");
    call(&set, ws.path(), "bash_stop", json!({"id": id}));
    drop(set);
    let alive = [plain.id(), grouped.id()].map(|p| running(p as i32));
    let _ = plain.kill();
    let _ = grouped.kill();
    let _ = plain.wait();
    let _ = grouped.wait();
    assert_eq!(alive, [true, true]);
}
