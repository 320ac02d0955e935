//! Conformance over `testdata/conformance/sessions` (its README, items 1–4):
//! every log passes the full check of `dsh log check --fixture-tokens`
//! (load and validate, byte-exact round trip, re-packed rows, re-assembly,
//! invariants, tool pairing), except the 11 legacy-header logs, which must
//! be rejected as having no session header; their chunk runs still serve
//! the re-assembly check.

use std::path::{Path, PathBuf};

use dsh_core::jsonl::{self, Decoded, Decoder, Record};
use dsh_core::session::EventData;
use dsh_core::{BlockAssembler, ContentBlock, StreamChunk};
use serde_json::Value;

/// The vendored test data (`testdata/` at the repository root).
fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn logs() -> Vec<PathBuf> {
    let dir = testdata_dir().join("conformance/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// The legacy-header logs the conformance README names.
fn is_legacy(name: &str) -> bool {
    name.starts_with("apps-web__")
        || name.starts_with("packages-test-support__")
        || name == "examples-acp-agent__goal-snapshots__goal-round-driver__session.jsonl"
}

/// Re-assembles the chunk runs of a log read line by line (legacy shapes
/// included) and compares them with the recorded assistant content.
fn reassemble_lines(bytes: &[u8]) -> (usize, Vec<String>) {
    let mut decoder = Decoder::new();
    let mut attempt: Vec<StreamChunk> = Vec::new();
    let mut finished: Option<((u64, u64), Vec<StreamChunk>)> = None;
    let mut key = None;
    let mut compared = 0;
    let mut failures = Vec::new();
    for line in bytes
        .split(|b| *b == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty())
    {
        let events = match decoder.decode_line(line) {
            Ok(Record::Run(events)) => events,
            Ok(Record::One(Decoded::Event(e))) => vec![e],
            _ => Vec::new(),
        };
        for e in &events {
            if let EventData::AssistantChunk(c) = e.data() {
                if key != Some((c.turn, c.step)) {
                    attempt.clear();
                    key = Some((c.turn, c.step));
                }
                attempt.push(c.chunk());
                if c.is_finish() {
                    finished = Some(((c.turn, c.step), std::mem::take(&mut attempt)));
                    key = None;
                }
            }
        }
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if v["type"] != "assistant/message" {
            continue;
        }
        let data = &v["data"];
        let content = if data["message"].is_object() {
            &data["message"]["content"]
        } else {
            &data["content"]
        };
        let this = (
            data["turn"].as_u64().unwrap_or(0),
            data["step"].as_u64().unwrap_or(0),
        );
        let Some((k, chunks)) = finished.take() else {
            continue;
        };
        if k != this || data["interrupted"] == true {
            continue;
        }
        let mut asm = BlockAssembler::new();
        asm.extend(&chunks);
        let recorded: Vec<ContentBlock> = serde_json::from_value(content.clone()).unwrap();
        match asm.blocks() {
            Ok(blocks) if blocks == recorded => compared += 1,
            other => failures.push(format!("turn {} step {}: {other:?}", this.0, this.1)),
        }
    }
    (compared, failures)
}

#[test]
fn every_conformance_log_checks() {
    let files = logs();
    assert!(!files.is_empty());
    let (mut passed, mut legacy, mut events, mut rows, mut steps, mut legacy_steps) =
        (0, 0, 0, 0, 0, 0);
    let mut verbatim = 0;
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = jsonl::fixture_tokens(&std::fs::read(path).unwrap());
        let result = jsonl::verify_log(&bytes);
        if is_legacy(&name) {
            match result {
                Err(why) if why.contains("first line is not a session header") => legacy += 1,
                other => failures.push(format!("{name}: legacy header not rejected: {other:?}")),
            }
            let (n, bad) = reassemble_lines(&bytes);
            legacy_steps += n;
            failures.extend(
                bad.into_iter()
                    .map(|b| format!("{name}: legacy re-assembly {b}")),
            );
            continue;
        }
        match result {
            Ok(report) => {
                passed += 1;
                events += report.events;
                rows += report.packed_rows;
                steps += report.reassembled;
                // Events whose text differs from the canonical writer's
                // (e.g. the crash-repair result's key order) keep it.
                verbatim += report.verbatim_events;
            }
            Err(why) => failures.push(format!("{name}: FAIL {why}")),
        }
    }
    println!(
        "conformance: {} files; {passed} pass (events {events}, packed rows {rows}, re-assembled model calls {steps}, events kept as source text {verbatim}); {legacy} legacy headers rejected (re-assembled model calls {legacy_steps})",
        files.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(legacy, 11, "the README names 11 legacy-header logs");
    assert_eq!(passed + legacy, files.len());
    assert!(steps > 0 && legacy_steps > 0 && rows > 0);
}

#[test]
fn without_fixture_tokens_the_placeholders_fail_validation() {
    let path =
        testdata_dir().join("conformance/sessions/examples-acp-agent__text-turn__session.jsonl");
    let bytes = std::fs::read(path).unwrap();
    let err = jsonl::verify_log(&bytes).unwrap_err();
    assert!(err.contains("failed validation"), "{err}");
}

#[test]
fn derived_history_of_a_packed_log() {
    let path = testdata_dir()
        .join("conformance/sessions/examples-acp-agent__packed-chunks__session.jsonl");
    let bytes = jsonl::fixture_tokens(&std::fs::read(path).unwrap());
    let mut loaded = jsonl::load_log(&bytes, &[]).unwrap();
    assert_eq!(loaded.session.len(), 124);
    let ids: Vec<String> = loaded
        .session
        .derive_messages()
        .iter()
        .map(|m| format!("{:?}", m.role))
        .collect();
    assert_eq!(ids, ["User", "User", "Assistant", "User", "Assistant"]);
}
