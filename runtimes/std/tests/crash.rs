//! Resume after a crash: the writer runs in a child process (this test
//! binary re-executed on an ignored helper test), is killed with SIGKILL
//! mid-turn, and the session is reopened with `Agent::resume`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::SessionId;
use dsh_core::session::{EventData, TurnEndReason};
use dsh_std::{Agent, AgentEvent};
use support::*;

const DIR_ENV: &str = "DSH_STD_CRASH_DIR";
const SESSION: &str = "crashy";

fn marker(dir: &Path) -> PathBuf {
    dir.join("streaming")
}

/// The writer (run only in the child): starts a turn whose stream stalls
/// after a few events, signals once the model streams, then waits to be
/// killed.
#[test]
#[ignore = "helper: run in a child process by resume_after_sigkill_mid_turn"]
fn crash_writer_child() {
    let dir = PathBuf::from(std::env::var(DIR_ENV).expect("run by the crash test"));
    let server = mock(
        r#"{"responses":[{"fault":{"kind":"stall","turn":{"text":["half ","an ","answer"]},"afterEvents":3}}]}"#,
    );
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), &work),
        store(&dir.join("store")),
        SessionId::from(SESSION),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("tell me something long").unwrap();
    wait_for(
        &rx,
        |e| matches!(e, AgentEvent::Event(ev) if ev.event_type() == "assistant/chunk"),
    );
    std::fs::write(marker(&dir), b"1").unwrap();
    std::thread::sleep(Duration::from_secs(60));
    unreachable!("the parent kills this process");
}

#[test]
fn resume_after_sigkill_mid_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_writer_child",
            "--ignored",
            "--test-threads",
            "1",
        ])
        .env(DIR_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker(dir.path()).exists() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the writer never started streaming");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let store = store(&dir.path().join("store"));
    let id = SessionId::from(SESSION);
    // The stored log ends inside turn 1 (at least the request prefix was
    // flushed before the model call, SM-12 point 2).
    let (_, raw) = store.read_from(&id, 0, &dsh_store::Cancel::new()).unwrap();
    assert!(raw.iter().any(|e| e.event_type() == "request/header"));
    assert_ne!(raw.last().unwrap().event_type(), "turn/end");

    let server = mock(r#"{"responses":[{"turn":{"text":["all good"]}}]}"#);
    let work = dir.path().join("work");
    let agent = Agent::resume(
        config(Arc::new(client_for(server.url())), &work),
        store.clone(),
        &id,
    )
    .unwrap();
    agent.send("are you there?").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(summary.turn, 2, "turn numbering continues");
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    drop(agent);

    let log = store.load(&id).unwrap().events;
    assert_valid(&log);
    // Crash repair closed turn 1 as interrupted.
    let ends: Vec<(u64, TurnEndReason)> = log
        .iter()
        .filter_map(|e| match e.data() {
            EventData::TurnEnd(t) => Some((t.turn, t.reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        vec![
            (1, TurnEndReason::Interrupted),
            (2, TurnEndReason::Completed)
        ]
    );
    // The resumed request carries the first prompt too.
    let body = server.requests()[0].body_text();
    assert!(body.contains("tell me something long") && body.contains("are you there?"));
}
