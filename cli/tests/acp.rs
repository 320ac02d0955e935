//! `dsh acp` end to end: a JSON-RPC client written here drives the binary
//! over stdio with the bundled mock DeepSeek server behind it.
//!
//! Covers `initialize`, `session/new`, a prompt whose tool call needs
//! permission (granted, denied), `session/cancel` mid-stream (stop reason
//! `cancelled`, the log closes the turn `aborted`), `session/load`
//! replaying the stored session (and the same store shared with
//! `dsh chat --resume` / `dsh run`), malformed JSON-RPC, unknown methods,
//! requests before `initialize`, a client that disconnects mid-prompt
//! (clean exit, a valid log closed as aborted, loop.md LC-40 dispose), and
//! termination signals, which end the server the same way and stop every
//! process its tools started.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use dsh_core::jsonl::load_log;
use dsh_core::session::{EventData, SessionEvent};
use dsh_deepseek::mock::{MockServer, Script};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn mock(script: &str) -> MockServer {
    MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap()
}

/// A running `dsh acp` with a line reader on its stdout.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line the agent wrote, in order.
    seen: Vec<Value>,
    /// The editor's buffers by absolute path, when the client offers `fs`.
    buffers: Option<BTreeMap<String, String>>,
    /// What the editor's terminal prints and its exit code, when the
    /// client offers `terminal`.
    terminal: Option<(String, u32)>,
}

fn dsh(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    c.env("XDG_DATA_HOME", data)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .env("NO_COLOR", "1");
    c
}

impl Client {
    fn start(data: &Path, url: &str) -> Client {
        Client::start_with(data, url, &[])
    }

    fn start_with(data: &Path, url: &str, extra: &[&str]) -> Client {
        let mut child = dsh(data)
            .args(["acp", "--base-url", url])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            buffers: None,
            terminal: None,
        }
    }

    fn raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.raw(&message.to_string());
    }

    fn request(&mut self, id: i64, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// The next message; every stdout line must be one JSON-RPC message.
    fn next(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(WAIT)
            .expect("a message from dsh acp");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        self.seen.push(v.clone());
        v
    }

    /// Reads until the response to `id`, answering permission requests
    /// with `option` (`None`: cancelled); returns (notifications and
    /// requests before it, the response).
    fn until_response(&mut self, id: i64, option: Option<&str>) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let m = self.next();
            if m.get("method").is_none() && m["id"] == json!(id) {
                return (before, m);
            }
            if let Some(buffers) = self.buffers.as_mut()
                && (m["method"] == "fs/read_text_file" || m["method"] == "fs/write_text_file")
            {
                let path = m["params"]["path"].as_str().unwrap().to_string();
                let answer = if m["method"] == "fs/write_text_file" {
                    let content = m["params"]["content"].as_str().unwrap().to_string();
                    buffers.insert(path, content);
                    json!({"jsonrpc": "2.0", "id": m["id"], "result": {}})
                } else {
                    match buffers.get(&path) {
                        Some(text) => {
                            json!({"jsonrpc": "2.0", "id": m["id"], "result": {"content": text}})
                        }
                        None => {
                            json!({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32002, "message": "Resource not found"}})
                        }
                    }
                };
                self.send(answer);
            }
            if let Some((output, code)) = self.terminal.clone()
                && m["method"]
                    .as_str()
                    .is_some_and(|x| x.starts_with("terminal/"))
            {
                let result = match m["method"].as_str().unwrap() {
                    "terminal/create" => json!({"terminalId": "term-1"}),
                    "terminal/wait_for_exit" => json!({"exitCode": code}),
                    "terminal/output" => json!({"output": output, "truncated": false,
                        "exitStatus": {"exitCode": code}}),
                    _ => json!({}),
                };
                self.send(json!({"jsonrpc": "2.0", "id": m["id"], "result": result}));
            }
            if m["method"] == "session/request_permission" {
                let outcome = match option {
                    Some(o) => json!({"outcome": "selected", "optionId": o}),
                    None => json!({"outcome": "cancelled"}),
                };
                let answer =
                    json!({"jsonrpc": "2.0", "id": m["id"], "result": {"outcome": outcome}});
                self.send(answer);
            }
            before.push(m);
        }
    }

    fn initialize(&mut self) -> Value {
        let fs = self.buffers.is_some();
        let terminal = self.terminal.is_some();
        self.request(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {
                "fs": {"readTextFile": fs, "writeTextFile": fs}, "terminal": terminal}}),
        );
        self.until_response(0, None).1
    }

    fn new_session(&mut self, id: i64, cwd: &Path) -> String {
        self.request(id, "session/new", json!({"cwd": cwd, "mcpServers": []}));
        let (_, r) = self.until_response(id, None);
        r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id: {r}"))
            .to_string()
    }

    fn prompt(&mut self, id: i64, session: &str, text: &str) {
        self.request(
            id,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        );
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let status = wait_exit(&mut self.child);
        assert!(
            status.success(),
            "dsh acp exits 0 at end of input: {status:?}"
        );
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            let v: Value = serde_json::from_str(&line).expect("only JSON-RPC on stdout");
            self.seen.push(v);
        }
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "dsh acp did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn updates<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| {
            m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == kind
        })
        .map(|m| &m["params"]["update"])
        .collect()
}

fn transcript(data: &Path, session: &str) -> PathBuf {
    let sessions = data.join("dsh/sessions");
    for project in std::fs::read_dir(&sessions).unwrap() {
        let p = project.unwrap().path().join(session).join("session.jsonl");
        if p.exists() {
            return p;
        }
    }
    panic!("no transcript for {session} under {}", sessions.display());
}

/// The events of a stored log that loads without repair.
fn events(path: &Path) -> Vec<SessionEvent> {
    let bytes = std::fs::read(path).unwrap();
    let loaded = load_log(&bytes, &[]).expect("a valid session log");
    assert!(
        !loaded.needs_repair(),
        "the log is complete (no torn tail, no open turn)"
    );
    loaded.session.events().to_vec()
}

fn turn_end_reasons(events: &[SessionEvent]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::TurnEnd(t) => Some(serde_json::to_value(&t.reason).unwrap()),
            _ => None,
        })
        .collect()
}

fn log_check(data: &Path, path: &Path) {
    let out = dsh(data)
        .args(["log", "check", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dsh log check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The model writes `notes.txt` (needs permission), then answers.
const WRITE_SCRIPT: &str = r#"{"responses":[
 {"turn":{"reasoning":["I should write the file."],"text":["Writing notes.txt."],
   "toolCalls":[{"id":"call_w","name":"write","arguments":["{\"file_path\": \"notes.txt\", ","\"content\": \"one\\ntwo\\n\"}"]}]}},
 {"turn":{"text":["Wrote ","it."]}}
]}"#;

/// The model runs a bash command (needs permission), then answers.
const BASH_SCRIPT: &str = r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"call_b","name":"bash","arguments":["{\"command\": \"echo ran > ran.txt\", \"description\": \"Mark that it ran\"}"]}]}},
 {"turn":{"text":["Understood."]}}
]}"#;

/// The model streams two events, then stalls until the client leaves.
const STALL_SCRIPT: &str = r#"{"responses":[
 {"fault":{"kind":"stall","turn":{"text":["Partial ","answer ","never ","finished"]},"afterEvents":3}}
]}"#;

#[test]
fn initialize_reports_protocol_1_and_honest_capabilities() {
    let data = tempfile::tempdir().unwrap();
    let server = mock(r#"{"responses":[]}"#);
    let mut c = Client::start(data.path(), &server.url());
    let r = c.initialize();
    let result = &r["result"];
    assert_eq!(result["protocolVersion"], 1);
    assert_eq!(result["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        result["agentCapabilities"]["promptCapabilities"]["image"],
        false
    );
    assert_eq!(
        result["agentCapabilities"]["promptCapabilities"]["audio"],
        false
    );
    // MCP servers of session/new: stdio always, streamable HTTP too.
    assert_eq!(result["agentCapabilities"]["mcpCapabilities"]["http"], true);
    assert_eq!(result["authMethods"], json!([]));
    assert_eq!(result["agentInfo"]["name"], "dsh");
    // A client asking for a later version is answered with the one spoken.
    c.request(
        1,
        "initialize",
        json!({"protocolVersion": 7, "clientCapabilities": {}}),
    );
    assert_eq!(c.until_response(1, None).1["result"]["protocolVersion"], 1);
    c.finish();
}

#[test]
fn granted_tool_call_streams_updates_with_a_diff_and_ends_the_turn() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let server = mock(WRITE_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, &ws_path);
    c.prompt(2, &session, "Write two lines to notes.txt");
    let (before, response) = c.until_response(2, Some("allow_once"));
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(
        std::fs::read_to_string(ws_path.join("notes.txt")).unwrap(),
        "one\ntwo\n"
    );
    // Thought and message chunks stream live.
    let thoughts = updates(&before, "agent_thought_chunk");
    assert_eq!(thoughts[0]["content"]["text"], "I should write the file.");
    let text: String = updates(&before, "agent_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Writing notes.txt.Wrote it.");
    // The call: kind, title, pending status, absolute location.
    let calls = updates(&before, "tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["toolCallId"], "call_w");
    assert_eq!(calls[0]["kind"], "edit");
    assert_eq!(calls[0]["title"], "Write notes.txt");
    assert_eq!(calls[0].get("status"), None, "pending is the default");
    assert_eq!(
        calls[0]["locations"][0]["path"],
        json!(ws_path.join("notes.txt"))
    );
    // The permission request names the same call and offers three options.
    let asks: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .collect();
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0]["params"]["sessionId"], json!(session));
    assert_eq!(asks[0]["params"]["toolCall"]["toolCallId"], "call_w");
    let kinds: Vec<&str> = asks[0]["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    // In progress once allowed, then completed with the diff of a new file.
    let call_updates = updates(&before, "tool_call_update");
    assert_eq!(call_updates[0]["status"], "in_progress");
    let done = call_updates.last().unwrap();
    assert_eq!(done["status"], "completed");
    let diff = &done["content"][0];
    assert_eq!(diff["type"], "diff");
    assert_eq!(diff["path"], json!(ws_path.join("notes.txt")));
    assert_eq!(diff["newText"], "one\ntwo\n");
    assert_eq!(diff.get("oldText"), None);
    // Every update precedes the response.
    let all = c.finish();
    let log = transcript(data.path(), &session);
    let evs = events(&log);
    assert_eq!(turn_end_reasons(&evs), vec![json!({"kind": "completed"})]);
    log_check(data.path(), &log);
    assert!(all.iter().all(|m| m.get("error").is_none()), "no errors");
}

#[test]
fn denied_tool_call_is_not_run() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(BASH_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Run something");
    let (before, response) = c.until_response(2, Some("reject_once"));
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(
        !ws.path().join("ran.txt").exists(),
        "a denied command never runs"
    );
    let call = updates(&before, "tool_call")[0];
    assert_eq!(call["kind"], "execute");
    assert_eq!(call["title"], "Run `echo ran > ran.txt`");
    let call_updates = updates(&before, "tool_call_update");
    assert_eq!(call_updates.len(), 1, "no in_progress for a denied call");
    assert_eq!(call_updates[0]["status"], "failed");
    let text = call_updates[0]["content"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(text.starts_with("Error:"), "{text}");
    c.finish();
    log_check(data.path(), &transcript(data.path(), &session));
}

#[test]
fn cancel_mid_stream_answers_cancelled_and_the_log_closes_the_turn_aborted() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(STALL_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Say something long");
    // Wait for the first streamed text, then cancel.
    loop {
        let m = c.next();
        if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
        assert!(m.get("id").is_none() || m.get("method").is_some(), "{m}");
    }
    c.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}));
    let (_, response) = c.until_response(2, None);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    c.finish();
    let log = transcript(data.path(), &session);
    let evs = events(&log);
    assert_eq!(
        turn_end_reasons(&evs),
        vec![json!({"kind": "aborted", "reason": {"kind": "user"}})]
    );
    log_check(data.path(), &log);
}

#[test]
fn load_replays_the_stored_session_and_the_store_is_the_clis() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let server = mock(WRITE_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, &ws_path);
    c.prompt(2, &session, "Write two lines to notes.txt");
    let (_, r) = c.until_response(2, Some("allow_once"));
    assert_eq!(r["result"]["stopReason"], "end_turn");
    c.finish();

    // A new process loads it back: the history is replayed, then answered.
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    c.request(
        1,
        "session/load",
        json!({"sessionId": session, "cwd": ws_path, "mcpServers": []}),
    );
    let (replay, r) = c.until_response(1, None);
    assert_eq!(r["result"]["modes"]["currentModeId"], "ask", "{r}");
    let kinds: Vec<&str> = replay
        .iter()
        .map(|m| m["params"]["update"]["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "agent_thought_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    assert_eq!(
        replay[0]["params"]["update"]["content"]["text"],
        "Write two lines to notes.txt"
    );
    assert_eq!(
        replay[5]["params"]["update"]["content"]["text"],
        "Wrote it."
    );
    assert_eq!(replay[4]["params"]["update"]["content"][0]["type"], "diff");
    // An unknown session is "resource not found".
    c.request(
        2,
        "session/load",
        json!({"sessionId": "no-such-session", "cwd": ws_path, "mcpServers": []}),
    );
    let (_, r) = c.until_response(2, None);
    assert_eq!(r["error"]["code"], -32002, "{r}");
    c.finish();

    // `dsh chat --resume` opens the editor's session (same store).
    let out = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--resume", &session])
        .arg("--cwd")
        .arg(&ws_path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("session {session} (resumed)")),
        "{stdout}"
    );

    // And a session started by `dsh run` loads in the editor.
    let server = mock(r#"{"responses":[{"turn":{"text":["From the terminal."]}}]}"#);
    let out = dsh(data.path())
        .args([
            "run",
            "--json",
            "--base-url",
            &server.url(),
            "hello from the CLI",
        ])
        .arg("--cwd")
        .arg(&ws_path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let _ = first;
    let cli_session = newest_other_session(data.path(), &session);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    c.request(
        1,
        "session/load",
        json!({"sessionId": cli_session, "cwd": ws_path, "mcpServers": []}),
    );
    let (replay, r) = c.until_response(1, None);
    assert!(r.get("result").is_some(), "{r}");
    let texts: Vec<&str> = replay
        .iter()
        .map(|m| {
            m["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(texts, ["hello from the CLI", "From the terminal."]);
    c.finish();
}

/// The id of the stored session other than `not`.
fn newest_other_session(data: &Path, not: &str) -> String {
    let sessions = data.join("dsh/sessions");
    for project in std::fs::read_dir(&sessions).unwrap() {
        for s in std::fs::read_dir(project.unwrap().path()).unwrap() {
            let name = s.unwrap().file_name().to_string_lossy().into_owned();
            if name != not {
                return name;
            }
        }
    }
    panic!("no other session");
}

#[test]
fn malformed_input_gets_json_rpc_errors_and_never_ends_the_server() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(r#"{"responses":[]}"#);
    let mut c = Client::start(data.path(), &server.url());
    // A request before `initialize`: Invalid Request, with its id.
    c.request(
        1,
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": []}),
    );
    let r = c.next();
    assert_eq!(r["id"], 1);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialize")
    );
    // Not JSON: Parse error, id null.
    c.raw("{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\"");
    let r = c.next();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    // JSON but not a request object.
    for bad in [
        "[]",
        "17",
        r#"{"id": 3, "method": "initialize"}"#,
        r#"{"jsonrpc": "2.0", "id": 3, "method": 5}"#,
        r#"{"jsonrpc": "2.0", "id": {"x": 1}, "method": "initialize"}"#,
    ] {
        c.raw(bad);
        let r = c.next();
        assert_eq!(r["error"]["code"], -32600, "{bad} → {r}");
    }
    c.initialize();
    // Unknown and unsupported methods: Method not found.
    for (id, method) in [
        (4, "no/such/method"),
        (5, "session/list"),
        (6, "_dsh/extension"),
    ] {
        c.request(id, method, json!({}));
        let r = c.next();
        assert_eq!(r["id"], id);
        assert_eq!(r["error"]["code"], -32601, "{method} → {r}");
    }
    // Invalid params.
    c.request(7, "session/new", json!({"mcpServers": []}));
    assert_eq!(c.next()["error"]["code"], -32602);
    c.request(
        8,
        "session/new",
        json!({"cwd": "relative/dir", "mcpServers": []}),
    );
    assert_eq!(c.next()["error"]["code"], -32602);
    c.request(
        9,
        "session/prompt",
        json!({"sessionId": "nope", "prompt": []}),
    );
    assert_eq!(c.next()["error"]["code"], -32002);
    // An unknown notification is ignored; the server still answers.
    c.send(json!({"jsonrpc": "2.0", "method": "no/such/notification", "params": {}}));
    let session = c.new_session(10, ws.path());
    assert!(!session.is_empty());
    let seen = c.finish();
    assert!(
        seen.iter().all(|m| m.get("method").is_none()
            || m["params"]["update"]["sessionUpdate"] == "available_commands_update"),
        "no stray output (a new session gets its command list)"
    );
}

#[test]
fn disconnect_mid_prompt_exits_cleanly_with_a_closed_log() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(STALL_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Say something long");
    loop {
        let m = c.next();
        if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    // The client goes away mid-stream: the prompt it sent is still
    // answered, `cancelled` (every request read is answered).
    let seen = c.finish();
    let answers: Vec<&Value> = seen
        .iter()
        .filter(|m| m["id"] == 2 && m.get("method").is_none())
        .collect();
    assert_eq!(answers.len(), 1, "{seen:?}");
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    let log = transcript(data.path(), &session);
    let evs = events(&log);
    assert_eq!(
        turn_end_reasons(&evs),
        vec![json!({"kind": "aborted", "reason": {"kind": "disposed"}})]
    );
    log_check(data.path(), &log);
}

#[test]
fn allow_always_stops_asking_for_that_tool() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(
        r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"b1","name":"bash","arguments":["{\"command\": \"echo 1 >> n.txt\", \"description\": \"Append one\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"b2","name":"bash","arguments":["{\"command\": \"echo 2 >> n.txt\", \"description\": \"Append two\"}"]}]}},
 {"turn":{"text":["Both ran."]}}
]}"#,
    );
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Append twice");
    let (before, response) = c.until_response(2, Some("allow_always"));
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("n.txt")).unwrap(),
        "1\n2\n"
    );
    let asked: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .collect();
    assert_eq!(asked.len(), 1, "asked once");
    let calls = updates(&before, "tool_call");
    assert_eq!(
        calls[0].get("status"),
        None,
        "the first call waits (pending)"
    );
    assert_eq!(calls[1]["status"], "in_progress", "the second runs at once");
    c.finish();
}

#[test]
fn file_tools_use_the_editors_buffers_when_the_client_offers_fs() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let file = ws_path.join("notes.txt");
    std::fs::write(&file, "saved one\n").unwrap();
    let server = mock(
        r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"r1","name":"read","arguments":["{\"file_path\": \"notes.txt\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"e1","name":"edit","arguments":["{\"file_path\": \"notes.txt\", \"old_string\": \"one\", \"new_string\": \"two\"}"]}]}},
 {"turn":{"text":["Edited."]}}
]}"#,
    );
    let mut c = Client::start(data.path(), &server.url());
    let key = file.to_str().unwrap().to_string();
    c.buffers = Some(BTreeMap::from([(key.clone(), "unsaved one\n".to_string())]));
    c.initialize();
    let session = c.new_session(1, &ws_path);
    c.prompt(2, &session, "Change one to two");
    let (before, response) = c.until_response(2, Some("allow_once"));
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    // The read saw the unsaved buffer, not the disk.
    let read_done = updates(&before, "tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == "r1" && u["status"] == "completed")
        .expect("the read completed");
    let text = read_done["content"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("1: unsaved one"), "{text}");
    // The edit went to the buffer; the file on disk is untouched.
    assert_eq!(c.buffers.as_ref().unwrap()[&key], "unsaved two\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "saved one\n");
    let fs_calls: Vec<(&str, &str)> = before
        .iter()
        .filter(|m| m["method"].as_str().is_some_and(|x| x.starts_with("fs/")))
        .map(|m| {
            assert_eq!(m["params"]["sessionId"], json!(session));
            (
                m["method"].as_str().unwrap(),
                m["params"]["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fs_calls,
        [
            ("fs/read_text_file", key.as_str()),
            ("fs/read_text_file", key.as_str()),
            ("fs/write_text_file", key.as_str())
        ]
    );
    c.finish();
}

#[test]
fn modes_are_offered_and_auto_runs_tools_without_asking() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(BASH_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    c.request(
        1,
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": []}),
    );
    let (_, r) = c.until_response(1, None);
    let modes = &r["result"]["modes"];
    assert_eq!(modes["currentModeId"], "ask");
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ask", "accept-edits", "auto", "plan"]);
    let session = r["result"]["sessionId"].as_str().unwrap().to_string();
    c.request(
        2,
        "session/set_mode",
        json!({"sessionId": session, "modeId": "yolo"}),
    );
    assert_eq!(c.until_response(2, None).1["error"]["code"], -32602);
    c.request(
        3,
        "session/set_mode",
        json!({"sessionId": session, "modeId": "auto"}),
    );
    assert_eq!(c.until_response(3, None).1["result"], json!({}));
    c.prompt(4, &session, "Run something");
    // `None`: a permission request would be answered "cancelled" (denied).
    let (before, response) = c.until_response(4, None);
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(
        before
            .iter()
            .all(|m| m["method"] != "session/request_permission"),
        "auto mode does not ask"
    );
    assert!(ws.path().join("ran.txt").exists(), "the command ran");
    assert_eq!(updates(&before, "tool_call")[0]["status"], "in_progress");
    assert_eq!(
        updates(&before, "tool_call_update").last().unwrap()["status"],
        "completed"
    );
    c.finish();
}

#[test]
fn bash_runs_in_the_clients_terminal_with_client_terminal() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let server = mock(BASH_SCRIPT);
    let mut c = Client::start_with(data.path(), &server.url(), &["--client-terminal"]);
    c.terminal = Some(("ran in the editor\n".to_string(), 3));
    c.initialize();
    let session = c.new_session(1, &ws_path);
    c.prompt(2, &session, "Run something");
    let (before, response) = c.until_response(2, Some("allow_once"));
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(!ws_path.join("ran.txt").exists(), "nothing ran locally");
    let methods: Vec<&str> = before
        .iter()
        .filter_map(|m| m["method"].as_str())
        .filter(|m| m.starts_with("terminal/"))
        .collect();
    assert_eq!(
        methods,
        [
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release"
        ]
    );
    let create = before
        .iter()
        .find(|m| m["method"] == "terminal/create")
        .unwrap();
    assert_eq!(create["params"]["command"], "bash");
    assert_eq!(
        create["params"]["args"],
        json!(["-c", "echo ran > ran.txt"])
    );
    assert_eq!(create["params"]["cwd"], json!(ws_path));
    let call_updates = updates(&before, "tool_call_update");
    assert!(
        call_updates
            .iter()
            .any(|u| u["content"][0] == json!({"type": "terminal", "terminalId": "term-1"})),
        "the terminal is embedded in the call"
    );
    let done = call_updates.last().unwrap();
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["content"][0]["content"]["text"],
        "ran in the editor\n[exit code: 3]"
    );
    c.finish();

    // Without the flag, an offered terminal is not used.
    let server = mock(BASH_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.terminal = Some(("unused\n".to_string(), 0));
    c.initialize();
    let session = c.new_session(1, &ws_path);
    c.prompt(2, &session, "Run something");
    let (before, _) = c.until_response(2, Some("allow_once"));
    assert!(before.iter().all(|m| m["method"] != "terminal/create"));
    assert!(ws_path.join("ran.txt").exists(), "bash ran locally");
    c.finish();
}

/// Drives a prompt whose bash runs in a client terminal that never exits
/// by itself: `cancel` cancels the prompt once the agent waits for the
/// exit (else the tool's timeout must kill it). Returns (messages, the
/// prompt's response).
fn run_hanging_terminal(
    script: &str,
    cancel: bool,
) -> (tempfile::TempDir, String, Vec<Value>, Value) {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(script);
    let mut c = Client::start_with(data.path(), &server.url(), &["--client-terminal"]);
    // Offer a terminal, but answer its requests by hand below.
    c.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {"terminal": true}}}));
    c.until_response(0, None);
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Run something");
    let answer = |c: &mut Client, m: &Value, result: Value| {
        c.send(json!({"jsonrpc": "2.0", "id": m["id"], "result": result}));
    };
    let mut wait = None;
    let mut seen = Vec::new();
    let response = loop {
        let m = c.next();
        seen.push(m.clone());
        match m["method"].as_str() {
            Some("session/request_permission") => answer(
                &mut c,
                &m,
                json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
            ),
            Some("terminal/create") => answer(&mut c, &m, json!({"terminalId": "t"})),
            Some("terminal/wait_for_exit") => {
                // The command runs "forever".
                wait = Some(m.clone());
                if cancel {
                    c.send(json!({"jsonrpc": "2.0", "method": "session/cancel",
                        "params": {"sessionId": session}}));
                }
            }
            Some("terminal/kill") => {
                answer(&mut c, &m, json!({}));
                let w = wait.take().expect("kill comes while waiting");
                answer(&mut c, &w, json!({"exitCode": null, "signal": "SIGKILL"}));
            }
            Some("terminal/output") => answer(
                &mut c,
                &m,
                json!({"output": "partial\n", "truncated": false,
                    "exitStatus": {"exitCode": null, "signal": "SIGKILL"}}),
            ),
            Some("terminal/release") => answer(&mut c, &m, json!({})),
            Some(_) => {}
            None if m["id"] == 2 => break m,
            None => {}
        }
    };
    c.finish();
    (data, session, seen, response)
}

#[test]
fn cancel_kills_the_command_in_the_clients_terminal() {
    let (data, session, seen, response) = run_hanging_terminal(BASH_SCRIPT, true);
    assert!(
        seen.iter().any(|m| m["method"] == "terminal/kill"),
        "the cancel killed the terminal's command"
    );
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let log = transcript(data.path(), &session);
    assert_eq!(
        turn_end_reasons(&events(&log)),
        vec![json!({"kind": "aborted", "reason": {"kind": "user"}})]
    );
    log_check(data.path(), &log);
}

#[test]
fn the_tool_timeout_kills_the_command_in_the_clients_terminal() {
    let script = r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"call_b","name":"bash","arguments":["{\"command\": \"sleep 100\", \"description\": \"Wait\", \"timeoutMs\": 300}"]}]}},
 {"turn":{"text":["It timed out."]}}
]}"#;
    let (_data, _session, seen, response) = run_hanging_terminal(script, false);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(seen.iter().any(|m| m["method"] == "terminal/kill"));
    let done = updates(&seen, "tool_call_update")
        .last()
        .copied()
        .unwrap()
        .clone();
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["content"][0]["content"]["text"],
        "partial\n[timed out after 300ms]\n[killed by signal: SIGKILL]"
    );
}

/// The model delegates to a subagent, then answers.
const SUBAGENT_SCRIPT: &str = r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"call_s","name":"subagent","arguments":["{\"description\": \"Reply with CHILD_OK\", \"prompt\": \"Reply with exactly the word CHILD_OK and nothing else.\"}"]}]}},
 {"turn":{"text":["CHILD_OK"]}},
 {"turn":{"text":["PARENT_DONE"]}}
]}"#;

#[test]
fn a_subagent_runs_as_a_linked_child_session() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(SUBAGENT_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Delegate it");
    let (before, response) = c.until_response(2, None);
    assert_eq!(response["result"]["stopReason"], "end_turn");
    // Delegating is not asked about (the child never asks either).
    assert!(
        before
            .iter()
            .all(|m| m["method"] != "session/request_permission"),
        "{before:?}"
    );
    let done = updates(&before, "tool_call_update")
        .into_iter()
        .find(|u| u["status"] == "completed")
        .expect("a completed subagent call");
    assert_eq!(done["content"][0]["content"]["text"], "CHILD_OK");
    c.finish();
    let parent = transcript(data.path(), &session);
    log_check(data.path(), &parent);
    let child_id = newest_other_session(data.path(), &session);
    let child = transcript(data.path(), &child_id);
    log_check(data.path(), &child);
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&child)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["parentSession"], session.as_str());
    assert_eq!(header["origin"], "subagent");
    assert_eq!(header["delegationDepth"], 1);
    assert_eq!(
        turn_end_reasons(&events(&child)),
        [json!({"kind": "completed"})]
    );
}

/// `pgrep -f PATTERN`: how many processes match.
fn processes(pattern: &str) -> usize {
    let o = Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// Waits up to `limit` for `done`.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM, SIGHUP or SIGINT from the
/// editor (or the terminal it runs in) ends the server the way a closed
/// stdin does: the running turn closes as aborted, the process exits 0, and
/// every process its tools started goes with it, the running `bash`
/// command's group and the background jobs of `bash_start` alike. A closed
/// stdin does the same.
#[test]
fn a_signal_ends_the_server_with_every_tool_process() {
    // "EOF": the client closes stdin instead, the path signals now share.
    for (n, signal) in ["TERM", "HUP", "INT", "EOF"].into_iter().enumerate() {
        let data = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        // Unique command lines, to find exactly these processes.
        let tag = format!("{}{n}", std::process::id());
        let script = format!(
            r#"{{"responses":[
              {{"turn":{{"toolCalls":[
                {{"id":"c1","name":"bash_start","arguments":["{{\"command\":\"sleep 41.{tag}\"}}"]}},
                {{"id":"c2","name":"bash","arguments":["{{\"command\":\"sleep 42.{tag} & sleep 43.{tag}\",\"description\":\"wait\"}}"]}}
              ]}}}},
              {{"turn":{{"text":["done"]}}}}
            ]}}"#
        );
        let server = mock(&script);
        let mut c = Client::start(data.path(), &server.url());
        c.initialize();
        let session = c.new_session(1, ws.path());
        c.request(
            2,
            "session/set_mode",
            json!({"sessionId": session, "modeId": "auto"}),
        );
        assert_eq!(c.until_response(2, None).1["result"], json!({}));
        c.prompt(3, &session, "Start a server and wait");
        let ours = format!("^sleep 4[123][.]{tag}$");
        wait_for(WAIT, "the three sleeps start", || processes(&ours) == 3);
        if signal == "EOF" {
            drop(c.stdin.take());
        } else {
            let st = Command::new("kill")
                .args([&format!("-{signal}"), &c.child.id().to_string()])
                .status()
                .unwrap();
            assert!(st.success());
        }
        let status = wait_exit(&mut c.child);
        assert_eq!(status.code(), Some(0), "SIG{signal}: {status:?}");
        wait_for(
            Duration::from_secs(5),
            &format!("SIG{signal}: the tools' processes outlived the server"),
            || processes(&ours) == 0,
        );
        let log = transcript(data.path(), &session);
        let evs = events(&log);
        assert_eq!(
            turn_end_reasons(&evs),
            vec![json!({"kind": "aborted", "reason": {"kind": "disposed"}})],
            "SIG{signal}"
        );
        log_check(data.path(), &log);
    }
}

/// The failed `tool_call_update` of call `id` among `messages`: its text.
fn failed_call_text(messages: &[Value], id: &str) -> String {
    let update = updates(messages, "tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == id && u["status"] == "failed")
        .unwrap_or_else(|| panic!("call {id} failed: {messages:?}"));
    update["content"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Sends prompt `id` and reads up to its answer, which must be
/// `end_turn`; returns what came before it.
fn prompt_to_end_turn(c: &mut Client, id: i64, session: &str, text: &str) -> Vec<Value> {
    c.prompt(id, session, text);
    let (before, response) = c.until_response(id, None);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    before
}

/// ACP bounds: a client that sends requests but never reads
/// stdout. dsh's output pipe fills; end of input, or SIGTERM, must still
/// end dsh (the old server blocked in a write under a lock and never saw
/// either). The answers it could not write are dropped and counted on
/// stderr.
#[test]
fn a_client_that_never_reads_cannot_keep_dsh_from_ending() {
    for ending in ["EOF", "TERM"] {
        let data = tempfile::tempdir().unwrap();
        let err_path = data.path().join("stderr.txt");
        let mut child = dsh(data.path())
            .args(["acp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        // Held open and never read.
        let _stdout = child.stdout.take().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // About 600 KiB of answers, far more than a pipe holds.
        let mut batch = String::new();
        for n in 0..6000 {
            batch.push_str(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"no/such_method\"}}\n"
            ));
        }
        stdin.write_all(batch.as_bytes()).unwrap();
        stdin.flush().unwrap();
        if ending == "EOF" {
            drop(stdin);
        } else {
            // Let the server reach the full pipe first.
            std::thread::sleep(Duration::from_millis(500));
            let st = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(st.success());
        }
        let status = wait_exit(&mut child);
        assert_eq!(status.code(), Some(0), "{ending}: {status:?}");
        let err = std::fs::read_to_string(&err_path).unwrap();
        assert!(
            err.contains("messages were not sent (the client stopped reading)"),
            "{ending}: {err}"
        );
        let _ = child.kill();
    }
}

/// ACP bounds: an editor buffer over 16 MiB answers
/// `fs/read_text_file`: that read fails at once with a typed error (the
/// old reader skipped the line and the read waited forever), and the
/// session goes on.
#[test]
fn a_reply_over_16_mib_fails_that_tool_call_and_the_session_goes_on() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let file = ws_path.join("big.txt");
    std::fs::write(&file, "on disk\n").unwrap();
    let server = mock(
        r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"r1","name":"read","arguments":["{\"file_path\": \"big.txt\"}"]}]}},
 {"turn":{"text":["Too big."]}},
 {"turn":{"text":["Still here."]}}
]}"#,
    );
    let mut c = Client::start(data.path(), &server.url());
    let key = file.to_str().unwrap().to_string();
    c.buffers = Some(BTreeMap::from([(key, "a".repeat(17 << 20))]));
    c.initialize();
    let session = c.new_session(1, &ws_path);
    let before = prompt_to_end_turn(&mut c, 2, &session, "Read big.txt");
    let text = failed_call_text(&before, "r1");
    assert!(
        text.contains("the client's answer is longer than 16777216 bytes"),
        "{text}"
    );
    // No error went back for the over-long answer itself.
    assert!(
        before.iter().all(|m| m.get("error").is_none()),
        "{before:?}"
    );
    prompt_to_end_turn(&mut c, 3, &session, "Are you there?");
    c.finish();
}

/// ACP bounds: a client request that is never answered fails
/// its tool call after `--client-timeout`, the session stays usable, and
/// the late answer is dropped.
#[test]
fn an_unanswered_client_request_times_out_and_its_late_answer_is_dropped() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    std::fs::write(ws_path.join("f.txt"), "x\n").unwrap();
    let server = mock(
        r#"{"responses":[
 {"turn":{"toolCalls":[{"id":"r1","name":"read","arguments":["{\"file_path\": \"f.txt\"}"]}]}},
 {"turn":{"text":["No answer."]}},
 {"turn":{"text":["Still here."]}}
]}"#,
    );
    let mut c = Client::start_with(data.path(), &server.url(), &["--client-timeout", "1"]);
    // fs offered, but `buffers` stays unset: nothing answers fs/*.
    c.request(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": true, "writeTextFile": true}}}),
    );
    c.until_response(0, None);
    let session = c.new_session(1, &ws_path);
    let before = prompt_to_end_turn(&mut c, 2, &session, "Read f.txt");
    assert!(
        failed_call_text(&before, "r1")
            .contains("the client did not answer fs/read_text_file within 1 s"),
        "{before:?}"
    );
    let asked = before
        .iter()
        .find(|m| m["method"] == "fs/read_text_file")
        .expect("the read was asked");
    c.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"content": "late\n"}}));
    prompt_to_end_turn(&mut c, 3, &session, "Are you there?");
    c.finish();
}

/// ACP bounds: requests read just before the end of input are
/// answered before dsh exits (the old reader closed the output at end of
/// input, so answers still being worked out were dropped); a prompt still
/// running then is answered `cancelled`.
#[test]
fn requests_sent_right_before_end_of_input_are_answered() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(STALL_SCRIPT);
    let mut c = Client::start(data.path(), &server.url());
    c.request(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    c.request(
        1,
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": []}),
    );
    c.request(
        2,
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": []}),
    );
    c.request(3, "no/such_method", json!({}));
    let seen = c.finish();
    let answered = |id: i64| {
        seen.iter()
            .find(|m| m["id"] == id && m.get("method").is_none())
            .unwrap_or_else(|| panic!("request {id} answered: {seen:?}"))
            .clone()
    };
    assert_eq!(answered(0)["result"]["protocolVersion"], 1);
    assert!(answered(1)["result"]["sessionId"].is_string());
    assert!(answered(2)["result"]["sessionId"].is_string());
    assert_eq!(answered(3)["error"]["code"], -32601);

    // A prompt sent right before the end of input.
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    let session = c.new_session(1, ws.path());
    c.prompt(2, &session, "Say something long");
    let seen = c.finish();
    let response = seen
        .iter()
        .find(|m| m["id"] == 2 && m.get("method").is_none())
        .unwrap_or_else(|| panic!("the prompt was answered: {seen:?}"));
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let evs = events(&transcript(data.path(), &session));
    assert_eq!(
        turn_end_reasons(&evs),
        vec![json!({"kind": "aborted", "reason": {"kind": "disposed"}})]
    );
}

/// With a model that takes images, `promptCapabilities.image` is
/// true and an image prompt reaches the model in the provider's format.
#[test]
fn image_prompts_reach_a_model_that_takes_images() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let server = mock(r#"{"responses":[{"turn":{"text":["a picture"]}}]}"#);
    let mut c = Client::start_with(data.path(), &server.url(), &["--images"]);
    let r = c.initialize();
    assert_eq!(
        r["result"]["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    let session = c.new_session(1, &ws_path);
    // A 2x3 PNG header (all dsh reads of it).
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend_from_slice(&2u32.to_be_bytes());
    png.extend_from_slice(&3u32.to_be_bytes());
    png.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    png.extend_from_slice(b"\0\0\0\0IEND\xaeB`\x82");
    let b64 = dsh_deepseek::base64(&png);
    c.request(
        2,
        "session/prompt",
        json!({"sessionId": session, "prompt": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "mimeType": "image/png", "data": b64}
        ]}),
    );
    let (_, response) = c.until_response(2, None);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let body = server.requests()[0].body_text();
    assert!(
        body.contains(&format!("data:image/png;base64,{b64}")),
        "{body}"
    );
    c.finish();
}

/// `session/new` starts the client's `mcpServers`; the model
/// calls an MCP tool through the permission flow; nothing of the server
/// reaches stdout but JSON-RPC; the log checks.
#[test]
fn session_new_starts_the_clients_mcp_servers() {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "python3 is required when CI=true"
        );
        eprintln!("skipped: python3 not found");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/mcp/tests/fake_server.py");
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(
        r#"{"responses":[
          {"turn":{"toolCalls":[{"id":"m1","name":"mcp__fake__echo","arguments":["{\"text\":\"from acp\"}"]}]}},
          {"turn":{"text":["Done."]}}
        ]}"#,
    );
    let mut c = Client::start(data.path(), &server.url());
    c.initialize();
    c.request(
        1,
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": [
            {"name": "fake", "command": "python3", "args": [script, "normal"], "env": [{"name": "X", "value": "1"}]}
        ]}),
    );
    let (before, r) = c.until_response(1, None);
    let session = r["result"]["sessionId"].as_str().unwrap().to_string();
    assert!(updates(&before, "available_commands_update").is_empty());
    // The server's prompts are offered as commands, after the response.
    let next = c.next();
    let before = vec![next];
    let offered = updates(&before, "available_commands_update");
    assert_eq!(offered.len(), 1, "{before:?}");
    let greet = offered[0]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "mcp:fake:greet")
        .unwrap_or_else(|| panic!("no mcp:fake:greet in {offered:?}"));
    assert_eq!(greet["input"]["hint"], "who=…", "{offered:?}");
    c.prompt(2, &session, "/mcp:fake:greet who=Ada");
    let (before, response) = c.until_response(2, Some("allow_once"));
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let done = updates(&before, "tool_call_update");
    let last = done.last().unwrap();
    assert_eq!(last["status"], "completed", "{before:?}");
    assert!(last.to_string().contains("echo: from acp"), "{last}");
    c.finish();
    let log = transcript(data.path(), &session);
    log_check(data.path(), &log);
    // The prompt the model got is the MCP prompt's text.
    let raw = std::fs::read_to_string(&log).unwrap();
    assert!(raw.contains("Say hello to Ada."), "{raw}");
}
