//! The fast path tried before serde: what one payload of a stream teaches
//! about the next (the remembered prefix and the one-string shape), and the
//! check that the fast reader and serde agree.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use super::{
    Choice, Delta, Few, List, Payload, Str, ToolCall, ToolKey,
    lenient::parse_slice_into,
    scanner::{FAST_MAX_PREFIX, Fast},
};

/// What the fast reader remembers between the payloads of one stream (at
/// most [`FAST_MAX_PREFIX`] + [`FAST_MAX_SHAPE`] bytes).
#[derive(Clone, Debug, Default)]
pub(crate) struct FastState {
    /// The leading bytes of the last payload read from its start, up to the
    /// comma after its last top-level entry that the reader ignores (`id`,
    /// `object`, `created`, `model`, ... before `choices`). A payload that
    /// starts with exactly those bytes reaches that point in the same state
    /// with nothing read, so it is read from there on.
    pub(super) prefix: Vec<u8>,
    /// The last payload that carried exactly one text (one delta string or
    /// one tool call's `arguments`, nothing else), cut around that string.
    pub(super) shape: Option<Shape>,
}

/// A payload cut around its one string: a payload made of the same `head`
/// and `tail` with a plain string (no quote, backslash or control
/// character) between them has the same JSON structure, so it reads as the
/// same payload with that string in `slot`.
#[derive(Clone, Debug)]
pub(super) struct Shape {
    /// The bytes up to and including the string's opening quote.
    pub(super) head: Vec<u8>,
    /// The bytes from the string's closing quote to the end.
    pub(super) tail: Vec<u8>,
    pub(super) slot: Slot,
}

/// Where a [`Shape`]'s string goes.
#[derive(Clone, Debug)]
pub(super) enum Slot {
    Content,
    ReasoningContent,
    Reasoning,
    /// `arguments` of the one tool call, whose `index` read as this key.
    Arguments(ToolKey),
}

/// The longest `head` + `tail` a [`Shape`] keeps, in bytes.
pub(super) const FAST_MAX_SHAPE: usize = 2048;

/// A hand-written reader for the common payload, tried before serde: it
/// accepts a subset of JSON (escapes only in the string values it keeps, no
/// control characters in strings, a bounded nesting depth, no `usage`
/// object) and fills `out` exactly as
/// [`parse_slice_into`] would. Anything else returns `false` (with `out` in
/// an unspecified state) and the caller resets `out` and takes the serde path,
/// which also produces the errors.
///
/// `state` carries what one payload teaches about the next in the same
/// stream (see [`FastState`]): a payload that fits the last [`Shape`] is
/// read from its string alone, and one that starts with the remembered
/// prefix is read from the end of the prefix on.
pub(crate) fn parse_slice_fast<'a>(
    payload: &'a [u8],
    out: &mut Payload<'a>,
    state: &mut FastState,
) -> bool {
    if let Some(shape) = &state.shape
        && read_shape(shape, payload, out)
    {
        return true;
    }
    let prefix = &mut state.prefix;
    let resume = !prefix.is_empty() && payload.starts_with(prefix);
    let start = if resume { prefix.len() } else { 0 };
    let Some(Ok(text)) = payload.get(start..).map(core::str::from_utf8) else {
        return false;
    };
    let mut r = Fast {
        s: text,
        i: 0,
        spans: [None; 4],
    };
    let mut mark = None;
    if !resume {
        r.ws();
        if r.peek() != Some(b'{') {
            return false;
        }
        r.i += 1;
        r.ws();
        if r.peek() == Some(b'}') {
            r.i += 1;
            r.ws();
            return r.i == text.len();
        }
    }
    if r.payload(out, &mut mark).is_none() {
        return false;
    }
    r.ws();
    if r.i != text.len() {
        return false;
    }
    if !resume {
        prefix.clear();
        if let Some(k) = mark.filter(|k| *k <= FAST_MAX_PREFIX) {
            prefix.extend_from_slice(payload.get(..k).unwrap_or_default());
        }
    }
    if let Some(shape) = shape_of(out, &r.spans, start, payload) {
        state.shape = Some(shape);
    }
    true
}

/// The [`Shape`] of a payload just read, when it carries exactly one text
/// and is short enough; `spans` are the texts' positions in the read part,
/// which starts at `base`.
pub(super) fn shape_of(
    out: &Payload<'_>,
    spans: &[Option<(usize, usize)>; 4],
    base: usize,
    payload: &[u8],
) -> Option<Shape> {
    if out.usage.is_some() || out.error {
        return None;
    }
    let List::Items(choices) = &out.choices else {
        return None;
    };
    let choice = choices.first.as_ref().filter(|_| choices.rest.is_empty())?;
    if choice.finish_reason.0.is_some() {
        return None;
    }
    let d = &choice.delta;
    let List::Items(calls) = &d.tool_calls else {
        return None;
    };
    let texts = [&d.content, &d.reasoning_content, &d.reasoning];
    let (slot, span) = match (&calls.first, calls.rest.is_empty()) {
        (None, true) => {
            let mut set = texts.iter().enumerate().filter(|(_, t)| t.0.is_some());
            let (k, _) = set.next()?;
            if set.next().is_some() {
                return None;
            }
            let slot = match k {
                0 => Slot::Content,
                1 => Slot::ReasoningContent,
                _ => Slot::Reasoning,
            };
            (slot, spans.get(k).copied().flatten()?)
        }
        (Some(call), true) => {
            if texts.iter().any(|t| t.0.is_some())
                || call.id.0.is_some()
                || call.name.0.is_some()
                || call.arguments.0.is_none()
            {
                return None;
            }
            (Slot::Arguments(call.key.clone()), spans[3]?)
        }
        _ => return None,
    };
    let (open, close) = (base + span.0, base + span.1);
    let head = payload.get(..open)?;
    let tail = payload.get(close..)?;
    if head.len() + tail.len() > FAST_MAX_SHAPE {
        return None;
    }
    Some(Shape {
        head: head.to_vec(),
        tail: tail.to_vec(),
        slot,
    })
}

/// Reads `payload` as `shape` with another string, when it is one.
pub(super) fn read_shape<'a>(shape: &Shape, payload: &'a [u8], out: &mut Payload<'a>) -> bool {
    let (h, t) = (shape.head.len(), shape.tail.len());
    if payload.len() < h + t || !payload.starts_with(&shape.head) || !payload.ends_with(&shape.tail)
    {
        return false;
    }
    let Some(middle) = payload.get(h..payload.len() - t) else {
        return false;
    };
    if middle.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20) {
        return false;
    }
    let Ok(text) = core::str::from_utf8(middle) else {
        return false;
    };
    let text = Str(Some(Cow::Borrowed(text)));
    let mut delta = Delta::default();
    match &shape.slot {
        Slot::Content => delta.content = text,
        Slot::ReasoningContent => delta.reasoning_content = text,
        Slot::Reasoning => delta.reasoning = text,
        Slot::Arguments(key) => {
            delta.tool_calls = List::Items(Few {
                first: Some(ToolCall {
                    key: key.clone(),
                    arguments: text,
                    ..ToolCall::default()
                }),
                rest: Vec::new(),
            });
        }
    }
    *out = Payload {
        choices: List::Items(Few {
            first: Some(Choice {
                delta,
                // The shape's one string was in a `delta` object.
                has_delta: true,
                message: None,
                finish_reason: Str(None),
            }),
            rest: Vec::new(),
        }),
        usage: None,
        error: false,
    };
    true
}

/// Reads `payload` with [`parse_slice_fast`] (with `state`, which it
/// updates as a stream would) and, when that accepts, with serde. `Ok`
/// says whether the fast reader took it; `Err` describes a disagreement:
/// serde rejects what the fast reader took, or reads it differently. For
/// tests and fuzzing.
pub(crate) fn fast_reader_agrees(payload: &[u8], state: &mut FastState) -> Result<bool, String> {
    let mut fast = Payload::default();
    if !parse_slice_fast(payload, &mut fast, state) {
        return Ok(false);
    }
    let mut slow = Payload::default();
    let text = String::from_utf8_lossy(payload);
    match parse_slice_into(payload, &mut slow) {
        Ok(true) => {}
        other => {
            return Err(alloc::format!(
                "fast accepted what serde rejects: {text:?} ({other:?})"
            ));
        }
    }
    let (fast, slow) = (alloc::format!("{fast:?}"), alloc::format!("{slow:?}"));
    if fast != slow {
        return Err(alloc::format!(
            "{text:?}: fast read {fast}, serde read {slow}"
        ));
    }
    Ok(true)
}
