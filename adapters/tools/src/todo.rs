//! `todo_write` (TL-23): validates the whole list, appends the durable
//! `todo/write` event (session.md 4.9) through the context's
//! [`EventSink`](crate::EventSink), and reports the counts.

use std::collections::BTreeSet;
use std::sync::Arc;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::{EventData, TodoItem, TodoStatus, TodoWrite};
use serde_json::{Value, json};

use crate::{Tool, ToolCallRequest, ToolContext, text};

/// The `todo_write` tool (exclusive, TL-16).
#[derive(Clone, Copy, Debug)]
pub struct TodoWriteTool {
    /// Whether several items may be `in_progress` at once (the reference's
    /// HEAD behaviour, session.md 4.9 and the `todo-write` conformance log;
    /// default `true`). When `false`, a second one is refused.
    pub allow_parallel_in_progress: bool,
}

impl Default for TodoWriteTool {
    fn default() -> Self {
        TodoWriteTool {
            allow_parallel_in_progress: true,
        }
    }
}

const DESCRIPTION_PARALLEL: &str = "Record and update a structured task list for the current work. Send the ENTIRE list every call \u{2014} it REPLACES the previous list (there are no partial updates, no per-item edits). Use it to plan multi-step work and show progress: add one todo per concrete step before you start. Mark every todo being actively worked on `in_progress` \u{2014} several at once when work genuinely runs in parallel (e.g. concurrent subagents or background commands), one for sequential work; while work remains, at least one task should be `in_progress`. Mark a todo `completed` the moment it is done (do not batch completions), and allow no `in_progress` item only once all work is complete. Skip the list for trivial single-step tasks. Statuses: `pending` (not started), `in_progress` (being worked on now), `completed` (finished).";

const DESCRIPTION_SINGLE: &str = "Record and update a structured task list for the current work. Send the ENTIRE list every call \u{2014} it REPLACES the previous list (there are no partial updates, no per-item edits). Use it to plan multi-step work and show progress: add one todo per concrete step before you start. Keep AT MOST ONE todo `in_progress`; while work remains, exactly one task should be `in_progress`. Mark a todo `completed` the moment it is done (do not batch completions), and allow no `in_progress` item only once all work is complete. Skip the list for trivial single-step tasks. Statuses: `pending` (not started), `in_progress` (being worked on now), `completed` (finished).";

impl Tool for TodoWriteTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "todo_write",
            if self.allow_parallel_in_progress {
                DESCRIPTION_PARALLEL
            } else {
                DESCRIPTION_SINGLE
            },
            json!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "description": "The COMPLETE task list, replacing any previous list.",
                        "items": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "content": {"type": "string", "description": "What the task is \u{2014} a short imperative line."},
                                "status": {
                                    "type": "string",
                                    "description": "pending (not started) | in_progress (now) | completed (done).",
                                    "enum": ["pending", "in_progress", "completed"]
                                }
                            },
                            "required": ["content", "status"]
                        }
                    }
                },
                "required": ["todos"]
            }),
        )
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let Some(sink) = ctx.events.as_ref() else {
            return ToolOutcome::error("todo_write requires an owning agent session");
        };
        let todos = match self.validate(&call.arguments) {
            Ok(t) => t,
            Err(message) => return ToolOutcome::error(message),
        };
        let count = |s: &TodoStatus| todos.iter().filter(|t| &t.status == s).count();
        let (p, i, c) = (
            count(&TodoStatus::Pending),
            count(&TodoStatus::InProgress),
            count(&TodoStatus::Completed),
        );
        let value = serde_json::to_value(&todos).unwrap_or(Value::Null);
        if let Err(message) = sink.append(EventData::TodoWrite(Arc::new(TodoWrite::new(todos)))) {
            return ToolOutcome::error(message);
        }
        ToolOutcome::success(text(format!(
            "Updated todo list: {p} pending, {i} in progress, {c} completed."
        )))
        .with_value(value)
    }
}

impl TodoWriteTool {
    /// Validates the arguments into the list (TL-23 error texts).
    pub fn validate(&self, args: &Value) -> Result<Vec<TodoItem>, String> {
        let Some(items) = args.get("todos").and_then(Value::as_array) else {
            return Err("invalid todos: expected an array".into());
        };
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(items.len());
        let mut active = 0usize;
        for item in items {
            let content = match item.get("content").and_then(Value::as_str) {
                Some(c) if !c.trim().is_empty() => c,
                _ => return Err("invalid todo: `content` must be a non-empty string".into()),
            };
            let status = match item.get("status").and_then(Value::as_str) {
                Some("pending") => TodoStatus::Pending,
                Some("in_progress") => TodoStatus::InProgress,
                Some("completed") => TodoStatus::Completed,
                other => {
                    return Err(format!(
                        "invalid todo status: {}",
                        other.map_or_else(|| "undefined".to_string(), str::to_string)
                    ));
                }
            };
            if !seen.insert(content) {
                return Err(format!(
                    "invalid todos: duplicate content {}",
                    Value::String(content.to_string())
                ));
            }
            if status == TodoStatus::InProgress {
                active += 1;
            }
            out.push(TodoItem::new(content.to_string(), status));
        }
        if !self.allow_parallel_in_progress && active > 1 {
            return Err(format!(
                "invalid todos: at most one task may be in_progress, got {active}"
            ));
        }
        Ok(out)
    }
}
