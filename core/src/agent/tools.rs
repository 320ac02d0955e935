//! The pure parts of the tool pipeline (loop.md §5): definitions and their
//! registry, argument parsing and validation, the result union, the exact
//! error texts, and the `tool/result` mapping.
//!
//! Tool bodies run outside the core: the [`Agent`](super::Agent) emits
//! [`Output::ExecuteTool`](super::Output::ExecuteTool) and takes the body's
//! [`ToolOutcome`] back through
//! [`Agent::handle_tool_result`](super::Agent::handle_tool_result).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde_json::{Map, Value};

use crate::content::ContentBlock;
#[cfg(test)]
use crate::ids::{CallId, MessageId};
use crate::message::Message;
use crate::options::ToolSchema;

use super::schema::{check_schema, validate_value};

/// The `toolOrder` entry that stands for every tool not listed (SP-4).
pub const UNLISTED_TOOLS: &str = "<unlisted-tools>";

/// Whether the core checks tools' schemas and validates arguments and
/// outputs against them (feature `tool-schema`, on by default). Without it
/// [`ToolDefinition::validate_arguments`] and
/// [`ToolDefinition::output_schema`] are not acted on: every tool takes its
/// arguments as an untyped tool does, and its body checks them.
pub(crate) const SCHEMAS: bool = cfg!(feature = "tool-schema");

/// A tool the model may call (TL-2): its model-facing schema plus what the
/// core needs to run the pipeline. Behaviour (the body, rendering,
/// `finalizeContent`, presenters) belongs to the shell.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// Name, description and parameters as sent to the model (TL-1).
    pub schema: ToolSchema,
    /// Whether the core validates arguments against `schema.parameters`
    /// before the body runs (a typed tool, TL-6). An unvalidated tool
    /// receives invalid JSON as a string (TL-7). Acted on only with
    /// feature `tool-schema` (default).
    pub validate_arguments: bool,
    /// Schema the body's `value` must satisfy (TL-9 step 9), when the shell
    /// reports one. Acted on only with feature `tool-schema` (default).
    pub output_schema: Option<Value>,
    /// Cooperative timeout the shell enforces (TL-14).
    pub timeout_ms: Option<f64>,
    /// `isConcurrencySafe` (TL-15): consecutive calls of such tools whose
    /// arguments validate run as a parallel group (LC-24, at most
    /// [`AgentConfig::max_parallel_tool_calls`](super::AgentConfig::max_parallel_tool_calls)
    /// in flight); every other call runs alone (LC-23).
    pub concurrency_safe: bool,
}

impl ToolDefinition {
    /// A typed tool: arguments are validated against `parameters`.
    pub fn typed(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolDefinition {
            schema: ToolSchema {
                name: name.into(),
                description: description.into(),
                parameters,
            },
            validate_arguments: true,
            output_schema: None,
            timeout_ms: None,
            concurrency_safe: false,
        }
    }

    /// A tool whose arguments reach the body unvalidated.
    pub fn untyped(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolDefinition {
            validate_arguments: false,
            ..ToolDefinition::typed(name, description, parameters)
        }
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.schema.name
    }
}

/// Why a tool could not be registered (TL-2).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ToolRegistryError {
    /// Another tool of this name is already registered.
    Duplicate {
        /// The name.
        name: String,
    },
    /// `timeoutMs` is not a positive finite number.
    BadTimeout {
        /// The tool name.
        name: String,
    },
    /// A parameter or output schema uses keywords outside the subset (TL-3).
    UnsupportedSchema {
        /// The tool name.
        name: String,
        /// Every violation, in walk order.
        violations: Vec<String>,
    },
}

impl ToolRegistryError {
    /// The machine code: `DUPLICATE_TOOL`, `INVALID_TOOL` or
    /// `UNSUPPORTED_SCHEMA`.
    pub fn code(&self) -> &'static str {
        match self {
            ToolRegistryError::Duplicate { .. } => "DUPLICATE_TOOL",
            ToolRegistryError::BadTimeout { .. } => "INVALID_TOOL",
            ToolRegistryError::UnsupportedSchema { .. } => "UNSUPPORTED_SCHEMA",
        }
    }
}

impl fmt::Display for ToolRegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolRegistryError::Duplicate { name } => {
                write!(f, "tool \"{name}\" is already registered")
            }
            ToolRegistryError::BadTimeout { name } => {
                write!(
                    f,
                    "tool \"{name}\" timeoutMs must be a positive finite number"
                )
            }
            ToolRegistryError::UnsupportedSchema { violations, .. } => {
                write!(f, "unsupported JSON schema: {}", violations.join("; "))
            }
        }
    }
}

impl core::error::Error for ToolRegistryError {}

/// How a call may be scheduled (TL-15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub(crate) enum ExecutionMode {
    /// May overlap other parallel calls.
    Parallel,
    /// Runs alone.
    Exclusive,
}

/// The tools visible to one agent, ordered by name (LC-16: registration
/// order never leaks into requests).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolRegistry {
    /// Sorted by name, names unique (a sorted `Vec` rather than a
    /// `BTreeMap`: less code on a device, the same order and lookups).
    tools: Vec<(String, ToolDefinition)>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// Where `name` is (`Ok`), or would be inserted (`Err`).
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.tools.binary_search_by(|(n, _)| n.as_str().cmp(name))
    }

    /// The tools in name order.
    fn values(&self) -> impl Iterator<Item = &ToolDefinition> {
        self.tools.iter().map(|(_, t)| t)
    }

    /// Registers a tool (TL-2).
    pub fn register(&mut self, tool: ToolDefinition) -> Result<(), ToolRegistryError> {
        let name = tool.schema.name.clone();
        let Err(at) = self.find(&name) else {
            return Err(ToolRegistryError::Duplicate { name });
        };
        if let Some(t) = tool.timeout_ms
            && !(t.is_finite() && t > 0.0)
        {
            return Err(ToolRegistryError::BadTimeout { name });
        }
        let mut violations = Vec::new();
        if SCHEMAS && tool.validate_arguments {
            violations.extend(check_schema(&tool.schema.parameters));
        }
        if let Some(output) = tool.output_schema.as_ref().filter(|_| SCHEMAS) {
            violations.extend(check_schema(output));
        }
        if !violations.is_empty() {
            return Err(ToolRegistryError::UnsupportedSchema { name, violations });
        }
        self.tools.insert(at, (name, tool));
        Ok(())
    }

    /// Builder form of [`register`](Self::register).
    pub fn with(mut self, tool: ToolDefinition) -> Result<Self, ToolRegistryError> {
        self.register(tool)?;
        Ok(self)
    }

    /// The definition of `name`.
    pub fn get(&self, name: &str) -> Option<&ToolDefinition> {
        let at = self.find(name).ok()?;
        self.tools.get(at).map(|(_, t)| t)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The model-facing schemas, lexicographic by name (SP-4). Names compare
    /// by code point, which equals JavaScript's UTF-16 order except between
    /// astral characters and U+E000..U+FFFF.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.values().map(|t| t.schema.clone()).collect()
    }

    /// The schemas in `toolOrder` (SP-4): listed tools at their positions,
    /// the rest at the single [`UNLISTED_TOOLS`] entry in name order. A listed
    /// name no tool has, or an order without exactly one marker, is an
    /// assembly error.
    #[cfg(feature = "tool-order")]
    pub(crate) fn ordered_schemas(&self, order: &[String]) -> Result<Vec<ToolSchema>, String> {
        let markers = order.iter().filter(|n| *n == UNLISTED_TOOLS).count();
        if markers != 1 {
            return Err(format!(
                "toolOrder must contain \"{UNLISTED_TOOLS}\" exactly once"
            ));
        }
        for name in order.iter().filter(|n| *n != UNLISTED_TOOLS) {
            if self.find(name).is_err() {
                let known: Vec<&str> = self.tools.iter().map(|(n, _)| n.as_str()).collect();
                return Err(format!(
                    "toolOrder lists unregistered tool \"{name}\"; known tools: {}",
                    known.join(", ")
                ));
            }
        }
        let mut out = Vec::with_capacity(self.tools.len());
        for name in order {
            if name == UNLISTED_TOOLS {
                for (n, t) in &self.tools {
                    if !order.contains(n) {
                        out.push(t.schema.clone());
                    }
                }
            } else if let Some(t) = self.get(name)
                && !out.iter().any(|s: &ToolSchema| s.name == *name)
            {
                out.push(t.schema.clone());
            }
        }
        Ok(out)
    }

    /// TL-15: `parallel` only for a known concurrency-safe tool whose
    /// (typed) arguments validate.
    pub(crate) fn execution_mode(&self, name: &str, arguments: &Value) -> ExecutionMode {
        match self.get(name) {
            Some(t)
                if t.concurrency_safe
                    && (!(SCHEMAS && t.validate_arguments)
                        || validate_value(&t.schema.parameters, arguments, "").is_empty()) =>
            {
                ExecutionMode::Parallel
            }
            _ => ExecutionMode::Exclusive,
        }
    }
}

/// LC-22: `{}` for an empty string, the parsed value when the text parses,
/// otherwise the raw text itself as a JSON string.
pub fn parse_arguments(raw: &str) -> Value {
    if raw.is_empty() {
        return Value::Object(Map::new());
    }
    // `from_slice`: the one serde_json reader of the device path (smaller
    // firmware; same result for a `str`).
    serde_json::from_slice(raw.as_bytes()).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// `{name, code}` identity of a structured harness error (TL-5 `info`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorInfo {
    /// Error class name, e.g. `ToolArgsError`.
    pub name: String,
    /// Machine code, e.g. `INVALID_ARGS`.
    pub code: String,
}

impl ErrorInfo {
    /// An info record.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> Self {
        ErrorInfo {
            name: name.into(),
            code: code.into(),
        }
    }
}

/// The error half of a failed [`ToolOutcome`] (TL-5).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolError {
    /// The message; the model sees `Error: <message>`.
    pub message: String,
    /// Present only for structured harness errors (TL-12); it becomes the
    /// `tool/result` `error` field.
    pub info: Option<ErrorInfo>,
}

/// The result of one tool call (TL-5).
///
/// A success carries `value` during execution only (never persisted) and may
/// conclude the turn; a failure carries `error`. Build one with
/// [`success`](Self::success), [`error`](Self::error) or
/// [`coded_error`](Self::coded_error).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// Model-facing content.
    pub content: Vec<ContentBlock>,
    /// `Some` marks a failure.
    pub error: Option<ToolError>,
    /// The body's return value, checked against the output schema.
    pub value: Option<Value>,
    /// Opaque presentation data persisted on `tool/result` (TL-19).
    pub meta: Option<Value>,
    /// Messages for the next step (TL-17).
    pub additional_contexts: Vec<Message>,
    /// The body called `concludeTurn()` (TL-18); ignored on failures.
    pub concludes_turn: bool,
}

impl ToolOutcome {
    /// A success with this content.
    pub fn success(content: Vec<ContentBlock>) -> Self {
        ToolOutcome {
            content,
            error: None,
            value: None,
            meta: None,
            additional_contexts: Vec::new(),
            concludes_turn: false,
        }
    }

    /// A plain failure: content `Error: <message>`, no `info` (TL-10, TL-12).
    pub fn error(message: impl Into<String>) -> Self {
        let message = message.into();
        ToolOutcome {
            content: alloc::vec![ContentBlock::text(format!("Error: {message}"))],
            error: Some(ToolError {
                message,
                info: None,
            }),
            ..ToolOutcome::success(Vec::new())
        }
    }

    /// A structured failure: `Error: <message>` with `{name, code}` (TL-12).
    pub fn coded_error(
        message: impl Into<String>,
        name: impl Into<String>,
        code: impl Into<String>,
    ) -> Self {
        let mut outcome = ToolOutcome::error(message);
        if let Some(e) = outcome.error.as_mut() {
            e.info = Some(ErrorInfo::new(name, code));
        }
        outcome
    }

    /// Adds presentation metadata.
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Adds the body's return value.
    pub fn with_value(mut self, value: Value) -> Self {
        self.value = Some(value);
        self
    }

    /// Adds next-step context messages.
    pub fn with_contexts(mut self, contexts: Vec<Message>) -> Self {
        self.additional_contexts = contexts;
        self
    }

    /// Marks a success as concluding the turn (TL-18).
    pub fn concluding(mut self) -> Self {
        self.concludes_turn = true;
        self
    }

    /// Whether this is a failure.
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// TL-13: body invoked, then cancelled.
    pub fn aborted() -> Self {
        ToolOutcome::coded_error("tool call aborted", "AbortError", "ABORTED")
    }

    /// TL-13 / LC-25: cancelled before the body ran.
    pub fn aborted_before_dispatch() -> Self {
        ToolOutcome::coded_error(
            "tool call aborted before dispatch",
            "AbortError",
            "ABORTED_BEFORE_DISPATCH",
        )
    }

    /// TL-8: no tool of this name.
    pub fn unknown_tool(name: &str) -> Self {
        ToolOutcome::coded_error(
            error_text!("unknown tool", "unknown tool \"{name}\""),
            "ToolNotFoundError",
            "UNKNOWN_TOOL",
        )
    }

    /// TL-6: argument violations, joined with `"; "`.
    pub fn invalid_arguments(violations: &[String]) -> Self {
        ToolOutcome::coded_error(
            error_text!(
                "invalid arguments",
                "invalid arguments: {}",
                violations.join("; ")
            ),
            "ToolArgsError",
            "INVALID_ARGS",
        )
    }

    /// TL-9 step 9: the body's value failed the output schema.
    pub(crate) fn invalid_output(name: &str, violations: &[String]) -> Self {
        ToolOutcome::coded_error(
            error_text!(
                "tool returned invalid output",
                "tool \"{name}\" returned invalid output: {}",
                violations.join("; ")
            ),
            "ToolOutputError",
            "INVALID_TOOL_OUTPUT",
        )
    }

    #[cfg(test)]
    /// The `tool/result` payload (TL-20, session.md 4.8), in the reference's
    /// key order: `turn, step, message, error?, meta?`.
    pub(crate) fn result_data(
        &self,
        turn: u64,
        step: u64,
        message_id: MessageId,
        call_id: &CallId,
    ) -> Value {
        let message = Message::tool_result(
            message_id,
            call_id.clone(),
            self.content.clone(),
            self.is_error(),
        );
        let mut data = Map::new();
        data.insert("turn".into(), Value::from(turn));
        data.insert("step".into(), Value::from(step));
        data.insert(
            "message".into(),
            crate::json::to_value(&message).unwrap_or(Value::Null),
        );
        if let Some(info) = self.error.as_ref().and_then(|e| e.info.as_ref()) {
            let mut e = Map::new();
            e.insert("name".into(), Value::String(info.name.clone()));
            e.insert("code".into(), Value::String(info.code.clone()));
            data.insert("error".into(), Value::Object(e));
        }
        if let Some(meta) = &self.meta {
            data.insert("meta".into(), meta.clone());
        }
        Value::Object(data)
    }
}

/// The text of blocked feedback (TL-11): text blocks joined with `"\n"`,
/// other blocks as `[<type> content]`.
pub(crate) fn feedback_text(feedback: &[ContentBlock]) -> String {
    let parts: Vec<String> = feedback
        .iter()
        .map(|b| match b.as_text() {
            Some(t) if b.block_type() == "text" => t.to_string(),
            _ => format!("[{} content]", b.block_type()),
        })
        .collect();
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The default build names the tool; with `error-texts` off the
    /// message is fixed (the code stays).
    #[test]
    fn unknown_tool_text() {
        let outcome = ToolOutcome::unknown_tool("x");
        let error = outcome.error.unwrap();
        #[cfg(feature = "error-texts")]
        assert_eq!(error.message, "unknown tool \"x\"");
        #[cfg(not(feature = "error-texts"))]
        assert_eq!(error.message, "unknown tool");
        assert_eq!(error.info.unwrap().code, "UNKNOWN_TOOL");
    }

    fn echo() -> ToolDefinition {
        ToolDefinition::typed(
            "echo",
            "Echo text",
            json!({"type":"object","properties":{"text":{"type":"string"}}}),
        )
    }

    #[test]
    fn lc22_argument_parsing() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments("{\"a\":1}"), json!({"a":1}));
        assert_eq!(parse_arguments("{\"text\": "), json!("{\"text\": "));
        assert_eq!(parse_arguments("5"), json!(5));
    }

    #[test]
    fn tl7_invalid_json_result() {
        let tool = echo();
        let v = validate_value(&tool.schema.parameters, &parse_arguments("{\"text\": "), "");
        let outcome = ToolOutcome::invalid_arguments(&v);
        assert_eq!(
            outcome
                .result_data(1, 1, "R1".into(), &"c1".into())
                .to_string(),
            alloc::format!(
                r#"{{"turn":1,"step":1,"message":{{"source":{{"kind":"tool","callId":"c1"}},"content":[{{"type":"tool-result","toolCallId":"c1","content":[{{"type":"text","text":"Error: invalid arguments{}"}}],"isError":true}}],"role":"user","id":"R1"}},"error":{{"name":"ToolArgsError","code":"INVALID_ARGS"}}}}"#,
                // Feature `error-texts` off: the fixed text, no detail.
                if cfg!(feature = "error-texts") {
                    r#": \"arguments\" must be an object"#
                } else {
                    ""
                }
            )
        );
    }

    #[test]
    fn tl10_denial_has_no_error_field() {
        let outcome = ToolOutcome::error("blocked dangerous tool");
        let data = outcome.result_data(1, 1, "R1".into(), &"c1".into());
        assert!(data.get("error").is_none());
        assert_eq!(
            data["message"]["content"][0]["content"],
            json!([{"type":"text","text":"Error: blocked dangerous tool"}])
        );
    }

    #[test]
    fn tl8_unknown_tool_text() {
        let data = ToolOutcome::unknown_tool("nope").result_data(1, 1, "R1".into(), &"c1".into());
        assert_eq!(
            data["message"]["content"][0]["content"][0]["text"],
            if cfg!(feature = "error-texts") {
                "Error: unknown tool \"nope\""
            } else {
                "Error: unknown tool"
            }
        );
        assert_eq!(
            data["error"],
            json!({"name":"ToolNotFoundError","code":"UNKNOWN_TOOL"})
        );
    }

    #[test]
    fn registry_orders_by_name_and_rejects_bad_tools() {
        let mut r = ToolRegistry::new();
        r.register(ToolDefinition::untyped("zeta", "", json!({})))
            .unwrap();
        r.register(echo()).unwrap();
        assert_eq!(
            r.schemas()
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["echo", "zeta"]
        );
        assert_eq!(
            r.register(echo()).unwrap_err(),
            ToolRegistryError::Duplicate {
                name: "echo".into()
            }
        );
        let mut bad = ToolDefinition::typed("t", "", json!({"type":"object"}));
        bad.timeout_ms = Some(0.0);
        assert_eq!(
            r.register(bad).unwrap_err().to_string(),
            "tool \"t\" timeoutMs must be a positive finite number"
        );
        // Schemas are checked with feature `tool-schema` only.
        #[cfg(feature = "tool-schema")]
        let err = r
            .register(ToolDefinition::typed(
                "u",
                "",
                json!({"type":"object","patternProperties":{}}),
            ))
            .unwrap_err();
        #[cfg(feature = "tool-schema")]
        assert_eq!(err.code(), "UNSUPPORTED_SCHEMA");
        #[cfg(feature = "tool-order")]
        {
            let order = ["zeta".to_string(), UNLISTED_TOOLS.to_string()];
            assert_eq!(
                r.ordered_schemas(&order)
                    .unwrap()
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>(),
                ["zeta", "echo"]
            );
            assert_eq!(
                r.ordered_schemas(&["x".to_string(), UNLISTED_TOOLS.to_string()])
                    .unwrap_err(),
                "toolOrder lists unregistered tool \"x\"; known tools: echo, zeta"
            );
        }
    }

    /// Arguments are checked against the schema with `tool-schema` only.
    #[cfg(feature = "tool-schema")]
    #[test]
    fn tl15_execution_mode() {
        let mut r = ToolRegistry::new();
        let mut read = ToolDefinition::typed(
            "read",
            "",
            json!({"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}),
        );
        read.concurrency_safe = true;
        r.register(read).unwrap();
        assert_eq!(
            r.execution_mode("read", &json!({"file_path":"a"})),
            ExecutionMode::Parallel
        );
        assert_eq!(
            r.execution_mode("read", &json!({})),
            ExecutionMode::Exclusive
        );
        assert_eq!(
            r.execution_mode("nope", &json!({})),
            ExecutionMode::Exclusive
        );
    }

    #[test]
    fn feedback_text_renders_non_text_blocks() {
        assert_eq!(
            feedback_text(&[
                ContentBlock::text("a"),
                ContentBlock::reasoning("r"),
                ContentBlock::text("b")
            ]),
            "a\n[reasoning content]\nb"
        );
    }
}
