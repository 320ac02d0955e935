//! The Anthropic wire over the DeepSeek adapter's client,
//! against the mock server: the request it sends (endpoint, `x-api-key`,
//! `anthropic-version`, body), a streamed reply, and the errors and retry
//! facts of `overloaded_error` (529) and a 429 with `retry-after`; the key
//! never shows in an error.

use std::sync::Arc;
use std::time::Duration;

use dsh_anthropic::AnthropicWire;
use dsh_core::{ContentBlock, GenerateOptions, LlmError, Message, StreamChunk, validate_stream};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig, Profile};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-test-SECRET-77";

fn vector(name: &str) -> String {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

fn server(responses: Value) -> MockServer {
    let script = json!({ "responses": responses });
    MockServer::start(serde_json::from_value::<Script>(script).unwrap()).unwrap()
}

fn client(s: &MockServer) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(s.url()),
        api_key_env: "ANTHROPIC_API_KEY".into(),
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        profile: Profile::Interop,
        wire: Some(Arc::new(AnthropicWire::default())),
        connect_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).unwrap()
}

fn call(c: &DeepSeekClient) -> (Vec<StreamChunk>, Option<LlmError>) {
    let mut o = GenerateOptions::new(
        "anthropic",
        "claude-test",
        vec![Arc::new(Message::user("u", vec![ContentBlock::text("hi")]))],
    );
    o.system = Some("S".into());
    let mut out = Vec::new();
    let stream = match c.stream(&o, &CancelToken::new()) {
        Ok(s) => s,
        Err(e) => return (out, Some(e)),
    };
    for item in stream {
        match item {
            Ok(chunk) => out.push(chunk),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

#[test]
fn a_streamed_reply_and_the_request_sent() {
    let s = server(
        json!([{"fault": {"kind": "raw", "body": vector("thinking_tool_use.sse"), "chunkSize": 11}}]),
    );
    let (chunks, err) = call(&client(&s));
    assert!(err.is_none(), "{err:?}");
    assert!(validate_stream(&chunks).is_empty());
    assert!(chunks.iter().any(|c| matches!(c, StreamChunk::BlockEnd { block, .. }
        if **block == ContentBlock::tool_call("toolu_01T1x", "get_weather", r#"{"location": "San Francisco, CA"}"#))));
    let r = &s.requests()[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(r.header_values("x-api-key"), vec![KEY]);
    assert_eq!(r.header_values("anthropic-version"), vec!["2023-06-01"]);
    assert!(
        r.header_values("authorization").is_empty(),
        "no bearer token"
    );
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0]["role"], "user");
}

#[test]
fn overloaded_and_rate_limited_are_retryable_errors() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let limited =
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}});
    let s = server(json!([
        {"fault": {"kind": "http", "status": 529, "body": overloaded}},
        {"fault": {"kind": "http", "status": 429, "headers": {"retry-after": "3", "request-id": "req_9"}, "body": limited}},
        {"fault": {"kind": "raw", "body": vector("error_overloaded.sse")}}
    ]));
    let c = client(&s);
    let (_, e) = call(&c);
    let f = e.unwrap().failure().clone();
    assert_eq!((f.code.as_str(), f.status), ("SERVER", Some(529)));
    assert!(
        f.message.starts_with("Overloaded (HTTP 529 from "),
        "{}",
        f.message
    );
    let (_, e) = call(&c);
    let f = e.unwrap().failure().clone();
    assert_eq!(f.code, "RATE_LIMIT");
    assert_eq!(f.provider_retry_after_ms, Some(3000.0));
    assert_eq!(f.request_id.as_deref(), Some("req_9"));
    // An in-band `error` event after some text.
    let (chunks, e) = call(&c);
    assert!(!chunks.is_empty());
    let f = e.unwrap().failure().clone();
    assert_eq!(f.code, "SERVER");
    assert!(!f.message.contains(KEY));
}

/// With an attachment service and a model that takes images, an
/// image block goes out in the Messages API's base64 source form.
#[test]
fn images_go_out_as_base64_sources() {
    let s = server(
        json!([{"fault": {"kind": "raw", "body": vector("thinking_tool_use.sse"), "chunkSize": 11}}]),
    );
    let model: dsh_deepseek::ModelEntry =
        serde_json::from_value(json!({"id": "claude-test", "inputModalities": ["text", "image"]}))
            .unwrap();
    let config = DeepSeekConfig {
        base_url: Some(s.url()),
        api_key_env: "ANTHROPIC_API_KEY".into(),
        models: vec![model],
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        profile: Profile::Interop,
        wire: Some(Arc::new(AnthropicWire::default())),
        attachments: Some(Arc::new(|_: &dsh_core::ImageAttachment| Ok(vec![1, 2, 3]))),
        ..ClientOptions::default()
    };
    let c = DeepSeekClient::with_options(config, options).unwrap();
    let image: dsh_core::ImageAttachment = serde_json::from_value(json!({
        "attachmentId": format!("sha256:{}", "0".repeat(64)),
        "mediaType": "image/png", "width": 1, "height": 1, "bytes": 3
    }))
    .unwrap();
    let o = GenerateOptions::new(
        "anthropic",
        "claude-test",
        vec![Arc::new(Message::user(
            "u",
            vec![
                ContentBlock::text("see"),
                ContentBlock::Image { attachment: image },
            ],
        ))],
    );
    let stream = c.stream(&o, &CancelToken::new()).unwrap();
    for item in stream {
        item.unwrap();
    }
    let body: Value = serde_json::from_slice(&s.requests()[0].body).unwrap();
    let part = &body["messages"][0]["content"][1];
    assert_eq!(part["type"], "image");
    assert_eq!(
        part["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "AQID"})
    );
}
