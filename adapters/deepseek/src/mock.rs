//! A scripted mock DeepSeek server (feature `mock`), bound to 127.0.0.1
//! only, for transport tests and local experiments
//! (`dsh mock-server --script FILE [--port N]`).
//!
//! Plain `std::net` and one thread per connection; minimal HTTP/1.1: every
//! request is answered, in arrival order, by the next scripted response,
//! and the connection is closed after it. Streams use chunked transfer
//! encoding, one HTTP chunk per write. Every request is recorded
//! ([`MockServer::requests`]) so tests can assert on the bodies and headers.
//!
//! # Script format
//!
//! ```json
//! {"responses": [RESPONSE, ...], "perSession": false, "keepAliveConnections": false}
//! ```
//!
//! With `keepAliveConnections`, complete `turn` and `http` responses leave
//! the connection open for the next request (the client's connection reuse
//! is then visible in [`MockServer::connections`]).
//!
//! A `RESPONSE` is `{"turn": TURN}` or `{"fault": FAULT}`.
//!
//! `TURN`, a scripted assistant turn rendered in DeepSeek's exact SSE format
//! (`data: {"id":…,"object":"chat.completion.chunk",…}` events, a role delta
//! first, then `data: [DONE]`). Every key is optional:
//!
//! | key | meaning |
//! |---|---|
//! | `reasoning` | `reasoning_content` deltas, one event each |
//! | `text` | `content` deltas, one event each |
//! | `toolCalls` | `[{"id","name","arguments":[fragments…]}]`: an opening event with id and name, then one event per fragment |
//! | `finishReason` | the last event's `finish_reason`; default `tool_calls` with tool calls, else `stop` |
//! | `usage` | the wire usage object, sent on the last event |
//! | `model` | the `model` field (default `deepseek-v4-flash`) |
//! | `headers` | extra response headers, e.g. `{"x-request-id":"r1"}` |
//! | `chunkSize` | bytes per write (default: one event per write) |
//! | `delayMs` | pause before each write (a slow drip) |
//! | `keepAlive` | a `: keep-alive` comment first and after every N events |
//!
//! `FAULT`, by `kind`:
//!
//! | `kind` | fields | what the client sees |
//! |---|---|---|
//! | `http` | `status`, `headers`, `body` (string verbatim, or JSON) | a non-2xx response, e.g. 401, 429 + `retry-after`, 500, 400 with a context-overflow body |
//! | `stall` | `turn`, `afterEvents` (default 0), `ms`, `keepAliveMs` | sends the first events of `turn`, then goes silent (sending `: keep-alive` every `keepAliveMs` if set); after `ms` it sends the rest, without `ms` it holds until the client leaves |
//! | `close` | `turn`, `afterEvents`, `abrupt` | sends the first events, then ends the body cleanly (`abrupt: false`, the chunked terminator) or drops the connection mid-body (`abrupt: true`) |
//! | `inband-error` | `error` (JSON), `done` (default true) | `data: {"error":…}` then `[DONE]` (or not) |
//! | `raw` | `status` (200), `headers`, `body`, `chunkSize`, `delayMs` | the body bytes verbatim as `text/event-stream` |
//! | `endless` | `turn` | the events of `turn` without its finish, then its reasoning, text and tool-call events again and again until the client leaves (a runaway server) |
//!
//! A request for a path that ends neither in `/chat/completions` nor in
//! `/v1/messages` (the Anthropic wire) is
//! answered apart from the script: from `"otherPaths"` (path → JSON body,
//! status 200) or with a 404, and recorded in
//! [`MockServer::other_requests`].
//!
//! When the script is exhausted the server answers
//! `500 {"error":{"message":"mock script exhausted"}}`.
//!
//! A session-title request (its system message starts with
//! [`TITLE_MARKER`], as `dsh`'s does) is answered apart from the script
//! with the text of `"title"` (default `Mock session title`; `""` answers
//! with a 500; `"titleDelayMs"` slows it down), and recorded in [`MockServer::title_requests`] rather than
//! [`MockServer::requests`], so scripts need not know about titles.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::thread::{self, JoinHandle};
use std::time::Instant;

/// A mock script (see the module docs).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct Script {
    /// The responses, served in order.
    pub responses: Vec<ScriptedResponse>,
    /// Serve the responses to each session id separately.
    #[serde(default)]
    pub per_session: bool,
    /// Keep connections open after complete `turn` and `http` responses
    /// (HTTP/1.1 keep-alive) and serve further requests on them; by default
    /// every response closes its connection.
    #[serde(default)]
    pub keep_alive_connections: bool,
    /// The answer to session-title requests (see the module docs).
    #[serde(default)]
    pub title: Option<String>,
    /// Pause before each write of a title answer, in milliseconds.
    #[serde(default)]
    pub title_delay_ms: u64,
    /// Answers to requests for paths other than `…/chat/completions`
    /// (model metadata: `/v1/models`, `/props`, …): path → the JSON body
    /// of a 200. Every other such path gets a 404.
    #[serde(default)]
    pub other_paths: BTreeMap<String, Value>,
}

/// How the system message of a session-title request starts.
pub const TITLE_MARKER: &str = "Write a title for this coding-agent session.";

impl Script {
    /// Parses a script from JSON text.
    pub fn from_json(text: &str) -> Result<Script, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// One scripted response.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ScriptedResponse {
    /// A streamed assistant turn.
    Turn(Turn),
    /// A failure.
    Fault(Fault),
}

/// A scripted assistant turn.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Turn {
    /// `reasoning_content` deltas.
    pub reasoning: Vec<String>,
    /// `content` deltas.
    pub text: Vec<String>,
    /// Tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// The final `finish_reason`.
    pub finish_reason: Option<String>,
    /// The wire usage object.
    pub usage: Option<Value>,
    /// The `model` field.
    pub model: Option<String>,
    /// Extra response headers.
    pub headers: BTreeMap<String, String>,
    /// Bytes per write.
    pub chunk_size: Option<usize>,
    /// Pause before each write, in milliseconds.
    pub delay_ms: u64,
    /// A keep-alive comment first and after every N events (0: none).
    pub keep_alive: usize,
}

/// A scripted tool call.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Argument fragments.
    pub arguments: Vec<String>,
}

/// A scripted failure.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Fault {
    /// A non-2xx response.
    #[serde(rename_all = "camelCase")]
    Http {
        /// The status.
        status: u16,
        /// Extra headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// The body: a string verbatim, or JSON.
        #[serde(default)]
        body: Option<Value>,
    },
    /// Silence after some events.
    #[serde(rename_all = "camelCase")]
    Stall {
        /// The turn to send part of.
        #[serde(default)]
        turn: Option<Turn>,
        /// Events sent before the stall.
        #[serde(default)]
        after_events: usize,
        /// Stall length; absent: until the client leaves.
        #[serde(default)]
        ms: Option<u64>,
        /// Keep-alive comment interval during the stall.
        #[serde(default)]
        keep_alive_ms: Option<u64>,
    },
    /// The body ends early.
    #[serde(rename_all = "camelCase")]
    Close {
        /// The turn to send part of.
        #[serde(default)]
        turn: Option<Turn>,
        /// Events sent before the close.
        #[serde(default)]
        after_events: usize,
        /// Drop the connection mid-body instead of ending it cleanly.
        #[serde(default)]
        abrupt: bool,
    },
    /// An in-band error object.
    #[serde(rename_all = "camelCase")]
    InbandError {
        /// The `error` object.
        error: Value,
        /// Whether `[DONE]` follows (default true).
        #[serde(default = "yes")]
        done: bool,
    },
    /// A stream that never ends: the turn's content events, repeated
    /// until the client leaves.
    #[serde(rename_all = "camelCase")]
    Endless {
        /// The turn whose events repeat.
        turn: Turn,
    },
    /// A verbatim body.
    #[serde(rename_all = "camelCase")]
    Raw {
        /// The status (default 200).
        #[serde(default = "ok_status")]
        status: u16,
        /// Extra headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// The body.
        body: String,
        /// Bytes per write.
        #[serde(default)]
        chunk_size: Option<usize>,
        /// Pause before each write.
        #[serde(default)]
        delay_ms: u64,
    },
}

fn yes() -> bool {
    true
}

fn ok_status() -> u16 {
    200
}

/// One request the server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method, e.g. `POST`.
    pub method: String,
    /// The request target, e.g. `/chat/completions`.
    pub path: String,
    /// Headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body bytes.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Every value of header `name` (case-insensitive).
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

struct Shared {
    script: Vec<ScriptedResponse>,
    next: AtomicUsize,
    per_session: Option<Mutex<BTreeMap<String, usize>>>,
    requests: Mutex<Vec<RecordedRequest>>,
    title: Option<String>,
    title_delay_ms: u64,
    title_requests: Mutex<Vec<RecordedRequest>>,
    other_paths: BTreeMap<String, Value>,
    other_requests: Mutex<Vec<RecordedRequest>>,
    stop: AtomicBool,
    keep_alive: bool,
    connections: AtomicUsize,
}

/// A running mock server; stops when dropped.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl core::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MockServer {
    /// Starts serving `script` on an ephemeral port of 127.0.0.1.
    pub fn start(script: Script) -> io::Result<MockServer> {
        MockServer::start_on(script, 0)
    }

    /// Starts serving `script` on 127.0.0.1:`port` (0: ephemeral).
    pub fn start_on(script: Script, port: u16) -> io::Result<MockServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: script.responses,
            next: AtomicUsize::new(0),
            per_session: script.per_session.then(|| Mutex::new(BTreeMap::new())),
            requests: Mutex::new(Vec::new()),
            other_paths: script.other_paths,
            other_requests: Mutex::new(Vec::new()),
            title: script.title,
            title_delay_ms: script.title_delay_ms,
            title_requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            keep_alive: script.keep_alive_connections,
            connections: AtomicUsize::new(0),
        });
        let accept_shared = shared.clone();
        let accept = thread::Builder::new()
            .name(String::from("dsh-mock-accept"))
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(MockServer {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// `http://127.0.0.1:PORT`, the base URL to configure.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The session-title requests received so far.
    pub fn title_requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .title_requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The requests for paths other than `…/chat/completions` so far.
    pub fn other_requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .other_requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Stops accepting and ends stalled responses.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.accept.take() {
            // Wake the blocked accept; if that fails, leave the thread be
            // rather than wait forever.
            if TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).is_ok() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // A blocking accept serves a connection as soon as it arrives (polling
    // a non-blocking listener added up to 5 ms to every request); `stop`
    // wakes it with a connection of its own.
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                let _ = thread::Builder::new()
                    .name(String::from("dsh-mock-conn"))
                    .spawn(move || {
                        let _ = serve(stream, &shared);
                    });
            }
            Err(_) => thread::sleep(Duration::from_millis(1)),
        }
    }
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;

fn read_request(stream: &mut TcpStream) -> io::Result<Option<RecordedRequest>> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if data.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut start = lines.next().unwrap_or("").split(' ');
    let method = start.next().unwrap_or("").to_string();
    let path = start.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_BODY);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    body.truncate(length);
    Ok(Some(RecordedRequest {
        method,
        path,
        headers,
        body,
    }))
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn serve(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    loop {
        if !serve_one(&mut stream, shared)? || shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
    }
}

/// Whether `request` is a session-title request (its first message is a
/// system message starting with [`TITLE_MARKER`], or on the Anthropic
/// wire its first `system` block).
fn is_title_request(request: &RecordedRequest) -> bool {
    serde_json::from_slice::<Value>(&request.body)
        .ok()
        .and_then(|v| {
            // The Anthropic wire: the system prompt is a top-level block.
            if let Some(text) = v.get("system")?.get(0)?.get("text")?.as_str() {
                return Some(text.starts_with(TITLE_MARKER));
            }
            None
        })
        .or_else(|| {
            let v = serde_json::from_slice::<Value>(&request.body).ok()?;
            let first = v.get("messages")?.get(0)?.clone();
            Some(
                first.get("role")?.as_str()? == "system"
                    && first.get("content")?.as_str()?.starts_with(TITLE_MARKER),
            )
        })
        .unwrap_or(false)
}

/// Answers one request; returns whether the connection stays open.
fn serve_one(stream: &mut TcpStream, shared: &Shared) -> io::Result<bool> {
    let keep = shared.keep_alive;
    let Some(request) = read_request(stream)? else {
        return Ok(false);
    };
    let session = request
        .header_values("x-deepseek-harness-session-id")
        .first()
        .map(|s| s.to_string());
    let path = request.path.split('?').next().unwrap_or("");
    if !path.ends_with("/chat/completions") && !path.ends_with("/v1/messages") {
        let answer = shared.other_paths.get(path).map(Value::to_string);
        if let Ok(mut r) = shared.other_requests.lock() {
            r.push(request);
        }
        let (status, body) = match answer {
            Some(body) => (200, body),
            None => (404, json!({"error":{"message":"not found"}}).to_string()),
        };
        write_plain(stream, status, &BTreeMap::new(), body.as_bytes(), false)?;
        return Ok(false);
    }
    if is_title_request(&request) {
        let text = shared
            .title
            .clone()
            .unwrap_or_else(|| String::from("Mock session title"));
        if let Ok(mut r) = shared.title_requests.lock() {
            r.push(request);
        }
        if text.is_empty() {
            let body = json!({"error":{"message":"mock title refused"}}).to_string();
            write_plain(stream, 500, &BTreeMap::new(), body.as_bytes(), false)?;
            return Ok(false);
        }
        let turn = Turn {
            text: alloc::vec![text],
            delay_ms: shared.title_delay_ms,
            ..Turn::default()
        };
        let mut w = Chunked {
            stream,
            shared,
            delay: Duration::ZERO,
            chunk_size: None,
            keep: false,
        };
        w.configure(&turn);
        w.head(200, &turn.headers)?;
        w.events(&render(&turn), usize::MAX, 0)?;
        w.done()?;
        w.end()?;
        return Ok(false);
    }
    if let Ok(mut r) = shared.requests.lock() {
        r.push(request);
    }
    let i = match (&shared.per_session, session) {
        (Some(counters), Some(session)) => match counters.lock() {
            Ok(mut counters) => {
                let n = counters.entry(session).or_insert(0);
                *n += 1;
                *n - 1
            }
            Err(_) => usize::MAX,
        },
        _ => shared.next.fetch_add(1, Ordering::SeqCst),
    };
    let Some(response) = shared.script.get(i) else {
        let body = json!({"error":{"message":"mock script exhausted"}}).to_string();
        write_plain(stream, 500, &BTreeMap::new(), body.as_bytes(), false)?;
        return Ok(false);
    };
    let mut w = Chunked {
        stream,
        shared,
        delay: Duration::ZERO,
        chunk_size: None,
        keep: false,
    };
    match response {
        ScriptedResponse::Turn(turn) => {
            w.keep = keep;
            w.configure(turn);
            w.head(200, &turn.headers)?;
            w.events(&render(turn), usize::MAX, turn.keep_alive)?;
            w.done()?;
            w.end()?;
            Ok(keep)
        }
        ScriptedResponse::Fault(fault) => match fault {
            Fault::Http {
                status,
                headers,
                body,
            } => {
                let body = match body {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                };
                write_plain(w.stream, *status, headers, body.as_bytes(), keep)?;
                Ok(keep)
            }
            Fault::Stall {
                turn,
                after_events,
                ms,
                keep_alive_ms,
            } => {
                let turn = turn.clone().unwrap_or_default();
                w.configure(&turn);
                w.head(200, &turn.headers)?;
                let events = render(&turn);
                w.events(&events, *after_events, turn.keep_alive)?;
                let resumed = w.stall(*ms, *keep_alive_ms)?;
                if resumed {
                    let rest = events.get(*after_events..).unwrap_or_default();
                    w.events(rest, usize::MAX, turn.keep_alive)?;
                    w.done()?;
                    w.end()?;
                }
                Ok(false)
            }
            Fault::Close {
                turn,
                after_events,
                abrupt,
            } => {
                let turn = turn.clone().unwrap_or_default();
                w.configure(&turn);
                w.head(200, &turn.headers)?;
                w.events(&render(&turn), *after_events, turn.keep_alive)?;
                if *abrupt {
                    // Half a chunk, then the connection goes away.
                    w.stream.write_all(b"40\r\ndata: {\"choi")?;
                    w.stream.flush()?;
                    let _ = w.stream.shutdown(std::net::Shutdown::Both);
                    Ok(false)
                } else {
                    w.end()?;
                    Ok(false)
                }
            }
            Fault::Endless { turn } => {
                w.configure(turn);
                w.head(200, &turn.headers)?;
                let events = render(turn);
                // Everything but the finish, then the content (not the
                // role event) over and over.
                let open = events
                    .get(..events.len().saturating_sub(1))
                    .unwrap_or_default();
                w.events(open, usize::MAX, turn.keep_alive)?;
                let again = open.get(1..).unwrap_or_default();
                while !again.is_empty() && !w.shared.stop.load(Ordering::SeqCst) {
                    w.events(again, usize::MAX, 0)?;
                }
                Ok(false)
            }
            Fault::InbandError { error, done } => {
                w.head(200, &BTreeMap::new())?;
                let payload = json!({ "error": error }).to_string();
                w.events(&[payload], usize::MAX, 0)?;
                if *done {
                    w.done()?;
                }
                w.end()?;
                Ok(false)
            }
            Fault::Raw {
                status,
                headers,
                body,
                chunk_size,
                delay_ms,
            } => {
                w.chunk_size = *chunk_size;
                w.delay = Duration::from_millis(*delay_ms);
                w.head(*status, headers)?;
                w.write(body.as_bytes())?;
                w.end()?;
                Ok(false)
            }
        },
    }
}

fn write_plain(
    stream: &mut TcpStream,
    status: u16,
    headers: &BTreeMap<String, String>,
    body: &[u8],
    keep: bool,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}",
        reason_phrase(status),
        body.len(),
        if keep { "" } else { "connection: close\r\n" }
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// The SSE payloads of a turn, without `[DONE]`.
fn render(turn: &Turn) -> Vec<String> {
    let model = turn.model.as_deref().unwrap_or("deepseek-v4-flash");
    let envelope = |delta: Value, finish: Value, usage: Option<&Value>| {
        let mut v = json!({
            "id": "mock-0001",
            "object": "chat.completion.chunk",
            "created": 1_785_985_654u64,
            "model": model,
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if let (Some(u), Value::Object(map)) = (usage, &mut v) {
            map.insert(String::from("usage"), u.clone());
        }
        v.to_string()
    };
    let mut out = Vec::new();
    out.push(envelope(
        json!({"role":"assistant","content":null,"reasoning_content":""}),
        Value::Null,
        None,
    ));
    for r in &turn.reasoning {
        out.push(envelope(
            json!({"content":null,"reasoning_content":r}),
            Value::Null,
            None,
        ));
    }
    for t in &turn.text {
        out.push(envelope(
            json!({"content":t,"reasoning_content":null}),
            Value::Null,
            None,
        ));
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        out.push(envelope(
            json!({"tool_calls":[{"index":i,"id":call.id,"type":"function","function":{"name":call.name,"arguments":""}}]}),
            Value::Null,
            None,
        ));
        for fragment in &call.arguments {
            out.push(envelope(
                json!({"tool_calls":[{"index":i,"function":{"arguments":fragment}}]}),
                Value::Null,
                None,
            ));
        }
    }
    let finish = match &turn.finish_reason {
        Some(r) => r.clone(),
        None if turn.tool_calls.is_empty() => String::from("stop"),
        None => String::from("tool_calls"),
    };
    out.push(envelope(
        json!({"content":""}),
        Value::String(finish),
        turn.usage.as_ref(),
    ));
    out
}

/// A chunked-encoding response writer.
struct Chunked<'a> {
    stream: &'a mut TcpStream,
    shared: &'a Shared,
    delay: Duration,
    chunk_size: Option<usize>,
    /// Keep the connection open after this response.
    keep: bool,
}

impl Chunked<'_> {
    fn configure(&mut self, turn: &Turn) {
        self.delay = Duration::from_millis(turn.delay_ms);
        self.chunk_size = turn.chunk_size.filter(|n| *n > 0);
    }

    fn head(&mut self, status: u16, headers: &BTreeMap<String, String>) -> io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n{}",
            reason_phrase(status),
            if self.keep {
                ""
            } else {
                "connection: close\r\n"
            }
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.stream.write_all(head.as_bytes())?;
        self.stream.flush()
    }

    fn chunk(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if !self.delay.is_zero() {
            thread::sleep(self.delay);
        }
        let mut frame = format!("{:x}\r\n", bytes.len()).into_bytes();
        frame.extend_from_slice(bytes);
        frame.extend_from_slice(b"\r\n");
        self.stream.write_all(&frame)?;
        self.stream.flush()
    }

    /// Writes `bytes` as one write or in `chunk_size` pieces.
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.chunk_size {
            Some(n) => bytes.chunks(n).try_for_each(|c| self.chunk(c)),
            None => self.chunk(bytes),
        }
    }

    /// Writes the first `limit` events, with keep-alives every `keep_alive`.
    fn events(&mut self, events: &[String], limit: usize, keep_alive: usize) -> io::Result<()> {
        for (i, e) in events.iter().take(limit).enumerate() {
            if keep_alive > 0 && i % keep_alive == 0 {
                self.write(b": keep-alive\n\n")?;
            }
            self.write(format!("data: {e}\n\n").as_bytes())?;
        }
        Ok(())
    }

    fn done(&mut self) -> io::Result<()> {
        self.write(b"data: [DONE]\n\n")
    }

    /// The chunked terminator: a clean end of body.
    fn end(&mut self) -> io::Result<()> {
        self.stream.write_all(b"0\r\n\r\n")?;
        self.stream.flush()
    }

    /// Silence for `ms` (or until the client leaves or the server stops).
    /// Returns whether the stall ended by time, so the turn may resume.
    fn stall(&mut self, ms: Option<u64>, keep_alive_ms: Option<u64>) -> io::Result<bool> {
        let start = Instant::now();
        let mut last_ping = start;
        self.stream
            .set_read_timeout(Some(Duration::from_millis(10)))?;
        let mut sink = [0u8; 256];
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return Ok(false);
            }
            if ms.is_some_and(|ms| start.elapsed() >= Duration::from_millis(ms)) {
                return Ok(true);
            }
            if let Some(k) = keep_alive_ms
                && last_ping.elapsed() >= Duration::from_millis(k)
            {
                self.chunk(b": keep-alive\n\n")?;
                last_ping = Instant::now();
            }
            match self.stream.read(&mut sink) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Ok(false),
            }
        }
    }
}
