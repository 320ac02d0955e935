//! Request errors and the retry executor (LC-26, streaming.md 6).

use super::{Agent, ErrorPhase, Failed, Stage, ceil_ms};
use crate::agent::hooks::{HookError, Recovery, RequestErrorPayload};
use crate::agent::io::{HookAnswer, HookCall};
use crate::agent::retry::{RetryPolicy, RetryRecord, RetrySchedule};
use crate::session::{EventData, LlmRetry};
use crate::time::Time;
use alloc::boxed::Box;
use alloc::string::String;

impl Agent {
    // ------------------------------------------------------------------
    // Request errors and retry (LC-26, streaming.md 6)

    pub(super) fn request_failed(&mut self, now: Time, failed: Failed) {
        let executor = cfg!(feature = "retry-executor")
            && self.config.retry_executor
            && failed.policy.is_some();
        let always = matches!(failed.policy, Some(RetryPolicy::Always { .. }));
        if executor && always {
            self.ask_request_error(now, failed, ErrorPhase::AlwaysFirst);
            return;
        }
        if executor && let Some(record) = self.schedule_retry(&failed) {
            self.start_retry_wait(now, record);
            return;
        }
        self.ask_request_error(now, failed, ErrorPhase::Final);
    }

    pub(super) fn ask_request_error(&mut self, now: Time, failed: Failed, phase: ErrorPhase) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let (turn, step) = self.coords();
        let payload = RequestErrorPayload {
            turn,
            step,
            provider: failed.provider.clone(),
            failure: failed.failure.clone(),
            retry_policy: failed.policy.clone(),
        };
        let call = HookCall::RequestError {
            payload,
            value: Recovery::GiveUp,
        };
        self.raise(now, call, move |a, now, answer| {
            if let HookAnswer::RequestError(r) = answer {
                a.request_error_done(now, failed, phase, r);
            }
        });
    }

    /// LC-26.
    pub(super) fn request_error_done(
        &mut self,
        now: Time,
        failed: Failed,
        phase: ErrorPhase,
        result: Result<Recovery, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        match (result, phase) {
            (Ok(Recovery::Retry), _) => self.request(now),
            (_, ErrorPhase::AlwaysFirst) => match self.schedule_retry(&failed) {
                Some(record) => self.start_retry_wait(now, record),
                None => self.turn_error(now, HookError::Llm(failed.failure)),
            },
            (Ok(Recovery::GiveUp), ErrorPhase::Final) => {
                self.turn_error(now, HookError::Llm(failed.failure))
            }
            (Err(e), ErrorPhase::Final) => self.turn_error(now, e),
        }
    }

    /// R-10..R-13: the executor's own retry, if the policy grants one.
    /// None without feature `retry-executor`.
    pub(super) fn schedule_retry(&mut self, failed: &Failed) -> Option<RetryRecord> {
        if !cfg!(feature = "retry-executor") {
            return None;
        }
        let policy = failed.policy.clone()?;
        let (turn, step) = self.coords();
        let key = policy.policy_key();
        let previous = self
            .session
            .events()
            .iter()
            .rev()
            .find_map(|e| match e.data() {
                EventData::LlmRetry(r)
                    if r.turn == turn
                        && r.step == step
                        && r.provider == failed.provider
                        && r.policy_key == key =>
                {
                    Some((r.retry, r.retry_id.clone()))
                }
                _ => None,
            });
        let sample = self.jitter.sample();
        let previous_retry = previous.as_ref().map_or(0, |p| p.0);
        match policy.schedule(&failed.failure, previous_retry, sample) {
            RetrySchedule::Delegate => None,
            RetrySchedule::Retry { retry, delay_ms } => {
                let retry_id = match previous.and_then(|p| p.1) {
                    Some(id) => id,
                    None => self.ids.retry_id(),
                };
                Some(RetryRecord {
                    retry_id,
                    turn,
                    step,
                    provider: failed.provider.clone(),
                    policy,
                    retry,
                    delay_ms,
                    failure: failed.failure.clone(),
                })
            }
        }
    }

    pub(super) fn start_retry_wait(&mut self, now: Time, record: RetryRecord) {
        let data = LlmRetry {
            retry_id: Some(record.retry_id.clone()),
            turn: record.turn,
            step: record.step,
            provider: record.provider.clone(),
            mode: String::from(record.policy.mode()),
            policy_key: record.policy.policy_key(),
            retry: record.retry,
            max_retries: record.policy.max_retries(),
            delay_ms: record.delay_ms,
            failure: record.failure.clone(),
        };
        self.append(now, data, None);
        let deadline = now.add_millis(ceil_ms(record.delay_ms));
        self.set_stage(Stage::RetryWait {
            deadline,
            record: Box::new(record),
        });
    }
}
