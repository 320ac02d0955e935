//! The JSONL storage hooks (persistence.md 3.1) over the layout of 5.1.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_core::SessionId;
use dsh_core::jsonl::{
    LogError, ScanError, Scanner, decode_header_line, encode_batch, encode_header_line, header_len,
};
use dsh_core::session::{SeedError, SessionEvent, SessionHeader};
use dsh_store::{Backend, Location, Revision, Snapshot, StoreError, Stored};

use crate::Compression;
use crate::frames::{FrameWriter, decode_frame, decode_torn, scan_frames};
use crate::fsio::{self, Stat};
use crate::layout::{encode_id, project_key};
use crate::locks::{DEFAULT_MAX_HELD_LOCKS, LockCache, LockClaim};

/// The transcript name in raw mode.
pub const RAW_NAME: &str = "session.jsonl";
/// The transcript name in zstd mode.
pub const ZSTD_NAME: &str = "session.jsonl.zstd";
/// The writer lock file in a session directory.
pub const LOCK_NAME: &str = "session.lock";

/// The JSONL backend: a root directory of project directories of session
/// directories, each holding one transcript.
pub struct JsonlBackend {
    root: PathBuf,
    compression: Compression,
    pack_chunks: bool,
    /// The session locks held, bounded.
    locks: Arc<LockCache>,
    /// Idle zstd contexts, shared by all sessions (at most
    /// [`MAX_IDLE_COMPRESSORS`]).
    compressors: Mutex<Vec<FrameWriter>>,
}

/// The most idle zstd compression contexts a store keeps.
const MAX_IDLE_COMPRESSORS: usize = 4;

impl std::fmt::Debug for JsonlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlBackend")
            .field("root", &self.root)
            .field("compression", &self.compression)
            .field("pack_chunks", &self.pack_chunks)
            .finish_non_exhaustive()
    }
}

/// A transcript's logical text (OP2).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RawArtifact {
    /// The header.
    pub header: SessionHeader,
    /// Always `session.jsonl`.
    pub filename: &'static str,
    /// The exact logical text written, without a torn final fragment.
    pub content: String,
}

/// The torn-tail marker: where to truncate, and the events recovered from a
/// torn zstd frame that must be written again (RZ6).
#[derive(Debug)]
pub struct JsonlMarker {
    truncate_to: u64,
    recovered: Vec<SessionEvent>,
}

/// The writer state of one session: its claim on the session lock and
/// the transcript path. No descriptor stays open between writes: the
/// transcript is opened for each write, and the lock may be let go while
/// the session is idle (see [`crate::JsonlConfig::max_held_locks`]).
pub struct JsonlWriter {
    claim: LockClaim,
    path: PathBuf,
}

fn corrupt(message: String) -> LogError {
    LogError::Corrupt { message }
}

fn zstd_corrupt(what: impl std::fmt::Display) -> LogError {
    corrupt(format!("corrupt Zstandard session log: {what}"))
}

pub(crate) fn scan_error(id: &str, e: ScanError) -> LogError {
    match e {
        ScanError::Corrupt { message } => LogError::Corrupt { message },
        ScanError::Invalid { index, error } => LogError::InvalidEvent {
            session_id: id.to_owned(),
            error: SeedError::new(index, error),
        },
        other => corrupt(other.to_string()),
    }
}

type Parsed = (SessionHeader, Vec<SessionEvent>, Option<JsonlMarker>);

/// A raw transcript (6.2) after its scan in pieces: torn (RR2) when bytes
/// follow the last committed line.
fn raw_parsed(scan: crate::raw_read::RawScan) -> Parsed {
    let marker = (scan.committed < scan.len).then_some(JsonlMarker {
        truncate_to: scan.committed,
        recovered: Vec::new(),
    });
    (scan.header, scan.events, marker)
}

/// Reads a zstd transcript (6.3, RZ1–RZ6).
fn parse_zstd(bytes: &[u8]) -> Result<Parsed, LogError> {
    let scan = scan_frames(bytes).map_err(zstd_corrupt)?;
    let Some(first) = scan.frames.first() else {
        return Err(zstd_corrupt("empty or header-less Zstandard session log"));
    };
    let head = decode_frame(bytes.get(first.clone()).unwrap_or(&[]))
        .map_err(|e| zstd_corrupt(format!("frame 1 failed to decode: {e}")))?;
    if header_len(&head) != Some(head.len()) {
        return Err(zstd_corrupt(
            "the first frame is not exactly one header line",
        ));
    }
    let header = decode_header_line(&head)?;
    let id = header.id.as_str().to_owned();
    let mut scanner = Scanner::new(0);
    for (k, range) in scan.frames.iter().enumerate().skip(1) {
        let plain = decode_frame(bytes.get(range.clone()).unwrap_or(&[]))
            .map_err(|e| zstd_corrupt(format!("frame {} failed to decode: {e}", k + 1)))?;
        scanner.feed(&plain).map_err(|e| scan_error(&id, e))?;
    }
    if scanner.committed() != scanner.consumed() || scanner.issue().is_some() {
        let why = scanner.issue().unwrap_or("a partial line");
        return Err(zstd_corrupt(format!(
            "complete frame contains a torn JSONL record ({why})"
        )));
    }
    let marker = match scan.torn {
        None => None,
        Some(t) => {
            let complete = scanner.events().len();
            let plain = decode_torn(bytes.get(t..).unwrap_or(&[]));
            scanner.feed(&plain).map_err(|e| scan_error(&id, e))?;
            let recovered = scanner.events().get(complete..).unwrap_or(&[]).to_vec();
            Some(JsonlMarker {
                truncate_to: t as u64,
                recovered,
            })
        }
    };
    Ok((header, scanner.into_events(), marker))
}

impl JsonlBackend {
    /// A backend over `root` (made absolute; an existing root must be a
    /// directory, a missing one is created on first materialization, L1).
    pub fn new(
        root: &Path,
        compression: Compression,
        pack_chunks: bool,
    ) -> Result<JsonlBackend, StoreError> {
        let root = std::path::absolute(root)
            .map_err(|e| StoreError::io(format!("resolve store root {}", root.display()), e))?;
        match fs::metadata(&root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(StoreError::Layout {
                    message: format!("store root {} is not a directory", root.display()),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(format!("stat {}", root.display()), e)),
        }
        Ok(JsonlBackend {
            root,
            compression,
            pack_chunks,
            locks: LockCache::new(DEFAULT_MAX_HELD_LOCKS),
            compressors: Mutex::new(Vec::new()),
        })
    }

    /// The same holding at most `n` (at least 1) session locks at a time
    /// ([`crate::JsonlConfig::max_held_locks`]).
    pub fn with_max_held_locks(mut self, n: usize) -> JsonlBackend {
        self.locks = LockCache::new(n);
        self
    }

    /// Each of `parts` as one frame, appended to `out` (zstd mode), with a
    /// pooled compression context; in raw mode the parts as they are.
    fn encode_frames(&self, parts: &[&[u8]], out: &mut Vec<u8>) -> Result<(), StoreError> {
        if self.compression == Compression::None {
            for p in parts {
                out.extend_from_slice(p);
            }
            return Ok(());
        }
        let pooled = self.compressors.lock().ok().and_then(|mut pool| pool.pop());
        let mut frames = match pooled {
            Some(f) => f,
            None => FrameWriter::new().map_err(|e| StoreError::io("start a zstd context", e))?,
        };
        for p in parts {
            frames
                .frame(p, out)
                .map_err(|e| StoreError::io("compress a batch", e))?;
        }
        if let Ok(mut pool) = self.compressors.lock()
            && pool.len() < MAX_IDLE_COMPRESSORS
        {
            pool.push(frames);
        }
        Ok(())
    }

    /// Runs `op` holding `writer`'s session lock (taken again if it was
    /// let go, refused when another writer changed the transcript since).
    fn locked<T>(
        &self,
        writer: &mut JsonlWriter,
        op: impl FnOnce(&Path) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        writer.claim.begin()?;
        let result = op(&writer.path);
        writer.claim.end();
        result
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn file_name(&self) -> &'static str {
        match self.compression {
            Compression::Zstd => ZSTD_NAME,
            Compression::None => RAW_NAME,
        }
    }

    fn other_name(&self) -> &'static str {
        match self.compression {
            Compression::Zstd => RAW_NAME,
            Compression::None => ZSTD_NAME,
        }
    }

    fn segment(id: &SessionId) -> Result<String, StoreError> {
        encode_id(id.as_str()).ok_or_else(|| StoreError::Invalid {
            message: "session id must be non-empty".into(),
        })
    }

    /// The transcript path of `header` (L2–L4).
    pub fn transcript_path(&self, header: &SessionHeader) -> Option<PathBuf> {
        let seg = encode_id(header.id.as_str())?;
        Some(
            self.root
                .join(project_key(header.cwd.as_deref()))
                .join(seg)
                .join(self.file_name()),
        )
    }

    fn mode_error(&self, found: &Path) -> StoreError {
        StoreError::Layout {
            message: format!(
                "found {} in a store configured for {} transcripts; a root holds one encoding only: use a separate root or the matching compression mode",
                found.display(),
                self.file_name()
            ),
        }
    }

    fn project_dirs(&self) -> Result<Vec<PathBuf>, StoreError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io(format!("list {}", self.root.display()), e)),
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| StoreError::io(format!("list {}", self.root.display()), e))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs)
    }

    /// Lookup by id (L5): the transcript in any project directory; the other
    /// encoding or an old flat file is a layout error; two hits are an error.
    fn find(&self, id: &SessionId) -> Result<Option<PathBuf>, StoreError> {
        let seg = Self::segment(id)?;
        let mut hits = Vec::new();
        for dir in self.project_dirs()? {
            let session_dir = dir.join(&seg);
            let mine = session_dir.join(self.file_name());
            if mine.exists() {
                hits.push(mine);
            }
            let other = session_dir.join(self.other_name());
            if other.exists() {
                return Err(self.mode_error(&other));
            }
            for flat in [format!("{seg}.jsonl"), format!("{seg}.jsonl.zstd")] {
                let flat = dir.join(flat);
                if flat.is_file() {
                    return Err(StoreError::Layout {
                        message: format!(
                            "{} uses the old flat layout, which this store does not read; move it to <project>/<session>/{}",
                            flat.display(),
                            self.file_name()
                        ),
                    });
                }
            }
        }
        if hits.len() > 1 {
            return Err(StoreError::Layout {
                message: format!(
                    "duplicate JSONL session id \"{id}\" in multiple project directories: {}",
                    hits.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(hits.pop())
    }

    /// L5 identity: the header names `id` and maps to `path`.
    fn check_identity(
        &self,
        id: &SessionId,
        header: &SessionHeader,
        path: &Path,
    ) -> Result<(), StoreError> {
        let expected = self.transcript_path(header);
        let same = expected.as_deref() == Some(path)
            || expected.as_ref().is_some_and(|e| {
                matches!((fs::canonicalize(e), fs::canonicalize(path)), (Ok(a), Ok(b)) if a == b)
            });
        if header.id != *id || !same {
            return Err(StoreError::corruption(
                id.as_str(),
                format!(
                    "session log {} names session \"{}\" with cwd {:?}, which does not map to this file (expected session \"{id}\")",
                    path.display(),
                    header.id,
                    header.cwd
                ),
                Some(path.to_path_buf()),
            ));
        }
        Ok(())
    }

    fn revision_of(&self, stat: &Stat) -> Revision {
        Revision::new(format!("jsonl:{}:{}", self.root.display(), stat.text()))
    }

    /// Reads only the header of a transcript (L6, PE4): `Ok(None)` when the
    /// file has no complete first line / frame (or a raw first line that is
    /// not a header).
    fn read_header(&self, path: &Path, id: &str) -> Result<Option<SessionHeader>, StoreError> {
        let location = Some(path.to_path_buf());
        match self.compression {
            Compression::None => {
                let Some(bytes) = fsio::read_prefix(path, |b| b.contains(&b'\n'))? else {
                    return Ok(None);
                };
                let Some(n) = header_len(&bytes) else {
                    return Ok(None);
                };
                match decode_header_line(bytes.get(..n).unwrap_or(&[])) {
                    Ok(h) => Ok(Some(h)),
                    Err(LogError::FormatUnsupported { message }) => {
                        Err(StoreError::FormatUnsupported {
                            id: id.to_owned(),
                            message,
                            location,
                        })
                    }
                    Err(_) => Ok(None),
                }
            }
            Compression::Zstd => {
                let Some(bytes) = fsio::read_prefix(path, |b| {
                    scan_frames(b).map_or(true, |s| !s.frames.is_empty())
                })?
                else {
                    return Ok(None);
                };
                let scan = scan_frames(&bytes)
                    .map_err(|m| StoreError::from_log(id, zstd_corrupt(m), location.clone()))?;
                let Some(first) = scan.frames.first() else {
                    return Ok(None);
                };
                let head = decode_frame(bytes.get(first.clone()).unwrap_or(&[])).map_err(|e| {
                    StoreError::from_log(
                        id,
                        zstd_corrupt(format!("frame 1 failed to decode: {e}")),
                        location.clone(),
                    )
                })?;
                if header_len(&head) != Some(head.len()) {
                    return Err(StoreError::from_log(
                        id,
                        zstd_corrupt("the first frame is not exactly one header line"),
                        location,
                    ));
                }
                decode_header_line(&head)
                    .map(Some)
                    .map_err(|e| StoreError::from_log(id, e, location))
            }
        }
    }

    /// OP2 `readRaw`: the logical text of `id`'s transcript (`filename` is
    /// always `session.jsonl`): in zstd mode the decoded complete frames, in
    /// raw mode the file; in both, a torn final fragment is omitted (the
    /// normalization recommended by Q10). `None` when absent; a header that
    /// is invalid or names another session is an error.
    pub fn read_raw(&self, id: &SessionId) -> Result<Option<RawArtifact>, StoreError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        let Some((bytes, _)) = fsio::read_stable(&path)? else {
            return Ok(None);
        };
        let location = Some(path.clone());
        let logical = match self.compression {
            Compression::None => {
                let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                bytes.get(..end).unwrap_or(&[]).to_vec()
            }
            Compression::Zstd => {
                let scan = scan_frames(&bytes).map_err(|m| {
                    StoreError::from_log(id.as_str(), zstd_corrupt(m), location.clone())
                })?;
                let mut out = Vec::with_capacity(bytes.len() * 4);
                for (k, range) in scan.frames.iter().enumerate() {
                    let plain =
                        decode_frame(bytes.get(range.clone()).unwrap_or(&[])).map_err(|e| {
                            StoreError::from_log(
                                id.as_str(),
                                zstd_corrupt(format!("frame {} failed to decode: {e}", k + 1)),
                                location.clone(),
                            )
                        })?;
                    out.extend_from_slice(&plain);
                }
                out
            }
        };
        let Some(n) = header_len(&logical) else {
            return Err(StoreError::from_log(
                id.as_str(),
                corrupt("corrupt session log: empty or header-less session log".into()),
                location,
            ));
        };
        let header = decode_header_line(logical.get(..n).unwrap_or(&[]))
            .map_err(|e| StoreError::from_log(id.as_str(), e, location.clone()))?;
        self.check_identity(id, &header, &path)?;
        let content = String::from_utf8(logical).map_err(|_| {
            StoreError::corruption(
                id.as_str(),
                "corrupt session log: the log is not valid UTF-8",
                location,
            )
        })?;
        Ok(Some(RawArtifact {
            header,
            filename: RAW_NAME,
            content,
        }))
    }

    fn write_batch(
        &self,
        writer: &mut JsonlWriter,
        events: &[SessionEvent],
    ) -> Result<(), StoreError> {
        self.locked(writer, |path| self.append_events(path, events))
    }

    /// Encodes `events` and appends them durably to `path` (the caller
    /// holds the lock).
    fn append_events(&self, path: &Path, events: &[SessionEvent]) -> Result<(), StoreError> {
        let mut plain = Vec::with_capacity(events.len() * 160);
        encode_batch(events, self.pack_chunks, &mut plain);
        let bytes = match self.compression {
            Compression::Zstd => {
                let mut out = Vec::with_capacity(plain.len() / 2 + 64);
                self.encode_frames(&[&plain], &mut out)?;
                out
            }
            Compression::None => plain,
        };
        let mut file = fsio::open_append(path)?;
        fsio::append_durably(&mut file, path, &bytes)
    }
}

impl Backend for JsonlBackend {
    type Writer = JsonlWriter;
    type Marker = JsonlMarker;

    fn kind(&self) -> &'static str {
        "jsonl"
    }

    fn locate(&self, header: &SessionHeader) -> Option<Location> {
        self.transcript_path(header)
            .map(|path| Location::Jsonl { path })
    }

    fn has_artifact(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(self.find(id)?.is_some())
    }

    fn stored_header(&self, id: &SessionId) -> Result<Option<SessionHeader>, StoreError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        let Some(header) = self.read_header(&path, id.as_str())? else {
            return Err(StoreError::from_log(
                id.as_str(),
                corrupt("corrupt session log: empty or header-less session log".into()),
                Some(path),
            ));
        };
        self.check_identity(id, &header, &path)?;
        Ok(Some(header))
    }

    fn load_stored(&self, id: &SessionId) -> Result<Option<Stored<JsonlMarker>>, StoreError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        let (parsed, stat) = match self.compression {
            // Read in pieces: the file is not held beside its events.
            Compression::None => match crate::raw_read::read_raw(&path)? {
                Some((scan, stat)) => (scan.map(raw_parsed), stat),
                None => return Ok(None),
            },
            Compression::Zstd => match fsio::read_stable(&path)? {
                Some((bytes, stat)) => (parse_zstd(&bytes), stat),
                None => return Ok(None),
            },
        };
        let (header, events, torn) =
            parsed.map_err(|e| StoreError::from_log(id.as_str(), e, Some(path.clone())))?;
        self.check_identity(id, &header, &path)?;
        Ok(Some(Stored {
            header,
            events,
            revision: self.revision_of(&stat),
            torn,
            location: Some(path),
        }))
    }

    fn read_revision(&self, id: &SessionId) -> Result<Option<Revision>, StoreError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        Ok(Stat::of(&path)?.map(|s| self.revision_of(&s)))
    }

    fn open_writer(&self, header: &SessionHeader) -> Result<JsonlWriter, StoreError> {
        let Some(path) = self.transcript_path(header) else {
            return Err(StoreError::Invalid {
                message: "session id must be non-empty".into(),
            });
        };
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        fsio::ensure_dir(&dir)?;
        let claim = LockClaim::take(
            &self.locks,
            dir.join(LOCK_NAME),
            format!("session \"{}\"", header.id),
            path.clone(),
        )?;
        Ok(JsonlWriter { claim, path })
    }

    fn append_batch(
        &self,
        writer: &mut JsonlWriter,
        header: &SessionHeader,
        events: &[SessionEvent],
        _next_seq: u64,
        materialized: bool,
    ) -> Result<(), StoreError> {
        if materialized {
            return self.write_batch(writer, events);
        }
        // M1, M2: header and first batch published together.
        let mut head = Vec::with_capacity(256);
        encode_header_line(header, &mut head);
        let mut plain = Vec::with_capacity(events.len() * 160);
        encode_batch(events, self.pack_chunks, &mut plain);
        let mut content = Vec::with_capacity(head.len() + plain.len());
        self.encode_frames(&[&head, &plain], &mut content)?;
        drop(plain);
        let published = self.locked(writer, |path| fsio::publish(path, &content))?;
        if !published {
            return Err(StoreError::AlreadyExists {
                id: header.id.to_string(),
                on_disk: true,
            });
        }
        Ok(())
    }

    fn commit_repair(
        &self,
        writer: &mut JsonlWriter,
        _header: &SessionHeader,
        marker: Option<JsonlMarker>,
        closers: &[SessionEvent],
        _next_seq: u64,
    ) -> Result<(), StoreError> {
        self.locked(writer, |path| {
            let mut batch = Vec::new();
            if let Some(marker) = marker {
                fsio::truncate_durably(path, marker.truncate_to)?;
                batch = marker.recovered;
            }
            batch.extend_from_slice(closers);
            if batch.is_empty() {
                return Ok(());
            }
            self.append_events(path, &batch)
        })
    }

    fn list(&self) -> Result<Vec<Snapshot>, StoreError> {
        self.list_inner(false).map(|(out, _)| out)
    }

    fn list_report(&self) -> Result<(Vec<Snapshot>, Vec<StoreError>), StoreError> {
        self.list_inner(true)
    }
}

impl JsonlBackend {
    /// Lists every session; with `skip_bad`, a session whose header cannot
    /// be read or does not map to its folder is skipped and reported.
    fn list_inner(&self, skip_bad: bool) -> Result<(Vec<Snapshot>, Vec<StoreError>), StoreError> {
        let mut out: Vec<Snapshot> = Vec::new();
        let mut problems: Vec<StoreError> = Vec::new();
        for project in self.project_dirs()? {
            let entries = fs::read_dir(&project)
                .map_err(|e| StoreError::io(format!("list {}", project.display()), e))?;
            let mut sessions = Vec::new();
            for entry in entries {
                let entry =
                    entry.map_err(|e| StoreError::io(format!("list {}", project.display()), e))?;
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    sessions.push(path);
                } else if name.ends_with(".jsonl") || name.ends_with(".jsonl.zstd") {
                    return Err(StoreError::Layout {
                        message: format!(
                            "{} uses the old flat layout, which this store does not read",
                            path.display()
                        ),
                    });
                }
            }
            sessions.sort();
            for dir in sessions {
                let other = dir.join(self.other_name());
                if other.exists() {
                    return Err(self.mode_error(&other));
                }
                let path = dir.join(self.file_name());
                let name = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let checked = self.read_header(&path, &name).and_then(|h| match h {
                    Some(header) => {
                        let id = header.id.clone();
                        self.check_identity(&id, &header, &path)
                            .map(|()| Some(header))
                    }
                    None => Ok(None),
                });
                let header = match checked {
                    Ok(Some(header)) => header,
                    Ok(None) => continue,
                    Err(e) if skip_bad => {
                        problems.push(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let id = header.id.clone();
                let Some(stat) = Stat::of(&path)? else {
                    continue;
                };
                if out.iter().any(|s| s.header.id == id) {
                    return Err(StoreError::Layout {
                        message: format!(
                            "duplicate JSONL session id \"{id}\" in multiple project directories"
                        ),
                    });
                }
                out.push(Snapshot {
                    header,
                    revision: self.revision_of(&stat),
                });
            }
        }
        out.sort_by(|a, b| a.header.id.cmp(&b.header.id));
        Ok((out, problems))
    }
}
