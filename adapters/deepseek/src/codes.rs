//! The failure codes this adapter produces (3.4).

/// HTTP 401 or 403.
pub const AUTH: &str = "AUTH";
/// Provider detail matches the quota classifier CL-2.
pub const QUOTA: &str = "QUOTA";
/// HTTP 429 that is not quota.
pub const RATE_LIMIT: &str = "RATE_LIMIT";
/// HTTP 400 whose detail matches CL-1.
pub const CONTEXT_WINDOW_EXCEEDED: &str = "CONTEXT_WINDOW_EXCEEDED";
/// HTTP 400 that is not context overflow; HTTP 413 always.
pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
/// HTTP ≥ 500 that is not quota.
pub const SERVER: &str = "SERVER";
/// Connection or body-read failure.
pub const TRANSPORT: &str = "TRANSPORT";
/// The idle watchdog expired.
pub const TIMEOUT: &str = "TIMEOUT";
/// The caller's signal was aborted.
pub const ABORTED: &str = "ABORTED";
/// A completed response with no content, or a 2xx with no body.
pub const EMPTY_RESPONSE: &str = "EMPTY_RESPONSE";
/// The SSE body ended cleanly before `[DONE]`.
pub const STREAM_CLOSED: &str = "STREAM_CLOSED";
/// An SSE `data` payload is not valid JSON (or not an object, Q-9).
pub const MALFORMED_RESPONSE: &str = "MALFORMED_RESPONSE";
/// No API key available.
pub const MISSING_CREDENTIAL: &str = "MISSING_CREDENTIAL";
/// The API key is blank or has a character outside `0x21`–`0x7E`.
pub const INVALID_CREDENTIAL: &str = "INVALID_CREDENTIAL";
/// Image content the request cannot carry.
pub const UNSUPPORTED_CONTENT: &str = "UNSUPPORTED_CONTENT";
/// A reasoning effort the deployment or model does not support.
pub const UNSUPPORTED_REASONING_EFFORT: &str = "UNSUPPORTED_REASONING_EFFORT";
/// A server-reported error: an in-band `{"error":…}` payload, an
/// `event: error` frame or a JSON error body with status 200 that no other
/// code describes (interop profile).
pub const PROVIDER_ERROR: &str = "PROVIDER_ERROR";
/// An SSE line, event or JSON body larger than the configured limit.
pub const RESPONSE_TOO_LARGE: &str = "RESPONSE_TOO_LARGE";
