//! MCP servers in the CLI: the `[mcp_servers.NAME]` tables of the config
//! file (codex's format) and of `--mcp-config FILE`, starting them for an
//! agent (their tools join the tool set, approval as any tool), and
//! `dsh mcp list | add | remove`.
//!
//! A workspace's `.dsh/config.toml` is not read: dsh has no notion of a
//! trusted workspace yet, and a project folder is hostile by default.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::{Args, Subcommand};
use dsh_mcp::{Mcp, ServerConfig, ServersConfig, Status};
use dsh_std::{AgentConfig, ApprovalMode};

use crate::Outcome;
use crate::sanitize::{eprintln_safe, println_safe};

/// The servers started by this process, closed at exit.
static STARTED: Mutex<Vec<Mcp>> = Mutex::new(Vec::new());

/// `--mcp-config FILE`.
#[derive(Args, Clone, Debug, Default)]
pub struct McpArgs {
    /// A TOML file of `[mcp_servers.NAME]` tables (codex's format) for
    /// this run, over the config file's servers of the same name.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
}

/// `dsh mcp ...`
#[derive(Subcommand)]
pub enum McpCommand {
    /// Start every configured server and show its state and tools.
    List {
        #[command(flatten)]
        args: McpArgs,
        /// The workspace the servers start in (default: the current
        /// directory).
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
    },
    /// Add a server to the config file: `dsh mcp add NAME -- COMMAND ARGS...`
    /// or `dsh mcp add NAME --url URL`.
    Add {
        /// The server's name (`[A-Za-z0-9_-]`, at most 32).
        name: String,
        /// A streamable-HTTP server's URL.
        #[arg(long, value_name = "URL", conflicts_with = "command")]
        url: Option<String>,
        /// A variable to set for a stdio server, `KEY=VALUE` (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// The command and its arguments (after `--`).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server from the config file.
    Remove {
        /// The server's name.
        name: String,
    },
    /// The client of the MCP conformance suite
    /// (`@modelcontextprotocol/conformance client --command ...`): connects
    /// to URL over streamable HTTP, lists the tools and calls each once
    /// with arguments made from its schema, printing each result.
    #[command(hide = true)]
    ConformanceClient {
        /// The test server's URL (the suite appends it).
        url: String,
    },
}

/// The servers of a run: the config file's, then `--mcp-config`'s.
pub fn servers(
    file: &crate::config_file::ConfigFile,
    args: &McpArgs,
    cwd: &Path,
) -> Result<ServersConfig, String> {
    let mut servers = file.mcp_servers.clone();
    // A trusted workspace's own `.dsh/config.toml` (its `[mcp_servers]`
    // only): a project folder is hostile until the user trusts it.
    let project = dsh_hooks::config::project_root(cwd).join(".dsh/config.toml");
    if project.is_file() {
        if crate::trust::is_trusted(cwd) {
            servers.extend(read_servers_file(&project, false)?);
        } else {
            eprintln_safe!(
                "dsh: {} is not read: the workspace is not trusted (dsh trust)",
                project.display()
            );
        }
    }
    if let Some(path) = &args.mcp_config {
        let extra = read_servers_file(path, true)?;
        servers.extend(extra);
    }
    Ok(servers)
}

/// The `[mcp_servers]` of a TOML file; `only`: no other key is allowed
/// (`--mcp-config`), else other keys are ignored (a project's config).
fn read_servers_file(path: &Path, only: bool) -> Result<ServersConfig, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        mcp_servers: ServersConfig,
    }
    #[derive(serde::Deserialize)]
    struct Lenient {
        #[serde(default)]
        mcp_servers: ServersConfig,
    }
    let fail = |what: String| format!("dsh: {}: {what}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if meta.len() > 1024 * 1024 {
        return Err(fail("larger than 1 MiB".into()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let parsed = if only {
        toml::from_str::<File>(&text).map(|f| f.mcp_servers)
    } else {
        toml::from_str::<Lenient>(&text).map(|f| f.mcp_servers)
    };
    parsed.map_err(|e| fail(e.to_string().trim().to_string()))
}

/// Starts `servers` for an agent in `cwd`: stderr logs under the data
/// directory (`mcp-logs/NAME.log`), the environment filtered by `policy`.
/// Each failure is reported once on stderr; `None` when nothing is
/// configured.
pub fn start(servers: &ServersConfig, cwd: &Path, policy: dsh_tools::EnvPolicy) -> Option<Mcp> {
    if servers.is_empty() {
        return None;
    }
    let mut cx = dsh_mcp::Context::new(cwd);
    cx.env_policy = policy;
    cx.log_dir = crate::data_dir::data_dir().map(|d| d.join("mcp-logs"));
    let mcp = Mcp::start(servers, &cx);
    for r in mcp.reports() {
        eprintln_safe!("dsh: {r}");
    }
    if let Ok(mut s) = STARTED.lock() {
        s.push(mcp.clone());
    }
    Some(mcp)
}

/// Adds the MCP tools to `config` (skipping names its tools already have)
/// with the plugin that follows `tools/list_changed`. Approval: `ask`
/// (the policy's default) unless the server allows read-only tools and the
/// tool is annotated `readOnlyHint`. Collisions are reported when
/// `report` is set.
pub fn install(mcp: &Mcp, config: &mut AgentConfig, report: bool) {
    let names: Vec<String> = config.tools.names().iter().map(|s| s.to_string()).collect();
    let taken: Vec<&str> = names.iter().map(String::as_str).collect();
    let (entries, collisions) = mcp.entries(&taken);
    if report {
        for c in &collisions {
            eprintln_safe!("dsh: {c}");
        }
    }
    for e in &entries {
        if e.read_only && e.server.config().auto_approve_read_only == Some(true) {
            config.approval.set(e.public.clone(), ApprovalMode::Auto);
        }
    }
    let (tools, _) = mcp.tools(&taken);
    for t in tools {
        config.tools.insert(t);
    }
    config.plugins.push(Box::new(mcp.plugin(&taken)));
}

/// The servers an ACP client passes in `session/new` / `session/load`
/// (stdio and streamable HTTP; SSE is reported and skipped). A name is
/// made usable (`[A-Za-z0-9_-]`, at most 32).
pub fn from_acp(servers: &[agent_client_protocol_schema::v1::McpServer]) -> ServersConfig {
    use agent_client_protocol_schema::v1::McpServer;
    let mut out = ServersConfig::new();
    for s in servers {
        let (name, config) = match s {
            McpServer::Stdio(s) => {
                let mut c = ServerConfig::stdio(s.command.to_string_lossy(), s.args.clone());
                for v in &s.env {
                    c.env.insert(v.name.clone(), v.value.clone());
                }
                (&s.name, c)
            }
            McpServer::Http(h) => {
                let mut c = ServerConfig::http(h.url.clone());
                for hd in &h.headers {
                    c.http_headers.insert(hd.name.clone(), hd.value.clone());
                }
                (&h.name, c)
            }
            McpServer::Sse(s) => {
                eprintln_safe!(
                    "dsh: MCP server {:?}: the SSE transport is not supported (use streamable HTTP); skipped",
                    s.name
                );
                continue;
            }
            _ => continue,
        };
        let mut clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(32)
            .collect();
        if clean.is_empty() {
            clean = format!("server{}", out.len() + 1);
        }
        out.insert(clean, config);
    }
    out
}

/// The environment policy of MCP servers started for an ACP session: the
/// tools' default, never the provider's key or the store URL.
pub fn tool_env_policy(provider: &crate::provider::Provider) -> dsh_tools::EnvPolicy {
    dsh_tools::EnvPolicy::default()
        .with_secret(provider.api_key_env.clone())
        .with_secret(crate::store::STORE_URL_ENV)
}

/// A parsed `/mcp:SERVER:PROMPT key=value ...`: server, prompt, arguments.
pub type PromptCommand = (String, String, std::collections::BTreeMap<String, String>);

/// Parses `/mcp:SERVER:PROMPT key=value ...`; `None` for any other line.
pub fn parse_prompt_command(line: &str) -> Option<Result<PromptCommand, String>> {
    let rest = line.strip_prefix("/mcp:")?;
    let mut words = rest.split_whitespace();
    let head = words.next().unwrap_or("");
    let Some((server, prompt)) = head.split_once(':') else {
        return Some(Err("usage: /mcp:SERVER:PROMPT key=value ...".into()));
    };
    let mut args = std::collections::BTreeMap::new();
    for w in words {
        let Some((k, v)) = w.split_once('=') else {
            return Some(Err(format!("{w:?}: prompt arguments are key=value")));
        };
        args.insert(k.to_string(), v.to_string());
    }
    Some(Ok((server.to_string(), prompt.to_string(), args)))
}

/// A chat line naming an MCP prompt, expanded to the prompt's text
/// (`prompts/get`); `None` when the line is not `/mcp:...`.
pub fn expand_prompt(line: &str) -> Option<Result<String, String>> {
    let parsed = parse_prompt_command(line)?;
    Some(parsed.and_then(|(server, prompt, args)| {
        let started = STARTED
            .lock()
            .map_err(|_| "MCP state poisoned".to_string())?;
        let mcp = started
            .iter()
            .find(|m| m.servers().iter().any(|s| s.name() == server))
            .ok_or_else(|| format!("no MCP server {server:?}"))?;
        mcp.get_prompt(&server, &prompt, &args)
    }))
}

/// The MCP prompts as chat commands, for `/help` (`None`: there are none).
pub fn prompt_help() -> Option<String> {
    let started = STARTED.lock().ok()?;
    let mut lines = Vec::new();
    for m in started.iter() {
        for p in m.prompts() {
            let args: String = p.arguments.iter().map(|a| format!(" {a}=…")).collect();
            lines.push(format!(
                "/mcp:{}:{}{args}  {}",
                p.server, p.name, p.description
            ));
        }
    }
    (!lines.is_empty()).then(|| format!("MCP prompts:\n{}", lines.join("\n")))
}

/// Closes every server this process started.
pub fn shutdown_all() {
    if let Ok(mut s) = STARTED.lock() {
        for m in s.drain(..) {
            m.shutdown();
        }
    }
}

/// `dsh mcp ...`
pub fn run(cmd: McpCommand) -> Outcome {
    let env = |n: &str| std::env::var(n).ok();
    match cmd {
        McpCommand::List { args, cwd } => {
            let file = match crate::config_file::load(&env) {
                Ok(f) => f,
                Err(e) => {
                    eprintln_safe!("{e}");
                    return Outcome::BadInput;
                }
            };
            let cwd = cwd
                .or_else(|| std::env::current_dir().ok())
                .unwrap_or_else(|| PathBuf::from("."));
            let servers = match servers(&file, &args, &cwd) {
                Ok(s) => s,
                Err(e) => {
                    eprintln_safe!("{e}");
                    return Outcome::BadInput;
                }
            };
            if servers.is_empty() {
                println_safe!("no MCP servers configured");
                return Outcome::Ok;
            }
            let Some(mcp) = start(&servers, &cwd, dsh_tools::EnvPolicy::default()) else {
                return Outcome::Ok;
            };
            for s in mcp.servers() {
                let state = match s.status() {
                    Status::Connected => "connected".to_string(),
                    Status::Disabled => "disabled".to_string(),
                    Status::Failed(e) => format!("failed: {e}"),
                    Status::Reconnecting { error, .. } => format!("reconnecting: {error}"),
                    _ => "unknown".to_string(),
                };
                println_safe!("{}\t{state}", s.name());
                for t in s.tools() {
                    println_safe!(
                        "  {}\t{}",
                        dsh_mcp::public_tool_name(s.name(), &t.name),
                        t.description.lines().next().unwrap_or("")
                    );
                }
            }
            mcp.shutdown();
            Outcome::Ok
        }
        McpCommand::Add {
            name,
            url,
            env: vars,
            command,
        } => match add(&name, url, &vars, &command) {
            Ok(path) => {
                println_safe!("added MCP server {name} to {}", path.display());
                Outcome::Ok
            }
            Err(e) => {
                eprintln_safe!("dsh: mcp add: {e}");
                Outcome::BadInput
            }
        },
        McpCommand::ConformanceClient { url } => conformance_client(&url),
        McpCommand::Remove { name } => match remove(&name) {
            Ok(path) => {
                println_safe!("removed MCP server {name} from {}", path.display());
                Outcome::Ok
            }
            Err(e) => {
                eprintln_safe!("dsh: mcp remove: {e}");
                Outcome::BadInput
            }
        },
    }
}

/// Arguments for a call made from `schema`: every property gets a value
/// of its type (numbers 1, strings "test", booleans true).
fn sample_arguments(schema: &serde_json::Value) -> serde_json::Value {
    let mut args = serde_json::Map::new();
    if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
        for (name, p) in props {
            let v = match p.get("type").and_then(|t| t.as_str()) {
                Some("number") | Some("integer") => serde_json::json!(1),
                Some("boolean") => serde_json::json!(true),
                Some("array") => serde_json::json!([]),
                Some("object") => serde_json::json!({}),
                _ => serde_json::json!("test"),
            };
            args.insert(name.clone(), v);
        }
    }
    serde_json::Value::Object(args)
}

fn conformance_client(url: &str) -> Outcome {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut config = ServerConfig::http(url);
    config.startup_timeout_sec = Some(20.0);
    config.tool_timeout_sec = Some(20.0);
    let server = dsh_mcp::Server::start("conformance", config, dsh_mcp::Context::new(cwd));
    if let Status::Failed(e) = server.status() {
        eprintln_safe!("dsh: conformance client: {e}");
        return Outcome::CheckFailed;
    }
    for t in server.tools() {
        let args = sample_arguments(&t.input_schema);
        let outcome = server.call_tool(&t.name, &args, &dsh_tools::CancelToken::new(), None);
        let text: Vec<String> = outcome
            .content
            .iter()
            .filter_map(|b| match b {
                dsh_core::ContentBlock::Text { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect();
        println_safe!("{}: {}", t.name, text.join(" "));
    }
    server.shutdown();
    Outcome::Ok
}

fn config_path() -> Result<PathBuf, String> {
    crate::config_file::path(&|n| std::env::var(n).ok())
        .ok_or_else(|| "neither XDG_CONFIG_HOME nor HOME is set".to_string())
}

fn read_text(path: &Path) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn add(
    name: &str,
    url: Option<String>,
    vars: &[String],
    command: &[String],
) -> Result<PathBuf, String> {
    if !dsh_mcp::names::valid_server_name(name) {
        return Err(format!(
            "{name:?}: a server name is [A-Za-z0-9_-], at most 32 characters"
        ));
    }
    let mut config = match (url, command.split_first()) {
        (Some(u), None) => ServerConfig::http(u),
        (None, Some((cmd, args))) => ServerConfig::stdio(cmd.clone(), args.to_vec()),
        _ => return Err("give `--url URL` or `-- COMMAND ARGS...`".into()),
    };
    for v in vars {
        let Some((k, val)) = v.split_once('=') else {
            return Err(format!("--env {v:?}: expected KEY=VALUE"));
        };
        config.env.insert(k.to_string(), val.to_string());
    }
    config.validate()?;
    let path = config_path()?;
    let text = read_text(&path)?;
    let current =
        crate::config_file::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if current.mcp_servers.contains_key(name) {
        return Err(format!(
            "{name:?} is already configured in {}",
            path.display()
        ));
    }
    #[derive(serde::Serialize)]
    struct Wrap<'a> {
        mcp_servers: std::collections::BTreeMap<&'a str, &'a ServerConfig>,
    }
    let table = toml::to_string(&Wrap {
        mcp_servers: [(name, &config)].into_iter().collect(),
    })
    .map_err(|e| e.to_string())?;
    let mut new_text = text.clone();
    if !new_text.is_empty() && !new_text.ends_with('\n') {
        new_text.push('\n');
    }
    if !new_text.is_empty() {
        new_text.push('\n');
    }
    new_text.push_str(&table);
    crate::config_file::parse(&new_text).map_err(|e| format!("the result would not parse: {e}"))?;
    write(&path, &new_text)?;
    Ok(path)
}

/// `text` without the `[mcp_servers.NAME]` table and its sub-tables.
fn without_server(text: &str, name: &str) -> String {
    let heads = [
        format!("mcp_servers.{name}"),
        format!("mcp_servers.\"{name}\""),
    ];
    let mut out = String::new();
    let mut skipping = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('[') {
            let inner = t.trim_start_matches('[').trim_end_matches(']').trim();
            skipping = heads.iter().any(|h| {
                inner == h
                    || inner
                        .strip_prefix(h.as_str())
                        .is_some_and(|r| r.starts_with('.'))
            });
        }
        if !skipping {
            out.push_str(line);
        }
    }
    out
}

fn remove(name: &str) -> Result<PathBuf, String> {
    let path = config_path()?;
    let text = read_text(&path)?;
    let current =
        crate::config_file::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if !current.mcp_servers.contains_key(name) {
        return Err(format!("{name:?} is not configured in {}", path.display()));
    }
    let new_text = without_server(&text, name);
    let after = crate::config_file::parse(&new_text)
        .map_err(|e| format!("the result would not parse: {e}"))?;
    if after.mcp_servers.contains_key(name) {
        return Err(format!(
            "{name:?} is not written as a [mcp_servers.{name}] table; edit {} by hand",
            path.display()
        ));
    }
    write(&path, &new_text)?;
    Ok(path)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_tables_parse_in_the_config_file() {
        let f = crate::config_file::parse(
            r#"
model = "m"
[mcp_servers.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { "DEBUG" = "1" }
startup_timeout_sec = 20
tool_timeout_sec = 30
enabled_tools = ["echo"]

[mcp_servers.docs]
url = "https://example.com/mcp"
bearer_token_env_var = "DOCS_TOKEN"
http_headers = { "X-Team" = "a" }
enabled = false
"#,
        )
        .unwrap();
        let e = &f.mcp_servers["everything"];
        assert_eq!(e.command.as_deref(), Some("npx"));
        assert_eq!(e.env["DEBUG"], "1");
        assert!(e.offers("echo") && !e.offers("add"));
        assert!(!f.mcp_servers["docs"].is_enabled());
        assert!(crate::config_file::parse("[mcp_servers.x]\ncommand = \"a\"\nnope = 1\n").is_err());
    }

    #[test]
    fn prompt_commands_parse() {
        assert!(parse_prompt_command("hello").is_none());
        let (s, p, a) = parse_prompt_command("/mcp:py:review path=src/lib.rs")
            .unwrap()
            .unwrap();
        assert_eq!((s.as_str(), p.as_str()), ("py", "review"));
        assert_eq!(a["path"], "src/lib.rs");
        assert!(parse_prompt_command("/mcp:py").unwrap().is_err());
        assert!(
            parse_prompt_command("/mcp:py:review loose")
                .unwrap()
                .is_err()
        );
    }

    #[test]
    fn remove_drops_the_table_and_its_subtables_only() {
        let text = "model = \"m\"\n\n[mcp_servers.a]\ncommand = \"x\"\n\n[mcp_servers.a.env]\nK = \"v\"\n\n[mcp_servers.ab]\ncommand = \"y\"\n[tools]\nno_network = true\n";
        let out = without_server(text, "a");
        assert_eq!(
            out,
            "model = \"m\"\n\n[mcp_servers.ab]\ncommand = \"y\"\n[tools]\nno_network = true\n"
        );
    }
}
