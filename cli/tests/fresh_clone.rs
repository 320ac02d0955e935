//! The README's fresh-machine commands.
//!
//! The full check clones the working repository into a temporary folder
//! (nothing beside it: the tests read the vendored `testdata/`) and runs the demo command
//! there: it rebuilds the workspace, which takes minutes, so it is
//! `#[ignore]`d; `.ci/run` does the cheap equivalent by running the demo
//! binary that `cargo test --workspace` already built.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).expect("README.md at the root")
}

/// The two commands a fresh machine can run, in the README's first code block.
const DEMO: &str = "cargo run --release -p dsh-cli -- demo";
const TESTS: &str = "cargo test --workspace";

#[test]
fn readme_names_the_two_fresh_machine_commands_first() {
    let text = readme();
    let block_start = text.find("```sh\n").expect("a sh code block");
    let block = &text[block_start..];
    let block = &block[..block[6..].find("```").unwrap() + 6];
    assert!(block.contains(DEMO), "{block}");
    assert!(block.contains(TESTS), "{block}");
}

#[test]
#[ignore = "clones and rebuilds the workspace (minutes); .ci/run runs the built demo instead"]
fn readme_demo_works_in_a_fresh_clone() {
    let tmp = tempfile::tempdir().unwrap();
    let clone = tmp.path().join("dsh");
    let st = Command::new("git")
        .args(["clone", "--quiet"])
        .arg(repo_root())
        .arg(&clone)
        .status()
        .unwrap();
    assert!(st.success());
    let data = tmp.path().join("data");
    // The README command, run as written (plus a private data dir).
    let mut words = DEMO.split_whitespace();
    let out = Command::new(words.next().unwrap())
        .args(words)
        .args(["--store-dir"])
        .arg(&data)
        .current_dir(&clone)
        .env_remove("DEEPSEEK_API_KEY")
        .env("CARGO_TARGET_DIR", tmp.path().join("target"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Done: `hello.txt` has two lines"),
        "{stdout}"
    );
    assert!(stdout.contains("dsh log check "), "{stdout}");
}
