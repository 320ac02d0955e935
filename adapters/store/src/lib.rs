//! `dsh-store`: the durable session persistence seam of dsh
//! (`spec/persistence.md` sections 2–4).
//!
//! - [`SessionStore`]: the blocking persistence API the shells use (create,
//!   append, load with crash repair, inspect
//!   without writing, read from a seq, list, revisions). A shell runs it on a
//!   thread (the smol shell wraps calls with `unblock`).
//! - [`StoreError`]: the documented error kinds (OP12, Q3).
//! - [`Backend`] and [`Coordinator`]: a backend implements the storage hooks
//!   H1–H6; the coordinator implements the seam on top of them (per-id
//!   cursor, adoption, contiguity, repair commit), so the
//!   JSONL and redb stores share one implementation of the rules.
//! - [`RecordScan`] and [`decode_stored_header`]: the scan rule over the
//!   records of a key-value store (redb, PostgreSQL).
//! - `contract` (feature `contract`): the shared contract suite (section 4)
//!   that every store's tests run.
//!
//! The log format and crash repair are the core's pure functions
//! (`dsh_core::jsonl`); this crate only composes them.
//!
//! # Features
//!
//! - `contract`: the shared contract suite (`dsh_store::contract`) a store
//!   implementation runs in its tests.
//!
//! No feature is on by default.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod coordinator;
mod error;
mod records;

#[cfg(feature = "contract")]
pub mod contract;

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_core::SessionId;
use dsh_core::session::{SessionEvent, SessionHeader};

pub use coordinator::{Coordinator, CoordinatorConfig, check_batch, validate_stored};
pub use error::{ErrorKind, StoreError};
pub use records::{RecordScan, decode_stored_header};

/// The largest safe integer (`2^53 - 1`, session.md section 1).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// A cancel token for observation operations (OP11). Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<Mutex<Option<String>>>);

impl Cancel {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Cancel::default()
    }

    /// Cancels with `reason`; the first reason wins.
    pub fn cancel(&self, reason: impl Into<String>) {
        if let Ok(mut slot) = self.0.lock()
            && slot.is_none()
        {
            *slot = Some(reason.into());
        }
    }

    /// The reason, once cancelled.
    pub fn reason(&self) -> Option<String> {
        self.0.lock().ok().and_then(|r| r.clone())
    }

    /// `Err(StoreError::Cancelled)` carrying exactly the reason, once cancelled.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.reason() {
            Some(reason) => Err(StoreError::Cancelled { reason }),
            None => Ok(()),
        }
    }
}

/// An opaque revision of one stored log (OP10, R1–R4): equal across
/// observations of an unchanged log, different after every append and every
/// committed repair, qualified by the store's identity. Compare for equality
/// only.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    /// Wraps a backend's revision text.
    pub fn new(text: impl Into<String>) -> Self {
        Revision(text.into())
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a session's artifact lives (OP1): a hint, not an authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A JSONL transcript (it may not exist yet).
    Jsonl {
        /// The absolute transcript path.
        path: PathBuf,
    },
}

/// A stored log as returned by `load` and `inspect`: balanced (closers of an
/// interrupted turn included) and validated.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The session header.
    pub header: SessionHeader,
    /// The events, seqs `0..len`, no open turn.
    pub events: Vec<SessionEvent>,
    /// The revision of the stored log these events were read from (after a
    /// committed repair, the repaired one).
    pub revision: Revision,
}

/// One entry of [`SessionStore::list_snapshots`].
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The session header.
    pub header: SessionHeader,
    /// The stored log's revision.
    pub revision: Revision,
}

/// The persistence seam (persistence.md section 2), blocking.
///
/// Every operation on one id runs after the previous one on that id has
/// finished (OP4.2); operations on different ids may run at the same time.
/// At most one store may write a session at a time: a store takes the
/// session's writer lock on its first write or `load`, and another process
/// (or another store over the same files) gets [`StoreError::Locked`].
pub trait SessionStore: Send + Sync {
    /// A short name of the backend (`"jsonl"`, `"redb"`).
    fn kind(&self) -> &'static str;

    /// Where `header`'s artifact is or would be (OP1); no I/O.
    fn locate(&self, header: &SessionHeader) -> Option<Location>;

    /// Registers a new session without writing anything (OP3, M1): rejects a
    /// `createdAt` beyond the safe range (the id stays free), an id this
    /// store already tracks, and an id that already has a stored log.
    fn create(&self, header: SessionHeader) -> Result<(), StoreError>;

    /// Durably appends a batch (OP4): the seqs must continue the stored log
    /// (`events[i].seq == cursor + i`); an untracked id is adopted first
    /// (cold load with crash repair). The first non-empty append materializes
    /// the log atomically. An empty batch is a no-op. On error nothing is
    /// visible and the cursor does not move.
    fn append(&self, id: &SessionId, events: &[SessionEvent]) -> Result<(), StoreError>;

    /// Whether [`append`](Self::append) may block on I/O (a file, a
    /// database, the network). An async runtime calls a store that says
    /// `false` (one in memory) in place instead of on a thread pool, which
    /// saves two thread hand-offs per write. The default is `true`.
    fn append_blocks(&self) -> bool {
        true
    }

    /// Loads a balanced log (OP5, 6.5): reads, validates, closes an
    /// interrupted turn, **commits** the repair (torn tail removed, closers
    /// appended) and returns the repaired events. Tracks the id for writing
    /// at the returned length. Missing → [`StoreError::NotFound`].
    fn load(&self, id: &SessionId) -> Result<Inspection, StoreError>;

    /// The same view as `load` without writing anything (OP6): closers only
    /// in memory, a torn tail left on disk, the revision unchanged.
    fn inspect(&self, id: &SessionId, cancel: &Cancel) -> Result<Inspection, StoreError>;

    /// The header and the stored events with `seq >= from_seq` of the valid
    /// contiguous prefix (OP8): no closers, no truncation. `from_seq` beyond
    /// the safe-integer range → [`StoreError::Invalid`] ("non-negative safe
    /// integer").
    fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &Cancel,
    ) -> Result<(SessionHeader, Vec<SessionEvent>), StoreError>;

    /// One header per materialized session (OP9); read without parsing whole
    /// logs.
    fn list(&self, cancel: &Cancel) -> Result<Vec<SessionHeader>, StoreError>;

    /// Headers with revisions (OP10).
    fn list_snapshots(&self, cancel: &Cancel) -> Result<Vec<Snapshot>, StoreError>;

    /// [`list`](Self::list), plus the stored logs that could not be listed
    /// (a header that does not map to its location, an unreadable or
    /// corrupt log): one bad log does not hide the others. The default
    /// reports none.
    fn list_report(
        &self,
        cancel: &Cancel,
    ) -> Result<(Vec<SessionHeader>, Vec<StoreError>), StoreError> {
        Ok((self.list(cancel)?, Vec::new()))
    }

    /// The stored log's current revision, cheaply (H2). A session that is
    /// not materialized → [`StoreError::NotFound`].
    fn revision(&self, id: &SessionId) -> Result<Revision, StoreError>;

    /// Forgets the session and releases its writer lock.
    fn release(&self, id: &SessionId) -> Result<(), StoreError>;
}

/// What a backend read from storage for one session (hook H1).
#[derive(Debug)]
pub struct Stored<M> {
    /// The stored header.
    pub header: SessionHeader,
    /// The valid contiguous prefix (for a torn zstd frame, including the
    /// events recovered from it).
    pub events: Vec<SessionEvent>,
    /// The revision matching these bytes.
    pub revision: Revision,
    /// Present iff a torn tail must be removed by a repair (opaque).
    pub torn: Option<M>,
    /// The per-session artifact, for error messages.
    pub location: Option<PathBuf>,
}

/// The storage hooks a backend implements (persistence.md 3.1, H1–H6). The
/// [`Coordinator`] turns them into a [`SessionStore`].
pub trait Backend: Send + Sync {
    /// Per-session writer state: the session's lock and open handles.
    type Writer: Send;
    /// The torn-tail marker of H1 (a byte offset, a first seq to delete).
    type Marker: Send + fmt::Debug;

    /// A short name (`"jsonl"`, `"redb"`).
    fn kind(&self) -> &'static str;

    /// Whether writing may block on I/O ([`SessionStore::append_blocks`]);
    /// `true` unless the backend keeps its logs in memory.
    fn blocks(&self) -> bool {
        true
    }

    /// Where the artifact of `header` is or would be (OP1).
    fn locate(&self, header: &SessionHeader) -> Option<Location>;

    /// Whether `id` has a stored artifact anywhere in the store.
    fn has_artifact(&self, id: &SessionId) -> Result<bool, StoreError>;

    /// The stored header only (first line, first frame, `sessions` entry),
    /// identity-checked; `None` when the id has no artifact.
    fn stored_header(&self, id: &SessionId) -> Result<Option<SessionHeader>, StoreError>;

    /// H1: header, valid prefix, revision and torn marker; `None` when the
    /// id has no artifact. Scan failures are errors.
    fn load_stored(&self, id: &SessionId) -> Result<Option<Stored<Self::Marker>>, StoreError>;

    /// H3: header and stored events with `seq >= from_seq`, unknown-type
    /// checked; `None` when the id has no artifact. The default reads the
    /// whole log (a sequential backend checks the whole file, OP8).
    fn load_stored_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        extra_known: &[&str],
    ) -> Result<Option<(SessionHeader, Vec<SessionEvent>)>, StoreError> {
        let Some(stored) = self.load_stored(id)? else {
            return Ok(None);
        };
        dsh_core::jsonl::check_types(id.as_str(), &stored.events, extra_known)
            .map_err(|e| StoreError::from_log(id.as_str(), e, stored.location.clone()))?;
        let start = usize::try_from(from_seq)
            .unwrap_or(usize::MAX)
            .min(stored.events.len());
        let mut events = stored.events;
        let suffix = events.split_off(start);
        Ok(Some((stored.header, suffix)))
    }

    /// H2: the revision without reading events; `None` when not stored.
    fn read_revision(&self, id: &SessionId) -> Result<Option<Revision>, StoreError>;

    /// Takes the writer lock of `header`'s session (and whatever else the
    /// backend keeps open for writing). Fails with [`StoreError::Locked`]
    /// when another writer holds it.
    fn open_writer(&self, header: &SessionHeader) -> Result<Self::Writer, StoreError>;

    /// H4: durably appends `events` (whose first seq is `next_seq`, the
    /// stored length); when `materialized` is false, the header and the
    /// batch become visible atomically. On error nothing is visible.
    fn append_batch(
        &self,
        writer: &mut Self::Writer,
        header: &SessionHeader,
        events: &[SessionEvent],
        next_seq: u64,
        materialized: bool,
    ) -> Result<(), StoreError>;

    /// H5: removes the torn tail (iff `marker`), then appends `closers`
    /// (which start at `next_seq`, the length of the valid prefix).
    fn commit_repair(
        &self,
        writer: &mut Self::Writer,
        header: &SessionHeader,
        marker: Option<Self::Marker>,
        closers: &[SessionEvent],
        next_seq: u64,
    ) -> Result<(), StoreError>;

    /// H6: header and revision of every materialized session.
    fn list(&self) -> Result<Vec<Snapshot>, StoreError>;

    /// [`list`](Self::list) that skips a session it cannot list and
    /// reports why, instead of failing the whole listing. The default
    /// reports none.
    fn list_report(&self) -> Result<(Vec<Snapshot>, Vec<StoreError>), StoreError> {
        Ok((self.list()?, Vec::new()))
    }
}
