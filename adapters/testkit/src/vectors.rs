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

/// The OpenAI-compatible vectors.
pub const OPENAI: &[Vector] = &[
    Vector {
        name: "empty_completion",
        covers: "a `stop` with no content: `EMPTY_RESPONSE` (AC-9)",
        body: include_bytes!("../vectors/openai/empty_completion.sse"),
        expected: include_str!("../vectors/openai/empty_completion.jsonl"),
    },
    Vector {
        name: "inband_error",
        covers: "an in-band `{\"error\":…}` event after some text",
        body: include_bytes!("../vectors/openai/inband_error.sse"),
        expected: include_str!("../vectors/openai/inband_error.jsonl"),
    },
    Vector {
        name: "length_finish",
        covers: "`length`: the output hit the token cap (`max-tokens`)",
        body: include_bytes!("../vectors/openai/length_finish.sse"),
        expected: include_str!("../vectors/openai/length_finish.jsonl"),
    },
    Vector {
        name: "parallel_tool_calls",
        covers: "two tool calls by `index`, `tool_calls`",
        body: include_bytes!("../vectors/openai/parallel_tool_calls.sse"),
        expected: include_str!("../vectors/openai/parallel_tool_calls.jsonl"),
    },
    Vector {
        name: "reasoning_then_text",
        covers: "`reasoning_content` then `content`, usage with reasoning tokens",
        body: include_bytes!("../vectors/openai/reasoning_then_text.sse"),
        expected: include_str!("../vectors/openai/reasoning_then_text.jsonl"),
    },
    Vector {
        name: "text_stop",
        covers: "text in two deltas, a role-only first delta, `stop`",
        body: include_bytes!("../vectors/openai/text_stop.sse"),
        expected: include_str!("../vectors/openai/text_stop.jsonl"),
    },
    Vector {
        name: "tool_call_fragments",
        covers: "one tool call whose arguments arrive in fragments, `tool_calls`",
        body: include_bytes!("../vectors/openai/tool_call_fragments.sse"),
        expected: include_str!("../vectors/openai/tool_call_fragments.jsonl"),
    },
    Vector {
        name: "usage_trailing_chunk",
        covers: "usage in a trailing chunk with empty `choices` (`stream_options.include_usage`)",
        body: include_bytes!("../vectors/openai/usage_trailing_chunk.sse"),
        expected: include_str!("../vectors/openai/usage_trailing_chunk.jsonl"),
    },
];
