//! The coordinator: [`SessionStore`] over a [`Backend`]'s storage hooks
//! (persistence.md 3.2–3.4, OP3–OP10, 6.5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_core::SessionId;
use dsh_core::jsonl::{LogError, check_types, interrupted_turn_closers};
use dsh_core::session::{
    ChunkView, EventData, Session, SessionEvent, SessionHeader, has_negative_zero, types,
};

use crate::{
    Backend, Cancel, Inspection, Location, MAX_SAFE_INTEGER, Revision, SessionStore, Snapshot,
    StoreError, Stored,
};

/// How many times a cold load re-reads a log that changed under it before
/// giving up (6.5: "re-read until the stored revision is stable").
const MAX_LOAD_PASSES: usize = 8;

/// Coordinator settings (the default: no extra known types, no shadow
/// validation).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CoordinatorConfig {
    /// Event types this runtime knows beyond the core list (session.md Q5):
    /// a stored event of such a type loads without `ignorable: true`.
    pub extra_known_types: Vec<String>,
    /// A debug option, off by default: validate every appended event a
    /// second time, against a shadow copy of the session's state (the seed
    /// rules V1–V9 with M1–M6 and S1–S9, session.md 5.4), so a bad append
    /// is refused instead of producing a log that later fails to load
    /// (persistence.md Q2). The runtimes append only what their own
    /// `Session` already validated, so this finds store-caller bugs, at the
    /// cost of one in-memory copy of each tracked log and a second
    /// validation of each event. The reference does not validate appends.
    pub validate_appends: bool,
}

impl CoordinatorConfig {
    /// The defaults: no extra known types, no shadow validation.
    pub fn new() -> Self {
        CoordinatorConfig::default()
    }

    /// With the shadow validation of appends on or off
    /// ([`validate_appends`](Self::validate_appends)).
    pub fn with_validate_appends(mut self, on: bool) -> Self {
        self.validate_appends = on;
        self
    }

    /// With `types` known beyond the core list
    /// ([`extra_known_types`](Self::extra_known_types)).
    pub fn with_extra_known_types(mut self, types: Vec<String>) -> Self {
        self.extra_known_types = types;
        self
    }
}

struct Entry<W> {
    /// Whether this store tracks the id (created, adopted or loaded).
    tracked: bool,
    header: Option<SessionHeader>,
    /// The stored log length.
    cursor: u64,
    materialized: bool,
    /// The shadow validation state (the stored events, Q2), when
    /// `validate_appends` is on.
    session: Option<Session>,
    writer: Option<W>,
}

impl<W> Entry<W> {
    fn untracked() -> Self {
        Entry {
            tracked: false,
            header: None,
            cursor: 0,
            materialized: false,
            session: None,
            writer: None,
        }
    }
}

/// A [`SessionStore`] over a [`Backend`]: per-id state `{header, cursor,
/// materialized}`, one operation per id at a time, adoption, contiguity,
/// and the cold load with its committed repair.
pub struct Coordinator<B: Backend> {
    backend: B,
    config: CoordinatorConfig,
    entries: Mutex<HashMap<SessionId, Slot<B::Writer>>>,
}

type Slot<W> = Arc<Mutex<Entry<W>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a guard cannot leave the map inconsistent (every
    // mutation is a single insert/remove), so poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Checks a batch before it is written (OP4.1, OP4.3, session.md
/// J2): no retired vocabulary (`request/header-delta`, `mode/set`, a
/// `request/header` whose reason is `fallback`) and no `-0` anywhere.
/// Typed events cannot hold NaN or infinities.
pub fn check_batch(events: &[SessionEvent]) -> Result<(), StoreError> {
    for e in events {
        let t = e.event_type();
        if t == types::REQUEST_HEADER_DELTA || t == "mode/set" {
            return Err(StoreError::Invalid {
                message: format!(
                    "event type \"{t}\" (seq {}) is a retired format and cannot be appended",
                    e.seq()
                ),
            });
        }
        // A text, reasoning or tool-call delta (almost every event of a log)
        // holds only strings and integers: no `-0` and nothing retired, so it
        // is not serialized just to be searched.
        if let EventData::AssistantChunk(c) = e.data()
            && !matches!(c.view(), ChunkView::Other(_))
        {
            continue;
        }
        let json = e.to_json();
        if t == types::REQUEST_HEADER && json.contains("\"reason\":\"fallback\"") {
            let fallback = serde_json::from_str::<serde_json::Value>(&json)
                .ok()
                .and_then(|v| v.pointer("/data/reason").cloned())
                .is_some_and(|r| r == "fallback");
            if fallback {
                return Err(StoreError::Invalid {
                    message: format!(
                        "request/header with reason \"fallback\" (seq {}) is a retired format and cannot be appended",
                        e.seq()
                    ),
                });
            }
        }
        if has_negative_zero(json.as_bytes()) {
            return Err(StoreError::Invalid {
                message: format!(
                    "event seq {} is not losslessly JSON-serializable: it holds a negative zero",
                    e.seq()
                ),
            });
        }
    }
    Ok(())
}

/// The checks of a cold read after the scan (6.5 steps 3–7): header rules,
/// known types, closers of an interrupted turn, full seed validation of
/// `prefix ++ closers`. Returns the balanced session (no end-seed marker)
/// and how many of its events are closers.
pub fn validate_stored(
    header: &SessionHeader,
    events: Vec<SessionEvent>,
    extra_known: &[&str],
) -> Result<(Session, usize), LogError> {
    let id = header.id.as_str();
    header.validate().map_err(|error| LogError::InvalidHeader {
        session_id: id.to_owned(),
        error,
    })?;
    check_types(id, &events, extra_known)?;
    let closers = interrupted_turn_closers(&events);
    let n_closers = closers.len();
    let mut all = events;
    all.extend(closers);
    let session =
        Session::restore(header.clone(), all).map_err(|error| LogError::InvalidEvent {
            session_id: id.to_owned(),
            error,
        })?;
    Ok((session, n_closers))
}

fn check_contiguous(id: &SessionId, next: u64, events: &[SessionEvent]) -> Result<(), StoreError> {
    for (index, e) in events.iter().enumerate() {
        let expected = next + index as u64;
        if e.seq() != expected {
            return Err(StoreError::SeqMismatch {
                id: id.to_string(),
                expected,
                index,
                got: e.seq(),
            });
        }
    }
    Ok(())
}

impl<B: Backend> Coordinator<B> {
    /// A coordinator over `backend`.
    pub fn new(backend: B, config: CoordinatorConfig) -> Self {
        Coordinator {
            backend,
            config,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn entry(&self, id: &SessionId) -> Slot<B::Writer> {
        lock(&self.entries)
            .entry(id.clone())
            .or_insert_with(|| Arc::new(Mutex::new(Entry::untracked())))
            .clone()
    }

    fn extra_known(&self) -> Vec<&str> {
        self.config
            .extra_known_types
            .iter()
            .map(String::as_str)
            .collect()
    }

    fn validate(
        &self,
        stored: &Stored<B::Marker>,
        events: Vec<SessionEvent>,
    ) -> Result<(Session, usize), StoreError> {
        let extra = self.extra_known();
        validate_stored(&stored.header, events, &extra).map_err(|e| {
            StoreError::from_log(stored.header.id.as_str(), e, stored.location.clone())
        })
    }

    /// The cold path of OP5 (6.5): read, validate, commit the repair under
    /// the writer lock, re-read until clean. Leaves the entry tracked with
    /// its writer open.
    fn cold_load(
        &self,
        id: &SessionId,
        entry: &mut Entry<B::Writer>,
    ) -> Result<Inspection, StoreError> {
        if entry.writer.is_none() {
            // Lock first, then read: the bytes we repair must be the ones no
            // other writer can change.
            let Some(header) = self.backend.stored_header(id)? else {
                return Err(StoreError::NotFound { id: id.to_string() });
            };
            entry.writer = Some(self.backend.open_writer(&header)?);
        }
        for _ in 0..MAX_LOAD_PASSES {
            let Some(mut stored) = self.backend.load_stored(id)? else {
                return Err(StoreError::NotFound { id: id.to_string() });
            };
            let events = std::mem::take(&mut stored.events);
            let stored_len = events.len() as u64;
            let (session, n_closers) = self.validate(&stored, events)?;
            if stored.torn.is_none() && n_closers == 0 {
                let balanced = session.events().to_vec();
                entry.tracked = true;
                entry.cursor = stored_len;
                entry.materialized = true;
                entry.header = Some(stored.header.clone());
                entry.session = self.config.validate_appends.then_some(session);
                return Ok(Inspection {
                    header: stored.header,
                    events: balanced,
                    revision: stored.revision,
                });
            }
            if self.backend.read_revision(id)?.as_ref() != Some(&stored.revision) {
                continue;
            }
            let closers = session
                .events()
                .get(stored_len as usize..)
                .unwrap_or(&[])
                .to_vec();
            let Some(writer) = entry.writer.as_mut() else {
                continue;
            };
            self.backend.commit_repair(
                writer,
                &stored.header,
                stored.torn,
                &closers,
                stored_len,
            )?;
        }
        Err(StoreError::corruption(
            id.as_str(),
            format!(
                "session \"{id}\" kept changing while it was being loaded ({MAX_LOAD_PASSES} passes)"
            ),
            None,
        ))
    }

    /// Q2: validates `events` as the next events of the session (they
    /// continue the stored log) and adds them to the validation state. On
    /// a rule failure the state is restored and nothing is written.
    fn validate_next(
        &self,
        id: &SessionId,
        entry: &mut Entry<B::Writer>,
        events: &[SessionEvent],
    ) -> Result<(), StoreError> {
        let Some(session) = entry.session.as_mut() else {
            return Ok(());
        };
        let keep = session.events().len();
        for e in events {
            if let Err(error) = session.append_event(e.clone()) {
                Self::truncate_session(entry, keep);
                return Err(StoreError::Invalid {
                    message: format!(
                        "event seq {} cannot be appended to session \"{id}\": {error}",
                        e.seq()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Drops validation-state events from `keep` on (a refused batch, or a
    /// batch whose write failed). Rebuilding costs O(log); it only runs on
    /// failures.
    fn truncate_session(entry: &mut Entry<B::Writer>, keep: usize) {
        let Some(session) = entry.session.take() else {
            return;
        };
        if session.events().len() == keep {
            entry.session = Some(session);
            return;
        }
        let header = session.header().clone();
        let mut events = session.into_events();
        events.truncate(keep);
        // A prefix of a valid log is valid; if not, validation is off for
        // this id rather than wrong.
        entry.session = Session::restore(header, events).ok();
    }

    /// Makes the entry tracked: adopts a stored log (OP4.6) if needed.
    fn ensure_tracked(
        &self,
        id: &SessionId,
        entry: &mut Entry<B::Writer>,
    ) -> Result<(), StoreError> {
        if !entry.tracked {
            self.cold_load(id, entry)?;
        }
        Ok(())
    }

    /// Writes `events` (which continue the cursor) durably.
    fn write(
        &self,
        id: &SessionId,
        entry: &mut Entry<B::Writer>,
        events: &[SessionEvent],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let Some(header) = entry.header.clone() else {
            return Err(StoreError::NotFound { id: id.to_string() });
        };
        if entry.writer.is_none() {
            entry.writer = Some(self.backend.open_writer(&header)?);
        }
        let Some(writer) = entry.writer.as_mut() else {
            return Err(StoreError::NotFound { id: id.to_string() });
        };
        self.backend
            .append_batch(writer, &header, events, entry.cursor, entry.materialized)?;
        entry.materialized = true;
        entry.cursor += events.len() as u64;
        Ok(())
    }

    fn inspect_cold(&self, id: &SessionId) -> Result<Inspection, StoreError> {
        let Some(mut stored) = self.backend.load_stored(id)? else {
            return Err(StoreError::NotFound { id: id.to_string() });
        };
        let events = std::mem::take(&mut stored.events);
        let (session, _) = self.validate(&stored, events)?;
        Ok(Inspection {
            header: stored.header,
            events: session.into_events(),
            revision: stored.revision,
        })
    }
}

impl<B: Backend> SessionStore for Coordinator<B> {
    fn kind(&self) -> &'static str {
        self.backend.kind()
    }

    fn append_blocks(&self) -> bool {
        self.backend.blocks()
    }

    fn locate(&self, header: &SessionHeader) -> Option<Location> {
        self.backend.locate(header)
    }

    fn create(&self, header: SessionHeader) -> Result<(), StoreError> {
        if header.created_at > MAX_SAFE_INTEGER {
            return Err(StoreError::Invalid {
                message: "session metadata createdAt must be a non-negative safe integer".into(),
            });
        }
        header.validate().map_err(|e| StoreError::Invalid {
            message: format!("session metadata is invalid: {e}"),
        })?;
        let id = header.id.clone();
        let slot = self.entry(&id);
        let mut entry = lock(&slot);
        if entry.tracked {
            return Err(StoreError::AlreadyExists {
                id: id.to_string(),
                on_disk: false,
            });
        }
        if self.backend.has_artifact(&id)? {
            return Err(StoreError::AlreadyExists {
                id: id.to_string(),
                on_disk: true,
            });
        }
        entry.tracked = true;
        entry.session = self
            .config
            .validate_appends
            .then(|| Session::new(header.clone()));
        entry.header = Some(header);
        entry.cursor = 0;
        entry.materialized = false;
        Ok(())
    }

    fn append(&self, id: &SessionId, events: &[SessionEvent]) -> Result<(), StoreError> {
        check_batch(events)?;
        if events.is_empty() {
            return Ok(());
        }
        let slot = self.entry(id);
        let mut entry = lock(&slot);
        self.ensure_tracked(id, &mut entry)?;
        check_contiguous(id, entry.cursor, events)?;
        let keep = entry.cursor as usize;
        self.validate_next(id, &mut entry, events)?;
        let written = self.write(id, &mut entry, events);
        if written.is_err() {
            Self::truncate_session(&mut entry, keep);
        }
        written
    }

    fn load(&self, id: &SessionId) -> Result<Inspection, StoreError> {
        let slot = self.entry(id);
        let mut entry = lock(&slot);
        if entry.tracked && !entry.materialized {
            return Err(StoreError::NotFound { id: id.to_string() });
        }
        self.cold_load(id, &mut entry)
    }

    fn inspect(&self, id: &SessionId, cancel: &Cancel) -> Result<Inspection, StoreError> {
        cancel.check()?;
        let slot = self.entry(id);
        let _entry = lock(&slot);
        let result = self.inspect_cold(id);
        cancel.check()?;
        result
    }

    fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &Cancel,
    ) -> Result<(SessionHeader, Vec<SessionEvent>), StoreError> {
        cancel.check()?;
        if from_seq > MAX_SAFE_INTEGER {
            return Err(StoreError::Invalid {
                message: format!("fromSeq must be a non-negative safe integer, got {from_seq}"),
            });
        }
        let slot = self.entry(id);
        let _entry = lock(&slot);
        let extra = self.extra_known();
        let result = self.backend.load_stored_from(id, from_seq, &extra);
        cancel.check()?;
        result?.ok_or_else(|| StoreError::NotFound { id: id.to_string() })
    }

    fn list(&self, cancel: &Cancel) -> Result<Vec<SessionHeader>, StoreError> {
        Ok(self
            .list_snapshots(cancel)?
            .into_iter()
            .map(|s| s.header)
            .collect())
    }

    fn list_snapshots(&self, cancel: &Cancel) -> Result<Vec<Snapshot>, StoreError> {
        cancel.check()?;
        let result = self.backend.list();
        cancel.check()?;
        result
    }

    fn list_report(
        &self,
        cancel: &Cancel,
    ) -> Result<(Vec<SessionHeader>, Vec<StoreError>), StoreError> {
        cancel.check()?;
        let result = self.backend.list_report();
        cancel.check()?;
        let (snapshots, problems) = result?;
        Ok((snapshots.into_iter().map(|s| s.header).collect(), problems))
    }

    fn revision(&self, id: &SessionId) -> Result<Revision, StoreError> {
        self.backend
            .read_revision(id)?
            .ok_or_else(|| StoreError::NotFound { id: id.to_string() })
    }

    fn release(&self, id: &SessionId) -> Result<(), StoreError> {
        let slot = lock(&self.entries).remove(id);
        if let Some(slot) = slot {
            // Wait for an operation still running on the id.
            drop(lock(&slot));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::StreamChunk;
    use dsh_core::session::AssistantChunk;

    #[test]
    fn check_batch_skips_deltas_but_still_finds_negative_zero() {
        // OP4.3: deltas hold no floats, so they pass without being searched;
        // an event that can hold a float is still serialized and checked.
        let delta = |seq, c| SessionEvent::new(seq, 1, AssistantChunk::new(1, 1, c));
        let batch = [
            delta(0, StreamChunk::text_delta(0, "-0")),
            delta(
                1,
                StreamChunk::tool_call_delta(1, "c", Some("f"), "{\"x\":-0}"),
            ),
        ];
        assert!(check_batch(&batch).is_ok());
        let zero = serde_json::json!({"v": -0.0});
        let plugin = SessionEvent::new(2, 1, EventData::plugin("x/y", &zero));
        let err = check_batch(&[plugin]).unwrap_err();
        assert!(err.to_string().contains("negative zero"), "{err}");
        // A chunk that is not a delta can hold one (FR-2 keeps unknown
        // finish reasons verbatim).
        let reason = serde_json::from_str(r#"{"kind":"paused","v":-0.0}"#).unwrap();
        let finish = delta(3, StreamChunk::finish(reason));
        let err = check_batch(&[finish]).unwrap_err();
        assert!(err.to_string().contains("negative zero"), "{err}");
    }
}
