//! The stdio client against a scripted server (tests/fake_server.py,
//! python3 standard library only): handshake, pagination, rendering,
//! roots, environment policy, and the faults a server can show (crash mid-call,
//! no answer, malformed JSON-RPC, a 100 MB line, 10,000 tools, names that
//! collide after normalisation, list_changed).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_mcp::{Context, Mcp, ServerConfig, ServersConfig, Status};
use dsh_tools::{CancelToken, ToolCallRequest, ToolContext, Workspace};
use serde_json::{Value, json};

fn python() -> Option<String> {
    for p in ["python3", "python"] {
        let ok = std::process::Command::new(p)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Some(p.to_string());
        }
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("python3 is required for the MCP stdio tests when CI=true");
    }
    eprintln!("skipped: python3 not found");
    None
}

fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fake_server.py")
        .to_string_lossy()
        .into_owned()
}

struct Fixture {
    mcp: Mcp,
    dir: tempfile::TempDir,
}

fn start_with(mode: &str, tweak: impl Fn(&mut ServerConfig)) -> Option<Fixture> {
    let py = python()?;
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::stdio(py, vec![script(), mode.to_string()]);
    tweak(&mut config);
    let mut servers = ServersConfig::new();
    servers.insert("fake".into(), config);
    let mut cx = Context::new(dir.path());
    cx.log_dir = Some(dir.path().join("logs"));
    cx.parent_env = Some(vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
        ("DEEPSEEK_API_KEY".into(), "sk-secret".into()),
        ("GITHUB_TOKEN".into(), "ghp-secret".into()),
        ("PLAIN".into(), "1".into()),
    ]);
    let mcp = Mcp::start(&servers, &cx);
    Some(Fixture { mcp, dir })
}

fn start(mode: &str) -> Option<Fixture> {
    start_with(mode, |_| {})
}

fn call(f: &Fixture, public: &str, args: Value) -> ToolOutcome {
    let (tools, _) = f.mcp.tools(&[]);
    let tool = tools
        .iter()
        .find(|t| t.definition().schema.name == public)
        .unwrap_or_else(|| panic!("no tool {public}"));
    let ctx = ToolContext::new(Workspace::new(f.dir.path()).unwrap());
    tool.execute(
        &ToolCallRequest {
            name: public.into(),
            call_id: "c1".into(),
            arguments: args,
        },
        &ctx,
    )
}

fn text(o: &ToolOutcome) -> String {
    match o.content.first() {
        Some(ContentBlock::Text { text, .. }) => text.clone(),
        other => panic!("{other:?}"),
    }
}

fn code(o: &ToolOutcome) -> Option<String> {
    o.error
        .as_ref()
        .and_then(|e| e.info.as_ref())
        .map(|i| i.code.clone())
}

#[test]
fn handshake_pagination_and_calls() {
    let Some(f) = start("normal") else { return };
    assert_eq!(f.mcp.reports(), Vec::<String>::new());
    let s = &f.mcp.servers()[0];
    assert_eq!(s.status(), Status::Connected);
    assert_eq!(s.info().unwrap().protocol_version, "2025-06-18");
    let (entries, collisions) = f.mcp.entries(&[]);
    let names: Vec<&str> = entries.iter().map(|e| e.public.as_str()).collect();
    assert_eq!(
        names,
        [
            "mcp__fake__echo",
            "mcp__fake__env",
            "mcp__fake__roots",
            "mcp__fake__rich",
            "mcp__fake__fail"
        ],
        "both pages are listed"
    );
    assert!(collisions.is_empty());
    assert!(entries[1].read_only);

    let o = call(&f, "mcp__fake__echo", json!({"text": "hi"}));
    assert!(!o.is_error());
    assert_eq!(text(&o), "echo: hi");
    assert_eq!(
        text(&call(&f, "mcp__fake__rich", json!({}))),
        "one\nResource link: readme (file:///r.md)\n[image unavailable: image/png; this result was not admitted to durable model context; raw image data remains available to programmatic callers]"
    );
    let e = call(&f, "mcp__fake__fail", json!({}));
    assert!(e.is_error());
    assert_eq!(text(&e), "Error: it failed");
}

#[test]
fn resources_are_listed_and_read_through_two_tools() {
    let Some(f) = start("normal") else { return };
    let listed = text(&call(&f, "list_mcp_resources", json!({})));
    assert_eq!(
        listed,
        "fake: readme <mem:///readme> text/plain — The readme"
    );
    let read = call(
        &f,
        "read_mcp_resource",
        json!({"server": "fake", "uri": "mem:///readme"}),
    );
    assert_eq!(text(&read), "read me first");
    let missing = call(
        &f,
        "read_mcp_resource",
        json!({"server": "fake", "uri": "mem:///nope"}),
    );
    assert!(missing.is_error());
    assert!(
        text(&missing).contains("Resource not found"),
        "{}",
        text(&missing)
    );
    let unknown = call(&f, "list_mcp_resources", json!({"server": "other"}));
    assert_eq!(code(&unknown).as_deref(), Some("UNKNOWN_SERVER"));
}

#[test]
fn roots_answer_the_workspace_and_the_environment_follows_the_policy() {
    let Some(f) = start_with("normal", |c| {
        c.env.insert("EXTRA".into(), "x".into());
    }) else {
        return;
    };
    let roots = text(&call(&f, "mcp__fake__roots", json!({})));
    let v: Value = serde_json::from_str(&roots).unwrap();
    let uri = v["roots"][0]["uri"].as_str().unwrap();
    assert!(uri.starts_with("file:///"), "{uri}");
    let env = text(&call(&f, "mcp__fake__env", json!({})));
    let names: Vec<&str> = env.lines().collect();
    assert!(names.contains(&"PLAIN"));
    assert!(names.contains(&"EXTRA"));
    assert!(!names.contains(&"DEEPSEEK_API_KEY"), "{names:?}");
    assert!(!names.contains(&"GITHUB_TOKEN"), "{names:?}");
}

#[test]
fn a_named_variable_passes_the_policy() {
    let Some(f) = start_with("normal", |c| c.env_vars.push("GITHUB_TOKEN".into())) else {
        return;
    };
    let env = text(&call(&f, "mcp__fake__env", json!({})));
    assert!(env.lines().any(|l| l == "GITHUB_TOKEN"));
}

#[test]
fn a_crash_mid_call_is_a_typed_error_then_the_server_comes_back() {
    let Some(f) = start("crash") else { return };
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert_eq!(code(&o).as_deref(), Some("CONNECTION_CLOSED"), "{o:?}");
    let t = text(&o);
    assert!(t.contains("exited"), "{t}");
    assert!(
        t.contains("crashing on purpose"),
        "the stderr tail is shown: {t}"
    );
    // Meanwhile: a clear error naming the reconnect attempt.
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert_eq!(code(&o).as_deref(), Some("SERVER_UNAVAILABLE"));
    assert!(
        text(&o).contains("reconnect attempt 1 of 10"),
        "{}",
        text(&o)
    );
    // After the first backoff delay the server is started again (and
    // crashes again on the call).
    std::thread::sleep(Duration::from_millis(600));
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert_eq!(code(&o).as_deref(), Some("CONNECTION_CLOSED"), "{o:?}");
    let log = std::fs::read_to_string(f.dir.path().join("logs/fake.log")).unwrap();
    assert_eq!(log.matches("got initialize").count(), 2, "{log}");
}

#[test]
fn a_server_that_never_answers_times_out_and_is_told_to_cancel() {
    let Some(f) = start_with("hang", |c| c.tool_timeout_sec = Some(0.5)) else {
        return;
    };
    let t0 = Instant::now();
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert_eq!(code(&o).as_deref(), Some("TIMEOUT"), "{o:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // The session goes on: the server still answers pings and its log
    // shows the cancellation.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = std::fs::read_to_string(f.dir.path().join("logs/fake.log")).unwrap_or_default();
        if log.contains("got notifications/cancelled") {
            break;
        }
        assert!(Instant::now() < deadline, "no cancellation in {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(f.mcp.servers()[0].status(), Status::Connected);
}

#[test]
fn progress_reports_restart_the_call_timeout() {
    // 1.5 s of work with a report every 0.25 s, under a 0.8 s timeout.
    let Some(f) = start_with("progress", |c| c.tool_timeout_sec = Some(0.8)) else {
        return;
    };
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert!(!o.is_error(), "{o:?}");
    assert_eq!(text(&o), "slow but alive");
}

#[test]
fn a_cancelled_turn_cancels_the_call() {
    let Some(f) = start("hang") else { return };
    let (tools, _) = f.mcp.tools(&[]);
    let tool = tools
        .iter()
        .find(|t| t.definition().schema.name == "mcp__fake__echo")
        .unwrap();
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(Workspace::new(f.dir.path()).unwrap()).with_cancel(cancel.clone());
    let c2 = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        c2.cancel();
    });
    let o = tool.execute(
        &ToolCallRequest {
            name: "mcp__fake__echo".into(),
            call_id: "c".into(),
            arguments: json!({}),
        },
        &ctx,
    );
    assert_eq!(code(&o).as_deref(), Some("ABORTED"), "{o:?}");
}

#[test]
fn malformed_json_rpc_closes_the_connection_with_a_typed_error() {
    let Some(f) = start("malformed") else { return };
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert_eq!(code(&o).as_deref(), Some("CONNECTION_CLOSED"), "{o:?}");
    assert!(text(&o).contains("not JSON"), "{}", text(&o));
}

#[test]
fn a_100_mb_line_is_refused_without_buffering_it() {
    let Some(f) = start("huge") else { return };
    let o = call(&f, "mcp__fake__echo", json!({"text": "x"}));
    assert_eq!(code(&o).as_deref(), Some("CONNECTION_CLOSED"), "{o:?}");
    assert!(
        text(&o).contains("longer than 8388608 bytes"),
        "{}",
        text(&o)
    );
}

#[test]
fn ten_thousand_tools_are_capped_with_a_report() {
    let Some(f) = start("many") else { return };
    let (entries, _) = f.mcp.entries(&[]);
    assert_eq!(entries.len(), dsh_mcp::proto::MAX_TOOLS_PER_SERVER);
    let reports = f.mcp.reports();
    assert!(
        reports.iter().any(|r| r.contains("more than 1024 tools")),
        "{reports:?}"
    );
}

#[test]
fn names_that_collide_after_normalisation_are_skipped_and_reported() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut servers = ServersConfig::new();
    // `mcp__a__b__echo` both ways: server "a__b" tool "echo", server "a"
    // tool "b__echo" (listed by neither; so use two servers named so that
    // the tool "echo" of "a__b" meets a built-in of the same name).
    servers.insert(
        "a__b".into(),
        ServerConfig::stdio(py.clone(), vec![script(), "normal".into()]),
    );
    servers.insert(
        "a".into(),
        ServerConfig::stdio(py, vec![script(), "normal".into()]),
    );
    let mcp = Mcp::start(&servers, &Context::new(dir.path()));
    let (entries, collisions) = mcp.entries(&["mcp__a__b__echo"]);
    assert!(entries.iter().all(|e| e.public != "mcp__a__b__echo"));
    assert_eq!(collisions.len(), 1, "{collisions:?}");
    assert!(collisions[0].contains("another tool"));
    // Both servers keep their other tools.
    assert!(entries.iter().any(|e| e.public == "mcp__a__echo"));
    assert!(entries.iter().any(|e| e.public == "mcp__a__b__env"));
}

#[test]
fn list_changed_relists_and_a_removed_tool_is_refused() {
    let Some(f) = start("listchanged") else {
        return;
    };
    let s = f.mcp.servers()[0].clone();
    let before = s.generation();
    // The bodies as the session built them at start.
    let (tools, _) = f.mcp.tools(&[]);
    let fail = tools
        .iter()
        .find(|t| t.definition().schema.name == "mcp__fake__fail")
        .unwrap();
    let plugin = f.mcp.plugin(&[]);
    let mut schemas: Vec<dsh_core::ToolSchema> =
        tools.iter().map(|t| t.definition().schema).collect();
    plugin.refresh(&mut schemas);
    assert_eq!(schemas.len(), 7, "nothing changes before the notification");
    assert_eq!(
        text(&call(&f, "mcp__fake__echo", json!({"text": "x"}))),
        "echo: x"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.generation() == before {
        assert!(Instant::now() < deadline, "no re-list");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.tools().iter().all(|t| t.name != "fail"));
    plugin.refresh(&mut schemas);
    let names: Vec<&str> = schemas.iter().map(|t| t.name.as_str()).collect();
    assert!(
        !names.contains(&"mcp__fake__fail"),
        "the next request drops it: {names:?}"
    );
    assert_eq!(names.len(), 6);
    let ctx = ToolContext::new(Workspace::new(f.dir.path()).unwrap());
    let o = fail.execute(
        &ToolCallRequest {
            name: "mcp__fake__fail".into(),
            call_id: "c".into(),
            arguments: json!({}),
        },
        &ctx,
    );
    assert_eq!(code(&o).as_deref(), Some("TOOL_REMOVED"), "{o:?}");
}

#[test]
fn a_server_that_fails_to_start_is_reported_once_and_others_go_on() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut servers = ServersConfig::new();
    servers.insert(
        "ok".into(),
        ServerConfig::stdio(py.clone(), vec![script(), "normal".into()]),
    );
    servers.insert(
        "broken".into(),
        ServerConfig::stdio(
            py,
            vec![
                "-c".into(),
                "import sys; sys.stderr.write('boom: no config\\n'); sys.exit(2)".into(),
            ],
        ),
    );
    servers.insert(
        "missing".into(),
        ServerConfig::stdio("/nonexistent/dsh-mcp-server", vec![]),
    );
    servers.insert("bad.name".into(), ServerConfig::stdio("x", vec![]));
    let mut http = ServerConfig::http("http://127.0.0.1:9/mcp");
    http.enabled = Some(false);
    servers.insert("off".into(), http);
    let mcp = Mcp::start(&servers, &Context::new(dir.path()));
    let reports = mcp.reports();
    assert_eq!(reports.len(), 3, "{reports:?}");
    assert!(
        reports
            .iter()
            .any(|r| r.contains("\"broken\"") && r.contains("boom: no config")),
        "{reports:?}"
    );
    assert!(
        reports
            .iter()
            .any(|r| r.contains("\"missing\"") && r.contains("cannot start"))
    );
    assert!(reports.iter().any(|r| r.contains("\"bad.name\"")));
    let (entries, _) = mcp.entries(&[]);
    assert_eq!(entries.len(), 5);
    let _ = PathBuf::new();
}

#[test]
fn protocol_2025_03_26_is_accepted_and_older_refused() {
    let Some(py) = python() else { return };
    for (version, ok) in [("2025-03-26", true), ("2024-11-05", false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut servers = ServersConfig::new();
        let mut c = ServerConfig::stdio(py.clone(), vec![script(), "normal".into()]);
        c.env.insert("FAKE_VERSION".into(), version.into());
        servers.insert("v".into(), c);
        let mcp = Mcp::start(&servers, &Context::new(dir.path()));
        assert_eq!(
            mcp.servers()[0].status() == Status::Connected,
            ok,
            "{version}: {:?}",
            mcp.reports()
        );
    }
}

/// A server written with the official Python SDK (PyPI `mcp`, in the
/// venv `DSH_MCP_PYTHON` names): its tool and its resource through dsh.
#[test]
fn a_python_sdk_server_serves_its_tool_and_resource() {
    let py = std::env::var("DSH_MCP_PYTHON").ok();
    let ok = py.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", "import mcp.server"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    });
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("DSH_MCP_PYTHON with the PyPI package mcp is required when CI=true");
        }
        eprintln!("skipped: DSH_MCP_PYTHON (a python with PyPI mcp) not set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_server.py");
    let mut servers = ServersConfig::new();
    let mut c = ServerConfig::stdio(py.unwrap(), vec![server.to_string_lossy().into_owned()]);
    c.startup_timeout_sec = Some(30.0);
    servers.insert("py".into(), c);
    let mcp = Mcp::start(&servers, &Context::new(dir.path()));
    assert_eq!(mcp.reports(), Vec::<String>::new());
    let f = Fixture { mcp, dir };
    assert_eq!(
        text(&call(&f, "mcp__py__add", json!({"a": 2, "b": 3}))),
        "2 + 3 = 5"
    );
    let listed = text(&call(&f, "list_mcp_resources", json!({})));
    assert!(listed.contains("<notes://today>"), "{listed}");
    let read = call(
        &f,
        "read_mcp_resource",
        json!({"server": "py", "uri": "notes://today"}),
    );
    assert_eq!(text(&read), "buy milk");
    assert!(f.mcp.servers()[0].info().unwrap().prompts);
    let prompts = f.mcp.prompts();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert_eq!(
        (prompts[0].server.as_str(), prompts[0].name.as_str()),
        ("py", "review")
    );
    assert_eq!(prompts[0].arguments, ["path"]);
    let args = [("path".to_string(), "src/lib.rs".to_string())]
        .into_iter()
        .collect();
    assert_eq!(
        f.mcp.get_prompt("py", "review", &args).unwrap(),
        "Please review src/lib.rs."
    );
    assert!(f.mcp.get_prompt("nope", "review", &args).is_err());
}

/// `@modelcontextprotocol/server-filesystem` (npm, `DSH_MCP_NODE_DIR`):
/// reads a file of the workspace (the root dsh answers to `roots/list`),
/// refuses one outside it as an error result, and its read tools carry
/// `readOnlyHint`.
#[test]
fn server_filesystem_reads_inside_the_workspace_only() {
    let entry = std::env::var_os("DSH_MCP_NODE_DIR").map(|d| {
        PathBuf::from(d).join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
    });
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !(node && entry.as_ref().is_some_and(|e| e.exists())) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("node and DSH_MCP_NODE_DIR with server-filesystem are required when CI=true");
        }
        eprintln!("skipped: node or DSH_MCP_NODE_DIR with server-filesystem not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(ws.join("note.txt"), "inside\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = std::fs::canonicalize(outside.path())
        .unwrap()
        .join("secret.txt");
    std::fs::write(&secret, "outside\n").unwrap();
    let mut servers = ServersConfig::new();
    let mut c = ServerConfig::stdio(
        "node",
        vec![
            entry.unwrap().to_string_lossy().into_owned(),
            ws.to_string_lossy().into_owned(),
        ],
    );
    c.startup_timeout_sec = Some(30.0);
    servers.insert("fs".into(), c);
    let mcp = Mcp::start(&servers, &Context::new(&ws));
    assert_eq!(mcp.reports(), Vec::<String>::new());
    let (entries, _) = mcp.entries(&[]);
    let read = entries
        .iter()
        .find(|e| e.public == "mcp__fs__read_text_file")
        .unwrap();
    assert!(read.read_only);
    let f = Fixture { mcp, dir };
    let path = ws.join("note.txt").to_string_lossy().into_owned();
    assert_eq!(
        text(&call(&f, "mcp__fs__read_text_file", json!({"path": path}))),
        "inside\n"
    );
    let o = call(
        &f,
        "mcp__fs__read_text_file",
        json!({"path": secret.to_string_lossy()}),
    );
    assert!(o.is_error(), "{o:?}");
    assert!(
        text(&o).contains("Access denied") || text(&o).contains("outside"),
        "{}",
        text(&o)
    );
}

/// An HTTP server that is not there: reported once at start, with the
/// reason; the bearer token named by the config never shows in it.
#[test]
fn an_unreachable_http_server_is_reported_without_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = ServerConfig::http(format!("http://127.0.0.1:{port}/mcp"));
    c.bearer_token_env_var = Some("TOKEN_VAR".into());
    c.startup_timeout_sec = Some(5.0);
    let mut servers = ServersConfig::new();
    servers.insert("web".into(), c);
    let mut cx = Context::new(dir.path());
    cx.parent_env = Some(vec![("TOKEN_VAR".into(), "tok-canary-99".into())]);
    let mcp = Mcp::start(&servers, &cx);
    let reports = mcp.reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].contains("failed to start"), "{reports:?}");
    assert!(!reports[0].contains("tok-canary-99"), "{reports:?}");
    // A missing token variable is its own clear error.
    let mut c = ServerConfig::http(format!("http://127.0.0.1:{port}/mcp"));
    c.bearer_token_env_var = Some("NOT_SET_ANYWHERE".into());
    let mut servers = ServersConfig::new();
    servers.insert("web".into(), c);
    let mut cx = Context::new(dir.path());
    cx.parent_env = Some(Vec::new());
    let reports = Mcp::start(&servers, &cx).reports();
    assert!(
        reports[0].contains("NOT_SET_ANYWHERE is not set"),
        "{reports:?}"
    );
}

/// Streamable HTTP against a scripted server (tests/fake_http_server.py):
/// the session id and negotiated version go on every later request, the
/// bearer token too; JSON and SSE answers; a body that is not JSON-RPC
/// closes the connection with a typed error; an ended session (404) is
/// reported, and the next call after the backoff starts a new session.
#[test]
fn streamable_http_sessions_answers_and_expiry() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("http.log");
    let mut child = std::process::Command::new(&py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_http_server.py"))
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut port,
    )
    .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(child);
    let mut c = ServerConfig::http(format!("http://127.0.0.1:{}/mcp", port.trim()));
    c.bearer_token_env_var = Some("TOKEN_VAR".into());
    let mut servers = ServersConfig::new();
    servers.insert("web".into(), c);
    let mut cx = Context::new(dir.path());
    cx.parent_env = Some(vec![("TOKEN_VAR".into(), "tok".into())]);
    let mcp = Mcp::start(&servers, &cx);
    assert_eq!(mcp.reports(), Vec::<String>::new());
    let f = Fixture { mcp, dir };
    assert_eq!(text(&call(&f, "mcp__web__echo", json!({}))), "echo in s1");
    assert_eq!(text(&call(&f, "mcp__web__sse", json!({}))), "sse in s1");
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(
        seen.contains("tools/call session=s1 version=2025-06-18 auth=yes"),
        "{seen}"
    );
    assert!(
        seen.contains("initialize session=None version=None auth=yes"),
        "{seen}"
    );
    // The session ends; the next request is refused with 404.
    assert_eq!(
        text(&call(&f, "mcp__web__expire", json!({}))),
        "expire in s1"
    );
    let o = call(&f, "mcp__web__echo", json!({}));
    assert_eq!(code(&o).as_deref(), Some("CONNECTION_CLOSED"), "{o:?}");
    assert!(text(&o).contains("ended the session"), "{}", text(&o));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(text(&call(&f, "mcp__web__echo", json!({}))), "echo in s2");
    // Not JSON-RPC: the connection closes with a typed error.
    let o = call(&f, "mcp__web__bad", json!({}));
    assert_eq!(code(&o).as_deref(), Some("CONNECTION_CLOSED"), "{o:?}");
    assert!(text(&o).contains("not JSON"), "{}", text(&o));
}
