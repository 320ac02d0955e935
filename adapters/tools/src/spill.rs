//! Spill: keeps oversized plain-text tool results out of the model's
//! context (the reference's `spill-policy` + `spill-local`).
//!
//! The spill plugin (`dsh-spill`) handles `tools/post-execute`: when a result's text
//! (every block a text block) is over [`SpillConfig::max_inline_bytes`],
//! the whole text is saved to a private file under the session's folder
//! (`<root>/session-<id>/`), and the model gets a head/tail preview plus
//! the reference's notice, all within the cap:
//!
//! `(Omitted N bytes. Full formatted result stored at: <path>. Use read
//! with offset/limit, or grep this path to search within it.)`
//!
//! It works on the result, not on the tool: built-in, MCP and web tools
//! alike. `read` is left alone (it pages by itself; spilling it would
//! loop). A result with any non-text block is left alone. A storage
//! failure keeps the original result: spilling never fails a call.
//! Register it after the plugins that rewrite results, so it bounds what
//! they produced.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use dsh_core::ContentBlock;

/// The default cap on a result's inline text: 64 KiB.
pub const DEFAULT_MAX_INLINE_BYTES: usize = 64 * 1024;

/// The reference's retrieval hint for a local spill file.
pub const RETRIEVAL_HINT: &str =
    "Use read with offset/limit, or grep this path to search within it.";

/// Where and when to spill.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpillConfig {
    /// Results over this many UTF-8 bytes are spilled; the replacement
    /// (preview and notice) never exceeds it.
    pub max_inline_bytes: usize,
    /// The spill root; each session gets `session-<id>` under it (0700).
    pub root: PathBuf,
}

impl SpillConfig {
    /// The default cap (64 KiB), spilling under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SpillConfig {
            max_inline_bytes: DEFAULT_MAX_INLINE_BYTES,
            root: root.into(),
        }
    }

    /// Sets the cap.
    pub fn with_max_inline_bytes(mut self, bytes: usize) -> Self {
        self.max_inline_bytes = bytes;
        self
    }
}

/// Every block's text joined, or `None` when a block is not text.
pub fn plain_text(blocks: &[ContentBlock]) -> Option<String> {
    let mut out = String::new();
    for b in blocks {
        match b {
            ContentBlock::Text { text } => out.push_str(text),
            _ => return None,
        }
    }
    Some(out)
}

/// `<root>/session-<id>`, the id encoded as one safe path segment.
pub fn session_dir(root: &Path, session_id: &str) -> PathBuf {
    root.join(format!("session-{}", encode_segment(session_id)))
}

/// Encodes an untrusted string as one path segment, injectively: `[A-Za-z0-9._-]`
/// kept, everything else (and `~`) as `~XXXX` per UTF-16 unit; `.`/`..`
/// escaped; empty is `~`.
pub fn encode_segment(raw: &str) -> String {
    match raw {
        "" => return "~".into(),
        "." => return "~002E".into(),
        ".." => return "~002E~002E".into(),
        _ => {}
    }
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("~{u:04X}"));
            }
        }
    }
    out
}

/// Writes `content` to a new owner-only file in `dir` (made 0700), named
/// after `tool` and `call_id`, never replacing an existing file.
pub fn save_text(
    dir: &Path,
    tool: &str,
    call_id: &str,
    content: &[u8],
) -> std::io::Result<PathBuf> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let base = format!("{}-{}", encode_segment(tool), encode_segment(call_id));
    let mut last = None;
    for n in 0..100u32 {
        let name = if n == 0 {
            format!("{base}.txt")
        } else {
            format!("{base}-{n}.txt")
        };
        let path = dir.join(name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(content)?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free spill file name")))
}

/// The notice line for `omitted` bytes stored at `path`.
pub fn notice(omitted: usize, path: &Path) -> String {
    format!(
        "(Omitted {omitted} bytes. Full formatted result stored at: {}. {RETRIEVAL_HINT})",
        path.display()
    )
}

/// The head/tail preview of `text` within `budget` bytes (head gets the
/// odd byte), cut at character boundaries, and the bytes left out.
pub fn head_tail(text: &str, budget: usize) -> (String, usize) {
    if text.len() <= budget {
        return (text.to_string(), 0);
    }
    let mut head = budget.div_ceil(2);
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - budget / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let (h, t) = (
        text.get(..head).unwrap_or(""),
        text.get(tail..).unwrap_or(""),
    );
    (format!("{h}{t}"), text.len() - h.len() - t.len())
}

/// Spills `text` when it is over `cap` bytes: saves it in `dir` and returns
/// the preview and notice (at most `cap` bytes). `None`: it fits, or it
/// could not be saved, or not even the notice fits in `cap`.
pub fn spill_text(text: &str, cap: usize, dir: &Path, tool: &str, call_id: &str) -> Option<String> {
    if text.len() <= cap {
        return None;
    }
    let path = save_text(dir, tool, call_id, text.as_bytes()).ok()?;
    // The notice priced at the whole length bounds the real one.
    let reserve = notice(text.len(), &path).len() + 2;
    let (preview, omitted) = head_tail(text, cap.saturating_sub(reserve));
    let note = notice(omitted, &path);
    let replaced = if preview.is_empty() {
        note
    } else {
        format!("{preview}\n\n{note}")
    };
    (replaced.len() <= cap).then_some(replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_and_grep_reach_a_spill_file_outside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let text: String = (1..=5000).map(|i| format!("row {i}\n")).collect();
        let path = save_text(
            &root.path().join("session-s"),
            "web_fetch",
            "c1",
            text.as_bytes(),
        )
        .unwrap();
        let mut ctx = crate::ToolContext::new(crate::Workspace::new(ws.path()).unwrap());
        let run = |ctx: &crate::ToolContext, name: &str, args: serde_json::Value| {
            let set = crate::ToolSet::standard(crate::BashConfig::default());
            let call = crate::ToolCallRequest {
                name: name.into(),
                call_id: "x".into(),
                arguments: args,
            };
            let o = set.execute_request(&call, ctx);
            (
                o.error.is_some(),
                plain_text(&o.content).unwrap_or_default(),
            )
        };
        let p = path.display().to_string();
        // Without a spill folder the path is outside the workspace.
        assert!(run(&ctx, "read", serde_json::json!({"file_path": p})).0);
        ctx.spill_dir = Some(root.path().to_path_buf());
        let (err, out) = run(
            &ctx,
            "read",
            serde_json::json!({"file_path": p, "offset": 4000, "limit": 2}),
        );
        assert!(
            !err && out.contains("4000: row 4000\n4001: row 4001"),
            "{out}"
        );
        let (err, out) = run(
            &ctx,
            "grep",
            serde_json::json!({"pattern": "^row 4321$", "path": p}),
        );
        assert!(!err && out.contains("row 4321"), "{out}");
        // Only beneath the folder: its parent stays out.
        let parent = root
            .path()
            .parent()
            .unwrap()
            .join("x.txt")
            .display()
            .to_string();
        assert!(run(&ctx, "read", serde_json::json!({"file_path": parent})).0);
    }

    #[test]
    fn head_tail_keeps_both_ends_within_budget() {
        let (p, omitted) = head_tail("abcdefghij", 4);
        assert_eq!(p, "abij");
        assert_eq!(omitted, 6);
        let (p, omitted) = head_tail("ééééé", 5); // 10 bytes
        assert!(p.len() <= 5, "{p}");
        assert_eq!(omitted, 10 - p.len());
    }

    #[test]
    fn segments_cannot_traverse() {
        assert_eq!(encode_segment(".."), "~002E~002E");
        assert_eq!(encode_segment("a/b"), "a~002Fb");
        assert_eq!(encode_segment("~"), "~007E");
        assert_eq!(encode_segment(""), "~");
    }

    #[test]
    fn spill_stays_within_the_cap_and_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let out = spill_text(&text, 4096, dir.path(), "grep", "call_1").unwrap();
        assert!(out.len() <= 4096);
        assert!(out.starts_with("line 0\n"));
        assert!(out.contains("line 19999\n"));
        let path = dir.path().join("grep-call_1.txt");
        assert!(out.ends_with(&format!(
            "Full formatted result stored at: {}. {RETRIEVAL_HINT})",
            path.display()
        )));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        // A second spill of the same call does not overwrite the first.
        let again = spill_text(&text, 4096, dir.path(), "grep", "call_1").unwrap();
        assert!(again.contains("grep-call_1-1.txt"));
        // Under the cap: nothing.
        assert_eq!(spill_text("short", 4096, dir.path(), "grep", "c"), None);
        // A cap too small for the notice: keep the original.
        assert_eq!(spill_text(&text, 10, dir.path(), "grep", "c"), None);
    }
}
