//! The driving contract of `Agent` (docs/architecture.md, "Time and ids"): a
//! spurious timer wake-up is harmless, and refusals say whether they are a
//! benign race (a late answer to something that ended) or misuse.

mod loop_support;

use dsh_core::Time;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{AttemptId, ToolToken};
use dsh_core::agent::{HookAnswer, InputError};
use dsh_core::session::EventData;
use dsh_core::{FinishReason, LlmFailure, StreamChunk};
use loop_support::*;

fn retry_wait() -> T {
    let mut config = f0_config(vec![]);
    config.retry_executor = true;
    let mut t = T::with(config);
    t.script().policy = Some(RetryPolicy::default());
    t.followup(&m1());
    t.model(&[StreamChunk::finish(FinishReason::Error {
        failure: LlmFailure::new("SERVER", "x"),
    })]);
    t
}

/// Feeds `handle_timeout(now)`; returns (events appended, outputs).
fn timeout(t: &mut T, now: Time) -> (u64, usize) {
    let before = t.agent.session().len();
    assert_eq!(t.agent.handle_timeout(now), Ok(()));
    let mut outputs = 0;
    while t.agent.poll().is_some() {
        outputs += 1;
    }
    (t.agent.session().len() - before, outputs)
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn r14_handle_timeout_is_idempotent_on_spurious_wake_ups() {
    let mut t = retry_wait();
    let deadline = t.agent.poll_timeout().expect("a retry timer");
    // Early: Ok, nothing happens, the timer stays armed.
    assert_eq!(
        timeout(&mut t, Time::from_millis(deadline.as_millis() - 1)),
        (0, 0)
    );
    assert_eq!(t.agent.poll_timeout(), Some(deadline));
    // Due: `llm/retry-started` and a new request.
    let (appended, outputs) = timeout(&mut t, deadline);
    assert!(appended >= 1 && outputs >= 1);
    assert!(matches!(
        t.agent.session().events().last().unwrap().data(),
        EventData::LlmRetryStarted(_)
    ));
    assert_eq!(t.agent.poll_timeout(), None);
    // A duplicate wake-up for the fired timer, and one much later: Ok,
    // no event, no output.
    assert_eq!(timeout(&mut t, deadline), (0, 0));
    assert_eq!(timeout(&mut t, deadline + 60_000), (0, 0));
}

#[test]
fn stale_inputs_after_cancel_are_benign() {
    // A chunk of an attempt cancelled mid-stream.
    let mut t = T::f0();
    t.followup(&m1());
    t.chunks(&text("partial")[..1]);
    let attempt = t.attempt();
    t.cancel(false);
    let e = t
        .agent
        .handle_chunk(t.now, attempt, StreamChunk::finish(FinishReason::Stop))
        .unwrap_err();
    assert_eq!(e, InputError::StaleAttempt { attempt });
    assert!(e.is_benign(), "{e}");
    let e = t.agent.handle_stream_end(t.now, attempt).unwrap_err();
    assert!(e.is_benign(), "{e}");
}

#[test]
fn a_hook_answered_twice_is_stale_and_benign() {
    let mut t = T::f0();
    t.defer("turn-stopping");
    t.followup(&m1());
    t.model(&text("ok"));
    let (id, _) = t.pending[0].clone();
    t.answer(HookAnswer::TurnStopping(Ok(())));
    let e = t
        .agent
        .complete_hook(t.now, id, HookAnswer::TurnStopping(Ok(())))
        .unwrap_err();
    assert_eq!(e, InputError::StaleHook { id });
    assert!(e.is_benign(), "{e}");
}

#[test]
fn misuse_is_not_benign() {
    let mut t = T::f0();
    // Ids never issued.
    let e = t
        .agent
        .handle_tool_result(
            Time::from_millis(1),
            ToolToken::new(77),
            ToolOutcome::error("x"),
        )
        .unwrap_err();
    assert_eq!(
        e,
        InputError::UnknownToolCall {
            token: ToolToken::new(77)
        }
    );
    assert!(!e.is_benign());
    let e = t
        .agent
        .complete_hook(Time::from_millis(1), 78, HookAnswer::TurnStopping(Ok(())))
        .unwrap_err();
    assert_eq!(e, InputError::UnknownHook { id: 78 });
    assert!(!e.is_benign());
    // A chunk while no stream was ever opened.
    let e = t
        .agent
        .handle_chunk(
            Time::from_millis(1),
            AttemptId::new(79),
            StreamChunk::finish(FinishReason::Stop),
        )
        .unwrap_err();
    assert_eq!(e, InputError::NoOpenStream);
    assert!(!e.is_benign());
    // Maintenance out of order; an assistant message in the inbox.
    assert!(
        !t.agent
            .end_maintenance(Time::from_millis(1))
            .unwrap_err()
            .is_benign()
    );
    let mut m = m1();
    m.role = dsh_core::Role::Assistant;
    assert!(
        !t.agent
            .followup(Time::from_millis(1), m)
            .unwrap_err()
            .is_benign()
    );
    assert!(t.agent.session().is_empty());
}
