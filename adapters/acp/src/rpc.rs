//! Newline-delimited JSON-RPC 2.0 over stdio, the ACP stdio transport.
//!
//! One JSON object per line in both directions; nothing else is ever
//! written to the output. The reader classifies every input line into an
//! [`Incoming`] message (a malformed line becomes [`Incoming::Invalid`]
//! with the JSON-RPC error to answer), routes responses to the requests
//! this side sent ([`Peer::request`]) itself, and ends with
//! [`Incoming::Closed`] at end of input.
//!
//! Bounds (each failure is typed, see [`CallError`]):
//! - A line longer than [`MAX_LINE`] bytes is skipped in bounded memory
//!   (never buffered whole). Its id is looked for in its first and last
//!   [`ID_WINDOW`] bytes: an over-long *answer* fails the request it
//!   answers ([`CallError::AnswerTooLong`]); an over-long *request* is
//!   answered `-32600` under its id; when no id can be found the line is
//!   answered `-32600` with a `null` id, and a request it may have
//!   answered ends by its timeout.
//! - [`Peer::call`] waits at most [`PeerConfig::client_timeout`]
//!   ([`CallError::Timeout`]); a late answer is dropped with a note on
//!   stderr.
//! - Output goes through a queue of at most
//!   [`PeerConfig::max_queued_bytes`] to a writer thread of its own, so a
//!   client that stops reading never blocks the reader or the caller past
//!   a bound: a message that finds the queue full waits up to
//!   [`PeerConfig::client_timeout`] for room, or [`PeerConfig::exit_grace`]
//!   once the input has ended or [`Peer::begin_exit`] was called; then the
//!   client is taken as gone, the output closes and every message not yet
//!   written is dropped (counted, see [`Peer::finish`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1::{Error, ErrorCode, RequestId};
use dsh_host::CancelToken;
use serde::Serialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value, json};

/// The longest input line accepted (bytes, newline excluded).
pub const MAX_LINE: usize = 16 << 20;

/// Bytes kept at each end of an over-long line to find its id.
pub const ID_WINDOW: usize = 4096;

/// How often a thread waiting for the client checks its cancel token.
pub const POLL: Duration = Duration::from_millis(50);

/// An error answer as one line of text (message, then string data).
pub fn error_text(e: &Error) -> String {
    match &e.data {
        Some(Value::String(d)) => format!("{}: {d}", e.message),
        _ => e.message.clone(),
    }
}

/// Why a request this side sent got no result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CallError {
    /// The client answered with this error.
    Client(Error),
    /// The client's answer was longer than `limit` bytes ([`MAX_LINE`]).
    AnswerTooLong {
        /// The line limit.
        limit: usize,
    },
    /// No answer to `method` within `after` ([`PeerConfig::client_timeout`]).
    Timeout {
        /// The method called.
        method: String,
        /// The timeout.
        after: Duration,
    },
    /// The client closed its input, or the output to it failed or was
    /// closed, before it answered.
    Disconnected,
    /// The caller's cancel token fired first.
    Cancelled,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Client(e) => f.write_str(&error_text(e)),
            CallError::AnswerTooLong { limit } => {
                write!(f, "the client's answer is longer than {limit} bytes")
            }
            CallError::Timeout { method, after } => write!(
                f,
                "the client did not answer {method} within {} s",
                after.as_secs_f64()
            ),
            CallError::Disconnected => f.write_str("the client disconnected"),
            CallError::Cancelled => f.write_str("cancelled"),
        }
    }
}

impl std::error::Error for CallError {}

impl From<CallError> for String {
    fn from(e: CallError) -> String {
        e.to_string()
    }
}

/// What the reader hands to the server loop.
#[derive(Debug)]
pub enum Incoming {
    /// A request: must be answered with [`Peer::respond`].
    Request {
        /// Its id.
        id: RequestId,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification: never answered.
    Notification {
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A line that is not a valid message: answer `error` to `id` (`null`
    /// when the id could not be read).
    Invalid {
        /// The id to answer.
        id: RequestId,
        /// The error.
        error: Error,
    },
    /// End of input, or a read error: the client is gone.
    Closed,
}

/// A callback for the answer to a request this side sent.
type Reply = Box<dyn FnOnce(Result<Value, CallError>) + Send>;

/// How a [`Peer`] bounds its waits and its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerConfig {
    /// How long the client may keep this side waiting: for the answer to a
    /// [`Peer::call`], or for room in a full output queue (60 s).
    pub client_timeout: Duration,
    /// Bytes of output queued for the writer, the line being written
    /// included (64 MiB); a single larger message is still sent when
    /// nothing else is queued.
    pub max_queued_bytes: usize,
    /// How long the client gets to take what is queued once the input has
    /// ended or the server is ending (5 s).
    pub exit_grace: Duration,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            client_timeout: Duration::from_secs(60),
            max_queued_bytes: 64 << 20,
            exit_grace: Duration::from_secs(5),
        }
    }
}

/// Ids of calls that timed out, remembered to note their late answers.
const EXPIRED_KEPT: usize = 64;

/// Whether the writer thread runs.
enum Writer {
    /// Not yet started: the output, until the first message.
    Idle(Box<dyn Write + Send>),
    /// Started (or could not start).
    Started,
}

/// The connection's shared state.
struct State {
    pending: HashMap<i64, Reply>,
    expired: VecDeque<i64>,
    queue: VecDeque<Vec<u8>>,
    /// Bytes in `queue` and in the line being written.
    queued: usize,
    /// A line is being written.
    in_flight: bool,
    writer: Writer,
    /// Nothing more is written; queued lines are dropped.
    output_closed: bool,
    /// The input ended: no answer can arrive.
    input_closed: bool,
    /// When the input ended or [`Peer::begin_exit`] was called.
    ending: Option<Instant>,
    /// The [`Peer`] handle is gone: the writer ends once the queue is
    /// empty.
    dropped_handle: bool,
    /// Messages dropped unsent.
    unsent: usize,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a change, until `deadline` at the latest.
    fn wait_until<'a>(
        &self,
        st: MutexGuard<'a, State>,
        deadline: Instant,
    ) -> MutexGuard<'a, State> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.changed
            .wait_timeout(st, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// Closes the output: drops what is queued (counted) and takes every
/// pending reply, to be failed once the lock is released.
fn close_output(st: &mut State) -> Vec<Reply> {
    if !st.output_closed {
        st.output_closed = true;
        st.unsent += st.queue.len() + usize::from(st.in_flight);
        st.queue.clear();
        st.queued = 0;
    }
    st.pending.drain().map(|(_, r)| r).collect()
}

fn fail_all(replies: Vec<Reply>) {
    for reply in replies {
        reply(Err(CallError::Disconnected));
    }
}

/// The writer thread: writes queued lines in order until the output
/// closes or fails, or the handle is gone and the queue is empty.
fn write_loop(shared: &Shared, mut out: Box<dyn Write + Send>) {
    loop {
        let line = {
            let mut st = shared.lock();
            loop {
                if st.output_closed || (st.dropped_handle && st.queue.is_empty()) {
                    return;
                }
                if let Some(line) = st.queue.pop_front() {
                    st.in_flight = true;
                    break line;
                }
                st = shared
                    .changed
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        let ok = out.write_all(&line).and_then(|()| out.flush()).is_ok();
        let failed = {
            let mut st = shared.lock();
            st.in_flight = false;
            st.queued = st.queued.saturating_sub(line.len());
            let failed = if ok {
                Vec::new()
            } else {
                close_output(&mut st)
            };
            shared.changed.notify_all();
            failed
        };
        if !ok {
            fail_all(failed);
            return;
        }
    }
}

/// The sending half of the connection (shared by the server loop and the
/// threads waiting for the client's answers).
pub struct Peer {
    shared: Arc<Shared>,
    next_id: AtomicI64,
    config: PeerConfig,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.shared.lock().dropped_handle = true;
        self.shared.changed.notify_all();
    }
}

impl Peer {
    /// A peer writing to `out` with the default [`PeerConfig`].
    pub fn new(out: Box<dyn Write + Send>) -> Arc<Peer> {
        Peer::with_config(out, PeerConfig::default())
    }

    /// A peer writing to `out` (from a thread of its own, started with
    /// the first message) within `config`'s bounds.
    pub fn with_config(out: Box<dyn Write + Send>, config: PeerConfig) -> Arc<Peer> {
        Arc::new(Peer {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    pending: HashMap::new(),
                    expired: VecDeque::new(),
                    queue: VecDeque::new(),
                    queued: 0,
                    in_flight: false,
                    writer: Writer::Idle(out),
                    output_closed: false,
                    input_closed: false,
                    ending: None,
                    dropped_handle: false,
                    unsent: 0,
                }),
                changed: Condvar::new(),
            }),
            next_id: AtomicI64::new(0),
            config,
        })
    }

    /// Whether the output is closed (it failed, the client stopped
    /// reading, or [`Peer::finish`] ran): nothing more reaches the client.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().output_closed
    }

    /// Whether the input ended: no answer from the client can arrive.
    pub fn input_closed(&self) -> bool {
        self.shared.lock().input_closed
    }

    /// The input ended: fails every pending request
    /// ([`CallError::Disconnected`]), and later ones at once; what is
    /// still to be written is written, within [`PeerConfig::exit_grace`]
    /// when the queue is full.
    pub fn input_ended(&self) {
        let pending: Vec<Reply> = {
            let mut st = self.shared.lock();
            st.input_closed = true;
            st.ending.get_or_insert_with(Instant::now);
            st.pending.drain().map(|(_, r)| r).collect()
        };
        self.shared.changed.notify_all();
        fail_all(pending);
    }

    /// The server is ending (a termination signal): a message waiting for
    /// room in the queue waits at most [`PeerConfig::exit_grace`] more.
    pub fn begin_exit(&self) {
        self.shared.lock().ending.get_or_insert_with(Instant::now);
        self.shared.changed.notify_all();
    }

    /// Gives the writer up to [`PeerConfig::exit_grace`] to write what is
    /// queued, then closes the output (pending requests fail). Returns how
    /// many messages were never (or only partly) written, over the whole
    /// connection.
    pub fn finish(&self) -> usize {
        let deadline = Instant::now() + self.config.exit_grace;
        let (failed, unsent) = {
            let mut st = self.shared.lock();
            st.ending.get_or_insert_with(Instant::now);
            while !st.output_closed && st.queued > 0 && Instant::now() < deadline {
                st = self.shared.wait_until(st, deadline);
            }
            let failed = close_output(&mut st);
            (failed, st.unsent)
        };
        self.shared.changed.notify_all();
        fail_all(failed);
        unsent
    }

    /// Queues one message line for the writer; false when it was dropped
    /// (the output is closed, or the client took no room in time).
    fn write(&self, message: &Value) -> bool {
        let Ok(mut line) = serde_json::to_vec(message) else {
            return false;
        };
        line.push(b'\n');
        let started = Instant::now();
        let mut st = self.shared.lock();
        loop {
            if st.output_closed {
                st.unsent += 1;
                return false;
            }
            let fits = st
                .queued
                .checked_add(line.len())
                .is_some_and(|n| n <= self.config.max_queued_bytes);
            if st.queued == 0 || fits {
                break;
            }
            let mut limit = started + self.config.client_timeout;
            if let Some(at) = st.ending {
                limit = limit.min(at.max(started) + self.config.exit_grace);
            }
            if Instant::now() >= limit {
                // The client stopped reading: it is taken as gone.
                st.unsent += 1;
                let failed = close_output(&mut st);
                let unsent = st.unsent;
                drop(st);
                self.shared.changed.notify_all();
                eprintln!(
                    "dsh acp: the client stopped reading; closing the output ({unsent} messages not sent)"
                );
                fail_all(failed);
                return false;
            }
            st = self.shared.wait_until(st, limit);
        }
        st.queued += line.len();
        st.queue.push_back(line);
        if let Writer::Idle(_) = st.writer
            && let Writer::Idle(out) = std::mem::replace(&mut st.writer, Writer::Started)
        {
            let shared = self.shared.clone();
            let spawned = thread::Builder::new()
                .name("dsh-acp-stdout".into())
                .spawn(move || write_loop(&shared, out));
            if let Err(e) = spawned {
                let failed = close_output(&mut st);
                drop(st);
                eprintln!("dsh acp: cannot start the writer thread: {e}");
                fail_all(failed);
                return false;
            }
        }
        drop(st);
        self.shared.changed.notify_all();
        true
    }

    /// Answers request `id`.
    pub fn respond<T: Serialize>(&self, id: &RequestId, result: Result<T, Error>) {
        let message = match result.map(|r| serde_json::to_value(r)) {
            Ok(Ok(value)) => json!({"jsonrpc": "2.0", "id": id, "result": value}),
            Ok(Err(e)) => json!({"jsonrpc": "2.0", "id": id,
                "error": Error::internal_error().data(e.to_string())}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        self.write(&message);
    }

    /// Sends a notification.
    pub fn notify<T: Serialize>(&self, method: &str, params: &T) {
        if let Ok(params) = serde_json::to_value(params) {
            self.write(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
        }
    }

    /// Sends a request; `reply` runs (on the reader thread, or the thread
    /// that found the client gone) with the client's answer, or with an
    /// error when the client disconnects first. It has no timeout of its
    /// own (a permission request waits for the user).
    pub fn request<T: Serialize>(
        &self,
        method: &str,
        params: &T,
        reply: impl FnOnce(Result<Value, CallError>) + Send + 'static,
    ) {
        self.send_request(method, params, Box::new(reply));
    }

    /// Sends a request; the id it was sent under (`None`: `reply` already
    /// ran with an error).
    fn send_request<T: Serialize>(&self, method: &str, params: &T, reply: Reply) -> Option<i64> {
        let params = match serde_json::to_value(params) {
            Ok(p) => p,
            Err(e) => {
                reply(Err(CallError::Client(
                    Error::internal_error().data(e.to_string()),
                )));
                return None;
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        {
            let mut st = self.shared.lock();
            if st.input_closed || st.output_closed {
                drop(st);
                reply(Err(CallError::Disconnected));
                return None;
            }
            st.pending.insert(id, reply);
        }
        if !self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})) {
            self.fail(id, CallError::Disconnected);
        }
        Some(id)
    }

    /// Sends `method` and waits (on the calling thread) for the answer, the
    /// client's departure, `cancel` or [`PeerConfig::client_timeout`],
    /// whichever comes first. A call that gave up forgets its id: a late
    /// answer is dropped with a note.
    pub fn call<T: Serialize>(
        &self,
        method: &str,
        params: &T,
        cancel: &CancelToken,
    ) -> Result<Value, CallError> {
        let (tx, answer) = mpsc::channel();
        let reply = Box::new(move |a| {
            let _ = tx.send(a);
        });
        let Some(id) = self.send_request(method, params, reply) else {
            return answer.recv().unwrap_or(Err(CallError::Disconnected));
        };
        let deadline = Instant::now() + self.config.client_timeout;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now()).min(POLL);
            match answer.recv_timeout(wait) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => return Err(CallError::Disconnected),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let gave_up = if cancel.is_cancelled() {
                CallError::Cancelled
            } else if Instant::now() >= deadline {
                CallError::Timeout {
                    method: method.to_string(),
                    after: self.config.client_timeout,
                }
            } else {
                continue;
            };
            if !self.forget(id) {
                // The answer arrived meanwhile.
                if let Ok(result) = answer.try_recv() {
                    return result;
                }
            }
            return Err(gave_up);
        }
    }

    /// Sends `method`; the answer arrives on the returned channel (no
    /// timeout: the caller bounds its wait).
    pub fn start<T: Serialize>(
        &self,
        method: &str,
        params: &T,
    ) -> Receiver<Result<Value, CallError>> {
        let (tx, rx) = mpsc::channel();
        self.request(method, params, move |answer| {
            let _ = tx.send(answer);
        });
        rx
    }

    /// Stops waiting for request `id` (remembered, to note a late answer);
    /// false when it was no longer pending.
    fn forget(&self, id: i64) -> bool {
        let mut st = self.shared.lock();
        if st.pending.remove(&id).is_none() {
            return false;
        }
        if st.expired.len() == EXPIRED_KEPT {
            st.expired.pop_front();
        }
        st.expired.push_back(id);
        true
    }

    /// Fails pending request `id` with `error`; false when none waits.
    fn fail(&self, id: i64, error: CallError) -> bool {
        let reply = self.shared.lock().pending.remove(&id);
        match reply {
            Some(reply) => {
                reply(Err(error));
                true
            }
            None => false,
        }
    }

    /// Hands a response to the request it answers; an answer to a call
    /// that gave up is dropped with a note, other unknown ids silently.
    fn route(&self, id: &Value, result: Result<Value, CallError>) {
        let Some(id) = id.as_i64() else { return };
        let reply = {
            let mut st = self.shared.lock();
            let reply = st.pending.remove(&id);
            if reply.is_none()
                && let Some(at) = st.expired.iter().position(|&e| e == id)
            {
                st.expired.remove(at);
                drop(st);
                eprintln!("dsh acp: dropped the late answer to request {id}");
                return;
            }
            reply
        };
        if let Some(reply) = reply {
            reply(result);
        }
    }
}

/// One line of input, bounded.
enum Line {
    Eof,
    Text(Vec<u8>),
    /// Longer than [`MAX_LINE`]: its first and last [`ID_WINDOW`] bytes.
    TooLong {
        head: Vec<u8>,
        tail: Vec<u8>,
    },
}

/// Reads up to the next newline, keeping at most [`MAX_LINE`] bytes: a
/// longer line is consumed and reported as [`Line::TooLong`] with its two
/// ends.
fn read_line(input: &mut dyn BufRead) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut tail: Option<Vec<u8>> = None;
    let mut any = false;
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            if !any {
                return Ok(Line::Eof);
            }
            break;
        }
        any = true;
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        let ended = chunk.len() < done;
        match tail.as_mut() {
            Some(t) => keep_last(t, chunk),
            None if line.len() + chunk.len() > MAX_LINE => {
                let mut t = line[line.len().saturating_sub(ID_WINDOW)..].to_vec();
                keep_last(&mut t, chunk);
                tail = Some(t);
                line.truncate(ID_WINDOW);
                line.extend_from_slice(&chunk[..chunk.len().min(ID_WINDOW - line.len())]);
                line.shrink_to_fit();
            }
            None => line.extend_from_slice(chunk),
        }
        input.consume(done);
        if ended {
            break;
        }
    }
    Ok(match tail {
        Some(tail) => Line::TooLong { head: line, tail },
        None => Line::Text(line),
    })
}

/// Appends `chunk` to `tail`, keeping its last [`ID_WINDOW`] bytes.
fn keep_last(tail: &mut Vec<u8>, chunk: &[u8]) {
    let chunk = &chunk[chunk.len().saturating_sub(ID_WINDOW)..];
    tail.extend_from_slice(chunk);
    if tail.len() > ID_WINDOW {
        tail.drain(..tail.len() - ID_WINDOW);
    }
}

/// What the first bytes of a cut-off message show.
#[derive(Default)]
struct Head {
    /// The first top-level `id`, when a scalar.
    id: Option<Value>,
    /// A top-level `method` key was seen.
    method: bool,
    /// A top-level `result` or `error` key was seen.
    response: bool,
}

/// Reads top-level members of a (cut-off) object into a [`Head`] until
/// the input runs out.
struct HeadSeed<'a>(&'a mut Head);

impl<'de> DeserializeSeed<'de> for HeadSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeadSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" if self.0.id.is_none() => {
                    let v: Value = map.next_value()?;
                    if !v.is_object() && !v.is_array() {
                        self.0.id = Some(v);
                    }
                }
                k => {
                    self.0.method |= k == "method";
                    self.0.response |= k == "result" || k == "error";
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The head of a cut-off message.
fn scan_head(head: &[u8]) -> Head {
    let mut out = Head::default();
    let mut d = serde_json::Deserializer::from_slice(head);
    // The input is cut: running out of it is the expected end.
    let _ = HeadSeed(&mut out).deserialize(&mut d);
    out
}

/// The top-level `id` among the scalar members that end a message (`…,
/// "id": 7}`), read backwards from its last bytes.
fn scan_tail(tail: &[u8]) -> Option<Value> {
    let mut i = tail.len();
    let skip_ws = |i: &mut usize| {
        while *i > 0 && tail[*i - 1].is_ascii_whitespace() {
            *i -= 1;
        }
    };
    skip_ws(&mut i);
    if i == 0 || tail[i - 1] != b'}' {
        return None;
    }
    i -= 1;
    loop {
        skip_ws(&mut i);
        let value_end = i;
        let value_start = scalar_start(tail, i)?;
        i = value_start;
        skip_ws(&mut i);
        if i == 0 || tail[i - 1] != b':' {
            return None;
        }
        i -= 1;
        skip_ws(&mut i);
        let key_end = i;
        let key_start = string_start(tail, i)?;
        let key: String = serde_json::from_slice(&tail[key_start..key_end]).ok()?;
        if key == "id" {
            return serde_json::from_slice(&tail[value_start..value_end]).ok();
        }
        i = key_start;
        skip_ws(&mut i);
        if i == 0 || tail[i - 1] != b',' {
            return None;
        }
        i -= 1;
    }
}

/// Where the JSON string ending just before `end` starts (its opening
/// quote), or `None`.
fn string_start(t: &[u8], end: usize) -> Option<usize> {
    if end == 0 || t[end - 1] != b'"' {
        return None;
    }
    let mut j = end - 1;
    while j > 0 {
        j -= 1;
        if t[j] == b'"' {
            let slashes = t[..j].iter().rev().take_while(|&&b| b == b'\\').count();
            if slashes % 2 == 0 {
                return Some(j);
            }
        }
    }
    None
}

/// Where the scalar (string, number, `true`, `false`, `null`) ending just
/// before `end` starts, or `None` (a nested value, or nothing).
fn scalar_start(t: &[u8], end: usize) -> Option<usize> {
    if end > 0 && t[end - 1] == b'"' {
        return string_start(t, end);
    }
    let start = t[..end]
        .iter()
        .rposition(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
        .map_or(0, |p| p + 1);
    (start < end).then_some(start)
}

/// What an over-long line becomes: an answer fails the request it
/// answers (`None`), a request is refused under its id.
fn classify_too_long(peer: &Peer, head: &[u8], tail: &[u8]) -> Option<Incoming> {
    let seen = scan_head(head);
    let id = seen.id.or_else(|| scan_tail(tail));
    if seen.response
        && !seen.method
        && let Some(n) = id.as_ref().and_then(Value::as_i64)
        && peer.fail(n, CallError::AnswerTooLong { limit: MAX_LINE })
    {
        return None;
    }
    let id = id
        .as_ref()
        .and_then(|v| request_id(v).ok())
        .filter(|_| seen.method)
        .unwrap_or(RequestId::Null);
    Some(Incoming::Invalid {
        id,
        error: error(
            ErrorCode::InvalidRequest,
            format!("Invalid Request: the message is longer than {MAX_LINE} bytes"),
        ),
    })
}

fn error(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(i32::from(code), message)
}

/// Classifies one input line (`None`: a blank line or a response).
fn classify(peer: &Peer, bytes: &[u8]) -> Option<Incoming> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            return Some(Incoming::Invalid {
                id: RequestId::Null,
                error: error(ErrorCode::ParseError, format!("Parse error: {e}")),
            });
        }
    };
    let Value::Object(map) = value else {
        return Some(Incoming::Invalid {
            id: RequestId::Null,
            error: error(
                ErrorCode::InvalidRequest,
                "Invalid Request: expected a JSON-RPC 2.0 object (batches are not supported)",
            ),
        });
    };
    let id = map.get("id").map(request_id);
    let invalid = |message: &str, id: Option<Result<RequestId, ()>>| {
        Some(Incoming::Invalid {
            id: id.and_then(Result::ok).unwrap_or(RequestId::Null),
            error: error(
                ErrorCode::InvalidRequest,
                format!("Invalid Request: {message}"),
            ),
        })
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"", id);
    }
    match map.get("method") {
        Some(Value::String(method)) => {
            let params = map.get("params").cloned().unwrap_or(Value::Null);
            if !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null) {
                return invalid("\"params\" must be an object or an array", id);
            }
            match id {
                None => Some(Incoming::Notification {
                    method: method.clone(),
                    params,
                }),
                Some(Ok(id)) => Some(Incoming::Request {
                    id,
                    method: method.clone(),
                    params,
                }),
                Some(Err(())) => invalid("\"id\" must be a string, an integer or null", None),
            }
        }
        Some(_) => invalid("\"method\" must be a string", id),
        None => {
            let id_value = map.get("id").cloned().unwrap_or(Value::Null);
            if let Some(result) = map.get("result") {
                peer.route(&id_value, Ok(result.clone()));
                None
            } else if let Some(e) = map.get("error") {
                peer.route(&id_value, Err(CallError::Client(response_error(e))));
                None
            } else {
                invalid("a message needs \"method\", \"result\" or \"error\"", id)
            }
        }
    }
}

fn request_id(v: &Value) -> Result<RequestId, ()> {
    match v {
        Value::Null => Ok(RequestId::Null),
        Value::String(s) => Ok(RequestId::Str(s.clone())),
        Value::Number(n) => n.as_i64().map(RequestId::Number).ok_or(()),
        _ => Err(()),
    }
}

fn response_error(e: &Value) -> Error {
    let code = e.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("error without a message");
    let err = Error::new(i32::try_from(code).unwrap_or(-32603), message);
    match e.get("data") {
        Some(d) => err.data(d.clone()),
        None => err,
    }
}

/// Reads `input` until it ends, handing each message to `deliver`; ends
/// with [`Incoming::Closed`] after [`Peer::input_ended`] (the output stays
/// open: what is delivered can still be answered). Stops early when
/// `deliver` returns `false`.
pub fn read_loop(peer: &Peer, mut input: impl BufRead, mut deliver: impl FnMut(Incoming) -> bool) {
    loop {
        let line = match read_line(&mut input) {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::TooLong { head, tail }) => classify_too_long(peer, &head, &tail),
            Ok(Line::Text(bytes)) => classify(peer, &bytes),
        };
        if let Some(message) = line
            && !deliver(message)
        {
            break;
        }
    }
    peer.input_ended();
    deliver(Incoming::Closed);
}

/// A JSON-RPC error with `code` and `message` (for the server's answers).
pub fn rpc_error(code: ErrorCode, message: impl Into<String>) -> Error {
    error(code, message)
}

/// `params` as an object (`null` reads as `{}`) for typed parsing.
pub fn params_object(params: &Value) -> Value {
    match params {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<Line> {
        let mut r = io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            match read_line(&mut r).unwrap() {
                Line::Eof => return out,
                l => out.push(l),
            }
        }
    }

    #[test]
    fn lines_split_on_newlines_across_buffer_refills() {
        let got = lines(b"{\"a\":1}\n\nxyz");
        let texts: Vec<String> = got
            .iter()
            .map(|l| match l {
                Line::Text(t) => String::from_utf8_lossy(t).into_owned(),
                _ => "<too long>".into(),
            })
            .collect();
        assert_eq!(texts, vec!["{\"a\":1}", "", "xyz"]);
    }

    #[test]
    fn an_overlong_line_is_skipped_not_buffered() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\nok\n");
        let got = lines(&input);
        assert!(matches!(&got[0], Line::TooLong { head, tail }
            if head.len() == ID_WINDOW && tail.len() == ID_WINDOW));
        assert!(matches!(&got[1], Line::Text(t) if t == b"ok"));
        assert_eq!(got.len(), 2);
    }

    fn classify_str(s: &str) -> Option<Incoming> {
        let peer = Peer::new(Box::new(io::sink()));
        classify(&peer, s.as_bytes())
    }

    #[test]
    fn malformed_lines_get_the_json_rpc_codes() {
        let code = |s: &str| match classify_str(s) {
            Some(Incoming::Invalid { error, .. }) => i32::from(error.code),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(code("{not json"), -32700);
        assert_eq!(code("[1,2]"), -32600);
        assert_eq!(code("42"), -32600);
        assert_eq!(code(r#"{"id":1,"method":"x"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#), -32600);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#),
            -32600
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), -32600);
        assert!(classify_str("   ").is_none());
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","id":"a","method":"m"}"#),
            Some(Incoming::Request { id: RequestId::Str(s), .. }) if s == "a"
        ));
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","method":"m","params":{}}"#),
            Some(Incoming::Notification { .. })
        ));
    }

    #[test]
    fn responses_reach_the_request_that_asked() {
        let peer = Peer::new(Box::new(io::sink()));
        let (tx, rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        peer.request("a", &json!({}), move |r| {
            tx.send(r.map_err(|e| e.to_string())).unwrap()
        });
        peer.request("b", &json!({}), move |r| {
            tx2.send(r.map_err(|e| e.to_string())).unwrap()
        });
        assert!(
            classify(
                &peer,
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"no"}}"#
            )
            .is_none()
        );
        assert!(classify(&peer, br#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#).is_none());
        assert_eq!(rx.recv().unwrap(), Err("no".to_string()));
        assert_eq!(rx.recv().unwrap(), Ok(json!({"ok": true})));
        // An unknown id is dropped; the end of input fails what is still
        // pending, and what is sent after it.
        let (tx3, rx3) = std::sync::mpsc::channel();
        let tx4 = tx3.clone();
        peer.request("c", &json!({}), move |r| tx3.send(r).unwrap());
        assert!(classify(&peer, br#"{"jsonrpc":"2.0","id":99,"result":1}"#).is_none());
        peer.input_ended();
        assert_eq!(rx3.recv().unwrap(), Err(CallError::Disconnected));
        peer.request("d", &json!({}), move |r| tx4.send(r).unwrap());
        assert_eq!(rx3.recv().unwrap(), Err(CallError::Disconnected));
    }

    /// An output that hands each written line to a channel.
    struct Lines(mpsc::Sender<Vec<u8>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.0.send(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// An output whose client never reads: every write blocks until the
    /// test ends.
    struct Stuck(Mutex<mpsc::Receiver<()>>);

    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            let _ = self.0.lock().unwrap().recv();
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn overlong(prefix: &str, suffix: &str) -> Vec<u8> {
        let mut line = prefix.as_bytes().to_vec();
        line.resize(line.len() + MAX_LINE + 1, b'x');
        line.extend_from_slice(suffix.as_bytes());
        line.push(b'\n');
        line
    }

    #[test]
    fn an_overlong_answer_fails_the_request_it_answers_and_the_reader_goes_on() {
        let peer = Peer::new(Box::new(io::sink()));
        let (tx, rx) = mpsc::channel();
        for n in 0..4 {
            let tx = tx.clone();
            peer.request("fs/read_text_file", &json!({}), move |r| {
                tx.send((n, r)).unwrap()
            });
        }
        // The id first (as the SDKs write it), then last; a third answer
        // whose id cannot be found; then an answer that fits.
        let mut input = overlong(r#"{"jsonrpc":"2.0","id":1,"result":{"content":""#, r#""}}"#);
        input.extend(overlong(
            r#"{"jsonrpc":"2.0","result":{"content":""#,
            r#""}, "id" : 2 , "note":"a \"q\"" }"#,
        ));
        input.extend(overlong(
            r#"{"jsonrpc":"2.0","result":{"content":""#,
            r#"\",\"id\":3}"}}"#,
        ));
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n");
        let mut delivered = Vec::new();
        read_loop(&peer, &input[..], |m| {
            delivered.push(m);
            true
        });
        let too_long = Err(CallError::AnswerTooLong { limit: MAX_LINE });
        assert_eq!(rx.recv().unwrap(), (1, too_long.clone()));
        assert_eq!(rx.recv().unwrap(), (2, too_long));
        assert_eq!(rx.recv().unwrap(), (0, Ok(json!({}))));
        // The unmatched one waited until the end of input.
        assert_eq!(rx.recv().unwrap(), (3, Err(CallError::Disconnected)));
        assert!(matches!(
            delivered.as_slice(),
            [Incoming::Invalid { id: RequestId::Null, error }, Incoming::Closed]
                if error.message.contains("longer than 16777216 bytes")
        ));
    }

    #[test]
    fn an_overlong_request_is_refused_under_its_id() {
        let peer = Peer::new(Box::new(io::sink()));
        let mut input = overlong(
            r#"{"jsonrpc":"2.0","id":"r7","method":"session/prompt","params":{"p":""#,
            r#""}}"#,
        );
        input.extend(overlong(
            r#"{"jsonrpc":"2.0","method":"x","params":[""#,
            r#""],"id":8}"#,
        ));
        input.extend(overlong("", ""));
        let mut ids = Vec::new();
        read_loop(&peer, &input[..], |m| {
            if let Incoming::Invalid { id, error } = m {
                assert_eq!(i32::from(error.code), -32600);
                ids.push(id);
            }
            true
        });
        assert_eq!(
            ids,
            [
                RequestId::Str("r7".into()),
                RequestId::Number(8),
                RequestId::Null
            ]
        );
    }

    #[test]
    fn the_tail_scan_reads_only_top_level_scalar_members() {
        let id = |t: &str| scan_tail(t.as_bytes());
        assert_eq!(id(r#"x"}, "id": 7}"#), Some(json!(7)));
        assert_eq!(id(r#"x"},"id":7,"jsonrpc":"2.0"}  "#), Some(json!(7)));
        assert_eq!(id(r#"},"id":"a\"b"}"#), Some(json!("a\"b")));
        // Inside a string, or inside a nested object: not the message's id.
        assert_eq!(id(r#"xx\",\"id\":9}"}"#), None);
        assert_eq!(id(r#"xx","e":{"id":9}}"#), None);
        assert_eq!(id(r#"xx","id":9"#), None);
        assert_eq!(id(""), None);
    }

    #[test]
    fn a_call_times_out_and_its_late_answer_is_dropped() {
        let (tx, written) = mpsc::channel();
        let config = PeerConfig {
            client_timeout: Duration::from_millis(200),
            ..PeerConfig::default()
        };
        let peer = Peer::with_config(Box::new(Lines(tx)), config);
        let (done, finished) = mpsc::channel();
        let caller = {
            let peer = peer.clone();
            thread::spawn(move || {
                let got = peer.call("fs/read_text_file", &json!({}), &CancelToken::new());
                done.send(got).unwrap();
            })
        };
        let got = finished
            .recv_timeout(Duration::from_secs(30))
            .expect("the call gives up");
        caller.join().unwrap();
        assert_eq!(
            got,
            Err(CallError::Timeout {
                method: "fs/read_text_file".into(),
                after: Duration::from_millis(200)
            })
        );
        assert_eq!(
            got.unwrap_err().to_string(),
            "the client did not answer fs/read_text_file within 0.2 s"
        );
        let sent: Value = serde_json::from_slice(&written.recv().unwrap()).unwrap();
        assert_eq!(sent["id"], 0);
        // The late answer goes nowhere; the next call is answered.
        assert!(classify(&peer, br#"{"jsonrpc":"2.0","id":0,"result":{"late":true}}"#).is_none());
        let answerer = {
            let peer = peer.clone();
            thread::spawn(move || {
                let sent: Value = serde_json::from_slice(&written.recv().unwrap()).unwrap();
                let answer = json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"n": 1}});
                classify(&peer, answer.to_string().as_bytes());
            })
        };
        let got = peer.call("fs/read_text_file", &json!({}), &CancelToken::new());
        assert_eq!(got, Ok(json!({"n": 1})));
        answerer.join().unwrap();
    }

    #[test]
    fn a_client_that_stops_reading_never_blocks_the_sender_past_the_exit_grace() {
        let (unblock, blocked) = mpsc::channel();
        // Room for the request and one answer (about 75 bytes each).
        let config = PeerConfig {
            client_timeout: Duration::from_secs(120),
            max_queued_bytes: 200,
            exit_grace: Duration::from_millis(100),
        };
        let peer = Peer::with_config(Box::new(Stuck(Mutex::new(blocked))), config);
        let (tx, pending) = mpsc::channel();
        peer.request("session/request_permission", &json!({}), move |r| {
            tx.send(r).unwrap()
        });
        // The writer is stuck on the request; this answer fills the queue,
        // the next one waits for room.
        peer.respond(&RequestId::Number(1), Ok(json!({"pad": "x".repeat(40)})));
        let (done, finished) = mpsc::channel();
        let sender = {
            let peer = peer.clone();
            thread::spawn(move || {
                peer.respond(&RequestId::Number(2), Ok(json!({"pad": "y".repeat(40)})));
                done.send(()).unwrap();
            })
        };
        assert!(
            finished.recv_timeout(Duration::from_millis(300)).is_err(),
            "the sender waits while the input is open"
        );
        peer.begin_exit();
        finished
            .recv_timeout(Duration::from_secs(30))
            .expect("the sender gives up within the exit grace");
        sender.join().unwrap();
        assert!(peer.is_closed());
        assert_eq!(pending.recv().unwrap(), Err(CallError::Disconnected));
        // The stuck request, the queued answer and the dropped one.
        assert_eq!(peer.finish(), 3);
        drop(unblock);
    }

    #[test]
    fn finish_writes_what_is_queued_in_order() {
        let (tx, written) = mpsc::channel();
        let peer = Peer::new(Box::new(Lines(tx)));
        for n in 0..50 {
            peer.notify("n", &json!({"n": n}));
        }
        assert_eq!(peer.finish(), 0);
        let got: Vec<Value> = written
            .try_iter()
            .map(|l| serde_json::from_slice::<Value>(&l).unwrap()["params"]["n"].clone())
            .collect();
        assert_eq!(got, (0..50).map(|n| json!(n)).collect::<Vec<_>>());
        // Nothing is written after it.
        peer.notify("n", &json!({}));
        assert!(written.try_recv().is_err());
    }

    /// A member `"key": value` as JSON text.
    fn member(key: &str, value: &Value) -> String {
        format!("{}:{}", Value::from(key), value)
    }

    fn scalar() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\{},: ]{0,12}".prop_map(Value::from),
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
        ]
    }

    proptest::proptest! {
        #[test]
        fn the_id_windows_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = scan_head(&bytes);
            let _ = scan_tail(&bytes);
        }

        /// An answer cut in the middle of its big value: its integer id
        /// is found whether it comes before the value or among the scalar
        /// members after it, and the keys seen say it is an answer.
        #[test]
        fn the_id_of_a_cut_answer_is_found_before_or_after_its_value(
            id in proptest::prelude::any::<i64>(),
            before in proptest::collection::vec(("[a-z\"\\\\]{1,6}", scalar()), 0..4),
            after in proptest::collection::vec(("[a-z\"\\\\]{1,6}", scalar()), 0..4),
            id_first in proptest::prelude::any::<bool>(),
            filler in "[a-z\"\\\\{}:,]{1,8}",
        ) {
            let big = Value::from(filler.repeat(3 * ID_WINDOW));
            let mut members: Vec<String> = before
                .iter()
                .filter(|(k, _)| k != "id" && k != "method")
                .map(|(k, v)| member(k, v))
                .collect();
            let id_member = member("id", &Value::from(id));
            if id_first {
                members.push(id_member.clone());
            }
            members.push(member("result", &json!({"content": big})));
            if !id_first {
                members.push(id_member);
            }
            members.extend(after.iter().filter(|(k, _)| k != "id" && k != "method").map(|(k, v)| member(k, v)));
            let line = format!("{{{}}}", members.join(" , "));
            // Both windows come from a line at least three of them long.
            proptest::prop_assume!(line.len() > 3 * ID_WINDOW);
            let head = &line.as_bytes()[..ID_WINDOW];
            let tail = &line.as_bytes()[line.len() - ID_WINDOW..];
            let seen = scan_head(head);
            proptest::prop_assert!(seen.response && !seen.method);
            let found = seen.id.or_else(|| scan_tail(tail));
            proptest::prop_assert_eq!(found, Some(Value::from(id)));
        }
    }
}
