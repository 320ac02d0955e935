//! The hooks plugin: runs one dialect's hooks at the kernel's seams and
//! logs `hook/invoked` / `hook/result` as the reference does.

use std::path::PathBuf;
use std::time::Duration;

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{
    CancelCause, PostToolDecision, PreStepDecision, PreStepPayload, PreToolDecision, ToolExecution,
};
use dsh_core::session::EventData;
use dsh_core::{ContentBlock, Message, MessageSource};
use dsh_runtime::{Cx, Flow, Plugin, Seams, ToolDispatch};
use serde_json::{Map, Value, json};

use crate::config::HookConfig;
use crate::protocol::{
    DEFAULT_TIMEOUT_MS, Dialect, Merged, MergedOutcome, STDERR_SUMMARY_MAX_CHARS, matches, merge,
    parse_output, summarize_stderr,
};
use crate::runner::{HookRunner, RunRequest};

/// How many times Stop hooks may keep one turn going before dsh lets it
/// end (Claude Code leaves this to the hook; dsh caps it).
pub const DEFAULT_STOP_BLOCK_CAP: u32 = 8;

/// Most bytes of a hook's reason or context handed to the model.
pub const MAX_MODEL_TEXT_BYTES: usize = 16 * 1024;

/// The plugin event logged when the Stop cap ends a turn a hook wanted to
/// continue.
pub const STOP_CAPPED: &str = "hook/stop-capped";

/// The `agent_type` a SubagentStop payload carries.
const SUBAGENT_TYPE: &str = "general-purpose";

/// Settings of a [`HooksPlugin`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Settings {
    /// `CLAUDE_PROJECT_DIR` (default: the session's workspace).
    pub project_dir: Option<PathBuf>,
    /// `transcript_path` in payloads (the session log file), when known.
    pub transcript_path: Option<String>,
    /// The model (Codex payloads carry it).
    pub model: String,
    /// The timeout of a hook that sets none.
    pub default_timeout_ms: u64,
    /// The cap of `hook/result.stderrSummary`.
    pub stderr_summary_max_chars: usize,
    /// How many Stop blocks one turn honours.
    pub stop_block_cap: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            project_dir: None,
            transcript_path: None,
            model: String::new(),
            default_timeout_ms: DEFAULT_TIMEOUT_MS,
            stderr_summary_max_chars: STDERR_SUMMARY_MAX_CHARS,
            stop_block_cap: DEFAULT_STOP_BLOCK_CAP,
        }
    }
}

/// One dialect's hooks as a kernel plugin.
pub struct HooksPlugin {
    dialect: Dialect,
    config: HookConfig,
    runner: Box<dyn HookRunner>,
    settings: Settings,
    counter: u64,
    stop_blocks: (u64, u32),
    started: bool,
    rewrites: Vec<(String, Map<String, Value>)>,
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The Claude Code name of a dsh tool (`bash` → `Bash`, ...), so the
/// matchers and scripts written for Claude Code select the same tools.
pub fn claude_tool_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "bash" => "Bash",
        "read" => "Read",
        "write" => "Write",
        "edit" => "Edit",
        "glob" => "Glob",
        "grep" => "Grep",
        "todo_write" => "TodoWrite",
        "subagent" => "Task",
        _ => return None,
    })
}

fn text_of(content: &[ContentBlock]) -> String {
    content.iter().filter_map(|b| b.as_text()).collect()
}

impl HooksPlugin {
    /// A plugin running `config`'s hooks of `dialect` through `runner`.
    pub fn new(
        dialect: Dialect,
        config: HookConfig,
        runner: Box<dyn HookRunner>,
        settings: Settings,
    ) -> Self {
        HooksPlugin {
            dialect,
            config,
            runner,
            settings,
            counter: 0,
            stop_blocks: (0, 0),
            started: false,
            rewrites: Vec::new(),
        }
    }

    /// The `tool_name` of payloads: Claude Code's name in its dialect.
    fn tool_name(&self, name: &str) -> String {
        match self.dialect {
            Dialect::ClaudeCode => claude_tool_name(name).unwrap_or(name).to_string(),
            _ => name.to_string(),
        }
    }

    fn has(&self, point: &str) -> bool {
        !self.config.groups(point).is_empty()
    }

    fn cwd(cx: &Cx<'_>) -> Option<String> {
        cx.session().header().cwd.clone()
    }

    /// The payload fields every event carries.
    fn base(&self, cx: &Cx<'_>, event: &str, turn: Option<u64>) -> Map<String, Value> {
        let mut m = Map::new();
        let header = cx.session().header();
        m.insert("session_id".into(), header.id.as_str().into());
        let transcript = self.settings.transcript_path.clone();
        m.insert(
            "transcript_path".into(),
            match (self.dialect, transcript) {
                (_, Some(t)) => Value::String(t),
                (Dialect::Codex, None) => Value::Null,
                (_, None) => Value::String(String::new()),
            },
        );
        m.insert("cwd".into(), Self::cwd(cx).unwrap_or_default().into());
        m.insert("hook_event_name".into(), event.into());
        if self.dialect == Dialect::Codex {
            m.insert("model".into(), self.settings.model.clone().into());
            m.insert("permission_mode".into(), "default".into());
            if let Some(t) = turn {
                m.insert("turn_id".into(), t.to_string().into());
            }
        }
        m
    }

    fn run_point(
        &mut self,
        cx: &mut Cx<'_>,
        point: &str,
        query: &str,
        payload: &Map<String, Value>,
        turn: Option<u64>,
    ) -> MergedOutcome {
        let groups = self.config.groups(point).to_vec();
        let mut outputs = Vec::new();
        let cwd = Self::cwd(cx)
            .map(PathBuf::from)
            .or_else(|| self.settings.project_dir.clone())
            .unwrap_or_else(|| PathBuf::from("."));
        let mut env = Vec::new();
        if self.dialect == Dialect::ClaudeCode {
            let dir = self
                .settings
                .project_dir
                .clone()
                .unwrap_or_else(|| cwd.clone());
            env.push(("CLAUDE_PROJECT_DIR".to_string(), dir.display().to_string()));
        }
        let mut stdin = Value::Object(payload.clone()).to_string();
        if self.dialect == Dialect::ClaudeCode {
            stdin.push('\n');
        }
        let plain_is_context = matches!(point, "SessionStart" | "UserPromptSubmit");
        for group in groups {
            let alias = match self.dialect {
                Dialect::ClaudeCode => claude_tool_name(query),
                _ => None,
            };
            let selected = matches(group.matcher.as_deref(), query, self.dialect)
                || alias.is_some_and(|a| matches(group.matcher.as_deref(), a, self.dialect));
            if !selected {
                continue;
            }
            for hook in &group.hooks {
                self.counter += 1;
                let handler_id = format!("{}:{point}:{}", self.dialect.as_str(), self.counter);
                if let Some(turn) = turn {
                    let mut data = json!({
                        "turn": turn,
                        "point": point,
                        "dialect": self.dialect.as_str(),
                        "handlerId": handler_id,
                    });
                    if let (Some(m), Some(obj)) = (&group.matcher, data.as_object_mut()) {
                        obj.insert("matcher".into(), m.clone().into());
                    }
                    cx.append_plugin("hook/invoked", &data);
                }
                let timeout_ms = hook
                    .timeout_sec
                    .map_or(self.settings.default_timeout_ms, |s| (s * 1000.0) as u64);
                let req = RunRequest {
                    command: hook.command.clone(),
                    stdin: stdin.clone(),
                    env: env.clone(),
                    cwd: cwd.clone(),
                    timeout: Duration::from_millis(timeout_ms),
                    point: point.to_string(),
                };
                let result = self.runner.run(&req);
                let mut output = parse_output(
                    result.exit_code,
                    &result.stdout,
                    &result.stderr,
                    Some(point),
                );
                if plain_is_context
                    && output.exit_code == Some(0)
                    && output.additional_context.is_none()
                    && !output.stdout.is_empty()
                    && !output.stdout.starts_with('{')
                {
                    output.additional_context = Some(output.stdout.clone());
                }
                if let Some(turn) = turn {
                    let mut data = Map::new();
                    data.insert("turn".into(), turn.into());
                    data.insert("point".into(), point.into());
                    data.insert("handlerId".into(), handler_id.into());
                    data.insert("decision".into(), output.logged_decision().into());
                    if let Some(code) = output.exit_code {
                        data.insert("exitCode".into(), code.into());
                    }
                    if let Some(s) =
                        summarize_stderr(&output.stderr, self.settings.stderr_summary_max_chars)
                    {
                        data.insert("stderrSummary".into(), s.into());
                    }
                    data.insert("durationMs".into(), json!(result.duration_ms));
                    cx.append_plugin("hook/result", &Value::Object(data));
                }
                outputs.push(output);
            }
        }
        merge(&outputs)
    }

    fn message(&self, id: String, texts: &[String]) -> Message {
        let mut m = Message::user(
            id,
            texts
                .iter()
                .map(|t| ContentBlock::text(cut(t, MAX_MODEL_TEXT_BYTES)))
                .collect(),
        );
        m.source = MessageSource::plugin(self.dialect.plugin_name());
        m
    }

    fn reason(merged: &MergedOutcome, fallback: &str) -> String {
        cut(
            merged.reason.as_deref().unwrap_or(fallback),
            MAX_MODEL_TEXT_BYTES,
        )
    }
}

impl Plugin for HooksPlugin {
    fn name(&self) -> &str {
        self.dialect.plugin_name()
    }

    fn seams(&self) -> Seams {
        let mut s = Seams::NONE;
        if self.has("SessionStart") || self.has("UserPromptSubmit") {
            s = s | Seams::PRE_STEP;
        }
        if self.has("PreToolUse") {
            s = s | Seams::TOOL_PRE_EXECUTE | Seams::TOOL_EXECUTE;
        }
        if self.has("PostToolUse") {
            s = s | Seams::TOOL_POST_EXECUTE;
        }
        if self.has("Stop") || self.has("SubagentStop") {
            s = s | Seams::TURN_STOPPING;
        }
        s
    }

    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        let mut contexts = Vec::new();
        if !self.started {
            self.started = true;
            if self.has("SessionStart") {
                let resumed = cx
                    .session()
                    .events()
                    .iter()
                    .any(|e| matches!(e.data(), EventData::TurnEnd(_)));
                let source = if resumed { "resume" } else { "startup" };
                let mut p = self.base(cx, "SessionStart", None);
                p.insert("source".into(), source.into());
                // As the reference: SessionStart logs no hook/* pair.
                let merged = self.run_point(cx, "SessionStart", source, &p, None);
                contexts.extend(merged.additional_context);
            }
        }
        let prompt: Vec<&Message> = payload
            .messages
            .iter()
            .filter(|m| matches!(m.source, MessageSource::User))
            .collect();
        if !prompt.is_empty() && self.has("UserPromptSubmit") {
            let text: String = prompt.iter().map(|m| text_of(&m.content)).collect();
            let mut p = self.base(cx, "UserPromptSubmit", Some(payload.turn));
            p.insert("prompt".into(), text.into());
            let merged = self.run_point(cx, "UserPromptSubmit", "", &p, Some(payload.turn));
            if merged.decision == Merged::Deny || merged.stop {
                return Flow::Done(PreStepDecision::Reject);
            }
            contexts.extend(merged.additional_context);
        }
        match value {
            PreStepDecision::Enter(mut messages) if !contexts.is_empty() => {
                let id = format!(
                    "{}-context-{}-{}",
                    self.dialect.plugin_name(),
                    payload.turn,
                    payload.step
                );
                messages.push(self.message(id, &contexts));
                Flow::Next(PreStepDecision::Enter(messages))
            }
            other => Flow::Next(other),
        }
    }

    fn tool_pre_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        value: PreToolDecision,
    ) -> Flow<PreToolDecision> {
        let mut p = self.base(cx, "PreToolUse", Some(exec.turn));
        p.insert("tool_name".into(), self.tool_name(&exec.name).into());
        let input = match self.dialect {
            Dialect::ClaudeCode => exec.arguments.clone(),
            Dialect::Codex => json!({
                "command": exec.arguments.get("command").and_then(Value::as_str).unwrap_or_default()
            }),
        };
        p.insert("tool_input".into(), input);
        p.insert("tool_use_id".into(), exec.call_id.0.clone().into());
        let merged = self.run_point(cx, "PreToolUse", &exec.name, &p, Some(exec.turn));
        if merged.decision == Merged::Deny {
            let reason = Self::reason(&merged, "blocked by PreToolUse hook");
            return Flow::Done(PreToolDecision::Deny { reason });
        }
        if merged.stop {
            // `continue: false`: the call does not run and the turn stops.
            let reason = cut(
                merged
                    .stop_reason
                    .as_deref()
                    .unwrap_or("stopped by PreToolUse hook"),
                MAX_MODEL_TEXT_BYTES,
            );
            cx.cancel(
                CancelCause::Hook {
                    reason: reason.clone(),
                },
                true,
            );
            return Flow::Done(PreToolDecision::Deny { reason });
        }
        if let Some(input) = merged.updated_input.clone() {
            self.rewrites.retain(|(id, _)| *id != exec.call_id.0);
            self.rewrites.push((exec.call_id.0.clone(), input));
        }
        if merged.decision == Merged::Ask
            && self.dialect == Dialect::ClaudeCode
            && let PreToolDecision::Allow = value
        {
            return Flow::Next(PreToolDecision::Ask {
                reason: merged.reason.clone(),
            });
        }
        Flow::Next(value)
    }

    fn tool_execute(&mut self, _cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        let ToolDispatch::Run(mut exec) = value else {
            return Flow::Next(value);
        };
        if let Some(i) = self
            .rewrites
            .iter()
            .position(|(id, _)| *id == exec.call_id.0)
        {
            let (_, input) = self.rewrites.swap_remove(i);
            // `updatedInput` replaces the input the body gets; the logged
            // `tool/call` keeps the model's text.
            let mut args = exec.arguments.as_object().cloned().unwrap_or_default();
            for (k, v) in input {
                args.insert(k, v);
            }
            let args = Value::Object(args);
            exec.raw_arguments = args.to_string();
            exec.arguments = args;
        }
        Flow::Next(ToolDispatch::Run(exec))
    }

    fn tool_post_execute(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        outcome: &ToolOutcome,
        value: PostToolDecision,
    ) -> Flow<PostToolDecision> {
        let mut p = self.base(cx, "PostToolUse", Some(exec.turn));
        p.insert("tool_name".into(), self.tool_name(&exec.name).into());
        p.insert("tool_input".into(), exec.arguments.clone());
        p.insert("tool_use_id".into(), exec.call_id.0.clone().into());
        p.insert("tool_response".into(), text_of(&outcome.content).into());
        let merged = self.run_point(cx, "PostToolUse", &exec.name, &p, Some(exec.turn));
        if merged.stop {
            // `continue: false`: the turn stops after this result.
            let reason = merged
                .stop_reason
                .as_deref()
                .unwrap_or("stopped by PostToolUse hook");
            cx.cancel(
                CancelCause::Hook {
                    reason: cut(reason, MAX_MODEL_TEXT_BYTES),
                },
                true,
            );
        }
        let context = (!merged.additional_context.is_empty()).then(|| {
            self.message(
                format!("{}-post-{}", self.dialect.plugin_name(), exec.call_id.0),
                &merged.additional_context,
            )
        });
        if merged.decision == Merged::Deny {
            let reason = Self::reason(&merged, "blocked by PostToolUse hook");
            return Flow::Next(PostToolDecision::Block {
                feedback: vec![ContentBlock::text(reason)],
                additional_contexts: context.into_iter().collect(),
            });
        }
        let Some(context) = context else {
            return Flow::Next(value);
        };
        Flow::Next(match value {
            PostToolDecision::Accept {
                content,
                mut additional_contexts,
            } => {
                additional_contexts.insert(0, context);
                PostToolDecision::Accept {
                    content,
                    additional_contexts,
                }
            }
            PostToolDecision::Block {
                feedback,
                mut additional_contexts,
            } => {
                additional_contexts.insert(0, context);
                PostToolDecision::Block {
                    feedback,
                    additional_contexts,
                }
            }
            // A decision this version does not know carries no contexts.
            other => other,
        })
    }

    fn turn_stopping(&mut self, cx: &mut Cx<'_>, turn: u64) -> Flow<()> {
        let child = cx.session().header().delegation_depth.unwrap_or(0) > 0;
        let point = if child { "SubagentStop" } else { "Stop" };
        if !self.has(point) {
            return Flow::Next(());
        }
        if self.stop_blocks.0 != turn {
            self.stop_blocks = (turn, 0);
        }
        let mut p = self.base(cx, point, Some(turn));
        if child {
            let id = cx.session().header().id.as_str().to_string();
            p.insert("agent_id".into(), id.into());
            p.insert("agent_type".into(), SUBAGENT_TYPE.into());
        }
        p.insert("stop_hook_active".into(), (self.stop_blocks.1 > 0).into());
        if self.dialect == Dialect::Codex {
            p.insert("last_assistant_message".into(), Value::Null);
        }
        let merged = self.run_point(cx, point, "", &p, Some(turn));
        if merged.decision != Merged::Deny {
            return Flow::Next(());
        }
        if self.stop_blocks.1 >= self.settings.stop_block_cap {
            cx.append_plugin(
                STOP_CAPPED,
                &json!({
                    "turn": turn,
                    "point": point,
                    "limit": self.settings.stop_block_cap,
                }),
            );
            return Flow::Next(());
        }
        self.stop_blocks.1 += 1;
        let text = Self::reason(&merged, "continue: blocked by Stop hook");
        let id = format!("{}-stop-{}", self.dialect.plugin_name(), cx.next_seq());
        let message = self.message(id, &[text]);
        cx.steer(message);
        Flow::Next(())
    }
}
