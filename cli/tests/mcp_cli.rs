//! MCP servers through `dsh run`: a scripted model calls an MCP
//! tool; the log passes `dsh log check` and `dsh replay --check`; approval
//! applies; a server that fails to start is reported once and the run goes
//! on; `dsh mcp add/list/remove` edit the config file.
//!
//! The scripted server is `plugins/mcp/tests/fake_server.py` (python3
//! standard library); `@modelcontextprotocol/server-everything` runs when
//! `DSH_MCP_NODE_DIR` names the folder holding its `node_modules` (`.ci/run`
//! installs it). Missing programs skip, or fail with `CI=true`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::{checks_and_replays, dsh, events, have, mock, need, needs, text, transcripts};

fn python() -> Option<String> {
    needs("python3").then(|| "python3".to_string())
}

fn fake_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/mcp/tests/fake_server.py")
        .to_string_lossy()
        .into_owned()
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn write_config(dir: &Path, tables: &str) -> PathBuf {
    let p = dir.join("mcp.toml");
    std::fs::write(&p, tables).unwrap();
    p
}

fn of_type<'a>(events: &'a [serde_json::Value], ty: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

fn script(tool: &str, args: &str, answer: &str) -> String {
    let args = serde_json::to_string(args).unwrap();
    format!(
        r#"{{"responses":[
          {{"turn":{{"toolCalls":[{{"id":"c1","name":"{tool}","arguments":[{args}]}}]}}}},
          {{"turn":{{"text":["{answer}"]}}}}
        ]}}"#
    )
}

#[test]
fn run_calls_an_mcp_tool_and_the_log_checks_and_replays() {
    let Some(py) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = write_config(
        data.path(),
        &format!(
            "[mcp_servers.fake]\ncommand = {}\nargs = [{}, \"normal\"]\n\n[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n",
            toml_str(&py),
            toml_str(&fake_server())
        ),
    );
    let server = mock(&script(
        "mcp__fake__echo",
        r#"{"text":"hello"}"#,
        "It said hello.",
    ));
    let o = dsh(data.path())
        .args(["run", "--yes", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("echo hello")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("It said hello."), "{out}");
    assert_eq!(
        err.matches("MCP server \"broken\" failed to start").count(),
        1,
        "reported once: {err}"
    );
    let logs = transcripts(data.path());
    assert_eq!(logs.len(), 1);
    let ev = events(&logs[0]);
    let calls = of_type(&ev, "tool/call");
    assert_eq!(calls[0]["data"]["name"], "mcp__fake__echo", "{calls:?}");
    let results = of_type(&ev, "tool/result");
    let content = &results[0]["data"]["message"]["content"][0]["content"][0]["text"];
    assert_eq!(content, "echo: hello", "{results:?}");
    checks_and_replays(data.path(), &logs[0]);
    // The server's stderr went to its log file, never to the terminal.
    assert!(!err.contains("got tools/call"), "{err}");
    let log = std::fs::read_to_string(data.path().join("dsh/mcp-logs/fake.log"))
        .or_else(|_| std::fs::read_to_string(data.path().join("mcp-logs/fake.log")))
        .unwrap_or_default();
    assert!(log.contains("got tools/call"), "{log}");
}

/// Subagents inherit the parent's MCP servers over the same connections:
/// the child calls the tool; the server was started once.
#[test]
fn a_subagent_uses_the_parents_mcp_connection() {
    let Some(py) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = write_config(
        data.path(),
        &format!(
            "[mcp_servers.fake]\ncommand = {}\nargs = [{}, \"normal\"]\n",
            toml_str(&py),
            toml_str(&fake_server())
        ),
    );
    let script = r#"{"responses":[
      {"turn":{"toolCalls":[{"id":"p1","name":"subagent","arguments":["{\"description\": \"echo\", \"prompt\": \"Echo child.\", \"run_in_background\": false}"]}]}},
      {"turn":{"toolCalls":[{"id":"k1","name":"mcp__fake__echo","arguments":["{\"text\":\"child\"}"]}]}},
      {"turn":{"text":["The child echoed."]}},
      {"turn":{"text":["Done."]}}
    ]}"#;
    let server = mock(script);
    let o = dsh(data.path())
        .args(["run", "--yes", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("delegate")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let logs = transcripts(data.path());
    assert_eq!(logs.len(), 2, "{out}{err}");
    let child = logs
        .iter()
        .find(|l| {
            std::fs::read_to_string(l)
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .contains("parentSession")
        })
        .unwrap();
    let ev = events(child);
    let results = of_type(&ev, "tool/result");
    let part = &results[0]["data"]["message"]["content"][0];
    assert_eq!(part["content"][0]["text"], "echo: child", "{results:?}");
    let log = std::fs::read_to_string(data.path().join("dsh/mcp-logs/fake.log")).unwrap();
    assert_eq!(
        log.matches("got initialize").count(),
        1,
        "one shared connection: {log}"
    );
    for l in &logs {
        checks_and_replays(data.path(), l);
    }
}

/// `auto_approve_read_only = true`: a tool annotated `readOnlyHint` runs
/// without asking (here: in `run` without `--yes`, where asking denies).
#[test]
fn read_only_tools_run_unasked_when_the_server_allows_it() {
    let Some(py) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = write_config(
        data.path(),
        &format!(
            "[mcp_servers.fake]\ncommand = {}\nargs = [{}, \"normal\"]\nauto_approve_read_only = true\n",
            toml_str(&py),
            toml_str(&fake_server())
        ),
    );
    let server = mock(&script("mcp__fake__env", "{}", "Listed."));
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("env")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let ev = events(&transcripts(data.path())[0]);
    let results = of_type(&ev, "tool/result");
    let part = &results[0]["data"]["message"]["content"][0];
    assert_eq!(part["isError"], false, "{results:?}");
    assert!(
        part["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("PATH"),
        "{results:?}"
    );
}

#[test]
fn without_yes_an_mcp_tool_is_asked_about_so_run_denies_it() {
    let Some(py) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = write_config(
        data.path(),
        &format!(
            "[mcp_servers.fake]\ncommand = {}\nargs = [{}, \"normal\"]\n",
            toml_str(&py),
            toml_str(&fake_server())
        ),
    );
    let server = mock(&script("mcp__fake__echo", r#"{"text":"hello"}"#, "Denied."));
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("echo hello")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let ev = events(&transcripts(data.path())[0]);
    let results = of_type(&ev, "tool/result");
    let part = &results[0]["data"]["message"]["content"][0];
    assert_eq!(part["isError"], true, "{results:?}");
    assert_eq!(
        part["content"][0]["text"],
        "Error: the user rejected tool \"mcp__fake__echo\""
    );
    let log =
        std::fs::read_to_string(data.path().join("dsh/mcp-logs/fake.log")).unwrap_or_default();
    assert!(
        !log.contains("got tools/call"),
        "the server was never called: {log}"
    );
}

#[test]
fn run_uses_server_everything_over_stdio() {
    let dir = std::env::var_os("DSH_MCP_NODE_DIR").map(PathBuf::from);
    let entry = dir
        .as_ref()
        .map(|d| d.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"));
    let node = have("node");
    if !need(
        "node and DSH_MCP_NODE_DIR with @modelcontextprotocol/server-everything",
        node && entry.as_ref().is_some_and(|e| e.exists()),
    ) {
        return;
    }
    let entry = entry.unwrap();
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = write_config(
        data.path(),
        &format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\nstartup_timeout_sec = 30\n",
            toml_str(&entry.to_string_lossy())
        ),
    );
    let server = mock(&script(
        "mcp__everything__echo",
        r#"{"message":"hi from dsh"}"#,
        "Echoed.",
    ));
    let o = dsh(data.path())
        .args(["run", "--yes", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("echo")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(!err.contains("failed to start"), "{err}");
    let logs = transcripts(data.path());
    let ev = events(&logs[0]);
    let results = of_type(&ev, "tool/result");
    let part = &results[0]["data"]["message"]["content"][0];
    assert_eq!(
        part["content"][0]["text"], "Echo: hi from dsh",
        "{results:?}"
    );
    assert_eq!(part["isError"], false, "{results:?}");
    checks_and_replays(data.path(), &logs[0]);
}

/// `node` and server-everything's entry point, or `None` (skipped).
fn everything() -> Option<PathBuf> {
    let dir = std::env::var_os("DSH_MCP_NODE_DIR").map(PathBuf::from);
    let entry = dir
        .as_ref()
        .map(|d| d.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"));
    let node = have("node");
    need(
        "node and DSH_MCP_NODE_DIR with @modelcontextprotocol/server-everything",
        node && entry.as_ref().is_some_and(|e| e.exists()),
    )
    .then(|| entry.unwrap())
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_uses_server_everything_over_streamable_http() {
    let Some(entry) = everything() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let preload = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/mcp/tests/loopback.cjs");
    let mut child = Command::new("node")
        .arg("--require")
        .arg(&preload)
        .arg(&entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let server = Child(child);
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(n > 0, "server-everything exited before listening");
        if line.contains("listening on port") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = write_config(
        data.path(),
        &format!(
            "[mcp_servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbearer_token_env_var = \"DSH_TEST_MCP_TOKEN\"\nhttp_headers = {{ \"X-Dsh-Test\" = \"1\" }}\n"
        ),
    );
    let mock_server = mock(&script(
        "mcp__everything__echo",
        r#"{"message":"over http"}"#,
        "Echoed.",
    ));
    let o = dsh(data.path())
        .env("DSH_TEST_MCP_TOKEN", "tok-canary-4711")
        .args(["run", "--yes", "--base-url", &mock_server.url(), "--cwd"])
        .arg(ws.path())
        .arg("--mcp-config")
        .arg(&cfg)
        .arg("echo")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(!err.contains("failed to start"), "{err}");
    let logs = transcripts(data.path());
    let ev = events(&logs[0]);
    let results = of_type(&ev, "tool/result");
    let part = &results[0]["data"]["message"]["content"][0];
    assert_eq!(part["content"][0]["text"], "Echo: over http", "{results:?}");
    checks_and_replays(data.path(), &logs[0]);
    let raw = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(
        !raw.contains("tok-canary-4711"),
        "the token never reaches the log"
    );
    drop(server);
}

/// The official conformance suite (`@modelcontextprotocol/conformance`,
/// client mode) against `dsh mcp conformance-client`: the scenarios dsh
/// passes. (Not here: `tools_call`, whose test server in 0.1.10 answers
/// every request after `initialize` with HTTP 500 "Already connected to a
/// transport"; elicitation, which dsh refuses; `auth/*`: no OAuth yet.)
#[test]
fn the_conformance_suite_passes_initialize_and_sse_retry() {
    let dir = std::env::var_os("DSH_MCP_NODE_DIR").map(PathBuf::from);
    let bin = dir
        .as_ref()
        .map(|d| d.join("node_modules/.bin/conformance"));
    if !need(
        "DSH_MCP_NODE_DIR with @modelcontextprotocol/conformance",
        bin.as_ref().is_some_and(|b| b.exists()),
    ) {
        return;
    }
    let bin = bin.unwrap();
    for (scenario, passed) in [("initialize", "Passed: 1/1"), ("sse-retry", "Passed: 3/3")] {
        let out = tempfile::tempdir().unwrap();
        let o = Command::new(&bin)
            .args(["client", "--command"])
            .arg(format!(
                "{} mcp conformance-client",
                env!("CARGO_BIN_EXE_dsh")
            ))
            .args(["--scenario", scenario, "-o"])
            .arg(out.path())
            .current_dir(out.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert!(all.contains(passed), "{scenario}: {all}");
        assert!(all.contains("OVERALL: PASSED"), "{scenario}: {all}");
    }
}

#[test]
fn mcp_add_list_remove_edit_the_config_file() {
    let Some(py) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let cfg_dir = data.path().join("config/dsh");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    std::fs::write(cfg_dir.join("config.toml"), "# mine\nmodel = \"m\"\n").unwrap();
    let o = dsh(data.path())
        .args([
            "mcp",
            "add",
            "fake",
            "--env",
            "A=1",
            "--",
            &py,
            &fake_server(),
            "normal",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let written = std::fs::read_to_string(cfg_dir.join("config.toml")).unwrap();
    assert!(written.starts_with("# mine\nmodel = \"m\"\n"), "{written}");
    assert!(written.contains("[mcp_servers.fake]"), "{written}");
    let again = dsh(data.path())
        .args(["mcp", "add", "fake", "--", "x"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    let list = dsh(data.path()).args(["mcp", "list"]).output().unwrap();
    let out = text(&list.stdout);
    assert_eq!(list.status.code(), Some(0), "{out}{}", text(&list.stderr));
    assert!(out.contains("fake\tconnected"), "{out}");
    assert!(out.contains("  mcp__fake__echo\tEchoes text"), "{out}");
    let rm = dsh(data.path())
        .args(["mcp", "remove", "fake"])
        .output()
        .unwrap();
    assert_eq!(rm.status.code(), Some(0), "{}", text(&rm.stderr));
    assert_eq!(
        std::fs::read_to_string(cfg_dir.join("config.toml")).unwrap(),
        "# mine\nmodel = \"m\"\n\n"
    );
}

/// A workspace's own `.dsh/config.toml` adds its MCP servers only
/// once the user trusts the folder (`dsh trust`); before, it is named and
/// not read.
#[test]
fn a_workspace_config_adds_servers_only_when_trusted() {
    let Some(py) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    std::fs::create_dir_all(ws_path.join(".dsh")).unwrap();
    std::fs::write(
        ws_path.join(".dsh/config.toml"),
        format!(
            "model = \"ignored here\"\n[mcp_servers.proj]\ncommand = {}\nargs = [{}, \"normal\"]\n",
            toml_str(&py),
            toml_str(&fake_server())
        ),
    )
    .unwrap();
    let list = |data: &Path| {
        let o = dsh(data)
            .current_dir(&ws_path)
            .args(["mcp", "list"])
            .output()
            .unwrap();
        (text(&o.stdout), text(&o.stderr), o.status.code())
    };
    let (out, err, code) = list(data.path());
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("no MCP servers configured"), "{out}");
    assert!(err.contains("not trusted"), "{err}");
    let t = dsh(data.path())
        .args(["trust", ws_path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let (out, err, code) = list(data.path());
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("proj\tconnected"), "{out}{err}");
    assert!(out.contains("mcp__proj__echo"), "{out}");
}
