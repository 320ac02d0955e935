//! The typed reading of ACP messages: a classified request or notification
//! ([`rpc::Incoming`](super::rpc::Incoming)) becomes the protocol schema's
//! typed value, and a prompt's content blocks become the text the agent
//! receives. Pure functions of their input (the fuzz target `acp_rpc`
//! drives them with the transport's reader).

use agent_client_protocol_schema::MethodDispatchError;
use agent_client_protocol_schema::v1::{
    self as acp, ClientNotification, ClientRequest, EmbeddedResourceResource, ErrorCode,
};
use serde_json::Value;

use super::rpc::{params_object, rpc_error};

/// Methods the `dsh acp` agent implements (others answer "method not
/// found").
pub fn supported(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "session/new" | "session/load" | "session/prompt" | "session/set_mode"
    )
}

/// An `invalid params` (-32602) error with `message`.
pub fn invalid_params(message: impl Into<String>) -> acp::Error {
    rpc_error(ErrorCode::InvalidParams, message)
}

/// The typed request for `method` with `params` (`null` reads as `{}`):
/// params that do not fit the method's schema give `invalid params`
/// (-32602), a method the schema does not know `method not found` (-32601).
pub fn decode_request(method: &str, params: &Value) -> Result<ClientRequest, acp::Error> {
    match ClientRequest::from_method_and_params(method, &params_object(params)) {
        Ok(r) => Ok(r),
        Err(MethodDispatchError::InvalidPayload { source, .. }) => Err(invalid_params(format!(
            "Invalid params for {method}: {source}"
        ))),
        Err(_) => Err(rpc_error(
            ErrorCode::MethodNotFound,
            format!("Method not found: {method}"),
        )),
    }
}

/// The typed notification for `method` with `params` (`null` reads as
/// `{}`); `Err` is a message for the diagnostics (notifications are never
/// answered).
pub fn decode_notification(method: &str, params: &Value) -> Result<ClientNotification, String> {
    ClientNotification::from_method_and_params(method, &params_object(params))
        .map_err(|e| e.to_string())
}

/// The prompt's blocks as one text: text as is, resource links as
/// `@name (uri)`, embedded text resources inside `<context>`; images and
/// audio are refused (not offered in `promptCapabilities`), and so is a
/// prompt without text (`invalid params`).
pub fn prompt_text(blocks: &[acp::ContentBlock]) -> Result<String, acp::Error> {
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            acp::ContentBlock::Text(t) => parts.push(t.text.clone()),
            acp::ContentBlock::ResourceLink(l) => parts.push(format!("@{} ({})", l.name, l.uri)),
            acp::ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => parts.push(format!(
                    "<context uri=\"{}\">\n{}\n</context>",
                    t.uri, t.text
                )),
                _ => return Err(invalid_params("binary resources are not supported")),
            },
            _ => {
                return Err(invalid_params(
                    "only text, resource links and text resources are supported in prompts",
                ));
            }
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(invalid_params("the prompt has no text"));
    }
    Ok(text)
}
