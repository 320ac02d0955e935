//! Small helpers to read strict payload objects from collected fields.

use alloc::string::String;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::json::MAX_SAFE_INTEGER;
use crate::object::Fields;

/// Reads payload fields of a strict object: every key must be known.
pub(crate) struct Strict<'a> {
    pub(crate) fields: Fields,
    pub(crate) what: &'a str,
}

impl<'a> Strict<'a> {
    pub(crate) fn new(fields: Fields, what: &'a str, allowed: &[&str]) -> Result<Self, String> {
        if let Some((k, _)) = fields
            .entries
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            return Err(error_text!(
                "unknown key",
                "{what} has an unknown key \"{k}\""
            ));
        }
        Ok(Strict { fields, what })
    }

    pub(crate) fn opt(&mut self, key: &str) -> Option<Value> {
        self.fields.take(key)
    }

    pub(crate) fn req(&mut self, key: &str) -> Result<Value, String> {
        self.fields
            .take(key)
            .ok_or_else(|| error_text!("missing key", "{} is missing \"{key}\"", self.what))
    }

    pub(crate) fn u64(&mut self, key: &str) -> Result<u64, String> {
        let v = self.req(key)?;
        as_safe_u64(&v).ok_or_else(|| {
            error_text!(
                "must be a non-negative safe integer",
                "{} \"{key}\" must be a non-negative safe integer",
                self.what
            )
        })
    }

    pub(crate) fn opt_u64(&mut self, key: &str) -> Result<Option<u64>, String> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => as_safe_u64(&v).map(Some).ok_or_else(|| {
                error_text!(
                    "must be a non-negative safe integer",
                    "{} \"{key}\" must be a non-negative safe integer",
                    self.what
                )
            }),
        }
    }

    pub(crate) fn string(&mut self, key: &str) -> Result<String, String> {
        match self.req(key)? {
            Value::String(s) => Ok(s),
            _ => Err(error_text!(
                "must be a string",
                "{} \"{key}\" must be a string",
                self.what
            )),
        }
    }

    pub(crate) fn opt_string(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.opt(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(error_text!(
                "must be a string",
                "{} \"{key}\" must be a string",
                self.what
            )),
        }
    }

    pub(crate) fn typed<T: DeserializeOwned>(&mut self, key: &str) -> Result<T, String> {
        let v = self.req(key)?;
        serde_json::from_value(v)
            .map_err(|e| error_text!("invalid field", "{} \"{key}\": {e}", self.what))
    }

    pub(crate) fn opt_typed<T: DeserializeOwned>(
        &mut self,
        key: &str,
    ) -> Result<Option<T>, String> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| error_text!("invalid field", "{} \"{key}\": {e}", self.what)),
        }
    }
}

/// A JSON number that is a non-negative safe integer (session.md 1).
pub(crate) fn as_safe_u64(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER)
}
