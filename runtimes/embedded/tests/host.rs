//! The embedded shell on a host: `embedded-io` over a std `TcpStream` to the
//! mock DeepSeek server, a two-step tool turn, its JSONL log checked the way
//! `dsh log check` and `dsh replay --check` check it, and the heap
//! high-water mark of the turn.

mod support;

use dsh_core::agent::replay::{ReplayOptions, replay_jsonl};
use dsh_core::jsonl::{load_log, verify_log};
use dsh_core::{ContentBlock, Role};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_embedded::{Shell, ShellConfig};
use serde_json::Value;
use support::{
    Counting, HeapFigures, LOG_CAPACITY, TEMPERATURE, TWO_STEP_SCRIPT, TcpLink, clock,
    heap_high_water, live_now,
};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The heap budget of the two-step tool turn (32 KiB).
const HEAP_BUDGET: i64 = 32 * 1024;

fn run_two_step() -> (Vec<u8>, MockServer, HeapFigures) {
    let server = MockServer::start(Script::from_json(TWO_STEP_SCRIPT).unwrap()).unwrap();
    let addr = server.addr();
    let mut config = ShellConfig::new(addr.to_string(), "device-1");
    config.api_key = Some("sk-test".into());
    // The sink stands for a flash region: its bytes are not the shell's heap.
    let sink = Vec::with_capacity(LOG_CAPACITY);
    let (log, heap) = heap_high_water(|| {
        let mut shell = Shell::new(
            config,
            &[TEMPERATURE],
            clock,
            move || TcpLink::connect(addr),
            sink,
        )
        .unwrap();
        shell.prompt("How warm is the board?").unwrap();
        let (agent, log) = shell.into_parts();
        println!(
            "heap kept by the agent after the turn (session of {} events): {} bytes",
            agent.session().len(),
            live_now()
        );
        drop(agent);
        log
    });
    assert!(log.len() < LOG_CAPACITY, "the sink never reallocated");
    (log, server, heap)
}

#[test]
fn a_fresh_shell_is_small() {
    let addr = "127.0.0.1:9".parse().unwrap();
    let config = ShellConfig::new("127.0.0.1:9", "device-1");
    let sink = Vec::with_capacity(LOG_CAPACITY);
    let (shell, heap) = heap_high_water(|| {
        Shell::new(
            config,
            &[TEMPERATURE],
            clock,
            move || TcpLink::connect(addr),
            sink,
        )
        .unwrap()
    });
    println!(
        "heap of a fresh shell (agent, tool registry, configs): {} bytes, peak {}",
        heap.retained, heap.peak
    );
    assert!(heap.retained < 8 * 1024, "{heap:?}");
    // Only the header line was written.
    assert_eq!(shell.sink().iter().filter(|b| **b == b'\n').count(), 1);
}

fn lines(log: &[u8]) -> Vec<Value> {
    log.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

#[test]
fn two_step_tool_turn_over_tcp_passes_log_check_and_replay() {
    let (log, server, heap) = run_two_step();
    let peak = heap.peak;
    println!("heap high-water mark of the two-step tool turn: {peak} bytes");
    // Nothing the shell allocated outlives it (the config it was given was
    // allocated before the measurement and freed inside, hence <= 0).
    assert!(heap.retained <= 0, "{heap:?}");

    // The wire: two POSTs with Content-Length and Connection: close; the
    // second carries the tool call and its result (W-rules of 5.7).
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/chat/completions")
        );
        assert_eq!(r.header_values("connection"), ["close"]);
        assert_eq!(r.header_values("authorization"), ["Bearer sk-test"]);
        assert_eq!(r.header_values("accept"), ["text/event-stream"]);
        assert_eq!(
            r.header_values("content-length"),
            [r.body.len().to_string().as_str()]
        );
    }
    let first: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(first["model"], "deepseek-v4-flash");
    assert_eq!(first["stream"], true);
    assert_eq!(first["tools"][0]["function"]["name"], "temperature");
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], "call_1");
    assert_eq!(tool["content"], "21.5 C");

    // The log: header line first, then one event per line.
    let records = lines(&log);
    assert_eq!(records[0]["type"], "session");
    assert_eq!(records[0]["id"], "device-1");
    for (i, r) in records[1..].iter().enumerate() {
        assert_eq!(r["seq"], i as u64, "events are numbered from 0 in order");
    }
    let types: Vec<&str> = records[1..]
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(types.iter().filter(|t| **t == "tool/call").count(), 1);
    assert_eq!(types.iter().filter(|t| **t == "tool/result").count(), 1);
    assert_eq!(
        types.iter().filter(|t| **t == "assistant/message").count(),
        2
    );
    let end = records.iter().rfind(|r| r["type"] == "turn/end").unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "completed", "{end}");

    // `dsh log check` and `dsh replay --check` run these functions.
    verify_log(&log).unwrap_or_else(|why| panic!("log check failed: {why}"));
    let report = replay_jsonl(&log, ReplayOptions::default()).unwrap();
    assert!(
        report.identical(),
        "replay differs: {:?}",
        report.first_difference
    );
    assert!(report.reproduced > 10, "{report:?}");

    // The derived history: user, assistant (tool call), the tool result
    // (a user message, M-4), assistant text.
    let loaded = load_log(&log, &[]).unwrap();
    let history = loaded.session.derive_messages_uncached();
    let roles: Vec<Role> = history.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    assert_eq!(history[3].content, [ContentBlock::text("It is 21.5 C.")]);

    assert!(
        peak <= HEAP_BUDGET,
        "heap high-water mark {peak} bytes is over the {HEAP_BUDGET}-byte budget"
    );
}
