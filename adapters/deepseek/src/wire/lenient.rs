//! The serde path: hand-written visitors that fill a [`Payload`] in place,
//! leniently (a field of an unexpected type is absent, the last duplicate
//! key wins), and the JSON syntax errors.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use core::fmt;
use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

use super::{Choice, Delta, Few, Function, List, Num, Payload, Str, ToolCall, ToolKey, WireUsage};

/// Skips any value.
pub(super) fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

/// Reads an object's entries: `entry` gets each key and the map (to read
/// the value) and returns whether it read the value; the value of a key it
/// does not read is skipped.
pub(super) fn entries<'de, A: MapAccess<'de>>(
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
pub(super) struct Key<'a>(Cow<'a, str>);

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
pub(super) struct NotNull(bool);

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
pub(super) trait ObjectVisit<'de>: Default {
    /// Reads the object's entries into `self` (which starts as default).
    fn fill<A: MapAccess<'de>>(&mut self, map: A) -> Result<(), A::Error>;
}

/// Fills `T` in place from any value: an object is read into it, any other
/// kind of value leaves it default. The seed's value says whether it was an
/// object. A later duplicate key replaces the whole value, as in `JSON.parse`.
pub(super) struct FillObject<'a, T>(&'a mut T);

pub(super) struct FillVisitor<'a, T>(&'a mut T);

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
pub(super) struct FillFresh<'a, T>(&'a mut T);

impl<'de, T: ObjectVisit<'de>> DeserializeSeed<'de> for FillFresh<'_, T> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(FillVisitor(self.0))
    }
}

/// Appends one element, filled in place; clears `all_objects` when the
/// element is not an object.
pub(super) struct PushObject<'a, T> {
    pub(super) few: &'a mut Few<T>,
    pub(super) all_objects: &'a mut bool,
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
pub(super) struct ListVisitor<'a, T>(&'a mut List<T>);

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
pub(super) struct FillList<'a, T>(&'a mut List<T>);

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
pub(super) struct Details {
    pub(super) cached_tokens: Num,
    pub(super) reasoning_tokens: Num,
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
