//! A connection and the stdio transport: the server runs as a child
//! process; one thread reads its stdout (line-framed JSON-RPC, capped),
//! one drains its stderr into the server's log file, and callers block on
//! their own request. The same [`Connection`] carries the streamable-HTTP
//! transport ([`crate::http`]).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use dsh_tools::CancelToken;
use serde_json::Value;

use crate::proto::{self, Incoming, ProtoError, RpcError, ServerInfo};

/// Most bytes of a server's stderr written to its log file per connection.
pub const MAX_LOG_BYTES: u64 = 1024 * 1024;

/// Bytes of stderr kept for reports (the tail).
pub const STDERR_TAIL_BYTES: usize = 2048;

/// A tool call that keeps reporting progress runs at most this many times
/// its timeout.
pub const MAX_PROGRESS_EXTENSION: u32 = 10;

/// Most lines queued for a server's stdin.
pub const MAX_QUEUED_LINES: usize = 64;

/// Most requests in flight on one connection.
pub const MAX_PENDING: usize = 256;

/// Why a request failed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CallError {
    /// The server answered with a JSON-RPC error.
    Rpc(RpcError),
    /// No answer within the deadline (`notifications/cancelled` was sent).
    Timeout(Duration),
    /// The caller cancelled (`notifications/cancelled` was sent).
    Cancelled,
    /// The connection is closed (the reason: exit status, protocol error).
    Closed(String),
    /// Too many requests in flight.
    Busy,
}

impl core::fmt::Display for CallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "the server answered with an error: {e}"),
            CallError::Timeout(d) => write!(f, "no answer within {:.1} s", d.as_secs_f64()),
            CallError::Cancelled => f.write_str("cancelled"),
            CallError::Closed(why) => write!(f, "the connection is closed: {why}"),
            CallError::Busy => write!(f, "more than {MAX_PENDING} requests in flight"),
        }
    }
}

/// How to start a stdio server.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Spawn {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment (already filtered by the policy).
    pub env: Vec<(OsString, OsString)>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Where its stderr goes (appended), if anywhere.
    pub log_file: Option<PathBuf>,
}

type Waiter = SyncSender<Result<Value, CallError>>;

/// Called with each notification's method and params (on the reader
/// thread: must not block on this connection).
pub type NotificationHook = Arc<dyn Fn(&str, &Value) + Send + Sync>;

enum Wire {
    /// Lines for the writer thread that owns the child's stdin: a server
    /// that stops reading blocks that thread, never a caller.
    Stdio(SyncSender<Vec<u8>>),
    Http(Arc<crate::http::HttpWire>),
}

/// One live connection to a server.
pub struct Connection {
    writer: Mutex<Option<Wire>>,
    pending: Mutex<BTreeMap<u64, Waiter>>,
    next_id: AtomicU64,
    closed: Mutex<Option<String>>,
    closed_at: Mutex<Option<Instant>>,
    child: Mutex<Option<Child>>,
    me: Weak<Connection>,
    hook: NotificationHook,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    roots: Vec<String>,
    info: Mutex<Option<ServerInfo>>,
    /// When each waiting `tools/call` last reported progress.
    progress: Mutex<BTreeMap<u64, Instant>>,
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.closed_reason())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts the child and its reader threads (no handshake yet).
    pub fn spawn(
        spawn: &Spawn,
        roots: Vec<String>,
        on_notification: NotificationHook,
    ) -> Result<Arc<Connection>, String> {
        let mut cmd = Command::new(&spawn.command);
        cmd.args(&spawn.args)
            .env_clear()
            .envs(spawn.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spawn.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            // Its own process group: the terminal's Ctrl-C is dsh's to
            // handle, not the server's.
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", spawn.command))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let conn = Arc::new_cyclic(|me| Connection {
            writer: Mutex::new(stdin.and_then(spawn_writer).map(Wire::Stdio)),
            pending: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
            closed: Mutex::new(None),
            closed_at: Mutex::new(None),
            child: Mutex::new(Some(child)),
            me: me.clone(),
            hook: on_notification.clone(),
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
            roots,
            info: Mutex::new(None),
            progress: Mutex::new(BTreeMap::new()),
        });
        if let Some(stderr) = stderr {
            let tail = conn.stderr_tail.clone();
            let log = spawn.log_file.clone();
            let _ = std::thread::Builder::new()
                .name("dsh-mcp-stderr".into())
                .spawn(move || drain_stderr(stderr, log, tail));
        }
        let Some(stdout) = stdout else {
            conn.close("the server's stdout is not a pipe".into());
            return Err("the server's stdout is not a pipe".into());
        };
        let weak = Arc::downgrade(&conn);
        let spawned = std::thread::Builder::new()
            .name("dsh-mcp-reader".into())
            .spawn(move || read_loop(stdout, weak, on_notification));
        if let Err(e) = spawned {
            conn.close(format!("cannot start the reader thread: {e}"));
            return Err(format!("cannot start the reader thread: {e}"));
        }
        Ok(conn)
    }

    /// A connection over streamable HTTP (no handshake yet).
    pub fn http(
        wire: crate::http::HttpWire,
        roots: Vec<String>,
        on_notification: NotificationHook,
    ) -> Arc<Connection> {
        Arc::new_cyclic(|me| Connection {
            writer: Mutex::new(Some(Wire::Http(Arc::new(wire)))),
            pending: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
            closed: Mutex::new(None),
            closed_at: Mutex::new(None),
            child: Mutex::new(None),
            me: me.clone(),
            hook: on_notification,
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
            roots,
            info: Mutex::new(None),
            progress: Mutex::new(BTreeMap::new()),
        })
    }

    /// Runs the handshake: `initialize` (version negotiation), then
    /// `notifications/initialized`.
    pub fn initialize(&self, timeout: Duration) -> Result<ServerInfo, String> {
        let result = self
            .request(
                "initialize",
                Some(proto::initialize_params()),
                timeout,
                None,
            )
            .map_err(|e| format!("initialize: {e}"))?;
        let info = proto::check_initialize(&result).map_err(|e| e.to_string())?;
        if let Some(http) = self.http_wire() {
            http.set_protocol_version(&info.protocol_version);
        }
        self.notify("notifications/initialized", None)
            .map_err(|e| format!("initialized: {e}"))?;
        if let Some(http) = self.http_wire() {
            http.listen(self.me.clone());
        }
        if let Ok(mut i) = self.info.lock() {
            *i = Some(info.clone());
        }
        Ok(info)
    }

    /// What the server said in `initialize`, once done.
    pub fn info(&self) -> Option<ServerInfo> {
        self.info.lock().ok().and_then(|i| i.clone())
    }

    /// Lists every tool (following pages).
    pub fn list_tools(&self, timeout: Duration) -> Result<proto::ToolListing, String> {
        let mut listing = proto::ToolListing::new();
        let mut cursor: Option<String> = None;
        loop {
            let result = self
                .request(
                    "tools/list",
                    proto::list_params(cursor.as_deref()),
                    timeout,
                    None,
                )
                .map_err(|e| format!("tools/list: {e}"))?;
            match listing.page(&result).map_err(|e| e.to_string())? {
                Some(next) => cursor = Some(next),
                None => return Ok(listing),
            }
        }
    }

    /// Sends a request and waits for its answer, at most `timeout`; on a
    /// timeout or `cancel`, sends `notifications/cancelled`.
    pub fn request(
        &self,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
        cancel: Option<&CancelToken>,
    ) -> Result<Value, CallError> {
        if let Some(why) = self.closed_reason() {
            return Err(CallError::Closed(why));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        {
            let mut pending = self.pending.lock().map_err(|_| CallError::Busy)?;
            if pending.len() >= MAX_PENDING {
                return Err(CallError::Busy);
            }
            pending.insert(id, tx);
        }
        // A tool call asks for progress; each report restarts its timeout
        // (at most MAX_PROGRESS_EXTENSION times the timeout in all).
        let mut params = params;
        if method == "tools/call"
            && let Some(Value::Object(p)) = params.as_mut()
        {
            p.insert("_meta".into(), serde_json::json!({"progressToken": id}));
        }
        if let Err(e) = self.write(&proto::request_line(id, method, params)) {
            self.forget(id);
            return Err(CallError::Closed(e));
        }
        let started = Instant::now();
        let hard = started + timeout.saturating_mul(MAX_PROGRESS_EXTENSION);
        let result = loop {
            let now = Instant::now();
            let last = self
                .progress
                .lock()
                .ok()
                .and_then(|p| p.get(&id).copied())
                .unwrap_or(started);
            let deadline = (last + timeout).min(hard);
            let wait = deadline
                .saturating_duration_since(now)
                .min(Duration::from_millis(50));
            match rx.recv_timeout(wait) {
                Ok(r) => break r,
                Err(RecvTimeoutError::Disconnected) => {
                    break Err(CallError::Closed(
                        self.closed_reason()
                            .unwrap_or_else(|| "the reader stopped".into()),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    if cancel.is_some_and(CancelToken::is_cancelled) {
                        self.cancel_request(id, "the turn was cancelled");
                        break Err(CallError::Cancelled);
                    }
                    if Instant::now() >= deadline {
                        self.cancel_request(id, "timeout");
                        break Err(CallError::Timeout(timeout));
                    }
                }
            }
        };
        if let Ok(mut p) = self.progress.lock() {
            p.remove(&id);
        }
        result
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Option<Value>) -> Result<(), String> {
        self.write(&proto::notification_line(method, params))
    }

    fn cancel_request(&self, id: u64, reason: &str) {
        self.forget(id);
        let _ = self.notify(
            "notifications/cancelled",
            Some(proto::cancelled_params(id, reason)),
        );
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }

    fn http_wire(&self) -> Option<Arc<crate::http::HttpWire>> {
        match self.writer.lock().ok()?.as_ref()? {
            Wire::Http(h) => Some(h.clone()),
            Wire::Stdio(_) => None,
        }
    }

    fn write(&self, line: &[u8]) -> Result<(), String> {
        if let Some(http) = self.http_wire() {
            http.send(line.to_vec(), self.me.clone());
            return Ok(());
        }
        let mut w = self
            .writer
            .lock()
            .map_err(|_| "the writer is poisoned".to_string())?;
        let Some(Wire::Stdio(lines)) = w.as_mut() else {
            return Err(self
                .closed_reason()
                .unwrap_or_else(|| "the server's stdin is closed".into()));
        };
        lines.try_send(line.to_vec()).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full(_) => {
                format!("the server is not reading its input ({MAX_QUEUED_LINES} lines waiting)")
            }
            std::sync::mpsc::TrySendError::Disconnected(_) => "the server's stdin is closed".into(),
        })
    }

    /// Fails the waiting request `id` (an HTTP POST that got no answer).
    pub(crate) fn fail_request(&self, id: u64, why: String) {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(w) = waiter {
            let _ = w.try_send(Err(CallError::Closed(why)));
        }
    }

    /// Whether request `id` still waits for its answer.
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending
            .lock()
            .map(|p| p.contains_key(&id))
            .unwrap_or(false)
    }

    /// Hands one parsed line from the server on (HTTP bodies and events).
    pub(crate) fn receive(&self, line: &[u8]) -> Result<(), ProtoError> {
        for m in proto::parse_line(line)? {
            self.dispatch(m, &self.hook.clone());
        }
        Ok(())
    }

    /// Why the connection closed, once it has.
    pub fn closed_reason(&self) -> Option<String> {
        self.closed.lock().ok().and_then(|c| c.clone())
    }

    /// When the connection closed, once it has.
    pub fn closed_at(&self) -> Option<Instant> {
        self.closed_at.lock().ok().and_then(|c| *c)
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        self.closed_reason().is_none()
    }

    /// The last bytes the server wrote to stderr (lossy UTF-8).
    pub fn stderr_tail(&self) -> String {
        let tail = match self.stderr_tail.lock() {
            Ok(t) => t.iter().copied().collect::<Vec<u8>>(),
            Err(_) => Vec::new(),
        };
        String::from_utf8_lossy(&tail).trim().to_string()
    }

    /// Closes the connection: kills the child, fails every waiting request
    /// with `why`.
    pub fn close(&self, why: String) {
        if let Ok(mut c) = self.closed.lock()
            && c.is_none()
        {
            *c = Some(why.clone());
            if let Ok(mut at) = self.closed_at.lock() {
                *at = Some(Instant::now());
            }
        }
        let wire = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(Wire::Http(h)) = wire {
            h.end_session();
        }
        if let Ok(mut child) = self.child.lock()
            && let Some(child) = child.as_mut()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let waiters = match self.pending.lock() {
            Ok(mut p) => core::mem::take(&mut *p),
            Err(_) => BTreeMap::new(),
        };
        let why = self.closed_reason().unwrap_or(why);
        for (_, w) in waiters {
            let _ = w.try_send(Err(CallError::Closed(why.clone())));
        }
    }

    fn on_eof(&self) {
        // Give the child a moment to be reaped so its status is known.
        let mut status = None;
        for _ in 0..20 {
            if let Ok(mut child) = self.child.lock()
                && let Some(Ok(Some(s))) = child.as_mut().map(Child::try_wait)
            {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut why = match status {
            Some(s) => format!("the server exited ({s})"),
            None => "the server closed its stdout".to_string(),
        };
        // The stderr thread may still be copying the last lines.
        std::thread::sleep(Duration::from_millis(20));
        let tail = self.stderr_tail();
        if !tail.is_empty() {
            let short: String = tail
                .chars()
                .rev()
                .take(400)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            why.push_str(&format!("; stderr: {short}"));
        }
        self.close(why);
    }

    fn dispatch(&self, msg: Incoming, hook: &NotificationHook) {
        match msg {
            Incoming::Response { id, outcome } => {
                let Some(id) = id else { return };
                let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
                if let Some(w) = waiter {
                    let _ = w.try_send(outcome.map_err(CallError::Rpc));
                }
            }
            Incoming::Request { id, method, .. } => {
                let answer = proto::answer_server_request(&method, &self.roots);
                let _ = self.write(&proto::response_line(&id, answer));
            }
            Incoming::Notification { method, params } => {
                if method == "notifications/progress"
                    && let Some(id) = params.get("progressToken").and_then(Value::as_u64)
                {
                    let waiting = self.pending.lock().is_ok_and(|p| p.contains_key(&id));
                    if waiting && let Ok(mut p) = self.progress.lock() {
                        p.insert(id, Instant::now());
                    }
                }
                hook(&method, &params)
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Ok(mut w) = self.writer.lock() {
            w.take();
        }
        if let Ok(mut child) = self.child.lock()
            && let Some(child) = child.as_mut()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the thread writing queued lines to `stdin`; `None` when no
/// thread can start.
fn spawn_writer(mut stdin: ChildStdin) -> Option<SyncSender<Vec<u8>>> {
    let (tx, rx) = sync_channel::<Vec<u8>>(MAX_QUEUED_LINES);
    std::thread::Builder::new()
        .name("dsh-mcp-writer".into())
        .spawn(move || {
            while let Ok(line) = rx.recv() {
                if stdin.write_all(&line).and_then(|()| stdin.flush()).is_err() {
                    return;
                }
            }
        })
        .ok()?;
    Some(tx)
}

fn read_loop(mut stdout: impl Read, conn: Weak<Connection>, hook: NotificationHook) {
    let mut framer = proto::LineFramer::new(proto::MAX_LINE_BYTES);
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = Vec::new();
    loop {
        let n = match stdout.read(&mut buf) {
            Ok(0) | Err(_) => {
                if let Some(c) = conn.upgrade() {
                    c.on_eof();
                }
                return;
            }
            Ok(n) => n,
        };
        framer.push(buf.get(..n).unwrap_or(&[]), &mut lines);
        let Some(c) = conn.upgrade() else { return };
        for line in lines.drain(..) {
            let parsed = line.and_then(|l| proto::parse_line(&l));
            match parsed {
                Ok(msgs) => {
                    for m in msgs {
                        c.dispatch(m, &hook);
                    }
                }
                Err(e) => {
                    protocol_failure(&c, &e);
                    return;
                }
            }
        }
    }
}

/// A server that breaks the framing or the protocol cannot be trusted to
/// answer anything else: the connection closes, waiting calls fail now.
fn protocol_failure(conn: &Connection, e: &ProtoError) {
    conn.close(format!("{e}; the connection was closed"));
}

fn drain_stderr(mut stderr: impl Read, log: Option<PathBuf>, tail: Arc<Mutex<VecDeque<u8>>>) {
    let mut file = log.and_then(|p| {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let mut written: u64 = 0;
    let mut buf = [0u8; 8192];
    loop {
        let n = match stderr.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = buf.get(..n).unwrap_or(&[]);
        if let Some(f) = file.as_mut() {
            let room = MAX_LOG_BYTES.saturating_sub(written) as usize;
            let part = chunk.get(..room.min(chunk.len())).unwrap_or(&[]);
            if !part.is_empty() && f.write_all(part).is_ok() {
                written += part.len() as u64;
                if written >= MAX_LOG_BYTES {
                    let _ = f.write_all(b"\n[dsh: log cap reached; the rest is dropped]\n");
                }
            }
        }
        if let Ok(mut t) = tail.lock() {
            t.extend(chunk.iter().copied());
            while t.len() > STDERR_TAIL_BYTES {
                t.pop_front();
            }
        }
    }
}
