//! The shell over in-memory links: every response framing, and hostile link
//! input (garbage HTTP, truncated bodies, failing links) ending as a typed
//! turn error in a log that still passes the log check and replay.

mod support;

use std::cell::RefCell;
use std::rc::Rc;

use dsh_core::MessageId;
use dsh_core::agent::IdPurpose;
use dsh_core::agent::replay::{ReplayOptions, replay_jsonl};
use dsh_core::jsonl::verify_log;
use dsh_embedded::{IdFn, Shell, ShellConfig};
use proptest::prelude::*;
use serde_json::Value;
use support::{TEMPERATURE, clock};

#[derive(Debug)]
struct Broken;

impl core::fmt::Display for Broken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("broken link")
    }
}

impl core::error::Error for Broken {}

impl embedded_io::Error for Broken {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::ConnectionReset
    }
}

/// A link that answers with `response` in `piece`-byte reads (then EOF, or
/// a read error when `fail_at_end`), recording what was written.
struct MemLink {
    response: Vec<u8>,
    at: usize,
    piece: usize,
    fail_at_end: bool,
    written: Rc<RefCell<Vec<u8>>>,
}

impl embedded_io::ErrorType for MemLink {
    type Error = Broken;
}

impl embedded_io::Read for MemLink {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Broken> {
        let left = &self.response[self.at..];
        if left.is_empty() && self.fail_at_end {
            return Err(Broken);
        }
        let n = left.len().min(buf.len()).min(self.piece);
        buf[..n].copy_from_slice(&left[..n]);
        self.at += n;
        Ok(n)
    }
}

impl embedded_io::Write for MemLink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Broken> {
        self.written.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Broken> {
        Ok(())
    }
}

struct Run {
    log: Vec<u8>,
    written: Vec<u8>,
}

/// One prompt; every model call is answered by the next of `responses`.
fn run(responses: &[&[u8]], piece: usize, fail_at_end: bool) -> Run {
    let written = Rc::new(RefCell::new(Vec::new()));
    let mut queue: Vec<Vec<u8>> = responses.iter().rev().map(|r| r.to_vec()).collect();
    let w = written.clone();
    let opener = move || match queue.pop() {
        Some(response) => Ok(MemLink {
            response,
            at: 0,
            piece,
            fail_at_end,
            written: w.clone(),
        }),
        None => Err(Broken),
    };
    let config = ShellConfig::new("model.local:8080", "mem-1");
    let mut shell = Shell::new(config, &[TEMPERATURE], clock, opener, Vec::new()).unwrap();
    shell.prompt("hi").unwrap();
    let (_, log) = shell.into_parts();
    let written = written.borrow().clone();
    Run { log, written }
}

fn records(log: &[u8]) -> Vec<Value> {
    log.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// The `turn/end` reason of the (single) turn.
fn turn_end(log: &[u8]) -> Value {
    let records = records(log);
    let ends: Vec<&Value> = records.iter().filter(|r| r["type"] == "turn/end").collect();
    assert_eq!(ends.len(), 1, "one turn/end");
    ends[0]["data"]["reason"].clone()
}

/// `dsh log check` and `dsh replay --check` on the log.
fn checks(log: &[u8]) {
    verify_log(log).unwrap_or_else(|why| panic!("log check failed: {why}"));
    let report = replay_jsonl(log, ReplayOptions::default()).unwrap();
    assert!(report.identical(), "{:?}", report.first_difference);
}

fn error_code(log: &[u8]) -> String {
    let reason = turn_end(log);
    assert_eq!(reason["kind"], "error", "{reason}");
    reason["error"]["code"].as_str().unwrap().to_string()
}

const SSE: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

fn chunked(body: &str, size: usize) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for part in body.as_bytes().chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

fn assistant_text(log: &[u8]) -> String {
    let records = records(log);
    let msg = records
        .iter()
        .find(|r| r["type"] == "assistant/message")
        .unwrap();
    msg["data"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn chunked_length_and_close_framings_complete_the_turn() {
    let length = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{SSE}",
        SSE.len()
    );
    let close = format!("HTTP/1.0 200 OK\r\n\r\n{SSE}");
    for response in [chunked(SSE, 7), length.into_bytes(), close.into_bytes()] {
        for piece in [1, 3, 64, 4096] {
            let r = run(&[&response], piece, false);
            assert_eq!(turn_end(&r.log)["kind"], "completed");
            assert_eq!(assistant_text(&r.log), "Hello");
            checks(&r.log);
        }
    }
}

#[test]
fn the_request_is_http_1_1_with_length_and_close() {
    let r = run(&[&chunked(SSE, 50)], 64, false);
    let text = String::from_utf8(r.written).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    assert_eq!(lines.next(), Some("POST /chat/completions HTTP/1.1"));
    let headers: Vec<&str> = lines.collect();
    assert!(headers.contains(&"host: model.local:8080"));
    assert!(headers.contains(&"connection: close"));
    assert!(headers.contains(&"content-type: application/json"));
    assert!(headers.contains(&format!("content-length: {}", body.len()).as_str()));
    // No API key configured: no authorization header.
    assert!(!headers.iter().any(|h| h.starts_with("authorization")));
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["messages"][0]["content"], "hi");
}

#[test]
fn chunks_after_done_are_not_read() {
    // SSE-6: nothing after [DONE] matters, not even broken framing.
    let mut response = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    response.extend_from_slice(SSE.as_bytes());
    response.extend_from_slice(b"\xff\xfe garbage");
    let r = run(&[&response], 5, true);
    assert_eq!(turn_end(&r.log)["kind"], "completed");
}

#[test]
fn http_errors_are_classified() {
    // H-3: 429 without quota wording is RATE_LIMIT; H-4 retry-after seconds.
    let body = r#"{"error":{"message":"slow down","type":"rate_limit"}}"#;
    let response = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-length: {}\r\nretry-after: 3\r\nx-request-id: req-9\r\n\r\n{body}",
        body.len()
    );
    let r = run(&[response.as_bytes()], 4, false);
    let reason = turn_end(&r.log);
    assert_eq!(reason["error"]["code"], "RATE_LIMIT");
    assert_eq!(reason["error"]["message"], "slow down");
    assert_eq!(reason["error"]["status"], 429);
    assert_eq!(reason["error"]["providerRetryAfterMs"], 3000);
    assert_eq!(reason["error"]["requestId"], "req-9");
    checks(&r.log);

    // 401 with a chunked body: AUTH.
    let r = run(
        &[b"HTTP/1.1 401 Unauthorized\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
        1,
        false,
    );
    assert_eq!(error_code(&r.log), "AUTH");

    // H-1: a 204 has no body.
    let r = run(&[b"HTTP/1.1 204 No Content\r\n\r\n"], 64, false);
    assert_eq!(error_code(&r.log), "EMPTY_RESPONSE");
}

#[test]
fn hostile_link_input_ends_the_turn_with_a_typed_error() {
    let truncated_chunked = {
        let mut r = chunked(SSE, 10);
        r.truncate(r.len() - 30);
        r
    };
    let truncated_length = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
        SSE.len(),
        &SSE[..40]
    );
    let cases: Vec<(Vec<u8>, bool, &str)> = vec![
        (b"garbage\r\n\r\n".to_vec(), false, "TRANSPORT"),
        (
            b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n".to_vec(),
            false,
            "TRANSPORT",
        ),
        (b"HTTP/1.1 200 OK\r\n".to_vec(), false, "TRANSPORT"),
        (Vec::new(), false, "TRANSPORT"),
        (vec![b'A'; 5000], false, "TRANSPORT"),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(),
            false,
            "TRANSPORT",
        ),
        (truncated_chunked.clone(), false, "TRANSPORT"),
        (truncated_chunked, true, "TRANSPORT"),
        (truncated_length.into_bytes(), false, "TRANSPORT"),
        // A clean close-delimited end before [DONE]: SSE-7.
        (
            format!("HTTP/1.1 200 OK\r\n\r\n{}", &SSE[..SSE.len() - 16]).into_bytes(),
            false,
            "STREAM_CLOSED",
        ),
        // A payload that is not JSON.
        (
            b"HTTP/1.1 200 OK\r\n\r\ndata: {nope\n\n".to_vec(),
            false,
            "MALFORMED_RESPONSE",
        ),
    ];
    for (response, fail_at_end, code) in cases {
        let r = run(&[&response], 7, fail_at_end);
        assert_eq!(
            error_code(&r.log),
            code,
            "{:?}",
            String::from_utf8_lossy(&response)
        );
        checks(&r.log);
    }
    // The link cannot even be opened.
    let r = run(&[], 7, false);
    assert_eq!(error_code(&r.log), "TRANSPORT");
    checks(&r.log);
}

#[test]
fn a_tool_error_reaches_the_model_as_error_text() {
    let call = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"temperature\",\"arguments\":\"{\\\"unit\\\":\\\"F\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let r = run(&[&chunked(call, 16), &chunked(SSE, 16)], 9, false);
    let records = records(&r.log);
    let result = records.iter().find(|r| r["type"] == "tool/result").unwrap();
    let text = result.to_string();
    assert!(text.contains("Error: unsupported unit"), "{text}");
    assert_eq!(turn_end(&r.log)["kind"], "completed");
    checks(&r.log);
}

/// A log sink that accepts `room` bytes, then fails.
struct FullFlash {
    kept: Vec<u8>,
    room: usize,
}

impl embedded_io::ErrorType for FullFlash {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Write for FullFlash {
    fn write(&mut self, buf: &[u8]) -> Result<usize, embedded_io::ErrorKind> {
        if self.kept.len() >= self.room {
            return Err(embedded_io::ErrorKind::OutOfMemory);
        }
        let n = buf.len().min(self.room - self.kept.len());
        self.kept.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> Result<(), embedded_io::ErrorKind> {
        Ok(())
    }
}

#[test]
fn a_failing_log_sink_is_reported_and_the_turn_still_ends() {
    let response = chunked(SSE, 32);
    let opener = move || {
        Ok(MemLink {
            response: response.clone(),
            at: 0,
            piece: 64,
            fail_at_end: false,
            written: Rc::new(RefCell::new(Vec::new())),
        })
    };
    let sink = FullFlash {
        kept: Vec::new(),
        room: 600,
    };
    let mut shell = Shell::new(ShellConfig::new("m", "full-1"), &[], clock, opener, sink).unwrap();
    assert_eq!(
        shell.prompt("hi"),
        Err(dsh_embedded::ShellError::Sink(
            embedded_io::ErrorKind::OutOfMemory
        ))
    );
    assert_eq!(shell.agent().status(), dsh_core::agent::AgentStatus::Idle);
    let (agent, sink) = shell.into_parts();
    let last = agent.session().events().last().expect("events");
    assert_eq!(last.event_type(), "turn/end");
    // SM-14 (the kernel's one behaviour in every runtime): the write before
    // the model call failed, so the request was not sent and the turn
    // ended in error with the sink's failure.
    let end: serde_json::Value = serde_json::from_str(&last.to_json()).unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "error", "{end}");
    assert_eq!(
        end["data"]["reason"]["error"]["code"], "FLUSH_FAILED",
        "{end}"
    );
    assert_eq!(sink.kept.len(), 600);
}

fn device_ids(purpose: IdPurpose<'_>) -> MessageId {
    match purpose {
        IdPurpose::Assistant { turn, step } => MessageId(format!("dev-a{turn}.{step}")),
        IdPurpose::ToolResult { call_id, .. } => MessageId(format!("dev-r-{}", call_id.as_str())),
        IdPurpose::RuntimeContext { turn, step } => MessageId(format!("dev-x{turn}.{step}")),
    }
}

#[test]
fn ids_come_from_the_caller_function() {
    let config = ShellConfig::new("model.local", "ids-1");
    let response = chunked(SSE, 32);
    let opener = move || {
        Ok(MemLink {
            response: response.clone(),
            at: 0,
            piece: 64,
            fail_at_end: false,
            written: Rc::new(RefCell::new(Vec::new())),
        })
    };
    let mut shell = Shell::new(config, &[], clock, opener, Vec::new())
        .unwrap()
        .with_ids(IdFn::new(device_ids));
    shell.prompt("hi").unwrap();
    let log = shell.into_parts().1;
    let records = records(&log);
    let msg = records
        .iter()
        .find(|r| r["type"] == "assistant/message")
        .unwrap();
    assert_eq!(msg["data"]["message"]["id"], "dev-a1.1");
    checks(&log);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// No link input panics the shell, and the log always checks.
    #[test]
    fn arbitrary_responses_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        head in prop_oneof![
            Just(&b""[..]),
            Just(&b"HTTP/1.1 200 OK\r\n\r\n"[..]),
            Just(&b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"[..]),
            Just(&b"HTTP/1.1 500 X\r\ncontent-length: 20\r\n\r\n"[..]),
        ],
        piece in 1usize..40,
    ) {
        let mut response = head.to_vec();
        response.extend_from_slice(&bytes);
        let r = run(&[&response], piece, false);
        let reason = turn_end(&r.log);
        prop_assert!(reason["kind"] == "error" || reason["kind"] == "completed");
        checks(&r.log);
    }
}
