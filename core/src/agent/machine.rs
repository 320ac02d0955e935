//! The turn/step state machine (loop.md §2) and the Agent surface (§3).

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::assembler::BlockAssembler;
use crate::chunk::{FinishReason, LlmFailure, StreamChunk};
use crate::content::ContentBlock;
use crate::ids::{CallId, SessionId};
use crate::message::{Message, MessageSource, Role};
use crate::options::{AdapterDefaults, GenerateOptions, LlmCallConfig, ToolSchema};
use crate::session::{
    AssistantChunk, AssistantMessage, EpochHeader, EventData, HeaderReason, InboxSpliced, LlmRetry,
    LlmRetryStarted, RequestContext, RequestHeader, Session, SessionEvent, Step, SurfaceIntent,
    ToolCall, ToolError, ToolResult, TurnEnd, TurnEndReason, TurnStart,
};

use super::hooks::{
    ApprovalOutcome, CancelCause, DefaultHooks, FixedJitter, Hook, HookAction, HookCx, HookError,
    Hooks, IdPurpose, IdSource, JitterSource, PostToolDecision, PreStepDecision, PreStepPayload,
    PreToolDecision, PreparedCall, Recovery, RequestErrorPayload, SequentialIds, ToolExecution,
};
use super::inbox::{Inbox, InboxTarget, Splice};
use super::io::{
    AgentStatus, Checkpoint, HookAnswer, HookCall, InputError, ModelCall, Notification, Output,
};
use super::prompt::{
    Assembly, PromptSection, RetainedContext, is_runtime_context_source, runtime_context_candidate,
};
use super::retry::{RetryPolicy, RetryRecord, RetrySchedule};
use super::schema::validate_value;
use super::tools::{ToolOutcome, ToolRegistry, feedback_text, parse_arguments};

/// The agent's request options (IB-13).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentOptions {
    /// Provider route of the first request (LC-13).
    pub provider: Option<String>,
    /// Model of the first request.
    pub model: Option<String>,
    /// Output cap of the first request (a positive safe integer).
    pub max_tokens: Option<u64>,
}

/// Everything an [`Agent`] is configured with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentConfig {
    /// Request options.
    pub options: AgentOptions,
    /// System-prompt sections of the default assembly (SP-2).
    pub sections: Vec<PromptSection>,
    /// Dynamic context sections of the default assembly (LC-12, SP-5).
    pub contexts: Vec<PromptSection>,
    /// Extra template variables (`provider`, `model` and `cwd` are added).
    pub variables: BTreeMap<String, Option<String>>,
    /// The tools visible to this agent.
    pub tools: ToolRegistry,
    /// `toolOrder` (SP-4); `None` orders tools by name.
    pub tool_order: Option<Vec<String>>,
    /// Run the `llm-retry` executor (streaming.md 6) at the request-error
    /// seam, logging `llm/retry` and `llm/retry-started`.
    pub retry_executor: bool,
    /// [HEAD Δ H-1] Keep the delivered text of a cancelled stream as an
    /// `assistant/message` with `interrupted: true`.
    pub interrupted_prefix: bool,
    /// [HEAD Δ H-2] Latch wakes that arrive while an aborted activity
    /// winds down, and start a new driver when it stops.
    pub wake_latch: bool,
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
    attempt: u64,
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
    Assembly {
        hook: u64,
        proposed: u64,
        claimed: Vec<Message>,
    },
    PreStep {
        hook: u64,
        proposed: u64,
        assembly: Assembly,
    },
    RequestConfig {
        hook: u64,
        messages: Vec<Arc<Message>>,
    },
    Prepare {
        hook: u64,
        proposed: LlmCallConfig,
        messages: Vec<Arc<Message>>,
    },
    Streaming(Box<Stream>),
    RequestError {
        hook: u64,
        failed: Box<Failed>,
        phase: ErrorPhase,
    },
    RetryWait {
        deadline: i64,
        record: Box<RetryRecord>,
    },
    Tools(Box<ToolPhase>),
    TurnStopping {
        hook: u64,
    },
}

struct PlannedCall {
    call_id: CallId,
    name: String,
    raw: String,
}

struct ToolPhase {
    calls: Vec<PlannedCall>,
    cursor: usize,
    concluded: bool,
    current: Option<CallRun>,
}

enum CallStage {
    PreExecute { hook: u64 },
    Approval { hook: u64 },
    Body,
    PostExecute { hook: u64 },
}

struct CallRun {
    exec: ToolExecution,
    call_seq: u64,
    stage: CallStage,
    body_invoked: bool,
    outcome: Option<ToolOutcome>,
}

/// What to do with a call after a pipeline stage (TL-9).
enum Next {
    /// Waiting for an answer.
    Wait,
    /// Run post-execute on this outcome.
    Post(ToolOutcome),
    /// Commit this outcome without post-execute.
    Commit(ToolOutcome),
}

/// The agent loop as a sans-IO state machine. See the [module
/// docs](super) for the driving loop.
pub struct Agent {
    id: SessionId,
    config: AgentConfig,
    session: Session,
    hooks: Box<dyn Hooks + Send>,
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
    actions: Vec<HookAction>,
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
pub fn is_loop_owned(event_type: &str) -> bool {
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
    now: i64,
    data: EventData,
    intent: Option<SurfaceIntent>,
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
    session
        .append(data, intent, now)
        .map(SessionEvent::seq)
        .map_err(InputError::Append)
}

fn ceil_ms(delay: f64) -> i64 {
    if !delay.is_finite() || delay <= 0.0 {
        return 0;
    }
    let d = delay as i64;
    if (d as f64) < delay { d + 1 } else { d }
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
    /// An agent over `session` with default hooks, [`SequentialIds`] and
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
                    let value = serde_json::to_value(&**s).unwrap_or_default();
                    inbox.replay(&value).map_err(|error| ResumeError::Inbox {
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
            hooks: Box::new(DefaultHooks),
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
            actions: Vec::new(),
            faults: Vec::new(),
        };
        Ok(agent)
    }

    /// Installs the seams.
    pub fn with_hooks(mut self, hooks: impl Hooks + Send + 'static) -> Self {
        self.hooks = Box::new(hooks);
        self
    }

    /// Installs the id source.
    pub fn with_ids(mut self, ids: impl IdSource + Send + 'static) -> Self {
        self.ids = Box::new(ids);
        self
    }

    /// Installs the jitter source.
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

    /// The next output, or `None` when drained. Drain completely after
    /// every input.
    pub fn poll(&mut self) -> Option<Output> {
        self.announce();
        self.outputs.pop_front()
    }

    /// The deadline (epoch ms) of the armed timer, if any: feed
    /// [`handle_timeout`](Self::handle_timeout) when it passes.
    pub fn poll_timeout(&self) -> Option<i64> {
        match &self.phase {
            Phase::Running(r) => match &r.stage {
                Stage::RetryWait { deadline, .. } => Some(*deadline),
                _ => None,
            },
            _ => None,
        }
    }

    // ------------------------------------------------------------------
    // Inputs: the Agent surface (§3)

    /// `send(message, target, wakeup)` (IB-6).
    pub fn send(
        &mut self,
        now: i64,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), InputError> {
        self.check_user_message(&message)?;
        let target = if wakeup && self.activity_aborted() {
            InboxTarget::NextTurn
        } else {
            target
        };
        let len = self.inbox.list(target).len() as i64;
        let splice = self
            .inbox
            .plan(target, len, 0, alloc::vec![message], false)?;
        if let Some(splice) = splice {
            self.commit_splice(now, splice);
        }
        if wakeup {
            self.wake(now);
        }
        self.after_input();
        Ok(())
    }

    /// `followup(m)`: `send(m, next-turn, wake)`.
    pub fn followup(&mut self, now: i64, message: Message) -> Result<(), InputError> {
        self.send(now, message, InboxTarget::NextTurn, true)
    }

    /// `steer(m)`: `send(m, next-step, wake)`.
    pub fn steer(&mut self, now: i64, message: Message) -> Result<(), InputError> {
        self.send(now, message, InboxTarget::NextStep, true)
    }

    /// `inject(m)`: `send(m, next-step, no wake)`.
    pub fn inject(&mut self, now: i64, message: Message) -> Result<(), InputError> {
        self.send(now, message, InboxTarget::NextStep, false)
    }

    /// `cancel(cause, keep_inbox)` (LC-33).
    pub fn cancel(&mut self, now: i64, cause: CancelCause, keep_inbox: bool) {
        self.cancel_inner(now, cause, keep_inbox);
        self.after_input();
    }

    /// Direct inbox edits (IB-7); they never wake the driver. Returns
    /// whether the edit found its target (always true for inserts).
    pub fn edit_inbox(&mut self, now: i64, edit: InboxEdit) -> Result<bool, InputError> {
        let (splice, found) = match edit {
            InboxEdit::Replace(id, message) => {
                self.check_user_message(&message)?;
                match self.inbox.find(&id) {
                    None => (None, false),
                    Some((target, i)) => (
                        self.inbox
                            .plan(target, i as i64, 1, alloc::vec![message], false)?,
                        true,
                    ),
                }
            }
            InboxEdit::Remove(id) => match self.inbox.find(&id) {
                None => (None, false),
                Some((target, i)) => (
                    self.inbox.plan(target, i as i64, 1, Vec::new(), false)?,
                    true,
                ),
            },
            InboxEdit::Append(target, message) => {
                self.check_user_message(&message)?;
                let len = self.inbox.list(target).len() as i64;
                (
                    self.inbox
                        .plan(target, len, 0, alloc::vec![message], false)?,
                    true,
                )
            }
            InboxEdit::Prepend(target, message) => {
                self.check_user_message(&message)?;
                (
                    self.inbox.plan(target, 0, 0, alloc::vec![message], false)?,
                    true,
                )
            }
        };
        if let Some(s) = splice {
            self.commit_splice(now, s);
        }
        self.after_input();
        Ok(found)
    }

    /// Appends a plugin or tool-owned event (TL-24), or a surface
    /// replacement (compaction, CP-1). Loop-owned types are refused.
    pub fn append_event(
        &mut self,
        now: i64,
        data: EventData,
        intent: Option<SurfaceIntent>,
    ) -> Result<u64, InputError> {
        let seq = append_foreign(&mut self.session, now, data, intent)?;
        self.after_input();
        Ok(seq)
    }

    /// `MaintenanceBegin` (LC-39): only from `Idle`.
    pub fn begin_maintenance(&mut self, _now: i64) -> Result<(), InputError> {
        match self.phase {
            Phase::Idle { last_turn } => {
                self.phase = Phase::Maintenance {
                    last_turn,
                    aborted: None,
                    wake_requested: false,
                };
                Ok(())
            }
            _ => Err(InputError::NotAllowedNow(
                "maintenance can begin only while idle",
            )),
        }
    }

    /// `MaintenanceEnd` (LC-39): back to `Idle`, then a requested wake.
    pub fn end_maintenance(&mut self, now: i64) -> Result<(), InputError> {
        let Phase::Maintenance {
            last_turn,
            wake_requested,
            ..
        } = self.phase
        else {
            return Err(InputError::NotAllowedNow("no maintenance is running"));
        };
        self.phase = Phase::Idle { last_turn };
        if wake_requested && (!self.config.wake_latch || !self.inbox.is_empty()) {
            self.wake(now);
        }
        self.after_input();
        Ok(())
    }

    // ------------------------------------------------------------------
    // Inputs: completions

    /// A chunk of model attempt `attempt` (LC-19).
    pub fn handle_chunk(
        &mut self,
        now: i64,
        attempt: u64,
        chunk: StreamChunk,
    ) -> Result<(), InputError> {
        let (turn, step) = self.open_stream(attempt)?;
        if let Some(Stage::Streaming(s)) = self.stage_mut() {
            s.assembler.push(&chunk);
        }
        match self
            .session
            .append(AssistantChunk::new(turn, step, chunk), None, now)
        {
            Ok(e) => {
                let seq = e.seq();
                if let Some(Stage::Streaming(s)) = self.stage_mut() {
                    s.chunk_seqs.push(seq);
                }
            }
            Err(e) => self.faults.push(format!("assistant/chunk refused: {e}")),
        }
        Ok(())
    }

    /// The model stream of `attempt` ended normally (LC-20).
    pub fn handle_stream_end(&mut self, now: i64, attempt: u64) -> Result<(), InputError> {
        self.open_stream(attempt)?;
        let Some(Stage::Streaming(stream)) = self.take_stage() else {
            return Err(InputError::NoOpenStream);
        };
        self.stream_ended(now, *stream);
        self.after_input();
        Ok(())
    }

    /// The model stream of `attempt` failed outside the adapter (a throwing
    /// stream middleware or consumer, `ModelThrew`): a turn error (LC-27).
    /// Adapter failures must arrive as a terminal `finish` chunk instead.
    pub fn handle_stream_error(
        &mut self,
        now: i64,
        attempt: u64,
        error: HookError,
    ) -> Result<(), InputError> {
        self.open_stream(attempt)?;
        self.take_stage();
        self.turn_error(now, error);
        self.after_input();
        Ok(())
    }

    /// The result of the tool body started by [`Output::ExecuteTool`].
    pub fn handle_tool_result(
        &mut self,
        now: i64,
        token: u64,
        outcome: ToolOutcome,
    ) -> Result<(), InputError> {
        self.running_body(token)?;
        let next = self.body_done(outcome);
        self.continue_call(now, next);
        self.after_input();
        Ok(())
    }

    /// The tool runner itself failed (`ToolRunnerFailed`): no result is
    /// written for the call and the turn ends in error (LC-36).
    pub fn handle_tool_failure(
        &mut self,
        now: i64,
        token: u64,
        error: HookError,
    ) -> Result<(), InputError> {
        self.running_body(token)?;
        self.take_stage();
        self.turn_error(now, error);
        self.after_input();
        Ok(())
    }

    /// The answer to [`Output::Hook`] `id`.
    pub fn complete_hook(
        &mut self,
        now: i64,
        id: u64,
        answer: HookAnswer,
    ) -> Result<(), InputError> {
        let expected = self.pending_hook(id)?;
        let got = answer.name();
        if expected != got {
            return Err(InputError::HookMismatch { expected, got });
        }
        match answer {
            HookAnswer::Assemble(r) => {
                if let Some(Stage::Assembly {
                    proposed, claimed, ..
                }) = self.take_stage()
                {
                    self.assembly_done(now, proposed, claimed, r);
                }
            }
            HookAnswer::PreStep(r) => {
                if let Some(Stage::PreStep {
                    proposed, assembly, ..
                }) = self.take_stage()
                {
                    self.pre_step_done(now, proposed, assembly, r);
                }
            }
            HookAnswer::Request(r) => {
                if let Some(Stage::RequestConfig { messages, .. }) = self.take_stage() {
                    self.request_config_done(now, messages, r);
                }
            }
            HookAnswer::Prepare(r) => {
                if let Some(Stage::Prepare {
                    proposed, messages, ..
                }) = self.take_stage()
                {
                    self.prepare_done(now, proposed, messages, r);
                }
            }
            HookAnswer::RequestError(r) => {
                if let Some(Stage::RequestError { failed, phase, .. }) = self.take_stage() {
                    self.request_error_done(now, *failed, phase, r);
                }
            }
            HookAnswer::TurnStopping(r) => {
                self.take_stage();
                self.turn_stopping_done(now, r);
            }
            HookAnswer::ToolPreExecute(r) => {
                let next = self.pre_execute_done(now, r);
                self.continue_call(now, next);
            }
            HookAnswer::ToolApproval(outcome) => {
                let next = self.approval_done(now, outcome);
                self.continue_call(now, next);
            }
            HookAnswer::ToolPostExecute(r) => {
                let next = self.post_execute_done(r);
                self.continue_call(now, next);
            }
        }
        self.after_input();
        Ok(())
    }

    /// The retry timer (`poll_timeout`) may have passed.
    pub fn handle_timeout(&mut self, now: i64) -> Result<(), InputError> {
        let Some(deadline) = self.poll_timeout() else {
            return Err(InputError::NoTimer);
        };
        if now < deadline {
            return Ok(());
        }
        if let Some(Stage::RetryWait { record, .. }) = self.take_stage() {
            let started = LlmRetryStarted {
                retry_id: record.retry_id.clone(),
                turn: record.turn,
                step: record.step,
                retry: record.retry,
            };
            self.append(now, started, None);
            self.request(now);
        }
        self.after_input();
        Ok(())
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
            if let Some(Output::Appended(last)) = self.outputs.back_mut() {
                if last.end == range.start {
                    last.end = range.end;
                    return;
                }
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
        now: i64,
        data: impl Into<EventData>,
        intent: Option<SurfaceIntent>,
    ) -> Option<u64> {
        match self.session.append(data, intent, now) {
            Ok(e) => Some(e.seq()),
            Err(e) => {
                self.faults.push(format!("append refused: {e}"));
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
            .map_err(|e| InputError::InvalidMessage(format!("{e}")))
    }

    fn open_stream(&self, attempt: u64) -> Result<(u64, u64), InputError> {
        match &self.phase {
            Phase::Running(r) => match &r.stage {
                Stage::Streaming(s) if s.attempt == attempt => Ok((r.turn, r.step)),
                Stage::Streaming(_) => Err(InputError::StaleAttempt { attempt }),
                _ if attempt <= self.counter => Err(InputError::StaleAttempt { attempt }),
                _ => Err(InputError::NoOpenStream),
            },
            _ if attempt <= self.counter && attempt > 0 => {
                Err(InputError::StaleAttempt { attempt })
            }
            _ => Err(InputError::NoOpenStream),
        }
    }

    fn running_body(&self, token: u64) -> Result<(), InputError> {
        if let Some(Run {
            stage: Stage::Tools(t),
            ..
        }) = self.run()
        {
            if let Some(c) = &t.current {
                if c.exec.token == token && matches!(c.stage, CallStage::Body) {
                    return Ok(());
                }
            }
        }
        Err(InputError::UnknownToolCall { token })
    }

    fn pending_hook(&self, id: u64) -> Result<&'static str, InputError> {
        let unknown = Err(InputError::UnknownHook { id });
        let Some(run) = self.run() else {
            return unknown;
        };
        let (hook, name) = match &run.stage {
            Stage::Assembly { hook, .. } => (*hook, "assemble"),
            Stage::PreStep { hook, .. } => (*hook, "pre-step"),
            Stage::RequestConfig { hook, .. } => (*hook, "request"),
            Stage::Prepare { hook, .. } => (*hook, "prepare"),
            Stage::RequestError { hook, .. } => (*hook, "request-error"),
            Stage::TurnStopping { hook } => (*hook, "turn-stopping"),
            Stage::Tools(t) => match t.current.as_ref().map(|c| &c.stage) {
                Some(CallStage::PreExecute { hook }) => (*hook, "tool pre-execute"),
                Some(CallStage::Approval { hook }) => (*hook, "tool approval"),
                Some(CallStage::PostExecute { hook }) => (*hook, "tool post-execute"),
                _ => return unknown,
            },
            _ => return unknown,
        };
        if hook == id { Ok(name) } else { unknown }
    }

    /// Runs one seam with a [`HookCx`].
    fn call_hook<R>(
        &mut self,
        now: i64,
        f: impl FnOnce(&mut dyn Hooks, &mut HookCx<'_>) -> R,
    ) -> R {
        let mut actions = core::mem::take(&mut self.actions);
        let r = {
            let mut cx = HookCx {
                now,
                agent: &self.id,
                session: &mut self.session,
                actions: &mut actions,
            };
            f(&mut *self.hooks, &mut cx)
        };
        self.actions = actions;
        r
    }

    /// Applies the calls hooks queued (loop.md Q3).
    fn apply_actions(&mut self, now: i64) {
        while !self.actions.is_empty() {
            let action = self.actions.remove(0);
            match action {
                HookAction::Send {
                    message,
                    target,
                    wakeup,
                } => {
                    if let Err(e) = self.send_queued(now, message, target, wakeup) {
                        self.faults.push(format!("a hook's send was refused: {e}"));
                    }
                }
                HookAction::Cancel { cause, keep_inbox } => {
                    self.cancel_inner(now, cause, keep_inbox)
                }
            }
        }
    }

    fn send_queued(
        &mut self,
        now: i64,
        message: Message,
        target: InboxTarget,
        wakeup: bool,
    ) -> Result<(), InputError> {
        self.check_user_message(&message)?;
        let target = if wakeup && self.activity_aborted() {
            InboxTarget::NextTurn
        } else {
            target
        };
        let len = self.inbox.list(target).len() as i64;
        if let Some(splice) = self
            .inbox
            .plan(target, len, 0, alloc::vec![message], false)?
        {
            self.commit_splice(now, splice);
        }
        if wakeup {
            self.wake(now);
        }
        Ok(())
    }

    /// IB-4: append the event, update the lists, then notify.
    fn commit_splice(&mut self, now: i64, splice: Splice) {
        let data = InboxSpliced {
            target: match splice.target {
                InboxTarget::NextTurn => crate::session::InboxTarget::NextTurn,
                InboxTarget::NextStep => crate::session::InboxTarget::NextStep,
            },
            start: splice.start as u64,
            removed_count: (!splice.removed.is_empty()).then_some(splice.removed.len() as u64),
            inserted: splice.inserted.iter().cloned().map(Arc::new).collect(),
            outcome: (!splice.claim && !splice.removed.is_empty())
                .then(|| String::from("canceled")),
        };
        self.append(now, data, None);
        self.inbox.apply(&splice);
        if !splice.claim {
            for message in splice.removed {
                self.emit(Output::Notify(Notification::Discarded { message }));
            }
        }
        for message in splice.inserted {
            self.emit(Output::Notify(Notification::Inserted { message }));
        }
    }

    /// The retained runtime-context snapshot (LC-12): the newest such
    /// message, unless a surface replacement shadowed it. New events are
    /// scanned once; the surface is checked once per proposed step.
    fn retained_context(&mut self) -> RetainedContext {
        for e in self.session.events_from(self.scanned) {
            if let EventData::UserMessage(m) = e.data() {
                if is_runtime_context_source(&m.source) {
                    self.newest_context = Some((e.seq(), message_text(m)));
                }
            }
        }
        self.scanned = self.session.len();
        match &self.newest_context {
            None => RetainedContext::Never,
            Some((seq, text)) if self.session.surface().nodes.contains(seq) => {
                RetainedContext::Retained {
                    seq: *seq,
                    text: text.clone(),
                }
            }
            Some(_) => RetainedContext::Shadowed,
        }
    }

    // ------------------------------------------------------------------
    // Cancellation (LC-33, LC-34)

    fn clear_inbox(&mut self, now: i64) {
        for target in [InboxTarget::NextStep, InboxTarget::NextTurn] {
            let len = self.inbox.list(target).len() as i64;
            if let Ok(Some(splice)) = self.inbox.plan(target, 0, len, Vec::new(), false) {
                self.commit_splice(now, splice);
            }
        }
    }

    fn cancel_inner(&mut self, now: i64, cause: CancelCause, keep_inbox: bool) {
        if !keep_inbox {
            self.clear_inbox(now);
            match &mut self.phase {
                Phase::Running(r) => r.wake_requested = false,
                Phase::Maintenance { wake_requested, .. } => *wake_requested = false,
                Phase::Idle { .. } => {}
            }
        }
        match &mut self.phase {
            Phase::Idle { .. } => {}
            Phase::Maintenance { aborted, .. } => {
                if aborted.is_none() {
                    *aborted = Some(cause.clone());
                    self.emit(Output::AbortTurn { cause });
                }
            }
            Phase::Running(r) => {
                if r.abort.is_some() {
                    return;
                }
                r.abort = Some(cause.clone());
                self.emit(Output::AbortTurn { cause });
                match self.run().map(|r| &r.stage) {
                    Some(Stage::Streaming(_)) => {
                        if let Some(Stage::Streaming(s)) = self.take_stage() {
                            self.emit(Output::CancelModelCall { attempt: s.attempt });
                            if self.config.interrupted_prefix {
                                self.interrupted_message(now, &s);
                            }
                        }
                        self.close_aborted(now);
                    }
                    Some(Stage::RetryWait { .. }) => {
                        // the wait is cancelled; no started event.
                        self.take_stage();
                        self.close_aborted(now);
                    }
                    _ => {}
                }
            }
        }
    }

    /// [HEAD Δ H-1] The delivered prefix of a cancelled stream.
    fn interrupted_message(&mut self, now: i64, s: &Stream) {
        let content = s.assembler.interrupted_blocks();
        if content.is_empty() {
            return;
        }
        let (turn, step) = self.coords();
        let id = self.ids.message_id(IdPurpose::Assistant { turn, step });
        let message = Message::model(id, content, MessageSource::model(&s.provider, &s.model));
        let mut data = AssistantMessage::new(turn, step, message);
        data.usage = s.assembler.usage().copied();
        data.interrupted = true;
        self.append(
            now,
            data,
            Some(SurfaceIntent::append_citing(s.chunk_seqs.clone())),
        );
    }

    /// Closing as aborted (LC-34): `step/end` if a step is open, then
    /// `turn/end aborted`, then stop. No `agent/error`.
    fn close_aborted(&mut self, now: i64) {
        let cause = self
            .run()
            .and_then(|r| r.abort.clone())
            .unwrap_or(CancelCause::User);
        self.close_step(now);
        self.end_turn(
            now,
            TurnEndReason::Aborted {
                cause: cause.to_abort_cause(),
            },
            false,
        );
    }

    fn close_step(&mut self, now: i64) {
        let Some(r) = self.run_mut() else { return };
        if !r.step_open {
            return;
        }
        r.step_open = false;
        let step = Step {
            turn: r.turn,
            step: r.step,
        };
        self.append(now, EventData::StepEnd(step), None);
    }

    /// LC-36.
    fn turn_error(&mut self, now: i64, error: HookError) {
        if self.aborted() {
            // LC-35: a failure while aborting is an abort.
            self.close_aborted(now);
            return;
        }
        self.close_step(now);
        let (turn, step) = self.coords();
        let failure = error.failure();
        self.emit(Output::Notify(Notification::Error { turn, step, error }));
        self.end_turn(now, TurnEndReason::Error { error: failure }, false);
    }

    /// Appends `turn/end`, emits the checkpoint and continues the driver
    /// (LC-37): `may_continue` is true only for `completed`/`max-tokens`
    /// reached through LC-30 or LC-11 case 4.
    fn end_turn(&mut self, now: i64, reason: TurnEndReason, may_continue: bool) {
        let Some(r) = self.run_mut() else { return };
        r.stage = Stage::Busy;
        let turn = r.turn;
        self.append(now, TurnEnd { turn, reason }, None);
        self.emit(Output::Flush(Checkpoint::AfterTurnEnd));
        if may_continue && !self.inbox.is_empty() {
            if let Some(r) = self.run_mut() {
                r.abort = None;
                r.step = 0;
                r.wake_requested = false;
            }
            self.open_turn(now);
        } else {
            self.stop_driver(now);
        }
    }

    /// LC-38.
    fn stop_driver(&mut self, now: i64) {
        let (last_turn, latched) = match &self.phase {
            Phase::Running(r) => (r.turn, r.wake_requested),
            Phase::Idle { last_turn } | Phase::Maintenance { last_turn, .. } => (*last_turn, false),
        };
        self.phase = Phase::Idle { last_turn };
        self.emit(Output::Status(AgentStatus::Idle));
        if latched && self.config.wake_latch && !self.inbox.is_empty() {
            self.wake(now);
        }
    }

    // ------------------------------------------------------------------
    // Waking and turns (LC-7..LC-12)

    /// LC-7.
    fn wake(&mut self, now: i64) {
        match &mut self.phase {
            Phase::Idle { last_turn } => {
                let turn = *last_turn;
                self.phase = Phase::Running(Box::new(Run {
                    turn,
                    step: 0,
                    step_open: false,
                    abort: None,
                    turn_end: None,
                    target: InboxTarget::NextTurn,
                    wake_requested: false,
                    system: String::new(),
                    tools: Vec::new(),
                    stage: Stage::Busy,
                }));
                self.emit(Output::Status(AgentStatus::Running));
                self.open_turn(now);
            }
            Phase::Running(r) => {
                // [HEAD Δ H-2] latch a wake that arrives while aborting;
                // disposal never latches.
                if self.config.wake_latch
                    && r.abort
                        .as_ref()
                        .is_some_and(|c| *c != CancelCause::Disposed)
                {
                    r.wake_requested = true;
                }
            }
            Phase::Maintenance {
                aborted,
                wake_requested,
                ..
            } => {
                if aborted.is_none()
                    || (self.config.wake_latch && *aborted != Some(CancelCause::Disposed))
                {
                    *wake_requested = true;
                }
            }
        }
    }

    /// LC-8.
    fn open_turn(&mut self, now: i64) {
        if self.aborted() {
            self.stop_driver(now);
            return;
        }
        let Some(r) = self.run_mut() else { return };
        r.turn += 1;
        r.target = InboxTarget::NextTurn;
        r.step = 0;
        r.step_open = false;
        r.turn_end = None;
        let turn = r.turn;
        self.append(now, TurnStart { turn }, None);
        self.propose_step(now);
    }

    /// LC-9 and IB-10: claim, then assemble.
    fn propose_step(&mut self, now: i64) {
        let Some(r) = self.run() else { return };
        let (turn, proposed, target) = (r.turn, r.step + 1, r.target);
        let mut claimed: Vec<Message> = Vec::new();
        let step_len = self.inbox.list(InboxTarget::NextStep).len() as i64;
        if let Ok(Some(s)) = self
            .inbox
            .plan(InboxTarget::NextStep, 0, step_len, Vec::new(), true)
        {
            claimed.extend(s.removed.iter().cloned());
            self.commit_splice(now, s);
        }
        if target == InboxTarget::NextTurn {
            if let Ok(Some(s)) = self
                .inbox
                .plan(InboxTarget::NextTurn, 0, 1, Vec::new(), true)
            {
                claimed.extend(s.removed.iter().cloned());
                self.commit_splice(now, s);
            }
        }
        for message in &claimed {
            self.emit(Output::Notify(Notification::Claimed {
                message: message.clone(),
                turn,
            }));
        }
        let default = match self.default_assembly() {
            Ok(a) => a,
            Err(e) => {
                self.turn_error(now, HookError::msg(e));
                return;
            }
        };
        let hook = self.next_id();
        let answer = self.call_hook(now, |h, cx| h.assemble(cx, turn, proposed, default.clone()));
        match answer {
            Hook::Ready(r) => {
                self.apply_actions(now);
                self.assembly_done(now, proposed, claimed, r);
            }
            Hook::Defer => {
                self.set_stage(Stage::Assembly {
                    hook,
                    proposed,
                    claimed,
                });
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::Assemble {
                        turn,
                        step: proposed,
                        default,
                    },
                });
                self.apply_actions(now);
            }
        }
    }

    fn default_assembly(&self) -> Result<Assembly, String> {
        let tools = match &self.config.tool_order {
            None => self.config.tools.schemas(),
            Some(order) => self.config.tools.ordered_schemas(order)?,
        };
        let mut variables = self.config.variables.clone();
        variables
            .entry(String::from("provider"))
            .or_insert_with(|| self.config.options.provider.clone());
        variables
            .entry(String::from("model"))
            .or_insert_with(|| self.config.options.model.clone());
        variables
            .entry(String::from("cwd"))
            .or_insert_with(|| self.session.header().cwd.clone());
        Ok(Assembly {
            sections: self.config.sections.clone(),
            contexts: self.config.contexts.clone(),
            tools,
            variables,
        })
    }

    /// LC-10.
    fn assembly_done(
        &mut self,
        now: i64,
        proposed: u64,
        claimed: Vec<Message>,
        result: Result<Assembly, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let assembly = match result {
            Ok(a) => a,
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
        };
        let turn = self.coords().0;
        let mut default = claimed.clone();
        if let Some((text, source)) =
            runtime_context_candidate(&self.retained_context(), &assembly.context_sections())
        {
            let id = self.ids.message_id(IdPurpose::RuntimeContext {
                turn,
                step: proposed,
            });
            let mut m = Message::user(id, alloc::vec![ContentBlock::text(text)]);
            m.source = source;
            default.push(m);
        }
        self.emit(Output::Flush(Checkpoint::PreStep));
        let payload = PreStepPayload {
            turn,
            step: proposed,
            messages: claimed,
        };
        let default = PreStepDecision::Enter(default);
        let hook = self.next_id();
        let answer = self.call_hook(now, |h, cx| h.pre_step(cx, &payload, default.clone()));
        match answer {
            Hook::Ready(r) => {
                self.apply_actions(now);
                self.pre_step_done(now, proposed, assembly, r);
            }
            Hook::Defer => {
                self.set_stage(Stage::PreStep {
                    hook,
                    proposed,
                    assembly,
                });
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::PreStep { payload, default },
                });
                self.apply_actions(now);
            }
        }
    }

    /// LC-11.
    fn pre_step_done(
        &mut self,
        now: i64,
        proposed: u64,
        assembly: Assembly,
        result: Result<PreStepDecision, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let messages = match result {
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
            Ok(PreStepDecision::Reject) => {
                self.end_turn(now, TurnEndReason::Blocked, false);
                return;
            }
            Ok(PreStepDecision::Enter(m)) => m,
        };
        let Some(r) = self.run() else { return };
        if messages.is_empty() {
            if let Some(end) = r.turn_end {
                let reason = match end {
                    StepEnd::Completed => TurnEndReason::Completed,
                    StepEnd::MaxTokens => TurnEndReason::MaxTokens,
                };
                self.end_turn(now, reason, true);
                return;
            }
            if r.step == 0 {
                self.end_turn(now, TurnEndReason::Completed, false);
                return;
            }
        }
        // Entered messages become user/message events; refuse the step
        // rather than write an event the session would reject.
        for m in &messages {
            if let Err(e) = self.check_user_message(m) {
                self.turn_error(now, HookError::msg(format!("pre-step entered an {e}")));
                return;
            }
        }
        let Some(r) = self.run_mut() else { return };
        r.step = proposed;
        r.step_open = true;
        let step = Step {
            turn: r.turn,
            step: proposed,
        };
        self.append(now, EventData::StepStart(step), None);
        for m in messages {
            self.append(now, m, Some(SurfaceIntent::append()));
        }
        let system = match assembly.render() {
            Ok(s) => s,
            Err(e) => {
                self.turn_error(now, HookError::msg(e));
                return;
            }
        };
        if let Some(r) = self.run_mut() {
            r.system = system;
            r.tools = assembly.tools;
        }
        self.request(now);
    }

    // ------------------------------------------------------------------
    // Requests (LC-13..LC-18)

    /// LC-13.
    fn request(&mut self, now: i64) {
        let messages: Vec<Arc<Message>> = self.session.derive_messages().to_vec();
        let seed = self.seed();
        let (turn, step) = self.coords();
        let hook = self.next_id();
        let answer = self.call_hook(now, |h, cx| h.request(cx, turn, step, seed.clone()));
        match answer {
            Hook::Ready(r) => {
                self.apply_actions(now);
                self.request_config_done(now, messages, r);
            }
            Hook::Defer => {
                self.set_stage(Stage::RequestConfig { hook, messages });
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::Request { turn, step, seed },
                });
                self.apply_actions(now);
            }
        }
    }

    fn seed(&self) -> LlmCallConfig {
        let folded = self.session.request_header();
        if self.header_logged {
            if let Some(h) = folded {
                let mut config = h.config.clone();
                if let Some(d) = h.adapter_defaults {
                    if d.reasoning_effort == Some(true) {
                        config.reasoning_effort = None;
                    }
                    if d.max_tokens == Some(true) {
                        config.max_tokens = None;
                    }
                }
                return config;
            }
        }
        let o = &self.config.options;
        let mut config = LlmCallConfig::new(
            o.provider.clone().unwrap_or_default(),
            o.model.clone().unwrap_or_default(),
        );
        config.max_tokens = o.max_tokens;
        if let Some(h) = folded {
            let effort_from_adapter = h
                .adapter_defaults
                .is_some_and(|d| d.reasoning_effort == Some(true));
            if h.config.provider == config.provider
                && h.config.model == config.model
                && !effort_from_adapter
            {
                config.reasoning_effort = h.config.reasoning_effort.clone();
            }
        }
        config
    }

    /// LC-14.
    fn request_config_done(
        &mut self,
        now: i64,
        messages: Vec<Arc<Message>>,
        result: Result<LlmCallConfig, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let config = match result {
            Ok(c) => c,
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
        };
        if config.provider.is_empty() || config.model.is_empty() {
            let msg = format!(
                "agent \"{}\" has no provider/model: set AgentOptions.provider and AgentOptions.model or supply both via the agent/request waterfall",
                self.id
            );
            self.turn_error(now, HookError::msg(msg));
            return;
        }
        let hook = self.next_id();
        let answer = self.call_hook(now, |h, cx| h.prepare(cx, config.clone()));
        match answer {
            Hook::Ready(r) => {
                self.apply_actions(now);
                self.prepare_done(now, config, messages, r);
            }
            Hook::Defer => {
                self.set_stage(Stage::Prepare {
                    hook,
                    proposed: config.clone(),
                    messages,
                });
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::Prepare { config },
                });
                self.apply_actions(now);
            }
        }
    }

    /// LC-15..LC-18: header, context, checkpoint, `CallModel`.
    fn prepare_done(
        &mut self,
        now: i64,
        proposed: LlmCallConfig,
        messages: Vec<Arc<Message>>,
        result: Result<PreparedCall, HookError>,
    ) {
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        let prepared = match result {
            Ok(p) => p,
            Err(HookError::Llm(f)) if f.code == "NO_ADAPTER" => PreparedCall {
                config: proposed,
                adapter_defaults: AdapterDefaults::default(),
                retry_policy: None,
                context_window: None,
            },
            Err(e) => {
                self.turn_error(now, e);
                return;
            }
        };
        let Some(r) = self.run() else { return };
        let header = EpochHeader {
            config: prepared.config.clone(),
            adapter_defaults: Some(prepared.adapter_defaults),
            system: Some(r.system.clone()),
            tools: Some(r.tools.clone()),
        }
        .canonical();
        let reason = if !self.header_logged {
            Some(if self.session.request_header().is_some() {
                HeaderReason::Resume
            } else {
                HeaderReason::Initial
            })
        } else if self
            .session
            .request_header()
            .is_none_or(|folded| !folded.same_as(&header))
        {
            Some(HeaderReason::Change)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.append(
                now,
                RequestHeader {
                    header: header.clone(),
                    reason,
                },
                None,
            );
            self.header_logged = true;
        }
        let context = RequestContext {
            provider: prepared.config.provider.clone(),
            model: prepared.config.model.clone(),
            context_window: prepared.context_window,
        };
        if self
            .session
            .request_context()
            .is_none_or(|c| **c != context)
        {
            self.append(now, context, None);
        }
        self.emit(Output::Flush(Checkpoint::BeforeModel));
        let config = prepared.config;
        let mut request =
            GenerateOptions::new(config.provider.clone(), config.model.clone(), messages);
        request.reasoning_effort = config.reasoning_effort.clone();
        request.temperature = config.temperature;
        request.max_tokens = config.max_tokens;
        request.stop = config.stop.clone();
        request.system = header.system.clone();
        request.tools = header.tools.clone();
        request.session_id = Some(self.id.clone());
        let attempt = self.next_id();
        let (turn, step) = self.coords();
        self.set_stage(Stage::Streaming(Box::new(Stream {
            attempt,
            assembler: BlockAssembler::new(),
            chunk_seqs: Vec::new(),
            provider: config.provider,
            model: config.model,
            policy: prepared.retry_policy,
        })));
        self.emit(Output::CallModel(ModelCall {
            attempt,
            turn,
            step,
            request,
        }));
    }

    // ------------------------------------------------------------------
    // Streaming (LC-19..LC-21)

    /// LC-20.
    fn stream_ended(&mut self, now: i64, stream: Stream) {
        let finish = stream.assembler.finish();
        if let Some(failure) = finish.failure() {
            let failed = Failed {
                failure: failure.clone(),
                provider: stream.provider,
                policy: stream.policy,
            };
            self.request_failed(now, failed);
            return;
        }
        let mut content = match stream.assembler.blocks() {
            Ok(c) => c,
            Err(e) => {
                self.turn_error(now, HookError::msg(format!("{e}")));
                return;
            }
        };
        // Judgement call: a provider may send an empty call id (C-4), but a
        // tool/result must name a non-empty one (session.md M6, enforced at
        // append). An empty id is treated like a missing one (BB-2) and
        // replaced by `call-<position>` before the message is recorded, so
        // the call and its result stay paired.
        for (i, block) in content.iter_mut().enumerate() {
            if let ContentBlock::ToolCall { id, .. } = block {
                if id.0.is_empty() {
                    *id = CallId(format!("call-{i}"));
                }
            }
        }
        let replay_state = stream
            .assembler
            .replay_state()
            .ok()
            .flatten()
            .and_then(|r| serde_json::to_value(r).ok());
        let (turn, step) = self.coords();
        let id = self.ids.message_id(IdPurpose::Assistant { turn, step });
        let source = MessageSource::Model {
            provider: stream.provider.clone(),
            model: stream.model.clone(),
            replay_state,
        };
        let calls: Vec<PlannedCall> = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some(PlannedCall {
                    call_id: id.clone(),
                    name: name.clone(),
                    raw: arguments.clone(),
                }),
                _ => None,
            })
            .collect();
        let mut data = AssistantMessage::new(turn, step, Message::model(id, content, source));
        data.usage = stream.assembler.usage().copied();
        self.append(
            now,
            data,
            Some(SurfaceIntent::append_citing(stream.chunk_seqs)),
        );
        // LC-21.
        if matches!(finish, FinishReason::MaxTokens) {
            self.step_finished(now, Some(StepEnd::MaxTokens));
        } else if calls.is_empty() {
            self.step_finished(now, Some(StepEnd::Completed));
        } else {
            self.set_stage(Stage::Tools(Box::new(ToolPhase {
                calls,
                cursor: 0,
                concluded: false,
                current: None,
            })));
            self.run_tools(now);
        }
    }

    // ------------------------------------------------------------------
    // Request errors and retry (LC-26, streaming.md 6)

    fn request_failed(&mut self, now: i64, failed: Failed) {
        let executor = self.config.retry_executor && failed.policy.is_some();
        let always = matches!(failed.policy, Some(RetryPolicy::Always { .. }));
        if executor && always {
            self.ask_request_error(now, failed, ErrorPhase::AlwaysFirst);
            return;
        }
        if executor {
            if let Some(record) = self.schedule_retry(&failed) {
                self.start_retry_wait(now, record);
                return;
            }
        }
        self.ask_request_error(now, failed, ErrorPhase::Final);
    }

    fn ask_request_error(&mut self, now: i64, failed: Failed, phase: ErrorPhase) {
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
        let hook = self.next_id();
        let answer = self.call_hook(now, |h, cx| h.request_error(cx, &payload));
        match answer {
            Hook::Ready(r) => {
                self.apply_actions(now);
                self.request_error_done(now, failed, phase, r);
            }
            Hook::Defer => {
                self.set_stage(Stage::RequestError {
                    hook,
                    failed: Box::new(failed),
                    phase,
                });
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::RequestError { payload },
                });
                self.apply_actions(now);
            }
        }
    }

    /// LC-26.
    fn request_error_done(
        &mut self,
        now: i64,
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
    fn schedule_retry(&mut self, failed: &Failed) -> Option<RetryRecord> {
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

    fn start_retry_wait(&mut self, now: i64, record: RetryRecord) {
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
        let deadline = now.saturating_add(ceil_ms(record.delay_ms));
        self.set_stage(Stage::RetryWait {
            deadline,
            record: Box::new(record),
        });
    }

    // ------------------------------------------------------------------
    // Steps end; continuation (LC-28..LC-30)

    fn step_finished(&mut self, now: i64, outcome: Option<StepEnd>) {
        if let Some(r) = self.run_mut() {
            // LC-28: a sticky max-tokens is never overwritten.
            if r.turn_end != Some(StepEnd::MaxTokens) {
                r.turn_end = outcome;
            }
        }
        self.close_step(now);
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        self.continue_turn(now);
    }

    /// LC-30.
    fn continue_turn(&mut self, now: i64) {
        let step_input = !self.inbox.list(InboxTarget::NextStep).is_empty();
        let Some(r) = self.run() else { return };
        if r.turn_end.is_none() || step_input {
            if let Some(r) = self.run_mut() {
                r.target = InboxTarget::NextStep;
            }
            self.propose_step(now);
            return;
        }
        let turn = r.turn;
        let hook = self.next_id();
        let answer = self.call_hook(now, |h, cx| h.turn_stopping(cx, turn));
        match answer {
            Hook::Ready(r) => {
                self.apply_actions(now);
                self.turn_stopping_done(now, r);
            }
            Hook::Defer => {
                self.set_stage(Stage::TurnStopping { hook });
                self.emit(Output::Hook {
                    id: hook,
                    call: HookCall::TurnStopping { turn },
                });
                self.apply_actions(now);
            }
        }
    }

    fn turn_stopping_done(&mut self, now: i64, result: Result<(), HookError>) {
        if let Err(e) = result {
            self.turn_error(now, e);
            return;
        }
        if self.aborted() {
            self.close_aborted(now);
            return;
        }
        if !self.inbox.list(InboxTarget::NextStep).is_empty() {
            if let Some(r) = self.run_mut() {
                r.target = InboxTarget::NextStep;
            }
            self.propose_step(now);
            return;
        }
        let reason = match self.run().and_then(|r| r.turn_end) {
            Some(StepEnd::MaxTokens) => TurnEndReason::MaxTokens,
            _ => TurnEndReason::Completed,
        };
        self.end_turn(now, reason, true);
    }

    // ------------------------------------------------------------------
    // Tools (LC-22..LC-25, TL-9)

    fn tool_phase(&mut self) -> Option<&mut ToolPhase> {
        match self.stage_mut() {
            Some(Stage::Tools(t)) => Some(t),
            _ => None,
        }
    }

    /// Runs calls in model order until one waits (LC-23).
    fn run_tools(&mut self, now: i64) {
        loop {
            let aborted = self.aborted();
            let (turn, step) = self.coords();
            let Some(phase) = self.tool_phase() else {
                return;
            };
            if phase.current.is_some() {
                return;
            }
            if phase.cursor >= phase.calls.len() {
                let concluded = phase.concluded;
                self.take_stage();
                self.step_finished(
                    now,
                    if concluded {
                        Some(StepEnd::Completed)
                    } else {
                        None
                    },
                );
                return;
            }
            let i = phase.cursor;
            let (call_id, name, raw) = {
                let c = &phase.calls[i];
                (c.call_id.clone(), c.name.clone(), c.raw.clone())
            };
            let call = ToolCall {
                turn,
                step,
                call_id: call_id.clone(),
                name: name.clone(),
                arguments: raw.clone(),
            };
            let call_seq = self.append(now, call, None).unwrap_or(0);
            if aborted {
                // LC-25: a synthetic pair for every call not yet started.
                self.commit_result(
                    now,
                    &call_id,
                    call_seq,
                    ToolOutcome::aborted_before_dispatch(),
                );
                if let Some(p) = self.tool_phase() {
                    p.cursor += 1;
                }
                continue;
            }
            let token = self.next_id();
            let exec = ToolExecution {
                token,
                turn,
                step,
                call_id,
                name,
                arguments: parse_arguments(&raw),
                raw_arguments: raw,
            };
            if let Some(p) = self.tool_phase() {
                p.current = Some(CallRun {
                    exec: exec.clone(),
                    call_seq,
                    stage: CallStage::Body,
                    body_invoked: false,
                    outcome: None,
                });
            }
            let hook = self.next_id();
            let answer = self.call_hook(now, |h, cx| h.tool_pre_execute(cx, &exec));
            let next = match answer {
                Hook::Ready(r) => {
                    self.apply_actions(now);
                    self.pre_execute_done(now, r)
                }
                Hook::Defer => {
                    self.set_call_stage(CallStage::PreExecute { hook });
                    self.emit(Output::Hook {
                        id: hook,
                        call: HookCall::ToolPreExecute { exec },
                    });
                    self.apply_actions(now);
                    Next::Wait
                }
            };
            if !self.advance_call(now, next) {
                return;
            }
        }
    }

    fn set_call_stage(&mut self, stage: CallStage) {
        if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
            c.stage = stage;
        }
    }

    fn current_exec(&mut self) -> Option<ToolExecution> {
        self.tool_phase()
            .and_then(|p| p.current.as_ref())
            .map(|c| c.exec.clone())
    }

    /// Drives the current call after an answer; then the next calls.
    fn continue_call(&mut self, now: i64, next: Next) {
        if self.advance_call(now, next) {
            self.run_tools(now);
        }
    }

    /// Applies `next` to the current call. Returns whether the call was
    /// committed (so the phase may move on).
    fn advance_call(&mut self, now: i64, mut next: Next) -> bool {
        loop {
            match next {
                Next::Wait => return false,
                Next::Commit(outcome) => {
                    let Some(c) = self.tool_phase().and_then(|p| p.current.take()) else {
                        return false;
                    };
                    let outcome = self.cancellation_replacement(outcome, c.body_invoked);
                    self.commit_result(now, &c.exec.call_id, c.call_seq, outcome);
                    if let Some(p) = self.tool_phase() {
                        p.cursor += 1;
                    }
                    return true;
                }
                Next::Post(outcome) => {
                    let Some(exec) = self.current_exec() else {
                        return false;
                    };
                    let hook = self.next_id();
                    let answer =
                        self.call_hook(now, |h, cx| h.tool_post_execute(cx, &exec, &outcome));
                    match answer {
                        Hook::Ready(r) => {
                            self.apply_actions(now);
                            if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
                                c.outcome = Some(outcome);
                            }
                            next = self.post_execute_done(r);
                        }
                        Hook::Defer => {
                            if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
                                c.outcome = Some(outcome.clone());
                                c.stage = CallStage::PostExecute { hook };
                            }
                            self.emit(Output::Hook {
                                id: hook,
                                call: HookCall::ToolPostExecute { exec, outcome },
                            });
                            self.apply_actions(now);
                            return false;
                        }
                    }
                }
            }
        }
    }

    /// TL-9 steps 4, 5, 7: the pre-execute decision.
    fn pre_execute_done(&mut self, now: i64, result: Result<PreToolDecision, HookError>) -> Next {
        match result {
            Err(e) => Next::Commit(e.tool_outcome()),
            Ok(PreToolDecision::Deny { reason }) => Next::Post(ToolOutcome::error(reason)),
            Ok(PreToolDecision::Allow) => self.after_allow(now),
            Ok(PreToolDecision::Ask { reason }) => {
                let Some(exec) = self.current_exec() else {
                    return Next::Wait;
                };
                let hook = self.next_id();
                let answer =
                    self.call_hook(now, |h, cx| h.tool_approval(cx, &exec, reason.as_deref()));
                match answer {
                    Hook::Ready(outcome) => {
                        self.apply_actions(now);
                        self.approval_outcome(now, outcome, reason)
                    }
                    Hook::Defer => {
                        self.set_call_stage(CallStage::Approval { hook });
                        if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
                            // Keep the ask's reason for the no-service text.
                            c.outcome =
                                Some(ToolOutcome::error(reason.clone().unwrap_or_default()));
                        }
                        self.emit(Output::Hook {
                            id: hook,
                            call: HookCall::ToolApproval { exec, reason },
                        });
                        self.apply_actions(now);
                        Next::Wait
                    }
                }
            }
        }
    }

    fn approval_done(&mut self, now: i64, outcome: ApprovalOutcome) -> Next {
        let reason = self
            .tool_phase()
            .and_then(|p| p.current.as_mut())
            .and_then(|c| c.outcome.take())
            .and_then(|o| o.error.map(|e| e.message))
            .filter(|r| !r.is_empty());
        self.approval_outcome(now, outcome, reason)
    }

    /// TL-10 approval outcomes, TL-9 step 6.
    fn approval_outcome(
        &mut self,
        now: i64,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) -> Next {
        let name = self.current_exec().map(|e| e.name).unwrap_or_default();
        let denial = match outcome {
            ApprovalOutcome::AllowedOnce => return self.after_allow(now),
            ApprovalOutcome::Rejected => format!("the user rejected tool \"{name}\""),
            ApprovalOutcome::Cancelled => {
                if self.aborted() {
                    return Next::Post(ToolOutcome::aborted_before_dispatch());
                }
                format!("approval for tool \"{name}\" was cancelled")
            }
            ApprovalOutcome::Unavailable => {
                format!("tool \"{name}\" requires approval, but no approval channel is available")
            }
            ApprovalOutcome::NoService => reason.unwrap_or_else(|| {
                format!("tool \"{name}\" requires approval (not yet supported)")
            }),
        };
        Next::Post(ToolOutcome::error(denial))
    }

    /// TL-9 steps 7..9 after an allow: guards, abort, lookup, validation,
    /// then the body.
    fn after_allow(&mut self, now: i64) -> Next {
        let Some(exec) = self.current_exec() else {
            return Next::Wait;
        };
        if let Some(reason) = self.call_hook(now, |h, cx| h.tool_guard(cx, &exec)) {
            self.apply_actions(now);
            return Next::Post(ToolOutcome::error(reason));
        }
        self.apply_actions(now);
        if self.aborted() {
            return Next::Post(ToolOutcome::aborted_before_dispatch());
        }
        self.emit(Output::Flush(Checkpoint::BeforeToolBody));
        let Some(tool) = self.config.tools.get(&exec.name) else {
            return Next::Post(ToolOutcome::unknown_tool(&exec.name));
        };
        if tool.validate_arguments {
            let violations = validate_value(&tool.schema.parameters, &exec.arguments, "");
            if !violations.is_empty() {
                return Next::Post(ToolOutcome::invalid_arguments(&violations));
            }
        }
        if let Some(c) = self.tool_phase().and_then(|p| p.current.as_mut()) {
            c.stage = CallStage::Body;
            c.body_invoked = true;
        }
        self.emit(Output::ExecuteTool(exec));
        Next::Wait
    }

    /// TL-9 steps 9, 10: output check and cancellation replacement.
    fn body_done(&mut self, mut outcome: ToolOutcome) -> Next {
        let Some(exec) = self.current_exec() else {
            return Next::Wait;
        };
        if !outcome.is_error() {
            if let (Some(value), Some(schema)) = (
                outcome.value.as_ref(),
                self.config
                    .tools
                    .get(&exec.name)
                    .and_then(|t| t.output_schema.as_ref()),
            ) {
                let violations = validate_value(schema, value, "value");
                if !violations.is_empty() {
                    let contexts = core::mem::take(&mut outcome.additional_contexts);
                    outcome = ToolOutcome::invalid_output(&exec.name, &violations)
                        .with_contexts(contexts);
                }
            }
        }
        let outcome = self.cancellation_replacement(outcome, true);
        Next::Post(outcome)
    }

    /// TL-9 steps 10 and 12: a success seen after cancellation becomes an
    /// abort result; contexts are kept.
    fn cancellation_replacement(&self, outcome: ToolOutcome, body_invoked: bool) -> ToolOutcome {
        if !self.aborted() || outcome.is_error() {
            return outcome;
        }
        let replaced = if body_invoked {
            ToolOutcome::aborted()
        } else {
            ToolOutcome::aborted_before_dispatch()
        };
        replaced.with_contexts(outcome.additional_contexts)
    }

    /// TL-11.
    fn post_execute_done(&mut self, result: Result<PostToolDecision, HookError>) -> Next {
        let Some(mut outcome) = self
            .tool_phase()
            .and_then(|p| p.current.as_mut())
            .and_then(|c| c.outcome.take())
        else {
            return Next::Wait;
        };
        match result {
            Ok(PostToolDecision::Accept {
                content,
                additional_contexts,
            }) => {
                if let Some(content) = content {
                    outcome.content = content;
                }
                outcome.additional_contexts.extend(additional_contexts);
                Next::Commit(outcome)
            }
            Ok(PostToolDecision::Block {
                feedback,
                additional_contexts,
            }) => {
                let text = feedback_text(&feedback);
                let message = if text.is_empty() {
                    String::from("tool result blocked by post-execute policy")
                } else {
                    text
                };
                let mut blocked = ToolOutcome::error(message);
                blocked.content = feedback;
                blocked.meta = outcome.meta;
                blocked.additional_contexts = additional_contexts;
                Next::Commit(blocked)
            }
            Err(e) => {
                let mut failed = e.tool_outcome();
                failed.additional_contexts = outcome.additional_contexts;
                Next::Commit(failed)
            }
        }
    }

    /// LC-23 steps 4..6.
    fn commit_result(&mut self, now: i64, call_id: &CallId, call_seq: u64, outcome: ToolOutcome) {
        let (turn, step) = self.coords();
        let id = self.ids.message_id(IdPurpose::ToolResult {
            turn,
            step,
            call_id,
        });
        let message = Message::tool_result(
            id,
            call_id.clone(),
            outcome.content.clone(),
            outcome.is_error(),
        );
        let mut data = ToolResult::new(turn, step, message);
        data.error = outcome
            .error
            .as_ref()
            .and_then(|e| e.info.as_ref())
            .map(|i| ToolError::new(i.name.clone(), i.code.clone()));
        data.meta = outcome
            .meta
            .as_ref()
            .and_then(|m| serde_json::value::to_raw_value(m).ok());
        self.append(
            now,
            data,
            Some(SurfaceIntent::append_citing(alloc::vec![call_seq])),
        );
        if !outcome.is_error() && outcome.concludes_turn {
            if let Some(p) = self.tool_phase() {
                p.concluded = true;
            }
        }
        for context in outcome.additional_contexts {
            if let Err(e) = self.send_queued(now, context, InboxTarget::NextStep, false) {
                self.faults.push(format!("a tool context was refused: {e}"));
            }
        }
    }
}

/// A direct inbox edit (IB-7).
#[derive(Clone, Debug, PartialEq)]
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
