//! Model providers: where the driver's `CallModel` requests go.

use std::collections::VecDeque;
use std::sync::Mutex;

use dsh_core::agent::PreparedCall;
use dsh_core::{GenerateOptions, LlmCallConfig, LlmError, StreamChunk};
use dsh_deepseek::{CancelToken, DeepSeekClient};

/// A boxed stream of chunks (or a terminal adapter error).
pub type ChunkStream = Box<dyn Iterator<Item = Result<StreamChunk, LlmError>> + Send>;

/// A model backend the std shell can stream from. The stream is read on its
/// own thread; `cancel` is fired when the core cancels the attempt, and the
/// stream must then end promptly.
pub trait ModelProvider: Send + Sync {
    /// Starts one model call. An `Err` (or an `Err` item) is turned into a
    /// terminal `finish` chunk by the shell (LC-27, AC-6).
    fn stream(&self, opts: &GenerateOptions, cancel: &CancelToken)
    -> Result<ChunkStream, LlmError>;

    /// `llm.prepareCall` (LC-15): the effective config, the route's retry
    /// policy and context window. Default: the config unchanged with the
    /// default retry policy and no known context window.
    fn prepare(&self, config: LlmCallConfig) -> Result<PreparedCall, LlmError> {
        Ok(PreparedCall::plain(config))
    }
}

impl ModelProvider for DeepSeekClient {
    fn stream(
        &self,
        opts: &GenerateOptions,
        cancel: &CancelToken,
    ) -> Result<ChunkStream, LlmError> {
        let s = DeepSeekClient::stream(self, opts, cancel)?;
        Ok(Box::new(s))
    }

    /// The model's context window from the catalog (or the configured
    /// default), logged on `request/context` (LC-18).
    fn prepare(&self, config: LlmCallConfig) -> Result<PreparedCall, LlmError> {
        let c = self.config();
        let window = c
            .model(&config.model)
            .and_then(|m| m.context_window)
            .unwrap_or(c.default_context_window);
        let mut prepared = PreparedCall::plain(config);
        prepared.context_window = Some(window);
        Ok(prepared)
    }
}

/// One scripted reply of a [`ScriptedProvider`].
#[derive(Clone, Debug)]
pub enum ScriptedReply {
    /// These chunks, in order.
    Chunks(Vec<StreamChunk>),
    /// The call fails before any chunk.
    Fail(LlmError),
}

/// An in-memory provider that serves scripted replies in order and records
/// every request (tests, core-level comparisons). When the script is
/// exhausted it fails with code `SCRIPT_EXHAUSTED`.
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

    /// Reports `window` as the route's context window from `prepare`
    /// (to stand in for a provider that knows it).
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
