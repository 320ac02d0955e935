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

/// Largest part of one instruction file delivered (bytes).
pub const MAX_INSTRUCTION_BYTES: u64 = 32 * 1024;
/// Most instruction files delivered (the nearest are kept).
pub const MAX_INSTRUCTION_FILES: usize = 16;

/// The instruction files of a workspace on this host: in the user's config
/// directory, then in every directory from the repository root (the
/// nearest ancestor holding `.git`; without one, the working directory
/// alone) down to the working directory. In each directory `AGENTS.md`,
/// else `CLAUDE.md`.
#[derive(Clone, Debug)]
pub struct HostInstructions {
    cwd: PathBuf,
    config_dir: Option<PathBuf>,
}

impl HostInstructions {
    /// The files for `cwd` (absolute), plus the one in `config_dir` (e.g.
    /// `~/.config/dsh`) when given.
    pub fn new(cwd: impl Into<PathBuf>, config_dir: Option<PathBuf>) -> Self {
        HostInstructions {
            cwd: cwd.into(),
            config_dir,
        }
    }

    /// The directories searched, least precedence first.
    pub fn directories(&self) -> Vec<PathBuf> {
        let mut chain: Vec<PathBuf> = Vec::new();
        let mut dir = Some(self.cwd.as_path());
        let mut found_root = false;
        while let Some(d) = dir {
            chain.push(d.to_path_buf());
            if d.join(".git").exists() {
                found_root = true;
                break;
            }
            dir = d.parent();
        }
        if !found_root {
            chain.truncate(1);
        }
        chain.reverse();
        let mut out: Vec<PathBuf> = self.config_dir.iter().cloned().collect();
        for d in chain {
            if !out.contains(&d) {
                out.push(d);
            }
        }
        out
    }
}

/// The instruction file of `dir`, if any: `AGENTS.md`, else `CLAUDE.md`.
pub fn instruction_file(dir: &Path) -> Option<crate::InstructionFile> {
    let path = ["AGENTS.md", "CLAUDE.md"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.symlink_metadata().is_ok())?;
    let shown = path.display().to_string();
    let read = || -> std::io::Result<(String, Option<u64>)> {
        let file = std::fs::File::open(&path)?;
        let size = file.metadata()?.len();
        let mut bytes = Vec::new();
        file.take(MAX_INSTRUCTION_BYTES).read_to_end(&mut bytes)?;
        let cut = (size > MAX_INSTRUCTION_BYTES).then_some(size);
        if cut.is_some() {
            // Cut at a character boundary (at most 3 bytes of a split one).
            for _ in 0..3 {
                if std::str::from_utf8(&bytes).is_ok() {
                    break;
                }
                bytes.pop();
            }
        }
        Ok((String::from_utf8_lossy(&bytes).into_owned(), cut))
    };
    Some(match read() {
        Ok((text, cut_from)) => crate::InstructionFile {
            path: shown,
            text: Ok(text),
            cut_from,
        },
        Err(e) => crate::InstructionFile {
            path: shown,
            text: Err(e.to_string()),
            cut_from: None,
        },
    })
}

impl crate::InstructionSource for HostInstructions {
    fn gather(&mut self) -> Vec<crate::InstructionFile> {
        let mut files: Vec<crate::InstructionFile> = self
            .directories()
            .iter()
            .filter_map(|d| instruction_file(d))
            .collect();
        if files.len() > MAX_INSTRUCTION_FILES {
            files.drain(..files.len() - MAX_INSTRUCTION_FILES);
        }
        files
    }
}

#[cfg(test)]
mod instruction_tests {
    use super::*;
    use crate::InstructionSource;

    #[test]
    fn nearest_last_agents_before_claude_and_capped() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        std::fs::create_dir_all(root.join("repo/.git")).unwrap();
        std::fs::create_dir_all(root.join("repo/a/b")).unwrap();
        std::fs::create_dir_all(root.join("conf")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "outside the repo").unwrap();
        std::fs::write(root.join("conf/AGENTS.md"), "user").unwrap();
        std::fs::write(root.join("repo/AGENTS.md"), "repo").unwrap();
        std::fs::write(root.join("repo/CLAUDE.md"), "ignored: AGENTS.md wins").unwrap();
        std::fs::write(root.join("repo/a/CLAUDE.md"), "claude a").unwrap();
        std::fs::write(
            root.join("repo/a/b/AGENTS.md"),
            "é".repeat(MAX_INSTRUCTION_BYTES as usize),
        )
        .unwrap();
        let mut src = HostInstructions::new(root.join("repo/a/b"), Some(root.join("conf")));
        let files = src.gather();
        let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        let want: Vec<String> = [
            "conf/AGENTS.md",
            "repo/AGENTS.md",
            "repo/a/CLAUDE.md",
            "repo/a/b/AGENTS.md",
        ]
        .iter()
        .map(|p| root.join(p).display().to_string())
        .collect();
        assert_eq!(paths, want);
        assert_eq!(files[1].text.as_deref(), Ok("repo"));
        assert_eq!(files[2].text.as_deref(), Ok("claude a"));
        let big = &files[3];
        assert_eq!(big.cut_from, Some(2 * MAX_INSTRUCTION_BYTES));
        let text = big.text.as_ref().unwrap();
        assert!(
            text.len() as u64 <= MAX_INSTRUCTION_BYTES
                && text.len() as u64 > MAX_INSTRUCTION_BYTES - 4
        );
        assert!(!text.contains('\u{FFFD}'), "cut at a character boundary");
        // Outside a repository only the working directory counts.
        let mut src = HostInstructions::new(root.join("conf"), None);
        assert_eq!(src.gather().len(), 1);
        // A directory named AGENTS.md cannot be read: a notice, not a failure.
        std::fs::remove_file(root.join("repo/a/b/AGENTS.md")).unwrap();
        std::fs::create_dir(root.join("repo/a/b/AGENTS.md")).unwrap();
        let f = instruction_file(&root.join("repo/a/b")).unwrap();
        assert!(f.text.is_err(), "{f:?}");
    }
}
