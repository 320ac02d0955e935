//! Time and identity, supplied by the shell (the kernel never reads a
//! clock or invents ids): the OS seed of the id generator.

use dsh_runtime::Rng;

pub use dsh_shell::os_seed;

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
