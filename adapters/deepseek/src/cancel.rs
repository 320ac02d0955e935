//! The caller's cancellation signal (AC-14, WD-1).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

type Hook = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    hooks: Mutex<Vec<(u64, Hook)>>,
}

/// A cancellation signal shared between the caller and a stream.
///
/// Clones share the signal. [`CancelToken::cancel`] may be called from any
/// thread: it interrupts a stream's blocked network read at once (the stream
/// then ends with `ABORTED`), and it is idempotent.
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

/// Unregisters a hook when dropped.
pub(crate) struct HookGuard {
    token: CancelToken,
    id: u64,
}

impl Drop for HookGuard {
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

    /// Cancels: every stream observing this token stops promptly.
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        let hooks: Vec<Hook> = match self.inner.hooks.lock() {
            Ok(hooks) => hooks.iter().map(|(_, h)| h.clone()).collect(),
            Err(_) => Vec::new(),
        };
        for hook in hooks {
            hook();
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `hook` on cancellation (at once if already cancelled) until the
    /// guard is dropped.
    pub(crate) fn on_cancel(&self, hook: impl Fn() + Send + Sync + 'static) -> HookGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        let hook: Hook = Arc::new(hook);
        if let Ok(mut hooks) = self.inner.hooks.lock() {
            hooks.push((id, hook.clone()));
        }
        if self.is_cancelled() {
            hook();
        }
        HookGuard {
            token: self.clone(),
            id,
        }
    }
}
