//! The harness catches seeded adapter bugs: a toy line
//! translator (`t:` lines are text, `.` ends the response) written right,
//! then with one bug each. Every buggy version is rejected with the
//! expected error; the right one passes.

use dsh_core::{ContentBlock, FinishReason, LlmFailure, Rule, StreamChunk};
use dsh_testkit::{Feed, KitError, check_translator};

const INPUT: &[u8] = b"t:Hello\nt:world\n.\n";

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// The carried tail of a piece skips one byte.
    OffByOne,
    /// A `t` line without `:` is sliced past its end.
    PanicOnShortLine,
    /// A response that broke off ends with `stop`.
    CutIsStop,
    /// The text block is never closed.
    NoBlockEnd,
    /// Each line is a block of its own, all at index 0.
    ReusedIndex,
}

fn lines(pieces: &[&[u8]], bug: Bug) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut out = Vec::new();
    let mut carry = Vec::new();
    for p in pieces {
        let mut start = 0;
        for (i, &b) in p.iter().enumerate() {
            if b == b'\n' {
                let mut line = std::mem::take(&mut carry);
                line.extend_from_slice(&p[start..i]);
                out.push(line);
                start = i + 1;
            }
        }
        let from = if bug == Bug::OffByOne && start > 0 {
            start + 1
        } else {
            start
        };
        carry.extend_from_slice(p.get(from..).unwrap_or_default());
    }
    (out, carry)
}

fn toy(pieces: &[&[u8]], bug: Bug) -> Result<Vec<StreamChunk>, String> {
    let (lines, rest) = lines(pieces, bug);
    let mut out = Vec::new();
    let mut text = String::new();
    let mut done = false;
    let mut lines: Vec<Vec<u8>> = lines;
    if bug == Bug::PanicOnShortLine && !rest.is_empty() {
        lines.push(rest);
    }
    for line in lines {
        let line = String::from_utf8(line).map_err(|e| e.to_string())?;
        if line.starts_with('t') {
            let t = if bug == Bug::PanicOnShortLine {
                &line[2..]
            } else if let Some(t) = line.strip_prefix("t:") {
                t
            } else {
                continue;
            };
            if bug == Bug::ReusedIndex {
                out.push(StreamChunk::block_start(0, "text"));
                out.push(StreamChunk::text_delta(0, t));
                out.push(StreamChunk::block_end(0, ContentBlock::text(t)));
                text.push_str(t);
                continue;
            }
            if text.is_empty() {
                out.push(StreamChunk::block_start(0, "text"));
            }
            text.push_str(t);
            out.push(StreamChunk::text_delta(0, t));
        } else if line == "." && !done {
            done = true;
            if bug != Bug::NoBlockEnd && bug != Bug::ReusedIndex {
                out.push(StreamChunk::block_end(0, ContentBlock::text(text.clone())));
            }
            out.push(StreamChunk::finish(FinishReason::Stop));
        }
    }
    if !done {
        if bug == Bug::CutIsStop && !text.is_empty() {
            // Closes what it has and calls it a success.
            out.push(StreamChunk::block_end(0, ContentBlock::text(text)));
            out.push(StreamChunk::finish(FinishReason::Stop));
        } else {
            out.push(StreamChunk::finish(FinishReason::Error {
                failure: LlmFailure::new("TRANSPORT", "the response broke off"),
            }));
        }
    }
    Ok(out)
}

#[test]
fn the_right_translator_passes() {
    let report = check_translator(INPUT, |p: &[&[u8]]| toy(p, Bug::None)).unwrap();
    assert_eq!(report.chunks.len(), 5);
    assert_eq!(report.splits, INPUT.len() + 1);
    assert_eq!(report.cuts, INPUT.len());
}

/// Byte-at-a-time input hides this bug (a one-byte piece has no tail past
/// a newline); the first split with a tail, after byte 9 (`t:Hello\nt` |
/// `:world…`), shows it: the `world` delta is lost.
#[test]
fn an_off_by_one_in_the_piece_carry_is_caught_by_the_splits() {
    let err = check_translator(INPUT, |p: &[&[u8]]| toy(p, Bug::OffByOne)).unwrap_err();
    match &err {
        KitError::SplitDiffers { feed, position, .. } => {
            let Feed::SplitAt(at) = feed else {
                panic!("{err}")
            };
            assert_eq!(*at, 9, "{err}");
            assert_eq!(*position, 2, "{err}");
        }
        other => panic!("expected SplitDiffers, got {other}"),
    }
    assert!(err.to_string().contains("split after byte"), "{err}");
}

#[test]
fn a_panic_on_a_cut_input_is_caught() {
    let err = check_translator(INPUT, |p: &[&[u8]]| toy(p, Bug::PanicOnShortLine)).unwrap_err();
    match &err {
        KitError::Panicked {
            feed: Feed::CutAt(n),
            message,
        } => {
            assert_eq!(*n, 1, "{err}");
            assert!(message.contains("byte index 2"), "{message}");
        }
        other => panic!("expected Panicked on a cut, got {other}"),
    }
}

#[test]
fn a_cut_input_that_ends_in_stop_is_caught() {
    let err = check_translator(INPUT, |p: &[&[u8]]| toy(p, Bug::CutIsStop)).unwrap_err();
    // The first cut with a whole line (`t:Hello\n`) loses `world`.
    assert_eq!(
        err,
        KitError::CutNotFailure {
            feed: Feed::CutAt(8),
            finish: "stop".to_string()
        }
    );
}

/// G-4 lets an index be reopened after its `block-end`, but the assembler
/// ignores the reopened block (BA-3): the harness reports the disagreement.
#[test]
fn a_reused_index_is_caught_by_assembler_agreement() {
    let err = check_translator(INPUT, |p: &[&[u8]]| toy(p, Bug::ReusedIndex)).unwrap_err();
    match &err {
        KitError::AssemblerDisagrees {
            feed: Feed::Whole,
            ended,
            assembled,
        } => {
            assert!(ended.contains("world"), "{err}");
            assert!(!assembled.contains("world"), "{err}");
        }
        other => panic!("expected AssemblerDisagrees, got {other}"),
    }
}

#[test]
fn g7_an_unclosed_block_is_caught() {
    let err = check_translator(INPUT, |p: &[&[u8]]| toy(p, Bug::NoBlockEnd)).unwrap_err();
    match &err {
        KitError::Invalid {
            feed: Feed::Whole,
            violations,
        } => assert_eq!(violations[0].rule, Rule::G7, "{err}"),
        other => panic!("expected Invalid G-7, got {other}"),
    }
}
