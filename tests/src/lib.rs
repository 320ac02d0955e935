//! Helpers shared by the workspace integration tests.

pub mod crash;

use std::path::{Path, PathBuf};

/// The shared directory beside the repository (`DSH_SHARED_DIR` overrides).
pub fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DSH_SHARED_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// Every `*.jsonl` file of `../shared/conformance/sessions`, sorted by name.
pub fn conformance_logs() -> Vec<PathBuf> {
    let dir = shared_dir().join("conformance/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no conformance logs in {}",
        dir.display()
    );
    files
}
