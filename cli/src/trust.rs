//! Trusted folders: a project folder's own hooks (and, for other features,
//! its `.dsh/config.toml`) are hostile until the user trusts the folder
//! once (`dsh trust`, the prompt in `dsh chat`, or `trusted_folders` in
//! the config file). A trusted folder trusts everything below it.
//!
//! The list is a text file, one absolute canonical path a line, beside the
//! config file: `$XDG_CONFIG_HOME/dsh/trusted-folders` (else
//! `~/.config/dsh/trusted-folders`).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::Outcome;
use crate::sanitize::{eprintln_safe, println_safe};

/// Largest trust list read (bytes).
const MAX_LIST_BYTES: u64 = 1024 * 1024;

/// The trust list's file, from `env`.
pub fn list_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    crate::config_file::path(env).and_then(|p| p.parent().map(|d| d.join("trusted-folders")))
}

fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The folders in the list file at `file` (missing file: none).
pub fn read_list(file: &Path) -> Vec<PathBuf> {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(file) else {
        return Vec::new();
    };
    let mut text = String::new();
    if f.take(MAX_LIST_BYTES).read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .collect()
}

fn write_list(file: &Path, list: &[PathBuf]) -> Result<(), String> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut text = String::from("# Folders whose own hooks dsh runs (`dsh trust`).\n");
    for p in list {
        text.push_str(&p.display().to_string());
        text.push('\n');
    }
    let tmp = file.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, file).map_err(|e| format!("{}: {e}", file.display()))
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether `path` is in, or below, a folder of `list`.
pub fn trusted_by(list: &[PathBuf], path: &Path) -> bool {
    let path = canonical(path);
    list.iter().any(|t| path.starts_with(t))
}

/// Whether `path` is trusted: it or a folder above it is in the trust list
/// or in the config file's `trusted_folders`.
pub fn is_trusted(path: &Path) -> bool {
    let mut list = list_path(&env_lookup)
        .map(|f| read_list(&f))
        .unwrap_or_default();
    if let Ok(file) = crate::config_file::load(&env_lookup) {
        list.extend(
            file.trusted_folders
                .unwrap_or_default()
                .iter()
                .map(|p| canonical(p)),
        );
    }
    trusted_by(&list, path)
}

/// Adds `path` (canonical) to the trust list.
pub fn trust(path: &Path) -> Result<PathBuf, String> {
    let file =
        list_path(&env_lookup).ok_or("dsh trust: neither XDG_CONFIG_HOME nor HOME is set")?;
    let path = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut list = read_list(&file);
    if !list.contains(&path) {
        list.push(path.clone());
        write_list(&file, &list)?;
    }
    Ok(path)
}

/// Removes `path` from the trust list; whether it was there.
pub fn revoke(path: &Path) -> Result<bool, String> {
    let file =
        list_path(&env_lookup).ok_or("dsh trust: neither XDG_CONFIG_HOME nor HOME is set")?;
    let path = canonical(path);
    let mut list = read_list(&file);
    let before = list.len();
    list.retain(|p| *p != path);
    if list.len() == before {
        return Ok(false);
    }
    write_list(&file, &list)?;
    Ok(true)
}

/// `dsh trust [PATH] [--list] [--revoke]`
#[derive(Args, Debug)]
pub struct TrustArgs {
    /// The folder (default: the repository root of the current directory,
    /// else the current directory).
    pub path: Option<PathBuf>,
    /// List the trusted folders.
    #[arg(long, conflicts_with_all = ["path", "revoke"])]
    pub list: bool,
    /// Stop trusting the folder.
    #[arg(long)]
    pub revoke: bool,
}

/// Runs `dsh trust`.
pub fn run(args: TrustArgs) -> Outcome {
    if args.list {
        let list = list_path(&env_lookup)
            .map(|f| read_list(&f))
            .unwrap_or_default();
        for p in list {
            println_safe!("{}", p.display());
        }
        return Outcome::Ok;
    }
    let path = match args.path {
        Some(p) => p,
        None => match std::env::current_dir() {
            Ok(d) => dsh_hooks::config::project_root(&d),
            Err(e) => {
                eprintln_safe!("dsh trust: no current directory: {e}");
                return Outcome::BadInput;
            }
        },
    };
    if args.revoke {
        return match revoke(&path) {
            Ok(true) => {
                println_safe!("no longer trusted: {}", path.display());
                Outcome::Ok
            }
            Ok(false) => {
                println_safe!("was not trusted: {}", path.display());
                Outcome::Ok
            }
            Err(e) => {
                eprintln_safe!("dsh trust: {e}");
                Outcome::BadInput
            }
        };
    }
    match trust(&path) {
        Ok(p) => {
            println_safe!("trusted: {} (its hooks will run)", p.display());
            Outcome::Ok
        }
        Err(e) => {
            eprintln_safe!("dsh trust: {e}");
            Outcome::BadInput
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trusted_folder_trusts_what_is_below() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::create_dir_all(a.join("sub")).unwrap();
        let file = dir.path().join("cfg/trusted-folders");
        assert!(read_list(&file).is_empty());
        write_list(&file, &[canonical(&a)]).unwrap();
        let list = read_list(&file);
        assert!(trusted_by(&list, &a.join("sub")));
        assert!(!trusted_by(&list, dir.path()));
        assert!(!trusted_by(&list, &dir.path().join("ab")));
    }
}
