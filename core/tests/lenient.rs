//! Lenient, lossless loading of core payloads (session.md Q1, E4):
//! a log the reference wrote with an extra key, or an older/newer shape of a
//! field dsh does not interpret, in any core event type, loads, checks,
//! derives and replays, writes back byte for byte, and reports the deviation
//! with its rule id. A strict decoder still refuses it, and structural
//! corruption (what dsh owns: turn numbers, seq) is still rejected.

use std::path::{Path, PathBuf};

use dsh_core::agent::replay::{ReplayOptions, replay_jsonl};
use dsh_core::jsonl::{self, Decoded, Decoder, Record};
use serde_json::{Value, json};

fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// A conformance log after the fixture-token substitution.
fn log(name: &str) -> Vec<u8> {
    let path = testdata_dir().join("conformance/sessions").join(name);
    jsonl::fixture_tokens(&std::fs::read(path).unwrap())
}

const TODO: &str = "examples-acp-agent__todo-write__session.jsonl";
const CANCEL: &str = "examples-acp-agent__cancel-tool-calls__session.jsonl";
const FORK_CHILD: &str = "examples-acp-agent__subagent-fork-in-process__session.1.jsonl";

/// `bytes` with the first event line of `event_type` changed by `edit`
/// (its `data` object), and that line's seq.
fn mutate(bytes: &[u8], event_type: &str, edit: impl Fn(&mut Value)) -> (Vec<u8>, u64) {
    let text = std::str::from_utf8(bytes).unwrap();
    let mut out = String::new();
    let mut seq = None;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        if seq.is_none()
            && let Ok(mut v) = serde_json::from_str::<Value>(body)
            && v["type"] == event_type
        {
            edit(&mut v["data"]);
            seq = v["seq"].as_u64();
            out.push_str(&serde_json::to_string(&v).unwrap());
            out.push('\n');
            continue;
        }
        out.push_str(line);
    }
    (
        out.into_bytes(),
        seq.unwrap_or_else(|| panic!("no {event_type}")),
    )
}

fn add(key: &str, value: Value) -> impl Fn(&mut Value) {
    let key = key.to_string();
    move |d: &mut Value| {
        d.as_object_mut()
            .unwrap()
            .insert(key.clone(), value.clone());
    }
}

fn replay(bytes: &[u8]) -> String {
    let options = {
        let mut options = ReplayOptions::default();
        options.fixture_tokens = true;
        options
    };
    format!(
        "{:?}",
        replay_jsonl(bytes, options).map_err(|e| e.to_string())
    )
}

/// The line at `seq` as the strict decoder reads it.
fn strict_rejects(bytes: &[u8], seq: u64) -> bool {
    let mut d = Decoder::strict();
    for line in bytes.split(|b| *b == b'\n').skip(1) {
        if let Ok(Record::One(r)) = d.decode_line(line)
            && r.seq() == Some(seq)
        {
            return matches!(r, Decoded::Invalid(_));
        }
    }
    panic!("seq {seq} not found");
}

/// Loads, checks (byte-exact round trip included), derives and replays the
/// mutated log; the one deviation is reported at `seq` with rule E4 and
/// names `needle`; the strict decoder refuses that line.
fn assert_lenient(base: &str, event_type: &str, needle: &str, edit: impl Fn(&mut Value)) {
    check_lenient(base, event_type, needle, edit, true)
}

fn check_lenient(
    base: &str,
    event_type: &str,
    needle: &str,
    edit: impl Fn(&mut Value),
    same_replay: bool,
) {
    let original = log(base);
    let (bytes, seq) = mutate(&original, event_type, edit);
    assert_ne!(bytes, original, "{event_type}: the edit changed nothing");
    let what = format!("{event_type} ({needle})");
    let report = jsonl::verify_log(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        report.deviations.len(),
        1,
        "{what}: {:?}",
        report.deviations
    );
    let (at, why) = &report.deviations[0];
    assert_eq!(*at, seq, "{what}");
    assert_eq!(why.rule(), "E4", "{what}: {why}");
    assert!(why.to_string().contains(needle), "{what}: {why}");
    // Written back unchanged: the loaded events re-encode to the same lines.
    let mut loaded = jsonl::load_log(&bytes, &[]).unwrap();
    let mut back = Vec::new();
    jsonl::encode_header_line(loaded.session.header(), &mut back);
    jsonl::encode_batch(loaded.session.events(), true, &mut back);
    assert_eq!(
        String::from_utf8_lossy(&back),
        String::from_utf8_lossy(&bytes),
        "{what}: not written back byte for byte"
    );
    let derived = loaded.session.derive_messages().len();
    let mut base_loaded = jsonl::load_log(&original, &[]).unwrap();
    assert_eq!(
        derived,
        base_loaded.session.derive_messages().len(),
        "{what}"
    );
    if same_replay {
        assert_eq!(replay(&bytes), replay(&original), "{what}: replay differs");
    }
    assert!(strict_rejects(&bytes, seq), "{what}: strict accepted it");
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn an_extra_key_in_every_core_payload_loads_and_round_trips() {
    let extra = json!({"note": "added by a newer producer", "n": [1, 2.5]});
    for t in [
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "assistant/message",
        "tool/call",
        "tool/result",
        "todo/write",
        "request/header",
        "request/context",
    ] {
        assert_lenient(TODO, t, "x-extra", add("x-extra", extra.clone()));
    }
    assert_lenient(
        FORK_CHILD,
        "session/end-seed",
        "session/end-seed",
        add("x-extra", extra),
    );
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn older_and_newer_shapes_load_and_round_trip() {
    // The examples: a `trigger` object on turn/start, and tools
    // logged as names instead of schemas.
    assert_lenient(
        TODO,
        "turn/start",
        "trigger",
        add("trigger", json!({"kind": "prompt", "source": "acp"})),
    );
    assert_lenient(TODO, "request/header", "tools", |d| {
        d["header"]["tools"] = json!(["bash", "read", "todo_write"]);
    });
    assert_lenient(TODO, "request/header", "toolChoice", |d| {
        d["header"]["toolChoice"] = json!("auto");
    });
    assert_lenient(TODO, "request/header", "adapterDefaults", |d| {
        d["header"]["adapterDefaults"] = json!({"temperature": true});
    });
    // Token usage in another shape (not read, so a replay, which produces
    // usage, differs there), `interrupted:false` written out.
    check_lenient(
        TODO,
        "assistant/message",
        "usage",
        |d| d["usage"] = json!({"promptTokens": 10, "completionTokens": 2}),
        false,
    );
    assert_lenient(TODO, "assistant/message", "interrupted", |d| {
        d["interrupted"] = json!(false);
    });
    // Arguments as a JSON object (an older shape): read as its compact
    // JSON text, which is not the model's raw text (spaces), so a replay
    // differs there.
    check_lenient(
        TODO,
        "tool/call",
        "arguments",
        |d| {
            let text = d["arguments"].as_str().unwrap().to_string();
            d["arguments"] = serde_json::from_str(&text).unwrap();
        },
        false,
    );
    // A tool error identity with a message.
    assert_lenient(CANCEL, "tool/result", "error", |d| {
        d["error"]["message"] = json!("the tool did not start");
    });
    // Todo items with the older `id` and `priority`.
    assert_lenient(TODO, "todo/write", "unknown field", |d| {
        for (i, item) in d["todos"].as_array_mut().unwrap().iter_mut().enumerate() {
            item["id"] = json!(i.to_string());
            item["priority"] = json!("high");
        }
    });
    assert_lenient(TODO, "request/context", "contextWindow", |d| {
        d["contextWindow"] = json!("1M");
    });
    assert_lenient(TODO, "turn/end", "x-extra", |d| {
        d["x-extra"] = json!(1);
    });
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn what_dsh_owns_is_still_validated() {
    // A turn number of the wrong type or missing: the event stays invalid
    // and the log is refused (structural, not a shape detail).
    for edit in [
        (|d: &mut Value| d["turn"] = json!("1")) as fn(&mut Value),
        |d| {
            d.as_object_mut().unwrap().remove("turn");
        },
        |d| {
            d["trigger"] = json!({"kind": "prompt"});
            d["turn"] = json!(-1);
        },
        // A legacy trigger must be an object with a non-empty `kind`, and
        // alone beside `turn` (persistence.md LG1).
        |d| d["trigger"] = json!({}),
        |d| d["trigger"] = json!("prompt"),
        |d| {
            d["trigger"] = json!({"kind": "prompt"});
            d["x"] = json!(1);
        },
    ] {
        let (bytes, _) = mutate(&log(TODO), "turn/start", edit);
        let err = jsonl::verify_log(&bytes).unwrap_err();
        assert!(err.contains("turn/start"), "{err}");
    }
    // The request-header config (V4) is not reduced away.
    let (bytes, _) = mutate(&log(TODO), "request/header", |d| {
        d["header"]["config"]["model"] = json!("");
        d["header"]["extra"] = json!(1);
    });
    let err = jsonl::verify_log(&bytes).unwrap_err();
    assert!(err.contains("model"), "{err}");
    // A broken turn enclosure: a step/end naming another turn.
    let (bytes, _) = mutate(&log(TODO), "step/end", |d| {
        d["turn"] = json!(7);
        d["x"] = json!(1);
    });
    assert!(jsonl::verify_log(&bytes).is_err());
    // A bad seq.
    let (bytes, _) = mutate(&log(TODO), "turn/start", |_| {});
    let text = String::from_utf8(bytes).unwrap();
    let bad = text.replacen(
        "\"type\":\"turn/start\",\"seq\":",
        "\"type\":\"turn/start\",\"seq\":9",
        1,
    );
    assert!(jsonl::verify_log(bad.as_bytes()).is_err());
}

#[test]
#[cfg_attr(
    not(feature = "surface-replace"),
    ignore = "needs the `surface-replace` feature"
)]
fn every_conformance_log_is_in_the_strict_shape() {
    // The sample recordings need no lenience: `--strict` passes on them, so
    // a change that made the reader lenient by accident would show here.
    let dir = testdata_dir().join("conformance/sessions");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = jsonl::fixture_tokens(&std::fs::read(entry.unwrap().path()).unwrap());
        if let Ok(report) = jsonl::verify_log(&bytes) {
            assert!(report.deviations.is_empty(), "{:?}", report.deviations);
            checked += 1;
        }
    }
    assert_eq!(checked, 33);
}
