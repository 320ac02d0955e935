//! Identity, jitter and (with the `std` feature) time, injected by the
//! runtime: the kernel never reads a clock or an entropy source.

use alloc::format;
use alloc::string::String;

use dsh_core::agent::{
    FixedJitter, IdPurpose, IdSource, JitterSource, SeededJitter, SequentialIds,
};
use dsh_core::session::{EventData, Session};
use dsh_core::{MessageId, RetryId};

/// How an agent mints message, retry and user-message ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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

    /// Moves the generator to a state derived from the current one and
    /// `value` (splitmix64 finaliser; never the all-zero state).
    fn mix(&mut self, value: u64) {
        let mut z = (self.0 ^ value).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        self.0 = if z == 0 { 0x9E37_79B9_7F4A_7C15 } else { z };
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
#[non_exhaustive]
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

    /// Continues after every id `session` already holds, so no id minted
    /// next repeats one of them (a resumed or forked log; loop.md Q12).
    ///
    /// [`IdMode::Sequential`] moves each counter past the largest `A<n>`,
    /// `R<n>`, `X<n>`, `U<n>` and `retry-<n>` in the log.
    /// [`IdMode::Uuid`] mixes a digest of the session id, the log length
    /// and every message and retry-chain id into the generator, so a
    /// different log (every resume marks or extends it, every fork has its
    /// own id) starts a different stream; deterministic, as the kernel
    /// takes no randomness.
    pub fn continue_after(&mut self, session: &Session) {
        match self {
            Ids::Uuid(rng) => {
                let mut digest = Fnv::default();
                digest.write(session.id().as_str().as_bytes());
                digest.write(&session.len().to_le_bytes());
                for_each_id(session, |id| digest.write(id.as_bytes()));
                rng.mix(digest.0);
            }
            Ids::Sequential { core, user } => for_each_id(session, |id| {
                core.observe_message_id(id);
                core.observe_retry_id(id);
                if let Some(n) = id.strip_prefix('U').and_then(|d| d.parse::<u64>().ok()) {
                    *user = (*user).max(n);
                }
            }),
        }
    }

    /// An id for a user message a handle builds from text.
    pub fn user_message_id(&mut self) -> MessageId {
        match self {
            Ids::Uuid(rng) => MessageId(rng.uuid_v4()),
            Ids::Sequential { user, .. } => {
                *user = user.saturating_add(1);
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

/// Calls `f` with every message id and retry-chain id `session` holds.
fn for_each_id(session: &Session, mut f: impl FnMut(&str)) {
    for e in session.events() {
        match e.data() {
            EventData::LlmRetry(r) => {
                if let Some(id) = &r.retry_id {
                    f(id.as_str());
                }
            }
            EventData::LlmRetryStarted(r) => f(r.retry_id.as_str()),
            EventData::InboxSpliced(s) => s.inserted.iter().for_each(|m| f(m.id.as_str())),
            data => {
                if let Some(m) = data.message() {
                    f(m.id.as_str());
                }
            }
        }
    }
}

/// FNV-1a, 64 bits: a digest of the log for [`Ids::continue_after`].
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A field separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
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
