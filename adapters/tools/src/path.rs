//! Workspace confinement for the file tools.
//!
//! A path is resolved physically: the deepest existing ancestor is
//! canonicalized (every symlink and `..` resolved by the OS), the
//! not-yet-existing rest is appended component by component, and the result
//! must lie under the canonical workspace root. A final component that is a
//! symlink is only accepted when it resolves inside (a dangling one is
//! refused). Files are then opened with `O_NOFOLLOW` so a symlink swapped in
//! after resolution fails instead of being followed, and writes replace the
//! target by `rename`, which never follows a symlink.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use dsh_core::agent::tools::ToolOutcome;

/// The directory the file tools may touch.
///
/// The directory is opened once, when the workspace is made (an `O_PATH`
/// handle shared by its clones): the bash sandbox builds its rules and the
/// command's working directory from that handle, so a directory swapped in
/// at the same path later is not followed ([`Workspace::check_handle`]).
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
    canonical: PathBuf,
    dir: Arc<OwnedFd>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root && self.canonical == other.canonical
    }
}

impl Eq for Workspace {}

/// Why a path was refused (all `FS_SANDBOX_DENIED`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathError {
    /// The path contains a NUL byte.
    Nul,
    /// The path (after resolving symlinks and `..`) is outside the root.
    Outside {
        /// Where it resolved to.
        resolved: PathBuf,
    },
    /// The final component is a symlink whose target does not exist, so it
    /// cannot be shown to stay inside.
    DanglingSymlink,
}

/// A path inside the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The physical path (symlinks resolved), under the canonical root.
    pub path: PathBuf,
    /// Its path relative to the root (`""` for the root itself).
    pub relative: PathBuf,
    /// The path shown to the model: the root as configured joined with
    /// `relative`.
    pub display: String,
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir()?.join(root)
        };
        let canonical = fs::canonicalize(&root)?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "workspace root is not a directory",
            ));
        }
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&canonical)?;
        Ok(Workspace {
            root,
            canonical,
            dir: Arc::new(OwnedFd::from(dir)),
        })
    }

    /// The directory handle opened when the workspace was made.
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Whether the root path still leads to the directory opened when the
    /// workspace was made (`Err` with a message for the model when it was
    /// moved, removed or replaced, e.g. by a symlink to another directory).
    pub fn check_handle(&self) -> Result<(), String> {
        let opened = File::from(self.dir.try_clone().map_err(|e| e.to_string())?)
            .metadata()
            .map_err(|e| e.to_string())?;
        let same = fs::metadata(&self.root)
            .is_ok_and(|now| now.dev() == opened.dev() && now.ino() == opened.ino());
        if same {
            Ok(())
        } else {
            Err(format!(
                "the workspace {} was moved or replaced since dsh opened it; commands run \
                 only in the directory dsh opened (put it back, or restart dsh in the new one)",
                self.root.display()
            ))
        }
    }

    /// The root as configured.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical root.
    pub fn canonical_root(&self) -> &Path {
        &self.canonical
    }

    /// Resolves `raw` (absolute, or relative to the root) to a path inside
    /// the workspace. Symlinks along the way are resolved by the OS; the
    /// result never leaves the canonical root.
    pub fn resolve(&self, raw: &str) -> Result<Resolved, PathError> {
        if raw.contains('\0') {
            return Err(PathError::Nul);
        }
        let mut joined = if Path::new(raw).is_absolute() {
            PathBuf::from(raw)
        } else {
            self.root.join(raw)
        };
        // At most two passes: the second runs on a path whose missing tail
        // has no `..` left.
        let mut resolved = None;
        for _ in 0..2 {
            let (base, tail) = deepest_existing(&joined);
            if tail.iter().any(|c| matches!(c, Component::ParentDir)) {
                // `missing/../x`: collapse the missing part lexically (it
                // holds no symlink because it does not exist), then resolve
                // again so an existing symlink after it is still followed.
                let mut p = base;
                for c in &tail {
                    match c {
                        Component::ParentDir => {
                            p.pop();
                        }
                        Component::Normal(n) => p.push(n),
                        _ => {}
                    }
                }
                joined = p;
                continue;
            }
            let mut p = base;
            for c in &tail {
                if let Component::Normal(n) = c {
                    p.push(n);
                }
            }
            resolved = Some(p);
            break;
        }
        let Some(path) = resolved else {
            return Err(PathError::Outside { resolved: joined });
        };
        let Ok(relative) = path.strip_prefix(&self.canonical).map(Path::to_path_buf) else {
            return Err(PathError::Outside { resolved: path });
        };
        if let Ok(meta) = fs::symlink_metadata(&path) {
            if meta.file_type().is_symlink() {
                return Err(PathError::DanglingSymlink);
            }
        }
        let display = if relative.as_os_str().is_empty() {
            self.root.display().to_string()
        } else {
            self.root.join(&relative).display().to_string()
        };
        Ok(Resolved {
            path,
            relative,
            display,
        })
    }

    /// [`resolve`](Self::resolve) with the refusal rendered as the tool's
    /// `FS_SANDBOX_DENIED` result: `cannot <verb> "<raw>": <why>`.
    pub fn resolve_for(&self, raw: &str, verb: &str) -> Result<Resolved, ToolOutcome> {
        self.resolve(raw).map_err(|e| {
            let shown = raw.escape_debug();
            let why = match e {
                PathError::Nul => "the path contains a NUL byte".to_string(),
                PathError::Outside { .. } => format!(
                    "the path is outside the workspace {}",
                    self.root.display()
                ),
                PathError::DanglingSymlink => {
                    "the path is a symbolic link whose target cannot be confirmed inside the workspace"
                        .to_string()
                }
            };
            crate::fs_error(
                format!("cannot {verb} \"{shown}\": {why}"),
                "FS_SANDBOX_DENIED",
            )
        })
    }
}

impl Workspace {
    /// Re-checks, after opening, that `file` really lies in the workspace
    /// (through `/proc/self/fd`), closing the window in which a directory on
    /// the resolved path is swapped for a symlink. Where `/proc` is not
    /// available the check passes.
    pub fn check_opened(&self, file: &File) -> bool {
        use std::os::fd::AsRawFd;
        match fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            Ok(p) => p.starts_with(&self.canonical),
            Err(_) => true,
        }
    }

    /// Whether the existing directory `dir` still canonicalizes to itself
    /// inside the workspace.
    pub fn check_dir(&self, dir: &Path) -> bool {
        fs::canonicalize(dir).is_ok_and(|c| c == dir && c.starts_with(&self.canonical))
    }
}

/// Splits `path` into its deepest existing ancestor (canonicalized) and the
/// components after it.
fn deepest_existing(path: &Path) -> (PathBuf, Vec<Component<'_>>) {
    let comps: Vec<Component<'_>> = path.components().collect();
    for k in (1..=comps.len()).rev() {
        let prefix: PathBuf = comps.iter().take(k).collect();
        if let Ok(c) = fs::canonicalize(&prefix) {
            return (c, comps.iter().skip(k).copied().collect());
        }
    }
    (PathBuf::from("/"), comps.iter().skip(1).copied().collect())
}

/// Opens an existing file for reading without following a symlink in the
/// final component (`ELOOP` instead). `O_NONBLOCK` keeps a FIFO from
/// blocking the open (it has no effect on regular files); callers refuse
/// anything that is not a regular file afterwards.
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// Whether an I/O error is the `ELOOP` of an `O_NOFOLLOW` open.
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn resolves_inside_and_refuses_escapes() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let root = ws.canonical_root().to_path_buf();
        fs::create_dir(root.join("sub")).unwrap();
        fs::write(root.join("sub/a.txt"), "a").unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        symlink(root.join("sub"), root.join("in")).unwrap();
        symlink(outside.path().join("missing"), root.join("dangling")).unwrap();

        assert_eq!(
            ws.resolve("sub/a.txt").unwrap().path,
            root.join("sub/a.txt")
        );
        assert_eq!(ws.resolve("in/a.txt").unwrap().path, root.join("sub/a.txt"));
        assert_eq!(
            ws.resolve("sub/../sub/a.txt").unwrap().path,
            root.join("sub/a.txt")
        );
        assert_eq!(
            ws.resolve("new/dir/f").unwrap().path,
            root.join("new/dir/f")
        );
        assert_eq!(
            ws.resolve("new/../sub/a.txt").unwrap().path,
            root.join("sub/a.txt")
        );
        assert_eq!(ws.resolve("").unwrap().relative, PathBuf::new());
        assert_eq!(
            ws.resolve("sub/a.txt").unwrap().display,
            dir.path().join("sub/a.txt").display().to_string()
        );

        assert_eq!(ws.resolve("a\0b"), Err(PathError::Nul));
        assert!(matches!(ws.resolve("../x"), Err(PathError::Outside { .. })));
        assert!(matches!(
            ws.resolve("/etc/passwd"),
            Err(PathError::Outside { .. })
        ));
        assert!(matches!(
            ws.resolve("out/f"),
            Err(PathError::Outside { .. })
        ));
        assert!(matches!(ws.resolve("out"), Err(PathError::Outside { .. })));
        // A missing component followed by `..` must not skip an escaping
        // symlink after it.
        assert!(matches!(
            ws.resolve("nope/../out/f"),
            Err(PathError::Outside { .. })
        ));
        assert!(matches!(
            ws.resolve("sub/../../x"),
            Err(PathError::Outside { .. })
        ));
        assert_eq!(ws.resolve("dangling"), Err(PathError::DanglingSymlink));
    }

    #[test]
    fn opened_files_and_dirs_are_rechecked() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let root = ws.canonical_root().to_path_buf();
        fs::write(root.join("in.txt"), "").unwrap();
        fs::write(outside.path().join("out.txt"), "").unwrap();
        symlink(outside.path(), root.join("link")).unwrap();
        assert!(ws.check_opened(&open_nofollow(&root.join("in.txt")).unwrap()));
        // What a swapped-in directory symlink would make the open land on.
        assert!(!ws.check_opened(&open_nofollow(&root.join("link/out.txt")).unwrap()));
        assert!(ws.check_dir(&root));
        assert!(!ws.check_dir(&root.join("link")));
        assert!(!ws.check_dir(outside.path()));
        assert!(is_symlink_refusal(
            &open_nofollow(&root.join("link")).unwrap_err()
        ));
    }
}
