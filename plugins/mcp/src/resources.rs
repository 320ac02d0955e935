//! MCP resources as tools, as codex offers them: `list_mcp_resources`
//! (every server's, or one server's, resources, one page at a time) and
//! `read_mcp_resource` (one resource's text; binary contents are named, not
//! inlined).

use std::sync::Arc;

use dsh_core::ContentBlock;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_tools::{Tool, ToolCallRequest, ToolContext};
use serde_json::{Value, json};

use crate::server::Server;

/// The listing tool's name.
pub const LIST_TOOL: &str = "list_mcp_resources";
/// The reading tool's name.
pub const READ_TOOL: &str = "read_mcp_resource";

/// Most resources listed per server per call.
const MAX_LISTED: usize = 200;

/// Which of the two tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `list_mcp_resources`.
    List,
    /// `read_mcp_resource`.
    Read,
}

/// One of the two resource tools over the servers that have resources.
#[derive(Debug)]
pub struct ResourceTool {
    kind: Kind,
    servers: Vec<Arc<Server>>,
}

impl ResourceTool {
    /// The tool `kind` over `servers`.
    pub fn new(kind: Kind, servers: Vec<Arc<Server>>) -> Self {
        ResourceTool { kind, servers }
    }

    fn server(&self, name: &str) -> Result<&Arc<Server>, Box<ToolOutcome>> {
        self.servers
            .iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.servers.iter().map(|s| s.name()).collect();
                Box::new(ToolOutcome::coded_error(
                    format!(
                        "no MCP server {name:?} with resources (servers: {})",
                        names.join(", ")
                    ),
                    "McpError",
                    "UNKNOWN_SERVER",
                ))
            })
    }
}

impl Tool for ResourceTool {
    fn definition(&self) -> ToolDefinition {
        let names: Vec<&str> = self.servers.iter().map(|s| s.name()).collect();
        match self.kind {
            Kind::List => ToolDefinition::typed(
                LIST_TOOL,
                format!(
                    "Lists the resources of the MCP servers ({}): name, URI, MIME type, description. Give `server` to list one server's, `cursor` for its next page.",
                    names.join(", ")
                ),
                json!({"type": "object", "properties": {
                    "server": {"type": "string", "description": "One server's name (default: all)"},
                    "cursor": {"type": "string", "description": "The nextCursor of an earlier listing of `server`"}
                }}),
            ),
            Kind::Read => ToolDefinition::typed(
                READ_TOOL,
                "Reads one resource of an MCP server by its URI (see list_mcp_resources).",
                json!({"type": "object", "properties": {
                    "server": {"type": "string", "description": "The server's name"},
                    "uri": {"type": "string", "description": "The resource URI"}
                }, "required": ["server", "uri"]}),
            ),
        }
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let arg = |k: &str| call.arguments.get(k).and_then(Value::as_str);
        match self.kind {
            Kind::List => {
                let chosen: Vec<&Arc<Server>> = match arg("server") {
                    Some(name) => match self.server(name) {
                        Ok(s) => vec![s],
                        Err(e) => return *e,
                    },
                    None => self.servers.iter().collect(),
                };
                let mut lines = Vec::new();
                for s in chosen {
                    let params = arg("cursor").map(|c| json!({"cursor": c}));
                    match s.request("resources/list", params, &ctx.cancel) {
                        Ok(r) => lines.extend(list_lines(s.name(), &r)),
                        Err(e) => lines.push(format!("{}: error: {e}", s.name())),
                    }
                }
                if lines.is_empty() {
                    lines.push("(no resources)".into());
                }
                ToolOutcome::success(vec![ContentBlock::text(lines.join("\n"))])
            }
            Kind::Read => {
                let (Some(name), Some(uri)) = (arg("server"), arg("uri")) else {
                    return ToolOutcome::invalid_arguments(&[
                        "`server` and `uri` are required".into()
                    ]);
                };
                let s = match self.server(name) {
                    Ok(s) => s,
                    Err(e) => return *e,
                };
                match s.request("resources/read", Some(json!({"uri": uri})), &ctx.cancel) {
                    Ok(r) => ToolOutcome::success(vec![ContentBlock::text(
                        crate::render::cap_text(read_text(&r)),
                    )]),
                    Err(e) => ToolOutcome::coded_error(e, "McpError", "RPC_ERROR"),
                }
            }
        }
    }
}

/// One line per listed resource (and the next cursor).
pub fn list_lines(server: &str, result: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let items = result
        .get("resources")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for r in items.iter().take(MAX_LISTED) {
        let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
        let mut line = format!("{server}: {} <{}>", f("name"), f("uri"));
        if !f("mimeType").is_empty() {
            line.push_str(&format!(" {}", f("mimeType")));
        }
        if !f("description").is_empty() {
            line.push_str(&format!(" — {}", f("description")));
        }
        out.push(line);
    }
    if items.len() > MAX_LISTED {
        out.push(format!(
            "{server}: … {} more not shown",
            items.len() - MAX_LISTED
        ));
    }
    if let Some(c) = result.get("nextCursor").and_then(Value::as_str) {
        out.push(format!("{server}: nextCursor {c}"));
    }
    out
}

/// The text of a `resources/read` result: text contents joined; binary
/// contents named with their size.
pub fn read_text(result: &Value) -> String {
    let items = result
        .get("contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let parts: Vec<String> = items
        .iter()
        .map(|c| {
            let uri = c.get("uri").and_then(Value::as_str).unwrap_or("");
            if let Some(t) = c.get("text").and_then(Value::as_str) {
                t.to_string()
            } else {
                let mime = c
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown media type");
                let len = c.get("blob").and_then(Value::as_str).map_or(0, str::len);
                format!("[binary resource {uri}: {mime}, {len} bytes of base64 not shown]")
            }
        })
        .collect();
    if parts.is_empty() {
        "(the resource has no contents)".into()
    } else {
        parts.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_and_reading_render_as_text() {
        let l = list_lines(
            "fs",
            &json!({"resources": [{"name": "a", "uri": "file:///a", "mimeType": "text/plain"}], "nextCursor": "n"}),
        );
        assert_eq!(l, ["fs: a <file:///a> text/plain", "fs: nextCursor n"]);
        let t = read_text(&json!({"contents": [
            {"uri": "x", "text": "hello"},
            {"uri": "y", "blob": "AAAA", "mimeType": "image/png"}
        ]}));
        assert_eq!(
            t,
            "hello\n[binary resource y: image/png, 4 bytes of base64 not shown]"
        );
    }
}
