//! `dsh-embedded`: the dsh agent where there is no operating system.
//!
//! A `#![no_std]` + `alloc` shell that drives the runtime kernel
//! ([`dsh_runtime::Kernel`], the same one under `dsh-std` and `dsh-smol`)
//! over a **model link** given as
//! [`embedded_io::Read`] + [`embedded_io::Write`] (a UART, a socket of an
//! embedded TCP stack, a TLS session, anything), speaking HTTP/1.1 to a
//! DeepSeek-compatible endpoint (directly, or through a plain-TCP or
//! TLS-terminating proxy):
//!
//! - each `StartModel` effect opens a fresh link through the
//!   [`LinkOpener`], writes `POST /chat/completions` with the body of
//!   [`dsh_deepseek::build_request_body`], `Content-Length` and
//!   `Connection: close`;
//! - the response head is parsed in a fixed-capacity `heapless` buffer
//!   ([`http::HeadParser`], [`http::MAX_HEAD`] bytes), the body is read
//!   through a [`READ_BUF`]-byte buffer and unframed (chunked,
//!   `Content-Length` or close-delimited, [`http::Body`]), then fed to the
//!   SSE framer and translator ([`dsh_deepseek::StreamDecoder`]) and chunk
//!   by chunk to the agent;
//! - a non-2xx response is classified by
//!   [`dsh_deepseek::classify_http_error`] from its first
//!   [`MAX_ERROR_BODY`] bytes; every transport failure (the link fails to
//!   open, read or write; garbage HTTP; a truncated body) becomes a typed
//!   `LlmError` delivered as the stream's terminal `finish` chunk (AC-6), so
//!   the core logs the turn's error. Nothing on the link can panic the shell;
//! - each `StartTool` effect runs a [`Tool`]: a plain function pointer
//!   taking the arguments as JSON text;
//! - session events are written to the log sink (any `embedded_io::Write`)
//!   in the JSONL format of the core's codec, one batch per durability
//!   checkpoint (the kernel's `Persist` effects): the header line first,
//!   then one event per line. A failed write before a model call ends the
//!   turn in error (SM-14). Pull the log off the device and check it on a
//!   host with `dsh log check` and `dsh replay --check`.
//!
//! Time comes from a caller-supplied wall clock (`fn() -> i64`, epoch ms:
//! the [`Time`] of each kernel input; timers wait on
//! [`Shell::with_wait`] or on the clock's forward steps), ids
//! from an [`IdSource`] (default: the deterministic
//! [`SequentialIds`](dsh_core::agent::SequentialIds) counter; [`IdFn`] wraps
//! a plain function).
//! With feature `defmt` the shell logs through `defmt`.
//!
//! ```no_run
//! # use dsh_embedded::{Shell, ShellConfig, Tool, ToolError, ToolOutput};
//! # fn clock() -> i64 { 0 }
//! # fn open_uart() -> Result<MyLink, core::convert::Infallible> { unimplemented!() }
//! # struct MyLink;
//! # impl embedded_io::ErrorType for MyLink { type Error = core::convert::Infallible; }
//! # impl embedded_io::Read for MyLink { fn read(&mut self, _: &mut [u8]) -> Result<usize, Self::Error> { Ok(0) } }
//! # impl embedded_io::Write for MyLink { fn write(&mut self, b: &[u8]) -> Result<usize, Self::Error> { Ok(b.len()) } fn flush(&mut self) -> Result<(), Self::Error> { Ok(()) } }
//! fn temperature(_args: &str, out: &mut ToolOutput) -> Result<(), ToolError> {
//!     out.push_str("21.5 C");
//!     Ok(())
//! }
//! let tools = [Tool {
//!     name: "temperature",
//!     description: "Read the board temperature",
//!     parameters: r#"{"type":"object","properties":{}}"#,
//!     run: temperature,
//! }];
//! let log: Vec<u8> = Vec::new(); // a flash region, a UART, ...
//! let config = ShellConfig::new("api.example", "device-1");
//! let mut shell = Shell::new(config, &tools, clock, open_uart, log).unwrap();
//! shell.prompt("How warm is it?").unwrap();
//! ```
//!
//! # Features
//!
//! The default features keep everything the shell did; a firmware turns
//! them off (`default-features = false`) and names what it wants.
//! `examples/firmware` turns all off; the crate's README lists what each
//! leaves out of its `.text` and what that costs.
//!
//! - `plugins` (default): kernel plugins ([`Shell::with_plugins`],
//!   [`Shell::command`], a plugin's side model calls over the link), through
//!   `dsh-runtime/plugins`. Off, the kernel's plugin chain is left out and
//!   [`Shell::with_plugins`] refuses any plugin.
//! - `stream-validation` (default): the kernel's stream validation
//!   (`dsh-runtime/stream-validation`; `validate_streams`, on in debug
//!   builds).
//! - `float-roundtrip` (default): exact float parsing
//!   (`dsh-core/float-roundtrip`); off, a float in a tool call or a response
//!   may read one ulp off.
//! - `tool-schema` (default): tools' parameter schemas checked at
//!   [`Shell::new`] and arguments validated before a tool runs
//!   (`dsh-core/tool-schema`); off, a tool checks its own arguments.
//! - `retry-executor` (default): the core's `llm-retry` executor
//!   (`dsh-core/retry-executor`); the shell does not turn it on, so off
//!   changes nothing at run time.
//! - `head-deltas` (default): the core's HEAD deltas H-1 and H-2
//!   (`dsh-core/head-deltas`); the shell turns both off, so off changes
//!   nothing at run time.
//! - `value-serializer` (default): serde_json's `Value` serializer for the
//!   core's own types (`dsh-core/value-serializer`); off, the core writes
//!   such a value as JSON text and reads it back (the same value).
//! - `fast-reader` (default): the adapter's hand-written SSE payload reader
//!   (`dsh-deepseek/fast-reader`); off, serde reads every payload (the same
//!   chunks, slower).
//! - `http-date` (default): `Retry-After` dates (`dsh-deepseek/http-date`);
//!   off, only seconds are read.
//! - `error-patterns` (default): the CL-1 / CL-2 error message patterns
//!   (`dsh-deepseek/error-patterns`); off, an HTTP error is classified by
//!   its status alone.
//! - `std-sort` (default): the standard sort for the core's stable sort
//!   (`dsh-core/std-sort`); off, a binary insertion: the same order, for
//!   the few prompt sections and retry codes.
//! - `error-texts` (default): the `Display` of [`ShellError`] and the core's
//!   and kernel's errors it wraps, and the messages the shell, kernel,
//!   adapter and core build (a transport failure, a tool error result, a
//!   turn error), name seqs, ids, hosts, tools and details
//!   (`dsh-runtime/error-texts`, `dsh-deepseek/error-texts`,
//!   `dsh-core/error-texts`); off, a fixed short text: the errors stay
//!   typed and their codes unchanged, only the messages are shorter.
//! - `prompt-templates` (default): `{{name}}` references in system-prompt
//!   sections interpolated (`dsh-core/prompt-templates`); the shell sets no
//!   sections or variables, so off changes nothing at run time.
//! - `runtime-context` (default): the runtime-context snapshot
//!   (`dsh-core/runtime-context`); the shell sets no contexts, so off
//!   changes nothing at run time.
//! - `surface-replace` (default): surface replacements
//!   (`dsh-core/surface-replace`: compaction, tool-result rewrites), which
//!   only plugins write; off, an event with a replace is refused.
//! - `tool-order` (default): `toolOrder` (`dsh-core/tool-order`); the shell
//!   sets none, so off changes nothing at run time.
//! - `defmt`: logs through `defmt` and derives `defmt::Format` on the core's
//!   types.
//!
//! Every feature but `defmt` is on by default.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

// `error_text!`: dsh-core's, expanded with this crate's `error-texts`.
#[macro_use]
extern crate dsh_core;

pub mod http;
mod tools;

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry, ToolRegistryError};
use dsh_core::agent::{
    Agent, AgentStatus, IdPurpose, IdSource, InputError, ModelCall, ResumeError, ToolExecution,
};
use dsh_core::jsonl::{encode_event_line, encode_header_line};
use dsh_core::session::SessionEvent;
use dsh_core::{
    ContentBlock, LlmCallConfig, LlmError, Message, MessageId, Purpose, RetryId, StreamChunk, Time,
};
use dsh_deepseek::{
    DeepSeekConfig, HttpErrorResponse, PROVIDER_ROUTE, StreamDecoder, classify_http_error, codes,
    error_finish,
};
use dsh_runtime::exec::{self, Dispatch, Job};
use dsh_runtime::{
    AgentConfig as KernelConfig, AskId, AttemptId, IdMode, Kernel, KernelError, Plugin,
};
#[cfg(feature = "plugins")]
use dsh_runtime::{Reply, SideCollector};
use embedded_io::{Error as _, ErrorKind, ErrorType, Read, Write};
use heapless::Vec as HVec;

pub use http::HttpError;
pub use tools::{Tool, ToolError, ToolFn, ToolOutput};

/// Bytes read from the link at a time (a stack buffer during a model call).
pub const READ_BUF: usize = 512;

/// Bytes of a non-2xx response body kept for classification.
pub const MAX_ERROR_BODY: usize = 1024;

macro_rules! log_debug {
    ($($arg:tt)*) => {
        #[cfg(feature = "defmt")]
        defmt::debug!($($arg)*);
    };
}

macro_rules! log_warn {
    ($($arg:tt)*) => {
        #[cfg(feature = "defmt")]
        defmt::warn!($($arg)*);
    };
}

/// Gives a fresh model link per model call.
///
/// Implemented by every `FnMut() -> Result<L, L::Error>` closure.
pub trait LinkOpener {
    /// The link: one HTTP exchange, closed (dropped) after it.
    type Link: Read + Write;
    /// Opens a link to the endpoint (or its proxy).
    fn open(&mut self) -> Result<Self::Link, <Self::Link as ErrorType>::Error>;
}

impl<F, L> LinkOpener for F
where
    F: FnMut() -> Result<L, L::Error>,
    L: Read + Write,
{
    type Link = L;
    fn open(&mut self) -> Result<L, L::Error> {
        self()
    }
}

/// What the shell needs to know besides its tools and I/O.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// The `Host` header, e.g. `api.deepseek.com` or `127.0.0.1:8080`.
    pub host: String,
    /// The request path (default `/chat/completions`).
    pub path: String,
    /// Sent as `Authorization: Bearer …` when set. A TLS-terminating proxy
    /// may add it instead.
    pub api_key: Option<String>,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// The model of the first request (default `deepseek-v4-flash`).
    pub model: String,
    /// The session id (header `id`).
    pub session_id: String,
    /// The working directory the header records (`cwd`), if the device
    /// has one worth recording (default none).
    pub cwd: Option<String>,
    /// The adapter configuration the request body is built with.
    pub deepseek: DeepSeekConfig,
    /// The whole call configuration (provider route, model, reasoning
    /// effort, temperature, max tokens, stop, ...). When set, `model` is
    /// not used; when not, the call is `model` on the DeepSeek route.
    pub call: Option<LlmCallConfig>,
}

impl ShellConfig {
    /// The defaults for `host` and `session_id`.
    pub fn new(host: impl Into<String>, session_id: impl Into<String>) -> Self {
        ShellConfig {
            host: host.into(),
            path: String::from("/chat/completions"),
            api_key: None,
            user_agent: String::from(concat!("dsh-embedded/", env!("CARGO_PKG_VERSION"))),
            model: String::from("deepseek-v4-flash"),
            session_id: session_id.into(),
            cwd: None,
            deepseek: DeepSeekConfig::default(),
            call: None,
        }
    }
}

/// Why the shell stopped or could not start.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ShellError {
    /// A tool's `parameters` is not valid JSON.
    ToolSchema {
        /// The tool.
        name: &'static str,
    },
    /// The core refused a tool (duplicate name, unsupported schema).
    Tool(ToolRegistryError),
    /// The agent could not be created over the session.
    Resume(ResumeError),
    /// The agent refused an input (for example an invalid user message).
    Input(InputError),
    /// The log sink failed with this kind; events after the failure were
    /// not written (the turn itself ran to its end).
    Sink(ErrorKind),
    /// The agent is running but waits for an answer the shell cannot give
    /// (a deferred hook).
    Stalled,
    /// A plugin command failed (or no plugin answered it): the message.
    Command(String),
}

#[cfg(feature = "error-texts")]
impl fmt::Display for ShellError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShellError::ToolSchema { name } => {
                write!(f, "tool \"{name}\": parameters is not valid JSON")
            }
            ShellError::Tool(e) => write!(f, "{e}"),
            ShellError::Resume(e) => write!(f, "{e}"),
            ShellError::Input(e) => write!(f, "{e}"),
            ShellError::Sink(kind) => write!(f, "the session log sink failed: {kind:?}"),
            ShellError::Stalled => {
                f.write_str("the agent waits for an answer the shell cannot give")
            }
            ShellError::Command(e) => write!(f, "command failed: {e}"),
        }
    }
}

/// Feature `error-texts` off: a fixed text per variant; wrapped errors
/// print their own (short) texts.
#[cfg(not(feature = "error-texts"))]
impl fmt::Display for ShellError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShellError::ToolSchema { .. } => "tool parameters are not valid JSON",
            ShellError::Tool(e) => return fmt::Display::fmt(e, f),
            ShellError::Resume(e) => return fmt::Display::fmt(e, f),
            ShellError::Input(e) => return fmt::Display::fmt(e, f),
            ShellError::Sink(_) => "the session log sink failed",
            ShellError::Stalled => "the agent waits for an answer the shell cannot give",
            ShellError::Command(_) => "command failed",
        })
    }
}

impl core::error::Error for ShellError {}

impl From<InputError> for ShellError {
    fn from(e: InputError) -> Self {
        ShellError::Input(e)
    }
}

impl From<KernelError> for ShellError {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Input(e) => ShellError::Input(e),
            KernelError::Resume(e) => ShellError::Resume(e),
            KernelError::Tools(e) => ShellError::Tool(e),
            other => ShellError::Input(InputError::InvalidMessage(error_text!(
                "the kernel refused the input",
                "{other}"
            ))),
        }
    }
}

enum Work {
    Model(ModelCall),
    Tool(ToolExecution),
    /// A plugin's side model call (a compaction summary).
    #[cfg(feature = "plugins")]
    Side {
        id: AskId,
        request: dsh_core::GenerateOptions,
    },
}

/// How one model call ended.
enum StreamEnd {
    /// The stream completed: close it.
    Complete,
    /// The agent no longer wants it (cancelled or stale).
    Dropped,
}

/// The embedded shell: an [`Agent`], its model link opener, its tools and
/// its log sink (see the crate docs).
pub struct Shell<O, S> {
    kernel: Kernel,
    opener: O,
    sink: S,
    config: ShellConfig,
    tools: Vec<Tool>,
    clock: fn() -> i64,
    wait: Option<fn(u64)>,
    work: VecDeque<Work>,
    cancelled: Option<AttemptId>,
    scratch: Vec<u8>,
    chunks: Vec<StreamChunk>,
    sink_error: Option<ErrorKind>,
    /// Ids of the user messages [`prompt`](Self::prompt) builds.
    user_ids: dsh_runtime::Ids,
    /// The side call being streamed, if any.
    #[cfg(feature = "plugins")]
    side: Option<SideCollector>,
    /// The result of the last plugin command, by command id.
    #[cfg(feature = "plugins")]
    command: Option<(u64, Result<serde_json::Value, String>)>,
}

impl<O, S> fmt::Debug for Shell<O, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shell")
            .field("session", &self.config.session_id)
            .field("host", &self.config.host)
            .finish_non_exhaustive()
    }
}

impl<O: LinkOpener, S: Write> Shell<O, S> {
    /// A shell over a new session: registers `tools`, writes the session
    /// header line to `sink`.
    pub fn new(
        config: ShellConfig,
        tools: &[Tool],
        clock: fn() -> i64,
        opener: O,
        sink: S,
    ) -> Result<Self, ShellError> {
        Self::with_plugins(config, tools, clock, opener, sink, Vec::new())
    }

    /// [`new`](Self::new) with kernel `plugins`, in order (for example the
    /// compaction plugin, whose summaries go over the same link). Without
    /// feature `plugins` (a default one) any plugin is refused
    /// ([`ShellError::Input`]).
    pub fn with_plugins(
        config: ShellConfig,
        tools: &[Tool],
        clock: fn() -> i64,
        opener: O,
        sink: S,
        plugins: Vec<alloc::boxed::Box<dyn Plugin>>,
    ) -> Result<Self, ShellError> {
        let mut registry = ToolRegistry::new();
        for tool in tools {
            let parameters = serde_json::from_slice(tool.parameters.as_bytes())
                .map_err(|_| ShellError::ToolSchema { name: tool.name })?;
            registry
                .register(ToolDefinition::typed(
                    tool.name,
                    tool.description,
                    parameters,
                ))
                .map_err(ShellError::Tool)?;
        }
        let session = dsh_runtime::create_session(
            config.session_id.as_str().into(),
            Time::from_millis(clock()),
            config.cwd.clone(),
        )?;
        let header = session.header().clone();
        let call = config
            .call
            .clone()
            .unwrap_or_else(|| LlmCallConfig::new(PROVIDER_ROUTE, config.model.clone()));
        let mut kernel_config = KernelConfig::new(call);
        kernel_config.tools = registry;
        kernel_config.ids = IdMode::Sequential;
        // The core's reference defaults (no retry executor, no HEAD deltas),
        // as this shell always ran.
        kernel_config.retry_executor = false;
        kernel_config.interrupted_prefix = false;
        kernel_config.wake_latch = false;
        let kernel = Kernel::new(kernel_config, session, 0, plugins)?;
        let mut shell = Shell {
            kernel,
            opener,
            sink,
            config,
            tools: tools.to_vec(),
            clock,
            wait: None,
            work: VecDeque::new(),
            cancelled: None,
            scratch: Vec::new(),
            chunks: Vec::new(),
            sink_error: None,
            user_ids: dsh_runtime::Ids::new(IdMode::Sequential, 0),
            #[cfg(feature = "plugins")]
            side: None,
            #[cfg(feature = "plugins")]
            command: None,
        };
        encode_header_line(&header, &mut shell.scratch);
        shell
            .sink
            .write_all(&shell.scratch)
            .map_err(|e| ShellError::Sink(e.kind()))?;
        // Heap: the line buffer is not kept between writes.
        shell.scratch = Vec::new();
        shell.drain();
        Ok(shell)
    }

    /// Uses `ids` for assistant and tool-result message ids (for example an
    /// [`IdFn`]).
    pub fn with_ids(mut self, ids: impl IdSource + Send + 'static) -> Self {
        self.kernel = self.kernel.with_ids(ids);
        self
    }

    /// Called with the milliseconds to wait when a kernel timer (a retry
    /// delay, a tool deadline) is armed: sleep that long on a monotonic
    /// timer and return; the shell then reports the deadline reached,
    /// whatever the clock reads. Default: spin until the clock has moved
    /// forward that far (steps back are not counted against the wait).
    pub fn with_wait(mut self, wait: fn(u64)) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The clock's reading as the `now` of a kernel input.
    fn now(&self) -> Time {
        Time::from_millis((self.clock)())
    }

    /// The agent (its session, status, turn).
    pub fn agent(&self) -> &Agent {
        self.kernel.core()
    }

    /// The log sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Takes the shell apart: the agent and the log sink.
    pub fn into_parts(self) -> (Agent, S) {
        (self.kernel.into_core(), self.sink)
    }

    /// Sends a user text (message id `U1`, `U2`, …, as the other runtimes
    /// number them) and runs until the agent is idle.
    pub fn prompt(&mut self, text: &str) -> Result<(), ShellError> {
        let id = self.user_ids.user_message_id();
        self.send(Message::user(id, vec![ContentBlock::text(text)]))
    }

    /// Queues `message` for the next turn (`followup`) and runs until the
    /// agent is idle: model calls, tools, retries, log writes.
    pub fn send(&mut self, message: Message) -> Result<(), ShellError> {
        let now = self.now();
        self.kernel
            .send(now, message, dsh_core::agent::InboxTarget::NextTurn, true)?;
        self.drain();
        self.run()
    }

    /// Runs plugin command `name` (maintenance while idle, LC-39; for
    /// example `"compact"`, the compaction plugin's manual run) to its end.
    #[cfg(feature = "plugins")]
    pub fn command(
        &mut self,
        name: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, ShellError> {
        let now = self.now();
        self.command = None;
        let id = self.kernel.command(now, name, args)?;
        self.drain();
        self.run()?;
        match self.command.take() {
            Some((done, r)) if done == id => r.map_err(ShellError::Command),
            _ => Err(ShellError::Stalled),
        }
    }

    /// Runs queued work until the agent is idle.
    pub fn run(&mut self) -> Result<(), ShellError> {
        loop {
            if let Some(work) = self.work.pop_front() {
                if self.work.is_empty() {
                    // Heap: the queue keeps no capacity between steps.
                    self.work = VecDeque::new();
                }
                match work {
                    Work::Model(call) => self.call_model(call),
                    Work::Tool(exec) => self.run_tool(exec),
                    #[cfg(feature = "plugins")]
                    Work::Side { id, request } => self.call_side(id, request),
                }
                continue;
            }
            if let Some(deadline) = self.kernel.poll_timeout() {
                let ms = deadline.millis_since(self.kernel.now());
                match self.wait {
                    Some(wait) => wait(ms),
                    None => spin(self.clock, ms),
                }
                let now = self.now();
                self.kernel.handle_timeout(now, deadline);
                self.drain();
                continue;
            }
            break;
        }
        if let Some(kind) = self.sink_error {
            return Err(ShellError::Sink(kind));
        }
        if self.kernel.status() == AgentStatus::Running {
            return Err(ShellError::Stalled);
        }
        Ok(())
    }

    /// The kernel and the I/O the shared executor carries its effects to.
    fn split(&mut self) -> (&mut Kernel, Io<'_, S>) {
        let io = Io {
            clock: self.clock,
            work: &mut self.work,
            cancelled: &mut self.cancelled,
            #[cfg(feature = "plugins")]
            command: &mut self.command,
            sink: &mut self.sink,
            scratch: &mut self.scratch,
            sink_error: &mut self.sink_error,
        };
        (&mut self.kernel, io)
    }

    /// Carries the kernel's effects (after every input).
    fn drain(&mut self) {
        let (kernel, mut io) = self.split();
        // The sink is written in place: no write is left running.
        let _ = exec::carry(kernel, &mut io);
    }

    /// After an input: carries what the kernel released; false when it
    /// refused the input. The shell calls the kernel's input methods
    /// itself (each site feeds one kind, so a device build links only
    /// those).
    fn fed(&mut self, r: Result<(), KernelError>) -> bool {
        let accepted = r.is_ok();
        if accepted {
            self.drain();
        }
        accepted
    }

    fn run_tool(&mut self, exec: ToolExecution) {
        let token = exec.token;
        let outcome = match self.tools.iter().find(|t| t.name == exec.name) {
            Some(tool) => {
                let args =
                    serde_json::to_string(&exec.arguments).unwrap_or_else(|_| String::from("{}"));
                // The parsed arguments are not needed past this point.
                drop(exec);
                let mut out = ToolOutput::new();
                let result = (tool.run)(&args, &mut out);
                drop(args);
                log_debug!("dsh: tool {=str} ok={}", tool.name, result.is_ok());
                out.into_outcome(result)
            }
            None => ToolOutcome::unknown_tool(&exec.name),
        };
        let now = self.now();
        let r = self.kernel.tool_done(now, token, outcome, Vec::new());
        self.fed(r);
    }

    fn call_model(&mut self, call: ModelCall) {
        let attempt = call.attempt;
        self.cancelled = None;
        let streamed = self.stream(call.request, Some(attempt));
        // Heap: the chunk buffer is not kept between calls.
        self.chunks = Vec::new();
        let end = match streamed {
            Ok(end) => end,
            Err(e) => {
                log_warn!("dsh: model call failed: {=str}", e.failure().code.as_str());
                // AC-6: an adapter failure is the stream's terminal chunk.
                let chunk = error_finish(&e, false);
                let now = self.now();
                let r = self.kernel.model_chunk(now, attempt, chunk);
                if !self.fed(r) {
                    return;
                }
                StreamEnd::Complete
            }
        };
        if let StreamEnd::Complete = end {
            if self.cancelled == Some(attempt) {
                return;
            }
            let now = self.now();
            let r = self.kernel.model_end(now, attempt);
            self.fed(r);
        }
    }

    /// A plugin's side call (loop.md CP-2's summary) over the same link
    /// and configuration; the answer goes back to the asking plugin.
    #[cfg(feature = "plugins")]
    fn call_side(&mut self, id: AskId, request: dsh_core::GenerateOptions) {
        self.side = Some(SideCollector::new());
        let streamed = self.stream(request, None);
        self.chunks = Vec::new();
        let collector = self.side.take().unwrap_or_default();
        let result = match streamed {
            Ok(_) => collector.finish(),
            Err(e) => {
                let f = e.failure();
                Err(format!("{}: {}", f.code, f.message))
            }
        };
        let now = self.now();
        let r = self.kernel.answer(now, id, Reply::Model(result));
        self.fed(r);
    }

    fn transport(&self, what: &str) -> LlmError {
        LlmError::coded(
            codes::TRANSPORT,
            &error_text!(
                "DeepSeek API transport failed",
                "DeepSeek API {what} http://{} failed",
                self.config.host
            ),
        )
    }

    fn bad_http(&self, e: HttpError) -> LlmError {
        LlmError::coded(
            codes::TRANSPORT,
            &error_text!(
                "DeepSeek API response is not valid HTTP",
                "DeepSeek API response from http://{}: {e}",
                self.config.host
            ),
        )
    }

    /// One model call: request, response head, body into the agent.
    fn stream(
        &mut self,
        request: dsh_core::GenerateOptions,
        attempt: Option<AttemptId>,
    ) -> Result<StreamEnd, LlmError> {
        let body = dsh_deepseek::build_request_body(&request, &self.config.deepseek, None)?;
        let session = request.session_id.as_ref().map(|s| s.as_str().to_string());
        let compact = request.purpose == Some(Purpose::Compaction);
        // The request (a copy of the history) is no longer needed.
        drop(request);
        let bearer = self.config.api_key.as_ref().map(|k| format!("Bearer {k}"));
        let mut headers: HVec<(&str, &str), 6> = HVec::new();
        let _ = headers.push(("content-type", "application/json"));
        let _ = headers.push(("accept", "text/event-stream"));
        let _ = headers.push(("user-agent", self.config.user_agent.as_str()));
        if let Some(b) = &bearer {
            let _ = headers.push(("authorization", b.as_str()));
        }
        if let Some(s) = &session {
            let _ = headers.push(("x-deepseek-harness-session-id", s.as_str()));
        }
        if compact {
            let _ = headers.push(("x-deepseek-harness-compact", "1"));
        }
        let mut link = self
            .opener
            .open()
            .map_err(|_| self.transport("request to"))?;
        http::write_request(
            &mut link,
            &self.config.host,
            &self.config.path,
            &headers,
            body.as_bytes(),
        )
        .map_err(|_| self.transport("request to"))?;
        drop(body);
        drop(headers);

        let mut buf = [0u8; READ_BUF];
        let mut parser = http::HeadParser::new();
        let (head, used, filled) = loop {
            let n = link
                .read(&mut buf)
                .map_err(|_| self.transport("request to"))?;
            let Some(piece) = buf.get(..n).filter(|p| !p.is_empty()) else {
                return Err(self.bad_http(HttpError::TruncatedHead));
            };
            if let Some((head, used)) = parser.push(piece).map_err(|e| self.bad_http(e))? {
                break (head, used, n);
            }
        };
        log_debug!("dsh: HTTP {}", head.status);
        let mut framing = http::Body::new(head.framing);
        let rest = buf.get(used..filled).unwrap_or_default();
        if !(200..300).contains(&head.status) {
            return Err(self.error_response(&mut link, &head, framing, rest));
        }
        if head.status == 204 || head.status == 205 {
            return Err(LlmError::coded(
                codes::EMPTY_RESPONSE,
                "DeepSeek API returned no response body",
            ));
        }
        let mut decoder = StreamDecoder::new();
        // The unread part of `buf`: after the head at first, then each read.
        let (mut start, mut end) = (used, filled);
        loop {
            let mut input = buf.get(start..end).unwrap_or_default();
            while !input.is_empty() && !framing.is_complete() {
                let data = framing.next(&mut input).map_err(|e| self.bad_http(e))?;
                if data.is_empty() {
                    continue;
                }
                let pushed = decoder.push(data, &mut self.chunks);
                // Chunks before a bad payload are delivered, then the error.
                if !self.deliver(attempt) {
                    return Ok(StreamEnd::Dropped);
                }
                if pushed?.finished {
                    // SSE-6: the call is complete; the rest is not read.
                    return Ok(StreamEnd::Complete);
                }
            }
            if framing.is_complete() {
                decoder.finish()?;
                return Ok(StreamEnd::Complete);
            }
            let n = link
                .read(&mut buf)
                .map_err(|_| self.transport("stream from"))?;
            if n == 0 {
                framing.end().map_err(|e| self.bad_http(e))?;
                decoder.finish()?;
                return Ok(StreamEnd::Complete);
            }
            (start, end) = (0, n);
        }
    }

    /// Feeds the decoded chunks to the agent; false when it no longer
    /// wants this attempt.
    fn deliver(&mut self, attempt: Option<AttemptId>) -> bool {
        let Some(attempt) = attempt else {
            return self.deliver_side();
        };
        let mut chunks = core::mem::take(&mut self.chunks);
        let mut wanted = true;
        for chunk in chunks.drain(..) {
            if !wanted {
                continue;
            }
            let now = self.now();
            let r = self.kernel.model_chunk(now, attempt, chunk);
            if !self.fed(r) {
                wanted = false;
                continue;
            }
            if self.cancelled == Some(attempt) {
                wanted = false;
            }
        }
        self.chunks = chunks;
        wanted
    }

    /// A side call's chunks: folded into its collector; false at its
    /// finish.
    #[cfg(feature = "plugins")]
    fn deliver_side(&mut self) -> bool {
        let mut wanted = true;
        for chunk in self.chunks.drain(..) {
            if let Some(side) = self.side.as_mut()
                && side.push(chunk)
            {
                wanted = false;
            }
        }
        wanted
    }

    /// No side calls without the kernel's plugin chain.
    #[cfg(not(feature = "plugins"))]
    fn deliver_side(&mut self) -> bool {
        false
    }

    /// H-2: reads up to [`MAX_ERROR_BODY`] bytes of a non-2xx body and
    /// classifies it. A failing or truncated read still classifies by
    /// status.
    fn error_response(
        &self,
        link: &mut O::Link,
        head: &http::Head,
        mut framing: http::Body,
        first: &[u8],
    ) -> LlmError {
        let mut body: HVec<u8, MAX_ERROR_BODY> = HVec::new();
        let mut buf = [0u8; READ_BUF];
        let mut input = first;
        'read: loop {
            while !input.is_empty() && !framing.is_complete() {
                let Ok(data) = framing.next(&mut input) else {
                    break 'read;
                };
                let room = MAX_ERROR_BODY - body.len();
                let _ = body.extend_from_slice(data.get(..room.min(data.len())).unwrap_or(data));
                if body.is_full() {
                    break 'read;
                }
            }
            if framing.is_complete() {
                break;
            }
            match link.read(&mut buf) {
                Ok(n) if n > 0 => input = buf.get(..n).unwrap_or_default(),
                _ => break,
            }
        }
        classify_http_error(&HttpErrorResponse {
            status: head.status,
            body: &body,
            retry_after: head.retry_after.as_deref(),
            x_request_id: head.x_request_id.as_deref(),
            x_deepseek_request_id: head.x_deepseek_request_id.as_deref(),
            now_unix_ms: Some((self.clock)()),
        })
    }
}

/// The embedded shell's I/O for the shared executor: model calls, tool
/// bodies and side calls are queued and run one at a time by
/// [`Shell::run`]; the log sink is written in place.
struct Io<'a, S> {
    clock: fn() -> i64,
    work: &'a mut VecDeque<Work>,
    cancelled: &'a mut Option<AttemptId>,
    #[cfg(feature = "plugins")]
    command: &'a mut Option<(u64, Result<serde_json::Value, String>)>,
    sink: &'a mut S,
    scratch: &'a mut Vec<u8>,
    sink_error: &'a mut Option<ErrorKind>,
}

impl<S: Write> Dispatch for Io<'_, S> {
    fn now(&mut self) -> Time {
        Time::from_millis((self.clock)())
    }

    fn start_model(&mut self, call: ModelCall) -> Result<(), String> {
        self.work.push_back(Work::Model(call));
        Ok(())
    }

    fn start_tool(&mut self, exec: ToolExecution, _timeout_ms: Option<u64>) -> Result<(), String> {
        self.work.push_back(Work::Tool(exec));
        Ok(())
    }

    #[cfg(feature = "plugins")]
    fn start_side(&mut self, id: AskId, request: dsh_core::GenerateOptions) -> Result<(), String> {
        self.work.push_back(Work::Side { id, request });
        Ok(())
    }

    /// Without the kernel's plugin chain nothing asks for a side call.
    #[cfg(not(feature = "plugins"))]
    fn start_side(&mut self, _: AskId, _: dsh_core::GenerateOptions) -> Result<(), String> {
        Err(String::from("no plugin chain in this build"))
    }

    /// Tools run synchronously, so no body is in flight to stop; a queued
    /// call is dropped, a streaming one is dropped at its next chunk.
    fn stop(&mut self, job: Job) {
        match job {
            Job::Model(attempt) => {
                *self.cancelled = Some(attempt);
                self.work
                    .retain(|w| !matches!(w, Work::Model(c) if c.attempt == attempt));
            }
            #[cfg(feature = "plugins")]
            Job::Side(id) => self
                .work
                .retain(|w| !matches!(w, Work::Side { id: side, .. } if *side == id)),
            #[cfg(not(feature = "plugins"))]
            Job::Side(_) => {}
            Job::Tool(_) => {}
        }
    }

    /// Writes one batch and flushes the sink (a durability barrier). After
    /// a failure nothing more is written.
    fn persist(&mut self, events: &[SessionEvent]) -> Option<Result<(), String>> {
        if let Some(kind) = *self.sink_error {
            return Some(Err(error_text!(
                "the log sink failed",
                "the log sink failed: {kind:?}"
            )));
        }
        let mut result = Ok(());
        for event in events {
            self.scratch.clear();
            encode_event_line(event, self.scratch);
            if let Err(e) = self.sink.write_all(self.scratch) {
                result = Err(e.kind());
                break;
            }
        }
        // Heap: the line buffer is not kept between batches.
        *self.scratch = Vec::new();
        if result.is_ok() {
            result = self.sink.flush().map_err(|e| e.kind());
        }
        Some(result.map_err(|kind| {
            *self.sink_error = Some(kind);
            error_text!("the log sink failed", "the log sink failed: {kind:?}")
        }))
    }

    fn command_done(&mut self, _id: u64, _result: &Result<serde_json::Value, String>) {
        #[cfg(feature = "plugins")]
        {
            *self.command = Some((_id, _result.clone()));
        }
    }

    /// There is no front end to publish to.
    fn publish(&mut self, _event: dsh_runtime::AgentEvent) {}

    /// Nobody to tell: the shell reads the outcome from the log.
    fn refused(&mut self, _error: &KernelError) {}
}

/// Message ids from a plain function, retry-chain ids from a counter
/// (`retry-1`, `retry-2`, …): for [`Shell::with_ids`] when a device mints
/// ids from its own source (a serial number and a counter in flash, a
/// hardware RNG).
#[derive(Clone, Copy, Debug)]
pub struct IdFn {
    message: fn(IdPurpose<'_>) -> MessageId,
    retries: u64,
}

impl IdFn {
    /// Ids from `message`; it must not repeat an id within a session.
    pub fn new(message: fn(IdPurpose<'_>) -> MessageId) -> Self {
        IdFn {
            message,
            retries: 0,
        }
    }
}

impl IdSource for IdFn {
    fn message_id(&mut self, purpose: IdPurpose<'_>) -> MessageId {
        (self.message)(purpose)
    }

    fn retry_id(&mut self) -> RetryId {
        self.retries += 1;
        RetryId(format!("retry-{}", self.retries))
    }
}

/// Waits until `clock` has moved forward `ms` milliseconds in total; a step
/// back restarts nothing and counts nothing.
fn spin(clock: fn() -> i64, ms: u64) {
    let mut left = ms;
    let mut last = clock();
    while left > 0 {
        let now = clock();
        left = left.saturating_sub(now.saturating_sub(last).max(0).unsigned_abs());
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::ShellError;
    use alloc::string::ToString;

    /// The default build's texts name the tool; with `error-texts` off, a
    /// fixed text per variant.
    #[test]
    fn shell_error_texts() {
        let schema = ShellError::ToolSchema { name: "led" };
        #[cfg(feature = "error-texts")]
        assert_eq!(
            schema.to_string(),
            "tool \"led\": parameters is not valid JSON"
        );
        #[cfg(not(feature = "error-texts"))]
        assert_eq!(schema.to_string(), "tool parameters are not valid JSON");
        // A kernel refusal becomes an invalid input with its text.
        let refused = ShellError::from(dsh_runtime::KernelError::WrongReply);
        #[cfg(feature = "error-texts")]
        let text = "the reply does not match the pending ask";
        #[cfg(not(feature = "error-texts"))]
        let text = "the kernel refused the input";
        assert_eq!(
            refused,
            ShellError::Input(dsh_core::agent::InputError::InvalidMessage(text.into()))
        );
    }
}
