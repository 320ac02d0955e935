//! Model providers: where the driver's `CallModel` requests go.

use std::collections::VecDeque;
use std::sync::Mutex;

use dsh_core::{GenerateOptions, LlmError, StreamChunk};
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
}

impl ScriptedProvider {
    /// A provider serving `replies` in order.
    pub fn new(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        ScriptedProvider {
            replies: Mutex::new(replies.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<GenerateOptions> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl ModelProvider for ScriptedProvider {
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
