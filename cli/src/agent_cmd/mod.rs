//! The agent front end on the std shell: `dsh chat`, `dsh run`, `dsh fork`
//! and the shared event loop that renders a running agent.
//!
//! Exit codes of `run`: 0 the turn completed; 1 it ended otherwise (error,
//! cancel, max-tokens, blocked) or its log could not be written in full;
//! 2 bad usage or setup failure. `chat` exits 1 when its log could not be
//! written in full (and does not say "saved").

mod args;
mod chat;
mod host;
mod interactive;
mod setup;
mod sources;
mod turn;

pub use args::{AgentArgs, ChatArgs, ForkArgs, RunArgs, ViewArgs};
pub use chat::{chat, fork};
pub use host::{AgentHost, Facts};
pub use setup::interaction_plugins;
pub use turn::{completed, drive_one_turn, run};
