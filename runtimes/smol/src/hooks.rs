//! The seams the shell installs on its core machine.

use std::sync::{Arc, Mutex};

use dsh_core::LlmCallConfig;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::{
    ApprovalOutcome, Hook, HookCx, HookError, Hooks, PreToolDecision, PreparedCall, ToolExecution,
};
use dsh_tools::ApprovalPolicy;

/// The approval policy at `tools/pre-execute` with every `ask` deferred to
/// the shell (as `dsh_tools::PolicyHooks`), the route's retry policy at
/// `prepare`, and the configured effort / temperature / stop filled into
/// each request seed.
pub(crate) struct ShellHooks {
    pub policy: Arc<Mutex<ApprovalPolicy>>,
    pub retry_policy: RetryPolicy,
    pub call_config: LlmCallConfig,
}

impl Hooks for ShellHooks {
    fn request(
        &mut self,
        _cx: &mut HookCx<'_>,
        _turn: u64,
        _step: u64,
        mut seed: LlmCallConfig,
    ) -> Hook<Result<LlmCallConfig, HookError>> {
        if seed.reasoning_effort.is_none() {
            seed.reasoning_effort = self.call_config.reasoning_effort.clone();
        }
        if seed.temperature.is_none() {
            seed.temperature = self.call_config.temperature;
        }
        if seed.stop.is_none() {
            seed.stop = self.call_config.stop.clone();
        }
        Hook::Ready(Ok(seed))
    }

    fn prepare(
        &mut self,
        _cx: &mut HookCx<'_>,
        config: LlmCallConfig,
    ) -> Hook<Result<PreparedCall, HookError>> {
        let mut prepared = PreparedCall::plain(config);
        prepared.retry_policy = Some(self.retry_policy.clone());
        Hook::Ready(Ok(prepared))
    }

    fn tool_pre_execute(
        &mut self,
        _cx: &mut HookCx<'_>,
        exec: &ToolExecution,
    ) -> Hook<Result<PreToolDecision, HookError>> {
        let policy = self.policy.lock().unwrap_or_else(|e| e.into_inner());
        Hook::Ready(Ok(policy.pre_execute(&exec.name)))
    }

    fn tool_approval(
        &mut self,
        _cx: &mut HookCx<'_>,
        _exec: &ToolExecution,
        _reason: Option<&str>,
    ) -> Hook<ApprovalOutcome> {
        Hook::Defer
    }
}
