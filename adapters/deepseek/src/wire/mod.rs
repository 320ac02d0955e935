//! The inbound SSE payload (`chat.completion.chunk`) as the translator reads
//! it (5.11), deserialized leniently and without copying.
//!
//! Hand-written visitors rather than derives, for three reasons:
//!
//! - **leniency:** a field of an unexpected type is treated as absent, as the
//!   reference's `typeof` checks do (a `content` of `5` is ignored, not an
//!   error); only the structural cases of Q-9 are errors;
//! - **duplicate keys:** the last one wins, as in `JSON.parse` (a derive
//!   rejects duplicates);
//! - **speed:** strings are borrowed from the payload when they contain no
//!   escapes, unknown keys are skipped with `IgnoredAny`, and the usual single
//!   choice / single tool call needs no `Vec` allocation.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

mod fast;
mod lenient;
mod scanner;

pub(crate) use fast::{FastState, fast_reader_agrees, parse_slice_fast};
pub(crate) use lenient::{parse_into, parse_slice_into};

/// A string field: `Some` only when the JSON value is a string.
#[derive(Debug, Default)]
pub(crate) struct Str<'a>(pub Option<Cow<'a, str>>);

/// A number field: `Some` only when the JSON value is a number (Q-8: kept as
/// `i64`, fractions truncated toward zero, saturating at the `i64` range).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Num(pub Option<i64>);

/// Up to one element inline, the rest in a `Vec`.
#[derive(Debug)]
pub(crate) struct Few<T> {
    pub first: Option<T>,
    pub rest: Vec<T>,
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<T> Few<T> {
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.rest.iter())
    }

    fn push_default(&mut self) -> &mut T
    where
        T: Default,
    {
        if self.first.is_none() && self.rest.is_empty() {
            self.first.insert(T::default())
        } else {
            let i = self.rest.len();
            self.rest.push(T::default());
            &mut self.rest[i]
        }
    }
}

/// A list field: absent or `null` is empty; any other non-array value is the
/// Q-9 structural error.
#[derive(Debug)]
pub(crate) enum List<T> {
    Items(Few<T>),
    NotAnArray,
}

impl<T> Default for List<T> {
    fn default() -> Self {
        List::Items(Few::default())
    }
}

/// One payload.
#[derive(Debug, Default)]
pub(crate) struct Payload<'a> {
    pub choices: List<Choice<'a>>,
    pub usage: Option<Box<WireUsage>>,
    /// A top-level `error` key holds a non-null value (read only by the
    /// interop profile).
    pub error: bool,
}

/// One `choices[]` element. `None` delta when absent, `null` or not an object.
#[derive(Debug, Default)]
pub(crate) struct Choice<'a> {
    pub delta: Delta<'a>,
    /// The last `delta` key held an object.
    pub has_delta: bool,
    /// `message` in place of `delta` (some proxies; read only by the
    /// interop profile, and only when there is no `delta` object). The
    /// fast reader leaves such payloads to serde.
    pub message: Option<Box<Delta<'a>>>,
    pub finish_reason: Str<'a>,
}

#[derive(Debug, Default)]
pub(crate) struct Delta<'a> {
    pub content: Str<'a>,
    pub reasoning_content: Str<'a>,
    /// `reasoning` (Ollama, OpenRouter, vLLM; read only by the interop
    /// profile).
    pub reasoning: Str<'a>,
    pub tool_calls: List<ToolCall<'a>>,
}

/// The identity of a wire tool-call `index`, compared as JavaScript's `Map`
/// compares keys (SameValueZero): `1` and `1.0` are the same key, `"1"` is
/// another, and every object or array is a fresh key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ToolKey {
    Absent,
    Null,
    Bool(bool),
    Number(u64),
    Str(String),
    Unique,
}

#[derive(Debug)]
pub(crate) struct ToolCall<'a> {
    pub key: ToolKey,
    pub id: Str<'a>,
    pub name: Str<'a>,
    pub arguments: Str<'a>,
}

#[derive(Debug, Default)]
struct Function<'a> {
    name: Str<'a>,
    arguments: Str<'a>,
}

/// The wire usage object (5.13).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WireUsage {
    pub prompt_tokens: Num,
    pub completion_tokens: Num,
    pub prompt_cache_hit_tokens: Num,
    pub cached_tokens: Num,
    pub reasoning_tokens: Num,
}

#[cfg(test)]
mod tests;
