//! A full check of a stored raw log, as `dsh log check` and the conformance
//! suite run it (conformance README items 1–4).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use hashbrown::HashMap;

use crate::assembler::BlockAssembler;
use crate::chunk::StreamChunk;
use crate::content::ContentBlock;
use crate::session::{AppendError, EventData, InvariantChecker, SessionEvent};

use super::decode::{Decoded, Decoder, Record};
use super::packed::encode_batch;
use super::write::{encode_header_line, write_event_json};
use super::{header_len, load_log};

/// What [`verify_log`] checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Events in the log.
    pub events: usize,
    /// Packed rows among the lines.
    pub packed_rows: usize,
    /// Events that keep their source text (non-canonical key order or number text).
    pub verbatim_events: usize,
    /// Model calls whose chunks were re-assembled and compared.
    pub reassembled: usize,
    /// Messages in the derived history.
    pub messages: usize,
    /// The events read leniently (an extra key or another shape in a core
    /// payload, rule E4): seq and deviation, in log order. Empty for a log
    /// a strict producer wrote.
    pub deviations: Vec<(u64, AppendError)>,
}

/// Checks a raw log completely:
/// 1. it loads (header, scan, known types, seed validation) with no torn
///    tail and no open turn;
/// 2. every line writes back byte for byte (header, events) and every packed
///    row re-packs to the same row;
/// 3. the chunks of every finished model call re-assemble (BlockAssembler)
///    to the recorded `assistant/message` content (an interrupted message to
///    the interrupted prefix);
/// 4. the invariants of session.md 11 hold and the derived history answers
///    every tool call with exactly one tool result.
///
/// Core payloads with keys or shapes dsh does not model load leniently (see
/// [`Decoder`]); they are listed in [`VerifyReport::deviations`] for a
/// strict check.
pub fn verify_log(bytes: &[u8]) -> Result<VerifyReport, String> {
    let loaded = load_log(bytes, &[]).map_err(|e| format!("{e}"))?;
    if let Some(at) = loaded.truncate_to {
        return Err(format!(
            "torn tail: {} bytes after offset {at} are not committed",
            bytes.len() - at
        ));
    }
    if !loaded.closers.is_empty() {
        return Err(format!(
            "the last turn is open: crash repair would append {} closing events",
            loaded.closers.len()
        ));
    }
    let mut report = VerifyReport {
        events: loaded.stored,
        ..VerifyReport::default()
    };
    round_trip(bytes, &mut report)?;
    let events = loaded.session.events();
    report.deviations = events
        .iter()
        .filter_map(|e| e.deviation().map(|d| (e.seq(), d.clone())))
        .collect();
    report.reassembled = reassemble(events)?;
    InvariantChecker::check_log(events).map_err(|v| format!("invariant {v}"))?;
    let mut session = loaded.session;
    let messages = session.derive_messages();
    report.messages = messages.len();
    check_tool_pairing(messages)?;
    Ok(report)
}

fn round_trip(bytes: &[u8], report: &mut VerifyReport) -> Result<(), String> {
    let hlen = header_len(bytes).unwrap_or(bytes.len());
    let header = super::decode_header_line(&bytes[..hlen]).map_err(|e| format!("{e}"))?;
    let mut out = Vec::new();
    encode_header_line(&header, &mut out);
    if out.as_slice() != &bytes[..hlen] {
        return Err(String::from(
            "round trip: the header line does not write back byte for byte",
        ));
    }
    let mut decoder = Decoder::new();
    for (n, line) in bytes[hlen..].split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        out.clear();
        match decoder.decode_line(line) {
            Ok(Record::One(Decoded::Event(e))) => {
                if e.verbatim().is_some() {
                    report.verbatim_events += 1;
                }
                write_event_json(&e, &mut out);
                if out.as_slice() != line {
                    return Err(format!(
                        "round trip: line {} does not write back byte for byte",
                        n + 1
                    ));
                }
            }
            Ok(Record::Run(events)) => {
                report.packed_rows += 1;
                encode_batch(&events, true, &mut out);
                if out.strip_suffix(b"\n") != Some(line) {
                    return Err(format!(
                        "round trip: packed row at line {} does not re-pack to the same row",
                        n + 1
                    ));
                }
            }
            _ => return Err(format!("line {} does not decode", n + 1)),
        }
    }
    Ok(())
}

/// Re-assembles every model call; returns how many were compared.
fn reassemble(events: &[SessionEvent]) -> Result<usize, String> {
    // The chunks of the latest finished attempt per (turn, step).
    let mut attempt: Vec<StreamChunk> = Vec::new();
    let mut attempt_key = None;
    let mut finished: HashMap<(u64, u64), Vec<StreamChunk>> = HashMap::new();
    let mut compared = 0;
    for e in events {
        match e.data() {
            EventData::AssistantChunk(c) => {
                let key = (c.turn, c.step);
                if attempt_key != Some(key) {
                    attempt.clear();
                    attempt_key = Some(key);
                }
                attempt.push(c.chunk());
                if c.is_finish() {
                    finished.insert(key, core::mem::take(&mut attempt));
                    attempt_key = None;
                }
            }
            EventData::AssistantMessage(a) => {
                let key = (a.turn, a.step);
                let cited: Option<Vec<StreamChunk>> =
                    e.source_event_seqs().filter(|s| !s.is_empty()).map(|seqs| {
                        seqs.iter()
                            .filter_map(|s| events.get(*s as usize))
                            .filter_map(|ev| match ev.data() {
                                EventData::AssistantChunk(c) => Some(c.chunk()),
                                _ => None,
                            })
                            .collect()
                    });
                let chunks = match cited {
                    Some(c) => Some(c),
                    None => finished.remove(&key),
                };
                let Some(chunks) = chunks else { continue };
                let ends_in_finish = matches!(chunks.last(), Some(StreamChunk::Finish { .. }));
                let mut asm = BlockAssembler::new();
                asm.extend(&chunks);
                let expected: Vec<ContentBlock> = if a.interrupted {
                    asm.interrupted_blocks()
                } else if ends_in_finish {
                    asm.blocks().map_err(|err| {
                        format!(
                            "re-assembly of turn {} step {} failed: {err}",
                            a.turn, a.step
                        )
                    })?
                } else {
                    continue;
                };
                if expected != a.message.content {
                    return Err(format!(
                        "re-assembly of turn {} step {} (seq {}) does not reproduce the recorded message content",
                        a.turn,
                        a.step,
                        e.seq()
                    ));
                }
                compared += 1;
            }
            _ => {}
        }
    }
    Ok(compared)
}

fn check_tool_pairing(
    messages: &[alloc::sync::Arc<crate::message::Message>],
) -> Result<(), String> {
    let mut calls: Vec<&str> = Vec::new();
    let mut answers: HashMap<&str, usize> = HashMap::new();
    for m in messages {
        for b in &m.content {
            match b {
                ContentBlock::ToolCall { id, .. } => calls.push(id.as_str()),
                ContentBlock::ToolResult { tool_call_id, .. } => {
                    *answers.entry(tool_call_id.as_str()).or_default() += 1
                }
                _ => {}
            }
        }
    }
    for c in &calls {
        match answers.get(c).copied().unwrap_or(0) {
            1 => {}
            n => {
                return Err(format!(
                    "derived history: tool call \"{c}\" is answered by {n} tool results"
                ));
            }
        }
    }
    Ok(())
}
