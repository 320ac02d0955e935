//! The agent loop (loop.md) as a sans-IO state machine.

pub mod inbox;
pub mod retry;
pub mod schema;
pub mod tools;
