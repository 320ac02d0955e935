//! The event-sourced session log (spec/session.md): event types and
//! payloads, [`Session`] with append validation, the surface, the derived
//! history, the request folds, fork, and the invariant checker.

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

pub use chunk_event::{AssistantChunk, ChunkView};
pub(crate) use chunk_event::{ChunkDataSeed, ToolHead};
pub use error::{AppendError, SeedError};
pub(crate) use event::Extra;
pub use event::{EventData, KNOWN_EVENT_TYPES, SessionEvent, SurfaceIntent, SurfaceOp, types};
pub use fork::ForkError;
pub use header::{
    EpochHeader, HeaderError, SESSION_FORMAT_VERSION, SessionHeader, is_absolute_path,
};
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
