//! Errors of the Anthropic API: `{"type":"error","error":{"type","message"}}`
//! with an HTTP status, or as the data of an `error` SSE event.

use alloc::format;
use alloc::string::String;
use dsh_core::{LlmError, LlmFailure};
use dsh_deepseek::codes;
use serde_json::Value;

/// The dsh code for an Anthropic error `kind` (`error.type`) and HTTP
/// `status` (0 for an in-band error): overloaded and server errors are
/// `SERVER` (retryable), rate limits `RATE_LIMIT`, a prompt over the window
/// `CONTEXT_WINDOW_EXCEEDED`.
pub fn error_code(status: u16, kind: &str, message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    match (kind, status) {
        ("authentication_error" | "permission_error", _) | (_, 401 | 403) => codes::AUTH,
        ("billing_error", _) | (_, 402) => codes::QUOTA,
        ("rate_limit_error", _) | (_, 429) => codes::RATE_LIMIT,
        ("overloaded_error" | "api_error", _) | (_, 529) => codes::SERVER,
        _ if lower.starts_with("prompt is too long")
            || dsh_deepseek::is_context_overflow(message) =>
        {
            codes::CONTEXT_WINDOW_EXCEEDED
        }
        ("request_too_large", _) | (_, 413) => codes::INVALID_REQUEST,
        ("invalid_request_error" | "not_found_error", _) | (_, 400 | 404) => codes::INVALID_REQUEST,
        ("timeout_error", _) | (_, 504) => codes::TIMEOUT,
        (_, s) if s >= 500 => codes::SERVER,
        _ => codes::PROVIDER_ERROR,
    }
}

/// The typed error for an error `body` (an HTTP error body, or an `error`
/// event's data) seen with `status` (0: in-band).
pub fn classify_error_body(status: u16, body: &[u8]) -> LlmError {
    let value = serde_json::from_slice::<Value>(body).ok();
    let error = value.as_ref().and_then(|v| v.get("error"));
    let field = |key: &str| {
        error
            .and_then(|e| e.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let kind = field("type").unwrap_or("");
    let message: String = match field("message") {
        Some(m) => m.chars().take(2_000).collect(),
        None if status != 0 => format!("Anthropic API error (HTTP {status})"),
        None => {
            let excerpt: String = String::from_utf8_lossy(body).chars().take(200).collect();
            format!("Anthropic API error event: {excerpt}")
        }
    };
    let mut failure = LlmFailure::new(error_code(status, kind, &message), message);
    if (100..=599).contains(&status) {
        failure.status = Some(status);
    }
    let fallback = LlmError::coded(&failure.code, &failure.message);
    LlmError::new(failure).unwrap_or(fallback)
}

/// The typed error for a non-2xx response: [`classify_error_body`] plus
/// the `retry-after` header (seconds or an HTTP date, read as the DeepSeek
/// client reads it) and the `request-id` header.
pub fn classify_http_error(
    status: u16,
    body: &[u8],
    retry_after: Option<&str>,
    request_id: Option<&str>,
    now_unix_ms: Option<i64>,
) -> LlmError {
    let mut failure = classify_error_body(status, body).failure().clone();
    failure.provider_retry_after_ms =
        retry_after.and_then(|v| dsh_deepseek::parse_retry_after(v, now_unix_ms));
    failure.request_id = request_id.filter(|r| !r.is_empty()).map(String::from);
    let fallback = LlmError::coded(&failure.code, &failure.message);
    LlmError::new(failure).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(status: u16, body: &str) -> String {
        classify_error_body(status, body.as_bytes())
            .failure()
            .code
            .clone()
    }

    #[test]
    fn documented_error_types_map_to_codes() {
        let e = |t: &str, m: &str| {
            format!(r#"{{"type":"error","error":{{"type":"{t}","message":"{m}"}}}}"#)
        };
        assert_eq!(code(529, &e("overloaded_error", "Overloaded")), "SERVER");
        assert_eq!(code(0, &e("overloaded_error", "Overloaded")), "SERVER");
        assert_eq!(code(429, &e("rate_limit_error", "slow down")), "RATE_LIMIT");
        assert_eq!(
            code(401, &e("authentication_error", "invalid x-api-key")),
            "AUTH"
        );
        assert_eq!(code(403, &e("permission_error", "no")), "AUTH");
        assert_eq!(code(500, &e("api_error", "oops")), "SERVER");
        assert_eq!(code(413, &e("request_too_large", "big")), "INVALID_REQUEST");
        assert_eq!(
            code(404, &e("not_found_error", "model: x")),
            "INVALID_REQUEST"
        );
        assert_eq!(
            code(
                400,
                &e(
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum"
                )
            ),
            "CONTEXT_WINDOW_EXCEEDED"
        );
        assert_eq!(
            code(400, &e("invalid_request_error", "max_tokens: bad")),
            "INVALID_REQUEST"
        );
        assert_eq!(code(0, "not json"), "PROVIDER_ERROR");
        assert_eq!(code(502, "<html>"), "SERVER");
    }

    #[test]
    fn retry_after_and_request_id_are_kept() {
        let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
        let e = classify_http_error(429, body, Some("7"), Some("req_011"), None);
        let f = e.failure();
        assert_eq!(f.code, "RATE_LIMIT");
        assert_eq!(f.status, Some(429));
        assert_eq!(f.provider_retry_after_ms, Some(7000.0));
        assert_eq!(f.request_id.as_deref(), Some("req_011"));
        assert!(f.message.contains("per-minute rate limit"));
    }
}
