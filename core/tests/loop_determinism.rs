//! Determinism (loop.md Q12): the same input script gives a
//! byte-identical event log, `time` included, and the same outputs.

mod loop_support;

use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::{CancelCause, SeededJitter};
use dsh_core::{FinishReason, StreamChunk};
use loop_support::*;

/// A script touching every producer of ids, times and jitter: tool calls
/// with contexts, retries through the executor (jittered delays), steering,
/// a cancellation mid-stream and a second turn.
fn script() -> (Vec<String>, Vec<String>) {
    let mut config = f0_config(vec![echo()]);
    config.retry_executor = true;
    config.interrupted_prefix = true;
    let mut t = T::with(config);
    t.agent = std::mem::replace(
        &mut t.agent,
        dsh_core::agent::Agent::new(
            f0_config(vec![]),
            dsh_core::session::Session::new(dsh_core::session::SessionHeader::new("tmp", 0)),
        )
        .unwrap(),
    )
    .with_jitter(SeededJitter(42));
    t.script().policy = Some(RetryPolicy::default());
    t.followup(&m1());
    t.model(&call("c1", "echo", r#"{"text":"ping"}"#));
    t.tool(echo_result("echo: ping").with_contexts(vec![x1()]));
    // Two failures, each retried after a jittered delay.
    for _ in 0..2 {
        t.model(&[StreamChunk::finish(FinishReason::Error {
            failure: failure("SERVER", "down"),
        })]);
        let deadline = t.agent.poll_timeout().expect("a retry timer");
        t.agent.handle_timeout(deadline).unwrap();
        t.drain();
    }
    t.steer(&s1());
    t.model(&text("done"));
    t.model(&text("after steering"));
    t.followup(&m2());
    t.chunks(&text("partial")[..2]);
    let now = t.tick();
    t.agent.cancel(now, CancelCause::User, false);
    t.drain();
    t.followup(&m3());
    // Invalid arguments: the core answers the call itself (TL-7).
    t.model(&call("c2", "echo", "{"));
    t.model(&text("end"));
    let log = t
        .agent
        .session()
        .events()
        .iter()
        .map(|e| e.to_json())
        .collect();
    (log, t.trace.clone())
}

#[test]
#[cfg_attr(
    not(all(
        feature = "tool-schema",
        feature = "retry-executor",
        feature = "head-deltas"
    )),
    ignore = "needs the `tool-schema`, `retry-executor`, `head-deltas` features"
)]
fn same_script_same_bytes() {
    let (a, trace_a) = script();
    let (b, trace_b) = script();
    assert!(a.len() > 60, "the script ran: {} events", a.len());
    assert_eq!(a.join("\n"), b.join("\n"));
    assert_eq!(trace_a, trace_b);
    // The jittered delays and retry ids made it into the log.
    assert!(
        a.iter()
            .any(|l| l.contains(r#""type":"llm/retry""#) && l.contains(r#""retry":2"#))
    );
    assert!(a.iter().any(|l| l.contains(r#""interrupted":true"#)));
}
