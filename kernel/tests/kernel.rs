//! The kernel's contract at the sans-IO level: the flush gate (SM-14),
//! tool deadlines and grace (TL-14), stale inputs, spurious wake-ups and
//! the plugin chain's composition, ids that continue after resume and fork.

use dsh_core::Time;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::{
    AgentConfig, AgentEvent, CancelCause, Cx, Effect, Flow, IdMode, InboxTarget, Kernel,
    KernelError, Plugin, Seams, create_session,
};
use dsh_runtime::{AttemptId, ToolToken};
use serde_json::json;

const NOW: Time = Time::from_millis(1_000_000);

fn kernel(plugins: Vec<Box<dyn Plugin>>) -> Kernel {
    let mut tools = ToolRegistry::new();
    let mut slow = ToolDefinition::untyped("slow", "slow", json!({"type":"object"}));
    slow.timeout_ms = Some(50.0);
    tools.register(slow).unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config.tools = tools;
    config.ids = IdMode::Sequential;
    config.tool_grace_ms = 1_000;
    let session = create_session("k1".into(), NOW, None).unwrap();
    let mut k = Kernel::new(config, session, 0, plugins).unwrap();
    let hi = Message::user("u1", vec![ContentBlock::text("hi")]);
    k.send(NOW, hi, InboxTarget::NextTurn, true).unwrap();
    k
}

/// A config with one tool `t` and ids of `mode`.
fn config_with_tool_t(mode: IdMode) -> AgentConfig {
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::untyped("t", "t", json!({"type":"object"})))
        .unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config.tools = tools;
    config.ids = mode;
    config
}

fn tool_call() -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::block_end(0, ContentBlock::tool_call("c1", "slow", "{}")),
        StreamChunk::finish(FinishReason::ToolCalls),
    ]
}

/// Drains, answering persists; returns the other effects.
fn drain(k: &mut Kernel, now: Time) -> Vec<Effect> {
    let mut out = Vec::new();
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { .. } => k.persisted(now, Ok(())).unwrap(),
            other => out.push(other),
        }
    }
    out
}

fn started_model(effects: &[Effect]) -> Option<AttemptId> {
    effects.iter().find_map(|e| match e {
        Effect::StartModel(c) => Some(c.attempt),
        _ => None,
    })
}

fn started_tool(effects: &[Effect]) -> Option<(ToolToken, Option<u64>)> {
    effects.iter().find_map(|e| match e {
        Effect::StartTool { exec, timeout_ms } => Some((exec.token, *timeout_ms)),
        _ => None,
    })
}

/// Runs to the tool body of `slow`; returns its token.
fn to_tool(k: &mut Kernel) -> ToolToken {
    let fx = drain(k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    for c in tool_call() {
        k.model_chunk(NOW, attempt, c).unwrap();
    }
    k.model_end(NOW, attempt).unwrap();
    let fx = drain(k, NOW);
    let (token, timeout) = started_tool(&fx).expect("a tool body");
    assert_eq!(timeout, Some(50));
    token
}

#[test]
fn the_flush_gate_holds_the_model_request_until_the_write_is_reported() {
    // SM-12/SM-14: the request prefix is written before the request goes
    // out; nothing is released while the write is pending.
    let mut k = kernel(Vec::new());
    let mut effects = Vec::new();
    let persist = loop {
        match k.poll().expect("a persist before the request") {
            e @ Effect::Persist { .. } => break e,
            other => effects.push(other),
        }
    };
    assert!(started_model(&effects).is_none());
    let Effect::Persist { range, .. } = persist else {
        unreachable!()
    };
    assert_eq!(range.start, 0);
    assert!(k.poll().is_none(), "gated until `persisted`");
    k.persisted(NOW, Ok(())).unwrap();
    let fx = drain(&mut k, NOW);
    assert!(started_model(&fx).is_some());
    assert_eq!(k.persisted(NOW, Ok(())), Err(KernelError::NoPersistPending));
}

#[test]
fn a_failed_write_before_the_model_ends_the_turn_with_flush_failed() {
    let mut k = kernel(Vec::new());
    let mut published = Vec::new();
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { checkpoint, .. } => {
                let r = if checkpoint.is_some() {
                    Err("disk full".to_string())
                } else {
                    Ok(())
                };
                k.persisted(NOW, r).unwrap();
            }
            Effect::StartModel(_) => panic!("SM-14: the request must not be dispatched"),
            Effect::Publish(AgentEvent::Error(e)) => published.push(e),
            _ => {}
        }
    }
    assert!(published.iter().any(|e| e.contains("disk full")));
    let reason = k.summary().reason.expect("turn ended");
    let v = serde_json::to_value(&reason).unwrap();
    assert_eq!(v["kind"], "error");
    assert_eq!(v["error"]["code"], "FLUSH_FAILED");
}

#[test]
fn a_tool_deadline_stops_the_body_and_replaces_its_result() {
    let mut k = kernel(Vec::new());
    let token = to_tool(&mut k);
    assert_eq!(k.poll_timeout(), Some(NOW + 50));
    // A spurious wake-up before the deadline changes nothing.
    k.handle_timeout(NOW + 49, NOW + 49);
    assert!(k.poll().is_none());
    k.handle_timeout(NOW + 50, NOW + 50);
    let fx = drain(&mut k, NOW + 50);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::CancelTool { token: t } if *t == token)),
        "the body is told to stop"
    );
    // The body returns within the grace: TL-14 replaces its success.
    let ok = ToolOutcome::success(vec![ContentBlock::text("late")]);
    k.tool_done(NOW + 60, token, ok, Vec::new()).unwrap();
    drain(&mut k, NOW + 60);
    let result = k
        .session()
        .events()
        .iter()
        .find(|e| e.event_type() == "tool/result")
        .unwrap()
        .to_json();
    assert!(
        result.contains("tool call timed out after 50ms"),
        "{result}"
    );
    assert!(result.contains("TOOL_TIMEOUT"), "{result}");
}

/// A timer input carries the deadline it was armed for, and the
/// kernel takes it as reached whatever the wall clock reads. A wall clock
/// that went back an hour neither keeps the tool deadline from firing nor
/// moves the grace deadline, and logged times never decrease.
#[test]
fn a_deadline_is_reached_when_the_wall_clock_went_back() {
    let mut k = kernel(Vec::new());
    let token = to_tool(&mut k);
    let deadline = k.poll_timeout().unwrap();
    assert_eq!(deadline, NOW + 50);
    let wall = Time::from_millis(NOW.as_millis() - 3_600_000);
    k.handle_timeout(wall, deadline);
    let fx = drain(&mut k, wall);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::CancelTool { token: t } if *t == token)),
        "the tool deadline fired"
    );
    assert_eq!(k.now(), deadline, "the kernel's clock rose to the deadline");
    assert_eq!(
        k.poll_timeout(),
        Some(deadline + 1_000),
        "grace from the kernel's clock"
    );
    k.handle_timeout(wall, deadline + 1_000);
    drain(&mut k, wall);
    let times: Vec<i64> = k.session().events().iter().map(|e| e.time()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(times.last(), Some(&(deadline + 1_000).as_millis()));
}

#[test]
fn a_body_that_overstays_the_grace_is_answered_and_its_late_result_is_stale() {
    let mut k = kernel(Vec::new());
    let token = to_tool(&mut k);
    k.handle_timeout(NOW + 50, NOW + 50);
    drain(&mut k, NOW + 50);
    assert_eq!(k.poll_timeout(), Some(NOW + 1_050), "the grace deadline");
    k.handle_timeout(NOW + 1_050, NOW + 1_050);
    drain(&mut k, NOW + 1_050);
    let late = k.tool_done(NOW + 2_000, token, ToolOutcome::error("late"), Vec::new());
    let err = late.unwrap_err();
    assert!(err.is_stale(), "{err}");
    assert_eq!(err, KernelError::StaleTool { token });
}

#[test]
fn an_abort_waits_for_the_body_then_answers_aborted_after_the_grace() {
    let mut k = kernel(Vec::new());
    let token = to_tool(&mut k);
    k.cancel(NOW + 1, CancelCause::User, false);
    let fx = drain(&mut k, NOW + 1);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::CancelTool { token: t } if *t == token))
    );
    // Still waiting for the body (LC-25): no turn end yet.
    assert!(!k.is_idle());
    k.handle_timeout(NOW + 1_001, NOW + 1_001);
    drain(&mut k, NOW + 1_001);
    assert!(k.is_idle());
    let result = k
        .session()
        .events()
        .iter()
        .find(|e| e.event_type() == "tool/result")
        .unwrap()
        .to_json();
    assert!(result.contains("\"ABORTED\""), "{result}");
}

#[test]
fn a_chunk_of_a_cancelled_attempt_is_a_stale_refusal() {
    let mut k = kernel(Vec::new());
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).unwrap();
    k.cancel(NOW, CancelCause::User, false);
    let fx = drain(&mut k, NOW);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::CancelModel { attempt: a } if *a == attempt))
    );
    let chunk = StreamChunk::TextDelta {
        index: 0,
        text: "late".into(),
    };
    let err = k.model_chunk(NOW, attempt, chunk).unwrap_err();
    assert!(err.is_stale());
    // Misuse is not stale.
    assert!(!KernelError::NoPersistPending.is_stale());
}

/// Found by the kernel fuzz target: a turn cancelled while a write is
/// pending holds its `CancelModel` behind the write; if the stream ends in
/// between, that end is the attempt's end (accepted, not stale), and no
/// `CancelModel` follows for a stream that is over. Before, the end was
/// refused as stale yet cleared the kernel's attempt, so the runtime saw
/// neither an accepted end nor a cancel.
#[test]
fn the_end_of_a_stream_whose_cancel_waits_behind_a_write_is_accepted() {
    for error in [false, true] {
        let mut k = kernel_with(|c| c.write_batch_max_delay_ms = Some(0));
        let fx = drain(&mut k, NOW);
        let attempt = started_model(&fx).expect("a model call");
        // A chunk opens a write-behind window of 0 ms: the write is due at
        // once and stays pending (not reported yet).
        k.model_chunk(NOW, attempt, StreamChunk::block_start(0, "text"))
            .unwrap();
        let mut pending = false;
        while let Some(e) = k.poll() {
            pending |= matches!(e, Effect::Persist { .. });
        }
        assert!(pending, "a write-behind is pending");
        k.cancel(NOW, CancelCause::User, true);
        assert!(k.poll().is_none(), "effects wait behind the write");
        let ended = if error {
            k.model_error(NOW, attempt, dsh_core::agent::HookError::msg("gone"))
        } else {
            k.model_end(NOW, attempt)
        };
        assert_eq!(ended, Ok(()), "the stream's end is the attempt's end");
        k.persisted(NOW, Ok(())).unwrap();
        let fx = drain(&mut k, NOW);
        assert!(
            !fx.iter().any(|e| matches!(e, Effect::CancelModel { .. })),
            "a cancel for a stream that ended: {fx:?}"
        );
        assert!(k.is_idle(), "the cancelled turn ended");
        // A later end of the same attempt is stale.
        assert!(k.model_end(NOW, attempt).unwrap_err().is_stale());
    }
}

/// Sets the temperature; `stop` short-circuits the chain.
struct Temp(f64, bool);

impl Plugin for Temp {
    fn name(&self) -> &str {
        "temp"
    }
    fn seams(&self) -> Seams {
        Seams::REQUEST
    }
    fn request(
        &mut self,
        _cx: &mut Cx<'_>,
        _turn: u64,
        _step: u64,
        mut value: LlmCallConfig,
    ) -> Flow<LlmCallConfig> {
        value.temperature = Some(value.temperature.unwrap_or(0.0) + self.0);
        if self.1 {
            Flow::Done(value)
        } else {
            Flow::Next(value)
        }
    }
}

#[test]
fn plugins_compose_in_order_and_can_short_circuit() {
    // Ordered around-middleware: 0.5 then +0.25 (done): the third never runs.
    let plugins: Vec<Box<dyn Plugin>> = vec![
        Box::new(Temp(0.5, false)),
        Box::new(Temp(0.25, true)),
        Box::new(Temp(100.0, false)),
    ];
    let mut k = kernel(plugins);
    let fx = drain(&mut k, NOW);
    let call = fx
        .iter()
        .find_map(|e| match e {
            Effect::StartModel(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(call.request.temperature, Some(0.75));
}

/// Persistence W2/W3 (a kill mid-stream keeps what was
/// shown): events appended while a response streams in are written within
/// the write-behind window, not only at the next checkpoint.
#[test]
fn a_streaming_response_is_written_within_the_write_behind_window() {
    let mut k = kernel(Vec::new());
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    let written_before = k.session().len();
    // The window opens with the first unwritten chunk.
    k.model_chunk(
        NOW,
        attempt,
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
    )
    .unwrap();
    let mut writes = Vec::new();
    let poll = |k: &mut Kernel, now: Time, writes: &mut Vec<(u64, u64, Time)>| {
        while let Some(e) = k.poll() {
            if let Effect::Persist { range, checkpoint } = e {
                assert_eq!(checkpoint, None, "a write-behind, not a checkpoint");
                writes.push((range.start, range.end, now));
                k.persisted(now, Ok(())).unwrap();
            }
        }
    };
    poll(&mut k, NOW, &mut writes);
    assert!(writes.is_empty(), "nothing is due yet");
    assert_eq!(k.poll_timeout(), Some(NOW + 200));
    for i in 1..=6 {
        let now = NOW + i * 50;
        k.model_chunk(
            now,
            attempt,
            StreamChunk::TextDelta {
                index: 0,
                text: "x".into(),
            },
        )
        .unwrap();
        poll(&mut k, now, &mut writes);
    }
    // Chunks at +50..+300: the window that opened at +0 closed at +200,
    // so the write happened at the chunk of +200, with everything so far.
    assert_eq!(writes.len(), 1, "{writes:?}");
    let (start, end, at) = writes[0];
    assert_eq!((start, at), (written_before, NOW + 200));
    assert!(end > start + 4, "{writes:?}");
    // The next window opened at +250 (the first unwritten chunk after the
    // write): a timer wake-up at its end writes the rest.
    assert_eq!(k.poll_timeout(), Some(NOW + 450));
    k.handle_timeout(NOW + 450, NOW + 450);
    poll(&mut k, NOW + 450, &mut writes);
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[1].1, k.session().len());
}

#[test]
fn without_a_window_only_checkpoints_write() {
    let mut config = config_with_tool_t(IdMode::Sequential);
    config.write_batch_max_delay_ms = None;
    let session = create_session("k2".into(), NOW, None).unwrap();
    let mut k = Kernel::new(config, session, 0, Vec::new()).unwrap();
    let hi = Message::user("u1", vec![ContentBlock::text("hi")]);
    k.send(NOW, hi, InboxTarget::NextTurn, true).unwrap();
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    k.model_chunk(
        NOW,
        attempt,
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
    )
    .unwrap();
    for i in 0..10 {
        k.model_chunk(
            NOW + i * 100,
            attempt,
            StreamChunk::TextDelta {
                index: 0,
                text: "x".into(),
            },
        )
        .unwrap();
        while let Some(e) = k.poll() {
            assert!(!matches!(e, Effect::Persist { .. }), "{e:?}");
        }
    }
    assert_eq!(k.poll_timeout(), None);
}

/// `SideCollector` folds a side call (`Ask::Model`): text and usage, a
/// failing finish is an error, a stream without a finish is an error.
#[test]
fn side_collector_folds_a_side_call() {
    use dsh_core::{LlmFailure, TokenUsage};
    use dsh_runtime::SideCollector;
    let mut c = SideCollector::new();
    assert!(!c.push(StreamChunk::TextDelta {
        index: 0,
        text: "sum".into()
    }));
    assert!(!c.push(StreamChunk::TextDelta {
        index: 0,
        text: "mary".into(),
    }));
    let usage = TokenUsage::new(3, 1);
    assert!(!c.push(StreamChunk::usage(usage)));
    assert!(c.push(StreamChunk::finish(FinishReason::Stop)));
    let r = c.finish().unwrap();
    assert_eq!(r.text, "summary");
    assert_eq!(r.usage.unwrap().input_tokens, 3);

    let mut c = SideCollector::new();
    assert!(c.push(StreamChunk::finish(FinishReason::Error {
        failure: LlmFailure::new("RATE_LIMITED", "slow down"),
    })));
    assert_eq!(c.finish().unwrap_err(), "RATE_LIMITED: slow down");
    let mut c = SideCollector::new();
    assert!(!c.push(StreamChunk::TextDelta {
        index: 0,
        text: "x".into(),
    }));
    assert!(c.finish().is_err());
}

/// The last turn ended in error `code` with a message containing `needle`.
fn assert_turn_error(k: &Kernel, code: &str, needle: &str) {
    let reason = k.summary().reason.expect("the turn ended");
    let v = serde_json::to_value(&reason).unwrap();
    assert_eq!(v["kind"], "error", "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message}");
}

/// SM-14 extended: a write that fails while a response streams
/// (the write-behind of W2/W3) ends the stream and the turn with
/// `FLUSH_FAILED`; what streamed before the failure stays in the log.
#[test]
fn a_failed_write_while_a_response_streams_ends_the_turn_with_flush_failed() {
    let mut k = kernel(Vec::new());
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    k.model_chunk(NOW, attempt, StreamChunk::block_start(0, "text"))
        .unwrap();
    for text in ["kept ", "text"] {
        let chunk = StreamChunk::TextDelta {
            index: 0,
            text: text.into(),
        };
        k.model_chunk(NOW, attempt, chunk).unwrap();
    }
    assert!(
        k.poll().is_none(),
        "nothing is due before the window closes"
    );
    k.handle_timeout(NOW + 200, NOW + 200);
    let mut effects = Vec::new();
    let mut failed = false;
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { checkpoint, .. } if !failed => {
                assert_eq!(checkpoint, None, "the write-behind");
                failed = true;
                k.persisted(NOW + 200, Err("No space left on device".into()))
                    .unwrap();
            }
            Effect::Persist { .. } => k.persisted(NOW + 200, Ok(())).unwrap(),
            other => effects.push(other),
        }
    }
    assert!(failed, "a write-behind was due");
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::CancelModel { attempt: a } if *a == attempt)),
        "the stream is stopped: {effects:?}"
    );
    let late = StreamChunk::TextDelta {
        index: 0,
        text: "late".into(),
    };
    assert!(
        k.model_chunk(NOW + 201, attempt, late)
            .unwrap_err()
            .is_stale()
    );
    assert_turn_error(&k, "FLUSH_FAILED", "No space left on device");
    let log: String = k.session().events().iter().map(|e| e.to_json()).collect();
    assert!(log.contains("kept "), "accepted text stays in the log");
    assert!(!log.contains("late"));
    assert!(k.is_idle());
    // The retry at the turn's end succeeded: nothing is left unsaved.
    assert_eq!(k.summary().store_error, None);
}

/// A failed write of the turn's end is published before the
/// agent reports idle, and the summary carries it until a write succeeds,
/// so a front end never reports a turn as saved when it is not.
#[test]
fn a_failed_turn_end_write_is_reported_before_idle_and_in_the_summary() {
    let mut k = kernel(Vec::new());
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    for c in [
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: "answer".into(),
        },
        StreamChunk::block_end(0, ContentBlock::text("answer")),
        StreamChunk::finish(FinishReason::Stop),
    ] {
        k.model_chunk(NOW, attempt, c).unwrap();
    }
    k.model_end(NOW, attempt).unwrap();
    let mut order = Vec::new();
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { checkpoint, .. } => {
                order.push(format!("persist {checkpoint:?}"));
                k.persisted(NOW, Err("No space left on device".into()))
                    .unwrap();
            }
            Effect::Publish(AgentEvent::Error(e)) => order.push(format!("error {e}")),
            Effect::Publish(AgentEvent::Status(s)) => order.push(format!("status {s:?}")),
            _ => {}
        }
    }
    let error = order
        .iter()
        .position(|s| s.starts_with("error ") && s.contains("No space left"))
        .unwrap_or_else(|| panic!("the failure is published: {order:?}"));
    let idle = order
        .iter()
        .position(|s| s == "status Idle")
        .unwrap_or_else(|| panic!("idle is published: {order:?}"));
    assert!(error < idle, "the failure comes before idle: {order:?}");
    assert!(k.is_idle());
    let summary = k.summary();
    let store_error = summary
        .store_error
        .expect("the summary reports the failure");
    assert!(
        store_error.contains("No space left on device"),
        "{store_error}"
    );
    // The next write that succeeds (the next turn's first checkpoint)
    // writes the rest and clears it.
    let next = Message::user("u2", vec![ContentBlock::text("again")]);
    k.send(NOW + 1, next, InboxTarget::NextTurn, true).unwrap();
    let fx = drain(&mut k, NOW + 1);
    assert!(started_model(&fx).is_some());
    assert_eq!(k.summary().store_error, None);
}

/// A kernel like [`kernel`] with `edit` applied to its config.
fn kernel_with(edit: impl FnOnce(&mut AgentConfig)) -> Kernel {
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::untyped(
            "slow",
            "slow",
            json!({"type":"object"}),
        ))
        .unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config.tools = tools;
    config.ids = IdMode::Sequential;
    edit(&mut config);
    let session = create_session("k1".into(), NOW, None).unwrap();
    let mut k = Kernel::new(config, session, 0, Vec::new()).unwrap();
    let hi = Message::user("u1", vec![ContentBlock::text("hi")]);
    k.send(NOW, hi, InboxTarget::NextTurn, true).unwrap();
    k
}

/// One model response is bounded (text, reasoning and tool
/// arguments together); past the bound the stream is stopped and the turn
/// ends in error `RESPONSE_TOO_LARGE`, keeping what streamed before.
#[test]
fn a_response_past_the_byte_cap_ends_the_turn_with_response_too_large() {
    let mut k = kernel_with(|c| c.max_response_bytes = 1_000);
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    let mut sent = 0;
    for (index, block_type) in [(0, "reasoning"), (1, "text"), (2, "tool-call")] {
        k.model_chunk(NOW, attempt, StreamChunk::block_start(index, block_type))
            .unwrap();
        sent += 1;
    }
    let mut refused = None;
    // An endless stream: reasoning, text and tool arguments, 100 bytes a
    // chunk, until the kernel stops the attempt.
    for i in 0..1_000u64 {
        let fragment: String = core::iter::repeat_n('x', 100).collect();
        let chunk = match i % 3 {
            0 => StreamChunk::ReasoningDelta {
                index: 0,
                text: fragment.as_str().into(),
            },
            1 => StreamChunk::TextDelta {
                index: 1,
                text: fragment.as_str().into(),
            },
            _ => StreamChunk::ToolCallDelta {
                index: 2,
                head: dsh_core::ToolCallHead::new("c1", Some("slow")),
                arguments_delta: fragment.as_str().into(),
            },
        };
        match k.model_chunk(NOW, attempt, chunk) {
            Ok(()) => sent += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        drain(&mut k, NOW);
    }
    let refused = refused.expect("the stream is cut off");
    assert!(refused.is_stale(), "{refused}");
    assert!(sent < 1_003, "bounded: {sent} chunks accepted");
    assert_turn_error(&k, "RESPONSE_TOO_LARGE", "exceeded 1000 bytes");
    // What was accepted is in the log, and it stayed within the cap.
    let mut logged = 0;
    for e in k.session().events() {
        if e.event_type() == "assistant/chunk" {
            logged += 1;
        }
    }
    assert!(logged > 0, "accepted chunks are logged");
    assert!(logged <= sent, "{logged} logged, {sent} sent");
    assert!(k.is_idle());
}

/// A response within the cap is untouched, and the count starts again
/// for each model call.
#[test]
fn responses_within_the_byte_cap_complete() {
    let mut k = kernel_with(|c| c.max_response_bytes = 1_100);
    for turn in 0..3 {
        let fx = drain(&mut k, NOW);
        let attempt = started_model(&fx).expect("a model call");
        // 5 x (100 + 64) + 64 each for block-start, block-end and
        // `finish`: 1012 of the 1100 each time.
        k.model_chunk(NOW, attempt, StreamChunk::block_start(0, "text"))
            .unwrap();
        for _ in 0..5 {
            let chunk = StreamChunk::TextDelta {
                index: 0,
                text: "0123456789".repeat(10).as_str().into(),
            };
            k.model_chunk(NOW, attempt, chunk).unwrap();
        }
        let text = "0123456789".repeat(50);
        k.model_chunk(
            NOW,
            attempt,
            StreamChunk::block_end(0, ContentBlock::text(text)),
        )
        .unwrap();
        k.model_chunk(NOW, attempt, StreamChunk::finish(FinishReason::Stop))
            .unwrap();
        k.model_end(NOW, attempt).unwrap();
        drain(&mut k, NOW);
        let v = serde_json::to_value(k.summary().reason.unwrap()).unwrap();
        assert_eq!(v["kind"], "completed", "turn {turn}: {v}");
        let next = Message::user(format!("u{}", turn + 2), vec![ContentBlock::text("more")]);
        k.send(NOW, next, InboxTarget::NextTurn, true).unwrap();
    }
}

/// A server that always answers with a tool call cannot keep a
/// turn going: at the pre-step of step `max + 1` the turn is cancelled
/// with cause `{"kind":"hook","reason":…}` (loop.md SM-10 d, the shape the
/// reference uses to stop a runaway turn).
#[test]
fn a_turn_stops_after_max_steps_with_a_hook_abort() {
    let mut k = kernel_with(|c| c.max_steps_per_turn = Some(3));
    let mut models = 0;
    loop {
        let fx = drain(&mut k, NOW);
        if let Some(attempt) = started_model(&fx) {
            models += 1;
            assert!(models <= 3, "no request past the cap");
            let call = ContentBlock::tool_call(format!("c{models}"), "slow", "{}");
            for c in [
                StreamChunk::block_start(0, "tool-call"),
                StreamChunk::block_end(0, call),
                StreamChunk::finish(FinishReason::ToolCalls),
            ] {
                k.model_chunk(NOW, attempt, c).unwrap();
            }
            k.model_end(NOW, attempt).unwrap();
            continue;
        }
        if let Some((token, _)) = started_tool(&fx) {
            let ok = ToolOutcome::success(vec![ContentBlock::text("again")]);
            k.tool_done(NOW, token, ok, Vec::new()).unwrap();
            continue;
        }
        break;
    }
    assert_eq!(models, 3);
    assert!(k.is_idle());
    let v = serde_json::to_value(k.summary().reason.unwrap()).unwrap();
    assert_eq!(v["kind"], "aborted", "{v}");
    assert_eq!(v["reason"]["kind"], "hook", "{v}");
    let reason = v["reason"]["reason"].as_str().unwrap();
    assert!(reason.contains("max steps per turn (3)"), "{reason}");
    // Every tool call got its result before the turn ended.
    let results = k
        .session()
        .events()
        .iter()
        .filter(|e| e.event_type() == "tool/result")
        .count();
    assert_eq!(results, 3);
}

// ---------------------------------------------------------------------
// Ids continue from the log (loop.md Q12: the core never invents ids, so
// the runtime's source must not repeat one the log already holds): after
// a resume, a second resume and a fork, every message id and every retry
// chain id in the log is unique, in both `IdMode`s, with the default seed
// an embedder gets (0).

use dsh_core::LlmFailure;
use dsh_core::session::{EventData, Session};
use dsh_runtime::{Ids, fork_session, resume_session};
use std::collections::BTreeSet;

const T0: Time = Time::from_millis(1_700_000_000_000);

/// The config of the id tests: tool `t`, ids of `mode` from seed 0 (the
/// seed an embedder gets unless it sets one).
fn ids_config(mode: IdMode) -> AgentConfig {
    let mut config = config_with_tool_t(mode);
    config.seed = 0;
    config
}

/// A kernel over `session`, its events all stored, with a user-id source
/// continued the way a runtime continues it.
fn start(mode: IdMode, session: Session) -> (Kernel, Ids) {
    let stored = session.len();
    let kernel = Kernel::new(ids_config(mode), session, stored, Vec::new()).unwrap();
    let mut users = Ids::new(mode, 0);
    users.continue_after(kernel.session());
    (kernel, users)
}

/// One turn: a retried request (a retry chain id), a tool call (a tool
/// result id), then the answer (an assistant id per step).
fn turn(k: &mut Kernel, users: &mut Ids, now: &mut Time) {
    let user = Message::user(users.user_message_id(), vec![ContentBlock::text("go")]);
    k.send(*now, user, InboxTarget::NextTurn, true).unwrap();
    let mut calls = 0;
    loop {
        let mut models = Vec::new();
        let mut tools = Vec::new();
        while let Some(e) = k.poll() {
            match e {
                Effect::Persist { .. } => k.persisted(*now, Ok(())).unwrap(),
                Effect::StartModel(c) => models.push(c.attempt),
                Effect::StartTool { exec, .. } => tools.push(exec.token),
                _ => {}
            }
        }
        if let Some(attempt) = models.pop() {
            calls += 1;
            let chunks = match calls {
                1 => vec![StreamChunk::finish(FinishReason::Error {
                    failure: LlmFailure::new("SERVER", "busy"),
                })],
                2 => vec![
                    StreamChunk::block_start(0, "tool-call"),
                    StreamChunk::block_end(0, ContentBlock::tool_call("c", "t", "{}")),
                    StreamChunk::finish(FinishReason::ToolCalls),
                ],
                _ => vec![
                    StreamChunk::block_start(0, "text"),
                    StreamChunk::block_end(0, ContentBlock::text("done")),
                    StreamChunk::finish(FinishReason::Stop),
                ],
            };
            for c in chunks {
                *now += 1;
                k.model_chunk(*now, attempt, c).unwrap();
            }
            k.model_end(*now, attempt).unwrap();
        } else if let Some(token) = tools.pop() {
            let out = ToolOutcome::success(vec![ContentBlock::text("ok")]);
            k.tool_done(*now, token, out, Vec::new()).unwrap();
        } else if let Some(deadline) = k.poll_timeout() {
            k.handle_timeout(*now, deadline);
            *now = k.now();
        } else {
            break;
        }
    }
    assert!(k.is_idle(), "the turn ended");
    assert_eq!(calls, 3, "a retried call, a tool step and the answer");
}

/// Asserts every message id of `session` occurs once and each retry
/// chain (one per turn) has its own id.
fn assert_ids_unique(session: &Session, turns: usize, what: &str) {
    let mut messages = BTreeSet::new();
    let mut chains = BTreeSet::new();
    let mut retries = 0;
    let mut count = 0;
    for e in session.events() {
        if let Some(m) = e.data().message() {
            count += 1;
            assert!(
                messages.insert(m.id.as_str().to_owned()),
                "{what}: message id {} repeats",
                m.id
            );
        }
        if let EventData::LlmRetry(r) = e.data() {
            retries += 1;
            chains.insert(r.retry_id.clone().expect("a chain id").into_string());
        }
    }
    // user, assistant (tool call), tool result, assistant (answer)
    assert_eq!(count, 4 * turns, "{what}: messages per turn");
    // One retry (one chain) per turn, each chain with its own id.
    assert_eq!(retries, turns, "{what}: retries");
    assert_eq!(
        chains.len(),
        turns,
        "{what}: retry chain ids repeat: {chains:?}"
    );
}

fn resume(k: &Kernel, now: Time) -> Session {
    let s = k.session();
    resume_session(s.header().clone(), s.events().to_vec(), now).unwrap()
}

fn continues_after_resume_and_fork(mode: IdMode) {
    let what = format!("{mode:?}");
    let mut now = T0;
    let (mut k, mut users) = start(mode, create_session("s1".into(), now, None).unwrap());
    turn(&mut k, &mut users, &mut now);
    assert_ids_unique(k.session(), 1, &what);

    // Resume twice, a turn each time (V30: turn numbering continues; the
    // ids must too).
    for n in 2..=3 {
        let session = resume(&k, now);
        (k, users) = start(mode, session);
        turn(&mut k, &mut users, &mut now);
        assert_ids_unique(k.session(), n, &format!("{what} after resume {}", n - 1));
    }

    // Two forks of the same parent at its end, a turn in each.
    let parent = k.session().clone();
    for child in ["f1", "f2"] {
        let session = fork_session(
            parent.header().clone(),
            parent.events().to_vec(),
            None,
            child.into(),
            now,
        )
        .unwrap();
        let (mut k, mut users) = start(mode, session);
        turn(&mut k, &mut users, &mut now);
        assert_ids_unique(k.session(), 4, &format!("{what} fork {child}"));
    }
}

#[test]
fn sequential_ids_continue_after_resume_and_fork() {
    continues_after_resume_and_fork(IdMode::Sequential);
}

#[test]
fn uuid_ids_from_the_default_seed_continue_after_resume_and_fork() {
    continues_after_resume_and_fork(IdMode::Uuid);
}

/// In debug builds (and so in tests) every provider stream
/// is checked (streaming.md 2.5); a G-3 violation stops the stream and the
/// step ends in error `INVARIANT` naming the rule.
#[test]
fn g3_a_broken_provider_stream_ends_the_step_with_invariant() {
    let mut k = kernel_with(|c| assert!(c.validate_streams, "on in debug builds"));
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    let bare = StreamChunk::TextDelta {
        index: 0,
        text: "x".into(),
    };
    k.model_chunk(NOW, attempt, bare).unwrap();
    let fx = drain(&mut k, NOW);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::CancelModel { attempt: a } if *a == attempt)),
        "{fx:?}"
    );
    assert_turn_error(
        &k,
        "INVARIANT",
        "G-3: text-delta for index 0, which is not open",
    );
    let late = StreamChunk::finish(FinishReason::Stop);
    assert!(k.model_chunk(NOW, attempt, late).unwrap_err().is_stale());
    assert!(k.is_idle());
}

/// With the option off the same stream is taken as the reference's
/// runtime takes it (the assembler is lenient).
#[test]
fn g3_with_validation_off_a_broken_stream_completes() {
    let mut k = kernel_with(|c| c.validate_streams = false);
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    for c in [
        StreamChunk::TextDelta {
            index: 0,
            text: "x".into(),
        },
        StreamChunk::finish(FinishReason::Stop),
    ] {
        k.model_chunk(NOW, attempt, c).unwrap();
    }
    k.model_end(NOW, attempt).unwrap();
    drain(&mut k, NOW);
    let v = serde_json::to_value(k.summary().reason.unwrap()).unwrap();
    assert_eq!(v["kind"], "completed", "{v}");
}

/// AC-9: a successful finish with no block is an adapter bug (the adapter
/// must send `EMPTY_RESPONSE`); the step ends in `INVARIANT`.
#[test]
fn ac9_an_empty_successful_stream_ends_the_step_with_invariant() {
    let mut k = kernel_with(|_| {});
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    k.model_chunk(NOW, attempt, StreamChunk::finish(FinishReason::Stop))
        .unwrap();
    drain(&mut k, NOW);
    assert_turn_error(
        &k,
        "INVARIANT",
        "AC-9: successful finish with no content block",
    );
}

/// Warnings (TC-1..TC-3) do not end the step: a tool call with an empty
/// name and truncated arguments, ended by `max-tokens` (Q-26: no tool
/// runs), completes.
#[test]
fn tc_warnings_do_not_end_the_step() {
    let v = one_response([
        StreamChunk::block_start(0, "text"),
        StreamChunk::block_end(0, ContentBlock::text("cut")),
        StreamChunk::block_start(1, "tool-call"),
        StreamChunk::block_end(1, ContentBlock::tool_call("", "", "{\"a\":")),
        StreamChunk::finish(FinishReason::MaxTokens),
    ]);
    assert_ne!(v["error"]["code"], "INVARIANT", "{v}");
}

/// Streams `chunks` as the first model response of a fresh kernel; the
/// turn's end reason, as JSON, once the kernel is idle.
fn one_response<const N: usize>(chunks: [StreamChunk; N]) -> serde_json::Value {
    let mut k = kernel_with(|_| {});
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    for c in chunks {
        k.model_chunk(NOW, attempt, c).unwrap();
    }
    k.model_end(NOW, attempt).unwrap();
    drain(&mut k, NOW);
    assert!(k.is_idle());
    serde_json::to_value(k.summary().reason.unwrap()).unwrap()
}

/// G-7 under `max-tokens`: the reference's recording
/// `max-tokens-continue` ends with the cut tool call still open; the
/// kernel lets it through (BB-3 drops the call) and the turn ends as the
/// loop says, not in `INVARIANT`.
#[test]
fn g7_a_max_tokens_finish_may_leave_a_cut_tool_call_open() {
    let v = one_response([
        StreamChunk::block_start(0, "text"),
        StreamChunk::text_delta(0, "Starting the write now."),
        StreamChunk::block_end(0, ContentBlock::text("Starting the write now.")),
        StreamChunk::block_start(1, "tool-call"),
        StreamChunk::tool_call_delta(1, "call-cut", Some("bash"), "{\"command\":\"echo demo > "),
        StreamChunk::finish(FinishReason::MaxTokens),
    ]);
    assert_ne!(v["error"]["code"], "INVARIANT", "{v}");
}

/// Steers once at turn-stopping (loop.md SM-5), as a Stop hook does.
struct SteerOnce(bool);

impl Plugin for SteerOnce {
    fn name(&self) -> &str {
        "steer-once"
    }
    fn seams(&self) -> Seams {
        Seams::TURN_STOPPING
    }
    fn turn_stopping(&mut self, cx: &mut Cx<'_>, _turn: u64) -> Flow<()> {
        if !self.0 {
            self.0 = true;
            cx.steer(Message::user("s1", vec![ContentBlock::text("one more")]));
        }
        Flow::Next(())
    }
}

fn answer_text(k: &mut Kernel, attempt: AttemptId, text: &str) {
    for c in [
        StreamChunk::block_start(0, "text"),
        StreamChunk::text_delta(0, text),
        StreamChunk::block_end(0, ContentBlock::text(text)),
        StreamChunk::finish(FinishReason::Stop),
    ] {
        k.model_chunk(NOW, attempt, c).unwrap();
    }
    k.model_end(NOW, attempt).unwrap();
}

#[test]
fn a_steer_at_turn_stopping_continues_the_same_turn() {
    let mut k = kernel(vec![Box::new(SteerOnce(false))]);
    let a = started_model(&drain(&mut k, NOW)).expect("step 1");
    answer_text(&mut k, a, "first");
    // The steer lands before the core decides: a second step, same turn.
    let a = started_model(&drain(&mut k, NOW)).expect("step 2 of turn 1");
    answer_text(&mut k, a, "second");
    drain(&mut k, NOW);
    assert!(k.is_idle());
    let types: Vec<&str> = k
        .session()
        .events()
        .iter()
        .map(|e| e.event_type())
        .collect();
    assert_eq!(
        types.iter().filter(|t| **t == "turn/start").count(),
        1,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| **t == "step/start").count(),
        2,
        "{types:?}"
    );
}

/// A guard plugin (TL-9 step 7): denies tool `slow` with a reason.
struct NoSlow;

impl Plugin for NoSlow {
    fn name(&self) -> &str {
        "no-slow"
    }
    fn seams(&self) -> Seams {
        Seams::TOOL_GUARD
    }
    fn tool_guard(
        &mut self,
        _cx: &mut Cx<'_>,
        exec: &dsh_core::agent::ToolExecution,
        value: Option<String>,
    ) -> Flow<Option<String>> {
        if exec.name == "slow" {
            return Flow::Done(Some(String::from("slow tools are off")));
        }
        Flow::Next(value)
    }
}

#[test]
fn a_guard_plugin_denies_a_call_before_its_body() {
    // The seam comes from the seam table: the kernel raises it for the
    // plugin that claims it, and a denial never reaches the body.
    let mut k = kernel(vec![Box::new(NoSlow)]);
    let fx = drain(&mut k, NOW);
    let attempt = started_model(&fx).expect("a model call");
    for c in tool_call() {
        k.model_chunk(NOW, attempt, c).unwrap();
    }
    k.model_end(NOW, attempt).unwrap();
    let fx = drain(&mut k, NOW);
    assert!(started_tool(&fx).is_none(), "the body must not run");
    let result = k
        .session()
        .events()
        .iter()
        .find(|e| e.event_type() == "tool/result")
        .expect("a tool result")
        .to_json();
    assert!(result.contains("Error: slow tools are off"), "{result}");
}

/// The seqs of the session events in `effects` that were published.
fn published(effects: &[Effect]) -> Vec<u64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish(AgentEvent::Event(e)) => Some(e.seq()),
            _ => None,
        })
        .collect()
}

#[test]
fn publishing_turned_on_again_starts_at_the_log_length_and_repeats_nothing() {
    // Found by the kernel fuzz target: an event appended while publishing
    // was on but not yet drained came out after publishing went off and on
    // again, behind the point a new subscriber reads the log up to.
    let mut k = kernel(Vec::new());
    k.set_publish_events(true);
    let mut seen = Vec::new();
    // Up to the first write: the events so far are appended, not all
    // drained.
    loop {
        match k.poll().expect("a persist before the request") {
            Effect::Persist { .. } => break,
            other => seen.push(other),
        }
    }
    let mut seqs = published(&seen);
    // A message sent while the write is pending is appended at once; its
    // event is published once the write is reported.
    let more = Message::user("u2", vec![ContentBlock::text("more")]);
    k.send(NOW, more, InboxTarget::NextStep, false).unwrap();
    k.set_publish_events(false);
    k.set_publish_events(true);
    let from = k.session().len();
    k.persisted(NOW, Ok(())).unwrap();
    let after = published(&drain(&mut k, NOW));
    assert!(
        after.iter().all(|s| *s >= from),
        "published {after:?} after turning on at length {from}"
    );
    seqs.extend(after);
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(seqs, sorted, "published out of order or twice");
}
