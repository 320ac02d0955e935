//! Newline-delimited JSON-RPC 2.0 over stdio, the ACP stdio transport.
//!
//! One JSON object per line in both directions; nothing else is ever
//! written to the output. The reader classifies every input line into an
//! [`Incoming`] message (a malformed line becomes [`Incoming::Invalid`]
//! with the JSON-RPC error to answer), routes responses to the requests
//! this side sent ([`Peer::request`]) itself, and ends with
//! [`Incoming::Closed`] at end of input. A line longer than [`MAX_LINE`]
//! bytes is skipped (never buffered whole) and answered with an error.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1::{Error, ErrorCode, RequestId};
use dsh_tools::CancelToken;
use serde::Serialize;
use serde_json::{Map, Value, json};

/// The longest input line accepted (bytes, newline excluded).
pub const MAX_LINE: usize = 16 << 20;

/// How often a thread waiting for the client checks its cancel token.
pub const POLL: Duration = Duration::from_millis(50);

/// An error answer as one line of text (message, then string data).
pub fn error_text(e: &Error) -> String {
    match &e.data {
        Some(Value::String(d)) => format!("{}: {d}", e.message),
        _ => e.message.clone(),
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

type Reply = Box<dyn FnOnce(Result<Value, Error>) + Send>;

/// The sending half of the connection (shared by the server loop and the
/// threads waiting for the client's answers).
pub struct Peer {
    out: Mutex<Box<dyn Write + Send>>,
    pending: Mutex<HashMap<i64, Reply>>,
    next_id: AtomicI64,
    closed: AtomicBool,
}

impl Peer {
    /// A peer writing to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Arc<Peer> {
        Arc::new(Peer {
            out: Mutex::new(out),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicI64::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Whether the output failed or the input ended.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Marks the connection closed and fails every pending request.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let pending: Vec<Reply> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, r)| r).collect(),
            Err(_) => Vec::new(),
        };
        for reply in pending {
            reply(Err(Error::internal_error().data("the client disconnected")));
        }
    }

    /// Writes one message line; a write failure closes the connection.
    fn write(&self, message: &Value) {
        if self.is_closed() {
            return;
        }
        let mut line = match serde_json::to_vec(message) {
            Ok(l) => l,
            Err(_) => return,
        };
        line.push(b'\n');
        let ok = match self.out.lock() {
            Ok(mut out) => out.write_all(&line).and_then(|()| out.flush()).is_ok(),
            Err(_) => false,
        };
        if !ok {
            self.close();
        }
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

    /// Sends a request; `reply` runs (on the reader thread) with the
    /// client's answer, or with an error when the client disconnects first.
    pub fn request<T: Serialize>(
        &self,
        method: &str,
        params: &T,
        reply: impl FnOnce(Result<Value, Error>) + Send + 'static,
    ) {
        let params = match serde_json::to_value(params) {
            Ok(p) => p,
            Err(e) => return reply(Err(Error::internal_error().data(e.to_string()))),
        };
        if self.is_closed() {
            return reply(Err(Error::internal_error().data("the client disconnected")));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, Box::new(reply));
        }
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// Sends `method` and waits (on the calling thread) for the answer, the
    /// client's departure or `cancel`, whichever comes first. `Err` is a
    /// message for the model.
    pub fn call<T: Serialize>(
        &self,
        method: &str,
        params: &T,
        cancel: &CancelToken,
    ) -> Result<Value, String> {
        let answer = self.start(method, params);
        loop {
            match answer.recv_timeout(POLL) {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => return Err(error_text(&e)),
                Err(RecvTimeoutError::Timeout) if cancel.is_cancelled() => {
                    return Err("cancelled".into());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("the client disconnected".into());
                }
            }
        }
    }

    /// Sends `method`; the answer arrives on the returned channel.
    pub fn start<T: Serialize>(&self, method: &str, params: &T) -> Receiver<Result<Value, Error>> {
        let (tx, rx) = mpsc::channel();
        self.request(method, params, move |answer| {
            let _ = tx.send(answer);
        });
        rx
    }

    /// Hands a response to the request it answers; unknown ids are dropped.
    fn route(&self, id: &Value, result: Result<Value, Error>) {
        let Some(id) = id.as_i64() else { return };
        let reply = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(reply) = reply {
            reply(result);
        }
    }
}

/// One line of input, bounded.
enum Line {
    Eof,
    Text(Vec<u8>),
    TooLong,
}

/// Reads up to the next newline, keeping at most [`MAX_LINE`] bytes: a
/// longer line is consumed and reported as [`Line::TooLong`].
fn read_line(input: &mut dyn BufRead) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
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
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        input.consume(done);
        if ended {
            break;
        }
    }
    Ok(if too_long {
        Line::TooLong
    } else {
        Line::Text(line)
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
                peer.route(&id_value, Err(response_error(e)));
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
/// with [`Incoming::Closed`] (and closes the peer). Stops early when
/// `deliver` returns `false`.
pub fn read_loop(peer: &Peer, mut input: impl BufRead, mut deliver: impl FnMut(Incoming) -> bool) {
    loop {
        let line = match read_line(&mut input) {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::TooLong) => Some(Incoming::Invalid {
                id: RequestId::Null,
                error: error(
                    ErrorCode::InvalidRequest,
                    format!("Invalid Request: the message is longer than {MAX_LINE} bytes"),
                ),
            }),
            Ok(Line::Text(bytes)) => classify(peer, &bytes),
        };
        if let Some(message) = line
            && !deliver(message)
        {
            break;
        }
    }
    peer.close();
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
        assert!(matches!(got[0], Line::TooLong));
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
            tx.send(r.map_err(|e| e.message)).unwrap()
        });
        peer.request("b", &json!({}), move |r| {
            tx2.send(r.map_err(|e| e.message)).unwrap()
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
        // An unknown id is dropped; closing fails what is still pending.
        let (tx3, rx3) = std::sync::mpsc::channel();
        peer.request("c", &json!({}), move |r| tx3.send(r.is_err()).unwrap());
        assert!(classify(&peer, br#"{"jsonrpc":"2.0","id":99,"result":1}"#).is_none());
        peer.close();
        assert!(rx3.recv().unwrap());
    }
}
