//! A session store on a full disk. `dsh run` and `dsh chat` run
//! with their store on a 64 KiB tmpfs (in a private mount namespace, so
//! nothing is left mounted) against the bundled mock server, whose answer
//! does not fit. The failed write must end in an error the user sees: a
//! message on stderr and a non-zero exit from `run`, an error and no
//! "saved" claim from `chat`; both for the JSONL and the redb store.
//!
//! Mounting needs root (CI runs as root) or an unprivileged user
//! namespace (`unshare -rm`); without either the tests print why they
//! skip, and under `CI=true` they fail instead.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use dsh_deepseek::mock::{MockServer, Script};

/// An answer of about 100 KiB, in 1000 deltas: larger than the tmpfs.
fn big_answer() -> String {
    let deltas: Vec<String> = (0..1000)
        .map(|i| format!("{i:04} {}", "x".repeat(95)))
        .collect();
    serde_json::json!({"responses": [{"turn": {"text": deltas}}]}).to_string()
}

/// How this user can get a private mount namespace (`unshare -m` as
/// root, `unshare -rm` in an unprivileged user namespace), or why not.
fn unshare_flags() -> Result<&'static str, String> {
    let mut refused = Vec::new();
    for flags in ["-m", "-rm"] {
        match Command::new("unshare")
            .args([flags, "true"])
            .stderr(Stdio::piped())
            .output()
        {
            Ok(o) if o.status.success() => return Ok(flags),
            Ok(o) => refused.push(format!(
                "`unshare {flags}`: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => return Err(format!("cannot run unshare: {e}")),
        }
    }
    Err(format!(
        "no private mount namespace for a tmpfs ({})",
        refused.join("; ")
    ))
}

/// `c` with the private data dir `data`, no provider variables and no
/// colors.
fn private<'c>(c: &'c mut Command, data: &Path) -> &'c mut Command {
    c.env("XDG_DATA_HOME", data)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .env("NO_COLOR", "1")
}

/// `dsh ARGS --store-dir DIR/store` with the store on a fresh 64 KiB
/// tmpfs, mounted in a private mount namespace for this one command; its
/// standard streams piped. `None` (after printing why) when no tmpfs can
/// be mounted.
fn spawn_on_full_disk(dir: &Path, args: &[&str]) -> Option<std::process::Child> {
    let flags = match unshare_flags() {
        Ok(f) => f,
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI runs as root and must run the tmpfs tests: {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let store = dir.join("store");
    std::fs::create_dir_all(&store).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    // `$0` is the store dir, `$@` the dsh command line.
    let script = r#"mount -t tmpfs -o size=64k tmpfs "$0" || exit 97; exec "$@" --store-dir "$0""#;
    let mut c = Command::new("unshare");
    let child = private(&mut c, &data)
        .args([flags, "sh", "-c", script])
        .arg(&store)
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Some(child)
}

/// [`spawn_on_full_disk`], feeding `stdin`, to the end.
fn on_full_disk(dir: &Path, args: &[&str], stdin: &str) -> Option<Output> {
    let mut child = spawn_on_full_disk(dir, args)?;
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_ne!(
        out.status.code(),
        Some(97),
        "the tmpfs mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out)
}

/// The end of `text` (the answer itself is 100 KiB): for failure messages.
fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(800);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn run_on_full_disk(store: &str) {
    let server = MockServer::start_on(Script::from_json(&big_answer()).unwrap(), 0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let args = [
        "run",
        "--no-title",
        "--store",
        store,
        "--base-url",
        &url,
        "hi",
    ];
    let Some(out) = on_full_disk(dir.path(), &args, "") else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = tail(&stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{store}: `run` fails when its log cannot be written; stderr: {stderr}"
    );
    assert!(
        stderr.contains("session store write failed") && stderr.contains("No space left"),
        "{store}: stderr names the failed write: {stderr}"
    );
    assert!(
        stderr.contains("not fully saved"),
        "{store}: stderr says the session is not saved: {stderr}"
    );
}

fn chat_on_full_disk(store: &str) {
    let server = MockServer::start_on(Script::from_json(&big_answer()).unwrap(), 0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let args = ["chat", "--no-title", "--store", store, "--base-url", &url];
    let Some(out) = on_full_disk(dir.path(), &args, "hi\n") else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}\n{stderr}");
    let all = tail(&all);
    let stdout = tail(&stdout);
    assert!(
        all.contains("session store write failed") && all.contains("No space left"),
        "{store}: chat shows the failed write: {all}"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.starts_with("session ") && l.contains(" saved: ")),
        "{store}: chat must not claim the session was saved: {stdout}"
    );
    assert!(
        all.contains("not fully saved"),
        "{store}: chat says the session is not saved: {all}"
    );
    assert_eq!(out.status.code(), Some(1), "{store}: {all}");
}

#[test]
fn run_with_a_jsonl_store_on_a_full_disk_fails_with_the_write_error() {
    run_on_full_disk("jsonl");
}

#[test]
fn run_with_a_redb_store_on_a_full_disk_fails_with_the_write_error() {
    run_on_full_disk("redb");
}

#[test]
fn chat_with_a_jsonl_store_on_a_full_disk_reports_it_and_claims_no_save() {
    chat_on_full_disk("jsonl");
}

#[test]
fn chat_with_a_redb_store_on_a_full_disk_reports_it_and_claims_no_save() {
    chat_on_full_disk("redb");
}

/// The stored transcript of the only session under `data`.
fn only_transcript(data: &Path) -> std::path::PathBuf {
    let mut found = Vec::new();
    let mut dirs = vec![data.join("dsh/sessions")];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
                found.push(p);
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// The last `turn/end` of a stored transcript that loads without repair.
fn last_turn_end(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    let loaded = dsh_core::jsonl::load_log(&bytes, &[]).expect("a valid session log");
    assert!(!loaded.needs_repair(), "the turn was closed properly");
    let end = loaded
        .session
        .events()
        .iter()
        .rev()
        .find(|e| e.event_type() == "turn/end")
        .expect("a turn/end")
        .to_json();
    serde_json::from_str(&end).unwrap()
}

/// `dsh ARGS` with a private data dir and no provider variables or
/// stdin, which must exit 1; its stdout and stderr.
fn run_failing(data: &Path, args: &[&str]) -> (String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    let out = private(&mut c, data)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {}", tail(&stderr));
    (stdout, stderr)
}

/// A server that streams text forever cannot grow dsh without
/// bound: `--max-response-bytes` ends the turn in error
/// `RESPONSE_TOO_LARGE`, the log keeps what came before and is closed.
#[test]
fn run_stops_an_endless_response_at_max_response_bytes() {
    let script = r#"{"responses":[{"fault":{"kind":"endless","turn":{"text":["more text, "]}}}]}"#;
    let server = MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap();
    let data = tempfile::tempdir().unwrap();
    let url = server.url();
    let (stdout, stderr) = run_failing(
        data.path(),
        &[
            "run",
            "--no-title",
            "--max-response-bytes",
            "65536",
            "--base-url",
            &url,
            "go",
        ],
    );
    assert!(
        stderr.contains("exceeded 65536 bytes") || stdout.contains("exceeded 65536 bytes"),
        "the error is shown: {}",
        tail(&stderr)
    );
    assert!(stdout.contains("more text, "), "what streamed is shown");
    let end = last_turn_end(&only_transcript(data.path()));
    assert_eq!(end["data"]["reason"]["kind"], "error", "{end}");
    assert_eq!(
        end["data"]["reason"]["error"]["code"], "RESPONSE_TOO_LARGE",
        "{end}"
    );
    // Bounded: the log holds about the cap, not an endless stream.
    let logged = std::fs::metadata(only_transcript(data.path()))
        .unwrap()
        .len();
    assert!(logged < 4 * 65536 + 16384, "{logged} bytes logged");
}

/// A server that always answers with a tool call cannot keep a
/// turn going: `--max-steps 3` ends it after three model calls, aborted
/// with cause `{"kind":"hook","reason":"max steps per turn (3) reached"}`
/// (loop.md SM-10 d), every call answered and the turn closed.
#[test]
fn run_stops_a_turn_that_never_ends_at_max_steps() {
    let call = r#"{"turn":{"toolCalls":[{"id":"c","name":"read","arguments":["{\"file_path\":\"nothing.txt\"}"]}]}}"#;
    let script = format!(r#"{{"responses":[{}]}}"#, [call; 10].join(","));
    let server = MockServer::start_on(Script::from_json(&script).unwrap(), 0).unwrap();
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let (url, cwd) = (server.url(), work.path().to_str().unwrap().to_string());
    let (stdout, _) = run_failing(
        data.path(),
        &[
            "run",
            "--no-title",
            "--max-steps",
            "3",
            "--cwd",
            &cwd,
            "--base-url",
            &url,
            "loop",
        ],
    );
    assert!(
        stdout.contains("[turn stopped: max steps per turn (3) reached]"),
        "{}",
        tail(&stdout)
    );
    assert_eq!(server.requests().len(), 3, "no model call past the cap");
    let end = last_turn_end(&only_transcript(data.path()));
    assert_eq!(end["data"]["reason"]["kind"], "aborted", "{end}");
    assert_eq!(
        end["data"]["reason"]["reason"],
        serde_json::json!({"kind": "hook", "reason": "max steps per turn (3) reached"}),
        "{end}"
    );
}

/// In ACP, a prompt whose turn could not be written answers
/// `session/prompt` with a JSON-RPC error (code `FLUSH_FAILED` in its
/// data) instead of a stop reason.
#[test]
fn acp_answers_a_prompt_whose_log_cannot_be_written_with_an_error() {
    use std::io::{BufRead, BufReader, Write};
    let server = MockServer::start_on(Script::from_json(&big_answer()).unwrap(), 0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let url = server.url();
    let Some(mut child) = spawn_on_full_disk(dir.path(), &["acp", "--base-url", &url]) else {
        return;
    };
    let mut stdin = child.stdin.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut request = |id: u64, method: &str, params: serde_json::Value| {
        let m = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{m}").unwrap();
        stdin.flush().unwrap();
    };
    let response = |id: u64| loop {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("an answer from dsh acp");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id && v.get("method").is_none() {
            return v;
        }
    };
    request(
        1,
        "initialize",
        serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    response(1);
    request(
        2,
        "session/new",
        serde_json::json!({"cwd": work.path(), "mcpServers": []}),
    );
    let session = response(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    request(
        3,
        "session/prompt",
        serde_json::json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    let answer = response(3);
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.get("result").is_none(), "no stop reason: {answer}");
    assert_eq!(answer["error"]["data"]["code"], "FLUSH_FAILED", "{answer}");
    let message = answer["error"]["data"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("No space left"), "{message}");
}
