//! The kernel plugin: folds session events into spans.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use dsh_core::session::{EventData, SessionEvent, TurnEndReason};
use dsh_core::{ContentBlock, FinishReason, LlmFailure, Message, MessageSource, TokenUsage};
use dsh_runtime::{Cx, Plugin, Seams};
use serde_json::{Value, json};

use crate::attr;
use crate::span::{
    AttrValue, Attribute, SpanData, SpanEvent, SpanId, SpanKind, Status, TraceId, ms_to_ns,
    span_id, trace_id,
};

/// Where finished spans go. The plugin calls [`export`](SpanSink::export)
/// on the agent's thread, once per span as it ends, so an implementation
/// must return at once (queue, never block on I/O).
pub trait SpanSink: Send {
    /// Takes one finished span.
    fn export(&mut self, span: SpanData);
}

impl<F: FnMut(SpanData) + Send> SpanSink for F {
    fn export(&mut self, span: SpanData) {
        self(span)
    }
}

/// Settings of the plugin.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OtelConfig {
    /// Put prompt, answer and tool text on the spans
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`,
    /// `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`). Off by
    /// default: without it no message or tool text leaves the agent.
    pub capture_content: bool,
    /// Most bytes of one captured text (cut at a char boundary).
    pub max_content_bytes: usize,
    /// `gen_ai.agent.name` of the turn spans.
    pub agent_name: String,
}

impl Default for OtelConfig {
    fn default() -> Self {
        OtelConfig {
            capture_content: false,
            max_content_bytes: DEFAULT_MAX_CONTENT_BYTES,
            agent_name: String::from("dsh"),
        }
    }
}

impl OtelConfig {
    /// The defaults with content capture set to `on`.
    pub fn with_content(mut self, on: bool) -> Self {
        self.capture_content = on;
        self
    }
}

/// Default of [`OtelConfig::max_content_bytes`].
pub const DEFAULT_MAX_CONTENT_BYTES: usize = 8 * 1024;
/// Most tool spans open at once in a step; later calls get no span.
pub const MAX_OPEN_TOOLS: usize = 1024;
/// Most events one span keeps (retries); later ones are not recorded.
pub const MAX_SPAN_EVENTS: usize = 64;

/// Most bytes of a tool or model name on a span (names come from the
/// model and the configuration).
pub const MAX_NAME_BYTES: usize = 256;

/// The plugin name.
pub const PLUGIN: &str = "otel";

/// A model attempt in flight (or finished and waiting for its
/// `assistant/message`).
struct Attempt {
    span: SpanData,
    /// The `finish` chunk was seen; the span ends at its time.
    finished: bool,
}

/// The turn being traced.
struct Turn {
    number: u64,
    trace: TraceId,
    span: SpanData,
    step: Option<SpanData>,
    attempt: Option<Attempt>,
    tools: Vec<(String, SpanData)>,
    /// Time (ms) of the latest event of the step before its model attempt
    /// opened: the attempt's start (the request goes out right after it).
    mark: Option<i64>,
    /// The user's messages of this turn (content capture only).
    input: Vec<Value>,
}

/// The OpenTelemetry plugin: listens to every session event
/// ([`Seams::EVENTS`]) and builds one trace per turn:
///
/// ```text
/// invoke_agent dsh                 turn/start .. turn/end
/// ├── step                         step/start .. step/end
/// │   ├── chat <model>             one per model attempt
/// │   └── execute_tool <name>      tool/call .. tool/result
/// └── step
///     └── chat <model>
/// ```
///
/// Ids are functions of the session id and the opening event's seq
/// ([`span_id`], [`trace_id`]); times are the events' `time` fields. The
/// plugin reads the log only: it appends nothing and changes no seam's
/// value, so the log is byte-identical with or without it.
pub struct OtelPlugin {
    config: OtelConfig,
    sink: Box<dyn SpanSink>,
    turn: Option<Turn>,
    /// Provider route and model of the latest `request/header` or
    /// `request/context`.
    route: Option<(String, String)>,
}

impl OtelPlugin {
    /// A plugin handing finished spans to `sink`.
    pub fn new(config: OtelConfig, sink: impl SpanSink + 'static) -> Self {
        OtelPlugin {
            config,
            sink: Box::new(sink),
            turn: None,
            route: None,
        }
    }

    fn cut(&self, text: &str) -> String {
        cut(text, self.config.max_content_bytes)
    }

    fn on_turn_start(&mut self, session: &str, seq: u64, time: i64, number: u64) {
        self.close_turn(time, None);
        let trace = trace_id(session, number);
        let mut span = SpanData::new(
            trace,
            span_id(session, seq),
            None,
            format!("invoke_agent {}", self.config.agent_name),
            SpanKind::Internal,
            ms_to_ns(time),
        );
        span.set_str(attr::OPERATION_NAME, "invoke_agent");
        span.set_str(attr::AGENT_NAME, &self.config.agent_name);
        span.set_str(attr::CONVERSATION_ID, session);
        span.set_int(attr::DSH_TURN, clamp_i64(number));
        self.turn = Some(Turn {
            number,
            trace,
            span,
            step: None,
            attempt: None,
            tools: Vec::new(),
            mark: None,
            input: Vec::new(),
        });
    }

    fn on_step_start(&mut self, session: &str, seq: u64, time: i64, step: u64) {
        self.close_step(time);
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let mut span = SpanData::new(
            turn.trace,
            span_id(session, seq),
            Some(turn.span.span_id),
            String::from("step"),
            SpanKind::Internal,
            ms_to_ns(time),
        );
        span.set_int(attr::DSH_TURN, clamp_i64(turn.number));
        span.set_int(attr::DSH_STEP, clamp_i64(step));
        turn.step = Some(span);
        turn.mark = Some(time);
    }

    /// The parent of spans inside a step: the step, else the turn.
    fn parent(turn: &Turn) -> SpanId {
        turn.step.as_ref().map_or(turn.span.span_id, |s| s.span_id)
    }

    fn open_attempt(&mut self, session: &str, seq: u64, start: i64, retry: Option<u64>) {
        self.finish_attempt(start);
        let route = self.route.clone();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let (provider, model) = route.unwrap_or_default();
        let mut span = SpanData::new(
            turn.trace,
            span_id(session, seq),
            Some(Self::parent(turn)),
            if model.is_empty() {
                String::from("chat")
            } else {
                format!("chat {}", cut(&model, MAX_NAME_BYTES))
            },
            SpanKind::Client,
            ms_to_ns(start),
        );
        span.set_str(attr::OPERATION_NAME, "chat");
        if !provider.is_empty() {
            let name = provider_name(&provider);
            span.set_str(attr::PROVIDER_NAME, name);
            span.set_str(attr::SYSTEM, name);
            span.set_str(attr::DSH_PROVIDER_ROUTE, &provider);
        }
        if !model.is_empty() {
            span.set_str(attr::REQUEST_MODEL, &model);
        }
        span.set_int(attr::DSH_TURN, clamp_i64(turn.number));
        if let Some(step) = turn.step.as_ref().and_then(|s| s.attr(attr::DSH_STEP)) {
            span.set(attr::DSH_STEP, step.clone());
        }
        if let Some(r) = retry {
            span.set_int(attr::DSH_RETRY, clamp_i64(r));
        }
        turn.attempt = Some(Attempt {
            span,
            finished: false,
        });
    }

    /// Ends and exports the open attempt (at its finish, else at `time`).
    fn finish_attempt(&mut self, time: i64) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if let Some(mut a) = turn.attempt.take() {
            if !a.finished {
                a.span.end_at(ms_to_ns(time));
                if a.span.status == Status::Unset {
                    a.span.status = Status::Error(String::from("the model call did not finish"));
                    a.span.set_str(attr::ERROR_TYPE, "unfinished");
                }
            }
            self.sink.export(a.span);
        }
        // The next attempt of this step starts after what comes now.
        if let Some(turn) = self.turn.as_mut() {
            turn.mark = Some(time);
        }
    }

    fn on_chunk(&mut self, session: &str, seq: u64, time: i64, chunk: &dsh_core::StreamChunk) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let needs_open = match &turn.attempt {
            None => true,
            Some(a) => a.finished,
        };
        if needs_open {
            let start = turn.mark.unwrap_or(time);
            self.open_attempt(session, seq, start, None);
        }
        let Some(a) = self.turn.as_mut().and_then(|t| t.attempt.as_mut()) else {
            return;
        };
        match chunk {
            dsh_core::StreamChunk::Usage { usage } => set_usage(&mut a.span, usage),
            dsh_core::StreamChunk::Finish { reason, .. } => {
                a.finished = true;
                a.span.end_at(ms_to_ns(time));
                a.span.set(
                    attr::RESPONSE_FINISH_REASONS,
                    AttrValue::StrArray(alloc::vec![finish_reason(reason).to_string()]),
                );
                if let Some(f) = reason.failure() {
                    fail(&mut a.span, f, time);
                }
            }
            _ => {}
        }
    }

    fn on_assistant_message(&mut self, time: i64, message: &Message, usage: Option<&TokenUsage>) {
        let content = self
            .config
            .capture_content
            .then(|| self.output_messages(message));
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if let Some(a) = turn.attempt.as_mut() {
            if let MessageSource::Model { model, .. } = &message.source {
                a.span.set_str(attr::RESPONSE_MODEL, model);
            }
            if let Some(u) = usage
                && a.span.attr(attr::USAGE_INPUT_TOKENS).is_none()
            {
                set_usage(&mut a.span, u);
            }
            if let Some(c) = content {
                a.span.set(attr::OUTPUT_MESSAGES, AttrValue::Str(c));
            }
        }
        self.finish_attempt(time);
    }

    /// The GenAI message parts of `message`: text, reasoning and tool
    /// calls, each text cut to the configured size.
    fn parts(&self, message: &Message) -> Vec<Value> {
        message
            .content
            .iter()
            .take(MAX_SPAN_EVENTS)
            .filter_map(|b| match b {
                ContentBlock::Text { text } => {
                    Some(json!({"type": "text", "content": self.cut(text)}))
                }
                ContentBlock::Reasoning { text } => {
                    Some(json!({"type": "reasoning", "content": self.cut(text)}))
                }
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some(json!({
                    "type": "tool_call",
                    "id": id.as_str(),
                    "name": name,
                    "arguments": self.cut(arguments),
                })),
                _ => None,
            })
            .collect()
    }

    fn output_messages(&self, message: &Message) -> String {
        json!([{ "role": "assistant", "parts": self.parts(message) }]).to_string()
    }

    fn on_user_message(&mut self, message: &Message) {
        if !self.config.capture_content || !matches!(message.source, MessageSource::User) {
            return;
        }
        let parts = self.parts(message);
        if let Some(turn) = self.turn.as_mut()
            && turn.input.len() < MAX_SPAN_EVENTS
        {
            turn.input.push(json!({"role": "user", "parts": parts}));
        }
    }

    fn on_retry(&mut self, time: i64, retry: &dsh_core::session::LlmRetry) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let mut attributes = alloc::vec![
            Attribute {
                key: attr::DSH_RETRY,
                value: AttrValue::Int(clamp_i64(retry.retry)),
            },
            Attribute {
                key: attr::ERROR_TYPE,
                value: AttrValue::Str(retry.failure.code.clone()),
            },
            Attribute {
                key: attr::DSH_RETRY_DELAY_MS,
                value: AttrValue::Int(retry.delay_ms.max(0.0).min(i64::MAX as f64) as i64),
            },
        ];
        if let Some(max) = retry.max_retries {
            attributes.push(Attribute {
                key: attr::DSH_RETRY_MAX,
                value: AttrValue::Int(clamp_i64(max)),
            });
        }
        let event = SpanEvent {
            name: attr::EVENT_RETRY,
            time_ns: ms_to_ns(time),
            attributes,
        };
        // On the failed attempt when it is still pending, else the step.
        let target = match turn.attempt.as_mut() {
            Some(a) => Some(&mut a.span),
            None => turn.step.as_mut(),
        };
        if let Some(span) = target {
            push_event(span, event);
        }
    }

    fn on_tool_call(
        &mut self,
        session: &str,
        seq: u64,
        time: i64,
        call: &dsh_core::session::ToolCall,
    ) {
        self.finish_attempt(time);
        let args = self
            .config
            .capture_content
            .then(|| self.cut(&call.arguments));
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if turn.tools.len() >= MAX_OPEN_TOOLS {
            return;
        }
        let mut span = SpanData::new(
            turn.trace,
            span_id(session, seq),
            Some(Self::parent(turn)),
            format!("execute_tool {}", cut(&call.name, MAX_NAME_BYTES)),
            SpanKind::Internal,
            ms_to_ns(time),
        );
        span.set_str(attr::OPERATION_NAME, "execute_tool");
        span.set_str(attr::TOOL_NAME, &cut(&call.name, MAX_NAME_BYTES));
        span.set_str(attr::TOOL_CALL_ID, call.call_id.as_str());
        span.set_str(attr::TOOL_TYPE, "function");
        if let Some(a) = args {
            span.set(attr::TOOL_CALL_ARGUMENTS, AttrValue::Str(a));
        }
        turn.tools.push((call.call_id.as_str().to_string(), span));
    }

    fn on_tool_result(&mut self, time: i64, result: &dsh_core::session::ToolResult) {
        let Some((call_id, is_error, text)) = tool_result_parts(&result.message) else {
            return;
        };
        let text = self.config.capture_content.then(|| self.cut(&text));
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let Some(i) = turn.tools.iter().position(|(id, _)| *id == call_id) else {
            return;
        };
        let (_, mut span) = turn.tools.remove(i);
        span.end_at(ms_to_ns(time));
        if let Some(t) = text {
            span.set(attr::TOOL_CALL_RESULT, AttrValue::Str(t));
        }
        if is_error || result.error.is_some() {
            let code = result
                .error
                .as_ref()
                .map_or_else(|| String::from("tool_error"), |e| e.code.clone());
            span.set_str(attr::ERROR_TYPE, &code);
            let mut attributes = alloc::vec![Attribute {
                key: attr::EXCEPTION_TYPE,
                value: AttrValue::Str(
                    result
                        .error
                        .as_ref()
                        .map_or_else(|| code.clone(), |e| e.name.clone())
                ),
            }];
            if let Some(AttrValue::Str(t)) = span.attr(attr::TOOL_CALL_RESULT) {
                attributes.push(Attribute {
                    key: attr::EXCEPTION_MESSAGE,
                    value: AttrValue::Str(t.clone()),
                });
            }
            push_event(
                &mut span,
                SpanEvent {
                    name: attr::EVENT_EXCEPTION,
                    time_ns: ms_to_ns(time),
                    attributes,
                },
            );
            span.status = Status::Error(code);
        }
        self.sink.export(span);
    }

    /// Ends the open step: its attempt, its unanswered tools, then itself.
    fn close_step(&mut self, time: i64) {
        self.finish_attempt(time);
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        for (_, mut span) in turn.tools.drain(..) {
            span.end_at(ms_to_ns(time));
            span.set_str(attr::ERROR_TYPE, "no_result");
            span.status = Status::Error(String::from("the tool call got no result"));
            self.sink.export(span);
        }
        if let Some(mut step) = turn.step.take() {
            step.end_at(ms_to_ns(time));
            self.sink.export(step);
        }
    }

    /// Ends the open turn (`reason` from its `turn/end`; `None`: it was
    /// cut off by a new turn).
    fn close_turn(&mut self, time: i64, reason: Option<&TurnEndReason>) {
        self.close_step(time);
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        let span = &mut turn.span;
        span.end_at(ms_to_ns(time));
        if !turn.input.is_empty() {
            span.set(
                attr::INPUT_MESSAGES,
                AttrValue::Str(Value::Array(core::mem::take(&mut turn.input)).to_string()),
            );
        }
        match reason {
            Some(r) => {
                span.set_str(attr::DSH_TURN_END, r.kind());
                match r {
                    TurnEndReason::Error { error } => fail(span, error, time),
                    TurnEndReason::Interrupted => {
                        span.set_str(attr::ERROR_TYPE, "interrupted");
                        span.status = Status::Error(String::from("interrupted"));
                    }
                    _ => {}
                }
            }
            None => {
                span.set_str(attr::ERROR_TYPE, "unfinished");
                span.status = Status::Error(String::from("the turn did not end"));
            }
        }
        self.sink.export(turn.span);
    }
}

impl Plugin for OtelPlugin {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn seams(&self) -> Seams {
        Seams::EVENTS
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, event: &SessionEvent) {
        self.observe(cx.session().id().as_str(), event);
    }
}

impl OtelPlugin {
    /// Takes one event of session `session`, in seq order: what
    /// [`Plugin::on_event`] does, callable without a kernel (to trace a
    /// stored log).
    pub fn observe(&mut self, session: &str, event: &SessionEvent) {
        let (seq, time) = (event.seq(), event.time());
        match event.data() {
            EventData::TurnStart(t) => self.on_turn_start(session, seq, time, t.turn),
            EventData::TurnEnd(t) => {
                if self.turn.as_ref().is_some_and(|o| o.number == t.turn) {
                    self.close_turn(time, Some(&t.reason));
                }
            }
            EventData::StepStart(s) => self.on_step_start(session, seq, time, s.step),
            EventData::StepEnd(_) => self.close_step(time),
            EventData::RequestHeader(h) => {
                self.route = Some((
                    h.header.config.provider.clone(),
                    h.header.config.model.clone(),
                ));
                self.mark(time);
            }
            EventData::RequestContext(c) => {
                self.route = Some((c.provider.clone(), c.model.clone()));
                self.mark(time);
            }
            EventData::AssistantChunk(c) => self.on_chunk(session, seq, time, c.chunk_ref()),
            EventData::AssistantMessage(m) => {
                self.on_assistant_message(time, &m.message, m.usage.as_ref())
            }
            EventData::LlmRetry(r) => {
                self.on_retry(time, r);
                self.finish_attempt(time);
            }
            EventData::LlmRetryStarted(r) => {
                self.open_attempt(session, seq, time, Some(r.retry));
            }
            EventData::ToolCall(c) => self.on_tool_call(session, seq, time, c),
            EventData::ToolResult(r) => self.on_tool_result(time, r),
            EventData::UserMessage(m) => {
                self.on_user_message(m);
                self.mark(time);
            }
            _ => self.mark(time),
        }
    }

    /// Moves the start of the step's next attempt to `time` while no
    /// attempt is open.
    fn mark(&mut self, time: i64) {
        if let Some(turn) = self.turn.as_mut()
            && turn.attempt.is_none()
            && turn.step.is_some()
        {
            turn.mark = Some(time);
        }
    }
}

/// The call id, error flag and text of a `tool/result` message.
fn tool_result_parts(message: &Message) -> Option<(String, bool, String)> {
    message.content.iter().find_map(|b| match b {
        ContentBlock::ToolResult {
            tool_call_id,
            content,
            is_error,
        } => {
            let mut text = String::new();
            for c in content {
                if let ContentBlock::Text { text: t } = c {
                    text.push_str(t);
                }
            }
            Some((
                tool_call_id.as_str().to_string(),
                *is_error == Some(true),
                text,
            ))
        }
        _ => None,
    })
}

fn set_usage(span: &mut SpanData, u: &TokenUsage) {
    // GenAI semconv: input tokens include the cached ones.
    span.set_int(attr::USAGE_INPUT_TOKENS, u.billed_input());
    span.set_int(attr::USAGE_OUTPUT_TOKENS, u.output_tokens);
    if let Some(c) = u.cache_read_tokens {
        span.set_int(attr::USAGE_CACHE_READ, c);
    }
    if let Some(c) = u.cache_write_tokens {
        span.set_int(attr::USAGE_CACHE_CREATION, c);
    }
    if let Some(r) = u.reasoning_tokens {
        span.set_int(attr::DSH_REASONING_TOKENS, r);
    }
}

/// Marks `span` failed with `failure`: status, `error.type` and an
/// `exception` event.
fn fail(span: &mut SpanData, failure: &LlmFailure, time: i64) {
    span.set_str(attr::ERROR_TYPE, &failure.code);
    if let Some(status) = failure.status {
        span.set_int(attr::HTTP_STATUS, i64::from(status));
    }
    push_event(
        span,
        SpanEvent {
            name: attr::EVENT_EXCEPTION,
            time_ns: ms_to_ns(time),
            attributes: alloc::vec![
                Attribute {
                    key: attr::EXCEPTION_TYPE,
                    value: AttrValue::Str(failure.code.clone()),
                },
                Attribute {
                    key: attr::EXCEPTION_MESSAGE,
                    value: AttrValue::Str(cut(&failure.message, DEFAULT_MAX_CONTENT_BYTES)),
                },
            ],
        },
    );
    span.status = Status::Error(failure.code.clone());
}

fn push_event(span: &mut SpanData, event: SpanEvent) {
    if span.events.len() < MAX_SPAN_EVENTS {
        span.events.push(event);
    }
}

/// `gen_ai.provider.name` of a dsh provider route: the well-known name
/// when the route names one, else the route.
pub fn provider_name(route: &str) -> &str {
    if route.contains("deepseek") {
        "deepseek"
    } else if route.starts_with("anthropic") {
        "anthropic"
    } else if route.contains("openai") {
        "openai"
    } else {
        route
    }
}

/// `gen_ai.response.finish_reasons` entry of a finish (the OpenAI names
/// the conventions use).
pub fn finish_reason(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::MaxTokens => "length",
        FinishReason::Aborted { .. } => "cancelled",
        FinishReason::Error { .. } => "error",
        other => other.kind(),
    }
}

fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `text` cut to at most `max` bytes at a char boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod provider_name_tests {
    use super::provider_name;

    #[test]
    fn routes_map_to_the_well_known_provider_names() {
        assert_eq!(provider_name("deepseek-official"), "deepseek");
        assert_eq!(provider_name("openai-compatible:127.0.0.1:8765"), "openai");
        assert_eq!(provider_name("anthropic"), "anthropic");
        assert_eq!(provider_name("anthropic-compatible:gw:4000"), "anthropic");
        assert_eq!(provider_name("mine"), "mine");
    }
}
