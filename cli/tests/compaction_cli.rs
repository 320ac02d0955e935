//! `dsh demo --scenario compaction` end to end (loop.md CP-1 to CP-3):
//! four scripted turns through the std runtime, the mock
//! DeepSeek server and the JSONL store cross a small context window;
//! pressure compaction summarises the older history and the conversation
//! continues; the stored log checks and replays.

mod support;

use std::process::{Command, Stdio};
use support::{dsh, text, transcripts};

#[test]
fn demo_compaction_crosses_the_window_compacts_and_replays() {
    let data = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let o = dsh(data.path())
        .args(["demo", "--scenario", "compaction", "--store-dir"])
        .arg(store.path())
        .arg("--workspace")
        .arg(ws.path())
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    // The turn after the checkpoint answered from the summary, and the
    // conversation went on.
    assert!(out.contains("From the summary"), "{out}");
    assert!(out.contains("Still here"), "{out}");
    assert!(out.contains("compaction at seq"), "{out}");
    // The log is where --store-dir says and where the output says.
    let logs = transcripts(store.path());
    assert_eq!(logs.len(), 1, "{out}");
    let log = logs[0].to_str().unwrap();
    assert!(out.contains(&format!("dsh replay --check {log}")), "{out}");
    let raw = std::fs::read_to_string(&logs[0]).unwrap();
    // CP-2 order: start, summary, the replacing user/message, end.
    let types: Vec<&str> = raw
        .lines()
        .filter_map(|l| l.split("\"type\":\"").nth(1))
        .filter_map(|t| t.split('"').next())
        .collect();
    let start = types.iter().position(|t| *t == "compaction/start").unwrap();
    assert_eq!(
        &types[start..start + 4],
        [
            "compaction/start",
            "compaction/summary",
            "user/message",
            "compaction/end"
        ]
    );
    // The first turn's surface: its prompt (seq 4), the runtime-context
    // message of the system-prompt plugin (seq 5) and the answer (seq 13).
    assert!(
        raw.contains(r#""surfaceOp":{"op":"replace","start":4,"end":13}"#),
        "{raw}"
    );
    for args in [["log", "check"], ["replay", "--check"]] {
        let c = dsh(data.path()).args(args).arg(log).output().unwrap();
        assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    }
}

/// CP-3 (c): `/compact` in `dsh chat` summarises the older history
/// between turns through the same provider; the chat goes on.
#[test]
fn chat_compact_command_summarises_between_turns() {
    use dsh_deepseek::mock::{MockServer, Script};
    use std::io::Write;
    let script = r#"{"responses":[
      {"turn":{"text":["one"],"usage":{"prompt_tokens":10,"completion_tokens":1}}},
      {"turn":{"text":["two"],"usage":{"prompt_tokens":10,"completion_tokens":1}}},
      {"turn":{"text":["SUMMARY-TEXT"],"usage":{"prompt_tokens":10,"completion_tokens":1}}},
      {"turn":{"text":["three"],"usage":{"prompt_tokens":10,"completion_tokens":1}}}
    ]}"#;
    let server = MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap();
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"first\nsecond\n/compact\nthird\n")
        .unwrap();
    drop(stdin);
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(20));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let o = child.wait_with_output().unwrap();
    drop(watchdog);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains("compacted: the older history is now a summary"),
        "{out}"
    );
    assert!(out.contains("three"), "{out}");
    let logs = transcripts(&data.path().join("dsh"));
    let raw = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(raw.contains(r#""type":"compaction/start","seq""#), "{raw}");
    assert!(raw.contains(r#""turn":null"#), "{raw}");
    assert!(raw.contains("SUMMARY-TEXT"), "{raw}");
    let log = logs[0].to_str().unwrap();
    for args in [["log", "check"], ["replay", "--check"]] {
        let c = dsh(data.path()).args(args).arg(log).output().unwrap();
        assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    }
}

/// Runs `dsh chat` on the mock with `script`, feeding `input`; returns
/// stdout, stderr and the stored log.
fn chat(script: &str, input: &[u8]) -> (String, String, String, String) {
    use dsh_deepseek::mock::{MockServer, Script};
    use std::io::Write;
    let server = MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap();
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(20));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let o = child.wait_with_output().unwrap();
    drop(watchdog);
    let logs = transcripts(&data.path().join("dsh"));
    let raw = std::fs::read_to_string(&logs[0]).unwrap();
    let log = logs[0].to_str().unwrap().to_string();
    let c = dsh(data.path())
        .args(["replay", "--check", &log])
        .output()
        .unwrap();
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
    (text(&o.stdout), text(&o.stderr), raw, log)
}

const OVERFLOW: &str = r#"{"fault":{"kind":"http","status":400,"body":{"error":{"message":"This model's maximum context length is 1000 tokens. However, you requested 1200 tokens.","type":"invalid_request_error"}}}}"#;

/// CP-3 (b), LC-26: a provider overflow (HTTP 400, classified
/// `CONTEXT_WINDOW_EXCEEDED`) compacts and retries the same step once.
#[test]
fn chat_overflow_compacts_and_retries_the_step() {
    let script = format!(
        r#"{{"responses":[
      {{"turn":{{"text":["one"]}}}},
      {{"turn":{{"text":["two"]}}}},
      {OVERFLOW},
      {{"turn":{{"text":["OVERFLOW-SUMMARY"]}}}},
      {{"turn":{{"text":["three after retry"]}}}}
    ]}}"#
    );
    let (out, err, raw, _) = chat(&script, b"first\nsecond\nthird\n");
    assert!(out.contains("three after retry"), "{out}\n{err}");
    assert!(raw.contains("OVERFLOW-SUMMARY"), "{raw}");
    assert!(raw.contains(r#""type":"compaction/end""#), "{raw}");
    let ends = raw.matches(r#""type":"turn/end""#).count();
    let completed = raw.matches(r#""reason":{"kind":"completed"}"#).count();
    assert_eq!((ends, completed), (3, 3), "{raw}");
}

/// CP-3 (b): when nothing can be compacted the overflow ends the turn
/// with the provider's failure, stated clearly.
#[test]
fn chat_overflow_with_nothing_to_compact_fails_clearly() {
    let script = format!(r#"{{"responses":[{OVERFLOW}]}}"#);
    let (out, err, raw, _) = chat(&script, b"only message\n");
    assert!(!raw.contains("compaction/start"), "{raw}");
    assert!(raw.contains("CONTEXT_WINDOW_EXCEEDED"), "{raw}");
    let shown = format!("{out}{err}");
    assert!(shown.contains("maximum context length"), "{shown}");
}
