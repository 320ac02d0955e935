//! The one cancellation signal of the std crates (AC-14, WD-1, TL-13).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

type Hook = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    hooks: Mutex<Vec<(u64, Hook)>>,
    /// Waiters sleep on this pair; `cancel` and `wake` notify it.
    lock: Mutex<()>,
    cv: Condvar,
}

/// A cancellation signal shared between a caller and the work it started:
/// a model stream, a tool body, an editor request.
///
/// Clones share the signal. [`cancel`](Self::cancel) may be called from any
/// thread and is idempotent: it wakes every waiter and runs every
/// registered hook once (a model stream's hook interrupts its blocked
/// network read).
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Unregisters a hook of [`CancelToken::on_cancel`] when dropped.
#[must_use = "the hook is unregistered when the guard is dropped"]
pub struct CancelGuard {
    token: CancelToken,
    id: u64,
}

impl fmt::Debug for CancelGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelGuard").field("id", &self.id).finish()
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Ok(mut hooks) = self.token.inner.hooks.lock() {
            hooks.retain(|(id, _)| *id != self.id);
        }
    }
}

impl CancelToken {
    /// A signal that is not cancelled.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels: every waiter wakes up and every hook runs. Idempotent.
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        self.wake();
        let hooks: Vec<Hook> = match self.inner.hooks.lock() {
            Ok(hooks) => hooks.iter().map(|(_, h)| h.clone()).collect(),
            Err(_) => Vec::new(),
        };
        for hook in hooks {
            hook();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `hook` on cancellation (at once if already cancelled) until the
    /// guard is dropped.
    pub fn on_cancel(&self, hook: impl Fn() + Send + Sync + 'static) -> CancelGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        let hook: Hook = Arc::new(hook);
        if let Ok(mut hooks) = self.inner.hooks.lock() {
            hooks.push((id, hook.clone()));
        }
        if self.is_cancelled() {
            hook();
        }
        CancelGuard {
            token: self.clone(),
            id,
        }
    }

    /// Waits until cancelled or `timeout` elapsed; returns whether cancelled.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.wait_until(Instant::now().checked_add(timeout), &AtomicBool::new(false))
    }

    /// Wakes every waiter without cancelling; each re-checks what it waits
    /// for (e.g. [`wait_until`](Self::wait_until)'s `done`), so a set flag
    /// followed by `wake` is never missed.
    pub fn wake(&self) {
        let _held = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.cv.notify_all();
    }

    /// Waits until cancelled, `done` is set (then [`wake`](Self::wake) is
    /// called), or `deadline` (`None`: no deadline); returns whether
    /// cancelled.
    pub fn wait_until(&self, deadline: Option<Instant>, done: &AtomicBool) -> bool {
        let mut held = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        while !self.is_cancelled() && !done.load(Ordering::SeqCst) {
            held = match deadline {
                None => self.inner.cv.wait(held).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    self.inner
                        .cv
                        .wait_timeout(held, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        self.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_does_not_cancel_and_done_ends_the_wait() {
        let t = CancelToken::new();
        t.wake();
        assert!(!t.is_cancelled());
        let done = AtomicBool::new(true);
        let far = Instant::now().checked_add(Duration::from_secs(3600));
        assert!(!t.wait_until(far, &done));
        t.cancel();
        assert!(t.wait_until(far, &AtomicBool::new(false)));
    }

    #[test]
    fn a_timeout_too_far_to_represent_waits_without_a_deadline() {
        let t = CancelToken::new();
        t.cancel();
        assert!(t.wait_timeout(Duration::MAX));
    }

    #[test]
    fn hooks_run_once_and_not_after_their_guard_is_dropped() {
        let t = CancelToken::new();
        let hits = Arc::new(AtomicU64::new(0));
        let h = hits.clone();
        let kept = t.on_cancel(move || {
            h.fetch_add(1, Ordering::SeqCst);
        });
        let h = hits.clone();
        drop(t.on_cancel(move || {
            h.fetch_add(100, Ordering::SeqCst);
        }));
        t.cancel();
        t.cancel();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        // Registered after the cancel: runs at once.
        let h = hits.clone();
        let _late = t.on_cancel(move || {
            h.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(hits.load(Ordering::SeqCst), 11);
        drop(kept);
    }

    #[test]
    fn a_cancel_from_another_thread_ends_a_wait() {
        let t = CancelToken::new();
        let c = t.clone();
        let th = std::thread::spawn(move || c.wait_until(None, &AtomicBool::new(false)));
        std::thread::sleep(Duration::from_millis(10));
        t.cancel();
        assert!(th.join().unwrap_or(false));
    }
}
