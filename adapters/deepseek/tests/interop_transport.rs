//! The interop profile of the ureq client against the mock server
//! (127.0.0.1 only): connection reuse, base URL forms and
//! the 404 message (item 10), provider-neutral errors with the URL and the
//! cause (items 8, 10), the session-id header (item 10), credential
//! redaction and a corpus shape over the wire.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::{FinishReason, GenerateOptions, LlmError, Message, SessionId, StreamChunk};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{
    CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig, Profile, SessionHeader, redact_url,
};
use serde_json::json;

/// A canary key: it must never appear in an error.
const KEY: &str = "sk-canary-7f3e9d2c1b";

fn server(script: serde_json::Value) -> MockServer {
    MockServer::start(serde_json::from_value::<Script>(script).expect("valid script")).unwrap()
}

fn interop_client(url: String) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: 5_000,
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        connect_timeout: Duration::from_secs(5),
        profile: Profile::Interop,
        session_header: SessionHeader::DeepSeekOnly,
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).unwrap()
}

fn options() -> GenerateOptions {
    let mut o = GenerateOptions::new(
        "deepseek-official",
        "some-model",
        vec![Arc::new(Message::user(
            "m1",
            vec![dsh_core::ContentBlock::text("hi")],
        ))],
    );
    o.session_id = Some(SessionId::new("sess-1".to_string()));
    o
}

fn run(client: &DeepSeekClient) -> (Vec<StreamChunk>, Option<LlmError>) {
    let cancel = CancelToken::new();
    let mut chunks = Vec::new();
    let stream = match client.stream(&options(), &cancel) {
        Ok(s) => s,
        Err(e) => return (chunks, Some(e)),
    };
    for item in stream {
        match item {
            Ok(c) => chunks.push(c),
            Err(e) => {
                assert!(!e.failure().message.contains(KEY), "key leaked: {e:?}");
                return (chunks, Some(e));
            }
        }
    }
    (chunks, None)
}

fn text(chunks: &[StreamChunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn turn(t: &str) -> serde_json::Value {
    json!({"turn": {"text": [t], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}})
}

#[test]
fn item11_consecutive_calls_reuse_one_connection() {
    let s = server(json!({"keepAliveConnections": true,
        "responses": [turn("one"), turn("two"), turn("three")]}));
    let c = interop_client(format!("{}/v1", s.url()));
    for expected in ["one", "two", "three"] {
        let (chunks, err) = run(&c);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(text(&chunks), expected);
    }
    assert_eq!(s.requests().len(), 3);
    assert_eq!(
        s.connections(),
        1,
        "three calls over one kept-alive connection"
    );
}

#[test]
fn item11_a_failed_call_does_not_poison_the_pool() {
    let s = server(json!({"keepAliveConnections": true, "responses": [
        turn("one"),
        {"fault": {"kind": "close", "turn": {"text": ["a", "b"]}, "afterEvents": 2, "abrupt": true}},
        turn("three")]}));
    let c = interop_client(format!("{}/v1", s.url()));
    assert!(run(&c).1.is_none());
    let (_, err) = run(&c);
    let f = err.expect("an abrupt close fails").into_failure();
    assert_eq!(f.code, "TRANSPORT");
    assert!(
        f.message
            .starts_with("reading the response from http://127.0.0.1"),
        "{}",
        f.message
    );
    let (chunks, err) = run(&c);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text(&chunks), "three");
    assert_eq!(s.connections(), 2, "a new connection after the broken one");
}

#[test]
fn item10_a_bare_host_tries_v1_and_a_full_endpoint_url_is_used_as_is() {
    let s = server(json!({"responses": [turn("bare"), turn("full")]}));
    let c = interop_client(s.url());
    assert_eq!(text(&run(&c).0), "bare");
    let c = interop_client(format!("{}/v1/chat/completions", s.url()));
    assert_eq!(text(&run(&c).0), "full");
    let paths: Vec<String> = s.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, vec!["/v1/chat/completions", "/v1/chat/completions"]);
}

#[test]
fn item10_a_404_says_what_was_tried() {
    let s = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 404, "body": "Not Found"}},
        {"fault": {"kind": "http", "status": 404, "body": "Not Found"}}]}));
    let c = interop_client(s.url());
    let f = run(&c).1.expect("404").into_failure();
    assert_eq!((f.code.as_str(), f.status), ("HTTP_404", Some(404)));
    let v1 = format!("{}/v1/chat/completions", s.url());
    let plain = format!("{}/chat/completions", s.url());
    assert!(
        f.message.contains(&v1) && f.message.contains(&plain),
        "{}",
        f.message
    );
    assert!(f.message.contains("/v1"), "{}", f.message);
    // A 404 that explains itself (Ollama's unknown model) keeps its words.
    let s = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 404, "body": {"error": {"message": "model \"x\" not found"}}}}]}));
    let f = run(&interop_client(format!("{}/v1", s.url())))
        .1
        .unwrap()
        .into_failure();
    assert!(
        f.message
            .starts_with("model \"x\" not found (HTTP 404 from http://127.0.0.1"),
        "{}",
        f.message
    );
}

#[test]
fn item10_http_errors_name_the_server_not_deepseek() {
    let s = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 503, "body": "upstream overloaded"}},
        {"fault": {"kind": "http", "status": 429, "headers": {"retry-after": "3"},
                   "body": {"error": {"message": "slow down"}}}}]}));
    let c = interop_client(format!("{}/v1", s.url()));
    let f = run(&c).1.unwrap().into_failure();
    assert_eq!(f.code, "SERVER");
    assert_eq!(
        f.message,
        format!("HTTP 503 from {}/v1: upstream overloaded", s.url())
    );
    let f = run(&c).1.unwrap().into_failure();
    assert_eq!(
        (f.code.as_str(), f.provider_retry_after_ms),
        ("RATE_LIMIT", Some(3000.0))
    );
    assert_eq!(
        f.message,
        format!("slow down (HTTP 429 from {}/v1)", s.url())
    );
}

#[test]
fn item8_a_refused_connection_gives_its_cause() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/v1");
    let f = run(&interop_client(url.clone())).1.unwrap().into_failure();
    assert_eq!(f.code, "TRANSPORT");
    assert_eq!(
        f.message,
        format!("request to {url} failed: connection refused")
    );
}

#[test]
fn item10_the_session_header_goes_only_to_deepseek_and_loopback() {
    let s = server(json!({"responses": [turn("x")]}));
    run(&interop_client(format!("{}/v1", s.url())));
    let r = &s.requests()[0];
    assert_eq!(
        r.header_values("x-deepseek-harness-session-id"),
        vec!["sess-1"]
    );
    // Third-party hosts never get it; decided from the host alone.
    assert!(dsh_deepseek::is_deepseek_url("https://api.deepseek.com"));
    assert!(!dsh_deepseek::is_deepseek_url(
        "https://openrouter.ai/api/v1"
    ));
    assert!(!dsh_deepseek::is_deepseek_url(
        "https://deepseek.com.evil.example/v1"
    ));
    assert!(dsh_deepseek::is_loopback_url("http://localhost:11434/v1"));
    assert!(!dsh_deepseek::is_loopback_url("http://10.0.0.5:8000/v1"));
}

#[test]
fn credentials_in_the_url_and_echoed_keys_are_redacted() {
    assert_eq!(
        redact_url("http://user:sk-canary@127.0.0.1:9/v1?api_key=sk-canary&x=1"),
        "http://<redacted>@127.0.0.1:9/v1?api_key=<redacted>&x=<redacted>"
    );
    // A server that echoes the key in its error body.
    let s = server(json!({"responses": [
        {"fault": {"kind": "http", "status": 401,
                   "body": {"error": {"message": format!("Incorrect API key provided: {KEY}")}}}},
        {"fault": {"kind": "inband-error", "error": {"message": format!("bad key {KEY}")}}}]}));
    let c = interop_client(format!("{}/v1", s.url()));
    let f = run(&c).1.unwrap().into_failure();
    assert_eq!(f.code, "AUTH");
    assert!(
        f.message
            .starts_with("Incorrect API key provided: <redacted>"),
        "{}",
        f.message
    );
    let f = run(&c).1.unwrap().into_failure();
    assert!(f.message.contains("bad key <redacted>"), "{}", f.message);
    // Credentials in the base URL never show in an error.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url =
        format!("http://me:sk-url-canary-123@127.0.0.1:{port}/v1?api_key=sk-query-canary-456");
    let f = run(&interop_client(url)).1.unwrap().into_failure();
    assert!(!f.message.contains("sk-url-canary-123"), "{}", f.message);
    assert!(!f.message.contains("sk-query-canary-456"), "{}", f.message);
    assert!(f.message.contains("<redacted>@127.0.0.1"), "{}", f.message);
}

#[test]
fn items2_7_corpus_shapes_over_the_wire() {
    let corpus = |name: &str| {
        std::fs::read_to_string(format!(
            "{}/tests/interop/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let s = server(json!({"responses": [
        {"fault": {"kind": "raw", "body": corpus("no_done_after_stop.sse"), "chunkSize": 9}},
        {"fault": {"kind": "raw", "body": corpus("json_completion.json"),
                   "headers": {"content-type": "application/json"}}},
        {"fault": {"kind": "raw", "body": corpus("inband_error_alone.sse")}}]}));
    let c = interop_client(format!("{}/v1", s.url()));
    let (chunks, err) = run(&c);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text(&chunks), "Hello world");
    assert!(matches!(
        chunks.last(),
        Some(StreamChunk::Finish { reason, .. }) if **reason == FinishReason::Stop
    ));
    let (chunks, err) = run(&c);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text(&chunks), "A full answer.");
    let f = run(&c).1.unwrap().into_failure();
    assert_eq!(f.code, "CONTEXT_WINDOW_EXCEEDED");
}

#[test]
fn the_live_client_bounds_lines_too() {
    let line = format!("data: {}\n\n", "x".repeat(64 * 1024));
    let s =
        server(json!({"responses": [{"fault": {"kind": "raw", "body": line, "chunkSize": 4096}}]}));
    let config = DeepSeekConfig {
        base_url: Some(format!("{}/v1", s.url())),
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        max_event_bytes: 16 * 1024,
        ..ClientOptions::default()
    };
    let c = DeepSeekClient::with_options(config, options).unwrap();
    let f = run(&c).1.expect("too large").into_failure();
    assert_eq!(f.code, "RESPONSE_TOO_LARGE");
    assert!(f.message.contains("16384 bytes"), "{}", f.message);
}

#[test]
fn item10_endpoint_forms() {
    let eps = |url: &str| interop_client(url.to_string()).endpoints();
    assert_eq!(
        eps("http://127.0.0.1:8080"),
        vec![
            "http://127.0.0.1:8080/v1/chat/completions",
            "http://127.0.0.1:8080/chat/completions"
        ]
    );
    assert_eq!(
        eps("http://h:1/v1/"),
        vec!["http://h:1/v1/chat/completions"]
    );
    assert_eq!(
        eps("http://h:1/v1/chat/completions"),
        vec!["http://h:1/v1/chat/completions"]
    );
    assert_eq!(
        eps("https://x.example/openai?api-version=2024"),
        vec!["https://x.example/openai/chat/completions?api-version=2024"]
    );
    // DeepSeek's own bare host is its documented base URL.
    assert_eq!(
        eps("https://api.deepseek.com"),
        vec!["https://api.deepseek.com/chat/completions"]
    );
    // The reference profile joins exactly.
    let reference = DeepSeekClient::with_options(
        DeepSeekConfig {
            base_url: Some("http://127.0.0.1:8080".into()),
            ..DeepSeekConfig::default()
        },
        ClientOptions::default(),
    )
    .unwrap();
    assert_eq!(
        reference.endpoints(),
        vec!["http://127.0.0.1:8080/chat/completions"]
    );
}
