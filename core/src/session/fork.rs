//! Fork at a boundary (session.md 10, F3–F8).

use alloc::vec::Vec;
use core::fmt;

use crate::ids::SessionId;
use crate::json::MAX_SAFE_INTEGER;

use super::error::SeedError;
use super::event::{EventData, SessionEvent};
use super::header::SessionHeader;
use super::session::Session;

/// Why a fork was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForkError {
    /// F4 `INVALID_BOUNDARY`: the boundary is not the seq of an event.
    InvalidBoundary {
        /// The boundary asked for.
        boundary: u64,
        /// The source log length.
        len: u64,
    },
    /// F5 `OPEN_TURN`: the boundary falls inside a turn.
    OpenTurn {
        /// The boundary.
        boundary: u64,
    },
    /// F7: `now` is not a valid `createdAt` (non-negative safe integer).
    InvalidCreatedAt {
        /// The time given.
        now: i64,
    },
    /// The child failed seed validation (cannot happen for a valid source).
    Seed(SeedError),
}

impl ForkError {
    /// The reference error code (`INVALID_BOUNDARY`, `OPEN_TURN`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            ForkError::InvalidBoundary { .. } => "INVALID_BOUNDARY",
            ForkError::OpenTurn { .. } => "OPEN_TURN",
            ForkError::InvalidCreatedAt { .. } => "INVALID_CREATED_AT",
            ForkError::Seed(_) => "INVALID_SEED",
        }
    }
}

impl fmt::Display for ForkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForkError::InvalidBoundary { boundary, len } => write!(
                f,
                "INVALID_BOUNDARY: fork boundary {boundary} is not an event of a log of {len}"
            ),
            ForkError::OpenTurn { boundary } => write!(
                f,
                "OPEN_TURN: fork boundary {boundary} falls inside an open turn"
            ),
            ForkError::InvalidCreatedAt { now } => write!(
                f,
                "INVALID_CREATED_AT: {now} is not a non-negative safe integer"
            ),
            ForkError::Seed(e) => write!(f, "INVALID_SEED: {e}"),
        }
    }
}

impl core::error::Error for ForkError {}

/// The boundary a fork takes by default (loop.md SA-3) over `events` as
/// stored (without the closers a load adds): the last event when no turn
/// is open, else the last `turn/end` before the open turn, the balanced
/// prefix of completed turns. `None`: the log is empty, or its only turn is
/// still open (nothing completed to fork).
pub fn completed_boundary(events: &[SessionEvent]) -> Option<u64> {
    let open = events
        .iter()
        .rev()
        .find(|e| matches!(e.data(), EventData::TurnStart(_) | EventData::TurnEnd(_)))
        .is_some_and(|e| matches!(e.data(), EventData::TurnStart(_)));
    if !open {
        return events.last().map(SessionEvent::seq);
    }
    events
        .iter()
        .rev()
        .find(|e| matches!(e.data(), EventData::TurnEnd(_)))
        .map(SessionEvent::seq)
}

impl Session {
    /// Forks this session at `boundary` (default: the last seq) into a child
    /// `child_id` created at `now` (F3–F8): the child's seed is a copy of
    /// `events[0..=boundary]`, its header copies `cwd` and records
    /// `parentSession` and `seedLength`, and it ends with a
    /// `session/end-seed` marker unless the seed already does. The store-level
    /// checks F1/F2 (live ids) belong to the store.
    pub fn fork(
        &self,
        boundary: Option<u64>,
        child_id: impl Into<SessionId>,
        now: i64,
    ) -> Result<Session, ForkError> {
        let len = self.len();
        let created_at = u64::try_from(now)
            .ok()
            .filter(|n| *n <= MAX_SAFE_INTEGER)
            .ok_or(ForkError::InvalidCreatedAt { now })?;
        let seed: Vec<_> = match boundary {
            None if len == 0 => Vec::new(),
            b => {
                let b = b.unwrap_or(len.saturating_sub(1));
                if b >= len || self.event(b).map(|e| e.seq()) != Some(b) {
                    return Err(ForkError::InvalidBoundary { boundary: b, len });
                }
                let upto = &self.events()[..=(b as usize)];
                let last_turn_event = upto
                    .iter()
                    .rev()
                    .find(|e| matches!(e.data(), EventData::TurnStart(_) | EventData::TurnEnd(_)));
                if matches!(
                    last_turn_event.map(|e| e.data()),
                    Some(EventData::TurnStart(_))
                ) {
                    return Err(ForkError::OpenTurn { boundary: b });
                }
                upto.to_vec()
            }
        };
        let mut header = SessionHeader::new(child_id, created_at);
        header.cwd = self.header().cwd.clone();
        header.parent_session = Some(self.id().clone());
        header.seed_length = Some(seed.len() as u64);
        Session::from_seed(header, seed, now).map_err(ForkError::Seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{TurnEnd, TurnEndReason, TurnStart};

    fn log(kinds: &[char]) -> Vec<SessionEvent> {
        let mut turn = 0;
        kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let data: EventData = match k {
                    's' => {
                        turn += 1;
                        TurnStart { turn }.into()
                    }
                    'e' => TurnEnd {
                        turn,
                        reason: TurnEndReason::Completed,
                    }
                    .into(),
                    _ => EventData::plugin("x/note", &serde_json::json!({})),
                };
                SessionEvent::new(i as u64, 0, data)
            })
            .collect()
    }

    #[test]
    fn sa3_default_boundary_is_the_last_turn_end_before_an_open_turn() {
        assert_eq!(completed_boundary(&[]), None);
        // No turn open: the whole log (F3).
        assert_eq!(
            completed_boundary(&log(&['p', 's', 'p', 'e', 'p'])),
            Some(4)
        );
        // Turn 2 is open: through turn 1's end, not its trailing events.
        assert_eq!(
            completed_boundary(&log(&['s', 'e', 'p', 's', 'p'])),
            Some(1)
        );
        // The only turn is open: nothing completed.
        assert_eq!(completed_boundary(&log(&['p', 's', 'p'])), None);
    }
}
