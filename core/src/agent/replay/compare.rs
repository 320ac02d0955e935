//! Comparing a produced core event with the recorded one, and the report of
//! the differences.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::Value;

use crate::session::{EventData, SessionEvent, SurfaceOp};

use crate::agent::machine::is_loop_owned;

/// A core event that differs between the recording and the replay.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Difference {
    /// The seq where the logs part.
    pub seq: u64,
    /// The JSON path where the two events first differ (`.data.message`),
    /// when both exist and have the same type.
    pub path: Option<String>,
    /// The recorded event (without `time`), if any.
    pub expected: Option<String>,
    /// The produced event (without `time`), if any.
    pub produced: Option<String>,
    /// Why they differ, in words.
    pub reason: String,
}

impl Difference {
    /// Compares a recorded and a produced event at `seq` by their
    /// [`comparable`] form; `None` when they agree (absent on both sides
    /// included).
    pub fn between(
        seq: u64,
        expected: Option<&SessionEvent>,
        produced: Option<&SessionEvent>,
    ) -> Option<Difference> {
        match (expected, produced) {
            (None, None) => None,
            (Some(e), None) => Some(Difference::at(
                seq,
                Some(comparable(e)),
                None,
                String::from("the agent did not write this recorded event"),
            )),
            (None, Some(p)) => Some(Difference::at(
                seq,
                None,
                Some(comparable(p)),
                String::from("the agent wrote an event the recording does not have"),
            )),
            (Some(e), Some(p)) => {
                let (a, b) = (comparable(e), comparable(p));
                (a != b).then(|| Difference {
                    seq,
                    path: json_path(e, p),
                    expected: Some(a),
                    produced: Some(b),
                    reason: explain(e, p),
                })
            }
        }
    }

    /// A difference at `seq` that is not between two events (the replay
    /// could not go on), explained by `reason`.
    pub fn stopped(seq: u64, reason: impl Into<String>) -> Difference {
        Difference::at(seq, None, None, reason.into())
    }

    /// A difference at `seq` with no path.
    pub(super) fn at(
        seq: u64,
        expected: Option<String>,
        produced: Option<String>,
        reason: String,
    ) -> Self {
        Difference {
            seq,
            path: None,
            expected,
            produced,
            reason,
        }
    }
}

impl core::fmt::Display for Difference {
    /// Three lines: `difference at seq N[ (path P)]: reason`, then the
    /// recorded and the produced event.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "difference at seq {}", self.seq)?;
        if let Some(p) = &self.path {
            write!(f, " (path {p})")?;
        }
        writeln!(f, ": {}", self.reason)?;
        writeln!(
            f,
            "  recorded: {}",
            self.expected.as_deref().unwrap_or("(no event)")
        )?;
        write!(
            f,
            "  produced: {}",
            self.produced.as_deref().unwrap_or("(no event)")
        )
    }
}

/// The outcome of a replay.
///
/// Each loop instance of the log (see [`replay`](super::replay)) is replayed on its own,
/// so a difference in one instance does not hide one in another; within an
/// instance the replay stops at its first difference (what follows no
/// longer has the recorded inputs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// Core events reproduced identically.
    pub reproduced: usize,
    /// Core events in the replayed part of the recording.
    pub total: usize,
    /// Events of the recording's seed (restored, not replayed).
    pub seed: usize,
    /// Loop instances replayed.
    pub instances: usize,
    /// The first difference, if any (the first of [`Self::differences`]).
    pub first_difference: Option<Difference>,
    /// Every difference found, at most one per loop instance, in log order.
    pub differences: Vec<Difference>,
}

impl ReplayReport {
    /// Whether every core event was reproduced and nothing else produced.
    pub fn identical(&self) -> bool {
        self.first_difference.is_none() && self.reproduced == self.total
    }

    /// Panics with the report's [`Display`](core::fmt::Display) unless the
    /// replay was [identical](Self::identical); for `#[test]`s.
    ///
    /// # Panics
    ///
    /// When the replay is not identical.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.identical() {
            panic!("the replay differs from the recording:\n{self}");
        }
    }

    /// An empty report over `seed` seed events (no instance replayed yet).
    pub fn new(seed: usize) -> Self {
        ReplayReport {
            reproduced: 0,
            total: 0,
            seed,
            instances: 0,
            first_difference: None,
            differences: Vec::new(),
        }
    }

    /// Adds a difference (the first one also becomes
    /// [`Self::first_difference`]).
    pub fn push(&mut self, d: Difference) {
        if self.first_difference.is_none() {
            self.first_difference = Some(d.clone());
        }
        self.differences.push(d);
    }
}

impl core::fmt::Display for ReplayReport {
    /// A summary line (seed events, replayed events, reproduced), then each
    /// difference.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "reproduced {}/{} core events ({} seed events not replayed, {} loop instance{} replayed)",
            self.reproduced,
            self.total,
            self.seed,
            self.instances,
            if self.instances == 1 { "" } else { "s" }
        )?;
        for d in &self.differences {
            write!(f, "\n{d}")?;
        }
        if self.differences.is_empty() && !self.identical() {
            write!(f, "\nthe replay stopped before the end of the recording")?;
        }
        Ok(())
    }
}

/// Asserts that a [`ReplayReport`] is identical; on failure the panic
/// message is the report's `Display` (every difference).
#[macro_export]
macro_rules! assert_replays {
    ($report:expr $(,)?) => {
        $crate::agent::replay::ReplayReport::assert_ok(&$report)
    };
}

/// Whether a recorded event is written by the loop (a *core event*), as
/// opposed to an input (plugin events, tool-owned events, surface
/// replacements, the seed marker).
pub fn is_core_event(e: &SessionEvent) -> bool {
    match e.data() {
        EventData::UserMessage(_) | EventData::ToolResult(_) => {
            matches!(e.surface_op(), Some(SurfaceOp::Append))
        }
        EventData::EndSeed => false,
        d => is_loop_owned(d.event_type()),
    }
}

/// The comparable form of an event: its JSON line without `time`.
pub fn comparable(e: &SessionEvent) -> String {
    comparable_with(e, false)
}

/// [`comparable`], with `request/header` reduced to its canonical header
/// when `canonical_headers` is set.
pub(super) fn comparable_with(e: &SessionEvent, canonical_headers: bool) -> String {
    // A payload read leniently compares by what dsh owns.
    let line = if e.deviation().is_some() {
        e.to_canonical_json()
    } else {
        e.to_json()
    };
    match serde_json::from_str::<Value>(&line) {
        Ok(Value::Object(mut m)) => {
            m.shift_remove("time");
            if let (true, EventData::RequestHeader(h)) = (canonical_headers, e.data())
                && let (Some(Value::Object(data)), Ok(header)) = (
                    m.get_mut("data"),
                    serde_json::to_value(h.header.canonical()),
                )
            {
                data.insert("header".into(), header);
            }
            Value::Object(m).to_string()
        }
        _ => line,
    }
}

/// Why two events differ, in words.
pub(super) fn explain(expected: &SessionEvent, produced: &SessionEvent) -> String {
    if expected.event_type() != produced.event_type() {
        let what = match expected.event_type() {
            "turn/start" if is_legacy_turn_start(expected) => {
                " (a legacy turn/start with a trigger the core does not write)"
            }
            _ => "",
        };
        return format!(
            "the recording has {} here{what}, the agent wrote {}",
            expected.event_type(),
            produced.event_type()
        );
    }
    let a: Value = serde_json::from_str(&comparable(expected)).unwrap_or_default();
    let b: Value = serde_json::from_str(&comparable(produced)).unwrap_or_default();
    match first_json_difference(&a, &b, String::new()) {
        Some(path) if a == b => format!(
            "same values, different key order or number text at {}",
            if path.is_empty() { "the top" } else { &path }
        ),
        Some(path) => format!(
            "{} differs at {}",
            expected.event_type(),
            if path.is_empty() { "the top" } else { &path }
        ),
        None => format!(
            "{} differs in key order or number text",
            expected.event_type()
        ),
    }
}

/// The JSON path where two events of the same type first differ.
pub(super) fn json_path(expected: &SessionEvent, produced: &SessionEvent) -> Option<String> {
    if expected.event_type() != produced.event_type() {
        return None;
    }
    let a: Value = serde_json::from_str(&comparable(expected)).ok()?;
    let b: Value = serde_json::from_str(&comparable(produced)).ok()?;
    first_json_difference(&a, &b, String::new())
        .map(|p| if p.is_empty() { String::from(".") } else { p })
}

pub(super) fn is_legacy_turn_start(e: &SessionEvent) -> bool {
    serde_json::from_str::<Value>(&e.to_json())
        .ok()
        .and_then(|v| v.get("data").and_then(|d| d.get("trigger")).cloned())
        .is_some()
}

pub(super) fn first_json_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let kx: Vec<&String> = x.keys().collect();
            let ky: Vec<&String> = y.keys().collect();
            if kx != ky {
                return Some(format!("{path} (keys {kx:?} vs {ky:?})"));
            }
            for (k, v) in x {
                let sub = format!("{path}.{k}");
                if let Some(p) = y
                    .get(k)
                    .and_then(|w| first_json_difference(v, w, sub.clone()))
                {
                    return Some(p);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path} (length {} vs {})", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (v, w))| first_json_difference(v, w, format!("{path}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(path),
    }
}
