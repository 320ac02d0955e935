//! `dsh log check | derive | repair` end to end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The vendored test data (`testdata/` at the repository root).
fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn log(name: &str) -> PathBuf {
    testdata_dir().join("conformance/sessions").join(name)
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

const H: &str =
    r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/w","delegationDepth":0}"#;
const TURN_START: &str = r#"{"type":"turn/start","seq":0,"time":10,"data":{"turn":1}}"#;
const STEP_START: &str = r#"{"type":"step/start","seq":1,"time":12,"data":{"turn":1,"step":1}}"#;

#[test]
fn check_reports_each_file_and_fails_if_any_fails() {
    let good = log("examples-acp-agent__packed-chunks__session.jsonl");
    let legacy = log("apps-web__steering__session.jsonl");
    let o = dsh(&["log", "check", "--fixture-tokens", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), format!("{}: ok\n", good.display()));
    let o = dsh(&[
        "log",
        "check",
        "--fixture-tokens",
        good.to_str().unwrap(),
        legacy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("{}: ok", good.display()));
    assert!(
        lines[1].starts_with(&format!("{}: FAIL ", legacy.display()))
            && lines[1].contains("first line is not a session header"),
        "{}",
        lines[1]
    );
    // Without the substitutions the placeholders are not valid.
    let o = dsh(&["log", "check", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(": FAIL "));
}

#[test]
fn check_passes_every_non_legacy_conformance_log() {
    let dir = testdata_dir().join("conformance/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let args: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let mut all = vec!["log", "check", "--fixture-tokens"];
    all.extend(args.iter().map(String::as_str));
    let o = dsh(&all);
    let out = stdout(&o);
    let ok = out.lines().filter(|l| l.ends_with(": ok")).count();
    let failed = out.lines().filter(|l| l.contains(": FAIL ")).count();
    assert_eq!(ok + failed, files.len());
    assert_eq!(failed, 11, "only the legacy headers fail:\n{out}");
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn derive_prints_one_message_per_line() {
    let path = log("examples-acp-agent__packed-chunks__session.jsonl");
    let o = dsh(&["log", "derive", "--fixture-tokens", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    let msgs: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "user", "assistant", "user", "assistant"]);
    assert_eq!(msgs[0]["id"], "a207bd9d-9312-46ed-baaf-7a07a6f08ae8");
    assert_eq!(
        msgs[3]["content"][0]["toolCallId"],
        "call_00_JliP571Bh0QQ8QExbSPk0080"
    );
}

#[test]
fn repair_closes_a_torn_log_and_refuses_a_corrupt_one() {
    let dir = tempfile::tempdir().unwrap();
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(
        &torn,
        format!("{H}\n{TURN_START}\n{STEP_START}\n{{\"type\":\"tool/res"),
    )
    .unwrap();
    let o = dsh(&["log", "repair", torn.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!(
            "{H}\n{TURN_START}\n{STEP_START}\n{}\n{}\n",
            r#"{"type":"step/end","seq":2,"time":12,"data":{"turn":1,"step":1}}"#,
            r#"{"type":"turn/end","seq":3,"time":12,"data":{"turn":1,"reason":{"kind":"interrupted"}}}"#
        )
    );
    // A packed log is printed unpacked.
    let packed = log("examples-acp-agent__packed-chunks__session.jsonl");
    let bytes = std::fs::read(&packed).unwrap();
    let fixed = dir.path().join("packed.jsonl");
    std::fs::write(&fixed, dsh_core::jsonl::fixture_tokens(&bytes)).unwrap();
    let o = dsh(&["log", "repair", fixed.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o).lines().count(), 1 + 124);
    assert!(!stdout(&o).contains("-chunks\""));
    // Corrupt: a defect followed by a committed turn/end.
    let corrupt = dir.path().join("corrupt.jsonl");
    std::fs::write(
        &corrupt,
        format!(
            "{H}\n{{not json\n{}\n",
            r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
        ),
    )
    .unwrap();
    let o = dsh(&["log", "repair", corrupt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains("corrupt session log: unparsable committed event at line 1"),
        "{err}"
    );
}

#[test]
fn a_torn_file_fails_check() {
    let dir = tempfile::tempdir().unwrap();
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, format!("{H}\n{TURN_START}\n{{\"ty")).unwrap();
    let o = dsh(&["log", "check", torn.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("FAIL torn tail"), "{}", stdout(&o));
    let missing = dir.path().join("missing.jsonl");
    let o = dsh(&["log", "check", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("FAIL cannot read"));
}
