//! Time and identity, supplied by the shell (the core never reads a clock
//! or invents ids).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_core::agent::{IdPurpose, IdSource, SequentialIds};
use dsh_core::{MessageId, RetryId};

/// Where `now` (epoch milliseconds) comes from.
#[derive(Clone, Default)]
pub enum Clock {
    /// `SystemTime::now()`.
    #[default]
    System,
    /// A fixed instant (tests: byte-identical logs).
    Fixed(i64),
    /// A shared counter the caller moves (tests).
    Manual(Arc<AtomicI64>),
}

impl core::fmt::Debug for Clock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Clock::System => f.write_str("System"),
            Clock::Fixed(t) => write!(f, "Fixed({t})"),
            Clock::Manual(t) => write!(f, "Manual({})", t.load(Ordering::Relaxed)),
        }
    }
}

impl Clock {
    /// The current time in epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            Clock::Fixed(t) => *t,
            Clock::Manual(t) => t.load(Ordering::Relaxed),
        }
    }
}

/// How the shell mints message, retry and session ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdMode {
    /// Random UUID v4 (a small RNG seeded from the OS).
    #[default]
    Uuid,
    /// The core's deterministic [`SequentialIds`] (`A1`, `R1`, …) and `U1`,
    /// `U2`, … for user messages (tests).
    Sequential,
}

/// xorshift64* seeded from the OS.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from the OS (falls back to the clock and the
    /// address of a stack value if the OS source fails).
    pub fn from_os() -> Rng {
        let mut buf = [0u8; 8];
        let seed = match getrandom::fill(&mut buf) {
            Ok(()) => u64::from_le_bytes(buf),
            Err(_) => {
                let t = Clock::System.now_ms() as u64;
                let local = 0u8;
                t ^ ((&local as *const u8 as u64).rotate_left(32))
            }
        };
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A random UUID v4 in its canonical lower-case text form.
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

/// The shell's id source: UUIDs or the deterministic sequence.
#[derive(Clone, Debug)]
pub(crate) enum ShellIds {
    Uuid(Rng),
    Sequential { core: SequentialIds, user: u64 },
}

impl ShellIds {
    pub(crate) fn new(mode: IdMode) -> ShellIds {
        match mode {
            IdMode::Uuid => ShellIds::Uuid(Rng::from_os()),
            IdMode::Sequential => ShellIds::Sequential {
                core: SequentialIds::default(),
                user: 0,
            },
        }
    }

    /// An id for a user message the shell builds from text.
    pub(crate) fn user_message_id(&mut self) -> MessageId {
        match self {
            ShellIds::Uuid(rng) => MessageId(rng.uuid_v4()),
            ShellIds::Sequential { user, .. } => {
                *user += 1;
                MessageId(format!("U{user}"))
            }
        }
    }
}

impl IdSource for ShellIds {
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId {
        match self {
            ShellIds::Uuid(rng) => MessageId(rng.uuid_v4()),
            ShellIds::Sequential { core, .. } => core.message_id(purpose),
        }
    }

    fn retry_id(&mut self) -> RetryId {
        match self {
            ShellIds::Uuid(rng) => RetryId(rng.uuid_v4()),
            ShellIds::Sequential { core, .. } => core.retry_id(),
        }
    }
}

/// A fresh random session id (UUID v4).
pub fn new_session_id() -> dsh_core::SessionId {
    dsh_core::SessionId::from(Rng::from_os().uuid_v4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v4_has_the_version_and_variant_bits() {
        let mut rng = Rng(42);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100 {
            let u = rng.uuid_v4();
            let b = u.as_bytes();
            assert_eq!(u.len(), 36);
            assert_eq!((b[8], b[13], b[18], b[23]), (b'-', b'-', b'-', b'-'));
            assert_eq!(b[14], b'4', "{u}");
            assert!(matches!(b[19], b'8' | b'9' | b'a' | b'b'), "{u}");
            assert!(
                u.bytes()
                    .all(|c| c == b'-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            seen.insert(u);
        }
        assert_eq!(seen.len(), 100);
    }

    #[test]
    fn sequential_ids_follow_the_test_vector_names() {
        let mut ids = ShellIds::new(IdMode::Sequential);
        assert_eq!(ids.user_message_id().as_str(), "U1");
        assert_eq!(ids.user_message_id().as_str(), "U2");
        let a = ids.message_id(IdPurpose::Assistant { turn: 1, step: 1 });
        assert_eq!(a.as_str(), "A1");
        assert_eq!(ids.retry_id().as_str(), "retry-1");
    }

    #[test]
    fn clocks() {
        assert_eq!(Clock::Fixed(7).now_ms(), 7);
        let t = Arc::new(AtomicI64::new(5));
        let c = Clock::Manual(t.clone());
        t.store(9, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 9);
        // 2020-01-01 < now < 2100-01-01.
        let now = Clock::System.now_ms();
        assert!(now > 1_577_836_800_000 && now < 4_102_444_800_000);
    }
}
