//! `dsh-compaction`: the compaction plugin (loop.md CP-1 to CP-4).
//!
//! A [`Compaction`] is a kernel [`Plugin`], so it runs unchanged in every
//! runtime. It rewrites only the surface:
//!
//! - **pressure** (CP-3 a), in `agent/pre-step`: when the input plus
//!   output tokens the provider reported for the latest request reach
//!   [`CompactionConfig::threshold`] of the context window (from
//!   [`CompactionConfig::context_window`], else `llm.prepareCall`'s). Old
//!   tool results are pruned first, model-free (`compaction/prune` plus a
//!   replacing `tool/result`); when that is not enough, the older part of
//!   the surface is summarised;
//! - **overflow** (CP-3 b), in `agent/request-error` on
//!   `CONTEXT_WINDOW_EXCEEDED`: summarise, then `retry` once per step,
//!   only when a replacement was made (the replace generation advances,
//!   LC-26); otherwise the provider's failure ends the turn verbatim;
//! - **manual** (CP-3 c): the plugin command [`COMMAND`]
//!   ([`Kernel::command`](dsh_runtime::Kernel::command)), as maintenance
//!   with `turn: null`.
//!
//! The summary is a side model call through the agent's own provider
//! ([`Ask::Model`]) with its own prompt, bracketed exactly as CP-2:
//! `compaction/start`, `compaction/summary`, the replacing `user/message`
//! (source `{"kind":"plugin","plugin":"compact"}`), `compaction/end` (the
//! HEAD names with `compactionId`, session.md §0, as the conformance logs
//! and the stores know them; CP-2 shows the older `compact/*`). A failed
//! summary closes the bracket with `error` and the turn goes on. An
//! unmatched `compaction/start` after the latest `session/end-seed` is a lock;
//! one before it is stale and ignored.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use dsh_core::agent::{
    PreStepDecision, PreStepPayload, PreparedCall, Recovery, RequestErrorPayload,
};
use dsh_core::session::{EventData, Session, SurfaceIntent, SurfaceOp, ToolResult};
use dsh_core::{ContentBlock, GenerateOptions, LlmCallConfig, Message, MessageSource, Purpose};
use dsh_runtime::{Ask, Cx, Flow, Plugin, Reply, Seams};
use serde_json::{Value, json};

/// The plugin name, as in the replacing message's source.
pub const PLUGIN: &str = "compact";
/// The name of the manual run's plugin command (CP-3 c).
pub const COMMAND: &str = "compact";
/// The provider failure code of an overflow (CP-3 b).
pub const CONTEXT_WINDOW_EXCEEDED: &str = "CONTEXT_WINDOW_EXCEEDED";

/// `compaction/start` (the HEAD names of CP-2's bracket, session.md §0).
pub const START: &str = "compaction/start";
/// `compaction/summary`.
pub const SUMMARY: &str = "compaction/summary";
/// `compaction/end`.
pub const END: &str = "compaction/end";
/// `compaction/prune`.
pub const PRUNE: &str = "compaction/prune";

/// The `compactionId` of the compaction whose first event has seq `seq`
/// (deterministic: the same log gives the same ids).
pub fn compaction_id(seq: u64) -> String {
    format!("compaction-{seq}")
}

/// The default instructions of the summary call.
pub const DEFAULT_PROMPT: &str = "Summarise the conversation above for a continuation of the same task. Keep every fact, decision, file path, command and open question the work still needs; drop chatter. Answer with the summary only.";

const PREAMBLE: &str = "This is an automatically generated checkpoint condensing an earlier span of the conversation to free up context. Treat the captured context as established background and build on it without restating it. Continue the task directly from the messages that follow, without acknowledging this checkpoint.\n\n<compacted-summary>";
const POSTAMBLE: &str = "</compacted-summary>";

/// Settings of the compaction plugin.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionConfig {
    /// Fraction of the context window at which pressure compaction runs.
    pub threshold: f64,
    /// The context window to measure against, overriding the one
    /// `llm.prepareCall` reports (`None`: the provider's).
    pub context_window: Option<u64>,
    /// Surface nodes always kept verbatim at the tail.
    pub keep_nodes: usize,
    /// Tool results longer than this (chars of text) may be pruned.
    pub prune_min_chars: usize,
    /// The most recent tool results, never pruned.
    pub prune_keep_recent: usize,
    /// `maxTokens` of the summary call.
    pub summary_max_tokens: Option<u64>,
    /// The summary call's instructions.
    pub prompt: String,
    /// When no assistant message of the session carries usage (a server
    /// that reports none), measure the pressure with [`estimated_usage`]
    /// instead of skipping it. The estimate is never logged.
    pub estimate_unreported: bool,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            threshold: 0.8,
            context_window: None,
            keep_nodes: 2,
            prune_min_chars: 2_000,
            prune_keep_recent: 2,
            summary_max_tokens: Some(2_048),
            prompt: String::from(DEFAULT_PROMPT),
            estimate_unreported: false,
        }
    }
}

/// A summary in flight (between `compaction/start` and its reply).
#[derive(Clone, Debug, PartialEq)]
struct Pending {
    turn: Option<u64>,
    start: u64,
    end: u64,
    seqs: Vec<u64>,
    tokens: u64,
    provider: String,
    model: String,
}

/// What a compaction plan shadows.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Shadowed surface seqs, in order (first = range start, last = end).
    pub seqs: Vec<u64>,
    /// Estimated tokens of the shadowed messages.
    pub tokens: u64,
}

/// The compaction plugin.
#[derive(Debug)]
pub struct Compaction {
    config: CompactionConfig,
    window: Option<u64>,
    call: Option<LlmCallConfig>,
    pending: Option<Pending>,
    /// `(turn, step)` of the last overflow retry.
    retried: Option<(u64, u64)>,
}

impl Compaction {
    /// A plugin with these settings.
    pub fn new(config: CompactionConfig) -> Self {
        Compaction {
            config,
            window: None,
            call: None,
            pending: None,
            retried: None,
        }
    }

    /// The context window in use (configured, else prepared).
    pub fn context_window(&self) -> Option<u64> {
        self.config.context_window.or(self.window)
    }

    fn over_threshold(&self, used: u64) -> bool {
        match self.context_window() {
            Some(w) if w > 0 => used as f64 >= self.config.threshold * w as f64,
            _ => false,
        }
    }

    /// Opens a summary: appends `compaction/start` and asks for the model
    /// call. `None` when nothing can be shadowed.
    fn open(&mut self, cx: &mut Cx<'_>, turn: Option<u64>) -> Option<Ask> {
        let plan = plan(cx.session(), self.config.keep_nodes)?;
        // The route of the agent's requests: the last prepared call, else
        // the session's request-header fold (a resumed session).
        let (provider, model) = match (&self.call, cx.session().request_header()) {
            (Some(c), _) => (c.provider.clone(), c.model.clone()),
            (None, Some(h)) => (h.config.provider.clone(), h.config.model.clone()),
            (None, None) => return None,
        };
        let mut messages = Vec::new();
        for seq in &plan.seqs {
            if let Some(m) = cx.session().event(*seq).and_then(|e| e.derived_message()) {
                messages.push(m.clone());
            }
        }
        messages.push(Arc::new(Message::user(
            "compact-instructions",
            vec![ContentBlock::text(self.config.prompt.clone())],
        )));
        let mut request = GenerateOptions::new(provider.clone(), model.clone(), messages);
        request.max_tokens = self.config.summary_max_tokens;
        request.purpose = Some(Purpose::Compaction);
        request.session_id = Some(cx.session().id().clone());
        let start = cx.next_seq();
        let id = compaction_id(start);
        cx.append_plugin(START, &json!({ "compactionId": id, "turn": turn }));
        self.pending = Some(Pending {
            turn,
            start,
            end: *plan.seqs.last()?,
            seqs: plan.seqs,
            tokens: plan.tokens,
            provider,
            model,
        });
        Some(Ask::Model {
            plugin: String::from(PLUGIN),
            request: alloc::boxed::Box::new(request),
        })
    }

    /// Closes the open summary with the reply; `true` when the surface
    /// was replaced.
    fn close(&mut self, cx: &mut Cx<'_>) -> bool {
        let Some(p) = self.pending.take() else {
            return false;
        };
        let reply = match cx.reply() {
            Some(Reply::Model(Ok(r))) if !r.text.trim().is_empty() => Ok(r.clone()),
            Some(Reply::Model(Ok(_))) => Err(String::from("the summary was empty")),
            Some(Reply::Model(Err(e))) => Err(e.clone()),
            Some(Reply::Cancelled) => Err(String::from("the summary call was cancelled")),
            _ => Err(String::from("the summary call got a wrong reply")),
        };
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                let id = compaction_id(p.start);
                cx.append_plugin(
                    END,
                    &json!({ "compactionId": id, "turn": p.turn, "error": e }),
                );
                return false;
            }
        };
        let summary = vec![ContentBlock::text(reply.text.clone())];
        let id = compaction_id(p.start);
        let mut data = json!({
            "compactionId": id,
            "summary": summary,
            "shadowedRange": { "start": p.seqs[0], "end": p.end },
            "shadowedSeqs": p.seqs,
            "shadowedTokenCount": p.tokens,
            "provider": p.provider,
            "model": p.model,
        });
        if let Some(obj) = data.as_object_mut() {
            if let Some(m) = self.config.summary_max_tokens {
                obj.insert("maxTokens".into(), json!(m));
            }
            if let Some(u) = &reply.usage {
                obj.insert(
                    "usage".into(),
                    serde_json::to_value(u).unwrap_or(Value::Null),
                );
            }
        }
        let summary_seq = cx.next_seq();
        cx.append_plugin(SUMMARY, &data);
        let mut message = Message::user(
            format!("compact-{}", p.start),
            vec![
                ContentBlock::text(PREAMBLE),
                ContentBlock::text(reply.text),
                ContentBlock::text(POSTAMBLE),
            ],
        );
        message.source = MessageSource::plugin(PLUGIN);
        let mut sources = vec![p.start, summary_seq];
        sources.extend(p.seqs.iter().copied());
        cx.append_surface(
            EventData::UserMessage(Arc::new(message)),
            SurfaceIntent::replace(p.seqs[0], p.end, sources),
        );
        cx.append_plugin(END, &json!({ "compactionId": id, "turn": p.turn }));
        true
    }

    /// Model-free pruning of old tool results (CP-2); returns the tokens
    /// saved (estimated), 0 when nothing was pruned.
    fn prune(&self, cx: &mut Cx<'_>) -> u64 {
        let session = cx.session();
        let results: Vec<u64> = session
            .surface()
            .nodes
            .iter()
            .copied()
            .filter(|s| {
                matches!(
                    session.event(*s).map(|e| e.data()),
                    Some(EventData::ToolResult(_))
                )
            })
            .collect();
        let old = results.len().saturating_sub(self.config.prune_keep_recent);
        let mut edits = Vec::new();
        for seq in &results[..old] {
            let Some(EventData::ToolResult(r)) = session.event(*seq).map(|e| e.data()) else {
                continue;
            };
            let chars = result_chars(r);
            if chars <= self.config.prune_min_chars {
                continue;
            }
            let mut message = (*r.message).clone();
            if let Some(ContentBlock::ToolResult { content, .. }) = message.content.first_mut() {
                *content = vec![ContentBlock::text(format!(
                    "[tool result pruned to save context: {chars} chars]"
                ))];
            }
            let pruned = {
                let mut tool_result = (**r).clone();
                tool_result.message = Arc::new(message);
                tool_result
            };
            edits.push((*seq, (chars / 4) as u64, pruned));
        }
        let mut saved = 0;
        for (seq, tokens, pruned) in edits {
            let id = compaction_id(cx.next_seq());
            cx.append_plugin(
                PRUNE,
                &json!({
                    "compactionId": id,
                    "shadowedRange": { "start": seq, "end": seq },
                    "shadowedSeqs": [seq],
                    "shadowedTokenCount": tokens,
                }),
            );
            cx.append_surface(
                EventData::ToolResult(Arc::new(pruned)),
                SurfaceIntent::replace(seq, seq, vec![seq]),
            );
            saved += tokens;
        }
        saved
    }
}

impl Plugin for Compaction {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn seams(&self) -> Seams {
        Seams::PRE_STEP | Seams::PREPARE | Seams::REQUEST_ERROR | Seams::COMMAND
    }

    /// CP-3 (c): the manual run, command [`COMMAND`], as maintenance with
    /// `turn: null`. The result is `{"compacted":bool}` plus `"reason"`
    /// when nothing was replaced.
    fn command(&mut self, cx: &mut Cx<'_>, name: &str, value: Value) -> Flow<Value> {
        if name != COMMAND {
            return Flow::Next(value);
        }
        if cx.reply().is_some() {
            let error = match cx.reply() {
                Some(Reply::Model(Err(e))) => Some(e.clone()),
                _ => None,
            };
            return Flow::Done(match (self.close(cx), error) {
                (true, _) => json!({ "compacted": true }),
                (false, Some(e)) => json!({ "compacted": false, "reason": e }),
                (false, None) => json!({ "compacted": false, "reason": "the summary failed" }),
            });
        }
        if self.pending.is_some() || locked(cx.session()) {
            return Flow::Done(
                json!({ "compacted": false, "reason": "a compaction is already running" }),
            );
        }
        match self.open(cx, None) {
            Some(ask) => Flow::Ask(ask),
            None => Flow::Done(json!({ "compacted": false, "reason": "nothing to compact" })),
        }
    }

    fn prepare(&mut self, _cx: &mut Cx<'_>, value: PreparedCall) -> Flow<PreparedCall> {
        if let Some(w) = value.context_window {
            self.window = Some(w);
        }
        self.call = Some(value.config.clone());
        Flow::Next(value)
    }

    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        if cx.reply().is_some() {
            self.close(cx);
            return Flow::Next(value);
        }
        if self.pending.is_some() || locked(cx.session()) {
            return Flow::Next(value);
        }
        let used = match reported_usage(cx.session()) {
            Some(used) => used,
            None if self.config.estimate_unreported && !any_usage(cx.session()) => {
                estimated_usage(cx.session())
            }
            None => return Flow::Next(value),
        };
        if !self.over_threshold(used) {
            return Flow::Next(value);
        }
        let saved = self.prune(cx);
        if saved > 0 && !self.over_threshold(used.saturating_sub(saved)) {
            return Flow::Next(value);
        }
        if saved > 0 {
            // The surface changes once the prune lands; summarise at the
            // next step if the pressure persists.
            return Flow::Next(value);
        }
        match self.open(cx, Some(payload.turn)) {
            Some(ask) => Flow::Ask(ask),
            None => Flow::Next(value),
        }
    }

    fn request_error(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &RequestErrorPayload,
        value: Recovery,
    ) -> Flow<Recovery> {
        if cx.reply().is_some() {
            return if self.close(cx) {
                Flow::Done(Recovery::Retry)
            } else {
                Flow::Next(value)
            };
        }
        if payload.failure.code != CONTEXT_WINDOW_EXCEEDED
            || self.retried == Some((payload.turn, payload.step))
            || self.pending.is_some()
            || locked(cx.session())
        {
            return Flow::Next(value);
        }
        self.retried = Some((payload.turn, payload.step));
        match self.open(cx, Some(payload.turn)) {
            Some(ask) => Flow::Ask(ask),
            None => Flow::Next(value),
        }
    }
}

fn result_chars(r: &ToolResult) -> usize {
    let mut n = 0;
    for b in &r.message.content {
        if let ContentBlock::ToolResult { content, .. } = b {
            for c in content {
                if let ContentBlock::Text { text } = c {
                    n += text.chars().count();
                }
            }
        }
    }
    n
}

/// Input plus output tokens of the latest request, as the provider
/// reported them, unless the surface was replaced since (the figure is
/// then stale).
pub fn reported_usage(session: &Session) -> Option<u64> {
    for e in session.events().iter().rev() {
        if matches!(e.surface_op(), Some(SurfaceOp::Replace { .. })) {
            return None;
        }
        if let EventData::AssistantMessage(m) = e.data()
            && let Some(u) = &m.usage
        {
            let total = u.input_tokens.max(0) as u64
                + u.output_tokens.max(0) as u64
                + u.cache_read_tokens.unwrap_or(0).max(0) as u64;
            return Some(total);
        }
    }
    None
}

/// Whether any assistant message of `session` carries reported usage.
fn any_usage(session: &Session) -> bool {
    session
        .events()
        .iter()
        .any(|e| matches!(e.data(), EventData::AssistantMessage(m) if m.usage.is_some()))
}

/// The tokens the next request would send, estimated as a quarter of the
/// bytes of its JSON: every message on the surface, the system prompt and
/// the tool schemas of the latest request header, rounded up.
///
/// Four bytes per token is the usual rule of thumb for BPE tokenizers on
/// English text and code; the JSON framing (keys, quotes, escapes) adds
/// some bytes that are not tokens in the provider's own count. Against
/// real counts expect it within about ±30%: over for JSON-heavy tool
/// output, under for dense code, near for CJK text (3 bytes a character,
/// about one token each). Enough to tell a window filling up, not a bill.
pub fn estimated_usage(session: &Session) -> u64 {
    let mut bytes = 0usize;
    for s in session.surface().nodes {
        if let Some(m) = session.event(*s).and_then(|e| e.derived_message()) {
            bytes += message_bytes(m);
        }
    }
    if let Some(h) = session.request_header() {
        bytes += header_bytes(h);
    }
    estimate_tokens(bytes)
}

/// The bytes [`estimated_usage`] counts for one message: its JSON.
pub fn message_bytes(message: &Message) -> usize {
    serde_json::to_string(message).map_or(0, |t| t.len())
}

/// The bytes [`estimated_usage`] counts for a request header: the system
/// prompt and the tool schemas' JSON.
pub fn header_bytes(header: &dsh_core::session::EpochHeader) -> usize {
    header.system.as_ref().map_or(0, String::len)
        + header
            .tools
            .as_ref()
            .and_then(|t| serde_json::to_string(t).ok())
            .map_or(0, |t| t.len())
}

/// Estimated tokens of `bytes` bytes: a quarter, rounded up (see
/// [`estimated_usage`] for the error).
pub fn estimate_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// Whether a live compaction lock is held: an unmatched `compaction/start`
/// after the latest `session/end-seed` (CP-2; a lock before it is stale).
pub fn locked(session: &Session) -> bool {
    for e in session.events().iter().rev() {
        match e.event_type() {
            END | "session/end-seed" => return false,
            START => return true,
            _ => {}
        }
    }
    false
}

/// The older part of the surface a summary may shadow: every node up to
/// the last cut that keeps `keep_nodes` at the tail and does not separate
/// a tool result from its call. `None` when nothing useful can go (the
/// only candidate is a lone earlier summary).
pub fn plan(session: &Session, keep_nodes: usize) -> Option<Plan> {
    let nodes = session.surface().nodes;
    let last = nodes.len().checked_sub(keep_nodes.max(1) + 1)?;
    let is_result = |s: u64| {
        matches!(
            session.event(s).map(|e| e.data()),
            Some(EventData::ToolResult(_))
        )
    };
    let j = (0..=last).rev().find(|j| !is_result(nodes[j + 1]))?;
    let seqs: Vec<u64> = nodes[..=j].to_vec();
    if seqs.len() == 1
        && let Some(m) = session.event(seqs[0]).and_then(|e| e.derived_message())
        && matches!(&m.source, MessageSource::Plugin { plugin, .. } if plugin == PLUGIN)
    {
        return None;
    }
    let mut tokens = 0u64;
    for s in &seqs {
        if let Some(m) = session.event(*s).and_then(|e| e.derived_message()) {
            tokens += (serde_json::to_string(&**m).map(|t| t.len()).unwrap_or(0) / 4) as u64;
        }
    }
    Some(Plan { seqs, tokens })
}

/// The summary text of a replacing message, for display.
pub fn summary_text(message: &Message) -> Option<String> {
    match (&message.source, message.content.get(1)) {
        (MessageSource::Plugin { plugin, .. }, Some(ContentBlock::Text { text }))
            if plugin == PLUGIN =>
        {
            Some(text.to_string())
        }
        _ => None,
    }
}
