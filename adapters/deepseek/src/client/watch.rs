//! The idle watchdog (WD-1..WD-4): a thread per stream that shuts the
//! connection's agent down when the consumer waits too long for a chunk.

use alloc::string::String;
use alloc::sync::Arc;
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ureq::Agent;

#[derive(Default)]
pub(super) struct WatchState {
    pub(super) deadline: Option<Instant>,
    pub(super) fired: bool,
    pub(super) closed: bool,
    pub(super) started: bool,
}

/// The idle watchdog's shared state.
#[derive(Default)]
pub(super) struct Watch {
    pub(super) state: Mutex<WatchState>,
    pub(super) cv: Condvar,
}

impl Watch {
    pub(super) fn fired(&self) -> bool {
        self.state.lock().map(|s| s.fired).unwrap_or(true)
    }

    pub(super) fn wake(&self) {
        self.cv.notify_all();
    }

    /// Arms (or re-arms) the timer; starts the watchdog thread on first use.
    pub(super) fn arm(self: &Arc<Self>, idle: Duration, agent: &Agent) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.deadline = Some(Instant::now() + idle);
        if !s.started {
            s.started = true;
            let watch = self.clone();
            let agent = agent.clone();
            let spawned = thread::Builder::new()
                .name(String::from("dsh-deepseek-watchdog"))
                .spawn(move || watch.run(agent));
            if spawned.is_err() {
                s.started = false;
            }
        }
        drop(s);
        self.cv.notify_all();
    }

    pub(super) fn disarm(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.deadline = None;
        }
    }

    pub(super) fn close(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.closed = true;
        }
        self.cv.notify_all();
    }

    pub(super) fn run(&self, agent: Agent) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        loop {
            if s.closed {
                return;
            }
            match s.deadline {
                None => match self.cv.wait(s) {
                    Ok(g) => s = g,
                    Err(_) => return,
                },
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        // WD-4: abort the call, recording that the watchdog did it.
                        s.fired = true;
                        drop(s);
                        agent.shutdown();
                        return;
                    }
                    match self.cv.wait_timeout(s, deadline - now) {
                        Ok((g, _)) => s = g,
                        Err(_) => return,
                    }
                }
            }
        }
    }
}
