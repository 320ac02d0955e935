//! The agent loop of `spec/loop.md` as a sans-IO state machine.
//!
//! An [`Agent`] owns a [`Session`](crate::session::Session) log and runs
//! turns over it. It does no I/O: the shell feeds it **inputs** (method
//! calls that take `now`, a [`Time`](crate::Time)) and, after every input,
//! drains its **outputs** with [`Agent::poll`] until `None`:
//!
//! | input | when |
//! |---|---|
//! | [`send`](Agent::send), [`followup`](Agent::followup), [`steer`](Agent::steer), [`inject`](Agent::inject) | user or plugin input (IB-6) |
//! | [`cancel`](Agent::cancel) | stop the running turn (LC-33) |
//! | [`handle_chunk`](Agent::handle_chunk), [`handle_stream_end`](Agent::handle_stream_end), [`handle_stream_error`](Agent::handle_stream_error) | the model stream of an [`Output::CallModel`] |
//! | [`handle_tool_result`](Agent::handle_tool_result), [`handle_tool_failure`](Agent::handle_tool_failure) | the tool body of an [`Output::ExecuteTool`] |
//! | [`complete_hook`](Agent::complete_hook) | the answer to an [`Output::Hook`] |
//! | [`handle_timeout`](Agent::handle_timeout) | [`Agent::poll_timeout`] passed (retry delays); a spurious call is harmless |
//! | [`append_event`](Agent::append_event), [`edit_inbox`](Agent::edit_inbox), [`begin_maintenance`](Agent::begin_maintenance) / [`end_maintenance`](Agent::end_maintenance) | plugins |
//!
//! | output | the shell… |
//! |---|---|
//! | [`Output::Appended`] | persists / publishes the new session events |
//! | [`Output::CallModel`] | starts the model stream (tagged with its attempt) |
//! | [`Output::CancelModelCall`] | stops that stream |
//! | [`Output::ExecuteTool`] | runs the tool body (several at once for a parallel group, LC-24) |
//! | [`Output::AbortTurn`] | aborts in-flight hooks and tools |
//! | [`Output::Hook`] | answers a seam it claimed in [`AgentConfig::seams`] |
//! | [`Output::Flush`] | may flush the store (durability barrier) |
//! | [`Output::Status`], [`Output::Notify`] | tells observers |
//!
//! Seams (loop.md §4) are declared once in the [seam table](seams). The
//! machine raises each seam the embedder claimed in [`AgentConfig::seams`]
//! as [`Output::Hook`] (a [`HookCall`] carrying the spec default) and waits
//! for [`Agent::complete_hook`]; every other seam takes its default inline.
//! Ids come from an [`IdSource`], retry jitter from a [`JitterSource`],
//! time from `now`: the same inputs give a byte-identical log, which is
//! what replay relies on.
//!
//! # Which layer to drive
//!
//! Most embedders drive the kernel (`dsh-runtime`'s `Kernel`) instead: it
//! wraps this machine with persistence batching, tool deadlines, the
//! plugin chain (`Plugin`, the one extension API) and live events. Drive
//! [`Agent`] directly only for a minimal loop with no plugins, or to
//! replay and test loop behaviour ([`replay`]).
//!
//! An input that is impossible in the current state (a chunk when no stream
//! is open, a result for an unknown tool call, a stale attempt) returns an
//! [`InputError`] and changes nothing; [`InputError::is_benign`] separates
//! late answers from misuse. The exact contract (polling order, `now`,
//! drain-before-next-input) is on [`Agent`].
//!
//! # A driving loop
//!
//! ```
//! use dsh_core::agent::{Agent, AgentConfig, AgentOptions, Output};
//! use dsh_core::session::{Session, SessionHeader};
//! use dsh_core::{ContentBlock, FinishReason, Message, StreamChunk};
//!
//! // The config types are `#[non_exhaustive]`: start from `default()`
//! // and set fields.
//! let mut options = AgentOptions::default();
//! options.provider = Some("mock".into());
//! options.model = Some("mock".into());
//! let mut config = AgentConfig::default();
//! config.options = options;
//! let session = Session::new(SessionHeader::new("a1", 0));
//! let mut agent = Agent::new(config, session).unwrap();
//! let now = dsh_core::Time::from_millis(1_000);
//! agent
//!     .followup(now, Message::user("m1", vec![ContentBlock::text("hi")]))
//!     .unwrap();
//! // Drain after every input; answer what the agent asks for.
//! let mut turns_done = false;
//! while !turns_done {
//!     let Some(output) = agent.poll() else { break };
//!     match output {
//!         Output::CallModel(call) => {
//!             // A real shell streams from the provider; here a canned reply.
//!             for chunk in [
//!                 StreamChunk::TextDelta { index: 0, text: "hello".into() },
//!                 StreamChunk::finish(FinishReason::Stop),
//!             ] {
//!                 agent.handle_chunk(now, call.attempt, chunk).unwrap();
//!             }
//!             agent.handle_stream_end(now, call.attempt).unwrap();
//!         }
//!         Output::ExecuteTool(exec) => {
//!             let outcome = dsh_core::agent::tools::ToolOutcome::error("no tools here");
//!             agent.handle_tool_result(now, exec.token, outcome).unwrap();
//!         }
//!         Output::Appended(range) => {
//!             for event in &agent.session().events()[range.start as usize..range.end as usize] {
//!                 let _line = event.to_json(); // persist it
//!             }
//!         }
//!         Output::Status(status) => turns_done = status == dsh_core::agent::AgentStatus::Idle,
//!         _ => {}
//!     }
//! }
//! assert_eq!(agent.session().derive_messages_uncached().len(), 2);
//! ```

mod handle;
mod hooks;
mod inbox;
mod io;
mod machine;
pub mod prompt;
pub mod replay;
pub mod retry;
pub mod schema;
pub mod seams;
pub mod tools;

pub use handle::{AttemptId, ToolToken};
pub use hooks::{
    ApprovalOutcome, CancelCause, FixedJitter, HookError, IdPurpose, IdSource, JitterSource,
    PostToolDecision, PreStepDecision, PreStepPayload, PreToolDecision, PreparedCall, Recovery,
    RequestErrorPayload, SeededJitter, SequentialIds, ToolExecution,
};
pub use inbox::{Inbox, InboxError, InboxTarget, Splice};
pub use io::{
    AgentStatus, Checkpoint, HookAnswer, HookCall, InputError, ModelCall, Notification, Output,
};
pub use machine::{
    Agent, AgentConfig, AgentOptions, DEFAULT_MAX_PARALLEL_TOOL_CALLS, DEFAULT_MAX_STEPS_PER_TURN,
    InboxEdit, RequestFill, ResumeError,
};
pub use seams::Seams;

/// Sorts `items` stably by `cmp`. The sort runs on indexes through a `dyn`
/// comparator, so every caller shares one instance of the standard sort: a
/// device build links one sort, not one per element type.
pub(crate) fn sort_stable_by<T: Copy>(
    items: &mut alloc::vec::Vec<T>,
    mut cmp: impl FnMut(&T, &T) -> core::cmp::Ordering,
) {
    let order = {
        let items: &[T] = items;
        stable_order(
            items.len(),
            &mut |a, b| match (items.get(a), items.get(b)) {
                (Some(x), Some(y)) => cmp(x, y),
                _ => core::cmp::Ordering::Equal,
            },
        )
    };
    let sorted = order
        .iter()
        .filter_map(|i| items.get(*i).copied())
        .collect();
    *items = sorted;
}

/// `0..n` stably sorted by `cmp` (see [`sort_stable_by`]): the standard
/// unstable sort on (key, original index). The indexes are distinct, so for
/// a total order `cmp` ties are broken by position: exactly the order of the
/// standard stable sort, from the smaller unstable sort.
#[cfg(any(feature = "std-sort", test))]
fn stable_order_std(
    n: usize,
    cmp: &mut dyn FnMut(usize, usize) -> core::cmp::Ordering,
) -> alloc::vec::Vec<usize> {
    let mut order: alloc::vec::Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| cmp(a, b).then(a.cmp(&b)));
    order
}

/// `0..n` stably sorted by `cmp`, without the standard sort (feature
/// `std-sort` off): each index goes in after every index not greater than
/// it (`partition_point`, `Vec::insert`), so equal keys keep their order.
/// The same order as [`stable_order_std`], in about 2 KB less code; O(n log
/// n) comparisons but O(n^2) moves, for the few items the core sorts.
#[cfg(any(not(feature = "std-sort"), test))]
fn stable_order_small(
    n: usize,
    cmp: &mut dyn FnMut(usize, usize) -> core::cmp::Ordering,
) -> alloc::vec::Vec<usize> {
    let mut order: alloc::vec::Vec<usize> = alloc::vec::Vec::with_capacity(n);
    for i in 0..n {
        let at = order.partition_point(|&j| cmp(j, i) != core::cmp::Ordering::Greater);
        order.insert(at, i);
    }
    order
}

#[cfg(not(feature = "std-sort"))]
use stable_order_small as stable_order;
#[cfg(feature = "std-sort")]
use stable_order_std as stable_order;

#[cfg(test)]
mod tests {
    /// Stable: equal keys keep their order.
    #[test]
    fn sort_stable_by_keeps_equal_keys_in_order() {
        let mut items = alloc::vec![(2, 'a'), (1, 'b'), (2, 'c'), (0, 'd'), (1, 'e')];
        super::sort_stable_by(&mut items, |x, y| x.0.cmp(&y.0));
        assert_eq!(items, [(0, 'd'), (1, 'b'), (1, 'e'), (2, 'a'), (2, 'c')]);
        let mut empty: alloc::vec::Vec<u8> = alloc::vec::Vec::new();
        super::sort_stable_by(&mut empty, |x, y| x.cmp(y));
        assert!(empty.is_empty());
        // The same order as the standard stable sort, for every length
        // up to 70 and a few key ranges.
        let mut seed = 0x2545_f491_u32;
        for n in 0..70 {
            for range in [1u32, 3, 50] {
                let items: alloc::vec::Vec<(u32, usize)> = (0..n)
                    .map(|i| {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        (seed % range, i)
                    })
                    .collect();
                let mut ours = items.clone();
                super::sort_stable_by(&mut ours, |x, y| x.0.cmp(&y.0));
                let mut std = items.clone();
                std.sort_by_key(|x| x.0);
                assert_eq!(ours, std, "n = {n}, range = {range}");
                // Both variants, whichever this build uses.
                for order in [super::stable_order_std, super::stable_order_small] {
                    let sorted: alloc::vec::Vec<(u32, usize)> =
                        order(n, &mut |a, b| items[a].0.cmp(&items[b].0))
                            .into_iter()
                            .map(|i| items[i])
                            .collect();
                    assert_eq!(sorted, std, "n = {n}, range = {range}");
                }
            }
        }
    }
}
