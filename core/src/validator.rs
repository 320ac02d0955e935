//! A checker for the well-formed stream grammar (streaming.md 2.5) and the
//! adapter contract (3.1, 3.3).
//!
//! This is a product feature for people who write or fuzz adapters: push the
//! chunks an adapter yields, call [`StreamValidator::end`] when the stream is
//! over, and every violation comes back typed, with its rule id. The
//! [`BlockAssembler`](crate::BlockAssembler) is lenient and accepts what this
//! rejects; the two are meant to be used together (Q-14).
//!
//! # Errors and warnings
//!
//! Every rule has a [`Severity`]. Errors are the grammar and contract rules
//! the spec requires. Warnings are streams the spec allows but that are
//! almost always an adapter bug. streaming.md C-4 lets a tool call carry an
//! empty `id`, an empty `name` and `arguments` that are not JSON (for
//! example when a `length` finish truncated them), so these three checks are
//! dsh's own rules, not the spec's, and are warnings:
//!
//! - **TC-1** a tool call closed by `block-end` has an empty `id`;
//! - **TC-2** a tool call closed by `block-end` has an empty `name`;
//! - **TC-3** a tool call closed by `block-end` has `arguments` that are not
//!   one valid JSON value.
//!
//! [`StreamValidator::push`] returns errors only and keeps warnings in
//! [`StreamValidator::warnings`]; [`validate_stream`] returns errors only;
//! [`lint_stream`] returns both, in stream order.
//!
//! ```
//! use dsh_core::{StreamValidator, StreamChunk, Rule};
//! let mut v = StreamValidator::new();
//! let err = v.push(&StreamChunk::TextDelta { index: 0, text: "x".into() }).unwrap_err();
//! assert_eq!(err.rule, Rule::G3);
//! assert_eq!(err.rule.id(), "G-3");
//! ```

use alloc::string::String;
use core::fmt;
use hashbrown::HashMap;

use crate::chunk::{FinishReason, StreamChunk};
use crate::content::ContentBlock;
use crate::json::MAX_SAFE_INTEGER;
use crate::text::{ChunkText, TextBuf};

/// A rule of the stream grammar or adapter contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Rule {
    /// G-1: an index is a non-negative integer no larger than 2^53−1.
    G1,
    /// G-2: `block-start` for an index that is open.
    G2,
    /// G-3: a delta must target an open block of the matching kind.
    G3,
    /// G-4: `block-end` must target an open block of the same type.
    G4,
    /// G-5: at most one `usage`.
    G5,
    /// G-6: nothing after `finish`.
    G6,
    /// G-7: a non-failure `finish` must not leave blocks open.
    G7,
    /// G-8: every stream ends with a `finish`.
    G8,
    /// AC-1: blocks first, then at most one usage, then the finish.
    AC1,
    /// AC-2: the `block-end` block agrees with the deltas it closes.
    AC2,
    /// AC-3: concatenated `argumentsDelta`s equal the final `arguments`.
    AC3,
    /// AC-9: a successful finish with no block is an `EMPTY_RESPONSE` error.
    AC9,
    /// FR-1: an `aborted` or `error` finish carries a `failure`.
    FR1,
    /// LF-1: a failure has a non-empty message and code, a status in
    /// 100..=599, a positive finite retry-after and a non-empty request id.
    LF1,
    /// TC-1 (dsh, warning): a closed tool call has an empty `id`.
    TC1,
    /// TC-2 (dsh, warning): a closed tool call has an empty `name`.
    TC2,
    /// TC-3 (dsh, warning): a closed tool call's `arguments` are not one
    /// valid JSON value.
    TC3,
}

/// How much a broken [`Rule`] weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Severity {
    /// The spec forbids the stream.
    Error,
    /// The spec allows the stream, but it is most likely an adapter bug.
    Warning,
}

impl Rule {
    /// The stable rule id, e.g. `"G-3"`.
    pub fn id(self) -> &'static str {
        match self {
            Rule::G1 => "G-1",
            Rule::G2 => "G-2",
            Rule::G3 => "G-3",
            Rule::G4 => "G-4",
            Rule::G5 => "G-5",
            Rule::G6 => "G-6",
            Rule::G7 => "G-7",
            Rule::G8 => "G-8",
            Rule::AC1 => "AC-1",
            Rule::AC2 => "AC-2",
            Rule::AC3 => "AC-3",
            Rule::AC9 => "AC-9",
            Rule::FR1 => "FR-1",
            Rule::LF1 => "LF-1",
            Rule::TC1 => "TC-1",
            Rule::TC2 => "TC-2",
            Rule::TC3 => "TC-3",
        }
    }

    /// Whether breaking this rule is an error or a warning (module docs).
    pub fn severity(self) -> Severity {
        match self {
            Rule::TC1 | Rule::TC2 | Rule::TC3 => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// Zero-based position of the offending chunk in the stream (for
    /// [`Rule::G8`], the number of chunks seen).
    pub position: u64,
    /// The rule broken.
    pub rule: Rule,
    /// What was wrong, for a person.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule.id(), self.message)
    }
}

impl core::error::Error for Violation {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpenKind {
    Text,
    Reasoning,
    ToolCall,
    Other,
}

#[derive(Debug)]
struct OpenBlock {
    block_type: String,
    kind: OpenKind,
    /// Concatenated text or argument deltas, for AC-2 / AC-3.
    content: TextBuf,
    saw_delta: bool,
}

/// Checks one adapter stream, chunk by chunk (see the module docs).
#[derive(Debug, Default)]
pub struct StreamValidator {
    open: HashMap<u64, OpenBlock>,
    position: u64,
    blocks_opened: u64,
    saw_usage: bool,
    finished: bool,
    warnings: alloc::vec::Vec<Violation>,
}

impl StreamValidator {
    /// A validator for a new stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a `finish` has been seen.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The warnings (rules of [`Severity::Warning`]) seen so far, in order.
    pub fn warnings(&self) -> &[Violation] {
        &self.warnings
    }

    #[cfg(test)]
    /// Takes the warnings seen so far, leaving none.
    pub(crate) fn take_warnings(&mut self) -> alloc::vec::Vec<Violation> {
        core::mem::take(&mut self.warnings)
    }

    /// Checks one chunk. On a violation the chunk is still applied as far as
    /// it can be, so later chunks are judged against a sensible state.
    pub fn push(&mut self, chunk: &StreamChunk) -> Result<(), Violation> {
        let position = self.position;
        self.position += 1;
        let fail = |rule: Rule, message: String| {
            Err(Violation {
                position,
                rule,
                message,
            })
        };
        if self.finished {
            return fail(
                Rule::G6,
                alloc::format!("{} chunk after the terminal finish", chunk.chunk_type()),
            );
        }
        if let Some(index) = chunk.index() {
            if index > MAX_SAFE_INTEGER {
                return fail(
                    Rule::G1,
                    alloc::format!("index {index} is larger than 2^53-1"),
                );
            }
            if self.saw_usage {
                return fail(
                    Rule::AC1,
                    alloc::format!("{} chunk after the usage chunk", chunk.chunk_type()),
                );
            }
        }
        match chunk {
            StreamChunk::BlockStart { index, block_type } => {
                if self.open.contains_key(index) {
                    return fail(
                        Rule::G2,
                        alloc::format!("block-start for open index {index}"),
                    );
                }
                let kind = match block_type.as_str() {
                    "text" => OpenKind::Text,
                    "reasoning" => OpenKind::Reasoning,
                    "tool-call" => OpenKind::ToolCall,
                    _ => OpenKind::Other,
                };
                self.blocks_opened += 1;
                self.open.insert(
                    *index,
                    OpenBlock {
                        block_type: block_type.clone(),
                        kind,
                        content: TextBuf::default(),
                        saw_delta: false,
                    },
                );
                Ok(())
            }
            StreamChunk::TextDelta { index, text } => {
                self.delta(position, *index, OpenKind::Text, "text-delta", text)
            }
            StreamChunk::ReasoningDelta { index, text } => self.delta(
                position,
                *index,
                OpenKind::Reasoning,
                "reasoning-delta",
                text,
            ),
            StreamChunk::ToolCallDelta {
                index,
                arguments_delta,
                ..
            } => self.delta(
                position,
                *index,
                OpenKind::ToolCall,
                "tool-call-delta",
                arguments_delta,
            ),
            StreamChunk::BlockEnd { index, block } => {
                let Some(open) = self.open.remove(index) else {
                    return fail(
                        Rule::G4,
                        alloc::format!("block-end for index {index}, which is not open"),
                    );
                };
                if block.block_type() != open.block_type {
                    return fail(
                        Rule::G4,
                        alloc::format!(
                            "block-end for index {index} carries a \"{}\" block but the block was started as \"{}\"",
                            block.block_type(),
                            open.block_type
                        ),
                    );
                }
                if open.saw_delta {
                    match &**block {
                        ContentBlock::Text { text } | ContentBlock::Reasoning { text }
                            if text.as_bytes() != open.content.as_bytes() =>
                        {
                            return fail(
                                Rule::AC2,
                                alloc::format!(
                                    "block-end text for index {index} differs from its concatenated deltas"
                                ),
                            );
                        }
                        ContentBlock::ToolCall { arguments, .. }
                            if arguments.as_bytes() != open.content.as_bytes() =>
                        {
                            return fail(
                                Rule::AC3,
                                alloc::format!(
                                    "block-end arguments for index {index} differ from the concatenated argumentsDelta fragments"
                                ),
                            );
                        }
                        _ => {}
                    }
                }
                if let ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } = &**block
                {
                    self.tool_call_warnings(position, *index, id.as_str(), name, arguments);
                }
                Ok(())
            }
            StreamChunk::Usage { .. } => {
                if self.saw_usage {
                    return fail(Rule::G5, String::from("a second usage chunk"));
                }
                self.saw_usage = true;
                Ok(())
            }
            StreamChunk::Finish { reason, .. } => {
                self.finished = true;
                if let FinishReason::Other(_) = &**reason {
                    let kind = reason.kind();
                    if kind == "error" || kind == "aborted" {
                        return fail(
                            Rule::FR1,
                            alloc::format!(
                                "\"{kind}\" finish without a failure object with string message and code"
                            ),
                        );
                    }
                }
                if let Some(f) = reason.failure() {
                    let why = if f.message.is_empty() {
                        Some("an empty message")
                    } else if f.code.is_empty() {
                        Some("an empty code")
                    } else if f.status.is_some_and(|s| !(100..=599).contains(&s)) {
                        Some("a status outside 100..=599")
                    } else if f
                        .provider_retry_after_ms
                        .is_some_and(|ms| !(ms.is_finite() && ms > 0.0))
                    {
                        Some("a providerRetryAfterMs that is not a positive number")
                    } else if f.request_id.as_deref() == Some("") {
                        Some("an empty requestId")
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        return fail(
                            Rule::LF1,
                            alloc::format!("\"{}\" finish failure has {why}", reason.kind()),
                        );
                    }
                }
                if !reason.is_failure() && !self.open.is_empty() {
                    // In order through a BTreeSet: no general sort is
                    // linked for this one message (smaller device builds).
                    let mut sorted = alloc::collections::BTreeSet::new();
                    for k in self.open.keys() {
                        sorted.insert(*k);
                    }
                    let open: alloc::vec::Vec<u64> = sorted.into_iter().collect();
                    return fail(
                        Rule::G7,
                        alloc::format!(
                            "\"{}\" finish leaves blocks open: {:?}",
                            reason.kind(),
                            open
                        ),
                    );
                }
                if matches!(**reason, FinishReason::Stop) && self.blocks_opened == 0 {
                    return fail(
                        Rule::AC9,
                        String::from(
                            "successful finish with no content block; an empty completion must end with an EMPTY_RESPONSE error",
                        ),
                    );
                }
                Ok(())
            }
        }
    }

    /// TC-1..TC-3 for the tool call closed at `index`.
    fn tool_call_warnings(
        &mut self,
        position: u64,
        index: u64,
        id: &str,
        name: &str,
        arguments: &str,
    ) {
        let mut warn = |rule: Rule, message: String| {
            self.warnings.push(Violation {
                position,
                rule,
                message,
            });
        };
        if id.is_empty() {
            warn(
                Rule::TC1,
                alloc::format!("tool call at index {index} has an empty id"),
            );
        }
        if name.is_empty() {
            warn(
                Rule::TC2,
                alloc::format!("tool call at index {index} has an empty name"),
            );
        }
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(arguments) {
            warn(
                Rule::TC3,
                alloc::format!(
                    "tool call at index {index} has arguments that are not valid JSON: {e}"
                ),
            );
        }
    }

    fn delta(
        &mut self,
        position: u64,
        index: u64,
        kind: OpenKind,
        name: &str,
        fragment: &ChunkText,
    ) -> Result<(), Violation> {
        match self.open.get_mut(&index) {
            Some(open) if open.kind == kind => {
                open.content.push(fragment);
                open.saw_delta = true;
                Ok(())
            }
            Some(open) => Err(Violation {
                position,
                rule: Rule::G3,
                message: alloc::format!(
                    "{name} for index {index}, which is an open \"{}\" block",
                    open.block_type
                ),
            }),
            None => Err(Violation {
                position,
                rule: Rule::G3,
                message: alloc::format!("{name} for index {index}, which is not open"),
            }),
        }
    }

    /// Declares the stream over; reports G-8 when no `finish` arrived.
    pub fn end(&mut self) -> Result<(), Violation> {
        if self.finished {
            Ok(())
        } else {
            Err(Violation {
                position: self.position,
                rule: Rule::G8,
                message: String::from("the stream ended without a finish chunk"),
            })
        }
    }
}

/// Checks a whole stream, returning every error in order (warnings are left
/// out; see [`lint_stream`]).
pub fn validate_stream<'a>(
    chunks: impl IntoIterator<Item = &'a StreamChunk>,
) -> alloc::vec::Vec<Violation> {
    let mut validator = StreamValidator::new();
    let mut out: alloc::vec::Vec<Violation> = chunks
        .into_iter()
        .filter_map(|c| validator.push(c).err())
        .collect();
    if let Err(v) = validator.end() {
        out.push(v);
    }
    out
}

/// Checks a whole stream, returning every error and warning, ordered by
/// position (an error before the warnings of the same chunk).
pub fn lint_stream<'a>(
    chunks: impl IntoIterator<Item = &'a StreamChunk>,
) -> alloc::vec::Vec<Violation> {
    let mut validator = StreamValidator::new();
    let mut out = alloc::vec::Vec::new();
    for chunk in chunks {
        if let Err(v) = validator.push(chunk) {
            out.push(v);
        }
        out.append(&mut validator.warnings);
    }
    if let Err(v) = validator.end() {
        out.push(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// One JSON chunk a line.
    fn parse(lines: &str) -> Vec<StreamChunk> {
        lines
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn rules(lines: &str) -> Vec<(u64, &'static str)> {
        validate_stream(&parse(lines))
            .into_iter()
            .map(|v| (v.position, v.rule.id()))
            .collect()
    }

    /// G-7: the message lists the blocks left open in index order.
    #[test]
    fn g7_names_the_open_blocks_in_order() {
        let chunks = parse(
            r#"{"type":"block-start","index":5,"blockType":"text"}
            {"type":"block-start","index":1,"blockType":"text"}
            {"type":"block-start","index":3,"blockType":"text"}
            {"type":"block-start","index":0,"blockType":"text"}
            {"type":"block-start","index":4,"blockType":"text"}
            {"type":"finish","reason":{"kind":"stop"}}"#,
        );
        let violations = validate_stream(&chunks);
        let g7 = violations.iter().find(|v| v.rule == Rule::G7).unwrap();
        assert_eq!(
            g7.message,
            "\"stop\" finish leaves blocks open: [0, 1, 3, 4, 5]"
        );
    }

    #[test]
    fn a_well_formed_stream_passes() {
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"reasoning"}
                {"type":"reasoning-delta","index":0,"text":"r"}
                {"type":"block-start","index":1,"blockType":"tool-call"}
                {"type":"tool-call-delta","index":1,"id":"c","name":"f","argumentsDelta":"{\"a\""}
                {"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":":1}"}
                {"type":"block-end","index":0,"block":{"type":"reasoning","text":"r"}}
                {"type":"block-end","index":1,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{\"a\":1}"}}
                {"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}
                {"type":"finish","reason":{"kind":"tool-calls"}}"#
            ),
            []
        );
    }

    #[test]
    fn each_grammar_rule_is_reported() {
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"text"}
                {"type":"block-start","index":0,"blockType":"text"}
                {"type":"reasoning-delta","index":0,"text":"x"}
                {"type":"text-delta","index":5,"text":"x"}
                {"type":"block-end","index":0,"block":{"type":"reasoning","text":""}}
                {"type":"block-end","index":3,"block":{"type":"text","text":""}}
                {"type":"block-start","index":9007199254740992,"blockType":"text"}"#
            ),
            [
                (1, "G-2"),
                (2, "G-3"),
                (3, "G-3"),
                (4, "G-4"),
                (5, "G-4"),
                (6, "G-1"),
                (7, "G-8")
            ]
        );
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"text"}
                {"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}
                {"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}
                {"type":"finish","reason":{"kind":"stop"}}
                {"type":"finish","reason":{"kind":"stop"}}"#
            ),
            [(2, "G-5"), (3, "G-7"), (4, "G-6")]
        );
    }

    #[test]
    fn a_failure_finish_without_a_failure_is_rejected() {
        for reason in [
            r#"{"kind":"error"}"#,
            r#"{"kind":"aborted"}"#,
            r#"{"kind":"error","failure":{"code":"X"}}"#,
        ] {
            let lines = alloc::format!(
                "{{\"type\":\"block-start\",\"index\":0,\"blockType\":\"text\"}}\n{{\"type\":\"finish\",\"reason\":{reason}}}"
            );
            assert_eq!(rules(&lines), [(1, "FR-1")], "{reason}");
        }
        // An unknown kind stays open (FR-2).
        let lines = r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"block-end","index":0,"block":{"type":"text","text":""}}
{"type":"finish","reason":{"kind":"paused"}}"#;
        assert!(rules(lines).is_empty());
    }

    #[test]
    fn failure_finishes_may_leave_blocks_open() {
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"text"}
                {"type":"text-delta","index":0,"text":"half"}
                {"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"TRANSPORT"}}}"#
            ),
            []
        );
    }

    #[test]
    fn fr1_failure_finishes_need_a_failure() {
        for reason in [
            r#"{"kind":"error"}"#,
            r#"{"kind":"aborted"}"#,
            r#"{"kind":"error","failure":{"message":"m"}}"#,
            r#"{"kind":"error","failure":"boom"}"#,
        ] {
            let stream = alloc::format!(
                r#"{{"type":"block-start","index":0,"blockType":"text"}}
                {{"type":"text-delta","index":0,"text":"x"}}
                {{"type":"block-end","index":0,"block":{{"type":"text","text":"x"}}}}
                {{"type":"finish","reason":{reason}}}"#
            );
            assert_eq!(rules(&stream), [(3, "FR-1")], "{reason}");
        }
        for failure in [
            r#"{"message":"","code":"X"}"#,
            r#"{"message":"m","code":""}"#,
            r#"{"message":"m","code":"X","status":99}"#,
            r#"{"message":"m","code":"X","providerRetryAfterMs":0}"#,
            r#"{"message":"m","code":"X","requestId":""}"#,
        ] {
            let stream = alloc::format!(
                r#"{{"type":"finish","reason":{{"kind":"aborted","failure":{failure}}}}}"#
            );
            assert_eq!(rules(&stream), [(0, "LF-1")], "{failure}");
        }
        // An unknown kind stays allowed (FR-2).
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"text"}
                {"type":"block-end","index":0,"block":{"type":"text","text":""}}
                {"type":"finish","reason":{"kind":"content-filter"}}"#
            ),
            []
        );
    }

    #[test]
    fn adapter_contract_rules_are_reported() {
        assert_eq!(
            rules(
                r#"{"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}
                {"type":"finish","reason":{"kind":"stop"}}"#
            ),
            [(1, "AC-9")]
        );
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"text"}
                {"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}
                {"type":"text-delta","index":0,"text":"x"}
                {"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"X"}}}"#
            ),
            [(2, "AC-1")]
        );
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"tool-call"}
                {"type":"tool-call-delta","index":0,"id":"c","argumentsDelta":"{"}
                {"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{}"}}
                {"type":"block-start","index":1,"blockType":"text"}
                {"type":"text-delta","index":1,"text":"a"}
                {"type":"block-end","index":1,"block":{"type":"text","text":"b"}}
                {"type":"finish","reason":{"kind":"stop"}}"#
            ),
            [(2, "AC-3"), (5, "AC-2")]
        );
    }

    #[test]
    fn an_index_may_be_reopened_after_end() {
        // G-4 / Q-14: the checker allows it (the assembler ignores it).
        assert_eq!(
            rules(
                r#"{"type":"block-start","index":0,"blockType":"text"}
                {"type":"block-end","index":0,"block":{"type":"text","text":""}}
                {"type":"block-start","index":0,"blockType":"text"}
                {"type":"block-end","index":0,"block":{"type":"text","text":""}}
                {"type":"finish","reason":{"kind":"stop"}}"#
            ),
            []
        );
    }

    fn lint(lines: &str) -> Vec<(u64, &'static str, Severity)> {
        lint_stream(&parse(lines))
            .into_iter()
            .map(|v| (v.position, v.rule.id(), v.rule.severity()))
            .collect()
    }

    #[test]
    fn tc1_tc2_tc3_tool_call_warnings() {
        // C-4 allows all three, so they are warnings: validate_stream (errors
        // only) accepts the stream, lint_stream reports each rule.
        let stream = r#"{"type":"block-start","index":0,"blockType":"tool-call"}
            {"type":"block-end","index":0,"block":{"type":"tool-call","id":"","name":"f","arguments":"{}"}}
            {"type":"block-start","index":1,"blockType":"tool-call"}
            {"type":"block-end","index":1,"block":{"type":"tool-call","id":"c","name":"","arguments":"{}"}}
            {"type":"block-start","index":2,"blockType":"tool-call"}
            {"type":"tool-call-delta","index":2,"id":"d","name":"g","argumentsDelta":"{\"a\":"}
            {"type":"block-end","index":2,"block":{"type":"tool-call","id":"d","name":"g","arguments":"{\"a\":"}}
            {"type":"block-start","index":3,"blockType":"tool-call"}
            {"type":"block-end","index":3,"block":{"type":"tool-call","id":"","name":"","arguments":""}}
            {"type":"finish","reason":{"kind":"length"}}"#;
        assert_eq!(rules(stream), []);
        let w = Severity::Warning;
        assert_eq!(
            lint(stream),
            [
                (1, "TC-1", w),
                (3, "TC-2", w),
                (6, "TC-3", w),
                (8, "TC-1", w),
                (8, "TC-2", w),
                (8, "TC-3", w)
            ]
        );
        // Valid JSON of any shape passes TC-3; errors sort before warnings.
        assert_eq!(
            lint(
                r#"{"type":"block-start","index":0,"blockType":"tool-call"}
                {"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":" [1, \"x\"] "}}
                {"type":"finish","reason":{"kind":"tool-calls"}}"#
            ),
            []
        );
        assert_eq!(
            lint(
                r#"{"type":"block-start","index":0,"blockType":"tool-call"}
                {"type":"tool-call-delta","index":0,"id":"c","argumentsDelta":"{"}
                {"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{}x"}}"#
            ),
            [(2, "AC-3", Severity::Error), (3, "G-8", Severity::Error)]
        );
    }

    #[test]
    fn warnings_are_kept_and_taken() {
        let mut v = StreamValidator::new();
        v.push(&StreamChunk::BlockStart {
            index: 0,
            block_type: "tool-call".into(),
        })
        .unwrap();
        let end: StreamChunk = serde_json::from_str(
            r#"{"type":"block-end","index":0,"block":{"type":"tool-call","id":"","name":"f","arguments":"{}"}}"#,
        )
        .unwrap();
        assert_eq!(v.push(&end), Ok(()));
        assert_eq!(v.warnings().len(), 1);
        assert_eq!(v.take_warnings()[0].rule, Rule::TC1);
        assert!(v.warnings().is_empty());
    }
}
