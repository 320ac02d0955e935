//! The clock, model providers and their stream pump, the provider's
//! `prepare` as a plugin, and the one error type of the hosted runtimes'
//! handles.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use dsh_core::agent::HookError;
use dsh_core::agent::{ModelCall, PreparedCall};
use dsh_core::{GenerateOptions, LlmCallConfig, LlmError, StreamChunk};
use dsh_runtime::{AskId, Cx, Flow, KernelError, Plugin, Seams, SideCollector, SideReply};

use crate::cancel::CancelToken;
use dsh_runtime::Reply;
use dsh_runtime::exec::{Input, Job, Jobs};

/// Where a std runtime reads `now` (epoch milliseconds).
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Clock {
    /// `SystemTime::now()`.
    #[default]
    System,
    /// A fixed instant (tests: byte-identical logs).
    Fixed(i64),
    /// A shared counter the caller moves (tests).
    Manual(Arc<core::sync::atomic::AtomicI64>),
}

impl core::fmt::Debug for Clock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Clock::System => f.write_str("System"),
            Clock::Fixed(t) => write!(f, "Fixed({t})"),
            Clock::Manual(t) => write!(
                f,
                "Manual({})",
                t.load(core::sync::atomic::Ordering::Relaxed)
            ),
        }
    }
}

impl Clock {
    /// The current wall-clock time: the `now` of kernel inputs.
    pub fn now(&self) -> dsh_core::Time {
        dsh_core::Time::from_millis(self.now_ms())
    }

    /// The current time in epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            Clock::Fixed(t) => *t,
            Clock::Manual(t) => t.load(core::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// `path` made absolute against the process's current directory, as the
/// session header's `cwd` records it (`None` if it is not UTF-8).
pub fn absolute_cwd(path: &std::path::Path) -> Option<String> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    abs.to_str().map(String::from)
}

/// A boxed stream of chunks (or a terminal adapter error).
pub type ChunkStream = Box<dyn Iterator<Item = Result<StreamChunk, LlmError>> + Send>;

/// A model backend a std runtime streams from. The stream is read off the
/// driver (a thread, the blocking pool); `cancel` is fired when the kernel
/// cancels the attempt, and the stream must then end promptly.
pub trait ModelProvider: Send + Sync {
    /// Starts one model call. An `Err` (or an `Err` item) becomes a
    /// terminal `finish` chunk (LC-27, AC-6).
    fn stream(&self, opts: &GenerateOptions, cancel: &CancelToken)
    -> Result<ChunkStream, LlmError>;

    /// `llm.prepareCall` (LC-15): the effective config, the route's retry
    /// policy and context window. Default: the config unchanged.
    fn prepare(&self, config: LlmCallConfig) -> Result<PreparedCall, LlmError> {
        Ok(PreparedCall::plain(config))
    }

    /// Whether [`stream`](Self::stream) and reading its chunks may block
    /// (on the network, a file, a timer). A provider that answers from
    /// memory (a script, a recorded replay) returns `false`, and the hosted
    /// runtimes then read its stream in place on the agent's own thread or
    /// task instead of handing it to another thread. The default is `true`.
    fn blocks(&self) -> bool {
        true
    }
}

/// Reads one model attempt to its end, handing each chunk to `send`
/// (which returns `false` when nobody listens any more). Adapter errors
/// become the terminal `finish` chunk (AC-6); after a cancel the stream
/// stops at its `finish`.
pub fn pump(
    provider: &dyn ModelProvider,
    request: &GenerateOptions,
    cancel: &CancelToken,
    mut send: impl FnMut(StreamChunk) -> bool,
) {
    match provider.stream(request, cancel) {
        Ok(stream) => {
            for item in stream {
                let chunk = match item {
                    Ok(c) => c,
                    Err(e) => StreamChunk::error_finish(&e, cancel.is_cancelled()),
                };
                let last = matches!(chunk, StreamChunk::Finish { .. });
                if !send(chunk) || (last && cancel.is_cancelled()) {
                    return;
                }
            }
        }
        Err(e) => {
            send(StreamChunk::error_finish(&e, cancel.is_cancelled()));
        }
    }
}

/// A fresh cancel token for `job`, its stop handle recorded in `jobs`.
pub fn job_token(jobs: &mut Jobs, job: Job) -> CancelToken {
    let cancel = CancelToken::new();
    let stop = cancel.clone();
    jobs.insert(job, move || stop.cancel());
    cancel
}

/// The body of a model job ([`Dispatch::start_model`](dsh_runtime::exec::Dispatch::start_model)):
/// reads `call`'s stream to its end ([`pump`]), each chunk and then the end
/// as an [`Input`] handed to `send` (which returns `false` when nobody
/// listens any more).
pub fn run_model(
    provider: &dyn ModelProvider,
    call: &ModelCall,
    cancel: &CancelToken,
    mut send: impl FnMut(Input) -> bool,
) {
    let attempt = call.attempt;
    pump(provider, &call.request, cancel, |chunk| {
        send(Input::Chunk { attempt, chunk })
    });
    send(Input::ModelEnd { attempt });
}

/// The body of a side job ([`Dispatch::start_side`](dsh_runtime::exec::Dispatch::start_side)):
/// [`side_call`], answered as ask `id` through `send`.
pub fn run_side(
    provider: &dyn ModelProvider,
    id: AskId,
    request: &GenerateOptions,
    cancel: &CancelToken,
    send: impl FnOnce(Input),
) {
    let reply = Reply::Model(side_call(provider, request, cancel));
    send(Input::Answer { id, reply });
}

/// Carries out a side model call ([`Effect::SideModel`](dsh_runtime::Effect::SideModel))
/// with `provider`: pumps the stream into a [`SideCollector`]. Blocks;
/// runtimes call it on a thread or blocking pool and answer the kernel
/// with `Reply::Model(result)`.
pub fn side_call(
    provider: &dyn ModelProvider,
    request: &GenerateOptions,
    cancel: &CancelToken,
) -> Result<SideReply, String> {
    let mut collector = SideCollector::new();
    pump(provider, request, cancel, |chunk| !collector.push(chunk));
    collector.finish()
}

/// The provider's `prepare` (LC-15) as a plugin; the kernel's retry
/// policy is kept.
pub struct ProviderPrepare(pub Arc<dyn ModelProvider>);

impl Plugin for ProviderPrepare {
    fn name(&self) -> &str {
        "provider-prepare"
    }

    fn seams(&self) -> Seams {
        Seams::PREPARE
    }

    fn prepare(&mut self, _cx: &mut Cx<'_>, value: PreparedCall) -> Flow<PreparedCall> {
        match self.0.prepare(value.config) {
            Ok(mut p) => {
                p.retry_policy = value.retry_policy.or(p.retry_policy);
                Flow::Next(p)
            }
            Err(e) => Flow::Fail(HookError::Llm(e.into_failure())),
        }
    }
}

/// One scripted reply of a [`ScriptedProvider`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ScriptedReply {
    /// These chunks, in order.
    Chunks(Vec<StreamChunk>),
    /// The call fails before any chunk.
    Fail(LlmError),
}

/// An in-memory provider that serves scripted replies in order and records
/// every request (tests, the contract suite). When the script is exhausted
/// it fails with code `SCRIPT_EXHAUSTED`.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    replies: Mutex<VecDeque<ScriptedReply>>,
    requests: Mutex<Vec<GenerateOptions>>,
    context_window: Option<u64>,
}

impl ScriptedProvider {
    /// A provider serving `replies` in order.
    pub fn new(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        ScriptedProvider {
            replies: Mutex::new(replies.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
            context_window: None,
        }
    }

    /// Reports `window` as the route's context window from `prepare`.
    pub fn with_context_window(mut self, window: u64) -> Self {
        self.context_window = Some(window);
        self
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<GenerateOptions> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl ModelProvider for ScriptedProvider {
    /// Replies come from memory.
    fn blocks(&self) -> bool {
        false
    }

    fn prepare(&self, config: LlmCallConfig) -> Result<PreparedCall, LlmError> {
        let mut prepared = PreparedCall::plain(config);
        prepared.context_window = self.context_window;
        Ok(prepared)
    }

    fn stream(
        &self,
        opts: &GenerateOptions,
        cancel: &CancelToken,
    ) -> Result<ChunkStream, LlmError> {
        if let Ok(mut r) = self.requests.lock() {
            r.push(opts.clone());
        }
        let next = self.replies.lock().ok().and_then(|mut r| r.pop_front());
        match next {
            Some(ScriptedReply::Chunks(chunks)) => {
                let cancel = cancel.clone();
                let mut it = chunks.into_iter();
                Ok(Box::new(core::iter::from_fn(move || {
                    if cancel.is_cancelled() {
                        return None;
                    }
                    it.next().map(Ok)
                })))
            }
            Some(ScriptedReply::Fail(e)) => Err(e),
            None => Err(LlmError::coded(
                "SCRIPT_EXHAUSTED",
                "the scripted provider has no reply left",
            )),
        }
    }
}

/// Why a call on a hosted runtime's agent handle (`dsh-std`, `dsh-smol`)
/// failed: one type for both, so code moving between them matches the
/// same variants and shows the same messages.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShellError {
    /// The session store failed.
    Store(dsh_store::StoreError),
    /// The core refused the input (duplicate id, invalid message, ...).
    Input(dsh_core::agent::InputError),
    /// The stored log cannot drive an agent.
    Resume(dsh_core::agent::ResumeError),
    /// The stored log failed seed validation.
    Seed(dsh_core::session::SeedError),
    /// The fork was refused (F4/F5/F7).
    Fork(dsh_core::session::ForkError),
    /// The configuration is unusable (workspace, tool definitions, adapter
    /// settings): what is wrong.
    Config(String),
    /// The agent has been disposed (its driver is gone).
    Disposed,
    /// `wait_idle` gave up before the agent went idle.
    Timeout,
    /// A thread could not be started: the OS error.
    Spawn(String),
    /// A plugin command failed or could not run (the agent is busy, no
    /// plugin answered it): the message.
    Command(String),
    /// The agent stopped with part of its log unwritten: the last failed
    /// store write's message (nothing may claim it was saved).
    NotSaved(String),
}

impl core::fmt::Display for ShellError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ShellError::Store(e) => write!(f, "session store: {e}"),
            ShellError::Input(e) => write!(f, "input refused: {e}"),
            ShellError::Resume(e) => write!(f, "cannot resume: {e}"),
            ShellError::Seed(e) => write!(f, "stored log is invalid: {e}"),
            ShellError::Fork(e) => write!(f, "cannot fork: {e}"),
            ShellError::Config(e) => write!(f, "invalid agent config: {e}"),
            ShellError::Disposed => f.write_str("the agent has been disposed"),
            ShellError::Timeout => f.write_str("timed out waiting for the agent to go idle"),
            ShellError::Spawn(e) => write!(f, "cannot start a thread: {e}"),
            ShellError::Command(e) => write!(f, "command failed: {e}"),
            ShellError::NotSaved(e) => write!(f, "the session log is not fully saved: {e}"),
        }
    }
}

impl std::error::Error for ShellError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShellError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<dsh_store::StoreError> for ShellError {
    fn from(e: dsh_store::StoreError) -> Self {
        ShellError::Store(e)
    }
}

impl From<KernelError> for ShellError {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Input(e) => ShellError::Input(e),
            KernelError::Resume(e) => ShellError::Resume(e),
            KernelError::Seed(e) => ShellError::Seed(e),
            KernelError::Fork(e) => ShellError::Fork(e),
            KernelError::Append(e) => ShellError::Input(dsh_core::agent::InputError::Append(e)),
            KernelError::Disposed => ShellError::Disposed,
            other => ShellError::Config(other.to_string()),
        }
    }
}
