//! Typed handles that correlate an output with the input that answers it.
//!
//! The machine numbers model attempts and tool bodies from one counter;
//! each kind gets its own type so a tool token cannot be passed where an
//! attempt is expected. Display and serde show the bare number.

use core::fmt;
use serde::{Deserialize, Serialize};

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name(u64);

        impl $name {
            /// The handle numbered `n` (tests and harnesses; the machine
            /// issues the real ones).
            pub const fn new(n: u64) -> Self {
                Self(n)
            }

            /// Its number.
            pub const fn get(self) -> u64 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($what, "#{}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

handle!(
    /// One model attempt ([`ModelCall::attempt`](super::ModelCall::attempt)):
    /// tag every chunk and the stream end with it.
    AttemptId,
    "attempt"
);

handle!(
    /// One tool body ([`ToolExecution::token`](super::ToolExecution::token)):
    /// answer the body's result with it.
    ToolToken,
    "tool"
);
