//! Gathering the [`Facts`] on a std host: the working directory, the
//! platform, and the git state.
//!
//! The workspace is untrusted, so is its repository's configuration: a
//! `core.fsmonitor`, a `filter.<x>.clean` or an `include.path` in
//! `.git/config` names programs git would run. So the branch is read
//! directly from `HEAD` (bounded, validated), and `git status` runs only
//! confined (see [`confine`]): a cleared environment (no secret), no user
//! or system config, no optional locks, no fsmonitor, and a Landlock domain
//! in which git can execute nothing but itself, write nothing and open no
//! TCP connection. Where that confinement is unavailable the status is
//! left out and only the branch is reported ([`git_status_warning`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::string::{String, ToString};
use std::time::{Duration, Instant};
use std::vec::Vec;

use crate::system_prompt::{FactSource, Facts, Git};

pub mod confine;

/// Most bytes of `git status` output read.
const MAX_GIT_BYTES: u64 = 64 * 1024;
/// Most status lines kept (the rest are counted).
const KEEP_STATUS_LINES: usize = 30;
/// How long `git status` may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(3);
/// Most bytes read of `HEAD` or of a `.git` file.
const MAX_REF_FILE_BYTES: u64 = 4096;
/// Longest branch name reported.
const MAX_BRANCH_BYTES: usize = 255;
/// The branch line of a detached `HEAD` (as `git status --branch` says it).
pub const DETACHED: &str = "HEAD (no branch)";
/// The branch line of a `HEAD` that is not a valid ref (never shown raw).
pub const INVALID_HEAD: &str = "HEAD (unreadable)";

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

/// The git state of `dir`, or `None` when it is not in a repository. The
/// branch comes from `HEAD`; the status (and the upstream part of the
/// branch line) from a confined `git status`, left out when git cannot be
/// run confined or in time.
pub fn git_state(dir: &Path) -> Option<Git> {
    let git_dir = find_git_dir(dir)?;
    let branch = read_branch(&git_dir);
    let mut git = confine::status_output(dir, GIT_TIMEOUT, MAX_GIT_BYTES)
        .map(|bytes| parse_status(&String::from_utf8_lossy(&bytes)))
        .unwrap_or_default();
    git.branch = branch_line(&git.branch, branch);
    Some(git)
}

/// The branch line shown: `status` (the `##` line of `git status`) when
/// it adds the upstream (`main...origin/main [ahead 1]`) or says the
/// branch is unborn (`No commits yet on main`) for the branch `head` read
/// from HEAD, and holds no hidden character; else `head`.
fn branch_line(status: &str, head: String) -> String {
    let agrees = status == head
        || status
            .strip_prefix(head.as_str())
            .is_some_and(|rest| rest.starts_with("..."))
        || status
            .strip_suffix(head.as_str())
            .is_some_and(|before| before.ends_with(" on "));
    if agrees && !status.chars().any(|c| c.is_control() || invisible(c)) {
        status.to_string()
    } else {
        head
    }
}

/// The warning a front end shows once when `git status` cannot run
/// confined here (the runtime context then has the branch but no status).
pub fn git_status_warning() -> Option<&'static str> {
    confine::unavailable()
}

/// The git directory of the repository holding `dir`: the nearest
/// ancestor's `.git` directory, or the directory a `.git` file points to
/// (`gitdir: …`, as in linked worktrees and submodules).
pub fn find_git_dir(dir: &Path) -> Option<PathBuf> {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        let dot = d.join(".git");
        if let Ok(meta) = std::fs::metadata(&dot) {
            if meta.is_dir() {
                return dot.join("HEAD").exists().then_some(dot);
            }
            if meta.is_file() {
                let text = read_small(&dot, MAX_REF_FILE_BYTES).ok()?;
                let target = text.strip_prefix("gitdir:")?.trim();
                if target.is_empty() || target.contains('\0') {
                    return None;
                }
                let target = Path::new(target);
                return Some(if target.is_absolute() {
                    target.to_path_buf()
                } else {
                    d.join(target)
                });
            }
        }
        cur = d.parent();
    }
    None
}

/// The branch line of the repository whose git directory is `git_dir`:
/// the branch name, [`DETACHED`], or [`INVALID_HEAD`] when `HEAD` cannot
/// be read or is not a well-formed ref (its text is never passed on).
pub fn read_branch(git_dir: &Path) -> String {
    let Ok(text) = read_small(&git_dir.join("HEAD"), MAX_REF_FILE_BYTES) else {
        return INVALID_HEAD.to_string();
    };
    let line = text.strip_suffix('\n').unwrap_or(&text);
    if let Some(name) = line.strip_prefix("ref: refs/heads/") {
        if valid_branch(name) {
            return name.to_string();
        }
    } else if matches!(line.len(), 40 | 64) && line.bytes().all(|b| b.is_ascii_hexdigit()) {
        return DETACHED.to_string();
    }
    INVALID_HEAD.to_string()
}

/// Whether `name` is a branch name worth showing: git's ref rules (no
/// control characters, spaces or `~^:?*[\`, no `..` or `@{`, no
/// component starting with `.` or ending in `.lock`), at most
/// [`MAX_BRANCH_BYTES`], and none of the invisible or direction-changing
/// characters git itself allows.
fn valid_branch(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_BRANCH_BYTES
        && !name.contains("..")
        && !name.contains("@{")
        && !name.ends_with('/')
        && !name.ends_with('.')
        && name
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"))
        && name.chars().all(|c| {
            !c.is_control()
                && !c.is_whitespace()
                && !invisible(c)
                && !matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\')
        })
}

/// Whether `c` is an invisible or direction-changing character.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}'
    )
}

/// Reads at most `max` bytes of the regular file `path` as text. Opened
/// non-blocking, so a FIFO planted in its place cannot stall the caller;
/// anything but a regular file, or a longer one, is an error.
pub fn read_small(path: &Path, max: u64) -> std::io::Result<String> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "file too large",
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}

/// Opens `path` for reading if it is a regular file, without blocking on
/// a FIFO or a device.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Runs `cmd` (stdout piped) and reads at most `max` bytes of its output
/// within `timeout`; `None` when it cannot start, fails or times out.
pub(crate) fn run_bounded(mut cmd: Command, timeout: Duration, max: u64) -> Option<Vec<u8>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.take(max).read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + timeout;
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
    Some(bytes)
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

    /// Runs `f` on a thread; fails (instead of hanging) past 10 s.
    fn within_time<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("finished in time (a FIFO must not block)")
    }

    fn mkfifo(path: &Path) {
        let ok = Command::new("mkfifo").arg(path).status().unwrap();
        assert!(ok.success());
    }

    #[test]
    fn branch_from_head_files() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        let git_dir = repo.join(".git");
        std::fs::create_dir_all(git_dir.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("sub/dir")).unwrap();
        let head = git_dir.join("HEAD");
        std::fs::write(&head, "ref: refs/heads/feature/x-1\n").unwrap();
        assert_eq!(find_git_dir(&repo.join("sub/dir")), Some(git_dir.clone()));
        assert_eq!(read_branch(&git_dir), "feature/x-1");
        std::fs::write(&head, "0123456789abcdef0123456789abcdef01234567\n").unwrap();
        assert_eq!(read_branch(&git_dir), DETACHED);
        // Hostile HEAD contents are never passed on.
        for bad in [
            "ref: refs/heads/a\x1b]52;c;aGk=\x07\n",
            "ref: refs/heads/x\x1b[2J\n",
            "ref: refs/heads/ab\u{202E}cd\n",
            "ref: refs/heads/a b\n",
            "ref: refs/heads/../../etc\n",
            "ref: refs/tags/v1\n",
            "garbage\n",
        ] {
            std::fs::write(&head, bad).unwrap();
            assert_eq!(read_branch(&git_dir), INVALID_HEAD, "{bad:?}");
        }
        std::fs::write(
            &head,
            std::format!("ref: refs/heads/{}\n", "a".repeat(5000)),
        )
        .unwrap();
        assert_eq!(read_branch(&git_dir), INVALID_HEAD);
        // A FIFO in place of HEAD does not block.
        std::fs::remove_file(&head).unwrap();
        mkfifo(&head);
        let g = git_dir.clone();
        assert_eq!(within_time(move || read_branch(&g)), INVALID_HEAD);
        // A `.git` file (linked worktree, submodule): relative and absolute.
        let wt = root.path().join("wt");
        let wt_git = git_dir.join("worktrees/wt");
        std::fs::create_dir_all(&wt_git).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt_git.join("HEAD"), "ref: refs/heads/side\n").unwrap();
        std::fs::write(wt.join(".git"), "gitdir: ../repo/.git/worktrees/wt\n").unwrap();
        let found = find_git_dir(&wt).unwrap();
        assert_eq!(read_branch(&found), "side");
        std::fs::write(
            wt.join(".git"),
            std::format!("gitdir: {}\n", wt_git.display()),
        )
        .unwrap();
        assert_eq!(find_git_dir(&wt), Some(wt_git.clone()));
        std::fs::remove_file(wt.join(".git")).unwrap();
        mkfifo(&wt.join(".git"));
        let w = wt.clone();
        let found = within_time(move || find_git_dir(&w));
        assert_ne!(found, Some(wt_git));
    }

    #[test]
    fn the_status_branch_line_only_when_it_agrees_with_head() {
        let head = || "main".to_string();
        assert_eq!(
            branch_line("main...origin/main [ahead 1]", head()),
            "main...origin/main [ahead 1]"
        );
        assert_eq!(
            branch_line("No commits yet on main", head()),
            "No commits yet on main"
        );
        assert_eq!(branch_line("", head()), "main");
        assert_eq!(branch_line("other...origin/other", head()), "main");
        assert_eq!(branch_line("mainline", head()), "main");
        assert_eq!(branch_line("main...origin/\u{202e}x", head()), "main");
        assert_eq!(branch_line("main...o\x1b[2J", head()), "main");
    }

    #[test]
    fn a_fifo_instruction_file_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        mkfifo(&dir.path().join("AGENTS.md"));
        let d = dir.path().to_path_buf();
        let file = within_time(move || instruction_file(&d)).unwrap();
        assert!(file.text.is_err(), "{file:?}");
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
        let file = open_regular(&path)?;
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
