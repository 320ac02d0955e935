//! A Landlock sandbox for tool processes (Linux).
//!
//! With [`SandboxMode::WorkspaceWrite`] (the default) a `bash` command can
//! read and execute anything the user can but the terminal devices (the
//! user's terminal would give away what is typed), and can write only
//! beneath the workspace, the temp directories, a few device files
//! (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/shm`; no terminal) and the
//! extra roots the policy lists; it can make no character or block device
//! anywhere, and no device `ioctl` is allowed (ABI 5 and later). With
//! `network: false`, TCP `bind` and `connect` are denied too (Landlock ABI 4
//! and later; UDP and Unix sockets are not covered by Landlock).
//!
//! Every rule is built from a directory handle opened once, not from a path
//! looked up per command: the workspace's handle is opened when the
//! [`Workspace`](crate::Workspace) is made, the writable roots, temp
//! directories and device files when the tool set is made
//! ([`SandboxRoots::pin`]). A directory swapped for a symlink later (`mv WS
//! WS.old && ln -s ~/elsewhere WS` from a command whose parent directory is
//! writable) is not followed by the next command's rules.
//!
//! The ruleset is built in the parent before the child is forked; the child
//! only calls `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self(2)`
//! between `fork` and `exec`, both async-signal-safe. A kernel without
//! Landlock runs commands unconfined: [`support`] tells, so a front end can
//! warn once ([`Support::warning`]); nothing fails silently where the kernel
//! supports Landlock but the restriction cannot be applied, the command is
//! not started.

use std::fmt;
use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError,
};

/// How tool processes are confined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxMode {
    /// Not confined.
    Off,
    /// Writes confined to the workspace, temp dirs and the listed roots.
    #[default]
    WorkspaceWrite,
}

/// The sandbox policy of tool processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Confinement mode.
    pub mode: SandboxMode,
    /// More directories (or files) a command may write beneath.
    pub writable_roots: Vec<PathBuf>,
    /// Allow TCP `bind`/`connect` (true by default).
    pub network: bool,
    /// Allow writes beneath the temp directories (`/tmp`, `/var/tmp`,
    /// `$TMPDIR`); true by default.
    pub temp_dirs: bool,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            writable_roots: Vec::new(),
            network: true,
            temp_dirs: true,
        }
    }
}

impl SandboxPolicy {
    /// No confinement.
    pub fn off() -> Self {
        SandboxPolicy {
            mode: SandboxMode::Off,
            ..SandboxPolicy::default()
        }
    }
}

/// What this kernel offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Support {
    /// The kernel's Landlock ABI version; `None` without Landlock.
    pub abi: Option<u32>,
}

impl Support {
    /// Whether write confinement is enforced.
    pub fn confines_writes(&self) -> bool {
        self.abi.is_some()
    }

    /// Whether `network: false` is enforced (ABI 4 and later).
    pub fn confines_network(&self) -> bool {
        self.abi.is_some_and(|v| v >= 4)
    }

    /// The one-time warning a front end shows for `policy` on this kernel,
    /// or `None` when the policy is fully enforced (or off).
    pub fn warning(&self, policy: &SandboxPolicy) -> Option<String> {
        if policy.mode == SandboxMode::Off {
            return None;
        }
        if !self.confines_writes() {
            return Some(
                "warning: this kernel has no Landlock: tool commands (bash) run without the \
                 write sandbox"
                    .to_string(),
            );
        }
        if !policy.network && !self.confines_network() {
            return Some(format!(
                "warning: this kernel's Landlock (ABI {}) cannot deny network access: tool \
                 commands keep the network",
                self.abi.unwrap_or(0)
            ));
        }
        None
    }
}

/// Asks the kernel for its Landlock ABI version.
pub fn support() -> Support {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // only returns the ABI version (or -1 with errno); it reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    Support {
        abi: u32::try_from(v).ok().filter(|v| *v > 0),
    }
}

/// Why a sandbox could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum SandboxError {
    /// The Landlock ruleset could not be built.
    Ruleset(RulesetError),
    /// `/` could not be opened for the read rule.
    Root(std::io::Error),
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxError::Ruleset(e) => write!(f, "cannot build the Landlock sandbox: {e}"),
            SandboxError::Root(e) => write!(f, "cannot open / for the Landlock sandbox: {e}"),
        }
    }
}

impl std::error::Error for SandboxError {}

impl From<RulesetError> for SandboxError {
    fn from(e: RulesetError) -> Self {
        SandboxError::Ruleset(e)
    }
}

/// A ruleset ready to be applied in a child between `fork` and `exec`.
#[derive(Debug)]
pub struct Prepared {
    fd: Option<OwnedFd>,
}

impl Prepared {
    /// Whether a restriction will be applied (false when the policy is off
    /// or the kernel has no Landlock).
    pub fn enforced(&self) -> bool {
        self.fd.is_some()
    }

    /// Restricts the calling process. Only async-signal-safe calls: meant
    /// for `CommandExt::pre_exec`.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        let Some(fd) = &self.fd else {
            return Ok(());
        };
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self(2)
        // are plain system calls with integer arguments; `fd` is a live
        // Landlock ruleset descriptor owned by `self`.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Device files a command may write (discarding output) and the shared
/// memory directory. No terminal: `/dev/tty`, `/dev/ptmx` and `/dev/pts`
/// are read-only, so a command cannot write escape sequences to the
/// user's terminal past the sanitiser.
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/shm"];

/// The directories temp files go to.
fn temp_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/tmp"), PathBuf::from("/var/tmp")];
    if let Some(t) = std::env::var_os("TMPDIR") {
        let t = PathBuf::from(t);
        if t.is_absolute() && !dirs.contains(&t) {
            dirs.push(t);
        }
    }
    dirs
}

/// Every path beside the workspace that `policy` makes writable.
fn writable_paths(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let mut writable = Vec::new();
    if policy.temp_dirs {
        writable.extend(temp_dirs());
    }
    writable.extend(WRITABLE_DEVICES.iter().map(PathBuf::from));
    writable.extend(policy.writable_roots.iter().cloned());
    writable
}

/// One opened writable root: its handle and whether it is a directory.
#[derive(Debug)]
struct Opened {
    fd: OwnedFd,
    dir: bool,
}

/// The handles of one list of writable paths, and of what is readable.
#[derive(Debug)]
struct Pinned {
    paths: Vec<PathBuf>,
    opened: Vec<Opened>,
    readable: Vec<Opened>,
}

impl Pinned {
    /// Opens every path that exists (`O_PATH`); a missing one gets no rule.
    fn open(paths: Vec<PathBuf>) -> Pinned {
        let opened = paths.iter().filter_map(|p| open_path(p).ok()).collect();
        let readable = readable_roots()
            .iter()
            .filter_map(|p| open_path(p).ok())
            .collect();
        Pinned {
            paths,
            opened,
            readable,
        }
    }
}

/// Whether the `/dev` entry `name` is a terminal (or makes one).
fn is_terminal_node(name: &str) -> bool {
    name == "pts"
        || name == "ptmx"
        || name == "console"
        || name.starts_with("tty")
        || name.starts_with("vcs")
}

/// What a command may read: every entry of `/` but `/dev`, and every entry
/// of `/dev` that is neither a terminal ([`is_terminal_node`]) nor a
/// symlink (`/dev/stdin` would lead to dsh's own terminal). Empty when `/`
/// cannot be listed (then all of `/` is readable).
fn readable_roots() -> Vec<PathBuf> {
    let entries = |dir: &str| -> Vec<(String, bool)> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let link = e.file_type().ok()?.is_symlink();
                        Some((e.file_name().into_string().ok()?, link))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out: Vec<PathBuf> = entries("/")
        .into_iter()
        .filter(|(name, _)| name != "dev")
        .map(|(name, _)| Path::new("/").join(name))
        .collect();
    if out.is_empty() {
        return out;
    }
    out.extend(
        entries("/dev")
            .into_iter()
            .filter(|(name, link)| !link && !is_terminal_node(name))
            .map(|(name, _)| Path::new("/dev").join(name)),
    );
    out
}

/// Opens `path` as an `O_PATH` handle (no access to its content).
fn open_path(path: &Path) -> std::io::Result<Opened> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    let dir = file.metadata().is_ok_and(|m| m.is_dir());
    Ok(Opened {
        fd: OwnedFd::from(file),
        dir,
    })
}

/// The writable roots, temp directories and device files of a policy,
/// opened once and shared by the clones of a [`BashConfig`]
/// (`crate::BashConfig::sandbox_roots`): the first [`pin`](Self::pin)
/// opens them, later commands reuse the handles. A policy whose list of
/// paths differs from the pinned one is opened anew. A path missing when
/// it is pinned gets no rule (it is not looked up again, so a root must
/// exist when the tools are made).
///
/// A cache, not configuration: any two compare equal.
///
/// [`BashConfig`]: crate::BashConfig
#[derive(Clone, Default)]
pub struct SandboxRoots(Arc<Mutex<Option<Pinned>>>);

impl fmt::Debug for SandboxRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let paths = guard.as_ref().map(|p| &p.paths);
        f.debug_tuple("SandboxRoots").field(&paths).finish()
    }
}

impl PartialEq for SandboxRoots {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SandboxRoots {}

impl SandboxRoots {
    /// Opens the writable paths of `policy` unless they are open already.
    pub fn pin(&self, policy: &SandboxPolicy) {
        if policy.mode == SandboxMode::Off {
            return;
        }
        let paths = writable_paths(policy);
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if guard.as_ref().is_none_or(|p| p.paths != paths) {
            *guard = Some(Pinned::open(paths));
        }
    }
}

/// The access rights granted beneath the workspace and the writable roots:
/// all but
/// - making character and block devices (as root, `mknod` would give
///   access to any device, a disk or `/dev/mem`); FIFOs and Unix sockets
///   stay (build scripts, test suites and dev servers make them, and they
///   reach nothing beyond what the command can already reach);
/// - `ioctl` on devices (ABI 5; `TIOCSTI` on a terminal opened by path is
///   denied, as every other device `ioctl`). On an older ABI the right does
///   not exist and device `ioctl`s stay open; the command still has no
///   controlling terminal and no inherited terminal descriptor.
fn writable_access(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
}

/// Builds the ruleset of `policy` for a command working in the workspace
/// opened as `workspace`, with the writable roots of `roots` (pinned here
/// if they were not yet).
pub fn prepare(
    policy: &SandboxPolicy,
    workspace: BorrowedFd<'_>,
    roots: &SandboxRoots,
) -> Result<Prepared, SandboxError> {
    if policy.mode == SandboxMode::Off {
        return Ok(Prepared { fd: None });
    }
    let abi = ABI::V5;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if !policy.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    roots.pin(policy);
    let write = writable_access(abi);
    let file_rights = AccessFs::from_file(abi);
    let read = AccessFs::from_read(abi);
    let guard = roots.0.lock().unwrap_or_else(|e| e.into_inner());
    let readable = guard.as_ref().map_or(&[][..], |p| &p.readable[..]);
    // Directories can be listed everywhere; files read beneath the
    // readable roots only (all of `/` when it could not be listed).
    let root = open_path(Path::new("/")).map_err(SandboxError::Root)?;
    let root_access = if readable.is_empty() {
        read
    } else {
        BitFlags::from(AccessFs::ReadDir)
    };
    let mut created = ruleset
        .create()?
        .add_rule(PathBeneath::new(&root.fd, root_access))?
        .add_rule(PathBeneath::new(workspace, write))?;
    for o in readable {
        let access = if o.dir { read } else { read & file_rights };
        created = created.add_rule(PathBeneath::new(&o.fd, access))?;
    }
    for o in guard.iter().flat_map(|p| &p.opened) {
        let access = if o.dir { write } else { write & file_rights };
        created = created.add_rule(PathBeneath::new(&o.fd, access))?;
    }
    let fd: Option<OwnedFd> = created.into();
    Ok(Prepared { fd })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_texts() {
        let none = Support { abi: None };
        assert!(none.warning(&SandboxPolicy::default()).is_some());
        assert!(none.warning(&SandboxPolicy::off()).is_none());
        let v3 = Support { abi: Some(3) };
        assert!(v3.warning(&SandboxPolicy::default()).is_none());
        let no_net = SandboxPolicy {
            network: false,
            ..SandboxPolicy::default()
        };
        assert!(v3.warning(&no_net).unwrap().contains("network"));
        assert!(Support { abi: Some(4) }.warning(&no_net).is_none());
    }

    #[test]
    fn off_prepares_nothing() {
        let ws = std::fs::File::open("/tmp").unwrap();
        let p = prepare(
            &SandboxPolicy::off(),
            std::os::fd::AsFd::as_fd(&ws),
            &SandboxRoots::default(),
        )
        .unwrap();
        assert!(!p.enforced());
        p.apply_in_child().unwrap();
    }
}
