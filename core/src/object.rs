//! Lossless field collection for the open JSON vocabularies.
//!
//! Open sets (content blocks, message sources, finish reasons, ...) are read by
//! first collecting an object's fields in document order, then building the
//! typed variant when the discriminator is known and the fields fit. Anything
//! else is kept as an order-preserving [`JsonObject`] so it writes back
//! unchanged (streaming.md C-7, FR-2, MS-1; session.md J4).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde_json::Value;

use crate::json::JsonObject;

/// An object's fields in document order.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    pub(crate) entries: Vec<(String, Value)>,
}

impl Fields {
    /// Removes and returns the value of `key` (first occurrence).
    pub(crate) fn take(&mut self, key: &str) -> Option<Value> {
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(pos).1)
    }

    /// The value of `key` as a string slice, when present and a string.
    pub(crate) fn str_of(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_str())
    }

    /// Whether every key is one of `allowed`.
    pub(crate) fn only(&self, allowed: &[&str]) -> bool {
        self.entries
            .iter()
            .all(|(k, _)| allowed.contains(&k.as_str()))
    }

    /// Rebuilds the object in document order.
    pub(crate) fn into_object(self) -> JsonObject {
        self.entries.into_iter().collect()
    }
}

/// Deserializes a collected field value into `T`.
pub(crate) fn field_as<T: DeserializeOwned>(value: Value) -> Option<T> {
    serde_json::from_value(value).ok()
}

pub(crate) struct FieldsVisitor<T> {
    pub(crate) expecting: &'static str,
    pub(crate) build: fn(Fields) -> Result<T, String>,
    pub(crate) marker: PhantomData<T>,
}

impl<'de, T> Visitor<'de> for FieldsVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut fields = Fields {
            entries: Vec::with_capacity(map.size_hint().unwrap_or(4)),
        };
        while let Some(key) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            // JSON objects with a duplicate key: the last one wins, as in JSON.parse.
            if let Some(slot) = fields.entries.iter_mut().find(|(k, _)| *k == key) {
                slot.1 = value;
            } else {
                fields.entries.push((key, value));
            }
        }
        (self.build)(fields).map_err(de::Error::custom)
    }
}

/// Implements `Deserialize` through [`Fields`] and a builder function.
macro_rules! deserialize_via_fields {
    ($ty:ty, $expecting:literal, $build:path) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_map($crate::object::FieldsVisitor {
                    expecting: $expecting,
                    build: $build,
                    marker: core::marker::PhantomData,
                })
            }
        }
    };
}
pub(crate) use deserialize_via_fields;
