//! Replaying a recorded session through the [`Agent`](super::Agent) (a pure driver).
//!
//! The recorded log is split into what the outside world did and what the
//! loop wrote:
//!
//! - **inputs**: inbox insertions (`send`), cancellations, plugin and
//!   tool-owned events (appended at their positions), surface replacements
//!   (compaction);
//! - **the outside world's answers**: model streams (per attempt), tool
//!   results (per call), and seam decisions that show in the log (the
//!   messages a pre-step entered, the config of each request, whether a
//!   failed request was retried, a rejection or an error);
//! - **core events**: everything the loop writes (turns, steps, chunks,
//!   messages, tool calls and results, request records, inbox splices).
//!
//! [`replay`] feeds the inputs and answers to a fresh agent over the
//! recording's seed (the events up to its last `session/end-seed`) and
//! compares every core event it produces with the recorded one (all fields
//! but `time`, which recordings normalise). The first difference stops the
//! replay and is reported with a reason.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::session::{SessionEvent, SessionHeader};

// `driver` names it as `super::DEFAULT_MAX_PARALLEL_TOOL_CALLS`.
use super::DEFAULT_MAX_PARALLEL_TOOL_CALLS;

mod answers;
mod compare;
mod driver;
mod instances;
mod recording;

use driver::replay_from;
use instances::instances;

pub use compare::{Difference, ReplayReport, comparable, is_core_event};
pub use instances::seed_length;
pub use recording::recorded_outcome;

/// How to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// [HEAD Δ H-1]: the recording keeps interrupted prefixes.
    pub interrupted_prefix: bool,
    /// [HEAD Δ H-2]: the recording latches wakes.
    pub wake_latch: bool,
    /// The recording went through the conformance fixture-token
    /// substitution, which leaves `"tools":[]` where the scrubbed tool list
    /// was: compare `request/header` events by their canonical header
    /// (session.md 7.1) instead of their text.
    pub fixture_tokens: bool,
}

impl Default for ReplayOptions {
    /// The reference's newest behaviour (both HEAD deltas), which the
    /// conformance recordings show.
    fn default() -> Self {
        ReplayOptions {
            interrupted_prefix: true,
            wake_latch: true,
            fixture_tokens: false,
        }
    }
}

/// Reads a raw JSONL recording (persistence.md 6) and replays it. With
/// `options.fixture_tokens` the conformance substitutions are applied first
/// ([`fixture_tokens`](crate::jsonl::fixture_tokens)). Only the stored
/// events are replayed (no crash-repair closers).
pub fn replay_jsonl(
    bytes: &[u8],
    options: ReplayOptions,
) -> Result<ReplayReport, crate::jsonl::LogError> {
    let substituted;
    let bytes = if options.fixture_tokens {
        substituted = crate::jsonl::fixture_tokens(bytes);
        &substituted[..]
    } else {
        bytes
    };
    let loaded = crate::jsonl::load_log(bytes, &[])?;
    let header = loaded.session.header().clone();
    // A torn tail or an open last turn: the recording stops mid-way, so
    // reproducing what it holds does not check it (`dsh log check` fails it
    // too; the repaired log replays).
    let incomplete = match loaded.truncate_to {
        Some(at) => Some(format!(
            "the recording has a torn tail ({} bytes after offset {at} are not committed); replay the repaired log",
            bytes.len() - at
        )),
        None if !loaded.closers.is_empty() => Some(String::from(
            "the recording ends inside an open turn; replay the repaired log",
        )),
        None => None,
    };
    let mut events = loaded.session.into_events();
    events.truncate(loaded.stored);
    let stored = events.len() as u64;
    let mut report = replay(header, events, options);
    if let (Some(reason), None) = (incomplete, &report.first_difference) {
        report.push(Difference::at(stored, None, None, reason));
    }
    Ok(report)
}

/// Replays `events` (a whole recorded log) under `header`.
///
/// A log can hold the work of several loop instances, and every one is
/// replayed:
///
/// - the seed ([`seed_length`]) is restored, not replayed;
/// - each later `session/end-seed` (a resume: the constructor marks the
///   stored history it reopened, session.md 8.1) ends one instance and the
///   next starts after it;
/// - a crash repair's closers (persistence.md 6.4) end one, and a turn
///   whose `request/header` says `resume` starts another.
///
/// Each instance's part is replayed by a fresh loop over the session
/// restored from the recorded events before it, so the closers, markers and
/// seed are inputs, never mismatches, and a difference in one instance does
/// not stop the others.
pub fn replay(
    header: SessionHeader,
    events: Vec<SessionEvent>,
    options: ReplayOptions,
) -> ReplayReport {
    let seed_len = seed_length(&header, &events);
    let parts = instances(&events, seed_len);
    let core_in = |(a, b): (usize, usize)| events[a..b].iter().filter(|e| is_core_event(e)).count();
    let mut report = ReplayReport {
        reproduced: 0,
        total: parts.iter().map(|p| core_in(*p)).sum(),
        seed: seed_len,
        instances: parts.len(),
        first_difference: None,
        differences: Vec::new(),
    };
    for (start, end) in parts {
        let part = replay_from(header.clone(), events[..end].to_vec(), start, options);
        report.reproduced += part.reproduced;
        if let Some(d) = part.first_difference {
            report.push(d);
        } else if part.reproduced != core_in((start, end)) {
            report.push(Difference::at(
                end as u64,
                None,
                None,
                String::from("the replay stopped before the end of this loop instance"),
            ));
        }
    }
    report
}
