//! The generators (features `proptest` and `arbitrary`): well-formed
//! streams pass the validator and the assembler check; near-miss streams
//! break exactly the rule they name.

use arbitrary::{Arbitrary, Unstructured};
use dsh_core::{Severity, StreamValidator, lint_stream, validate_stream};
use dsh_testkit::arbitrary::{AnyChunk, NearMissStream, WellFormedStream};
use dsh_testkit::strategies::{chunk, near_miss_stream, well_formed_stream};
use dsh_testkit::{NEAR_MISS_RULES, check_stream};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every grammar rule holds (G-1..G-8, AC-1..AC-3, AC-9, FR-1, LF-1),
    /// no warning applies (TC-1..TC-3), and the assembler agrees.
    #[test]
    fn well_formed_streams_validate(stream in well_formed_stream()) {
        prop_assert_eq!(lint_stream(&stream), vec![]);
        let mut v = StreamValidator::new();
        for c in &stream {
            prop_assert_eq!(v.push(c), Ok(()));
        }
        prop_assert_eq!(v.end(), Ok(()));
        prop_assert_eq!(check_stream(&stream), Ok(vec![]));
    }

    /// Exactly one violation, of the rule named.
    #[test]
    fn near_miss_streams_break_their_rule((stream, rule) in near_miss_stream()) {
        let found: Vec<_> = lint_stream(&stream).into_iter().map(|v| v.rule).collect();
        prop_assert_eq!(&found, &vec![rule], "{}", rule);
        let errors = validate_stream(&stream);
        match rule.severity() {
            Severity::Error => prop_assert_eq!(errors.len(), 1),
            _ => prop_assert!(errors.is_empty()),
        }
    }

    /// Any chunk is taken by the validator without a panic.
    #[test]
    fn any_chunk_is_judged(c in chunk()) {
        let mut v = StreamValidator::new();
        let _ = v.push(&c);
        let _ = v.end();
    }
}

/// Every rule of `NEAR_MISS_RULES` is produced by the strategy.
#[test]
fn every_near_miss_rule_is_generated() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = near_miss_stream();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2_000 {
        seen.insert(strategy.new_tree(&mut runner).unwrap().current().1);
    }
    for rule in NEAR_MISS_RULES {
        assert!(seen.contains(&rule), "{rule} never generated");
    }
}

/// The `Arbitrary` impls build from the same generator: a fixed-seed
/// byte source gives well-formed and near-miss streams that hold.
#[test]
fn arbitrary_streams_hold() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2_000 {
        let data: Vec<u8> = (0..128)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut u = Unstructured::new(&data);
        let WellFormedStream(stream) = WellFormedStream::arbitrary(&mut u).unwrap();
        assert_eq!(lint_stream(&stream), vec![], "{stream:?}");
        assert_eq!(check_stream(&stream), Ok(vec![]));
        let mut u = Unstructured::new(&data);
        if let Ok(NearMissStream { chunks, rule }) = NearMissStream::arbitrary(&mut u) {
            let found: Vec<_> = lint_stream(&chunks).into_iter().map(|v| v.rule).collect();
            assert_eq!(found, [rule], "{chunks:?}");
            seen.insert(rule);
        }
        let mut u = Unstructured::new(&data);
        let AnyChunk(c) = AnyChunk::arbitrary(&mut u).unwrap();
        let _ = StreamValidator::new().push(&c);
    }
    assert_eq!(seen.len(), NEAR_MISS_RULES.len(), "{seen:?}");
}
