//! The blocking HTTP transport on ureq 3 (feature `std`): one POST per call,
//! streaming body reads, the idle watchdog and cancellation (5.3, 5.4, 5.9,
//! 5.15).
//!
//! Design:
//!
//! - Each call gets its own `ureq::Agent` with redirects off (a 3xx is
//!   classified like any other status, `HTTP_3xx`), HTTP statuses returned
//!   as responses, no connection pool reuse and no library retries (AC-4).
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
//!   the `authorization` header. No error message contains it. (ureq's own
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
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dsh_core::{GenerateOptions, LlmError, Purpose, StreamChunk};
use ureq::config::AutoHeaderValue;
use ureq::http::Response;
use ureq::{Agent, Body};

use crate::cancel::{CancelToken, HookGuard};
use crate::classify::{HttpErrorResponse, classify_http_error};
use crate::codes;
use crate::config::{BASE_URL_ENV, ConfigError, DEFAULT_BASE_URL, DeepSeekConfig, PROVIDER_ROUTE};
use crate::request::{build_request_body, precheck_images};
use crate::translate::{StreamDecoder, error_finish};

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
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            user_agent: None,
            user_id: None,
            credentials: None,
            connect_timeout: Duration::from_secs(30),
            proxy_from_env: true,
            max_error_body: 64 * 1024,
            read_buffer: 16 * 1024,
        }
    }
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
        Ok(DeepSeekClient { config, options })
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
        precheck_images(options, &config, false)?;
        let key = self.api_key()?;
        let body = match build_request_body(options, &config, None) {
            Ok(body) => body,
            // WD-5 rule 2: a caller abort wins over a serialization error.
            Err(_) if cancel.is_cancelled() => return Err(aborted()),
            Err(e) => return Err(e),
        };
        let mut headers = vec![
            ("authorization", key.bearer()),
            ("content-type", String::from("application/json")),
        ];
        if let Some(id) = &self.options.user_id {
            headers.push(("x-deepseek-harness-user-id", id.clone()));
        }
        if let Some(sid) = &options.session_id {
            headers.push(("x-deepseek-harness-session-id", sid.as_str().to_string()));
        }
        if options.purpose == Some(Purpose::Compaction) {
            headers.push(("x-deepseek-harness-compact", String::from("1")));
        }
        let ua = match self.options.user_agent.as_deref() {
            Some(ua) if !ua.is_empty() => String::from(ua),
            _ => user_agent(),
        };
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
            .max_idle_connections(0)
            .build();
        let agent = Agent::new_with_config(agent_config);
        let watch = Arc::new(Watch::default());
        let hook = {
            let agent = agent.clone();
            let watch = watch.clone();
            cancel.on_cancel(move || {
                watch.wake();
                agent.clone().shutdown();
            })
        };
        Ok(DeepSeekStream {
            state: State::Pending(Box::new(PendingRequest {
                url: format!("{base_url}/chat/completions"),
                headers,
                body: body.into_bytes(),
            })),
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
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

enum State {
    Pending(Box<PendingRequest>),
    Body(Box<(ureq::BodyReader<'static>, StreamDecoder)>),
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
    /// The request could not be made (connect, TLS, response head).
    Request,
    /// The body read failed.
    Read,
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
        self.agent.clone().shutdown();
    }
}

impl DeepSeekStream {
    fn arm(&mut self) {
        self.watch.arm(self.idle, &self.agent);
        self.armed = true;
    }

    /// WD-5.
    fn classify(&self, failure: Failure) -> LlmError {
        if self.watch.fired() {
            return LlmError::coded(
                codes::TIMEOUT,
                &format!("DeepSeek stream idle timeout after {}ms", self.idle_ms),
            );
        }
        if self.cancel.is_cancelled() {
            return aborted();
        }
        match failure {
            Failure::Typed(e) => e,
            Failure::Request => LlmError::coded(
                codes::TRANSPORT,
                &format!("DeepSeek API request to {} failed", self.base_url),
            ),
            Failure::Read => LlmError::coded(
                codes::TRANSPORT,
                &format!("DeepSeek API stream from {} failed", self.base_url),
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
    fn send(&mut self, request: PendingRequest) -> Result<Response<Body>, Failure> {
        if self.cancel.is_cancelled() {
            return Err(Failure::Typed(aborted()));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let agent = self.agent.clone();
        let spawned = thread::Builder::new()
            .name(String::from("dsh-deepseek-request"))
            .spawn(move || {
                let mut builder = agent.post(&request.url);
                for (name, value) in &request.headers {
                    builder = builder.header(*name, value.as_str());
                }
                let _ = tx.send(builder.send(&request.body[..]));
            });
        if spawned.is_err() {
            return Err(Failure::Request);
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(25)) {
                Ok(Ok(response)) => return Ok(response),
                Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Failure::Request);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.cancel.is_cancelled() || self.watch.fired() {
                        return Err(Failure::Request);
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
                return Err(Failure::Typed(LlmError::coded(
                    codes::EMPTY_RESPONSE,
                    "DeepSeek API returned no response body",
                )));
            }
            return Ok(response.into_body().into_reader());
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
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
            return Err(Failure::Read);
        }
        let now_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok());
        Err(Failure::Typed(classify_http_error(&HttpErrorResponse {
            status,
            body: &body,
            retry_after: retry_after.as_deref(),
            x_request_id: x_request_id.as_deref(),
            x_deepseek_request_id: x_deepseek.as_deref(),
            now_unix_ms,
        })))
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
                State::Pending(request) => {
                    self.arm();
                    let response = match self.send(*request) {
                        Ok(r) => r,
                        Err(f) => return self.fail(f),
                    };
                    match self.open(response) {
                        Ok(reader) => {
                            self.state = State::Body(Box::new((reader, StreamDecoder::new())))
                        }
                        Err(f) => return self.fail(f),
                    }
                }
                State::Body(mut body) => {
                    let (reader, decoder) = &mut *body;
                    if !self.armed {
                        self.arm();
                    }
                    if self.cancel.is_cancelled() {
                        return self.fail(Failure::Read);
                    }
                    let n = match reader.read(&mut self.buf) {
                        Ok(n) => n,
                        Err(_) => return self.fail(Failure::Read),
                    };
                    if n == 0 {
                        // SSE-7 / SSE-8: a clean end before [DONE].
                        return match decoder.finish() {
                            Ok(()) => None,
                            Err(e) => self.fail(Failure::Typed(e)),
                        };
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
                            }
                            // On [DONE] the reader is dropped: reading stops.
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
