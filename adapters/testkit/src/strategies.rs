//! proptest strategies (feature `proptest`).

use dsh_core::{Rule, StreamChunk};
use proptest::prelude::*;

use crate::build::{BlockPlan, End, Kind, NEAR_MISS_RULES, Plan, near_miss, well_formed};

/// Delta text: ASCII, JSON specials and multi-byte characters.
fn fragment() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z \"\\\\\n{}é🤔]{0,6}").expect("a valid regex")
}

fn block() -> impl Strategy<Value = BlockPlan> {
    (
        prop_oneof![
            Just(Kind::Text),
            Just(Kind::Reasoning),
            Just(Kind::ToolCall)
        ],
        proptest::collection::vec(fragment(), 0..5),
    )
        .prop_map(|(kind, pieces)| BlockPlan { kind, pieces })
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        proptest::collection::vec(block(), 0..5),
        proptest::collection::vec(any::<u8>(), 1..16),
        proptest::option::of((any::<u32>(), any::<u32>())),
        prop_oneof![
            Just(End::Stop),
            Just(End::ToolCalls),
            Just(End::MaxTokens),
            Just(End::Error)
        ],
    )
        .prop_map(|(blocks, order, usage, end)| Plan {
            blocks,
            order,
            usage,
            end,
        })
}

/// Any single chunk, well-formed or not: every variant, small and huge
/// indexes, arbitrary text. For fuzzing consumers of chunks.
pub fn chunk() -> impl Strategy<Value = StreamChunk> {
    let index = prop_oneof![
        0u64..4,
        Just((1u64 << 53) - 1),
        Just(1u64 << 53),
        Just(u64::MAX)
    ];
    let text = any::<String>();
    let chunks_of_a_stream = (plan(), any::<prop::sample::Index>()).prop_map(|(p, i)| {
        let s = near_miss(&p, Rule::G6).unwrap_or_else(|| well_formed(&p));
        s[i.index(s.len())].clone()
    });
    prop_oneof![
        chunks_of_a_stream,
        (index.clone(), text).prop_map(|(i, t)| StreamChunk::text_delta(i, &t)),
        (index.clone(), text).prop_map(|(i, t)| StreamChunk::reasoning_delta(i, &t)),
        (index.clone(), text, text, text).prop_map(|(i, id, n, a)| StreamChunk::tool_call_delta(
            i,
            &id,
            Some(&n),
            &a
        )),
        (index, "[a-z-]{0,12}").prop_map(|(i, t)| StreamChunk::block_start(i, &t)),
    ]
}

/// A well-formed stream: `validate_stream` and `lint_stream` find nothing,
/// and `BlockAssembler` agrees with its `block-end` chunks. Blocks of every
/// core kind, interleaved, with or without usage, ending in `stop`,
/// `tool-calls`, `max-tokens` or an `error` finish.
pub fn well_formed_stream() -> impl Strategy<Value = Vec<StreamChunk>> {
    plan().prop_map(|p| well_formed(&p))
}

/// A near-miss stream and the one rule it breaks: `lint_stream` reports
/// exactly one violation, of that rule (an error, or for TC-1..TC-3 a
/// warning).
pub fn near_miss_stream() -> impl Strategy<Value = (Vec<StreamChunk>, Rule)> {
    (plan(), proptest::sample::select(NEAR_MISS_RULES.to_vec()))
        .prop_filter_map("a rule the builder knows", |(p, rule)| {
            near_miss(&p, rule).map(|s| (s, rule))
        })
}
