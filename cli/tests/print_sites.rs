//! Every print site of the CLI shows outside text through the sanitiser
//! (`cli/src/sanitize.rs`).
//!
//! A site is one of `println!`, `eprintln!`, `print!`, `eprint!`, `write!`
//! and `writeln!` in `cli/src` (test modules excluded). It passes when its
//! arguments call `terminal(`, when it prints only its own static text (no
//! `{…}` placeholder in the format string and no further argument), or
//! when a `// tty: <why>` comment on its line or the line above says why
//! its text is safe (the allow-list). Everything else fails the test. The
//! `*_safe!` macros of `sanitize.rs` are not sites: they sanitise the whole
//! line.

use std::path::{Path, PathBuf};

const MACROS: &[&str] = &["println", "eprintln", "print", "eprint", "write", "writeln"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src` without its `#[cfg(test)] mod …` blocks (they run in tests, not
/// in front of a user). Lines are kept (blanked) so numbers stay right.
fn without_test_modules(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        if lines[i].trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            // Skip to the closing brace at the same indentation.
            let indent = lines[i].len() - lines[i].trim_start().len();
            let close = format!("{}}}", " ".repeat(indent));
            while i < lines.len() && lines[i] != close {
                out.push("");
                i += 1;
            }
        }
        if i < lines.len() {
            out.push(lines[i]);
        }
        i += 1;
    }
    out.join("\n")
}

/// The text between the parenthesis at `open` and its match, skipping
/// string and char literals; `None` when unbalanced.
fn call_args(src: &str, open: usize) -> Option<&str> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&src[open + 1..i]);
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The first string literal in `args` and whether anything but
/// whitespace and commas follows it.
fn format_string(args: &str) -> Option<(&str, bool)> {
    let start = args.find('"')?;
    let b = args.as_bytes();
    let mut i = start + 1;
    while i < b.len() && b[i] != b'"' {
        if b[i] == b'\\' {
            i += 1;
        }
        i += 1;
    }
    let lit = args.get(start + 1..i)?;
    let rest = args.get(i + 1..).unwrap_or("");
    Some((lit, !rest.trim().trim_matches(',').trim().is_empty()))
}

/// Whether the format string has a `{…}` placeholder (not `{{`).
fn has_placeholder(lit: &str) -> bool {
    lit.replace("{{", "").contains('{')
}

/// The unsanitised print sites of `src`, as `line: text`.
fn bad_sites(src: &str) -> Vec<String> {
    let src = without_test_modules(src);
    let lines: Vec<&str> = src.lines().collect();
    let mut bad = Vec::new();
    for m in MACROS {
        let needle = format!("{m}!(");
        let mut from = 0;
        while let Some(pos) = src[from..].find(&needle) {
            let at = from + pos;
            from = at + needle.len();
            let before = src[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let line_no = src[..at].matches('\n').count();
            let line = lines.get(line_no).copied().unwrap_or("");
            if line.trim_start().starts_with("//") {
                continue;
            }
            let above = line_no.checked_sub(1).and_then(|n| lines.get(n)).copied();
            let allowed = line.contains("// tty:") || above.is_some_and(|l| l.contains("// tty:"));
            let Some(args) = call_args(&src, at + needle.len() - 1) else {
                bad.push(format!("{}: unbalanced {m}!", line_no + 1));
                continue;
            };
            let sanitised = args.contains("terminal(");
            let fixed = match format_string(args) {
                Some((lit, more)) => !has_placeholder(lit) && !more,
                // `writeln!(out)`: a bare newline.
                None => !args.contains(','),
            };
            if !(sanitised || fixed || allowed) {
                bad.push(format!("{}: {}", line_no + 1, line.trim()));
            }
        }
    }
    bad.sort();
    bad
}

#[test]
fn every_cli_print_site_is_sanitised_or_allow_listed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    assert!(files.len() > 10, "the CLI sources were found");
    let mut report = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for site in bad_sites(&src) {
            report.push(format!(
                "{}:{site}",
                f.strip_prefix(&root).unwrap().display()
            ));
        }
    }
    assert!(
        report.is_empty(),
        "print sites that bypass the sanitiser (use println_safe!/eprintln_safe!/\
         writeln_safe!, terminal(), or a `// tty: why` comment):\n{}",
        report.join("\n")
    );
}

/// The checker itself: what it flags and what it lets through.
#[test]
fn the_checker_flags_what_it_should() {
    let src = r#"
fn f(e: &str, out: &mut String) {
    println!("static text only");
    eprintln!("{e}");
    eprintln!("x: {}", terminal(e));
    println!("{}", e);
    // tty: our own number.
    println!("{}", 3);
    let _ = writeln!(out);
    let _ = writeln!(out, "{e}");
    eprintln_safe!("{e}");
    print!("{{literal braces}}");
}

#[cfg(test)]
mod tests {
    fn g(e: &str) {
        println!("{e}");
    }
}
"#;
    assert_eq!(
        bad_sites(src),
        vec![
            "10: let _ = writeln!(out, \"{e}\");".to_string(),
            "4: eprintln!(\"{e}\");".to_string(),
            "6: println!(\"{}\", e);".to_string(),
        ]
    );
}
