//! `web_search` and its provider seam.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::ContentBlock;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::EventData;
use dsh_tools::{EventSink, Tool, ToolCallRequest, ToolContext};
use serde_json::{Map, Value, json};

use crate::{USER_AGENT, WebError, web_error};

/// Most sources one `web_search` returns (8).
pub const MAX_RESULTS: usize = 8;
/// Most queries one `web_search` takes (4).
pub const MAX_QUERIES: usize = 4;
/// Largest provider response read (2 MiB).
pub const MAX_PROVIDER_BYTES: u64 = 2 << 20;

/// One source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    /// Its URL.
    pub url: String,
    /// Its title.
    pub title: Option<String>,
    /// A snippet.
    pub snippet: Option<String>,
    /// When it was published, as the provider says.
    pub published_at: Option<String>,
}

/// A provider's answer to one query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchResult {
    /// A summary answer, when the provider gives one.
    pub content: Option<String>,
    /// The sources, best first.
    pub sources: Vec<Source>,
    /// Whether sources were left out.
    pub truncated: bool,
}

/// What a provider may use besides the query.
pub struct SearchCx<'a> {
    /// Cancellation of the call.
    pub cancel: &'a dsh_tools::CancelToken,
    /// The session's append channel, for the provider's log events.
    pub events: Option<&'a dyn EventSink>,
    /// The call's deadline.
    pub timeout: Duration,
}

/// A web search backend. The model-facing schema never depends on it.
pub trait SearchProvider: Send + Sync {
    /// Its id (e.g. `deepseek-official`, `exa`).
    fn id(&self) -> &str;
    /// Searches `query` for at most `max_results` sources.
    fn search(
        &self,
        query: &str,
        max_results: usize,
        cx: &SearchCx<'_>,
    ) -> Result<SearchResult, WebError>;
}

/// An API key source (read at call time; never logged).
pub type KeySource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

fn post_json(
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
    timeout: Duration,
    who: &str,
) -> Result<Value, WebError> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(timeout))
            .proxy(ureq::Proxy::try_from_env())
            .build(),
    );
    let mut req = agent.post(url).header("user-agent", USER_AGENT);
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    let response = req
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .send(body.to_string())
        .map_err(|e| match e {
            ureq::Error::Timeout(_) => {
                WebError::new("WEB_ABORTED", format!("{who} search timed out"))
            }
            other => WebError::new(
                "WEB_PROVIDER_ERROR",
                format!("{who} search request failed: {other}"),
            ),
        })?;
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_PROVIDER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            WebError::new(
                "WEB_PROVIDER_ERROR",
                format!("{who} search request failed: {e}"),
            )
        })?;
    if bytes.len() as u64 > MAX_PROVIDER_BYTES {
        return Err(WebError::new(
            "WEB_PROVIDER_ERROR",
            format!("{who} returned more than {MAX_PROVIDER_BYTES} bytes"),
        ));
    }
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    if !(200..300).contains(&status) {
        let detail = parsed.as_ref().and_then(|v| {
            v.get("error")
                .and_then(|e| {
                    e.as_str()
                        .map(str::to_string)
                        .or_else(|| e.get("message")?.as_str().map(str::to_string))
                })
                .or_else(|| v.get("message")?.as_str().map(str::to_string))
        });
        return Err(WebError::new(
            "WEB_PROVIDER_ERROR",
            detail
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| format!("{who} API error (HTTP {status})")),
        ));
    }
    parsed.ok_or_else(|| {
        WebError::new(
            "WEB_PROVIDER_ERROR",
            format!("{who} returned an unprocessable response body"),
        )
    })
}

fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// DeepSeek's own search, as the reference does it: one request to its
/// Anthropic-compatible Messages endpoint with the `web_search` server
/// tool, with the DeepSeek key. Each request is logged as a
/// `web/deepseek-search-llm-request` event (no key).
#[derive(Clone)]
pub struct DeepSeekSearch {
    /// `https://api.deepseek.com/anthropic/v1`.
    pub base_url: String,
    /// `deepseek-v4-flash`.
    pub model: String,
    /// `2023-06-01`.
    pub api_version: String,
    /// 4096.
    pub max_tokens: u64,
    /// 5.
    pub max_uses: u64,
    /// The DeepSeek key.
    pub key: KeySource,
}

impl DeepSeekSearch {
    /// The reference's defaults with `key`.
    pub fn new(key: KeySource) -> Self {
        DeepSeekSearch {
            base_url: "https://api.deepseek.com/anthropic/v1".into(),
            model: "deepseek-v4-flash".into(),
            api_version: "2023-06-01".into(),
            max_tokens: 4096,
            max_uses: 5,
            key,
        }
    }
}

impl core::fmt::Debug for DeepSeekSearch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeepSeekSearch")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// Maps a Messages API response with `web_search_tool_result` blocks.
pub fn map_anthropic_response(response: &Value) -> Result<SearchResult, WebError> {
    let blocks = response
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let results: Vec<&Value> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("web_search_tool_result"))
        .collect();
    if results.is_empty() {
        return Err(WebError::new(
            "WEB_PROVIDER_ERROR",
            "DeepSeek returned no web_search_tool_result blocks; the request may not have triggered native web search",
        ));
    }
    let mut snippets: Vec<(String, String)> = Vec::new();
    for b in &blocks {
        if b.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        for c in b
            .get("citations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(url), Some(text)) = (opt_str(c, "url"), opt_str(c, "cited_text"))
                && !snippets.iter().any(|(u, _)| *u == url)
            {
                snippets.push((url, text));
            }
        }
    }
    let mut sources: Vec<Source> = Vec::new();
    for block in results {
        for item in block
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if item.get("type").and_then(Value::as_str) != Some("web_search_result") {
                continue;
            }
            let Some(url) = opt_str(item, "url") else {
                continue;
            };
            if sources.iter().any(|s| s.url == url) {
                continue;
            }
            sources.push(Source {
                snippet: snippets
                    .iter()
                    .find(|(u, _)| *u == url)
                    .map(|(_, s)| s.clone()),
                title: opt_str(item, "title"),
                published_at: opt_str(item, "page_age"),
                url,
            });
        }
    }
    Ok(SearchResult {
        content: None,
        sources,
        truncated: false,
    })
}

impl SearchProvider for DeepSeekSearch {
    fn id(&self) -> &str {
        "deepseek-official"
    }

    fn search(
        &self,
        query: &str,
        _max: usize,
        cx: &SearchCx<'_>,
    ) -> Result<SearchResult, WebError> {
        let key = (self.key)().filter(|k| !k.is_empty()).ok_or_else(|| {
            WebError::new(
                "WEB_PROVIDER_CREDENTIAL_MISSING",
                "DeepSeek search has no API key; export DEEPSEEK_API_KEY",
            )
        })?;
        let endpoint = format!("{}/messages", self.base_url.trim_end_matches('/'));
        let body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user", "content": [{"type": "text", "text": format!("Perform a web search for the query: {query}")}]}],
            "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": self.max_uses}],
        });
        if let Some(events) = cx.events {
            let _ = events.append(EventData::plugin(
                "web/deepseek-search-llm-request",
                &json!({"endpoint": endpoint, "apiVersion": self.api_version, "body": body}),
            ));
        }
        if cx.cancel.is_cancelled() {
            return Err(WebError::new("WEB_ABORTED", "DeepSeek search aborted"));
        }
        let response = post_json(
            &endpoint,
            &[
                ("x-api-key", key.clone()),
                ("authorization", format!("Bearer {key}")),
                ("anthropic-version", self.api_version.clone()),
            ],
            &body,
            cx.timeout,
            "DeepSeek",
        )?;
        map_anthropic_response(&response)
    }
}

/// Exa search (`POST <base>/search`, a key of its own).
#[derive(Clone)]
pub struct ExaSearch {
    /// `https://api.exa.ai`.
    pub base_url: String,
    /// `auto`, `keyword` or `neural`.
    pub search_type: String,
    /// Highlights asked per result (1).
    pub highlights_per_result: u64,
    /// The Exa key.
    pub key: KeySource,
}

impl ExaSearch {
    /// Exa's endpoint with `key`.
    pub fn new(key: KeySource) -> Self {
        ExaSearch {
            base_url: "https://api.exa.ai".into(),
            search_type: "auto".into(),
            highlights_per_result: 1,
            key,
        }
    }
}

impl core::fmt::Debug for ExaSearch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExaSearch")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl SearchProvider for ExaSearch {
    fn id(&self) -> &str {
        "exa"
    }

    fn search(&self, query: &str, max: usize, cx: &SearchCx<'_>) -> Result<SearchResult, WebError> {
        let key = (self.key)().filter(|k| !k.is_empty()).ok_or_else(|| {
            WebError::new(
                "WEB_PROVIDER_CREDENTIAL_MISSING",
                "Exa search has no API key; export EXA_API_KEY",
            )
        })?;
        let body = json!({
            "query": query,
            "type": self.search_type,
            "contents": {"highlights": {"highlightsPerUrl": self.highlights_per_result}},
            "numResults": max,
        });
        let response = post_json(
            &format!("{}/search", self.base_url.trim_end_matches('/')),
            &[
                ("authorization", format!("Bearer {key}")),
                ("x-api-key", key.clone()),
            ],
            &body,
            cx.timeout,
            "Exa",
        )?;
        let sources = response
            .get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let snippet = r
                    .get("highlights")?
                    .as_array()?
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|h| !h.trim().is_empty())?
                    .to_string();
                Some(Source {
                    url: opt_str(r, "url")?,
                    title: opt_str(r, "title"),
                    snippet: Some(snippet),
                    published_at: opt_str(r, "publishedDate"),
                })
            })
            .collect();
        Ok(SearchResult {
            content: None,
            sources,
            truncated: false,
        })
    }
}

/// Merges per-query results as the reference does: sources round-robin by
/// rank, deduplicated by URL, at most `max`; answers under `### <query>`.
pub fn merge(queries: &[String], results: &[SearchResult], max: usize) -> SearchResult {
    let ranks = results.iter().map(|r| r.sources.len()).max().unwrap_or(0);
    let mut sources: Vec<Source> = Vec::new();
    let mut dropped = false;
    'merge: for rank in 0..ranks {
        for r in results {
            if let Some(s) = r.sources.get(rank)
                && !sources.iter().any(|k| k.url == s.url)
            {
                if sources.len() == max {
                    dropped = true;
                    break 'merge;
                }
                sources.push(s.clone());
            }
        }
    }
    let contents: Vec<String> = results
        .iter()
        .zip(queries)
        .filter_map(|(r, q)| {
            r.content
                .as_ref()
                .filter(|c| !c.is_empty())
                .map(|c| format!("### {q}\n\n{c}"))
        })
        .collect();
    SearchResult {
        content: (!contents.is_empty()).then(|| contents.join("\n\n")),
        sources,
        truncated: dropped || results.iter().any(|r| r.truncated),
    }
}

fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let auth = rest.split(['/', '?', '#']).next()?;
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    let host = host.split(':').next()?;
    (!host.is_empty()).then(|| host.to_string())
}

/// The reference's model-facing text of a search result.
pub fn format_output(r: &SearchResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(c) = r.content.as_ref().filter(|c| !c.is_empty()) {
        parts.push(c.clone());
    }
    if !r.sources.is_empty() {
        let lines: Vec<String> = r
            .sources
            .iter()
            .map(|s| {
                let label = s
                    .title
                    .clone()
                    .filter(|t| !t.is_empty())
                    .or_else(|| host_of(&s.url))
                    .unwrap_or_else(|| s.url.clone());
                let mut meta: Vec<String> = Vec::new();
                if let Some(sn) = s.snippet.as_ref().filter(|x| !x.is_empty()) {
                    meta.push(sn.clone());
                }
                if let Some(p) = s.published_at.as_ref().filter(|x| !x.is_empty()) {
                    meta.push(format!("({p})"));
                }
                let suffix = if meta.is_empty() {
                    String::new()
                } else {
                    format!(" \u{2014} {}", meta.join(" "))
                };
                format!("- [{label}]({}){suffix}", s.url)
            })
            .collect();
        parts.push(format!("Sources:\n{}", lines.join("\n")));
    } else if r.content.as_ref().is_none_or(|c| c.is_empty()) {
        parts.push("No results found.".into());
    }
    if r.truncated {
        parts.push(format!(
            "(Showing the first {} sources. Refine the query for more.)",
            r.sources.len()
        ));
    }
    parts.push("Cite the relevant URLs above as markdown links in your answer.".into());
    parts.join("\n\n")
}

fn source_json(s: &Source) -> Value {
    let mut m = Map::new();
    m.insert("url".into(), json!(s.url));
    if let Some(t) = &s.title {
        m.insert("title".into(), json!(t));
    }
    if let Some(t) = &s.snippet {
        m.insert("snippet".into(), json!(t));
    }
    if let Some(t) = &s.published_at {
        m.insert("publishedAt".into(), json!(t));
    }
    Value::Object(m)
}

/// The `web_search` tool.
#[derive(Clone)]
pub struct WebSearchTool {
    /// The backend (`None`: the tool is offered but fails with a clear error).
    pub provider: Option<Arc<dyn SearchProvider>>,
    /// Most sources (8).
    pub max_results: usize,
    /// Most queries (4).
    pub max_queries: usize,
    /// Deadline of each provider request (30 s).
    pub timeout: Duration,
}

impl WebSearchTool {
    /// The tool over `provider` with the reference's limits.
    pub fn new(provider: Option<Arc<dyn SearchProvider>>) -> Self {
        WebSearchTool {
            provider,
            max_results: MAX_RESULTS,
            max_queries: MAX_QUERIES,
            timeout: Duration::from_secs(30),
        }
    }
}

impl core::fmt::Debug for WebSearchTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WebSearchTool")
            .field(
                "provider",
                &self.provider.as_ref().map(|p| p.id().to_string()),
            )
            .finish_non_exhaustive()
    }
}

impl Tool for WebSearchTool {
    fn definition(&self) -> ToolDefinition {
        let n = self.max_queries;
        let mut d = ToolDefinition::typed(
            "web_search",
            format!(
                "Search the web for current information. Provide 1\u{2013}{n} queries in the required queries array. Returns an optional summary answer and a list of source URLs."
            ),
            json!({
                "type": "object",
                "properties": {
                    "queries": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": format!("Required search queries; accepts 1\u{2013}{n} items and merges their results."),
                    }
                },
                "required": ["queries"]
            }),
        );
        d.concurrency_safe = true;
        d
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let raw: Vec<&str> = call
            .arguments
            .get("queries")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if raw.is_empty() {
            return ToolOutcome::error("queries must contain at least one query");
        }
        if raw.len() > self.max_queries {
            let noun = if self.max_queries == 1 {
                "query"
            } else {
                "queries"
            };
            return ToolOutcome::error(format!(
                "queries must contain at most {} {noun}",
                self.max_queries
            ));
        }
        if raw.iter().any(|q| q.trim().is_empty()) {
            return ToolOutcome::error("each query must be a non-empty string");
        }
        let mut queries: Vec<String> = Vec::new();
        for q in raw {
            if !queries.iter().any(|k| k == q) {
                queries.push(q.to_string());
            }
        }
        let Some(provider) = &self.provider else {
            return web_error(WebError::new(
                "WEB_PROVIDER_UNAVAILABLE",
                "no web search provider is configured",
            ));
        };
        let timeout = ctx.timeout.map_or(self.timeout, |t| t.min(self.timeout));
        let cx = SearchCx {
            cancel: &ctx.cancel,
            events: ctx.events.as_deref(),
            timeout,
        };
        let mut results = Vec::new();
        for q in &queries {
            match provider.search(q, self.max_results, &cx) {
                Ok(mut r) => {
                    if r.sources.len() > self.max_results {
                        r.sources.truncate(self.max_results);
                        r.truncated = true;
                    }
                    results.push(r)
                }
                Err(e) => return web_error(e),
            }
        }
        let merged = if results.len() == 1 {
            results.pop().unwrap_or_default()
        } else {
            merge(&queries, &results, self.max_results)
        };
        let mut o = ToolOutcome::success(vec![ContentBlock::text(format_output(&merged))]);
        let sources: Vec<Value> = merged.sources.iter().map(source_json).collect();
        let mut value = Map::new();
        if let Some(c) = &merged.content {
            value.insert("content".into(), json!(c));
        }
        value.insert("sources".into(), json!(sources));
        value.insert("truncated".into(), json!(merged.truncated));
        o.value = Some(Value::Object(value));
        let mut meta = Map::new();
        meta.insert("sources".into(), json!(sources));
        meta.insert("truncated".into(), json!(merged.truncated));
        if let Some(c) = &merged.content {
            meta.insert("answer".into(), json!(c));
        }
        o.meta = Some(Value::Object(meta));
        o
    }
}
