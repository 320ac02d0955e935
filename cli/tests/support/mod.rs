//! Helpers shared by the security tests of the CLI (`secrets_cli.rs`,
//! `terminal_text.rs`).

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
