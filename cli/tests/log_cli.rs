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
    let failed: Vec<String> = out
        .lines()
        .filter(|l| l.contains(": FAIL "))
        .map(|l| {
            let path = Path::new(&l[..l.find(": FAIL ").unwrap()]);
            path.file_name().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    assert_eq!(files.len(), 44, "the number of recordings changed");
    assert_eq!(ok + failed.len(), files.len());
    let legacy =
        std::fs::read_to_string(testdata_dir().join("conformance/legacy-headers.txt")).unwrap();
    let mut legacy: Vec<&str> = legacy.lines().collect();
    legacy.sort();
    assert_eq!(failed, legacy, "only the legacy headers fail:\n{out}");
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
    assert_eq!(o.status.code(), Some(2), "unreadable input (README)");
    assert!(stdout(&o).contains("FAIL cannot read"));
}

#[test]
fn a_reference_log_with_other_payload_shapes_loads_and_strict_lists_each() {
    // A `trigger` on turn/start and tools logged as names load,
    // derive, repair and replay; `--strict` names each deviation (E4).
    let base = std::fs::read_to_string(log("examples-acp-agent__todo-write__session.jsonl"))
        .unwrap()
        .replace(
            "\"tools\":\"{{tools}}\"",
            "\"tools\":[\"bash\",\"todo_write\"]",
        )
        .replace("{{cwd}}", "/fixture-cwd");
    let text = base.replacen(
        "\"data\":{\"turn\":1}}",
        "\"data\":{\"turn\":1,\"trigger\":{\"kind\":\"prompt\"}}}",
        1,
    );
    assert_ne!(text, base);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    std::fs::write(&path, &text).unwrap();
    let p = path.to_str().unwrap();
    let o = dsh(&["log", "check", p]);
    assert_eq!(stdout(&o), format!("{p}: ok\n"));
    assert_eq!(o.status.code(), Some(0));
    for cmd in [&["log", "derive", p][..], &["replay", "--check", p]] {
        let o = dsh(cmd);
        assert_eq!(o.status.code(), Some(0), "{cmd:?}: {}", stdout(&o));
    }
    // Repair writes one event per line (rows unpacked); the two events
    // keep their source text.
    let o = dsh(&["log", "repair", p]);
    assert_eq!(o.status.code(), Some(0));
    let repaired = stdout(&o);
    for changed in text
        .lines()
        .filter(|l| l.contains("trigger") || l.contains("\"bash\""))
    {
        assert!(repaired.lines().any(|l| l == changed), "{changed}");
    }
    let o = dsh(&["log", "check", "--strict", p]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!("{p}: FAIL strict: 2 event(s) not in the exact shape of session.md 4")
    );
    assert!(
        lines[1].starts_with("  seq 1: E4 ") && lines[1].contains("\"trigger\""),
        "{out}"
    );
    assert!(
        lines[2].contains(": E4 ") && lines[2].contains("tools"),
        "{out}"
    );
    assert_eq!(lines.len(), 3, "{out}");
}

#[test]
fn check_of_a_missing_file_is_bad_input() {
    // The exit-code contract: 2 for unreadable input, 1 for a failed check.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.jsonl");
    let good = log("examples-acp-agent__packed-chunks__session.jsonl");
    let o = dsh(&[
        "log",
        "check",
        "--fixture-tokens",
        good.to_str().unwrap(),
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!("{}: ok\n", good.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}: FAIL cannot read ", missing.display())),
        "{out}"
    );
}

#[test]
fn repair_refuses_a_log_whose_turns_are_not_enclosed() {
    // Repair exited 0 on a corrupt (not torn) log and
    // printed a log that fails `log check`. A turn/end of another turn and
    // a step/start outside a turn are corruption (session.md 11), not a
    // torn tail: exit 1, nothing printed.
    let dir = tempfile::tempdir().unwrap();
    for (n, body) in [
        format!(
            "{TURN_START}\n{}\n",
            r#"{"type":"turn/end","seq":1,"time":11,"data":{"turn":2,"reason":{"kind":"completed"}}}"#
        ),
        format!(
            "{}\n",
            r#"{"type":"step/start","seq":0,"time":12,"data":{"turn":1,"step":1}}"#
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("bad{n}.jsonl"));
        std::fs::write(&path, format!("{H}\n{body}")).unwrap();
        let p = path.to_str().unwrap();
        let check = dsh(&["log", "check", p]);
        assert_eq!(check.status.code(), Some(1), "{body}");
        let o = dsh(&["log", "repair", p]);
        assert_eq!(o.status.code(), Some(1), "{body}: {}", stdout(&o));
        assert!(o.stdout.is_empty());
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(err.contains(": corrupt: "), "{err}");
    }
}
