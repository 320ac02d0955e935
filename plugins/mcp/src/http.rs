//! The streamable-HTTP transport: each message is a POST (ureq, blocking,
//! on a thread of its own); the answer comes back as a JSON body or an SSE
//! stream, which is resumed with `Last-Event-ID` after the server's `retry`
//! delay when it breaks before the answer. The `Mcp-Session-Id` the server
//! gives at `initialize` goes on every later request; a bearer token (from
//! the variable the config names) and extra headers go on all of them and
//! never into an error message. A GET stream carries the server's own
//! notifications when the server offers one.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ureq::Agent;

use crate::proto::{self, MAX_LINE_BYTES, SseParser};
use crate::stdio::Connection;

/// Resumptions of one broken response stream before its request fails.
pub const MAX_RESUMES: u32 = 5;

/// Delay before a resumption when the server sent no `retry`.
pub const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// One streamable-HTTP endpoint.
pub struct HttpWire {
    agent: Agent,
    url: String,
    headers: Vec<(String, String)>,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    listening: AtomicBool,
}

impl core::fmt::Debug for HttpWire {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Headers may hold tokens: only their names are shown.
        f.debug_struct("HttpWire")
            .field("url", &self.url)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl HttpWire {
    /// An endpoint at `url` sending `headers` (the `Authorization` header
    /// of a bearer token among them) on every request.
    pub fn new(url: &str, headers: Vec<(String, String)>, connect_timeout: Duration) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_connect(Some(connect_timeout))
            .build();
        HttpWire {
            agent: Agent::new_with_config(config),
            url: url.to_string(),
            headers,
            session: Mutex::new(None),
            version: Mutex::new(None),
            listening: AtomicBool::new(false),
        }
    }

    /// Sends the negotiated version on later requests
    /// (`MCP-Protocol-Version`).
    pub fn set_protocol_version(&self, v: &str) {
        if let Ok(mut g) = self.version.lock() {
            *g = Some(v.to_string());
        }
    }

    /// The session id the server gave, if any.
    pub fn session_id(&self) -> Option<String> {
        self.session.lock().ok().and_then(|s| s.clone())
    }

    fn common(
        &self,
        mut req: ureq::RequestBuilder<ureq::typestate::WithBody>,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(s) = self.session_id() {
            req = req.header("mcp-session-id", s.as_str());
        }
        if let Some(v) = self.version.lock().ok().and_then(|v| v.clone()) {
            req = req.header("mcp-protocol-version", v.as_str());
        }
        req
    }

    fn common_get(
        &self,
        mut req: ureq::RequestBuilder<ureq::typestate::WithoutBody>,
    ) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(s) = self.session_id() {
            req = req.header("mcp-session-id", s.as_str());
        }
        if let Some(v) = self.version.lock().ok().and_then(|v| v.clone()) {
            req = req.header("mcp-protocol-version", v.as_str());
        }
        req
    }

    /// Posts one message on a thread of its own; what comes back is handed
    /// to `conn`.
    pub fn send(self: &Arc<Self>, body: Vec<u8>, conn: Weak<Connection>) {
        let me = self.clone();
        let id = request_id(&body);
        let conn2 = conn.clone();
        let spawned = std::thread::Builder::new()
            .name("dsh-mcp-http".into())
            .spawn(move || me.post(&body, id, &conn));
        if let Err(e) = spawned
            && let (Some(id), Some(c)) = (id, conn2.upgrade())
        {
            c.fail_request(id, format!("cannot start the HTTP thread: {e}"));
        }
    }

    fn post(&self, body: &[u8], id: Option<u64>, conn: &Weak<Connection>) {
        let fail = |why: String| {
            if let (Some(id), Some(c)) = (id, conn.upgrade()) {
                c.fail_request(id, why);
            }
        };
        let req = self
            .common(self.agent.post(&self.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        let mut resp = match req.send(body) {
            Ok(r) => r,
            Err(e) => return fail(format!("POST {}: {e}", self.url)),
        };
        if let Some(sid) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            && let Ok(mut s) = self.session.lock()
        {
            *s = Some(sid.chars().take(256).collect());
        }
        let status = resp.status().as_u16();
        if status == 202 || status == 204 {
            return;
        }
        if status == 404 && self.session_id().is_some() {
            if let Some(c) = conn.upgrade() {
                c.close("the server ended the session (HTTP 404)".into());
            }
            return;
        }
        if !(200..300).contains(&status) {
            let mut snippet = Vec::new();
            let _ = resp
                .body_mut()
                .as_reader()
                .take(300)
                .read_to_end(&mut snippet);
            let snippet = String::from_utf8_lossy(&snippet).trim().to_string();
            return fail(format!("HTTP {status} from {}: {snippet}", self.url));
        }
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
        let reader = resp.into_body().into_reader();
        if sse {
            self.read_stream(reader, id, conn, 0);
            return;
        }
        let mut bytes = Vec::new();
        let read = reader
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_to_end(&mut bytes);
        let Some(c) = conn.upgrade() else { return };
        if let Err(e) = read {
            return fail(format!("reading the answer: {e}"));
        }
        if bytes.len() > MAX_LINE_BYTES {
            c.close(format!(
                "{}; the connection was closed",
                proto::ProtoError::LineTooLong {
                    max: MAX_LINE_BYTES
                }
            ));
            return;
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if let Err(e) = c.receive(&bytes) {
            c.close(format!("{e}; the connection was closed"));
        }
    }

    fn read_stream(
        &self,
        mut reader: impl Read,
        id: Option<u64>,
        conn: &Weak<Connection>,
        resumes: u32,
    ) {
        let mut parser = SseParser::new(MAX_LINE_BYTES);
        let mut buf = vec![0u8; 16 * 1024];
        let mut events = Vec::new();
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            parser.push(buf.get(..n).unwrap_or(&[]), &mut events);
            let Some(c) = conn.upgrade() else { return };
            for e in events.drain(..) {
                let handed = match e {
                    Ok(ev) if ev.data.trim().is_empty() => Ok(()),
                    Ok(ev) => c.receive(ev.data.as_bytes()),
                    Err(e) => Err(e),
                };
                if let Err(e) = handed {
                    c.close(format!("{e}; the connection was closed"));
                    return;
                }
            }
            if id.is_some_and(|id| !c.is_pending(id)) {
                return;
            }
        }
        let Some(id) = id else { return };
        let Some(c) = conn.upgrade() else { return };
        if !c.is_pending(id) || !c.is_open() {
            return;
        }
        let Some(last) = parser.last_id.clone() else {
            c.fail_request(id, "the answer stream ended before the answer".into());
            return;
        };
        if resumes >= MAX_RESUMES {
            c.fail_request(
                id,
                format!("the answer stream broke {MAX_RESUMES} times; given up"),
            );
            return;
        }
        drop(c);
        let wait = parser
            .retry_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_RETRY);
        std::thread::sleep(wait);
        let req = self
            .common_get(self.agent.get(&self.url))
            .header("accept", "text/event-stream")
            .header("last-event-id", last.as_str());
        match req.call() {
            Ok(r) if r.status().is_success() => {
                self.read_stream(r.into_body().into_reader(), Some(id), conn, resumes + 1)
            }
            Ok(r) => {
                if let Some(c) = conn.upgrade() {
                    c.fail_request(
                        id,
                        format!("resuming the answer stream: HTTP {}", r.status().as_u16()),
                    );
                }
            }
            Err(e) => {
                if let Some(c) = conn.upgrade() {
                    c.fail_request(id, format!("resuming the answer stream: {e}"));
                }
            }
        }
    }

    /// Opens the GET stream for the server's own messages (once; a server
    /// without one answers 405 and nothing happens).
    pub fn listen(self: &Arc<Self>, conn: Weak<Connection>) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        let _ = std::thread::Builder::new()
            .name("dsh-mcp-http-listen".into())
            .spawn(move || {
                let req = me
                    .common_get(me.agent.get(&me.url))
                    .header("accept", "text/event-stream");
                if let Ok(r) = req.call()
                    && r.status().is_success()
                {
                    me.read_stream(r.into_body().into_reader(), None, &conn, MAX_RESUMES);
                }
            });
    }

    /// Ends the session (`DELETE` with its id), best effort, off-thread.
    pub fn end_session(&self) {
        let Some(sid) = self.session_id() else { return };
        let agent = self.agent.clone();
        let url = self.url.clone();
        let headers = self.headers.clone();
        let _ = std::thread::Builder::new()
            .name("dsh-mcp-http-end".into())
            .spawn(move || {
                let mut req = agent.delete(&url).header("mcp-session-id", sid.as_str());
                for (k, v) in &headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                let _ = req.call();
            });
    }
}

/// The id of a request line dsh built (`None` for a notification or a
/// response).
fn request_id(body: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("method")?;
    v.get("id")?.as_u64()
}
