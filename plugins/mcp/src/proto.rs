//! The sans-IO protocol core: JSON-RPC 2.0 framing and messages, the
//! `initialize` handshake with version negotiation, `tools/list` pages,
//! cancellation and the answers to server-to-client requests. Nothing here
//! reads, writes, sleeps or spawns; the transports do.

use serde_json::{Map, Value, json};

/// The protocol version dsh asks for first (the newest it speaks).
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";

/// Every protocol version dsh accepts from a server, newest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Longest JSON-RPC line read from a server (bytes, newline excluded).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Most tools kept from one server; the rest are dropped with a warning.
pub const MAX_TOOLS_PER_SERVER: usize = 1024;

/// Most `tools/list` pages followed for one listing.
pub const MAX_LIST_PAGES: usize = 100;

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// A protocol failure: what the server sent cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtoError {
    /// A line longer than [`MAX_LINE_BYTES`] (or the framer's cap).
    LineTooLong {
        /// The cap in bytes.
        max: usize,
    },
    /// The line is not JSON.
    NotJson(String),
    /// The JSON is not a JSON-RPC 2.0 message.
    NotJsonRpc(String),
    /// The server's `initialize` result is unusable.
    BadInitialize(String),
    /// The server speaks none of [`SUPPORTED_PROTOCOL_VERSIONS`].
    UnsupportedVersion(String),
    /// A `tools/list` result is unusable.
    BadToolList(String),
}

impl core::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProtoError::LineTooLong { max } => {
                write!(f, "the server sent a line longer than {max} bytes")
            }
            ProtoError::NotJson(e) => write!(f, "the server sent a line that is not JSON: {e}"),
            ProtoError::NotJsonRpc(e) => write!(f, "the server sent malformed JSON-RPC: {e}"),
            ProtoError::BadInitialize(e) => write!(f, "bad initialize result: {e}"),
            ProtoError::UnsupportedVersion(v) => write!(
                f,
                "the server speaks protocol version {v:?}; dsh supports {}",
                SUPPORTED_PROTOCOL_VERSIONS.join(", ")
            ),
            ProtoError::BadToolList(e) => write!(f, "bad tools/list result: {e}"),
        }
    }
}

impl std::error::Error for ProtoError {}

/// Splits a byte stream into lines of at most `max` bytes. A longer line
/// yields one [`ProtoError::LineTooLong`] and is skipped to its newline,
/// so memory stays bounded whatever the peer sends.
#[derive(Debug)]
pub struct LineFramer {
    buf: Vec<u8>,
    max: usize,
    skipping: bool,
}

impl LineFramer {
    /// A framer with the cap `max` (bytes per line).
    pub fn new(max: usize) -> Self {
        LineFramer {
            buf: Vec::new(),
            max,
            skipping: false,
        }
    }

    /// Feeds `bytes`; complete lines (without `\n`, a trailing `\r`
    /// dropped, blank lines skipped) and overflows are pushed to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Result<Vec<u8>, ProtoError>>) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|b| *b == b'\n');
            let (chunk, rest, ended) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if !self.skipping {
                if self.buf.len() + chunk.len() > self.max {
                    self.buf = Vec::new();
                    self.skipping = true;
                    out.push(Err(ProtoError::LineTooLong { max: self.max }));
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            if ended {
                if self.skipping {
                    self.skipping = false;
                } else {
                    let mut line = core::mem::take(&mut self.buf);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        out.push(Ok(line));
                    }
                }
            }
        }
    }

    /// Bytes held for an unfinished line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Extra data, if any.
    pub data: Option<Value>,
}

impl core::fmt::Display for RpcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

/// One message from a server.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Incoming {
    /// The answer to one of dsh's requests (`id` as the server sent it).
    Response {
        /// The request id, when it is one of dsh's (a non-negative
        /// integer); `None` for any other id.
        id: Option<u64>,
        /// The result, or the error object.
        outcome: Result<Value, RpcError>,
    },
    /// A request the server makes of dsh (answer it with the same `id`).
    Request {
        /// The id, verbatim.
        id: Value,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification.
    Notification {
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
}

/// Parses one line into its messages (a JSON-RPC batch gives several).
pub fn parse_line(line: &[u8]) -> Result<Vec<Incoming>, ProtoError> {
    let value: Value =
        serde_json::from_slice(line).map_err(|e| ProtoError::NotJson(e.to_string()))?;
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(ProtoError::NotJsonRpc("an empty batch".into()));
            }
            items.into_iter().map(parse_message).collect()
        }
        other => Ok(vec![parse_message(other)?]),
    }
}

/// Parses one JSON-RPC message object.
pub fn parse_message(value: Value) -> Result<Incoming, ProtoError> {
    let Value::Object(mut obj) = value else {
        return Err(ProtoError::NotJsonRpc("a message is not an object".into()));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(ProtoError::NotJsonRpc("\"jsonrpc\" is not \"2.0\"".into()));
    }
    let params = obj.remove("params").unwrap_or(Value::Null);
    if let Some(method) = obj.get("method") {
        let Some(method) = method.as_str() else {
            return Err(ProtoError::NotJsonRpc("\"method\" is not a string".into()));
        };
        let method = method.to_string();
        return Ok(match obj.remove("id") {
            Some(id @ (Value::Number(_) | Value::String(_))) => {
                Incoming::Request { id, method, params }
            }
            Some(Value::Null) | None => Incoming::Notification { method, params },
            Some(_) => {
                return Err(ProtoError::NotJsonRpc(
                    "a request id is not a string or number".into(),
                ));
            }
        });
    }
    let id = match obj.get("id") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(_)) | Some(Value::Null) => None,
        _ => {
            return Err(ProtoError::NotJsonRpc(
                "a response has no valid \"id\"".into(),
            ));
        }
    };
    let outcome = match (obj.remove("result"), obj.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(parse_error_object(&error)?),
        _ => {
            return Err(ProtoError::NotJsonRpc(
                "a response needs exactly one of \"result\" and \"error\"".into(),
            ));
        }
    };
    Ok(Incoming::Response { id, outcome })
}

fn parse_error_object(error: &Value) -> Result<RpcError, ProtoError> {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .ok_or_else(|| ProtoError::NotJsonRpc("an error has no integer \"code\"".into()))?;
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok(RpcError {
        code,
        message,
        data: error.get("data").cloned(),
    })
}

/// The bytes of a request line (newline included).
pub fn request_line(id: u64, method: &str, params: Option<Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id.into());
    obj.insert("method".into(), method.into());
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    line(&Value::Object(obj))
}

/// The bytes of a notification line (newline included).
pub fn notification_line(method: &str, params: Option<Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("method".into(), method.into());
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    line(&Value::Object(obj))
}

/// The bytes of a response line answering `id`.
pub fn response_line(id: &Value, outcome: Result<Value, RpcError>) -> Vec<u8> {
    let body = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            let mut err = json!({"code": e.code, "message": e.message});
            if let (Some(data), Some(o)) = (e.data, err.as_object_mut()) {
                o.insert("data".into(), data);
            }
            json!({"jsonrpc": "2.0", "id": id, "error": err})
        }
    };
    line(&body)
}

fn line(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The `initialize` params dsh sends: the newest version, the `roots`
/// capability, and dsh's name and version.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {"roots": {"listChanged": false}},
        "clientInfo": {"name": "dsh", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What a server said about itself in `initialize`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// The server's name (`serverInfo.name`), if given.
    pub name: Option<String>,
    /// Whether the server has tools.
    pub tools: bool,
    /// Whether the server announces `tools/list_changed`.
    pub tools_list_changed: bool,
    /// Whether the server has resources.
    pub resources: bool,
    /// Whether the server has prompts.
    pub prompts: bool,
    /// The server's `instructions`, if any.
    pub instructions: Option<String>,
}

/// Checks an `initialize` result and negotiates the version (the server's
/// choice must be one dsh supports).
pub fn check_initialize(result: &Value) -> Result<ServerInfo, ProtoError> {
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| ProtoError::BadInitialize("no \"protocolVersion\"".into()))?;
    if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
        return Err(ProtoError::UnsupportedVersion(version.to_string()));
    }
    let caps = result.get("capabilities").unwrap_or(&Value::Null);
    if !caps.is_object() {
        return Err(ProtoError::BadInitialize(
            "\"capabilities\" is not an object".into(),
        ));
    }
    Ok(ServerInfo {
        protocol_version: version.to_string(),
        name: result
            .pointer("/serverInfo/name")
            .and_then(Value::as_str)
            .map(str::to_string),
        tools: caps.get("tools").is_some(),
        tools_list_changed: caps
            .pointer("/tools/listChanged")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        resources: caps.get("resources").is_some(),
        prompts: caps.get("prompts").is_some(),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// `tools/list` params for a page (`None`: the first).
pub fn list_params(cursor: Option<&str>) -> Option<Value> {
    cursor.map(|c| json!({"cursor": c}))
}

/// One tool as a server lists it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RemoteTool {
    /// The server's own name for it (sent back in `tools/call`).
    pub name: String,
    /// The description (empty when absent).
    pub description: String,
    /// The input schema (`{"type":"object"}` when absent).
    pub input_schema: Value,
    /// `annotations.readOnlyHint`.
    pub read_only: bool,
}

/// One `tools/list` page: its tools and the next cursor.
pub fn parse_tools_page(result: &Value) -> Result<(Vec<RemoteTool>, Option<String>), ProtoError> {
    let tools = result
        .get("tools")
        .and_then(Value::as_array)
        .ok_or_else(|| ProtoError::BadToolList("no \"tools\" array".into()))?;
    let mut out = Vec::with_capacity(tools.len().min(MAX_TOOLS_PER_SERVER));
    for t in tools {
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ProtoError::BadToolList("a tool has no \"name\"".into()))?;
        let input_schema = match t.get("inputSchema") {
            Some(s @ Value::Object(_)) => s.clone(),
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(_) => {
                return Err(ProtoError::BadToolList(format!(
                    "tool {name:?} has an \"inputSchema\" that is not an object"
                )));
            }
        };
        out.push(RemoteTool {
            name: name.to_string(),
            description: t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            input_schema,
            read_only: t
                .pointer("/annotations/readOnlyHint")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    let next = match result.get("nextCursor") {
        Some(Value::String(c)) => Some(c.clone()),
        None | Some(Value::Null) => None,
        Some(_) => {
            return Err(ProtoError::BadToolList(
                "\"nextCursor\" is not a string".into(),
            ));
        }
    };
    Ok((out, next))
}

/// Folds `tools/list` pages into one listing: drops repeated raw names
/// (reported), stops at [`MAX_TOOLS_PER_SERVER`] (reported) and at
/// [`MAX_LIST_PAGES`] or a repeated cursor.
#[derive(Debug, Default)]
pub struct ToolListing {
    /// The tools so far, in list order.
    pub tools: Vec<RemoteTool>,
    /// Problems met (for the server's report).
    pub warnings: Vec<String>,
    pages: usize,
    cursors: Vec<String>,
}

impl ToolListing {
    /// An empty listing.
    pub fn new() -> Self {
        ToolListing::default()
    }

    /// Adds one page; returns the cursor of the next page to ask for.
    pub fn page(&mut self, result: &Value) -> Result<Option<String>, ProtoError> {
        let (tools, next) = parse_tools_page(result)?;
        self.pages += 1;
        for t in tools {
            if self.tools.iter().any(|k| k.name == t.name) {
                self.warnings.push(format!(
                    "the server listed tool {:?} twice; kept the first",
                    t.name
                ));
                continue;
            }
            if self.tools.len() >= MAX_TOOLS_PER_SERVER {
                self.warnings.push(format!(
                    "the server lists more than {MAX_TOOLS_PER_SERVER} tools; the rest are dropped"
                ));
                return Ok(None);
            }
            self.tools.push(t);
        }
        let Some(next) = next else { return Ok(None) };
        if self.pages >= MAX_LIST_PAGES {
            self.warnings.push(format!(
                "the server's tool list has more than {MAX_LIST_PAGES} pages; the rest are dropped"
            ));
            return Ok(None);
        }
        if self.cursors.contains(&next) {
            self.warnings
                .push("the server repeated a tools/list cursor; listing stopped".into());
            return Ok(None);
        }
        self.cursors.push(next.clone());
        Ok(Some(next))
    }
}

/// `tools/call` params.
pub fn call_params(raw_name: &str, arguments: &Value) -> Value {
    let arguments = match arguments {
        Value::Object(_) => arguments.clone(),
        // The model sent a non-object: let the server name what is missing.
        _ => Value::Object(Map::new()),
    };
    json!({"name": raw_name, "arguments": arguments})
}

/// `notifications/cancelled` params for request `id`.
pub fn cancelled_params(id: u64, reason: &str) -> Value {
    json!({"requestId": id, "reason": reason})
}

/// The answer to a server-to-client request: `ping` is answered, `roots/list`
/// answers `roots` (file URIs of the workspace), `sampling/createMessage`
/// and `elicitation/create` are refused with a clear error, anything else is
/// "method not found".
pub fn answer_server_request(method: &str, roots: &[String]) -> Result<Value, RpcError> {
    match method {
        "ping" => Ok(json!({})),
        "roots/list" => {
            let roots: Vec<Value> = roots
                .iter()
                .map(|uri| {
                    let name = uri.rsplit('/').find(|s| !s.is_empty()).unwrap_or(uri);
                    json!({"uri": uri, "name": name})
                })
                .collect();
            Ok(json!({ "roots": roots }))
        }
        "sampling/createMessage" => Err(RpcError {
            code: METHOD_NOT_FOUND,
            message: "dsh does not offer sampling to MCP servers".into(),
            data: None,
        }),
        "elicitation/create" => Err(RpcError {
            code: METHOD_NOT_FOUND,
            message: "dsh does not answer elicitation requests yet".into(),
            data: None,
        }),
        other => Err(RpcError {
            code: METHOD_NOT_FOUND,
            message: format!("method not found: {other}"),
            data: None,
        }),
    }
}

/// A `file://` URI for an absolute path (percent-encoding what a URI path
/// may not hold).
pub fn file_uri(path: &str) -> String {
    let mut out = String::from("file://");
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One server-sent event of a streamable-HTTP response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SseEvent {
    /// The `data` lines joined with `\n`.
    pub data: String,
    /// The `id`, if given (for `Last-Event-ID`).
    pub id: Option<String>,
}

/// A capped `text/event-stream` parser: bytes in, events out; the last
/// event id and the server's `retry` (ms) are kept for resumption.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    id: Option<String>,
    /// The last event id seen.
    pub last_id: Option<String>,
    /// The server's `retry` in milliseconds, if sent.
    pub retry_ms: Option<u64>,
    max: usize,
    skipping: bool,
}

impl SseParser {
    /// A parser whose lines and events are capped at `max` bytes.
    pub fn new(max: usize) -> Self {
        SseParser {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            id: None,
            last_id: None,
            retry_ms: None,
            max,
            skipping: false,
        }
    }

    /// Feeds `bytes`; finished events (or an overflow) go to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Result<SseEvent, ProtoError>>) {
        for &b in bytes {
            if b == b'\n' {
                if self.skipping {
                    self.skipping = false;
                    self.line.clear();
                    continue;
                }
                let mut line = core::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.field(&line, out);
                continue;
            }
            if self.skipping {
                continue;
            }
            if self.line.len() >= self.max {
                self.line.clear();
                self.skipping = true;
                self.data.clear();
                self.has_data = false;
                out.push(Err(ProtoError::LineTooLong { max: self.max }));
                continue;
            }
            self.line.push(b);
        }
    }

    fn field(&mut self, line: &[u8], out: &mut Vec<Result<SseEvent, ProtoError>>) {
        if line.is_empty() {
            if self.has_data {
                let event = SseEvent {
                    data: core::mem::take(&mut self.data),
                    id: self.id.take(),
                };
                self.has_data = false;
                out.push(Ok(event));
            }
            return;
        }
        if line.first() == Some(&b':') {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (name, value) = match text.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match name {
            "data" => {
                if self.data.len() + value.len() + 1 > self.max {
                    self.data.clear();
                    self.has_data = false;
                    out.push(Err(ProtoError::LineTooLong { max: self.max }));
                    return;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_string());
                self.last_id = Some(value.to_string());
            }
            "retry" => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry_ms = Some(ms.min(60_000));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(f: &mut LineFramer, bytes: &[u8]) -> Vec<Result<Vec<u8>, ProtoError>> {
        let mut out = Vec::new();
        f.push(bytes, &mut out);
        out
    }

    #[test]
    fn framer_splits_lines_across_chunks_and_skips_blank_ones() {
        let mut f = LineFramer::new(100);
        assert!(lines(&mut f, b"{\"a\":").is_empty());
        let out = lines(&mut f, b"1}\r\n\n  \n{}\n{");
        assert_eq!(out, vec![Ok(b"{\"a\":1}".to_vec()), Ok(b"{}".to_vec())]);
        assert_eq!(f.pending(), 1);
    }

    #[test]
    fn framer_reports_an_overlong_line_once_and_recovers() {
        let mut f = LineFramer::new(8);
        let mut out = Vec::new();
        f.push(b"0123456", &mut out);
        f.push(b"789abcdef", &mut out);
        f.push(b"more junk", &mut out);
        assert_eq!(out, vec![Err(ProtoError::LineTooLong { max: 8 })]);
        assert_eq!(f.pending(), 0, "nothing of the long line is held");
        out.clear();
        f.push(b"tail\n{}\n", &mut out);
        assert_eq!(out, vec![Ok(b"{}".to_vec())]);
    }

    #[test]
    fn parses_responses_requests_notifications_and_batches() {
        let r = parse_line(br#"{"jsonrpc":"2.0","id":3,"result":{"x":1}}"#).unwrap();
        assert_eq!(
            r,
            vec![Incoming::Response {
                id: Some(3),
                outcome: Ok(json!({"x":1}))
            }]
        );
        let e =
            parse_line(br#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#).unwrap();
        assert!(matches!(
            &e[0],
            Incoming::Response {
                id: Some(4),
                outcome: Err(RpcError { code: -1, .. })
            }
        ));
        let q = parse_line(br#"{"jsonrpc":"2.0","id":"s1","method":"ping"}"#).unwrap();
        assert!(matches!(&q[0], Incoming::Request { method, .. } if method == "ping"));
        let b = parse_line(
            br#"[{"jsonrpc":"2.0","method":"notifications/tools/list_changed"},{"jsonrpc":"2.0","id":1,"result":{}}]"#,
        )
        .unwrap();
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn malformed_messages_are_typed_errors() {
        for bad in [
            &b"not json"[..],
            br#"{"id":1,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":""}}"#,
            br#"{"jsonrpc":"2.0","method":5}"#,
            br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            br#"[]"#,
            br#"7"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}"#,
        ] {
            assert!(parse_line(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn initialize_negotiates_down_to_2025_03_26_and_refuses_others() {
        for v in SUPPORTED_PROTOCOL_VERSIONS {
            let info = check_initialize(
                &json!({"protocolVersion": v, "capabilities": {"tools": {"listChanged": true}}}),
            )
            .unwrap();
            assert_eq!(info.protocol_version, *v);
            assert!(info.tools_list_changed);
        }
        let e = check_initialize(&json!({"protocolVersion": "2024-11-05", "capabilities": {}}));
        assert!(matches!(e, Err(ProtoError::UnsupportedVersion(_))));
        assert!(check_initialize(&json!({"capabilities": {}})).is_err());
        assert_eq!(
            initialize_params()["protocolVersion"],
            LATEST_PROTOCOL_VERSION
        );
    }

    #[test]
    fn listing_follows_cursors_and_caps_duplicates_pages_and_counts() {
        let mut l = ToolListing::new();
        let next = l
            .page(&json!({"tools": [{"name": "a"}, {"name": "a"}], "nextCursor": "c1"}))
            .unwrap();
        assert_eq!(next.as_deref(), Some("c1"));
        assert_eq!(
            l.page(&json!({"tools": [{"name": "b"}], "nextCursor": "c1"}))
                .unwrap(),
            None
        );
        assert_eq!(l.tools.len(), 2);
        assert_eq!(l.warnings.len(), 2);

        let mut big = ToolListing::new();
        let many: Vec<Value> = (0..10_000)
            .map(|i| json!({"name": format!("t{i}")}))
            .collect();
        assert_eq!(
            big.page(&json!({"tools": many, "nextCursor": "x"}))
                .unwrap(),
            None
        );
        assert_eq!(big.tools.len(), MAX_TOOLS_PER_SERVER);
        assert!(big.warnings[0].contains("more than 1024 tools"));
        assert!(
            ToolListing::new()
                .page(&json!({"tools": [{"name": 1}]}))
                .is_err()
        );
    }

    #[test]
    fn server_requests_are_answered_or_refused() {
        assert_eq!(answer_server_request("ping", &[]), Ok(json!({})));
        let roots = answer_server_request("roots/list", &[file_uri("/w/my proj")]).unwrap();
        assert_eq!(
            roots,
            json!({"roots": [{"uri": "file:///w/my%20proj", "name": "my%20proj"}]})
        );
        let e = answer_server_request("sampling/createMessage", &[]).unwrap_err();
        assert!(e.message.contains("sampling"));
        assert_eq!(
            answer_server_request("x/y", &[]).unwrap_err().code,
            METHOD_NOT_FOUND
        );
    }

    #[test]
    fn sse_events_ids_retry_and_caps() {
        let mut p = SseParser::new(64);
        let mut out = Vec::new();
        p.push(
            b": comment\nretry: 1500\nid: e1\ndata: {\"a\":\ndata: 1}\n\n",
            &mut out,
        );
        p.push(b"data: x\r\n\r", &mut out);
        p.push(b"\n", &mut out);
        assert_eq!(
            out,
            vec![
                Ok(SseEvent {
                    data: "{\"a\":\n1}".into(),
                    id: Some("e1".into())
                }),
                Ok(SseEvent {
                    data: "x".into(),
                    id: None
                }),
            ]
        );
        assert_eq!(p.retry_ms, Some(1500));
        assert_eq!(p.last_id.as_deref(), Some("e1"));
        out.clear();
        p.push(&[b'a'; 200], &mut out);
        p.push(b"\ndata: ok\n\n", &mut out);
        assert_eq!(out.len(), 2);
        assert!(out[0].is_err());
        assert_eq!(
            out[1],
            Ok(SseEvent {
                data: "ok".into(),
                id: None
            })
        );
    }

    #[test]
    fn lines_are_single_json_lines() {
        let l = request_line(7, "tools/call", Some(call_params("echo", &json!("oops"))));
        assert_eq!(l.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["params"]["arguments"], json!({}));
        let c: Value = serde_json::from_slice(&notification_line(
            "notifications/cancelled",
            Some(cancelled_params(7, "timeout")),
        ))
        .unwrap();
        assert_eq!(c["params"]["requestId"], 7);
        let r: Value = serde_json::from_slice(&response_line(&json!("s"), Ok(json!({})))).unwrap();
        assert_eq!(r["id"], "s");
    }
}
