//! The web tools of dsh: `web_fetch {url}` and
//! `web_search {queries}`, with the reference's schemas, result texts and
//! log events, and [`WebFetchApproval`], which asks before a fetch from a
//! host not yet allowed in the session.
//!
//! The tools are [`dsh_tools::Tool`]s: add them to the agent's
//! [`ToolSet`](dsh_tools::ToolSet) (every runtime runs tool bodies the same
//! way, the std runtime on a thread and smol through `unblock`). Failures
//! are `WebError` results with the reference's codes (`WEB_INVALID_URL`,
//! `WEB_BLOCKED_URL`, `WEB_REDIRECT_BLOCKED`, `WEB_FETCH_TOO_LARGE`,
//! `WEB_FETCH_TIMEOUT`, `WEB_UNSUPPORTED_CONTENT_TYPE`, `WEB_ABORTED`,
//! `WEB_PROVIDER_ERROR`, ...).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{PreToolDecision, ToolExecution};
use dsh_runtime::{Cx, Flow, Plugin, Seams, ToolDispatch};
use dsh_tools::Tool;

pub mod fetch;
pub mod net;
pub mod search;

pub use fetch::{FetchConfig, FetchResult, WebFetchTool};
pub use net::AddressPolicy;
pub use search::{
    DeepSeekSearch, ExaSearch, SearchCx, SearchProvider, SearchResult, Source, WebSearchTool,
};

/// The `User-Agent` of every web request.
pub const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"));

/// A failure to retrieve or represent a web resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebError {
    /// The reference's code, e.g. `WEB_BLOCKED_URL`.
    pub code: &'static str,
    /// What the model reads.
    pub message: String,
}

impl WebError {
    /// An error with `code` and `message`.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        WebError {
            code,
            message: message.into(),
        }
    }
}

impl core::fmt::Display for WebError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for WebError {}

/// The tool result of `e`: `Error: <message>` with `{name:"WebError", code}`.
pub fn web_error(e: WebError) -> ToolOutcome {
    ToolOutcome::coded_error(e.message, "WebError", e.code)
}

/// The two web tools.
pub fn tools(fetch: FetchConfig, search: Option<Arc<dyn SearchProvider>>) -> Vec<Box<dyn Tool>> {
    vec![
        Box::new(WebFetchTool { config: fetch }),
        Box::new(WebSearchTool::new(search)),
    ]
}

/// The host of a `web_fetch` call's URL, lowercased (`None` when it has
/// none).
pub fn fetch_host(exec: &ToolExecution) -> Option<String> {
    let url = exec.arguments.get("url")?.as_str()?;
    let uri: ureq::http::Uri = url.parse().ok()?;
    uri.host().map(net::bare_host)
}

/// The reference's system-prompt guidance for the two web tools
/// (`tool:web_search` at 110, `tool:web_fetch` at 111).
pub fn guidance() -> Vec<dsh_core::agent::prompt::PromptSection> {
    use dsh_core::agent::prompt::PromptSection;
    let n = search::MAX_QUERIES;
    vec![
        PromptSection::new(
            "tool:web_search",
            110,
            format!(
                "Use the web_search tool to discover current information on the web. The required queries array accepts 1\u{2013}{n} non-empty search queries; use a one-item array for a single search. It returns an optional answer plus a list of source URLs. Follow up with web_fetch when you need the full content of a specific result, and cite the relevant URLs as markdown links."
            ),
        ),
        PromptSection::new(
            "tool:web_fetch",
            111,
            "Use the web_fetch tool to retrieve the content of a specific HTTP(S) URL (for example a result from web_search). It returns the page content decoded to text. Cite the URL as a markdown link when you use its content.",
        ),
    ]
}

/// The web tools' plugin: their prompt guidance ([`guidance`]), and an ask
/// before a `web_fetch` from a host not yet allowed in the session; a
/// fetch that ran (approved or allowed) allows its host for the rest of
/// the session. Register it after the approval policy.
#[derive(Clone, Debug, Default)]
pub struct WebFetchApproval {
    allowed: Arc<Mutex<BTreeSet<String>>>,
}

impl WebFetchApproval {
    /// A plugin that allows `hosts` from the start.
    pub fn new(hosts: impl IntoIterator<Item = String>) -> Self {
        WebFetchApproval {
            allowed: Arc::new(Mutex::new(
                hosts.into_iter().map(|h| net::bare_host(&h)).collect(),
            )),
        }
    }

    fn is_allowed(&self, host: &str) -> bool {
        self.allowed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(host)
    }
}

impl Plugin for WebFetchApproval {
    fn name(&self) -> &str {
        "web-fetch-approval"
    }

    fn seams(&self) -> Seams {
        Seams::TOOL_PRE_EXECUTE | Seams::TOOL_EXECUTE
    }

    fn sections(&mut self) -> Vec<dsh_core::agent::prompt::PromptSection> {
        guidance()
    }

    fn tool_pre_execute(
        &mut self,
        _cx: &mut Cx<'_>,
        exec: &ToolExecution,
        value: PreToolDecision,
    ) -> Flow<PreToolDecision> {
        if exec.name != "web_fetch" || value != PreToolDecision::Allow {
            return Flow::Next(value);
        }
        match fetch_host(exec) {
            Some(host) if self.is_allowed(&host) => Flow::Next(value),
            Some(host) => Flow::Next(PreToolDecision::Ask {
                reason: Some(format!(
                    "web_fetch from \"{host}\", a host not yet allowed in this session"
                )),
            }),
            // A malformed URL fails in the body with a clear error.
            None => Flow::Next(value),
        }
    }

    fn tool_execute(&mut self, _cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        if let ToolDispatch::Run(exec) = &value
            && exec.name == "web_fetch"
            && let Some(host) = fetch_host(exec)
        {
            self.allowed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(host);
        }
        Flow::Next(value)
    }
}
