//! Where an agent's session comes from: created, resumed or forked in the
//! store. Blocking (the store is); an async shell runs these on its
//! blocking pool.

use std::path::Path;

use dsh_core::SessionId;
use dsh_core::session::Session;
use dsh_host::{Clock, ShellError, absolute_cwd};
use dsh_store::{Cancel, SessionStore};

/// A new session `id` working in `cwd`, registered with `store` (nothing
/// else is written until the first checkpoint).
pub fn create_session(
    store: &dyn SessionStore,
    id: SessionId,
    clock: &Clock,
    cwd: &Path,
) -> Result<Session, ShellError> {
    let session = dsh_runtime::create_session(id, clock.now(), absolute_cwd(cwd))?;
    store.create(session.header().clone())?;
    Ok(session)
}

/// Stored session `id`, with how many of its events are stored. The
/// store's load repairs a crashed log (a torn tail dropped, an interrupted
/// turn closed); a `session/end-seed` marker is appended unless the log
/// ends with one (IB-14, ES3); turn numbering and the inbox continue (V30,
/// IB-8).
pub fn resume_session(
    store: &dyn SessionStore,
    id: &SessionId,
    clock: &Clock,
) -> Result<(Session, u64), ShellError> {
    let loaded = store.load(id)?;
    let stored = loaded.events.len() as u64;
    let session = dsh_runtime::resume_session(loaded.header, loaded.events, clock.now())?;
    Ok((session, stored))
}

/// The child of stored session `from` at seq `at_seq` (default: its last
/// event) as new session `new_id` (F3-F8), adopted by `store`
/// ([`adopt_session`]).
pub fn fork_session(
    store: &dyn SessionStore,
    from: &SessionId,
    at_seq: Option<u64>,
    new_id: SessionId,
    clock: &Clock,
) -> Result<Session, ShellError> {
    let parent = store.inspect(from, &Cancel::new())?;
    let now = clock.now();
    let child = dsh_runtime::fork_session(parent.header, parent.events, at_seq, new_id, now)?;
    adopt_session(store, &child)?;
    Ok(child)
}

/// Registers a session built elsewhere (a fork, a subagent's child) with
/// `store` and writes its seed events, if any.
pub fn adopt_session(store: &dyn SessionStore, session: &Session) -> Result<(), ShellError> {
    store.create(session.header().clone())?;
    if !session.is_empty() {
        store.append(session.id(), session.events())?;
    }
    Ok(())
}
