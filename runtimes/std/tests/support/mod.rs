//! Shared helpers of the dsh-std integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use dsh_core::LlmCallConfig;
use dsh_core::session::{EventData, InvariantChecker, SessionEvent};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{ClientOptions, DeepSeekClient, DeepSeekConfig};
use dsh_std::{AgentConfig, AgentEvent, ModelProvider};
use dsh_store::SessionStore;

pub const KEY: &str = "sk-test-key";

/// A DeepSeek client (real HTTP transport) aimed at `url`.
pub fn client_for(url: String) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: 10_000,
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).expect("valid config")
}

/// A mock server serving `script` (JSON text).
pub fn mock(script: &str) -> MockServer {
    MockServer::start(Script::from_json(script).expect("script")).expect("mock server")
}

/// The call config every test uses.
pub fn call() -> LlmCallConfig {
    LlmCallConfig::new("deepseek", "deepseek-v4-flash")
}

/// A config over `provider` with the built-in tools confined to `root`.
pub fn config(provider: Arc<dyn ModelProvider>, root: &Path) -> AgentConfig {
    let mut c = AgentConfig::new(provider, call(), root);
    c.tool_timeout = Duration::from_secs(20);
    c
}

/// A JSONL store (plain text) under `dir`.
pub fn store(dir: &Path) -> Arc<dyn SessionStore> {
    let cfg = dsh_jsonl::JsonlConfig::new(dir).with_compression(dsh_jsonl::Compression::None);
    Arc::new(dsh_jsonl::open(cfg).expect("store"))
}

/// Waits for the first event matching `pred` (panics after 10 s).
pub fn wait_for(
    rx: &Receiver<AgentEvent>,
    mut pred: impl FnMut(&AgentEvent) -> bool,
) -> AgentEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if pred(&e) => return e,
            Ok(_) => {}
            Err(e) => panic!("no matching event: {e}"),
        }
    }
}

/// Whether `e` is an appended session event of type `ty`.
pub fn is_event(e: &AgentEvent, ty: &str) -> bool {
    matches!(e, AgentEvent::Event(ev) if ev.event_type() == ty)
}

/// The events of type `ty`.
pub fn of_type<'a>(events: &'a [SessionEvent], ty: &str) -> Vec<&'a SessionEvent> {
    events.iter().filter(|e| e.event_type() == ty).collect()
}

/// Asserts the core's invariants (LC-41, session.md) over a whole log.
pub fn assert_valid(events: &[SessionEvent]) {
    if let Err(v) = InvariantChecker::check_log(events) {
        panic!("log violates invariants: {v:?}");
    }
}

/// The text of every tool/result message, with its error flag.
pub fn tool_results(events: &[SessionEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::ToolResult(r) => {
                let text = serde_json::to_string(&r.message.content).unwrap_or_default();
                let is_error = text.contains("\"isError\":true");
                Some((text, is_error))
            }
            _ => None,
        })
        .collect()
}

/// The JSON lines of `events`.
pub fn lines(events: &[SessionEvent]) -> Vec<String> {
    events.iter().map(SessionEvent::to_json).collect()
}
