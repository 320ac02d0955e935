//! Every public struct whose fields are all public, and every public enum,
//! in the core, the kernel and the host crate is `#[non_exhaustive]`, so a
//! new field or variant is not a breaking change; the few that are closed
//! on purpose are listed in [`EXHAUSTIVE`] with the reason. Read from the
//! sources (like `cli/tests/print_sites.rs`), so a new type is checked the
//! day it is added.

use std::path::{Path, PathBuf};

/// Types left exhaustive on purpose: (crate folder, name, why).
const EXHAUSTIVE: &[(&str, &str, &str)] = &[
    (
        "core",
        "Role",
        "closed by the log format (system, user, assistant, tool)",
    ),
    (
        "core",
        "MessageKey",
        "the four message keys of the log format",
    ),
    (
        "core",
        "IdPurpose",
        "an id source must mint an id for every purpose",
    ),
    (
        "core",
        "LlmRetry",
        "ten required fields; tests build invalid ones",
    ),
    (
        "kernel",
        "Job",
        "the executor contract: a runtime handles every job",
    ),
    (
        "kernel",
        "Carry",
        "the executor contract: a runtime handles every carry",
    ),
    ("kernel", "Flow", "Next or Stop, like ControlFlow"),
];

/// The `.rs` files under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `name (file:line)` of every public struct with only public named fields
/// and every public enum without `#[non_exhaustive]` in `text`, outside a
/// trailing `#[cfg(test)] mod`. Tuple and unit structs are skipped.
fn offenders(text: &str, file: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod "))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for i in 0..end {
        let line = lines[i].trim_start();
        let (kind, rest) = if let Some(r) = line.strip_prefix("pub struct ") {
            ("struct", r)
        } else if let Some(r) = line.strip_prefix("pub enum ") {
            ("enum", r)
        } else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The attributes and docs right above.
        let attrs = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("#[") || t.starts_with("//") || t.starts_with(")]")
            })
            .any(|l| l.contains("#[non_exhaustive]"));
        if attrs {
            continue;
        }
        if kind == "struct" {
            if !line.trim_end().ends_with('{') {
                continue; // tuple or unit struct
            }
            let mut fields = Vec::new();
            let mut depth = 1i32;
            for l in &lines[i + 1..end] {
                let t = l.trim();
                if depth == 1 && !t.starts_with("//") && !t.starts_with('#') && t.contains(':') {
                    fields.push(t);
                }
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                if depth <= 0 {
                    break;
                }
            }
            if fields.is_empty() || !fields.iter().all(|f| f.starts_with("pub ")) {
                continue;
            }
        }
        out.push((name, format!("{file}:{}", i + 1)));
    }
    out
}

#[test]
fn growing_public_types_are_non_exhaustive() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut exempt_seen = Vec::new();
    for krate in ["core", "kernel", "host"] {
        for path in sources(&root.join(krate).join("src")) {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let file = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .display()
                .to_string();
            for (name, at) in offenders(&text, &file) {
                if EXHAUSTIVE.iter().any(|(k, n, _)| *k == krate && *n == name) {
                    exempt_seen.push(name);
                } else {
                    found.push(format!("{name} ({at})"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "public types without #[non_exhaustive] (add it, or list the type in EXHAUSTIVE with why):\n{}",
        found.join("\n")
    );
    // The list stays exact: a type that is gone or got the attribute leaves it.
    for (_, name, _) in EXHAUSTIVE {
        assert!(
            exempt_seen.iter().any(|n| n == name),
            "{name} is in EXHAUSTIVE but no longer an exhaustive public type"
        );
    }
}

#[test]
fn the_check_finds_a_struct_with_public_fields_and_an_enum() {
    let text = "/// A.\n#[derive(Debug)]\npub struct A {\n    pub x: u8,\n}\n\
                #[non_exhaustive]\npub struct B {\n    pub x: u8,\n}\n\
                pub struct C {\n    x: u8,\n}\n\
                pub struct D(pub u8);\n\
                pub enum E {\n    X,\n}\n";
    let names: Vec<String> = offenders(text, "t.rs").into_iter().map(|o| o.0).collect();
    assert_eq!(names, ["A", "E"]);
}
