//! The blocking HTTP transport on ureq 3 (feature `std`): one POST per call,
//! streaming body reads, the idle watchdog and cancellation (5.3, 5.4, 5.9,
//! 5.15).
//!
//! Design:
//!
//! - Each call uses a `ureq::Agent` of its own while it runs, with
//!   redirects off (a 3xx is classified like any other status, `HTTP_3xx`),
//!   HTTP statuses returned as responses and no library retries (AC-4).
//! - Connection reuse: a call that ends cleanly reads the rest of
//!   its body after `[DONE]` (at most 64 KiB, at most 1 s; nothing in it is
//!   translated, SSE-6) and hands its agent, with the idle connection in its
//!   pool, back to the client; the next call takes it. A call that fails,
//!   is cancelled or times out shuts its agent down instead, so a broken
//!   connection is never reused.
//! - Cancellation and the watchdog shut that agent down (`Agent::shutdown`),
//!   which closes its socket, so a read blocked in another thread returns at
//!   once. The request itself (DNS, connect, TLS, response head) runs on a
//!   short-lived helper thread that the caller's thread waits on in 25 ms
//!   slices, so a cancel or a watchdog expiry also ends a stuck connect
//!   promptly (the helper thread then finishes on its own, bounded by the
//!   connect timeout, and can no longer send anything).
//! - The watchdog (WD-1..WD-4) is a thread per stream, started lazily at the
//!   first wait. It is armed while the consumer waits in `next()`, re-armed
//!   by SSE comments, cleared when a chunk is produced.
//! - The API key is read once per call (D-4/D-5) into an [`ApiKey`], whose
//!   `Debug` is redacted and which has no `Display`; it only ever goes into
//!   the `authorization` header. No error message contains it: an error
//!   body that echoes it, or credentials written into the base URL
//!   (`user:KEY@`, `?api_key=`), are replaced by `<redacted>` in every
//!   message, and URLs are shown through [`redact_url`]. (ureq's own
//!   `log` output redacts headers except at TRACE level: do not enable
//!   ureq TRACE logging in production.)

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dsh_core::{GenerateOptions, LlmError, Purpose, StreamChunk};
use ureq::config::AutoHeaderValue;
use ureq::http::Response;
use ureq::{Agent, Body};

/// The input and output buffer of each connection: large enough for any
/// response head we accept, small enough that ten thousand idle pooled
/// connections fit.
const IO_BUFFER_BYTES: usize = 16 * 1024;

use crate::classify::{HttpErrorResponse, classify_http_error};
use crate::codes;
use crate::config::{BASE_URL_ENV, ConfigError, DEFAULT_BASE_URL, DeepSeekConfig, PROVIDER_ROUTE};
use crate::request::{build_request_body, precheck_images};
use crate::sse::DEFAULT_MAX_EVENT_BYTES;
use crate::translate::{DecodeOptions, Profile, StreamDecoder, error_finish};
use dsh_host::{CancelGuard as HookGuard, CancelToken};

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

struct AttachmentFn<'a>(&'a Attachments);

impl crate::request::AttachmentSource for AttachmentFn<'_> {
    fn read(&mut self, attachment: &dsh_core::ImageAttachment) -> Result<Vec<u8>, LlmError> {
        (self.0)(attachment)
    }
}

/// An API key. Its `Debug` output is redacted and it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

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

    fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

fn missing_credential(reference: &str) -> LlmError {
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
    /// accepts more base URL forms (see [`DeepSeekClient::endpoints`]).
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

/// Another API spoken over this client's transport: its
/// endpoint, headers, request body, response decoder and error classifier,
/// with the same connection handling, idle watchdog, cancellation, size
/// caps and secret redaction as the chat-completions wire.
pub trait Wire: Send + Sync {
    /// The URL of a call for `base` (the configured base URL, one trailing
    /// `/` stripped).
    fn endpoint(&self, base: &str) -> String;
    /// The authentication and version headers for `key` (`content-type`
    /// is added by the client).
    fn headers(&self, key: &str) -> Vec<(&'static str, String)>;
    /// The JSON request body.
    fn body(&self, options: &GenerateOptions) -> Result<String, LlmError>;
    /// The JSON request body with images read through `attachments`
    /// (default: [`body`](Self::body), which has no image source).
    fn body_with(
        &self,
        options: &GenerateOptions,
        attachments: Option<&mut dyn crate::request::AttachmentSource>,
    ) -> Result<String, LlmError> {
        let _ = attachments;
        self.body(options)
    }
    /// A decoder for one response body, bounded to `max_event_bytes`.
    fn decoder(&self, max_event_bytes: usize) -> Box<dyn WireDecoder>;
    /// The typed error of a non-2xx response; `header` reads a response
    /// header by lowercase name.
    fn classify(
        &self,
        status: u16,
        body: &[u8],
        header: &dyn Fn(&str) -> Option<String>,
        now_unix_ms: Option<i64>,
    ) -> LlmError;
}

/// The response decoder of a [`Wire`].
pub trait WireDecoder: Send {
    /// Feeds one piece of the body; `Ok(true)` when the reply is complete
    /// (the rest of the body is not read).
    fn push(&mut self, piece: &[u8], out: &mut Vec<StreamChunk>) -> Result<bool, LlmError>;
    /// The body ended.
    fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError>;
}

/// The decoder of a response in flight (boxed as a whole in `State::Body`,
/// so the chat decoder is not boxed again).
#[allow(clippy::large_enum_variant)]
enum BodyDecoder {
    Chat(StreamDecoder),
    Wire(Box<dyn WireDecoder>),
}

impl BodyDecoder {
    fn push(
        &mut self,
        piece: &[u8],
        out: &mut Vec<StreamChunk>,
    ) -> Result<crate::translate::PushOutcome, LlmError> {
        match self {
            BodyDecoder::Chat(d) => d.push(piece, out),
            BodyDecoder::Wire(d) => {
                d.push(piece, out)
                    .map(|finished| crate::translate::PushOutcome {
                        comments: 0,
                        finished,
                    })
            }
        }
    }

    fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        match self {
            BodyDecoder::Chat(d) => d.finish_into(out),
            BodyDecoder::Wire(d) => d.finish_into(out),
        }
    }
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

/// The host of an `http(s)://` URL, lowercased, without port, userinfo or
/// brackets.
fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        hostport.split(':').next().unwrap_or("")
    };
    host.to_ascii_lowercase()
}

/// The `host[:port]` of `url`, lowercased, without userinfo; any character
/// outside ASCII letters, digits and `.-:[]` becomes `_`, so the result is
/// safe in a log and on a terminal.
pub fn url_authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hostport
        .chars()
        .take(255)
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            'a'..='z' | '0'..='9' | '.' | '-' | ':' | '[' | ']' => c,
            _ => '_',
        })
        .collect()
}

/// The provider route a session records for an OpenAI-compatible endpoint
/// at `base_url`: [`PROVIDER_ROUTE`] (`deepseek-official`, the reference's
/// name) for DeepSeek's own API, else `openai-compatible:<host[:port]>`.
pub fn provider_route(base_url: &str) -> String {
    if is_deepseek_url(base_url) {
        String::from(PROVIDER_ROUTE)
    } else {
        alloc::format!("openai-compatible:{}", url_authority(base_url))
    }
}

/// Whether `url` points at DeepSeek (`deepseek.com` or a subdomain).
pub fn is_deepseek_url(url: &str) -> bool {
    let host = url_host(url);
    host == "deepseek.com" || host.ends_with(".deepseek.com")
}

/// Whether `url` points at a loopback host.
pub fn is_loopback_url(url: &str) -> bool {
    let host = url_host(url);
    host == "localhost" || host.starts_with("127.") || host == "::1"
}

/// `url` fit to show or store: userinfo (`user:KEY@`) and query values
/// (`?api_key=…`) are replaced by `<redacted>`.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let mut out = String::new();
    if let Some(s) = scheme {
        out.push_str(s);
        out.push_str("://");
    }
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            out.push_str("<redacted>@");
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    match tail.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let parts: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) => format!("{k}=<redacted>"),
                    None => String::from(kv),
                })
                .collect();
            out.push_str(&parts.join("&"));
            if let Some(f) = fragment {
                out.push('#');
                out.push_str(f);
            }
        }
        None => out.push_str(tail),
    }
    out
}

/// `error` with every occurrence of `secret` (at least 8 characters) in its
/// message replaced by `<redacted>`: a server that echoes the key in an
/// error body must not get it onto the screen or into the log.
fn redact_error(error: LlmError, secrets: &[&str]) -> LlmError {
    let failure = error.failure();
    let hits: Vec<&&str> = secrets
        .iter()
        .filter(|s| s.len() >= 8 && failure.message.contains(**s))
        .collect();
    if hits.is_empty() {
        return error;
    }
    let mut failure = failure.clone();
    for secret in hits {
        failure.message = failure.message.replace(*secret, "<redacted>");
    }
    let fallback = LlmError::coded(&failure.code, &failure.message);
    LlmError::new(failure).unwrap_or(fallback)
}

/// A fresh id prefix for tool calls without an id (interop): unique per
/// call within the process and across runs.
fn call_id_prefix() -> String {
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

/// The DeepSeek adapter over HTTP (feature `std`).
///
/// Works with any OpenAI-compatible chat-completions endpoint (Ollama, vLLM,
/// llama.cpp server) through `baseURL` and the model id.
///
/// ```no_run
/// use dsh_deepseek::{CancelToken, DeepSeekClient, DeepSeekConfig};
/// # fn options() -> dsh_core::GenerateOptions { unimplemented!() }
/// let client = DeepSeekClient::new(DeepSeekConfig::default())?;
/// let cancel = CancelToken::new();
/// for chunk in client.stream(&options(), &cancel)? {
///     println!("{}", serde_json::to_string(&chunk?).unwrap());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeepSeekClient {
    config: DeepSeekConfig,
    options: ClientOptions,
    shared: Arc<Shared>,
}

/// State the calls of one client share.
#[derive(Default)]
struct Shared {
    /// An agent whose last call ended cleanly, with its idle connection
    /// pooled: the next call reuses it (keep-alive).
    agent: Mutex<Option<Agent>>,
    /// Interop: the chat-completions URL that answered, for a base URL that
    /// needed a guess.
    endpoint: Mutex<Option<(String, String)>>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl DeepSeekClient {
    /// A client with default transport settings; validates `config` (D-3).
    pub fn new(config: DeepSeekConfig) -> Result<Self, ConfigError> {
        DeepSeekClient::with_options(config, ClientOptions::default())
    }

    /// A client with explicit transport settings; validates `config` (D-3).
    pub fn with_options(
        config: DeepSeekConfig,
        options: ClientOptions,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(DeepSeekClient {
            config,
            options,
            shared: Arc::new(Shared::default()),
        })
    }

    /// The chat-completions URLs a call tries, in order (a 404 moves on to
    /// the next one).
    ///
    /// Reference profile: `<baseURL>/chat/completions` only. Interop: a base
    /// URL that already ends in `/chat/completions` is used as is; a bare
    /// `http://host:port` (no path) of a server other than DeepSeek tries
    /// `/v1/chat/completions`, then `/chat/completions`; a query string
    /// (`?api-version=…`) stays at the end.
    pub fn endpoints(&self) -> Vec<String> {
        let base = self.base_url();
        let (path_part, query) = match base.split_once('?') {
            Some((p, q)) => (p.trim_end_matches('/'), Some(q)),
            None => (base.as_str(), None),
        };
        let join = |suffix: &str| match query {
            Some(q) => format!("{path_part}{suffix}?{q}"),
            None => format!("{path_part}{suffix}"),
        };
        if self.options.profile != Profile::Interop {
            return vec![format!("{base}/chat/completions")];
        }
        if path_part.ends_with("/chat/completions") {
            return vec![join("")];
        }
        let after_scheme = path_part.split_once("://").map_or(path_part, |(_, r)| r);
        let bare = !after_scheme.contains('/');
        if bare && !is_deepseek_url(path_part) {
            if let Ok(memo) = self.shared.endpoint.lock()
                && let Some((b, url)) = memo.as_ref()
                && *b == base
            {
                return vec![url.clone()];
            }
            return vec![join("/v1/chat/completions"), join("/chat/completions")];
        }
        vec![join("/chat/completions")]
    }

    fn session_header_for(&self, url: &str) -> bool {
        match self.options.session_header {
            SessionHeader::Always => true,
            SessionHeader::DeepSeekOnly => is_deepseek_url(url) || is_loopback_url(url),
            SessionHeader::Never => false,
        }
    }

    /// A fresh agent, or the pooled one of the last clean call.
    fn agent(&self, ua: String) -> Agent {
        if let Ok(mut slot) = self.shared.agent.lock()
            && let Some(agent) = slot.take()
        {
            return agent;
        }
        let agent_config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(AutoHeaderValue::Provided(Arc::new(ua)))
            .accept(AutoHeaderValue::Provided(Arc::new(String::from(
                "text/event-stream",
            ))))
            .accept_encoding(AutoHeaderValue::None)
            .timeout_connect(Some(self.options.connect_timeout))
            .proxy(if self.options.proxy_from_env {
                ureq::Proxy::try_from_env()
            } else {
                None
            })
            .max_idle_connections(2)
            .max_idle_connections_per_host(2)
            // A pooled connection keeps its buffers while the agent idles
            // (issue 34: ureq's 128 KiB + 128 KiB pinned 250 KB per idle
            // agent). Response heads fit in 16 KiB (ureq reads them whole
            // into the input buffer); bodies stream through either size.
            .input_buffer_size(IO_BUFFER_BYTES)
            .output_buffer_size(IO_BUFFER_BYTES)
            .max_response_header_size(IO_BUFFER_BYTES)
            .build();
        Agent::new_with_config(agent_config)
    }

    /// Asks the server for `model`'s context window: the
    /// [`crate::discover::PROBES`] in order, each answer read up to
    /// [`crate::discover::MAX_DISCOVERY_BYTES`], every request within
    /// `per_request` and all within `budget`; the first answer that parses
    /// wins. The key goes with each probe as with a chat call (same host,
    /// no redirects followed). A connection that fails ends discovery at
    /// once. Never an error: `None` when no probe told.
    pub fn discover_context_window(
        &self,
        model: &str,
        per_request: Duration,
        budget: Duration,
    ) -> Option<(u64, crate::discover::WindowSource)> {
        use crate::discover::{MAX_DISCOVERY_BYTES, PROBES, ProbeBase, parse_window, url_root};
        let start = std::time::Instant::now();
        let base = self.base_url();
        let root = url_root(&base);
        let key = self.api_key().ok();
        let ua = match self.options.user_agent.as_deref() {
            Some(ua) if !ua.is_empty() => String::from(ua),
            _ => user_agent(),
        };
        for probe in PROBES {
            let left = budget.checked_sub(start.elapsed())?;
            let url = match probe.base {
                ProbeBase::Base => format!("{base}{}", probe.path),
                ProbeBase::Root => format!("{root}{}", probe.path),
            };
            let agent = Agent::new_with_config(
                Agent::config_builder()
                    .http_status_as_error(false)
                    .max_redirects(0)
                    .max_redirects_will_error(false)
                    .user_agent(AutoHeaderValue::Provided(Arc::new(ua.clone())))
                    .accept_encoding(AutoHeaderValue::None)
                    .timeout_global(Some(left.min(per_request)))
                    .proxy(if self.options.proxy_from_env {
                        ureq::Proxy::try_from_env()
                    } else {
                        None
                    })
                    .build(),
            );
            let bearer = key.as_ref().map(ApiKey::bearer);
            let sent = if probe.post_model {
                let body = serde_json::json!({ "model": model }).to_string();
                let mut req = agent.post(&url).header("content-type", "application/json");
                if let Some(b) = &bearer {
                    req = req.header("authorization", b.as_str());
                }
                req.send(body.as_bytes())
            } else {
                let mut req = agent.get(&url);
                if let Some(b) = &bearer {
                    req = req.header("authorization", b.as_str());
                }
                req.call()
            };
            let response = match sent {
                Ok(r) => r,
                Err(ureq::Error::StatusCode(_)) => continue,
                Err(_) => return None,
            };
            if !response.status().is_success() {
                continue;
            }
            let Ok(body) = response
                .into_body()
                .with_config()
                .limit(MAX_DISCOVERY_BYTES)
                .read_to_vec()
            else {
                continue;
            };
            if let Some(n) = parse_window(probe.source, &body, model) {
                return Some((n, probe.source));
            }
        }
        None
    }

    /// The configuration.
    pub fn config(&self) -> &DeepSeekConfig {
        &self.config
    }

    /// The base URL a call made now would use (D-2, Q-11: one trailing `/`
    /// stripped).
    pub fn base_url(&self) -> String {
        let base = match &self.config.base_url {
            Some(url) => url.clone(),
            None => match std::env::var(BASE_URL_ENV) {
                Ok(url) if !url.is_empty() => url,
                _ => String::from(DEFAULT_BASE_URL),
            },
        };
        match base.strip_suffix('/') {
            Some(stripped) => String::from(stripped),
            None => base,
        }
    }

    fn api_key(&self) -> Result<ApiKey, LlmError> {
        let reference = self.config.api_key_env.as_str();
        let raw = match &self.options.credentials {
            Some(service) => service(reference).ok_or_else(|| missing_credential(reference))?,
            None => match std::env::var_os(reference) {
                None => return Err(missing_credential(reference)),
                Some(v) if v.is_empty() => return Err(missing_credential(reference)),
                Some(v) => match v.into_string() {
                    Ok(s) => s,
                    Err(_) => return ApiKey::normalize("\u{0}", reference),
                },
            },
        };
        ApiKey::normalize(&raw, reference)
    }

    /// Starts one model call (D-10).
    ///
    /// Steps 1–6 run here: image pre-checks, credential, body serialization;
    /// their errors are returned directly. The POST and the body reads happen
    /// as the returned stream is iterated, under the idle watchdog and
    /// `cancel`; their failures arrive as the stream's last item. Iteration
    /// never blocks longer than the idle budget without progress.
    pub fn stream(
        &self,
        options: &GenerateOptions,
        cancel: &CancelToken,
    ) -> Result<DeepSeekStream, LlmError> {
        // D-4: one snapshot of the connection facts per call.
        let config = self.config.clone();
        let base_url = self.base_url();
        precheck_images(options, &config, self.options.attachments.is_some())?;
        let key = self.api_key()?;
        let wire = self.options.wire.clone();
        let mut source = self.options.attachments.as_ref().map(AttachmentFn);
        let source = source
            .as_mut()
            .map(|s| s as &mut dyn crate::request::AttachmentSource);
        let built = match &wire {
            Some(w) => w.body_with(options, source),
            None => build_request_body(options, &config, source),
        };
        let body = match built {
            Ok(body) => body,
            // WD-5 rule 2: a caller abort wins over a serialization error.
            Err(_) if cancel.is_cancelled() => return Err(aborted()),
            Err(e) => return Err(e),
        };
        let (urls, mut headers) = match &wire {
            Some(w) => (vec![w.endpoint(&base_url)], w.headers(&key.0)),
            None => (self.endpoints(), vec![("authorization", key.bearer())]),
        };
        headers.push(("content-type", String::from("application/json")));
        if let Some(id) = &self.options.user_id {
            headers.push(("x-deepseek-harness-user-id", id.clone()));
        }
        if let Some(sid) = &options.session_id
            && self.session_header_for(&base_url)
        {
            headers.push(("x-deepseek-harness-session-id", sid.as_str().to_string()));
        }
        if options.purpose == Some(Purpose::Compaction) {
            headers.push(("x-deepseek-harness-compact", String::from("1")));
        }
        let ua = match self.options.user_agent.as_deref() {
            Some(ua) if !ua.is_empty() => String::from(ua),
            _ => user_agent(),
        };
        let agent = self.agent(ua);
        let watch = Arc::new(Watch::default());
        let hook = {
            let agent = agent.clone();
            let watch = watch.clone();
            cancel.on_cancel(move || {
                watch.wake();
                agent.clone().shutdown();
            })
        };
        let decode = DecodeOptions {
            profile: self.options.profile,
            max_event_bytes: self.options.max_event_bytes,
            call_id_prefix: call_id_prefix(),
        };
        let shown_url = redact_url(&base_url);
        let mut secrets = vec![key.0.clone()];
        // Credentials inside the base URL itself.
        if let Some((userinfo, _)) = base_url
            .split_once("://")
            .and_then(|(_, r)| r.split(['/', '?', '#']).next())
            .and_then(|a| a.rsplit_once('@'))
        {
            secrets.extend(userinfo.split(':').map(String::from));
        }
        if let Some((_, query)) = base_url.split_once('?') {
            secrets.extend(
                query
                    .split('&')
                    .filter_map(|kv| kv.split_once('=').map(|(_, v)| String::from(v))),
            );
        }
        Ok(DeepSeekStream {
            state: State::Pending(Box::new(PendingRequest {
                urls,
                tried: Vec::new(),
                headers,
                body: body.into_bytes(),
            })),
            decode,
            wire,
            secrets,
            shown_url,
            shared: self.shared.clone(),
            base_raw: base_url.clone(),
            queue: VecDeque::new(),
            scratch: Vec::new(),
            buf: vec![0; self.options.read_buffer.max(1)],
            max_error_body: self.options.max_error_body,
            idle: Duration::from_millis(config.stream_idle_timeout_ms),
            idle_ms: config.stream_idle_timeout_ms,
            base_url,
            agent,
            watch,
            cancel: cancel.clone(),
            _hook: hook,
            armed: false,
            released: false,
        })
    }

    /// [`DeepSeekClient::stream`] with the runtime boundary of AC-6 applied:
    /// plain chunks that always end in a `finish`; an adapter error becomes
    /// `{"kind":"error"|"aborted","failure":…}` and no usage is synthesized.
    pub fn stream_chunks(
        &self,
        options: &GenerateOptions,
        cancel: &CancelToken,
    ) -> impl Iterator<Item = StreamChunk> + Send + 'static {
        let cancel = cancel.clone();
        let (stream, early) = match self.stream(options, &cancel) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(error_finish(&e, cancel.is_cancelled()))),
        };
        let mut stream = stream;
        let mut early = early;
        core::iter::from_fn(move || {
            if let Some(chunk) = early.take() {
                return Some(chunk);
            }
            let s = stream.as_mut()?;
            match s.next() {
                Some(Ok(chunk)) => Some(chunk),
                Some(Err(e)) => {
                    stream = None;
                    Some(error_finish(&e, cancel.is_cancelled()))
                }
                None => {
                    stream = None;
                    None
                }
            }
        })
    }
}

fn aborted() -> LlmError {
    LlmError::coded(codes::ABORTED, "DeepSeek request aborted by caller")
}

struct PendingRequest {
    /// The URLs still to try (the first is next).
    urls: Vec<String>,
    /// The URLs that answered 404.
    tried: Vec<String>,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

enum State {
    Pending(Box<PendingRequest>),
    Body(Box<(ureq::BodyReader<'static>, BodyDecoder)>),
    /// The reply is complete: read the rest of the body (normally only the
    /// chunked terminator) so the connection can be reused.
    Draining(Box<ureq::BodyReader<'static>>),
    /// An error to yield once the queued chunks are delivered.
    Failed(LlmError),
    Done,
}

#[derive(Default)]
struct WatchState {
    deadline: Option<Instant>,
    fired: bool,
    closed: bool,
    started: bool,
}

/// The idle watchdog's shared state.
#[derive(Default)]
struct Watch {
    state: Mutex<WatchState>,
    cv: Condvar,
}

impl Watch {
    fn fired(&self) -> bool {
        self.state.lock().map(|s| s.fired).unwrap_or(true)
    }

    fn wake(&self) {
        self.cv.notify_all();
    }

    /// Arms (or re-arms) the timer; starts the watchdog thread on first use.
    fn arm(self: &Arc<Self>, idle: Duration, agent: &Agent) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.deadline = Some(Instant::now() + idle);
        if !s.started {
            s.started = true;
            let watch = self.clone();
            let agent = agent.clone();
            let spawned = thread::Builder::new()
                .name(String::from("dsh-deepseek-watchdog"))
                .spawn(move || watch.run(agent));
            if spawned.is_err() {
                s.started = false;
            }
        }
        drop(s);
        self.cv.notify_all();
    }

    fn disarm(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.deadline = None;
        }
    }

    fn close(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.closed = true;
        }
        self.cv.notify_all();
    }

    fn run(&self, agent: Agent) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        loop {
            if s.closed {
                return;
            }
            match s.deadline {
                None => match self.cv.wait(s) {
                    Ok(g) => s = g,
                    Err(_) => return,
                },
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        // WD-4: abort the call, recording that the watchdog did it.
                        s.fired = true;
                        drop(s);
                        agent.shutdown();
                        return;
                    }
                    match self.cv.wait_timeout(s, deadline - now) {
                        Ok((g, _)) => s = g,
                        Err(_) => return,
                    }
                }
            }
        }
    }
}

/// Why a step failed, before WD-5 classification.
enum Failure {
    /// Already a typed error (HTTP status, SSE/translation errors).
    Typed(LlmError),
    /// The request could not be made (connect, TLS, response head), with
    /// the cause when known.
    Request(Option<String>),
    /// The body read failed, with the cause when known.
    Read(Option<String>),
}

/// One model call in flight: an iterator of chunks (the adapter stream of
/// AC-5). It ends after the `finish` chunk, or after one `Err` item.
///
/// Dropping it early cancels the request and closes the connection (WD-7).
pub struct DeepSeekStream {
    state: State,
    queue: VecDeque<StreamChunk>,
    scratch: Vec<StreamChunk>,
    buf: Vec<u8>,
    max_error_body: usize,
    idle: Duration,
    idle_ms: u64,
    base_url: String,
    agent: Agent,
    watch: Arc<Watch>,
    cancel: CancelToken,
    _hook: HookGuard,
    armed: bool,
    /// The agent went back to the client for reuse: do not shut it down.
    released: bool,
    decode: DecodeOptions,
    /// The wire spoken, when not chat completions.
    wire: Option<Arc<dyn Wire>>,
    /// Strings never to show: the key, credentials in the base URL.
    secrets: Vec<String>,
    /// The base URL as shown in messages (credentials redacted).
    shown_url: String,
    shared: Arc<Shared>,
    /// The base URL as configured (for the endpoint memo).
    base_raw: String,
}

impl fmt::Debug for DeepSeekStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeepSeekStream")
            .field("base_url", &self.base_url)
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Drop for DeepSeekStream {
    fn drop(&mut self) {
        self.watch.close();
        if self.released
            && !self.watch.fired()
            && !self.cancel.is_cancelled()
            && let Ok(mut slot) = self.shared.agent.lock()
        {
            *slot = Some(self.agent.clone());
            return;
        }
        self.agent.clone().shutdown();
    }
}

impl DeepSeekStream {
    fn arm(&mut self) {
        self.watch.arm(self.idle, &self.agent);
        self.armed = true;
    }

    fn interop(&self) -> bool {
        self.decode.profile == Profile::Interop
    }

    /// WD-5 (interop: provider-neutral wording, the URL and the cause).
    fn classify(&self, failure: Failure) -> LlmError {
        let e = self.classify_raw(failure);
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        redact_error(e, &secrets)
    }

    fn classify_raw(&self, failure: Failure) -> LlmError {
        let url = &self.shown_url;
        if self.watch.fired() {
            let message = if self.interop() {
                format!(
                    "no data from {url} for {} ms: idle timeout (streamIdleTimeoutMs)",
                    self.idle_ms
                )
            } else {
                format!("DeepSeek stream idle timeout after {}ms", self.idle_ms)
            };
            return LlmError::coded(codes::TIMEOUT, &message);
        }
        if self.cancel.is_cancelled() {
            if self.interop() {
                return LlmError::coded(codes::ABORTED, "request aborted by caller");
            }
            return aborted();
        }
        let cause = |c: Option<String>| c.map(|c| format!(": {c}")).unwrap_or_default();
        match failure {
            Failure::Typed(e) => e,
            Failure::Request(c) if self.interop() => LlmError::coded(
                codes::TRANSPORT,
                &format!("request to {url} failed{}", cause(c)),
            ),
            Failure::Read(c) if self.interop() => LlmError::coded(
                codes::TRANSPORT,
                &format!("reading the response from {url} failed{}", cause(c)),
            ),
            Failure::Request(_) => LlmError::coded(
                codes::TRANSPORT,
                &format!("DeepSeek API request to {url} failed"),
            ),
            Failure::Read(_) => LlmError::coded(
                codes::TRANSPORT,
                &format!("DeepSeek API stream from {url} failed"),
            ),
        }
    }

    fn fail(&mut self, failure: Failure) -> Option<Result<StreamChunk, LlmError>> {
        let e = self.classify(failure);
        self.state = State::Done;
        self.watch.close();
        Some(Err(e))
    }

    /// D-10 step 7: the POST, on a helper thread.
    fn send(&mut self, url: &str, request: &PendingRequest) -> Result<Response<Body>, Failure> {
        if self.cancel.is_cancelled() {
            return Err(Failure::Typed(aborted()));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let agent = self.agent.clone();
        let url = String::from(url);
        let headers = request.headers.clone();
        let body = request.body.clone();
        let spawned = thread::Builder::new()
            .name(String::from("dsh-deepseek-request"))
            .spawn(move || {
                let mut builder = agent.post(&url);
                for (name, value) in &headers {
                    builder = builder.header(*name, value.as_str());
                }
                let _ = tx.send(builder.send(&body[..]));
            });
        if spawned.is_err() {
            return Err(Failure::Request(None));
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(25)) {
                Ok(Ok(response)) => return Ok(response),
                Ok(Err(e)) => return Err(Failure::Request(Some(transport_cause(&e)))),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Failure::Request(None));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.cancel.is_cancelled() || self.watch.fired() {
                        return Err(Failure::Request(None));
                    }
                }
            }
        }
    }

    /// H-1/H-2: turns the response into a body reader or an error.
    fn open(&mut self, response: Response<Body>) -> Result<ureq::BodyReader<'static>, Failure> {
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            if status == 204 || status == 205 {
                let message = if self.interop() {
                    format!(
                        "{} returned no response body (HTTP {status})",
                        self.shown_url
                    )
                } else {
                    String::from("DeepSeek API returned no response body")
                };
                return Err(Failure::Typed(LlmError::coded(
                    codes::EMPTY_RESPONSE,
                    &message,
                )));
            }
            return Ok(response.into_body().into_reader());
        }
        // The head, kept past the body read (a wire's classifier reads it).
        let head: Vec<(String, String)> = response
            .headers()
            .iter()
            .take(128)
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let header = |name: &str| {
            head.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let retry_after = header("retry-after");
        let x_request_id = header("x-request-id");
        let x_deepseek = header("x-deepseek-request-id");
        let mut body = Vec::new();
        let limit = u64::try_from(self.max_error_body).unwrap_or(u64::MAX);
        // A failed or partial read still classifies by status.
        let _ = response
            .into_body()
            .into_reader()
            .take(limit)
            .read_to_end(&mut body);
        if self.watch.fired() || self.cancel.is_cancelled() {
            return Err(Failure::Read(None));
        }
        let now_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok());
        if let Some(w) = &self.wire {
            let e = w.classify(status, &body, &header, now_unix_ms);
            let mut failure = e.failure().clone();
            failure.message = format!(
                "{} (HTTP {status} from {})",
                failure.message, self.shown_url
            );
            let fallback = LlmError::coded(&failure.code, &failure.message);
            return Err(Failure::Typed(LlmError::new(failure).unwrap_or(fallback)));
        }
        let e = classify_http_error(&HttpErrorResponse {
            status,
            body: &body,
            retry_after: retry_after.as_deref(),
            x_request_id: x_request_id.as_deref(),
            x_deepseek_request_id: x_deepseek.as_deref(),
            now_unix_ms,
        });
        if !self.interop() {
            return Err(Failure::Typed(e));
        }
        // Interop: say which server answered, and keep its words.
        let mut failure = e.failure().clone();
        let url = &self.shown_url;
        failure.message = match crate::classify::ProviderError::parse(&body).message {
            Some(m) => format!("{m} (HTTP {status} from {url})"),
            None => {
                let text = String::from_utf8_lossy(&body);
                let excerpt: String = text.trim().chars().take(200).collect();
                if excerpt.is_empty() {
                    format!("HTTP {status} from {url}")
                } else {
                    format!("HTTP {status} from {url}: {excerpt}")
                }
            }
        };
        let fallback = LlmError::coded(&failure.code, &failure.message);
        Err(Failure::Typed(LlmError::new(failure).unwrap_or(fallback)))
    }

    /// Interop: the 404 after every candidate URL failed.
    fn not_found(&self, tried: &[String]) -> LlmError {
        let shown: Vec<String> = tried.iter().map(|u| redact_url(u)).collect();
        let mut failure = dsh_core::LlmFailure::new(
            String::from("HTTP_404"),
            format!(
                "HTTP 404: no chat-completions endpoint at {}; check the base URL (it usually ends in /v1, e.g. http://127.0.0.1:8000/v1)",
                shown.join(" or ")
            ),
        );
        failure.status = Some(404);
        let fallback = LlmError::coded(&failure.code, &failure.message);
        LlmError::new(failure).unwrap_or(fallback)
    }

    /// The call ended cleanly with the body read to its end: hand the agent
    /// (and its pooled connection) to the next call.
    fn release_agent(&mut self) {
        self.released = true;
    }
}

/// A short cause for a ureq error (no URL, no header: nothing secret).
fn transport_cause(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => String::from("connection refused"),
            std::io::ErrorKind::TimedOut => String::from("timed out"),
            std::io::ErrorKind::ConnectionReset => String::from("connection reset"),
            kind => format!("{kind}"),
        },
        ureq::Error::HostNotFound => String::from("host not found"),
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::ConnectionFailed => String::from("connection failed"),
        ureq::Error::Tls(m) => format!("TLS: {m}"),
        other => {
            let text = other.to_string();
            text.chars().take(160).collect()
        }
    }
}

impl Iterator for DeepSeekStream {
    type Item = Result<StreamChunk, LlmError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(chunk) = self.queue.pop_front() {
                if self.armed {
                    // WD-2: a produced chunk ends the wait.
                    self.watch.disarm();
                    self.armed = false;
                }
                return Some(Ok(chunk));
            }
            match core::mem::replace(&mut self.state, State::Done) {
                State::Done => {
                    self.watch.close();
                    return None;
                }
                State::Failed(e) => {
                    self.watch.close();
                    return Some(Err(e));
                }
                State::Pending(mut request) => {
                    self.arm();
                    if request.urls.is_empty() {
                        let e = self.not_found(&request.tried);
                        return self.fail(Failure::Typed(e));
                    }
                    let url = request.urls.remove(0);
                    let response = match self.send(&url, &request) {
                        Ok(r) => r,
                        Err(f) => return self.fail(f),
                    };
                    let status = response.status().as_u16();
                    if status == 404 && self.interop() {
                        let mut sink = Vec::new();
                        let _ = response
                            .into_body()
                            .into_reader()
                            .take(64 * 1024)
                            .read_to_end(&mut sink);
                        if let Some(m) = crate::classify::ProviderError::parse(&sink).message {
                            // The server exists and explains (e.g. an
                            // unknown model): its words, not a URL guess.
                            let mut failure = dsh_core::LlmFailure::new(
                                String::from("HTTP_404"),
                                format!("{m} (HTTP 404 from {})", self.shown_url),
                            );
                            failure.status = Some(404);
                            let fallback = LlmError::coded(&failure.code, &failure.message);
                            let e = LlmError::new(failure).unwrap_or(fallback);
                            return self.fail(Failure::Typed(e));
                        }
                        request.tried.push(url);
                        if request.urls.is_empty() {
                            let e = self.not_found(&request.tried);
                            return self.fail(Failure::Typed(e));
                        }
                        self.state = State::Pending(request);
                        continue;
                    }
                    if (200..300).contains(&status)
                        && !request.tried.is_empty()
                        && let Ok(mut memo) = self.shared.endpoint.lock()
                    {
                        *memo = Some((self.base_raw.clone(), url.clone()));
                    }
                    match self.open(response) {
                        Ok(reader) => {
                            let decoder = match &self.wire {
                                Some(w) => {
                                    BodyDecoder::Wire(w.decoder(self.decode.max_event_bytes))
                                }
                                None => {
                                    BodyDecoder::Chat(StreamDecoder::with_options(&self.decode))
                                }
                            };
                            self.state = State::Body(Box::new((reader, decoder)))
                        }
                        Err(f) => return self.fail(f),
                    }
                }
                State::Draining(mut reader) => {
                    // The reply is delivered; a server that holds the body
                    // open after it costs at most this long.
                    self.watch
                        .arm(Duration::from_millis(1_000).min(self.idle), &self.agent);
                    let mut total = 0usize;
                    loop {
                        match reader.read(&mut self.buf) {
                            Ok(0) => {
                                drop(reader);
                                self.release_agent();
                                break;
                            }
                            Ok(n) if total + n <= 64 * 1024 => total += n,
                            _ => break,
                        }
                    }
                    self.watch.close();
                    return None;
                }
                State::Body(mut body) => {
                    let (reader, decoder) = &mut *body;
                    if !self.armed {
                        self.arm();
                    }
                    if self.cancel.is_cancelled() {
                        return self.fail(Failure::Read(None));
                    }
                    let n = match reader.read(&mut self.buf) {
                        Ok(n) => n,
                        Err(e) => {
                            let cause = match e.kind() {
                                std::io::ErrorKind::ConnectionReset => "connection reset",
                                std::io::ErrorKind::ConnectionAborted => "connection aborted",
                                std::io::ErrorKind::UnexpectedEof => "connection closed mid-body",
                                std::io::ErrorKind::TimedOut => "timed out",
                                _ => "connection error",
                            };
                            return self.fail(Failure::Read(Some(String::from(cause))));
                        }
                    };
                    if n == 0 {
                        // SSE-7 / SSE-8: a clean end before [DONE] (the
                        // interop profile may still complete the reply).
                        let result = decoder.finish_into(&mut self.scratch);
                        self.queue.extend(self.scratch.drain(..));
                        match result {
                            Ok(()) => {
                                drop(body);
                                self.release_agent();
                                continue;
                            }
                            Err(e) => {
                                let e = self.closed_error(e);
                                if self.queue.is_empty() {
                                    return self.fail(Failure::Typed(e));
                                }
                                self.state = State::Failed(self.classify(Failure::Typed(e)));
                                continue;
                            }
                        }
                    }
                    let result = decoder.push(&self.buf[..n], &mut self.scratch);
                    self.queue.extend(self.scratch.drain(..));
                    match result {
                        Ok(outcome) => {
                            if outcome.comments > 0 && self.queue.is_empty() {
                                // WD-3: a comment re-arms the timer.
                                self.arm();
                            }
                            if !outcome.finished {
                                self.state = State::Body(body);
                            } else {
                                // SSE-6: no more events are read; the rest
                                // of the body is drained after the reply.
                                let (reader, _) = *body;
                                self.state = State::Draining(Box::new(reader));
                            }
                        }
                        Err(e) => {
                            if self.queue.is_empty() {
                                return self.fail(Failure::Typed(e));
                            }
                            // Deliver the chunks before the error first.
                            self.state = State::Failed(self.classify(Failure::Typed(e)));
                        }
                    }
                }
            }
        }
    }
}

impl DeepSeekStream {
    /// Interop: `STREAM_CLOSED` says which server and what was missing.
    fn closed_error(&self, e: LlmError) -> LlmError {
        if !self.interop() || e.failure().code != codes::STREAM_CLOSED {
            return e;
        }
        LlmError::coded(
            codes::STREAM_CLOSED,
            &format!(
                "the response from {} ended before the reply was complete (no [DONE] and no finish_reason)",
                self.shown_url
            ),
        )
    }
}

#[cfg(test)]
mod route_tests {
    use super::{provider_route, url_authority};

    /// Issue 32 item 2: the route names what the user pointed dsh at; the
    /// key in a URL's userinfo or query never reaches it; control
    /// characters do not either.
    #[test]
    fn issue_32_the_route_names_the_endpoint() {
        assert_eq!(
            provider_route("https://api.deepseek.com"),
            "deepseek-official"
        );
        assert_eq!(
            provider_route("https://api.deepseek.com/beta/"),
            "deepseek-official"
        );
        assert_eq!(
            provider_route("http://127.0.0.1:8765/v1"),
            "openai-compatible:127.0.0.1:8765"
        );
        assert_eq!(
            provider_route("https://user:sk-secret@Example.COM/v1?api_key=sk-2"),
            "openai-compatible:example.com"
        );
        assert_eq!(
            provider_route("http://[::1]:9/v1"),
            "openai-compatible:[::1]:9"
        );
        assert_eq!(url_authority("http://a\u{1b}]b\u{7}c/"), "a_]b_c");
        assert_eq!(url_authority(""), "");
    }
}
