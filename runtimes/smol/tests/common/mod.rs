//! Shared fixtures: the mock DeepSeek server, an echo tool, a JSONL store
//! in a temp dir, and log checks.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::{EventData, InvariantChecker, SessionEvent, TurnEndReason};
use dsh_core::{ContentBlock, LlmCallConfig, SessionId};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{ClientOptions, DeepSeekClient, DeepSeekConfig};
use dsh_smol::AgentConfig;
use dsh_store::{Cancel, SessionStore};
use dsh_tools::{Tool, ToolCallRequest, ToolContext, ToolSet};
use serde_json::{Value, json};

pub const KEY: &str = "sk-test-smol";
pub const MODEL: &str = "deepseek-v4-flash";

pub fn server(script: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<Script>(script).expect("valid script"))
        .expect("mock server")
}

/// The V02 exchange as DeepSeek SSE: a tool call `echo {"text":"ping"}`,
/// then a text answer, both with usage; served to every session.
pub fn tool_turn_script() -> Value {
    json!({
        "perSession": true,
        "responses": [
            {"turn": {
                "toolCalls": [{"id": "c1", "name": "echo", "arguments": ["{\"text\":", "\"ping\"}"]}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            }},
            {"turn": {
                "text": ["do", "ne"],
                "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
            }}
        ]
    })
}

/// Echoes `text`: `echo: <text>`.
pub struct Echo;

impl Tool for Echo {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "echo",
            "Echo text",
            json!({"type":"object","properties":{"text":{"type":"string"}}}),
        )
    }

    fn execute(&self, call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        let text = call
            .arguments
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        ToolOutcome::success(vec![ContentBlock::text(format!("echo: {text}"))])
    }
}

pub fn deepseek_config(url: String) -> DeepSeekConfig {
    DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: 20_000,
        ..DeepSeekConfig::default()
    }
}

pub fn client_options() -> ClientOptions {
    ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        connect_timeout: Duration::from_secs(20),
        ..ClientOptions::default()
    }
}

pub fn config(server: &MockServer) -> AgentConfig {
    config_for(deepseek_config(server.url()))
}

/// [`config`] over a client of `model`.
pub fn config_for(model: DeepSeekConfig) -> AgentConfig {
    let client = DeepSeekClient::with_options(model, client_options()).expect("client");
    let mut c = AgentConfig::new(
        Arc::new(client),
        LlmCallConfig::new("deepseek", MODEL),
        std::env::temp_dir(),
    );
    let mut tools = ToolSet::new();
    tools.insert(Box::new(Echo));
    c.tools = tools;
    c
}

pub fn store(dir: &std::path::Path) -> Arc<dyn SessionStore> {
    Arc::new(dsh_jsonl::open(dsh_jsonl::JsonlConfig::new(dir)).expect("jsonl store"))
}

/// The stored log, read without writing.
pub fn stored(store: &Arc<dyn SessionStore>, id: &str) -> Vec<SessionEvent> {
    store
        .inspect(&SessionId::new(id), &Cancel::new())
        .expect("stored log")
        .events
}

/// Session.md section 11 invariants over the whole log, with no open turn.
pub fn check_invariants(events: &[SessionEvent]) {
    let mut checker = InvariantChecker::new();
    for e in events {
        checker
            .push(e)
            .unwrap_or_else(|v| panic!("invariant violated: {v}"));
    }
    assert_eq!(checker.open_turn(), None, "the log ends inside a turn");
}

pub fn types(events: &[SessionEvent]) -> Vec<String> {
    events.iter().map(|e| e.event_type().to_string()).collect()
}

/// The `turn/end` reasons, in order.
pub fn turn_ends(events: &[SessionEvent]) -> Vec<TurnEndReason> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::TurnEnd(t) => Some(t.reason.clone()),
            _ => None,
        })
        .collect()
}
