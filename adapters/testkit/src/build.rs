//! The stream builder shared by the proptest strategies and the
//! `Arbitrary` impls: a plan (what blocks, how interleaved, how it ends)
//! becomes a well-formed stream, and a well-formed stream plus a rule
//! becomes a near-miss stream that breaks exactly that rule.

use dsh_core::{ContentBlock, FinishReason, LlmFailure, Rule, StreamChunk, TokenUsage};

/// The largest index G-1 allows.
const MAX_INDEX: u64 = (1 << 53) - 1;

/// The rules a near-miss stream can break, each exactly once: every error
/// rule of the validator, and the three warnings.
pub const NEAR_MISS_RULES: [Rule; 17] = [
    Rule::G1,
    Rule::G2,
    Rule::G3,
    Rule::G4,
    Rule::G5,
    Rule::G6,
    Rule::G7,
    Rule::G8,
    Rule::AC1,
    Rule::AC2,
    Rule::AC3,
    Rule::AC9,
    Rule::FR1,
    Rule::LF1,
    Rule::TC1,
    Rule::TC2,
    Rule::TC3,
];

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Text,
    Reasoning,
    ToolCall,
}

#[derive(Clone, Debug)]
pub(crate) struct BlockPlan {
    pub kind: Kind,
    /// Delta fragments (for a tool call: the fragments of a string value).
    pub pieces: Vec<String>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum End {
    Stop,
    ToolCalls,
    MaxTokens,
    Error,
}

#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub blocks: Vec<BlockPlan>,
    /// Interleaving choices: which open block moves next.
    pub order: Vec<u8>,
    pub usage: Option<(u32, u32)>,
    pub end: End,
}

/// Cuts `text` into fragments about as long as `pieces`, at char boundaries.
fn split_like(text: &str, pieces: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    for p in pieces {
        let mut at = p.len().min(rest.len());
        while !rest.is_char_boundary(at) {
            at += 1;
        }
        let (head, tail) = rest.split_at(at);
        out.push(head.to_string());
        rest = tail;
    }
    if !rest.is_empty() {
        out.push(rest.to_string());
    }
    out
}

/// The chunks of one block at `index`: start, deltas, end.
fn block_chunks(index: u64, plan: &BlockPlan) -> Vec<StreamChunk> {
    let mut out = vec![StreamChunk::block_start(
        index,
        match plan.kind {
            Kind::Text => "text",
            Kind::Reasoning => "reasoning",
            Kind::ToolCall => "tool-call",
        },
    )];
    let joined: String = plan.pieces.concat();
    match plan.kind {
        Kind::Text | Kind::Reasoning => {
            for p in &plan.pieces {
                out.push(match plan.kind {
                    Kind::Text => StreamChunk::text_delta(index, p),
                    _ => StreamChunk::reasoning_delta(index, p),
                });
            }
            out.push(StreamChunk::block_end(
                index,
                match plan.kind {
                    Kind::Text => ContentBlock::text(joined),
                    _ => ContentBlock::reasoning(joined),
                },
            ));
        }
        Kind::ToolCall => {
            let id = format!("call_{index}");
            let name = format!("tool_{index}");
            let arguments = serde_json::json!({ "v": joined }).to_string();
            let fragments = if plan.pieces.is_empty() {
                Vec::new()
            } else {
                split_like(&arguments, &plan.pieces)
            };
            for (k, f) in fragments.iter().enumerate() {
                let name = (k == 0).then_some(name.as_str());
                out.push(StreamChunk::tool_call_delta(index, &id, name, f));
            }
            let arguments = if fragments.is_empty() {
                "{}".to_string()
            } else {
                arguments
            };
            out.push(StreamChunk::block_end(
                index,
                ContentBlock::tool_call(id, name, arguments),
            ));
        }
    }
    out
}

fn usage(input: u32, output: u32) -> StreamChunk {
    StreamChunk::usage(TokenUsage::new(i64::from(input), i64::from(output)))
}

fn failure_finish() -> StreamChunk {
    StreamChunk::finish(FinishReason::Error {
        failure: LlmFailure::new("SERVER", "the server failed"),
    })
}

/// A well-formed stream: every grammar and contract rule holds, and no
/// warning applies.
pub(crate) fn well_formed(plan: &Plan) -> Vec<StreamChunk> {
    let mut queues: Vec<std::collections::VecDeque<StreamChunk>> = plan
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_chunks(i as u64, b).into())
        .collect();
    let mut out = Vec::new();
    let mut choices = plan.order.iter().copied().cycle();
    loop {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].is_empty())
            .collect();
        if live.is_empty() {
            break;
        }
        let pick = usize::from(choices.next().unwrap_or(0)) % live.len();
        if let Some(chunk) = queues[live[pick]].pop_front() {
            out.push(chunk);
        }
    }
    if let Some((i, o)) = plan.usage {
        out.push(usage(i, o));
    }
    out.push(match (plan.end, plan.blocks.is_empty()) {
        // AC-9: a successful finish needs a block.
        (End::Error, _) | (_, true) => failure_finish(),
        (End::Stop, false) => StreamChunk::finish(FinishReason::Stop),
        (End::ToolCalls, false) => StreamChunk::finish(FinishReason::ToolCalls),
        (End::MaxTokens, false) => StreamChunk::finish(FinishReason::MaxTokens),
    });
    out
}

/// Where the tail (usage, finish) of a well-formed stream begins.
fn tail_start(chunks: &[StreamChunk]) -> usize {
    chunks
        .iter()
        .position(|c| matches!(c, StreamChunk::Usage { .. } | StreamChunk::Finish { .. }))
        .unwrap_or(chunks.len())
}

/// An index no block of `chunks` uses.
fn fresh_index(chunks: &[StreamChunk]) -> u64 {
    chunks
        .iter()
        .filter_map(StreamChunk::index)
        .max()
        .map_or(0, |m| m + 1)
}

/// `plan`'s well-formed stream changed to break exactly `rule` (one
/// violation, of that rule, from `lint_stream`). `None` for a rule this
/// builder does not know.
pub(crate) fn near_miss(plan: &Plan, rule: Rule) -> Option<Vec<StreamChunk>> {
    let mut plan = plan.clone();
    if plan.blocks.is_empty() {
        plan.blocks.push(BlockPlan {
            kind: Kind::Text,
            pieces: vec!["x".to_string()],
        });
    }
    let mut s = well_formed(&plan);
    let tail = tail_start(&s);
    let fresh = fresh_index(&s);
    let last = s.len() - 1;
    match rule {
        Rule::G1 => s.insert(tail, StreamChunk::block_start(MAX_INDEX + 1, "text")),
        Rule::G2 => {
            let first = s
                .iter()
                .position(|c| matches!(c, StreamChunk::BlockStart { .. }))?;
            let again = s[first].clone();
            s.insert(first + 1, again);
        }
        Rule::G3 => s.insert(tail, StreamChunk::text_delta(fresh, "stray")),
        Rule::G4 => s.insert(tail, StreamChunk::block_end(fresh, ContentBlock::text(""))),
        Rule::G5 => {
            let extra = usage(1, 1);
            match s
                .iter()
                .position(|c| matches!(c, StreamChunk::Usage { .. }))
            {
                Some(at) => s.insert(at + 1, extra),
                None => {
                    s.insert(last, extra.clone());
                    s.insert(last, extra);
                }
            }
        }
        Rule::G6 => s.push(usage(1, 1)),
        Rule::G7 => {
            let end = s
                .iter()
                .rposition(|c| matches!(c, StreamChunk::BlockEnd { .. }))?;
            s.remove(end);
            let last = s.len() - 1;
            s[last] = StreamChunk::finish(FinishReason::Stop);
        }
        Rule::G8 => {
            s.pop();
        }
        Rule::AC1 => {
            let at = match s
                .iter()
                .position(|c| matches!(c, StreamChunk::Usage { .. }))
            {
                Some(at) => at + 1,
                None => {
                    s.insert(last, usage(1, 1));
                    last + 1
                }
            };
            s.insert(at, StreamChunk::block_start(fresh, "text"));
        }
        Rule::AC2 => {
            let block = [
                StreamChunk::block_start(fresh, "text"),
                StreamChunk::text_delta(fresh, "a"),
                StreamChunk::block_end(fresh, ContentBlock::text("b")),
            ];
            s.splice(tail..tail, block);
        }
        Rule::AC3 => {
            let block = [
                StreamChunk::block_start(fresh, "tool-call"),
                StreamChunk::tool_call_delta(fresh, "c", Some("f"), "{"),
                StreamChunk::block_end(fresh, ContentBlock::tool_call("c", "f", "{}")),
            ];
            s.splice(tail..tail, block);
        }
        Rule::AC9 => {
            s.drain(..tail);
            let last = s.len() - 1;
            s[last] = StreamChunk::finish(FinishReason::Stop);
        }
        Rule::FR1 => {
            let reason: FinishReason = serde_json::from_str(r#"{"kind":"error"}"#).ok()?;
            s[last] = StreamChunk::finish(reason);
        }
        Rule::LF1 => {
            s[last] = StreamChunk::finish(FinishReason::Error {
                failure: LlmFailure::new("", "a failure without a code"),
            });
        }
        Rule::TC1 | Rule::TC2 | Rule::TC3 => {
            let (id, name, arguments) = match rule {
                Rule::TC1 => ("", "f", "{}"),
                Rule::TC2 => ("c", "", "{}"),
                _ => ("c", "f", "{\"a\":"),
            };
            let block = [
                StreamChunk::block_start(fresh, "tool-call"),
                StreamChunk::block_end(fresh, ContentBlock::tool_call(id, name, arguments)),
            ];
            s.splice(tail..tail, block);
        }
        _ => return None,
    }
    Some(s)
}
