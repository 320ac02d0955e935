//! The compaction plugin in the embedded shell ("embedded:
//! compaction at least"): the summary is a side call over the same link,
//! the manual run is `Shell::command("compact")` (loop.md CP-3 c), and the
//! JSONL log replays.

mod support;

use dsh_compaction::{Compaction, CompactionConfig};
use dsh_core::agent::replay::{ReplayOptions, replay_jsonl};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_embedded::{Shell, ShellConfig};
use support::{TEMPERATURE, TcpLink, clock};

const SCRIPT: &str = r#"{"responses":[
  {"turn":{"text":["one"],"usage":{"prompt_tokens":10,"completion_tokens":1}}},
  {"turn":{"text":["two"],"usage":{"prompt_tokens":10,"completion_tokens":1}}},
  {"turn":{"text":["EMBEDDED-SUMMARY"],"usage":{"prompt_tokens":10,"completion_tokens":1}}},
  {"turn":{"text":["three"],"usage":{"prompt_tokens":10,"completion_tokens":1}}}
]}"#;

#[test]
fn manual_compaction_over_the_link_and_the_log_replays() {
    let server = MockServer::start(Script::from_json(SCRIPT).unwrap()).unwrap();
    let addr = server.addr();
    let config = ShellConfig::new(addr.to_string(), "device-c");
    let plugin = Box::new(Compaction::new(CompactionConfig::default()));
    let mut shell = Shell::with_plugins(
        config,
        &[TEMPERATURE],
        clock,
        move || TcpLink::connect(addr),
        Vec::new(),
        vec![plugin],
    )
    .unwrap();
    shell.prompt("first").unwrap();
    shell.prompt("second").unwrap();
    let result = shell
        .command(dsh_compaction::COMMAND, serde_json::json!({}))
        .unwrap();
    assert_eq!(result, serde_json::json!({"compacted": true}));
    shell.prompt("third").unwrap();
    let (_, log) = shell.into_parts();
    let text = String::from_utf8(log.clone()).unwrap();
    assert!(text.contains(r#""type":"compaction/summary""#), "{text}");
    assert!(text.contains("EMBEDDED-SUMMARY"), "{text}");
    // The summary request was marked as a compaction (its own header).
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let header = requests[2]
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("x-deepseek-harness-compact") && v == "1");
    assert!(header);
    // The turn after the run sent one message more than turn 2, not
    // two: the summary replaced the first exchange.
    let count = |i: usize| {
        let body: serde_json::Value = serde_json::from_str(&requests[i].body_text()).unwrap();
        body["messages"].as_array().unwrap().len()
    };
    assert_eq!(count(3), count(1) + 1);
    let report = replay_jsonl(&log, ReplayOptions::default()).unwrap();
    assert!(report.identical(), "{report:?}");
}
