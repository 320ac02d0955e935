//! dsh's Model Context Protocol client.
//!
//! - [`proto`]: the sans-IO core (JSON-RPC framing and messages, the
//!   handshake and version negotiation from
//!   [`proto::LATEST_PROTOCOL_VERSION`] down to 2025-03-26, `tools/list`
//!   pages, `notifications/cancelled`, answers to server requests);
//! - [`stdio`]: a connection, and the stdio transport (a child process,
//!   blocking threads);
//! - [`http`]: the streamable-HTTP transport (ureq, blocking threads);
//! - [`server`]: one server with reconnection and backoff;
//! - [`resources`]: servers' resources as two tools (as codex offers them);
//! - [`Mcp`]: the servers of a session, their tools as [`dsh_tools::Tool`]
//!   bodies (run through the tool seams like any tool: approval and hooks
//!   apply) and the [`McpPlugin`] kernel plugin that keeps the request's
//!   tool list in step with `notifications/tools/list_changed`.
//!
//! No async runtime: the transports are threads, as the rest of dsh.

pub mod config;
pub mod http;
pub mod names;
pub mod proto;
pub mod render;
pub mod resources;
pub mod server;
pub mod stdio;

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_core::ToolSchema;
use dsh_core::agent::prompt::Assembly;
use dsh_core::agent::schema::check_schema;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_runtime::{Cx, Flow, Plugin, Seams};
use dsh_tools::{Tool, ToolCallRequest, ToolContext};

pub use config::{ServerConfig, ServersConfig};
pub use names::public_tool_name;
pub use server::{Context, Server, Status};

/// The MCP servers of one session.
#[derive(Debug, Default, Clone)]
pub struct Mcp {
    servers: Vec<Arc<Server>>,
}

/// One prompt a server offers (a slash command in `dsh chat`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptInfo {
    /// The server's name.
    pub server: String,
    /// The prompt's name.
    pub name: String,
    /// Its argument names.
    pub arguments: Vec<String>,
    /// Its description.
    pub description: String,
}

/// One MCP tool as dsh offers it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolEntry {
    /// The model-facing name (`mcp__<server>__<tool>`, normalised).
    pub public: String,
    /// The server's own name for it.
    pub raw: String,
    /// The server.
    pub server: Arc<Server>,
    /// `annotations.readOnlyHint`.
    pub read_only: bool,
}

impl Mcp {
    /// Starts every enabled server of `configs` (in parallel; each within
    /// its startup timeout). A server that fails is kept as
    /// [`Status::Failed`]; [`reports`](Self::reports) says why, once.
    pub fn start(configs: &ServersConfig, cx: &Context) -> Mcp {
        let mut handles = Vec::new();
        let mut servers = Vec::new();
        for (name, config) in configs {
            if !names::valid_server_name(name) {
                let mut c = config.clone();
                c.enabled = Some(false);
                let s = Server::start(name, c, cx.clone());
                servers.push((name.clone(), Some(s), None));
                continue;
            }
            if let Err(e) = config.validate() {
                let s = Server::start(
                    name,
                    ServerConfig {
                        enabled: Some(false),
                        ..config.clone()
                    },
                    cx.clone(),
                );
                servers.push((name.clone(), Some(s), Some(e)));
                continue;
            }
            let (name2, config, cx) = (name.clone(), config.clone(), cx.clone());
            match std::thread::Builder::new()
                .name("dsh-mcp-start".into())
                .spawn(move || Server::start(&name2, config, cx))
            {
                Ok(h) => handles.push((name.clone(), h)),
                Err(e) => servers.push((name.clone(), None, Some(e.to_string()))),
            }
        }
        let mut out: Vec<Arc<Server>> = servers.into_iter().filter_map(|(_, s, _)| s).collect();
        for (_, h) in handles {
            if let Ok(s) = h.join() {
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.name().cmp(b.name()));
        Mcp { servers: out }
    }

    /// The servers, by name.
    pub fn servers(&self) -> &[Arc<Server>] {
        &self.servers
    }

    /// One line per server that is not connected (failed to start, bad
    /// config) or had listing problems, for the front end to show once.
    pub fn reports(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.servers {
            if !names::valid_server_name(s.name()) {
                out.push(format!(
                    "MCP server {:?}: the name must match [A-Za-z0-9_-]{{1,32}}; not started",
                    s.name()
                ));
                continue;
            }
            if let Err(e) = s.config().validate() {
                out.push(format!("MCP server {:?}: {e}; not started", s.name()));
                continue;
            }
            if let Status::Failed(e) = s.status() {
                out.push(format!("MCP server {:?} failed to start: {e}", s.name()));
            }
            for w in s.warnings() {
                out.push(format!("MCP server {:?}: {w}", s.name()));
            }
        }
        out
    }

    /// Every offered tool, skipping names already in `taken` (built-in
    /// tools, another server's tool with the same normalised name): those
    /// are reported in the second list.
    pub fn entries(&self, taken: &[&str]) -> (Vec<ToolEntry>, Vec<String>) {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut out = Vec::new();
        let mut collisions = Vec::new();
        for s in &self.servers {
            for t in s.tools() {
                let public = public_tool_name(s.name(), &t.name);
                if taken.contains(&public.as_str()) {
                    collisions.push(format!(
                        "MCP tool {:?} of server {:?} is named {public}, which another tool has; skipped",
                        t.name,
                        s.name()
                    ));
                    continue;
                }
                if let Some(owner) = seen.get(&public) {
                    collisions.push(format!(
                        "MCP tool {:?} of server {:?} is named {public}, like a tool of server {owner:?}; skipped",
                        t.name,
                        s.name()
                    ));
                    continue;
                }
                seen.insert(public.clone(), s.name().to_string());
                out.push(ToolEntry {
                    public,
                    raw: t.name.clone(),
                    server: s.clone(),
                    read_only: t.read_only,
                });
            }
        }
        (out, collisions)
    }

    /// The tool bodies of [`entries`](Self::entries), and, when a server
    /// has resources, [`resources::LIST_TOOL`] and [`resources::READ_TOOL`]
    /// (codex's names) unless `taken` has them.
    pub fn tools(&self, taken: &[&str]) -> (Vec<Box<dyn Tool>>, Vec<String>) {
        let (entries, collisions) = self.entries(taken);
        let mut tools: Vec<Box<dyn Tool>> = entries
            .into_iter()
            .map(|e| Box::new(McpTool::new(e)) as Box<dyn Tool>)
            .collect();
        let with_resources: Vec<Arc<Server>> = self
            .servers
            .iter()
            .filter(|s| s.info().is_some_and(|i| i.resources))
            .cloned()
            .collect();
        if !with_resources.is_empty() {
            for kind in [resources::Kind::List, resources::Kind::Read] {
                let tool = resources::ResourceTool::new(kind, with_resources.clone());
                if !taken.contains(&tool.definition().schema.name.as_str()) {
                    tools.push(Box::new(tool));
                }
            }
        }
        (tools, collisions)
    }

    /// The kernel plugin keeping the request's tools in step with
    /// `tools/list_changed` (for the tools of [`entries`](Self::entries)).
    pub fn plugin(&self, taken: &[&str]) -> McpPlugin {
        let (entries, _) = self.entries(taken);
        McpPlugin::new(entries)
    }

    /// Every prompt of the servers that have prompts: (server, prompt,
    /// argument names, description). Each server is asked now.
    pub fn prompts(&self) -> Vec<PromptInfo> {
        let mut out = Vec::new();
        let cancel = dsh_tools::CancelToken::new();
        for s in &self.servers {
            if !s.info().is_some_and(|i| i.prompts) {
                continue;
            }
            let Ok(r) = s.request("prompts/list", None, &cancel) else {
                continue;
            };
            let items = r
                .get("prompts")
                .and_then(serde_json::Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            for p in items.iter().take(proto::MAX_TOOLS_PER_SERVER) {
                let Some(name) = p.get("name").and_then(serde_json::Value::as_str) else {
                    continue;
                };
                let arguments = p
                    .get("arguments")
                    .and_then(serde_json::Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.get("name").and_then(serde_json::Value::as_str))
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(PromptInfo {
                    server: s.name().to_string(),
                    name: name.to_string(),
                    arguments,
                    description: p
                        .get("description")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
        }
        out
    }

    /// The text of prompt `name` of `server` with `arguments`
    /// (`prompts/get`): its messages' text, joined with blank lines.
    pub fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: &BTreeMap<String, String>,
    ) -> Result<String, String> {
        let s = self
            .servers
            .iter()
            .find(|s| s.name() == server)
            .ok_or_else(|| format!("no MCP server {server:?}"))?;
        let r = s.request(
            "prompts/get",
            Some(serde_json::json!({"name": name, "arguments": arguments})),
            &dsh_tools::CancelToken::new(),
        )?;
        let messages = r
            .get("messages")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| format!("prompts/get {name}: no messages"))?;
        let parts: Vec<String> = messages
            .iter()
            .map(|m| {
                let content = m.get("content").cloned().unwrap_or(serde_json::Value::Null);
                render::content_text(std::slice::from_ref(&content), name)
            })
            .collect();
        Ok(render::cap_text(parts.join("\n\n")))
    }

    /// Closes every connection.
    pub fn shutdown(&self) {
        for s in &self.servers {
            s.shutdown();
        }
    }
}

/// An MCP tool as a dsh tool body.
#[derive(Debug)]
pub struct McpTool {
    entry: ToolEntry,
    definition: ToolDefinition,
}

impl McpTool {
    /// The body of `entry`, its definition taken from the server's listing.
    pub fn new(entry: ToolEntry) -> Self {
        let listed = entry
            .server
            .tools()
            .into_iter()
            .find(|t| t.name == entry.raw);
        let (description, schema) = match listed {
            Some(t) => (t.description, t.input_schema),
            None => (String::new(), serde_json::json!({"type": "object"})),
        };
        // A schema outside the core's subset is passed to the model as it
        // is, and the server validates the arguments.
        let definition = if check_schema(&schema).is_empty() {
            ToolDefinition::typed(entry.public.clone(), description, schema)
        } else {
            ToolDefinition::untyped(entry.public.clone(), description, schema)
        };
        McpTool { entry, definition }
    }
}

impl Tool for McpTool {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let server = &self.entry.server;
        if !server.tools().iter().any(|t| t.name == self.entry.raw) {
            return ToolOutcome::coded_error(
                format!(
                    "MCP server {:?} no longer offers tool {:?}",
                    server.name(),
                    self.entry.raw
                ),
                "McpError",
                "TOOL_REMOVED",
            );
        }
        server.call_tool(&self.entry.raw, &call.arguments, &ctx.cancel, ctx.timeout)
    }
}

/// The kernel plugin: at `system-prompt/assemble`, the schemas of the MCP
/// tools follow the servers' latest listing (a tool a server no longer
/// lists leaves the request; a changed description or schema is sent as
/// changed). Tools a server adds after the session started are offered
/// from the next session: the core's registry is fixed when the kernel is
/// built.
#[derive(Debug)]
pub struct McpPlugin {
    /// Public name → the entry and its server's generation when built.
    entries: BTreeMap<String, (ToolEntry, u64)>,
}

impl McpPlugin {
    /// A plugin over `entries`.
    pub fn new(entries: Vec<ToolEntry>) -> Self {
        McpPlugin {
            entries: entries
                .into_iter()
                .map(|e| {
                    let generation = e.server.generation();
                    (e.public.clone(), (e, generation))
                })
                .collect(),
        }
    }
}

impl McpPlugin {
    /// Brings the MCP tools among `tools` in step with their servers'
    /// latest listings (what [`Plugin::assemble`] does to the request).
    pub fn refresh(&self, tools: &mut Vec<ToolSchema>) {
        if self
            .entries
            .values()
            .all(|(e, generation)| e.server.generation() == *generation)
        {
            return;
        }
        tools.retain_mut(|schema| {
            let Some((entry, generation)) = self.entries.get(&schema.name) else {
                return true;
            };
            if entry.server.generation() == *generation {
                return true;
            }
            match entry
                .server
                .tools()
                .into_iter()
                .find(|t| t.name == entry.raw)
            {
                Some(t) => {
                    schema.description = t.description;
                    schema.parameters = t.input_schema;
                    true
                }
                None => false,
            }
        });
    }
}

impl Plugin for McpPlugin {
    fn name(&self) -> &str {
        "mcp"
    }

    fn seams(&self) -> Seams {
        Seams::ASSEMBLE
    }

    fn assemble(
        &mut self,
        _cx: &mut Cx<'_>,
        _turn: u64,
        _step: u64,
        mut value: Assembly,
    ) -> Flow<Assembly> {
        self.refresh(&mut value.tools);
        Flow::Next(value)
    }
}
