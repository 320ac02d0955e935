//! Sandbox escapes: a workspace swapped for a
//! symlink after the tools opened it, and device nodes made beneath a
//! writable root.

use std::path::Path;

mod common;

use common::{bash, landlock_available, text_of};
use dsh_tools::{BashConfig, BashTool, SandboxPolicy, ToolContext, ToolSet, Workspace};

/// The temp dirs are closed so that a directory under /tmp (where the
/// test's directories live) is writable only through the workspace rule.
fn confined() -> ToolSet {
    let config = BashConfig {
        sandbox: SandboxPolicy {
            temp_dirs: false,
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    let mut set = ToolSet::new();
    set.insert(Box::new(BashTool { config }));
    set
}

/// "Workspace swap": the workspace is replaced by a symlink
/// to another directory after the tools opened it (what `mv WS WS.old &&
/// ln -s ~/elsewhere WS` from a command does when the parent is writable).
/// The next command writes nothing in the other directory and gets a clear
/// error; with the directory put back, commands run again.
#[test]
fn a_swapped_workspace_does_not_redirect_writes() {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let set = confined();
    let ctx = ToolContext::new(Workspace::new(&ws).unwrap());
    let out = bash(&set, &ctx, "echo before > before.txt && echo ok");
    assert_eq!(text_of(&out), "ok\n");

    std::fs::rename(&ws, base.path().join("ws.old")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &ws).unwrap();
    let cmd = format!(
        "echo x > x.txt; echo x > '{}/abs.txt'; echo done",
        ws.display()
    );
    let out = bash(&set, &ctx, &cmd);
    let text = text_of(&out);
    let written: Vec<_> = std::fs::read_dir(elsewhere.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        written.is_empty(),
        "the swapped workspace received {written:?}: {text}"
    );
    assert!(out.is_error(), "{text}");
    assert!(text.contains("was moved or replaced"), "{text}");

    // Back in place: the same context works again.
    std::fs::remove_file(&ws).unwrap();
    std::fs::rename(base.path().join("ws.old"), &ws).unwrap();
    let out = bash(&set, &ctx, "cat before.txt");
    assert_eq!(text_of(&out), "before\n");
}

/// "Workspace swap", from inside: a command that swaps the
/// workspace's directory for a symlink (its parent is a writable root)
/// cannot make the next command write through it.
#[test]
fn a_writable_root_swapped_for_a_symlink_is_not_followed() {
    if !landlock_available() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = BashConfig {
        sandbox: SandboxPolicy {
            temp_dirs: false,
            writable_roots: vec![root.clone()],
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    let mut set = ToolSet::new();
    set.insert(Box::new(BashTool { config }));
    let ctx = ToolContext::new(Workspace::new(ws.path()).unwrap());
    let probe = format!("echo x > '{}/x.txt'; echo status=$?", root.display());
    assert!(text_of(&bash(&set, &ctx, &probe)).contains("status=0"));

    std::fs::rename(&root, base.path().join("root.old")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &root).unwrap();
    let text = text_of(&bash(&set, &ctx, &probe));
    assert!(
        !elsewhere.path().join("x.txt").exists(),
        "a write went through the swapped writable root: {text}"
    );
    assert!(text.contains("status=1"), "{text}");
}
/// "Device nodes": beneath a writable root no character or
/// block device can be made (as root, `mknod` would give access to any
/// device). Runs as root (CI does); skipped with a note otherwise.
#[test]
fn no_device_nodes_beneath_the_workspace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("note: not root; mknod is refused by the kernel anyway, check not run");
        return;
    }
    if !landlock_available() {
        return;
    }
    let probe = "mknod null2 c 1 3; echo c=$?; mknod blk b 7 0; echo b=$?; mkfifo f; echo p=$?";
    // Unconfined, the same commands make the devices here; where they
    // cannot (a container without CAP_MKNOD), the check would prove
    // nothing.
    let control = tempfile::tempdir().unwrap();
    let mut off = ToolSet::new();
    off.insert(Box::new(BashTool {
        config: BashConfig {
            sandbox: SandboxPolicy::off(),
            ..BashConfig::default()
        },
    }));
    let ctx = ToolContext::new(Workspace::new(control.path()).unwrap());
    let text = text_of(&bash(&off, &ctx, probe));
    if !text.contains("c=0") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with mknod allowed: {text}"
        );
        eprintln!("note: mknod is refused here even unconfined; check not run: {text}");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let set = confined();
    let ctx = ToolContext::new(Workspace::new(ws.path()).unwrap());
    let text = text_of(&bash(&set, &ctx, probe));
    assert!(text.contains("c=1"), "{text}");
    assert!(text.contains("b=1"), "{text}");
    assert!(!ws.path().join("null2").exists(), "{text}");
    assert!(!ws.path().join("blk").exists(), "{text}");
    // FIFOs stay possible (build tools and test suites make them).
    assert!(text.contains("p=0"), "{text}");
    assert!(Path::new(&ws.path().join("f")).exists());
}
