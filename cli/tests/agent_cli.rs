//! The agent front end end to end against the bundled mock DeepSeek server:
//! `dsh demo`, `dsh run [--json]`, `dsh sessions`, `dsh chat --resume`
//! after a crash, `dsh fork`, and `dsh chat` in a pseudo-terminal (prompt,
//! streamed answer, tool approval, Ctrl-C during a stream, exit).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use dsh_core::jsonl::load_log;
use dsh_core::session::{EventData, InvariantChecker, SessionEvent};
use support::{dsh, mock, text, transcripts};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dsh")
}

/// Reads a stored transcript into events (the header line included in the
/// bytes), checking it loads as a valid log.
fn load(path: &Path) -> Vec<SessionEvent> {
    let bytes = std::fs::read(path).unwrap();
    events_of(&bytes)
}

/// The events of a complete (balanced, untorn) log.
fn events_of(bytes: &[u8]) -> Vec<SessionEvent> {
    let loaded = load_log(bytes, &[]).expect("a valid session log");
    assert!(!loaded.needs_repair(), "the log needs no repair");
    loaded.session.events().to_vec()
}

/// Whether the first stored transcript under `data` contains `needle`
/// within `secs` seconds (polled).
fn log_contains_within(data: &Path, needle: &str, secs: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let text = data
            .join("dsh/sessions")
            .exists()
            .then(|| transcripts(data))
            .and_then(|t| t.first().cloned())
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        if text.contains(needle) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn header_of(path: &Path) -> dsh_core::session::SessionHeader {
    let bytes = std::fs::read(path).unwrap();
    load_log(&bytes, &[]).unwrap().session.header().clone()
}

fn turn_end_kinds(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::TurnEnd(t) => Some(t.reason.kind().to_string()),
            _ => None,
        })
        .collect()
}

const TEXT_TURN: &str = r#"{"responses":[{"turn":{"reasoning":["Thinking."],"text":["Hello"," from the mock."],
  "usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}}}]}"#;

#[test]
fn demo_runs_a_real_turn_and_prints_how_to_check_it() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let o = dsh(data.path())
        .args(["demo", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    // The model's streamed text, both tool calls with their results, the
    // final answer and the usage line.
    assert!(out.contains("I'll create the file first."), "{out}");
    assert!(
        out.contains("▸ bash command=\"wc -l hello.txt && cat hello.txt\""),
        "{out}"
    );
    assert!(out.contains("  2 hello.txt"), "{out}");
    assert!(out.contains("Done: `hello.txt` has two lines"), "{out}");
    assert!(
        out.contains("tokens: input 2753 (cache hit 2624), output 126"),
        "{out}"
    );
    // The real tool wrote the file in the workspace.
    let written = std::fs::read_to_string(ws.path().join("hello.txt")).unwrap();
    assert!(written.starts_with("Hello from dsh!\n"), "{written}");
    // The log path is printed, and the printed check commands pass.
    let logs = transcripts(data.path());
    assert_eq!(logs.len(), 1);
    let log = logs[0].to_str().unwrap();
    assert!(out.contains(&format!("dsh log check {log}")), "{out}");
    assert!(out.contains(&format!("dsh replay --check {log}")), "{out}");
    let check = dsh(data.path())
        .args(["log", "check", log])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
    let replay = dsh(data.path())
        .args(["replay", "--check", log])
        .output()
        .unwrap();
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stdout));
    let events = load(&logs[0]);
    assert_eq!(turn_end_kinds(&events), vec!["completed"]);
    InvariantChecker::check_log(&events).unwrap();
}

#[test]
fn run_json_prints_a_valid_session_log() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(TEXT_TURN);
    let o = dsh(data.path())
        .args(["run", "--json", "--base-url", &server.url(), "say hello"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    // Every line is one event; put the stored header in front and the
    // whole is a session log the core loads and validates (I1–I11 etc.).
    let log = &transcripts(data.path())[0];
    let stored = std::fs::read(log).unwrap();
    let header_end = stored.iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut bytes = stored[..header_end].to_vec();
    bytes.extend_from_slice(out.as_bytes());
    let events = events_of(&bytes);
    InvariantChecker::check_log(&events).unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq(), i as u64);
    }
    assert_eq!(turn_end_kinds(&events), vec!["completed"]);
    let streamed: String = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::AssistantChunk(c) => match c.view() {
                dsh_core::session::ChunkView::TextDelta { text, .. } => Some(text.to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "Hello from the mock.");
    // The same events as the stored log.
    assert_eq!(events, load(log));
}

#[test]
fn run_renders_and_exit_codes_follow_the_turn_end() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(TEXT_TURN);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "say hello"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert_eq!(
        out,
        "Thinking.\nHello from the mock.\ntokens: input 100 (cache hit 64), output 7\n"
    );
    assert!(text(&o.stderr).contains("session.jsonl"));

    // --hide-reasoning leaves the reasoning out.
    let server = mock(TEXT_TURN);
    let o = dsh(data.path())
        .args(["run", "--hide-reasoning", "--base-url", &server.url(), "x"])
        .output()
        .unwrap();
    assert!(!text(&o.stdout).contains("Thinking."));

    // A max-tokens stop is not a success (exit 1).
    let server = mock(r#"{"responses":[{"turn":{"text":["cut"],"finishReason":"length"}}]}"#);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("[turn ended: max-tokens]"));

    // A non-retryable provider error ends the turn with an error (exit 1).
    let server = mock(
        r#"{"responses":[{"fault":{"kind":"http","status":401,"body":{"error":{"message":"bad key"}}}}]}"#,
    );
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    // Errors go to stderr, once; stdout keeps only the answer.
    let err = text(&o.stderr);
    assert_eq!(err.matches("error: bad key").count(), 1, "{err}");
    assert!(!text(&o.stdout).contains("error: "), "{}", text(&o.stdout));
}

#[test]
fn piped_chat_finishes_the_turn_before_exiting() {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let server = mock(TEXT_TURN);
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(
        out.contains("Hello from the mock.\ntokens: input 100"),
        "{out}"
    );
    assert!(out.contains("resume with: dsh chat --resume "), "{out}");
    let events = load(&transcripts(data.path())[0]);
    assert_eq!(turn_end_kinds(&events), vec!["completed"]);
}

/// A tool call that asks for approval, then the answer to its result.
const APPROVAL_TURN: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"echo ran-\\u001b[2Jit\",","\"description\":\"echo\"}"]}]}},
  {"turn":{"text":["Done."]}}
]}"#;

fn piped_chat(input: &'static [u8]) -> (std::process::Output, Vec<SessionEvent>) {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(APPROVAL_TURN);
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    // The REPL must end by itself: a watchdog kills it after 20 s.
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(20));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let o = child.wait_with_output().unwrap();
    drop(watchdog);
    assert!(
        o.status.code().is_some(),
        "killed by the watchdog: the REPL hung"
    );
    let events = load(&transcripts(data.path())[0]);
    (o, events)
}

/// Piped input answers the approval question in order
/// (the line was read before the question was asked), and shows the tool's
/// output with its escape sequence made visible (19.2).
#[test]
fn piped_chat_answers_approvals_in_order() {
    let (o, events) = piped_chat(b"run it\ny\n");
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("allow bash?\n  command: \"echo ran-\\u001b[2Jit\""),
        "{out}"
    );
    assert!(out.contains("  ran-^[[2Jit"), "{out}");
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("Done."), "{out}");
    assert_eq!(turn_end_kinds(&events), vec!["completed"]);
    let result = events
        .iter()
        .find_map(|e| match e.data() {
            dsh_core::session::EventData::ToolResult(r) => Some(format!("{:?}", r.message)),
            _ => None,
        })
        .unwrap();
    assert!(
        result.contains("ran-\\u{1b}[2Jit"),
        "the log keeps the raw bytes: {result}"
    );
}

/// Stdin ends while an approval is pending: the call is
/// denied and the turn ends, instead of waiting forever.
#[test]
fn piped_chat_denies_when_input_ends_at_an_approval() {
    let (o, events) = piped_chat(b"run it\n");
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("(input ended: denied)"), "{out}");
    assert!(!out.contains("  ran-"), "{out}");
    assert_eq!(turn_end_kinds(&events), vec!["completed"]);
}

/// The bash tool does not inherit the API key, so
/// `echo $DEEPSEEK_API_KEY` sends nothing to the model, the log or the
/// screen; a custom `--api-key-env` variable is kept out the same way.
#[test]
fn the_api_key_never_reaches_a_tool() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    for (var, extra) in [
        ("DEEPSEEK_API_KEY", None),
        ("MY_LLM_CRED", Some("MY_LLM_CRED")),
    ] {
        let server = mock(
            &r#"{"responses":[
              {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"echo key=$VAR; env | grep -c sk-canary-99[1]\",\"description\":\"leak\"}"]}]}},
              {"turn":{"text":["ok"]}}
            ]}"#
            .replace("VAR", var),
        );
        let mut cmd = dsh(data.path());
        cmd.env(var, "sk-canary-991")
            .args(["run", "--yes", "--base-url", &server.url(), "--cwd"])
            .arg(ws.path());
        if let Some(name) = extra {
            cmd.args(["--api-key-env", name]);
        }
        let o = cmd.arg("leak it").output().unwrap();
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
        assert!(out.contains("  key=\n  0\n"), "{out}");
        assert!(!out.contains("sk-canary-991"), "{out}");
        assert!(!text(&o.stderr).contains("sk-canary-991"));
    }
    for log in transcripts(data.path()) {
        let raw = std::fs::read_to_string(&log).unwrap();
        assert!(raw.contains("key=\\n0"), "{raw}");
        assert!(!raw.contains("sk-canary-991"), "the key reached the log");
    }
}

/// persistence.md W2: what streams in reaches the
/// store within the write-behind window, so a kill -9 mid-stream keeps the
/// chunks already received (before, nothing was stored until the turn
/// ended).
#[test]
fn a_kill_mid_stream_keeps_the_chunks_already_received() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(
        r#"{"responses":[{"fault":{"kind":"stall","turn":{"text":["Partial ","answer ","never ","finished"]},"afterEvents":3}}]}"#,
    );
    let mut child = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("go slowly")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The stream stalls after its first events; the write-behind window is
    // 200 ms. Wait (bounded) until the chunks are on disk.
    let stored = log_contains_within(data.path(), "Partial ", 20);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        stored,
        "no streamed chunk reached the log while the stream stalled"
    );
    // The torn log repairs to a valid one that keeps those chunks.
    let log = &transcripts(data.path())[0];
    let loaded = load_log(&std::fs::read(log).unwrap(), &[]).unwrap();
    let text: String = loaded
        .session
        .events()
        .iter()
        .filter_map(|e| match e.data() {
            dsh_core::session::EventData::AssistantChunk(c) => match c.view() {
                dsh_core::session::ChunkView::TextDelta { text, .. } => Some(text.to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(text.starts_with("Partial "), "{text:?}");
}

#[test]
fn ctrl_c_cancels_a_run_and_exits_one() {
    use std::io::Read;
    let data = tempfile::tempdir().unwrap();
    let server = mock(
        r#"{"responses":[{"fault":{"kind":"stall","turn":{"text":["Partial ","rest"]},"afterEvents":2}}]}"#,
    );
    let mut child = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "x"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the stream is running (its first text is sent at once,
    // then the server stalls), then interrupt (SIGINT, as Ctrl-C). Piped
    // stdout holds an attempt's text until the attempt ends (a
    // retried attempt must not stay in the output), so poll the server.
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let start = std::time::Instant::now();
    while server.requests().is_empty() {
        assert!(start.elapsed().as_secs() < 20, "no request");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let st = Command::new("kill")
        .args(["-s", "INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    stdout.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{}", text(&seen));
    assert!(text(&seen).contains("Partial"), "{}", text(&seen));
    assert!(text(&seen).contains("[turn cancelled]"), "{}", text(&seen));
    let events = load(&transcripts(data.path())[0]);
    assert_eq!(turn_end_kinds(&events), vec!["aborted"]);
}

/// Starts `dsh ARGS` against a stalling mock, waits for "Partial" on its
/// stdout, sends `signal`, and returns (exit code, stdout, data dir).
fn signal_during_stream(args: &[&str], signal: &str) -> (Option<i32>, String, tempfile::TempDir) {
    use std::io::Read;
    let data = tempfile::tempdir().unwrap();
    let server = mock(
        r#"{"responses":[{"fault":{"kind":"stall","turn":{"text":["Partial ","rest"]},"afterEvents":2}}]}"#,
    );
    let url = server.url();
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--base-url", &url]);
    if args[0] == "run" {
        full.push("x");
    }
    let mut child = dsh(data.path())
        .args(&full)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    if args[0] == "chat" {
        use std::io::Write;
        // Keep stdin open: the chat must not end by EOF.
        child.stdin.as_mut().unwrap().write_all(b"x\n").unwrap();
    }
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    // Piped stdout holds an attempt's text until it succeeds, so wait for
    // the stream in the log (the write-behind window stores it within
    // 200 ms), bounded.
    assert!(
        log_contains_within(data.path(), "Partial ", 20),
        "the stream never reached the log"
    );
    let st = Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    stdout.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    drop(server);
    (status.code(), text(&seen), data)
}

#[test]
fn sigterm_ends_a_run_like_ctrl_c() {
    let (code, out, data) = signal_during_stream(&["run"], "TERM");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("[turn cancelled]"), "{out}");
    let events = load(&transcripts(data.path())[0]);
    assert_eq!(turn_end_kinds(&events), vec!["aborted"]);
    InvariantChecker::check_log(&events).unwrap();
}

#[test]
fn sigterm_ends_a_chat_and_saves_the_session() {
    let (code, out, data) = signal_during_stream(&["chat"], "TERM");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("resume with: dsh chat --resume "), "{out}");
    let events = load(&transcripts(data.path())[0]);
    assert_eq!(turn_end_kinds(&events), vec!["aborted"]);
    InvariantChecker::check_log(&events).unwrap();
}

/// A hang-up (SIGHUP) while a bash tool runs ends the
/// chat cleanly and takes the tool's process group with it.
#[test]
fn sighup_during_a_tool_ends_its_process_group() {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let marker = format!("dsh-hup-{}", std::process::id());
    let script = format!(
        r#"{{"responses":[
          {{"turn":{{"toolCalls":[{{"id":"c1","name":"bash","arguments":["{{\"command\":\"sleep 30.4711 & sleep 31.4711; echo {marker}\",\"description\":\"wait\"}}"]}}]}}}},
          {{"turn":{{"text":["done"]}}}}
        ]}}"#
    );
    let server = mock(&script);
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"wait a bit\ny\n").unwrap();
    // Keep stdin open (a live terminal would be); wait until both sleeps run.
    let sleeping = |n: usize| {
        let o = Command::new("pgrep")
            .args(["-f", "^sleep 3[01][.]4711$"])
            .output()
            .unwrap();
        text(&o.stdout).lines().count() >= n
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !sleeping(2) {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let st = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    drop(stdin);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // The process group went with the chat: no sleep survives.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sleeping(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool's processes outlived the hang-up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let events = load(&transcripts(data.path())[0]);
    assert_eq!(turn_end_kinds(&events), vec!["aborted"]);
}

#[test]
fn redb_store_holds_and_lists_sessions() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(TEXT_TURN);
    let o = dsh(data.path())
        .args([
            "run",
            "--store",
            "redb",
            "--base-url",
            &server.url(),
            "kept in redb",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(data.path().join("dsh/sessions.redb").exists());
    let o = dsh(data.path())
        .args(["sessions", "--store", "redb"])
        .output()
        .unwrap();
    let listing = text(&o.stdout);
    assert_eq!(listing.lines().count(), 2, "{listing}");
    assert!(
        listing.lines().nth(1).unwrap().ends_with("kept in redb"),
        "{listing}"
    );
    // The JSONL store of the same data dir is a different store: empty.
    let o = dsh(data.path()).arg("sessions").output().unwrap();
    assert!(
        text(&o.stdout).starts_with("no sessions in "),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn no_key_and_no_base_url_says_what_to_set() {
    let data = tempfile::tempdir().unwrap();
    for args in [&["run", "hi"][..], &["chat"][..]] {
        let o = dsh(data.path()).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        let err = text(&o.stderr);
        assert!(err.contains("DEEPSEEK_API_KEY"), "{err}");
        assert!(err.contains("--base-url"), "{err}");
        assert!(err.contains("dsh demo"), "{err}");
    }
}

#[test]
fn sessions_resume_after_a_crash_and_fork() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(TEXT_TURN);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "first prompt here"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let log = transcripts(data.path()).remove(0);
    let events = load(&log);
    let id = header_of(&log).id;

    // `dsh sessions` lists id, cwd, times and the first prompt.
    let o = dsh(data.path()).arg("sessions").output().unwrap();
    let listing = text(&o.stdout);
    assert!(listing.starts_with("ID "), "{listing}");
    let row = listing.lines().nth(1).unwrap();
    assert!(row.starts_with(id.as_str()), "{row}");
    assert!(row.ends_with("first prompt here"), "{row}");
    let cwd = std::env::current_dir().unwrap();
    let cwd: String = cwd.to_str().unwrap().chars().take(20).collect();
    assert!(row.contains(&cwd), "{row}");

    // Simulate a crash mid-turn: keep the log only up to the first
    // assistant chunk (the turn is open, no turn/end).
    let bytes = std::fs::read_to_string(&log).unwrap();
    let cut = events
        .iter()
        .position(|e| matches!(e.data(), EventData::AssistantChunk(_)))
        .unwrap();
    let kept: String = bytes
        .lines()
        .take(cut + 2)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&log, kept).unwrap();

    // Resuming closes the interrupted turn (persistence.md 6.5) and the
    // repaired log checks clean. stdin is closed: the REPL exits at once.
    let o = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--resume", id.as_str()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("(resumed)"), "{}", text(&o.stdout));
    // A recap of the session so far.
    assert!(
        text(&o.stdout).contains("\n> first prompt here\n"),
        "{}",
        text(&o.stdout)
    );
    let repaired = load(&log);
    assert_eq!(turn_end_kinds(&repaired), vec!["interrupted"]);
    InvariantChecker::check_log(&repaired).unwrap();
    let check = dsh(data.path())
        .args(["log", "check", log.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));

    // Fork it at its last event (the closed turn's end): a second session
    // whose header names the parent.
    let at = (repaired.len() - 1).to_string();
    let o = dsh(data.path())
        .args([
            "fork",
            "--base-url",
            &server.url(),
            id.as_str(),
            "--at",
            &at,
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(&format!("forked {}", id.as_str())));
    let logs = transcripts(data.path());
    assert_eq!(logs.len(), 2, "{logs:?}");
    let child = logs.iter().find(|p| **p != log).unwrap();
    assert_eq!(header_of(child).parent_session.as_ref(), Some(&id));
}

mod pty {
    use super::*;
    use rexpect::session::spawn_command;

    const CHAT_SCRIPT: &str = r#"{"responses":[
      {"turn":{"text":["Hello"," there, human."]}},
      {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"echo approved-run\",","\"description\":\"echo\"}"]}]}},
      {"turn":{"text":["The command printed approved-run."]}},
      {"turn":{"toolCalls":[{"id":"c2","name":"bash","arguments":["{\"command\":\"echo second-run\",\"description\":\"echo\"}"]}]}},
      {"turn":{"text":["Ran it again."]}},
      {"fault":{"kind":"stall","turn":{"text":["Partial ","answer ","never ","finished"]},"afterEvents":3}}
    ]}"#;

    #[test]
    fn chat_in_a_terminal_streams_asks_cancels_and_exits() {
        let data = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let server = mock(CHAT_SCRIPT);
        let mut cmd = Command::new(bin());
        cmd.env("XDG_DATA_HOME", data.path())
            .env_remove("DEEPSEEK_API_KEY")
            .env("TERM", "dumb")
            .args(["chat", "--no-color", "--base-url", &server.url(), "--cwd"])
            .arg(ws.path());
        let mut p = spawn_command(cmd, Some(20_000)).unwrap();
        p.exp_string("dsh chat: session").unwrap();
        p.exp_string("> ").unwrap();

        // A prompt and a streamed answer, then usage.
        p.send_line("hi").unwrap();
        p.exp_string("Hello there, human.").unwrap();
        p.exp_string("tokens: no usage reported").unwrap();
        p.exp_string("> ").unwrap();

        // A tool call that needs approval.
        p.send_line("run something").unwrap();
        p.exp_string("allow bash?").unwrap();
        p.exp_string("  command: \"echo approved-run\"").unwrap();
        p.exp_string("[a]lways: ").unwrap();
        // "always": this call runs, and later bash calls are not asked.
        p.send_line("a").unwrap();
        p.exp_string("  approved-run").unwrap();
        p.exp_string("The command printed approved-run.").unwrap();
        p.exp_string("> ").unwrap();
        p.send_line("again").unwrap();
        let before = p.exp_string("Ran it again.").unwrap();
        assert!(before.contains("  second-run"), "{before}");
        assert!(!before.contains("allow bash"), "{before}");
        p.exp_string("> ").unwrap();

        // Ctrl-C during a stream cancels the turn; the REPL stays.
        p.send_line("go slowly").unwrap();
        p.exp_string("Partial answer").unwrap();
        p.send_control('c').unwrap();
        p.exp_string("[turn cancelled]").unwrap();
        p.exp_string("> ").unwrap();

        // A second Ctrl-C exits and says where the session is.
        p.send_control('c').unwrap();
        p.exp_string("saved: ").unwrap();
        p.exp_string("resume with: dsh chat --resume").unwrap();
        p.exp_eof().unwrap();

        let logs = transcripts(data.path());
        let events = load(&logs[0]);
        assert_eq!(
            turn_end_kinds(&events),
            vec!["completed", "completed", "completed", "aborted"]
        );
        InvariantChecker::check_log(&events).unwrap();
    }

    #[test]
    fn a_line_typed_during_a_turn_steers_it() {
        let data = tempfile::tempdir().unwrap();
        let server = mock(
            r#"{"responses":[
              {"turn":{"text":["one ","two ","three ","four ","five ","six"],"delayMs":400}},
              {"turn":{"text":["Steered reply."]}}
            ]}"#,
        );
        let mut cmd = Command::new(bin());
        cmd.env("XDG_DATA_HOME", data.path())
            .env_remove("DEEPSEEK_API_KEY")
            .args(["chat", "--no-color", "--base-url", &server.url()]);
        let mut p = spawn_command(cmd, Some(20_000)).unwrap();
        p.exp_string("> ").unwrap();
        p.send_line("count slowly").unwrap();
        p.exp_string("one ").unwrap();
        p.send_line("and then stop").unwrap();
        p.exp_string("(steering the running turn)").unwrap();
        p.exp_string("Steered reply.").unwrap();
        p.exp_string("> ").unwrap();
        p.send_control('d').unwrap();
        p.exp_eof().unwrap();
        // One turn, two model calls: the steering message entered the same
        // turn as a user message before the second request.
        let events = load(&transcripts(data.path())[0]);
        assert_eq!(turn_end_kinds(&events), vec!["completed"]);
        let users: Vec<String> = events
            .iter()
            .filter_map(|e| match e.data() {
                // The runtime-context snapshot (LC-12) and workspace
                // instructions are not the user's.
                EventData::UserMessage(m) if m.source == dsh_core::MessageSource::User => m
                    .content
                    .first()
                    .and_then(|b| b.as_text())
                    .map(String::from),
                _ => None,
            })
            .collect();
        assert_eq!(users, vec!["count slowly", "and then stop"]);
    }

    #[test]
    fn followup_mode_queues_a_line_as_the_next_turn() {
        let data = tempfile::tempdir().unwrap();
        let server = mock(
            r#"{"responses":[
              {"turn":{"text":["one ","two ","three ","four ","five ","six"],"delayMs":400}},
              {"turn":{"text":["Follow-up answered."]}}
            ]}"#,
        );
        let mut cmd = Command::new(bin());
        cmd.env("XDG_DATA_HOME", data.path())
            .env_remove("DEEPSEEK_API_KEY")
            .args(["chat", "--no-color", "--base-url", &server.url()]);
        let mut p = spawn_command(cmd, Some(20_000)).unwrap();
        p.exp_string("> ").unwrap();
        p.send_line("/followup").unwrap();
        p.exp_string("now queue as follow-ups").unwrap();
        p.send_line("count slowly").unwrap();
        p.exp_string("one ").unwrap();
        p.send_line("then say more").unwrap();
        p.exp_string("(queued as a follow-up)").unwrap();
        p.exp_string("Follow-up answered.").unwrap();
        p.exp_string("> ").unwrap();
        p.send_control('d').unwrap();
        p.exp_eof().unwrap();
        // Two turns: the follow-up waited for the first to end (IB-6).
        let events = load(&transcripts(data.path())[0]);
        assert_eq!(turn_end_kinds(&events), vec!["completed", "completed"]);
    }

    #[test]
    fn ctrl_d_exits_the_repl() {
        let data = tempfile::tempdir().unwrap();
        let server = mock(TEXT_TURN);
        let mut cmd = Command::new(bin());
        cmd.env("XDG_DATA_HOME", data.path())
            .env_remove("DEEPSEEK_API_KEY")
            .args(["chat", "--no-color", "--base-url", &server.url()]);
        let mut p = spawn_command(cmd, Some(20_000)).unwrap();
        p.exp_string("> ").unwrap();
        p.send_control('d').unwrap();
        p.exp_string("saved: ").unwrap();
        p.exp_eof().unwrap();
    }
}

/// Two text answers: one per turn.
const TWO_TEXT_TURNS: &str = r#"{"responses":[
  {"turn":{"text":["First answer."]}},
  {"turn":{"text":["Second ","answer."]}}
]}"#;

/// SA-3 (loop.md): a fork is seeded with the parent's log through its last
/// `turn/end`. Forking a session another process is still writing (its
/// last turn open on disk) must stop at the last completed turn, not copy
/// the in-flight turn with the closers a load would add; and it must not
/// repair the parent's log under the writer.
#[test]
fn sa3_fork_of_a_session_mid_turn_stops_at_the_last_completed_turn() {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let server = mock(TWO_TEXT_TURNS);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "first prompt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let log = transcripts(data.path()).remove(0);
    let id = header_of(&log).id;
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--resume", id.as_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"second prompt\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let events = load(&log);
    assert_eq!(turn_end_kinds(&events), vec!["completed", "completed"]);

    // The parent as another process sees it mid-way through turn 2: the
    // log stops after that turn's first assistant chunk (no turn/end).
    let first_end = events
        .iter()
        .position(|e| matches!(e.data(), EventData::TurnEnd(_)))
        .unwrap();
    let cut = first_end
        + events[first_end..]
            .iter()
            .position(|e| matches!(e.data(), EventData::AssistantChunk(_)))
            .unwrap();
    let kept: String = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .take(cut + 2)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&log, &kept).unwrap();

    let o = dsh(data.path())
        .args(["fork", "--base-url", &server.url(), id.as_str()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // The parent is left as its writer left it.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), kept);
    let logs = transcripts(data.path());
    let child = logs.iter().find(|p| **p != log).unwrap();
    let header = header_of(child);
    assert_eq!(header.parent_session.as_ref(), Some(&id));
    assert_eq!(header.seed_length, Some(first_end as u64 + 1));
    // The child is a valid log: the completed turn, then the seed marker.
    let forked = load(child);
    InvariantChecker::check_log(&forked).unwrap();
    assert_eq!(turn_end_kinds(&forked), vec!["completed"]);
    for (a, b) in forked.iter().zip(&events[..=first_end]) {
        assert_eq!(a.data(), b.data());
    }
    assert!(matches!(forked[first_end + 1].data(), EventData::EndSeed));
    let check = dsh(data.path())
        .args(["log", "check", child.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
}
