//! End to end: the session names the endpoint the user pointed
//! dsh at, a log written with the old route name resumes, and the context
//! window and token estimate work for a server that reports neither.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use dsh_core::jsonl::load_log;
use dsh_core::session::{EventData, SessionEvent};
use dsh_deepseek::mock::MockServer;
use support::{dsh, mock, text, transcripts};

fn events(path: &Path) -> Vec<SessionEvent> {
    let bytes = std::fs::read(path).unwrap();
    let loaded = load_log(&bytes, &[]).expect("a valid session log");
    assert!(!loaded.needs_repair());
    loaded.session.events().to_vec()
}

/// `(provider, contextWindow)` of every `request/context` event.
fn contexts(events: &[SessionEvent]) -> Vec<(String, Option<u64>)> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::RequestContext(c) => Some((c.provider.clone(), c.context_window)),
            _ => None,
        })
        .collect()
}

/// The `config.provider` of every `request/header` event.
fn header_providers(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::RequestHeader(h) => Some(h.header.config.provider.clone()),
            _ => None,
        })
        .collect()
}

const TWO_TURNS: &str = r#"{"responses":[
  {"turn":{"text":["first answer"],"usage":{"prompt_tokens":100,"completion_tokens":7}}},
  {"turn":{"text":["second answer"],"usage":{"prompt_tokens":120,"completion_tokens":7}}}]}"#;

/// One `dsh run` turn against `server` (a 64k window set): the log and the
/// route the server should be recorded under.
fn first_turn(data: &Path, server: &MockServer) -> (PathBuf, String) {
    let url = format!("{}/v1", server.url());
    let o = dsh(data)
        .args(["run", "--base-url", &url, "--context-window", "65536", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let route = format!(
        "openai-compatible:{}",
        server.url().trim_start_matches("http://")
    );
    (transcripts(data).remove(0), route)
}

/// A local OpenAI-compatible server is recorded as
/// `openai-compatible:<host:port>`, not as DeepSeek's official API
/// (request/header, request/context and the answer's source).
#[test]
fn a_local_server_is_named_by_its_host() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(TWO_TURNS);
    let (log, route) = first_turn(data.path(), &server);
    let ev = events(&log);
    assert_eq!(header_providers(&ev), vec![route.clone()]);
    assert_eq!(contexts(&ev), vec![(route.clone(), Some(65536))]);
    let raw = std::fs::read_to_string(&log).unwrap();
    assert!(
        raw.contains(&format!(r#""provider":"{route}""#)),
        "the answer's source names the route"
    );
    assert!(!raw.contains("deepseek-official"), "{raw}");
}

/// A log written before the rename (its header and
/// messages say `deepseek-official` for a local server) resumes: the next
/// turn runs, records a header under the new name, and the log checks
/// and replays clean.
#[test]
fn a_log_with_the_old_route_name_resumes() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(TWO_TURNS);
    let url = format!("{}/v1", server.url());
    let (log, route) = first_turn(data.path(), &server);
    let old = std::fs::read_to_string(&log)
        .unwrap()
        .replace(&route, "deepseek-official");
    assert!(old.contains("deepseek-official"));
    std::fs::write(&log, &old).unwrap();
    let id = load_log(old.as_bytes(), &[])
        .unwrap()
        .session
        .header()
        .id
        .clone();

    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &url, "--context-window", "65536"])
        .args(["--resume", id.as_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"second prompt\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("(resumed)"), "{out}");
    assert!(out.contains("second answer"), "{out}");
    let ev = events(&log);
    assert_eq!(
        header_providers(&ev),
        vec!["deepseek-official".to_string(), route.clone()]
    );
    assert_eq!(
        contexts(&ev).last().map(|c| c.0.clone()),
        Some(route),
        "the resumed turn's request names the new route"
    );
    for check in [&["log", "check"][..], &["replay", "--check"][..]] {
        let o = dsh(data.path()).args(check).arg(&log).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{check:?}: {}", text(&o.stdout));
    }
}

/// CP-3 (a): a chat against a server that reports no usage, on
/// an 8k window set by `--context-window`: the estimated usage crosses 80%
/// and pressure compaction runs; the token line shows the estimate marked
/// `~est.`; no estimate reaches the log as usage; the log checks clean.
#[test]
fn compaction_runs_on_an_8k_window_without_reported_usage() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let words = "word ".repeat(800);
    let turns: Vec<serde_json::Value> = (0..8)
        .map(|i| serde_json::json!({"turn": {"text": [format!("answer {i}: {words}")]}}))
        .collect();
    let server = mock(&serde_json::json!({ "responses": turns }).to_string());
    let url = format!("{}/v1", server.url());
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &url, "--context-window", "8192"])
        .arg("--cwd")
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for i in 0..4 {
        writeln!(stdin, "prompt {i}: {words}").unwrap();
    }
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains("tokens: no usage reported; ~est. input "),
        "{out}"
    );
    let log = transcripts(data.path()).remove(0);
    let ev = events(&log);
    assert!(contexts(&ev).iter().all(|c| c.1 == Some(8192)));
    let types: Vec<&str> = ev.iter().map(|e| e.event_type()).collect();
    let start = types
        .iter()
        .position(|t| *t == "compaction/start")
        .unwrap_or_else(|| panic!("no compaction: {types:?}"));
    assert_eq!(
        &types[start..start + 4],
        [
            "compaction/start",
            "compaction/summary",
            "user/message",
            "compaction/end"
        ]
    );
    assert!(
        ev.iter().all(|e| match e.data() {
            EventData::AssistantMessage(m) => m.usage.is_none(),
            _ => true,
        }),
        "an estimate was logged as usage"
    );
    let o = dsh(data.path())
        .args(["log", "check"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
}

/// `dsh sse translate --provider anthropic` prints what the
/// Anthropic codec yields for each vector, ending in a `finish`.
#[test]
fn sse_translate_reads_the_anthropic_wire() {
    let data = tempfile::tempdir().unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/anthropic/tests/vectors");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    for path in &names {
        let o = dsh(data.path())
            .args(["sse", "translate", "--provider", "anthropic"])
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", path.display());
        let body = std::fs::read(path).unwrap();
        let expected: String = dsh_anthropic::decode_pieces(
            std::iter::once(&body[..]),
            dsh_deepseek::DEFAULT_MAX_EVENT_BYTES,
        )
        .iter()
        .map(|c| serde_json::to_string(c).unwrap() + "\n")
        .collect();
        assert_eq!(text(&o.stdout), expected, "{}", path.display());
        assert!(expected.lines().last().unwrap().contains("\"finish\""));
    }
    // The DeepSeek wire does not read Anthropic events: no content.
    let o = dsh(data.path())
        .args(["sse", "translate", "--interop"])
        .arg(dir.join("text.sse"))
        .output()
        .unwrap();
    assert!(!text(&o.stdout).contains("Hello"), "{}", text(&o.stdout));
}

fn anthropic_vector(name: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/anthropic/tests/vectors");
    std::fs::read_to_string(dir.join(name)).unwrap()
}

/// `dsh run --provider anthropic` speaks the Messages API
/// to an Anthropic-compatible endpoint (here the mock serving recorded
/// event streams): the key from `ANTHROPIC_API_KEY` goes in `x-api-key`,
/// the session names `anthropic-compatible:<host:port>`, a tool call runs
/// and the next request replays the signed thinking and the tool result.
#[test]
fn a_run_over_the_anthropic_wire() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(
        &serde_json::json!({"responses": [
            {"fault": {"kind": "raw", "body": anthropic_vector("thinking_tool_use.sse"), "chunkSize": 9}},
            {"fault": {"kind": "raw", "body": anthropic_vector("text.sse")}}
        ]})
        .to_string(),
    );
    let o = dsh(data.path())
        .env("ANTHROPIC_API_KEY", "sk-ant-cli-SECRET")
        .args([
            "run",
            "--yes",
            "--provider",
            "anthropic",
            "--model",
            "claude-test",
        ])
        .args([
            "--base-url",
            &server.url(),
            "--context-window",
            "100000",
            "--cwd",
        ])
        .arg(ws.path())
        .arg("weather?")
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("Hello! 你好 🙂"), "{out}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header_values("x-api-key"), vec!["sk-ant-cli-SECRET"]);
        assert!(r.header_values("authorization").is_empty());
    }
    let second: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    let assistant = &messages[1]["content"];
    assert_eq!(
        assistant[0],
        serde_json::json!({"type": "thinking", "thinking": "The user wants the weather. I will call the tool.",
                           "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"})
    );
    assert_eq!(assistant[2]["type"], "tool_use");
    assert_eq!(
        assistant[2]["input"],
        serde_json::json!({"location": "San Francisco, CA"})
    );
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_01T1x");
    let ev = events(&transcripts(data.path()).remove(0));
    let route = format!(
        "anthropic-compatible:{}",
        server.url().trim_start_matches("http://")
    );
    assert_eq!(header_providers(&ev), vec![route]);
    let raw = std::fs::read_to_string(transcripts(data.path()).remove(0)).unwrap();
    assert!(!raw.contains("sk-ant-cli-SECRET"));
}

/// A base URL ending in `/v1/messages` selects the Anthropic
/// wire without `--provider`; an overloaded server is an error that names
/// the server, retried per `--attempts`.
#[test]
fn the_messages_url_selects_the_wire_and_errors_are_classified() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let overloaded = serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let server = mock(
        &serde_json::json!({"responses": [
            {"fault": {"kind": "http", "status": 529, "body": overloaded}},
            {"fault": {"kind": "raw", "body": anthropic_vector("text.sse")}}
        ]})
        .to_string(),
    );
    let url = format!("{}/v1/messages", server.url());
    let o = dsh(data.path())
        .args(["run", "--model", "claude-test", "--base-url", &url])
        .args([
            "--max-retry-wait",
            "0.01",
            "--context-window",
            "100000",
            "--cwd",
        ])
        .arg(ws.path())
        .arg("hi")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("Hello!"), "{out}");
    assert!(err.contains("Overloaded (HTTP 529 from"), "{err}");
    assert_eq!(server.requests().len(), 2, "retried once");
    // Without a model there is nothing to ask for.
    let o = dsh(data.path())
        .args(["run", "--base-url", &url, "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--model is required"));
}
