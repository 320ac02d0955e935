//! Trace export end to end: `dsh run` against the
//! bundled mock server exports a scripted two-step tool turn to a local
//! OTLP/HTTP receiver that decodes it with the official protobuf
//! definitions (`cli/tests/otel/receiver.py`, the `opentelemetry-proto`
//! PyPI package); a dead or silent collector does not fail the turn.
//!
//! The receiver's Python is `$DSH_OTEL_PYTHON` (`.ci/run` sets it to a venv
//! with the package), else `python3`. Without the package the receiver
//! tests are skipped, except with `CI=true`, where they fail.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use dsh_deepseek::mock::{MockServer, Script};
use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dsh")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Two steps: the model calls bash, then answers. Every text is marked so
/// a leak is found by substring.
const TOOL_TURN: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"call-1","name":"bash","arguments":["{\"command\":\"echo secret-tool-output-77\",\"description\":\"secret-args-66\"}"]}],
   "usage":{"prompt_tokens":120,"completion_tokens":9,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":56}}},
  {"turn":{"text":["secret-answer-55"],
   "usage":{"prompt_tokens":150,"completion_tokens":4,"prompt_cache_hit_tokens":128,"prompt_cache_miss_tokens":22}}}
]}"#;

const SECRETS: [&str; 4] = [
    "secret-prompt-33",
    "secret-tool-output-77",
    "secret-args-66",
    "secret-answer-55",
];

/// `dsh run --yes` of the tool turn with `extra` flags and env; returns the
/// output and the stored log's text.
fn run_turn(extra: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = MockServer::start_on(Script::from_json(TOOL_TURN).unwrap(), 0).unwrap();
    let mut cmd = Command::new(bin());
    cmd.env("XDG_DATA_HOME", data.path())
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_HEADERS")
        .env_remove("OTEL_SDK_DISABLED")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .args([
            "run",
            "--yes",
            "--no-title",
            "--base-url",
            &server.url(),
            "--cwd",
        ])
        .arg(ws.path())
        .args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.arg("secret-prompt-33").output().unwrap();
    let logs = find_logs(&data.path().join("dsh/sessions"));
    assert_eq!(logs.len(), 1, "one session stored");
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    (o, log)
}

fn find_logs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for project in std::fs::read_dir(dir).unwrap() {
        for session in std::fs::read_dir(project.unwrap().path()).unwrap() {
            let p = session.unwrap().path().join("session.jsonl");
            if p.exists() {
                out.push(p);
            }
        }
    }
    out
}

/// The turn ran both steps and completed.
fn assert_completed(o: &Output, log: &str) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("secret-answer-55"));
    assert!(log.contains(r#""type":"turn/end""#) && log.contains(r#""kind":"completed""#));
    assert!(log.contains("secret-tool-output-77"), "the tool ran");
}

fn assert_stderr_has(o: &Output, needle: &str) {
    let err = text(&o.stderr);
    assert!(err.contains(needle), "no {needle:?} in: {err}");
}

/// The receiver process; killed on drop.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn python() -> String {
    std::env::var("DSH_OTEL_PYTHON").unwrap_or_else(|_| String::from("python3"))
}

/// Starts the receiver, or `None` (skip) when `opentelemetry-proto` is not
/// installed; with `CI=true` that is a failure.
fn receiver() -> Option<Receiver> {
    let py = python();
    let probe = Command::new(&py)
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        let why =
            format!("{py} cannot import opentelemetry.proto (pip install opentelemetry-proto)");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true: {why}");
        }
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otel/receiver.py");
    let mut child = Command::new(&py)
        .arg(script)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().expect("the receiver prints its port");
    Some(Receiver {
        child,
        port,
        out,
        _dir: dir,
    })
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn by_name<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// The exported trace of the two-step tool turn: span names, the
/// parent/child tree, the GenAI attributes, the auth header, and no
/// prompt, answer or tool text.
#[test]
fn run_exports_the_tool_turn_as_one_trace_to_an_otlp_receiver() {
    let Some(rx) = receiver() else { return };
    let endpoint = format!("http://127.0.0.1:{}", rx.port);
    let (o, log) = run_turn(
        &["--otlp-endpoint", &endpoint],
        &[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer%20tok-9f3",
        )],
    );
    assert_completed(&o, &log);
    let out = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        !out.contains("tok-9f3"),
        "the header value was shown: {out}"
    );
    assert!(!out.contains("traces:"), "nothing was lost: {out}");

    let spans = rx.spans();
    let mut names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    names.sort();
    let model = spans
        .iter()
        .find_map(|s| attr(s, "gen_ai.request.model").as_str())
        .expect("a chat span names its model")
        .to_string();
    let chat = format!("chat {model}");
    let mut want = vec![
        "invoke_agent dsh",
        "step",
        "step",
        &chat,
        &chat,
        "execute_tool bash",
    ];
    want.sort();
    assert_eq!(names, want, "{spans:#?}");

    // One trace; the turn at the root; steps under it; the attempts and
    // the tool under their steps.
    let trace = &spans[0]["trace_id"];
    assert!(spans.iter().all(|s| &s["trace_id"] == trace));
    let root = by_name(&spans, "invoke_agent dsh")[0];
    assert_eq!(root["parent_span_id"], "");
    assert_eq!(attr(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(root, "dsh.turn.end_reason"), "completed");
    assert!(log.contains(&format!(
        "\"id\":\"{}\"",
        attr(root, "gen_ai.conversation.id").as_str().unwrap()
    )));
    let mut steps = by_name(&spans, "step");
    steps.sort_by_key(|s| s["attributes"]["dsh.step"].as_i64());
    for s in &steps {
        assert_eq!(s["parent_span_id"], root["span_id"]);
    }
    let mut chats = by_name(&spans, &chat);
    chats.sort_by_key(|s| s["start"].as_u64());
    for (c, s) in chats.iter().zip(&steps) {
        assert_eq!(c["parent_span_id"], s["span_id"]);
        assert_eq!(c["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(attr(c, "gen_ai.operation.name"), "chat");
        // The mock is an OpenAI-compatible endpoint on loopback
        // (`openai-compatible:127.0.0.1:PORT`).
        assert_eq!(attr(c, "gen_ai.provider.name"), "openai");
        assert_eq!(attr(c, "gen_ai.response.model"), model.as_str());
    }
    // The mock's usage: input includes the cache hits.
    assert_eq!(attr(chats[0], "gen_ai.usage.input_tokens"), 120);
    assert_eq!(attr(chats[0], "gen_ai.usage.cache_read.input_tokens"), 64);
    assert_eq!(attr(chats[0], "gen_ai.usage.output_tokens"), 9);
    assert_eq!(
        attr(chats[0], "gen_ai.response.finish_reasons"),
        &serde_json::json!(["tool_calls"])
    );
    assert_eq!(attr(chats[1], "gen_ai.usage.input_tokens"), 150);
    assert_eq!(
        attr(chats[1], "gen_ai.response.finish_reasons"),
        &serde_json::json!(["stop"])
    );
    let tool = by_name(&spans, "execute_tool bash")[0];
    assert_eq!(tool["parent_span_id"], steps[0]["span_id"]);
    assert_eq!(attr(tool, "gen_ai.tool.name"), "bash");
    assert_eq!(attr(tool, "gen_ai.tool.call.id"), "call-1");
    assert_eq!(tool["status"]["code"], 0, "unset");
    assert!(
        spans
            .iter()
            .all(|s| s["end"].as_u64() >= s["start"].as_u64())
    );

    // Transport: protobuf, the header sent, service.name the default.
    assert_eq!(spans[0]["content_type"], "application/x-protobuf");
    assert_eq!(spans[0]["authorization"], "Bearer tok-9f3");
    assert_eq!(spans[0]["resource"]["service.name"], "dsh");

    let raw = std::fs::read_to_string(&rx.out).unwrap();
    for s in SECRETS {
        assert!(!raw.contains(s), "{s} was exported without --otel-content");
    }
}

/// With `--otel-content` the prompt, the tool's arguments and output and
/// the answer are on the spans; `OTEL_SERVICE_NAME` names the service.
#[test]
fn otel_content_exports_prompt_tool_text_and_answer() {
    let Some(rx) = receiver() else { return };
    let endpoint = format!("http://127.0.0.1:{}", rx.port);
    let (o, log) = run_turn(
        &["--otlp-endpoint", &endpoint, "--otel-content"],
        &[("OTEL_SERVICE_NAME", "agents-7")],
    );
    assert_completed(&o, &log);
    let spans = rx.spans();
    let root = by_name(&spans, "invoke_agent dsh")[0];
    assert!(
        attr(root, "gen_ai.input.messages")
            .as_str()
            .unwrap()
            .contains("secret-prompt-33")
    );
    let tool = by_name(&spans, "execute_tool bash")[0];
    assert!(
        attr(tool, "gen_ai.tool.call.arguments")
            .as_str()
            .unwrap()
            .contains("secret-args-66")
    );
    assert!(
        attr(tool, "gen_ai.tool.call.result")
            .as_str()
            .unwrap()
            .contains("secret-tool-output-77")
    );
    assert!(spans.iter().any(|s| {
        attr(s, "gen_ai.output.messages")
            .as_str()
            .is_some_and(|m| m.contains("secret-answer-55"))
    }));
    assert_eq!(spans[0]["resource"]["service.name"], "agents-7");
}

/// Nothing listens at the endpoint: the turn completes, and the lost spans
/// are reported on stderr.
#[test]
fn a_dead_collector_does_not_fail_the_turn() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let (o, log) = run_turn(&["--otlp-endpoint", &endpoint], &[]);
    assert_completed(&o, &log);
    assert_stderr_has(&o, "dsh: traces: 6 span(s) not exported");
}

/// A collector that accepts and never answers: the turn completes and the
/// process still ends.
#[test]
fn a_silent_collector_does_not_fail_or_hang_the_turn() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept() {
            held.push(conn);
            if held.len() >= 4 {
                break;
            }
        }
        held
    });
    let endpoint = format!("http://127.0.0.1:{port}");
    let (o, log) = run_turn(
        &[],
        &[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("{endpoint}/v1/traces"),
        )],
    );
    assert_completed(&o, &log);
    assert_stderr_has(&o, "dsh: traces:");
    drop(hold);
}

/// A bad endpoint is a clear setup error, not a silent no-op.
#[test]
fn a_bad_endpoint_is_a_usage_error() {
    let data = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .env("XDG_DATA_HOME", data.path())
        .stdin(Stdio::null())
        .env_remove("DEEPSEEK_API_KEY")
        .args([
            "run",
            "--base-url",
            "http://127.0.0.1:9",
            "--otlp-endpoint",
            "ftp://x",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_stderr_has(&o, "--otlp-endpoint: not an http:// or https:// URL");
}

/// `dsh acp --otlp-endpoint` traces the prompt turns of its sessions.
#[test]
fn acp_exports_a_prompt_turn() {
    use std::io::Write;
    let Some(rx) = receiver() else { return };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = MockServer::start_on(
        Script::from_json(
            r#"{"responses":[{"turn":{"text":["secret-answer-55"]}},{"turn":{"text":["A title"]}}]}"#,
        )
        .unwrap(),
        0,
    )
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{}", rx.port);
    let mut child = Command::new(bin())
        .env("XDG_DATA_HOME", data.path())
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .args([
            "acp",
            "--base-url",
            &server.url(),
            "--otlp-endpoint",
            &endpoint,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: i64, method: &str, params: Value| -> Value {
        let msg =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").unwrap();
        loop {
            let line = lines.next().expect("dsh acp answers").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    };
    call(
        0,
        "initialize",
        serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let new = call(
        1,
        "session/new",
        serde_json::json!({"cwd": ws.path(), "mcpServers": []}),
    );
    let session = new["result"]["sessionId"].as_str().unwrap().to_string();
    let done = call(
        2,
        "session/prompt",
        serde_json::json!({"sessionId": session, "prompt": [{"type": "text", "text": "secret-prompt-33"}]}),
    );
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    drop(stdin); // end of input: dsh acp closes its sessions and exits
    assert!(child.wait().unwrap().success());
    let spans = rx.spans();
    let root = by_name(&spans, "invoke_agent dsh");
    assert_eq!(root.len(), 1, "{spans:#?}");
    assert_eq!(attr(root[0], "gen_ai.conversation.id"), session.as_str());
    assert_eq!(by_name(&spans, "step").len(), 1);
    assert!(
        spans
            .iter()
            .any(|s| attr(s, "gen_ai.operation.name") == "chat")
    );
    let raw = std::fs::read_to_string(&rx.out).unwrap();
    assert!(!raw.contains("secret-"), "{raw}");
}
