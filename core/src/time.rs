//! Typed time and typed handles for the driving APIs.
//!
//! # One definition of `now`
//!
//! Every input of the core machine ([`crate::agent::Agent`]) and of the
//! kernel (`dsh-runtime`'s `Kernel`) takes a [`Time`]: the host's wall clock
//! when the input happened, in milliseconds since the Unix epoch. Its
//! milliseconds are what goes into the `time` field of the events that input
//! appends ([`Time::as_millis`]).
//!
//! Deadlines (a retry delay, a tool deadline, a grace period, a write-behind
//! delay) are [`Time`]s on the same axis, computed from the `now` that armed
//! them. A runtime waits for one on its own monotonic timer (an `Instant`, a
//! hardware counter) and then reports the deadline it armed as reached
//! (`Kernel::handle_timeout(now, deadline)`); it never has to compare a wall
//! clock with a deadline, so a wall clock that jumps back neither delays nor
//! drops a timer, and one that jumps forward only fires what is due by then.
//!
//! The kernel keeps its own clock: the running maximum of every `now` it was
//! given and every deadline reported reached. Events carry that clock, so
//! their `time`s never decrease even when the host's wall clock does.

use core::fmt;
use serde::{Deserialize, Serialize};

/// A point in time: milliseconds since the Unix epoch (wall clock, UTC).
///
/// The driving APIs take it as `now`; deadlines are on the same axis (see
/// the [module docs](self)). Serialized as the bare integer.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Time(i64);

impl Time {
    /// The earliest time there is (`i64::MIN` ms): what a clock that has seen
    /// no input reads.
    pub const MIN: Time = Time(i64::MIN);
    /// The Unix epoch.
    pub const EPOCH: Time = Time(0);

    /// The time `ms` milliseconds after the Unix epoch (before it if
    /// negative).
    pub const fn from_millis(ms: i64) -> Time {
        Time(ms)
    }

    /// Milliseconds since the Unix epoch: the value an event's `time` gets.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `ms` milliseconds later, saturating at the end of the range.
    #[must_use]
    pub const fn add_millis(self, ms: u64) -> Time {
        let ms = if ms > i64::MAX as u64 {
            i64::MAX
        } else {
            ms as i64
        };
        Time(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, 0 if `earlier` is not before.
    pub const fn millis_since(self, earlier: Time) -> u64 {
        if self.0 <= earlier.0 {
            0
        } else {
            self.0.abs_diff(earlier.0)
        }
    }
}

/// `time + ms`: [`Time::add_millis`] (saturating).
impl core::ops::Add<u64> for Time {
    type Output = Time;

    fn add(self, ms: u64) -> Time {
        self.add_millis(ms)
    }
}

/// `time += ms`: [`Time::add_millis`] (saturating).
impl core::ops::AddAssign<u64> for Time {
    fn add_assign(&mut self, ms: u64) {
        *self = self.add_millis(ms);
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Time({}ms)", self.0)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_and_since_floors_at_zero() {
        assert_eq!(
            Time::from_millis(i64::MAX - 1).add_millis(5).as_millis(),
            i64::MAX
        );
        assert_eq!(
            Time::from_millis(10).add_millis(u64::MAX).as_millis(),
            i64::MAX
        );
        assert_eq!(Time::MIN.add_millis(3).as_millis(), i64::MIN + 3);
        assert_eq!(Time::from_millis(5).millis_since(Time::from_millis(9)), 0);
        assert_eq!(Time::from_millis(9).millis_since(Time::from_millis(5)), 4);
        assert_eq!(
            Time::from_millis(i64::MAX).millis_since(Time::MIN),
            u64::MAX
        );
    }

    #[test]
    fn serializes_as_the_bare_integer() {
        let t = Time::from_millis(1_700_000_000_123);
        assert_eq!(serde_json::to_string(&t).unwrap(), "1700000000123");
        assert_eq!(
            serde_json::from_str::<Time>("-4").unwrap(),
            Time::from_millis(-4)
        );
    }
}
