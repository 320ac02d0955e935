//! `grep` and `glob` (the "what the model can do" issue, item 4): ignore
//! rules, binary files, hostile patterns, confinement, output caps.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{
    BashConfig, GlobTool, GrepTool, SearchConfig, ToolCallRequest, ToolContext, ToolSet, Workspace,
};
use serde_json::{Value, json};

fn text_of(o: &ToolOutcome) -> String {
    o.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn code_of(o: &ToolOutcome) -> Option<String> {
    o.error
        .as_ref()
        .and_then(|e| e.info.as_ref())
        .map(|i| i.code.clone())
}

fn call_with(set: &ToolSet, ws: &Path, name: &str, args: Value) -> ToolOutcome {
    set.execute_request(
        &ToolCallRequest {
            name: name.into(),
            call_id: "c1".into(),
            arguments: args,
        },
        &ToolContext::new(Workspace::new(ws).unwrap()),
    )
}

fn call(ws: &Path, name: &str, args: Value) -> ToolOutcome {
    call_with(&ToolSet::standard(BashConfig::default()), ws, name, args)
}

/// A small project: sources, an ignored build dir, a hidden dir, a binary
/// file, a nested .gitignore, and links that point out of the workspace.
fn project() -> (tempfile::TempDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("src/nested")).unwrap();
    fs::create_dir_all(root.join("target/debug")).unwrap();
    fs::create_dir_all(root.join(".hidden")).unwrap();
    fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::write(
        root.join("src/main.rs"),
        "fn main() {\n    println!(\"Needle here\");\n}\n",
    )
    .unwrap();
    fs::write(
        root.join("src/nested/lib.rs"),
        "// needle in lib\npub fn f() {}\n",
    )
    .unwrap();
    fs::write(root.join("src/nested/.gitignore"), "skip.rs\n").unwrap();
    fs::write(
        root.join("src/nested/skip.rs"),
        "needle ignored by nested rule\n",
    )
    .unwrap();
    fs::write(root.join("target/debug/out.rs"), "needle in build output\n").unwrap();
    fs::write(root.join("run.log"), "needle in a log\n").unwrap();
    fs::write(root.join(".hidden/h.rs"), "needle hidden\n").unwrap();
    fs::write(root.join("blob.bin"), b"needle\0\x01\x02binary").unwrap();
    fs::write(root.join("README.md"), "A needle in the readme.\n").unwrap();
    fs::write(outside.path().join("secret.rs"), "needle outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("link_out")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.rs"),
        root.join("secret_link.rs"),
    )
    .unwrap();
    (dir, outside)
}

#[test]
fn grep_honours_ignore_rules_and_skips_hidden_binary_and_links() {
    let (dir, _outside) = project();
    let out = call(dir.path(), "grep", json!({"pattern": "needle"}));
    assert!(!out.is_error(), "{}", text_of(&out));
    let text = text_of(&out);
    assert!(
        text.contains("src/nested/lib.rs:1: // needle in lib"),
        "{text}"
    );
    assert!(
        text.contains("README.md:1: A needle in the readme."),
        "{text}"
    );
    for absent in [
        "target/", "run.log", ".hidden", "blob.bin", "skip.rs", "outside", "secret",
    ] {
        assert!(!text.contains(absent), "{absent} should be skipped: {text}");
    }
    // Case-insensitive finds "Needle" too; a glob narrows the files.
    let out = call(
        dir.path(),
        "grep",
        json!({"pattern": "needle", "case_insensitive": true, "glob": "*.rs"}),
    );
    let text = text_of(&out);
    assert!(
        text.contains("src/main.rs:2:     println!(\"Needle here\");"),
        "{text}"
    );
    assert!(!text.contains("README.md"), "{text}");
    // A subdirectory, and one file.
    let out = call(
        dir.path(),
        "grep",
        json!({"pattern": "needle", "path": "src/nested"}),
    );
    assert_eq!(text_of(&out), "src/nested/lib.rs:1: // needle in lib");
    let out = call(dir.path(), "grep", json!({"pattern": "zzz-none"}));
    assert_eq!(text_of(&out), "No matches found.");
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let (dir, outside) = project();
    for args in [
        json!({"pattern": "needle", "path": outside.path().display().to_string()}),
        json!({"pattern": "needle", "path": "../"}),
        json!({"pattern": "needle", "path": "link_out"}),
    ] {
        let out = call(dir.path(), "grep", args.clone());
        assert_eq!(
            code_of(&out).as_deref(),
            Some("FS_SANDBOX_DENIED"),
            "{args} {}",
            text_of(&out)
        );
        let mut glob_args = args.clone();
        glob_args["pattern"] = json!("**/*.rs");
        let out = call(dir.path(), "glob", glob_args);
        assert_eq!(
            code_of(&out).as_deref(),
            Some("FS_SANDBOX_DENIED"),
            "{args}"
        );
    }
}

#[test]
fn hostile_patterns_are_refused_or_run_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    // 2000 files of 4 KiB of 'a' with no 'b': a backtracking engine takes
    // exponential time on (a*)*b per line; this one is linear.
    for i in 0..2000 {
        fs::write(dir.path().join(format!("f{i}.txt")), "a".repeat(4096)).unwrap();
    }
    let start = Instant::now();
    let out = call(dir.path(), "grep", json!({"pattern": "(a*)*b"}));
    assert_eq!(text_of(&out), "No matches found.");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    // A pattern whose compiled form is huge is refused with a clear error.
    let out = call(dir.path(), "grep", json!({"pattern": "(\\w{100}){100}"}));
    assert!(out.is_error());
    assert!(
        text_of(&out).starts_with("Error: invalid pattern: "),
        "{}",
        text_of(&out)
    );
    let out = call(dir.path(), "grep", json!({"pattern": "(unclosed"}));
    assert!(text_of(&out).starts_with("Error: invalid pattern: "));
    let out = call(dir.path(), "glob", json!({"pattern": "[unclosed"}));
    assert!(
        text_of(&out).starts_with("Error: invalid glob \"[unclosed\": "),
        "{}",
        text_of(&out)
    );
}

#[test]
fn output_is_capped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("many.txt"), "hit\n".repeat(500)).unwrap();
    fs::write(
        dir.path().join("long.txt"),
        format!("hit {}\n", "x".repeat(10_000)),
    )
    .unwrap();
    let mut set = ToolSet::new();
    let config = SearchConfig {
        max_results: 10,
        ..SearchConfig::default()
    };
    set.insert(Box::new(GrepTool { config }));
    set.insert(Box::new(GlobTool { config }));
    let out = call_with(
        &set,
        dir.path(),
        "grep",
        json!({"pattern": "^hit", "path": "many.txt"}),
    );
    let text = text_of(&out);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("many.txt:")).count(),
        10
    );
    assert!(
        text.ends_with("(Showing the first 10 matches; more exist. Narrow the pattern, path or glob to see the rest.)"),
        "{text}"
    );
    let out = call_with(
        &set,
        dir.path(),
        "grep",
        json!({"pattern": "hit", "path": "long.txt"}),
    );
    assert!(
        text_of(&out).ends_with("... (line cut to 400 chars)"),
        "{}",
        text_of(&out)
    );
    for i in 0..25 {
        fs::write(dir.path().join(format!("g{i:02}.rs")), "").unwrap();
    }
    let out = call_with(&set, dir.path(), "glob", json!({"pattern": "*.rs"}));
    let text = text_of(&out);
    assert!(text.starts_with("g00.rs\ng01.rs\n"), "{text}");
    assert!(
        text.ends_with("(Showing 10 of 25 files. Use a narrower pattern or path to see the rest.)"),
        "{text}"
    );
}

#[test]
fn glob_finds_files_by_name_or_path() {
    let (dir, _outside) = project();
    let out = call(dir.path(), "glob", json!({"pattern": "**/*.rs"}));
    assert_eq!(text_of(&out), "src/main.rs\nsrc/nested/lib.rs");
    let out = call(dir.path(), "glob", json!({"pattern": "lib.rs"}));
    assert_eq!(text_of(&out), "src/nested/lib.rs");
    let out = call(
        dir.path(),
        "glob",
        json!({"pattern": "*.md", "path": "src"}),
    );
    assert_eq!(text_of(&out), "No files found.");
    // Both are parallel-safe, read-only tools.
    let set = ToolSet::standard(BashConfig::default());
    let reg = set.registry().unwrap();
    for name in ["grep", "glob"] {
        assert!(reg.get(name).unwrap().concurrency_safe, "{name}");
    }
}
