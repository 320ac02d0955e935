//! End-to-end tests of the std shell against the mock DeepSeek server with
//! the real HTTP transport (and, where named, the scripted provider).

mod support;

use dsh_core::Time;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::agent::{self as core_agent, Output};
use dsh_core::session::{
    AbortCause, EventData, Session, SessionEvent, SessionHeader, TurnEndReason,
};
use dsh_core::{ContentBlock, GenerateOptions, Message, SessionId, StreamChunk};
use dsh_deepseek::CancelToken;
use dsh_std::{
    Agent, AgentEvent, AgentStatus, ApprovalDecision, ApprovalMode, ApprovalPolicy, CancelCause,
    Clock, IdMode, InboxTarget, ModelProvider, ScriptedProvider, ScriptedReply,
};
use dsh_tools::ToolContext;
use support::*;

const NOW: i64 = 1_785_000_000_000;

const TOOL_TURN: &str = r#"{"responses":[
  {"turn":{"reasoning":["Let me ","read it."],"toolCalls":[{"id":"call_1","name":"read","arguments":["{\"file_path\":","\"notes.txt\"}"]}],
           "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}},
  {"turn":{"text":["The note ","says ","hello."],"usage":{"prompt_tokens":20,"completion_tokens":4,"total_tokens":24}}}
]}"#;

/// The chunks the real transport decodes from each scripted response.
fn decoded_chunks(script: &str, n: usize) -> Vec<Vec<StreamChunk>> {
    let server = mock(script);
    let client = client_for(server.url());
    (0..n)
        .map(|_| {
            let opts = GenerateOptions::new(
                "deepseek",
                "deepseek-v4-flash",
                vec![std::sync::Arc::new(Message::user(
                    "m",
                    vec![ContentBlock::text("x")],
                ))],
            );
            client.stream_chunks(&opts, &CancelToken::new()).collect()
        })
        .collect()
}

/// The same turn driven directly on the core with a scripted stream and
/// the same tool bodies (no threads, no store).
fn drive_core(
    cfg: &dsh_std::AgentConfig,
    id: &str,
    replies: Vec<Vec<StreamChunk>>,
    prompt: Message,
) -> Vec<SessionEvent> {
    let mut header = SessionHeader::new(id, NOW as u64);
    header.cwd = Some(cfg.cwd.to_str().unwrap().to_string());
    let provider = cfg.provider.clone();
    // The shell answers `prepare` with the provider's (LC-15); every other
    // seam keeps the default (policy `auto`).
    let mut core_config = cfg.core_config().unwrap();
    core_config.seams = core_agent::Seams::PREPARE;
    let mut agent = core_agent::Agent::new(core_config, Session::new(header)).unwrap();
    let mut replies = replies.into_iter();
    agent.followup(Time::from_millis(NOW), prompt).unwrap();
    let mut pending: Vec<Output> = Vec::new();
    loop {
        while let Some(o) = agent.poll() {
            pending.push(o);
        }
        if pending.is_empty() {
            break;
        }
        for o in std::mem::take(&mut pending) {
            match o {
                Output::CallModel(call) => {
                    for c in replies.next().expect("a scripted reply") {
                        agent
                            .handle_chunk(Time::from_millis(NOW), call.attempt, c)
                            .unwrap();
                    }
                    agent
                        .handle_stream_end(Time::from_millis(NOW), call.attempt)
                        .unwrap();
                }
                Output::Hook {
                    id,
                    call: core_agent::HookCall::Prepare { value },
                } => {
                    let prepared = provider.prepare(value.config).unwrap();
                    let answer = core_agent::HookAnswer::Prepare(Ok(prepared));
                    agent
                        .complete_hook(Time::from_millis(NOW), id, answer)
                        .unwrap();
                }
                Output::ExecuteTool(exec) => {
                    let cx = ToolContext::new(cfg.workspace().unwrap());
                    let outcome = cfg.tools.execute(&exec, &cx);
                    agent
                        .handle_tool_result(Time::from_millis(NOW), exec.token, outcome)
                        .unwrap();
                }
                _ => {}
            }
        }
    }
    assert!(agent.is_quiescent());
    agent.session().events().to_vec()
}

fn deterministic(cfg: &mut dsh_std::AgentConfig) {
    cfg.clock = Clock::Fixed(NOW);
    cfg.ids = IdMode::Sequential;
}

#[test]
fn tool_turn_log_is_byte_identical_to_the_core_driven_turn() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("notes.txt"), "hello\n").unwrap();
    let root = work.path().canonicalize().unwrap();
    let prompt = Message::user("m1", vec![ContentBlock::text("what does notes.txt say?")]);

    // The std shell over HTTP against the mock server.
    let server = mock(TOOL_TURN);
    let dir = tempfile::tempdir().unwrap();
    let store1 = store(dir.path());
    let det = |provider: Arc<dyn ModelProvider>| {
        let mut cfg = config(provider, &root);
        deterministic(&mut cfg);
        cfg
    };
    let cfg = det(Arc::new(client_for(server.url())));
    let agent = Agent::create(cfg, store1.clone(), SessionId::from("s1")).unwrap();
    agent
        .send_message(prompt.clone(), InboxTarget::NextTurn, true)
        .unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    assert_eq!(summary.turn, 1);
    assert_eq!(summary.usage.map(|u| u.output_tokens), Some(4));
    let shell_log = agent.events().unwrap();
    // `with_events` reads the same log in place, without a copy.
    assert_eq!(agent.with_events(lines).unwrap(), lines(&shell_log));
    agent.dispose();

    // The core driven directly with the chunks the transport decodes.
    let replies = decoded_chunks(TOOL_TURN, 2);
    // The DeepSeek client only answers `prepare` here; no call is made.
    let core_log = drive_core(
        &det(Arc::new(client_for(server.url()))),
        "s1",
        replies.clone(),
        prompt.clone(),
    );
    assert_eq!(lines(&shell_log), lines(&core_log));

    // The shell over the scripted provider gives the same log too.
    let cfg2 = det(Arc::new(
        ScriptedProvider::new(replies.into_iter().map(ScriptedReply::Chunks))
            .with_context_window(1_000_000),
    ));
    let dir2 = tempfile::tempdir().unwrap();
    let agent2 = Agent::create(cfg2, store(dir2.path()), SessionId::from("s1")).unwrap();
    agent2
        .send_message(prompt, InboxTarget::NextTurn, true)
        .unwrap();
    agent2.wait_idle(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(lines(&agent2.events().unwrap()), lines(&core_log));
    drop(agent2);

    // What was persisted is the same log (flushed at the checkpoints and on
    // dispose).
    let stored = store1.load(&SessionId::from("s1")).unwrap();
    assert_eq!(lines(&stored.events), lines(&shell_log));
    assert_valid(&stored.events);
    // LC-18: the route's context window (the DeepSeek catalog's) is logged.
    let context = of_type(&shell_log, "request/context");
    assert_eq!(context.len(), 1);
    assert!(
        context[0].to_json().contains(r#""contextWindow":1000000"#),
        "{}",
        context[0].to_json()
    );
    // The tool read the file.
    let results = tool_results(&shell_log);
    assert_eq!(results.len(), 1);
    assert!(results[0].0.contains("hello"), "{results:?}");
    assert!(!results[0].1);
    // Two model calls went over HTTP.
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn live_events_arrive_in_seq_order_with_status_changes() {
    let server = mock(r#"{"responses":[{"turn":{"text":["a","b","c"]}}]}"#);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("hi").unwrap();
    agent.wait_idle(Some(Duration::from_secs(20))).unwrap();
    drop(agent);
    let all: Vec<AgentEvent> = rx.iter().collect();
    let statuses: Vec<AgentStatus> = all
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Status(s) => Some(*s),
            _ => None,
        })
        .collect();
    // LC-3: running then idle (dispose while idle changes nothing).
    assert_eq!(statuses, vec![AgentStatus::Running, AgentStatus::Idle]);
    let seqs: Vec<u64> = all
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Event(ev) => Some(ev.seq()),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    let chunks = all
        .iter()
        .filter(|e| is_event(e, "assistant/chunk"))
        .count();
    assert!(chunks >= 3, "live text chunks: {chunks}");
}

#[test]
fn cancel_during_a_stream_closes_the_turn_as_aborted() {
    // The stream sends two events and then holds until the client leaves.
    let server = mock(
        r#"{"responses":[
        {"fault":{"kind":"stall","turn":{"text":["partial ","answer"]},"afterEvents":2}},
        {"turn":{"text":["second"]}}]}"#,
    );
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("go").unwrap();
    wait_for(
        &rx,
        |e| matches!(e, AgentEvent::Event(ev) if matches!(ev.data(), EventData::AssistantChunk(c) if matches!(c.chunk(), StreamChunk::TextDelta { .. }))),
    );
    let started = std::time::Instant::now();
    agent.cancel(CancelCause::User, false);
    let summary = agent.wait_idle(Some(Duration::from_secs(5))).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cancel is prompt"
    );
    assert_eq!(
        summary.reason,
        Some(TurnEndReason::Aborted {
            cause: AbortCause::User
        })
    );
    let log = agent.events().unwrap();
    // [HEAD Δ interrupted_prefix] the delivered text is kept, marked
    // interrupted; then step/end and turn/end (LC-34).
    let messages = of_type(&log, "assistant/message");
    assert_eq!(messages.len(), 1);
    assert!(messages[0].to_json().contains("\"interrupted\":true"));
    let n = log.len();
    assert_eq!(log[n - 2].event_type(), "step/end");
    assert_eq!(log[n - 1].event_type(), "turn/end");
    // The agent keeps working afterwards.
    agent.send("again").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    assert_eq!(summary.turn, 2);
    assert_valid(&agent.events().unwrap());
}

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/<pid>; look at its state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.contains(") Z "),
        Err(_) => false,
    }
}

#[test]
fn cancel_during_bash_kills_the_process() {
    let script = r#"{"responses":[{"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"echo $$ > pid.txt; exec sleep 30\",\"description\":\"t\"}"]}]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("sleep").unwrap();
    wait_for(&rx, |e| is_event(e, "tool/call"));
    let pid_file = work.path().join("pid.txt");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let pid: u32 = loop {
        if let Ok(t) = std::fs::read_to_string(&pid_file)
            && let Ok(p) = t.trim().parse()
        {
            break p;
        }
        assert!(std::time::Instant::now() < deadline, "bash never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(alive(pid));
    agent.cancel(CancelCause::User, false);
    let summary = agent.wait_idle(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        summary.reason,
        Some(TurnEndReason::Aborted {
            cause: AbortCause::User
        })
    );
    assert!(!alive(pid), "the bash process {pid} is gone");
    let log = agent.events().unwrap();
    // LC-25: the started call gets a result (an error), then step/end, turn/end.
    let results = tool_results(&log);
    assert_eq!(results.len(), 1);
    assert!(results[0].1, "an error result: {results:?}");
    assert_valid(&log);
}

#[test]
fn bash_own_timeout_kills_its_process_and_reports_the_markers() {
    // TL-21: bash's `timeoutMs` is its executor's deadline; it kills its
    // group and reports the markers (a non-error result).
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"sleep 30\",\"description\":\"t\",\"timeoutMs\":300}"]}]}},
      {"turn":{"text":["done"]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Arc::new(client_for(server.url())), work.path());
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    let started = std::time::Instant::now();
    agent.send("sleep").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let results = tool_results(&agent.events().unwrap());
    assert_eq!(results.len(), 1);
    assert!(
        results[0].0.contains("[timed out after 300ms]") && !results[0].1,
        "{results:?}"
    );
}

#[test]
fn tool_timeout_stops_bash_and_gives_the_tl14_error() {
    // TL-14: at the kernel's deadline the body is told to stop (bash kills
    // its process) and the result is the timeout error.
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"sleep 30\",\"description\":\"t\"}"]}]}},
      {"turn":{"text":["done"]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.tool_timeout = Duration::from_millis(300);
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    let started = std::time::Instant::now();
    agent.send("sleep").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let results = tool_results(&agent.events().unwrap());
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1 && results[0].0.contains("tool call timed out after 300ms"),
        "{results:?}"
    );
}

/// A body that ignores cancellation and its timeout.
struct Stubborn;

impl dsh_tools::Tool for Stubborn {
    fn definition(&self) -> dsh_core::agent::tools::ToolDefinition {
        dsh_core::agent::tools::ToolDefinition::untyped(
            "stubborn",
            "never returns in time",
            serde_json::json!({"type":"object"}),
        )
    }
    fn execute(
        &self,
        _call: &dsh_tools::ToolCallRequest,
        _ctx: &ToolContext,
    ) -> dsh_core::agent::tools::ToolOutcome {
        std::thread::sleep(Duration::from_secs(3));
        dsh_core::agent::tools::ToolOutcome::success(vec![ContentBlock::text("late")])
    }
}

#[test]
fn a_body_that_overstays_its_timeout_is_answered_by_the_driver() {
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"c1","name":"stubborn","arguments":["{}"]}]}},
      {"turn":{"text":["done"]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.tools.insert(Box::new(Stubborn));
    cfg.tool_timeout = Duration::from_millis(100);
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    let started = std::time::Instant::now();
    agent.send("go").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    // TL-14: 100 ms timeout + the kernel's 2 s grace, before the body's 3 s.
    assert!(started.elapsed() < Duration::from_millis(2900));
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let results = tool_results(&agent.events().unwrap());
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1 && results[0].0.contains("tool call timed out after 100ms"),
        "{results:?}"
    );
    assert!(!results[0].0.contains("late"));
}

#[test]
fn rate_limit_then_success_is_retried_and_logged() {
    let server = mock(
        r#"{"responses":[
        {"fault":{"kind":"http","status":429,"body":{"error":{"message":"slow down","type":"rate_limit"}}}},
        {"turn":{"text":["fine"]}}]}"#,
    );
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    agent.send("hi").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(15))).unwrap();
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let log = agent.events().unwrap();
    let retries = of_type(&log, "llm/retry");
    assert_eq!(retries.len(), 1, "one llm/retry record");
    assert!(
        retries[0].to_json().contains("\"code\":\"RATE_LIMIT\""),
        "{}",
        retries[0].to_json()
    );
    // The failed attempt's finish chunk is logged (LC-19), then the retry
    // streams in the same step.
    assert_eq!(of_type(&log, "step/start").len(), 1);
    assert_eq!(of_type(&log, "assistant/message").len(), 1);
    assert_eq!(server.requests().len(), 2);
    assert_valid(&log);
}

/// A runtime waits for a kernel deadline by its distance from the
/// kernel's clock, on a monotonic timer, and reports the deadline reached.
/// Here the wall clock goes back an hour between two turns (an NTP step):
/// the kernel's clock stays ahead, and the retry of the second turn must
/// still run after its delay, not an hour later (a driver that measures
/// the wait against the wall clock hangs until `wait_idle` gives up).
#[test]
fn a_wall_clock_that_goes_back_does_not_delay_a_retry() {
    let server = mock(
        r#"{"responses":[
        {"turn":{"text":["one"]}},
        {"fault":{"kind":"http","status":429,"body":{"error":{"message":"slow down","type":"rate_limit"}}}},
        {"turn":{"text":["two"]}}]}"#,
    );
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wall = Arc::new(std::sync::atomic::AtomicI64::new(NOW));
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.clock = Clock::Manual(wall.clone());
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    agent.send("first").unwrap();
    agent.wait_idle(Some(Duration::from_secs(15))).unwrap();
    wall.store(NOW - 3_600_000, std::sync::atomic::Ordering::Relaxed);
    agent.send("second").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(15))).unwrap();
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let log = agent.events().unwrap();
    assert_eq!(of_type(&log, "llm/retry").len(), 1, "the retry ran");
    assert_eq!(server.requests().len(), 3);
    // Logged times never decrease although the wall clock did.
    assert!(log.windows(2).all(|w| w[0].time() <= w[1].time()));
    assert!(log.iter().all(|e| e.time() >= NOW));
}

const ASK_TWICE: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"c1","name":"read","arguments":["{\"file_path\":\"notes.txt\"}"]}]}},
  {"turn":{"text":["denied, ok"]}},
  {"turn":{"toolCalls":[{"id":"c2","name":"read","arguments":["{\"file_path\":\"notes.txt\"}"]}]}},
  {"turn":{"text":["read it"]}}
]}"#;

#[test]
fn approval_ask_then_deny_then_allow() {
    let server = mock(ASK_TWICE);
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("notes.txt"), "secret-note").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.approval = ApprovalPolicy::new(ApprovalMode::Auto).with("read", ApprovalMode::Ask);
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    let rx = agent.subscribe();

    agent.send("read it").unwrap();
    let AgentEvent::ApprovalRequested {
        id,
        call_id,
        tool,
        arguments,
        ..
    } = wait_for(&rx, |e| matches!(e, AgentEvent::ApprovalRequested { .. }))
    else {
        unreachable!()
    };
    assert_eq!(call_id, "c1", "the question names the call it is about");
    assert_eq!(tool, "read");
    assert_eq!(arguments, r#"{"file_path":"notes.txt"}"#);
    assert_eq!(agent.status(), AgentStatus::Running);
    agent.answer_approval(id, ApprovalDecision::Deny);
    agent.wait_idle(Some(Duration::from_secs(10))).unwrap();

    agent.send("now read it").unwrap();
    let AgentEvent::ApprovalRequested { id, call_id, .. } =
        wait_for(&rx, |e| matches!(e, AgentEvent::ApprovalRequested { .. }))
    else {
        unreachable!()
    };
    assert_eq!(call_id, "c2");
    agent.answer_approval(id, ApprovalDecision::Allow);
    agent.wait_idle(Some(Duration::from_secs(10))).unwrap();

    let results = tool_results(&agent.events().unwrap());
    assert_eq!(results.len(), 2);
    // TL-10: a rejection is an error result the model sees.
    assert!(results[0].1);
    assert!(
        results[0].0.contains("the user rejected tool \\\"read\\\""),
        "{}",
        results[0].0
    );
    assert!(!results[1].1);
    assert!(results[1].0.contains("secret-note"));
}

#[test]
fn approval_policy_deny_never_runs_the_tool() {
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"touch ran.txt\",\"description\":\"t\"}"]}]}},
      {"turn":{"text":["ok"]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.approval = ApprovalPolicy::new(ApprovalMode::Deny);
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    agent.send("touch").unwrap();
    agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    let results = tool_results(&agent.events().unwrap());
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1
            && results[0]
                .0
                .contains("bash is disabled by policy in this session")
    );
    assert!(!work.path().join("ran.txt").exists());
}

#[test]
fn cancel_while_awaiting_approval_aborts_without_running_the_tool() {
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"touch ran.txt\",\"description\":\"t\"}"]}]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Arc::new(client_for(server.url())), work.path());
    cfg.approval = ApprovalPolicy::new(ApprovalMode::Ask);
    let agent = Agent::create(cfg, store(dir.path()), dsh_std::new_session_id()).unwrap();
    let rx = agent.subscribe();
    agent.send("touch").unwrap();
    wait_for(&rx, |e| matches!(e, AgentEvent::ApprovalRequested { .. }));
    agent.cancel(CancelCause::User, false);
    let summary = agent.wait_idle(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        summary.reason,
        Some(TurnEndReason::Aborted {
            cause: AbortCause::User
        })
    );
    assert!(!work.path().join("ran.txt").exists());
    assert_valid(&agent.events().unwrap());
}

#[test]
fn hostile_paths_are_tool_errors() {
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[
        {"id":"c1","name":"read","arguments":["{\"file_path\":\"/etc/passwd\"}"]},
        {"id":"c2","name":"read","arguments":["{\"file_path\":\"../../../../etc/passwd\"}"]},
        {"id":"c3","name":"read","arguments":["{\"file_path\":\"link/passwd\"}"]}]}},
      {"turn":{"text":["no luck"]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("/etc", work.path().join("link")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    agent.send("read passwd").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(summary.reason, Some(TurnEndReason::Completed));
    let results = tool_results(&agent.events().unwrap());
    assert_eq!(results.len(), 3);
    for (text, is_error) in &results {
        assert!(*is_error, "{text}");
        assert!(text.contains("outside the workspace"), "{text}");
        assert!(!text.contains("root:"), "no passwd content leaked: {text}");
    }
}

#[test]
fn steer_and_inject_reach_the_next_step() {
    // Step 1 calls a slow bash; the steer lands during it and is entered
    // at step 2 (IB-6, V05).
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"sleep 0.3\",\"description\":\"t\"}"]}]}},
      {"turn":{"text":["steered"]}}]}"#;
    let server = mock(script);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("start").unwrap();
    wait_for(&rx, |e| is_event(e, "tool/call"));
    agent.steer("also this").unwrap();
    agent
        .inject(Message::user("ctx-1", vec![ContentBlock::text("context")]))
        .unwrap();
    agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    let log = agent.events().unwrap();
    let mut step = 0;
    let mut users: Vec<(u64, String)> = Vec::new();
    for e in &log {
        match e.data() {
            EventData::StepStart(s) => step = s.step,
            EventData::UserMessage(m) => {
                users.push((step, serde_json::to_string(&m.content).unwrap()))
            }
            _ => {}
        }
    }
    assert_eq!(users.len(), 3, "{users:?}");
    assert_eq!(users[0].0, 1);
    assert!(users[1].1.contains("also this") && users[1].0 == 2);
    assert!(users[2].1.contains("context") && users[2].0 == 2);
    // The second request carried both.
    let body = server.requests()[1].body_text();
    assert!(body.contains("also this") && body.contains("context"));
}

#[test]
fn duplicate_message_ids_are_refused() {
    let provider = Arc::new(ScriptedProvider::new([ScriptedReply::Chunks(vec![])]));
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::create(
        config(provider, work.path()),
        store(dir.path()),
        dsh_std::new_session_id(),
    )
    .unwrap();
    let m = Message::user("same", vec![ContentBlock::text("x")]);
    agent.inject(m.clone()).unwrap();
    let err = agent.inject(m).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input refused: message \"same\" is already pending"
    );
}

#[test]
fn dispose_during_a_stream_aborts_as_disposed_and_persists() {
    let server = mock(
        r#"{"responses":[{"fault":{"kind":"stall","turn":{"text":["x","y"]},"afterEvents":2}}]}"#,
    );
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let id = dsh_std::new_session_id();
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        store.clone(),
        id.clone(),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("go").unwrap();
    wait_for(&rx, |e| is_event(e, "assistant/chunk"));
    drop(agent); // LC-40: dispose waits for quiescence
    let stored = store.load(&id).unwrap();
    let last = stored.events.last().unwrap();
    assert_eq!(last.event_type(), "turn/end");
    assert!(
        last.to_json()
            .contains(r#""reason":{"kind":"aborted","reason":{"kind":"disposed"}}"#),
        "{}",
        last.to_json()
    );
    assert_valid(&stored.events);
}

#[test]
fn fork_continues_from_a_boundary() {
    let server = mock(r#"{"responses":[{"turn":{"text":["one"]}},{"turn":{"text":["two"]}}]}"#);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let client: Arc<dyn ModelProvider> = Arc::new(client_for(server.url()));
    let cfg = config(client.clone(), work.path());
    let parent = SessionId::from("parent");
    let agent = Agent::create(cfg, store.clone(), parent.clone()).unwrap();
    agent.send("first").unwrap();
    agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    let parent_log = agent.events().unwrap();
    drop(agent);
    let boundary = parent_log.last().unwrap().seq();
    let child = SessionId::from("child");
    let cfg = config(client, work.path());
    let agent = Agent::fork(cfg, store.clone(), &parent, Some(boundary), child.clone()).unwrap();
    agent.send("second").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    // Turn numbering continues from the seed (LC-1).
    assert_eq!(summary.turn, 2);
    drop(agent);
    let stored = store.load(&child).unwrap();
    assert_eq!(stored.header.parent_session, Some(parent));
    // F: seedLength counts the copied events (session.md: fork(src, 3) →
    // seedLength 4); the end-seed marker follows them.
    assert_eq!(stored.header.seed_length, Some(boundary + 1));
    assert_eq!(
        lines(&stored.events[..=boundary as usize]),
        lines(&parent_log)
    );
    assert_eq!(
        stored.events[boundary as usize + 1].event_type(),
        "session/end-seed"
    );
    assert_valid(&stored.events);
}

/// A store whose flush barrier fails (disk full, say); everything else is
/// the JSONL store's.
struct FailingFlush(Arc<dyn dsh_store::SessionStore>);

impl dsh_store::SessionStore for FailingFlush {
    fn kind(&self) -> &'static str {
        "failing-flush"
    }
    fn locate(&self, header: &SessionHeader) -> Option<dsh_store::Location> {
        self.0.locate(header)
    }
    fn create(&self, header: SessionHeader) -> Result<(), dsh_store::StoreError> {
        self.0.create(header)
    }
    // The kernel writes each checkpoint's batch with `append` (one
    // durable write); it fails as a full disk would.
    fn append(
        &self,
        _id: &SessionId,
        _events: &[SessionEvent],
    ) -> Result<(), dsh_store::StoreError> {
        Err(dsh_store::StoreError::io(
            "append",
            std::io::Error::other("no space left on device"),
        ))
    }
    fn load(&self, id: &SessionId) -> Result<dsh_store::Inspection, dsh_store::StoreError> {
        self.0.load(id)
    }
    fn inspect(
        &self,
        id: &SessionId,
        cancel: &dsh_store::Cancel,
    ) -> Result<dsh_store::Inspection, dsh_store::StoreError> {
        self.0.inspect(id, cancel)
    }
    fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &dsh_store::Cancel,
    ) -> Result<(SessionHeader, Vec<SessionEvent>), dsh_store::StoreError> {
        self.0.read_from(id, from_seq, cancel)
    }
    fn list(
        &self,
        cancel: &dsh_store::Cancel,
    ) -> Result<Vec<SessionHeader>, dsh_store::StoreError> {
        self.0.list(cancel)
    }
    fn list_snapshots(
        &self,
        cancel: &dsh_store::Cancel,
    ) -> Result<Vec<dsh_store::Snapshot>, dsh_store::StoreError> {
        self.0.list_snapshots(cancel)
    }
    fn revision(&self, id: &SessionId) -> Result<dsh_store::Revision, dsh_store::StoreError> {
        self.0.revision(id)
    }
    fn release(&self, id: &SessionId) -> Result<(), dsh_store::StoreError> {
        self.0.release(id)
    }
}

#[test]
fn a_failed_flush_before_the_model_stops_the_request() {
    // SM-14: a failing checkpoint before the model prevents the dispatch;
    // the turn ends in error and the error is reported.
    let server = mock(r#"{"responses":[{"turn":{"text":["never"]}}]}"#);
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let failing = Arc::new(FailingFlush(store(dir.path())));
    let agent = Agent::create(
        config(Arc::new(client_for(server.url())), work.path()),
        failing,
        dsh_std::new_session_id(),
    )
    .unwrap();
    let rx = agent.subscribe();
    agent.send("hi").unwrap();
    let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
    match summary.reason {
        Some(TurnEndReason::Error { error }) => {
            assert_eq!(error.code, "FLUSH_FAILED");
            assert!(
                error.message.contains("no space left on device"),
                "{}",
                error.message
            );
        }
        other => panic!("expected an error turn, got {other:?}"),
    }
    assert!(server.requests().is_empty(), "no request was sent");
    wait_for(
        &rx,
        |e| matches!(e, AgentEvent::Error(m) if m.contains("BeforeModel")),
    );
}

#[test]
fn ids_continue_after_two_resumes_with_sequential_ids() {
    // loop.md Q12 / V30: the user ids a handle mints (`U<n>`) and the
    // core's (`A<n>`) continue from the stored log, so no id repeats.
    let answer = || {
        ScriptedReply::Chunks(vec![
            StreamChunk::block_start(0, "text"),
            StreamChunk::block_end(0, ContentBlock::text("ok")),
            StreamChunk::finish(dsh_core::FinishReason::Stop),
        ])
    };
    let provider: Arc<dyn ModelProvider> =
        Arc::new(ScriptedProvider::new([answer(), answer(), answer()]));
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let id = SessionId::from("resumed");
    let cfg = || {
        let mut cfg = config(provider.clone(), work.path());
        deterministic(&mut cfg);
        cfg
    };
    for n in 1..=3 {
        let agent = if n == 1 {
            Agent::create(cfg(), store.clone(), id.clone())
        } else {
            Agent::resume(cfg(), store.clone(), &id)
        }
        .unwrap();
        agent.send("go").unwrap();
        let summary = agent.wait_idle(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(summary.reason, Some(TurnEndReason::Completed));
        drop(agent);
    }
    let stored = store.load(&id).unwrap();
    let ids: Vec<String> = stored
        .events
        .iter()
        .filter_map(|e| e.data().message().map(|m| m.id.to_string()))
        .collect();
    assert_eq!(ids, ["U1", "A1", "U2", "A2", "U3", "A3"]);
}

/// A scripted provider that reports the thread each stream is read on,
/// and whether it says it blocks.
struct Where {
    inner: ScriptedProvider,
    blocks: bool,
    threads: std::sync::Mutex<Vec<String>>,
}

impl ModelProvider for Where {
    fn stream(
        &self,
        opts: &GenerateOptions,
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

/// A provider that may block is read on a worker thread; one answering
/// from memory (`blocks` false, as `ScriptedProvider`) in place on the
/// agent's driver thread, with the same log.
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
            inner: ScriptedProvider::new([ScriptedReply::Chunks(text)]),
            blocks,
            threads: std::sync::Mutex::new(Vec::new()),
        });
        let work = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(provider.clone(), work.path());
        deterministic(&mut cfg);
        let agent = Agent::create(cfg, store(dir.path()), SessionId::from("where")).unwrap();
        agent
            .send_message(
                Message::user("u1", vec![ContentBlock::text("go")]),
                InboxTarget::NextTurn,
                true,
            )
            .unwrap();
        let summary = agent.wait_idle(Some(Duration::from_secs(20))).unwrap();
        assert_eq!(summary.reason, Some(TurnEndReason::Completed));
        logs.push(lines(&agent.events().unwrap()));
        agent.dispose();
        let threads = provider.threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 1, "{threads:?}");
        assert_eq!(
            threads[0].starts_with("dsh-agent-"),
            !blocks,
            "blocks {blocks}: read on {threads:?}"
        );
    }
    assert_eq!(logs[0], logs[1], "the same log either way");
}
