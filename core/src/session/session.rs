//! `Session`: the append-only log with its surface, derived history and
//! request folds (session.md 5–8, 10).

use alloc::sync::Arc;
use alloc::vec::Vec;
use serde_json::Value;

use crate::ids::SessionId;
use crate::message::Message;

use super::derive::DeriveCache;
use super::error::{AppendError, SeedError};
use super::event::{EventData, SessionEvent, SurfaceIntent, SurfaceOp};
use super::header::{EpochHeader, SessionHeader};
use super::payload::RequestContext;
use super::rules;

/// The surface as a session exposes it (5.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SurfaceView<'a> {
    /// Seqs of the message-producing events visible to the model, in order.
    pub nodes: &'a [u64],
    /// Committed replacements since construction (seed ones included).
    pub replace_generation: u64,
}

/// How an accepted event changes the surface (S9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transition {
    None,
    Append,
    Replace { i: usize, j: usize },
}

/// The event-sourced log of one session (session.md).
///
/// The log is the only source of truth: the surface, the derived message
/// history and the request-header fold are computed from it. Appends are
/// validated (J-, M-, V4-, A2- and S-rules) and either commit completely or
/// leave everything unchanged. The core never reads a clock: every append
/// takes `now` (epoch milliseconds) from the caller.
///
/// ```
/// use dsh_core::{Session, SessionHeader, SurfaceIntent, Message, ContentBlock};
/// use dsh_core::session::{EventData, TurnStart};
///
/// let mut s = Session::new(SessionHeader::new("s1", 1000));
/// s.append(TurnStart::new(1), None, 1000).unwrap();
/// let m = Message::user("m1", vec![ContentBlock::text("hi")]);
/// s.append(m, Some(SurfaceIntent::append()), 1001).unwrap();
/// assert_eq!(s.surface().nodes, &[1]);
/// assert_eq!(s.derive_messages().len(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct Session {
    header: SessionHeader,
    events: Vec<SessionEvent>,
    first_live_seq: u64,
    nodes: Vec<u64>,
    replace_generation: u64,
    derived: DeriveCache,
    request_header: Option<Arc<EpochHeader>>,
    request_context: Option<Arc<RequestContext>>,
}

impl Session {
    /// A fresh session: empty log, `first_live_seq = 0`, no end-seed marker
    /// (8.1). The header is taken as is; call [`SessionHeader::validate`]
    /// first when it comes from outside.
    pub fn new(header: SessionHeader) -> Self {
        Session {
            header,
            events: Vec::new(),
            first_live_seq: 0,
            nodes: Vec::new(),
            replace_generation: 0,
            derived: DeriveCache::default(),
            request_header: None,
            request_context: None,
        }
    }

    /// A seeded session (replay, fork, resume, restore; 8.1): every seed
    /// event is validated in order (V1–V9), then, unless the seed ends with
    /// `session/end-seed`, a `session/end-seed` marker is appended with
    /// `time = now`. An empty seed yields `[session/end-seed@0]` (ES4).
    pub fn from_seed(
        header: SessionHeader,
        seed: Vec<SessionEvent>,
        now: i64,
    ) -> Result<Self, SeedError> {
        let mut s = Session::restore(header, seed)?;
        let index = s.events.len();
        s.mark_end_seed(now)
            .map_err(|error| SeedError { index, error })?;
        Ok(s)
    }

    /// Turns a [`restore`](Self::restore)d session into a resumed one
    /// (8.1, ES3): appends `session/end-seed` with `time = now` unless the
    /// log already ends with one. `first_live_seq` stays the seed length.
    /// This is what [`from_seed`](Self::from_seed) does after validating,
    /// without validating the whole log again.
    pub fn mark_end_seed(&mut self, now: i64) -> Result<(), AppendError> {
        let ends_with_marker = matches!(
            self.events.last().map(SessionEvent::data),
            Some(EventData::EndSeed)
        );
        if !ends_with_marker {
            self.events.reserve_exact(1);
            self.append(EventData::EndSeed, None, now)?;
        }
        Ok(())
    }

    /// A session holding exactly `events`, validated like a seed (V1–V9) but
    /// without the end-seed marker: for readers that inspect a stored log.
    /// `first_live_seq` is the log length.
    pub fn restore(header: SessionHeader, events: Vec<SessionEvent>) -> Result<Self, SeedError> {
        let mut s = Session::new(header);
        // Validate in place and adopt the vector: no copy of the events.
        for index in 0..events.len() {
            let (before, rest) = events.split_at(index);
            let Some(e) = rest.first() else { break };
            let t = rules::check_event(e)
                .and_then(|_| s.plan(before, e))
                .map_err(|error| SeedError { index, error })?;
            s.apply(e, t);
        }
        s.events = events;
        s.first_live_seq = s.events.len() as u64;
        Ok(s)
    }

    /// Reserves room for at least `additional` more events, so that many
    /// appends do not move the log (a loaded or cloned session holds exactly
    /// its events).
    pub fn reserve(&mut self, additional: usize) {
        self.events.reserve(additional);
    }

    /// The session header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.header.id
    }

    /// The whole log; `events()[k].seq() == k`.
    pub fn events(&self) -> &[SessionEvent] {
        &self.events
    }

    /// The events from `seq` on (empty when `seq` is at or past the end).
    pub fn events_from(&self, seq: u64) -> &[SessionEvent] {
        let start = usize::try_from(seq)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        &self.events[start..]
    }

    /// The event at `seq`.
    pub fn event(&self, seq: u64) -> Option<&SessionEvent> {
        usize::try_from(seq).ok().and_then(|i| self.events.get(i))
    }

    /// The last event.
    pub fn last_event(&self) -> Option<&SessionEvent> {
        self.events.last()
    }

    /// The log length, which is also the next seq.
    pub fn len(&self) -> u64 {
        self.events.len() as u64
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The first seq this lifecycle appended (the seed length; 0 when fresh).
    pub fn first_live_seq(&self) -> u64 {
        self.first_live_seq
    }

    /// Consumes the session into its events.
    pub fn into_events(self) -> Vec<SessionEvent> {
        self.events
    }

    /// The surface (5.7).
    pub fn surface(&self) -> SurfaceView<'_> {
        SurfaceView {
            nodes: &self.nodes,
            replace_generation: self.replace_generation,
        }
    }

    /// Appends a live event (5.2): `seq` = log length, `time = now`. `intent`
    /// is required for `user/message`, `assistant/message` and `tool/result`
    /// and forbidden for every other type. On error nothing changes.
    pub fn append(
        &mut self,
        data: impl Into<EventData>,
        intent: Option<SurfaceIntent>,
        now: i64,
    ) -> Result<&SessionEvent, AppendError> {
        let mut e = SessionEvent::new(self.len(), now, data);
        if let Some(intent) = intent {
            e = e.with_surface(intent.op, intent.sources);
        }
        self.push_checked(e)
    }

    /// Appends a complete event (envelope included); its `seq` must be the
    /// log length (S1). Used for seeds, replays and stores.
    pub fn append_event(&mut self, event: SessionEvent) -> Result<&SessionEvent, AppendError> {
        self.push_checked(event)
    }

    /// Validates `event` as the next event without appending it (I12-style
    /// dry run of 5.2 A1–A6).
    pub fn check(&self, event: &SessionEvent) -> Result<(), AppendError> {
        rules::check_event(event)?;
        self.plan(&self.events, event).map(|_| ())
    }

    fn push_checked(&mut self, event: SessionEvent) -> Result<&SessionEvent, AppendError> {
        rules::check_event(&event)?;
        let t = self.plan(&self.events, &event)?;
        self.apply(&event, t);
        self.events.push(event);
        Ok(self.events.last().expect("just pushed"))
    }

    /// Applies an accepted event's surface transition and folds (S9, 7.3);
    /// the caller stores the event.
    fn apply(&mut self, event: &SessionEvent, t: Transition) {
        match t {
            Transition::None => {}
            Transition::Append => self.nodes.push(event.seq()),
            Transition::Replace { i, j } => {
                self.nodes.splice(i..=j, [event.seq()]);
                self.replace_generation += 1;
            }
        }
        match event.data() {
            EventData::RequestHeader(h) => {
                self.request_header = Some(Arc::new(h.header.canonical()));
            }
            EventData::RequestContext(c) => self.request_context = Some(c.clone()),
            _ => {}
        }
    }

    /// The surface transition check (5.3, S1–S8) of `e` after `before`.
    fn plan(&self, before: &[SessionEvent], e: &SessionEvent) -> Result<Transition, AppendError> {
        let expected = before.len() as u64;
        if e.seq() != expected {
            return Err(AppendError::SeqMismatch {
                expected,
                got: e.seq(),
            });
        }
        let op = e.surface_op();
        let sources = e.source_event_seqs();
        if !e.data().is_surface_eligible() {
            let event_type = || alloc::string::String::from(e.event_type());
            if op.is_some() {
                return Err(AppendError::MarkerOnLogOnly {
                    event_type: event_type(),
                });
            }
            if sources.is_some() {
                return Err(AppendError::SourcesOnLogOnly {
                    event_type: event_type(),
                });
            }
            return Ok(Transition::None);
        }
        let Some(op) = op else {
            return Err(AppendError::MissingMarker {
                event_type: alloc::string::String::from(e.event_type()),
            });
        };
        let range = match op {
            SurfaceOp::Append => None,
            SurfaceOp::Replace { start, end } => {
                // Feature `surface-replace` off: no replacement is built.
                if !cfg!(feature = "surface-replace") {
                    return Err(AppendError::InvalidSurfaceOp {
                        detail: alloc::string::String::from(
                            "surfaceOp replace is not in this build (feature surface-replace)",
                        ),
                    });
                }
                let i = self.position(start).ok_or(AppendError::RangeNotFound {
                    which: "start",
                    seq: start,
                })?;
                let j = self.position(end).ok_or(AppendError::RangeNotFound {
                    which: "end",
                    seq: end,
                })?;
                if i > j {
                    return Err(AppendError::RangeReversed { start, end });
                }
                Some((i, j))
            }
        };
        if let Some(src) = sources {
            check_sources(e, src)?;
        }
        let Some((i, j)) = range else {
            return Ok(Transition::Append);
        };
        let shadow = &self.nodes[i..=j];
        let cited = sources.unwrap_or(&[]);
        let missing: Vec<u64> = shadow
            .iter()
            .copied()
            .filter(|s| !cited.contains(s))
            .collect();
        if !missing.is_empty() {
            return Err(AppendError::MissingCoverage { missing });
        }
        if let EventData::ToolResult(new) = e.data() {
            if shadow.len() != 1 {
                return Err(AppendError::RewriteNotSingle {
                    count: shadow.len(),
                });
            }
            let target_seq = shadow[0];
            let target = usize::try_from(target_seq).ok().and_then(|i| before.get(i));
            let Some(EventData::ToolResult(old)) = target.map(SessionEvent::data) else {
                return Err(AppendError::RewriteTargetNotToolResult { seq: target_seq });
            };
            let same = match (
                crate::json::to_value(&**old).ok(),
                crate::json::to_value(&**new).ok(),
            ) {
                (Some(a), Some(b)) => blank_tool_content(a) == blank_tool_content(b),
                _ => false,
            };
            if !same {
                return Err(AppendError::RewriteChangesMoreThanContent { seq: target_seq });
            }
        }
        Ok(Transition::Replace { i, j })
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.nodes.iter().position(|n| *n == seq)
    }

    /// The derived message history (6.2), cached incrementally (6.3): only
    /// surface nodes added since the last call are projected, and the cache
    /// is rebuilt only after a replacement. The slice borrows the session;
    /// `.to_vec()` keeps a copy (the messages are shared, C4).
    pub fn derive_messages(&mut self) -> &[Arc<Message>] {
        self.derived
            .update(&self.nodes, self.replace_generation, &self.events)
    }

    /// A from-scratch derivation over the current surface (the oracle of C6).
    pub fn derive_messages_uncached(&self) -> Vec<Arc<Message>> {
        super::derive::derive_all(&self.nodes, &self.events)
    }

    /// The canonical request header in force (7.3 H2): the canonical form of
    /// the last `request/header`, or `None` before the first one.
    pub fn request_header(&self) -> Option<&Arc<EpochHeader>> {
        self.request_header.as_ref()
    }

    /// The data of the last `request/context` event (7.3 H3).
    pub fn request_context(&self) -> Option<&Arc<RequestContext>> {
        self.request_context.as_ref()
    }
}

fn check_sources(e: &SessionEvent, src: &[u64]) -> Result<(), AppendError> {
    if src.is_empty() && !matches!(e.data(), EventData::AssistantMessage(_)) {
        return Err(AppendError::EmptySources);
    }
    // The loop cites chunk seqs in increasing order; only an unsorted list
    // needs the quadratic duplicate scan.
    let increasing = src.windows(2).all(|w| w[0] < w[1]);
    for (k, &s) in src.iter().enumerate() {
        if s > crate::json::MAX_SAFE_INTEGER {
            return Err(AppendError::SourceNotSafeInteger { value: s });
        }
        if !increasing && src[..k].contains(&s) {
            return Err(AppendError::DuplicateSource { seq: s });
        }
        if s >= e.seq() {
            return Err(AppendError::SourceNotEarlier {
                seq: s,
                event_seq: e.seq(),
            });
        }
    }
    Ok(())
}

/// S8: `data` with `message.content` replaced by its first block whose inner
/// `content` is `null`.
fn blank_tool_content(mut data: Value) -> Value {
    if let Some(content) = data.get_mut("message").and_then(|m| m.get_mut("content")) {
        let first = content.as_array().and_then(|a| a.first()).cloned();
        let blanked = match first {
            Some(Value::Object(mut block)) => {
                block.insert("content".into(), Value::Null);
                Value::Object(block)
            }
            Some(other) => other,
            None => Value::Null,
        };
        *content = Value::Array(alloc::vec![blanked]);
    }
    data
}

/// One replacement of a surface fold (5.5).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Replacement {
    /// The replacing event.
    pub seq: u64,
    /// The range start it named.
    pub start: u64,
    /// The range end it named.
    pub end: u64,
    /// The nodes it shadowed, in surface order.
    pub shadowed_seqs: Vec<u64>,
}

/// The result of [`fold_surface`]:
/// `{"nodes":[…],"replacements":[{"seq","start","end","shadowedSeqs"}]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SurfaceFold {
    /// The final surface nodes.
    pub nodes: Vec<u64>,
    /// Every replacement in log order.
    pub replacements: Vec<Replacement>,
}

/// `foldSurface` (5.5): replays the surface transition check (5.3) over a
/// complete log from seq 0 and records each replacement with the nodes it
/// actually shadowed. Fails on exactly the events an append would reject
/// under S1–S8.
pub fn fold_surface(events: &[SessionEvent]) -> Result<SurfaceFold, SeedError> {
    let mut s = Session::new(SessionHeader::new("", 0));
    let mut replacements = Vec::new();
    for (index, e) in events.iter().enumerate() {
        let before = events.get(..index).unwrap_or(&[]);
        let t = s
            .plan(before, e)
            .map_err(|error| SeedError { index, error })?;
        if let (Transition::Replace { i, j }, Some(SurfaceOp::Replace { start, end })) =
            (t, e.surface_op())
        {
            replacements.push(Replacement {
                seq: e.seq(),
                start,
                end,
                shadowed_seqs: s.nodes.get(i..=j).unwrap_or(&[]).to_vec(),
            });
        }
        s.apply(e, t);
    }
    Ok(SurfaceFold {
        nodes: s.nodes,
        replacements,
    })
}

/// `foldRequestHeader(events, from)` (7.3 H1): starting from `from`, the
/// canonical form of every `request/header` in order; the final state.
pub fn fold_request_header(
    events: &[SessionEvent],
    from: Option<EpochHeader>,
) -> Option<EpochHeader> {
    events.iter().fold(from, |state, e| match e.data() {
        EventData::RequestHeader(h) => Some(h.header.canonical()),
        _ => state,
    })
}

#[cfg(test)]
mod tests {
    use crate::content::ContentBlock;
    use crate::message::Message;
    use crate::session::{Session, SessionHeader, SurfaceIntent};

    /// A surface replacement is appended in the default build; with
    /// feature `surface-replace` off it is refused (S5), the log unchanged.
    #[test]
    fn replace_needs_surface_replace() {
        let mut s = Session::new(SessionHeader::new("s1", 1000));
        let user = |id: &str| Message::user(id, alloc::vec![ContentBlock::text("hello")]);
        s.append(user("u0"), Some(SurfaceIntent::append()), 1)
            .unwrap();
        let r = s.append(
            user("u1"),
            Some(SurfaceIntent::replace(0, 0, alloc::vec![0])),
            2,
        );
        #[cfg(feature = "surface-replace")]
        {
            assert!(r.is_ok(), "{r:?}");
            assert_eq!(s.surface().nodes, &[1]);
        }
        #[cfg(not(feature = "surface-replace"))]
        {
            assert!(
                matches!(r, Err(crate::session::AppendError::InvalidSurfaceOp { .. })),
                "{r:?}"
            );
            assert_eq!((s.len(), s.surface().nodes), (1, &[0][..]));
        }
    }
}
