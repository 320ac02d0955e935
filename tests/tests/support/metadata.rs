//! `cargo metadata` of the workspace, shared by the tests that read the
//! Cargo.toml files (packaging, layers).

use std::process::Command;

use serde_json::Value;

/// `cargo metadata --format-version 1 --no-deps --offline` of the workspace.
/// Panics (it runs in a test) when cargo fails or prints no JSON.
pub fn workspace_metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .args(["--manifest-path", root])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}
