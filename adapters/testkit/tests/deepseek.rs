//! The kit's harness on dsh's own DeepSeek/OpenAI-compatible SSE
//! translator: every OpenAI-compatible vector gives its
//! expected chunks and passes `check_translator`, and so do the DeepSeek
//! adapter's own interop corpus bodies.

use std::convert::Infallible;

use dsh_core::StreamChunk;
use dsh_deepseek::{DecodeOptions, decode_pieces_with};
use dsh_testkit::{CheckOptions, check_translator, check_translator_with, vectors};

fn interop(pieces: &[&[u8]]) -> Result<Vec<StreamChunk>, Infallible> {
    Ok(decode_pieces_with(
        pieces.iter().copied(),
        &DecodeOptions::interop(),
    ))
}

/// Set `DSH_BLESS=1` to rewrite the expected chunks from the decoder
/// (then review the diff).
#[test]
fn openai_vectors_give_their_expected_chunks() {
    let bless = std::env::var_os("DSH_BLESS").is_some();
    assert!(vectors::OPENAI.len() >= 8);
    for v in vectors::OPENAI {
        let got = interop(&[v.body]).unwrap();
        if bless {
            let path = format!(
                "{}/vectors/openai/{}.jsonl",
                env!("CARGO_MANIFEST_DIR"),
                v.name
            );
            let lines: Vec<String> = got
                .iter()
                .map(|c| serde_json::to_string(c).unwrap())
                .collect();
            std::fs::write(path, lines.join("\n") + "\n").unwrap();
            continue;
        }
        let expected = v.expected_chunks().unwrap();
        assert!(!expected.is_empty(), "{}", v.name);
        assert_eq!(got, expected, "{}: {}", v.name, v.covers);
    }
}

#[test]
fn openai_vectors_pass_the_harness() {
    for v in vectors::OPENAI {
        // Every byte boundary is a split and a cut.
        let every = CheckOptions::with_max_points(usize::MAX);
        let report = check_translator_with(&every, v.body, interop)
            .unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_eq!(
            check_translator(v.body, interop).unwrap().chunks,
            report.chunks
        );
        assert_eq!(report.chunks, v.expected_chunks().unwrap(), "{}", v.name);
        assert!(
            report.warnings.is_empty(),
            "{}: {:?}",
            v.name,
            report.warnings
        );
        assert_eq!(report.splits, v.body.len() + 1, "{}", v.name);
        assert_eq!(report.cuts, v.body.len(), "{}", v.name);
    }
}

/// The adapter's interop corpus (adapters/deepseek/tests/interop), SSE
/// bodies only, with the interop and the reference profile.
#[test]
fn the_deepseek_interop_corpus_passes_the_harness() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../deepseek/tests/interop");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    let options = CheckOptions::with_max_points(128);
    for path in names {
        let body = std::fs::read(&path).unwrap();
        check_translator_with(&options, &body, interop)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let reference = |pieces: &[&[u8]]| {
            Ok::<_, Infallible>(decode_pieces_with(
                pieces.iter().copied(),
                &DecodeOptions::default(),
            ))
        };
        check_translator_with(&options, &body, reference)
            .unwrap_or_else(|e| panic!("{} (reference): {e}", path.display()));
    }
}
