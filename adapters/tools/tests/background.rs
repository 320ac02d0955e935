//! Background bash jobs: start, read output, stop;
//! bounded in count and output; killed with the tool set.

use std::path::Path;
use std::time::{Duration, Instant};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{
    BackgroundConfig, BashConfig, Jobs, SandboxMode, SandboxPolicy, ToolCallRequest, ToolContext,
    ToolSet, Workspace,
};
use serde_json::{Value, json};

fn set(max_output_bytes: usize) -> ToolSet {
    let bash = BashConfig {
        max_output_bytes,
        sandbox: SandboxPolicy {
            mode: SandboxMode::Off,
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    let jobs = Jobs::new(BackgroundConfig {
        bash,
        max_running: 2,
        max_jobs: 3,
    });
    let mut set = ToolSet::new();
    for t in jobs.tools() {
        set.insert(t);
    }
    set
}

fn call(set: &ToolSet, ws: &Path, name: &str, args: Value) -> (bool, String) {
    let ctx = ToolContext::new(Workspace::new(ws).unwrap());
    let o: ToolOutcome = set.execute_request(
        &ToolCallRequest {
            name: name.into(),
            call_id: "c1".into(),
            arguments: args,
        },
        &ctx,
    );
    let mut text = o
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join("");
    if let Some(e) = &o.error {
        text.push_str(&e.message);
    }
    (o.error.is_some(), text)
}

/// Polls `bash_output` until `pred` holds on the collected text.
fn wait_for(set: &ToolSet, ws: &Path, id: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut all = String::new();
    loop {
        let (err, text) = call(set, ws, "bash_output", json!({"id": id}));
        assert!(!err, "{text}");
        all.push_str(&text);
        all.push('\n');
        if pred(&all) {
            return all;
        }
        assert!(Instant::now() < deadline, "timed out: {all}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn start_read_and_finish() {
    let ws = tempfile::tempdir().unwrap();
    let set = set(64_000);
    let (err, text) = call(
        &set,
        ws.path(),
        "bash_start",
        json!({"command": "echo one; sleep 0.2; echo two >&2; pwd"}),
    );
    assert!(!err, "{text}");
    assert!(text.starts_with("started background job bg1"), "{text}");
    let all = wait_for(&set, ws.path(), "bg1", |t| t.contains("exited with code 0"));
    assert!(all.contains("one\n") && all.contains("two\n"), "{all}");
    let cwd = std::fs::canonicalize(ws.path()).unwrap();
    assert!(
        all.contains(cwd.to_str().unwrap()),
        "runs in the workspace: {all}"
    );
    // Read once: a later read has nothing new.
    let (_, again) = call(&set, ws.path(), "bash_output", json!({"id": "bg1"}));
    assert!(again.ends_with("(no more output)"), "{again}");
    let (err, text) = call(&set, ws.path(), "bash_output", json!({"id": "bg9"}));
    assert!(err && text.contains("no background job bg9"), "{text}");
    let (err, _) = call(&set, ws.path(), "bash_output", json!({"id": 1}));
    assert!(err);
}

#[test]
fn bounded_in_count_and_output_and_stoppable() {
    let ws = tempfile::tempdir().unwrap();
    let set = set(100);
    let (e1, _) = call(
        &set,
        ws.path(),
        "bash_start",
        json!({"command": "sleep 30"}),
    );
    let (e2, _) = call(
        &set,
        ws.path(),
        "bash_start",
        json!({"command": "head -c 5000 /dev/zero | tr '\\0' x; echo END; sleep 30"}),
    );
    assert!(!e1 && !e2);
    let (e3, text) = call(&set, ws.path(), "bash_start", json!({"command": "true"}));
    assert!(e3 && text.contains("limit"), "{text}");
    let all = wait_for(&set, ws.path(), "bg2", |t| t.contains("xEND"));
    assert!(
        all.contains("bytes of output were dropped before this read"),
        "{all}"
    );
    assert!(
        all.lines().all(|l| l.len() <= 100 + 80),
        "only the kept tail (100 bytes) per read: {all}"
    );
    let started = Instant::now();
    let (err, text) = call(&set, ws.path(), "bash_stop", json!({"id": "bg1"}));
    assert!(!err && text.starts_with("[stopped: sleep 30]"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // A slot is free again.
    let (err, text) = call(&set, ws.path(), "bash_start", json!({"command": "true"}));
    assert!(!err, "{text}");
}

#[test]
fn jobs_die_with_the_tool_set() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("alive");
    let set = set(1000);
    let cmd = format!(
        "while true; do touch {}; sleep 0.05; done",
        marker.display()
    );
    let (err, text) = call(&set, ws.path(), "bash_start", json!({"command": cmd}));
    assert!(!err, "{text}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !marker.exists() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(set);
    std::thread::sleep(Duration::from_millis(100));
    std::fs::remove_file(&marker).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "the job was killed with the tool set");
}

#[test]
fn the_standard_set_has_the_background_tools() {
    let names = ToolSet::standard(BashConfig::default()).names().join(",");
    assert!(names.contains("bash_start,bash_stop"), "{names}");
    assert!(names.contains("bash_output"), "{names}");
}
