//! Create, resume and fork: the session a kernel starts from (the runtime
//! does the store I/O around these).

use alloc::string::String;
use alloc::vec::Vec;

use dsh_core::session::{Session, SessionEvent, SessionHeader};
use dsh_core::{SessionId, Time};

use crate::types::KernelError;

/// A fresh session `id` created at `now`, recording `cwd` (absolute) in its
/// header.
pub fn create_session(
    id: SessionId,
    now: Time,
    cwd: Option<String>,
) -> Result<Session, KernelError> {
    let mut header = SessionHeader::new(id, u64::try_from(now.as_millis()).unwrap_or(0));
    header.cwd = cwd;
    header.validate().map_err(KernelError::Header)?;
    Ok(Session::new(header))
}

/// A stored session to resume: validated (the store already repaired a
/// crashed log), then marked with `session/end-seed` unless it already
/// ends with one (IB-14, ES3). Events from `events.len()` on are new.
pub fn resume_session(
    header: SessionHeader,
    events: Vec<SessionEvent>,
    now: Time,
) -> Result<Session, KernelError> {
    let mut session = Session::restore(header, events).map_err(KernelError::Seed)?;
    session
        .mark_end_seed(now.as_millis())
        .map_err(KernelError::Append)?;
    Ok(session)
}

/// The child of a stored parent at `at_seq` (default: its last event),
/// named `new_id` (session.md F3-F8); its seed ends with `session/end-seed`.
pub fn fork_session(
    parent_header: SessionHeader,
    parent_events: Vec<SessionEvent>,
    at_seq: Option<u64>,
    new_id: SessionId,
    now: Time,
) -> Result<Session, KernelError> {
    let parent = Session::restore(parent_header, parent_events).map_err(KernelError::Seed)?;
    parent
        .fork(at_seq, new_id, now.as_millis())
        .map_err(KernelError::Fork)
}
