//! `dsh-jsonl`: the JSONL session store of dsh (`spec/persistence.md`
//! section 5, 6).
//!
//! Layout: `<root>/--<project-key>--/<escaped-id>/session.jsonl[.zstd]`
//! ([`layout`]). The first non-empty append publishes the header and the
//! first batch atomically (temp file, fsync, hard link that never
//! overwrites, fsync of the directory); later batches are appended and
//! fsynced, and rolled back to the previous length on failure. Chunk deltas
//! are packed into rows on write (configurable). Loading scans the log with
//! the core's scanner, closes an interrupted turn with the core's closers and
//! commits the repair. A session is written by one store at a time: the
//! writer takes an OS advisory lock on `session.lock` in the session
//! directory, which a second process (or a second store) cannot take.
//!
//! **Descriptors.** An idle session keeps no transcript open (each write
//! opens, appends, fsyncs and closes), and a store holds at most
//! [`JsonlConfig::max_held_locks`] session locks: past that, the least
//! recently used idle session lets go of its lock, takes it again before
//! its next write, and refuses that write ([`dsh_store::StoreError::Locked`])
//! if another writer changed the transcript in between. Ten thousand live
//! sessions fit in the default descriptor limit.
//!
//! **Compression.** dsh writes Zstandard frames by default
//! ([`Compression::Zstd`], `session.jsonl.zstd`), like the reference: a root
//! holds one encoding only (L4), so defaulting to the reference's encoding
//! lets dsh and the reference share a store root, and logs are several
//! times smaller (chunk deltas dominate them). Each durable write is one
//! checksummed frame, so a torn write is still detected and repaired frame
//! by frame. [`Compression::None`] writes plain `session.jsonl` (greppable,
//! a little cheaper per append); both modes are read.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
pub mod frames;
mod fsio;
pub mod layout;
mod locks;
mod raw_read;

use std::path::PathBuf;

use dsh_store::{Coordinator, CoordinatorConfig, StoreError};

pub use locks::DEFAULT_MAX_HELD_LOCKS;

pub use backend::{
    JsonlBackend, JsonlMarker, JsonlWriter, LOCK_NAME, RAW_NAME, RawArtifact, ZSTD_NAME,
};

/// The physical encoding of transcripts (PE1, PE2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// Concatenated checksummed Zstandard frames, one per durable write
    /// (`session.jsonl.zstd`). The default.
    #[default]
    Zstd,
    /// Plain UTF-8 JSONL (`session.jsonl`).
    None,
}

/// Configuration of a JSONL store (persistence.md section 8).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JsonlConfig {
    /// The store root (required; made absolute at open).
    pub root: PathBuf,
    /// The physical encoding.
    pub compression: Compression,
    /// Write packed chunk rows (5.4); reading always understands them.
    pub pack_chunks: bool,
    /// Write-behind queue size and extra known event types.
    pub coordinator: CoordinatorConfig,
    /// The most session locks (one open descriptor each) the store holds
    /// at a time, at least 1; default 256 (see the crate docs,
    /// "Descriptors").
    pub max_held_locks: usize,
}

impl JsonlConfig {
    /// The defaults at `root`: zstd, packed chunk rows.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        JsonlConfig {
            root: root.into(),
            compression: Compression::Zstd,
            pack_chunks: true,
            coordinator: CoordinatorConfig::default(),
            max_held_locks: DEFAULT_MAX_HELD_LOCKS,
        }
    }

    /// The same with another compression.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
}

/// A JSONL session store.
pub type JsonlStore = Coordinator<JsonlBackend>;

/// Opens a JSONL store (nothing is written until the first append).
pub fn open(config: JsonlConfig) -> Result<JsonlStore, StoreError> {
    let backend = JsonlBackend::new(&config.root, config.compression, config.pack_chunks)?
        .with_max_held_locks(config.max_held_locks);
    Ok(Coordinator::new(backend, config.coordinator))
}
