//! End to end: the wire-shape corpus through `dsh sse translate
//! --interop` and through full `dsh run` turns against a local server that
//! serves it; retries, timeouts and `Retry-After` as a user sees them; the
//! retry display in a terminal; credentials kept out of output and logs.
//! Every session log passes `dsh log check` and
//! `dsh replay --check`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{DecodeOptions, decode_pieces_with};
use serde_json::json;
use support::{checks_and_replays, dsh, text, transcripts};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dsh")
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/deepseek/tests/interop")
}

fn corpus(name: &str) -> String {
    std::fs::read_to_string(corpus_dir().join(name)).unwrap()
}

fn server(script: serde_json::Value) -> MockServer {
    MockServer::start_on(serde_json::from_value::<Script>(script).unwrap(), 0).unwrap()
}

fn logs(data: &Path) -> Vec<PathBuf> {
    transcripts(&data.join("dsh/sessions"))
}

/// Every stored log passes `dsh log check` and `dsh replay --check`.
fn check_logs(data: &Path) {
    let all = logs(data);
    assert!(!all.is_empty(), "no session log written");
    for log in all {
        checks_and_replays(data, &log);
    }
}

/// `dsh run PROMPT` against `url` with extra flags.
fn run(data: &Path, ws: &Path, url: &str, extra: &[&str]) -> Output {
    dsh(data)
        .args(["run", "--yes", "--base-url", url, "--cwd"])
        .arg(ws)
        .args(extra)
        .arg("hi")
        .output()
        .unwrap()
}

#[test]
fn corpus_through_sse_translate_matches_the_library() {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sse") || n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 15, "{names:?}");
    let data = tempfile::tempdir().unwrap();
    for name in &names {
        let o = dsh(data.path())
            .args(["sse", "translate", "--interop"])
            .arg(corpus_dir().join(name))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}");
        let body = std::fs::read(corpus_dir().join(name)).unwrap();
        let expected: String =
            decode_pieces_with(std::iter::once(&body[..]), &DecodeOptions::interop())
                .iter()
                .map(|c| serde_json::to_string(c).unwrap() + "\n")
                .collect();
        let got = text(&o.stdout);
        // Tool-call ids generated for id-less calls carry a per-call prefix.
        assert_eq!(got, expected, "{name}");
    }
    // Without --interop: the reference adapter (E-1: an in-band error is
    // ignored, so the reply is EMPTY_RESPONSE).
    let o = dsh(data.path())
        .args(["sse", "translate"])
        .arg(corpus_dir().join("inband_error_alone.sse"))
        .output()
        .unwrap();
    assert!(
        text(&o.stdout).contains("EMPTY_RESPONSE"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn an_endless_line_ends_with_a_typed_error_not_an_abort() {
    let data = tempfile::tempdir().unwrap();
    let mut child = dsh(data.path())
        .args(["sse", "translate", "--max-event-bytes", "4096"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let line = vec![b'x'; 64 * 1024];
        // The reader stops early; a broken pipe here is expected.
        let _ = stdin.write_all(b"data: ");
        for _ in 0..16 {
            if stdin.write_all(&line).is_err() {
                break;
            }
        }
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(out.contains("\"code\":\"RESPONSE_TOO_LARGE\""), "{out}");
    assert!(out.contains("4096 bytes"), "{out}");
}

/// Each corpus shape as a whole `dsh run` turn: (file, exit code, stdout
/// or stderr must contain).
#[test]
fn corpus_shapes_as_full_turns() {
    let cases: &[(&str, i32, &str)] = &[
        ("inband_error_after_text.sse", 1, "upstream model crashed"),
        (
            "inband_error_alone.sse",
            1,
            "maximum context length is 4096 tokens",
        ),
        ("event_error_frame.sse", 1, "overloaded, try later"),
        ("no_done_after_stop.sse", 0, "Hello world"),
        ("crlf_no_done_stop.sse", 0, "crlf"),
        ("finish_eos_token.sse", 0, "Done."),
        ("finish_stop_sequence.sse", 0, "Done."),
        ("finish_end_turn.sse", 0, "Done."),
        ("finish_stop.sse", 0, "Done."),
        ("finish_content_filter.sse", 1, "CONTENT_FILTER"),
        ("reasoning_field_then_text.sse", 0, "42"),
        ("message_only.sse", 0, "Hello"),
        ("json_completion.json", 0, "A full answer."),
        ("json_error_200.json", 1, "Invalid API key provided"),
    ];
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    for (name, code, needle) in cases {
        let s = server(
            json!({"responses": [{"fault": {"kind": "raw", "body": corpus(name), "chunkSize": 13}}]}),
        );
        let o = run(
            data.path(),
            ws.path(),
            &format!("{}/v1", s.url()),
            &["--attempts", "1"],
        );
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(*code), "{name}\n{out}\n{err}");
        assert!(
            out.contains(needle) || err.contains(needle),
            "{name}\n{out}\n{err}"
        );
        if *code == 1 {
            // Errors go to stderr, once.
            assert_eq!(err.matches("error: ").count(), 1, "{name}: {err}");
            assert!(!out.contains("error: "), "{name}: {out}");
        }
        assert!(!err.contains("DeepSeek"), "{name}: {err}");
    }
    check_logs(data.path());
}

#[test]
fn item6_a_reasoning_only_reply_is_not_retried() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let s = server(
        json!({"responses": [{"fault": {"kind": "raw", "body": corpus("reasoning_field_only.sse")}}]}),
    );
    let o = run(data.path(), ws.path(), &format!("{}/v1", s.url()), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("Thinking hard about it"));
    assert_eq!(s.requests().len(), 1, "one request, no retry");
    check_logs(data.path());
}

#[test]
fn item4_id_less_tool_calls_in_every_step_keep_the_log_valid() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let call = corpus("tool_call_without_id.sse");
    let s = server(json!({"responses": [
        {"fault": {"kind": "raw", "body": call}},
        {"fault": {"kind": "raw", "body": call}},
        {"fault": {"kind": "raw", "body": corpus("finish_stop.sse")}}]}));
    let o = run(data.path(), ws.path(), &format!("{}/v1", s.url()), &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let log = std::fs::read_to_string(&logs(data.path())[0]).unwrap();
    let ids: Vec<&str> = log
        .match_indices("\"callId\":\"")
        .map(|(i, m)| {
            let rest = &log[i + m.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert!(ids.len() >= 2, "{ids:?}");
    assert!(
        unique.len() >= 2,
        "two steps, two different call ids: {ids:?}"
    );
    check_logs(data.path());
}

#[test]
fn item8_a_dropped_stream_is_retried_with_a_notice_and_a_clean_stdout() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let s = server(json!({"responses": [
        {"fault": {"kind": "close", "turn": {"text": ["One", " two"]}, "afterEvents": 3, "abrupt": true}},
        {"turn": {"text": ["One", " two", " three"]}}]}));
    let o = run(data.path(), ws.path(), &s.url(), &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.starts_with("One two three\n"),
        "stdout is the logged answer only: {out:?}"
    );
    assert_eq!(out.matches("One").count(), 1, "{out}");
    assert_eq!(err.matches("retrying in").count(), 1, "{err}");
    assert!(
        err.contains("(1 of 5): reading the response from http://127.0.0.1"),
        "the notice says why: {err}"
    );
    check_logs(data.path());
}

#[test]
fn item9_a_silent_server_times_out_as_configured() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let s = server(json!({"responses": [
        {"fault": {"kind": "stall"}}, {"fault": {"kind": "stall"}}]}));
    let start = Instant::now();
    let o = run(
        data.path(),
        ws.path(),
        &s.url(),
        &[
            "--idle-timeout",
            "0.5",
            "--attempts",
            "2",
            "--max-retry-wait",
            "0.2",
        ],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(s.requests().len(), 2, "--attempts 2");
    assert!(err.contains("idle timeout"), "{err}");
    assert!(err.contains("(TIMEOUT)"), "{err}");
    check_logs(data.path());
}

#[test]
fn item9_a_long_retry_after_says_why_it_was_not_retried() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let busy = json!({"fault": {"kind": "http", "status": 429, "headers": {"retry-after": "30"},
                                "body": {"error": {"message": "busy"}}}});
    let s = server(json!({"responses": [busy, {"turn": {"text": ["late"]}}]}));
    let o = run(data.path(), ws.path(), &s.url(), &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not retried: the server asked to wait 30 s (Retry-After), longer than --max-retry-wait 10 s"),
        "{err}"
    );
    // With a longer allowed wait the same reply is retried (not waited for
    // here: the flag is checked through the policy it produces).
    check_logs(data.path());
}

#[test]
fn base_url_credentials_stay_out_of_output_and_logs() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let canary = "sk-canary-url-31337";
    let s = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 401,
                   "body": {"error": {"message": format!("key {canary} rejected")}}}}]}));
    let url = format!("http://user:{canary}@{}/v1?api_key={canary}", s.addr());
    let o = run(data.path(), ws.path(), &url, &["--attempts", "1"]);
    let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(!all.contains(canary), "{all}");
    assert!(all.contains("<redacted>"), "{all}");
    for log in logs(data.path()) {
        let bytes = std::fs::read_to_string(&log).unwrap();
        assert!(!bytes.contains(canary), "canary in {}", log.display());
    }
    check_logs(data.path());
}

mod pty {
    use super::*;
    use rexpect::session::spawn_command;

    /// The visible screen after `bytes`: a tiny terminal (cursor movement
    /// up, carriage return, line feed, erase to end of line and of screen;
    /// other escapes ignored; no wrapping).
    fn screen(bytes: &str) -> Vec<String> {
        let mut lines: Vec<Vec<char>> = vec![Vec::new()];
        let (mut row, mut col) = (0usize, 0usize);
        let mut chars = bytes.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\x1b' => {
                    if chars.peek() != Some(&'[') {
                        continue;
                    }
                    chars.next();
                    let mut arg = String::new();
                    let mut cmd = ' ';
                    for d in chars.by_ref() {
                        if d.is_ascii_alphabetic() {
                            cmd = d;
                            break;
                        }
                        arg.push(d);
                    }
                    let n: usize = arg.parse().unwrap_or(1);
                    match cmd {
                        'A' => row = row.saturating_sub(n),
                        'K' => lines[row].truncate(col),
                        'J' => {
                            lines[row].truncate(col);
                            lines.truncate(row + 1);
                        }
                        _ => {}
                    }
                }
                '\r' => col = 0,
                '\n' => {
                    row += 1;
                    col = 0;
                    if lines.len() <= row {
                        lines.push(Vec::new());
                    }
                }
                c => {
                    let line = &mut lines[row];
                    while line.len() < col {
                        line.push(' ');
                    }
                    if col < line.len() {
                        line[col] = c;
                    } else {
                        line.push(c);
                    }
                    col += 1;
                }
            }
        }
        lines.into_iter().map(|l| l.into_iter().collect()).collect()
    }

    #[test]
    fn screen_model_erases_like_a_terminal() {
        assert_eq!(screen("ab\ncd\r\x1b[1A\x1b[Jxy\n"), vec!["xy", ""]);
        assert_eq!(screen("abc\r\x1b[Kz"), vec!["z"]);
    }

    #[test]
    fn item8_retry_display_shows_only_the_final_answer_and_one_notice() {
        let data = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let server = server(json!({"responses": [
            {"fault": {"kind": "close", "turn": {"text": ["One", " two"], "delayMs": 50},
                       "afterEvents": 3, "abrupt": true}},
            {"turn": {"text": ["One", " two", " three"]}}]}));
        let mut cmd = Command::new(bin());
        cmd.env("XDG_DATA_HOME", data.path())
            .env_remove("DEEPSEEK_API_KEY")
            .env("TERM", "dumb")
            .env("COLUMNS", "200")
            .args(["chat", "--no-color", "--base-url", &server.url(), "--cwd"])
            .arg(ws.path());
        let mut p = spawn_command(cmd, Some(20_000)).unwrap();
        let mut seen = String::new();
        seen += &p.exp_string("> ").unwrap();
        p.send_line("count").unwrap();
        seen += &p.exp_string("tokens: ").unwrap();
        seen += "tokens: ";
        seen += &p.exp_string("> ").unwrap();
        p.send_control('d').unwrap();
        p.exp_eof().unwrap();
        assert!(
            seen.contains("One two"),
            "the failed attempt was shown live: {seen:?}"
        );
        let shown = screen(&seen);
        let joined = shown.join("\n");
        assert_eq!(joined.matches("One").count(), 1, "{joined}");
        assert!(shown.iter().any(|l| l == "One two three"), "{joined}");
        assert_eq!(joined.matches("retrying in").count(), 1, "{joined}");
        check_logs(data.path());
    }

    #[test]
    fn item10_chat_shows_an_error_once() {
        let data = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let server = server(json!({"responses": [
            {"fault": {"kind": "http", "status": 401, "body": {"error": {"message": "bad key here"}}}}]}));
        let mut cmd = Command::new(bin());
        cmd.env("XDG_DATA_HOME", data.path())
            .env_remove("DEEPSEEK_API_KEY")
            .env("TERM", "dumb")
            .env("COLUMNS", "200")
            .args(["chat", "--no-color", "--base-url", &server.url(), "--cwd"])
            .arg(ws.path());
        let mut p = spawn_command(cmd, Some(20_000)).unwrap();
        let mut seen = String::new();
        seen += &p.exp_string("> ").unwrap();
        p.send_line("hello").unwrap();
        seen += &p.exp_string("tokens: ").unwrap();
        seen += &p.exp_string("> ").unwrap();
        p.send_control('d').unwrap();
        p.exp_eof().unwrap();
        let joined = screen(&seen).join("\n");
        assert_eq!(joined.matches("bad key here").count(), 1, "{joined}");
        assert!(!joined.contains("DeepSeek"), "{joined}");
        check_logs(data.path());
    }
}
