//! Gathering the [`Facts`] on a std host: the working directory, the
//! platform, and the git state from `git status --porcelain --branch`
//! (bounded in time and bytes; a missing `git` or a non-repository gives
//! `git: None`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::string::{String, ToString};
use std::time::{Duration, Instant};
use std::vec::Vec;

use crate::system_prompt::{FactSource, Facts, Git};

/// Most bytes of `git status` output read.
const MAX_GIT_BYTES: u64 = 64 * 1024;
/// Most status lines kept (the rest are counted).
const KEEP_STATUS_LINES: usize = 30;
/// How long `git status` may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(3);

/// The facts of a workspace directory on this host.
#[derive(Clone, Debug)]
pub struct HostFacts {
    cwd: PathBuf,
}

impl HostFacts {
    /// The facts of `cwd` (an absolute path).
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        HostFacts { cwd: cwd.into() }
    }
}

impl FactSource for HostFacts {
    fn gather(&mut self) -> Facts {
        Facts {
            cwd: self.cwd.display().to_string(),
            platform: platform(),
            git: git_state(&self.cwd),
        }
    }
}

/// `os arch` of this build (`linux x86_64`).
pub fn platform() -> String {
    std::format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
}

/// The git state of `dir`, or `None` when it is not in a repository or git
/// cannot be run in time.
pub fn git_state(dir: &Path) -> Option<Git> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "status",
            "--porcelain=v1",
            "--branch",
            "--untracked-files=normal",
        ])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.take(MAX_GIT_BYTES).read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + GIT_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let bytes = reader.join().ok()?;
    if !status?.success() {
        return None;
    }
    Some(parse_status(&String::from_utf8_lossy(&bytes)))
}

/// Parses `git status --porcelain=v1 --branch` output.
pub fn parse_status(text: &str) -> Git {
    let mut git = Git::default();
    for line in text.lines() {
        if let Some(branch) = line.strip_prefix("## ") {
            git.branch = branch.to_string();
        } else if line.is_empty() {
            continue;
        } else if git.status.len() < KEEP_STATUS_LINES {
            git.status.push(line.to_string());
        } else {
            git.more += 1;
        }
    }
    git
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_branch_and_caps_status() {
        let mut text = String::from("## main...origin/main [ahead 1]\n M a.rs\n");
        for i in 0..40 {
            text.push_str(&std::format!("?? f{i}\n"));
        }
        let git = parse_status(&text);
        assert_eq!(git.branch, "main...origin/main [ahead 1]");
        assert_eq!(git.status.len(), KEEP_STATUS_LINES);
        assert_eq!(git.status[0], " M a.rs");
        assert_eq!(git.more, 11);
    }

    #[test]
    fn a_plain_directory_has_no_git_state() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(git_state(dir.path()), None);
        let facts = HostFacts::new(dir.path()).gather();
        assert_eq!(facts.cwd, dir.path().display().to_string());
        assert!(facts.platform.contains(std::env::consts::OS));
    }
}
