//! The OTLP/HTTP protobuf exporter: a background thread fed by a bounded
//! queue (std; feature `export`).
//!
//! - [`Exporter::start`] spawns the thread; [`Exporter::sink`] gives a
//!   [`SpanSink`] for each [`OtelPlugin`](crate::OtelPlugin). The sink only
//!   enqueues (`try_send`): a full queue drops the span and counts it.
//! - The thread sends a batch when it holds [`ExportConfig::batch_size`]
//!   spans or its oldest span has waited [`ExportConfig::batch_delay`], as
//!   one `ExportTraceServiceRequest` POSTed to the endpoint with
//!   `Content-Type: application/x-protobuf`.
//! - A failed request (connection refused, timeout, non-2xx) drops its
//!   batch and is counted, never retried; for [`ExportConfig::cooldown`]
//!   after it, batches are dropped without a request, so a dead collector
//!   costs one short timeout, not one per batch.
//! - [`Exporter::shutdown`] sends what is queued and waits at most the
//!   given time for the thread.
//!
//! Header values (`OTEL_EXPORTER_OTLP_HEADERS`, often a token) are sent and
//! never shown: not in `Debug`, not in an error, not in a [`Report`].

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span, status};
use prost::Message as _;

use crate::plugin::SpanSink;
use crate::span::{AttrValue, Attribute, SpanData, SpanKind, Status};

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: the base URL (`/v1/traces` is appended).
pub const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the traces URL, used as is.
pub const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value,…` sent with every request.
pub const ENV_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`: like [`ENV_HEADERS`], for traces;
/// a key here replaces the same key there.
pub const ENV_TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: only `http/protobuf` is supported.
pub const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`: like [`ENV_PROTOCOL`], for traces.
pub const ENV_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// `OTEL_SERVICE_NAME`: the `service.name` resource attribute.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// `OTEL_SDK_DISABLED=true` turns export off whatever else is set.
pub const ENV_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// The default `service.name`.
pub const DEFAULT_SERVICE_NAME: &str = "dsh";
/// The path appended to a base endpoint.
pub const TRACES_PATH: &str = "/v1/traces";

/// Longest endpoint URL accepted.
const MAX_URL_BYTES: usize = 2048;
/// Most bytes of all header keys and values together.
const MAX_HEADERS_BYTES: usize = 8 * 1024;

/// A configuration that cannot be used; the message names the setting,
/// never a header value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Request headers whose values stay out of `Debug` and messages.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// The header names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    /// Parses `key=value,…` (values percent-decoded), the format of
    /// `OTEL_EXPORTER_OTLP_HEADERS`; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Headers, ConfigError> {
        if text.len() > MAX_HEADERS_BYTES {
            return Err(ConfigError(format!(
                "{source}: longer than {MAX_HEADERS_BYTES} bytes"
            )));
        }
        let mut out = Headers::default();
        for (i, item) in text.split(',').enumerate() {
            if item.trim().is_empty() {
                continue;
            }
            let Some((k, v)) = item.split_once('=') else {
                return Err(ConfigError(format!(
                    "{source}: entry {} is not key=value",
                    i + 1
                )));
            };
            let key = k.trim();
            if key.is_empty() || !key.bytes().all(is_token_byte) {
                return Err(ConfigError(format!(
                    "{source}: entry {} has an invalid header name",
                    i + 1
                )));
            }
            let value = percent_decode(v.trim()).ok_or_else(|| {
                ConfigError(format!(
                    "{source}: the value of {key} is not valid percent-encoded UTF-8"
                ))
            })?;
            if value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(ConfigError(format!(
                    "{source}: the value of {key} has a control character"
                )));
            }
            out.insert(key.to_ascii_lowercase(), value);
        }
        Ok(out)
    }

    fn insert(&mut self, key: String, value: String) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    fn merge(&mut self, other: Headers) {
        for (k, v) in other.0 {
            self.insert(k, v);
        }
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, _)| (k, "<redacted>")))
            .finish()
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Where and how spans are sent.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ExportConfig {
    /// The full traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// Extra request headers (auth).
    pub headers: Headers,
    /// `service.name`.
    pub service_name: String,
    /// Connect timeout of a request.
    pub connect_timeout: Duration,
    /// Whole-request timeout.
    pub request_timeout: Duration,
    /// Spans the queue holds; more are dropped and counted.
    pub queue_capacity: usize,
    /// Most spans in one request.
    pub batch_size: usize,
    /// Longest a span waits for its batch to fill.
    pub batch_delay: Duration,
    /// After a failed request, batches are dropped without a request for
    /// this long.
    pub cooldown: Duration,
}

impl ExportConfig {
    /// Defaults for the traces URL `endpoint`: 1 s connect and 3 s request
    /// timeouts, a 2048-span queue, batches of up to 512 spans or 1 s, a
    /// 5 s cooldown after a failure, `service.name` `dsh`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        ExportConfig {
            endpoint: endpoint.into(),
            headers: Headers::default(),
            service_name: String::from(DEFAULT_SERVICE_NAME),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(3),
            queue_capacity: 2048,
            batch_size: 512,
            batch_delay: Duration::from_secs(1),
            cooldown: Duration::from_secs(5),
        }
    }

    /// The configuration `--otlp-endpoint` (`flag`, a base URL) and the
    /// standard variables read through `env` select; `None` when export is
    /// off (no endpoint anywhere, or `OTEL_SDK_DISABLED=true`). The flag
    /// wins over `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, which wins over
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn from_env(
        flag: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<ExportConfig>, ConfigError> {
        let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if set(ENV_SDK_DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = match (flag, set(ENV_TRACES_ENDPOINT), set(ENV_ENDPOINT)) {
            (Some(f), _, _) => traces_url(f, "--otlp-endpoint", true)?,
            (None, Some(t), _) => traces_url(&t, ENV_TRACES_ENDPOINT, false)?,
            (None, None, Some(b)) => traces_url(&b, ENV_ENDPOINT, true)?,
            (None, None, None) => return Ok(None),
        };
        for var in [ENV_TRACES_PROTOCOL, ENV_PROTOCOL] {
            if let Some(p) = set(var)
                && p.trim() != "http/protobuf"
            {
                return Err(ConfigError(format!(
                    "{var}: dsh exports OTLP as http/protobuf only, not {:?}",
                    p.trim()
                )));
            }
        }
        let mut config = ExportConfig::new(endpoint);
        if let Some(h) = set(ENV_HEADERS) {
            config.headers = Headers::parse(&h, ENV_HEADERS)?;
        }
        if let Some(h) = set(ENV_TRACES_HEADERS) {
            config
                .headers
                .merge(Headers::parse(&h, ENV_TRACES_HEADERS)?);
        }
        if let Some(name) = set(ENV_SERVICE_NAME) {
            config.service_name = name.trim().to_string();
        }
        Ok(Some(config))
    }
}

/// Checks an endpoint and, for a base URL, appends [`TRACES_PATH`].
fn traces_url(url: &str, source: &str, base: bool) -> Result<String, ConfigError> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    let bad = |why: &str| ConfigError(format!("{source}: {why}"));
    if url.len() > MAX_URL_BYTES {
        return Err(bad("the URL is too long"));
    }
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(bad("not an http:// or https:// URL"));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("the URL has a space or a control character"));
    }
    let full = if base {
        format!("{}{TRACES_PATH}", url.trim_end_matches('/'))
    } else {
        url.to_string()
    };
    match ureq::http::Uri::try_from(full.as_str()) {
        Ok(u) if u.host().is_some_and(|h| !h.is_empty()) => Ok(full),
        _ => Err(bad("not a valid URL")),
    }
}

/// What the exporter did, as counted so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Spans a collector accepted (2xx).
    pub exported: u64,
    /// Spans dropped: queue full, or their request failed or was skipped.
    pub dropped: u64,
    /// Requests that failed.
    pub failed_requests: u64,
    /// The last failure (`connection refused`, `HTTP 503`, …); never a
    /// header value.
    pub last_error: Option<String>,
    /// Whether the thread finished within the shutdown wait (`false`
    /// before shutdown).
    pub finished: bool,
}

#[derive(Default)]
struct Stats {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Stats {
    fn report(&self, finished: bool) -> Report {
        Report {
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failed_requests: self.failed.load(Ordering::Relaxed),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
            finished,
        }
    }

    fn failed(&self, spans: usize, why: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.dropped.fetch_add(spans as u64, Ordering::Relaxed);
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(why);
        }
    }
}

enum Msg {
    Span(Box<SpanData>),
    Wake,
}

/// The running exporter: owns the background thread.
pub struct Exporter {
    tx: SyncSender<Msg>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    done: Mutex<Option<Receiver<()>>>,
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter")
            .field("report", &self.stats.report(false))
            .finish()
    }
}

/// A [`SpanSink`] feeding an [`Exporter`]'s queue; never blocks.
#[derive(Clone)]
pub struct ExportSink {
    tx: SyncSender<Msg>,
    stats: Arc<Stats>,
}

impl SpanSink for ExportSink {
    fn export(&mut self, span: SpanData) {
        if self.tx.try_send(Msg::Span(Box::new(span))).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Exporter {
    /// Starts the exporter thread; fails only when no thread can start.
    pub fn start(config: ExportConfig) -> Result<Exporter, String> {
        let (tx, rx) = mpsc::sync_channel(config.queue_capacity.max(1));
        let (done_tx, done_rx) = mpsc::channel();
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            agent: agent(&config),
            config,
            stats: stats.clone(),
            stop: stop.clone(),
            cool_until: None,
        };
        thread::Builder::new()
            .name("dsh-otel-export".into())
            .spawn(move || {
                worker.run(rx);
                let _ = done_tx.send(());
            })
            .map_err(|e| format!("cannot start the trace exporter thread: {e}"))?;
        Ok(Exporter {
            tx,
            stats,
            stop,
            done: Mutex::new(Some(done_rx)),
        })
    }

    /// A sink for one plugin (clone it for more).
    pub fn sink(&self) -> ExportSink {
        ExportSink {
            tx: self.tx.clone(),
            stats: self.stats.clone(),
        }
    }

    /// The counts so far.
    pub fn report(&self) -> Report {
        self.stats.report(false)
    }

    /// Sends what is queued and waits at most `wait` for the thread to
    /// finish; spans that come later are dropped. Calling it again returns
    /// the counts at once.
    pub fn shutdown(&self, wait: Duration) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.tx.try_send(Msg::Wake);
        let done = self.done.lock().ok().and_then(|mut d| d.take());
        let finished = match done {
            Some(rx) => rx.recv_timeout(wait).is_ok(),
            None => true,
        };
        self.stats.report(finished)
    }
}

fn agent(config: &ExportConfig) -> ureq::Agent {
    let loopback = ureq::http::Uri::try_from(config.endpoint.as_str())
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .is_some_and(|h| h == "localhost" || h == "[::1]" || h.starts_with("127."));
    let c = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(config.connect_timeout))
        .timeout_global(Some(config.request_timeout))
        .proxy(if loopback {
            None
        } else {
            ureq::Proxy::try_from_env()
        })
        .user_agent(concat!("dsh-otel/", env!("CARGO_PKG_VERSION")))
        .build();
    ureq::Agent::new_with_config(c)
}

struct Worker {
    agent: ureq::Agent,
    config: ExportConfig,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    cool_until: Option<Instant>,
}

impl Worker {
    fn run(mut self, rx: Receiver<Msg>) {
        let size = self.config.batch_size.max(1);
        let mut batch: Vec<SpanData> = Vec::new();
        let mut oldest: Option<Instant> = None;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                // Drain what is queued now, then end.
                loop {
                    match rx.try_recv() {
                        Ok(Msg::Span(s)) => batch.push(*s),
                        Ok(Msg::Wake) => {}
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                    if batch.len() >= size {
                        self.send(std::mem::take(&mut batch));
                    }
                }
                self.send(batch);
                return;
            }
            let wait = match oldest {
                Some(t) => self.config.batch_delay.saturating_sub(t.elapsed()),
                None => Duration::from_secs(1),
            };
            match rx.recv_timeout(wait) {
                Ok(Msg::Span(s)) => {
                    if batch.is_empty() {
                        oldest = Some(Instant::now());
                    }
                    batch.push(*s);
                }
                Ok(Msg::Wake) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.stop.store(true, Ordering::SeqCst),
            }
            let due = oldest.is_some_and(|t| t.elapsed() >= self.config.batch_delay);
            if batch.len() >= size || (due && !batch.is_empty()) {
                self.send(std::mem::take(&mut batch));
                oldest = None;
            }
        }
    }

    fn send(&mut self, batch: Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len();
        if self.cool_until.is_some_and(|t| Instant::now() < t) {
            self.stats.dropped.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let body = encode(&batch, &self.config.service_name);
        let mut req = self
            .agent
            .post(self.config.endpoint.as_str())
            .header("content-type", "application/x-protobuf");
        for (k, v) in &self.config.headers.0 {
            req = req.header(k.as_str(), v.as_str());
        }
        let outcome = match req.send(&body[..]) {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!("HTTP {}", resp.status().as_u16())),
            Err(e) => Err(describe(&e)),
        };
        match outcome {
            Ok(()) => {
                self.stats.exported.fetch_add(n as u64, Ordering::Relaxed);
                self.cool_until = None;
            }
            Err(why) => {
                self.stats.failed(n, why);
                self.cool_until = Some(Instant::now() + self.config.cooldown);
            }
        }
    }
}

/// A transport error in a few words (never a header).
fn describe(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => format!("I/O: {}", io.kind()),
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::HostNotFound => String::from("host not found"),
        ureq::Error::ConnectionFailed => String::from("connection failed"),
        ureq::Error::Tls(m) => format!("TLS: {m}"),
        _ => String::from("request failed"),
    }
}

/// The `ExportTraceServiceRequest` of `spans`, protobuf-encoded.
pub fn encode(spans: &[SpanData], service_name: &str) -> Vec<u8> {
    request(spans, service_name).encode_to_vec()
}

/// The `ExportTraceServiceRequest` of `spans`: one resource
/// (`service.name`), one scope (`dsh-otel`).
pub fn request(spans: &[SpanData], service_name: &str) -> ExportTraceServiceRequest {
    let resource = Resource {
        attributes: vec![
            kv("service.name", AttrValue::Str(service_name.to_string())),
            kv("telemetry.sdk.name", AttrValue::Str("dsh-otel".into())),
            kv("telemetry.sdk.language", AttrValue::Str("rust".into())),
            kv(
                "telemetry.sdk.version",
                AttrValue::Str(env!("CARGO_PKG_VERSION").into()),
            ),
        ],
        ..Default::default()
    };
    let scope = InstrumentationScope {
        name: String::from("dsh-otel"),
        version: String::from(env!("CARGO_PKG_VERSION")),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope),
                spans: spans.iter().map(to_proto).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn to_proto(s: &SpanData) -> Span {
    let (code, message) = match &s.status {
        Status::Unset => (status::StatusCode::Unset, String::new()),
        Status::Error(m) => (status::StatusCode::Error, m.clone()),
    };
    Span {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: s.name.clone(),
        kind: match s.kind {
            SpanKind::Internal => span::SpanKind::Internal,
            SpanKind::Client => span::SpanKind::Client,
        } as i32,
        start_time_unix_nano: s.start_ns,
        end_time_unix_nano: s.end_ns,
        attributes: s.attributes.iter().map(attribute).collect(),
        events: s
            .events
            .iter()
            .map(|e| span::Event {
                time_unix_nano: e.time_ns,
                name: e.name.to_string(),
                attributes: e.attributes.iter().map(attribute).collect(),
                ..Default::default()
            })
            .collect(),
        status: Some(opentelemetry_proto::tonic::trace::v1::Status {
            message,
            code: code as i32,
        }),
        ..Default::default()
    }
}

fn attribute(a: &Attribute) -> KeyValue {
    kv(a.key, a.value.clone())
}

fn kv(key: &str, value: AttrValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(any(value)),
        ..Default::default()
    }
}

fn any(value: AttrValue) -> AnyValue {
    let v = match value {
        AttrValue::Str(s) => any_value::Value::StringValue(s),
        AttrValue::Int(i) => any_value::Value::IntValue(i),
        AttrValue::Bool(b) => any_value::Value::BoolValue(b),
        AttrValue::StrArray(a) => any_value::Value::ArrayValue(ArrayValue {
            values: a
                .into_iter()
                .map(|s| AnyValue {
                    value: Some(any_value::Value::StringValue(s)),
                })
                .collect(),
        }),
    };
    AnyValue { value: Some(v) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span::{SpanEvent, span_id, trace_id};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    fn span(n: u64) -> SpanData {
        let mut s = SpanData::new(
            trace_id("s", 1),
            span_id("s", n),
            (n > 1).then(|| span_id("s", 1)),
            format!("span {n}"),
            if n == 2 {
                SpanKind::Client
            } else {
                SpanKind::Internal
            },
            1_000,
        );
        s.end_at(2_000);
        s.set_str("gen_ai.tool.name", "bash");
        s.set(
            "gen_ai.response.finish_reasons",
            AttrValue::StrArray(vec!["stop".into()]),
        );
        s.events.push(SpanEvent {
            name: "exception",
            time_ns: 1_500,
            attributes: vec![],
        });
        if n == 2 {
            s.status = Status::Error("AUTH".into());
        }
        s
    }

    /// Header values are percent-decoded and never shown: not in `Debug`,
    /// not in an error.
    #[test]
    fn header_values_are_decoded_and_never_shown() {
        let h = Headers::parse("Authorization=Bearer%20tok-secret-1, x-team = a ,", "H").unwrap();
        assert_eq!(h.names().collect::<Vec<_>>(), ["authorization", "x-team"]);
        assert_eq!(h.0[0].1, "Bearer tok-secret-1");
        assert!(!format!("{h:?}").contains("tok-secret"));
        let e = Headers::parse("a=%zz-secret-2", "H").unwrap_err();
        assert!(e.to_string().contains("not valid percent-encoded"), "{e}");
        assert!(!e.to_string().contains("secret-2"));
        let e = Headers::parse("a=x%0Asecret-3", "H").unwrap_err();
        assert!(!e.to_string().contains("secret-3"), "{e}");
        assert!(Headers::parse("no-equals-sign", "H").is_err());
        assert!(Headers::parse("bad name=v", "H").is_err());
    }

    /// The flag wins over the traces variable, which wins over the base
    /// one; a base gets `/v1/traces`; `OTEL_SDK_DISABLED=true` and no
    /// endpoint mean off.
    #[test]
    fn endpoint_and_settings_come_from_the_flag_and_the_standard_variables() {
        let env = env_of(&[
            (ENV_TRACES_ENDPOINT, "http://t:4318/custom"),
            (ENV_ENDPOINT, "http://b:4318/"),
            (ENV_HEADERS, "a=1,b=2"),
            (ENV_TRACES_HEADERS, "b=3"),
            (ENV_SERVICE_NAME, "svc"),
        ]);
        let c = ExportConfig::from_env(Some("http://f:4318/"), &env)
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://f:4318/v1/traces");
        assert_eq!(c.service_name, "svc");
        assert_eq!(
            c.headers.0,
            vec![("a".into(), "1".into()), ("b".into(), "3".into())]
        );
        let c = ExportConfig::from_env(None, &env).unwrap().unwrap();
        assert_eq!(c.endpoint, "http://t:4318/custom");
        let base = env_of(&[(ENV_ENDPOINT, "https://b:4318")]);
        let c = ExportConfig::from_env(None, &base).unwrap().unwrap();
        assert_eq!(c.endpoint, "https://b:4318/v1/traces");
        assert_eq!(c.service_name, DEFAULT_SERVICE_NAME);
        assert_eq!(ExportConfig::from_env(None, &env_of(&[])).unwrap(), None);
        let off = env_of(&[(ENV_SDK_DISABLED, "true"), (ENV_ENDPOINT, "http://b")]);
        assert_eq!(
            ExportConfig::from_env(Some("http://f"), &off).unwrap(),
            None
        );
        let grpc = env_of(&[(ENV_ENDPOINT, "http://b"), (ENV_PROTOCOL, "grpc")]);
        let e = ExportConfig::from_env(None, &grpc).unwrap_err();
        assert!(e.to_string().contains("http/protobuf only"), "{e}");
        let proto = env_of(&[(ENV_ENDPOINT, "http://b"), (ENV_PROTOCOL, "http/protobuf")]);
        assert!(ExportConfig::from_env(None, &proto).unwrap().is_some());
        for bad in ["ftp://x", "localhost:4318", "http://", "http://a b"] {
            assert!(
                ExportConfig::from_env(Some(bad), &env_of(&[])).is_err(),
                "{bad}"
            );
        }
    }

    /// What goes on the wire decodes, with the official types, into the
    /// spans given: ids, parent, kind, times, attributes, events, status.
    #[test]
    fn the_request_decodes_into_the_spans() {
        let spans = [span(1), span(2)];
        let req = ExportTraceServiceRequest::decode(&encode(&spans, "svc")[..]).unwrap();
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().unwrap();
        assert!(res.attributes.iter().any(|kv| kv.key == "service.name"
            && kv.value
                == Some(AnyValue {
                    value: Some(any_value::Value::StringValue("svc".into()))
                })));
        let got = &rs.scope_spans[0].spans;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].span_id, span_id("s", 1).to_vec());
        assert!(got[0].parent_span_id.is_empty());
        assert_eq!(got[1].parent_span_id, span_id("s", 1).to_vec());
        assert_eq!(got[1].trace_id, trace_id("s", 1).to_vec());
        assert_eq!(got[1].kind, span::SpanKind::Client as i32);
        assert_eq!(got[0].kind, span::SpanKind::Internal as i32);
        assert_eq!(
            (got[1].start_time_unix_nano, got[1].end_time_unix_nano),
            (1_000, 2_000)
        );
        assert_eq!(got[1].events[0].name, "exception");
        let st = got[1].status.as_ref().unwrap();
        assert_eq!(st.code, status::StatusCode::Error as i32);
        assert_eq!(st.message, "AUTH");
        let fr = got[0]
            .attributes
            .iter()
            .find(|kv| kv.key == "gen_ai.response.finish_reasons")
            .unwrap();
        match &fr.value.as_ref().unwrap().value {
            Some(any_value::Value::ArrayValue(a)) => assert_eq!(a.values.len(), 1),
            other => panic!("{other:?}"),
        }
    }

    /// A full queue drops the span and counts it; the sink never blocks
    /// (session.md PB1: the append it observes never waits for I/O).
    #[test]
    fn a_full_queue_drops_and_counts() {
        let (tx, _rx) = mpsc::sync_channel(1);
        let stats = Arc::new(Stats::default());
        let mut sink = ExportSink {
            tx,
            stats: stats.clone(),
        };
        for n in 1..=3 {
            sink.export(span(n));
        }
        assert_eq!(stats.report(false).dropped, 2);
    }

    fn quick(endpoint: String) -> ExportConfig {
        let mut c = ExportConfig::new(endpoint);
        c.request_timeout = Duration::from_millis(300);
        c.connect_timeout = Duration::from_millis(300);
        c
    }

    /// Nothing listens: the batch fails once, its spans are dropped and
    /// counted, and shutdown ends.
    #[test]
    fn a_dead_collector_costs_the_batch_and_nothing_else() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ex = Exporter::start(quick(format!("http://127.0.0.1:{port}/v1/traces"))).unwrap();
        let mut sink = ex.sink();
        sink.export(span(1));
        sink.export(span(2));
        let r = ex.shutdown(Duration::from_secs(30));
        assert!(r.finished);
        assert_eq!((r.exported, r.dropped, r.failed_requests), (0, 2, 1));
        assert!(r.last_error.is_some());
        // After shutdown the sink drops, it does not block or panic.
        sink.export(span(3));
        assert_eq!(ex.report().dropped, 3);
    }

    /// A collector that accepts and never answers: the request times out,
    /// the batch is dropped and shutdown ends.
    #[test]
    fn a_collector_that_never_answers_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = thread::spawn(move || {
            let conn = listener.accept();
            thread::sleep(Duration::from_secs(3));
            drop(conn);
        });
        let ex = Exporter::start(quick(format!("http://127.0.0.1:{port}/v1/traces"))).unwrap();
        ex.sink().export(span(1));
        let r = ex.shutdown(Duration::from_secs(30));
        assert!(r.finished);
        assert_eq!((r.exported, r.dropped, r.failed_requests), (0, 1, 1));
        assert!(r.last_error.unwrap().contains("timed out"));
        hold.join().unwrap();
    }

    /// A live collector gets one protobuf POST with the configured headers
    /// and the spans.
    #[test]
    fn a_live_collector_receives_the_spans_with_the_headers() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut head = Vec::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push(lower);
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            (&conn)
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
            (head, body)
        });
        let mut config = quick(format!("http://127.0.0.1:{port}/v1/traces"));
        config.headers = Headers::parse("authorization=Bearer%20t0k", "H").unwrap();
        let ex = Exporter::start(config).unwrap();
        let mut sink = ex.sink();
        sink.export(span(1));
        sink.export(span(2));
        let r = ex.shutdown(Duration::from_secs(30));
        // Counts first: without a request the server would wait forever.
        assert_eq!((r.exported, r.dropped, r.failed_requests), (2, 0, 0));
        assert!(r.finished);
        let (head, body) = server.join().unwrap();
        assert!(head[0].starts_with("post /v1/traces "), "{head:?}");
        assert!(head.contains(&"content-type: application/x-protobuf\r\n".to_string()));
        assert!(head.contains(&"authorization: bearer t0k\r\n".to_string()));
        let req = ExportTraceServiceRequest::decode(&body[..]).unwrap();
        assert_eq!(req.resource_spans[0].scope_spans[0].spans.len(), 2);
    }
}
