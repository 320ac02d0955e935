//! Helpers shared by the CLI's integration tests: the `dsh` command with
//! private directories, the scripted mock model, the stored transcripts,
//! and the checks for outside programs (skip with a printed reason, fail
//! under `CI=true`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_deepseek::mock::{MockServer, Script};

/// A `dsh` command with a private data and config dir and no provider
/// variables.
pub fn dsh(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    c.env("XDG_DATA_HOME", data)
        .env("XDG_CONFIG_HOME", data.join("config"))
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("DEEPSEEK_BASE_URL")
        .env_remove("EXA_API_KEY")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

/// Lossy text of `b`.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The mock server playing `script` on a free loopback port.
pub fn mock(script: &str) -> MockServer {
    MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap()
}

/// The mock server playing `{"responses": responses}` on a free loopback
/// port.
pub fn mock_responses(responses: impl Into<serde_json::Value>) -> MockServer {
    let script = serde_json::json!({ "responses": responses.into() }).to_string();
    mock(&script)
}

/// Every stored transcript (`session.jsonl`) under `dir`, in path order;
/// none when `dir` does not exist.
pub fn transcripts(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = files(dir)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "session.jsonl"))
        .collect();
    out.sort();
    out
}

/// The lines of the JSONL file `log`, as JSON.
pub fn events(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Asserts that `dsh log check` and `dsh replay --check` accept `log`.
pub fn checks_and_replays(data: &Path, log: &Path) {
    for args in [&["log", "check"][..], &["replay", "--check"][..]] {
        let o = dsh(data).args(args).arg(log).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "dsh {args:?} {}: {}{}",
            log.display(),
            text(&o.stdout),
            text(&o.stderr)
        );
    }
}

/// Whether `program --version` runs and succeeds.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `true` when `found`; else `false` with a printed reason (the test
/// skips), or a failure under `CI=true`, where every outside program the
/// tests use must be there.
pub fn need(what: &str, found: bool) -> bool {
    if found {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what} is required when CI=true"
    );
    eprintln!("skipped: {what} not found");
    false
}

/// [`need`] of `program` ([`have`]).
pub fn needs(program: &str) -> bool {
    need(program, have(program))
}

/// Runs `cmd` (already `run` with its provider flags) on the prompt
/// `peek` in `ws`, approving every tool and without the sandbox (the tool
/// plays an attacker that the sandbox would not stop everywhere); asserts
/// exit 0 and returns stdout and stderr.
pub fn run_peek(cmd: &mut Command, ws: &Path) -> (String, String) {
    let o = cmd
        .args(["--yes", "--sandbox", "off", "--cwd"])
        .arg(ws)
        .arg("peek")
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    (out, err)
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

/// The text of every file dsh stored under the data dir `data`.
pub fn stored(data: &Path) -> String {
    files(&data.join("dsh"))
        .iter()
        .map(|p| text(&std::fs::read(p).unwrap_or_default()))
        .collect()
}

/// Runs `cmd` with `input` on its standard input; its output.
pub fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}
