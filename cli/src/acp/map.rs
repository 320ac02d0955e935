//! Session events → ACP `session/update` payloads, and the turn end reason
//! → the prompt's stop reason.
//!
//! Live, text and reasoning stream as `agent_message_chunk` /
//! `agent_thought_chunk` from the `assistant/chunk` events; on replay
//! (`session/load`) they come from the assembled `assistant/message`, and
//! the user's prompts from `user/message`. `tool/call` becomes a
//! `tool_call` (kind, title, locations, raw input), `tool/result` a
//! `tool_call_update` (status, text content, a diff for `write`/`edit`),
//! and `todo/write` a `plan`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::{
    self as acp, ContentChunk, Diff, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionUpdate, StopReason, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind,
};
use dsh_core::session::{
    ChunkView, EventData, SessionEvent, TodoStatus, TodoWrite, ToolCall, ToolResult, TurnEndReason,
};
use dsh_core::{ContentBlock, MessageSource};
use serde_json::Value;

/// What the mapper remembers about the calls of a session: name and parsed
/// arguments by call id (a result names only the id), until the result.
#[derive(Debug, Default)]
pub struct Calls {
    by_id: HashMap<String, (String, Value)>,
}

impl Calls {
    /// Takes the name and arguments of call `id`.
    fn take(&mut self, id: &str) -> Option<(String, Value)> {
        self.by_id.remove(id)
    }
}

/// Whether updates come from a live turn or a replayed log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Chunks stream; assembled messages and the user's own prompt are
    /// not repeated.
    Live,
    /// `session/load`: whole messages, prompts included; chunks skipped.
    Replay,
}

fn text_block(text: &str) -> acp::ContentBlock {
    acp::ContentBlock::Text(acp::TextContent::new(text))
}

fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(text_block(text))
}

/// The updates for one session event. `asks(name)` tells whether the
/// policy asks before running a tool (its call starts `pending`, else
/// `in_progress`).
pub fn updates(
    ev: &SessionEvent,
    mode: Mode,
    cwd: &Path,
    calls: &mut Calls,
    asks: &dyn Fn(&str) -> bool,
) -> Vec<SessionUpdate> {
    match (ev.data(), mode) {
        (EventData::AssistantChunk(c), Mode::Live) => match c.view() {
            ChunkView::TextDelta { text, .. } if !text.is_empty() => {
                vec![SessionUpdate::AgentMessageChunk(chunk(text))]
            }
            ChunkView::ReasoningDelta { text, .. } if !text.is_empty() => {
                vec![SessionUpdate::AgentThoughtChunk(chunk(text))]
            }
            _ => Vec::new(),
        },
        (EventData::AssistantMessage(m), Mode::Replay) => m
            .message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Reasoning { text } if !text.is_empty() => {
                    Some(SessionUpdate::AgentThoughtChunk(chunk(text)))
                }
                ContentBlock::Text { text } if !text.is_empty() => {
                    Some(SessionUpdate::AgentMessageChunk(chunk(text)))
                }
                _ => None,
            })
            .collect(),
        (EventData::UserMessage(m), Mode::Replay) if matches!(m.source, MessageSource::User) => m
            .content
            .iter()
            .filter_map(ContentBlock::as_text)
            .map(|t| SessionUpdate::UserMessageChunk(chunk(t)))
            .collect(),
        (EventData::ToolCall(call), _) => {
            let status = if mode == Mode::Live && !asks(&call.name) {
                ToolCallStatus::InProgress
            } else {
                ToolCallStatus::Pending
            };
            vec![SessionUpdate::ToolCall(tool_call(call, cwd, status, calls))]
        }
        (EventData::ToolResult(result), _) => tool_result(result, cwd, calls)
            .map(SessionUpdate::ToolCallUpdate)
            .into_iter()
            .collect(),
        (EventData::TodoWrite(todo), _) => vec![SessionUpdate::Plan(plan(todo))],
        _ => Vec::new(),
    }
}

/// The ACP kind of a dsh tool.
pub fn kind(tool: &str) -> ToolKind {
    match tool {
        "read" => ToolKind::Read,
        "write" | "edit" => ToolKind::Edit,
        "bash" => ToolKind::Execute,
        "todo_write" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

fn file_path(args: &Value) -> Option<&str> {
    args.get("file_path").and_then(Value::as_str)
}

fn absolute(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// A one-line title for a call.
pub fn title(tool: &str, args: &Value) -> String {
    let path = file_path(args).unwrap_or("");
    match tool {
        "read" => format!("Read {path}"),
        "write" => format!("Write {path}"),
        "edit" => format!("Edit {path}"),
        "bash" => {
            let command = args.get("command").and_then(Value::as_str).unwrap_or("");
            let line = command.lines().next().unwrap_or("");
            let mut title = crate::render::cut(line, 80);
            if line.len() < command.trim_end().len() && !title.ends_with('…') {
                title.push('…');
            }
            format!("Run `{title}`")
        }
        "todo_write" => "Update the plan".to_string(),
        other => other.to_string(),
    }
}

/// The locations a call touches (its `file_path`, made absolute).
pub fn locations(args: &Value, cwd: &Path) -> Vec<ToolCallLocation> {
    file_path(args)
        .map(|p| vec![ToolCallLocation::new(absolute(cwd, p))])
        .unwrap_or_default()
}

fn tool_call(
    call: &ToolCall,
    cwd: &Path,
    status: ToolCallStatus,
    calls: &mut Calls,
) -> acp::ToolCall {
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    calls.by_id.insert(
        call.call_id.as_str().to_string(),
        (call.name.clone(), args.clone()),
    );
    acp::ToolCall::new(call.call_id.as_str().to_string(), title(&call.name, &args))
        .kind(kind(&call.name))
        .status(status)
        .locations(locations(&args, cwd))
        .raw_input(args)
}

/// The fields that describe a call (for a permission request).
pub fn call_fields(tool: &str, args: &Value, cwd: &Path) -> ToolCallUpdateFields {
    ToolCallUpdateFields::new()
        .kind(kind(tool))
        .title(title(tool, args))
        .locations(locations(args, cwd))
        .raw_input(args.clone())
}

fn tool_result(result: &ToolResult, cwd: &Path, calls: &mut Calls) -> Option<ToolCallUpdate> {
    let (id, content, is_error) = result.message.content.iter().find_map(|b| match b {
        ContentBlock::ToolResult {
            tool_call_id,
            content,
            is_error,
        } => Some((tool_call_id.as_str(), content, *is_error == Some(true))),
        _ => None,
    })?;
    let failed = is_error || result.error.is_some();
    let text: Vec<&str> = content.iter().filter_map(ContentBlock::as_text).collect();
    let mut out = Vec::new();
    if let Some((name, args)) = calls.take(id)
        && !failed
    {
        out.extend(diffs(&name, &args, result, cwd));
    }
    if !text.is_empty() {
        out.push(ToolCallContent::Content(acp::Content::new(text_block(
            &text.join("\n"),
        ))));
    }
    let status = if failed {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    Some(ToolCallUpdate::new(
        id.to_string(),
        ToolCallUpdateFields::new().status(status).content(out),
    ))
}

/// The diffs of a successful `write` or `edit`: the tool's own
/// `meta.diffs` (`{path, oldText, newText}`), else, for a new file, the
/// written content.
fn diffs(tool: &str, args: &Value, result: &ToolResult, cwd: &Path) -> Vec<ToolCallContent> {
    if tool != "write" && tool != "edit" {
        return Vec::new();
    }
    let meta: Value = result
        .meta
        .as_ref()
        .and_then(|m| serde_json::from_str(m.get()).ok())
        .unwrap_or(Value::Null);
    let listed: Vec<ToolCallContent> = meta
        .get("diffs")
        .and_then(Value::as_array)
        .map(|a| a.as_slice())
        .unwrap_or(&[])
        .iter()
        .filter_map(|d| {
            let path = d.get("path")?.as_str()?;
            let new = d.get("newText")?.as_str()?;
            let old = d.get("oldText").and_then(Value::as_str).map(str::to_string);
            Some(ToolCallContent::Diff(
                Diff::new(absolute(cwd, path), new).old_text(old),
            ))
        })
        .collect();
    if !listed.is_empty() || tool != "write" {
        return listed;
    }
    match (file_path(args), args.get("content").and_then(Value::as_str)) {
        (Some(p), Some(content)) => {
            vec![ToolCallContent::Diff(Diff::new(absolute(cwd, p), content))]
        }
        _ => Vec::new(),
    }
}

fn plan(todo: &TodoWrite) -> Plan {
    Plan::new(
        todo.todos
            .iter()
            .map(|t| {
                let status = match t.status {
                    TodoStatus::InProgress => PlanEntryStatus::InProgress,
                    TodoStatus::Completed => PlanEntryStatus::Completed,
                    _ => PlanEntryStatus::Pending,
                };
                PlanEntry::new(t.content.clone(), PlanEntryPriority::Medium, status)
            })
            .collect(),
    )
}

/// The stop reason of a prompt whose turn ended with `reason`; an `error`
/// end is a JSON-RPC error (ACP has no stop reason for it). A cancel the
/// client asked for always answers `cancelled` (ACP prompt-turn rules).
pub fn stop_reason(
    reason: &TurnEndReason,
    cancel_requested: bool,
) -> Result<StopReason, acp::Error> {
    if cancel_requested {
        return Ok(StopReason::Cancelled);
    }
    match reason {
        TurnEndReason::Completed => Ok(StopReason::EndTurn),
        TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted => Ok(StopReason::Cancelled),
        TurnEndReason::MaxTokens => Ok(StopReason::MaxTokens),
        TurnEndReason::Blocked => Ok(StopReason::Refusal),
        TurnEndReason::Error { error } => Err(acp::Error::internal_error()
            .data(serde_json::json!({"code": error.code, "message": error.message}))),
        other => Err(acp::Error::internal_error().data(serde_json::json!({
            "message": format!("the turn ended with reason {}", other.kind())
        }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_and_titles() {
        assert_eq!(kind("read"), ToolKind::Read);
        assert_eq!(kind("edit"), ToolKind::Edit);
        assert_eq!(kind("bash"), ToolKind::Execute);
        assert_eq!(kind("mystery"), ToolKind::Other);
        assert_eq!(
            title("bash", &json!({"command": "ls -l\necho hi"})),
            "Run `ls -l…`"
        );
        assert_eq!(title("edit", &json!({"file_path": "a.rs"})), "Edit a.rs");
        let locs = locations(&json!({"file_path": "src/a.rs"}), Path::new("/w"));
        assert_eq!(locs[0].path, PathBuf::from("/w/src/a.rs"));
    }

    #[test]
    fn stop_reasons_follow_the_turn_end() {
        use dsh_core::session::AbortCause;
        assert_eq!(
            stop_reason(&TurnEndReason::Completed, false).unwrap(),
            StopReason::EndTurn
        );
        assert_eq!(
            stop_reason(&TurnEndReason::Completed, true).unwrap(),
            StopReason::Cancelled
        );
        assert_eq!(
            stop_reason(
                &TurnEndReason::Aborted {
                    cause: AbortCause::User
                },
                false
            )
            .unwrap(),
            StopReason::Cancelled
        );
        assert_eq!(
            stop_reason(&TurnEndReason::MaxTokens, false).unwrap(),
            StopReason::MaxTokens
        );
        assert_eq!(
            stop_reason(&TurnEndReason::Blocked, false).unwrap(),
            StopReason::Refusal
        );
    }
}
