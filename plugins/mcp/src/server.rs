//! One configured server: its connection, its tools, and reconnection with
//! backoff (500 ms doubling to 30 s, 10 attempts per outage) after it
//! exits. Reconnection is lazy: the first call after the backoff delay
//! tries again; calls before that get a clear error.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{CancelToken, EnvPolicy};
use serde_json::Value;

use crate::config::ServerConfig;
use crate::proto::{self, RemoteTool, ServerInfo};
use crate::render;
use crate::stdio::{CallError, Connection, NotificationHook, Spawn};

/// First reconnect delay.
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(500);
/// Longest reconnect delay.
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);
/// Failed reconnects per outage before giving up.
pub const RECONNECT_ATTEMPTS: u32 = 10;

/// The delay before reconnect attempt `failures + 1`.
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u64 << failures.min(16);
    let ms = (RECONNECT_INITIAL.as_millis() as u64).saturating_mul(factor);
    Duration::from_millis(ms).min(RECONNECT_MAX)
}

/// What every server of a session shares.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Context {
    /// The workspace (default working directory; `roots/list`).
    pub workspace: PathBuf,
    /// The policy filtering the environment of stdio servers.
    pub env_policy: EnvPolicy,
    /// Where per-server stderr logs go (`<dir>/<server>.log`); `None`:
    /// stderr is drained and dropped.
    pub log_dir: Option<PathBuf>,
    /// The environment the policy filters (default: this process's).
    pub parent_env: Option<Vec<(OsString, OsString)>>,
}

impl Context {
    /// A context for `workspace` with the default policy and no log dir.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Context {
            workspace: workspace.into(),
            env_policy: EnvPolicy::default(),
            log_dir: None,
            parent_env: None,
        }
    }
}

#[derive(Debug)]
enum State {
    Up(Arc<Connection>),
    Down {
        failures: u32,
        retry_at: Instant,
        last_error: String,
    },
    GaveUp(String),
    Disabled,
}

/// A server's state, as `dsh mcp list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// Connected.
    Connected,
    /// Not connected; reconnecting.
    Reconnecting {
        /// Failed attempts so far.
        failures: u32,
        /// The last error.
        error: String,
    },
    /// Given up (failed to start, or out of reconnect attempts).
    Failed(String),
    /// `enabled = false`.
    Disabled,
}

/// One MCP server.
pub struct Server {
    name: String,
    config: ServerConfig,
    cx: Context,
    state: Mutex<State>,
    tools: Mutex<Vec<RemoteTool>>,
    info: Mutex<Option<ServerInfo>>,
    /// Bumped whenever `tools` changes.
    generation: AtomicU64,
    relisting: AtomicBool,
    warnings: Mutex<Vec<String>>,
    me: Weak<Server>,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Connects (handshake and first listing within the startup timeout).
    /// A server that fails stays in the set as [`Status::Failed`].
    pub fn start(name: &str, config: ServerConfig, cx: Context) -> Arc<Server> {
        let server = Arc::new_cyclic(|me| Server {
            name: name.to_string(),
            config,
            cx,
            state: Mutex::new(State::Disabled),
            tools: Mutex::new(Vec::new()),
            info: Mutex::new(None),
            generation: AtomicU64::new(0),
            relisting: AtomicBool::new(false),
            warnings: Mutex::new(Vec::new()),
            me: me.clone(),
        });
        if !server.config.is_enabled() {
            return server;
        }
        let state = match server.connect() {
            Ok(conn) => State::Up(conn),
            Err(e) => State::GaveUp(e),
        };
        server.set_state(state);
        server
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// What it said in `initialize`, once connected.
    pub fn info(&self) -> Option<ServerInfo> {
        self.info.lock().ok().and_then(|i| i.clone())
    }

    /// Its offered tools (after `enabled_tools`/`disabled_tools`).
    pub fn tools(&self) -> Vec<RemoteTool> {
        self.tools.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Changes to the tool list so far (0: the first listing).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Problems met while listing (duplicates, caps).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The current state.
    pub fn status(&self) -> Status {
        let Ok(state) = self.state.lock() else {
            return Status::Failed("poisoned".into());
        };
        match &*state {
            State::Up(c) => match c.closed_reason() {
                None => Status::Connected,
                Some(why) => Status::Reconnecting {
                    failures: 0,
                    error: why,
                },
            },
            State::Down {
                failures,
                last_error,
                ..
            } => Status::Reconnecting {
                failures: *failures,
                error: last_error.clone(),
            },
            State::GaveUp(e) => Status::Failed(e.clone()),
            State::Disabled => Status::Disabled,
        }
    }

    fn set_state(&self, s: State) {
        if let Ok(mut state) = self.state.lock() {
            *state = s;
        }
    }

    fn spawn_spec(&self) -> Result<Spawn, String> {
        let Some(command) = self.config.command.clone() else {
            return Err(match &self.config.url {
                Some(url) => {
                    format!("streamable HTTP ({url}) is not supported by this dsh build yet")
                }
                None => "no `command`".into(),
            });
        };
        let parent: Vec<(OsString, OsString)> = match &self.cx.parent_env {
            Some(p) => p.clone(),
            None => std::env::vars_os().collect(),
        };
        let mut env = self.cx.env_policy.apply(parent.iter().cloned());
        // Named by the user: passed through even if the policy drops them.
        for name in &self.config.env_vars {
            if let Some((_, v)) = parent.iter().find(|(k, _)| k.to_str() == Some(name)) {
                env.retain(|(k, _)| k.to_str() != Some(name));
                env.push((name.into(), v.clone()));
            }
        }
        for (k, v) in &self.config.env {
            env.retain(|(name, _)| name.to_str() != Some(k));
            env.push((k.into(), v.into()));
        }
        let cwd = match &self.config.cwd {
            Some(c) => {
                let p = PathBuf::from(c);
                if p.is_absolute() {
                    p
                } else {
                    self.cx.workspace.join(p)
                }
            }
            None => self.cx.workspace.clone(),
        };
        Ok(Spawn {
            command,
            args: self.config.args.clone(),
            env,
            cwd,
            log_file: self
                .cx
                .log_dir
                .as_ref()
                .map(|d| d.join(format!("{}.log", self.name))),
        })
    }

    fn hook(&self) -> NotificationHook {
        let me = self.me.clone();
        Arc::new(move |method: &str, _params: &Value| {
            if method == "notifications/tools/list_changed"
                && let Some(s) = me.upgrade()
            {
                s.relist_in_background();
            }
        })
    }

    fn env_var(&self, name: &str) -> Option<String> {
        match &self.cx.parent_env {
            Some(p) => p
                .iter()
                .find(|(k, _)| k.to_str() == Some(name))
                .and_then(|(_, v)| v.to_str().map(str::to_string)),
            None => std::env::var(name).ok(),
        }
    }

    fn http_wire(&self, url: &str) -> Result<crate::http::HttpWire, String> {
        let mut headers: Vec<(String, String)> = self
            .config
            .http_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (header, var) in &self.config.env_http_headers {
            if let Some(v) = self.env_var(var) {
                headers.push((header.clone(), v));
            }
        }
        if let Some(var) = &self.config.bearer_token_env_var {
            let token = self
                .env_var(var)
                .ok_or_else(|| format!("the bearer token variable {var} is not set"))?;
            headers.push(("authorization".into(), format!("Bearer {token}")));
        }
        Ok(crate::http::HttpWire::new(
            url,
            headers,
            self.config.startup_timeout(),
        ))
    }

    fn connect(&self) -> Result<Arc<Connection>, String> {
        let roots = vec![proto::file_uri(&self.cx.workspace.to_string_lossy())];
        let conn = match &self.config.url {
            Some(url) => Connection::http(self.http_wire(url)?, roots, self.hook()),
            None => {
                let spec = self.spawn_spec()?;
                Connection::spawn(&spec, roots, self.hook())?
            }
        };
        let timeout = self.config.startup_timeout();
        let started = Instant::now();
        let fail = |conn: &Connection, e: String| {
            let tail = conn.stderr_tail();
            conn.close(e.clone());
            if tail.is_empty() || e.contains("stderr:") {
                e
            } else {
                format!("{e}; stderr: {tail}")
            }
        };
        let info = match conn.initialize(timeout) {
            Ok(i) => i,
            Err(e) => return Err(fail(&conn, e)),
        };
        let left = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(100));
        if let Ok(mut i) = self.info.lock() {
            *i = Some(info.clone());
        }
        if info.tools {
            match conn.list_tools(left) {
                Ok(listing) => self.install(listing),
                Err(e) => return Err(fail(&conn, e)),
            }
        }
        Ok(conn)
    }

    fn install(&self, listing: proto::ToolListing) {
        let tools: Vec<RemoteTool> = listing
            .tools
            .into_iter()
            .filter(|t| self.config.offers(&t.name))
            .collect();
        if let Ok(mut w) = self.warnings.lock() {
            *w = listing.warnings;
        }
        if let Ok(mut t) = self.tools.lock()
            && *t != tools
        {
            *t = tools;
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn relist_in_background(&self) {
        if self.relisting.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let spawned = std::thread::Builder::new()
            .name("dsh-mcp-relist".into())
            .spawn(move || {
                if let Ok(conn) = me.connection()
                    && let Ok(listing) = conn.list_tools(me.config.startup_timeout())
                {
                    me.install(listing);
                }
                me.relisting.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.relisting.store(false, Ordering::SeqCst);
        }
    }

    /// The live connection, reconnecting when the backoff delay has passed.
    pub fn connection(&self) -> Result<Arc<Connection>, String> {
        let Ok(mut state) = self.state.lock() else {
            return Err("the server's state is poisoned".into());
        };
        loop {
            match &*state {
                State::Up(c) => match c.closed_reason() {
                    None => return Ok(c.clone()),
                    Some(why) => {
                        // The backoff counts from when the server went away.
                        let since = c.closed_at().unwrap_or_else(Instant::now);
                        *state = State::Down {
                            failures: 0,
                            retry_at: since + backoff(0),
                            last_error: why,
                        };
                    }
                },
                State::Down {
                    failures,
                    retry_at,
                    last_error,
                } => {
                    let now = Instant::now();
                    if now < *retry_at {
                        let wait = retry_at.saturating_duration_since(now);
                        return Err(format!(
                            "MCP server {:?} is unavailable ({last_error}); reconnect attempt {} of {RECONNECT_ATTEMPTS} in {:.1} s",
                            self.name,
                            failures + 1,
                            wait.as_secs_f64()
                        ));
                    }
                    let failures = *failures;
                    match self.connect() {
                        Ok(c) => *state = State::Up(c),
                        Err(e) => {
                            let failures = failures + 1;
                            if failures >= RECONNECT_ATTEMPTS {
                                *state = State::GaveUp(format!(
                                    "gave up after {RECONNECT_ATTEMPTS} reconnect attempts: {e}"
                                ));
                            } else {
                                *state = State::Down {
                                    failures,
                                    retry_at: Instant::now() + backoff(failures),
                                    last_error: e,
                                };
                            }
                        }
                    }
                }
                State::GaveUp(e) => {
                    return Err(format!("MCP server {:?} is not available: {e}", self.name));
                }
                State::Disabled => {
                    return Err(format!("MCP server {:?} is disabled", self.name));
                }
            }
        }
    }

    /// Calls tool `raw` with `arguments`: the rendered outcome, or a typed
    /// error outcome (`McpError`) when the server cannot answer.
    pub fn call_tool(
        &self,
        raw: &str,
        arguments: &Value,
        cancel: &CancelToken,
        timeout: Option<Duration>,
    ) -> ToolOutcome {
        let conn = match self.connection() {
            Ok(c) => c,
            Err(e) => return ToolOutcome::coded_error(e, "McpError", "SERVER_UNAVAILABLE"),
        };
        let mut deadline = self.config.tool_timeout();
        if let Some(t) = timeout {
            deadline = deadline.min(t);
        }
        match conn.request(
            "tools/call",
            Some(proto::call_params(raw, arguments)),
            deadline,
            Some(cancel),
        ) {
            Ok(result) => render::render_result(&result, raw),
            Err(CallError::Cancelled) => ToolOutcome::aborted(),
            Err(CallError::Timeout(d)) => ToolOutcome::coded_error(
                format!(
                    "MCP tool {raw:?} of server {:?} did not answer within {:.1} s (the call was cancelled)",
                    self.name,
                    d.as_secs_f64()
                ),
                "McpError",
                "TIMEOUT",
            ),
            Err(CallError::Rpc(e)) => ToolOutcome::coded_error(
                format!("MCP server {:?}: {}", self.name, e.message),
                "McpError",
                "RPC_ERROR",
            ),
            Err(e @ CallError::Closed(_)) => ToolOutcome::coded_error(
                format!("MCP server {:?}: {e}; it will be restarted", self.name),
                "McpError",
                "CONNECTION_CLOSED",
            ),
            Err(e) => ToolOutcome::coded_error(
                format!("MCP server {:?}: {e}", self.name),
                "McpError",
                "CALL_FAILED",
            ),
        }
    }

    /// Sends any request (resources, prompts) within the tool timeout.
    pub fn request(
        &self,
        method: &str,
        params: Option<Value>,
        cancel: &CancelToken,
    ) -> Result<Value, String> {
        let conn = self.connection()?;
        conn.request(method, params, self.config.tool_timeout(), Some(cancel))
            .map_err(|e| format!("MCP server {:?}: {method}: {e}", self.name))
    }

    /// Closes the connection (the child is killed).
    pub fn shutdown(&self) {
        if let Ok(mut state) = self.state.lock() {
            if let State::Up(c) = &*state {
                c.close("dsh closed the connection".into());
            }
            *state = State::Disabled;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_500_ms_to_30_s() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(6), Duration::from_secs(30));
        assert_eq!(backoff(40), Duration::from_secs(30));
    }
}
