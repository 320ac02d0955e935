//! Replay of the conformance recordings (`testdata/conformance/sessions`):
//! each log's inputs, model streams and tool results drive the agent loop,
//! and the core events it writes are compared with the recorded ones. The
//! expected outcome of every file is pinned so regressions show; the table
//! is printed (`cargo test --test loop_replay -- --nocapture`).

use std::path::{Path, PathBuf};

use dsh_core::agent::replay::{ReplayOptions, ReplayReport, replay_jsonl};

/// The vendored test data (`testdata/` at the repository root).
fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn replay_file(path: &std::path::Path) -> Result<ReplayReport, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    replay_jsonl(&bytes, options).map_err(|e| e.to_string())
}

/// What a file is expected to give.
enum Expect {
    /// Every core event reproduced: the count.
    Identical(usize),
    /// The log is not loadable (legacy header, README): message part.
    Unloadable(&'static str),
}

const LEGACY: &str = "first line is not a session header";

fn expected(name: &str) -> Expect {
    use Expect::*;
    match name {
        n if n.starts_with("apps-web__") => Unloadable(LEGACY),
        n if n.starts_with("packages-test-support__") => Unloadable(LEGACY),
        "examples-acp-agent__goal-snapshots__goal-round-driver__session.jsonl" => {
            Unloadable(LEGACY)
        }
        "examples-acp-agent__bash-tool-turn__session.jsonl" => Identical(101),
        "examples-acp-agent__cancel-tool-calls__session.jsonl" => Identical(23),
        "examples-acp-agent__cancel__session.jsonl" => Identical(13),
        "examples-acp-agent__empty-response-retry__session.jsonl" => Identical(18),
        "examples-acp-agent__error-finish__session.jsonl" => Identical(11),
        "examples-acp-agent__fs-edit__session.jsonl" => Identical(162),
        "examples-acp-agent__fs-read__session.jsonl" => Identical(109),
        "examples-acp-agent__fs-write__session.jsonl" => Identical(98),
        "examples-acp-agent__goal-snapshots__goal-round-driver__session.expected.jsonl" => {
            Identical(59)
        }
        "examples-acp-agent__handshake__session.jsonl" => Identical(0),
        "examples-acp-agent__hook-cc-pretool-deny__session.jsonl" => Identical(121),
        "examples-acp-agent__hook-cc-promptsubmit-block__session.jsonl" => Identical(0),
        "examples-acp-agent__hook-cc-stop-continue__session.jsonl" => Identical(68),
        "examples-acp-agent__max-tokens-continue__session.jsonl" => Identical(31),
        "examples-acp-agent__multi-turn__session.jsonl" => Identical(70),
        "examples-acp-agent__packed-chunks__session.jsonl" => Identical(121),
        // The reference ran the two `read` calls as a parallel group
        // (LC-24): both `tool/call`s, then both results in call order.
        "examples-acp-agent__parallel-tool-calls__session.jsonl" => Identical(31),
        "examples-acp-agent__repeat-tool-reminder__session.jsonl" => Identical(72),
        "examples-acp-agent__session-title-after-turn__session.jsonl" => Identical(16),
        "examples-acp-agent__skill-load__session.jsonl" => Identical(33),
        "examples-acp-agent__subagent-fork-in-process__session.1.jsonl" => Identical(54),
        "examples-acp-agent__subagent-fork-in-process__session.jsonl" => Identical(199),
        "examples-acp-agent__subagent-spawn-in-process__session.1.jsonl" => Identical(37),
        "examples-acp-agent__subagent-spawn-in-process__session.jsonl" => Identical(163),
        "examples-acp-agent__text-turn__session.jsonl" => Identical(39),
        "examples-acp-agent__todo-write__session.jsonl" => Identical(113),
        "examples-acp-agent__tool-call-turn__session.jsonl" => Identical(103),
        "examples-headless-agent__compaction-recovery__session.jsonl" => Identical(26),
        "examples-headless-agent__semantic-checkpoint-snapshots__tool-outcome-unknown__replay.jsonl" => {
            Identical(0)
        }
        "examples-headless-agent__semantic-checkpoint-snapshots__tool-outcome-unknown__session.expected.jsonl" => {
            Identical(14)
        }
        "examples-jsonrpc-agent__subagent-spawn-in-process__session.1.jsonl" => Identical(36),
        "examples-jsonrpc-agent__subagent-spawn-in-process__session.jsonl" => Identical(141),
        "examples-jsonrpc-agent__text-turn__session.jsonl" => Identical(39),
        other => panic!("no expected outcome pinned for {other}"),
    }
}

#[test]
#[cfg_attr(
    not(all(feature = "head-deltas", feature = "surface-replace")),
    ignore = "needs the `head-deltas`, `surface-replace` features"
)]
fn conformance_recordings_replay_as_pinned() {
    let dir = testdata_dir().join("conformance/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 44, "the number of recordings changed");
    let mut failures = Vec::new();
    println!("{:<100} {:>9}  outcome", "recording", "core");
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let got = replay_file(f);
        let line = match &got {
            Err(e) => format!("{:>9}  not loadable: {e}", "-"),
            Ok(r) if r.identical() => {
                format!("{:>9}  identical", format!("{}/{}", r.reproduced, r.total))
            }
            Ok(r) => {
                let d = r.first_difference.as_ref().unwrap();
                format!(
                    "{:>9}  first difference at #{}: {}",
                    format!("{}/{}", r.reproduced, r.total),
                    d.seq,
                    d.reason
                )
            }
        };
        println!("{name:<100} {line}");
        let ok = match (expected(&name), &got) {
            (Expect::Identical(n), Ok(r)) => r.identical() && r.total == n,
            (Expect::Unloadable(why), Err(e)) => e.contains(why),
            _ => false,
        };
        if !ok {
            failures.push(name);
        }
    }
    assert!(
        failures.is_empty(),
        "unexpected replay outcomes: {failures:#?}"
    );
}

#[test]
fn a_changed_recording_is_caught() {
    // Replay must fail, and say where, when the recording disagrees with
    // what the loop writes: change one assistant message's text.
    let r = changed_text_turn();
    assert!(!r.identical());
    let d = r.first_difference.unwrap();
    assert_eq!(d.seq, 37);
    assert!(
        d.reason
            .contains("assistant/message differs at .data.message.content"),
        "{}",
        d.reason
    );
    assert_eq!(r.reproduced, 36);
}

/// The parallel-tool-calls recording rewritten into the sequential order
/// (LC-23): call a, result a, call b, result b.
fn sequential_variant() -> String {
    let path = testdata_dir()
        .join("conformance/sessions/examples-acp-agent__parallel-tool-calls__session.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    // Line 0 is the header; event seq n is line n + 1.
    let call_b = lines[20].clone();
    let result_a = lines[21].clone();
    assert!(call_b.starts_with(r#"{"type":"tool/call","seq":19,"#));
    assert!(result_a.starts_with(r#"{"type":"tool/result","seq":20,"#));
    lines[20] = result_a.replacen(r#""seq":20,"#, r#""seq":19,"#, 1);
    lines[21] = call_b.replacen(r#""seq":19,"#, r#""seq":20,"#, 1);
    assert!(lines[22].contains(r#""sourceEventSeqs":[19]"#));
    lines[22] = lines[22].replacen(r#""sourceEventSeqs":[19]"#, r#""sourceEventSeqs":[20]"#, 1);
    lines.join("\n") + "\n"
}

#[test]
fn lc24_replay_derives_parallel_tools_from_the_recording() {
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    // The same two `read` calls recorded one after the other: replay does
    // not mark `read` parallel, so the core runs them sequentially and
    // reproduces that order too.
    let sequential = sequential_variant();
    let r = replay_jsonl(sequential.as_bytes(), options).unwrap();
    assert!(r.identical(), "{:?}", r.first_difference);
    assert_eq!(r.total, 31);
    // And the recorded group replays as a group (LC-24): both `tool/call`
    // events before the first result.
    let path = testdata_dir()
        .join("conformance/sessions/examples-acp-agent__parallel-tool-calls__session.jsonl");
    let r = replay_jsonl(&std::fs::read(path).unwrap(), options).unwrap();
    assert!(r.identical(), "{:?}", r.first_difference);
    assert_eq!(r.reproduced, 31);
}

/// The first `lines` lines of a conformance log (fixture tokens applied),
/// repaired as a crash-recovering load would: the stored events followed by
/// the closers of the open turn (persistence.md 6.4), unpacked.
fn repaired_prefix(name: &str, lines: usize) -> (Vec<u8>, usize) {
    let path = testdata_dir().join("conformance/sessions").join(name);
    let bytes = dsh_core::jsonl::fixture_tokens(&std::fs::read(path).unwrap());
    let cut: Vec<u8> = bytes
        .split_inclusive(|b| *b == b'\n')
        .take(lines)
        .flatten()
        .copied()
        .collect();
    let loaded = dsh_core::jsonl::load_log(&cut, &[]).unwrap();
    assert!(!loaded.closers.is_empty(), "the cut leaves a turn open");
    let mut out = Vec::new();
    dsh_core::jsonl::encode_header_line(loaded.session.header(), &mut out);
    dsh_core::jsonl::encode_batch(loaded.session.events(), false, &mut out);
    (out, loaded.closers.len())
}

#[test]
fn a_log_repaired_after_a_crash_replays() {
    // Cut after the tool/call (line 20): the repair answers the call with
    // TOOL_OUTCOME_UNKNOWN, closes the step and the turn. Those closers are
    // inputs of the replay, not events the loop must reproduce.
    let (bytes, closers) = repaired_prefix("examples-acp-agent__tool-call-turn__session.jsonl", 20);
    assert_eq!(closers, 3);
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    let r = replay_jsonl(&bytes, options).unwrap();
    assert!(r.identical(), "{r:?}");
    assert_eq!(
        (r.reproduced, r.total),
        (64, 64),
        "the 3 closers are not counted"
    );
    // Resumed after the repair (`session/end-seed` appended): the
    // crashed instance is still replayed, not taken as seed.
    let text = String::from_utf8(bytes).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let seq = text.lines().count() - 1;
    let marker = format!(
        r#"{{"type":"session/end-seed","seq":{seq},"time":{},"data":{{}}}}"#,
        last["time"]
    );
    let resumed = format!("{text}{marker}\n");
    let r = replay_jsonl(resumed.as_bytes(), options).unwrap();
    assert!(r.identical(), "{r}");
    assert_eq!((r.reproduced, r.total, r.seed), (64, 64, 0), "{r}");
}

#[test]
fn a_torn_or_open_recording_does_not_pass_the_check() {
    // Replay said "reproduced 1/1" on a torn log.
    let name = "examples-acp-agent__tool-call-turn__session.jsonl";
    let path = testdata_dir().join("conformance/sessions").join(name);
    let bytes = dsh_core::jsonl::fixture_tokens(&std::fs::read(path).unwrap());
    let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    // Torn: the first 20 lines and half of the 21st.
    let mut torn: Vec<u8> = lines[..20].concat();
    torn.extend_from_slice(&lines[20][..lines[20].len() / 2]);
    let r = replay_jsonl(&torn, options).unwrap();
    assert!(!r.identical(), "{r:?}");
    assert!(
        r.first_difference.unwrap().reason.contains("torn tail"),
        "torn"
    );
    // Open: the first 20 whole lines end inside a turn.
    let open: Vec<u8> = lines[..20].concat();
    let r = replay_jsonl(&open, options).unwrap();
    assert!(!r.identical(), "{r:?}");
    assert!(r.first_difference.unwrap().reason.contains("open turn"));
    // The whole recording still replays.
    assert!(replay_jsonl(&bytes, options).unwrap().identical());
}

/// A recording with `event` inserted right before the first
/// `assistant/message`; later seqs and the seqs that cite them shift by one.
fn with_event_before_first_message(name: &str, event: serde_json::Value) -> String {
    use serde_json::Value;
    let path = testdata_dir().join("conformance/sessions").join(name);
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut at: Option<u64> = None;
    for line in text.lines() {
        let mut e: Value = serde_json::from_str(line).unwrap();
        let Some(seq) = e.get("seq").and_then(Value::as_u64) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        if at.is_none() && e["type"] == "assistant/message" {
            at = Some(seq);
            let inserted = serde_json::json!({
                "type": event["type"],
                "seq": seq,
                "time": e["time"],
                "data": event["data"],
            });
            out.push_str(&inserted.to_string());
            out.push('\n');
        }
        if let Some(at) = at {
            let shift = |v: &mut Value| {
                if let Some(s) = v.as_u64().filter(|s| *s >= at) {
                    *v = Value::from(s + 1);
                }
            };
            shift(&mut e["seq"]);
            if let Some(seqs) = e.get_mut("sourceEventSeqs").and_then(Value::as_array_mut) {
                seqs.iter_mut().for_each(shift);
            }
        }
        out.push_str(&e.to_string());
        out.push('\n');
    }
    assert!(at.is_some(), "{name} has no assistant/message");
    out
}

#[test]
fn a_title_landing_between_the_finish_chunk_and_the_message_replays() {
    // A session title comes from a side call and lands whenever it
    // finishes; between a stream's finish chunk and the message its end
    // writes is a valid place (the live CLI wrote one there). Replay must
    // take it as an input there, not end the stream ahead of it.
    let title = serde_json::json!({
        "type": "session/title",
        "data": {"title": "t", "messageSeqs": [], "source": {"kind": "fallback"}}
    });
    let name = "examples-acp-agent__text-turn__session.jsonl";
    let text = with_event_before_first_message(name, title);
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    let r = replay_jsonl(text.as_bytes(), options).unwrap();
    assert!(r.identical(), "{:?}", r.first_difference);
    assert_eq!(r.reproduced, 39);
}

/// A recording whose foreign events (`types`) carry `"ignorable": true`,
/// plus one event of a type this harness does not know (which loads only
/// because it is marked ignorable, persistence.md CC17) before the first
/// `assistant/message`.
fn with_ignorable_foreign_events(name: &str, types: &[&str]) -> String {
    use serde_json::Value;
    let unknown = serde_json::json!({
        "type": "vendor/audit-note",
        "data": {"note": "kept byte for byte", "n": 1}
    });
    let text = with_event_before_first_message(name, unknown);
    let mut out = String::new();
    let mut marked = 0;
    for line in text.lines() {
        let mut e: Value = serde_json::from_str(line).unwrap();
        let foreign =
            e["type"] == "vendor/audit-note" || types.iter().any(|t| e["type"].as_str() == Some(t));
        if foreign && e.get("seq").is_some() {
            e["ignorable"] = Value::Bool(true);
            marked += 1;
        }
        out.push_str(&e.to_string());
        out.push('\n');
    }
    assert!(marked > 1, "{name}: nothing marked");
    out
}

#[test]
fn e7_ignorable_foreign_events_replay_identically() {
    // session.md E7 / persistence.md CC17: `ignorable: true` is part of the
    // envelope. Replay feeds plugin and foreign events back as inputs; the
    // flag must survive, or every marked event is reported as a mismatch.
    let name = "examples-acp-agent__repeat-tool-reminder__session.jsonl";
    let text = with_ignorable_foreign_events(name, &["todo/write", "session/title"]);
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    let r = replay_jsonl(text.as_bytes(), options).unwrap();
    assert!(r.identical(), "{:?}", r.first_difference);
    assert_eq!(r.reproduced, 72);
}

/// The text-turn recording with one assistant message changed by hand.
fn changed_text_turn() -> dsh_core::agent::replay::ReplayReport {
    let path =
        testdata_dir().join("conformance/sessions/examples-acp-agent__text-turn__session.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let changed = text.replacen(
        r#""content":[{"type":"reasoning","#,
        r#""content":[{"type":"text","text":"X"},{"type":"reasoning","#,
        1,
    );
    assert_ne!(changed, text);
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    replay_jsonl(changed.as_bytes(), options).unwrap()
}

#[test]
fn the_report_displays_counts_and_every_difference() {
    // The report lists seq, JSON path, recorded and produced.
    let r = changed_text_turn();
    assert_eq!(r.differences.len(), 1);
    let shown = r.to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[0],
        "reproduced 36/39 core events (0 seed events not replayed, 1 loop instance replayed)"
    );
    assert!(
        lines[1].starts_with("difference at seq 37 (path .data.message.content (length 3 vs 2)): "),
        "{shown}"
    );
    assert!(
        lines[2].starts_with(r#"  recorded: {"type":"assistant/message","seq":37"#),
        "{shown}"
    );
    assert!(
        lines[2].contains(r#"{"type":"text","text":"X"}"#),
        "{shown}"
    );
    assert!(
        lines[3].starts_with(r#"  produced: {"type":"assistant/message","seq":37"#),
        "{shown}"
    );
    assert!(
        !lines[3].contains(r#"{"type":"text","text":"X"}"#),
        "{shown}"
    );
    assert_eq!(lines.len(), 4);
}

#[test]
#[should_panic(expected = "the replay differs from the recording:\nreproduced 36/39")]
fn assert_replays_panics_with_the_report() {
    dsh_core::assert_replays!(changed_text_turn());
}

#[test]
fn assert_replays_accepts_an_identical_replay() {
    let path = testdata_dir()
        .join("conformance/sessions/examples-acp-agent__cancel-tool-calls__session.jsonl");
    let r = replay_file(&path).unwrap();
    dsh_core::assert_replays!(r);
}
