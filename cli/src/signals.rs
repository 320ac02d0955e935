//! Termination signals for the commands that hold a session open (`run`,
//! `chat`, `acp`): one place that turns SIGTERM, SIGHUP and (for commands
//! without an interactive Ctrl-C) SIGINT into a message for the command's
//! own loop, which then ends the way a closed input does: the running turn
//! closes, its tools' process groups and background jobs are stopped, the
//! log is flushed. Left to the default disposition, these signals end the
//! process at once and leave the tools' processes running.

/// Which signals [`forward`] listens for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    /// SIGTERM and SIGHUP (the command handles SIGINT itself).
    TermHup,
    /// SIGTERM, SIGHUP and SIGINT.
    TermHupInt,
}

/// Calls `on_signal` from a thread of its own each time one of `set`'s
/// signals arrives, until it returns `false`. Once per process: a second
/// call, or a failure to install the handler, leaves the default
/// disposition, and the result says so (`false`).
#[cfg(unix)]
pub fn forward(set: Set, mut on_signal: impl FnMut() -> bool + Send + 'static) -> bool {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use std::sync::atomic::{AtomicBool, Ordering};
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return false;
    }
    let list: &[i32] = match set {
        Set::TermHup => &[SIGTERM, SIGHUP],
        Set::TermHupInt => &[SIGTERM, SIGHUP, SIGINT],
    };
    let Ok(mut signals) = signal_hook::iterator::Signals::new(list) else {
        return false;
    };
    std::thread::Builder::new()
        .name("dsh-signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                if !on_signal() {
                    break;
                }
            }
        })
        .is_ok()
}

/// Signals are not forwarded on this platform: the defaults stay.
#[cfg(not(unix))]
pub fn forward(_set: Set, _on_signal: impl FnMut() -> bool + Send + 'static) -> bool {
    false
}
