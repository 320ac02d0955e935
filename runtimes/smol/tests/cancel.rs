//! Cancellation during a stream reaches the blocking HTTP reader (its own
//! test binary, so no other test's streams share the process).

mod common;

use std::time::{Duration, Instant};

use common::*;
use dsh_core::SessionId;
use dsh_core::agent::CancelCause;
use dsh_core::session::{AbortCause, TurnEndReason};
use dsh_smol::{Agent, AgentEvent};
use serde_json::json;

/// Live DeepSeek idle-watchdog threads (one per open stream; it exits
/// when the stream is dropped). Linux names threads in /proc, truncated
/// to 15 bytes.
fn watchdogs() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim_end() == "dsh-deepseek-wa")
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn cancel_during_a_stream_interrupts_the_read() {
    // Two events, then silence until the client leaves; the idle watchdog
    // (20 s) is far away.
    let server = server(json!({"responses": [
        {"fault": {"kind": "stall", "turn": {"text": ["a", "b", "c"]}, "afterEvents": 2}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let summary = smol::block_on(async {
        let agent = Agent::create(config(&server), store.clone(), SessionId::new("cancel"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        // Wait for the first streamed chunk: the reader is now blocked.
        loop {
            match sub.next().await {
                Some(AgentEvent::Event(e)) if e.event_type() == "assistant/chunk" => break,
                Some(_) => {}
                None => panic!("agent stopped"),
            }
        }
        if cfg!(target_os = "linux") {
            assert_eq!(watchdogs(), 1, "one open stream");
        }
        agent.cancel(CancelCause::User, false).await;
        let summary = agent
            .wait_idle(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        agent.dispose().await;
        summary
    });
    assert_eq!(
        summary.reason,
        Some(TurnEndReason::Aborted {
            cause: AbortCause::User
        })
    );
    // The cancel token interrupted the blocked read: the stream was
    // dropped (its watchdog thread gone) long before the idle timeout.
    if cfg!(target_os = "linux") {
        let deadline = Instant::now() + Duration::from_secs(5);
        while watchdogs() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(watchdogs(), 0, "the blocked reader is still open");
    }
    let events = stored(&store, "cancel");
    check_invariants(&events);
    let t = types(&events);
    assert!(t.contains(&"assistant/chunk".to_string()));
    // LC-34 with the recommended H-1 (`interrupted_prefix`, on in every
    // runtime): the cancelled attempt's delivered text is kept only as an
    // interrupted assistant/message.
    for e in events
        .iter()
        .filter(|e| e.event_type() == "assistant/message")
    {
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v["data"]["interrupted"], true, "{v}");
    }
    assert_eq!(t.last().map(String::as_str), Some("turn/end"));
}
