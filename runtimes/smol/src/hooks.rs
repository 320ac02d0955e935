//! The seams the shell installs on its core machine.

use dsh_core::LlmCallConfig;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::{
    ApprovalOutcome, Hook, HookCx, HookError, Hooks, PreToolDecision, PreparedCall, ToolExecution,
};

use crate::tools::{ApprovalMode, ApprovalPolicy};

/// Approval policy at `tools/pre-execute`, a deferred approval service,
/// the route's retry policy at `prepare`, and the configured effort /
/// temperature / stop filled into each request seed.
pub(crate) struct ShellHooks {
    pub approval: ApprovalPolicy,
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
        Hook::Ready(Ok(match self.approval.mode(&exec.name) {
            ApprovalMode::Auto => PreToolDecision::Allow,
            ApprovalMode::Ask => PreToolDecision::Ask { reason: None },
            ApprovalMode::Deny => PreToolDecision::Deny {
                reason: format!("tool \"{}\" is denied by the approval policy", exec.name),
            },
        }))
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
