//! "Workspace swap", for the file tools: `read`, `write`,
//! `edit`, `grep` and `glob` run in dsh's own process (no Landlock), so
//! after the workspace directory is moved away and something else is put at
//! its path, they must neither read nor change that other directory.

use std::fs;
use std::path::{Path, PathBuf};

mod common;

use common::{call, text_of};
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{BashConfig, ToolContext, ToolSet, Workspace};
use serde_json::json;

/// How the workspace path is made to lead elsewhere.
#[derive(Clone, Copy, Debug)]
enum Swap {
    /// `mv WS WS.old && ln -s ELSEWHERE WS`.
    Symlink,
    /// `mv WS WS.old && mv ELSEWHERE WS`: a real directory at the same path.
    Directory,
}

/// A workspace `base/ws` with `shared.txt` ("workspace"), opened by the
/// tools, then swapped: the returned path is where the other directory's
/// files can be seen (holding `shared.txt` and `secret.txt` with "SECRET").
struct Swapped {
    _base: tempfile::TempDir,
    _other: tempfile::TempDir,
    ws: PathBuf,
    moved: PathBuf,
    other: PathBuf,
    ctx: ToolContext,
}

fn swapped(how: Swap) -> Swapped {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    fs::create_dir(&ws).unwrap();
    fs::write(ws.join("shared.txt"), "workspace\n").unwrap();
    let ctx = ToolContext::new(Workspace::new(&ws).unwrap());
    let other_tmp = tempfile::tempdir().unwrap();
    let mut other = other_tmp.path().join("elsewhere");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("shared.txt"), "SECRET\n").unwrap();
    fs::write(other.join("secret.txt"), "SECRET\n").unwrap();
    let moved = base.path().join("ws.old");
    fs::rename(&ws, &moved).unwrap();
    match how {
        Swap::Symlink => std::os::unix::fs::symlink(&other, &ws).unwrap(),
        Swap::Directory => {
            fs::rename(&other, &ws).unwrap();
            other = ws.clone();
        }
    }
    Swapped {
        _base: base,
        _other: other_tmp,
        ws,
        moved,
        other,
        ctx,
    }
}

/// The names and contents in `dir`, sorted.
fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let text = fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    v.sort();
    v
}

fn untouched() -> Vec<(String, String)> {
    vec![
        ("secret.txt".into(), "SECRET\n".into()),
        ("shared.txt".into(), "SECRET\n".into()),
    ]
}

/// The refusal bash gives for a swapped workspace, as a file-tool error.
fn assert_refused(out: &ToolOutcome, what: &str) {
    let text = text_of(out);
    assert!(out.is_error(), "{what}: not refused: {text}");
    assert!(text.contains("was moved or replaced"), "{what}: {text}");
    assert!(!text.contains("SECRET"), "{what}: {text}");
}

fn each_swap(check: impl Fn(Swap)) {
    check(Swap::Directory);
    check(Swap::Symlink);
}

#[test]
fn write_after_a_swap_creates_nothing_in_the_other_directory() {
    each_swap(|how| {
        let s = swapped(how);
        let set = ToolSet::standard(BashConfig::default());
        let abs = s.ws.join("abs.txt").display().to_string();
        // A new file (relative and absolute), an existing one, new dirs.
        for path in ["new.txt", abs.as_str(), "shared.txt", "sub/dir/new.txt"] {
            let out = call(
                &set,
                &s.ctx,
                "write",
                json!({"file_path": path, "content": "x"}),
            );
            assert_refused(&out, &format!("{how:?} write {path}"));
        }
        assert_eq!(listing(&s.other), untouched(), "{how:?}");
        assert_eq!(
            listing(&s.moved),
            vec![("shared.txt".into(), "workspace\n".into())],
            "{how:?}"
        );
    });
}

#[test]
fn edit_after_a_swap_changes_nothing_in_the_other_directory() {
    each_swap(|how| {
        let s = swapped(how);
        let set = ToolSet::standard(BashConfig::default());
        let out = call(
            &set,
            &s.ctx,
            "edit",
            json!({"file_path": "shared.txt", "old_string": "SECRET", "new_string": "changed"}),
        );
        assert_refused(&out, &format!("{how:?} edit"));
        assert_eq!(listing(&s.other), untouched(), "{how:?}");
    });
}

#[test]
fn read_after_a_swap_reads_nothing_of_the_other_directory() {
    each_swap(|how| {
        let s = swapped(how);
        let set = ToolSet::standard(BashConfig::default());
        for path in ["secret.txt", "shared.txt"] {
            let out = call(&set, &s.ctx, "read", json!({"file_path": path}));
            assert_refused(&out, &format!("{how:?} read {path}"));
        }
    });
}

#[test]
fn grep_and_glob_after_a_swap_see_nothing_of_the_other_directory() {
    each_swap(|how| {
        let s = swapped(how);
        let set = ToolSet::standard(BashConfig::default());
        let out = call(&set, &s.ctx, "grep", json!({"pattern": "SECRET"}));
        assert_refused(&out, &format!("{how:?} grep"));
        let out = call(&set, &s.ctx, "glob", json!({"pattern": "*.txt"}));
        assert_refused(&out, &format!("{how:?} glob"));
    });
}

/// Put back, the same context works again (the refusal is not sticky).
#[test]
fn the_file_tools_work_again_once_the_workspace_is_back() {
    let s = swapped(Swap::Symlink);
    fs::remove_file(&s.ws).unwrap();
    fs::rename(&s.moved, &s.ws).unwrap();
    let set = ToolSet::standard(BashConfig::default());
    let out = call(&set, &s.ctx, "read", json!({"file_path": "shared.txt"}));
    assert!(text_of(&out).contains("1: workspace"), "{}", text_of(&out));
    let out = call(
        &set,
        &s.ctx,
        "write",
        json!({"file_path": "sub/new.txt", "content": "x"}),
    );
    assert!(!out.is_error(), "{}", text_of(&out));
    assert_eq!(fs::read_to_string(s.ws.join("sub/new.txt")).unwrap(), "x");
}
