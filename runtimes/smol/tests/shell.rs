//! The smol shell against the mock DeepSeek server over real HTTP: a tool
//! turn end to end, cancellation during a stream, a provider error with a
//! retry, resume and fork.

mod common;

use dsh_core::Time;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use dsh_core::agent::retry::{Backoff, DEFAULT_RETRYABLE_CODES, RetryPolicy};
use dsh_core::agent::tools::ToolRegistry;
use dsh_core::agent::{
    Agent as Core, AgentConfig as CoreConfig, AgentOptions, AgentStatus, Output,
};
use dsh_core::session::{
    AbortCause, EventData, Session, SessionEvent, SessionHeader, TurnEndReason,
};
use dsh_core::{ContentBlock, Message, SessionId, StreamChunk};
use dsh_deepseek::{CancelToken, DeepSeekClient};
use dsh_smol::{Agent, AgentEvent};
use dsh_tools::{Tool, ToolCallRequest, ToolContext, Workspace};
use serde_json::{Value, json};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// Every event a subscription has delivered so far.
fn drain_events(sub: &dsh_smol::Subscription) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    while let Some(e) = sub.try_next() {
        out.push(e);
    }
    out
}

fn session_events(events: &[AgentEvent]) -> Vec<SessionEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Event(e) => Some((**e).clone()),
            _ => None,
        })
        .collect()
}

/// The log as JSON values with `time` removed and every `id` renamed by
/// first appearance, so two runs compare modulo time and ids.
fn normalized(events: &[SessionEvent]) -> Vec<Value> {
    fn walk(v: &mut Value, ids: &mut HashMap<String, String>) {
        match v {
            Value::Object(map) => {
                map.remove("time");
                for (k, child) in map.iter_mut() {
                    if k == "id"
                        && let Value::String(s) = child
                    {
                        let n = ids.len() + 1;
                        let name = ids.entry(s.clone()).or_insert_with(|| format!("ID{n}"));
                        *s = name.clone();
                    } else {
                        walk(child, ids);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, ids)),
            _ => {}
        }
    }
    let mut ids = HashMap::new();
    events
        .iter()
        .map(|e| {
            let mut v: Value = serde_json::from_str(&e.to_json()).expect("event json");
            walk(&mut v, &mut ids);
            v
        })
        .collect()
}

/// The same exchange driven straight through the core: the blocking
/// DeepSeek client on the same mock server, the echo tool called inline.
fn core_level_run(server: &dsh_deepseek::mock::MockServer) -> Vec<SessionEvent> {
    let client = DeepSeekClient::with_options(deepseek_config(server.url()), client_options())
        .expect("client");
    let mut tools = ToolRegistry::new();
    tools.register(Echo.definition()).expect("register");
    let config = {
        let mut config = CoreConfig::default();
        config.options = {
            let mut options = AgentOptions::default();
            options.provider = Some("deepseek".into());
            options.model = Some(MODEL.into());
            options
        };
        config.tools = tools;
        config.retry_executor = true;
        // The shell answers `prepare` with the provider's (LC-15, the
        // context window from the client's catalog); every other seam
        // keeps the default.
        config.seams = dsh_core::agent::Seams::PREPARE;
        config
    };
    let mut core = Core::new(config, Session::new(SessionHeader::new("core-run", 0))).unwrap();
    core.followup(
        Time::from_millis(1),
        Message::user("m1", vec![ContentBlock::text("hi")]),
    )
    .unwrap();
    while let Some(out) = core.poll() {
        match out {
            Output::Hook {
                id,
                call: dsh_core::agent::HookCall::Prepare { value },
            } => {
                use dsh_smol::ModelProvider;
                let prepared = client.prepare(value.config).unwrap();
                let answer = dsh_core::agent::HookAnswer::Prepare(Ok(prepared));
                core.complete_hook(Time::from_millis(1), id, answer)
                    .unwrap();
            }
            Output::CallModel(call) => {
                for chunk in client.stream_chunks(&call.request, &CancelToken::new()) {
                    core.handle_chunk(Time::from_millis(2), call.attempt, chunk)
                        .unwrap();
                }
                core.handle_stream_end(Time::from_millis(2), call.attempt)
                    .unwrap();
            }
            Output::ExecuteTool(exec) => {
                let ctx = ToolContext::new(Workspace::new(std::env::temp_dir()).unwrap());
                let outcome = Echo.execute(&ToolCallRequest::from(&exec), &ctx);
                core.handle_tool_result(Time::from_millis(3), exec.token, outcome)
                    .unwrap();
            }
            _ => {}
        }
    }
    core.session().events().to_vec()
}

/// V02 (one tool call, then a text answer) without the chunk events.
const V02_SHAPE: [&str; 15] = [
    "agent/inbox/spliced",
    "turn/start",
    "agent/inbox/spliced",
    "step/start",
    "user/message",
    "request/header",
    "request/context",
    "assistant/message",
    "tool/call",
    "tool/result",
    "step/end",
    "step/start",
    "assistant/message",
    "step/end",
    "turn/end",
];

#[test]
fn tool_turn_end_to_end_matches_the_core_level_run() {
    let server = server(tool_turn_script());
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let (live, summary) = smol::block_on(async {
        let agent = Agent::create(config(&server), store.clone(), SessionId::new("tool-turn"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        let summary = agent.wait_idle(WAIT).await.unwrap();
        assert_eq!(agent.status(), AgentStatus::Idle);
        agent.dispose().await;
        (drain_events(&sub), summary)
    });
    assert_eq!(summary.turn, 1);
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    assert_eq!(
        summary.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((20, 2)),
        "usage of the turn's last call"
    );

    // Status running then idle around the events (LC-3).
    let statuses: Vec<AgentStatus> = live
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Status(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [AgentStatus::Running, AgentStatus::Idle]);

    let events = session_events(&live);
    let shape: Vec<String> = types(&events)
        .into_iter()
        .filter(|t| t != "assistant/chunk")
        .collect();
    assert_eq!(shape, V02_SHAPE);
    // Every seq published once, in order.
    let seqs: Vec<u64> = events.iter().map(SessionEvent::seq).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());

    // The store holds exactly what was published.
    let on_disk = stored(&store, "tool-turn");
    assert_eq!(
        on_disk
            .iter()
            .map(SessionEvent::to_json)
            .collect::<Vec<_>>(),
        events.iter().map(SessionEvent::to_json).collect::<Vec<_>>()
    );
    check_invariants(&on_disk);

    // Same events as the core driven directly, modulo time and ids.
    let reference = core_level_run(&server);
    assert_eq!(normalized(&events), normalized(&reference));

    // Message ids minted by the shell are UUID v4.
    let user_id = events
        .iter()
        .find_map(|e| match e.data() {
            EventData::UserMessage(m) => Some(m.id.as_str().to_string()),
            _ => None,
        })
        .unwrap();
    assert_eq!(user_id.len(), 36);
    assert_eq!(&user_id[14..15], "4");
}

fn fast_retries() -> RetryPolicy {
    RetryPolicy::Normal {
        max_retries: 3,
        retryable_codes: DEFAULT_RETRYABLE_CODES
            .iter()
            .map(|c| c.to_string())
            .collect(),
        backoff: {
            let mut backoff = Backoff::default();
            backoff.initial_delay_ms = 20.0;
            backoff.max_delay_ms = 50.0;
            backoff.jitter_ratio = 0.0;
            backoff
        },
    }
}

/// The smol driver waits for a kernel deadline by its distance
/// from the kernel's clock on a monotonic timer. The wall clock goes back an
/// hour between two turns; the retry of the second turn still runs after
/// its 20 ms delay (a driver that measures against the wall clock waits an
/// hour and `wait_idle` gives up).
#[test]
fn a_wall_clock_that_goes_back_does_not_delay_a_retry() {
    const T0: i64 = 1_785_000_000_000;
    let server = server(json!({"responses": [
        {"turn": {"text": ["one"]}},
        {"fault": {"kind": "http", "status": 500, "body": {"error": {"message": "boom"}}}},
        {"turn": {"text": ["two"]}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let wall = Arc::new(std::sync::atomic::AtomicI64::new(T0));
    let mut cfg = config(&server);
    cfg.retry_policy = Some(fast_retries());
    cfg.clock = dsh_smol::Clock::Manual(wall.clone());
    let summary = smol::block_on(async {
        let agent = Agent::create(cfg, store.clone(), SessionId::new("back"))
            .await
            .unwrap();
        agent.send("first").await.unwrap();
        agent.wait_idle(WAIT).await.unwrap();
        wall.store(T0 - 3_600_000, std::sync::atomic::Ordering::Relaxed);
        agent.send("second").await.unwrap();
        let s = agent.wait_idle(WAIT).await.unwrap();
        agent.dispose().await;
        s
    });
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    assert_eq!(server.requests().len(), 3, "one failed attempt, one retry");
    let events = stored(&store, "back");
    assert_eq!(
        types(&events).iter().filter(|x| *x == "llm/retry").count(),
        1
    );
    assert!(events.windows(2).all(|w| w[0].time() <= w[1].time()));
    assert!(events.iter().all(|e| e.time() >= T0));
}

#[test]
fn provider_error_is_retried_in_the_same_step() {
    let server = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 500, "body": {"error": {"message": "boom"}}}},
        {"turn": {"text": ["ok"]}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut cfg = config(&server);
    cfg.retry_policy = Some(fast_retries());
    let summary = smol::block_on(async {
        let agent = Agent::create(cfg, store.clone(), SessionId::new("retry"))
            .await
            .unwrap();
        agent.send("hi").await.unwrap();
        let s = agent.wait_idle(WAIT).await.unwrap();
        agent.dispose().await;
        s
    });
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    assert_eq!(server.requests().len(), 2, "one failed attempt, one retry");
    let events = stored(&store, "retry");
    check_invariants(&events);
    let t = types(&events);
    // R-10/R-14: the retry is logged, then started, inside one step.
    let retry = t.iter().position(|x| x == "llm/retry").expect("llm/retry");
    let started = t
        .iter()
        .position(|x| x == "llm/retry-started")
        .expect("llm/retry-started");
    assert!(retry < started);
    assert_eq!(t.iter().filter(|x| *x == "step/start").count(), 1);
    assert_eq!(t.iter().filter(|x| *x == "assistant/message").count(), 1);
    // LC-19: the failed attempt's error finish chunk is logged too.
    let first_finish = events.iter().find_map(|e| match e.data() {
        EventData::AssistantChunk(c) => match c.chunk() {
            StreamChunk::Finish { .. } => Some(serde_json::to_value(c.chunk()).unwrap()),
            _ => None,
        },
        _ => None,
    });
    let first_finish = first_finish.expect("a finish chunk");
    assert_eq!(first_finish["reason"]["kind"], "error");
    assert_eq!(first_finish["reason"]["failure"]["code"], "SERVER");
}

#[test]
fn resume_continues_turn_numbering_and_fork_copies_the_seed() {
    let server = server(json!({"perSession": true, "responses": [
        {"turn": {"text": ["one"]}},
        {"turn": {"text": ["two"]}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let id = SessionId::new("resumable");
    // Deterministic ids, so a repeat after the resume is visible.
    let config = |server: &dsh_deepseek::mock::MockServer| {
        let mut c = config(server);
        c.ids = dsh_smol::IdMode::Sequential;
        c
    };
    smol::block_on(async {
        let agent = Agent::create(config(&server), store.clone(), id.clone())
            .await
            .unwrap();
        agent.send("first").await.unwrap();
        agent.wait_idle(WAIT).await.unwrap();
        agent.dispose().await;

        let agent = Agent::resume(config(&server), store.clone(), &id)
            .await
            .unwrap();
        agent.send("second").await.unwrap();
        let s = agent.wait_idle(WAIT).await.unwrap();
        assert_eq!(s.turn, 2, "numbering continues across resume (LC-1)");
        assert_eq!(s.reason, Some(TurnEndReason::Completed));
        agent.dispose().await;

        let child = SessionId::new("child");
        let agent = Agent::fork(config(&server), store.clone(), &id, None, child.clone())
            .await
            .unwrap();
        agent.dispose().await;
    });
    let parent = stored(&store, "resumable");
    check_invariants(&parent);
    assert_eq!(turn_ends(&parent).len(), 2);
    // loop.md Q12: the ids continue after the resume (the handle's user
    // ids and the core's), none repeats.
    let ids: Vec<String> = parent
        .iter()
        .filter_map(|e| e.data().message().map(|m| m.id.to_string()))
        .collect();
    assert_eq!(ids, ["U1", "A1", "U2", "A2"]);
    // ES3: the resumed log carries the end-seed marker before turn 2.
    let t = types(&parent);
    let marker = t.iter().position(|x| x == "session/end-seed").unwrap();
    let second_turn = t
        .iter()
        .enumerate()
        .filter(|(_, x)| *x == "turn/start")
        .nth(1)
        .unwrap()
        .0;
    assert!(marker < second_turn);

    let inspection = store
        .inspect(&SessionId::new("child"), &dsh_store::Cancel::new())
        .unwrap();
    assert_eq!(
        inspection.header.parent_session,
        Some(SessionId::new("resumable"))
    );
    assert_eq!(inspection.header.seed_length, Some(parent.len() as u64));
    // F3: the seed is a copy of the parent, then the end-seed marker.
    let child_events = inspection.events;
    assert_eq!(child_events.len(), parent.len() + 1);
    assert_eq!(
        child_events[..parent.len()]
            .iter()
            .map(SessionEvent::to_json)
            .collect::<Vec<_>>(),
        parent.iter().map(SessionEvent::to_json).collect::<Vec<_>>()
    );
    let _ = Arc::clone(&store);
}

#[test]
fn approval_is_asked_and_answered() {
    let server = server(tool_turn_script());
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut cfg = config(&server);
    cfg.approval = dsh_smol::ApprovalPolicy::new(dsh_smol::ApprovalMode::Ask);
    let summary = smol::block_on(async {
        let agent = Agent::create(cfg, store.clone(), SessionId::new("approval"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        loop {
            match sub.next().await {
                Some(AgentEvent::ApprovalRequested {
                    id,
                    tool,
                    arguments,
                    ..
                }) => {
                    assert_eq!(tool, "echo");
                    assert_eq!(arguments, r#"{"text":"ping"}"#);
                    agent
                        .answer_approval(id, dsh_smol::ApprovalDecision::Deny)
                        .await;
                    break;
                }
                Some(_) => {}
                None => panic!("agent stopped"),
            }
        }
        let s = agent.wait_idle(WAIT).await.unwrap();
        agent.dispose().await;
        s
    });
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let events = stored(&store, "approval");
    check_invariants(&events);
    // TL-10: a rejected call is an error result the model sees.
    let result = events
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => Some(serde_json::to_value(&**r).unwrap()),
            _ => None,
        })
        .unwrap();
    let block = &result["message"]["content"][0];
    assert_eq!(block["isError"], true, "{result}");
    assert_eq!(
        block["content"][0]["text"],
        "Error: the user rejected tool \"echo\""
    );
}

#[test]
fn dropping_the_handle_stops_a_running_turn() {
    let server = server(json!({"responses": [
        {"fault": {"kind": "stall", "turn": {"text": ["a", "b"]}, "afterEvents": 2}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    smol::block_on(async {
        let agent = Agent::create(config(&server), store.clone(), SessionId::new("dropped"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        loop {
            match sub.next().await {
                Some(AgentEvent::Event(e)) if e.event_type() == "assistant/chunk" => break,
                Some(_) => {}
                None => panic!("agent stopped"),
            }
        }
        drop(agent);
        // The subscription ends once the task has flushed and stopped.
        while sub.next().await.is_some() {}
    });
    let events = stored(&store, "dropped");
    check_invariants(&events);
    assert_eq!(
        turn_ends(&events),
        [TurnEndReason::Aborted {
            cause: AbortCause::Disposed
        }]
    );
}

/// A store that records the event types of every appended batch.
struct Recording {
    inner: Arc<dyn dsh_store::SessionStore>,
    batches: std::sync::Mutex<Vec<Vec<String>>>,
    fail: std::sync::atomic::AtomicBool,
    /// What `append_blocks` answers.
    blocks: bool,
    /// The name of the thread each append ran on.
    threads: std::sync::Mutex<Vec<String>>,
}

impl Recording {
    /// Records the batches written to `inner`, failing every write when
    /// `fail`; `append_blocks` answers `blocks`.
    fn over(inner: Arc<dyn dsh_store::SessionStore>, fail: bool, blocks: bool) -> Arc<Self> {
        Arc::new(Recording {
            inner,
            batches: std::sync::Mutex::new(Vec::new()),
            fail: std::sync::atomic::AtomicBool::new(fail),
            blocks,
            threads: std::sync::Mutex::new(Vec::new()),
        })
    }
}

impl dsh_store::SessionStore for Recording {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn locate(&self, header: &SessionHeader) -> Option<dsh_store::Location> {
        self.inner.locate(header)
    }
    fn create(&self, header: SessionHeader) -> Result<(), dsh_store::StoreError> {
        self.inner.create(header)
    }
    fn append(&self, id: &SessionId, events: &[SessionEvent]) -> Result<(), dsh_store::StoreError> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(dsh_store::StoreError::Invalid {
                message: "disk full (test)".into(),
            });
        }
        self.batches.lock().unwrap().push(types(events));
        let thread = std::thread::current().name().unwrap_or("").to_string();
        self.threads.lock().unwrap().push(thread);
        self.inner.append(id, events)
    }
    fn append_blocks(&self) -> bool {
        self.blocks
    }
    fn load(&self, id: &SessionId) -> Result<dsh_store::Inspection, dsh_store::StoreError> {
        self.inner.load(id)
    }
    fn inspect(
        &self,
        id: &SessionId,
        cancel: &dsh_store::Cancel,
    ) -> Result<dsh_store::Inspection, dsh_store::StoreError> {
        self.inner.inspect(id, cancel)
    }
    fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &dsh_store::Cancel,
    ) -> Result<(SessionHeader, Vec<SessionEvent>), dsh_store::StoreError> {
        self.inner.read_from(id, from_seq, cancel)
    }
    fn list(
        &self,
        cancel: &dsh_store::Cancel,
    ) -> Result<Vec<SessionHeader>, dsh_store::StoreError> {
        self.inner.list(cancel)
    }
    fn list_snapshots(
        &self,
        cancel: &dsh_store::Cancel,
    ) -> Result<Vec<dsh_store::Snapshot>, dsh_store::StoreError> {
        self.inner.list_snapshots(cancel)
    }
    fn revision(&self, id: &SessionId) -> Result<dsh_store::Revision, dsh_store::StoreError> {
        self.inner.revision(id)
    }
    fn release(&self, id: &SessionId) -> Result<(), dsh_store::StoreError> {
        self.inner.release(id)
    }
}

#[test]
fn store_writes_are_batched_at_the_checkpoints() {
    let server = server(tool_turn_script());
    let dir = tempfile::tempdir().unwrap();
    let recording = Recording::over(store(dir.path()), false, true);
    let as_store: Arc<dyn dsh_store::SessionStore> = recording.clone();
    smol::block_on(async {
        let agent = Agent::create(config(&server), as_store, SessionId::new("batched"))
            .await
            .unwrap();
        agent.send("hi").await.unwrap();
        agent.wait_idle(WAIT).await.unwrap();
        agent.dispose().await;
    });
    let batches = recording.batches.lock().unwrap().clone();
    let last: Vec<&str> = batches
        .iter()
        .map(|b| b.last().map(String::as_str).unwrap_or(""))
        .collect();
    // SM-12/SM-13: writes happen only at checkpoints, never per event. The
    // hooks answer synchronously, so a step's pre-step and before-model
    // checkpoints reach the shell in one drain and coalesce into one write,
    // made before the request is dispatched: the request prefix is durable
    // before any provider I/O. Then before the tool body (the call), before
    // the second request (the result and the new step), after turn/end.
    assert_eq!(
        last,
        ["request/context", "tool/call", "step/start", "turn/end"],
        "{batches:?}"
    );
    // Nothing was written twice or left out.
    let total: usize = batches.iter().map(Vec::len).sum();
    assert_eq!(total, stored(&recording.inner, "batched").len());
}

/// A store that may block is written on the blocking pool; one that says
/// it does not (`append_blocks` false: in memory) is written in place by
/// the agent task, with no hand-off.
#[test]
fn a_store_that_does_not_block_is_written_in_place() {
    for blocks in [true, false] {
        let server = server(tool_turn_script());
        let dir = tempfile::tempdir().unwrap();
        let recording = Recording::over(store(dir.path()), false, blocks);
        let as_store: Arc<dyn dsh_store::SessionStore> = recording.clone();
        smol::block_on(async {
            let agent = Agent::create(config(&server), as_store, SessionId::new("inline"))
                .await
                .unwrap();
            agent.send("hi").await.unwrap();
            agent.wait_idle(WAIT).await.unwrap();
            agent.dispose().await;
        });
        let threads = recording.threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 4, "{threads:?}");
        // The `blocking` crate names its pool's threads `blocking-<n>`.
        let on_pool = threads.iter().filter(|t| t.starts_with("blocking")).count();
        let expected = if blocks { threads.len() } else { 0 };
        assert_eq!(on_pool, expected, "append_blocks {blocks}: {threads:?}");
        check_invariants(&stored(&recording.inner, "inline"));
    }
}

#[test]
fn a_failed_write_before_the_model_stops_the_request() {
    let server = server(tool_turn_script());
    let dir = tempfile::tempdir().unwrap();
    let recording = Recording::over(store(dir.path()), true, true);
    let as_store: Arc<dyn dsh_store::SessionStore> = recording.clone();
    let (summary, live) = smol::block_on(async {
        let agent = Agent::create(config(&server), as_store, SessionId::new("failing"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        let s = agent.wait_idle(WAIT).await.unwrap();
        agent.dispose().await;
        (s, drain_events(&sub))
    });
    // SM-14: the request is never dispatched; the turn ends in error.
    assert_eq!(server.requests().len(), 0);
    match summary.reason {
        Some(TurnEndReason::Error { error }) => {
            assert!(error.message.contains("disk full (test)"), "{error:?}")
        }
        other => panic!("expected an error turn end, got {other:?}"),
    }
    assert!(
        live.iter()
            .any(|e| matches!(e, AgentEvent::Error(m) if m.contains("session store write failed")))
    );
    // The log the agent kept is still complete and valid.
    let events = session_events(&live);
    check_invariants(&events);
}

/// Blocks until cancelled (or 30 s); records that it started and that it
/// saw the cancel.
struct Block {
    started: Arc<std::sync::atomic::AtomicBool>,
    saw_cancel: Arc<std::sync::atomic::AtomicBool>,
}

impl Tool for Block {
    fn definition(&self) -> dsh_core::agent::tools::ToolDefinition {
        dsh_core::agent::tools::ToolDefinition::untyped("block", "Block", json!({"type":"object"}))
    }

    fn execute(
        &self,
        _call: &ToolCallRequest,
        ctx: &ToolContext,
    ) -> dsh_core::agent::tools::ToolOutcome {
        self.started
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if ctx.cancel.wait_timeout(Duration::from_secs(30)) {
            self.saw_cancel
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        dsh_core::agent::tools::ToolOutcome::success(vec![ContentBlock::text("finished")])
    }
}

#[test]
fn cancel_during_a_tool_body_aborts_it() {
    let server = server(json!({"perSession": true, "responses": [
        {"turn": {"toolCalls": [{"id": "c1", "name": "block", "arguments": ["{}"]}]}},
        {"turn": {"text": ["never"]}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let saw_cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut cfg = config(&server);
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    cfg.tools.insert(Box::new(Block {
        started: started.clone(),
        saw_cancel: saw_cancel.clone(),
    }));
    let summary = smol::block_on(async {
        let agent = Agent::create(cfg, store.clone(), SessionId::new("tool-cancel"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        loop {
            match sub.next().await {
                Some(AgentEvent::Event(e)) if e.event_type() == "tool/call" => break,
                Some(_) => {}
                None => panic!("agent stopped"),
            }
        }
        // The body is running on the blocking pool.
        while !started.load(std::sync::atomic::Ordering::SeqCst) {
            smol::Timer::after(Duration::from_millis(2)).await;
        }
        agent
            .cancel(dsh_core::agent::CancelCause::User, false)
            .await;
        let s = agent
            .wait_idle(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        agent.dispose().await;
        s
    });
    assert_eq!(
        summary.reason,
        Some(TurnEndReason::Aborted {
            cause: AbortCause::User
        })
    );
    // The body was told to stop (its token), not left to run 30 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !saw_cancel.load(std::sync::atomic::Ordering::SeqCst)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(saw_cancel.load(std::sync::atomic::Ordering::SeqCst));
    let events = stored(&store, "tool-cancel");
    check_invariants(&events);
    // V13: the running call gets an aborted result; one request only.
    assert_eq!(server.requests().len(), 1);
    let result = events
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => Some(serde_json::to_value(&**r).unwrap()),
            _ => None,
        })
        .expect("a tool/result for the running call");
    assert_eq!(result["message"]["content"][0]["isError"], true, "{result}");
}

#[test]
fn dispose_cancels_a_pending_approval() {
    let server = server(tool_turn_script());
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut cfg = config(&server);
    cfg.approval = dsh_smol::ApprovalPolicy::new(dsh_smol::ApprovalMode::Ask);
    smol::block_on(async {
        let agent = Agent::create(cfg, store.clone(), SessionId::new("pending"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        loop {
            match sub.next().await {
                Some(AgentEvent::ApprovalRequested { .. }) => break,
                Some(_) => {}
                None => panic!("agent stopped"),
            }
        }
        // Nobody answers: disposal must not wait for the approval.
        agent.dispose().await;
    });
    let events = stored(&store, "pending");
    check_invariants(&events);
    assert_eq!(
        turn_ends(&events),
        [TurnEndReason::Aborted {
            cause: AbortCause::Disposed
        }]
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn cancel_during_a_retry_wait_ends_the_turn_at_once() {
    let server = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 500, "body": {"error": {"message": "boom"}}}},
        {"turn": {"text": ["never"]}}
    ]}));
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut cfg = config(&server);
    // A 30 s backoff: only the cancel can end the wait in time.
    cfg.retry_policy = Some(RetryPolicy::Normal {
        max_retries: 3,
        retryable_codes: DEFAULT_RETRYABLE_CODES
            .iter()
            .map(|c| c.to_string())
            .collect(),
        backoff: {
            let mut backoff = Backoff::default();
            backoff.initial_delay_ms = 30_000.0;
            backoff.max_delay_ms = 30_000.0;
            backoff.jitter_ratio = 0.0;
            backoff
        },
    });
    let summary = smol::block_on(async {
        let agent = Agent::create(cfg, store.clone(), SessionId::new("retry-cancel"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        loop {
            match sub.next().await {
                Some(AgentEvent::Event(e)) if e.event_type() == "llm/retry" => break,
                Some(_) => {}
                None => panic!("agent stopped"),
            }
        }
        agent
            .cancel(dsh_core::agent::CancelCause::User, false)
            .await;
        let s = agent
            .wait_idle(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        agent.dispose().await;
        s
    });
    assert_eq!(
        summary.reason,
        Some(TurnEndReason::Aborted {
            cause: AbortCause::User
        })
    );
    assert_eq!(server.requests().len(), 1, "the retry never ran");
    let events = stored(&store, "retry-cancel");
    check_invariants(&events);
    // R-14.4: a cancelled wait logs no llm/retry-started.
    assert!(!types(&events).contains(&"llm/retry-started".to_string()));
}

/// A scripted provider that reports the thread each stream is read on,
/// and whether it says it blocks.
struct Where {
    inner: dsh_host::ScriptedProvider,
    blocks: bool,
    threads: std::sync::Mutex<Vec<String>>,
}

impl dsh_host::ModelProvider for Where {
    fn stream(
        &self,
        opts: &dsh_core::GenerateOptions,
        cancel: &CancelToken,
    ) -> Result<dsh_host::ChunkStream, dsh_core::LlmError> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.threads.lock().unwrap().push(name);
        self.inner.stream(opts, cancel)
    }
    fn blocks(&self) -> bool {
        self.blocks
    }
}

/// A provider that may block is read on the blocking pool; one answering
/// from memory (`blocks` false, as `ScriptedProvider`) in place by the
/// agent task, with the same log.
#[test]
fn a_provider_that_does_not_block_is_read_in_place() {
    let mut logs = Vec::new();
    for blocks in [true, false] {
        let text = vec![
            StreamChunk::block_start(0, "text"),
            StreamChunk::TextDelta {
                index: 0,
                text: "hi".into(),
            },
            StreamChunk::block_end(0, ContentBlock::text("hi")),
            StreamChunk::finish(dsh_core::FinishReason::Stop),
        ];
        let provider = Arc::new(Where {
            inner: dsh_host::ScriptedProvider::new([dsh_host::ScriptedReply::Chunks(text)]),
            blocks,
            threads: std::sync::Mutex::new(Vec::new()),
        });
        let mut cfg = dsh_smol::AgentConfig::new(
            provider.clone(),
            dsh_core::LlmCallConfig::new("deepseek", MODEL),
            std::env::temp_dir(),
        );
        cfg.clock = dsh_host::Clock::Fixed(1_785_000_000_000);
        cfg.ids = dsh_runtime::IdMode::Sequential;
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let log = smol::block_on(async {
            let agent = Agent::create(cfg, store.clone(), SessionId::new("where"))
                .await
                .unwrap();
            agent.send("go").await.unwrap();
            let summary = agent.wait_idle(WAIT).await.unwrap();
            assert_eq!(summary.reason, Some(TurnEndReason::Completed));
            agent.dispose().await;
            stored(&store, "where")
        });
        logs.push(normalized(&log));
        let threads = provider.threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 1, "{threads:?}");
        // The `blocking` crate names its pool's threads `blocking-<n>`.
        assert_eq!(
            threads[0].starts_with("blocking"),
            blocks,
            "blocks {blocks}: read on {threads:?}"
        );
    }
    assert_eq!(logs[0], logs[1], "the same log either way");
}
