//! Identity, jitter and (with the `std` feature) time, injected by the
//! runtime: the kernel never reads a clock or an entropy source.

use alloc::format;
use alloc::string::String;

use dsh_core::agent::{
    FixedJitter, IdPurpose, IdSource, JitterSource, SeededJitter, SequentialIds,
};
use dsh_core::{MessageId, RetryId};

/// How an agent mints message, retry and user-message ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdMode {
    /// Random UUID v4 from a small generator seeded by the runtime.
    #[default]
    Uuid,
    /// The core's deterministic [`SequentialIds`] (`A1`, `R1`, `X1`,
    /// `retry-1`, …) and `U1`, `U2`, … for user messages (tests; together
    /// with a fixed clock the log is byte-identical in every runtime).
    Sequential,
}

/// xorshift64*: a deterministic generator for ids and jitter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A UUID v4 in canonical lower-case text.
    pub fn uuid_v4(&mut self) -> String {
        let hi = self.next_u64();
        let lo = self.next_u64();
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&hi.to_be_bytes());
        b[8..].copy_from_slice(&lo.to_be_bytes());
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let mut s = String::with_capacity(36);
        for (i, byte) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                s.push('-');
            }
            s.push_str(&format!("{byte:02x}"));
        }
        s
    }
}

/// The id source of an agent ([`IdMode`] over a seed).
#[derive(Clone, Debug)]
pub enum Ids {
    /// UUID v4 ids.
    Uuid(Rng),
    /// Deterministic ids.
    Sequential {
        /// The core's sequence.
        core: SequentialIds,
        /// User messages minted so far.
        user: u64,
    },
}

impl Ids {
    /// Ids of `mode`; `seed` feeds the UUID generator.
    pub fn new(mode: IdMode, seed: u64) -> Ids {
        match mode {
            IdMode::Uuid => Ids::Uuid(Rng::new(seed)),
            IdMode::Sequential => Ids::Sequential {
                core: SequentialIds::default(),
                user: 0,
            },
        }
    }

    /// An id for a user message a handle builds from text.
    pub fn user_message_id(&mut self) -> MessageId {
        match self {
            Ids::Uuid(rng) => MessageId(rng.uuid_v4()),
            Ids::Sequential { user, .. } => {
                *user += 1;
                MessageId(format!("U{user}"))
            }
        }
    }
}

impl IdSource for Ids {
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId {
        match self {
            Ids::Uuid(rng) => MessageId(rng.uuid_v4()),
            Ids::Sequential { core, .. } => core.message_id(purpose),
        }
    }

    fn retry_id(&mut self) -> RetryId {
        match self {
            Ids::Uuid(rng) => RetryId(rng.uuid_v4()),
            Ids::Sequential { core, .. } => core.retry_id(),
        }
    }
}

/// Retry jitter: random under UUID ids, the reference's middle
/// sample under the deterministic mode.
pub(crate) enum Jitter {
    Fixed(FixedJitter),
    Seeded(SeededJitter),
}

impl Jitter {
    pub(crate) fn new(mode: IdMode, seed: u64) -> Jitter {
        match mode {
            IdMode::Uuid => Jitter::Seeded(SeededJitter(seed ^ 0x9E37_79B9_7F4A_7C15)),
            IdMode::Sequential => Jitter::Fixed(FixedJitter::default()),
        }
    }
}

impl JitterSource for Jitter {
    fn sample(&mut self) -> f64 {
        match self {
            Jitter::Fixed(j) => j.sample(),
            Jitter::Seeded(j) => j.sample(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v4_has_the_version_and_variant_bits() {
        let mut rng = Rng::new(42);
        for _ in 0..50 {
            let u = rng.uuid_v4();
            let b = u.as_bytes();
            assert_eq!(u.len(), 36);
            assert_eq!(b[14], b'4', "{u}");
            assert!(matches!(b[19], b'8' | b'9' | b'a' | b'b'), "{u}");
        }
    }

    #[test]
    fn sequential_ids_follow_the_test_vector_names() {
        let mut ids = Ids::new(IdMode::Sequential, 0);
        assert_eq!(ids.user_message_id().as_str(), "U1");
        assert_eq!(ids.user_message_id().as_str(), "U2");
        let a = ids.message_id(IdPurpose::Assistant { turn: 1, step: 1 });
        assert_eq!(a.as_str(), "A1");
        assert_eq!(ids.retry_id().as_str(), "retry-1");
    }
}
