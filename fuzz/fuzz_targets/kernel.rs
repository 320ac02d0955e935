//! Arbitrary input sequences into the runtime kernel (`dsh_runtime::Kernel`),
//! str0m style: one input enum covering everything a runtime feeds a kernel
//! (user messages, model chunks well-formed or not, stream ends and
//! errors, tool results with tool-owned events, store acknowledgements and
//! failures, answers to asks of every kind, cancels, commands, timers,
//! clock jumps both ways, disposal, and a crash-and-resume from what was
//! stored), against a kernel with two scripted plugins and the approval
//! plugin. Inputs are fed only after the poll loop drained (the drain
//! rule). After every drain:
//!
//! - the new events pass the session invariants (session.md 11) and their
//!   seqs are their positions;
//! - a refused input changed nothing in the log;
//! - `Persist` covers exactly the unwritten events from the first one, and
//!   no effect is released while it is pending;
//! - one model attempt at a time, tool tokens unique while in flight,
//!   cancels only for what was started;
//! - published events arrive once each, in seq order;
//! - `Finished` comes once, with everything written (or the last write
//!   failed and `Kernel::store_error` says so);
//! - the core reports no fault;
//!
//! and at a resume the stored prefix loads as a JSONL log, the resumed
//! kernel starts, and no assistant message id repeats across the log. A
//! case with `twice` runs again and must give a byte-identical log.
#![no_main]

use std::sync::{Arc, Mutex};

use arbitrary::Arbitrary;
use dsh_core::agent::prompt::Assembly;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::agent::{
    ApprovalOutcome, HookError, PostToolDecision, PreStepDecision, PreStepPayload,
    PreToolDecision, PreparedCall, Recovery, RequestErrorPayload, ToolExecution,
};
use dsh_core::session::{EventData, InvariantChecker, SessionEvent};
use dsh_core::{
    ContentBlock, FinishReason, GenerateOptions, LlmCallConfig, LlmFailure, Message, StreamChunk,
    TokenUsage, jsonl,
};
use dsh_runtime::{
    AgentConfig, AgentEvent, ApprovalDecision, Ask, CancelCause, Cx, Effect, Flow, IdMode,
    AskId, AttemptId, InboxTarget, Kernel, Plugin, Reply, Seams, SideReply, Time, ToolDispatch, ToolToken, create_session,
    resume_session,
};
use dsh_approval::{ApprovalMode, ApprovalPlugin, ApprovalPolicy};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// The plugin event type the scripted plugins append.
const PLUGIN_EVENT: &str = "fuzz/note";

/// A scripted plugin: two bits per seam say what it does there (0 pass,
/// 1 short-circuit, 2 fail, 3 ask and pass once answered).
struct Scripted {
    name: &'static str,
    mode: u32,
    extras: u8,
}

impl Scripted {
    fn at(&self, seam: u32) -> u32 {
        (self.mode >> (2 * seam)) & 3
    }

    fn flow<T>(&self, cx: &Cx<'_>, seam: u32, value: T, ask: impl FnOnce() -> Ask) -> Flow<T> {
        match self.at(seam) {
            1 => Flow::Done(value),
            2 => Flow::Fail(HookError::msg("scripted failure")),
            3 if cx.reply().is_none() => Flow::Ask(ask()),
            _ => Flow::Next(value),
        }
    }

    fn ask(&self) -> Ask {
        Ask::Plugin { plugin: self.name.into(), request: json!({"q": 1}) }
    }

    fn extra(&self, bit: u8) -> bool {
        self.extras & (1 << bit) != 0
    }
}

const SEAM_BITS: [Seams; 11] = [
    Seams::ASSEMBLE,
    Seams::PRE_STEP,
    Seams::REQUEST,
    Seams::PREPARE,
    Seams::REQUEST_ERROR,
    Seams::TURN_STOPPING,
    Seams::TOOL_PRE_EXECUTE,
    Seams::TOOL_APPROVAL,
    Seams::TOOL_EXECUTE,
    Seams::TOOL_POST_EXECUTE,
    Seams::COMMAND,
];

impl Plugin for Scripted {
    fn name(&self) -> &str {
        self.name
    }

    fn seams(&self) -> Seams {
        let mut s = Seams::EVENTS | Seams::FLUSH;
        for (i, seam) in SEAM_BITS.iter().enumerate() {
            if self.at(i as u32) != 0 || self.extra(7) {
                s = s | *seam;
            }
        }
        s
    }

    fn tools(&mut self) -> Vec<ToolDefinition> {
        if self.extra(6) {
            vec![ToolDefinition::untyped(format!("{}_tool", self.name), "", json!({}))]
        } else {
            vec![]
        }
    }

    fn assemble(&mut self, cx: &mut Cx<'_>, _: u64, _: u64, value: Assembly) -> Flow<Assembly> {
        self.flow(cx, 0, value, || self.ask())
    }

    fn pre_step(&mut self, cx: &mut Cx<'_>, _: &PreStepPayload, value: PreStepDecision) -> Flow<PreStepDecision> {
        if self.extra(0) && self.at(1) == 1 {
            return Flow::Done(PreStepDecision::Reject);
        }
        self.flow(cx, 1, value, || self.ask())
    }

    fn request(&mut self, cx: &mut Cx<'_>, _: u64, _: u64, value: LlmCallConfig) -> Flow<LlmCallConfig> {
        let name = self.name;
        self.flow(cx, 2, value, || Ask::Model {
            plugin: name.into(),
            request: Box::new(GenerateOptions::new("mock", "mock", vec![])),
        })
    }

    fn prepare(&mut self, cx: &mut Cx<'_>, value: PreparedCall) -> Flow<PreparedCall> {
        self.flow(cx, 3, value, || self.ask())
    }

    fn request_error(&mut self, cx: &mut Cx<'_>, _: &RequestErrorPayload, value: Recovery) -> Flow<Recovery> {
        let value = if self.extra(1) { Recovery::Retry } else { value };
        self.flow(cx, 4, value, || self.ask())
    }

    fn turn_stopping(&mut self, cx: &mut Cx<'_>, _: u64) -> Flow<()> {
        if self.extra(2) && cx.session().len() < 200 {
            let id = format!("{}-stop-{}", self.name, cx.session().len());
            cx.inject(Message::user(id, vec![ContentBlock::text("more")]));
        }
        self.flow(cx, 5, (), || self.ask())
    }

    fn tool_pre_execute(&mut self, cx: &mut Cx<'_>, _: &ToolExecution, value: PreToolDecision) -> Flow<PreToolDecision> {
        if self.extra(3) {
            cx.cancel(CancelCause::Hook { reason: "fuzz".into() }, self.extra(4));
        }
        let value = if self.extra(5) { PreToolDecision::Ask { reason: Some("why".into()) } } else { value };
        self.flow(cx, 6, value, || self.ask())
    }

    fn tool_approval(&mut self, cx: &mut Cx<'_>, exec: &ToolExecution, reason: Option<&str>, value: ApprovalOutcome) -> Flow<ApprovalOutcome> {
        if let Some(Reply::Approval(d)) = cx.reply() {
            return Flow::Done(match d {
                ApprovalDecision::Deny => ApprovalOutcome::Rejected,
                _ => ApprovalOutcome::AllowedOnce,
            });
        }
        self.flow(cx, 7, value, || Ask::Approval {
            call_id: exec.call_id.0.clone(),
            tool: exec.name.clone(),
            arguments: exec.raw_arguments.clone(),
            reason: reason.map(String::from),
        })
    }

    fn tool_execute(&mut self, cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        if self.at(8) == 1 {
            return Flow::Done(ToolDispatch::Answer(ToolOutcome::success(vec![ContentBlock::text("answered")])));
        }
        self.flow(cx, 8, value, || self.ask())
    }

    fn tool_post_execute(&mut self, cx: &mut Cx<'_>, _: &ToolExecution, _: &ToolOutcome, value: PostToolDecision) -> Flow<PostToolDecision> {
        let value = if self.extra(0) {
            PostToolDecision::Block { feedback: vec![], additional_contexts: vec![] }
        } else {
            value
        };
        self.flow(cx, 9, value, || self.ask())
    }

    fn command(&mut self, cx: &mut Cx<'_>, _: &str, value: Value) -> Flow<Value> {
        if self.extra(1) {
            cx.append_plugin(PLUGIN_EVENT, &json!({"by": self.name}));
        }
        self.flow(cx, 10, value, || self.ask())
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, event: &SessionEvent) {
        if self.extra(2) && matches!(event.data(), EventData::TurnStart(_)) {
            cx.append_plugin(PLUGIN_EVENT, &json!({"seq": event.seq()}));
        }
    }
}

#[derive(Arbitrary, Clone, Debug)]
enum FuzzFinish {
    Stop,
    ToolCalls,
    MaxTokens,
    Error(String),
    Aborted,
}

#[derive(Arbitrary, Clone, Debug)]
enum FuzzChunk {
    Start(u8, u8),
    Text(u8, String),
    Reasoning(u8, String),
    ToolDelta(u8, String, Option<String>, String),
    EndText(u8, String),
    EndCall(u8, u8, u8, bool),
    EndReasoning(u8, String),
    Usage(i64, i64),
    Finish(FuzzFinish),
    /// A well-formed text block (start, delta, end) at the next index.
    WholeText(String),
    /// A well-formed tool call block at the next index.
    WholeCall(u8, bool),
}

#[derive(Arbitrary, Clone, Debug)]
enum FuzzReply {
    Allow,
    AllowAlways,
    Deny,
    Plugin,
    ModelOk(String),
    ModelErr,
    Cancelled,
}

#[derive(Arbitrary, Clone, Debug)]
enum Input {
    /// A user message: to the next turn or step, waking or not; `dup`
    /// reuses the previous id.
    Send { next_step: bool, wake: bool, dup: bool, text: String },
    Cancel { cause: u8, keep_inbox: bool },
    Append,
    Chunk(u8, FuzzChunk),
    ModelEnd(u8),
    ModelError(u8),
    /// A tool body's result, with tool-owned events.
    ToolDone { pick: u8, ok: bool, concluding: bool, events: u8 },
    /// The pending write finished (or failed).
    Persisted(bool),
    /// Acknowledge every write at once from now on (or stop).
    AutoPersist(bool),
    Answer(u8, FuzzReply),
    Command(bool),
    /// Time passes by this many ms and the timer is handled.
    Advance(u16),
    /// The clock goes back (the kernel must not).
    ClockBack(u16),
    Timeout,
    Publish(bool),
    Dispose,
    /// Crash and resume from what was stored.
    Resume,
}

#[derive(Arbitrary, Clone, Debug)]
struct Case {
    first: u32,
    first_extras: u8,
    second: u32,
    second_extras: u8,
    approval: u8,
    sequential: bool,
    seed: u64,
    tool_timeout: Option<u8>,
    response_cap: Option<u16>,
    max_steps: Option<u8>,
    write_behind: Option<u8>,
    twice: bool,
    inputs: Vec<Input>,
}

const NAMES: [&str; 5] = ["echo", "slow", "look", "nope", "first_tool"];

fn config(case: &Case) -> AgentConfig {
    let mut tools = ToolRegistry::new();
    let _ = tools.register(ToolDefinition::typed(
        "echo",
        "",
        json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}),
    ));
    let mut slow = ToolDefinition::untyped("slow", "", json!({}));
    slow.timeout_ms = Some(50.0);
    let _ = tools.register(slow);
    let mut look = ToolDefinition::untyped("look", "", json!({}));
    look.concurrency_safe = true;
    let _ = tools.register(look);
    let mut config = AgentConfig::new(LlmCallConfig::new("mock", "mock"));
    config.tools = tools;
    config.ids = if case.sequential { IdMode::Sequential } else { IdMode::Uuid };
    config.seed = case.seed;
    config.tool_timeout_ms = case.tool_timeout.map(|t| u64::from(t) * 10);
    config.tool_grace_ms = 100;
    if let Some(cap) = case.response_cap {
        config.max_response_bytes = u64::from(cap);
    }
    config.max_steps_per_turn = case.max_steps.map(|s| u64::from(s % 8));
    config.write_batch_max_delay_ms = case.write_behind.map(|w| u64::from(w) * 4);
    config.validate_streams = true;
    config
}

fn plugins(case: &Case) -> Vec<Box<dyn Plugin>> {
    let mode = |m: u8| match m % 3 {
        0 => ApprovalMode::Auto,
        1 => ApprovalMode::Ask,
        _ => ApprovalMode::Deny,
    };
    let policy = ApprovalPolicy::new(mode(case.approval)).with("look", mode(case.approval / 3));
    vec![
        Box::new(Scripted { name: "first", mode: case.first, extras: case.first_extras }),
        Box::new(ApprovalPlugin::new(Arc::new(Mutex::new(policy)))),
        Box::new(Scripted { name: "second", mode: case.second, extras: case.second_extras }),
    ]
}

/// What the harness knows of the kernel's outputs, checked after every drain.
struct Harness {
    kernel: Kernel,
    /// The case without its inputs (to build the plugins again).
    case: Case,
    config: AgentConfig,
    /// The events the "store" holds, as JSONL lines after the header.
    header: Vec<u8>,
    stored: Vec<u8>,
    stored_len: u64,
    persist_pending: Option<u64>,
    auto_persist: bool,
    checker: InvariantChecker,
    checked: u64,
    published_next: u64,
    publish: bool,
    attempts: Vec<AttemptId>,
    model_live: Option<AttemptId>,
    next_index: u64,
    tools_started: Vec<ToolToken>,
    tools_live: Vec<ToolToken>,
    asks: Vec<(AskId, u8)>,
    finished: bool,
    now: Time,
    user: u32,
    /// Crashes taken so far (at most [`MAX_RESUMES`] per case).
    resumes: u8,
}

/// Crashes with resume per case. Each one reloads the whole stored log,
/// which made a case's cost grow with its length times its crash count;
/// a few crashes reach every resume path (a crash before, inside and after
/// a turn, and a resume of a resumed log), and the rest of the inputs go to
/// the kernel instead.
const MAX_RESUMES: u8 = 3;

impl Harness {
    fn new(case: &Case) -> Option<Harness> {
        let config = config(case);
        let session = create_session("fz".into(), Time::from_millis(1_000), None).ok()?;
        let mut header = Vec::new();
        jsonl::encode_header_line(session.header(), &mut header);
        let kernel = Kernel::new(config.clone(), session, 0, plugins(case)).ok()?;
        let mut h = Harness {
            kernel,
            case: Case { inputs: vec![], ..case.clone() },
            config,
            header,
            stored: Vec::new(),
            stored_len: 0,
            persist_pending: None,
            auto_persist: true,
            checker: InvariantChecker::new(),
            checked: 0,
            published_next: 0,
            publish: true,
            attempts: vec![],
            model_live: None,
            next_index: 0,
            tools_started: vec![],
            tools_live: vec![],
            asks: vec![],
            finished: false,
            now: Time::from_millis(1_000),
            user: 0,
            resumes: 0,
        };
        h.kernel.set_publish_events(true);
        Some(h)
    }

    fn pick<T: Copy>(v: &[T], k: u8, made_up: fn(u64) -> T) -> T {
        v.get(v.len().wrapping_sub(1 + usize::from(k % 3))).copied().unwrap_or(made_up(u64::from(k)))
    }

    fn chunk(&mut self, c: FuzzChunk) -> Vec<StreamChunk> {
        let i = |x: u8| u64::from(x % 6);
        let name = |n: u8| NAMES[usize::from(n) % NAMES.len()];
        let args = |good: bool| if good { r#"{"text":"hi"}"# } else { "{not json" };
        let one = match c {
            FuzzChunk::Start(x, t) => StreamChunk::block_start(
                i(x),
                ["text", "reasoning", "tool-call", "image", "plugin"][usize::from(t) % 5],
            ),
            FuzzChunk::Text(x, text) => StreamChunk::TextDelta { index: i(x), text: text.into() },
            FuzzChunk::Reasoning(x, text) => StreamChunk::ReasoningDelta { index: i(x), text: text.into() },
            FuzzChunk::ToolDelta(x, id, name, delta) => StreamChunk::ToolCallDelta {
                index: i(x),
                head: dsh_core::ToolCallHead::owned(id, name),
                arguments_delta: delta.into(),
            },
            FuzzChunk::EndText(x, text) => StreamChunk::block_end(i(x), ContentBlock::text(text)),
            FuzzChunk::EndCall(x, n, c, good) => StreamChunk::block_end(
                i(x),
                ContentBlock::tool_call(format!("c{}", c % 4), name(n), args(good)),
            ),
            FuzzChunk::EndReasoning(x, text) => StreamChunk::block_end(i(x), ContentBlock::reasoning(text)),
            FuzzChunk::Usage(a, b) => StreamChunk::usage(TokenUsage::new(a, b)),
            FuzzChunk::Finish(f) => StreamChunk::finish(match f {
                FuzzFinish::Stop => FinishReason::Stop,
                FuzzFinish::ToolCalls => FinishReason::ToolCalls,
                FuzzFinish::MaxTokens => FinishReason::MaxTokens,
                FuzzFinish::Error(m) => FinishReason::Error { failure: LlmFailure::new("SERVER", m) },
                FuzzFinish::Aborted => FinishReason::Aborted { failure: LlmFailure::new("ABORTED", "gone") },
            }),
            FuzzChunk::WholeText(text) => {
                let x = self.next_index;
                self.next_index += 1;
                return vec![
                    StreamChunk::block_start(x, "text"),
                    StreamChunk::TextDelta { index: x, text: text.clone().into() },
                    StreamChunk::block_end(x, ContentBlock::text(text)),
                ];
            }
            FuzzChunk::WholeCall(n, good) => {
                let x = self.next_index;
                self.next_index += 1;
                let id = format!("call{x}");
                return vec![
                    StreamChunk::block_start(x, "tool-call"),
                    StreamChunk::ToolCallDelta {
                        index: x,
                        head: dsh_core::ToolCallHead::owned(id.clone(), Some(name(n).into())),
                        arguments_delta: args(good).into(),
                    },
                    StreamChunk::block_end(x, ContentBlock::tool_call(id, name(n), args(good))),
                ];
            }
        };
        vec![one]
    }

    /// Feeds one input; returns whether the kernel refused it.
    fn feed(&mut self, input: Input) -> bool {
        let now = self.now;
        match input {
            Input::Send { next_step, wake, dup, text } => {
                if !dup {
                    self.user += 1;
                }
                let m = Message::user(format!("u{}", self.user), vec![ContentBlock::text(text)]);
                let target = if next_step { InboxTarget::NextStep } else { InboxTarget::NextTurn };
                self.kernel.send(now, m, target, wake).is_err()
            }
            Input::Cancel { cause, keep_inbox } => {
                let cause = match cause % 4 {
                    0 => CancelCause::User,
                    1 => CancelCause::Parent,
                    2 => CancelCause::Disposed,
                    _ => CancelCause::Hook { reason: "x".into() },
                };
                self.kernel.cancel(now, cause, keep_inbox);
                false
            }
            Input::Append => self.kernel.append_event(now, EventData::plugin(PLUGIN_EVENT, &json!({}))).is_err(),
            Input::Chunk(p, c) => {
                let attempt = Self::pick(&self.attempts, p, AttemptId::new);
                // Several chunks: each refused one must change nothing.
                for chunk in self.chunk(c) {
                    let before = self.kernel.session().len();
                    if self.kernel.model_chunk(now, attempt, chunk).is_err() {
                        assert_eq!(self.kernel.session().len(), before, "a refused chunk changed the log");
                    }
                }
                false
            }
            Input::ModelEnd(p) => {
                let attempt = Self::pick(&self.attempts, p, AttemptId::new);
                let refused = self.kernel.model_end(now, attempt).is_err();
                if !refused && self.model_live == Some(attempt) {
                    self.model_live = None;
                }
                refused
            }
            Input::ModelError(p) => {
                let attempt = Self::pick(&self.attempts, p, AttemptId::new);
                let refused = self.kernel.model_error(now, attempt, HookError::msg("threw")).is_err();
                if !refused && self.model_live == Some(attempt) {
                    self.model_live = None;
                }
                refused
            }
            Input::ToolDone { pick, ok, concluding, events } => {
                let token = Self::pick(&self.tools_started, pick, ToolToken::new);
                let mut o = if ok { ToolOutcome::success(vec![ContentBlock::text("ok")]) } else { ToolOutcome::error("bad") };
                if concluding {
                    o = o.concluding();
                }
                let events = (0..events % 3).map(|i| EventData::plugin(PLUGIN_EVENT, &json!({"i": i}))).collect();
                let refused = self.kernel.tool_done(now, token, o, events).is_err();
                if !refused {
                    self.tools_live.retain(|t| *t != token);
                }
                refused
            }
            Input::Persisted(ok) => self.ack(ok),
            Input::AutoPersist(on) => {
                self.auto_persist = on;
                false
            }
            Input::Answer(p, r) => {
                let (id, _) = self.asks.get(self.asks.len().wrapping_sub(1 + usize::from(p % 3))).copied().unwrap_or((AskId::new(u64::from(p)), 0));
                let reply = match r {
                    FuzzReply::Allow => Reply::Approval(ApprovalDecision::Allow),
                    FuzzReply::AllowAlways => Reply::Approval(ApprovalDecision::AllowAlways),
                    FuzzReply::Deny => Reply::Approval(ApprovalDecision::Deny),
                    FuzzReply::Plugin => Reply::Plugin(json!({"a": 1})),
                    FuzzReply::ModelOk(text) => Reply::Model(Ok(SideReply::new(text, None))),
                    FuzzReply::ModelErr => Reply::Model(Err("side call failed".into())),
                    FuzzReply::Cancelled => Reply::Cancelled,
                };
                let refused = self.kernel.answer(now, id, reply).is_err();
                if !refused {
                    self.asks.retain(|(a, _)| *a != id);
                }
                refused
            }
            Input::Command(named) => self.kernel.command(now, if named { "compact" } else { "" }, json!({"n": 1})).is_err(),
            Input::Advance(ms) => {
                // A wake-up at an arbitrary time: a timer armed for `now`.
                self.now += u64::from(ms);
                self.kernel.handle_timeout(self.now, self.now);
                false
            }
            Input::ClockBack(ms) => {
                self.now = Time::from_millis(self.now.as_millis().saturating_sub(i64::from(ms)));
                false
            }
            Input::Timeout => {
                if let Some(d) = self.kernel.poll_timeout() {
                    // The deadline is reached whatever the wall clock reads
                    // (it may have gone back).
                    self.kernel.handle_timeout(self.now, d);
                }
                false
            }
            Input::Publish(on) => {
                self.kernel.set_publish_events(on);
                if on && !self.publish {
                    self.published_next = self.kernel.session().len();
                }
                self.publish = on;
                false
            }
            Input::Dispose => {
                self.kernel.dispose(now);
                false
            }
            Input::Resume => {
                if self.resumes < MAX_RESUMES {
                    self.resumes += 1;
                    self.resume();
                }
                false
            }
        }
    }

    /// Reports the pending write; returns whether the kernel refused.
    fn ack(&mut self, ok: bool) -> bool {
        let Some(end) = self.persist_pending else {
            assert!(self.kernel.persisted(self.now, Ok(())).is_err(), "an ack without a write was taken");
            return true;
        };
        let refused = self.kernel.persisted(self.now, if ok { Ok(()) } else { Err("disk full".into()) }).is_err();
        assert!(!refused, "the pending write's ack was refused");
        self.persist_pending = None;
        if ok {
            let events = self.kernel.session().events();
            let new = events.get(self.stored_len as usize..end as usize).expect("persist range within the log");
            jsonl::encode_batch(new, false, &mut self.stored);
            self.stored_len = end;
        }
        false
    }

    /// A crash: a new kernel over what the store holds, repaired as a
    /// store repairs a crashed log.
    fn resume(&mut self) {
        let mut bytes = self.header.clone();
        bytes.extend_from_slice(&self.stored);
        let loaded = match jsonl::load_log(&bytes, &[PLUGIN_EVENT]) {
            Ok(l) => l,
            Err(e) => panic!("the stored log does not load: {e}"),
        };
        let mut repaired = loaded.repaired_bytes(&bytes, false);
        let stored = loaded.session.events().len() as u64;
        let header = loaded.session.header().clone();
        let session = match resume_session(header, loaded.session.events().to_vec(), self.now) {
            Ok(s) => s,
            Err(e) => panic!("the stored log does not resume: {e}"),
        };
        // The plugins start again: their state is lost in a crash.
        let plugins = plugins(&self.case);
        let kernel = match Kernel::new(self.config.clone(), session, stored, plugins) {
            Ok(k) => k,
            Err(e) => panic!("the resumed kernel does not start: {e}"),
        };
        // The store now holds the repaired file.
        let header_len = self.header.len();
        self.stored = repaired.split_off(header_len);
        self.stored_len = stored;
        self.kernel = kernel;
        self.kernel.set_publish_events(true);
        self.publish = true;
        self.persist_pending = None;
        self.checker = InvariantChecker::new();
        self.checked = 0;
        self.published_next = self.kernel.session().len();
        self.attempts.clear();
        self.model_live = None;
        self.tools_started.clear();
        self.tools_live.clear();
        self.asks.clear();
        self.finished = false;
        let mut ids = std::collections::BTreeSet::new();
        for e in self.kernel.session().events() {
            if let EventData::AssistantMessage(a) = e.data() {
                assert!(ids.insert(a.message.id.clone()), "assistant message id {} repeats", a.message.id);
            }
        }
    }

    /// Drains the kernel (answering writes when auto-persist is on) and
    /// checks every output.
    fn drain(&mut self) {
        for _ in 0..64 {
            let mut persist_seen = false;
            while let Some(effect) = self.kernel.poll() {
                assert!(!persist_seen, "an effect was released while a write is pending: {effect:?}");
                assert!(!self.finished, "an effect after Finished: {effect:?}");
                self.check(effect, &mut persist_seen);
            }
            if !(self.auto_persist && self.persist_pending.is_some()) {
                break;
            }
            self.ack(true);
        }
        self.check_log();
    }

    fn check(&mut self, effect: Effect, persist_seen: &mut bool) {
        if TRACE.with(|t| *t) {
            eprintln!("  effect {effect:?}");
        }
        match effect {
            Effect::StartModel(call) => {
                assert_eq!(self.model_live, None, "a second model attempt while one streams");
                self.model_live = Some(call.attempt);
                self.attempts.push(call.attempt);
                self.next_index = 0;
            }
            Effect::CancelModel { attempt } => {
                assert!(self.attempts.contains(&attempt), "cancel of attempt {attempt} never started");
                if self.model_live == Some(attempt) {
                    self.model_live = None;
                }
            }
            Effect::StartTool { exec, .. } => {
                assert!(!self.tools_live.contains(&exec.token), "token {} started twice", exec.token);
                self.tools_live.push(exec.token);
                self.tools_started.push(exec.token);
            }
            Effect::CancelTool { token } => {
                assert!(self.tools_started.contains(&token), "cancel of tool {token} never started");
            }
            Effect::SideModel { id, .. } => self.asks.push((id, 2)),
            Effect::CancelSide { .. } => {}
            Effect::Persist { range, .. } => {
                assert_eq!(self.persist_pending, None, "a second write while one is pending");
                assert_eq!(range.start, self.stored_len, "the write does not start at the first unwritten event");
                assert!(range.end > range.start && range.end <= self.kernel.session().len(), "bad write range {range:?}");
                self.persist_pending = Some(range.end);
                *persist_seen = true;
            }
            Effect::Publish(AgentEvent::Event(e)) => {
                assert!(self.publish, "an event published while publishing is off");
                assert_eq!(e.seq(), self.published_next, "published events out of order");
                self.published_next += 1;
            }
            Effect::Publish(AgentEvent::ApprovalRequested { id, .. }) => self.asks.push((id, 0)),
            Effect::Publish(AgentEvent::Asked { id, .. }) => self.asks.push((id, 1)),
            Effect::Publish(_) => {}
            Effect::Finished => {
                assert!(!self.finished, "Finished twice");
                self.finished = true;
                // Everything written, or the last write failed and the
                // kernel says so (a disposal does not retry forever).
                assert!(
                    self.stored_len == self.kernel.session().len() || self.kernel.store_error().is_some(),
                    "Finished with unwritten events and no store error"
                );
            }
            other => panic!("an effect this harness does not know: {other:?}"),
        }
        // A refused attempt must not hold the harness's live slot forever.
        if self.kernel.is_idle() {
            self.model_live = None;
        }
    }

    fn check_log(&mut self) {
        let session = self.kernel.session();
        for (i, e) in session.events_from(self.checked).iter().enumerate() {
            assert_eq!(e.seq(), self.checked + i as u64, "seq is not the position");
            if let Err(v) = self.checker.push(e) {
                panic!("invariant violated: {v}");
            }
        }
        self.checked = session.len();
        assert!(self.kernel.core().faults().is_empty(), "faults: {:?}", self.kernel.core().faults());
    }
}

thread_local! {
    /// `KERNEL_FUZZ_TRACE` set: print every input (to read a crash).
    static TRACE: bool = std::env::var_os("KERNEL_FUZZ_TRACE").is_some();
}

/// Runs a case; returns the final log's JSONL text.
fn run(case: &Case) -> Vec<u8> {
    let Some(mut h) = Harness::new(case) else { return vec![] };
    h.drain();
    for input in case.inputs.iter().take(160).cloned() {
        let before = h.kernel.session().len();
        let resume = matches!(input, Input::Resume);
        let trace = TRACE.with(|t| *t);
        if trace {
            eprintln!("input {input:?}");
        }
        let refused = h.feed(input);
        if trace {
            eprintln!("  refused={refused} len {} -> {}", before, h.kernel.session().len());
        }
        if refused && !resume {
            assert_eq!(h.kernel.session().len(), before, "a refused input changed the log");
        }
        h.drain();
        if trace {
            for e in h.kernel.session().events_from(before) {
                eprintln!("  event {} {:?}", e.seq(), e.data());
            }
        }
    }
    let mut out = Vec::new();
    if case.twice {
        jsonl::encode_batch(h.kernel.session().events(), false, &mut out);
    }
    out
}

fuzz_target!(|case: Case| {
    let first = run(&case);
    if case.twice {
        assert!(run(&case) == first, "the same inputs gave a different log");
    }
});
