//! Shell-side identity: UUID v4 strings from a per-agent RNG, and the
//! wall clock as epoch milliseconds. The core never reads either.

use std::time::{SystemTime, UNIX_EPOCH};

use dsh_core::agent::{IdPurpose, IdSource, JitterSource};
use dsh_core::{MessageId, RetryId};

/// Epoch milliseconds now (0 before 1970, saturating far in the future).
pub fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// A random UUID v4 in its hyphenated lowercase form (RFC 9562 §5.4).
pub fn uuid_v4(rng: &mut fastrand::Rng) -> String {
    let mut b = rng.u128(..).to_be_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        s.push(char::from_digit(u32::from(byte & 0x0f), 16).unwrap_or('0'));
    }
    s
}

/// The agent's [`IdSource`] and [`JitterSource`]: UUID v4 message and
/// retry-chain ids, uniform jitter samples, all from one seeded RNG.
#[derive(Clone, Debug)]
pub struct UuidIds {
    rng: fastrand::Rng,
}

impl UuidIds {
    /// Seeded from the process RNG.
    pub fn new() -> Self {
        UuidIds {
            rng: fastrand::Rng::new(),
        }
    }

    /// Seeded explicitly (reproducible ids).
    pub fn with_seed(seed: u64) -> Self {
        UuidIds {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// A fresh UUID v4.
    pub fn uuid(&mut self) -> String {
        uuid_v4(&mut self.rng)
    }
}

impl Default for UuidIds {
    fn default() -> Self {
        UuidIds::new()
    }
}

impl IdSource for UuidIds {
    fn message_id(&mut self, _purpose: IdPurpose<'_>) -> MessageId {
        MessageId(self.uuid())
    }

    fn retry_id(&mut self) -> RetryId {
        RetryId(self.uuid())
    }
}

impl JitterSource for UuidIds {
    fn sample(&mut self) -> f64 {
        self.rng.f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v4_shape() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..100 {
            let u = uuid_v4(&mut rng);
            assert_eq!(u.len(), 36);
            let parts: Vec<&str> = u.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12]
            );
            assert!(parts[2].starts_with('4'), "version nibble: {u}");
            assert!(
                matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
                "variant bits: {u}"
            );
            assert!(u.bytes().all(|c| c == b'-' || c.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn ids_differ() {
        let mut ids = UuidIds::new();
        let a = ids.uuid();
        let b = ids.uuid();
        assert_ne!(a, b);
    }
}
