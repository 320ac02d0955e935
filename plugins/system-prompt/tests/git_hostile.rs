//! A hostile repository cannot make the runtime-context git facts run its
//! programs or see a secret.
//!
//! The repository's `.git/config` sets `core.fsmonitor`, a
//! `filter.evil.clean` (applied to every path by `.gitattributes`) and an
//! `include.path` to a file that sets a second filter and fsmonitor; each
//! points at a script that records its environment in a marker file. The
//! test process has `DEEPSEEK_API_KEY` set, as dsh would. [`git_state`]
//! must run none of them and still report the branch and the status.
//!
//! The scripts print `one`, the committed content: had a clean filter run
//! (even one unable to write its marker), the file it filters would look
//! unchanged and drop out of the status.

#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use dsh_system_prompt::host::git_state;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

fn script(path: &Path, marker: &Path) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\nenv > '{}'\ncat > /dev/null\necho one\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A committed repository `root/name` whose `.git/config` gets `config`
/// appended (`{bin}` stands for the scripts' directory), with `a.txt` and
/// `b.dat` changed without a change in size (so git must hash them, through
/// any clean filter).
fn hostile_repo(root: &Path, name: &str, config: &str) -> std::path::PathBuf {
    let repo = root.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    std::fs::write(repo.join("b.dat"), "one\n").unwrap();
    std::fs::write(
        repo.join(".gitattributes"),
        "*.dat filter=evil\n*.txt filter=inc\n",
    )
    .unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "one"]);
    let bin = root.join("bin").display().to_string();
    let mut text = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    text.push_str(&config.replace("{bin}", &bin));
    std::fs::write(repo.join(".git/config"), text).unwrap();
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    std::fs::write(repo.join("b.dat"), "two\n").unwrap();
    repo
}

#[test]
fn hostile_git_config_runs_nothing_and_sees_no_key() {
    // SAFETY: the only test of this binary; set before git_state starts
    // any thread, and nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("DEEPSEEK_API_KEY", "sk-hostile-git-test-key") };
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let marks = root.join("marks");
    let bin = root.join("bin");
    std::fs::create_dir_all(&marks).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["fsmonitor", "clean", "inc-fsmonitor", "inc-clean"] {
        script(&bin.join(name), &marks.join(name));
    }
    std::fs::write(
        root.join("included.cfg"),
        "[core]\n\tfsmonitor = {bin}/inc-fsmonitor\n[filter \"inc\"]\n\tclean = {bin}/inc-clean\n"
            .replace("{bin}", &bin.display().to_string()),
    )
    .unwrap();
    let include = format!(
        "[include]\n\tpath = {}\n",
        root.join("included.cfg").display()
    );
    let repos = [
        hostile_repo(root, "fsmonitor", "[core]\n\tfsmonitor = {bin}/fsmonitor\n"),
        hostile_repo(root, "filter", "[filter \"evil\"]\n\tclean = {bin}/clean\n"),
        hostile_repo(root, "include", &include),
    ];
    for repo in &repos {
        let state = git_state(repo).expect("a repository has a git state");
        let ran: Vec<String> = std::fs::read_dir(&marks)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                format!(
                    "{} (saw the key: {})",
                    e.file_name().to_string_lossy(),
                    text.contains("sk-hostile-git-test-key")
                )
            })
            .collect();
        assert!(
            ran.is_empty(),
            "{}: the repository ran programs: {ran:?}",
            repo.display()
        );
        assert!(
            state.branch == "main" || state.branch.starts_with("main..."),
            "{state:?}"
        );
        if dsh_system_prompt::host::git_status_warning().is_none() {
            assert_eq!(
                state.status,
                vec![" M a.txt".to_string(), " M b.dat".to_string()],
                "{}: {state:?}",
                repo.display()
            );
        } else {
            assert!(state.status.is_empty(), "{state:?}");
        }
    }
}
