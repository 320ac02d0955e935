//! `--store postgres` end to end against the test server
//! (`DSH_TEST_POSTGRES_URL`; skipped with a message without it, a failure
//! under `CI=true`) and the bundled mock DeepSeek server: resume on a
//! second process (another working copy and data dir) after a kill -9
//! mid-turn gives the log one machine writes (persistence.md 6.5, checked
//! against the same scenario on the JSONL store); `dsh sessions`, `fork`
//! and the password kept out of every output.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dsh_core::jsonl::load_log;
use dsh_core::session::InvariantChecker;
use dsh_deepseek::mock::{MockServer, Script};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dsh")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh schema; the store URL selects it through `options`.
struct Db {
    base: String,
    schema: String,
}

impl Db {
    fn new() -> Option<Db> {
        let base = dsh_postgres::raw::test_server()?;
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).unwrap();
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let db = Db {
            base,
            schema: format!("dsh_cli_{hex}"),
        };
        db.client()
            .batch_execute(&format!("CREATE SCHEMA {}", db.schema))
            .unwrap();
        Some(db)
    }

    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-csearch_path%3D{}", self.base, self.schema)
    }

    fn password(&self) -> Option<String> {
        let cfg: postgres::Config = self.base.parse().unwrap();
        cfg.get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }

    fn client(&self) -> postgres::Client {
        let mut c = postgres::Client::connect(&self.base, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "SET search_path TO {}",
            self.schema.replace('"', "")
        ))
        .ok();
        c
    }

    /// The stored session ids (none before the first `dsh` created the
    /// tables).
    fn ids(&self) -> Vec<String> {
        self.client()
            .query("SELECT id FROM sessions ORDER BY created_at, id", &[])
            .unwrap_or_default()
            .iter()
            .map(|r| String::from_utf8(r.get::<_, Vec<u8>>(0)).unwrap())
            .collect()
    }

    /// The stored log of `id`: the header line, then one line per event.
    fn log(&self, id: &str) -> String {
        let mut c = self.client();
        let key = id.as_bytes();
        let header: String = c
            .query_one("SELECT header FROM sessions WHERE id = $1", &[&key])
            .unwrap()
            .get(0);
        let mut out = format!("{header}\n");
        for r in c
            .query(
                "SELECT event FROM events WHERE session = $1 ORDER BY seq",
                &[&key],
            )
            .unwrap()
        {
            out.push_str(r.get::<_, &str>(0));
            out.push('\n');
        }
        out
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

/// Where a scenario keeps its sessions.
enum Store<'a> {
    Pg(&'a Db),
    Jsonl(&'a Path),
}

impl Store<'_> {
    /// `dsh SUB` with this store's flags, for one "machine": its own data
    /// dir (and working copy); the store URL comes from `DSH_STORE_URL`.
    fn dsh(&self, data: &Path, sub: &str) -> Command {
        let mut c = Command::new(bin());
        c.arg(sub)
            .env("XDG_DATA_HOME", data)
            .env_remove("DEEPSEEK_API_KEY")
            .env_remove("DEEPSEEK_BASE_URL")
            .env_remove("DSH_STORE_URL")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        match self {
            Store::Pg(db) => {
                c.env("DSH_STORE_URL", db.url())
                    .args(["--store", "postgres"]);
            }
            Store::Jsonl(root) => {
                c.arg("--store-dir").arg(root);
            }
        }
        c
    }

    fn ids(&self) -> Vec<String> {
        match self {
            Store::Pg(db) => db.ids(),
            Store::Jsonl(root) => transcripts(root)
                .iter()
                .map(|p| {
                    let bytes = std::fs::read(p).unwrap();
                    let first = bytes.split(|b| *b == b'\n').next().unwrap();
                    dsh_core::jsonl::decode_header_line(first)
                        .unwrap()
                        .id
                        .to_string()
                })
                .collect(),
        }
    }

    fn log(&self, id: &str) -> String {
        match self {
            Store::Pg(db) => db.log(id),
            Store::Jsonl(root) => {
                let p = transcripts(root)
                    .into_iter()
                    .find(|p| std::fs::read_to_string(p).unwrap().contains(id))
                    .unwrap();
                std::fs::read_to_string(p).unwrap()
            }
        }
    }
}

fn transcripts(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(projects) = std::fs::read_dir(root.join("sessions")) else {
        return out;
    };
    for project in projects {
        for session in std::fs::read_dir(project.unwrap().path()).unwrap() {
            let p = session.unwrap().path().join("session.jsonl");
            if p.exists() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `dsh SUB --store … ARGS` on `store` from data dir `data`.
fn run(store: &Store<'_>, data: &Path, sub: &str, args: &[&str]) -> Command {
    let mut c = store.dsh(data, sub);
    c.args(args);
    c
}

const STALL: &str = r#"{"responses":[
  {"fault":{"kind":"stall","turn":{"text":["Partial ","answer ","never ","finished"]},"afterEvents":3}},
  {"turn":{"text":["Second ","answer."]}}]}"#;

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill9(child: &mut Child) {
    let st = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = child.wait();
}

/// The scenario: machine 1 starts a turn that stalls mid-stream and is
/// killed (-9) once the chunks received are stored; machine 2 (another
/// data dir and working copy) resumes the session with `chat --resume`.
/// Returns the stored log (header line first) and machine 2's output.
fn crash_and_resume(store: &Store<'_>) -> (String, Output) {
    let server = MockServer::start_on(Script::from_json(STALL).unwrap(), 0).unwrap();
    let (data1, ws1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut child = run(
        store,
        data1.path(),
        "run",
        &[
            "--base-url",
            &server.url(),
            "--cwd",
            ws1.path().to_str().unwrap(),
            "go slowly",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut id = String::new();
    wait_for("the streamed chunks to be stored", 30, || {
        if let Some(first) = store.ids().first() {
            id = first.clone();
            // The last chunk before the stall.
            store.log(&id).contains("\"text\":\"answer \"")
        } else {
            false
        }
    });
    kill9(&mut child);
    let (data2, ws2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let out = run(
        store,
        data2.path(),
        "chat",
        &[
            "--base-url",
            &server.url(),
            "--cwd",
            ws2.path().to_str().unwrap(),
            "--resume",
            &id,
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("(resumed)"),
        "{}",
        text(&out.stdout)
    );
    (store.log(&id), out)
}

/// A log with what differs between two runs blanked: times, the session
/// id, the working directory, generated message ids.
fn normalized(log: &str, id: &str, cwd: &str) -> Vec<serde_json::Value> {
    fn walk(v: &mut serde_json::Value, id: &str, cwd: &str) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if matches!(k.as_str(), "time" | "createdAt" | "id" | "messageId") {
                        *x = serde_json::Value::Null;
                    } else {
                        walk(x, id, cwd);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, id, cwd)),
            serde_json::Value::String(s) => {
                *s = s.replace(id, "<id>").replace(cwd, "<cwd>");
                // Each run has its own mock server, so its own port in the
                // provider route (`openai-compatible:127.0.0.1:PORT`).
                if let Some(rest) = s.strip_prefix("openai-compatible:127.0.0.1:")
                    && rest.bytes().all(|b| b.is_ascii_digit())
                {
                    *s = "openai-compatible:127.0.0.1:<port>".into();
                }
            }
            _ => {}
        }
    }
    log.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            walk(&mut v, id, cwd);
            v
        })
        .collect()
}

fn header_field(log: &str, field: &str) -> String {
    let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    first[field].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_session_killed_mid_turn_resumes_on_a_second_process_as_on_one_machine() {
    let Some(db) = Db::new() else { return };
    let (pg_log, out) = crash_and_resume(&Store::Pg(&db));
    // The interrupted turn is closed (6.5) and the stored log is valid.
    let loaded = load_log(pg_log.as_bytes(), &[]).expect("a valid log");
    assert!(!loaded.needs_repair(), "the repair was committed");
    InvariantChecker::check_log(loaded.session.events()).unwrap();
    assert!(pg_log.contains("\"kind\":\"interrupted\""), "{pg_log}");
    // The chunks received before the kill are kept.
    assert!(pg_log.contains("\"text\":\"answer \""), "{pg_log}");
    // The same scenario on one machine's JSONL store writes the same log.
    let root = tempfile::tempdir().unwrap();
    let (jsonl_log, _) = crash_and_resume(&Store::Jsonl(root.path()));
    let (pid, jid) = (header_field(&pg_log, "id"), header_field(&jsonl_log, "id"));
    let (pcwd, jcwd) = (
        header_field(&pg_log, "cwd"),
        header_field(&jsonl_log, "cwd"),
    );
    assert_eq!(
        normalized(&pg_log, &pid, &pcwd),
        normalized(&jsonl_log, &jid, &jcwd),
        "postgres:\n{pg_log}\njsonl:\n{jsonl_log}"
    );
    // Nothing printed the password.
    if let Some(pw) = db.password() {
        assert!(!text(&out.stdout).contains(&pw) && !text(&out.stderr).contains(&pw));
    }
}

const TEXT_TURN: &str = r#"{"responses":[{"turn":{"text":["Hello"," from the mock."]}},
  {"turn":{"text":["Forked ","answer."]}}]}"#;

#[test]
fn sessions_and_fork_work_on_postgres_without_showing_the_password() {
    let Some(db) = Db::new() else { return };
    let store = Store::Pg(&db);
    let server = MockServer::start_on(Script::from_json(TEXT_TURN).unwrap(), 0).unwrap();
    let data = tempfile::tempdir().unwrap();
    let o = run(
        &store,
        data.path(),
        "run",
        &["--base-url", &server.url(), "kept in postgres"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let id = db.ids().remove(0);
    // Another machine lists it.
    let other = tempfile::tempdir().unwrap();
    let o = run(&store, other.path(), "sessions", &[]).output().unwrap();
    let listing = text(&o.stdout);
    assert_eq!(listing.lines().count(), 2, "{listing}");
    let row = listing.lines().nth(1).unwrap();
    assert!(
        row.starts_with(&id) && row.ends_with("kept in postgres"),
        "{listing}"
    );
    // Fork it there; the fork is stored with its parent.
    let o = run(
        &store,
        other.path(),
        "fork",
        &["--base-url", &server.url(), &id],
    )
    .output()
    .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let ids = db.ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let fork = ids.iter().find(|i| **i != id).unwrap();
    assert_eq!(header_field(&db.log(fork), "parentSession"), id);
    let o = run(&store, other.path(), "sessions", &[]).output().unwrap();
    assert!(
        text(&o.stdout).contains(&format!("└ {fork}")),
        "{}",
        text(&o.stdout)
    );
    // A wrong URL names the server without the password.
    let bad = "postgres://someone:hunter2-pw@127.0.0.1:1/nothing";
    let o = run(&store, other.path(), "sessions", &["--store-url", bad])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let err = text(&o.stderr);
    assert!(err.contains("someone:***@127.0.0.1:1/nothing"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    if let Some(pw) = db.password() {
        for out in [&o.stdout, &o.stderr] {
            assert!(!text(out).contains(&pw));
        }
    }
}

/// Sends one JSON-RPC line.
fn send(stdin: &mut std::process::ChildStdin, v: serde_json::Value) {
    use std::io::Write;
    writeln!(stdin, "{v}").unwrap();
    stdin.flush().unwrap();
}

/// Reads lines until the response to `id`.
fn response(lines: &std::sync::mpsc::Receiver<String>, id: i64) -> serde_json::Value {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from dsh acp");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v.get("method").is_none() && v["id"] == serde_json::json!(id) {
            return v;
        }
    }
}

/// `dsh acp --store postgres`: a session made and prompted over ACP is
/// stored in the database, and a second `dsh acp` process loads it.
#[test]
fn acp_sessions_live_in_postgres() {
    use serde_json::json;
    use std::io::{BufRead, BufReader};
    let Some(db) = Db::new() else { return };
    let store = Store::Pg(&db);
    let server = MockServer::start_on(Script::from_json(TEXT_TURN).unwrap(), 0).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let mut session = String::new();
    for (round, data) in [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()]
        .iter()
        .enumerate()
    {
        let mut child = run(&store, data.path(), "acp", &["--base-url", &server.url()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        send(
            &mut stdin,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
        );
        response(&lines, 0);
        if round == 0 {
            send(
                &mut stdin,
                json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                       "params": {"cwd": ws_path, "mcpServers": []}}),
            );
            let r = response(&lines, 1);
            session = r["result"]["sessionId"].as_str().unwrap().to_string();
            send(
                &mut stdin,
                json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                       "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hi over acp"}]}}),
            );
            let r = response(&lines, 2);
            assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        } else {
            send(
                &mut stdin,
                json!({"jsonrpc": "2.0", "id": 1, "method": "session/load",
                       "params": {"sessionId": session, "cwd": ws_path, "mcpServers": []}}),
            );
            let r = response(&lines, 1);
            assert!(r.get("error").is_none(), "{r}");
        }
        drop(stdin);
        let _ = child.wait();
    }
    assert_eq!(db.ids(), [session.clone()]);
    let log = db.log(&session);
    assert!(log.contains("hi over acp"), "{log}");
    assert!(log.contains("\"kind\":\"completed\""), "{log}");
}
