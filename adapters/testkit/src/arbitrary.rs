//! `Arbitrary` wrappers (feature `arbitrary`), for cargo-fuzz targets.
//! `StreamChunk` lives in `dsh-core`, so the impls are on newtypes.

use arbitrary::{Arbitrary, Result, Unstructured};
use dsh_core::{Rule, StreamChunk};

use crate::build::{BlockPlan, End, Kind, NEAR_MISS_RULES, Plan, near_miss, well_formed};

fn plan(u: &mut Unstructured<'_>) -> Result<Plan> {
    let n = u.int_in_range(0..=4)?;
    let mut blocks = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = match u.int_in_range(0..=2)? {
            0 => Kind::Text,
            1 => Kind::Reasoning,
            _ => Kind::ToolCall,
        };
        let m = u.int_in_range(0..=4)?;
        let mut pieces = Vec::with_capacity(m);
        for _ in 0..m {
            pieces.push(String::arbitrary(u)?);
        }
        blocks.push(BlockPlan { kind, pieces });
    }
    let order = Vec::<u8>::arbitrary(u)?;
    let usage = Option::<(u32, u32)>::arbitrary(u)?;
    let end = match u.int_in_range(0..=3)? {
        0 => End::Stop,
        1 => End::ToolCalls,
        2 => End::MaxTokens,
        _ => End::Error,
    };
    Ok(Plan {
        blocks,
        order,
        usage,
        end,
    })
}

/// Any single chunk: a chunk of a generated stream, or a delta or
/// `block-start` with arbitrary index and text.
#[derive(Clone, Debug)]
pub struct AnyChunk(pub StreamChunk);

impl<'a> Arbitrary<'a> for AnyChunk {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let index = u64::arbitrary(u)?;
        let text = String::arbitrary(u)?;
        Ok(AnyChunk(match u.int_in_range(0..=4)? {
            0 => StreamChunk::text_delta(index, &text),
            1 => StreamChunk::reasoning_delta(index, &text),
            2 => StreamChunk::tool_call_delta(index, &text, None, &text),
            3 => StreamChunk::block_start(index, &text),
            _ => {
                let s = well_formed(&plan(u)?);
                let i = u.choose_index(s.len())?;
                s[i].clone()
            }
        }))
    }
}

/// A well-formed stream: every grammar and contract rule holds and no
/// warning applies (the builder of the proptest strategies).
#[derive(Clone, Debug)]
pub struct WellFormedStream(pub Vec<StreamChunk>);

impl<'a> Arbitrary<'a> for WellFormedStream {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(WellFormedStream(well_formed(&plan(u)?)))
    }
}

/// A stream that breaks exactly one rule, and that rule.
#[derive(Clone, Debug)]
pub struct NearMissStream {
    /// The chunks.
    pub chunks: Vec<StreamChunk>,
    /// The rule they break.
    pub rule: Rule,
}

impl<'a> Arbitrary<'a> for NearMissStream {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let p = plan(u)?;
        let rule = *u.choose(&NEAR_MISS_RULES)?;
        let chunks = near_miss(&p, rule).ok_or(arbitrary::Error::IncorrectFormat)?;
        Ok(NearMissStream { chunks, rule })
    }
}
