//! `dsh demo --scenario subagent` end to end (loop.md SA-1, SA-2, issue
//! 14): the scripted model delegates to a spawned child through the mock
//! DeepSeek server; the child's log lies beside the parent's, linked to
//! it; both logs check and replay; `dsh sessions` lists the child under
//! its parent.

mod support;

use std::path::Path;
use support::{dsh, text, transcripts};

fn header(path: &Path) -> serde_json::Value {
    let raw = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(raw.lines().next().unwrap()).unwrap()
}

#[test]
fn demo_subagent_delegates_to_a_linked_child_and_both_logs_replay() {
    let data = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let o = dsh(data.path())
        .args(["demo", "--scenario", "subagent", "--store-dir"])
        .arg(store.path())
        .arg("--workspace")
        .arg(ws.path())
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    // The child did the work; its answer came back to the parent.
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(),
        "Hello from a subagent!\n"
    );
    assert!(
        out.contains("Wrote hello.txt: Hello from a subagent!"),
        "{out}"
    );
    let logs = transcripts(store.path());
    assert_eq!(logs.len(), 2, "{out}");
    let (child, parent): (Vec<_>, Vec<_>) = logs
        .iter()
        .partition(|p| header(p).get("parentSession").is_some());
    let (child, parent) = (child[0], parent[0]);
    let (ch, ph) = (header(child), header(parent));
    // SA-1: linked, beside the parent (same project folder).
    assert_eq!(ch["parentSession"], ph["id"]);
    assert_eq!(ch["origin"], "subagent");
    assert_eq!(ch["delegationDepth"], 1);
    assert_eq!(
        child.parent().unwrap().parent(),
        parent.parent().unwrap().parent()
    );
    assert!(
        std::fs::read_to_string(child)
            .unwrap()
            .contains("\"type\":\"subagent/descriptor\""),
    );
    for log in [parent, child] {
        let log = log.to_str().unwrap();
        assert!(out.contains(&format!("dsh replay --check {log}")), "{out}");
        let c = dsh(data.path())
            .args(["log", "check", log])
            .output()
            .unwrap();
        assert_eq!(c.status.code(), Some(0), "{}", text(&c.stdout));
        let r = dsh(data.path())
            .args(["replay", "--check", log])
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(0), "{}", text(&r.stdout));
    }
    // `dsh sessions`: the child's row follows its parent's, indented.
    let s = dsh(data.path())
        .args(["sessions", "--store-dir"])
        .arg(store.path())
        .output()
        .unwrap();
    let listing = text(&s.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(ph["id"].as_str().unwrap()))
        .unwrap();
    assert!(
        lines[at + 1].starts_with(&format!("└ {}", ch["id"].as_str().unwrap())),
        "{listing}"
    );
}
