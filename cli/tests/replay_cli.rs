//! `dsh replay --check [--fixture-tokens] PATH` end to end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

/// The vendored test data (`testdata/` at the repository root).
fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn log(name: &str) -> String {
    let p = testdata_dir().join("conformance/sessions").join(name);
    p.to_str().unwrap().to_string()
}

fn dsh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .output()
        .expect("dsh runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn identical_replay_exits_zero() {
    let o = dsh(&[
        "replay",
        "--check",
        "--fixture-tokens",
        &log("examples-acp-agent__cancel-tool-calls__session.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "reproduced 23/23 core events (0 seed events not replayed, 1 loop instance replayed)\n"
    );
}

#[test]
fn a_difference_exits_one_and_says_where_and_why() {
    // A recording changed by hand: one assistant message gains a text
    // block the model never streamed.
    let text =
        std::fs::read_to_string(log("examples-acp-agent__text-turn__session.jsonl")).unwrap();
    let changed = text.replacen(
        r#""content":[{"type":"reasoning","#,
        r#""content":[{"type":"text","text":"X"},{"type":"reasoning","#,
        1,
    );
    assert_ne!(changed, text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changed.jsonl");
    std::fs::write(&path, changed).unwrap();
    let o = dsh(&[
        "replay",
        "--check",
        "--fixture-tokens",
        path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "reproduced 36/39 core events (0 seed events not replayed, 1 loop instance replayed)"
    );
    assert!(
        lines[1].starts_with(
            "difference at seq 37 (path .data.message.content (length 3 vs 2)): assistant/message differs at .data.message.content"
        ),
        "{out}"
    );
    assert!(lines[2].starts_with(r#"  recorded: {"type":"assistant/message","seq":37"#));
    assert!(lines[3].starts_with(r#"  produced: {"type":"assistant/message","seq":37"#));
}

#[test]
fn unloadable_input_exits_two() {
    // A legacy header (conformance README) and a scrubbed log read without
    // the substitutions are both bad input.
    let o = dsh(&[
        "replay",
        "--check",
        &log("apps-web__steering__session.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = dsh(&[
        "replay",
        "--check",
        &log("examples-acp-agent__cancel__session.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = dsh(&["replay", &log("examples-acp-agent__cancel__session.jsonl")]);
    assert_eq!(o.status.code(), Some(2), "--check is required");
}

/// A two-turn session: `dsh run` writes turn 1, `dsh chat --resume` (a
/// second loop instance, after a second `session/end-seed`) writes turn 2.
/// Returns the log's text.
fn two_turn_resumed_log() -> String {
    const TURN: &str = r#"{"responses":[{"turn":{"text":["Hello"," from the mock."],
      "usage":{"prompt_tokens":100,"completion_tokens":7}}}]}"#;
    let server = support::mock(TURN);
    let data = tempfile::tempdir().unwrap();
    let o = support::dsh(data.path())
        .args(["run", "--base-url", &server.url(), "first prompt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let project = std::fs::read_dir(data.path().join("dsh/sessions"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let dir = std::fs::read_dir(project).unwrap().next().unwrap().unwrap();
    let id = dir.file_name().into_string().unwrap();
    let mut chat = support::dsh(data.path());
    chat.args(["chat", "--base-url", &server.url(), "--resume", &id]);
    let o = support::run_with_stdin(&mut chat, b"second prompt\n");
    assert_eq!(o.status.code(), Some(0));
    std::fs::read_to_string(dir.path().join("session.jsonl")).unwrap()
}

#[test]
fn every_turn_of_a_resumed_log_is_replayed() {
    // The seed was everything before the last end-seed, so only
    // the resumed instance's turn was checked.
    let text = two_turn_resumed_log();
    assert_eq!(text.matches(r#""type":"session/end-seed""#).count(), 1);
    assert_eq!(text.matches(r#""type":"turn/end""#).count(), 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    std::fs::write(&path, &text).unwrap();
    let o = dsh(&["replay", "--check", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "reproduced 31/31 core events (0 seed events not replayed, 2 loop instances replayed)"
        ),
        "{out}"
    );
    // An edit of the FIRST turn's assistant message fails the check.
    let changed = text.replacen("Hello from the mock.", "Hello from me.", 1);
    assert_ne!(changed, text);
    assert!(changed.contains("Hello from the mock."), "turn 2 unchanged");
    std::fs::write(&path, &changed).unwrap();
    let o = dsh(&["replay", "--check", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("(path .data.message.content[0].text): assistant/message differs"),
        "{out}"
    );
}

#[test]
fn run_record_writes_a_fixture_that_replays() {
    // `dsh run --record FILE` keeps the session log as a fixture.
    const TURN: &str = r#"{"responses":[{"turn":{"text":["Recorded."]}}]}"#;
    let server = support::mock(TURN);
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("fixture.jsonl");
    let o = support::dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--record"])
        .arg(&file)
        .arg("hello")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", support::text(&o.stderr));
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert!(recorded.contains(r#""text":"Recorded.""#), "{recorded}");
    assert!(recorded.contains(r#""type":"turn/end""#), "{recorded}");
    let o = dsh(&["replay", "--check", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).starts_with("reproduced "), "{}", stdout(&o));
}
