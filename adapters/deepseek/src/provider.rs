//! [`DeepSeekClient`] as a host [`ModelProvider`](dsh_host::ModelProvider).

use alloc::boxed::Box;

use dsh_core::agent::PreparedCall;
use dsh_core::{GenerateOptions, LlmCallConfig, LlmError};
use dsh_host::{CancelToken, ChunkStream, ModelProvider};

use crate::client::DeepSeekClient;

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
