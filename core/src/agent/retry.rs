//! The provider retry policy and its executor arithmetic (streaming.md 6,
//! R-1..R-18).
//!
//! The policy is data: [`RetryPolicy::resolve`] validates a provider's
//! `retryPolicy` configuration (R-1, R-2) and fills the defaults (R-3, R-5).
//! The executor's decisions are pure functions of the failure, the policy,
//! the previous `llm/retry` record and a jitter sample in `[0, 1]`; the
//! [`Agent`](super::Agent) makes them inside the crate, runs them at the
//! request-error seam, logs `llm/retry` / `llm/retry-started` and waits
//! through [`Agent::poll_timeout`](super::Agent::poll_timeout).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::chunk::LlmFailure;
use crate::ids::RetryId;
use crate::json::{MAX_SAFE_INTEGER, serialize_js_f64, write_js_number};

/// The largest timer delay, in milliseconds (2^31 − 1).
pub(crate) const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;

/// Default `maxRetries` (R-5).
pub(crate) const DEFAULT_MAX_RETRIES: u64 = 5;
/// Default `initialDelayMs` (R-5).
pub const DEFAULT_INITIAL_DELAY_MS: f64 = 500.0;
/// Default `maxDelayMs` (R-5).
pub(crate) const DEFAULT_MAX_DELAY_MS: f64 = 10_000.0;
/// Default `jitterRatio` (R-5).
pub(crate) const DEFAULT_JITTER_RATIO: f64 = 0.1;
/// Default `retryableCodes`, in this order (R-5).
pub const DEFAULT_RETRYABLE_CODES: [&str; 5] = [
    "EMPTY_RESPONSE",
    "RATE_LIMIT",
    "SERVER",
    "TIMEOUT",
    "TRANSPORT",
];

/// Bounded exponential backoff with symmetric jitter (R-13).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// First local delay in milliseconds.
    pub initial_delay_ms: f64,
    /// Cap for local delays and for accepted provider delays.
    pub max_delay_ms: f64,
    /// Jitter range around 1, within `[0, 1]`.
    pub jitter_ratio: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial_delay_ms: DEFAULT_INITIAL_DELAY_MS,
            max_delay_ms: DEFAULT_MAX_DELAY_MS,
            jitter_ratio: DEFAULT_JITTER_RATIO,
        }
    }
}

/// A resolved, immutable retry policy (`ResolvedRetryPolicy`, R-4).
///
/// It serializes flattened, exactly as R-4 shows:
/// `{"mode":"normal","maxRetries":5,"retryableCodes":[…],"initialDelayMs":500,…}`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RetryPolicy {
    /// Retry only the configured transient codes, at most `max_retries` times.
    Normal {
        /// Retries after the first request (`0` means none, R-16).
        max_retries: u64,
        /// Failure codes eligible for a retry (exact, case-sensitive match).
        retryable_codes: Vec<String>,
        /// Delays.
        backoff: Backoff,
    },
    /// Retry every failure until success or cancellation (R-9).
    Always {
        /// Delays.
        backoff: Backoff,
    },
}

impl Default for RetryPolicy {
    /// The normal-mode defaults (R-3, R-5).
    fn default() -> Self {
        RetryPolicy::Normal {
            max_retries: DEFAULT_MAX_RETRIES,
            retryable_codes: DEFAULT_RETRYABLE_CODES
                .iter()
                .map(|c| c.to_string())
                .collect(),
            backoff: Backoff::default(),
        }
    }
}

/// A retry-policy configuration error (R-2). The message starts with the
/// provider path given to [`RetryPolicy::resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryConfigError {
    /// The full message, e.g. `llm-deepseek: retryPolicy.maxRetries must be a
    /// non-negative safe integer`.
    pub message: String,
}

impl fmt::Display for RetryConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl core::error::Error for RetryConfigError {}

fn config_error(message: String) -> RetryConfigError {
    RetryConfigError { message }
}

fn check_keys(
    object: &serde_json::Map<String, Value>,
    allowed: &[&str],
    path: &str,
) -> Result<(), RetryConfigError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(config_error(format!("{path}: unknown key \"{key}\""))),
        None => Ok(()),
    }
}

fn number_at(object: &serde_json::Map<String, Value>, key: &str, default: f64) -> Result<f64, ()> {
    match object.get(key) {
        None => Ok(default),
        Some(Value::Number(n)) => n.as_f64().ok_or(()),
        Some(_) => Err(()),
    }
}

fn resolve_backoff(config: Option<&Value>, path: &str) -> Result<Backoff, RetryConfigError> {
    let empty = serde_json::Map::new();
    let object = match config {
        None => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(config_error(format!("{path} must be an object"))),
    };
    check_keys(
        object,
        &["initialDelayMs", "maxDelayMs", "jitterRatio"],
        path,
    )?;
    let max = MAX_TIMER_DELAY_MS;
    let delay_message =
        |key: &str| format!("{path}.{key} must be a positive finite number no greater than {max}");
    let initial = number_at(object, "initialDelayMs", DEFAULT_INITIAL_DELAY_MS)
        .map_err(|_| config_error(delay_message("initialDelayMs")))?;
    if !(initial > 0.0 && initial <= max) {
        return Err(config_error(delay_message("initialDelayMs")));
    }
    let max_delay = number_at(object, "maxDelayMs", DEFAULT_MAX_DELAY_MS)
        .map_err(|_| config_error(delay_message("maxDelayMs")))?;
    if !(max_delay > 0.0 && max_delay <= max) {
        return Err(config_error(delay_message("maxDelayMs")));
    }
    if initial > max_delay {
        return Err(config_error(format!(
            "{path}.initialDelayMs must be less than or equal to maxDelayMs"
        )));
    }
    let jitter_message = || config_error(format!("{path}.jitterRatio must be between 0 and 1"));
    let jitter =
        number_at(object, "jitterRatio", DEFAULT_JITTER_RATIO).map_err(|_| jitter_message())?;
    if !(0.0..=1.0).contains(&jitter) {
        return Err(jitter_message());
    }
    Ok(Backoff {
        initial_delay_ms: initial,
        max_delay_ms: max_delay,
        jitter_ratio: jitter,
    })
}

/// What the executor does with one failure (R-7..R-12).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub(crate) enum RetrySchedule {
    /// Pass the failure to the next handler (usually making it terminal).
    Delegate,
    /// Schedule retry number `retry` after `delay_ms` milliseconds.
    Retry {
        /// The retry number, starting at 1.
        retry: u64,
        /// The wait, unrounded (R-13).
        delay_ms: f64,
    },
}

impl RetryPolicy {
    /// Validates and defaults a provider's `retryPolicy` configuration (R-1,
    /// R-2, R-3). `path` names the owner in error messages, e.g.
    /// `"llm-deepseek: retryPolicy"`. `None` resolves to the defaults.
    pub fn resolve(config: Option<&Value>, path: &str) -> Result<RetryPolicy, RetryConfigError> {
        let Some(config) = config else {
            return Ok(RetryPolicy::default());
        };
        let Value::Object(object) = config else {
            return Err(config_error(format!("{path} must be an object")));
        };
        let backoff_path = format!("{path}.backoff");
        match object.get("mode").and_then(Value::as_str) {
            Some("normal") => {
                check_keys(
                    object,
                    &["mode", "maxRetries", "retryableCodes", "backoff"],
                    path,
                )?;
                let max_retries = match object.get("maxRetries") {
                    None => DEFAULT_MAX_RETRIES,
                    Some(v) => v
                        .as_u64()
                        .filter(|n| *n <= MAX_SAFE_INTEGER)
                        .or_else(|| {
                            // `3.0` is an integer in JavaScript.
                            v.as_f64()
                                .filter(|f| *f >= 0.0 && *f <= MAX_SAFE_INTEGER as f64)
                                .filter(|f| (*f as u64) as f64 == *f)
                                .map(|f| f as u64)
                        })
                        .ok_or_else(|| {
                            config_error(format!(
                                "{path}.maxRetries must be a non-negative safe integer"
                            ))
                        })?,
                };
                let retryable_codes = match object.get("retryableCodes") {
                    None => DEFAULT_RETRYABLE_CODES
                        .iter()
                        .map(|c| c.to_string())
                        .collect(),
                    Some(Value::Array(codes)) => {
                        if codes.is_empty() {
                            return Err(config_error(format!(
                                "{path}.retryableCodes must not be empty"
                            )));
                        }
                        let mut out: Vec<String> = Vec::with_capacity(codes.len());
                        for code in codes {
                            match code.as_str() {
                                Some(c) if !c.is_empty() => out.push(c.to_string()),
                                _ => {
                                    return Err(config_error(format!(
                                        "{path}.retryableCodes must contain only non-empty strings"
                                    )));
                                }
                            }
                        }
                        let mut sorted = out.clone();
                        sorted.sort();
                        sorted.dedup();
                        if sorted.len() != out.len() {
                            return Err(config_error(format!(
                                "{path}.retryableCodes must not contain duplicates"
                            )));
                        }
                        out
                    }
                    Some(_) => {
                        return Err(config_error(format!(
                            "{path}.retryableCodes must contain only non-empty strings"
                        )));
                    }
                };
                Ok(RetryPolicy::Normal {
                    max_retries,
                    retryable_codes,
                    backoff: resolve_backoff(object.get("backoff"), &backoff_path)?,
                })
            }
            Some("always") => {
                // The newer source accepts and ignores the normal-only keys (Q-3).
                check_keys(
                    object,
                    &["mode", "maxRetries", "retryableCodes", "backoff"],
                    path,
                )?;
                Ok(RetryPolicy::Always {
                    backoff: resolve_backoff(object.get("backoff"), &backoff_path)?,
                })
            }
            _ => Err(config_error(format!(
                "{path}.mode must be \"normal\" or \"always\""
            ))),
        }
    }

    /// `"normal"` or `"always"`.
    pub fn mode(&self) -> &'static str {
        match self {
            RetryPolicy::Normal { .. } => "normal",
            RetryPolicy::Always { .. } => "always",
        }
    }

    /// The backoff parameters.
    pub fn backoff(&self) -> &Backoff {
        match self {
            RetryPolicy::Normal { backoff, .. } | RetryPolicy::Always { backoff } => backoff,
        }
    }

    /// `maxRetries` in normal mode, `None` in always mode.
    pub fn max_retries(&self) -> Option<u64> {
        match self {
            RetryPolicy::Normal { max_retries, .. } => Some(*max_retries),
            RetryPolicy::Always { .. } => None,
        }
    }

    /// The compact JSON `policyKey` (R-11), numbers formatted as JavaScript
    /// formats them, codes sorted ascending.
    pub(crate) fn policy_key(&self) -> String {
        let b = self.backoff();
        let mut out = String::from("[\"");
        out.push_str(self.mode());
        out.push('"');
        if let RetryPolicy::Normal {
            max_retries,
            retryable_codes,
            ..
        } = self
        {
            out.push(',');
            out.push_str(&max_retries.to_string());
            out.push_str(",[");
            let mut codes: Vec<&String> = retryable_codes.iter().collect();
            // JavaScript's default sort compares UTF-16 code units.
            super::sort_stable_by(&mut codes, |a, b| a.encode_utf16().cmp(b.encode_utf16()));
            for (i, code) in codes.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*code).clone()).to_string());
            }
            out.push(']');
        }
        for n in [b.initial_delay_ms, b.max_delay_ms, b.jitter_ratio] {
            out.push(',');
            write_js_number(&mut out, n);
        }
        out.push(']');
        out
    }

    /// `localDelay(retry)` for a jitter sample `r` in `[0, 1]` (R-13).
    pub(crate) fn local_delay(&self, retry: u64, r: f64) -> f64 {
        let b = self.backoff();
        let r = if r.is_finite() {
            r.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let exponent = retry.saturating_sub(1).min(1024);
        let mut base = b.initial_delay_ms;
        for _ in 0..exponent {
            if base >= b.max_delay_ms {
                break;
            }
            base *= 2.0;
        }
        let base = base.min(b.max_delay_ms);
        let jitter = 1.0 - b.jitter_ratio + 2.0 * b.jitter_ratio * r;
        (base * jitter).min(b.max_delay_ms)
    }

    /// Whether normal mode retries this code (R-8). Always mode retries all.
    pub fn covers(&self, code: &str) -> bool {
        match self {
            RetryPolicy::Normal {
                retryable_codes, ..
            } => retryable_codes.iter().any(|c| c == code),
            RetryPolicy::Always { .. } => true,
        }
    }

    /// The executor decision for `failure`, given the `retry` number of the
    /// previous matching `llm/retry` record (0 when none) and a jitter sample
    /// `r` (R-8, R-10, R-12, R-13). In always mode the caller has already
    /// delegated first (R-9); this only computes the policy's own retry.
    pub(crate) fn schedule(&self, failure: &LlmFailure, previous: u64, r: f64) -> RetrySchedule {
        if !self.covers(&failure.code) {
            return RetrySchedule::Delegate;
        }
        if let Some(max) = self.max_retries()
            && previous >= max
        {
            return RetrySchedule::Delegate;
        }
        let retry = previous.saturating_add(1);
        let delay_ms = match failure.provider_retry_after_ms {
            Some(p) if p.is_finite() && p > 0.0 => {
                if p > self.backoff().max_delay_ms {
                    match self {
                        RetryPolicy::Normal { .. } => return RetrySchedule::Delegate,
                        RetryPolicy::Always { .. } => self.local_delay(retry, r),
                    }
                } else {
                    p
                }
            }
            _ => self.local_delay(retry, r),
        };
        RetrySchedule::Retry { retry, delay_ms }
    }
}

impl Serialize for RetryPolicy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Js(f64);
        impl Serialize for Js {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serialize_js_f64(&self.0, s)
            }
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("mode", self.mode())?;
        if let RetryPolicy::Normal {
            max_retries,
            retryable_codes,
            ..
        } = self
        {
            map.serialize_entry("maxRetries", max_retries)?;
            map.serialize_entry("retryableCodes", retryable_codes)?;
        }
        let b = self.backoff();
        map.serialize_entry("initialDelayMs", &Js(b.initial_delay_ms))?;
        map.serialize_entry("maxDelayMs", &Js(b.max_delay_ms))?;
        map.serialize_entry("jitterRatio", &Js(b.jitter_ratio))?;
        map.end()
    }
}

#[cfg(test)]
/// The previous retry of a chain found in the log (R-10).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub(crate) struct PreviousRetry {
    /// Its `retry` number.
    pub retry: u64,
    /// Its `retryId`, when it carried one.
    pub retry_id: Option<RetryId>,
}

#[cfg(test)]
/// Finds the last `llm/retry` record whose `turn`, `step`, `provider` and
/// `policyKey` equal the given ones (R-10). `events` yields `(type, data)`
/// pairs in log order.
pub(crate) fn previous_retry<'a>(
    events: impl DoubleEndedIterator<Item = (&'a str, &'a Value)>,
    turn: u64,
    step: u64,
    provider: &str,
    policy_key: &str,
) -> Option<PreviousRetry> {
    events.rev().find_map(|(ty, data)| {
        if ty != crate::session::types::LLM_RETRY {
            return None;
        }
        let matches = data.get("turn").and_then(Value::as_u64) == Some(turn)
            && data.get("step").and_then(Value::as_u64) == Some(step)
            && data.get("provider").and_then(Value::as_str) == Some(provider)
            && data.get("policyKey").and_then(Value::as_str) == Some(policy_key);
        matches.then(|| PreviousRetry {
            retry: data.get("retry").and_then(Value::as_u64).unwrap_or(0),
            retry_id: data
                .get("retryId")
                .and_then(Value::as_str)
                .map(RetryId::from),
        })
    })
}

/// The `llm/retry` payload (R-15), in the reference's key order.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub(crate) struct RetryRecord {
    /// Stable id of the chain.
    pub retry_id: RetryId,
    /// Turn of the failed step.
    pub turn: u64,
    /// The failed step.
    pub step: u64,
    /// Provider route of the failed request.
    pub provider: String,
    /// The policy that scheduled it.
    pub policy: RetryPolicy,
    /// The retry number.
    pub retry: u64,
    /// The wait in milliseconds.
    pub delay_ms: f64,
    /// The failure being retried.
    pub failure: LlmFailure,
}

impl RetryRecord {
    #[cfg(test)]
    /// The `llm/retry` data object.
    pub fn data(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("retryId".into(), Value::String(self.retry_id.0.clone()));
        m.insert("turn".into(), Value::from(self.turn));
        m.insert("step".into(), Value::from(self.step));
        m.insert("provider".into(), Value::String(self.provider.clone()));
        m.insert("mode".into(), Value::String(self.policy.mode().into()));
        m.insert("policyKey".into(), Value::String(self.policy.policy_key()));
        m.insert("retry".into(), Value::from(self.retry));
        if let Some(max) = self.policy.max_retries() {
            m.insert("maxRetries".into(), Value::from(max));
        }
        m.insert("delayMs".into(), js_number_value(self.delay_ms));
        m.insert(
            "failure".into(),
            serde_json::to_value(&self.failure).unwrap_or(Value::Null),
        );
        Value::Object(m)
    }

    #[cfg(test)]
    /// The `llm/retry-started` data object (R-15).
    pub(crate) fn started_data(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("retryId".into(), Value::String(self.retry_id.0.clone()));
        m.insert("turn".into(), Value::from(self.turn));
        m.insert("step".into(), Value::from(self.step));
        m.insert("retry".into(), Value::from(self.retry));
        Value::Object(m)
    }
}

#[cfg(test)]
/// A JSON number that prints as JavaScript prints `v` (integral values
/// without a fraction).
pub(crate) fn js_number_value(v: f64) -> Value {
    if v.is_finite() && v.abs() < 9.0e15 && (v as i64) as f64 == v {
        Value::from(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn r11_policy_keys() {
        assert_eq!(
            RetryPolicy::default().policy_key(),
            r#"["normal",5,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],500,10000,0.1]"#
        );
        let p = RetryPolicy::resolve(
            Some(&json!({"mode":"normal","maxRetries":2,"retryableCodes":["SERVER","RATE_LIMIT"],"backoff":{"jitterRatio":0}})),
            "p",
        )
        .unwrap();
        assert_eq!(
            p.policy_key(),
            r#"["normal",2,["RATE_LIMIT","SERVER"],500,10000,0]"#
        );
        let a = RetryPolicy::resolve(Some(&json!({"mode":"always"})), "p").unwrap();
        assert_eq!(a.policy_key(), r#"["always",500,10000,0.1]"#);
    }

    #[test]
    fn r13_delay_table() {
        let p = RetryPolicy::default();
        let rows: [(u64, f64, f64, f64); 6] = [
            (1, 500.0, 450.0, 550.0),
            (2, 1000.0, 900.0, 1100.0),
            (3, 2000.0, 1800.0, 2200.0),
            (4, 4000.0, 3600.0, 4400.0),
            (5, 8000.0, 7200.0, 8800.0),
            (6, 10000.0, 9000.0, 10000.0),
        ];
        for (retry, half, zero, one) in rows {
            assert_eq!(p.local_delay(retry, 0.5), half, "retry {retry} r=0.5");
            assert!(
                (p.local_delay(retry, 0.0) - zero).abs() < 1e-9,
                "retry {retry} r=0"
            );
            assert!(
                (p.local_delay(retry, 1.0) - one).abs() < 1e-9,
                "retry {retry} r=1"
            );
        }
        assert_eq!(p.local_delay(5000, 0.5), 10000.0);
    }

    #[test]
    fn r18_worked_sequence() {
        let p = RetryPolicy::default();
        let mut f = LlmFailure::new("SERVER", "busy");
        assert_eq!(
            p.schedule(&f, 0, 0.5),
            RetrySchedule::Retry {
                retry: 1,
                delay_ms: 500.0
            }
        );
        assert_eq!(
            p.schedule(&f, 1, 0.5),
            RetrySchedule::Retry {
                retry: 2,
                delay_ms: 1000.0
            }
        );
        f.code = "RATE_LIMIT".into();
        f.provider_retry_after_ms = Some(2000.0);
        assert_eq!(
            p.schedule(&f, 2, 0.5),
            RetrySchedule::Retry {
                retry: 3,
                delay_ms: 2000.0
            }
        );
        f.provider_retry_after_ms = Some(15000.0);
        assert_eq!(p.schedule(&f, 3, 0.5), RetrySchedule::Delegate);
        // Always mode falls back to the local delay instead (R-12).
        let a = RetryPolicy::resolve(Some(&json!({"mode":"always"})), "p").unwrap();
        assert_eq!(
            a.schedule(&f, 3, 0.5),
            RetrySchedule::Retry {
                retry: 4,
                delay_ms: 4000.0
            }
        );
    }

    #[test]
    fn r16_zero_retries_and_budget() {
        let p = RetryPolicy::resolve(Some(&json!({"mode":"normal","maxRetries":0})), "p").unwrap();
        assert_eq!(
            p.schedule(&LlmFailure::new("SERVER", "x"), 0, 0.5),
            RetrySchedule::Delegate
        );
        assert_eq!(
            RetryPolicy::default().schedule(&LlmFailure::new("AUTH", "x"), 0, 0.5),
            RetrySchedule::Delegate
        );
    }

    #[test]
    fn r2_validation_messages() {
        let cases = [
            (
                json!({"mode":"sometimes"}),
                "p.mode must be \"normal\" or \"always\"",
            ),
            (
                json!({"mode":"normal","extra":1}),
                "p: unknown key \"extra\"",
            ),
            (
                json!({"mode":"normal","maxRetries":-1}),
                "p.maxRetries must be a non-negative safe integer",
            ),
            (
                json!({"mode":"normal","maxRetries":1.5}),
                "p.maxRetries must be a non-negative safe integer",
            ),
            (
                json!({"mode":"normal","retryableCodes":[]}),
                "p.retryableCodes must not be empty",
            ),
            (
                json!({"mode":"normal","retryableCodes":["A",""]}),
                "p.retryableCodes must contain only non-empty strings",
            ),
            (
                json!({"mode":"normal","retryableCodes":["A","A"]}),
                "p.retryableCodes must not contain duplicates",
            ),
            (
                json!({"mode":"always","backoff":{"x":1}}),
                "p.backoff: unknown key \"x\"",
            ),
            (
                json!({"mode":"always","backoff":{"maxDelayMs":0}}),
                "p.backoff.maxDelayMs must be a positive finite number no greater than 2147483647",
            ),
            (
                json!({"mode":"always","backoff":{"initialDelayMs":600,"maxDelayMs":500}}),
                "p.backoff.initialDelayMs must be less than or equal to maxDelayMs",
            ),
            (
                json!({"mode":"always","backoff":{"jitterRatio":2}}),
                "p.backoff.jitterRatio must be between 0 and 1",
            ),
        ];
        for (config, message) in cases {
            assert_eq!(
                RetryPolicy::resolve(Some(&config), "p")
                    .unwrap_err()
                    .message,
                message,
                "{config}"
            );
        }
        // Always mode accepts and ignores the normal-only keys (Q-3).
        assert!(RetryPolicy::resolve(Some(&json!({"mode":"always","maxRetries":3})), "p").is_ok());
    }

    #[test]
    fn r4_serialization() {
        assert_eq!(
            serde_json::to_string(&RetryPolicy::default()).unwrap(),
            r#"{"mode":"normal","maxRetries":5,"retryableCodes":["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],"initialDelayMs":500,"maxDelayMs":10000,"jitterRatio":0.1}"#
        );
    }

    #[test]
    fn r15_record_shape() {
        let record = RetryRecord {
            retry_id: RetryId::from("r1"),
            turn: 1,
            step: 1,
            provider: "deepseek-official".into(),
            policy: RetryPolicy::default(),
            retry: 1,
            delay_ms: 500.0,
            failure: LlmFailure::new("RATE_LIMIT", "busy"),
        };
        assert_eq!(
            record.data().to_string(),
            r#"{"retryId":"r1","turn":1,"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"[\"normal\",5,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],500,10000,0.1]","retry":1,"maxRetries":5,"delayMs":500,"failure":{"message":"busy","code":"RATE_LIMIT"}}"#
        );
        assert_eq!(
            record.started_data().to_string(),
            r#"{"retryId":"r1","turn":1,"step":1,"retry":1}"#
        );
        let events = [("llm/retry", record.data())];
        let found = previous_retry(
            events.iter().map(|(t, d)| (*t, d)),
            1,
            1,
            "deepseek-official",
            &RetryPolicy::default().policy_key(),
        );
        assert_eq!(
            found,
            Some(PreviousRetry {
                retry: 1,
                retry_id: Some(RetryId::from("r1"))
            })
        );
        assert_eq!(
            previous_retry(
                events.iter().map(|(t, d)| (*t, d)),
                1,
                2,
                "deepseek-official",
                "x"
            ),
            None
        );
    }
}
