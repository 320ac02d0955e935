//! The JSONL logical format (persistence.md 5.2–5.4, 6.1–6.6) as pure
//! functions over bytes, shared by the std and embedded stores.
//!
//! - Writing: [`encode_header_line`], [`encode_event_line`] and
//!   [`encode_batch`] (with packed chunk rows).
//! - Reading: [`decode_header_line`], [`Decoder::decode_line`] (one record),
//!   the line [`Scanner`] (torn tail vs corruption), [`scan_log`]. A line
//!   in the exact form the writer produces is read by a template that
//!   mirrors the writer (typed, no `Value` trees, nothing to re-check);
//!   any other line takes serde, and keeps its source text when writing it
//!   back would change a byte.
//! - Recovery: [`interrupted_turn_closers`], [`load_log`] (validate and
//!   close an interrupted turn), [`LoadedLog::repaired_bytes`].
//! - [`fixture_tokens`]: the conformance substitutions.
//!
//! Physical concerns (files, fsync, zstd frames) belong to the stores; a
//! zstd store feeds each frame's plaintext to a [`Scanner`].

mod canon;
mod decode;
mod lenient;
mod packed;
mod paths;
mod repair;
mod verify;
mod write;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde_json::Value;

use crate::ids::SessionId;
use crate::json::MAX_SAFE_INTEGER;
use crate::session::{
    EventData, HeaderError, KNOWN_EVENT_TYPES, SeedError, Session, SessionEvent, SessionHeader,
};

pub use decode::{Decoded, Decoder, InvalidEvent, Record, Unparsable};
pub use packed::{MIN_RUN, encode_batch};
pub use paths::{check_batch_seqs, project_key, session_id_segment, transcript_path};
pub use repair::{TOOL_NOT_STARTED_TEXT, TOOL_OUTCOME_UNKNOWN_TEXT, interrupted_turn_closers};
pub use verify::{VerifyReport, verify_log};
pub use write::{encode_event_line, encode_header_line};
pub(crate) use write::{write_event_canonical, write_event_json, write_value_js};

/// Why a stored log cannot be read (persistence.md OP12, 6.6).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogError {
    /// Damaged or invalid content that is not a torn tail: no header line,
    /// a bad header, a defect followed by a committed `turn/end`, retired
    /// vocabulary. The message starts with the reference's wording.
    Corrupt {
        /// E.g. `corrupt session log: unparsable committed event at line 1`.
        message: String,
    },
    /// Intact but not interpretable by this build: header `version != 0`,
    /// or an unknown event type without `ignorable: true`.
    FormatUnsupported {
        /// The reference's message.
        message: String,
    },
    /// The session header breaks an HD rule.
    InvalidHeader {
        /// The session id.
        session_id: String,
        /// The rule broken.
        error: HeaderError,
    },
    /// An event breaks a validation rule (seed validation, 5.4).
    InvalidEvent {
        /// The session id.
        session_id: String,
        /// Which event and rule.
        error: SeedError,
    },
}

impl LogError {
    /// Whether this is corruption (everything but `FormatUnsupported`).
    pub fn is_corruption(&self) -> bool {
        !matches!(self, LogError::FormatUnsupported { .. })
    }

    fn corrupt(message: impl Into<String>) -> Self {
        LogError::Corrupt {
            message: message.into(),
        }
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Corrupt { message } | LogError::FormatUnsupported { message } => {
                f.write_str(message)
            }
            LogError::InvalidHeader { session_id, error } => {
                write!(
                    f,
                    "stored session \"{session_id}\" failed validation: {error}"
                )
            }
            LogError::InvalidEvent { session_id, error } => {
                write!(
                    f,
                    "stored session \"{session_id}\" failed validation: {error}"
                )
            }
        }
    }
}

impl core::error::Error for LogError {}

/// The position of the first `\n` in `bytes` (vectorized where the target
/// has SIMD).
pub(crate) fn find_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// How many `\n` bytes `bytes` holds (exact; memchr's vectorized count).
pub fn count_newlines(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count()
}

/// The byte length of the header record: up to and including the first
/// `\n` (HL2.1).
pub fn header_len(bytes: &[u8]) -> Option<usize> {
    find_newline(bytes).map(|i| i + 1)
}

/// Reads a header line (HL2.2–HL2.6; with or without its `\n`).
pub fn decode_header_line(line: &[u8]) -> Result<SessionHeader, LogError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let value: Value = serde_json::from_slice(line)
        .map_err(|_| LogError::corrupt("corrupt session log: header line is not valid JSON"))?;
    let not_header =
        || LogError::corrupt("corrupt session log: first line is not a session header");
    let Value::Object(obj) = value else {
        return Err(not_header());
    };
    let id_text = obj.get("id").and_then(Value::as_str).unwrap_or("");
    if let Some(v) = obj.get("version").filter(|v| v.is_number())
        && v.as_u64() != Some(0)
    {
        let newer = v.as_f64().is_some_and(|n| n > 0.0);
        let message = if newer {
            format!(
                "session \"{id_text}\" uses log format v{v}, but this harness reads only v0: the log was written by a newer harness \u{2014} upgrade the harness to open it"
            )
        } else {
            format!(
                "session \"{id_text}\" uses log format v{v}, older than the supported v0, and this build ships no upgrade path for it"
            )
        };
        return Err(LogError::FormatUnsupported { message });
    }
    let safe = |k: &str| {
        obj.get(k)
            .and_then(Value::as_u64)
            .filter(|n| *n <= MAX_SAFE_INTEGER)
    };
    let shape_ok = obj.get("type").and_then(Value::as_str) == Some("session")
        && obj.get("version").is_some_and(Value::is_number)
        && obj.get("id").is_some_and(Value::is_string)
        && safe("createdAt").is_some()
        && safe("delegationDepth").is_some()
        && obj
            .get("origin")
            .is_none_or(|o| o.as_str() == Some("subagent"))
        && obj.get("agentPreset").is_none_or(Value::is_string);
    if !shape_ok {
        return Err(not_header());
    }
    if obj.contains_key("sandboxMode") || obj.contains_key("approvalPolicy") {
        return Err(LogError::corrupt(
            "corrupt session log: the header carries retired fields (sandboxMode/approvalPolicy)",
        ));
    }
    let invalid = |rule: &'static str, message: &str| LogError::InvalidHeader {
        session_id: String::from(id_text),
        error: HeaderError::new(rule, message),
    };
    let opt_string = |k: &str, rule: &'static str| match obj.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(rule, &format!("{k} must be a string"))),
    };
    let cwd = opt_string("cwd", "HD5")?;
    let parent_session = opt_string("parentSession", "HD6")?.map(SessionId);
    let seed_length = match obj.get("seedLength") {
        None => None,
        Some(_) => Some(
            safe("seedLength")
                .ok_or_else(|| invalid("HD7", "seedLength must be a non-negative safe integer"))?,
        ),
    };
    Ok(SessionHeader {
        id: SessionId::from(id_text),
        created_at: safe("createdAt").unwrap_or(0),
        cwd,
        parent_session,
        seed_length,
        origin: obj.get("origin").and_then(Value::as_str).map(String::from),
        delegation_depth: safe("delegationDepth"),
        agent_preset: obj
            .get("agentPreset")
            .and_then(Value::as_str)
            .map(String::from),
    })
}

/// A scan failure: corruption, or an event line that parses but breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScanError {
    /// SC2/SC3: a defect followed by (or itself holding) a committed `turn/end`.
    Corrupt {
        /// The recorded issue, e.g. `corrupt session log: seq gap ...`.
        message: String,
    },
    /// A committed event line that is not a valid event.
    Invalid {
        /// Its index in the log.
        index: usize,
        /// The rule it breaks.
        error: crate::session::AppendError,
    },
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanError::Corrupt { message } => f.write_str(message),
            ScanError::Invalid { index, error } => {
                write!(f, "event at index {index}: {error}")
            }
        }
    }
}

impl core::error::Error for ScanError {}

/// The line scanner (6.1, SC1–SC6). Feed it the bytes after the header (in
/// one piece, or one decoded zstd frame at a time); it keeps the valid
/// contiguous prefix and the offset just after the last committed line.
#[derive(Debug)]
pub struct Scanner {
    decoder: Decoder,
    events: Vec<SessionEvent>,
    consumed: usize,
    committed: usize,
    issue: Option<String>,
    line: usize,
    /// The positions in the prefix of its plugin (or unknown) events: only
    /// those need the known-type check.
    plugins: Vec<usize>,
}

impl Scanner {
    /// A scanner whose offsets start at `base` (the header length for a raw
    /// file, or 0).
    pub fn new(base: usize) -> Self {
        Scanner {
            decoder: Decoder::new(),
            events: Vec::new(),
            consumed: base,
            committed: base,
            issue: None,
            line: 0,
            plugins: Vec::new(),
        }
    }

    /// Scans the complete lines of `bytes`; a final fragment without `\n` is
    /// ignored (SC5). Fails only on corruption (SC2, SC3) or a committed
    /// invalid event.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ScanError> {
        // One UTF-8 check for the whole buffer instead of one per string; a
        // buffer with invalid UTF-8 is decoded line by line (those lines are
        // then unparsable, Q5).
        let text = core::str::from_utf8(bytes).ok();
        let mut start = 0;
        while let Some(rel) = find_newline(&bytes[start..]) {
            let end = start + rel;
            let line = &bytes[start..end];
            let line_text = text.and_then(|t| t.get(start..end));
            start = end + 1;
            let record = match self.decoder.decode_canonical(line, line_text) {
                // The common case, straight into the prefix: a well-formed
                // event in sequence while the scan is clean (what `record`
                // does for it, without the detour through `Record`).
                Some(e) if self.issue.is_none() && e.seq() == self.events.len() as u64 => {
                    self.line += 1;
                    self.events.push(e);
                    self.committed = self.consumed + start;
                    continue;
                }
                Some(e) => Ok(Record::One(Decoded::Event(e))),
                None => self.decoder.decode_general(line, line_text),
            };
            self.record(record, self.consumed + start)?;
        }
        self.consumed += bytes.len();
        Ok(())
    }

    fn record(
        &mut self,
        record: Result<Record, Unparsable>,
        end_offset: usize,
    ) -> Result<(), ScanError> {
        self.line += 1;
        let n = self.line;
        let record = match record {
            Ok(r) => r,
            Err(_) => {
                if self.issue.is_none() {
                    self.issue = Some(format!(
                        "corrupt session log: unparsable committed event at line {n}"
                    ));
                }
                return Ok(());
            }
        };
        let turn_end = crate::session::types::TURN_END;
        let has_turn_end = match &record {
            Record::One(d) => d.event_type() == Some(turn_end),
            Record::Run(_) => false,
        };
        if let Some(issue) = &self.issue {
            if has_turn_end {
                return Err(ScanError::Corrupt {
                    message: issue.clone(),
                });
            }
            return Ok(());
        }
        let expected = self.events.len() as u64;
        let gap = match &record {
            Record::One(d) => (d.seq() != Some(expected)).then(|| (expected, d.seq())),
            Record::Run(events) => events
                .iter()
                .enumerate()
                .find(|(k, e)| e.seq() != expected + *k as u64)
                .map(|(k, e)| (expected + k as u64, Some(e.seq()))),
        };
        if let Some((want, got)) = gap {
            let got = match got {
                Some(s) => format!("{s}"),
                None => String::from("none"),
            };
            let issue = format!(
                "corrupt session log: seq gap in committed region at line {n} (expected {want}, got {got})"
            );
            if has_turn_end {
                return Err(ScanError::Corrupt { message: issue });
            }
            self.issue = Some(issue);
            return Ok(());
        }
        match record {
            Record::One(Decoded::Event(e)) => {
                // Templates never read plugin events: only this path can.
                if matches!(e.data(), EventData::Plugin(_)) {
                    self.plugins.push(self.events.len());
                }
                self.events.push(e);
            }
            Record::One(Decoded::Invalid(i)) => {
                return Err(ScanError::Invalid {
                    index: self.events.len(),
                    error: i.error,
                });
            }
            Record::Run(events) => self.events.extend(events),
        }
        self.committed = end_offset;
        Ok(())
    }

    /// The offset just after the last committed line.
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// All bytes fed so far, plus `base`.
    pub fn consumed(&self) -> usize {
        self.consumed
    }

    /// The valid contiguous prefix so far.
    pub fn events(&self) -> &[SessionEvent] {
        &self.events
    }

    /// Whether a defect was seen (everything after it is uncommitted).
    pub fn issue(&self) -> Option<&str> {
        self.issue.as_deref()
    }

    /// Reserves room for about `n` more events.
    pub fn reserve(&mut self, n: usize) {
        self.events.reserve_exact(n);
    }

    /// The prefix (SC6).
    pub fn into_events(self) -> Vec<SessionEvent> {
        self.events
    }
}

/// A raw (uncompressed) log after the scan (6.2).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ScannedLog {
    /// The header.
    pub header: SessionHeader,
    /// The valid contiguous prefix of events.
    pub events: Vec<SessionEvent>,
    /// The offset just after the last committed line.
    pub committed: usize,
    /// Whether bytes after `committed` must be truncated (RR2).
    pub torn: bool,
}

/// Reads a raw log: header (HL2), then the scan (RR1, RR2).
pub fn scan_log(bytes: &[u8]) -> Result<ScannedLog, LogError> {
    scan_log_flagged(bytes).map(|(scanned, _)| scanned)
}

/// [`scan_log`], and the positions of the prefix's plugin events.
fn scan_log_flagged(bytes: &[u8]) -> Result<(ScannedLog, Vec<usize>), LogError> {
    let hlen = header_len(bytes).ok_or_else(|| {
        LogError::corrupt("corrupt session log: empty or header-less session log")
    })?;
    let header = decode_header_line(&bytes[..hlen])?;
    let rest = &bytes[hlen..];
    let mut scanner = Scanner::new(hlen);
    scanner.reserve(count_newlines(rest));
    scanner.feed(rest).map_err(|e| match e {
        ScanError::Corrupt { message } => LogError::Corrupt { message },
        ScanError::Invalid { index, error } => LogError::InvalidEvent {
            session_id: String::from(header.id.as_str()),
            error: SeedError { index, error },
        },
    })?;
    let committed = scanner.committed();
    let plugins = core::mem::take(&mut scanner.plugins);
    let mut events = scanner.into_events();
    events.shrink_to_fit();
    let scanned = ScannedLog {
        header,
        events,
        committed,
        torn: committed < bytes.len(),
    };
    Ok((scanned, plugins))
}

/// Extra event types a reader knows beyond [`KNOWN_EVENT_TYPES`].
pub(crate) type ExtraKnownTypes<'a> = &'a [&'a str];

/// The known-type check (6.5 step 5) and the retired vocabulary (OP4.3):
/// every type outside the known lists must be marked `ignorable: true`.
pub fn check_types(
    session_id: &str,
    events: &[SessionEvent],
    extra_known: ExtraKnownTypes<'_>,
) -> Result<(), LogError> {
    events
        .iter()
        .try_for_each(|e| check_type(session_id, e, extra_known))
}

/// [`check_types`] on `events[k]` for each `k` of `positions`, in order.
fn check_types_at(
    session_id: &str,
    events: &[SessionEvent],
    positions: &[usize],
    extra_known: ExtraKnownTypes<'_>,
) -> Result<(), LogError> {
    positions
        .iter()
        .filter_map(|&k| events.get(k))
        .try_for_each(|e| check_type(session_id, e, extra_known))
}

/// The known-type check of [`check_types`] on one event.
fn check_type(
    session_id: &str,
    e: &SessionEvent,
    extra_known: ExtraKnownTypes<'_>,
) -> Result<(), LogError> {
    // Every other type is a core or runtime type: known, not retired.
    let EventData::Plugin(p) = e.data() else {
        return Ok(());
    };
    let t = p.event_type.as_str();
    if t == "mode/set" || t == crate::session::types::REQUEST_HEADER_DELTA {
        return Err(LogError::corrupt(format!(
            "session \"{session_id}\" contains retired event type \"{t}\" (seq {})",
            e.seq()
        )));
    }
    let known = KNOWN_EVENT_TYPES.contains(&t) || extra_known.contains(&t);
    if !known && !e.ignorable() {
        return Err(LogError::FormatUnsupported {
            message: format!(
                "session \"{session_id}\" contains event type \"{t}\" (seq {}) unknown to this harness and not marked ignorable; refusing to interpret the log \u{2014} it was likely written by a newer harness",
                e.seq()
            ),
        });
    }
    Ok(())
}

/// A raw log read, checked and balanced (6.5 steps 2–7).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LoadedLog {
    /// The validated session over `stored ++ closers` (no end-seed marker).
    pub session: Session,
    /// How many events were stored (the valid prefix).
    pub stored: usize,
    /// The offset to truncate to before appending the closers, when a torn
    /// tail must go (RR2).
    pub truncate_to: Option<usize>,
    /// The synthesized closers (already part of `session`).
    pub closers: Vec<SessionEvent>,
}

impl LoadedLog {
    /// Whether loading this log would write (a torn tail or closers).
    pub fn needs_repair(&self) -> bool {
        self.truncate_to.is_some() || !self.closers.is_empty()
    }

    /// The repaired file content: `original[..truncate_to]` followed by the
    /// closers as one batch (6.5 step 9, raw mode).
    pub fn repaired_bytes(&self, original: &[u8], pack: bool) -> Vec<u8> {
        let cut = self
            .truncate_to
            .unwrap_or(original.len())
            .min(original.len());
        let mut out = Vec::with_capacity(cut + 512);
        out.extend_from_slice(&original[..cut]);
        encode_batch(&self.closers, pack, &mut out);
        out
    }
}

/// Loads a raw JSONL log from bytes: header, scan, known types, closers for
/// an interrupted turn, then full seed validation of `prefix ++ closers`
/// (header rules HD4–HD10 included).
pub fn load_log(bytes: &[u8], extra_known: ExtraKnownTypes<'_>) -> Result<LoadedLog, LogError> {
    let (scanned, plugins) = scan_log_flagged(bytes)?;
    let id = String::from(scanned.header.id.as_str());
    scanned
        .header
        .validate()
        .map_err(|error| LogError::InvalidHeader {
            session_id: id.clone(),
            error,
        })?;
    // Only plugin events can fail the type check: only they are checked
    // (no pass over every event of the log).
    check_types_at(&id, &scanned.events, &plugins, extra_known)?;
    let closers = interrupted_turn_closers(&scanned.events);
    let stored = scanned.events.len();
    let mut events = scanned.events;
    events.extend(closers.iter().cloned());
    let session =
        Session::restore(scanned.header, events).map_err(|error| LogError::InvalidEvent {
            session_id: id,
            error,
        })?;
    Ok(LoadedLog {
        session,
        stored,
        truncate_to: scanned.torn.then_some(scanned.committed),
        closers,
    })
}

/// The conformance fixture-token substitutions (conformance README), applied
/// to a whole log before it is read: every `"tools":"{{tools}}"` becomes
/// `"tools":[]`, and in the header line a `cwd` starting with `{{cwd}}` has
/// that prefix replaced by `/fixture-cwd`. Every other token stays literal.
pub fn fixture_tokens(bytes: &[u8]) -> Vec<u8> {
    const TOOLS: &[u8] = b"\"tools\":\"{{tools}}\"";
    const CWD: &[u8] = b"\"cwd\":\"{{cwd}}";
    let hlen = header_len(bytes).unwrap_or(bytes.len());
    let mut out = Vec::with_capacity(bytes.len());
    let header = replace_all(&bytes[..hlen], CWD, b"\"cwd\":\"/fixture-cwd");
    out.extend_from_slice(&replace_all(&header, TOOLS, b"\"tools\":[]"));
    out.extend_from_slice(&replace_all(&bytes[hlen..], TOOLS, b"\"tools\":[]"));
    out
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{count_newlines, find_newline};

    #[test]
    fn newline_search_matches_the_naive_one() {
        // 0x0b sits right above '\n' and trips inexact zero-byte tricks.
        let alphabet = [b'\n', 0x0b, 0x0a ^ 0x80, b'a', 0x01, 0x00, 0xff];
        let mut state = 12345u32;
        for len in 0..160 {
            for _ in 0..50 {
                let bytes: alloc::vec::Vec<u8> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        alphabet[(state >> 16) as usize % alphabet.len()]
                    })
                    .collect();
                let naive = bytes.iter().position(|b| *b == b'\n');
                assert_eq!(find_newline(&bytes), naive, "{bytes:?}");
                let count = bytes.iter().filter(|b| **b == b'\n').count();
                assert_eq!(count_newlines(&bytes), count, "{bytes:?}");
            }
        }
    }

    #[test]
    fn newline_count_holds_across_block_boundaries() {
        // Lengths around multiples of 8 and 255 (word and lane-block sizes
        // of a vectorized count), all newlines and every seventh byte.
        const BLOCK: usize = 8 * 255;
        for len in [
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            BLOCK + 7,
            BLOCK + 8,
            2 * BLOCK + 17,
            5 * BLOCK,
        ] {
            let all = alloc::vec![b'\n'; len];
            assert_eq!(count_newlines(&all), len, "all newlines, {len} bytes");
            let mut mixed = alloc::vec![b'x'; len];
            for i in (0..len).step_by(7) {
                mixed[i] = b'\n';
            }
            assert_eq!(
                count_newlines(&mixed),
                len.div_ceil(7),
                "every 7th, {len} bytes"
            );
        }
    }
}
