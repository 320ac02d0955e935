//! Credentials stay out of what others can read: the API
//! key leaves dsh's own environment at start-up, so a
//! tool reading `/proc/<dsh pid>/environ` finds nothing; base-URL userinfo
//! reaches neither a tool, the session log nor the screen.

#![cfg(target_os = "linux")]

mod support;

use support::{dsh, mock, run_peek, stored, text};

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
            .args(["run", "--base-url", &server.url()]);
        if let Some(name) = flag {
            cmd.args(["--api-key-env", name]);
        }
        let (out, _) = run_peek(&mut cmd, ws.path());
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

/// A tool call counting environment entries that hold the base URL's
/// password (the pattern does not spell it, so the command line itself
/// does not leak it).
const COUNT_URL_SECRET: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"echo \\\"seen=$(env | grep -c 'pw-can[a]ry')\\\"\",\"description\":\"peek\"}"]}]}},
  {"turn":{"text":["ok"]}}
]}"#;

/// `http://user:pw-canary-5150@127.0.0.1:PORT` for `url`.
fn with_userinfo(url: &str) -> String {
    url.replacen("http://", "http://user:pw-canary-5150@", 1)
}

/// Base-URL userinfo, from `$DEEPSEEK_BASE_URL` or `--base-url`, reaches
/// no tool, no stored log and not the screen; on the command line it is
/// called out once.
#[test]
fn base_url_credentials_stay_secret() {
    let ws = tempfile::tempdir().unwrap();
    for from_flag in [false, true] {
        let data = tempfile::tempdir().unwrap();
        let server = mock(COUNT_URL_SECRET);
        let url = with_userinfo(&server.url());
        let mut cmd = dsh(data.path());
        cmd.env("DEEPSEEK_API_KEY", "sk-test-key-1");
        if from_flag {
            cmd.args(["run", "--base-url", &url]);
        } else {
            cmd.env("DEEPSEEK_BASE_URL", &url).arg("run");
        }
        let (out, err) = run_peek(&mut cmd, ws.path());
        assert!(out.contains("seen=0"), "flag {from_flag}: {out}");
        assert_eq!(
            err.contains("--base-url carries credentials"),
            from_flag,
            "{err}"
        );
        assert_eq!(
            err.matches("carries credentials").count(),
            usize::from(from_flag)
        );
        assert!(
            !out.contains("pw-canary") && !err.contains("pw-canary"),
            "{out}{err}"
        );
        let log = stored(data.path());
        assert!(log.contains("seen=0"), "{log}");
        assert!(
            !log.contains("pw-canary"),
            "the base URL's password reached the log"
        );
    }
}

/// A failing endpoint with credentials in its URL: the error on the screen
/// and in the log shows the URL redacted.
#[test]
fn base_url_credentials_stay_out_of_errors() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = dsh(data.path())
        .env("DEEPSEEK_API_KEY", "sk-test-key-1")
        .env(
            "DEEPSEEK_BASE_URL",
            format!("http://user:pw-canary-5150@127.0.0.1:{port}/v1"),
        )
        .args(["run", "--attempts", "1", "--cwd"])
        .arg(ws.path())
        .arg("hello")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_ne!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        !out.contains("pw-canary") && !err.contains("pw-canary"),
        "{out}{err}"
    );
    assert!(!stored(data.path()).contains("pw-canary"));
}

/// A tool call looking for the base URL's password in its parent's
/// (dsh's) command line.
const READ_PARENT_CMDLINE: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"c1","name":"bash","arguments":["{\"command\":\"c=$(tr '\\\\0' '\\\\n' < /proc/$PPID/cmdline); echo \\\"secret=$(echo \\\"$c\\\" | grep -c 'pw-can[a]ry') url=$(echo \\\"$c\\\" | grep -c 'http://[*]*@127')\\\"\",\"description\":\"peek\"}"]}]}},
  {"turn":{"text":["ok"]}}
]}"#;

/// `--base-url` credentials are hidden in `/proc/<dsh pid>/cmdline` once
/// dsh started (as `*`), in both flag forms; the run still works (dsh
/// parsed its own copy of the arguments).
#[test]
fn base_url_credentials_leave_the_command_line() {
    let ws = tempfile::tempdir().unwrap();
    for joined in [false, true] {
        let data = tempfile::tempdir().unwrap();
        let server = mock(READ_PARENT_CMDLINE);
        let url = with_userinfo(&server.url());
        let mut cmd = dsh(data.path());
        cmd.env("DEEPSEEK_API_KEY", "sk-test-key-1").arg("run");
        if joined {
            cmd.arg(format!("--base-url={url}"));
        } else {
            cmd.args(["--base-url", &url]);
        }
        let (out, _) = run_peek(&mut cmd, ws.path());
        assert!(out.contains("secret=0 url=1"), "joined {joined}: {out}");
    }
}
