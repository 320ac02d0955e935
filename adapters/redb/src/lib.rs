//! `dsh-redb`: the key-value session store of dsh over one redb database
//! (`spec/persistence.md` 7.2, KV1–KV11).
//!
//! Tables (KV1):
//! - `sessions`: session id → (header line JSON in the JSONL header order,
//!   incarnation, revision counter);
//! - `events`: (session id, seq) → the event's JSON text exactly as the log
//!   stores it (E9 order, or the text it was read with), one logical event
//!   per record (KV2; no packing, Q7);
//! - `store_meta`: `schema` → [`SCHEMA`], `store_id` → a random id.
//!
//! The first append of a session inserts its `sessions` entry and the first
//! batch in one write transaction (KV4); every append checks the stored
//! next seq (a stale-writer check), inserts, bumps the revision and commits
//! with immediate durability (KV5). Reads run the JSONL scan rule over the
//! records in key order (KV6, KV10); the repair transaction re-scans under
//! the write lock, deletes the torn records and inserts the closers (KV7).
//! The database file is locked for the whole life of the store: a second
//! process (or a second store) opening it gets [`StoreError::Locked`].

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use dsh_core::SessionId;
use dsh_core::jsonl::encode_header_line;
use dsh_core::session::{SessionEvent, SessionHeader};
use dsh_store::{
    Backend, Coordinator, CoordinatorConfig, Location, RecordScan, Revision, Snapshot, StoreError,
    Stored, decode_stored_header,
};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

/// The schema this build reads and writes; any other value is refused (KV1).
pub const SCHEMA: &str = "dsh-redb/1";

const SESSIONS: TableDefinition<&str, (&str, &str, u64)> = TableDefinition::new("sessions");
const EVENTS: TableDefinition<(&str, u64), &str> = TableDefinition::new("events");
const META: TableDefinition<&str, &str> = TableDefinition::new("store_meta");

/// A redb session store.
pub type RedbStore = Coordinator<RedbBackend>;

/// The redb storage hooks.
pub struct RedbBackend {
    db: Database,
    path: PathBuf,
    identity: String,
}

fn db_err(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Database {
        context: context.to_owned(),
        message: e.to_string(),
    }
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ u128::from(std::process::id());
        for (i, x) in b.iter_mut().enumerate() {
            *x = (t >> ((i % 16) * 8)) as u8;
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Opens (or creates) the database at `path` (KV1, KV11): the parent
/// directory must not be group/world writable, a symlink is refused, a new
/// file gets mode 0600, and a database of another schema is refused.
pub fn open(path: &Path, config: CoordinatorConfig) -> Result<RedbStore, StoreError> {
    Ok(Coordinator::new(RedbBackend::open(path)?, config))
}

impl RedbBackend {
    /// Opens the database; see [`open`].
    pub fn open(path: &Path) -> Result<RedbBackend, StoreError> {
        let path = std::path::absolute(path)
            .map_err(|e| StoreError::io(format!("resolve {}", path.display()), e))?;
        let parent = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        if !parent.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&parent)
                .map_err(|e| StoreError::io(format!("create {}", parent.display()), e))?;
        }
        let pmeta = fs::metadata(&parent)
            .map_err(|e| StoreError::io(format!("stat {}", parent.display()), e))?;
        if pmeta.mode() & 0o022 != 0 && pmeta.mode() & 0o1000 == 0 {
            return Err(StoreError::Layout {
                message: format!(
                    "the directory {} of the session database is group- or world-writable; use an owner-only directory",
                    parent.display()
                ),
            });
        }
        let existed = match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(StoreError::Layout {
                    message: format!("the session database {} is a symlink", path.display()),
                });
            }
            Ok(_) => true,
            Err(_) => false,
        };
        let db = Database::create(&path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
                what: format!("session database {}", path.display()),
                path: path.clone(),
            },
            other => db_err(&format!("open {}", path.display()), other),
        })?;
        if !existed {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                .map_err(|e| StoreError::io(format!("chmod {}", path.display()), e))?;
        }
        let store_id = Self::init_meta(&db)?;
        let m = fs::metadata(&path)
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?;
        let birth = m
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let identity = format!("redb:file:{}:{}:{birth}:store:{store_id}", m.dev(), m.ino());
        Ok(RedbBackend { db, path, identity })
    }

    fn init_meta(db: &Database) -> Result<String, StoreError> {
        let txn = db.begin_write().map_err(|e| db_err("begin", e))?;
        let store_id = {
            let mut meta = txn
                .open_table(META)
                .map_err(|e| db_err("open store_meta", e))?;
            let schema = meta
                .get("schema")
                .map_err(|e| db_err("read schema", e))?
                .map(|g| g.value().to_owned());
            match schema.as_deref() {
                Some(SCHEMA) => {}
                Some(other) => {
                    return Err(StoreError::Layout {
                        message: format!(
                            "the database has schema \"{other}\", this build reads only \"{SCHEMA}\" (no migrations)"
                        ),
                    });
                }
                None => {
                    let sessions = txn
                        .open_table(SESSIONS)
                        .map_err(|e| db_err("open sessions", e))?;
                    if sessions.len().map_err(|e| db_err("count sessions", e))? != 0 {
                        return Err(StoreError::Layout {
                            message: "the database holds sessions but no schema marker: not a dsh session database".into(),
                        });
                    }
                    meta.insert("schema", SCHEMA)
                        .map_err(|e| db_err("write schema", e))?;
                }
            }
            let id = meta
                .get("store_id")
                .map_err(|e| db_err("read store id", e))?
                .map(|g| g.value().to_owned());
            match id {
                Some(id) => id,
                None => {
                    let id = random_hex(16);
                    meta.insert("store_id", id.as_str())
                        .map_err(|e| db_err("write store id", e))?;
                    id
                }
            }
        };
        txn.open_table(SESSIONS)
            .map_err(|e| db_err("open sessions", e))?;
        txn.open_table(EVENTS)
            .map_err(|e| db_err("open events", e))?;
        txn.commit().map_err(|e| db_err("commit", e))?;
        Ok(store_id)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn revision(&self, incarnation: &str, n: u64) -> Revision {
        Revision::new(format!(
            "{}:incarnation:{incarnation}:revision:{n}",
            self.identity
        ))
    }

    fn header_of(&self, id: &str, text: &str) -> Result<SessionHeader, StoreError> {
        decode_stored_header(id, text)
    }
}

/// The scan rule over records (7.1, KV6, KV10): the valid contiguous prefix
/// and the first seq to delete when a torn tail follows it.
fn scan_records<T: ReadableTable<(&'static str, u64), &'static str>>(
    table: &T,
    id: &str,
) -> Result<(Vec<SessionEvent>, Option<u64>), StoreError> {
    let range = table
        .range((id, 0u64)..=(id, u64::MAX))
        .map_err(|e| db_err("scan events", e))?;
    let mut scan = RecordScan::new(id);
    for item in range {
        let (key, value) = item.map_err(|e| db_err("read an event", e))?;
        scan.push(key.value().1, value.value())?;
    }
    Ok(scan.finish())
}

fn insert_events(
    table: &mut redb::Table<'_, (&'static str, u64), &'static str>,
    id: &str,
    events: &[SessionEvent],
) -> Result<(), StoreError> {
    for e in events {
        let json = e.to_json();
        table
            .insert((id, e.seq()), json.as_str())
            .map_err(|err| db_err("insert an event", err))?;
    }
    Ok(())
}

impl Backend for RedbBackend {
    type Writer = ();
    type Marker = u64;

    fn kind(&self) -> &'static str {
        "redb"
    }

    fn locate(&self, _header: &SessionHeader) -> Option<Location> {
        None
    }

    fn has_artifact(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(self.read_revision(id)?.is_some())
    }

    fn stored_header(&self, id: &SessionId) -> Result<Option<SessionHeader>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| db_err("begin read", e))?;
        let sessions = txn
            .open_table(SESSIONS)
            .map_err(|e| db_err("open sessions", e))?;
        let Some(entry) = sessions
            .get(id.as_str())
            .map_err(|e| db_err("read a session", e))?
        else {
            return Ok(None);
        };
        let (text, _, _) = entry.value();
        self.header_of(id.as_str(), text).map(Some)
    }

    fn load_stored(&self, id: &SessionId) -> Result<Option<Stored<u64>>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| db_err("begin read", e))?;
        let sessions = txn
            .open_table(SESSIONS)
            .map_err(|e| db_err("open sessions", e))?;
        let Some(entry) = sessions
            .get(id.as_str())
            .map_err(|e| db_err("read a session", e))?
        else {
            return Ok(None);
        };
        let (text, incarnation, n) = entry.value();
        let header = self.header_of(id.as_str(), text)?;
        let revision = self.revision(incarnation, n);
        let table = txn
            .open_table(EVENTS)
            .map_err(|e| db_err("open events", e))?;
        let (events, torn) = scan_records(&table, id.as_str())?;
        Ok(Some(Stored {
            header,
            events,
            revision,
            torn,
            location: None,
        }))
    }

    fn read_revision(&self, id: &SessionId) -> Result<Option<Revision>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| db_err("begin read", e))?;
        let sessions = txn
            .open_table(SESSIONS)
            .map_err(|e| db_err("open sessions", e))?;
        let entry = sessions
            .get(id.as_str())
            .map_err(|e| db_err("read a session", e))?;
        Ok(entry.map(|g| {
            let (_, incarnation, n) = g.value();
            self.revision(incarnation, n)
        }))
    }

    fn open_writer(&self, _header: &SessionHeader) -> Result<(), StoreError> {
        // The database file lock, held for the store's life, excludes
        // every other writer.
        Ok(())
    }

    fn append_batch(
        &self,
        _writer: &mut (),
        header: &SessionHeader,
        events: &[SessionEvent],
        next_seq: u64,
        materialized: bool,
    ) -> Result<(), StoreError> {
        let id = header.id.as_str();
        let txn = self
            .db
            .begin_write()
            .map_err(|e| db_err("begin write", e))?;
        {
            let mut sessions = txn
                .open_table(SESSIONS)
                .map_err(|e| db_err("open sessions", e))?;
            let current = sessions
                .get(id)
                .map_err(|e| db_err("read a session", e))?
                .map(|g| {
                    let (text, inc, n) = g.value();
                    (text.to_owned(), inc.to_owned(), n)
                });
            let mut table = txn
                .open_table(EVENTS)
                .map_err(|e| db_err("open events", e))?;
            let (text, incarnation, n) = match (current, materialized) {
                (Some(_), false) => {
                    return Err(StoreError::AlreadyExists {
                        id: id.to_owned(),
                        on_disk: true,
                    });
                }
                (None, true) => return Err(StoreError::NotFound { id: id.to_owned() }),
                (None, false) => {
                    let mut line = Vec::with_capacity(256);
                    encode_header_line(header, &mut line);
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    (text, random_hex(16), 0)
                }
                (Some(entry), true) => {
                    // KV5: the stored next seq must be what the caller thinks.
                    let last = table
                        .range((id, 0u64)..=(id, u64::MAX))
                        .map_err(|e| db_err("scan events", e))?
                        .next_back()
                        .transpose()
                        .map_err(|e| db_err("read the last event", e))?
                        .map(|(k, _)| k.value().1);
                    let stored_next = last.map_or(0, |s| s + 1);
                    if stored_next != next_seq {
                        return Err(StoreError::SeqMismatch {
                            id: id.to_owned(),
                            expected: stored_next,
                            index: 0,
                            got: next_seq,
                        });
                    }
                    entry
                }
            };
            insert_events(&mut table, id, events)?;
            sessions
                .insert(id, (text.as_str(), incarnation.as_str(), n + 1))
                .map_err(|e| db_err("write a session", e))?;
        }
        txn.commit().map_err(|e| db_err("commit", e))
    }

    fn commit_repair(
        &self,
        _writer: &mut (),
        header: &SessionHeader,
        marker: Option<u64>,
        closers: &[SessionEvent],
        next_seq: u64,
    ) -> Result<(), StoreError> {
        let id = header.id.as_str();
        let txn = self
            .db
            .begin_write()
            .map_err(|e| db_err("begin write", e))?;
        {
            let mut sessions = txn
                .open_table(SESSIONS)
                .map_err(|e| db_err("open sessions", e))?;
            let Some((text, incarnation, n)) = sessions
                .get(id)
                .map_err(|e| db_err("read a session", e))?
                .map(|g| {
                    let (text, inc, n) = g.value();
                    (text.to_owned(), inc.to_owned(), n)
                })
            else {
                return Err(StoreError::NotFound { id: id.to_owned() });
            };
            let mut table = txn
                .open_table(EVENTS)
                .map_err(|e| db_err("open events", e))?;
            // KV7: re-scan under the write lock.
            let (events, torn) = scan_records(&table, id)?;
            if torn != marker || events.len() as u64 != next_seq {
                return Err(StoreError::corruption(
                    id,
                    format!("repair is stale for session \"{id}\": the stored log changed"),
                    None,
                ));
            }
            if let Some(from) = marker {
                table
                    .retain_in((id, from)..=(id, u64::MAX), |_, _| false)
                    .map_err(|e| db_err("delete the torn tail", e))?;
            }
            if let Some(first) = closers.first()
                && first.seq() != next_seq
            {
                return Err(StoreError::SeqMismatch {
                    id: id.to_owned(),
                    expected: next_seq,
                    index: 0,
                    got: first.seq(),
                });
            }
            insert_events(&mut table, id, closers)?;
            sessions
                .insert(id, (text.as_str(), incarnation.as_str(), n + 1))
                .map_err(|e| db_err("write a session", e))?;
        }
        txn.commit().map_err(|e| db_err("commit", e))
    }

    fn list(&self) -> Result<Vec<Snapshot>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| db_err("begin read", e))?;
        let sessions = txn
            .open_table(SESSIONS)
            .map_err(|e| db_err("open sessions", e))?;
        let mut out = Vec::new();
        for item in sessions.iter().map_err(|e| db_err("list sessions", e))? {
            let (key, value) = item.map_err(|e| db_err("read a session", e))?;
            let (text, incarnation, n) = value.value();
            out.push(Snapshot {
                header: self.header_of(key.value(), text)?,
                revision: self.revision(incarnation, n),
            });
        }
        Ok(out)
    }
}

/// Test support: raw access to the records, to simulate damage that the
/// store itself never writes (KV10).
pub mod raw {
    use super::*;

    /// Overwrites (or inserts) the record `(id, seq)` with `text`, bumping
    /// the session's revision.
    pub fn put_record(store: &RedbStore, id: &str, seq: u64, text: &str) -> Result<(), StoreError> {
        let b = store.backend();
        let txn = b.db.begin_write().map_err(|e| db_err("begin write", e))?;
        {
            let mut table = txn
                .open_table(EVENTS)
                .map_err(|e| db_err("open events", e))?;
            table
                .insert((id, seq), text)
                .map_err(|e| db_err("insert", e))?;
            let mut sessions = txn
                .open_table(SESSIONS)
                .map_err(|e| db_err("open sessions", e))?;
            let entry = sessions.get(id).map_err(|e| db_err("read", e))?.map(|g| {
                let (t, i, n) = g.value();
                (t.to_owned(), i.to_owned(), n)
            });
            if let Some((t, i, n)) = entry {
                sessions
                    .insert(id, (t.as_str(), i.as_str(), n + 1))
                    .map_err(|e| db_err("write", e))?;
            }
        }
        txn.commit().map_err(|e| db_err("commit", e))
    }

    /// Replaces the header text of `id` (e.g. to store `"version":99`).
    pub fn put_header(store: &RedbStore, id: &str, text: &str) -> Result<(), StoreError> {
        let b = store.backend();
        let txn = b.db.begin_write().map_err(|e| db_err("begin write", e))?;
        {
            let mut sessions = txn
                .open_table(SESSIONS)
                .map_err(|e| db_err("open sessions", e))?;
            let entry = sessions.get(id).map_err(|e| db_err("read", e))?.map(|g| {
                let (_, i, n) = g.value();
                (i.to_owned(), n)
            });
            let (i, n) = entry.unwrap_or_else(|| ("test".to_owned(), 0));
            sessions
                .insert(id, (text, i.as_str(), n + 1))
                .map_err(|e| db_err("write", e))?;
        }
        txn.commit().map_err(|e| db_err("commit", e))
    }

    /// Every record of `id` in key order: (seq, text).
    pub fn records(store: &RedbStore, id: &str) -> Result<Vec<(u64, String)>, StoreError> {
        let b = store.backend();
        let txn = b.db.begin_read().map_err(|e| db_err("begin read", e))?;
        let table = txn
            .open_table(EVENTS)
            .map_err(|e| db_err("open events", e))?;
        let mut out = Vec::new();
        for item in table
            .range((id, 0u64)..=(id, u64::MAX))
            .map_err(|e| db_err("scan", e))?
        {
            let (k, v) = item.map_err(|e| db_err("read", e))?;
            out.push((k.value().1, v.value().to_owned()));
        }
        Ok(out)
    }
}
