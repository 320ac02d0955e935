//! Credentials stay out of what others can read (issue 25, item 3 of
//! "Build"): the API key leaves dsh's own environment at start-up, so a
//! tool reading `/proc/<dsh pid>/environ` finds nothing; base-URL userinfo
//! reaches neither a tool, the session log nor the screen.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_deepseek::mock::{MockServer, Script};

/// A command with a private data dir and no provider variables.
fn dsh(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    c.env("XDG_DATA_HOME", data)
        .env("XDG_CONFIG_HOME", data.join("config"))
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mock(script: &str) -> MockServer {
    MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap()
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The text of every stored session under `data`.
fn stored(data: &Path) -> String {
    files(&data.join("dsh"))
        .iter()
        .map(|p| text(&std::fs::read(p).unwrap_or_default()))
        .collect()
}

/// A tool call reading the environment of its parent (dsh itself).
const READ_PARENT_ENV: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"n=$(tr '\\\\0' '\\\\n' < /proc/$PPID/environ | grep -c CANARY); echo \\\"count=$n parent=$(cat /proc/$PPID/comm)\\\"\",\"description\":\"peek\"}"]}]}},
  {"turn":{"text":["ok"]}}
]}"#;

/// The key (default variable or `--api-key-env`) is gone from
/// `/proc/<dsh pid>/environ` while dsh runs, even for an unsandboxed tool.
#[test]
fn the_key_is_not_in_dshs_proc_environ() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    for (var, flag) in [
        ("DEEPSEEK_API_KEY", None),
        ("MY_LLM_CRED", Some("MY_LLM_CRED")),
    ] {
        let canary = "sk-canary-environ-4711";
        let server = mock(&READ_PARENT_ENV.replace("CANARY", canary));
        let mut cmd = dsh(data.path());
        cmd.env(var, canary)
            .args([
                "run",
                "--yes",
                "--sandbox",
                "off",
                "--base-url",
                &server.url(),
            ])
            .arg("--cwd")
            .arg(ws.path());
        if let Some(name) = flag {
            cmd.args(["--api-key-env", name]);
        }
        let o = cmd.arg("peek").output().unwrap();
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
        assert!(out.contains("count=0 parent=dsh"), "{var}: {out}");
        // The key still authenticated the call.
        let seen = server.requests();
        assert!(
            seen.iter().all(|r| r
                .headers
                .iter()
                .any(|(k, v)| k == "authorization" && v == &format!("Bearer {canary}"))),
            "{var}: the key was not sent"
        );
    }
}
