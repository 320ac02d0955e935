//! What a client is configured with: the user agent, credentials and the
//! redacted API key, attachments, the transport options and the session
//! header policy.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::codes;
use crate::config::PROVIDER_ROUTE;
use crate::sse::DEFAULT_MAX_EVENT_BYTES;
use crate::translate::Profile;
use dsh_core::LlmError;

use super::codec::Wire;

/// The default attribution header value (AC-12).
pub fn user_agent() -> String {
    format!(
        "deepseek-harness/{} (+https://github.com/deepseek-ai/deepseek-harness)",
        env!("CARGO_PKG_VERSION")
    )
}

/// A credentials service (D-5 step 1): given the `apiKeyEnv` reference,
/// returns the stored key, or `None` for a miss.
pub type Credentials = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The durable attachment service (D-10): the stored bytes of an image
/// block. With one, requests may carry images (for a model that takes
/// them); without one an image in a request is `UNSUPPORTED_CONTENT`.
pub type Attachments =
    Arc<dyn Fn(&dsh_core::ImageAttachment) -> Result<Vec<u8>, LlmError> + Send + Sync>;

pub(super) struct AttachmentFn<'a>(pub(super) &'a Attachments);

impl crate::request::AttachmentSource for AttachmentFn<'_> {
    fn read(&mut self, attachment: &dsh_core::ImageAttachment) -> Result<Vec<u8>, LlmError> {
        (self.0)(attachment)
    }
}

/// An API key. Its `Debug` output is redacted and it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub(super) String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl ApiKey {
    /// D-5 step 3: trims surrounding whitespace; a blank key or one with a
    /// character outside `0x21`–`0x7E` is `INVALID_CREDENTIAL`. `reference`
    /// names where the key came from; the message never quotes the key.
    pub fn normalize(raw: &str, reference: &str) -> Result<ApiKey, LlmError> {
        let key = raw.trim();
        if key.is_empty() || !key.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
            return Err(LlmError::coded(
                codes::INVALID_CREDENTIAL,
                &format!(
                    "llm-deepseek: the API key in {reference} for provider route \"{PROVIDER_ROUTE}\" is invalid: it is blank or contains a character outside printable ASCII"
                ),
            ));
        }
        Ok(ApiKey(String::from(key)))
    }

    pub(super) fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

pub(super) fn missing_credential(reference: &str) -> LlmError {
    LlmError::coded(
        codes::MISSING_CREDENTIAL,
        &format!(
            "llm-deepseek: no API key for provider route \"{PROVIDER_ROUTE}\"; store {reference} through the credentials service (the web Models page writes it), or export {reference} in the launching environment"
        ),
    )
}

/// Transport settings that are not part of the D-2 configuration.
#[derive(Clone)]
pub struct ClientOptions {
    /// Replaces the attribution `user-agent` (AC-12); an empty string keeps
    /// the default, since the header cannot be suppressed.
    pub user_agent: Option<String>,
    /// The anonymous user id sent as `x-deepseek-harness-user-id` (D-12).
    pub user_id: Option<String>,
    /// A credentials service; without one the key comes from the
    /// environment variable named by `apiKeyEnv` (D-5).
    pub credentials: Option<Credentials>,
    /// Bound on establishing the connection.
    pub connect_timeout: Duration,
    /// Use `HTTPS_PROXY`/`ALL_PROXY`/`NO_PROXY` from the environment.
    pub proxy_from_env: bool,
    /// How much of a non-2xx body is read for classification.
    pub max_error_body: usize,
    /// Read buffer size for the body.
    pub read_buffer: usize,
    /// Which wire shapes and error wording: [`Profile::Reference`] (the
    /// default) is the reference adapter exactly; [`Profile::Interop`] is
    /// tolerant of other OpenAI-compatible servers, names the server by its
    /// URL instead of "DeepSeek", gives the cause of transport errors and
    /// accepts more base URL forms (see [`DeepSeekClient::endpoints`](super::DeepSeekClient::endpoints)).
    pub profile: Profile,
    /// Bound on one SSE line, event or JSON body (`RESPONSE_TOO_LARGE`).
    pub max_event_bytes: usize,
    /// Where the `x-deepseek-harness-session-id` header goes.
    pub session_header: SessionHeader,
    /// Another API to speak instead of chat completions (`None`: chat
    /// completions).
    pub wire: Option<Arc<dyn Wire>>,
    /// The attachment service images are read from (`None`: requests with
    /// images are refused).
    pub attachments: Option<Attachments>,
}

/// Where the session-id header is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionHeader {
    /// On every request (the reference, D-10).
    #[default]
    Always,
    /// Only to DeepSeek hosts (`deepseek.com` and its subdomains) and to
    /// loopback hosts (local servers and the bundled mock, which routes by
    /// it): never to a third-party host.
    DeepSeekOnly,
    /// Never.
    Never,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            wire: None,
            attachments: None,
            user_agent: None,
            user_id: None,
            credentials: None,
            connect_timeout: Duration::from_secs(30),
            proxy_from_env: true,
            max_error_body: 64 * 1024,
            read_buffer: 16 * 1024,
            profile: Profile::Reference,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            session_header: SessionHeader::Always,
        }
    }
}

/// A fresh id prefix for tool calls without an id (interop): unique per
/// call within the process and across runs.
pub(super) fn call_id_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("call_{ms:x}{n:x}_")
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("user_agent", &self.user_agent)
            .field("user_id", &self.user_id)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "<service>"),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("proxy_from_env", &self.proxy_from_env)
            .field("max_error_body", &self.max_error_body)
            .field("read_buffer", &self.read_buffer)
            .field("profile", &self.profile)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("session_header", &self.session_header)
            .field("attachments", &self.attachments.is_some())
            .finish()
    }
}
