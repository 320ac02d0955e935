//! Workspace path confinement on arbitrary path text: no panic, and every
//! path it accepts is inside the workspace once the OS resolves it, even
//! through the symlinks planted in the fixture (one to `/`, one to the
//! parent, one dangling, one chain back inside).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dsh_tools::Workspace;
use libfuzzer_sys::fuzz_target;

struct Fixture {
    _dir: tempfile::TempDir,
    workspace: Workspace,
    canonical_root: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub/deeper")).expect("dirs");
        std::fs::write(root.join("sub/file.txt"), "x").expect("file");
        std::os::unix::fs::symlink("/", root.join("to_root")).expect("link");
        std::os::unix::fs::symlink("..", root.join("to_parent")).expect("link");
        std::os::unix::fs::symlink("missing/target", root.join("dangling")).expect("link");
        std::os::unix::fs::symlink("sub/deeper", root.join("inside")).expect("link");
        std::fs::write(dir.path().join("secret.txt"), "outside").expect("file");
        let workspace = Workspace::new(&root).expect("workspace");
        let canonical_root = std::fs::canonicalize(&root).expect("canonical");
        Fixture {
            _dir: dir,
            workspace,
            canonical_root,
        }
    })
}

/// The path with every existing prefix resolved by the OS.
fn os_resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut tail = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&existing) {
            let mut out = c;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let f = fixture();
    if let Ok(r) = f.workspace.resolve(raw) {
        assert!(
            r.path.starts_with(&f.canonical_root),
            "{raw:?} resolved to {} outside {}",
            r.path.display(),
            f.canonical_root.display()
        );
        let real = os_resolved(&r.path);
        assert!(
            real.starts_with(&f.canonical_root),
            "{raw:?} is accepted as {} but the OS resolves it to {}",
            r.path.display(),
            real.display()
        );
        assert_eq!(f.canonical_root.join(&r.relative), r.path);
    }
});
