//! Helpers shared by the workspace integration tests.

pub mod crash;

use std::path::{Path, PathBuf};

pub mod packed;

pub use packed::{Log, LogEvent, read_log};

/// The vendored test data (`testdata/` at the repository root).
pub fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// Every `*.jsonl` file of `testdata/conformance/sessions`, sorted by name.
pub fn conformance_logs() -> Vec<PathBuf> {
    let dir = testdata_dir().join("conformance/sessions");
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
