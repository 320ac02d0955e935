//! The change a `write` or `edit` call would make, as a unified diff shown
//! before the user answers its approval. Every line is
//! sanitised for the terminal; colour (red removals, green additions, cyan
//! hunk headers) only when asked.

use std::io::Read;
use std::path::Path;

use serde_json::Value;
use similar::{ChangeTag, TextDiff};

/// Largest file read to diff against.
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Most diff lines shown.
const MAX_LINES: usize = 120;

/// The current text of `path` (empty when it does not exist), or `None`
/// when it cannot be read or is too large.
fn current(path: &Path) -> Option<String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(String::new()),
        Err(_) => return None,
    };
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .ok()?;
    (text.len() as u64 <= MAX_FILE_BYTES).then_some(text)
}

/// The old and new text of a `write` or `edit` call in `cwd`, and the path
/// as the model gave it; `None` for other tools or unusable arguments.
pub fn change(tool: &str, arguments: &str, cwd: &Path) -> Option<(String, String, String)> {
    let args: Value = serde_json::from_str(arguments).ok()?;
    let path = args.get("file_path")?.as_str()?;
    let full = cwd.join(path);
    match tool {
        "write" => {
            let new = args.get("content")?.as_str()?.to_string();
            Some((path.to_string(), current(&full)?, new))
        }
        "edit" => {
            let old_s = args.get("old_string")?.as_str()?;
            let new_s = args.get("new_string")?.as_str()?;
            let all = args.get("replace_all").and_then(Value::as_bool) == Some(true);
            match current(&full) {
                Some(old) if !old_s.is_empty() && old.contains(old_s) => {
                    let new = if all {
                        old.replace(old_s, new_s)
                    } else {
                        old.replacen(old_s, new_s, 1)
                    };
                    Some((path.to_string(), old, new))
                }
                // The file does not hold the text (the edit will fail):
                // show the replacement itself.
                _ => Some((path.to_string(), old_s.to_string(), new_s.to_string())),
            }
        }
        _ => None,
    }
}

/// The unified diff of `old` → `new` for `path`, at most [`MAX_LINES`]
/// lines, sanitised, coloured when `color`.
pub fn unified(path: &str, old: &str, new: &str, color: bool) -> String {
    let diff = TextDiff::from_lines(old, new);
    let paint = |code: &str, line: &str| {
        let line = crate::sanitize::terminal(line);
        if color {
            format!("\x1b[{code}m{line}\x1b[0m\n")
        } else {
            format!("{line}\n")
        }
    };
    let path = crate::sanitize::terminal(path);
    let mut out = String::new();
    let mut lines = 0usize;
    let mut more = 0usize;
    let mut push = |s: String, out: &mut String| {
        if lines < MAX_LINES {
            out.push_str(&s);
            lines += 1;
        } else {
            more += 1;
        }
    };
    push(paint("1", &format!("--- a/{path}")), &mut out);
    push(paint("1", &format!("+++ b/{path}")), &mut out);
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        push(paint("36", &hunk.header().to_string()), &mut out);
        for change in hunk.iter_changes() {
            let text = change.value().trim_end_matches(['\n', '\r']);
            let (code, sign) = match change.tag() {
                ChangeTag::Delete => ("31", '-'),
                ChangeTag::Insert => ("32", '+'),
                ChangeTag::Equal => ("0", ' '),
            };
            push(paint(code, &format!("{sign}{text}")), &mut out);
        }
    }
    if more > 0 {
        out.push_str(&format!("… {more} more diff lines\n"));
    }
    out
}

/// The diff to show before approving `tool` with `arguments` in `cwd`.
pub fn for_call(tool: &str, arguments: &str, cwd: &Path, color: bool) -> Option<String> {
    let (path, old, new) = change(tool, arguments, cwd)?;
    Some(unified(&path, &old, &new, color))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_shows_the_lines_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let d = for_call(
            "write",
            r#"{"file_path":"a.txt","content":"one\n2\nthree\n"}"#,
            dir.path(),
            false,
        )
        .unwrap();
        assert_eq!(
            d,
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
        );
        let new = for_call(
            "write",
            r#"{"file_path":"b.txt","content":"x\n"}"#,
            dir.path(),
            true,
        )
        .unwrap();
        assert!(new.contains("\x1b[32m+x\x1b[0m\n"), "{new:?}");
    }

    #[test]
    fn an_edit_diffs_the_replacement_and_escapes_are_shown_not_run() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.rs"), "fn a() {}\nfn b() {}\n").unwrap();
        let d = for_call(
            "edit",
            r#"{"file_path":"a.rs","old_string":"fn b() {}","new_string":"fn b() { \u001b[2J }"}"#,
            dir.path(),
            false,
        )
        .unwrap();
        assert!(d.contains("-fn b() {}\n+fn b() { ^[[2J }\n"), "{d:?}");
        assert!(!d.contains('\x1b'));
        assert_eq!(
            for_call("bash", r#"{"command":"ls"}"#, dir.path(), false),
            None
        );
    }
}
