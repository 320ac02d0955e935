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
use core::fmt;
use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

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

/// Skips any value.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

/// Reads an object's entries: `entry` gets each key and the map (to read
/// the value) and returns whether it read the value; the value of a key it
/// does not read is skipped.
fn entries<'de, A: MapAccess<'de>>(
    mut map: A,
    mut entry: impl FnMut(&str, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key::<Key<'de>>()? {
        if !entry(&key.0, &mut map)? {
            skip(&mut map)?;
        }
    }
    Ok(())
}

/// A key, borrowed when possible; compared against the known names.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(String::from(v))))
            }
        }
        d.deserialize_str(V)
    }
}

/// One default `visit_*` method returning `$other` for that kind of value.
macro_rules! default_visit {
    (bool, $v:ty, $o:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$v, E> {
            Ok($o)
        }
    };
    (unit, $v:ty, $o:expr) => {
        fn visit_unit<E: de::Error>(self) -> Result<$v, E> {
            Ok($o)
        }
        fn visit_none<E: de::Error>(self) -> Result<$v, E> {
            Ok($o)
        }
    };
    (str, $v:ty, $o:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$v, E> {
            Ok($o)
        }
    };
    (num, $v:ty, $o:expr) => {
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$v, E> {
            Ok($o)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$v, E> {
            Ok($o)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$v, E> {
            Ok($o)
        }
    };
    (seq, $v:ty, $o:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$v, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($o)
        }
    };
    (map, $v:ty, $o:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$v, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($o)
        }
    };
}

/// The default `visit_*` methods for the listed kinds, plus `expecting`.
macro_rules! default_visits {
    ($v:ty, $o:expr; $($kind:ident),*) => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        $( default_visit!($kind, $v, $o); )*
    };
}

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            default_visits!(Str<'de>, Str(None); bool, unit, num, seq, map);
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Some(Cow::Owned(String::from(v)))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Some(Cow::Owned(v))))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a value is anything but `null` (the value itself is skipped).
struct NotNull(bool);

impl<'de> Deserialize<'de> for NotNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NotNull;
            default_visits!(NotNull, NotNull(true); bool, str, num, seq, map);
            fn visit_unit<E: de::Error>(self) -> Result<NotNull, E> {
                Ok(NotNull(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<NotNull, E> {
                Ok(NotNull(false))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            default_visits!(Num, Num(None); bool, unit, str, seq, map);
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(Some(i64::try_from(v).unwrap_or(i64::MAX))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(Some(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                // `as` truncates toward zero and saturates.
                Ok(Num(Some(v as i64)))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for ToolKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        fn number(v: f64) -> ToolKey {
            // SameValueZero: -0 and +0 are one key.
            ToolKey::Number(if v == 0.0 { 0 } else { v.to_bits() })
        }
        impl<'de> Visitor<'de> for V {
            type Value = ToolKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ToolKey, E> {
                Ok(ToolKey::Bool(v))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ToolKey, E> {
                Ok(ToolKey::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<ToolKey, E> {
                Ok(ToolKey::Null)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ToolKey, E> {
                Ok(number(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ToolKey, E> {
                Ok(number(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ToolKey, E> {
                Ok(number(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolKey, E> {
                Ok(ToolKey::Str(String::from(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolKey, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ToolKey::Unique)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolKey, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ToolKey::Unique)
            }
        }
        d.deserialize_any(V)
    }
}

/// A type filled in place from a JSON object.
trait ObjectVisit<'de>: Default {
    /// Reads the object's entries into `self` (which starts as default).
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error>;
}

/// Fills `T` in place from any value: an object is read into it, any other
/// kind of value leaves it default. The seed's value says whether it was an
/// object. A later duplicate key replaces the whole value, as in `JSON.parse`.
struct FillObject<'a, T>(&'a mut T);

struct FillVisitor<'a, T>(&'a mut T);

impl<'de, T: ObjectVisit<'de>> Visitor<'de> for FillVisitor<'_, T> {
    type Value = bool;
    default_visits!(bool, false; bool, unit, str, num, seq);
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        self.0.fill(map)?;
        Ok(true)
    }
}

impl<'de, T: ObjectVisit<'de>> DeserializeSeed<'de> for FillObject<'_, T> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        *self.0 = T::default();
        d.deserialize_any(FillVisitor(self.0))
    }
}

/// Fills an already-default `T` (the top-level payload).
struct FillFresh<'a, T>(&'a mut T);

impl<'de, T: ObjectVisit<'de>> DeserializeSeed<'de> for FillFresh<'_, T> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(FillVisitor(self.0))
    }
}

/// Appends one element, filled in place; clears `all_objects` when the
/// element is not an object.
struct PushObject<'a, T> {
    few: &'a mut Few<T>,
    all_objects: &'a mut bool,
}

impl<'de, T: ObjectVisit<'de>> DeserializeSeed<'de> for PushObject<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let slot = self.few.push_default();
        if !d.deserialize_any(FillVisitor(slot))? {
            *self.all_objects = false;
        }
        Ok(())
    }
}

/// Fills a list of objects in place: absent/`null` → empty; an array of
/// objects → items; any other value, or an element that is not an object →
/// `NotAnArray`. The visitor's value says whether the value was `null` or an
/// array; the last duplicate key wins.
struct ListVisitor<'a, T>(&'a mut List<T>);

impl<'de, T: ObjectVisit<'de>> Visitor<'de> for ListVisitor<'_, T> {
    type Value = bool;
    default_visits!(bool, false; bool, str, num, map);
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let List::Items(few) = self.0 else {
            return Ok(false);
        };
        let mut all_objects = true;
        while seq
            .next_element_seed(PushObject {
                few,
                all_objects: &mut all_objects,
            })?
            .is_some()
        {}
        if !all_objects {
            *self.0 = List::NotAnArray;
        }
        Ok(true)
    }
}

/// Replaces a list with the value read.
struct FillList<'a, T>(&'a mut List<T>);

impl<'de, T: ObjectVisit<'de>> DeserializeSeed<'de> for FillList<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        *self.0 = List::default();
        if !d.deserialize_any(ListVisitor(&mut *self.0))? {
            *self.0 = List::NotAnArray;
        }
        Ok(())
    }
}

impl<'de> ObjectVisit<'de> for Payload<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "choices" => map.next_value_seed(FillList(&mut self.choices))?,
                "usage" => {
                    let mut u = Box::<WireUsage>::default();
                    self.usage = map.next_value_seed(FillObject(&mut *u))?.then_some(u);
                }
                "error" => self.error = map.next_value::<NotNull>()?.0,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

impl<'de> ObjectVisit<'de> for Choice<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "delta" => {
                    self.has_delta = map.next_value_seed(FillObject(&mut self.delta))?;
                }
                "message" => {
                    let mut m = Box::<Delta<'de>>::default();
                    self.message = map.next_value_seed(FillObject(&mut *m))?.then_some(m);
                }
                "finish_reason" => self.finish_reason = map.next_value()?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

impl<'de> ObjectVisit<'de> for Delta<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "content" => self.content = map.next_value()?,
                "reasoning_content" => self.reasoning_content = map.next_value()?,
                "reasoning" => self.reasoning = map.next_value()?,
                "tool_calls" => map.next_value_seed(FillList(&mut self.tool_calls))?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

impl Default for ToolCall<'_> {
    fn default() -> Self {
        ToolCall {
            key: ToolKey::Absent,
            id: Str(None),
            name: Str(None),
            arguments: Str(None),
        }
    }
}

impl<'de> ObjectVisit<'de> for ToolCall<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "index" => self.key = map.next_value()?,
                "id" => self.id = map.next_value()?,
                "function" => {
                    let mut f = Function::default();
                    map.next_value_seed(FillObject(&mut f))?;
                    self.name = f.name;
                    self.arguments = f.arguments;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

impl<'de> ObjectVisit<'de> for Function<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "name" => self.name = map.next_value()?,
                "arguments" => self.arguments = map.next_value()?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

#[derive(Default)]
struct Details {
    cached_tokens: Num,
    reasoning_tokens: Num,
}

impl<'de> ObjectVisit<'de> for Details {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "cached_tokens" => self.cached_tokens = map.next_value()?,
                "reasoning_tokens" => self.reasoning_tokens = map.next_value()?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

impl<'de> ObjectVisit<'de> for WireUsage {
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error> {
        entries(map, |key, map| {
            match key {
                "prompt_tokens" => self.prompt_tokens = map.next_value()?,
                "completion_tokens" => self.completion_tokens = map.next_value()?,
                "prompt_cache_hit_tokens" => self.prompt_cache_hit_tokens = map.next_value()?,
                "prompt_tokens_details" => {
                    let mut d = Details::default();
                    map.next_value_seed(FillObject(&mut d))?;
                    self.cached_tokens = d.cached_tokens;
                }
                "completion_tokens_details" => {
                    let mut d = Details::default();
                    map.next_value_seed(FillObject(&mut d))?;
                    self.reasoning_tokens = d.reasoning_tokens;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })
    }
}

/// [`parse_into`] from bytes (serde_json validates the UTF-8 of each string
/// it reads; ignored strings are only scanned).
pub(crate) fn parse_slice_into<'a>(
    payload: &'a [u8],
    out: &mut Payload<'a>,
) -> Result<bool, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(payload);
    let is_object = FillFresh(out).deserialize(&mut de)?;
    de.end()?;
    Ok(is_object)
}

/// Parses one payload into `out` (which must start as default). `Ok(false)`
/// means valid JSON that is not an object; `Err` is a JSON syntax error.
///
/// Reads through [`parse_slice_into`]: one serde_json reader for every
/// payload keeps a single copy of the deserializer in a device build (the
/// UTF-8 check it adds cannot fail on a `str`).
pub(crate) fn parse_into<'a>(
    payload: &'a str,
    out: &mut Payload<'a>,
) -> Result<bool, serde_json::Error> {
    parse_slice_into(payload.as_bytes(), out)
}

/// What the fast reader remembers between the payloads of one stream (at
/// most [`FAST_MAX_PREFIX`] + [`FAST_MAX_SHAPE`] bytes).
#[derive(Clone, Debug, Default)]
pub(crate) struct FastState {
    /// The leading bytes of the last payload read from its start, up to the
    /// comma after its last top-level entry that the reader ignores (`id`,
    /// `object`, `created`, `model`, ... before `choices`). A payload that
    /// starts with exactly those bytes reaches that point in the same state
    /// with nothing read, so it is read from there on.
    prefix: Vec<u8>,
    /// The last payload that carried exactly one text (one delta string or
    /// one tool call's `arguments`, nothing else), cut around that string.
    shape: Option<Shape>,
}

/// A payload cut around its one string: a payload made of the same `head`
/// and `tail` with a plain string (no quote, backslash or control
/// character) between them has the same JSON structure, so it reads as the
/// same payload with that string in `slot`.
#[derive(Clone, Debug)]
struct Shape {
    /// The bytes up to and including the string's opening quote.
    head: Vec<u8>,
    /// The bytes from the string's closing quote to the end.
    tail: Vec<u8>,
    slot: Slot,
}

/// Where a [`Shape`]'s string goes.
#[derive(Clone, Debug)]
enum Slot {
    Content,
    ReasoningContent,
    Reasoning,
    /// `arguments` of the one tool call, whose `index` read as this key.
    Arguments(ToolKey),
}

/// The longest `head` + `tail` a [`Shape`] keeps, in bytes.
const FAST_MAX_SHAPE: usize = 2048;

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
fn shape_of(
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
fn read_shape<'a>(shape: &Shape, payload: &'a [u8], out: &mut Payload<'a>) -> bool {
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

/// The value of four hex digits (either case), as in a `\u` escape.
fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        Some(acc * 16 + u32::from(v))
    })
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

/// The longest prefix [`parse_slice_fast`] remembers, in bytes.
const FAST_MAX_PREFIX: usize = 1024;

/// The fast reader's cursor over a payload known to be valid UTF-8.
struct Fast<'a> {
    s: &'a str,
    i: usize,
    /// Where the last `content`, `reasoning_content`, `reasoning` and tool
    /// `arguments` string read lies: after its opening quote, at its
    /// closing quote (for [`shape_of`]).
    spans: [Option<(usize, usize)>; 4],
}

/// Nesting deeper than this takes the serde path.
const FAST_MAX_DEPTH: usize = 64;

impl<'a> Fast<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    /// Whether a number starts here. Where serde reads a value with
    /// `deserialize_any` it range-checks numbers (and may fail), so those
    /// places leave numbers to the serde path.
    fn at_number(&self) -> bool {
        matches!(self.peek(), Some(b'-' | b'0'..=b'9'))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.ws();
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// A string without escapes or control characters; the cursor is on
    /// its opening quote. One pass, without a call: the strings of a
    /// payload are short.
    fn string(&mut self) -> Option<&'a str> {
        let start = self.i + 1;
        let rest = self.s.as_bytes().get(start..)?;
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.i = start + len + 1;
        // Quotes are ASCII, so both ends are character boundaries.
        self.s.get(start..start + len)
    }

    /// A string value, the cursor on its opening quote: borrowed when it
    /// has no escape, unescaped into an owned string otherwise (tool-call
    /// arguments are JSON text, full of `\"`). Takes the escapes serde_json
    /// takes, with the same result; a lone surrogate, an unknown escape or
    /// a control character returns `None` (the serde path then reports it).
    fn string_value(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.s.as_bytes();
        let start = self.i + 1;
        let stop = |from: usize| {
            bytes
                .get(from..)?
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .map(|k| from + k)
        };
        let mut end = stop(start)?;
        if bytes[end] == b'"' {
            self.i = end + 1;
            return self.s.get(start..end).map(Cow::Borrowed);
        }
        let mut out = String::with_capacity(end - start + 16);
        let mut from = start;
        loop {
            // Quotes and backslashes are ASCII: both ends are boundaries.
            out.push_str(self.s.get(from..end)?);
            match bytes[end] {
                b'"' => {
                    self.i = end + 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {}
                _ => return None,
            }
            let (c, len) = match *bytes.get(end + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'/' => ('/', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'u' => {
                    let unit = hex4(bytes.get(end + 2..end + 6)?)?;
                    match unit {
                        0xD800..=0xDBFF => {
                            // A high surrogate must be followed by an escaped low one.
                            if bytes.get(end + 6..end + 8)? != b"\\u" {
                                return None;
                            }
                            let low = hex4(bytes.get(end + 8..end + 12)?)?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                            (char::from_u32(c)?, 12)
                        }
                        0xDC00..=0xDFFF => return None,
                        _ => (char::from_u32(unit)?, 6),
                    }
                }
                _ => return None,
            };
            out.push(c);
            from = end + len;
            end = stop(from)?;
        }
    }

    /// A number, validated and skipped; its text.
    fn number(&mut self) -> Option<&'a str> {
        let bytes = self.s.as_bytes();
        let start = self.i;
        let digits = |i: &mut usize| {
            let from = *i;
            while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        let mut i = start;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        if bytes.get(i) == Some(&b'0') {
            i += 1;
        } else if !digits(&mut i) {
            return None;
        }
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.i = i;
        self.s.get(start..i)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.s
            .get(self.i..)?
            .starts_with(word)
            .then(|| self.i += word.len())
    }

    /// Any value, validated and skipped; `Some(true)` when it was `null`.
    fn skip(&mut self, depth: usize) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(|_| false),
            b'n' => self.literal("null").map(|_| true),
            b't' => self.literal("true").map(|_| false),
            b'f' => self.literal("false").map(|_| false),
            b'{' => {
                self.object(depth, |r, _| r.skip(depth + 1).map(|_| ()))?;
                Some(false)
            }
            b'[' => {
                self.array(depth, |r| r.skip(depth + 1).map(|_| ()))?;
                Some(false)
            }
            _ => self.number().map(|_| false),
        }
    }

    /// An object (the cursor on `{`), calling `entry` with each key; the
    /// callback reads the value.
    fn object(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        if depth >= FAST_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            entry(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array (the cursor on `[`), calling `item` for each element.
    fn array(&mut self, depth: usize, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if depth >= FAST_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            item(self)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// [`Str`]: a string is kept, any other value is read as absent.
    fn str_field(&mut self, depth: usize) -> Option<Str<'a>> {
        if self.at_number() {
            return None;
        }
        if self.peek()? == b'"' {
            return Some(Str(Some(self.string_value()?)));
        }
        self.skip(depth)?;
        Some(Str(None))
    }

    /// [`str_field`](Self::str_field) for a string a [`Shape`] can vary
    /// (`slot`: the index into `spans`), also noting where it lies.
    fn str_span(&mut self, depth: usize, slot: usize) -> Option<Str<'a>> {
        let open = self.i + 1;
        let value = self.str_field(depth)?;
        let span = value.0.is_some().then(|| (open, self.i - 1));
        if let Some(s) = self.spans.get_mut(slot) {
            *s = span;
        }
        Some(value)
    }

    /// [`FillList`]: `null` is empty, an array of objects is its items, any
    /// other value (or a non-object element) is `NotAnArray`.
    fn list<T: Default>(
        &mut self,
        depth: usize,
        list: &mut List<T>,
        mut fill: impl FnMut(&mut Self, &mut T) -> Option<()>,
    ) -> Option<()> {
        *list = List::default();
        if self.at_number() {
            return None;
        }
        if self.peek()? != b'[' {
            if !self.skip(depth)? {
                *list = List::NotAnArray;
            }
            return Some(());
        }
        let mut all_objects = true;
        let List::Items(few) = list else {
            return None;
        };
        self.array(depth, |r| {
            let slot = few.push_default();
            if r.peek()? == b'{' {
                fill(r, slot)
            } else if r.at_number() {
                None
            } else {
                all_objects = false;
                r.skip(depth + 1).map(|_| ())
            }
        })?;
        if !all_objects {
            *list = List::NotAnArray;
        }
        Some(())
    }

    /// [`FillObject`]: reset, then an object fills `T`; any other value
    /// leaves it default.
    fn fill<T: Default>(
        &mut self,
        depth: usize,
        slot: &mut T,
        fill: impl FnOnce(&mut Self, &mut T) -> Option<()>,
    ) -> Option<()> {
        *slot = T::default();
        if self.at_number() {
            return None;
        }
        if self.peek()? == b'{' {
            fill(self, slot)
        } else {
            self.skip(depth).map(|_| ())
        }
    }

    /// The top-level object's entries, the cursor at its first key (after
    /// `{`, or after a remembered prefix). `mark` is set to the position
    /// after each comma that follows only ignored entries.
    fn payload(&mut self, out: &mut Payload<'a>, mark: &mut Option<usize>) -> Option<()> {
        let mut ignored_only = true;
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            match key {
                "choices" => {
                    ignored_only = false;
                    self.list(1, &mut out.choices, |r, c| r.choice(2, c))?;
                }
                "usage" => {
                    ignored_only = false;
                    // A usage object takes the serde path; `null` is no usage.
                    if !self.skip(1)? {
                        return None;
                    }
                    out.usage = None;
                }
                "error" => {
                    ignored_only = false;
                    if self.at_number() {
                        return None;
                    }
                    out.error = !self.skip(1)?;
                }
                _ => {
                    self.skip(1)?;
                }
            }
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    if ignored_only {
                        *mark = Some(self.i);
                    }
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object (the cursor on `{`) whose entries `entry` reads: it
    /// returns `Some(false)` for a key whose value it does not read, and
    /// that value is skipped.
    fn fields(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&mut Self, &'a str) -> Option<bool>,
    ) -> Option<()> {
        self.object(depth, |r, key| {
            if !entry(r, key)? {
                r.skip(depth + 1)?;
            }
            Some(())
        })
    }

    fn choice(&mut self, depth: usize, c: &mut Choice<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "delta" => {
                    c.has_delta = r.peek() == Some(b'{');
                    r.fill(depth + 1, &mut c.delta, |r, d| r.delta(depth + 1, d))?;
                }
                // Left to serde.
                "message" => return None,
                "finish_reason" => c.finish_reason = r.str_field(depth + 1)?,
                _ => return Some(false),
            }
            Some(true)
        })
    }

    fn delta(&mut self, depth: usize, d: &mut Delta<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "content" => d.content = r.str_span(depth + 1, 0)?,
                "reasoning_content" => d.reasoning_content = r.str_span(depth + 1, 1)?,
                "reasoning" => d.reasoning = r.str_span(depth + 1, 2)?,
                "tool_calls" => r.list(depth + 1, &mut d.tool_calls, |r, t| {
                    r.tool_call(depth + 2, t)
                })?,
                _ => return Some(false),
            }
            Some(true)
        })
    }

    fn tool_call(&mut self, depth: usize, t: &mut ToolCall<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "index" => t.key = r.tool_key(depth + 1)?,
                "id" => t.id = r.str_field(depth + 1)?,
                "function" => {
                    let mut f = Function::default();
                    r.fill(depth + 1, &mut f, |r, f| r.function(depth + 1, f))?;
                    t.name = f.name;
                    t.arguments = f.arguments;
                }
                _ => return Some(false),
            }
            Some(true)
        })
    }

    fn function(&mut self, depth: usize, f: &mut Function<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "name" => f.name = r.str_field(depth + 1)?,
                "arguments" => f.arguments = r.str_span(depth + 1, 3)?,
                _ => return Some(false),
            }
            Some(true)
        })
    }

    /// [`ToolKey`] for the values the fast path takes: small non-negative
    /// integers, strings, `null`, booleans, arrays and objects.
    fn tool_key(&mut self, depth: usize) -> Option<ToolKey> {
        Some(match self.peek()? {
            b'"' => ToolKey::Str(String::from(self.string()?)),
            b'n' => self.literal("null").map(|_| ToolKey::Null)?,
            b't' => self.literal("true").map(|_| ToolKey::Bool(true))?,
            b'f' => self.literal("false").map(|_| ToolKey::Bool(false))?,
            b'[' | b'{' => self.skip(depth).map(|_| ToolKey::Unique)?,
            _ => {
                let text = self.number()?;
                // Fractions, exponents, signs and long numbers: serde path.
                if text.len() > 15 || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let v: u64 = text.parse().ok()?;
                ToolKey::Number(if v == 0 { 0 } else { (v as f64).to_bits() })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    /// Canonical DeepSeek payloads (the shapes of the bench workload).
    const CANONICAL: [&str; 6] = [
        r#"{"id":"a","object":"chat.completion.chunk","created":1785772482,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" we"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"content":"你好 🙂","reasoning_content":null},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_00_x","type":"function","function":{"name":"bash","arguments":""}}]},"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"arguments":"_confi"}}]},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#,
    ];

    /// Kept strings with escapes (tool-call arguments are JSON text), as
    /// servers write them; every one is read by the fast path.
    const ESCAPED: [&str; 6] = [
        r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pattern\": \"parse_cache\\\\(\", \"path\": \"src/\"}"}}]},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"content":"line one\nline two\ttab \\ back \/ slash \b\f\r"},"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"content":"caf\u00e9 \u4f60\u597D \ud83d\ude80 \u0000 \u001f"},"finish_reason":null}]}"#,
        r#"{"id":"a","choices":[{"index":0,"delta":{"reasoning_content":"\"quoted\""}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_\u0031","function":{"name":"b\u0061sh","arguments":"\\"}}]}}]}"#,
        r#"{"choices":[{"delta":{"content":"\"","reasoning":"\\n"}}]}"#,
    ];

    /// Unusual but valid (or nearly valid) payloads.
    const ODD: [&str; 32] = [
        r#" { "choices" : [ { "delta" : { "content" : "x" } } ] } "#,
        r#"{"choices":[{"delta":{"content":"a"},"delta":{"reasoning_content":"b"}}]}"#,
        r#"{"choices":[{"delta":{"content":5,"reasoning":true,"reasoning_content":[1,{"a":null}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":"1"},{"index":null},{"index":true},{"index":[]},{"index":{}},{}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":1.0},{"index":-0},{"index":1e2},{"index":12345678901234567890}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[1]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":{"index":0}}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":null}}],"choices":null}"#,
        r#"{"choices":[1,{"delta":{}}]}"#,
        r#"{"choices":"x"}"#,
        r#"{"choices":[{"delta":"x","finish_reason":7}]}"#,
        r#"{"choices":[{"message":{"content":"x"}}]}"#,
        r#"{"choices":[{"delta":{},"message":{"content":"x"},"delta":null}]}"#,
        r#"{"choices":[{"delta":{"content":"a\"b"}}]}"#,
        r#"{"choices":[{"delta":{"content":"a\u0041"}}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        r#"{"choices":[],"error":{"message":"boom"}}"#,
        r#"{"choices":[],"error":null,"x":[[[[]]]],"y":-1.5e-3,"z":"q"}"#,
        r#"{"choices":[{"delta":{"content":"x"}}]} x"#,
        r#"{"choices":[{"delta":{"content":"x"}}]"#,
        r#"[{"choices":[]}]"#,
        r#""x""#,
        r#"{"choices":[{"delta":{"content":1e999}}]}"#,
        r#"{"a":01,"choices":[]}"#,
        // Escapes serde refuses (or reads differently): the serde path.
        r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\udc00x"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud800\u0041"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud800\n"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\u12g4"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\x41"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\u004"}}]}"#,
        r#"{"choices":[{"delta":{"content":"tab\	raw"}}]}"#,
    ];

    fn sse_payloads(body: &str) -> impl Iterator<Item = &str> {
        body.split('\n')
            .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data: "))
            .filter(|p| *p != "[DONE]")
    }

    /// Whenever the fast reader accepts, serde accepts the same bytes and
    /// reads the same payload.
    fn agrees(bytes: &[u8]) -> bool {
        agrees_after(bytes, &mut FastState::default())
    }

    /// [`agrees`] with what earlier payloads left in `state`.
    fn agrees_after(bytes: &[u8], state: &mut FastState) -> bool {
        fast_reader_agrees(bytes, state).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether `bytes` fits the remembered shape.
    fn shaped(bytes: &[u8], state: &FastState) -> bool {
        state
            .shape
            .as_ref()
            .is_some_and(|s| read_shape(s, bytes, &mut Payload::default()))
    }

    #[test]
    fn the_fast_reader_reads_canonical_payloads_as_serde_does() {
        let mut corpus: Vec<&str> = CANONICAL.to_vec();
        for body in [
            include_str!("../tests/interop/unindexed_tool_calls.sse"),
            include_str!("../tests/interop/reasoning_field_then_text.sse"),
            include_str!("../tests/interop/tool_call_without_id.sse"),
            include_str!("../tests/interop/crlf_no_done_stop.sse"),
        ] {
            corpus.extend(sse_payloads(body));
        }
        assert!(corpus.len() > 10);
        corpus.extend(ESCAPED);
        for p in &corpus {
            if !p.contains("\"usage\":{") {
                assert!(agrees(p.as_bytes()), "the fast path should take {p}");
            }
        }
        let taken = ODD.iter().filter(|p| agrees(p.as_bytes())).count();
        assert!(taken >= 8, "only {taken} odd payloads taken");
    }

    #[test]
    fn a_remembered_prefix_is_used_only_when_it_matches() {
        let mut state = FastState::default();
        assert!(agrees_after(CANONICAL[0].as_bytes(), &mut state));
        let expected = r#"{"id":"a","object":"chat.completion.chunk","created":1785772482,"model":"m","system_fingerprint":"fp","#;
        assert_eq!(state.prefix, expected.as_bytes());
        // The next payload of the stream is read after the prefix.
        let next = format!(r#"{expected}"choices":[{{"delta":{{"content":"x"}}}}]}}"#);
        assert!(!shaped(next.as_bytes(), &state));
        assert!(agrees_after(next.as_bytes(), &mut state));
        // A payload that differs inside the prefix is read from its start.
        assert!(agrees_after(CANONICAL[1].as_bytes(), &mut state));
        assert!(
            state
                .prefix
                .starts_with(br#"{"id":"a","object":"chat.completion.chunk","created":1,"#)
        );
        // A remembered prefix followed by a bad tail is still rejected.
        let bad = format!(r#"{expected}}}"#);
        assert!(!agrees_after(bad.as_bytes(), &mut state.clone()));
    }

    #[test]
    fn a_payload_of_the_last_shape_is_read_from_its_string() {
        // One delta text: the next payloads differ only in that text.
        let mut state = FastState::default();
        assert!(agrees_after(CANONICAL[1].as_bytes(), &mut state));
        for text in [" more", "", "你好 🙂", "x y z"] {
            let next = CANONICAL[1].replace(" we", text);
            assert!(shaped(next.as_bytes(), &state), "{next}");
            assert!(agrees_after(next.as_bytes(), &mut state), "{next}");
        }
        // A string the shape cannot take alone is read in full, and agrees.
        for text in [r#"a\"b"#, r#"a\\b"#, r#"tab\tx"#, r#"bad\u"#, r#"x\u0001"#] {
            let next = CANONICAL[1].replace(" we", text);
            assert!(!shaped(next.as_bytes(), &state), "{next}");
            agrees_after(next.as_bytes(), &mut state.clone());
        }
        let raw_quote = CANONICAL[1].replace(" we", "a\"b");
        assert!(!shaped(raw_quote.as_bytes(), &state));
        assert!(!agrees_after(raw_quote.as_bytes(), &mut state.clone()));
        let control = CANONICAL[1].replace(" we", "a\u{1}b");
        assert!(!shaped(control.as_bytes(), &state));
        // One tool call's arguments, with its index as the key.
        let mut state = FastState::default();
        assert!(agrees_after(CANONICAL[4].as_bytes(), &mut state));
        let next = CANONICAL[4].replace("_confi", "g: 1}");
        assert!(shaped(next.as_bytes(), &state));
        assert!(agrees_after(next.as_bytes(), &mut state));
        // Payloads with more than one text, a finish reason, an id or a
        // name leave no shape.
        for p in [CANONICAL[3], CANONICAL[5], ESCAPED[5]] {
            let mut state = FastState::default();
            assert!(agrees_after(p.as_bytes(), &mut state), "{p}");
            assert!(state.shape.is_none(), "{p}");
        }
    }

    #[test]
    fn a_whole_stream_reads_as_serde_does() {
        // A DeepSeek-like stream: the role chunk, reasoning, text, two tool
        // calls whose arguments are JSON text (escapes), a finish with usage.
        let head = r#"{"id":"6f1c","object":"chat.completion.chunk","created":1785046653,"model":"deepseek-v4-flash","system_fingerprint":"fp_1","choices":[{"index":0,"delta":"#;
        let tail = r#","logprobs":null,"finish_reason":null}]}"#;
        let mut payloads = alloc::vec![format!(
            r#"{head}{{"role":"assistant","content":null,"reasoning_content":""}}{tail}"#
        )];
        let words = [
            "车", " -", " stre", "am", " 🚀", "", "x y", r#"a\\b"#, r#"\"q\""#, r#"\n"#,
        ];
        for w in words.iter().cycle().take(40) {
            payloads.push(format!(
                r#"{head}{{"content":null,"reasoning_content":"{w}"}}{tail}"#
            ));
        }
        for w in words.iter().cycle().take(40) {
            payloads.push(format!(
                r#"{head}{{"content":"{w}","reasoning_content":null}}{tail}"#
            ));
        }
        for call in 0..2 {
            payloads.push(format!(
                r#"{head}{{"tool_calls":[{{"index":{call},"id":"call_0{call}","type":"function","function":{{"name":"grep","arguments":""}}}}]}}{tail}"#
            ));
            for a in [
                "{\\\"pattern\\\": \\\"",
                "parse",
                "_cache",
                "\\\\(",
                "\\\"}",
            ] {
                payloads.push(format!(
                    r#"{head}{{"tool_calls":[{{"index":{call},"function":{{"arguments":"{a}"}}}}]}}{tail}"#
                ));
            }
        }
        payloads.push(String::from(
            r#"{"id":"6f1c","choices":[{"index":0,"delta":{"content":""},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9}}"#,
        ));
        let mut state = FastState::default();
        let (mut fast, mut hits) = (0, 0);
        for p in &payloads {
            let p = p.as_bytes();
            hits += usize::from(shaped(p, &state));
            fast += usize::from(agrees_after(p, &mut state));
        }
        // All but the usage payload take the fast path. By shape: every
        // delta without an escape that follows one of its kind (27 + 27
        // of the 40 + 40, whose first and 12 escaped ones are read in
        // full), and 2 of each call's 5 argument fragments.
        assert_eq!(fast, payloads.len() - 1);
        assert_eq!(hits, 58, "of {}", payloads.len());
    }

    #[test]
    fn the_fast_reader_never_accepts_more_than_serde() {
        // Every one-byte replacement and deletion of every test payload,
        // read from scratch and after the payload's own prefix.
        const BYTES: &[u8] = b"\"\\{}[],:0-1e. \tnx\x01\xff\xe4";
        let mut resumed = 0;
        let mut reshaped = 0;
        for p in CANONICAL.iter().chain(ESCAPED.iter()).chain(ODD.iter()) {
            let p = p.as_bytes();
            let mut state = FastState::default();
            agrees_after(p, &mut state);
            let mut check = |v: &[u8]| {
                agrees(v);
                if v.starts_with(&state.prefix) && !state.prefix.is_empty() {
                    resumed += 1;
                }
                if shaped(v, &state) {
                    reshaped += 1;
                }
                agrees_after(v, &mut state.clone());
            };
            for i in 0..p.len() {
                let mut v = p.to_vec();
                v.remove(i);
                check(&v);
                for &b in BYTES {
                    let mut v = p.to_vec();
                    v[i] = b;
                    check(&v);
                }
            }
        }
        assert!(resumed > 1000, "the resumed path ran {resumed} times");
        assert!(reshaped > 100, "the shape path ran {reshaped} times");
        // Deep nesting takes the serde path (and its recursion limit).
        let deep = format!(
            "{{\"x\":{}{},\"choices\":[]}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(!agrees(deep.as_bytes()));
    }
}
