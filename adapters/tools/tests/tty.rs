//! Terminal access of tool processes:
//! run where dsh has a controlling terminal (a pty this test makes), a
//! `bash` command cannot open `/dev/tty`, cannot read or write the
//! terminal's `/dev/pts` node, and cannot inject input with `TIOCSTI`, not
//! even through a terminal descriptor dsh leaked to it.
//!
//! The test re-runs this binary as a helper in a new session whose
//! controlling terminal is the pty; the helper runs the tool and writes its
//! result to a file. A binary of its own: the helper is a session leader
//! that no other test may mistake for an escaped tool process.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{bash, text_of};
use dsh_tools::{BashConfig, BashTool, SandboxPolicy, ToolContext, ToolSet, Workspace};

/// The descriptor the helper leaks to the tool (a terminal fd dsh might
/// hold without `O_CLOEXEC`).
const LEAKED_FD: i32 = 9;

/// `TIOCSTI` on the terminal opened by path, reported as `{label}=...`.
fn sti_by_path(pts: &str, label: &str) -> String {
    format!(
        "perl -e 'open(my $t, \"<\", \"{pts}\") or do {{ print \"{label}=noopen\\n\"; exit }}; \
         my $c = \"x\"; print(ioctl($t, 0x5412, $c) ? \"{label}=ok\\n\" : \"{label}=fail\\n\")'\n"
    )
}

/// `TIOCSTI` on the leaked descriptor, reported as `{label}=...`.
fn sti_by_fd(label: &str) -> String {
    format!(
        "perl -e 'open(my $t, \"+<&=\", {LEAKED_FD}) or do {{ print \"{label}=nofd\\n\"; exit }}; \
         my $c = \"x\"; print(ioctl($t, 0x5412, $c) ? \"{label}=ok\\n\" : \"{label}=fail\\n\")'\n"
    )
}

/// The probe the tool runs; each line reports one attempt.
fn probe(pts: &str) -> String {
    format!(
        "exec 3</dev/tty && echo tty=open || echo tty=denied\n\
         (echo hi > '{pts}') 2>/dev/null && echo pts=open || echo pts=denied\n\
         (exec 4<'{pts}') 2>/dev/null && echo ptsread=open || echo ptsread=denied\n\
         ls / >/dev/null && head -c 1 /dev/urandom >/dev/null && echo reads=ok\n\
         {}{}",
        sti_by_fd("sti-fd"),
        sti_by_path(pts, "sti-pts")
    )
}

/// The helper half: runs only when the parent test starts it.
#[test]
fn helper_run_the_probe_in_a_terminal() {
    let Some(out) = std::env::var_os("DSH_TTY_HELPER_OUT") else {
        return;
    };
    let pts = std::env::var("DSH_TTY_HELPER_PTS").unwrap();
    let ws = tempfile::tempdir().unwrap();
    let run = |config: BashConfig, command: String| -> String {
        let mut set = ToolSet::new();
        set.insert(Box::new(BashTool { config }));
        let ctx = ToolContext::new(Workspace::new(ws.path()).unwrap());
        text_of(&bash(&set, &ctx, &command))
    };
    let mut text = run(BashConfig::default(), probe(&pts));
    // Even where the user makes the terminal nodes writable, no ioctl.
    let pts_root = BashConfig {
        sandbox: SandboxPolicy {
            writable_roots: vec!["/dev/pts".into()],
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    text.push_str(&run(pts_root, sti_by_path(&pts, "sti-root")));
    // Without the sandbox (`--sandbox off`, or no Landlock) there is still
    // no controlling terminal and no leaked descriptor.
    let off = BashConfig {
        sandbox: SandboxPolicy::off(),
        ..BashConfig::default()
    };
    let unconfined = format!(
        "exec 3</dev/tty && echo offtty=open || echo offtty=denied\n{}",
        sti_by_fd("sti-off")
    );
    text.push_str(&run(off, unconfined));
    std::fs::write(out, text).unwrap();
}

/// Makes a pty; returns the master, the slave and the slave's path.
fn openpty() -> (OwnedFd, OwnedFd, String) {
    let mut master = -1;
    let mut slave = -1;
    // SAFETY: openpty writes two descriptors; name, termios and winsize
    // may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let path = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap();
    (master, slave, path.display().to_string())
}

/// "Terminal access": no controlling terminal, no write to
/// the terminal device, no `TIOCSTI` (through `/dev/pts` or a leaked fd).
#[test]
fn a_tool_command_cannot_reach_the_terminal() {
    if Command::new("perl").arg("-e1").status().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI has perl");
        eprintln!("note: no perl here; the terminal probe is not run");
        return;
    }
    let (master, slave, pts) = openpty();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("result.txt");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "helper_run_the_probe_in_a_terminal",
        "--test-threads=1",
    ])
    .env("DSH_TTY_HELPER_OUT", &out)
    .env("DSH_TTY_HELPER_PTS", &pts)
    .stdin(Stdio::from(slave.try_clone().unwrap()))
    .stdout(Stdio::from(slave.try_clone().unwrap()))
    .stderr(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: setsid, ioctl and dup2 are async-signal-safe system calls on
    // descriptors that are open in the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A terminal descriptor without O_CLOEXEC, as a careless
            // parent might leave one.
            if libc::dup2(0, LEAKED_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    // Only the helper holds the terminal now: the master reads EOF (EIO)
    // once it exits.
    drop(cmd);
    drop(slave);
    // Drain the terminal so the helper never blocks on its output.
    let mut master = std::fs::File::from(master);
    let drain = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        seen
    });
    let status = child.wait().unwrap();
    let seen = drain.join().unwrap();
    assert!(
        status.success(),
        "helper failed: {}",
        String::from_utf8_lossy(&seen)
    );
    let text = std::fs::read_to_string(Path::new(&out)).unwrap();
    for expected in [
        "tty=denied",
        "pts=denied",
        "ptsread=denied",
        "reads=ok",
        "sti-fd=",
        "sti-pts=",
        "sti-root=",
        "offtty=denied",
        "sti-off=",
    ] {
        assert!(text.contains(expected), "{expected} missing in:\n{text}");
    }
    // Not a permission refusal: there is no controlling terminal (ENXIO).
    assert!(
        text.contains("/dev/tty: No such device or address"),
        "{text}"
    );
    for injected in ["sti-fd=ok", "sti-pts=ok", "sti-root=ok", "sti-off=ok"] {
        assert!(!text.contains(injected), "{injected} in:\n{text}");
    }
}
