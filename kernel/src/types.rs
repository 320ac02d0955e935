//! The kernel's configuration, effects, live events and errors.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::agent::tools::{ToolRegistry, ToolRegistryError};
use dsh_core::agent::{
    AgentOptions, AgentStatus, AttemptId, Checkpoint, InputError, ModelCall, RequestFill,
    ResumeError, ToolExecution, ToolToken,
};
use dsh_core::session::{
    AppendError, ForkError, HeaderError, SeedError, SessionEvent, TurnEndReason,
};
use dsh_core::{LlmCallConfig, TokenUsage};
use serde_json::Value;

use crate::ids::IdMode;

/// Everything the kernel needs to run one agent. The `call` config is
/// carried through whole: provider, model and `max_tokens` seed the first
/// request (LC-13), and `reasoning_effort`, `temperature` and `stop` fill
/// every request seed that lacks them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The call config of every request.
    pub call: LlmCallConfig,
    /// The system prompt, one section (`{{var}}` references are rendered).
    pub system_prompt: Option<String>,
    /// The tools visible to the model (plugins may add more).
    pub tools: ToolRegistry,
    /// Deadline of a tool body whose definition has no `timeoutMs`;
    /// `None` (the default): no deadline (TL-14).
    pub tool_timeout_ms: Option<u64>,
    /// How long a body that was told to stop (timeout, abort) may take to
    /// return before the kernel answers the call itself.
    pub tool_grace_ms: u64,
    /// The route's retry policy; `None`: the R-3 defaults.
    pub retry_policy: Option<RetryPolicy>,
    /// Run the `llm-retry` executor at the request-error seam (with
    /// feature `dsh-core/retry-executor`, a default one; read as false
    /// without it).
    pub retry_executor: bool,
    /// [HEAD Δ H-1] keep the delivered text of a cancelled stream.
    pub interrupted_prefix: bool,
    /// [HEAD Δ H-2] latch wakes that arrive while an aborted turn winds down.
    pub wake_latch: bool,
    /// How ids are minted.
    pub ids: IdMode,
    /// Seed of the id and jitter generators under [`IdMode::Uuid`].
    pub seed: u64,
    /// The write-behind window (persistence.md W2, `writeBatchMaxDelayMs`):
    /// events appended between checkpoints (a streaming response) are
    /// written at most this long after the first of them; `None`: only at
    /// checkpoints and when the agent goes quiet.
    pub write_batch_max_delay_ms: Option<u64>,
    /// The most one model response may add: the bytes of its
    /// text, reasoning and tool calls, plus [`CHUNK_OVERHEAD_BYTES`] for
    /// each chunk. Past it the stream is stopped and the turn ends in
    /// error `RESPONSE_TOO_LARGE`; what came before stays in the log.
    pub max_response_bytes: u64,
    /// The most steps one turn may take; `None`: no limit. At the
    /// pre-step of the next step the turn is cancelled with cause
    /// `{"kind":"hook","reason":"max steps per turn (N) reached"}`
    /// (loop.md SM-10 d).
    pub max_steps_per_turn: Option<u64>,
    /// Check every provider stream with
    /// [`StreamValidator`](dsh_core::StreamValidator) (streaming.md 2.5,
    /// the reference's development invariant checker). On the first error
    /// (warnings are allowed) the stream is stopped and the step ends in
    /// error `INVARIANT`, whose message names the rule (for example
    /// `G-3: text-delta for index 0, which is not open`). A stream that
    /// ends without a `finish` (G-8) is left as AC-8 says, and a
    /// `max-tokens` finish may leave blocks open (G-7), as the reference's
    /// recordings do (the assembler drops a cut tool call, BB-3). Default: on in debug
    /// builds (and so in tests), off in release builds. Acted on with
    /// feature `stream-validation` (default); read as false without it.
    pub validate_streams: bool,
}

/// The default of [`AgentConfig::max_response_bytes`]: 32 MiB, far above
/// any model's output limit.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 32 * 1024 * 1024;

/// What each chunk of a response counts towards
/// [`AgentConfig::max_response_bytes`] beyond its text: about what a
/// logged chunk event costs.
pub const CHUNK_OVERHEAD_BYTES: u64 = 64;

pub use dsh_core::agent::DEFAULT_MAX_STEPS_PER_TURN;

/// The default write-behind window (ms), persistence.md section 8.
pub const DEFAULT_WRITE_BATCH_MAX_DELAY_MS: u64 = 200;

/// The default grace after a tool was told to stop (ms).
pub const DEFAULT_TOOL_GRACE_MS: u64 = 2_000;

impl AgentConfig {
    /// A config for `call`: no system prompt, no tools, no default tool
    /// deadline, a 2 s grace, default retries, UUID ids from seed 0 (set
    /// [`seed`](Self::seed)), a 200 ms write-behind window, a 32 MiB
    /// response cap, and stream validation in debug builds only. The
    /// fields the core has too (the retry executor, both HEAD deltas, the
    /// step cap) take the core's one default set
    /// (`dsh_core::agent::AgentConfig::default()`: executor on, both deltas
    /// on, at most 200 steps per turn).
    pub fn new(call: LlmCallConfig) -> Self {
        let core = dsh_core::agent::AgentConfig::default();
        AgentConfig {
            call,
            system_prompt: None,
            tools: ToolRegistry::new(),
            tool_timeout_ms: None,
            tool_grace_ms: DEFAULT_TOOL_GRACE_MS,
            retry_policy: None,
            retry_executor: core.retry_executor,
            interrupted_prefix: core.interrupted_prefix,
            wake_latch: core.wake_latch,
            ids: IdMode::Uuid,
            seed: 0,
            write_batch_max_delay_ms: Some(DEFAULT_WRITE_BATCH_MAX_DELAY_MS),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_steps_per_turn: core.max_steps_per_turn,
            validate_streams: cfg!(debug_assertions),
        }
    }

    /// The core's configuration this config gives (without plugins).
    pub fn core_config(&self) -> Result<dsh_core::agent::AgentConfig, KernelError> {
        self.core_config_with(Vec::new(), Vec::new())
    }

    /// The core's configuration: this one plus the plugins' sections and
    /// tools.
    pub(crate) fn core_config_with(
        &self,
        sections: Vec<PromptSection>,
        tools: Vec<dsh_core::agent::tools::ToolDefinition>,
    ) -> Result<dsh_core::agent::AgentConfig, KernelError> {
        let mut registry = self.tools.clone();
        for t in tools {
            registry.register(t).map_err(KernelError::Tools)?;
        }
        let mut all = Vec::new();
        if let Some(text) = &self.system_prompt {
            all.push(PromptSection::new("system", 0, text.clone()));
        }
        all.extend(sections);
        let mut options = AgentOptions::default();
        options.provider = Some(self.call.provider.clone());
        options.model = Some(self.call.model.clone());
        options.max_tokens = self.call.max_tokens;
        let mut config = dsh_core::agent::AgentConfig::default();
        config.options = options;
        config.sections = all;
        config.tools = registry;
        config.retry_executor = self.retry_executor;
        config.interrupted_prefix = self.interrupted_prefix;
        config.wake_latch = self.wake_latch;
        config.request_fill = RequestFill::from_call(&self.call);
        config.retry_policy = self.retry_policy.clone().unwrap_or_default();
        config.max_steps_per_turn = self.max_steps_per_turn;
        Ok(config)
    }
}

/// Identifies one pending ask (an approval request, a plugin ask, a side
/// model call): pass it back with [`Kernel::answer`](crate::Kernel::answer).
/// Display shows the bare number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AskId(u64);

impl AskId {
    /// The ask numbered `n` (tests and harnesses; the kernel issues the
    /// real ones).
    pub const fn new(n: u64) -> Self {
        Self(n)
    }

    /// Its number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl core::fmt::Display for AskId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.0, f)
    }
}

/// The former name of [`AskId`] (an approval request is one kind of ask).
pub type ApprovalRequestId = AskId;

/// A live event of an agent: what subscribers of every runtime see.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AgentEvent {
    /// The public status changed (LC-3).
    Status(AgentStatus),
    /// A session event was appended (every event, in seq order; chunks
    /// included, so this is the live text).
    Event(Arc<SessionEvent>),
    /// A tool call waits for an approval decision.
    ApprovalRequested {
        /// Pass back with the decision.
        id: AskId,
        /// The call's id (`tool/call.callId`).
        call_id: String,
        /// The tool name.
        tool: String,
        /// The raw argument text.
        arguments: String,
        /// Why the policy asks, when it gave a reason.
        reason: Option<String>,
    },
    /// A plugin asks the front end something.
    Asked {
        /// Pass back with the reply.
        id: AskId,
        /// The plugin.
        plugin: String,
        /// What it asks.
        request: Value,
    },
    /// A plugin command ([`Kernel::command`](crate::Kernel::command))
    /// finished: its result, or the failure's message.
    CommandDone {
        /// The command's id ([`Kernel::command`](crate::Kernel::command)
        /// returned it): callers are answered by id, not by order.
        id: u64,
        /// The command's name.
        name: String,
        /// The result.
        result: Result<Value, String>,
    },
    /// A failure with no log position: `agent/error`, a store write, a
    /// refused plugin append.
    Error(String),
}

/// How the last turn ended.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct TurnSummary {
    /// The last turn number (0: none yet).
    pub turn: u64,
    /// The `turn/end` reason of that turn, if one was written.
    pub reason: Option<TurnEndReason>,
    /// The usage of the turn's last assistant message that had one.
    pub usage: Option<TokenUsage>,
    /// The message of the last failed session-store write while part of
    /// the log is still unwritten (cleared by the next write that
    /// succeeds): what the front end must report instead of "saved".
    pub store_error: Option<String>,
}

/// Something for the runtime to do. Drain with
/// [`Kernel::poll`](crate::Kernel::poll) after every input.
#[derive(Clone, Debug)]
#[non_exhaustive]
#[allow(clippy::large_enum_variant)] // drained one at a time, never stored in bulk
#[must_use = "an effect is work the runtime must carry out"]
pub enum Effect {
    /// Start a model stream; feed it back with
    /// [`model_chunk`](crate::Kernel::model_chunk) and
    /// [`model_end`](crate::Kernel::model_end) tagged with `call.attempt`.
    StartModel(ModelCall),
    /// Stop the stream of this attempt; its later chunks are refused as
    /// stale.
    CancelModel {
        /// The attempt.
        attempt: AttemptId,
    },
    /// Run a tool body; answer with [`tool_done`](crate::Kernel::tool_done).
    /// Several may be in flight at once (by token).
    StartTool {
        /// The call (arguments possibly rewritten by a `tools/execute`
        /// plugin).
        exec: ToolExecution,
        /// The deadline the body may enforce itself (bash passes it to its
        /// executor); the kernel enforces it too (TL-14).
        timeout_ms: Option<u64>,
    },
    /// Tell the body of this call to stop (its cancel signal).
    CancelTool {
        /// The call's token.
        token: ToolToken,
    },
    /// Carry out a plugin's side model call ([`Ask::Model`](crate::Ask::Model))
    /// with the agent's provider; fold the stream with
    /// [`SideCollector`](crate::SideCollector) and answer
    /// [`Kernel::answer`](crate::Kernel::answer)`(id, Reply::Model(..))`.
    SideModel {
        /// The ask id to answer.
        id: AskId,
        /// The asking plugin.
        plugin: String,
        /// The request.
        request: dsh_core::GenerateOptions,
    },
    /// Stop side call `id` (its ask was withdrawn: the turn was aborted or
    /// the agent is being disposed). Its answer, if one still comes, is
    /// refused as stale.
    CancelSide {
        /// The ask id of the side call.
        id: AskId,
    },
    /// Write `session.events()[range]` durably as one batch, then report
    /// with [`persisted`](crate::Kernel::persisted). No other effect is
    /// released until then: with a checkpoint this is the flush barrier
    /// (SM-12 to SM-14).
    Persist {
        /// Seqs to write.
        range: Range<u64>,
        /// The durability checkpoint, `None` for the write when the agent
        /// goes quiet or is disposed.
        checkpoint: Option<Checkpoint>,
    },
    /// Tell subscribers.
    Publish(AgentEvent),
    /// Disposal finished: nothing runs, and every event is persisted
    /// unless the last write failed, which [`Kernel::store_error`] then
    /// reports. Emitted once; the runtime may drop the kernel.
    ///
    /// [`Kernel::store_error`]: crate::Kernel::store_error
    Finished,
}

/// Why a kernel call failed. The kernel is unchanged when this is
/// returned. [`KernelError::is_stale`] tells the harmless refusals (a chunk
/// of a cancelled attempt, a result after the kernel answered a call
/// itself, an answer to a withdrawn ask) from misuse.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum KernelError {
    /// A chunk or stream end for an attempt that is not in flight.
    StaleAttempt {
        /// The attempt named.
        attempt: AttemptId,
    },
    /// A tool result for a call that is not in flight (answered already,
    /// or unknown).
    StaleTool {
        /// The token named.
        token: ToolToken,
    },
    /// An answer for an ask that is not pending.
    StaleAsk {
        /// The id named.
        id: AskId,
    },
    /// A reply of the wrong kind for the pending ask.
    WrongReply,
    /// `persisted` without a pending `Persist` effect.
    NoPersistPending,
    /// The agent is being disposed.
    Disposed,
    /// The core refused the input.
    Input(InputError),
    /// A tool definition (of the config or a plugin) was refused.
    Tools(ToolRegistryError),
    /// The session header is invalid.
    Header(HeaderError),
    /// The stored log cannot drive an agent.
    Resume(ResumeError),
    /// The stored log failed seed validation.
    Seed(SeedError),
    /// The fork was refused (F4/F5/F7).
    Fork(ForkError),
    /// The session refused an event (the end-seed marker).
    Append(AppendError),
    /// Plugins were given to a build without the plugin chain (feature
    /// `plugins` off).
    #[cfg(not(feature = "plugins"))]
    NoPluginChain,
}

impl KernelError {
    /// Whether this is a harmless refusal a runtime may drop: an input
    /// that raced with a cancel, a timeout or an abort.
    pub fn is_stale(&self) -> bool {
        matches!(
            self,
            KernelError::StaleAttempt { .. }
                | KernelError::StaleTool { .. }
                | KernelError::StaleAsk { .. }
        )
    }
}

#[cfg(feature = "error-texts")]
impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::StaleAttempt { attempt } => {
                write!(f, "model attempt {attempt} is not in flight")
            }
            KernelError::StaleTool { token } => write!(f, "tool call {token} is not in flight"),
            KernelError::StaleAsk { id } => write!(f, "no ask {id} is pending"),
            KernelError::WrongReply => f.write_str("the reply does not match the pending ask"),
            KernelError::NoPersistPending => f.write_str("no persist effect is pending"),
            KernelError::Disposed => f.write_str("the agent is being disposed"),
            KernelError::Input(e) => write!(f, "{e}"),
            KernelError::Tools(e) => write!(f, "tool registry: {e}"),
            KernelError::Header(e) => write!(f, "invalid session header: {e}"),
            KernelError::Resume(e) => write!(f, "cannot resume: {e}"),
            KernelError::Seed(e) => write!(f, "stored log is invalid: {e}"),
            KernelError::Fork(e) => write!(f, "cannot fork: {e}"),
            KernelError::Append(e) => write!(f, "the session refused the event: {e}"),
            #[cfg(not(feature = "plugins"))]
            KernelError::NoPluginChain => {
                f.write_str("this build has no plugin chain (feature `plugins` is off)")
            }
        }
    }
}

/// Feature `error-texts` off: a fixed text per variant; the core's input
/// and append errors print their own (short) texts.
#[cfg(not(feature = "error-texts"))]
impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KernelError::StaleAttempt { .. } => "stale model attempt",
            KernelError::StaleTool { .. } => "stale tool call",
            KernelError::StaleAsk { .. } => "stale ask",
            KernelError::WrongReply => "the reply does not match the pending ask",
            KernelError::NoPersistPending => "no persist effect is pending",
            KernelError::Disposed => "the agent is being disposed",
            KernelError::Input(e) => return fmt::Display::fmt(e, f),
            KernelError::Tools(_) => "tool registry refused a tool",
            KernelError::Header(_) => "invalid session header",
            KernelError::Resume(_) => "cannot resume",
            KernelError::Seed(_) => "stored log is invalid",
            KernelError::Fork(_) => "cannot fork",
            KernelError::Append(e) => return fmt::Display::fmt(e, f),
            #[cfg(not(feature = "plugins"))]
            KernelError::NoPluginChain => "this build has no plugin chain",
        })
    }
}

impl core::error::Error for KernelError {}

impl From<InputError> for KernelError {
    fn from(e: InputError) -> Self {
        KernelError::Input(e)
    }
}

#[cfg(test)]
mod tests {
    use super::KernelError;
    use alloc::string::ToString;
    use dsh_core::agent::InputError;

    /// The default build's texts wrap the inner error's text; with
    /// `error-texts` off, a fixed text per variant (the core's input errors
    /// print their own).
    #[test]
    fn kernel_error_texts() {
        let input = KernelError::Input(InputError::UnknownHook { id: 7 });
        assert_eq!(
            KernelError::WrongReply.to_string(),
            "the reply does not match the pending ask"
        );
        #[cfg(feature = "error-texts")]
        assert_eq!(input.to_string(), "no pending hook has id 7");
        #[cfg(not(feature = "error-texts"))]
        assert_eq!(input.to_string(), "unknown hook");
    }
}
