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
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "choices" => map.next_value_seed(FillList(&mut self.choices))?,
                "usage" => {
                    let mut u = Box::<WireUsage>::default();
                    self.usage = map.next_value_seed(FillObject(&mut *u))?.then_some(u);
                }
                "error" => self.error = map.next_value::<NotNull>()?.0,
                _ => skip(&mut map)?,
            }
        }
        Ok(())
    }
}

impl<'de> ObjectVisit<'de> for Choice<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "delta" => {
                    map.next_value_seed(FillObject(&mut self.delta))?;
                }
                "finish_reason" => self.finish_reason = map.next_value()?,
                _ => skip(&mut map)?,
            }
        }
        Ok(())
    }
}

impl<'de> ObjectVisit<'de> for Delta<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "content" => self.content = map.next_value()?,
                "reasoning_content" => self.reasoning_content = map.next_value()?,
                "reasoning" => self.reasoning = map.next_value()?,
                "tool_calls" => map.next_value_seed(FillList(&mut self.tool_calls))?,
                _ => skip(&mut map)?,
            }
        }
        Ok(())
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
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "index" => self.key = map.next_value()?,
                "id" => self.id = map.next_value()?,
                "function" => {
                    let mut f = Function::default();
                    map.next_value_seed(FillObject(&mut f))?;
                    self.name = f.name;
                    self.arguments = f.arguments;
                }
                _ => skip(&mut map)?,
            }
        }
        Ok(())
    }
}

impl<'de> ObjectVisit<'de> for Function<'de> {
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "name" => self.name = map.next_value()?,
                "arguments" => self.arguments = map.next_value()?,
                _ => skip(&mut map)?,
            }
        }
        Ok(())
    }
}

#[derive(Default)]
struct Details {
    cached_tokens: Num,
    reasoning_tokens: Num,
}

impl<'de> ObjectVisit<'de> for Details {
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
                "cached_tokens" => self.cached_tokens = map.next_value()?,
                "reasoning_tokens" => self.reasoning_tokens = map.next_value()?,
                _ => skip(&mut map)?,
            }
        }
        Ok(())
    }
}

impl<'de> ObjectVisit<'de> for WireUsage {
    fn fill<A: MapAccess<'de>>(&mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match &*key.0 {
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
                _ => skip(&mut map)?,
            }
        }
        Ok(())
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
pub(crate) fn parse_into<'a>(
    payload: &'a str,
    out: &mut Payload<'a>,
) -> Result<bool, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(payload);
    let is_object = FillFresh(out).deserialize(&mut de)?;
    de.end()?;
    Ok(is_object)
}
