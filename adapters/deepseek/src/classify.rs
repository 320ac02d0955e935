//! HTTP error classification (5.9, 3.4, 3.5): status and body to a canonical
//! code, `Retry-After` to `providerRetryAfterMs`, the request id header.
//!
//! Everything here is pure: the current time, when a `Retry-After` date needs
//! it, is an argument.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use dsh_core::{LlmError, LlmFailure};
use serde_json::Value;

use crate::codes;
use crate::pattern::Pattern;

/// CL-1, verbatim from the spec (JavaScript semantics, see [`crate::pattern`]).
const CONTEXT_OVERFLOW: [&str; 5] = [
    r"(?:^|[^A-Za-z0-9])context[\s_-](?:length|window)[\s_-](?:exceed(?:ed|s)?|overflow(?:ed)?|limit[\s_-]exceeded)(?:$|[^A-Za-z0-9])",
    r"\b(?:maximum|max)(?:\s+(?:allowed|supported))?\s+context\s+(?:length|window)\b",
    r"\b(?:request|prompt|input|messages?)\s+(?:is\s+|are\s+)?too\s+(?:large|long)\s+for\s+(?:(?:this|the)\s+)?(?:model(?:'s)?\s+)?context(?:\s+window)?\b",
    r"\b(?:input|prompt|request)\s+(?:is\s+)?too\s+(?:long|large)\s+for\s+(?:this|the)\s+model\b",
    r"\b(?:input|prompt|request|messages?)\b.{0,40}\b(?:exceed(?:s|ed)?|overflows?|is\s+larger\s+than)\b.{0,40}\b(?:the\s+)?(?:model(?:'s)?\s+)?context(?:\s+(?:length|window))?\b",
];

/// CL-2, verbatim from the spec.
const QUOTA: [&str; 5] = [
    r"\binsufficient[\s_-]+(?:quota|balance|credits?)\b",
    r"\b(?:quota|usage[\s_-]+limit)[\s_-]+(?:exceeded|exhausted|reached)\b",
    r"\bexceed(?:ed|s)?[\s_-]+(?:(?:your|the)[\s_-]+)?(?:current[\s_-]+)?quota\b",
    r"\b(?:balance|credits?)[\s_-]+(?:exhausted|depleted)\b",
    r"\bout[\s_-]+of[\s_-]+(?:credits?|budget)\b",
];

fn any_match(patterns: &[&str], detail: &str) -> bool {
    if !cfg!(feature = "error-patterns") {
        return false;
    }
    patterns
        .iter()
        .filter_map(|p| Pattern::new(p).ok())
        .any(|p| p.is_match(detail))
}

/// CL-1: whether provider `detail` describes an exceeded context window
/// (always false without feature `error-patterns`, a default one).
pub fn is_context_overflow(detail: &str) -> bool {
    any_match(&CONTEXT_OVERFLOW, detail)
}

/// CL-2: whether provider `detail` describes an exhausted quota (not a
/// transient rate limit). Always false without feature `error-patterns`
/// (a default one).
pub fn is_quota_exhausted(detail: &str) -> bool {
    any_match(&QUOTA, detail)
}

/// The provider's error object (`{"error":{"message","type","code"}}`), as far
/// as it could be read. Fields that are absent, empty or not strings are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderError {
    /// `error.message`.
    pub message: Option<String>,
    /// `error.type`.
    pub kind: Option<String>,
    /// `error.code`.
    pub code: Option<String>,
}

impl ProviderError {
    /// Reads an error body (H-2 step 1). A body that is not JSON, or has no
    /// `error` object, gives an empty value: the status still identifies the
    /// failure.
    pub fn parse(body: &[u8]) -> ProviderError {
        let Ok(Value::Object(root)) = serde_json::from_slice::<Value>(body) else {
            return ProviderError::default();
        };
        let Some(Value::Object(error)) = root.get("error") else {
            return ProviderError::default();
        };
        let text = |key: &str| match error.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        ProviderError {
            message: text("message"),
            kind: text("type"),
            code: text("code"),
        }
    }

    /// The classifier input (3.5): `code`, `type` and `message` joined with
    /// single spaces, skipping absent ones.
    pub fn detail(&self) -> String {
        let parts: Vec<&str> = [&self.code, &self.kind, &self.message]
            .into_iter()
            .filter_map(|s| s.as_deref())
            .collect();
        parts.join(" ")
    }
}

/// The classifier input ([`ProviderError::detail`]) for the CL-1 / CL-2
/// patterns; without feature `error-patterns` they match nothing, so it is
/// not built.
fn pattern_input(provider: &ProviderError) -> String {
    if cfg!(feature = "error-patterns") {
        provider.detail()
    } else {
        String::new()
    }
}

/// H-3: the failure code for a non-2xx `status` with classifier input `detail`.
pub fn http_error_code(status: u16, detail: &str) -> String {
    match status {
        401 | 403 => codes::AUTH.into(),
        413 => codes::INVALID_REQUEST.into(),
        _ if is_quota_exhausted(detail) => codes::QUOTA.into(),
        429 => codes::RATE_LIMIT.into(),
        400 if is_context_overflow(detail) => codes::CONTEXT_WINDOW_EXCEEDED.into(),
        400 => codes::INVALID_REQUEST.into(),
        s if s >= 500 => codes::SERVER.into(),
        s => format!("HTTP_{s}"),
    }
}

/// The parts of a non-2xx response the classifier reads (H-2..H-5).
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpErrorResponse<'a> {
    /// The HTTP status.
    pub status: u16,
    /// The response body (possibly truncated by the transport).
    pub body: &'a [u8],
    /// The `retry-after` header.
    pub retry_after: Option<&'a str>,
    /// The `x-request-id` header.
    pub x_request_id: Option<&'a str>,
    /// The `x-deepseek-request-id` header.
    pub x_deepseek_request_id: Option<&'a str>,
    /// The current time in Unix milliseconds, for a `Retry-After` date; without
    /// it a date gives no value.
    pub now_unix_ms: Option<i64>,
}

/// H-2: the typed error for a non-2xx response.
///
/// The status is kept when it is a valid LF-1 status (100–599).
pub fn classify_http_error(response: &HttpErrorResponse<'_>) -> LlmError {
    let provider = ProviderError::parse(response.body);
    let code = http_error_code(response.status, &pattern_input(&provider));
    let message = match provider.message {
        Some(m) => m,
        None => error_text!(
            "DeepSeek API error",
            "DeepSeek API error (HTTP {})",
            response.status
        ),
    };
    let mut failure = LlmFailure::new(code, message);
    if (100..=599).contains(&response.status) {
        failure.status = Some(response.status);
    }
    failure.provider_retry_after_ms = response
        .retry_after
        .and_then(|v| parse_retry_after(v, response.now_unix_ms));
    failure.request_id =
        request_id(response.x_request_id, response.x_deepseek_request_id).map(str::to_string);
    let fallback = LlmError::coded(&failure.code, &failure.message);
    LlmError::new(failure).unwrap_or(fallback)
}

/// Interop profile: the typed error for an error the server reported with
/// a success status: an in-band `{"error":…}` payload, the data of an
/// `event: error` frame, or a JSON error body. `text` is that payload.
///
/// The error object is `error` when present (an object, or a string taken
/// as the message), else the payload itself. Its code: CL-1 gives
/// `CONTEXT_WINDOW_EXCEEDED`, CL-2 `QUOTA`; a numeric `code` or `status`
/// between 400 and 599 is classified like that HTTP status (H-3);
/// otherwise `PROVIDER_ERROR`. The message is the server's `message`, or
/// the start of the payload.
pub fn classify_inband_error(text: &str) -> LlmError {
    // `from_slice`: one serde_json reader on the device path.
    let value = serde_json::from_slice::<Value>(text.as_bytes()).ok();
    let object = match &value {
        Some(Value::Object(root)) => match root.get("error") {
            Some(Value::Object(e)) => Some(e),
            Some(_) => None,
            None => Some(root),
        },
        _ => None,
    };
    let field = |key: &str| match object.and_then(|o| o.get(key)) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let status = ["code", "status"]
        .iter()
        .find_map(|k| object.and_then(|o| o.get(*k)).and_then(Value::as_u64))
        .filter(|s| (400..=599).contains(s))
        .map(|s| s as u16);
    let provider = ProviderError {
        message: match &value {
            Some(Value::Object(root)) => match root.get("error") {
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                _ => field("message"),
            },
            _ => None,
        },
        kind: field("type"),
        code: field("code"),
    };
    let detail = pattern_input(&provider);
    let code = if is_context_overflow(&detail) {
        String::from(codes::CONTEXT_WINDOW_EXCEEDED)
    } else if is_quota_exhausted(&detail) {
        String::from(codes::QUOTA)
    } else if let Some(status) = status {
        http_error_code(status, &detail)
    } else {
        String::from(codes::PROVIDER_ERROR)
    };
    let message = match provider.message {
        Some(m) => m,
        None => error_text!(
            "the server reported an error",
            "the server reported an error: {}",
            text.chars().take(200).collect::<String>()
        ),
    };
    let mut failure = LlmFailure::new(code, message);
    failure.status = status;
    let fallback = LlmError::coded(&failure.code, &failure.message);
    LlmError::new(failure).unwrap_or(fallback)
}

/// H-5 with the Q-12 recommendation: `x-request-id`, falling back to
/// `x-deepseek-request-id` when the first is absent **or empty** (the
/// reference only falls back when it is absent). An empty chosen value is no id.
pub fn request_id<'a>(
    x_request_id: Option<&'a str>,
    x_deepseek: Option<&'a str>,
) -> Option<&'a str> {
    match x_request_id {
        Some(id) if !id.is_empty() => Some(id),
        _ => x_deepseek.filter(|id| !id.is_empty()),
    }
}

/// H-4: a `retry-after` value as a delay in milliseconds.
///
/// Digits only: seconds. Otherwise an HTTP-date (IMF-fixdate, RFC 850,
/// asctime) or an RFC 3339 timestamp (Q-17), measured from `now_unix_ms`.
/// Anything else, a zero, a past date or an overflow gives `None`. Dates
/// are read with feature `http-date` (default); without it only seconds
/// are.
pub fn parse_retry_after(value: &str, now_unix_ms: Option<i64>) -> Option<f64> {
    let delay = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        seconds(value)? * 1000.0
    } else if !cfg!(feature = "http-date") {
        return None;
    } else {
        let at = parse_http_date(value)?;
        (at - now_unix_ms?) as f64
    };
    (delay.is_finite() && delay > 0.0).then_some(delay)
}

/// A non-empty run of ASCII digits as the nearest `f64` (what
/// `str::parse::<f64>` gives), `None` past `f64::MAX`. Read as a JSON number
/// by serde_json, whose float reader a device build links anyway (core's
/// float parser is not linked for this one header).
fn seconds(digits: &str) -> Option<f64> {
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0.0);
    }
    serde_json::from_slice::<f64>(digits.as_bytes()).ok()
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const LONG_DAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

fn month(s: &str) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(s))
        .map(|i| i as u32 + 1)
}

fn num(s: &str, digits: core::ops::RangeInclusive<usize>) -> Option<u32> {
    (digits.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn clock(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.split(':');
    let h = num(it.next()?, 2..=2)?;
    let m = num(it.next()?, 2..=2)?;
    let sec = num(it.next()?, 2..=2)?;
    (it.next().is_none() && h < 24 && m < 60 && sec < 61).then_some((h, m, sec))
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn to_unix_ms(
    y: i64,
    mo: u32,
    d: u32,
    (h, mi, s): (u32, u32, u32),
    offset_min: i64,
) -> Option<i64> {
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s)
        - offset_min * 60;
    secs.checked_mul(1000)
}

/// Parses an HTTP-date or RFC 3339 timestamp into Unix milliseconds (Q-17).
pub fn parse_http_date(value: &str) -> Option<i64> {
    let v = value.trim();
    let parts: Vec<&str> = v.split_ascii_whitespace().collect();
    match parts.as_slice() {
        // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`
        [wd, d, mo, y, t, "GMT"] if wd.strip_suffix(',').is_some_and(is_day) => {
            let y = num(y, 4..=4)?;
            to_unix_ms(i64::from(y), month(mo)?, num(d, 1..=2)?, clock(t)?, 0)
        }
        // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`
        [wd, date, t, "GMT"] if wd.strip_suffix(',').is_some_and(is_long_day) => {
            let mut it = date.split('-');
            let d = num(it.next()?, 2..=2)?;
            let mo = month(it.next()?)?;
            let yy = it.next()?;
            if it.next().is_some() {
                return None;
            }
            let y = match yy.len() {
                2 => {
                    let y = i64::from(num(yy, 2..=2)?);
                    if y < 50 { 2000 + y } else { 1900 + y }
                }
                _ => i64::from(num(yy, 4..=4)?),
            };
            to_unix_ms(y, mo, d, clock(t)?, 0)
        }
        // asctime: `Sun Nov  6 08:49:37 1994`
        [wd, mo, d, t, y] if is_day(wd) => {
            let y = num(y, 4..=4)?;
            to_unix_ms(i64::from(y), month(mo)?, num(d, 1..=2)?, clock(t)?, 0)
        }
        [one] => parse_rfc3339(one),
        _ => None,
    }
}

fn is_day(s: &str) -> bool {
    DAYS.iter().any(|d| d.eq_ignore_ascii_case(s))
}

fn is_long_day(s: &str) -> bool {
    LONG_DAYS.iter().any(|d| d.eq_ignore_ascii_case(s))
}

/// `2026-10-21T07:28:00Z`, `2026-10-21T07:28:00.5+02:00`.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let (date, rest) = s.split_at_checked(10)?;
    let mut it = date.split('-');
    let y = num(it.next()?, 4..=4)?;
    let mo = num(it.next()?, 2..=2)?;
    let d = num(it.next()?, 2..=2)?;
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (time, zone) = rest.split_at_checked(8)?;
    let hms = clock(time)?;
    let (frac_ms, zone) = match zone.strip_prefix('.') {
        Some(z) => {
            let digits = z.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let (f, z) = z.split_at(digits);
            let mut ms: i64 = 0;
            for (i, b) in f.bytes().take(3).enumerate() {
                ms += i64::from(b - b'0') * [100, 10, 1][i];
            }
            (ms, z)
        }
        None => (0, zone),
    };
    let offset = match zone {
        "Z" | "z" => 0,
        z => {
            let sign = match z.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = z.get(1..)?.split_once(':')?;
            let (h, m) = (num(h, 2..=2)?, num(m, 2..=2)?);
            if h > 23 || m > 59 {
                return None;
            }
            sign * (i64::from(h) * 60 + i64::from(m))
        }
    };
    Some(to_unix_ms(i64::from(y), mo, d, hms, offset)? + frac_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cl1_vectors() {
        let cases = [
            ("context_length_exceeded", true),
            ("Context window exceeded", true),
            ("context-window-overflow", true),
            ("This model's maximum context length is 65536 tokens", true),
            ("request too large for model context", true),
            ("Input is too long for this model", true),
            ("Messages are too long for the context window", true),
            (
                "the prompt (70000 tokens) exceeds the model context window",
                true,
            ),
            (
                "invalid input: temperature exceeds maximum allowed value",
                false,
            ),
            ("context length", false),
            ("mycontext_length_exceeded", false),
        ];
        for (detail, expected) in cases {
            assert_eq!(is_context_overflow(detail), expected, "CL-1 {detail:?}");
        }
    }

    #[test]
    fn cl2_vectors() {
        let cases = [
            ("Insufficient Balance", true),
            ("insufficient_quota", true),
            ("quota_exceeded", true),
            (
                "You exceeded your current quota, please check your plan",
                true,
            ),
            ("account credits exhausted", true),
            ("out of credits", true),
            ("usage limit reached", true),
            ("request rate limit exceeded", false),
            ("Rate limit reached for requests", false),
        ];
        for (detail, expected) in cases {
            assert_eq!(is_quota_exhausted(detail), expected, "CL-2 {detail:?}");
        }
    }

    #[test]
    fn classifier_edges() {
        // `\b` is an ASCII word boundary: `_` is a word character.
        assert!(!is_quota_exhausted("xout of credits"));
        assert!(is_quota_exhausted("(out of credits)"));
        // CL-1 pattern 5 allows at most 40 units between the words.
        let gap = "x".repeat(41);
        assert!(!is_context_overflow(&format!(
            "prompt {gap} exceeds the context"
        )));
        assert!(is_context_overflow(
            "prompt (12 tokens) exceeds the context"
        ));
    }

    fn classify(status: u16, body: &str) -> LlmFailure {
        classify_http_error(&HttpErrorResponse {
            status,
            body: body.as_bytes(),
            ..HttpErrorResponse::default()
        })
        .into_failure()
    }

    #[test]
    fn h3_examples() {
        let cases: [(u16, &str, &str, Option<&str>); 10] = [
            (401, r#"{"error":{"message":"bad key"}}"#, "AUTH", None),
            (
                402,
                r#"{"error":{"message":"Insufficient Balance"}}"#,
                "QUOTA",
                None,
            ),
            (
                413,
                r#"{"error":{"code":"context_length_exceeded"}}"#,
                "INVALID_REQUEST",
                None,
            ),
            (
                429,
                r#"{"error":{"code":"insufficient_quota","message":"account credits exhausted"}}"#,
                "QUOTA",
                None,
            ),
            (
                429,
                r#"{"error":{"message":"request rate limit exceeded"}}"#,
                "RATE_LIMIT",
                None,
            ),
            (
                400,
                r#"{"error":{"code":"context_length_exceeded","type":"invalid_request_error","message":"too long"}}"#,
                "CONTEXT_WINDOW_EXCEEDED",
                None,
            ),
            (
                400,
                r#"{"error":{"message":"invalid input: temperature exceeds maximum allowed value"}}"#,
                "INVALID_REQUEST",
                None,
            ),
            (
                502,
                "Bad Gateway",
                "SERVER",
                Some("DeepSeek API error (HTTP 502)"),
            ),
            (
                500,
                r#"{"error":{"type":"x"}}"#,
                "SERVER",
                Some("DeepSeek API error (HTTP 500)"),
            ),
            (418, "", "HTTP_418", Some("DeepSeek API error (HTTP 418)")),
        ];
        for (status, body, code, message) in cases {
            let f = classify(status, body);
            assert_eq!(f.code, code, "{status} {body}");
            assert_eq!(f.status, Some(status));
            if let Some(m) = message {
                assert_eq!(f.message, m);
            }
        }
        assert_eq!(
            classify(402, r#"{"error":{"message":"pay"}}"#).code,
            "HTTP_402"
        );
        assert_eq!(classify(404, "{}").code, "HTTP_404");
        assert_eq!(classify(403, "{}").code, "AUTH");
        assert_eq!(
            classify(503, r#"{"error":{"message":"out of credits"}}"#).code,
            "QUOTA"
        );
    }

    #[test]
    fn h6_worked_example() {
        let e = classify_http_error(&HttpErrorResponse {
            status: 429,
            body: br#"{"error":{"message":"slow down"}}"#,
            retry_after: Some("2"),
            x_request_id: Some("req-429"),
            ..HttpErrorResponse::default()
        });
        let chunk = dsh_core::StreamChunk::finish(dsh_core::FinishReason::Error {
            failure: e.into_failure(),
        });
        assert_eq!(
            serde_json::to_string(&chunk).unwrap(),
            r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"slow down","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":2000,"requestId":"req-429"}}}"#
        );
    }

    proptest::proptest! {
        /// H-4 digits: the same value as `str::parse::<f64>`, leading zeros,
        /// 2^53 + 1 and beyond-u64 runs included.
        #[test]
        fn retry_after_digits_parse_like_f64(digits in "[0-9]{1,40}") {
            let expected = digits.parse::<f64>().unwrap();
            proptest::prop_assert_eq!(super::seconds(&digits), Some(expected));
        }
    }

    #[test]
    fn retry_after_digit_edges() {
        for digits in [
            "0",
            "000",
            "007",
            "9007199254740993",
            "18446744073709551615",
            "18446744073709551616",
            "123456789012345678901234567890",
        ] {
            assert_eq!(
                super::seconds(digits),
                digits.parse::<f64>().ok(),
                "{digits}"
            );
        }
        assert_eq!(super::seconds(&"9".repeat(400)), None);
        assert_eq!(parse_retry_after("0002", None), Some(2000.0));
    }

    #[test]
    fn retry_after_h4() {
        assert_eq!(parse_retry_after("2", None), Some(2000.0));
        assert_eq!(parse_retry_after("0", None), None);
        assert_eq!(parse_retry_after(&"9".repeat(400), None), None);
        assert_eq!(parse_retry_after("-1", None), None);
        assert_eq!(parse_retry_after(" 2", None), None);
        assert_eq!(parse_retry_after("soon", Some(0)), None);
        let at = parse_http_date("Wed, 21 Oct 2026 07:28:00 GMT").unwrap();
        assert_eq!(at, 1_792_567_680_000);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", Some(at - 1500)),
            Some(1500.0)
        );
        // A past date, or no clock, gives no value.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", Some(at)),
            None
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", None),
            None
        );
        // The three HTTP-date forms and RFC 3339 agree.
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777_000)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777_000)
        );
        assert_eq!(
            parse_http_date("Sun Nov  6 08:49:37 1994"),
            Some(784_111_777_000)
        );
        assert_eq!(
            parse_http_date("1994-11-06T08:49:37Z"),
            Some(784_111_777_000)
        );
        assert_eq!(
            parse_http_date("1994-11-06T09:49:37.250+01:00"),
            Some(784_111_777_250)
        );
        assert_eq!(parse_http_date("Sun, 31 Feb 1994 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
    }

    #[test]
    fn request_id_h5_q12() {
        assert_eq!(request_id(Some("a"), Some("b")), Some("a"));
        assert_eq!(request_id(None, Some("b")), Some("b"));
        assert_eq!(request_id(Some(""), Some("b")), Some("b"), "Q-12 deviation");
        assert_eq!(request_id(Some(""), None), None);
        assert_eq!(request_id(None, Some("")), None);
    }

    #[test]
    fn inband_errors_are_classified_with_the_servers_message() {
        let f = |t: &str| classify_inband_error(t).into_failure();
        let e = f(
            r#"{"error":{"message":"context length exceeded","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("CONTEXT_WINDOW_EXCEEDED", "context length exceeded")
        );
        let e = f(r#"{"error":{"message":"Rate limited","code":429}}"#);
        assert_eq!((e.code.as_str(), e.status), ("RATE_LIMIT", Some(429)));
        let e = f(r#"{"error":{"message":"upstream died","code":502}}"#);
        assert_eq!(e.code, "SERVER");
        let e = f(r#"{"error":{"message":"the engine fell over","type":"internal"}}"#);
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("PROVIDER_ERROR", "the engine fell over")
        );
        let e = f(r#"{"error":"plain text error"}"#);
        assert_eq!(e.message, "plain text error");
        // An `event: error` frame whose data is the error object itself.
        let e = f(r#"{"message":"overloaded","status":503}"#);
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("SERVER", "overloaded")
        );
        let e = f("not json at all");
        assert_eq!(e.message, "the server reported an error: not json at all");
    }
}
