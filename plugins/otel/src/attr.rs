//! Attribute keys and event names: the OpenTelemetry GenAI semantic
//! conventions where they name the thing, `dsh.*` where they do not.

/// `gen_ai.operation.name`: `invoke_agent`, `chat`, `execute_tool`.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name` (the current name of the provider attribute).
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.system`: the deprecated provider attribute, still read by many
/// backends; carries the same value as [`PROVIDER_NAME`].
pub const SYSTEM: &str = "gen_ai.system";
/// `gen_ai.agent.name`.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.conversation.id`: the session id.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.request.model`.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.finish_reasons` (string array).
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.usage.input_tokens` (cached tokens included, as the conventions
/// say).
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens` (reasoning included).
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.cache_read.input_tokens`.
pub const USAGE_CACHE_READ: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.usage.cache_creation.input_tokens`.
pub const USAGE_CACHE_CREATION: &str = "gen_ai.usage.cache_creation.input_tokens";
/// `gen_ai.tool.name`.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`: `function`.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.tool.call.arguments` (content capture only).
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `gen_ai.tool.call.result` (content capture only).
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// `gen_ai.input.messages` (content capture only; JSON).
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// `gen_ai.output.messages` (content capture only; JSON).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// `error.type`: a failure code.
pub const ERROR_TYPE: &str = "error.type";
/// `http.response.status_code` of a provider failure.
pub const HTTP_STATUS: &str = "http.response.status_code";
/// `exception.type` (on an `exception` event).
pub const EXCEPTION_TYPE: &str = "exception.type";
/// `exception.message` (on an `exception` event).
pub const EXCEPTION_MESSAGE: &str = "exception.message";

/// `dsh.turn`: the turn number.
pub const DSH_TURN: &str = "dsh.turn";
/// `dsh.step`: the step number.
pub const DSH_STEP: &str = "dsh.step";
/// `dsh.turn.end_reason`: the `turn/end` reason kind.
pub const DSH_TURN_END: &str = "dsh.turn.end_reason";
/// `dsh.provider.route`: the provider route as configured.
pub const DSH_PROVIDER_ROUTE: &str = "dsh.provider.route";
/// `dsh.usage.reasoning_tokens`: the reasoning share of the output.
pub const DSH_REASONING_TOKENS: &str = "dsh.usage.reasoning_tokens";
/// `dsh.retry`: the retry number (on a retried attempt and a retry event).
pub const DSH_RETRY: &str = "dsh.retry";
/// `dsh.retry.max`: the retry budget.
pub const DSH_RETRY_MAX: &str = "dsh.retry.max";
/// `dsh.retry.delay_ms`: the wait before the retry.
pub const DSH_RETRY_DELAY_MS: &str = "dsh.retry.delay_ms";

/// The span event of an exception (semantic conventions).
pub const EVENT_EXCEPTION: &str = "exception";
/// The span event of an `llm/retry`: the attempt failed and is retried.
pub const EVENT_RETRY: &str = "dsh.llm.retry";
