//! The session locks a store holds, bounded.
//!
//! A writer holds its session's `flock` (an open descriptor) while the
//! store writes the session. Tens of thousands of idle sessions cannot each
//! keep one open, so the store keeps at most `capacity` locks: taking one
//! more lets go of the least recently used lock of a writer that is not in
//! the middle of an operation. Such a writer takes its lock again before its
//! next operation and first checks that the transcript is still exactly
//! what it last wrote (device, inode, size, mtime, ctime); if another writer wrote it in
//! between, the operation fails with [`StoreError::Locked`] and nothing is
//! written. So at most one writer ever changes a transcript, and a writer
//! never appends to a transcript it has not seen, whichever holds the lock.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_store::StoreError;

use crate::fsio::{SessionLock, Stat};

/// The default of [`crate::JsonlConfig::max_held_locks`].
pub const DEFAULT_MAX_HELD_LOCKS: usize = 256;

struct Held {
    /// Kept for its descriptor: dropping it releases the lock.
    _lock: SessionLock,
    /// In an operation: not to be let go.
    busy: bool,
}

struct Table {
    held: HashMap<u64, Held>,
    /// Tokens, least recently used first (may hold stale tokens).
    order: VecDeque<u64>,
}

/// The locks one store holds.
pub struct LockCache {
    capacity: usize,
    next: AtomicU64,
    table: Mutex<Table>,
}

fn table(m: &Mutex<Table>) -> MutexGuard<'_, Table> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LockCache {
    /// A cache of at most `capacity` (at least 1) locks.
    pub fn new(capacity: usize) -> Arc<LockCache> {
        Arc::new(LockCache {
            capacity: capacity.max(1),
            next: AtomicU64::new(0),
            table: Mutex::new(Table {
                held: HashMap::new(),
                order: VecDeque::new(),
            }),
        })
    }

    /// How many locks are held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        table(&self.table).held.len()
    }

    fn insert(&self, token: u64, lock: SessionLock, busy: bool) {
        let mut t = table(&self.table);
        t.held.insert(token, Held { _lock: lock, busy });
        t.order.push_back(token);
        // Let go of the least recently used idle locks over capacity; busy
        // ones stay (their number is bounded by the threads writing).
        let mut scanned = 0;
        while t.held.len() > self.capacity && scanned < t.order.len() {
            let Some(oldest) = t.order.pop_front() else {
                break;
            };
            match t.held.get(&oldest) {
                Some(h) if h.busy || oldest == token => {
                    t.order.push_back(oldest);
                    scanned += 1;
                }
                Some(_) => {
                    t.held.remove(&oldest);
                }
                None => {}
            }
        }
        // Drop stale tokens so the queue stays bounded.
        if t.order.len() > 2 * t.held.len() + 16 {
            let Table { held, order } = &mut *t;
            order.retain(|k| held.contains_key(k));
        }
    }

    /// Marks `token` busy (or idle) if held; whether it is held.
    fn mark(&self, token: u64, busy: bool) -> bool {
        let mut t = table(&self.table);
        let Some(h) = t.held.get_mut(&token) else {
            return false;
        };
        h.busy = busy;
        if busy {
            t.order.retain(|k| *k != token);
            t.order.push_back(token);
        }
        true
    }

    fn remove(&self, token: u64) {
        let mut t = table(&self.table);
        t.held.remove(&token);
    }
}

/// One writer's claim on its session lock.
pub struct LockClaim {
    cache: Arc<LockCache>,
    token: u64,
    lock_path: PathBuf,
    what: String,
    /// The transcript and what this writer last saw of it (`None`: absent).
    transcript: PathBuf,
    seen: Option<Stat>,
}

fn identity(path: &Path) -> Result<Option<Stat>, StoreError> {
    Stat::of(path)
}

impl LockClaim {
    /// Takes the lock at `lock_path` ([`StoreError::Locked`] when another
    /// handle holds it) for the writer of `transcript`.
    pub fn take(
        cache: &Arc<LockCache>,
        lock_path: PathBuf,
        what: String,
        transcript: PathBuf,
    ) -> Result<LockClaim, StoreError> {
        let lock = SessionLock::take(&lock_path, &what)?;
        let seen = identity(&transcript)?;
        let token = cache.next.fetch_add(1, Ordering::Relaxed);
        cache.insert(token, lock, false);
        Ok(LockClaim {
            cache: cache.clone(),
            token,
            lock_path,
            what,
            transcript,
            seen,
        })
    }

    /// Holds the lock for one operation: takes it again if it was let go,
    /// refusing when the transcript changed since this writer last saw it.
    /// Call [`LockClaim::end`] after the operation.
    pub fn begin(&mut self) -> Result<(), StoreError> {
        if self.cache.mark(self.token, true) {
            return Ok(());
        }
        let lock = SessionLock::take(&self.lock_path, &self.what)?;
        if identity(&self.transcript)? != self.seen {
            return Err(StoreError::Locked {
                what: format!(
                    "{} (changed by another writer while this store had let go of its lock)",
                    self.what
                ),
                path: self.lock_path.clone(),
            });
        }
        self.cache.insert(self.token, lock, true);
        Ok(())
    }

    /// Ends an operation begun with [`LockClaim::begin`]: records the
    /// transcript as this writer leaves it; the lock may be let go.
    pub fn end(&mut self) {
        if let Ok(seen) = identity(&self.transcript) {
            self.seen = seen;
        }
        self.cache.mark(self.token, false);
    }
}

impl Drop for LockClaim {
    fn drop(&mut self) {
        self.cache.remove(self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_capacity_idle_locks_and_never_a_busy_one_out() {
        let dir = tempfile::tempdir().unwrap();
        let cache = LockCache::new(2);
        let mut claims: Vec<LockClaim> = (0..5)
            .map(|k| {
                LockClaim::take(
                    &cache,
                    dir.path().join(format!("l{k}")),
                    format!("s{k}"),
                    dir.path().join(format!("t{k}")),
                )
                .unwrap()
            })
            .collect();
        assert_eq!(cache.held(), 2);
        // Three busy at once: over capacity while busy, never evicted.
        for c in claims.iter_mut().take(3) {
            c.begin().unwrap();
        }
        assert_eq!(cache.held(), 3);
        for c in claims.iter_mut().take(3) {
            c.end();
        }
        claims[4].begin().unwrap();
        claims[4].end();
        assert_eq!(cache.held(), 2);
        drop(claims);
        assert_eq!(cache.held(), 0);
    }
}
