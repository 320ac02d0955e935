//! `dsh replay --check [--fixture-tokens] PATH` end to end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
    assert_eq!(stdout(&o), "reproduced 23/23 core events\n");
}

#[test]
fn a_difference_exits_one_and_says_where_and_why() {
    let o = dsh(&[
        "replay",
        "--check",
        "--fixture-tokens",
        &log("examples-acp-agent__parallel-tool-calls__session.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "reproduced 18/31 core events");
    assert!(lines[1].starts_with(
        "first difference at seq 19: the recording starts this tool call while another one runs"
    ));
    assert!(lines[2].starts_with(r#"  recorded: {"type":"tool/call","seq":19"#));
    assert_eq!(lines[3], "  produced: (no event)");
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
