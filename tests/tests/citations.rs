//! No code cites a document or a tracker outside the repository: every
//! reason a comment gives is stated there or in a file the repository
//! holds (docs/architecture.md, the rule ids of the spec it carries).
//! Scans every file git tracks with a code extension.

use std::path::Path;
use std::process::Command;

/// Code file extensions the scan reads.
const CODE: &[&str] = &["rs", "sh", "py", "mjs", "js", "ts", "toml"];

/// The first citation in `line`, if any: a tracker number ("issue 12",
/// "issues 3") or the first-planned design document, which lives outside
/// the repository.
fn citation(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    let design = ["design", ".md"].concat();
    if lower.contains(&design) {
        return Some(design);
    }
    let word = "issue";
    let mut from = 0;
    while let Some(at) = lower[from..].find(word) {
        let start = from + at;
        let before_ok = start == 0 || !lower.as_bytes()[start - 1].is_ascii_alphanumeric();
        let mut rest = &lower[start + word.len()..];
        rest = rest.strip_prefix('s').unwrap_or(rest);
        let rest = rest.trim_start_matches([' ', '#']);
        if before_ok && rest.starts_with(|c: char| c.is_ascii_digit()) {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            return Some(format!("{word} {digits}"));
        }
        from = start + word.len();
    }
    None
}

#[test]
fn the_detector_finds_what_it_should() {
    assert_eq!(
        citation("// see Issue 25: bounded").as_deref(),
        Some("issue 25")
    );
    assert_eq!(citation("(issues #7)").as_deref(), Some("issue 7"));
    assert!(citation(&["// per ", "design", ".md"].concat()).is_some());
    assert_eq!(citation("// reissue 3 of the token"), None);
    assert_eq!(citation("// an issue with the wire"), None);
}

#[test]
fn no_code_cites_an_outside_tracker_or_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .expect("git ls-files");
    assert!(listed.status.success(), "git ls-files failed");
    let mut found = Vec::new();
    for name in listed.stdout.split(|b| *b == 0) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        // This file names what it looks for.
        if name == "tests/tests/citations.rs" {
            continue;
        }
        let ext = Path::new(name).extension().and_then(|e| e.to_str());
        if !ext.is_some_and(|e| CODE.contains(&e)) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(name)) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = citation(line) {
                found.push(format!("{name}:{}: {what}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "code cites what the repository does not hold (state the reason instead):\n{}",
        found.join("\n")
    );
}
