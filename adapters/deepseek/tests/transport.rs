//! The ureq transport against the mock server (127.0.0.1 only): every fault
//! the adapter must classify (5.9, 5.15, 3.4), the idle watchdog, cancellation
//! from another thread, the request it sends (D-11..D-14, AC-12), and that
//! the API key never leaks into an error or debug output.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dsh_core::{GenerateOptions, LlmError, Message, StreamChunk, validate_stream};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig};
use serde_json::json;

const KEY: &str = "sk-test-SECRET-4242";

fn server(script: serde_json::Value) -> MockServer {
    MockServer::start(serde_json::from_value::<Script>(script).expect("valid script")).unwrap()
}

fn client_for(url: String, idle_ms: u64) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: idle_ms,
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        connect_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).unwrap()
}

fn client(server: &MockServer, idle_ms: u64) -> DeepSeekClient {
    client_for(server.url(), idle_ms)
}

fn options() -> GenerateOptions {
    let mut o = GenerateOptions::new(
        "deepseek-official",
        "deepseek-v4-flash",
        vec![std::sync::Arc::new(Message::user(
            "m1",
            vec![dsh_core::ContentBlock::text("hi")],
        ))],
    );
    o.max_tokens = Some(100);
    o
}

/// Runs one call; returns the chunks and the error that ended it, if any.
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
                check_no_key(&e);
                return (chunks, Some(e));
            }
        }
    }
    (chunks, None)
}

fn check_no_key(e: &LlmError) {
    assert!(!format!("{e} {e:?}").contains(KEY), "the key leaked: {e:?}");
}

fn jsonl(chunks: &[StreamChunk]) -> Vec<String> {
    chunks
        .iter()
        .map(|c| serde_json::to_string(c).unwrap())
        .collect()
}

fn turn() -> serde_json::Value {
    json!({
        "reasoning": ["Let me", " think"],
        "text": ["Hel", "lo"],
        "toolCalls": [{"id": "call_0", "name": "read", "arguments": ["{\"p\"", ":1}"]}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "prompt_cache_hit_tokens": 16},
        "keepAlive": 2
    })
}

const TURN_CHUNKS: [&str; 14] = [
    r#"{"type":"block-start","index":0,"blockType":"reasoning"}"#,
    r#"{"type":"reasoning-delta","index":0,"text":"Let me"}"#,
    r#"{"type":"reasoning-delta","index":0,"text":" think"}"#,
    r#"{"type":"block-start","index":1,"blockType":"text"}"#,
    r#"{"type":"text-delta","index":1,"text":"Hel"}"#,
    r#"{"type":"text-delta","index":1,"text":"lo"}"#,
    r#"{"type":"block-start","index":2,"blockType":"tool-call"}"#,
    r#"{"type":"tool-call-delta","index":2,"id":"call_0","name":"read","argumentsDelta":""}"#,
    r#"{"type":"tool-call-delta","index":2,"id":"call_0","name":"read","argumentsDelta":"{\"p\""}"#,
    r#"{"type":"tool-call-delta","index":2,"id":"call_0","name":"read","argumentsDelta":":1}"}"#,
    r#"{"type":"block-end","index":0,"block":{"type":"reasoning","text":"Let me think"}}"#,
    r#"{"type":"block-end","index":1,"block":{"type":"text","text":"Hello"}}"#,
    r#"{"type":"block-end","index":2,"block":{"type":"tool-call","id":"call_0","name":"read","arguments":"{\"p\":1}"}}"#,
    r#"{"type":"usage","usage":{"inputTokens":4,"outputTokens":5,"cacheReadTokens":16}}"#,
];

#[test]
fn a_turn_streams_and_the_request_is_exact() {
    let s = server(json!({"responses": [{"turn": turn()}]}));
    let (chunks, err) = run(&client(&s, 5_000));
    assert!(err.is_none(), "{err:?}");
    let mut expected: Vec<String> = TURN_CHUNKS.iter().map(|s| s.to_string()).collect();
    expected.push(r#"{"type":"finish","reason":{"kind":"tool-calls"}}"#.into());
    assert_eq!(jsonl(&chunks), expected);
    assert!(validate_stream(&chunks).is_empty());

    let reqs = s.requests();
    assert_eq!(reqs.len(), 1, "one call is one provider attempt (AC-4)");
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/chat/completions");
    assert_eq!(
        r.body_text(),
        r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":100}"#
    );
    assert_eq!(
        r.header_values("authorization"),
        vec![format!("Bearer {KEY}")]
    );
    assert_eq!(r.header_values("content-type"), vec!["application/json"]);
    assert_eq!(r.header_values("accept"), vec!["text/event-stream"]);
    assert_eq!(
        r.header_values("user-agent"),
        vec!["deepseek-harness/0.1.0 (+https://github.com/deepseek-ai/deepseek-harness)"]
    );
    assert!(r.header_values("accept-encoding").is_empty());
    assert!(r.header_values("x-deepseek-harness-session-id").is_empty());
    assert!(r.header_values("x-deepseek-harness-compact").is_empty());
}

#[test]
fn d12_optional_headers_and_q11_trailing_slash() {
    let s = server(json!({"responses": [{"turn": {"text": ["x"]}}]}));
    let config = DeepSeekConfig {
        base_url: Some(format!("{}/", s.url())),
        ..DeepSeekConfig::default()
    };
    let opts = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        user_id: Some("11111111-2222-4333-8444-555555555555".into()),
        user_agent: Some("my-shell/2 (+https://example.invalid)".into()),
        ..ClientOptions::default()
    };
    let c = DeepSeekClient::with_options(config, opts).unwrap();
    let mut o = options();
    o.session_id = Some("sess-1".into());
    o.purpose = Some(dsh_core::Purpose::Compaction);
    let chunks: Vec<StreamChunk> = c
        .stream(&o, &CancelToken::new())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(chunks.len(), 4);
    let r = &s.requests()[0];
    assert_eq!(r.path, "/chat/completions");
    assert_eq!(
        r.header_values("x-deepseek-harness-session-id"),
        vec!["sess-1"]
    );
    assert_eq!(r.header_values("x-deepseek-harness-compact"), vec!["1"]);
    assert_eq!(
        r.header_values("x-deepseek-harness-user-id"),
        vec!["11111111-2222-4333-8444-555555555555"]
    );
    assert_eq!(
        r.header_values("user-agent"),
        vec!["my-shell/2 (+https://example.invalid)"]
    );
}

fn failure_of(
    script: serde_json::Value,
    idle_ms: u64,
) -> (Vec<StreamChunk>, dsh_core::LlmFailure, Duration) {
    let s = server(json!({"responses": [script]}));
    let start = Instant::now();
    let (chunks, err) = run(&client(&s, idle_ms));
    let elapsed = start.elapsed();
    (chunks, err.expect("the call fails").into_failure(), elapsed)
}

#[test]
fn http_401_is_auth() {
    let (chunks, f, _) = failure_of(
        json!({"fault": {"kind": "http", "status": 401, "body": {"error": {"message": "Authentication Fails", "type": "authentication_error"}}}}),
        5_000,
    );
    assert!(chunks.is_empty());
    assert_eq!(
        (f.code.as_str(), f.status, f.message.as_str()),
        ("AUTH", Some(401), "Authentication Fails")
    );
}

#[test]
fn http_429_is_rate_limit_with_retry_after_and_request_id() {
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "http", "status": 429, "headers": {"retry-after": "2", "x-request-id": "req-429"},
                         "body": {"error": {"message": "slow down"}}}}),
        5_000,
    );
    assert_eq!(
        serde_json::to_string(&f).unwrap(),
        r#"{"message":"slow down","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":2000,"requestId":"req-429"}"#
    );
}

#[test]
fn http_500_is_server_and_402_quota_detail_is_quota() {
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "http", "status": 500, "body": "oops"}}),
        5_000,
    );
    assert_eq!(
        (f.code.as_str(), f.message.as_str()),
        ("SERVER", "DeepSeek API error (HTTP 500)")
    );
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "http", "status": 402, "headers": {"x-deepseek-request-id": "ds-1"},
                         "body": {"error": {"message": "Insufficient Balance"}}}}),
        5_000,
    );
    assert_eq!(
        (f.code.as_str(), f.request_id.as_deref()),
        ("QUOTA", Some("ds-1"))
    );
}

#[test]
fn http_400_context_overflow() {
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "http", "status": 400, "body": {"error": {
            "message": "This model's maximum context length is 65536 tokens", "type": "invalid_request_error",
            "code": "context_length_exceeded"}}}}),
        5_000,
    );
    assert_eq!(
        (f.code.as_str(), f.status),
        ("CONTEXT_WINDOW_EXCEEDED", Some(400))
    );
}

#[test]
fn a_stall_times_out_with_the_watchdog() {
    let (chunks, f, elapsed) = failure_of(
        json!({"fault": {"kind": "stall", "turn": {"text": ["a", "b"]}, "afterEvents": 2}}),
        300,
    );
    assert_eq!(f.code, "TIMEOUT");
    assert_eq!(f.message, "DeepSeek stream idle timeout after 300ms");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    // The delivered prefix stays delivered; AC-6 closes it validly.
    assert_eq!(
        jsonl(&chunks),
        vec![
            r#"{"type":"block-start","index":0,"blockType":"text"}"#.to_string(),
            r#"{"type":"text-delta","index":0,"text":"a"}"#.to_string(),
        ]
    );
    let mut all = chunks.clone();
    all.push(dsh_deepseek::error_finish(
        &LlmError::new(f).unwrap(),
        false,
    ));
    assert!(validate_stream(&all).is_empty());
}

#[test]
fn a_stall_before_any_byte_times_out_too() {
    let (chunks, f, elapsed) = failure_of(json!({"fault": {"kind": "stall"}}), 250);
    assert!(chunks.is_empty());
    assert_eq!(f.code, "TIMEOUT");
    assert!(elapsed < Duration::from_secs(3));
}

#[test]
fn keep_alives_rearm_the_watchdog() {
    // 2.5 s of silence but a comment every 100 ms; the budget is 1 s.
    let s = server(
        json!({"responses": [{"fault": {"kind": "stall", "turn": {"text": ["a", "b"]},
        "afterEvents": 1, "ms": 2500, "keepAliveMs": 100}}]}),
    );
    let (chunks, err) = run(&client(&s, 1_000));
    assert!(err.is_none(), "{err:?}");
    assert_eq!(chunks.len(), 5);
    assert!(validate_stream(&chunks).is_empty());
}

#[test]
fn silent_data_does_not_rearm_the_watchdog() {
    // WD-3 / Q-10: without comments the same 2.5 s gap is a timeout.
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "stall", "turn": {"text": ["a", "b"]}, "afterEvents": 1, "ms": 2500}}),
        1_000,
    );
    assert_eq!(f.code, "TIMEOUT");
}

#[test]
fn a_clean_close_mid_stream_is_stream_closed() {
    let (chunks, f, _) = failure_of(
        json!({"fault": {"kind": "close", "turn": {"text": ["a", "b"]}, "afterEvents": 2}}),
        5_000,
    );
    assert_eq!(
        (f.code.as_str(), f.message.as_str()),
        ("STREAM_CLOSED", "SSE stream ended without [DONE]")
    );
    assert_eq!(chunks.len(), 2);
}

#[test]
fn an_abrupt_close_mid_stream_is_transport() {
    let s = server(
        json!({"responses": [{"fault": {"kind": "close", "turn": {"text": ["a"]}, "afterEvents": 2, "abrupt": true}}]}),
    );
    let (chunks, err) = run(&client(&s, 5_000));
    let f = err.unwrap().into_failure();
    assert_eq!(f.code, "TRANSPORT");
    assert_eq!(
        f.message,
        format!("DeepSeek API stream from {} failed", s.url())
    );
    assert_eq!(chunks.len(), 2);
}

#[test]
fn an_in_band_error_object_ends_as_empty_response() {
    let s = server(json!({"responses": [{"fault": {"kind": "inband-error",
        "error": {"message": "context length exceeded", "code": "context_length_exceeded"}}}]}));
    let (chunks, err) = run(&client(&s, 5_000));
    assert!(err.is_none());
    assert_eq!(jsonl(&chunks), vec![
        r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"model returned a completed response with no content","code":"EMPTY_RESPONSE"}}}"#.to_string()
    ]);
    // Without [DONE] it is STREAM_CLOSED.
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "inband-error", "error": {"message": "x"}, "done": false}}),
        5_000,
    );
    assert_eq!(f.code, "STREAM_CLOSED");
}

#[test]
fn a_slow_drip_succeeds_with_the_same_chunks() {
    let mut t = turn();
    t["chunkSize"] = json!(7);
    t["delayMs"] = json!(1);
    let s = server(json!({"responses": [{"turn": t}]}));
    let (chunks, err) = run(&client(&s, 2_000));
    assert!(err.is_none(), "{err:?}");
    let got = jsonl(&chunks);
    assert_eq!(&got[..14], &TURN_CHUNKS.map(String::from)[..]);
    assert_eq!(got.len(), 15);
}

#[test]
fn malformed_payload_over_the_wire() {
    let (_, f, _) = failure_of(
        json!({"fault": {"kind": "raw", "body": "data: {bad json\n\n", "chunkSize": 3}}),
        5_000,
    );
    assert_eq!(
        (f.code.as_str(), f.message.as_str()),
        ("MALFORMED_RESPONSE", "malformed SSE payload: {bad json")
    );
}

#[test]
fn cancel_from_another_thread_ends_a_stalled_read_promptly() {
    let s = server(
        json!({"responses": [{"fault": {"kind": "stall", "turn": {"text": ["a"]}, "afterEvents": 2}}]}),
    );
    let c = client(&s, 60_000);
    let cancel = CancelToken::new();
    let canceller = {
        let cancel = cancel.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            cancel.cancel();
            Instant::now()
        })
    };
    let chunks: Vec<StreamChunk> = c.stream_chunks(&options(), &cancel).collect();
    let ended = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    assert!(
        ended.duration_since(cancelled_at) < Duration::from_millis(500),
        "cancel took too long"
    );
    let last = serde_json::to_string(chunks.last().unwrap()).unwrap();
    assert_eq!(
        last,
        r#"{"type":"finish","reason":{"kind":"aborted","failure":{"message":"DeepSeek request aborted by caller","code":"ABORTED"}}}"#
    );
    assert!(validate_stream(&chunks).is_empty());
}

#[test]
fn cancel_during_the_request_phase_and_before_it() {
    // Cancelled before: no request is sent at all.
    let s = server(json!({"responses": [{"turn": {"text": ["a"]}}]}));
    let c = client(&s, 60_000);
    let cancel = CancelToken::new();
    cancel.cancel();
    let mut stream = c.stream(&options(), &cancel).unwrap();
    assert_eq!(
        stream.next().unwrap().unwrap_err().failure().code,
        "ABORTED"
    );
    assert!(stream.next().is_none());
    assert!(s.requests().is_empty());
    // Cancelled while waiting for the response head (the server never answers).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = client_for(format!("http://{}", silent.local_addr().unwrap()), 60_000);
    let cancel = CancelToken::new();
    let stream = c.stream(&options(), &cancel).unwrap();
    let t = {
        let cancel = cancel.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            cancel.cancel();
        })
    };
    let start = Instant::now();
    let items: Vec<_> = stream.collect();
    t.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].as_ref().unwrap_err().failure().code, "ABORTED");
}

#[test]
fn a_refused_connection_is_transport() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let (_, err) = run(&client_for(url.clone(), 5_000));
    let f = err.unwrap().into_failure();
    assert_eq!(
        (f.code.as_str(), f.message),
        ("TRANSPORT", format!("DeepSeek API request to {url} failed"))
    );
}

#[test]
fn an_exhausted_script_answers_500() {
    let s = server(json!({"responses": []}));
    let (_, err) = run(&client(&s, 5_000));
    assert_eq!(err.unwrap().failure().code, "SERVER");
}

#[test]
fn dropping_a_stream_early_closes_the_connection() {
    let s = server(
        json!({"responses": [{"fault": {"kind": "stall", "turn": {"text": ["a"]}, "afterEvents": 2}}]}),
    );
    let c = client(&s, 60_000);
    let mut stream = c.stream(&options(), &CancelToken::new()).unwrap();
    assert!(stream.next().unwrap().is_ok());
    drop(stream);
    // The server's stall loop sees the client leave; a second call is served.
    let (_, err) = run(&c);
    assert_eq!(
        err.unwrap().failure().code,
        "SERVER",
        "the script had one response"
    );
}

#[test]
fn credentials_are_checked_and_never_shown() {
    let base = DeepSeekConfig {
        base_url: Some("http://127.0.0.1:9".into()),
        ..DeepSeekConfig::default()
    };
    let with = |key: Option<&'static str>| {
        let opts = ClientOptions {
            credentials: Some(Arc::new(move |_: &str| key.map(String::from))),
            proxy_from_env: false,
            ..ClientOptions::default()
        };
        DeepSeekClient::with_options(base.clone(), opts).unwrap()
    };
    let e = with(None)
        .stream(&options(), &CancelToken::new())
        .unwrap_err();
    assert_eq!(
        e.failure().message,
        "llm-deepseek: no API key for provider route \"deepseek-official\"; store DEEPSEEK_API_KEY through the credentials service (the web Models page writes it), or export DEEPSEEK_API_KEY in the launching environment"
    );
    assert_eq!(e.failure().code, "MISSING_CREDENTIAL");
    for bad in ["   ", "sk-has space-SECRET", "sk-ünïcode-SECRET"] {
        let e = with(Some(bad))
            .stream(&options(), &CancelToken::new())
            .unwrap_err();
        assert_eq!(e.failure().code, "INVALID_CREDENTIAL");
        assert!(!format!("{e} {e:?}").contains("SECRET"));
        assert!(e.failure().message.contains("DEEPSEEK_API_KEY"));
    }
    // Trimmed keys are fine; Debug output never shows a key.
    let c = with(Some("  sk-ok-SECRET  "));
    let stream = c.stream(&options(), &CancelToken::new()).unwrap();
    assert!(!format!("{c:?} {stream:?}").contains("SECRET"));
    let key = dsh_deepseek::ApiKey::normalize(KEY, "X").unwrap();
    assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
}

#[test]
fn streams_are_send_and_static() {
    fn assert_send<T: Send + 'static>(_: &T) {}
    let s = server(json!({"responses": [{"turn": {"text": ["a"]}}]}));
    let c = client(&s, 5_000);
    let stream = c.stream(&options(), &CancelToken::new()).unwrap();
    assert_send(&stream);
    // Usable from another thread (thread-per-stream shells, smol::unblock).
    let n = thread::spawn(move || stream.count()).join().unwrap();
    assert_eq!(n, 4);
}
