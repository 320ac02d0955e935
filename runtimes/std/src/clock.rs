//! Time and identity, supplied by the shell (the kernel never reads a
//! clock or invents ids): the OS seed of the id generator.

use dsh_runtime::Rng;

/// 64 bits from the OS (falls back to the clock and the address of a stack
/// value if the OS source fails).
pub fn os_seed() -> u64 {
    let mut buf = [0u8; 8];
    match getrandom::fill(&mut buf) {
        Ok(()) => u64::from_le_bytes(buf),
        Err(_) => {
            let t = dsh_host::Clock::System.now_ms() as u64;
            let local = 0u8;
            t ^ ((&local as *const u8 as u64).rotate_left(32))
        }
    }
}

/// A fresh random session id (UUID v4).
pub fn new_session_id() -> dsh_core::SessionId {
    dsh_core::SessionId::from(Rng::new(os_seed()).uuid_v4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_fresh_uuids() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 36);
    }
}
