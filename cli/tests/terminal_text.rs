//! Text from a file, a log or a user argument reaches the terminal only
//! through the sanitiser:
//! the cwd column of `dsh sessions`, header text quoted by `log check`,
//! `log derive`, `log repair` and `replay --check`, and an id echoed by
//! `chat --resume`. Each carries an OSC 52 clipboard write, a
//! clear-screen sequence and a right-to-left override.

#![cfg(unix)]

mod support;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Output;

use support::{dsh, mock};

/// The hostile text: OSC 52 (clipboard), clear screen, RLO.
const HOSTILE: &str = "\x1b[2J\u{202e}\x1b]52;c;aGk=\x07";

/// Asserts that neither stream of `o` holds a raw control or bidi
/// character, and that the hostile text is shown visibly (`^[[2J`).
fn assert_shown_safely(what: &str, o: &Output) {
    let all = [o.stdout.as_slice(), o.stderr.as_slice()].concat();
    let text = String::from_utf8_lossy(&all);
    let raw: Vec<char> = text
        .chars()
        .filter(|c| (c.is_control() && *c != '\n' && *c != '\t') || *c == '\u{202e}')
        .collect();
    assert!(raw.is_empty(), "{what}: raw {raw:?} in {text:?}");
    assert!(
        text.contains("^[[2J"),
        "{what}: the text is not shown: {text:?}"
    );
}

#[test]
fn the_sessions_cwd_column_is_sanitised() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join(OsStr::from_bytes(HOSTILE.as_bytes()));
    std::fs::create_dir(&ws).unwrap();
    let server = mock(r#"{"responses":[{"turn":{"text":["hi"]}}]}"#);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(&ws)
        .arg("hello")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let o = dsh(data.path()).arg("sessions").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_shown_safely("sessions", &o);
}

#[test]
fn header_text_quoted_by_log_and_replay_is_sanitised() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hostile.jsonl");
    // A newer format version: every reader quotes the header's id.
    let header = serde_json::json!({
        "type": "session", "version": 7, "id": format!("a{HOSTILE}b"),
        "createdAt": 1, "cwd": "/"
    });
    std::fs::write(&log, format!("{header}\n")).unwrap();
    let data = tempfile::tempdir().unwrap();
    for args in [
        &["log", "check"][..],
        &["log", "derive"],
        &["log", "repair"],
        &["replay", "--check"],
    ] {
        let o = dsh(data.path()).args(args).arg(&log).output().unwrap();
        assert_ne!(o.status.code(), Some(0), "{args:?}: {o:?}");
        assert_shown_safely(&args.join(" "), &o);
    }
}

#[test]
fn an_id_echoed_by_chat_resume_is_sanitised() {
    let data = tempfile::tempdir().unwrap();
    let o = dsh(data.path())
        .env("DEEPSEEK_API_KEY", "sk-unused-key")
        .args(["chat", "--resume", &format!("zz{HOSTILE}q")])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert_shown_safely("chat --resume", &o);
}
