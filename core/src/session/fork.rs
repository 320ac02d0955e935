//! Fork at a boundary (session.md 10, F3–F8).

use alloc::vec::Vec;
use core::fmt;

use crate::ids::SessionId;
use crate::json::MAX_SAFE_INTEGER;

use super::error::SeedError;
use super::event::EventData;
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
