//! File-system mechanics: owner-only directories created durably, atomic
//! no-overwrite publication (M2), fsynced appends with rollback (AP2, AP3),
//! stable reads with a stat revision (5.8), the per-session writer lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use dsh_store::StoreError;

/// Fsyncs a directory, so entries created in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("fsync directory {}", dir.display()), e))
}

/// Creates `dir` (mode 0700) if it is missing and fsyncs its parent; an
/// existing non-directory is an error (L1, L7, M2).
pub fn ensure_dir(dir: &Path) -> Result<(), StoreError> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(StoreError::Layout {
                message: format!("{} exists and is not a directory", dir.display()),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io(format!("stat {}", dir.display()), e)),
    }
    if let Some(parent) = dir.parent() {
        ensure_dir(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => {
            return Err(StoreError::io(
                format!("create directory {}", dir.display()),
                e,
            ));
        }
    }
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// 12 random lowercase hex digits for a temp name.
pub fn random_hex() -> String {
    let mut b = [0u8; 6];
    if getrandom::fill(&mut b).is_err() {
        // Exclusive creation still protects us; mix the pid and the clock.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mixed = t ^ (u128::from(std::process::id()) << 64);
        b.copy_from_slice(&mixed.to_le_bytes()[..6]);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Publishes `content` as `final_path` atomically, never overwriting (M2):
/// exclusive temp file (0600), write, fsync, hard link to the final name,
/// fsync the directory, remove the temp name. `Ok(false)` when the final
/// name already exists.
pub fn publish(final_path: &Path, content: &[u8]) -> Result<bool, StoreError> {
    let dir = final_path.parent().unwrap_or(Path::new("."));
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if final_path.exists() {
        return Ok(false);
    }
    let tmp = dir.join(format!("{name}.{}.tmp", random_hex()));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(content)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::io(format!("write {}", tmp.display()), e));
    }
    let linked = fs::hard_link(&tmp, final_path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => {
            return Err(StoreError::io(
                format!("publish {}", final_path.display()),
                e,
            ));
        }
    }
    sync_dir(dir)?;
    Ok(true)
}

/// Appends `bytes` to the open append handle `file` of `path` and fsyncs
/// (AP2); on a write or fsync error truncates back to the previous length
/// and fsyncs (AP3), reporting the original error (and the rollback's).
pub fn append_durably(file: &mut File, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let before = file
        .metadata()
        .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?
        .len();
    let result = file.write_all(bytes).and_then(|()| file.sync_data());
    let Err(error) = result else {
        return Ok(());
    };
    let rollback = file.set_len(before).and_then(|()| file.sync_all());
    match rollback {
        Ok(()) => Err(StoreError::io(
            format!("append to {}", path.display()),
            error,
        )),
        Err(second) => Err(StoreError::io(
            format!(
                "append to {} (and rolling back to {before} bytes also failed: {second})",
                path.display()
            ),
            error,
        )),
    }
}

/// Truncates `path` to `len` bytes and fsyncs (6.5 step 9).
pub fn truncate_durably(path: &Path, len: u64) -> Result<(), StoreError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
    f.set_len(len)
        .and_then(|()| f.sync_all())
        .map_err(|e| StoreError::io(format!("truncate {}", path.display()), e))
}

/// Opens `path` for appending.
pub fn open_append(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| StoreError::io(format!("open {} for append", path.display()), e))
}

/// The stat fields of a revision (5.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stat {
    /// The file's length in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Stats `path`; `None` when it does not exist.
    pub fn of(path: &Path) -> Result<Option<Stat>, StoreError> {
        match fs::metadata(path) {
            Ok(m) => Ok(Some(Stat {
                dev: m.dev(),
                ino: m.ino(),
                size: m.size(),
                mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(format!("stat {}", path.display()), e)),
        }
    }

    /// `<dev>:<ino>:<size>:<mtimeNs>:<ctimeNs>`.
    pub fn text(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}",
            self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns
        )
    }
}

/// Reads a whole file with a stable stat before and after (5.8); `None`
/// when it does not exist.
pub fn read_stable(path: &Path) -> Result<Option<(Vec<u8>, Stat)>, StoreError> {
    for _ in 0..16 {
        let Some(before) = Stat::of(path)? else {
            return Ok(None);
        };
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(format!("read {}", path.display()), e)),
        };
        let Some(after) = Stat::of(path)? else {
            return Ok(None);
        };
        if before == after && after.size == bytes.len() as u64 {
            return Ok(Some((bytes, after)));
        }
    }
    Err(StoreError::io(
        format!("read {}", path.display()),
        io::Error::other("the file kept changing while it was read"),
    ))
}

/// Reads the start of a file until `done(bytes)` says enough, or the end.
pub fn read_prefix(
    path: &Path,
    mut done: impl FnMut(&[u8]) -> bool,
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
    };
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = f
            .read(&mut chunk)
            .map_err(|e| StoreError::io(format!("read {}", path.display()), e))?;
        if n == 0 {
            return Ok(Some(bytes));
        }
        bytes.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
        if done(&bytes) {
            return Ok(Some(bytes));
        }
    }
}

/// The writer lock of one session: an OS advisory lock (`flock`) on a lock
/// file in the session directory. The OS drops it when the process dies, so
/// a crashed writer never leaves a stale lock.
#[derive(Debug)]
pub struct SessionLock {
    _file: File,
}

impl SessionLock {
    /// Takes the lock at `path` without waiting; [`StoreError::Locked`]
    /// when another handle holds it.
    pub fn take(path: &Path, what: &str) -> Result<SessionLock, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| StoreError::io(format!("open lock file {}", path.display()), e))?;
        match file.try_lock() {
            Ok(()) => Ok(SessionLock { _file: file }),
            Err(fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
                what: what.to_owned(),
                path: PathBuf::from(path),
            }),
            Err(fs::TryLockError::Error(e)) => {
                Err(StoreError::io(format!("lock {}", path.display()), e))
            }
        }
    }
}
