//! `dsh-otel`: OpenTelemetry traces of dsh agents.
//!
//! [`OtelPlugin`] is a kernel [`Plugin`](dsh_runtime::Plugin) that listens
//! to session events ([`Seams::EVENTS`](dsh_runtime::Seams::EVENTS)) and
//! builds one trace per turn, with spans for the steps, each model attempt
//! and each tool call, named and attributed after the OpenTelemetry GenAI
//! semantic conventions ([`attr`]). It runs unchanged in every runtime
//! (`no_std` + `alloc` without the `export` feature) and never touches the
//! log: same inputs, same log, byte for byte.
//!
//! **Determinism.** The plugin has no clock and no randomness: a span's
//! start and end are the `time` of the events that open and close it, the
//! trace id is a hash of the session id and the turn, and a span id a hash
//! of the session id and the seq of the event that opens it
//! ([`trace_id`], [`span_id`]). Exporting the same log twice gives the same
//! spans.
//!
//! **Privacy.** Without [`OtelConfig::capture_content`] no prompt, answer,
//! reasoning or tool text (arguments, results) is put on a span; ids,
//! names, models, token counts, finish reasons and failure codes are.
//!
//! **Export** (feature `export`, on by default): [`export::Exporter`]
//! sends spans as OTLP/HTTP protobuf (`application/x-protobuf`, to
//! `<endpoint>/v1/traces`) from a background thread fed by a bounded
//! queue. The plugin's [`SpanSink`] only enqueues; when the queue is full a
//! span is dropped and counted, so a turn never waits for the collector. A
//! failed request is dropped and counted, never retried.
//!
//! Why not the `opentelemetry` SDK and `opentelemetry-otlp`: their HTTP
//! exporter needs a `reqwest` or `hyper` client (and with them a `tokio`
//! runtime) that dsh's runtimes do not otherwise carry, and their span
//! machinery reads the clock and draws random ids where dsh wants ids and
//! times from the log. The exporter here is small: the official generated
//! OTLP messages (`opentelemetry-proto` with `prost`, no gRPC, no `tonic`)
//! sent with the blocking `ureq` client the DeepSeek adapter already uses.
//! (`opentelemetry-proto`'s `trace` feature still compiles the
//! `opentelemetry` and `opentelemetry_sdk` crates, without any async
//! runtime; nothing of them runs here.)
//!
//! Installing it in a std or smol agent:
//!
//! ```no_run
//! # #[cfg(feature = "export")] {
//! use dsh_otel::{OtelConfig, OtelPlugin, export::{ExportConfig, Exporter}};
//! let exporter = Exporter::start(ExportConfig::new("http://127.0.0.1:4318/v1/traces")).unwrap();
//! let plugin = OtelPlugin::new(OtelConfig::default(), exporter.sink());
//! // config.plugins.push(Box::new(plugin)); // dsh_std / dsh_smol AgentConfig
//! # let _ = plugin;
//! // ... run the agent, then before exit:
//! let report = exporter.shutdown(std::time::Duration::from_secs(3));
//! # let _ = report;
//! # }
//! ```
//!
//! # Features
//!
//! - `export` (default): the OTLP/HTTP protobuf exporter on a background
//!   thread (std). Without it the crate is `no_std` + `alloc`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(feature = "export"), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod attr;
#[cfg(feature = "export")]
pub mod export;
mod plugin;
pub mod span;

pub use plugin::{
    DEFAULT_MAX_CONTENT_BYTES, MAX_NAME_BYTES, MAX_OPEN_TOOLS, MAX_SPAN_EVENTS, OtelConfig,
    OtelPlugin, PLUGIN, SpanSink, finish_reason, provider_name,
};
pub use span::{
    AttrValue, Attribute, SpanData, SpanEvent, SpanId, SpanKind, Status, TraceId, span_id, trace_id,
};
