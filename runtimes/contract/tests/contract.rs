//! The runtime contract suite, written once: every scenario runs in
//! `dsh-std` and in `dsh-smol` with the same scripted model, tools,
//! plugins, fixed clock and deterministic ids, and the session logs must
//! be byte-identical (and match what each store holds). The scenarios the
//! embedded shell can run (it has fn-pointer tools that finish at once, no
//! resume and no front end to answer a plugin's question) run in
//! `dsh-embedded` too, on the host over an in-memory loopback link that
//! serves the same model replies as HTTP/SSE bodies: its log, its batches
//! and its requests must match. Each of the behaviours the runtimes used to
//! decide apart has a scenario asserting the one behaviour the
//! spec asks for.

use dsh_core::Time;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{CancelCause, PreStepDecision, PreStepPayload};
use dsh_core::session::{SessionEvent, SessionHeader};
use dsh_core::{ContentBlock, GenerateOptions, LlmCallConfig, ReasoningEffortId, SessionId};
use dsh_host::{Clock, ScriptedProvider, ScriptedReply};
use dsh_runtime::{AgentEvent, Ask, Cx, Flow, IdMode, Plugin, Reply, Seams, ToolDispatch};
use dsh_store::SessionStore;
use dsh_tools::{Tool, ToolCallRequest, ToolContext, ToolSet};
use serde_json::{Value, json};

const NOW: Time = Time::from_millis(1_785_000_000_000);
const WAIT: Option<Duration> = Some(Duration::from_secs(20));

// ----------------------------------------------------------------------
// Scenario and harness

/// One scenario: everything both runtimes get.
struct Scenario {
    replies: Vec<Model>,
    tools: fn(&Probe) -> ToolSet,
    plugins: fn() -> Vec<Box<dyn Plugin>>,
    call: LlmCallConfig,
    tool_timeout: Duration,
    failing_store: bool,
    /// Each prompt is sent, then the agent is awaited idle.
    prompts: Vec<&'static str>,
    /// Cancel (cause user) as soon as a tool body has started.
    cancel_when_started: bool,
    /// Reply to every `Asked` with this.
    answer: Option<Value>,
    /// Dispose, then resume the session and dispose again.
    resume: bool,
    /// Record the batches written.
    record: bool,
}

impl Scenario {
    fn new(replies: Vec<Model>, prompts: Vec<&'static str>) -> Self {
        Scenario {
            replies,
            tools: |_| tools(),
            plugins: Vec::new,
            call: LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
            tool_timeout: Duration::ZERO,
            failing_store: false,
            prompts,
            cancel_when_started: false,
            answer: None,
            resume: false,
            record: false,
        }
    }
}

/// Shared between a scenario's tool bodies and its front end.
#[derive(Clone, Default)]
struct Probe {
    started: Arc<AtomicBool>,
}

/// What a run gives.
#[derive(Debug)]
struct Run {
    log: Vec<String>,
    stored: Vec<String>,
    errors: Vec<String>,
    requests: Vec<GenerateOptions>,
    batches: Vec<Vec<String>>,
}

fn lines(events: &[SessionEvent]) -> Vec<String> {
    events.iter().map(SessionEvent::to_json).collect()
}

/// The event types of each batch a store was asked to write.
type Batches = Arc<std::sync::Mutex<Vec<Vec<String>>>>;

fn store(dir: &std::path::Path, failing: bool) -> Arc<dyn SessionStore> {
    recorded(dir, failing, None)
}

fn recorded(dir: &std::path::Path, fail: bool, batches: Option<Batches>) -> Arc<dyn SessionStore> {
    let inner: Arc<dyn SessionStore> =
        Arc::new(dsh_jsonl::open(dsh_jsonl::JsonlConfig::new(dir)).expect("jsonl store"));
    if fail || batches.is_some() {
        Arc::new(Wrap {
            inner,
            ok_appends: AtomicUsize::new(if fail { 0 } else { usize::MAX }),
            batches,
        })
    } else {
        inner
    }
}

fn stored(store: &Arc<dyn SessionStore>, id: &str) -> Vec<String> {
    let got = store
        .inspect(&SessionId::from(id), &dsh_store::Cancel::new())
        .expect("stored log");
    lines(&got.events)
}

fn run_std(s: &Scenario, work: &std::path::Path, dir: &std::path::Path) -> Run {
    let probe = Probe::default();
    let provider = Arc::new(ScriptedProvider::new(s.replies.iter().map(Model::reply)));
    let batches: Option<Batches> = s.record.then(Batches::default);
    let store = recorded(dir, s.failing_store, batches.clone());
    let config = || {
        let mut c = dsh_std::AgentConfig::new(provider.clone(), s.call.clone(), work);
        c.tools = (s.tools)(&probe);
        c.plugins = (s.plugins)();
        c.tool_timeout = s.tool_timeout;
        c.clock = Clock::Fixed(NOW.as_millis());
        c.ids = IdMode::Sequential;
        c
    };
    let agent = dsh_std::Agent::create(config(), store.clone(), SessionId::from("s1")).unwrap();
    let rx = agent.subscribe();
    let done = AtomicBool::new(false);
    let (agent_ref, done_ref, probe_ref) = (&agent, &done, &probe);
    let errors = std::thread::scope(|scope| {
        let front = scope.spawn(move || {
            let mut errors = Vec::new();
            let mut cancelled = false;
            loop {
                let finished = done_ref.load(Ordering::SeqCst);
                if s.cancel_when_started && !cancelled && probe_ref.started.load(Ordering::SeqCst) {
                    cancelled = true;
                    agent_ref.cancel(CancelCause::User, false);
                }
                match rx.recv_timeout(Duration::from_millis(5)) {
                    Ok(AgentEvent::Asked { id, .. }) => {
                        if let Some(v) = &s.answer {
                            agent_ref.answer(id, Reply::Plugin(v.clone()));
                        }
                    }
                    Ok(AgentEvent::Error(e)) => errors.push(e),
                    Ok(_) => {}
                    // Everything published before idle has been read.
                    Err(_) if finished => break,
                    Err(_) => {}
                }
            }
            errors
        });
        for p in &s.prompts {
            agent.send(p).unwrap();
            agent.wait_idle(WAIT).unwrap();
        }
        done.store(true, Ordering::SeqCst);
        front.join().unwrap()
    });
    let mut log = agent.events().unwrap();
    agent.dispose();
    if s.resume {
        let again =
            dsh_std::Agent::resume(config(), store.clone(), &SessionId::from("s1")).unwrap();
        again.wait_idle(WAIT).unwrap();
        log = again.events().unwrap();
        again.dispose();
    }
    Run {
        log: lines(&log),
        stored: if s.failing_store {
            Vec::new()
        } else {
            stored(&store, "s1")
        },
        errors,
        requests: provider.requests(),
        batches: batches
            .map(|b| b.lock().unwrap().clone())
            .unwrap_or_default(),
    }
}

fn run_smol(s: &Scenario, work: &std::path::Path, dir: &std::path::Path) -> Run {
    let probe = Probe::default();
    let provider = Arc::new(ScriptedProvider::new(s.replies.iter().map(Model::reply)));
    let batches: Option<Batches> = s.record.then(Batches::default);
    let store = recorded(dir, s.failing_store, batches.clone());
    let config = || {
        let mut c = dsh_smol::AgentConfig::new(provider.clone(), s.call.clone(), work);
        c.tools = (s.tools)(&probe);
        c.plugins = (s.plugins)();
        c.tool_timeout = s.tool_timeout;
        c.clock = Clock::Fixed(NOW.as_millis());
        c.ids = IdMode::Sequential;
        c
    };
    smol::block_on(async {
        let agent = dsh_smol::Agent::create(config(), store.clone(), SessionId::from("s1"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        let done = AtomicBool::new(false);
        let main = async {
            for p in &s.prompts {
                agent.send(p).await.unwrap();
                agent.wait_idle(WAIT).await.unwrap();
            }
            done.store(true, Ordering::SeqCst);
        };
        let front = async {
            let mut errors = Vec::new();
            let mut cancelled = false;
            loop {
                let finished = done.load(Ordering::SeqCst);
                if s.cancel_when_started && !cancelled && probe.started.load(Ordering::SeqCst) {
                    cancelled = true;
                    agent.cancel(CancelCause::User, false).await;
                }
                match sub.try_next() {
                    Some(AgentEvent::Asked { id, .. }) => {
                        if let Some(v) = &s.answer {
                            agent.answer(id, Reply::Plugin(v.clone())).await;
                        }
                    }
                    Some(AgentEvent::Error(e)) => errors.push(e),
                    Some(_) => {}
                    None if finished => break,
                    None => {
                        smol::Timer::after(Duration::from_millis(5)).await;
                    }
                }
            }
            errors
        };
        let ((), errors) = smol::future::zip(main, front).await;
        let mut log = agent_events(&store, &agent, s.failing_store);
        agent.dispose().await;
        if s.resume {
            let again = dsh_smol::Agent::resume(config(), store.clone(), &SessionId::from("s1"))
                .await
                .unwrap();
            again.wait_idle(WAIT).await.unwrap();
            again.dispose().await;
            log = stored(&store, "s1");
        }
        Run {
            log,
            stored: if s.failing_store {
                Vec::new()
            } else {
                stored(&store, "s1")
            },
            errors,
            requests: provider.requests(),
            batches: batches
                .map(|b| b.lock().unwrap().clone())
                .unwrap_or_default(),
        }
    })
}

/// The smol handle has no snapshot call: the live log is what the store
/// holds once idle (every event is persisted before `wait_idle` returns),
/// or, with a failing store, what the std run shows (checked separately).
fn agent_events(
    store: &Arc<dyn SessionStore>,
    _agent: &dsh_smol::Agent,
    failing: bool,
) -> Vec<String> {
    if failing {
        Vec::new()
    } else {
        stored(store, "s1")
    }
}

/// A runtime's harness.
type Runner = fn(&Scenario, &std::path::Path, &std::path::Path) -> Run;

/// Runs `s` in both runtimes; the logs must be byte-identical.
fn both(s: &Scenario) -> (Run, Run) {
    let work = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let root = work.path().canonicalize().unwrap();
    let std_run = run_std(s, &root, a.path());
    let smol_run = run_smol(s, &root, b.path());
    if !s.failing_store {
        assert_eq!(std_run.log, std_run.stored, "std: the store holds the log");
        assert_eq!(
            std_run.log.join("\n"),
            smol_run.log.join("\n"),
            "std and smol logs differ"
        );
    }
    (std_run, smol_run)
}

fn types(log: &[String]) -> Vec<String> {
    log.iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

fn of_type(log: &[String], ty: &str) -> Vec<Value> {
    log.iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == ty)
        .collect()
}

/// The first text of each `tool/result`, and whether it is an error.
fn results(log: &[String]) -> Vec<(String, bool, Value)> {
    of_type(log, "tool/result")
        .into_iter()
        .map(|v| {
            let block = &v["data"]["message"]["content"][0];
            (
                block["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                block["isError"] == true,
                v["data"]["error"].clone(),
            )
        })
        .collect()
}

// ----------------------------------------------------------------------
// The embedded shell, on the host over a loopback link

/// One HTTP exchange in memory: the request is appended to the last
/// entry of `requests`, the scripted response is read back.
struct Loopback {
    response: Vec<u8>,
    at: usize,
    requests: std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>,
}

impl embedded_io::ErrorType for Loopback {
    type Error = core::convert::Infallible;
}

impl embedded_io::Read for Loopback {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        let rest = &self.response[self.at..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.at += n;
        Ok(n)
    }
}

impl embedded_io::Write for Loopback {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        if let Some(last) = self.requests.borrow_mut().last_mut() {
            last.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A log sink: a `Vec`, or one that fails every write (a full disk).
struct Sink {
    bytes: Vec<u8>,
    fail: bool,
    /// The length of `bytes` at each flush (the shell flushes once per
    /// batch it writes).
    flushes: Vec<usize>,
}

impl embedded_io::ErrorType for Sink {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        if self.fail && !self.bytes.is_empty() {
            return Err(embedded_io::ErrorKind::OutOfMemory);
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        if self.flushes.last() != Some(&self.bytes.len()) {
            self.flushes.push(self.bytes.len());
        }
        Ok(())
    }
}

fn embedded_clock() -> i64 {
    NOW.as_millis()
}

/// `echo` as the embedded shell's fn-pointer tool (the same answer as
/// [`Echo`]).
fn embedded_echo(
    args: &str,
    out: &mut dsh_embedded::ToolOutput,
) -> Result<(), dsh_embedded::ToolError> {
    let v: Value = serde_json::from_str(args).map_err(|_| dsh_embedded::ToolError)?;
    out.push_str(&format!("echo: {}", v["text"].as_str().unwrap_or_default()));
    Ok(())
}

const EMBEDDED_TOOLS: [dsh_embedded::Tool; 1] = [dsh_embedded::Tool {
    name: "echo",
    description: "Echo the text",
    parameters: r#"{"type":"object"}"#,
    run: embedded_echo,
}];

/// What an embedded run gives.
struct EmbeddedRun {
    /// The agent's log (from memory: a failing sink holds only the header).
    log: Vec<String>,
    /// The lines the sink received after the header.
    written: Vec<String>,
    /// The header line.
    header: Value,
    /// The JSON body of each model request.
    requests: Vec<Value>,
    /// The errors `prompt` returned.
    errors: Vec<String>,
    /// The event types of each batch written (between two flushes).
    batches: Vec<Vec<String>>,
}

/// Runs `s` in the embedded shell: each model call reads the next
/// scripted SSE body over a fresh loopback link.
fn run_embedded(s: &Scenario, work: &std::path::Path) -> EmbeddedRun {
    let mut bodies: std::collections::VecDeque<Vec<u8>> = s
        .replies
        .iter()
        .map(|m| {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{}",
                m.sse
            )
            .into_bytes()
        })
        .collect();
    let requests = std::rc::Rc::new(std::cell::RefCell::new(Vec::<Vec<u8>>::new()));
    let sent = requests.clone();
    let opener = move || -> Result<Loopback, core::convert::Infallible> {
        let response = bodies.pop_front().unwrap_or_else(|| {
            b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\nscript exhausted"
                .to_vec()
        });
        sent.borrow_mut().push(Vec::new());
        Ok(Loopback {
            response,
            at: 0,
            requests: sent.clone(),
        })
    };
    let mut config = dsh_embedded::ShellConfig::new("127.0.0.1", "s1");
    config.call = Some(s.call.clone());
    config.cwd = Some(work.to_str().unwrap().to_string());
    let sink = Sink {
        bytes: Vec::new(),
        fail: s.failing_store,
        flushes: Vec::new(),
    };
    let mut shell = dsh_embedded::Shell::with_plugins(
        config,
        &EMBEDDED_TOOLS,
        embedded_clock,
        opener,
        sink,
        (s.plugins)(),
    )
    .unwrap();
    let mut errors = Vec::new();
    for p in &s.prompts {
        // A failing sink is reported after the turn ran to its end.
        if let Err(e) = shell.prompt(p) {
            errors.push(e.to_string());
        }
    }
    let (agent, sink) = shell.into_parts();
    let mut batches = Vec::new();
    let mut from = 0;
    for &to in &sink.flushes {
        // The header line goes out with the first batch.
        let batch: Vec<String> = String::from_utf8_lossy(&sink.bytes[from..to])
            .lines()
            .filter(|l| !l.starts_with(r#"{"type":"session","#))
            .map(str::to_string)
            .collect();
        from = to;
        batches.push(types(&batch));
    }
    let text = String::from_utf8(sink.bytes).unwrap();
    let mut written = text.lines().map(str::to_string);
    let header = serde_json::from_str(&written.next().unwrap_or_default()).unwrap();
    let requests = requests
        .borrow()
        .iter()
        .map(|r| {
            let text = String::from_utf8_lossy(r);
            let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
            serde_json::from_str(body).unwrap_or(Value::Null)
        })
        .collect();
    EmbeddedRun {
        log: lines(agent.session().events()),
        written: written.collect(),
        header,
        requests,
        errors,
        batches,
    }
}

/// Runs `s` in std, smol and the embedded shell: the three logs must be
/// byte-identical (and the embedded sink must hold its log).
fn all_three(s: &Scenario) -> (Run, Run, EmbeddedRun) {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().canonicalize().unwrap();
    let (std_run, smol_run) = both(s);
    let e = run_embedded(s, &root);
    assert_eq!(e.log, e.written, "embedded: the sink holds the log");
    assert_eq!(
        std_run.log.join("\n"),
        e.log.join("\n"),
        "std and embedded logs differ"
    );
    (std_run, smol_run, e)
}

// ----------------------------------------------------------------------
// Scripted replies and tools

/// One scripted model reply, as the DeepSeek SSE body a server sends.
/// The std and smol runs get the chunks the adapter's decoder makes of
/// it; the embedded run reads the body itself over its loopback link, so
/// every runtime sees the same chunks.
#[derive(Clone, Debug)]
struct Model {
    sse: String,
}

impl Model {
    fn from_deltas(deltas: &[Value], finish: &str) -> Model {
        let mut sse = String::new();
        for delta in deltas {
            let frame = json!({"id": "r1", "object": "chat.completion.chunk",
                "model": "deepseek-v4-flash",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
            sse.push_str(&format!("data: {frame}\n\n"));
        }
        let last = json!({"id": "r1", "object": "chat.completion.chunk",
            "model": "deepseek-v4-flash",
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}});
        sse.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
        Model { sse }
    }

    /// The chunks the DeepSeek decoder makes of the body.
    fn reply(&self) -> ScriptedReply {
        let mut decoder = dsh_deepseek::StreamDecoder::new();
        let mut chunks = Vec::new();
        decoder
            .push(self.sse.as_bytes(), &mut chunks)
            .expect("scripted SSE decodes");
        decoder.finish_into(&mut chunks).expect("scripted SSE ends");
        ScriptedReply::Chunks(chunks)
    }
}

fn text(t: &str) -> Model {
    Model::from_deltas(&[json!({"role": "assistant", "content": t})], "stop")
}

fn call(name: &str, args: &str) -> Model {
    Model::from_deltas(
        &[
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "c1",
            "type": "function", "function": {"name": name, "arguments": args}}]}),
        ],
        "tool_calls",
    )
}

/// `echo {"text"}` answers `echo: <text>`.
struct Echo;

impl Tool for Echo {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::untyped("echo", "Echo the text", json!({"type":"object"}))
    }
    fn execute(&self, call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        let t = call.arguments["text"].as_str().unwrap_or_default();
        ToolOutcome::success(vec![ContentBlock::text(format!("echo: {t}"))])
    }
}

/// Declares `timeoutMs: 100.5` and waits for its cancel signal, then
/// returns a success (which the timeout replaces, TL-14).
struct Slow(Probe);

impl Tool for Slow {
    fn definition(&self) -> ToolDefinition {
        let mut d = ToolDefinition::untyped("slow", "Slow", json!({"type":"object"}));
        d.timeout_ms = Some(100.5);
        d
    }
    fn execute(&self, _call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        self.0.started.store(true, Ordering::SeqCst);
        ctx.cancel.wait_timeout(Duration::from_secs(10));
        ToolOutcome::success(vec![ContentBlock::text("late")])
    }
}

/// Waits for its cancel signal and then fails with its own error (TL-13:
/// kept, not replaced by `ABORTED`).
struct Waiter(Probe);

impl Tool for Waiter {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::untyped("waiter", "Waits", json!({"type":"object"}))
    }
    fn execute(&self, _call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        self.0.started.store(true, Ordering::SeqCst);
        ctx.cancel.wait_timeout(Duration::from_secs(10));
        ToolOutcome::coded_error("stopped on cancel", "StopError", "STOPPED")
    }
}

fn tools() -> ToolSet {
    let mut t = ToolSet::new();
    t.insert(Box::new(Echo));
    t
}

// ----------------------------------------------------------------------
// Scenarios

#[test]
fn a_tool_turn_gives_the_same_log_in_every_runtime() {
    let s = Scenario::new(
        vec![call("echo", r#"{"text":"hi"}"#), text("done")],
        vec!["say hi"],
    );
    let (a, _, _) = all_three(&s);
    let t = types(&a.log);
    assert!(t.contains(&"tool/call".to_string()), "{t:?}");
    assert_eq!(t.last().map(String::as_str), Some("turn/end"));
    assert_eq!(results(&a.log)[0].0, "echo: hi");
}

#[test]
fn the_header_cwd_is_the_absolute_working_directory_in_every_runtime() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().canonicalize().unwrap();
    let s = Scenario::new(vec![text("ok")], vec!["hi"]);
    let runs: [(&str, Runner); 2] = [("std", run_std), ("smol", run_smol)];
    for (name, run) in runs {
        let dir = tempfile::tempdir().unwrap();
        run(&s, &root, dir.path());
        let st = store(dir.path(), false);
        let got = st
            .inspect(&SessionId::from("s1"), &dsh_store::Cancel::new())
            .unwrap();
        let header: &SessionHeader = &got.header;
        assert_eq!(header.cwd.as_deref(), root.to_str(), "{name}: header cwd");
    }
    let e = run_embedded(&s, &root);
    assert_eq!(
        e.header["cwd"].as_str(),
        root.to_str(),
        "embedded: header cwd"
    );
}

#[test]
fn a_failed_write_before_the_model_ends_the_turn_in_error_everywhere() {
    // SM-14: the request is never dispatched; the turn ends in error with
    // code FLUSH_FAILED and the store's message; the error is published.
    let mut s = Scenario::new(vec![text("never")], vec!["hi"]);
    s.failing_store = true;
    let work = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let std_run = run_std(&s, work.path(), a.path());
    let smol_run = run_smol(&s, work.path(), b.path());
    for run in [&std_run, &smol_run] {
        assert!(run.requests.is_empty(), "no request was sent");
        assert!(
            run.errors
                .iter()
                .any(|e| e.contains("session store write failed at BeforeModel")
                    && e.contains("no space left on device")),
            "{:?}",
            run.errors
        );
    }
    let e = run_embedded(&s, work.path());
    assert!(e.requests.is_empty(), "embedded: no request was sent");
    assert!(
        e.written.is_empty(),
        "embedded: only the header was written"
    );
    assert!(
        e.errors.iter().any(|m| m.contains("sink failed")),
        "{:?}",
        e.errors
    );
    for log in [&std_run.log, &e.log] {
        let end = of_type(log, "turn/end");
        assert_eq!(end[0]["data"]["reason"]["kind"], "error");
        assert_eq!(end[0]["data"]["reason"]["error"]["code"], "FLUSH_FAILED");
    }
}

/// The disk fills after the request prefix was written, so the
/// write of the turn's end fails. Every runtime publishes the failure
/// before it reports idle, `wait_idle`'s summary carries it, and `close`
/// fails with [`ShellError::NotSaved`] instead of claiming a saved log.
#[test]
fn a_failed_write_of_the_turn_end_is_reported_everywhere() {
    use dsh_host::ShellError;
    let reply = || Arc::new(ScriptedProvider::new([text("an answer").reply()]));
    let unsaved = |name: &str, summary: &dsh_runtime::TurnSummary, errors: &[String]| {
        let e = summary
            .store_error
            .as_deref()
            .unwrap_or_else(|| panic!("{name}: the summary reports the failed write: {summary:?}"));
        assert!(e.contains("no space left on device"), "{name}: {e}");
        assert!(
            errors.iter().any(|m| m.contains("no space left on device")),
            "{name}: published before idle: {errors:?}"
        );
    };
    let not_saved = |name: &str, r: Result<(), ShellError>| match r {
        Err(ShellError::NotSaved(m)) => assert!(m.contains("no space left"), "{name}: {m}"),
        other => panic!("{name}: close must fail, got {other:?}"),
    };
    let work = tempfile::tempdir().unwrap();
    let root = work.path().canonicalize().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = filling_up(dir.path(), 1);
    let mut c = dsh_std::AgentConfig::new(reply(), LlmCallConfig::new("p", "m"), &root);
    c.clock = Clock::Fixed(NOW.as_millis());
    c.ids = IdMode::Sequential;
    let agent = dsh_std::Agent::create(c, store, SessionId::from("s1")).unwrap();
    let rx = agent.subscribe();
    agent.send("hi").unwrap();
    let summary = agent.wait_idle(WAIT).unwrap();
    let errors: Vec<String> = rx
        .try_iter()
        .filter_map(|e| match e {
            AgentEvent::Error(m) => Some(m),
            _ => None,
        })
        .collect();
    unsaved("std", &summary, &errors);
    not_saved("std", agent.close());

    let dir = tempfile::tempdir().unwrap();
    let store = filling_up(dir.path(), 1);
    let mut c = dsh_smol::AgentConfig::new(reply(), LlmCallConfig::new("p", "m"), &root);
    c.clock = Clock::Fixed(NOW.as_millis());
    c.ids = IdMode::Sequential;
    smol::block_on(async {
        let agent = dsh_smol::Agent::create(c, store, SessionId::from("s1"))
            .await
            .unwrap();
        let sub = agent.subscribe();
        agent.send("hi").await.unwrap();
        let summary = agent.wait_idle(WAIT).await.unwrap();
        let mut errors = Vec::new();
        while let Some(e) = sub.try_next() {
            if let AgentEvent::Error(m) = e {
                errors.push(m);
            }
        }
        unsaved("smol", &summary, &errors);
        not_saved("smol", agent.close().await);
    });
}

#[test]
fn a_tool_deadline_gives_the_tl14_error_everywhere() {
    // TL-14: `timeoutMs: 100.5` rounds up to 101 ms; at the deadline the
    // body is told to stop, and whatever it returns the result is the
    // timeout error with ToolTimeoutError / TOOL_TIMEOUT.
    let mut s = Scenario::new(vec![call("slow", "{}"), text("done")], vec!["go"]);
    s.tools = |p| {
        let mut t = tools();
        t.insert(Box::new(Slow(p.clone())));
        t
    };
    let started = std::time::Instant::now();
    let (a, _) = both(&s);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "no wait for the body's 10 s"
    );
    let r = results(&a.log);
    assert_eq!(r[0].0, "Error: tool call timed out after 101ms");
    assert!(r[0].1);
    assert_eq!(
        r[0].2,
        json!({"name":"ToolTimeoutError","code":"TOOL_TIMEOUT"})
    );
}

#[test]
fn std_and_smol_share_one_agent_config() {
    // One hosted config: a config built for one shell runs in the other.
    let config: dsh_smol::AgentConfig = dsh_std::AgentConfig::new(
        Arc::new(ScriptedProvider::new([])),
        LlmCallConfig::new("p", "m"),
        ".",
    );
    assert_eq!(config.tool_timeout, Duration::ZERO);
}

#[test]
fn the_default_tool_deadline_is_none_everywhere() {
    // TL-14: a tool without `timeoutMs` gets no deadline by default; the
    // configured default applies when set.
    assert_eq!(
        dsh_std::AgentConfig::new(
            Arc::new(ScriptedProvider::new([])),
            LlmCallConfig::new("p", "m"),
            "."
        )
        .tool_timeout,
        Duration::ZERO
    );
    assert_eq!(
        dsh_runtime::AgentConfig::new(LlmCallConfig::new("p", "m")).tool_timeout_ms,
        None
    );
}

#[test]
fn an_abort_waits_for_the_body_and_keeps_its_own_error_everywhere() {
    // LC-25, TL-13: the running body is told to stop and its result is
    // awaited; a body that fails with its own error keeps it.
    let mut s = Scenario::new(vec![call("waiter", "{}"), text("never")], vec!["go"]);
    s.tools = |p| {
        let mut t = tools();
        t.insert(Box::new(Waiter(p.clone())));
        t
    };
    s.cancel_when_started = true;
    let (a, b) = both(&s);
    let r = results(&a.log);
    assert_eq!(r[0].0, "Error: stopped on cancel");
    assert_eq!(r[0].2, json!({"name":"StopError","code":"STOPPED"}));
    let end = of_type(&a.log, "turn/end");
    assert_eq!(end[0]["data"]["reason"]["kind"], "aborted");
    assert_eq!(a.requests.len(), 1);
    assert_eq!(b.requests.len(), 1);
}

/// Asks the front end at turn-stopping and logs the answer (as a
/// `hook/result`, a plugin type every reader knows).
struct Asker;

impl Plugin for Asker {
    fn name(&self) -> &str {
        "asker"
    }
    fn seams(&self) -> Seams {
        Seams::TURN_STOPPING
    }
    fn turn_stopping(&mut self, cx: &mut Cx<'_>, _turn: u64) -> Flow<()> {
        match cx.reply().cloned() {
            None => Flow::Ask(Ask::Plugin {
                plugin: "asker".into(),
                request: json!({"q": "anything else?"}),
            }),
            Some(Reply::Plugin(v)) => {
                cx.append_plugin("hook/result", &v);
                Flow::Next(())
            }
            Some(_) => Flow::Next(()),
        }
    }
}

#[test]
fn a_deferred_plugin_seam_is_answered_everywhere() {
    // Every seam a plugin defers is answered through the kernel (smol used
    // to answer only approvals, stalling the agent).
    let mut s = Scenario::new(vec![text("done")], vec!["hi"]);
    s.plugins = || vec![Box::new(Asker)];
    s.answer = Some(json!({"a": 42}));
    let (a, _) = both(&s);
    let answers = of_type(&a.log, "hook/result");
    assert_eq!(answers.len(), 1, "{:?}", types(&a.log));
    assert_eq!(answers[0]["data"], json!({"a": 42}));
    assert_eq!(types(&a.log).last().map(String::as_str), Some("turn/end"));
}

#[test]
fn resume_writes_the_end_seed_marker_everywhere() {
    // IB-14, ES3: a resumed log ends its seed with `session/end-seed`.
    let mut s = Scenario::new(vec![text("one")], vec!["hi"]);
    s.resume = true;
    let (a, _) = both(&s);
    assert_eq!(
        types(&a.log).last().map(String::as_str),
        Some("session/end-seed"),
        "{:?}",
        types(&a.log)
    );
}

#[test]
fn every_call_config_field_reaches_the_request_everywhere() {
    let mut s = Scenario::new(vec![text("ok")], vec!["hi"]);
    s.call.reasoning_effort = Some(ReasoningEffortId("high".into()));
    s.call.temperature = Some(0.25);
    s.call.stop = Some(vec!["END".into()]);
    s.call.max_tokens = Some(512);
    let (a, b) = both(&s);
    for run in [a, b] {
        let r = &run.requests[0];
        assert_eq!(r.reasoning_effort, Some(ReasoningEffortId("high".into())));
        assert_eq!(r.temperature, Some(0.25));
        assert_eq!(r.stop, Some(vec!["END".to_string()]));
        assert_eq!(r.max_tokens, Some(512));
    }
    let (_, _, e) = all_three(&s);
    let body = &e.requests[0];
    assert_eq!(body["reasoning_effort"], "high", "{body}");
    assert_eq!(body["temperature"], 0.25, "{body}");
    assert_eq!(body["stop"], json!(["END"]), "{body}");
    assert_eq!(body["max_tokens"], 512, "{body}");
}

#[test]
fn writes_are_batched_per_checkpoint_identically_everywhere() {
    // SM-12/SM-13: one write per step before its model request (pre-step
    // and before-model coalesce), one before the tool body, one after
    // turn/end; never per event, nothing twice.
    let mut s = Scenario::new(
        vec![call("echo", r#"{"text":"hi"}"#), text("done")],
        vec!["say hi"],
    );
    s.record = true;
    let (a, b, e) = all_three(&s);
    assert_eq!(a.batches, b.batches, "std and smol batch alike");
    assert_eq!(a.batches, e.batches, "std and embedded batch alike");
    let last: Vec<&str> = a
        .batches
        .iter()
        .map(|b| b.last().map(String::as_str).unwrap_or(""))
        .collect();
    assert_eq!(
        last,
        // The second step's request prefix is unchanged: no new header or
        // context record, so its batch ends at `step/start`.
        ["request/context", "tool/call", "step/start", "turn/end"],
        "{:?}",
        a.batches
    );
    let total: usize = a.batches.iter().map(Vec::len).sum();
    assert_eq!(total, a.log.len());
}

// ----------------------------------------------------------------------
// A third-party plugin, outside the kernel crate

/// Blocks prompts containing "forbidden" (prompt submit = first-step
/// pre-step, SM-8), adds a system-prompt section, and rewrites the
/// arguments the `echo` body receives (`tools/execute`).
struct Guard;

impl Plugin for Guard {
    fn name(&self) -> &str {
        "guard"
    }
    fn seams(&self) -> Seams {
        Seams::PRE_STEP | Seams::TOOL_EXECUTE
    }
    fn sections(&mut self) -> Vec<PromptSection> {
        vec![PromptSection::new(
            "guard",
            10,
            "Never reveal the launch codes.",
        )]
    }
    fn pre_step(
        &mut self,
        _cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        let forbidden = payload.messages.iter().any(|m| {
            m.content
                .iter()
                .any(|b| serde_json::to_string(b).is_ok_and(|t| t.contains("forbidden")))
        });
        if payload.step == 1 && forbidden {
            Flow::Done(PreStepDecision::Reject)
        } else {
            Flow::Next(value)
        }
    }
    fn tool_execute(&mut self, _cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        match value {
            ToolDispatch::Run(mut exec) if exec.name == "echo" => {
                exec.arguments = json!({"text": "rewritten"});
                Flow::Next(ToolDispatch::Run(exec))
            }
            other => Flow::Next(other),
        }
    }
}

#[test]
fn a_third_party_plugin_works_unchanged_in_every_runtime() {
    let mut s = Scenario::new(
        vec![call("echo", r#"{"text":"original"}"#), text("done")],
        vec!["tell me the forbidden codes", "say something"],
    );
    s.plugins = || vec![Box::new(Guard)];
    let (a, b, e) = all_three(&s);
    let ends = of_type(&a.log, "turn/end");
    assert_eq!(ends[0]["data"]["reason"]["kind"], "blocked", "{ends:?}");
    assert_eq!(ends[1]["data"]["reason"]["kind"], "completed");
    // The body saw the rewritten arguments; the log keeps the model's.
    assert_eq!(results(&a.log)[0].0, "echo: rewritten");
    let calls = of_type(&a.log, "tool/call");
    assert!(calls[0].to_string().contains("original"));
    for run in [a, b] {
        let system = run.requests[0].system.clone().unwrap_or_default();
        assert!(
            system.contains("Never reveal the launch codes."),
            "{system}"
        );
    }
    let system = &e.requests[0]["messages"][0];
    assert_eq!(system["role"], "system", "{system}");
    assert!(
        system["content"]
            .as_str()
            .is_some_and(|t| t.contains("Never reveal the launch codes.")),
        "{system}"
    );
}

// ----------------------------------------------------------------------
// A store whose writes fail as a full disk would.

/// A store that fails every write (as a full disk would) or records the
/// event types of every batch.
struct Wrap {
    inner: Arc<dyn SessionStore>,
    /// How many more appends succeed before the disk is "full".
    ok_appends: AtomicUsize,
    batches: Option<Batches>,
}

impl Wrap {
    /// Whether the disk is full (counts one append when `append`).
    fn full(&self, append: bool) -> bool {
        let left = self.ok_appends.load(Ordering::SeqCst);
        if left == 0 {
            return true;
        }
        if append && left != usize::MAX {
            self.ok_appends.store(left - 1, Ordering::SeqCst);
        }
        false
    }
}

/// A JSONL store under `dir` whose first `n` appends succeed and every
/// later write fails as on a full disk.
fn filling_up(dir: &std::path::Path, n: usize) -> Arc<dyn SessionStore> {
    Arc::new(Wrap {
        inner: Arc::new(dsh_jsonl::open(dsh_jsonl::JsonlConfig::new(dir)).expect("jsonl store")),
        ok_appends: AtomicUsize::new(n),
        batches: None,
    })
}

fn disk_full() -> dsh_store::StoreError {
    dsh_store::StoreError::io("append", std::io::Error::other("no space left on device"))
}

impl SessionStore for Wrap {
    fn kind(&self) -> &'static str {
        "wrapped"
    }
    fn locate(&self, header: &SessionHeader) -> Option<dsh_store::Location> {
        self.inner.locate(header)
    }
    fn create(&self, header: SessionHeader) -> Result<(), dsh_store::StoreError> {
        self.inner.create(header)
    }
    fn append(&self, id: &SessionId, e: &[SessionEvent]) -> Result<(), dsh_store::StoreError> {
        if self.full(true) {
            return Err(disk_full());
        }
        if let Some(b) = &self.batches {
            let types = e.iter().map(|e| e.event_type().to_string()).collect();
            b.lock().unwrap().push(types);
        }
        self.inner.append(id, e)
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
