//! The turn/step state machine (loop.md §2) and the Agent surface (§3).

use crate::time::Time;
use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::assembler::BlockAssembler;
use crate::chunk::LlmFailure;
use crate::content::ContentBlock;
use crate::ids::SessionId;
use crate::message::{Message, Role};
use crate::options::{LlmCallConfig, ToolSchema};
use crate::session::{EventData, Session, SessionEvent, SurfaceIntent};

use super::handle::{AttemptId, ToolToken};
use super::hooks::{CancelCause, FixedJitter, Hook, IdSource, JitterSource, SequentialIds};
use super::inbox::{Inbox, InboxTarget};
use super::io::{AgentStatus, HookAnswer, HookCall, InputError, Output};
use super::prompt::PromptSection;
use super::retry::{RetryPolicy, RetryRecord};
use super::seams::Seams;
use super::tools::ToolRegistry;

mod inbox;
mod inputs;
mod recovery;
mod step;
mod tools;
mod turn;

use tools::{PlannedCall, ToolPhase};

/// The agent's request options (IB-13).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentOptions {
    /// Provider route of the first request (LC-13).
    pub provider: Option<String>,
    /// Model of the first request.
    pub model: Option<String>,
    /// Output cap of the first request (a positive safe integer).
    pub max_tokens: Option<u64>,
}

/// Request fields that fill every request seed lacking them (the
/// `request` seam's default value, LC-13).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct RequestFill {
    /// Reasoning effort id.
    pub reasoning_effort: Option<crate::ids::ReasoningEffortId>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Stop sequences.
    pub stop: Option<Vec<String>>,
}

impl RequestFill {
    /// The fields of `call` that fill a seed (`reasoning_effort`,
    /// `temperature`, `stop`).
    pub fn from_call(call: &LlmCallConfig) -> Self {
        RequestFill {
            reasoning_effort: call.reasoning_effort.clone(),
            temperature: call.temperature,
            stop: call.stop.clone(),
        }
    }

    /// `seed` with every field it lacks taken from this fill.
    pub fn fill(&self, mut seed: LlmCallConfig) -> LlmCallConfig {
        if seed.reasoning_effort.is_none() {
            seed.reasoning_effort = self.reasoning_effort.clone();
        }
        if seed.temperature.is_none() {
            seed.temperature = self.temperature;
        }
        if seed.stop.is_none() {
            seed.stop = self.stop.clone();
        }
        seed
    }
}

/// Everything an [`Agent`] is configured with: the one config of the core
/// layer.
///
/// [`Default`] is the one default set, which the kernel's config starts
/// from too: no options, sections, contexts, variables or tools; the
/// retry executor on; both HEAD deltas on (the reference's newest
/// behaviour, H-1 and H-2); at most
/// [`DEFAULT_MAX_PARALLEL_TOOL_CALLS`] calls in flight; no seam claimed;
/// no request fill; the R-3 retry policy; at most
/// [`DEFAULT_MAX_STEPS_PER_TURN`] steps per turn. The loop.md test
/// vectors (fixture F0) turn the executor and both deltas off explicitly.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// Request options.
    pub options: AgentOptions,
    /// System-prompt sections of the default assembly (SP-2).
    pub sections: Vec<PromptSection>,
    /// Dynamic context sections of the default assembly (LC-12, SP-5). Not
    /// sent without feature `runtime-context` (default).
    pub contexts: Vec<PromptSection>,
    /// Extra template variables (`provider`, `model` and `cwd` are added).
    /// Not read without feature `prompt-templates` (default), which leaves
    /// interpolation out.
    pub variables: BTreeMap<String, Option<String>>,
    /// The tools visible to this agent.
    pub tools: ToolRegistry,
    /// `toolOrder` (SP-4); `None` orders tools by name. Not read without
    /// feature `tool-order` (default).
    pub tool_order: Option<Vec<String>>,
    /// Run the `llm-retry` executor (streaming.md 6) at the request-error
    /// seam, logging `llm/retry` and `llm/retry-started`. Needs feature
    /// `retry-executor` (default); without it the executor is left out of
    /// the build and this is read as false.
    pub retry_executor: bool,
    /// [HEAD Δ H-1] Keep the delivered text of a cancelled stream as an
    /// `assistant/message` with `interrupted: true`. Acted on with feature
    /// `head-deltas` (default); read as false without it.
    pub interrupted_prefix: bool,
    /// [HEAD Δ H-2] Latch wakes that arrive while an aborted activity
    /// winds down, and start a new driver when it stops. Acted on with
    /// feature `head-deltas` (default); read as false without it.
    pub wake_latch: bool,
    /// `maxParallelToolCalls` (LC-24): how many calls of a parallel group
    /// may be in flight at once; read when a group starts (H-3). Default
    /// 10; 0 counts as 1. Tools not marked
    /// [`concurrency_safe`](super::tools::ToolDefinition::concurrency_safe)
    /// always run alone (LC-23).
    pub max_parallel_tool_calls: usize,
    /// The seams the embedder answers: each is raised as
    /// [`Output::Hook`] and waits for [`Agent::complete_hook`]; every other
    /// seam takes its spec default at once (the [seam table](super::seams)).
    pub seams: Seams,
    /// Fills every request seed (the `request` seam's default value).
    pub request_fill: RequestFill,
    /// The retry policy of the `prepare` seam's default value.
    pub retry_policy: RetryPolicy,
    /// The most steps one turn may take; `None`: no limit. At the
    /// pre-step of the next step the turn is cancelled with cause
    /// `{"kind":"hook","reason":"max steps per turn (N) reached"}`
    /// (loop.md SM-10 d), before any `pre_step` seam runs.
    pub max_steps_per_turn: Option<u64>,
}

/// The default `maxParallelToolCalls` (LC-24).
pub const DEFAULT_MAX_PARALLEL_TOOL_CALLS: usize = 10;

/// The default of [`AgentConfig::max_steps_per_turn`].
pub const DEFAULT_MAX_STEPS_PER_TURN: u64 = 200;

impl AgentConfig {
    /// [`interrupted_prefix`](Self::interrupted_prefix), with feature
    /// `head-deltas` (default); false without it.
    pub(crate) fn keeps_interrupted_prefix(&self) -> bool {
        cfg!(feature = "head-deltas") && self.interrupted_prefix
    }

    /// [`wake_latch`](Self::wake_latch), with feature `head-deltas`
    /// (default); false without it.
    pub(crate) fn latches_wakes(&self) -> bool {
        cfg!(feature = "head-deltas") && self.wake_latch
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            options: AgentOptions::default(),
            sections: Vec::new(),
            contexts: Vec::new(),
            variables: BTreeMap::new(),
            tools: ToolRegistry::default(),
            tool_order: None,
            retry_executor: true,
            interrupted_prefix: true,
            wake_latch: true,
            max_parallel_tool_calls: DEFAULT_MAX_PARALLEL_TOOL_CALLS,
            seams: Seams::NONE,
            request_fill: RequestFill::default(),
            retry_policy: RetryPolicy::default(),
            max_steps_per_turn: Some(DEFAULT_MAX_STEPS_PER_TURN),
        }
    }
}

/// Why a stored log cannot be resumed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ResumeError {
    /// The log ends inside turn `turn` (run crash repair first).
    OpenTurn {
        /// The open turn.
        turn: u64,
    },
    /// An `agent/inbox/spliced` event cannot be replayed (IB-8).
    Inbox {
        /// Its seq.
        seq: u64,
        /// Why.
        error: super::inbox::InboxError,
    },
    /// `options.maxTokens` is not a positive safe integer (IB-13).
    MaxTokens,
}

impl core::fmt::Display for ResumeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ResumeError::OpenTurn { turn } => {
                write!(
                    f,
                    "the log ends inside turn {turn}; repair it before resuming"
                )
            }
            ResumeError::Inbox { seq, error } => {
                write!(f, "inbox splice at seq {seq} cannot be replayed: {error}")
            }
            ResumeError::MaxTokens => {
                f.write_str("agent maxTokens must be a positive safe integer")
            }
        }
    }
}

impl core::error::Error for ResumeError {}

/// How a completed step ended (LC-2 `turn_end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepEnd {
    Completed,
    MaxTokens,
}

enum Phase {
    Idle {
        last_turn: u64,
    },
    Maintenance {
        last_turn: u64,
        aborted: Option<CancelCause>,
        wake_requested: bool,
    },
    Running(Box<Run>),
}

struct Run {
    turn: u64,
    /// The last opened step (0 before the first).
    step: u64,
    step_open: bool,
    abort: Option<CancelCause>,
    turn_end: Option<StepEnd>,
    target: InboxTarget,
    wake_requested: bool,
    /// System prompt and tools of the open step.
    system: String,
    tools: Vec<ToolSchema>,
    stage: Stage,
}

struct Stream {
    attempt: AttemptId,
    assembler: BlockAssembler,
    chunk_seqs: Vec<u64>,
    provider: String,
    model: String,
    policy: Option<RetryPolicy>,
}

/// Where the request-error seam is (streaming.md ).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ErrorPhase {
    /// The user hook runs after the executor delegated (or without one).
    Final,
    /// Always mode: the user hook runs first; the executor follows.
    AlwaysFirst,
}

struct Failed {
    failure: LlmFailure,
    provider: String,
    policy: Option<RetryPolicy>,
}

enum Stage {
    /// Transient, while an input is being processed.
    Busy,
    /// A claimed seam is pending (`Output::Hook`); `resume` takes its
    /// answer.
    Seam {
        hook: u64,
        name: &'static str,
        resume: Resume,
    },
    Streaming(Box<Stream>),
    RetryWait {
        deadline: Time,
        record: Box<RetryRecord>,
    },
    Tools(Box<ToolPhase>),
}

/// What the machine does with a seam's answer (the rest of its step).
type Resume = Box<dyn FnOnce(&mut Agent, Time, HookAnswer) + Send>;

/// The agent loop (loop.md) as a sans-IO state machine. See the [module
/// docs](super) for a driving loop.
///
/// # Contract
///
/// **Inputs** are the `&mut self` methods that take `now`: user input
/// ([`send`](Self::send), [`followup`](Self::followup),
/// [`steer`](Self::steer), [`inject`](Self::inject),
/// [`cancel`](Self::cancel), [`edit_inbox`](Self::edit_inbox)),
/// completions ([`handle_chunk`](Self::handle_chunk),
/// [`handle_stream_end`](Self::handle_stream_end),
/// [`handle_stream_error`](Self::handle_stream_error),
/// [`handle_tool_result`](Self::handle_tool_result),
/// [`handle_tool_failure`](Self::handle_tool_failure),
/// [`complete_hook`](Self::complete_hook)), the timer
/// ([`handle_timeout`](Self::handle_timeout)) and plugin calls
/// ([`append_event`](Self::append_event),
/// [`begin_maintenance`](Self::begin_maintenance),
/// [`end_maintenance`](Self::end_maintenance)). Each runs to completion
/// synchronously. A seam in [`AgentConfig::seams`] is raised as
/// [`Output::Hook`]; while it is pending the shell may feed other inputs
/// (append events, `send`, `cancel`), which land before its answer.
///
/// **Outputs** are queued in the order they arise and taken with
/// [`poll`](Self::poll). [`Output::Appended`] for new events always comes
/// before the output that follows them (the `tool/call` is announced
/// before its [`Output::ExecuteTool`]), so a shell that persists appended
/// events as it polls writes ahead of every effect it starts.
///
/// **Drain before the next input.** After every input, call `poll` until
/// it returns `None`, act on (or hand off) each output, then read
/// [`poll_timeout`](Self::poll_timeout) again: it may have changed. Only
/// then feed the next input. Answers always name what they answer (an
/// attempt, a tool token, a hook id), so completions of several outputs
/// may come back in any order: the outputs of a parallel tool group
/// ([`Output::ExecuteTool`] several times before any result, LC-24) are
/// answered by token as each body ends.
///
/// **`now`** is wall-clock time in epoch milliseconds, supplied by the
/// shell; the core has no clock. It becomes the `time` of the events the
/// input appends (written as given) and the base of the retry deadline
/// (`deadline = now + delay`). It need not be monotonic and a step back is
/// never an error: event times follow it, and a timer simply fires when
/// a later `now` reaches its deadline (a clock that goes back delays a
/// retry, one that jumps ahead fires it early). Pass a non-decreasing
/// clock for sensible logs.
///
/// **Refusals.** An input that does not fit the current state returns an
/// [`InputError`] and changes nothing. [`InputError::is_benign`] tells a
/// harmless race (a chunk of a cancelled attempt, a tool result or hook
/// answer that arrives after its call or turn ended) from misuse that
/// deserves a report. [`handle_timeout`](Self::handle_timeout) is
/// idempotent: a spurious or duplicate wake-up is `Ok` and does nothing.
///
/// **Determinism.** Ids come from the [`IdSource`], jitter from the
/// [`JitterSource`], time from `now`: the same inputs in the same order
/// give a byte-identical log.
pub struct Agent {
    id: SessionId,
    config: AgentConfig,
    session: Session,
    ids: Box<dyn IdSource + Send>,
    jitter: Box<dyn JitterSource + Send>,
    inbox: Inbox,
    phase: Phase,
    outputs: VecDeque<Output>,
    announced: u64,
    counter: u64,
    header_logged: bool,
    /// The newest runtime-context `user/message` seen (seq, text), and how
    /// far the log has been scanned for one (LC-12).
    newest_context: Option<(u64, String)>,
    scanned: u64,
    faults: Vec<String>,
}

impl core::fmt::Debug for Agent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .field("status", &self.status())
            .field("events", &self.session.len())
            .finish_non_exhaustive()
    }
}

/// Event types only the loop writes; [`Agent::append_event`] refuses them.
pub(crate) fn is_loop_owned(event_type: &str) -> bool {
    matches!(
        event_type,
        "turn/start"
            | "turn/end"
            | "step/start"
            | "step/end"
            | "assistant/chunk"
            | "assistant/message"
            | "tool/call"
            | "request/header"
            | "request/context"
            | "agent/inbox/spliced"
            | "session/end-seed"
    )
}

/// Appends a foreign (plugin, tool-owned or surface-replacement) event.
pub(crate) fn append_foreign(
    session: &mut Session,
    now: Time,
    data: EventData,
    intent: Option<SurfaceIntent>,
) -> Result<u64, InputError> {
    append_foreign_marked(session, now, data, intent, false)
}

/// [`append_foreign`], with the envelope marked `"ignorable": true` when
/// `ignorable` is set (session.md E7): a replayed foreign event keeps the
/// flag it was recorded with.
pub(crate) fn append_foreign_marked(
    session: &mut Session,
    now: Time,
    data: EventData,
    intent: Option<SurfaceIntent>,
    ignorable: bool,
) -> Result<u64, InputError> {
    let ty = data.event_type();
    if is_loop_owned(ty) {
        return Err(InputError::LoopOwnedType(ty.to_string()));
    }
    // A user/message or tool/result from outside may only replace surface
    // nodes (compaction, pruning); live appends belong to the loop.
    if matches!(data, EventData::UserMessage(_) | EventData::ToolResult(_))
        && !matches!(
            intent.as_ref().map(|i| i.op),
            Some(crate::session::SurfaceOp::Replace { .. })
        )
    {
        return Err(InputError::LoopOwnedType(ty.to_string()));
    }
    let mut event = SessionEvent::new(session.len(), now.as_millis(), data);
    if let Some(intent) = intent {
        event = event.with_surface(intent.op, intent.sources);
    }
    if ignorable {
        event = event.with_ignorable();
    }
    session
        .append_event(event)
        .map(SessionEvent::seq)
        .map_err(InputError::Append)
}

fn ceil_ms(delay: f64) -> u64 {
    if !delay.is_finite() || delay <= 0.0 {
        return 0;
    }
    let d = delay as u64;
    if (d as f64) < delay {
        d.saturating_add(1)
    } else {
        d
    }
}

fn message_text(m: &Message) -> String {
    let mut out = String::new();
    for b in &m.content {
        if let ContentBlock::Text { text } = b {
            out.push_str(text);
        }
    }
    out
}

impl Agent {
    /// An agent over `session` with [`SequentialIds`] and
    /// [`FixedJitter`]. A session with history is resumed (V30): turn
    /// numbering continues, the inbox is rebuilt from the
    /// `agent/inbox/spliced` events after `seedLength` (IB-8), and the
    /// status is idle with nothing emitted.
    pub fn new(config: AgentConfig, session: Session) -> Result<Agent, ResumeError> {
        if config
            .options
            .max_tokens
            .is_some_and(|m| m == 0 || m > crate::json::MAX_SAFE_INTEGER)
        {
            return Err(ResumeError::MaxTokens);
        }
        let mut last_turn = 0;
        let mut open: Option<u64> = None;
        let mut inbox = Inbox::new();
        let seed_length = session.header().seed_length.unwrap_or(0);
        for e in session.events() {
            match e.data() {
                EventData::TurnStart(t) => {
                    last_turn = t.turn;
                    open = Some(t.turn);
                }
                EventData::TurnEnd(_) => open = None,
                EventData::InboxSpliced(s) if e.seq() >= seed_length => {
                    inbox
                        .replay_spliced(s)
                        .map_err(|error| ResumeError::Inbox {
                            seq: e.seq(),
                            error,
                        })?;
                }
                _ => {}
            }
        }
        if let Some(turn) = open {
            return Err(ResumeError::OpenTurn { turn });
        }
        let announced = session.len();
        let id = session.id().clone();
        let agent = Agent {
            id,
            config,
            session,
            ids: Box::new(SequentialIds::default()),
            jitter: Box::new(FixedJitter::default()),
            inbox,
            phase: Phase::Idle { last_turn },
            outputs: VecDeque::new(),
            announced,
            counter: 0,
            header_logged: false,
            newest_context: None,
            scanned: 0,
            faults: Vec::new(),
        };
        Ok(agent)
    }

    /// Installs the id source.
    #[must_use = "the agent is returned, not changed in place"]
    pub fn with_ids(mut self, ids: impl IdSource + Send + 'static) -> Self {
        self.ids = Box::new(ids);
        self
    }

    /// Installs the jitter source.
    #[must_use = "the agent is returned, not changed in place"]
    pub fn with_jitter(mut self, jitter: impl JitterSource + Send + 'static) -> Self {
        self.jitter = Box::new(jitter);
        self
    }

    // ------------------------------------------------------------------
    // Read access

    /// The agent id (the session id).
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The session log.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Consumes the agent into its session.
    pub fn into_session(self) -> Session {
        self.session
    }

    /// The pending inbox.
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The public status (SM-6).
    pub fn status(&self) -> AgentStatus {
        match self.phase {
            Phase::Running(_) => AgentStatus::Running,
            _ => AgentStatus::Idle,
        }
    }

    /// Gives back the spare capacity of the empty work queues (outputs,
    /// faults): a host calls it when the agent goes idle, so
    /// an idle agent does not keep its busiest moment's buffers.
    /// Changes nothing observable.
    pub fn trim(&mut self) {
        if self.outputs.is_empty() {
            self.outputs = VecDeque::new();
        }
        if self.faults.is_empty() {
            self.faults = Vec::new();
        }
    }

    /// Whether `when_idle()` would resolve: idle, not in maintenance, no
    /// latched wake (IB-13).
    pub fn is_quiescent(&self) -> bool {
        matches!(self.phase, Phase::Idle { .. })
    }

    /// The open turn, or the last one when idle.
    pub fn turn(&self) -> u64 {
        match &self.phase {
            Phase::Idle { last_turn } | Phase::Maintenance { last_turn, .. } => *last_turn,
            Phase::Running(r) => r.turn,
        }
    }

    /// Appends the core refused (should stay empty; a non-empty list is a
    /// bug report, never a panic).
    pub fn faults(&self) -> &[String] {
        &self.faults
    }

    /// The next output, in the order they arose, or `None` when drained.
    /// Drain completely after every input, before the next one.
    #[must_use = "drain outputs until `None` and carry each out"]
    pub fn poll(&mut self) -> Option<Output> {
        self.announce();
        self.outputs.pop_front()
    }

    /// The deadline (epoch ms, on the shell's `now` scale) of the armed
    /// timer, if any: feed [`handle_timeout`](Self::handle_timeout) once
    /// `now` reaches it. Read it again after every drain. Only the retry
    /// wait arms a timer; tool timeouts belong to the shell (TL-14).
    #[must_use = "arm a timer for this deadline"]
    pub fn poll_timeout(&self) -> Option<Time> {
        match &self.phase {
            Phase::Running(r) => match &r.stage {
                Stage::RetryWait { deadline, .. } => Some(*deadline),
                _ => None,
            },
            _ => None,
        }
    }

    // ------------------------------------------------------------------
    // Plumbing

    fn next_id(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn announce(&mut self) {
        let len = self.session.len();
        if len > self.announced {
            let range = self.announced..len;
            self.announced = len;
            // Coalesce with a trailing Appended range.
            if let Some(Output::Appended(last)) = self.outputs.back_mut()
                && last.end == range.start
            {
                last.end = range.end;
                return;
            }
            self.outputs.push_back(Output::Appended(range));
        }
    }

    fn emit(&mut self, output: Output) {
        self.announce();
        self.outputs.push_back(output);
    }

    fn after_input(&mut self) {
        self.announce();
    }

    fn append(
        &mut self,
        now: Time,
        data: impl Into<EventData>,
        intent: Option<SurfaceIntent>,
    ) -> Option<u64> {
        match self.session.append(data, intent, now.as_millis()) {
            Ok(e) => Some(e.seq()),
            Err(e) => {
                self.faults
                    .push(error_text!("append refused", "append refused: {e}"));
                None
            }
        }
    }

    fn run(&self) -> Option<&Run> {
        match &self.phase {
            Phase::Running(r) => Some(r),
            _ => None,
        }
    }

    fn run_mut(&mut self) -> Option<&mut Run> {
        match &mut self.phase {
            Phase::Running(r) => Some(r),
            _ => None,
        }
    }

    fn stage_mut(&mut self) -> Option<&mut Stage> {
        self.run_mut().map(|r| &mut r.stage)
    }

    fn take_stage(&mut self) -> Option<Stage> {
        self.run_mut()
            .map(|r| core::mem::replace(&mut r.stage, Stage::Busy))
    }

    fn set_stage(&mut self, stage: Stage) {
        if let Some(r) = self.run_mut() {
            r.stage = stage;
        }
    }

    fn aborted(&self) -> bool {
        self.run().is_some_and(|r| r.abort.is_some())
    }

    fn activity_aborted(&self) -> bool {
        match &self.phase {
            Phase::Running(r) => r.abort.is_some(),
            Phase::Maintenance { aborted, .. } => aborted.is_some(),
            Phase::Idle { .. } => false,
        }
    }

    fn coords(&self) -> (u64, u64) {
        self.run().map_or((0, 0), |r| (r.turn, r.step))
    }

    fn check_user_message(&self, message: &Message) -> Result<(), InputError> {
        if message.role != Role::User {
            return Err(InputError::InvalidMessage(String::from(
                "an inbox message must have role \"user\"",
            )));
        }
        let probe = SessionEvent::new(self.session.len(), 0, message.clone())
            .with_surface(crate::session::SurfaceOp::Append, None);
        self.session
            .check(&probe)
            .map_err(|e| InputError::InvalidMessage(error_text!("invalid message", "{e}")))
    }

    fn open_stream(&self, attempt: AttemptId) -> Result<(u64, u64), InputError> {
        match &self.phase {
            Phase::Running(r) => match &r.stage {
                Stage::Streaming(s) if s.attempt == attempt => Ok((r.turn, r.step)),
                Stage::Streaming(_) => Err(InputError::StaleAttempt { attempt }),
                _ if attempt.get() <= self.counter => Err(InputError::StaleAttempt { attempt }),
                _ => Err(InputError::NoOpenStream),
            },
            _ if attempt.get() <= self.counter && attempt.get() > 0 => {
                Err(InputError::StaleAttempt { attempt })
            }
            _ => Err(InputError::NoOpenStream),
        }
    }

    /// Whether `id` was issued by this agent (attempts, tool tokens and
    /// hook ids share one counter).
    fn issued(&self, id: u64) -> bool {
        id > 0 && id <= self.counter
    }

    fn tools_ref(&self) -> Option<&ToolPhase> {
        match self.run().map(|r| &r.stage) {
            Some(Stage::Tools(t)) => Some(t),
            _ => None,
        }
    }

    /// The index of the running call whose body has `token`.
    fn running_body(&self, token: ToolToken) -> Result<usize, InputError> {
        match self.tools_ref().and_then(|t| t.body(token)) {
            Some(i) => Ok(i),
            None if self.issued(token.get()) => Err(InputError::StaleToolCall { token }),
            None => Err(InputError::UnknownToolCall { token }),
        }
    }

    fn pending_hook(&self, id: u64) -> Result<&'static str, InputError> {
        let unknown = if self.issued(id) {
            Err(InputError::StaleHook { id })
        } else {
            Err(InputError::UnknownHook { id })
        };
        let Some(run) = self.run() else {
            return unknown;
        };
        let (hook, name) = match &run.stage {
            Stage::Seam { hook, name, .. } => (*hook, *name),
            Stage::Tools(t) => match t.hook(id) {
                Some((_, name)) => (id, name),
                None => return unknown,
            },
            _ => return unknown,
        };
        if hook == id { Ok(name) } else { unknown }
    }

    /// Raises `call`: when the embedder claimed its seam, emits
    /// [`Output::Hook`] and waits in [`Stage::Seam`] for
    /// [`complete_hook`](Self::complete_hook); otherwise answers it at
    /// once with its default value. Either way `resume` gets the answer.
    fn raise(
        &mut self,
        now: Time,
        call: HookCall,
        resume: impl FnOnce(&mut Agent, Time, HookAnswer) + Send + 'static,
    ) {
        // Every raised seam takes an id, claimed or not, so attempt and
        // token numbers do not depend on which seams are claimed.
        let hook = self.next_id();
        if !self.config.seams.contains(call.seam()) {
            resume(self, now, call.answer());
            return;
        }
        self.set_stage(Stage::Seam {
            hook,
            name: call.name(),
            resume: Box::new(resume),
        });
        self.emit(Output::Hook { id: hook, call });
    }

    /// Whether the embedder claimed `seam`: deferred, else its default at
    /// once (the seams of a tool call, which wait per call).
    fn seam<T>(&self, seam: Seams, default: impl FnOnce() -> T) -> Hook<T> {
        if self.config.seams.contains(seam) {
            Hook::Defer
        } else {
            Hook::Ready(default())
        }
    }
}

/// A direct inbox edit (IB-7).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum InboxEdit {
    /// Replace the pending message `id` (either list) by a new one.
    Replace(crate::ids::MessageId, Message),
    /// Remove the pending message `id`.
    Remove(crate::ids::MessageId),
    /// Insert at the end of a list.
    Append(InboxTarget, Message),
    /// Insert at the start of a list.
    Prepend(InboxTarget, Message),
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Agent>();
}
