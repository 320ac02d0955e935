//! The agent inbox (loop.md §3, IB-1..IB-12): two ordered lists of pending
//! user messages, mutated only through normalised splices.
//!
//! The inbox itself is pure: [`Inbox::plan`] computes a [`Splice`] (or
//! nothing) without changing anything, the agent appends the splice's
//! `agent/inbox/spliced` event, then [`Inbox::apply`] commits it (IB-4).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde_json::{Map, Value};

use crate::ids::MessageId;
use crate::message::Message;

/// Which pending list (IB-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum InboxTarget {
    /// Prompts that each own a turn.
    NextTurn,
    /// Input for the nearest step boundary.
    NextStep,
}

impl InboxTarget {
    /// The wire value: `next-turn` or `next-step`.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxTarget::NextTurn => "next-turn",
            InboxTarget::NextStep => "next-step",
        }
    }

    /// Parses the wire value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "next-turn" => Some(InboxTarget::NextTurn),
            "next-step" => Some(InboxTarget::NextStep),
            _ => None,
        }
    }
}

/// Why an inbox mutation was refused; the inbox is unchanged (IB-1, IB-3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InboxError {
    /// The message id is already pending in either list (IB-1).
    Duplicate(MessageId),
    /// A replayed splice does not fit the list it names (IB-3 validation).
    OutOfRange {
        /// The list.
        target: InboxTarget,
        /// The splice start.
        start: u64,
        /// The number of removed messages.
        removed: u64,
        /// The list length at that point.
        len: usize,
    },
    /// A replayed `agent/inbox/spliced` payload is malformed.
    Malformed(String),
}

#[cfg(feature = "error-texts")]
impl fmt::Display for InboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InboxError::Duplicate(id) => write!(f, "message \"{id}\" is already pending"),
            InboxError::OutOfRange {
                target,
                start,
                removed,
                len,
            } => write!(
                f,
                "splice of {} at {start} removing {removed} does not fit a list of {len}",
                target.as_str()
            ),
            InboxError::Malformed(why) => write!(f, "malformed inbox splice: {why}"),
        }
    }
}

/// Feature `error-texts` off: a fixed text per variant.
#[cfg(not(feature = "error-texts"))]
impl fmt::Display for InboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InboxError::Duplicate(_) => "message already pending",
            InboxError::OutOfRange { .. } => "inbox splice out of range",
            InboxError::Malformed(_) => "malformed inbox splice",
        })
    }
}

impl core::error::Error for InboxError {}

/// One normalised inbox mutation (IB-2, IB-3).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Splice {
    /// The list.
    pub target: InboxTarget,
    /// Position of the first removed or inserted message.
    pub start: usize,
    /// Messages removed, in list order.
    pub removed: Vec<Message>,
    /// Messages inserted at `start`.
    pub inserted: Vec<Message>,
    /// `true` when this is a claim (pure deletion by the driver): no
    /// `outcome` and no `discarded` notifications.
    pub claim: bool,
}

impl Splice {
    /// The `agent/inbox/spliced` data in the reference's key order:
    /// `target, start, removedCount?, inserted, outcome?` (IB-2).
    pub fn data(&self) -> Value {
        let mut m = Map::new();
        m.insert("target".into(), Value::String(self.target.as_str().into()));
        m.insert("start".into(), Value::from(self.start as u64));
        if !self.removed.is_empty() {
            m.insert(
                "removedCount".into(),
                Value::from(self.removed.len() as u64),
            );
        }
        m.insert(
            "inserted".into(),
            Value::Array(
                self.inserted
                    .iter()
                    .map(|msg| crate::json::to_value(msg).unwrap_or(Value::Null))
                    .collect(),
            ),
        );
        if !self.claim && !self.removed.is_empty() {
            m.insert("outcome".into(), Value::String("canceled".into()));
        }
        Value::Object(m)
    }
}

/// The two pending lists (IB-1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inbox {
    next_turn: Vec<Message>,
    next_step: Vec<Message>,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Inbox::default()
    }

    /// The pending list `target`.
    pub fn list(&self, target: InboxTarget) -> &[Message] {
        match target {
            InboxTarget::NextTurn => &self.next_turn,
            InboxTarget::NextStep => &self.next_step,
        }
    }

    fn list_mut(&mut self, target: InboxTarget) -> &mut Vec<Message> {
        match target {
            InboxTarget::NextTurn => &mut self.next_turn,
            InboxTarget::NextStep => &mut self.next_step,
        }
    }

    /// Whether both lists are empty.
    pub fn is_empty(&self) -> bool {
        self.next_turn.is_empty() && self.next_step.is_empty()
    }

    /// Where `id` is pending, if anywhere.
    pub fn find(&self, id: &MessageId) -> Option<(InboxTarget, usize)> {
        for target in [InboxTarget::NextTurn, InboxTarget::NextStep] {
            if let Some(i) = self.list(target).iter().position(|m| &m.id == id) {
                return Some((target, i));
            }
        }
        None
    }

    /// Plans `splice(target, start, delete_count, inserted)` with the array
    /// splice normalisation of IB-3 (negative `start` counts from the end;
    /// both are clamped). Returns `Ok(None)` when nothing would change.
    pub fn plan(
        &self,
        target: InboxTarget,
        start: i64,
        delete_count: i64,
        inserted: Vec<Message>,
        claim: bool,
    ) -> Result<Option<Splice>, InboxError> {
        let list = self.list(target);
        let len = list.len() as i64;
        let start = if start < 0 {
            (len + start).max(0)
        } else {
            start.min(len)
        } as usize;
        let delete = delete_count.clamp(0, len - start as i64) as usize;
        if delete == 0 && inserted.is_empty() {
            return Ok(None);
        }
        let removed: Vec<Message> = list[start..start + delete].to_vec();
        // IB-1: ids stay unique across both lists once the splice applied.
        for (i, m) in inserted.iter().enumerate() {
            let pending_elsewhere = self
                .find(&m.id)
                .is_some_and(|_| !removed.iter().any(|r| r.id == m.id));
            let repeated = inserted[..i].iter().any(|o| o.id == m.id);
            if pending_elsewhere || repeated {
                return Err(InboxError::Duplicate(m.id.clone()));
            }
        }
        Ok(Some(Splice {
            target,
            start,
            removed,
            inserted,
            claim,
        }))
    }

    /// Commits a splice planned against the current state.
    pub fn apply(&mut self, splice: &Splice) {
        let list = self.list_mut(splice.target);
        let end = (splice.start + splice.removed.len()).min(list.len());
        let start = splice.start.min(end);
        list.splice(start..end, splice.inserted.iter().cloned());
    }

    /// Applies a logged `agent/inbox/spliced` payload (IB-8 replay).
    pub fn replay(&mut self, data: &Value) -> Result<(), InboxError> {
        let target = data
            .get("target")
            .and_then(Value::as_str)
            .and_then(InboxTarget::parse)
            .ok_or_else(|| InboxError::Malformed("target must be next-turn or next-step".into()))?;
        let start = data
            .get("start")
            .and_then(Value::as_u64)
            .ok_or_else(|| InboxError::Malformed("start must be a non-negative integer".into()))?;
        let removed = match data.get("removedCount") {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| {
                InboxError::Malformed("removedCount must be a non-negative integer".into())
            })?,
        };
        let inserted: Vec<Message> = match data.get("inserted") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    serde_json::from_value(v.clone())
                        .map_err(|e| InboxError::Malformed(alloc::format!("inserted message: {e}")))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(InboxError::Malformed("inserted must be an array".into())),
        };
        self.splice_logged(target, start, removed, inserted)
    }

    /// [`replay`](Self::replay) from the typed payload, as a resumed agent
    /// reads it: the same checks, without a round trip through JSON values.
    pub(crate) fn replay_spliced(
        &mut self,
        data: &crate::session::InboxSpliced,
    ) -> Result<(), InboxError> {
        use crate::session::InboxTarget as Logged;
        let target = match data.target {
            Logged::NextTurn => InboxTarget::NextTurn,
            Logged::NextStep => InboxTarget::NextStep,
            _ => {
                return Err(InboxError::Malformed(
                    "target must be next-turn or next-step".into(),
                ));
            }
        };
        let inserted = data.inserted.iter().map(|m| Message::clone(m)).collect();
        self.splice_logged(
            target,
            data.start,
            data.removed_count.unwrap_or(0),
            inserted,
        )
    }

    /// The checked splice of a logged `agent/inbox/spliced` (IB-8).
    fn splice_logged(
        &mut self,
        target: InboxTarget,
        start: u64,
        removed: u64,
        inserted: Vec<Message>,
    ) -> Result<(), InboxError> {
        let len = self.list(target).len();
        if start as usize > len || start.saturating_add(removed) as usize > len {
            return Err(InboxError::OutOfRange {
                target,
                start,
                removed,
                len,
            });
        }
        let list = self.list_mut(target);
        let start = start as usize;
        list.splice(start..start + removed as usize, inserted);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::ContentBlock;
    use alloc::string::ToString;

    fn m(id: &str) -> Message {
        Message::user(id, alloc::vec![ContentBlock::text(id)])
    }

    #[test]
    fn ib2_shapes() {
        let inbox = Inbox::new();
        let s = inbox
            .plan(InboxTarget::NextTurn, 0, 0, alloc::vec![m("m1")], false)
            .unwrap()
            .unwrap();
        assert_eq!(
            s.data().to_string(),
            r#"{"target":"next-turn","start":0,"inserted":[{"content":[{"type":"text","text":"m1"}],"source":{"kind":"user"},"role":"user","id":"m1"}]}"#
        );
        let mut inbox = Inbox::new();
        inbox.apply(&s);
        let claim = inbox
            .plan(InboxTarget::NextTurn, 0, 1, Vec::new(), true)
            .unwrap()
            .unwrap();
        assert_eq!(
            claim.data().to_string(),
            r#"{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}"#
        );
        let cancel = inbox
            .plan(InboxTarget::NextTurn, 0, 1, Vec::new(), false)
            .unwrap()
            .unwrap();
        assert_eq!(
            cancel.data().to_string(),
            r#"{"target":"next-turn","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}"#
        );
    }

    #[test]
    fn ib3_normalisation() {
        let mut inbox = Inbox::new();
        for id in ["a", "b", "c"] {
            let s = inbox
                .plan(
                    InboxTarget::NextStep,
                    i64::MAX,
                    0,
                    alloc::vec![m(id)],
                    false,
                )
                .unwrap()
                .unwrap();
            inbox.apply(&s);
        }
        let s = inbox
            .plan(InboxTarget::NextStep, -2, 10, Vec::new(), false)
            .unwrap()
            .unwrap();
        assert_eq!((s.start, s.removed.len()), (1, 2));
        assert_eq!(
            inbox.plan(InboxTarget::NextStep, 1, 0, Vec::new(), false),
            Ok(None)
        );
        assert_eq!(
            inbox.plan(InboxTarget::NextTurn, 0, 0, alloc::vec![m("b")], false),
            Err(InboxError::Duplicate("b".into()))
        );
        #[cfg(feature = "error-texts")]
        assert_eq!(
            InboxError::Duplicate("b".into()).to_string(),
            "message \"b\" is already pending"
        );
        #[cfg(not(feature = "error-texts"))]
        assert_eq!(
            InboxError::Duplicate("b".into()).to_string(),
            "message already pending"
        );
        // Replacing a message by one with the same id is allowed.
        assert!(
            inbox
                .plan(InboxTarget::NextStep, 1, 1, alloc::vec![m("b")], false)
                .is_ok()
        );
    }

    #[test]
    fn ib8_replay() {
        let mut inbox = Inbox::new();
        let s = Inbox::new()
            .plan(InboxTarget::NextTurn, 0, 0, alloc::vec![m("p")], false)
            .unwrap()
            .unwrap();
        inbox.replay(&s.data()).unwrap();
        assert_eq!(inbox.list(InboxTarget::NextTurn).len(), 1);
        let bad =
            serde_json::json!({"target":"next-step","start":0,"removedCount":1,"inserted":[]});
        assert!(matches!(
            inbox.replay(&bad),
            Err(InboxError::OutOfRange { .. })
        ));
    }

    /// IB-8: a resumed agent replays the typed payload exactly as the JSON
    /// form replays (lists, refusals and their errors).
    #[test]
    fn ib8_replay_of_the_typed_payload_matches_the_json_form() {
        use crate::session::{InboxSpliced, InboxTarget as Logged};
        use alloc::sync::Arc;
        let splice = |target, start, removed_count, inserted: &[&str]| InboxSpliced {
            target,
            start,
            removed_count,
            inserted: inserted.iter().map(|id| Arc::new(m(id))).collect(),
            outcome: None,
        };
        let cases = [
            splice(Logged::NextTurn, 0, None, &["t1", "t2"]),
            splice(Logged::NextStep, 0, None, &["s1"]),
            splice(Logged::NextTurn, 1, Some(1), &["t3"]),
            splice(Logged::NextStep, 0, Some(1), &[]),
            splice(Logged::NextStep, 1, None, &["s2"]),
            splice(Logged::NextTurn, 0, Some(3), &[]),
            splice(Logged::Other("later".to_string()), 0, None, &["x"]),
            splice(Logged::NextTurn, 0, Some(2), &[]),
        ];
        let (mut typed, mut json) = (Inbox::new(), Inbox::new());
        for s in &cases {
            let a = typed.replay_spliced(s);
            let b = json.replay(&serde_json::to_value(s).unwrap());
            assert_eq!(a, b, "{s:?}");
            assert_eq!(typed, json, "{s:?}");
        }
        assert!(typed.is_empty());
    }
}
