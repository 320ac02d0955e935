//! Cancellation (loop.md §2.10, LC-33..LC-35, LC-40): every
//! `AgentCancelCause`, with `keep_inbox` false and true, at every point of
//! the LC-33 table, plus the stages of LC-34 (request config, prepare,
//! request-error, retry wait) and cancels issued by hooks.

mod loop_support;

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    AgentStatus, CancelCause, HookAnswer, InboxTarget, PreStepDecision, PreparedCall, Recovery,
};
use dsh_core::{FinishReason, LlmCallConfig, StreamChunk};
use loop_support::*;

fn causes() -> [(CancelCause, &'static str); 4] {
    [
        (CancelCause::User, r#"{"kind":"user"}"#),
        (CancelCause::Parent, r#"{"kind":"parent"}"#),
        (
            CancelCause::Hook {
                reason: "runaway".into(),
            },
            r#"{"kind":"hook","reason":"runaway"}"#,
        ),
        (CancelCause::Disposed, r#"{"kind":"disposed"}"#),
    ]
}

/// Where the cancel lands.
#[derive(Clone, Copy, Debug)]
enum Point {
    BeforeFirstStep,
    RequestConfig,
    Prepare,
    Streaming,
    RequestError,
    RetryWait,
    DuringTool,
    BetweenStepsPreStep,
    TurnStopping,
}

const POINTS: [Point; 9] = [
    Point::BeforeFirstStep,
    Point::RequestConfig,
    Point::Prepare,
    Point::Streaming,
    Point::RequestError,
    Point::RetryWait,
    Point::DuringTool,
    Point::BetweenStepsPreStep,
    Point::TurnStopping,
];

/// Drives F0 (+ `slow`) to `point`, with `m9` queued for the next turn and
/// `x9` injected for the next step; returns the harness and whether a step
/// is open when the cancel lands.
fn reach(point: Point) -> (T, bool) {
    let mut config = f0_config(vec![plain_tool("slow")]);
    config.retry_executor = matches!(point, Point::RetryWait);
    let mut t = T::with(config);
    match point {
        Point::BeforeFirstStep => t.defer("assemble"),
        Point::RequestConfig => t.defer("request"),
        Point::RequestError => t.defer("request-error"),
        Point::BetweenStepsPreStep | Point::TurnStopping => {}
        _ => {}
    }
    if matches!(point, Point::Prepare) {
        // Deferred prepare: answered below, after the cancel.
        t.defer("prepare");
    }
    t.followup(&m1());
    let step_open = match point {
        Point::BeforeFirstStep => false,
        Point::RequestConfig | Point::Prepare => true,
        Point::Streaming => {
            t.chunks(&text("partial")[..2]);
            true
        }
        Point::RequestError | Point::RetryWait => {
            t.model(&[StreamChunk::finish(FinishReason::Error {
                failure: failure("SERVER", "down"),
            })]);
            true
        }
        Point::DuringTool => {
            t.model(&call("c1", "slow", "{}"));
            true
        }
        Point::BetweenStepsPreStep => {
            t.model(&call("c1", "slow", "{}"));
            t.defer("pre-step");
            t.tool(echo_result("ok"));
            false
        }
        Point::TurnStopping => {
            t.defer("turn-stopping");
            t.model(&text("hello"));
            false
        }
    };
    t.followup(&m2());
    t.inject(&x1());
    (t, step_open)
}

/// Answers whatever the cancelled turn still waits for.
fn finish_pending(t: &mut T, point: Point) {
    match point {
        Point::BeforeFirstStep => t.answer(HookAnswer::Assemble(Ok(Default::default()))),
        Point::RequestConfig => {
            t.answer(HookAnswer::Request(Ok(LlmCallConfig::new("mock", "mock"))))
        }
        Point::Prepare => t.answer(HookAnswer::Prepare(Ok(PreparedCall::plain(
            LlmCallConfig::new("mock", "mock"),
        )))),
        Point::RequestError => t.answer(HookAnswer::RequestError(Ok(Recovery::Retry))),
        Point::DuringTool => t.tool(ToolOutcome::aborted()),
        Point::BetweenStepsPreStep => {
            t.answer(HookAnswer::PreStep(Ok(PreStepDecision::Enter(vec![]))))
        }
        Point::TurnStopping => t.answer(HookAnswer::TurnStopping(Ok(()))),
        Point::Streaming | Point::RetryWait => {}
    }
}

#[test]
#[cfg_attr(
    not(feature = "retry-executor"),
    ignore = "needs the `retry-executor` feature"
)]
fn every_cause_every_point_both_inbox_modes() {
    for point in POINTS {
        for (cause, cause_json) in causes() {
            for keep in [false, true] {
                let ctx = format!("{point:?} {cause:?} keep={keep}");
                let (mut t, step_open) = reach(point);
                // Prepare is deferred in the shell, not in the scripted hooks.
                let calls_before = t.calls.len();
                let before = t.agent.session().len() as usize;
                t.take_trace();
                let now = t.tick();
                t.agent.cancel(now, cause.clone(), keep);
                t.drain();
                finish_pending(&mut t, point);
                let log = t.log();
                let tail: Vec<&String> = log[before..].iter().collect();
                // Queued items: canceled (next-step first, IB-12) or parked.
                if keep {
                    assert!(!tail.iter().any(|l| l.contains("canceled")), "{ctx}");
                    assert_eq!(
                        t.agent.inbox().list(InboxTarget::NextTurn).len(),
                        1,
                        "{ctx}"
                    );
                    assert_eq!(
                        t.agent.inbox().list(InboxTarget::NextStep).len(),
                        1,
                        "{ctx}"
                    );
                } else {
                    assert_eq!(
                        tail[0],
                        &canceled(before as u64, "next-step", 0, 1),
                        "{ctx}"
                    );
                    assert_eq!(
                        tail[1],
                        &canceled(before as u64 + 1, "next-turn", 0, 1),
                        "{ctx}"
                    );
                    assert!(t.agent.inbox().is_empty(), "{ctx}");
                }
                // The turn ends aborted with the first cause; a step that
                // was open gets its step/end first; no agent/error.
                let last = log.last().unwrap();
                assert!(
                    last.ends_with(&format!(
                        r#"{{"turn":1,"reason":{{"kind":"aborted","reason":{cause_json}}}}}"#
                    )),
                    "{ctx}: {last}"
                );
                let step_ends = tail.iter().filter(|l| l.contains("step/end")).count();
                assert_eq!(
                    step_ends,
                    usize::from(step_open),
                    "{ctx}\n{}",
                    log.join("\n")
                );
                assert!(
                    !tail.iter().any(|l| l.contains("step/start")),
                    "{ctx}: no new step"
                );
                assert_eq!(t.calls.len(), calls_before, "{ctx}: no new model call");
                let trace = t.take_trace();
                assert!(
                    !trace.iter().any(|s| s.starts_with("error")),
                    "{ctx}: {trace:?}"
                );
                assert_eq!(
                    trace.iter().filter(|s| s.starts_with("abort")).count(),
                    1,
                    "{ctx}"
                );
                assert_eq!(t.agent.status(), AgentStatus::Idle, "{ctx}");
                // A second cancel changes nothing but the inbox (LC-33.2).
                let len = t.agent.session().len();
                let now = t.tick();
                t.agent.cancel(now, CancelCause::User, true);
                t.drain();
                assert_eq!(t.agent.session().len(), len, "{ctx}");
            }
        }
    }
}

#[test]
fn idle_cancel_clears_or_keeps_the_inbox() {
    for keep in [false, true] {
        let mut t = T::f0();
        t.send(&m1(), InboxTarget::NextTurn, false);
        t.inject(&x1());
        t.take_trace();
        t.cancel(keep);
        if keep {
            assert_eq!(t.log().len(), 2);
            assert!(t.take_trace().is_empty(), "nothing happens");
        } else {
            assert_lines(
                &t.log_from(2),
                &[
                    canceled(2, "next-step", 0, 1),
                    canceled(3, "next-turn", 0, 1),
                ],
            );
            assert_eq!(t.take_trace(), ["discarded x1", "discarded m1"]);
        }
        assert_eq!(t.agent.status(), AgentStatus::Idle);
        // Nothing is armed: a later inject does not start a turn.
        t.inject(&x2());
        assert_eq!(t.agent.status(), AgentStatus::Idle);
    }
    // Idle with an empty inbox: nothing at all (LC-33.3).
    let mut t = T::f0();
    t.cancel(false);
    assert!(t.log().is_empty() && t.take_trace().is_empty());
}

#[test]
fn first_cause_wins() {
    let mut t = T::f0();
    t.defer("turn-stopping");
    t.followup(&m1());
    t.model(&text("hello"));
    let now = t.tick();
    t.agent.cancel(now, CancelCause::Parent, true);
    t.agent.cancel(now, CancelCause::User, true);
    t.drain();
    t.answer(HookAnswer::TurnStopping(Ok(())));
    assert!(
        t.log()
            .last()
            .unwrap()
            .contains(r#""reason":{"kind":"parent"}"#)
    );
}

#[test]
fn steer_after_abort_becomes_next_turn() {
    // IB-6: a waking send while the activity is aborted goes to next-turn.
    let mut t = T::f0();
    t.defer("turn-stopping");
    t.followup(&m1());
    t.model(&text("hello"));
    t.cancel(true);
    t.steer(&s1());
    assert_eq!(
        t.agent.inbox().list(InboxTarget::NextTurn)[0].id.as_str(),
        "s1"
    );
    t.answer(HookAnswer::TurnStopping(Ok(())));
    // Without the wake latch it stays parked (Q5).
    assert_eq!(t.agent.status(), AgentStatus::Idle);
    assert_eq!(t.agent.inbox().list(InboxTarget::NextTurn).len(), 1);
}

#[test]
fn a_hook_may_cancel() {
    // A turn-stopping listener cancels through its HookCx (SM-10 d): the
    // cancel is applied when the hook returns, so the turn ends aborted
    // with the hook's cause (LC-30, LC-34).
    let mut t = T::f0();
    t.script().turn_stopping = Some(Box::new(|cx, _| {
        cx.cancel(
            CancelCause::Hook {
                reason: "budget".into(),
            },
            false,
        );
        Ok(())
    }));
    t.followup(&m1());
    t.model(&text("hello"));
    assert!(t.log().last().unwrap().ends_with(
        r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"hook","reason":"budget"}}}"#
    ));
    assert_eq!(t.agent.status(), AgentStatus::Idle);
}

#[test]
fn disposal_mid_step_writes_turn_end() {
    // LC-40 / Q9: disposal during a step still closes the turn.
    let mut t = T::f0();
    t.followup(&m1());
    t.chunks(&text("x")[..1]);
    let now = t.tick();
    t.agent.cancel(now, CancelCause::Disposed, false);
    t.drain();
    let log = t.log();
    assert!(log[log.len() - 2].contains("step/end"));
    assert!(
        log.last()
            .unwrap()
            .contains(r#""reason":{"kind":"disposed"}"#)
    );
}

#[test]
fn maintenance_latches_wakes_and_is_cancellable() {
    // LC-39: wakes during maintenance set wake_requested; end wakes.
    let mut t = T::f0();
    let now = t.tick();
    t.agent.begin_maintenance(now).unwrap();
    assert!(t.agent.begin_maintenance(now).is_err(), "only from idle");
    t.followup(&m1());
    assert_eq!(
        t.agent.status(),
        AgentStatus::Idle,
        "no turn during maintenance"
    );
    assert!(t.log().iter().all(|l| !l.contains("turn/start")));
    let now = t.tick();
    t.agent.end_maintenance(now).unwrap();
    t.drain();
    assert_eq!(t.agent.status(), AgentStatus::Running);
    t.model(&text("ok"));
    assert!(t.log().last().unwrap().contains("completed"));
    // Cancel during maintenance: AbortTurn, inbox cleared, no wake later.
    let now = t.tick();
    t.agent.begin_maintenance(now).unwrap();
    t.followup(&m2());
    t.take_trace();
    t.cancel(false);
    assert_eq!(t.take_trace(), ["discarded m2", "abort User"]);
    let now = t.tick();
    t.agent.end_maintenance(now).unwrap();
    t.drain();
    assert_eq!(t.agent.status(), AgentStatus::Idle);
    assert!(t.agent.end_maintenance(now).is_err());
}
