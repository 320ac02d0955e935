//! The shared effect executor (`dsh_runtime::exec`): what every runtime
//! gets from `carry` and `feed` with only its I/O written by itself.

use dsh_core::Time;
use dsh_runtime::{AskId, AttemptId, ToolToken};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::agent::{ModelCall, ToolExecution};
use dsh_core::session::SessionEvent;
use dsh_core::{ContentBlock, FinishReason, GenerateOptions, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::exec::{self, Carry, Dispatch, Input, Job, Jobs};
use dsh_runtime::{AgentConfig, AgentEvent, IdMode, InboxTarget, Kernel, create_session};
use serde_json::{Value, json};

const NOW: Time = Time::from_millis(1_000_000);

fn kernel() -> Kernel {
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::untyped("t", "t", json!({"type":"object"})))
        .unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config.tools = tools;
    config.ids = IdMode::Sequential;
    let session = create_session("x1".into(), NOW, None).unwrap();
    Kernel::new(config, session, 0, Vec::new()).unwrap()
}

/// A runtime's I/O that records what it is asked to do.
#[derive(Default)]
struct Rec {
    models: Vec<ModelCall>,
    tools: Vec<ToolExecution>,
    stopped: Vec<Job>,
    done: Vec<Job>,
    written: Vec<SessionEvent>,
    /// Writes are left running (`persist` returns `None`).
    slow_store: bool,
    pending_write: Option<usize>,
    /// Starts fail with this message.
    refuse: Option<String>,
    commands: Vec<(u64, Result<Value, String>)>,
    events: Vec<AgentEvent>,
    /// What `persisted` was last told.
    store_error: Option<String>,
}

impl Dispatch for Rec {
    fn now(&mut self) -> Time {
        NOW
    }
    fn start_model(&mut self, call: ModelCall) -> Result<(), String> {
        if let Some(e) = &self.refuse {
            return Err(e.clone());
        }
        self.models.push(call);
        Ok(())
    }
    fn start_tool(&mut self, exec: ToolExecution, _timeout_ms: Option<u64>) -> Result<(), String> {
        if let Some(e) = &self.refuse {
            return Err(e.clone());
        }
        self.tools.push(exec);
        Ok(())
    }
    fn start_side(&mut self, _id: AskId, _request: GenerateOptions) -> Result<(), String> {
        Err("no side calls here".into())
    }
    fn stop(&mut self, job: Job) {
        self.stopped.push(job);
    }
    fn done(&mut self, job: Job) {
        self.done.push(job);
    }
    fn persist(&mut self, events: &[SessionEvent]) -> Option<Result<(), String>> {
        if self.slow_store {
            self.pending_write = Some(events.len());
            self.written.extend_from_slice(events);
            return None;
        }
        self.written.extend_from_slice(events);
        Some(Ok(()))
    }
    fn persisted(&mut self, store_error: Option<&str>) {
        self.store_error = store_error.map(String::from);
    }
    fn command_done(&mut self, id: u64, result: &Result<Value, String>) {
        self.commands.push((id, result.clone()));
    }
    fn publish(&mut self, event: AgentEvent) {
        self.events.push(event);
    }
}

fn hi(k: &mut Kernel) {
    let m = Message::user("u1", vec![ContentBlock::text("hi")]);
    k.send(NOW, m, InboxTarget::NextTurn, true).unwrap();
}

fn feed_stream(k: &mut Kernel, d: &mut Rec, attempt: AttemptId, chunks: Vec<StreamChunk>) {
    for chunk in chunks {
        exec::feed(k, d, Input::Chunk { attempt, chunk }).unwrap();
    }
    exec::feed(k, d, Input::ModelEnd { attempt }).unwrap();
}

fn text() -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: "hello".into(),
        },
        StreamChunk::block_end(0, ContentBlock::text("hello")),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

fn tool_call() -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::block_end(0, ContentBlock::tool_call("c1", "t", "{}")),
        StreamChunk::finish(FinishReason::ToolCalls),
    ]
}

#[test]
fn a_tool_turn_runs_through_carry_and_feed() {
    let mut k = kernel();
    let mut d = Rec::default();
    hi(&mut k);
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    let attempt = d.models.pop().expect("a model call").attempt;
    feed_stream(&mut k, &mut d, attempt, tool_call());
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    let exec_ = d.tools.pop().expect("a tool body");
    let outcome = ToolOutcome::success(vec![ContentBlock::text("ok")]);
    let input = Input::ToolDone {
        token: exec_.token,
        outcome: Box::new(outcome),
        events: Vec::new(),
    };
    exec::feed(&mut k, &mut d, input).unwrap();
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    let attempt2 = d.models.pop().expect("the second step").attempt;
    feed_stream(&mut k, &mut d, attempt2, text());
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    assert!(k.is_idle());
    // The whole log was written, in order, and every job was closed.
    assert_eq!(d.written.len() as u64, k.session().len());
    assert_eq!(d.written, k.session().events());
    assert_eq!(
        d.done,
        [
            Job::Model(attempt),
            Job::Tool(exec_.token),
            Job::Model(attempt2)
        ]
    );
    assert!(d.events.iter().all(|e| !matches!(e, AgentEvent::Error(_))));
}

#[test]
fn a_start_that_fails_is_answered_to_the_kernel() {
    let mut k = kernel();
    let mut d = Rec {
        refuse: Some("no threads left".into()),
        ..Rec::default()
    };
    hi(&mut k);
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    // The model call could not start: the turn ended in error, not stalled.
    assert!(
        k.is_idle(),
        "the turn must not wait for a stream that never started"
    );
    let log: String = k.session().events().iter().map(|e| e.to_json()).collect();
    assert!(log.contains("no threads left"), "{log}");
}

#[test]
fn a_write_left_running_holds_every_later_effect() {
    let mut k = kernel();
    let mut d = Rec {
        slow_store: true,
        ..Rec::default()
    };
    hi(&mut k);
    // SM-14: the model call waits for the checkpoint's write.
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Writing);
    assert!(d.models.is_empty());
    assert!(d.pending_write.is_some());
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    assert!(d.models.is_empty(), "nothing is released before `written`");
    d.slow_store = false;
    exec::written(&mut k, &mut d, Ok(()));
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    assert_eq!(d.models.len(), 1);
}

#[test]
fn a_failed_write_is_kept_until_one_succeeds() {
    let mut k = kernel();
    let mut d = Rec {
        slow_store: true,
        ..Rec::default()
    };
    hi(&mut k);
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Writing);
    exec::written(&mut k, &mut d, Err("disk full".into()));
    let kept = k.store_error().expect("the failure is kept");
    assert!(kept.contains("disk full"), "{kept}");
    assert_eq!(d.store_error.as_deref(), Some(kept));
    d.slow_store = false;
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    assert!(
        d.models.is_empty(),
        "SM-14: no request after a failed write"
    );
    assert!(k.is_idle());
    // The turn's end was written: the failure is cleared, and the runtime
    // was told so.
    assert_eq!(k.store_error(), None);
    assert_eq!(d.store_error, None);
}

#[test]
fn commands_are_answered_by_id() {
    let mut k = kernel();
    let mut d = Rec::default();
    let first = k.command(NOW, "one", json!({})).unwrap();
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    let second = k.command(NOW, "two", json!({})).unwrap();
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    assert_ne!(first, second);
    let ids: Vec<u64> = d.commands.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [first, second]);
    // The published events carry the same ids.
    let published: Vec<u64> = d
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::CommandDone { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(published, [first, second]);
}

#[test]
fn a_cancelled_stream_is_stopped_and_its_chunks_are_stale() {
    let mut k = kernel();
    let mut d = Rec::default();
    hi(&mut k);
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    let attempt = d.models.pop().unwrap().attempt;
    let cause = dsh_runtime::CancelCause::User;
    exec::feed(
        &mut k,
        &mut d,
        Input::Cancel {
            cause,
            keep_inbox: false,
        },
    )
    .unwrap();
    assert_eq!(exec::carry(&mut k, &mut d), Carry::Drained);
    assert!(d.stopped.contains(&Job::Model(attempt)));
    // A late chunk is refused as stale and not published as an error.
    let late = exec::feed(
        &mut k,
        &mut d,
        Input::Chunk {
            attempt,
            chunk: StreamChunk::finish(FinishReason::Stop),
        },
    );
    assert!(late.is_err_and(|e| e.is_stale()));
    assert!(d.events.iter().all(|e| !matches!(e, AgentEvent::Error(_))));
}

#[test]
fn jobs_keep_a_tool_until_it_is_done() {
    let mut jobs = Jobs::new();
    let (a, b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let (a2, b2) = (a.clone(), b.clone());
    jobs.insert(Job::Model(AttemptId::new(1)), move || {
        a2.fetch_add(1, Ordering::SeqCst);
    });
    jobs.insert(Job::Tool(ToolToken::new(1)), move || {
        b2.fetch_add(1, Ordering::SeqCst);
    });
    jobs.stop(Job::Model(AttemptId::new(1)));
    jobs.stop(Job::Model(AttemptId::new(1)));
    assert_eq!(a.load(Ordering::SeqCst), 1, "a stopped stream is forgotten");
    jobs.stop(Job::Tool(ToolToken::new(1)));
    assert_eq!(jobs.len(), 1, "the body stays until its result comes");
    jobs.stop_all();
    assert_eq!(b.load(Ordering::SeqCst), 2);
    jobs.done(Job::Tool(ToolToken::new(1)));
    assert!(jobs.is_empty());
}
