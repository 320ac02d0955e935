//! Running `git status` so that the repository's configuration cannot run
//! a program or see a secret.
//!
//! git runs from a thread of its own that first restricts itself with
//! Landlock (the restriction is per thread and inherited by the children
//! it starts; the rest of the process is untouched, and the thread ends
//! after the run). In that domain:
//!
//! - files can be read (the repository may be anywhere), but only the git
//!   binary, the `git` in its exec-path and their ELF interpreter can be
//!   executed, so `sh` (a filter, an fsmonitor hook, an alias) cannot;
//! - nothing can be written (only `/dev/null`), no device ioctl, no TCP
//!   `bind`/`connect` (ABI 4), no signal or abstract socket outside the
//!   domain (ABI 6), and `no_new_privs` is set;
//! - the environment is cleared: `PATH`, `LC_ALL=C`, an empty `HOME`,
//!   `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`,
//!   `GIT_OPTIONAL_LOCKS=0` — never a secret;
//! - the command line adds `--no-optional-locks`, `-c core.fsmonitor=false`
//!   and `-c core.quotePath=true` (they outrank every config file).
//!
//! Without Landlock (another OS, an old kernel, a `git` that is not an ELF
//! binary) nothing runs: [`unavailable`] says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::string::{String, ToString};
use std::sync::OnceLock;
use std::time::Duration;
use std::vec::Vec;

/// Most bytes of the git binary's headers read to find its interpreter.
#[cfg(target_os = "linux")]
const MAX_ELF_HEADER_BYTES: u64 = 64 * 1024;

/// What a confined run needs: the git binary and the files it may execute.
#[derive(Debug)]
struct Plan {
    /// The git binary (absolute).
    git: PathBuf,
    /// Files that may be executed: `git`, the exec-path's `git`, the ELF
    /// interpreter.
    executable: Vec<PathBuf>,
}

/// The plan of this host, found once.
fn plan() -> &'static Result<Plan, &'static str> {
    static PLAN: OnceLock<Result<Plan, &'static str>> = OnceLock::new();
    PLAN.get_or_init(make_plan)
}

/// Why `git status` cannot run confined on this host, as a one-line
/// warning; `None` when it can, or when there is no git to run.
pub fn unavailable() -> Option<&'static str> {
    plan().as_ref().err().copied().filter(|w| *w != NO_GIT)
}

/// Why there is no plan when no git is installed (not worth a warning).
const NO_GIT: &str = "warning: git was not found: the runtime context has no git state";

/// The output of `git status --porcelain=v1 --branch` in `dir`, run
/// confined, at most `max` bytes within `timeout`; `None` when it cannot
/// run confined, fails or times out.
pub fn status_output(dir: &Path, timeout: Duration, max: u64) -> Option<Vec<u8>> {
    let plan = plan().as_ref().ok()?;
    let mut cmd = base_command(plan, dir)?;
    cmd.0.args([
        "status",
        "--porcelain=v1",
        "--branch",
        "--untracked-files=normal",
    ]);
    run(plan, cmd, timeout, max)
}

/// A git command with the cleared environment and the overriding
/// options; the `HOME` directory lives as long as the command.
struct GitCommand(Command, #[allow(dead_code)] Option<tempfile::TempDir>);

fn base_command(plan: &Plan, dir: &Path) -> Option<GitCommand> {
    let home = tempfile::Builder::new()
        .prefix("dsh-git-home")
        .tempdir()
        .ok()?;
    let mut cmd = Command::new(&plan.git);
    cmd.env_clear()
        .env("HOME", home.path())
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0");
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.arg("--no-optional-locks")
        .args(["-c", "core.fsmonitor=false", "-c", "core.quotePath=true"])
        .arg("-C")
        .arg(dir)
        .current_dir(dir);
    Some(GitCommand(cmd, Some(home)))
}

/// Runs `cmd` from a thread confined by `plan`'s ruleset.
fn run(plan: &Plan, cmd: GitCommand, timeout: Duration, max: u64) -> Option<Vec<u8>> {
    let executable = plan.executable.clone();
    std::thread::scope(|s| {
        s.spawn(move || {
            let GitCommand(cmd, _home) = cmd;
            if !restrict_this_thread(&executable) {
                return None;
            }
            super::run_bounded(cmd, timeout, max)
        })
        .join()
        .ok()
        .flatten()
    })
}

#[cfg(target_os = "linux")]
fn make_plan() -> Result<Plan, &'static str> {
    let git = find_in_path("git").ok_or(NO_GIT)?;
    let git = std::fs::canonicalize(&git).map_err(|_| NO_GIT)?;
    let interp = elf_interpreter(&git).ok_or(
        "warning: git is not an ELF binary: the runtime context has no git status \
         (branch only; git runs only confined)",
    )?;
    let mut executable = std::vec![git.clone()];
    executable.extend(interp);
    let probe = Plan {
        git: git.clone(),
        executable: executable.clone(),
    };
    // The exec-path, asked of a confined git (no repository involved).
    let mut cmd = Command::new(&git);
    cmd.env_clear().arg("--exec-path").current_dir("/");
    let out = run(
        &probe,
        GitCommand(cmd, None),
        Duration::from_secs(3),
        MAX_ELF_HEADER_BYTES,
    )
    .ok_or(
        "warning: Landlock is unavailable: the runtime context has no git status \
         (branch only; git runs only confined)",
    )?;
    let exec_path = String::from_utf8_lossy(&out).trim_end().to_string();
    let inner = Path::new(&exec_path).join("git");
    if let Ok(inner) = std::fs::canonicalize(inner)
        && !executable.contains(&inner)
    {
        executable.push(inner);
    }
    Ok(Plan { git, executable })
}

#[cfg(not(target_os = "linux"))]
fn make_plan() -> Result<Plan, &'static str> {
    Err(
        "warning: git cannot run confined on this OS: the runtime context has no git status \
         (branch only)",
    )
}

/// Restricts the calling thread (and what it starts) as the module
/// describes; false when the kernel enforces nothing.
#[cfg(target_os = "linux")]
fn restrict_this_thread(executable: &[PathBuf]) -> bool {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope, path_beneath_rules,
    };
    let abi = ABI::V6;
    let attempt = || -> Result<RulesetStatus, landlock::RulesetError> {
        let status = landlock::Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))?
            .handle_access(AccessNet::from_all(abi))?
            .scope(Scope::from_all(abi))?
            .create()?
            .add_rules(path_beneath_rules(
                ["/"],
                AccessFs::ReadFile | AccessFs::ReadDir,
            ))?
            .add_rules(path_beneath_rules(
                executable,
                AccessFs::Execute | AccessFs::ReadFile,
            ))?
            .add_rules(path_beneath_rules(["/dev/null"], AccessFs::WriteFile))?
            .restrict_self()?;
        Ok(status.ruleset)
    };
    matches!(
        attempt(),
        Ok(RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced)
    )
}

#[cfg(not(target_os = "linux"))]
fn restrict_this_thread(_executable: &[PathBuf]) -> bool {
    false
}

/// The first executable file named `name` in `PATH`.
#[cfg(target_os = "linux")]
fn find_in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The ELF interpreter (`PT_INTERP`) of `binary`: `Some(None)` for a
/// static binary, `None` when it is not an ELF file that can be read.
#[cfg(target_os = "linux")]
fn elf_interpreter(binary: &Path) -> Option<Option<PathBuf>> {
    use std::io::Read;
    let file = super::open_regular(binary).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_ELF_HEADER_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    parse_interpreter(&bytes).map(|p| p.map(PathBuf::from))
}

/// `PT_INTERP` of the ELF image starting with `bytes` (both classes and
/// byte orders); `None` when malformed or cut before the interpreter.
pub(crate) fn parse_interpreter(bytes: &[u8]) -> Option<Option<String>> {
    if bytes.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match bytes.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match bytes.get(5)? {
        1 => true,
        2 => false,
        _ => return None,
    };
    let num = |at: usize, len: usize| -> Option<u64> {
        let raw = bytes.get(at..at.checked_add(len)?)?;
        let mut v: u64 = 0;
        for i in 0..len {
            let b = if little { raw[len - 1 - i] } else { raw[i] };
            v = (v << 8) | u64::from(b);
        }
        Some(v)
    };
    let word = if wide { 8 } else { 4 };
    let (phoff, phentsize, phnum) = if wide {
        (num(32, 8)?, num(54, 2)?, num(56, 2)?)
    } else {
        (num(28, 4)?, num(42, 2)?, num(44, 2)?)
    };
    for i in 0..phnum {
        let at = usize::try_from(phoff.checked_add(i.checked_mul(phentsize)?)?).ok()?;
        if num(at, 4)? != 3 {
            continue;
        }
        // p_offset and p_filesz of PT_INTERP.
        let (off, size) = if wide {
            (num(at + 8, word)?, num(at + 32, word)?)
        } else {
            (num(at + 4, word)?, num(at + 16, word)?)
        };
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        let raw = bytes.get(start..end)?;
        let raw = raw.strip_suffix(b"\0").unwrap_or(raw);
        let text = core::str::from_utf8(raw).ok()?;
        if !text.starts_with('/') || text.contains('\0') {
            return None;
        }
        return Some(Some(text.into()));
    }
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_interpreter_of_malformed_input_is_none_without_panic() {
        assert_eq!(parse_interpreter(b""), None);
        assert_eq!(parse_interpreter(b"#!/bin/sh\n"), None);
        let mut h = std::vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        // No program headers: a static binary.
        assert_eq!(parse_interpreter(&h), Some(None));
        // One header far outside the bytes.
        h[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        h[56] = 1;
        h[54] = 56;
        assert_eq!(parse_interpreter(&h), None);
    }

    /// Under the confinement git runs but `sh` cannot be executed, nothing
    /// can be written, and the environment holds no secret.
    #[cfg(target_os = "linux")]
    #[test]
    fn confined_git_runs_and_nothing_else_executes() {
        let Ok(plan) = plan() else {
            // No Landlock or no git here: nothing may run at all.
            assert!(status_output(Path::new("/"), Duration::from_secs(3), 1024).is_none());
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let mut cmd = base_command(plan, dir.path()).unwrap();
        cmd.0.arg("--version");
        let out = run(plan, cmd, Duration::from_secs(3), 1024).expect("git runs confined");
        assert!(out.starts_with(b"git version"), "{out:?}");
        // git itself may run a shell command (an alias): it cannot start.
        let mut cmd = base_command(plan, dir.path()).unwrap();
        cmd.0.args(["-c", "alias.x=!echo ran", "x"]);
        assert_eq!(run(plan, cmd, Duration::from_secs(3), 1024), None);
        for sh in ["/bin/sh", "/usr/bin/env"] {
            let mut cmd = base_command(plan, dir.path()).unwrap();
            cmd.0 = Command::new(sh);
            cmd.0.args(["-c", "echo ran"]);
            assert_eq!(run(plan, cmd, Duration::from_secs(3), 1024), None, "{sh}");
        }
        // git's own writes are refused too.
        let mut cmd = base_command(plan, dir.path()).unwrap();
        cmd.0.arg("init").arg(&marker);
        assert_eq!(run(plan, cmd, Duration::from_secs(3), 1024), None);
        assert!(!marker.exists());
        // The environment of git: nothing but what base_command sets.
        let cmd = base_command(plan, dir.path()).unwrap();
        let names: Vec<String> = cmd
            .0
            .get_envs()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| n == "PATH" || n == "HOME" || n == "LC_ALL" || n.starts_with("GIT_")),
            "{names:?}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_git_binary_has_its_interpreter_found() {
        let Some(git) = find_in_path("git") else {
            return;
        };
        let interp = elf_interpreter(&std::fs::canonicalize(git).unwrap()).unwrap();
        let interp = interp.expect("git is dynamically linked here");
        assert!(interp.exists(), "{interp:?}");
    }
}
