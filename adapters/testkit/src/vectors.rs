//! OpenAI-compatible conformance vectors: response bodies of the
//! chat-completions streaming format, each with the chunks a conforming
//! translator produces (one JSON chunk a line, as dsh's DeepSeek adapter
//! produces them with its interop profile). The files are under
//! `vectors/openai/` of this crate.

use dsh_core::StreamChunk;

/// One body and its expected chunks.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Vector {
    /// The file name, without extension.
    pub name: &'static str,
    /// What the vector covers.
    pub covers: &'static str,
    /// The SSE body, as a server sends it.
    pub body: &'static [u8],
    /// The expected chunks, one JSON object a line.
    pub expected: &'static str,
}

impl Vector {
    /// The expected chunks, parsed.
    pub fn expected_chunks(&self) -> Result<Vec<StreamChunk>, serde_json::Error> {
        self.expected
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect()
    }
}

/// A [`Vector`] from `vectors/openai/NAME.sse` and `NAME.jsonl`.
macro_rules! vector {
    ($name:literal, $covers:literal) => {
        Vector {
            name: $name,
            covers: $covers,
            body: include_bytes!(concat!("../vectors/openai/", $name, ".sse")),
            expected: include_str!(concat!("../vectors/openai/", $name, ".jsonl")),
        }
    };
}

/// The OpenAI-compatible vectors.
pub const OPENAI: &[Vector] = &[
    vector!(
        "empty_completion",
        "a `stop` with no content: `EMPTY_RESPONSE` (AC-9)"
    ),
    vector!(
        "inband_error",
        "an in-band `{\"error\":…}` event after some text"
    ),
    vector!(
        "length_finish",
        "`length`: the output hit the token cap (`max-tokens`)"
    ),
    vector!(
        "parallel_tool_calls",
        "two tool calls by `index`, `tool_calls`"
    ),
    vector!(
        "reasoning_then_text",
        "`reasoning_content` then `content`, usage with reasoning tokens"
    ),
    vector!(
        "text_stop",
        "text in two deltas, a role-only first delta, `stop`"
    ),
    vector!(
        "tool_call_fragments",
        "one tool call whose arguments arrive in fragments, `tool_calls`"
    ),
    vector!(
        "usage_trailing_chunk",
        "usage in a trailing chunk with empty `choices` (`stream_options.include_usage`)"
    ),
];
