//! Nothing a tool starts outlives it: tool sessions and a descendant sweep.
//!
//! Every tool command (`bash`, `bash_start`) is started as the leader of
//! a new session (`setsid`); its id (the shell's pid) is recorded while the
//! tool owns it. The first such start makes this
//! process a child subreaper (`PR_SET_CHILD_SUBREAPER`), so a process
//! whose parent died is re-parented to this process instead of init and
//! stays findable.
//!
//! When a command ends (its call returns, is cancelled or times out; a
//! job ends, is stopped, or the tool set is dropped) its process group is
//! killed and the descendants of this process, found through
//! `/proc/<pid>/stat`, are swept; [`end_all`] does the same for every tool
//! session (a front end about to exit). The sweep kills, with `SIGKILL`:
//!
//! - every descendant in the ended session (this catches `set -m`,
//!   `nohup`, `disown` and double forks: a process can leave its process
//!   group but not its session, except by `setsid`);
//! - every direct child of this process in a session that is neither this
//!   process's own nor a tool session still running. Such a child was
//!   adopted: it left a tool session with `setsid` and its parent died.
//!   Nothing else in dsh makes children in other sessions;
//! - everything beneath a process killed by these two rules (a `setsid`
//!   process whose parent is still in the session).
//!
//! Adopted processes killed this way are reaped (`waitpid`); children this
//! process started itself in its own session (a helper, a server) are
//! never touched. Sweeps repeat until a pass finds nothing (at most
//! [`SWEEP_PASSES`] passes), so a process forked during a pass is found in
//! the next. A process that leaves its session and is still running under
//! a live parent in another tool session is swept with that session.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

/// Passes of one sweep at most.
pub const SWEEP_PASSES: usize = 50;

/// Pause between passes that found something.
const PASS_PAUSE: Duration = Duration::from_millis(10);

/// The tool sessions still running, and whether this process was made a
/// subreaper.
struct Tracker {
    sessions: BTreeSet<i32>,
    subreaper: bool,
}

static TRACKER: Mutex<Tracker> = Mutex::new(Tracker {
    sessions: BTreeSet::new(),
    subreaper: false,
});

fn tracker() -> std::sync::MutexGuard<'static, Tracker> {
    TRACKER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spawns `cmd`, whose `pre_exec` must call `setsid`, and records its
/// session. Holding the tracker while spawning keeps a concurrent sweep
/// from taking the new session for an adopted one.
pub(crate) fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let mut t = tracker();
    if !t.subreaper {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes integers only.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        t.subreaper = rc == 0;
    }
    let child = cmd.spawn()?;
    if let Ok(sid) = i32::try_from(child.id()) {
        t.sessions.insert(sid);
    }
    Ok(child)
}

/// Ends the tool session `sid`: `SIGKILL` to its process group, then the
/// sweep described in the module documentation. The session's leader is
/// left for its owner to wait for, after this returns (so its pid is not
/// reused meanwhile).
pub(crate) fn end_session(sid: u32) {
    let Ok(sid) = i32::try_from(sid) else {
        return;
    };
    if sid <= 0 {
        return;
    }
    let mut t = tracker();
    // SAFETY: kill(2) with a negative pid signals a process group.
    unsafe {
        libc::kill(-sid, libc::SIGKILL);
    }
    sweep(&t.sessions, &[sid]);
    t.sessions.remove(&sid);
}

/// Whether the child `pid` has ended, without reaping it: while its zombie
/// stays, its pid (the session id) cannot be reused, so a sweep by that id
/// finds only what the session left. An error (not a child, already
/// reaped) counts as ended.
pub(crate) fn exited(pid: u32) -> bool {
    // SAFETY: waitid writes only into `info`, a zeroed siginfo_t; with
    // WNOWAIT the child is left waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            libc::id_t::from(pid),
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc != 0 || info.si_pid() != 0
    }
}

/// Blocks until the child `pid` has ended, without reaping it (see
/// [`exited`]). Returns at once on an error (not a child, already reaped).
pub(crate) fn wait_exited(pid: u32) {
    loop {
        // SAFETY: waitid writes only into `info`, a zeroed siginfo_t; with
        // WNOWAIT the child is left waitable.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                libc::id_t::from(pid),
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Ends every tool session still running (for a front end about to exit)
/// and sweeps adopted processes. A no-op when no tool ever started.
pub fn end_all() {
    let mut t = tracker();
    if t.sessions.is_empty() && !t.subreaper {
        return;
    }
    let ended: Vec<i32> = t.sessions.iter().copied().collect();
    for sid in &ended {
        // SAFETY: kill(2) with a negative pid signals a process group.
        unsafe {
            libc::kill(-sid, libc::SIGKILL);
        }
    }
    sweep(&BTreeSet::new(), &ended);
    t.sessions.clear();
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Proc {
    pid: i32,
    ppid: i32,
    sid: i32,
    zombie: bool,
}

/// Parses the fields this module needs from a `/proc/<pid>/stat` line:
/// `pid (comm) state ppid pgrp session ...`; `comm` may hold anything, so
/// the fields are taken after its last `)`.
fn parse_stat(line: &str) -> Option<Proc> {
    let (head, rest) = line.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let _pgrp = fields.next()?;
    let sid = fields.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        sid,
        zombie: state == "Z" || state == "X",
    })
}

/// Every process `/proc` lists (those that vanish meanwhile are skipped).
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut buf = Vec::with_capacity(512);
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(f) = std::fs::File::open(format!("/proc/{pid}/stat")) else {
            continue;
        };
        buf.clear();
        // A stat line is well under 4 KiB; read no more than that.
        if f.take(4096).read_to_end(&mut buf).is_err() {
            continue;
        }
        if let Some(p) = parse_stat(&String::from_utf8_lossy(&buf)) {
            out.push(p);
        }
    }
    out
}

/// The processes to kill among the descendants of `me` (see the module
/// documentation): those in an `ended` session, adopted children of `me`
/// in a session that is neither `my_sid` nor `live`, and everything
/// beneath them.
fn victims(procs: &[Proc], me: i32, my_sid: i32, live: &BTreeSet<i32>, ended: &[i32]) -> Vec<Proc> {
    let mut children: BTreeMap<i32, Vec<&Proc>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    // (process, whether an ancestor below `me` is a victim)
    let mut stack: Vec<(&Proc, bool)> = children
        .get(&me)
        .map(|c| c.iter().map(|p| (*p, false)).collect())
        .unwrap_or_default();
    while let Some((p, under_victim)) = stack.pop() {
        if !seen.insert(p.pid) {
            continue;
        }
        let adopted =
            p.ppid == me && p.sid != my_sid && !live.contains(&p.sid) && !ended.contains(&p.pid);
        let victim = under_victim || ended.contains(&p.sid) || adopted;
        if victim {
            out.push(*p);
        }
        if let Some(c) = children.get(&p.pid) {
            stack.extend(c.iter().map(|q| (*q, victim)));
        }
    }
    out
}

/// Kills and reaps until a pass finds nothing. `live` are the running tool
/// sessions, `ended` the sessions being ended; their leaders are killed
/// but left for their owners (a `Child`) to reap.
fn sweep(live: &BTreeSet<i32>, ended: &[i32]) {
    // SAFETY: getpid and getsid(0) have no preconditions.
    let (me, my_sid) = unsafe { (libc::getpid(), libc::getsid(0)) };
    let mut live = live.clone();
    for sid in ended {
        live.remove(sid);
    }
    for _ in 0..SWEEP_PASSES {
        let found = victims(&processes(), me, my_sid, &live, ended);
        let mut acted = false;
        for p in &found {
            if p.zombie {
                // Ours to reap unless its owner waits for it (a session
                // leader started with `Command`).
                if p.ppid == me && !ended.contains(&p.pid) {
                    // SAFETY: waitpid on our own zombie child.
                    unsafe {
                        libc::waitpid(p.pid, std::ptr::null_mut(), libc::WNOHANG);
                    }
                    acted = true;
                }
            } else {
                // SAFETY: kill(2) with a positive pid.
                unsafe {
                    libc::kill(p.pid, libc::SIGKILL);
                }
                acted = true;
            }
        }
        if !acted {
            return;
        }
        std::thread::sleep(PASS_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, sid: i32) -> Proc {
        Proc {
            pid,
            ppid,
            sid,
            zombie: false,
        }
    }

    #[test]
    fn wait_exited_leaves_the_child_to_its_owner() {
        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        wait_exited(child.id());
        assert!(exited(child.id()));
        // Not reaped: its owner still gets the status.
        assert_eq!(child.wait().unwrap().code(), Some(3));
        // Not a child (reaped): returns at once.
        wait_exited(child.id());
    }

    #[test]
    fn stat_lines_parse_past_any_command_name() {
        let line = "4242 (a) b) c) S 17 4242 4240 0 -1 4194560 100 0";
        assert_eq!(parse_stat(line), Some(p(4242, 17, 4240)));
        let z = parse_stat("7 (sh) Z 1 7 7 0").unwrap();
        assert!(z.zombie);
        assert_eq!(parse_stat("7 (sh"), None);
        assert_eq!(parse_stat("x (sh) S 1 7 7"), None);
    }

    #[test]
    fn victims_follow_the_rule() {
        let me = 100;
        let my_sid = 10;
        // 200: a tool shell (live session 200); 201 its set -m child.
        // 300: an ended tool shell's set -m child, adopted (sid 300 ended).
        // 400: a setsid escapee adopted (sid 400, unknown).
        // 401: its child.
        // 500: dsh's own helper in dsh's session; 501 its setsid child.
        // 600: a setsid process under the live tool 200.
        let procs = [
            p(200, me, 200),
            p(201, 200, 200),
            p(301, me, 300),
            p(400, me, 400),
            p(401, 400, 400),
            p(500, me, my_sid),
            p(501, 500, 501),
            p(600, 201, 600),
        ];
        let live: BTreeSet<i32> = [200, 300].into();
        let mut got: Vec<i32> = victims(&procs, me, my_sid, &live, &[300])
            .iter()
            .map(|p| p.pid)
            .collect();
        got.sort();
        assert_eq!(got, [301, 400, 401]);
        // Ending 200 takes its whole tree, the setsid one below included.
        let mut got: Vec<i32> = victims(&procs, me, my_sid, &live, &[200])
            .iter()
            .map(|p| p.pid)
            .collect();
        got.sort();
        // Adopted escapees go with any session's end.
        assert_eq!(got, [200, 201, 400, 401, 600]);
    }
}
