//! Derived history (session.md 6): the per-event projection and the
//! incremental cache (C1–C6).

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::message::Message;

use super::event::SessionEvent;

/// C1: the derived list, how many surface nodes it has consumed, and the
/// replace generation it was built under.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeriveCache {
    derived: Vec<Arc<Message>>,
    consumed: usize,
    generation: u64,
}

impl DeriveCache {
    /// C2/C3: rebuild after a replacement, else project only the new nodes.
    pub(crate) fn update(
        &mut self,
        nodes: &[u64],
        generation: u64,
        events: &[SessionEvent],
    ) -> &[Arc<Message>] {
        if generation != self.generation {
            self.derived.clear();
            self.consumed = 0;
            self.generation = generation;
        }
        if let Some(new) = nodes.get(self.consumed..) {
            for &seq in new {
                if let Some(m) = project(events, seq) {
                    self.derived.push(m.clone());
                }
            }
        }
        self.consumed = nodes.len();
        &self.derived
    }
}

fn project(events: &[SessionEvent], seq: u64) -> Option<&Arc<Message>> {
    usize::try_from(seq)
        .ok()
        .and_then(|i| events.get(i))
        .and_then(SessionEvent::derived_message)
}

/// D1: walk the surface in order, project each node, drop `None`s.
pub(crate) fn derive_all(nodes: &[u64], events: &[SessionEvent]) -> Vec<Arc<Message>> {
    nodes
        .iter()
        .filter_map(|&seq| project(events, seq).cloned())
        .collect()
}
