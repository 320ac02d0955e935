//! The headline: 200 agents in one process against one mock DeepSeek
//! server, each running a full tool turn over real HTTP, every session log
//! complete and valid afterwards.

mod common;

use std::time::{Duration, Instant};

use common::*;
use dsh_core::SessionId;
use dsh_core::session::TurnEndReason;
use dsh_smol::Agent;

const AGENTS: usize = 200;

#[test]
fn two_hundred_concurrent_agents_each_run_a_tool_turn() {
    let server = server(tool_turn_script());
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let started = Instant::now();
    let summaries = smol::block_on(async {
        let tasks: Vec<_> = (0..AGENTS)
            .map(|i| {
                let cfg = config(&server);
                let store = store.clone();
                smol::spawn(async move {
                    let id = SessionId::new(format!("agent-{i:03}"));
                    let agent = Agent::create(cfg, store, id).await.unwrap();
                    agent.send("hi").await.unwrap();
                    let summary = agent
                        .wait_idle(Some(Duration::from_secs(50)))
                        .await
                        .unwrap();
                    agent.dispose().await;
                    summary
                })
            })
            .collect();
        let mut out = Vec::with_capacity(AGENTS);
        for t in tasks {
            out.push(t.await);
        }
        out
    });
    eprintln!(
        "{AGENTS} agents, one tool turn each: {:?}",
        started.elapsed()
    );
    assert_eq!(summaries.len(), AGENTS);
    for s in &summaries {
        assert_eq!(s.turn, 1);
        assert_eq!(s.reason, Some(TurnEndReason::Completed));
    }
    // Two model calls per agent, each answered by its own session script.
    assert_eq!(server.requests().len(), 2 * AGENTS);
    for i in 0..AGENTS {
        let events = stored(&store, &format!("agent-{i:03}"));
        check_invariants(&events);
        assert_eq!(turn_ends(&events), [TurnEndReason::Completed], "agent {i}");
        let t = types(&events);
        assert_eq!(
            t.iter().filter(|x| *x == "tool/result").count(),
            1,
            "agent {i}: {t:?}"
        );
        assert_eq!(t.iter().filter(|x| *x == "assistant/message").count(), 2);
        assert_eq!(t.last().map(String::as_str), Some("turn/end"));
    }
}
