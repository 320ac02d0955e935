//! One model call in flight: sending the request, opening and reading the
//! body, classifying failures, and the chunk iterator.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use std::io::Read;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::classify::{HttpErrorResponse, classify_http_error};
use crate::codes;
use crate::translate::{DecodeOptions, Profile, StreamDecoder};
use dsh_core::{LlmError, StreamChunk};
use dsh_host::{CancelGuard as HookGuard, CancelToken};
use ureq::http::Response;
use ureq::{Agent, Body};

use super::{
    Shared,
    codec::{BodyDecoder, Wire},
    urls::{redact_error, redact_url},
    watch::Watch,
};

pub(super) fn aborted() -> LlmError {
    LlmError::coded(codes::ABORTED, "DeepSeek request aborted by caller")
}

pub(super) struct PendingRequest {
    /// The URLs still to try (the first is next).
    pub(super) urls: Vec<String>,
    /// The URLs that answered 404.
    pub(super) tried: Vec<String>,
    pub(super) headers: Vec<(&'static str, String)>,
    pub(super) body: Vec<u8>,
}

pub(super) enum State {
    Pending(Box<PendingRequest>),
    Body(Box<(ureq::BodyReader<'static>, BodyDecoder)>),
    /// The reply is complete: read the rest of the body (normally only the
    /// chunked terminator) so the connection can be reused.
    Draining(Box<ureq::BodyReader<'static>>),
    /// An error to yield once the queued chunks are delivered.
    Failed(LlmError),
    Done,
}

/// Why a step failed, before WD-5 classification.
pub(super) enum Failure {
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
    pub(super) state: State,
    pub(super) queue: VecDeque<StreamChunk>,
    pub(super) scratch: Vec<StreamChunk>,
    pub(super) buf: Vec<u8>,
    pub(super) max_error_body: usize,
    pub(super) idle: Duration,
    pub(super) idle_ms: u64,
    pub(super) base_url: String,
    pub(super) agent: Agent,
    pub(super) watch: Arc<Watch>,
    pub(super) cancel: CancelToken,
    pub(super) _hook: HookGuard,
    pub(super) armed: bool,
    /// The agent went back to the client for reuse: do not shut it down.
    pub(super) released: bool,
    pub(super) decode: DecodeOptions,
    /// The wire spoken, when not chat completions.
    pub(super) wire: Option<Arc<dyn Wire>>,
    /// Strings never to show: the key, credentials in the base URL.
    pub(super) secrets: Vec<String>,
    /// The base URL as shown in messages (credentials redacted).
    pub(super) shown_url: String,
    pub(super) shared: Arc<Shared>,
    /// The base URL as configured (for the endpoint memo).
    pub(super) base_raw: String,
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
    pub(super) fn arm(&mut self) {
        self.watch.arm(self.idle, &self.agent);
        self.armed = true;
    }

    pub(super) fn interop(&self) -> bool {
        self.decode.profile == Profile::Interop
    }

    /// WD-5 (interop: provider-neutral wording, the URL and the cause).
    pub(super) fn classify(&self, failure: Failure) -> LlmError {
        let e = self.classify_raw(failure);
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        redact_error(e, &secrets)
    }

    pub(super) fn classify_raw(&self, failure: Failure) -> LlmError {
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

    pub(super) fn fail(&mut self, failure: Failure) -> Option<Result<StreamChunk, LlmError>> {
        let e = self.classify(failure);
        self.state = State::Done;
        self.watch.close();
        Some(Err(e))
    }

    /// D-10 step 7: the POST, on a helper thread.
    pub(super) fn send(
        &mut self,
        url: &str,
        request: &PendingRequest,
    ) -> Result<Response<Body>, Failure> {
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
    pub(super) fn open(
        &mut self,
        response: Response<Body>,
    ) -> Result<ureq::BodyReader<'static>, Failure> {
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
    pub(super) fn not_found(&self, tried: &[String]) -> LlmError {
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
    pub(super) fn release_agent(&mut self) {
        self.released = true;
    }
}

/// A short cause for a ureq error (no URL, no header: nothing secret).
pub(super) fn transport_cause(e: &ureq::Error) -> String {
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
    pub(super) fn closed_error(&self, e: LlmError) -> LlmError {
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
