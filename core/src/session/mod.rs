//! The event-sourced session log (spec/session.md): event types and
//! payloads, [`Session`] with append validation, the surface, the derived
//! history, the request folds, fork, and the invariant checker.
//!
//! - Events: [`SessionEvent`] (envelope: `seq`, `time`, surface marker,
//!   `ignorable`) holding [`EventData`], one variant per core type plus
//!   [`EventData::Plugin`] for everything else, kept byte for byte.
//! - Live use: [`Session::new`], [`Session::append`] (`seq` assigned, `now`
//!   given), [`Session::event`] / [`Session::events_from`],
//!   [`Session::derive_messages`], [`Session::request_header`],
//!   [`Session::fork`].
//! - Restore: [`Session::from_seed`] (validate a seed, add the end-seed
//!   marker), or [`crate::jsonl::load_log`] for a stored log, then
//!   [`Session::mark_end_seed`] to resume it.
//! - Checks: every append runs the J-, M-, V4-, A2- and S-rules and returns
//!   an [`AppendError`] naming its rule; [`InvariantChecker`] checks turn and
//!   step structure (section 11) separately.
//!
//! ```
//! use dsh_core::session::{AssistantMessage, Step, TurnStart, EventData};
//! use dsh_core::{ContentBlock, Message, MessageSource, Session, SessionHeader, SurfaceIntent};
//!
//! let mut s = Session::new(SessionHeader::new("s1", 0));
//! s.append(TurnStart::new(1), None, 10).unwrap();
//! s.append(Message::user("u1", vec![ContentBlock::text("hi")]), Some(SurfaceIntent::append()), 11)
//!     .unwrap();
//! s.append(EventData::StepStart(Step::new(1, 1)), None, 12).unwrap();
//! let reply = Message::model("a1", vec![ContentBlock::text("hello")], MessageSource::model("p", "m"));
//! let e = s
//!     .append(AssistantMessage::new(1, 1, reply), Some(SurfaceIntent::append_citing(vec![])), 13)
//!     .unwrap();
//! assert_eq!(e.seq(), 3);
//! assert_eq!(s.derive_messages().len(), 2);
//! // Fork at a boundary outside a turn is refused here: turn 1 is open.
//! assert!(s.fork(None, "child", 14).is_err());
//! ```

mod chunk_event;
mod derive;
mod error;
mod event;
mod fields;
mod fork;
mod header;
mod invariants;
mod payload;
mod rules;
#[allow(clippy::module_inception)]
mod session;

pub(crate) use chunk_event::ChunkDataSeed;
pub use chunk_event::{AssistantChunk, ChunkView};
pub use error::{AppendError, SeedError};
pub(crate) use event::Extra;
pub use event::{EventData, KNOWN_EVENT_TYPES, SessionEvent, SurfaceIntent, SurfaceOp, types};
pub use fork::{ForkError, completed_boundary};
pub use header::{EpochHeader, HeaderError, SESSION_FORMAT_VERSION, SessionHeader};
pub use invariants::{InvariantChecker, InvariantViolation};
pub use payload::{
    AbortCause, AssistantMessage, HeaderReason, InboxSpliced, InboxTarget, LlmRetry,
    LlmRetryStarted, PluginEvent, RequestContext, RequestHeader, Step, TodoItem, TodoStatus,
    TodoWrite, ToolCall, ToolError, ToolResult, TurnEnd, TurnEndReason, TurnStart,
};
pub use rules::has_negative_zero;
pub use session::{
    Replacement, Session, SurfaceFold, SurfaceView, fold_request_header, fold_surface,
};
