//! `dsh-postgres`: the PostgreSQL session store of dsh, behind the same seam
//! as the JSONL and redb stores (`spec/persistence.md` 3.1–3.4, 7.2).
//!
//! Schema (migration 1, recorded in `schema_migrations`):
//! - `sessions`: id (`bytea`, ids may hold any character) → the header line
//!   JSON as the JSONL header is written, the searchable columns `cwd`,
//!   `parent`, `created_at` (the header's `createdAt`), `last_activity`
//!   (server time of the last write), `title` (the latest `session/title`),
//!   and the revision (`incarnation`, `revision`);
//! - `events`: (session, seq) → the event's JSON text exactly as the log
//!   stores it, one event per row, primary key (session, seq);
//! - `store_meta`: `store_id` → a random id that qualifies revisions.
//!
//! Migrations run on open in one transaction under a transaction-level
//! advisory lock, so concurrent opens are safe and a re-open is a no-op; a
//! database migrated by a newer build is refused.
//!
//! Writes: the first append inserts the `sessions` row and the first batch
//! in one transaction; every flush is one transaction that checks the
//! session's writer lease and the stored next seq, inserts the batch with
//! `INSERT … SELECT … FROM unnest(…)` (one statement per
//! [`INSERT_CHUNK`] events) and bumps the revision. A batch retried after
//! its commit went through unanswered (the connection dropped during the
//! commit) finds itself stored, text for text, and succeeds as a no-op. Reads run in a
//! read-only repeatable-read transaction through a portal fetched
//! [`FETCH_ROWS`] rows at a time, so only one chunk of rows is held
//! beside the parsed events.
//!
//! **One writer per session, across machines**: the writer lease is a
//! session-level advisory lock keyed by (store id, session id), taken on
//! the store's connection when the session is first written or loaded, and
//! checked in every flush transaction. Another store (on any machine) gets
//! [`StoreError::Locked`]. When the holder dies the server ends its
//! connection and the lock goes with it: at once for a killed process, and
//! within about a minute for a lost machine (TCP keepalives are set on the
//! server side of the connection). A store whose connection was lost
//! reconnects on its next operation and must take the lease again before
//! it writes; the stale-writer check (stored next seq) refuses a batch if
//! anyone else wrote meanwhile.
//!
//! Client: the well-kept synchronous [`postgres`] crate. It drives
//! `tokio-postgres` on a private current-thread tokio runtime, a second
//! async runtime inside this adapter only: no runtime crate depends on it,
//! and the seam is blocking anyway (shells call stores on a thread). The
//! connection is plain TCP or a Unix socket (no TLS in this build): use it
//! on loopback or a network you trust. The URL's password is never shown:
//! [`StoreUrl`] displays a redacted form.
//!
//! # Features
//!
//! None: the crate always needs std and a PostgreSQL server.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_core::SessionId;
use dsh_core::jsonl::encode_header_line;
use dsh_core::session::{SessionEvent, SessionHeader};
use dsh_store::{
    Backend, Coordinator, CoordinatorConfig, Location, RecordScan, Revision, Snapshot, StoreError,
    Stored, decode_stored_header,
};
use postgres::config::Host;
use postgres::{Client, IsolationLevel, NoTls, Transaction};

/// The newest schema version this build knows; a database at a higher
/// version is refused.
pub const SCHEMA_VERSION: i32 = 1;

/// Rows fetched per round trip when reading a log.
pub const FETCH_ROWS: i32 = 1024;

/// Events inserted per statement in one flush.
pub const INSERT_CHUNK: usize = 4096;

/// The advisory lock key that serializes migrations (any schema).
const MIGRATION_LOCK: i64 = 0x6473_685f_6d69_6772; // "dsh_migr"

/// Versioned migrations, applied in order on open.
const MIGRATIONS: &[(i32, &str)] = &[(
    1,
    "CREATE TABLE sessions (
        id bytea PRIMARY KEY,
        header text NOT NULL,
        cwd bytea,
        parent bytea,
        created_at bigint,
        last_activity timestamptz NOT NULL DEFAULT now(),
        title text,
        incarnation text NOT NULL,
        revision bigint NOT NULL
    );
    CREATE INDEX sessions_cwd ON sessions (cwd);
    CREATE INDEX sessions_parent ON sessions (parent);
    CREATE INDEX sessions_created_at ON sessions (created_at);
    CREATE INDEX sessions_last_activity ON sessions (last_activity);
    CREATE TABLE events (
        session bytea NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        event text NOT NULL,
        PRIMARY KEY (session, seq)
    );
    CREATE TABLE store_meta (key text PRIMARY KEY, value text NOT NULL);
    INSERT INTO store_meta (key, value) VALUES ('store_id', gen_random_uuid()::text);",
)];

/// A PostgreSQL session store.
pub type PgStore = Coordinator<PgBackend>;

/// A PostgreSQL connection URL (`postgres://user:password@host:port/db`,
/// or the `key=value` form). Its `Display` and `Debug` never show the
/// password.
#[derive(Clone)]
pub struct StoreUrl {
    config: postgres::Config,
}

impl StoreUrl {
    /// Parses `url`; the error names what is wrong, never the password.
    pub fn parse(url: &str) -> Result<StoreUrl, StoreError> {
        let config = postgres::Config::from_str(url).map_err(|e| StoreError::Invalid {
            message: format!("invalid PostgreSQL store URL: {e}"),
        })?;
        Ok(StoreUrl { config })
    }

    /// Whether the URL carries a password.
    pub fn has_password(&self) -> bool {
        self.config.get_password().is_some()
    }
}

impl fmt::Display for StoreUrl {
    /// `postgres://user@host:port/db`, the password left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("postgres://")?;
        if let Some(user) = self.config.get_user() {
            write!(f, "{user}")?;
            if self.has_password() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        let ports = self.config.get_ports();
        for (i, host) in self.config.get_hosts().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match host {
                Host::Tcp(name) => write!(f, "{name}")?,
                Host::Unix(path) => write!(f, "[{}]", path.display())?,
            }
            if let Some(port) = ports.get(i).or(ports.first()) {
                write!(f, ":{port}")?;
            }
        }
        if let Some(db) = self.config.get_dbname() {
            write!(f, "/{db}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

/// How to open a PostgreSQL store.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PgConfig {
    /// The server and database.
    pub url: StoreUrl,
    /// The schema holding the tables (created if missing); `None` uses the
    /// connection's `search_path` (normally `public`).
    pub schema: Option<String>,
    /// Coordinator settings.
    pub coordinator: CoordinatorConfig,
}

impl PgConfig {
    /// Default settings for `url`.
    pub fn new(url: StoreUrl) -> Self {
        PgConfig {
            url,
            schema: None,
            coordinator: CoordinatorConfig::default(),
        }
    }
}

/// Opens the store: connects, creates the schema if asked, applies the
/// migrations (see the crate docs).
pub fn open(config: PgConfig) -> Result<PgStore, StoreError> {
    let coordinator = config.coordinator.clone();
    Ok(Coordinator::new(PgBackend::open(config)?, coordinator))
}

/// A search over the sessions table ([`PgBackend::search`]); every field
/// that is set must match.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Search {
    /// The header's `cwd` equals this.
    pub cwd: Option<String>,
    /// The header's `parentSession` equals this.
    pub parent: Option<SessionId>,
    /// `createdAt` (epoch ms) at or after this.
    pub created_from: Option<u64>,
    /// `createdAt` (epoch ms) before this.
    pub created_before: Option<u64>,
    /// At most this many sessions, most recently active first.
    pub limit: Option<u32>,
}

struct Conn {
    client: Option<Client>,
    /// Bumped at every (re)connect: advisory locks taken on an older
    /// connection are gone.
    generation: u64,
}

struct Shared {
    url: StoreUrl,
    schema: Option<String>,
    conn: Mutex<Conn>,
}

/// The PostgreSQL storage hooks.
pub struct PgBackend {
    shared: Arc<Shared>,
    store_id: String,
}

/// The writer lease of one session: an advisory lock on the store's
/// connection, released when dropped.
pub struct PgWriter {
    shared: Arc<Shared>,
    key: i64,
    generation: u64,
}

impl Drop for PgWriter {
    fn drop(&mut self) {
        let mut conn = lock(&self.shared.conn);
        if conn.generation != self.generation {
            return;
        }
        if let Some(client) = conn.client.as_mut()
            && !client.is_closed()
        {
            let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&self.key]);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn db_err(context: &str, e: postgres::Error) -> StoreError {
    StoreError::Database {
        context: context.to_owned(),
        message: e.to_string(),
    }
}

fn quote_ident(name: &str) -> Result<String, StoreError> {
    if name.is_empty() || name.contains('\0') || name.len() > 63 {
        return Err(StoreError::Invalid {
            message: "a PostgreSQL schema name must be 1 to 63 bytes without NUL".into(),
        });
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

fn to_bigint(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The columns a header contributes to the sessions row.
struct HeaderColumns {
    text: String,
    cwd: Option<Vec<u8>>,
    parent: Option<Vec<u8>>,
    created_at: Option<i64>,
}

fn header_columns(header: &SessionHeader) -> HeaderColumns {
    let mut line = Vec::with_capacity(256);
    encode_header_line(header, &mut line);
    while line.last() == Some(&b'\n') {
        line.pop();
    }
    HeaderColumns {
        text: String::from_utf8_lossy(&line).into_owned(),
        cwd: header.cwd.as_ref().map(|c| c.as_bytes().to_vec()),
        parent: header
            .parent_session
            .as_ref()
            .map(|p| p.as_str().as_bytes().to_vec()),
        created_at: i64::try_from(header.created_at).ok(),
    }
}

/// The latest `session/title` of a batch, NULs removed (display only).
fn batch_title(events: &[SessionEvent]) -> Option<String> {
    events
        .iter()
        .rev()
        .filter(|e| e.event_type() == "session/title")
        .find_map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.to_json()).ok()?;
            let t = v.pointer("/data/title")?.as_str()?;
            Some(t.replace('\0', ""))
        })
}

impl Shared {
    fn connect(&self) -> Result<Client, StoreError> {
        let mut config = self.url.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.keepalives_idle(Duration::from_secs(30));
        config.application_name("dsh");
        let mut client = config.connect(NoTls).map_err(|e| StoreError::Database {
            context: format!("connect to {}", self.url),
            message: e.to_string(),
        })?;
        // The server drops a vanished client's connection (and with it its
        // writer leases) after about a minute without an answer.
        let mut setup = String::from(
            "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; \
             SET tcp_keepalives_count = 3;",
        );
        if let Some(schema) = &self.schema {
            let q = quote_ident(schema)?;
            setup.push_str(&format!("SET search_path TO {q};"));
        }
        client
            .batch_execute(&setup)
            .map_err(|e| db_err("set up the connection", e))?;
        Ok(client)
    }

    /// Runs `f` on a live connection (reconnecting first if it was lost);
    /// passes the connection's generation.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut Client, u64) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut conn = lock(&self.conn);
        let live = conn.client.as_ref().is_some_and(|c| !c.is_closed());
        if !live {
            conn.client = None;
            let client = self.connect()?;
            conn.client = Some(client);
            conn.generation += 1;
        }
        let generation = conn.generation;
        let Some(client) = conn.client.as_mut() else {
            return Err(StoreError::Database {
                context: "connect".into(),
                message: "no connection".into(),
            });
        };
        let result = f(client, generation);
        if client.is_closed() {
            conn.client = None;
        }
        result
    }
}

fn migrate(client: &mut Client, schema: Option<&str>) -> Result<String, StoreError> {
    let mut txn = client.transaction().map_err(|e| db_err("begin", e))?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| db_err("take the migration lock", e))?;
    if let Some(schema) = schema {
        txn.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {}",
            quote_ident(schema)?
        ))
        .map_err(|e| db_err("create the schema", e))?;
    }
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .map_err(|e| db_err("create schema_migrations", e))?;
    let current: i32 = txn
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .and_then(|r| r.try_get(0))
        .map_err(|e| db_err("read the schema version", e))?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::Layout {
            message: format!(
                "the database is at schema version {current}, newer than this build's {SCHEMA_VERSION}; upgrade dsh"
            ),
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        txn.batch_execute(sql)
            .map_err(|e| db_err(&format!("apply migration {version}"), e))?;
        txn.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .map_err(|e| db_err("record a migration", e))?;
    }
    let store_id: String = txn
        .query_one("SELECT value FROM store_meta WHERE key = 'store_id'", &[])
        .and_then(|r| r.try_get(0))
        .map_err(|e| db_err("read the store id", e))?;
    txn.commit()
        .map_err(|e| db_err("commit the migrations", e))?;
    Ok(store_id)
}

/// The advisory lock key of session `id` in store `store_id`: the first
/// 64 bits of an MD5 over both, computed by the server so every client
/// agrees.
const KEY_SQL: &str = "SELECT ('x' || substr(md5(convert_to($1::text, 'UTF8') || '\\x00'::bytea || $2::bytea), 1, 16))::bit(64)::bigint";

/// Whether this connection holds the advisory lock `key`.
const HELD_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
     AND classid = (($1::bigint >> 32) & 4294967295)::text::oid \
     AND objid = ($1::bigint & 4294967295)::text::oid)";

impl PgBackend {
    /// Connects and migrates; see [`open`].
    pub fn open(config: PgConfig) -> Result<PgBackend, StoreError> {
        let shared = Arc::new(Shared {
            url: config.url,
            schema: config.schema,
            conn: Mutex::new(Conn {
                client: None,
                generation: 0,
            }),
        });
        let store_id = shared.with(|client, _| migrate(client, shared.schema.as_deref()))?;
        Ok(PgBackend { shared, store_id })
    }

    /// The server and database (password redacted when displayed).
    pub fn url(&self) -> &StoreUrl {
        &self.shared.url
    }

    /// This store's id (from `store_meta`).
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    fn revision(&self, incarnation: &str, n: i64) -> Revision {
        Revision::new(format!(
            "postgres:store:{}:incarnation:{incarnation}:revision:{n}",
            self.store_id
        ))
    }

    fn header_of(&self, id: &str, text: &str) -> Result<SessionHeader, StoreError> {
        decode_stored_header(id, text)
    }

    fn locked(&self, id: &str) -> StoreError {
        StoreError::Locked {
            what: format!(
                "session \"{id}\" in the PostgreSQL store {}",
                self.shared.url
            ),
            path: Default::default(),
        }
    }

    /// Takes (or re-takes, after a reconnect) the lease `key` of `id`.
    fn take_lease(&self, client: &mut Client, id: &str, key: i64) -> Result<(), StoreError> {
        let got: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .and_then(|r| r.try_get(0))
            .map_err(|e| db_err("take the writer lease", e))?;
        if got { Ok(()) } else { Err(self.locked(id)) }
    }

    /// Sessions matching `search`, most recently active first.
    pub fn search(&self, search: &Search) -> Result<Vec<Snapshot>, StoreError> {
        let cwd = search.cwd.as_ref().map(|c| c.as_bytes().to_vec());
        let parent = search
            .parent
            .as_ref()
            .map(|p| p.as_str().as_bytes().to_vec());
        let from = search.created_from.map(to_bigint);
        let before = search.created_before.map(to_bigint);
        let limit = search.limit.map(i64::from);
        let rows = self.shared.with(|client, _| {
            client
                .query(
                    "SELECT id, header, incarnation, revision FROM sessions
                     WHERE ($1::bytea IS NULL OR cwd = $1)
                       AND ($2::bytea IS NULL OR parent = $2)
                       AND ($3::bigint IS NULL OR created_at >= $3)
                       AND ($4::bigint IS NULL OR created_at < $4)
                     ORDER BY last_activity DESC, id
                     LIMIT $5",
                    &[&cwd, &parent, &from, &before, &limit],
                )
                .map_err(|e| db_err("search sessions", e))
        })?;
        rows.iter().map(|r| self.snapshot_row(r)).collect()
    }

    fn snapshot_row(&self, row: &postgres::Row) -> Result<Snapshot, StoreError> {
        let get = |e| db_err("read a session", e);
        let id: Vec<u8> = row.try_get(0).map_err(get)?;
        let text: String = row.try_get(1).map_err(get)?;
        let incarnation: String = row.try_get(2).map_err(get)?;
        let n: i64 = row.try_get(3).map_err(get)?;
        let id = String::from_utf8_lossy(&id);
        Ok(Snapshot {
            header: self.header_of(&id, &text)?,
            revision: self.revision(&incarnation, n),
        })
    }

    /// Every sessions row (id, header, incarnation, revision), by id.
    fn session_rows(&self) -> Result<Vec<postgres::Row>, StoreError> {
        self.shared.with(|client, _| {
            client
                .query(
                    "SELECT id, header, incarnation, revision FROM sessions ORDER BY id",
                    &[],
                )
                .map_err(|e| db_err("list sessions", e))
        })
    }

    /// The stored title of `id` (the latest `session/title`), if any.
    pub fn title(&self, id: &SessionId) -> Result<Option<String>, StoreError> {
        let key = id.as_str().as_bytes();
        let row = self.shared.with(|client, _| {
            client
                .query_opt("SELECT title FROM sessions WHERE id = $1", &[&key])
                .map_err(|e| db_err("read a title", e))
        })?;
        match row {
            Some(r) => r.try_get(0).map_err(|e| db_err("read a title", e)),
            None => Ok(None),
        }
    }
}

/// The session row: header text, incarnation, revision.
fn session_row(
    txn: &mut Transaction<'_>,
    id: &[u8],
    for_update: bool,
) -> Result<Option<(String, String, i64)>, StoreError> {
    let sql = if for_update {
        "SELECT header, incarnation, revision FROM sessions WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT header, incarnation, revision FROM sessions WHERE id = $1"
    };
    let row = txn
        .query_opt(sql, &[&id])
        .map_err(|e| db_err("read a session", e))?;
    let Some(row) = row else { return Ok(None) };
    let get = |e| db_err("read a session", e);
    Ok(Some((
        row.try_get(0).map_err(get)?,
        row.try_get(1).map_err(get)?,
        row.try_get(2).map_err(get)?,
    )))
}

/// The scan rule over rows (7.1, KV6, KV10), streamed through a portal:
/// the valid contiguous prefix and the first seq to delete when a torn
/// tail follows it.
fn scan_rows(
    txn: &mut Transaction<'_>,
    id: &str,
) -> Result<(Vec<SessionEvent>, Option<u64>), StoreError> {
    let key = id.as_bytes();
    let portal = txn
        .bind(
            "SELECT seq, event FROM events WHERE session = $1 ORDER BY seq",
            &[&key],
        )
        .map_err(|e| db_err("scan events", e))?;
    let mut scan = RecordScan::new(id);
    loop {
        let rows = txn
            .query_portal(&portal, FETCH_ROWS)
            .map_err(|e| db_err("read events", e))?;
        let done = rows.len() < FETCH_ROWS as usize;
        for row in rows {
            let get = |e| db_err("read an event", e);
            let key_seq: i64 = row.try_get(0).map_err(get)?;
            let text: &str = row.try_get(1).map_err(get)?;
            let key_seq = u64::try_from(key_seq).map_err(|_| {
                StoreError::corruption(
                    id,
                    format!("corrupt session log: record ({id}, {key_seq}) has a negative seq"),
                    None,
                )
            })?;
            scan.push(key_seq, text)?;
        }
        if done {
            break;
        }
    }
    Ok(scan.finish())
}

/// Whether `events` (from `next_seq`) are exactly the stored tail that
/// ends at `stored_next`: a batch whose commit went through although its
/// answer was lost (the connection dropped during the commit). Retrying it
/// is then a no-op instead of a seq mismatch forever.
fn already_stored(
    txn: &mut Transaction<'_>,
    key: &[u8],
    events: &[SessionEvent],
    next_seq: u64,
    stored_next: u64,
) -> Result<bool, StoreError> {
    if events.is_empty() || next_seq.checked_add(events.len() as u64) != Some(stored_next) {
        return Ok(false);
    }
    let rows = txn
        .query(
            "SELECT event FROM events WHERE session = $1 AND seq >= $2 ORDER BY seq",
            &[&key, &to_bigint(next_seq)],
        )
        .map_err(|e| db_err("read the stored tail", e))?;
    if rows.len() != events.len() {
        return Ok(false);
    }
    for (row, e) in rows.iter().zip(events) {
        let text: &str = row
            .try_get(0)
            .map_err(|e| db_err("read the stored tail", e))?;
        if text != e.to_json() {
            return Ok(false);
        }
    }
    Ok(true)
}

fn insert_events(
    txn: &mut Transaction<'_>,
    id: &[u8],
    events: &[SessionEvent],
) -> Result<(), StoreError> {
    for chunk in events.chunks(INSERT_CHUNK) {
        let seqs: Vec<i64> = chunk.iter().map(|e| to_bigint(e.seq())).collect();
        let texts: Vec<String> = chunk.iter().map(SessionEvent::to_json).collect();
        txn.execute(
            "INSERT INTO events (session, seq, event)
             SELECT $1, s, e FROM unnest($2::bigint[], $3::text[]) AS t (s, e)",
            &[&id, &seqs, &texts],
        )
        .map_err(|e| db_err("insert events", e))?;
    }
    Ok(())
}

fn read_txn(client: &mut Client) -> Result<Transaction<'_>, StoreError> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(|e| db_err("begin read", e))
}

impl PgBackend {
    /// Before a write: checks that `writer` holds its lease on the live
    /// connection, reconnecting and re-taking it once if the connection was
    /// found closed (a lease lost with its connection is free only if no
    /// other writer took it meanwhile).
    fn ensure_lease(&self, writer: &mut PgWriter, id: &str) -> Result<(), StoreError> {
        let mut closed = false;
        let first = self.shared.with(|client, generation| {
            let r = self.check_lease(client, generation, writer, id);
            closed = client.is_closed();
            r
        });
        match first {
            Err(_) if closed => self
                .shared
                .with(|client, generation| self.check_lease(client, generation, writer, id)),
            other => other,
        }
    }

    /// One write transaction of session `id` under `writer`'s lease:
    /// checks the lease, runs `f`, commits.
    fn write_txn(
        &self,
        writer: &mut PgWriter,
        id: &str,
        f: impl FnOnce(&mut Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.ensure_lease(writer, id)?;
        self.shared.with(|client, generation| {
            Self::same_connection(writer, generation)?;
            let mut txn = client.transaction().map_err(|e| db_err("begin write", e))?;
            f(&mut txn)?;
            txn.commit().map_err(|e| db_err("commit", e))
        })
    }

    /// Fails when the connection changed since `writer` last checked its
    /// lease (the write must not run without it).
    fn same_connection(writer: &PgWriter, generation: u64) -> Result<(), StoreError> {
        if writer.generation == generation {
            Ok(())
        } else {
            Err(StoreError::Database {
                context: "write".into(),
                message: "the connection was lost before the write; retry".into(),
            })
        }
    }

    /// Checks the lease of `writer` on `client` (re-taking it first after a
    /// reconnect).
    fn check_lease(
        &self,
        client: &mut Client,
        generation: u64,
        writer: &mut PgWriter,
        id: &str,
    ) -> Result<(), StoreError> {
        if writer.generation != generation {
            self.take_lease(client, id, writer.key)?;
            writer.generation = generation;
        }
        let held: bool = client
            .query_one(HELD_SQL, &[&writer.key])
            .and_then(|r| r.try_get(0))
            .map_err(|e| db_err("check the writer lease", e))?;
        if held { Ok(()) } else { Err(self.locked(id)) }
    }
}

impl Backend for PgBackend {
    type Writer = PgWriter;
    type Marker = u64;

    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn locate(&self, _header: &SessionHeader) -> Option<Location> {
        None
    }

    fn has_artifact(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(self.read_revision(id)?.is_some())
    }

    fn stored_header(&self, id: &SessionId) -> Result<Option<SessionHeader>, StoreError> {
        let key = id.as_str().as_bytes();
        let row = self.shared.with(|client, _| {
            client
                .query_opt("SELECT header FROM sessions WHERE id = $1", &[&key])
                .map_err(|e| db_err("read a session", e))
        })?;
        let Some(row) = row else { return Ok(None) };
        let text: String = row.try_get(0).map_err(|e| db_err("read a session", e))?;
        self.header_of(id.as_str(), &text).map(Some)
    }

    fn load_stored(&self, id: &SessionId) -> Result<Option<Stored<u64>>, StoreError> {
        self.shared.with(|client, _| {
            let mut txn = read_txn(client)?;
            let Some((text, incarnation, n)) =
                session_row(&mut txn, id.as_str().as_bytes(), false)?
            else {
                return Ok(None);
            };
            let header = self.header_of(id.as_str(), &text)?;
            let (events, torn) = scan_rows(&mut txn, id.as_str())?;
            txn.commit().map_err(|e| db_err("end read", e))?;
            Ok(Some(Stored {
                header,
                events,
                revision: self.revision(&incarnation, n),
                torn,
                location: None,
            }))
        })
    }

    fn read_revision(&self, id: &SessionId) -> Result<Option<Revision>, StoreError> {
        let key = id.as_str().as_bytes();
        let row = self.shared.with(|client, _| {
            client
                .query_opt(
                    "SELECT incarnation, revision FROM sessions WHERE id = $1",
                    &[&key],
                )
                .map_err(|e| db_err("read a revision", e))
        })?;
        let Some(row) = row else { return Ok(None) };
        let get = |e| db_err("read a revision", e);
        let incarnation: String = row.try_get(0).map_err(get)?;
        let n: i64 = row.try_get(1).map_err(get)?;
        Ok(Some(self.revision(&incarnation, n)))
    }

    fn open_writer(&self, header: &SessionHeader) -> Result<PgWriter, StoreError> {
        let id = header.id.as_str();
        self.shared.with(|client, generation| {
            let key: i64 = client
                .query_one(KEY_SQL, &[&self.store_id, &id.as_bytes()])
                .and_then(|r| r.try_get(0))
                .map_err(|e| db_err("compute the lease key", e))?;
            self.take_lease(client, id, key)?;
            Ok(PgWriter {
                shared: self.shared.clone(),
                key,
                generation,
            })
        })
    }

    fn append_batch(
        &self,
        writer: &mut PgWriter,
        header: &SessionHeader,
        events: &[SessionEvent],
        next_seq: u64,
        materialized: bool,
    ) -> Result<(), StoreError> {
        let id = header.id.as_str();
        let key = id.as_bytes();
        self.write_txn(writer, id, |txn| {
            let current = session_row(txn, key, true)?;
            let title = batch_title(events);
            match (current, materialized) {
                (Some(_), false) => {
                    return Err(StoreError::AlreadyExists {
                        id: id.to_owned(),
                        on_disk: true,
                    });
                }
                (None, true) => return Err(StoreError::NotFound { id: id.to_owned() }),
                (None, false) => {
                    let cols = header_columns(header);
                    txn.execute(
                        "INSERT INTO sessions (id, header, cwd, parent, created_at, title, incarnation, revision)
                         VALUES ($1, $2, $3, $4, $5, $6, gen_random_uuid()::text, 1)",
                        &[&key, &cols.text, &cols.cwd, &cols.parent, &cols.created_at, &title],
                    )
                    .map_err(|e| db_err("insert a session", e))?;
                }
                (Some(_), true) => {
                    // KV5: the stored next seq must be what the caller thinks.
                    let last: Option<i64> = txn
                        .query_one("SELECT max(seq) FROM events WHERE session = $1", &[&key])
                        .and_then(|r| r.try_get(0))
                        .map_err(|e| db_err("read the last seq", e))?;
                    let stored_next = last.map_or(0, |s| u64::try_from(s).unwrap_or(0) + 1);
                    if stored_next != next_seq {
                        if already_stored(txn, key, events, next_seq, stored_next)? {
                            return Ok(());
                        }
                        return Err(StoreError::SeqMismatch {
                            id: id.to_owned(),
                            expected: stored_next,
                            index: 0,
                            got: next_seq,
                        });
                    }
                    txn.execute(
                        "UPDATE sessions SET revision = revision + 1, last_activity = now(),
                         title = coalesce($2, title) WHERE id = $1",
                        &[&key, &title],
                    )
                    .map_err(|e| db_err("update a session", e))?;
                }
            }
            insert_events(txn, key, events)
        })
    }

    fn commit_repair(
        &self,
        writer: &mut PgWriter,
        header: &SessionHeader,
        marker: Option<u64>,
        closers: &[SessionEvent],
        next_seq: u64,
    ) -> Result<(), StoreError> {
        let id = header.id.as_str();
        let key = id.as_bytes();
        self.write_txn(writer, id, |txn| {
            if session_row(txn, key, true)?.is_none() {
                return Err(StoreError::NotFound { id: id.to_owned() });
            }
            // KV7: re-scan under the lease and the row lock.
            let (events, torn) = scan_rows(txn, id)?;
            if torn != marker || events.len() as u64 != next_seq {
                return Err(StoreError::corruption(
                    id,
                    format!("repair is stale for session \"{id}\": the stored log changed"),
                    None,
                ));
            }
            if let Some(from) = marker {
                txn.execute(
                    "DELETE FROM events WHERE session = $1 AND seq >= $2",
                    &[&key, &to_bigint(from)],
                )
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
            insert_events(txn, key, closers)?;
            txn.execute(
                "UPDATE sessions SET revision = revision + 1, last_activity = now() WHERE id = $1",
                &[&key],
            )
            .map_err(|e| db_err("update a session", e))?;
            Ok(())
        })
    }

    fn list(&self) -> Result<Vec<Snapshot>, StoreError> {
        self.session_rows()?
            .iter()
            .map(|r| self.snapshot_row(r))
            .collect()
    }

    fn list_report(&self) -> Result<(Vec<Snapshot>, Vec<StoreError>), StoreError> {
        let rows = self.session_rows()?;
        let mut ok = Vec::new();
        let mut bad = Vec::new();
        for row in &rows {
            match self.snapshot_row(row) {
                Ok(s) => ok.push(s),
                Err(e) => bad.push(e),
            }
        }
        Ok((ok, bad))
    }
}

/// Test support: the test server, raw access to the rows (to simulate
/// damage the store itself never writes, KV10), the connection's server
/// process.
pub mod raw {
    use super::*;

    /// The variable naming the PostgreSQL server of the tests.
    pub const TEST_URL_ENV: &str = "DSH_TEST_POSTGRES_URL";

    /// The test server's URL from [`TEST_URL_ENV`]. Unset: `None` after a
    /// skip message on stderr, or a panic under `CI=true` (a missing
    /// server in CI is a failure, not a skip).
    #[allow(clippy::panic)]
    pub fn test_server() -> Option<String> {
        match std::env::var(TEST_URL_ENV) {
            Ok(url) if !url.is_empty() => Some(url),
            _ if std::env::var("CI").as_deref() == Ok("true") => panic!(
                "{TEST_URL_ENV} is not set and CI=true: the PostgreSQL tests must run in CI \
                 (start a server with adapters/postgres/ci/server.sh)"
            ),
            _ => {
                eprintln!(
                    "SKIPPED: {TEST_URL_ENV} is not set (start a server with adapters/postgres/ci/server.sh)"
                );
                None
            }
        }
    }

    fn exec(
        store: &PgStore,
        f: impl FnOnce(&mut Transaction<'_>) -> Result<(), postgres::Error>,
    ) -> Result<(), StoreError> {
        store.backend().shared.with(|client, _| {
            let mut txn = client.transaction().map_err(|e| db_err("begin", e))?;
            f(&mut txn).map_err(|e| db_err("raw write", e))?;
            txn.commit().map_err(|e| db_err("commit", e))
        })
    }

    /// Overwrites (or inserts) the row `(id, seq)` with `text`, bumping the
    /// session's revision.
    pub fn put_record(store: &PgStore, id: &str, seq: u64, text: &str) -> Result<(), StoreError> {
        let key = id.as_bytes();
        let seq = to_bigint(seq);
        exec(store, |txn| {
            txn.execute(
                "INSERT INTO events (session, seq, event) VALUES ($1, $2, $3)
                 ON CONFLICT (session, seq) DO UPDATE SET event = excluded.event",
                &[&key, &seq, &text],
            )?;
            txn.execute(
                "UPDATE sessions SET revision = revision + 1 WHERE id = $1",
                &[&key],
            )?;
            Ok(())
        })
    }

    /// Replaces (or inserts) the header text of `id`.
    pub fn put_header(store: &PgStore, id: &str, text: &str) -> Result<(), StoreError> {
        let key = id.as_bytes();
        exec(store, |txn| {
            txn.execute(
                "INSERT INTO sessions (id, header, incarnation, revision) VALUES ($1, $2, 'test', 1)
                 ON CONFLICT (id) DO UPDATE SET header = excluded.header,
                 revision = sessions.revision + 1",
                &[&key, &text],
            )?;
            Ok(())
        })
    }

    /// Every row of `id` in seq order: (seq, text).
    pub fn records(store: &PgStore, id: &str) -> Result<Vec<(u64, String)>, StoreError> {
        let key = id.as_bytes();
        let rows = store.backend().shared.with(|client, _| {
            client
                .query(
                    "SELECT seq, event FROM events WHERE session = $1 ORDER BY seq",
                    &[&key],
                )
                .map_err(|e| db_err("read", e))
        })?;
        rows.iter()
            .map(|r| {
                let seq: i64 = r.try_get(0).map_err(|e| db_err("read", e))?;
                let text: String = r.try_get(1).map_err(|e| db_err("read", e))?;
                Ok((u64::try_from(seq).unwrap_or(0), text))
            })
            .collect()
    }

    /// The server process id of the store's connection (for
    /// `pg_terminate_backend` in crash tests).
    pub fn backend_pid(store: &PgStore) -> Result<i32, StoreError> {
        store.backend().shared.with(|client, _| {
            client
                .query_one("SELECT pg_backend_pid()", &[])
                .and_then(|r| r.try_get(0))
                .map_err(|e| db_err("read the backend pid", e))
        })
    }
}
