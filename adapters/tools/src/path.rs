//! Workspace confinement for the file tools.
//!
//! A path is resolved physically: the deepest existing ancestor is
//! canonicalized (every symlink and `..` resolved by the OS), the
//! not-yet-existing rest is appended component by component, and the result
//! must lie under the canonical workspace root. A final component that is a
//! symlink is only accepted when it resolves inside (a dangling one is
//! refused).
//!
//! The workspace directory is opened once ([`Workspace::new`]). Every
//! resolution first checks that the root path still leads to that directory
//! (same device and inode, [`Workspace::check_handle`]) and refuses with
//! [`PathError::Swapped`] otherwise, so a workspace moved away and replaced
//! (by a symlink or by another directory) is neither read nor written. The
//! file tools then do the operation itself relative to the opened handle
//! ([`Workspace::open_beneath`], [`Workspace::open_dir_beneath`]): the
//! resolved relative path is walked one component at a time with
//! `openat(…, O_NOFOLLOW)` from the handle, so no symlink is followed after
//! resolution and a swap racing between the check and the operation lands
//! in the directory dsh opened (wherever it now is), never in the
//! replacement. Writes replace the target by `renameat` in the opened
//! parent, which never follows a symlink. What remains: a directory inside
//! the workspace that a concurrent process renames to outside it while a
//! tool holds it open is still used (as with any open directory); the
//! paths given to a [`TextFiles`](crate::fs::TextFiles) backend are checked
//! but then opened by the backend, by path.

use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
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

/// The `O_PATH` handles of the workspaces alive in this process, by
/// canonical path: workspaces of the same directory share one descriptor
/// (ten thousand agents in one directory hold one, not ten
/// thousand). A handle is only shared while the path still leads to the
/// directory it was opened on (same device and inode).
static HANDLES: std::sync::Mutex<Vec<(PathBuf, std::sync::Weak<OwnedFd>)>> =
    std::sync::Mutex::new(Vec::new());

/// An `O_PATH` handle of the directory `canonical`, shared when one of the
/// same directory is alive.
fn shared_handle(canonical: &Path) -> io::Result<Arc<OwnedFd>> {
    let now = fs::metadata(canonical)?;
    let mut handles = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    handles.retain(|(_, weak)| weak.strong_count() > 0);
    for (path, weak) in handles.iter() {
        if path != canonical {
            continue;
        }
        let Some(fd) = weak.upgrade() else {
            continue;
        };
        let same = fd
            .try_clone()
            .and_then(|f| File::from(f).metadata())
            .is_ok_and(|m| m.dev() == now.dev() && m.ino() == now.ino());
        if same {
            return Ok(fd);
        }
    }
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(canonical)?;
    let fd = Arc::new(OwnedFd::from(dir));
    handles.push((canonical.to_path_buf(), Arc::downgrade(&fd)));
    Ok(fd)
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
    /// The workspace root path no longer leads to the directory dsh opened
    /// (moved, removed, or replaced by a symlink or another directory); the
    /// message is [`Workspace::check_handle`]'s.
    Swapped {
        /// Why, for the model.
        message: String,
    },
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
        let dir = shared_handle(&canonical)?;
        Ok(Workspace {
            root,
            canonical,
            dir,
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
    /// result never leaves the canonical root. Refused with
    /// [`PathError::Swapped`] when the root no longer leads to the opened
    /// directory.
    pub fn resolve(&self, raw: &str) -> Result<Resolved, PathError> {
        if raw.contains('\0') {
            return Err(PathError::Nul);
        }
        self.check_handle()
            .map_err(|message| PathError::Swapped { message })?;
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
        if let Ok(meta) = fs::symlink_metadata(&path)
            && meta.file_type().is_symlink()
        {
            return Err(PathError::DanglingSymlink);
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
                PathError::Swapped { message } => message,
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

impl Workspace {
    /// Opens the directory `relative` (a [`Resolved::relative`]: plain
    /// names only) beneath the opened workspace handle, one component at a
    /// time without following symlinks; with `create`, missing directories
    /// are made (mode `0o777` less the umask). The result is an `O_PATH`
    /// handle for the `*at` calls. Any component that is not a plain name
    /// is refused (`InvalidInput`); a symlink fails (`ENOTDIR`/`ELOOP`).
    pub fn open_dir_beneath(&self, relative: &Path, create: bool) -> io::Result<OwnedFd> {
        let mut cur = self.dir.try_clone()?;
        for name in names(relative)? {
            let c = cstr(name)?;
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let next = match openat(cur.as_fd(), &c, flags, 0) {
                Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                    // SAFETY: a valid directory fd and a NUL-terminated name.
                    let rc = unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o777) };
                    if rc != 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() != io::ErrorKind::AlreadyExists {
                            return Err(e);
                        }
                    }
                    openat(cur.as_fd(), &c, flags, 0)?
                }
                other => other?,
            };
            cur = next;
        }
        Ok(cur)
    }

    /// Opens `relative` (a [`Resolved::relative`]; `""` is the root)
    /// beneath the opened workspace handle with the `open(2)` `flags` and
    /// `mode`: every directory on the way is opened without following a
    /// symlink ([`open_dir_beneath`](Self::open_dir_beneath)) and the final
    /// component with `O_NOFOLLOW` (a symlink fails with `ELOOP`, or is
    /// opened itself with `O_PATH`). `O_CLOEXEC` is added.
    pub fn open_beneath(&self, relative: &Path, flags: i32, mode: u32) -> io::Result<File> {
        let (parent, name) = split(relative);
        let dir = self.open_dir_beneath(parent, false)?;
        let name = match name {
            Some(n) => cstr(n)?,
            None => CString::from(c"."),
        };
        openat(
            dir.as_fd(),
            &name,
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
        .map(File::from)
    }
}

/// `relative` split into its parent and its final name (`None` for `""`).
pub fn split(relative: &Path) -> (&Path, Option<&OsStr>) {
    (
        relative.parent().unwrap_or(Path::new("")),
        relative.file_name(),
    )
}

/// The plain names of `relative`; anything else is `InvalidInput`.
fn names(relative: &Path) -> io::Result<Vec<&OsStr>> {
    relative
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a plain path beneath the workspace",
            )),
        })
        .collect()
}

/// `name` as a C string (`InvalidInput` for a NUL byte).
pub fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `openat(2)`, retried on `EINTR`.
fn openat(dir: BorrowedFd<'_>, name: &CString, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: a valid fd and a NUL-terminated name; the result is a new
        // fd owned by the caller.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode) };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by openat and is owned by no one.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
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

    /// Workspaces of one directory share one descriptor; a
    /// directory swapped in at the same path gets its own.
    #[test]
    fn workspaces_of_one_directory_share_one_handle() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        fs::create_dir(&root).unwrap();
        let a = Workspace::new(&root).unwrap();
        let b = Workspace::new(&root).unwrap();
        assert_eq!(a.dir_fd().as_raw_fd(), b.dir_fd().as_raw_fd());
        fs::rename(&root, dir.path().join("old")).unwrap();
        fs::create_dir(&root).unwrap();
        let c = Workspace::new(&root).unwrap();
        assert_ne!(a.dir_fd().as_raw_fd(), c.dir_fd().as_raw_fd());
        assert!(a.check_handle().is_err());
        assert!(c.check_handle().is_ok());
    }

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

    /// The operations themselves go through the opened handle: with the
    /// root moved away and another directory put at its path after the
    /// check (the race the check cannot close), a file opened or a
    /// directory made beneath the workspace lands in the moved original,
    /// and a symlink on the way is not followed.
    #[test]
    fn operations_beneath_the_handle_follow_the_opened_directory() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        fs::create_dir(&root).unwrap();
        let ws = Workspace::new(&root).unwrap();
        fs::rename(&root, base.path().join("ws.old")).unwrap();
        fs::create_dir(&root).unwrap();
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let dir = ws.open_dir_beneath(Path::new("a/b"), true).unwrap();
        drop(dir);
        ws.open_beneath(Path::new("a/b/f.txt"), flags, 0o644)
            .unwrap();
        assert!(base.path().join("ws.old/a/b/f.txt").is_file());
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0);

        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), base.path().join("ws.old/out")).unwrap();
        let e = ws
            .open_beneath(Path::new("out/f.txt"), flags, 0o644)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        assert!(ws.open_dir_beneath(Path::new("out/x"), true).is_err());
        assert!(ws.open_beneath(Path::new("../x"), flags, 0o644).is_err());
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(matches!(ws.resolve("f"), Err(PathError::Swapped { .. })));
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
