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
use std::sync::Mutex;
use std::time::Duration;

use dsh_core::{GenerateOptions, LlmError, Purpose, StreamChunk};
use ureq::Agent;
use ureq::config::AutoHeaderValue;

/// The input and output buffer of each connection: large enough for any
/// response head we accept, small enough that ten thousand idle pooled
/// connections fit.
const IO_BUFFER_BYTES: usize = 16 * 1024;

use crate::config::{BASE_URL_ENV, ConfigError, DEFAULT_BASE_URL, DeepSeekConfig};
use crate::request::{build_request_body, precheck_images};
use crate::translate::{DecodeOptions, Profile, error_finish};
use dsh_host::CancelToken;

mod codec;
mod options;
mod stream;
mod urls;
mod watch;

use options::{AttachmentFn, call_id_prefix, missing_credential};
use stream::{PendingRequest, State, aborted};
use watch::Watch;

pub use codec::{Wire, WireDecoder};
pub use options::{ApiKey, ClientOptions, Credentials, SessionHeader, user_agent};
pub use stream::DeepSeekStream;
pub use urls::{is_deepseek_url, is_loopback_url, provider_route, redact_url, url_authority};

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
            // (ureq's 128 KiB + 128 KiB pinned 250 KB per idle
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
