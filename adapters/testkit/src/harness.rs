//! The conformance harness: [`check_translator`] and [`check_stream`].

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use dsh_core::{BlockAssembler, ContentBlock, FinishReason, StreamChunk, Violation, lint_stream};

/// How thoroughly [`check_translator_with`] works.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CheckOptions {
    /// The most split points (and cut points) tried. An input of fewer
    /// bytes is tried at every byte boundary; a longer one at this many
    /// evenly spaced boundaries, the first and last included.
    pub max_points: usize,
}

impl Default for CheckOptions {
    /// 512 points.
    fn default() -> Self {
        CheckOptions { max_points: 512 }
    }
}

impl CheckOptions {
    /// Options with `max_points` points.
    pub fn with_max_points(max_points: usize) -> Self {
        CheckOptions {
            max_points: max_points.max(2),
        }
    }
}

/// How the input was handed to the translator when a check failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feed {
    /// The whole input as one piece.
    Whole,
    /// Two pieces, split after this many bytes.
    SplitAt(usize),
    /// One piece per byte.
    ByteAtATime,
    /// Only the first this many bytes (a cut connection).
    CutAt(usize),
}

impl fmt::Display for Feed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Feed::Whole => f.write_str("the whole input"),
            Feed::SplitAt(n) => write!(f, "the input split after byte {n}"),
            Feed::ByteAtATime => f.write_str("the input one byte at a time"),
            Feed::CutAt(n) => write!(f, "the input cut after byte {n}"),
        }
    }
}

/// Why a translator or stream failed the kit's checks.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum KitError {
    /// The translator returned an error for the whole, uncut input.
    Failed {
        /// The error, as text.
        error: String,
    },
    /// The translator panicked.
    Panicked {
        /// What it was given.
        feed: Feed,
        /// The panic message, when it was a string.
        message: String,
    },
    /// The stream breaks the grammar (errors only; warnings are reported
    /// in [`Report::warnings`]).
    Invalid {
        /// What it was given.
        feed: Feed,
        /// Every error, in stream order.
        violations: Vec<Violation>,
    },
    /// Splitting the input changed the chunks.
    SplitDiffers {
        /// The split.
        feed: Feed,
        /// The first position where the chunks differ.
        position: usize,
        /// The chunk of the whole input there, as JSON (`None`: missing).
        expected: Option<String>,
        /// The chunk of the split input there, as JSON (`None`: missing).
        got: Option<String>,
    },
    /// A cut input gave a successful stream whose blocks differ from the
    /// whole input's: a cut must end in an `error` or `aborted` finish (or
    /// an `Err`), not silently lose content.
    CutNotFailure {
        /// The cut.
        feed: Feed,
        /// The finish kind it gave.
        finish: String,
    },
    /// `BlockAssembler` folds the chunks to other blocks than the
    /// `block-end` chunks carry.
    AssemblerDisagrees {
        /// What it was given.
        feed: Feed,
        /// The blocks of the `block-end` chunks, in first-seen order, as JSON.
        ended: String,
        /// What the assembler gave, as JSON, or its error.
        assembled: String,
    },
}

impl fmt::Display for KitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KitError::Failed { error } => {
                write!(f, "the translator failed on the whole input: {error}")
            }
            KitError::Panicked { feed, message } => {
                write!(f, "the translator panicked on {feed}: {message}")
            }
            KitError::Invalid { feed, violations } => {
                write!(f, "the stream of {feed} breaks the grammar:")?;
                for v in violations {
                    write!(f, " [chunk {}] {v};", v.position)?;
                }
                Ok(())
            }
            KitError::SplitDiffers {
                feed,
                position,
                expected,
                got,
            } => write!(
                f,
                "{feed} gives other chunks than the whole input: at chunk {position} expected {} got {}",
                expected.as_deref().unwrap_or("nothing"),
                got.as_deref().unwrap_or("nothing")
            ),
            KitError::CutNotFailure { feed, finish } => write!(
                f,
                "{feed} ends in a successful \"{finish}\" finish with other blocks than the whole input; a cut stream must end in an error finish or Err"
            ),
            KitError::AssemblerDisagrees {
                feed,
                ended,
                assembled,
            } => write!(
                f,
                "on {feed} the BlockAssembler gives {assembled} but the block-end chunks carry {ended}"
            ),
        }
    }
}

impl std::error::Error for KitError {}

/// What a passing [`check_translator`] saw.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Report {
    /// The chunks of the whole input.
    pub chunks: Vec<StreamChunk>,
    /// Warnings of the whole input's stream (TC-1..TC-3): allowed by the
    /// spec, but worth a look.
    pub warnings: Vec<Violation>,
    /// How many two-piece splits were compared (byte-at-a-time not counted).
    pub splits: usize,
    /// How many cut inputs were run.
    pub cuts: usize,
}

/// Checks one stream: no grammar error, and [`BlockAssembler`] agrees with
/// the `block-end` chunks (see [`check_translator`]). Returns the warnings.
pub fn check_stream(chunks: &[StreamChunk]) -> Result<Vec<Violation>, KitError> {
    check_stream_fed(chunks, Feed::Whole)
}

fn check_stream_fed(chunks: &[StreamChunk], feed: Feed) -> Result<Vec<Violation>, KitError> {
    let (errors, warnings): (Vec<Violation>, Vec<Violation>) = lint_stream(chunks)
        .into_iter()
        .partition(|v| v.rule.severity() == dsh_core::Severity::Error);
    if !errors.is_empty() {
        return Err(KitError::Invalid {
            feed,
            violations: errors,
        });
    }
    assembler_agrees(chunks, feed)?;
    Ok(warnings)
}

/// The finish of a stream that passed the validator.
fn finish_of(chunks: &[StreamChunk]) -> Option<&FinishReason> {
    chunks.iter().rev().find_map(|c| match c {
        StreamChunk::Finish { reason, .. } => Some(&**reason),
        _ => None,
    })
}

/// The blocks of the `block-end` chunks, one for each block the stream
/// opened (an index reopened after its `block-end` is a new block, as the
/// validator sees it, G-4), in the order the blocks began.
fn ended_blocks(chunks: &[StreamChunk]) -> Vec<ContentBlock> {
    // Block number by open index; blocks in the order they began.
    let mut open: BTreeMap<u64, usize> = BTreeMap::new();
    let mut blocks: Vec<Option<ContentBlock>> = Vec::new();
    for chunk in chunks {
        let Some(index) = chunk.index() else {
            continue;
        };
        let at = *open.entry(index).or_insert_with(|| {
            blocks.push(None);
            blocks.len() - 1
        });
        if let StreamChunk::BlockEnd { block, .. } = chunk {
            if let Some(slot) = blocks.get_mut(at) {
                *slot = Some((**block).clone());
            }
            open.remove(&index);
        }
    }
    blocks.into_iter().flatten().collect()
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("<not serializable: {e}>"))
}

/// Assembler agreement for a valid stream that ends successfully: the
/// assembler's blocks are the `block-end` blocks (without tool calls after
/// a `max-tokens` finish, BB-3). Failure finishes may leave blocks open, so
/// they are not compared.
fn assembler_agrees(chunks: &[StreamChunk], feed: Feed) -> Result<(), KitError> {
    let Some(finish) = finish_of(chunks) else {
        return Ok(());
    };
    if finish.is_failure() {
        return Ok(());
    }
    let truncated = finish.kind() == "max-tokens";
    let ended: Vec<ContentBlock> = ended_blocks(chunks)
        .into_iter()
        .filter(|b| !(truncated && matches!(b, ContentBlock::ToolCall { .. })))
        .collect();
    let mut assembler = BlockAssembler::new();
    assembler.extend(chunks);
    match assembler.blocks() {
        Ok(blocks) if blocks == ended => Ok(()),
        other => Err(KitError::AssemblerDisagrees {
            feed,
            ended: to_json(&ended),
            assembled: match other {
                Ok(blocks) => to_json(&blocks),
                Err(e) => format!("error: {e}"),
            },
        }),
    }
}

/// The boundaries tried for an input of `len` bytes: every one from 0 to
/// `len` when there are at most `max` of them, else `max` evenly spaced.
fn points(len: usize, max: usize) -> Vec<usize> {
    let max = max.max(2);
    if len < max {
        return (0..=len).collect();
    }
    let mut out: Vec<usize> = (0..max)
        .map(|k| {
            let p = (len as u128 * k as u128) / (max as u128 - 1);
            p as usize
        })
        .collect();
    out.dedup();
    out
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Runs `translate` on `pieces`, catching panics.
fn run<E: fmt::Display>(
    translate: &impl Fn(&[&[u8]]) -> Result<Vec<StreamChunk>, E>,
    pieces: &[&[u8]],
    feed: &Feed,
) -> Result<Result<Vec<StreamChunk>, String>, KitError> {
    match catch_unwind(AssertUnwindSafe(|| translate(pieces))) {
        Ok(Ok(chunks)) => Ok(Ok(chunks)),
        Ok(Err(e)) => Ok(Err(e.to_string())),
        Err(payload) => Err(KitError::Panicked {
            feed: feed.clone(),
            message: panic_message(&*payload),
        }),
    }
}

fn compare(whole: &[StreamChunk], got: &[StreamChunk], feed: Feed) -> Result<(), KitError> {
    if whole == got {
        return Ok(());
    }
    let position = whole
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(whole.len().min(got.len()));
    Err(KitError::SplitDiffers {
        feed,
        position,
        expected: whole.get(position).map(to_json),
        got: got.get(position).map(to_json),
    })
}

/// [`check_translator_with`] with the default [`CheckOptions`].
pub fn check_translator<E: fmt::Display>(
    input: &[u8],
    translate: impl Fn(&[&[u8]]) -> Result<Vec<StreamChunk>, E>,
) -> Result<Report, KitError> {
    check_translator_with(&CheckOptions::default(), input, translate)
}

/// Checks a translator: `translate` gets the input of one model response
/// (an HTTP body, say) as pieces in the order they arrived, and returns the
/// chunks of the whole response, or an error. The checks, in order:
///
/// 1. the whole input translates (no `Err`) to a stream with no grammar
///    error (streaming.md 2.5, 3.1, 3.3);
/// 2. `BlockAssembler` folds it to the blocks its `block-end` chunks carry
///    (when it ends successfully);
/// 3. the input split in two at every byte boundary (or
///    [`CheckOptions::max_points`] of them), and fed one byte at a time,
///    gives the same chunks;
/// 4. every cut input (a prefix: a dropped connection) gives an `Err`, or a
///    stream that passes 1 and 2 and, when the whole input succeeds,
///    either ends in an `error` or `aborted` finish or carries the same
///    blocks as the whole input (a cut after the last block, say before a
///    trailing usage event, may succeed).
///
/// The translator never panics: a panic in any call is caught and
/// reported as [`KitError::Panicked`].
pub fn check_translator_with<E: fmt::Display>(
    options: &CheckOptions,
    input: &[u8],
    translate: impl Fn(&[&[u8]]) -> Result<Vec<StreamChunk>, E>,
) -> Result<Report, KitError> {
    let whole = match run(&translate, &[input], &Feed::Whole)? {
        Ok(chunks) => chunks,
        Err(error) => return Err(KitError::Failed { error }),
    };
    let warnings = check_stream_fed(&whole, Feed::Whole)?;
    let whole_blocks = ended_blocks(&whole);
    // When the whole input fails (garbage later on), a prefix may well be
    // a complete response: only a successful whole is compared.
    let whole_failed = finish_of(&whole).is_none_or(FinishReason::is_failure);

    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let feed = Feed::ByteAtATime;
    match run(&translate, &bytes, &feed)? {
        Ok(chunks) => compare(&whole, &chunks, feed)?,
        Err(error) => return Err(KitError::Failed { error }),
    }

    let at = points(input.len(), options.max_points);
    let mut splits = 0;
    for &p in &at {
        let feed = Feed::SplitAt(p);
        let (a, b) = input.split_at(p);
        match run(&translate, &[a, b], &feed)? {
            Ok(chunks) => compare(&whole, &chunks, feed)?,
            Err(error) => return Err(KitError::Failed { error }),
        }
        splits += 1;
    }

    let mut cuts = 0;
    for &p in at.iter().filter(|&&p| p < input.len()) {
        let feed = Feed::CutAt(p);
        if let Ok(chunks) = run(&translate, &[&input[..p]], &feed)? {
            check_stream_fed(&chunks, feed.clone())?;
            let failed = finish_of(&chunks).is_some_and(FinishReason::is_failure);
            if !failed && !whole_failed && ended_blocks(&chunks) != whole_blocks {
                return Err(KitError::CutNotFailure {
                    feed,
                    finish: finish_of(&chunks)
                        .map_or_else(|| "none".to_string(), |f| f.kind().to_string()),
                });
            }
        }
        cuts += 1;
    }

    Ok(Report {
        chunks: whole,
        warnings,
        splits,
        cuts,
    })
}
