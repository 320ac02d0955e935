//! Nothing a tool starts outlives the agent: a background
//! job's processes that left its process group (`set -m`) or its session
//! (`setsid`) are killed when the agent is dropped.
//!
//! A binary of its own: the tools' sweep kills adopted processes in foreign
//! sessions, which no other test here should own.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_std::Agent;
use dsh_tools::{BashConfig, SandboxPolicy, ToolSet};
use support::*;

/// Whether `pid` is gone (not even a zombie), waiting up to 10 s.
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The pid written to `path`, waiting up to 10 s for it.
fn pid_from(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(t) = std::fs::read_to_string(path)
            && let Ok(p) = t.trim().parse()
        {
            return p;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn dropping_the_agent_kills_what_its_tools_started() {
    // `setsid` first: under `set -m` a job leads its group and `setsid`
    // would fork (then `$!` is not the sleep).
    let command = "setsid sleep 300 & echo $! > escaped.tmp; mv escaped.tmp escaped; \
                   set -m; sleep 300 & echo $! > grouped.tmp; mv grouped.tmp grouped; sleep 300";
    let args = serde_json::json!({ "command": command }).to_string();
    let script = serde_json::json!({"responses": [
        {"turn": {"toolCalls": [{"id": "c1", "name": "bash_start", "arguments": [args]}]}},
        {"turn": {"text": ["started"]}}
    ]})
    .to_string();
    let server = mock(&script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.tools = ToolSet::standard(BashConfig {
        sandbox: SandboxPolicy::off(),
        ..BashConfig::default()
    });
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    agent.send("start it").unwrap();
    agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    let grouped = pid_from(&work.path().join("grouped"));
    let escaped = pid_from(&work.path().join("escaped"));
    // SAFETY: signal 0 only checks that the process exists.
    assert!(unsafe { libc::kill(grouped, 0) == 0 && libc::kill(escaped, 0) == 0 });
    drop(agent);
    let results = [gone(grouped), gone(escaped)];
    // SAFETY: kill(2) with positive pids; cleanup after a failure.
    unsafe {
        libc::kill(grouped, libc::SIGKILL);
        libc::kill(escaped, libc::SIGKILL);
    }
    assert_eq!(
        results,
        [true, true],
        "grouped {grouped}, escaped {escaped}"
    );
}
