//! Tiny crate for checking .ci/public-api: 15 items (a, S, S::new, S::CAP,
//! E, f, T, T::go, T::K, T::Out, hidden_fn, CONST, g, Alias, swap), 3
//! members (S.x, E::A, E::B), 1 impl (Clone for S; the derived Debug does
//! not count).
mod private {
    /// Re-exported twice (at a::S and at the root as S2): counts once.
    pub struct S {
        pub x: u8,
        y: u8,
    }
    impl S {
        /// pub: counts.
        pub fn new() -> Self {
            S { x: 0, y: 0 }
        }
        /// pub assoc const: counts.
        pub const CAP: usize = 1;
        fn private(&self) -> u8 {
            self.y
        }
        pub(crate) fn krate(&self) -> u8 {
            self.private()
        }
    }
    impl Clone for S {
        fn clone(&self) -> Self {
            S {
                x: self.x,
                y: self.krate(),
            }
        }
    }
    #[derive(Debug)]
    pub enum E {
        A,
        B(u8),
    }
    pub fn f() {}
    /// pub, but never re-exported: not reachable.
    pub fn unreachable() {}
}
/// Public module.
pub mod a {
    pub use crate::private::{f, E, S};
}
pub use private::S as S2;
/// A trait: its three items count.
pub trait T {
    fn go(&self);
    const K: u8;
    type Out;
}
#[doc(hidden)]
pub fn hidden_fn() {}
pub const CONST: u8 = 3;
mod inner {
    pub fn g() {}
    pub(crate) fn h() {}
}
pub use inner::*;
pub type Alias = u8;
pub use core::mem::swap;
pub(crate) fn krate_only() {
    inner::h()
}
