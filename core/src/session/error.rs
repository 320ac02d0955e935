//! Append and seed validation errors, each naming the rule it enforces.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Why an event was not appended (session.md 2, 5.2–5.4, 4.15). The log and
/// the surface are unchanged when this is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppendError {
    /// J1/J2 (A1, V1): the data holds a value that is not lossless JSON
    /// (a negative zero, a non-finite number).
    NotLosslessJson {
        /// Where and what.
        detail: String,
    },
    /// V2/V3/E7: the envelope is malformed (unknown key, wrong field type,
    /// `ignorable` not `true`, `seq`/`time` not safe integers).
    InvalidEnvelope {
        /// What is wrong.
        detail: String,
    },
    /// V2: an envelope key outside `type, seq, time, data, surfaceOp,
    /// sourceEventSeqs, ignorable`.
    UnknownEnvelopeKey {
        /// The key.
        key: String,
    },
    /// E7: `ignorable` present but not literally `true`.
    InvalidIgnorable,
    /// S5: `surfaceOp` is neither `"append"` nor a replace object.
    InvalidSurfaceOp {
        /// What is wrong.
        detail: String,
    },
    /// S6: `sourceEventSeqs` is not an array of non-negative safe integers.
    InvalidSources {
        /// What is wrong.
        detail: String,
    },
    /// A core payload does not have the shape of section 4.
    InvalidPayload {
        /// The event type.
        event_type: String,
        /// What is wrong.
        detail: String,
    },
    /// V4: a `request/header` config is invalid.
    InvalidRequestHeader {
        /// What is wrong.
        detail: String,
    },
    /// M1–M6: a message of a surface event has the wrong shape.
    InvalidMessage {
        /// The rule, e.g. `"M6"`.
        rule: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A2/V6: a retired format (`request/header-delta`, reason `fallback`).
    Retired {
        /// What was retired.
        what: String,
    },
    /// S1/V7: `seq` is not the next position.
    SeqMismatch {
        /// The expected seq (the log length).
        expected: u64,
        /// The seq the event carries.
        got: u64,
    },
    /// S2: a log-only type carries `surfaceOp`.
    MarkerOnLogOnly {
        /// The event type.
        event_type: String,
    },
    /// S2: a log-only type carries `sourceEventSeqs`.
    SourcesOnLogOnly {
        /// The event type.
        event_type: String,
    },
    /// S3: a surface-eligible type has no `surfaceOp`.
    MissingMarker {
        /// The event type.
        event_type: String,
    },
    /// S5: the replace range names a seq that is not a surface node.
    RangeNotFound {
        /// `"start"` or `"end"`.
        which: &'static str,
        /// The missing seq.
        seq: u64,
    },
    /// S5: the replace range's start comes after its end in surface order.
    RangeReversed {
        /// The start seq.
        start: u64,
        /// The end seq.
        end: u64,
    },
    /// S6: `sourceEventSeqs` is empty on a type other than `assistant/message`.
    EmptySources,
    /// S6: a source is not a non-negative safe integer.
    SourceNotSafeInteger {
        /// The offending value.
        value: u64,
    },
    /// S6: a source appears twice.
    DuplicateSource {
        /// The duplicated seq.
        seq: u64,
    },
    /// S6: a source is not strictly earlier than the event.
    SourceNotEarlier {
        /// The offending seq.
        seq: u64,
        /// The event's seq.
        event_seq: u64,
    },
    /// S7: shadowed nodes missing from `sourceEventSeqs`.
    MissingCoverage {
        /// The shadowed seqs not cited, in surface order.
        missing: Vec<u64>,
    },
    /// S8: a `tool/result` replacement must shadow exactly one node.
    RewriteNotSingle {
        /// How many nodes the range covers.
        count: usize,
    },
    /// S8: a `tool/result` replacement must target a current `tool/result`.
    RewriteTargetNotToolResult {
        /// The targeted seq.
        seq: u64,
    },
    /// S8: a `tool/result` rewrite may change only the tool-result content.
    RewriteChangesMoreThanContent {
        /// The targeted seq.
        seq: u64,
    },
}

impl AppendError {
    /// The spec rule this error enforces, e.g. `"S7"`.
    pub fn rule(&self) -> &'static str {
        match self {
            AppendError::NotLosslessJson { .. } => "J2",
            AppendError::InvalidEnvelope { .. } => "V3",
            AppendError::UnknownEnvelopeKey { .. } => "V2",
            AppendError::InvalidIgnorable => "E7",
            AppendError::InvalidSurfaceOp { .. } => "S5",
            AppendError::InvalidSources { .. } => "S6",
            AppendError::InvalidPayload { .. } => "E4",
            AppendError::InvalidRequestHeader { .. } => "V4",
            AppendError::InvalidMessage { rule, .. } => rule,
            AppendError::Retired { .. } => "A2",
            AppendError::SeqMismatch { .. } => "S1",
            AppendError::MarkerOnLogOnly { .. } | AppendError::SourcesOnLogOnly { .. } => "S2",
            AppendError::MissingMarker { .. } => "S3",
            AppendError::RangeNotFound { .. } | AppendError::RangeReversed { .. } => "S5",
            AppendError::EmptySources
            | AppendError::SourceNotSafeInteger { .. }
            | AppendError::DuplicateSource { .. }
            | AppendError::SourceNotEarlier { .. } => "S6",
            AppendError::MissingCoverage { .. } => "S7",
            AppendError::RewriteNotSingle { .. }
            | AppendError::RewriteTargetNotToolResult { .. }
            | AppendError::RewriteChangesMoreThanContent { .. } => "S8",
        }
    }
}

#[cfg(feature = "error-texts")]
fn join(seqs: &[u64]) -> String {
    let mut s = String::new();
    for (i, n) in seqs.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&alloc::format!("{n}"));
    }
    s
}

#[cfg(feature = "error-texts")]
impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.rule())?;
        match self {
            AppendError::NotLosslessJson { detail } => {
                write!(f, "non-JSON-serializable data: {detail}")
            }
            AppendError::InvalidEnvelope { detail } => write!(f, "invalid envelope: {detail}"),
            AppendError::UnknownEnvelopeKey { key } => {
                write!(f, "invalid envelope: unknown envelope key \"{key}\"")
            }
            AppendError::InvalidIgnorable => {
                f.write_str("invalid envelope: \"ignorable\" must be true when present")
            }
            AppendError::InvalidSurfaceOp { detail } => f.write_str(detail),
            AppendError::InvalidSources { detail } => f.write_str(detail),
            AppendError::InvalidPayload { event_type, detail } => {
                write!(f, "invalid {event_type} data: {detail}")
            }
            AppendError::InvalidRequestHeader { detail } => {
                write!(f, "invalid request/header: {detail}")
            }
            AppendError::InvalidMessage { detail, .. } => write!(f, "{detail}"),
            AppendError::Retired { what } => write!(f, "retired format: {what}"),
            AppendError::SeqMismatch { expected, got } => {
                write!(f, "expected seq {expected}, got {got}")
            }
            AppendError::MarkerOnLogOnly { event_type } => write!(
                f,
                "{event_type} is not surface-eligible and cannot carry surfaceOp"
            ),
            AppendError::SourcesOnLogOnly { event_type } => write!(
                f,
                "{event_type} is not surface-eligible and cannot carry sourceEventSeqs"
            ),
            AppendError::MissingMarker { event_type } => {
                write!(f, "{event_type} requires a surfaceOp marker")
            }
            AppendError::RangeNotFound { which, seq } => {
                write!(f, "replace {which} seq {seq} not found in surface")
            }
            AppendError::RangeReversed { start, end } => write!(
                f,
                "replace start seq {start} is after end seq {end} in surface order"
            ),
            AppendError::EmptySources => {
                f.write_str("sourceEventSeqs may be empty only on assistant/message")
            }
            AppendError::SourceNotSafeInteger { value } => write!(
                f,
                "sourceEventSeqs element {value} is not a non-negative safe integer"
            ),
            AppendError::DuplicateSource { seq } => {
                write!(f, "sourceEventSeqs names seq {seq} twice")
            }
            AppendError::SourceNotEarlier { seq, event_seq } => write!(
                f,
                "sourceEventSeqs element {seq} is not earlier than the event (seq {event_seq})"
            ),
            AppendError::MissingCoverage { missing } => write!(
                f,
                "replace sourceEventSeqs must cite every shadowed node; missing {}",
                join(missing)
            ),
            AppendError::RewriteNotSingle { count } => write!(
                f,
                "a tool/result replacement must shadow exactly one node, not {count}"
            ),
            AppendError::RewriteTargetNotToolResult { seq } => write!(
                f,
                "a tool/result replacement must target a current tool/result (seq {seq} is not one)"
            ),
            AppendError::RewriteChangesMoreThanContent { seq } => write!(
                f,
                "a tool/result rewrite of seq {seq} may change only content"
            ),
        }
    }
}

/// Feature `error-texts` off: the rule and a fixed text per variant (no
/// seqs, keys or details; the fields are still there to match on).
#[cfg(not(feature = "error-texts"))]
impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule())?;
        f.write_str(match self {
            AppendError::NotLosslessJson { .. } => ": non-JSON-serializable data",
            AppendError::InvalidEnvelope { .. }
            | AppendError::UnknownEnvelopeKey { .. }
            | AppendError::InvalidIgnorable => ": invalid envelope",
            AppendError::InvalidSurfaceOp { .. } => ": invalid surfaceOp",
            AppendError::InvalidSources { .. }
            | AppendError::EmptySources
            | AppendError::SourceNotSafeInteger { .. }
            | AppendError::DuplicateSource { .. }
            | AppendError::SourceNotEarlier { .. } => ": invalid sourceEventSeqs",
            AppendError::InvalidPayload { .. } => ": invalid data",
            AppendError::InvalidRequestHeader { .. } => ": invalid request/header",
            AppendError::InvalidMessage { .. } => ": invalid message",
            AppendError::Retired { .. } => ": retired format",
            AppendError::SeqMismatch { .. } => ": seq mismatch",
            AppendError::MarkerOnLogOnly { .. } | AppendError::SourcesOnLogOnly { .. } => {
                ": log-only type with a surface field"
            }
            AppendError::MissingMarker { .. } => ": surfaceOp missing",
            AppendError::RangeNotFound { .. } | AppendError::RangeReversed { .. } => {
                ": invalid replace range"
            }
            AppendError::MissingCoverage { .. } => ": shadowed nodes not cited",
            AppendError::RewriteNotSingle { .. }
            | AppendError::RewriteTargetNotToolResult { .. }
            | AppendError::RewriteChangesMoreThanContent { .. } => ": invalid tool/result rewrite",
        })
    }
}

impl core::error::Error for AppendError {}

/// A seed, restore or load failed validation (5.4): which event and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeedError {
    /// Index of the offending event in the seed.
    pub index: usize,
    /// The rule violation.
    pub error: AppendError,
}

impl SeedError {
    /// The event at `index` of a seed broke `error`.
    pub fn new(index: usize, error: AppendError) -> Self {
        SeedError { index, error }
    }
}

#[cfg(feature = "error-texts")]
impl fmt::Display for SeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed event at index {}: {}", self.index, self.error)
    }
}

/// Feature `error-texts` off: the error's short text, without the index.
#[cfg(not(feature = "error-texts"))]
impl fmt::Display for SeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("seed event: ")?;
        fmt::Display::fmt(&self.error, f)
    }
}

impl core::error::Error for SeedError {}

#[cfg(test)]
mod tests {
    use super::{AppendError, SeedError};
    use alloc::string::ToString;

    /// The default build's texts name the seqs; with `error-texts` off, a
    /// fixed text per variant (still behind the rule).
    #[test]
    fn append_error_texts() {
        let mismatch = AppendError::SeqMismatch {
            expected: 3,
            got: 5,
        };
        let coverage = AppendError::MissingCoverage {
            missing: alloc::vec![4, 6],
        };
        let seed = SeedError::new(2, mismatch.clone());
        #[cfg(feature = "error-texts")]
        {
            assert_eq!(mismatch.to_string(), "S1: expected seq 3, got 5");
            assert_eq!(
                coverage.to_string(),
                "S7: replace sourceEventSeqs must cite every shadowed node; missing 4, 6"
            );
            assert_eq!(
                seed.to_string(),
                "seed event at index 2: S1: expected seq 3, got 5"
            );
        }
        #[cfg(not(feature = "error-texts"))]
        {
            assert_eq!(mismatch.to_string(), "S1: seq mismatch");
            assert_eq!(coverage.to_string(), "S7: shadowed nodes not cited");
            assert_eq!(seed.to_string(), "seed event: S1: seq mismatch");
        }
    }
}
