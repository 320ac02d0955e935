//! `web_fetch`: safe retrieval of one http(s) URL, rendered for the model.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_tools::{CancelToken, Tool, ToolCallRequest, ToolContext};
use serde_json::{Value, json};
use ureq::Agent;
use ureq::http::Uri;

use crate::net::{AddressPolicy, GuardResolver, bare_host};
use crate::{USER_AGENT, WebError, web_error};

/// Limits of `web_fetch` (the reference's defaults).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FetchConfig {
    /// Longest URL taken (2048).
    pub max_url_length: usize,
    /// Largest response body read (5 MB); more is `WEB_FETCH_TOO_LARGE`.
    pub max_response_bytes: u64,
    /// Most decoded characters kept (100 000); more is marked truncated.
    pub max_body_chars: usize,
    /// Whole-fetch deadline (30 s).
    pub timeout: Duration,
    /// Most same-origin redirects followed (5).
    pub max_redirects: u32,
    /// Cap on the whole rendered output, in characters (200 000).
    pub max_output_chars: usize,
    /// Which addresses may be reached.
    pub policy: Arc<AddressPolicy>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_url_length: 2048,
            max_response_bytes: 5_000_000,
            max_body_chars: 100_000,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
            max_output_chars: 200_000,
            policy: Arc::new(AddressPolicy::default()),
        }
    }
}

/// What a fetch gives: the seam's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchResult {
    /// The final URL after allowed redirects.
    pub url: String,
    /// Its HTTP status.
    pub status: u16,
    /// `html` or `text`.
    pub kind: &'static str,
    /// The decoded body (at most `max_body_chars` characters).
    pub content: String,
    /// Whether the body was cut.
    pub truncated: bool,
}

/// The body kind of a `Content-Type`, `None` for a type not taken.
pub fn classify(content_type: Option<&str>) -> Option<&'static str> {
    let mime = content_type?
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        Some("html")
    } else if mime.starts_with("text/")
        || mime == "application/json"
        || mime == "application/xml"
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
    {
        Some("text")
    } else {
        None
    }
}

/// The `charset` parameter of a `Content-Type`, lowercased.
pub fn charset(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("charset"))
            .then(|| v.trim().trim_matches('"').trim().to_ascii_lowercase())
    })
}

/// Checks a URL the model gave: length, scheme, no credentials.
pub fn validate_url(input: &str, max_len: usize) -> Result<Uri, WebError> {
    if input.len() > max_len {
        return Err(WebError::new(
            "WEB_INVALID_URL",
            format!("URL exceeds the maximum length of {max_len}"),
        ));
    }
    let uri: Uri = input
        .parse()
        .map_err(|_| WebError::new("WEB_INVALID_URL", format!("invalid URL: {input}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(s) => {
            return Err(WebError::new(
                "WEB_INVALID_URL",
                format!("unsupported URL scheme \"{s}:\" (only http and https are allowed)"),
            ));
        }
        None => {
            return Err(WebError::new(
                "WEB_INVALID_URL",
                format!("invalid URL: {input}"),
            ));
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(WebError::new(
            "WEB_INVALID_URL",
            format!("invalid URL: {input}"),
        ));
    };
    if authority.as_str().contains('@') {
        return Err(WebError::new(
            "WEB_BLOCKED_URL",
            "credentials in URLs are not allowed",
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(WebError::new(
            "WEB_INVALID_URL",
            format!("invalid URL: {input}"),
        ));
    }
    Ok(uri)
}

fn origin(uri: &Uri) -> (String, String, u16) {
    let scheme = uri.scheme_str().unwrap_or("").to_string();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    (scheme, bare_host(uri.host().unwrap_or("")), port)
}

/// `location` resolved against `base`.
fn join(base: &Uri, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = base.path();
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    format!("{scheme}://{authority}{dir}/{location}")
}

/// Fetches `url` under `config`: the checks, redirects and caps of the
/// module docs. Non-2xx statuses are results, not errors.
pub fn fetch(
    url: &str,
    config: &FetchConfig,
    cancel: &CancelToken,
) -> Result<FetchResult, WebError> {
    let started = Instant::now();
    let agent_config = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .proxy(None)
        .user_agent(ureq::config::AutoHeaderValue::Provided(Arc::new(
            USER_AGENT.to_string(),
        )))
        .timeout_global(Some(config.timeout))
        .build();
    let agent = Agent::with_parts(
        agent_config,
        ureq::unversioned::transport::DefaultConnector::new(),
        GuardResolver(config.policy.clone()),
    );
    let mut current = validate_url(url, config.max_url_length)?;
    let mut followed = 0u32;
    loop {
        if cancel.is_cancelled() {
            return Err(WebError::new("WEB_ABORTED", "web fetch aborted"));
        }
        // Resolve and check first, for a clear refusal; the resolver checks
        // again at connect time, so the connection goes to a checked address.
        let (_, host, port) = origin(&current);
        config.policy.resolve(&host, port).map_err(|e| match e {
            crate::net::AddressError::Blocked { .. } => {
                WebError::new("WEB_BLOCKED_URL", e.to_string())
            }
            crate::net::AddressError::NotFound(_) => {
                WebError::new("WEB_PROVIDER_ERROR", format!("web fetch failed: {e}"))
            }
        })?;
        let response = agent
            .get(current.to_string())
            .header(
                "accept",
                "text/html, text/*;q=0.9, application/json;q=0.8, */*;q=0.1",
            )
            .call()
            .map_err(|e| transport_error(e, started, config.timeout))?;
        let status = response.status().as_u16();
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            if followed >= config.max_redirects {
                return Err(WebError::new(
                    "WEB_REDIRECT_BLOCKED",
                    format!("exceeded the maximum of {} redirects", config.max_redirects),
                ));
            }
            let Some(location) = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
            else {
                return Err(WebError::new(
                    "WEB_PROVIDER_ERROR",
                    format!("redirect response (HTTP {status}) without a Location header"),
                ));
            };
            let target = validate_url(&join(&current, location), config.max_url_length)?;
            if origin(&target) != origin(&current) {
                let (s, h, p) = origin(&target);
                return Err(WebError::new(
                    "WEB_REDIRECT_BLOCKED",
                    format!(
                        "cross-origin redirect to {s}://{h}:{p} is not followed automatically; retry against that URL directly"
                    ),
                ));
            }
            current = target;
            followed += 1;
            continue;
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let Some(kind) = classify(content_type.as_deref()) else {
            return Err(WebError::new(
                "WEB_UNSUPPORTED_CONTENT_TYPE",
                format!(
                    "unsupported content type \"{}\"",
                    content_type.as_deref().unwrap_or("unknown")
                ),
            ));
        };
        let encoding = match content_type.as_deref().and_then(charset) {
            None => encoding_rs::UTF_8,
            Some(label) => encoding_rs::Encoding::for_label(label.as_bytes()).ok_or_else(|| {
                WebError::new(
                    "WEB_UNSUPPORTED_CONTENT_TYPE",
                    format!("unsupported charset \"{label}\""),
                )
            })?,
        };
        let mut reader = response.into_body().into_reader();
        let mut bytes = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            if cancel.is_cancelled() {
                return Err(WebError::new("WEB_ABORTED", "web fetch aborted"));
            }
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if started.elapsed() >= config.timeout {
                        return Err(WebError::new("WEB_FETCH_TIMEOUT", "web fetch timed out"));
                    }
                    return Err(WebError::new(
                        "WEB_PROVIDER_ERROR",
                        format!("web fetch failed: {e}"),
                    ));
                }
            };
            if bytes.len() as u64 + n as u64 > config.max_response_bytes {
                return Err(WebError::new(
                    "WEB_FETCH_TOO_LARGE",
                    format!(
                        "response exceeds the maximum of {} bytes",
                        config.max_response_bytes
                    ),
                ));
            }
            bytes.extend_from_slice(buf.get(..n).unwrap_or(&[]));
        }
        let (text, _, _) = encoding.decode(&bytes);
        let (content, truncated) = match text.char_indices().nth(config.max_body_chars) {
            Some((at, _)) => (text.get(..at).unwrap_or("").to_string(), true),
            None => (text.into_owned(), false),
        };
        return Ok(FetchResult {
            url: current.to_string(),
            status,
            kind,
            content,
            truncated,
        });
    }
}

fn transport_error(e: ureq::Error, started: Instant, timeout: Duration) -> WebError {
    match e {
        ureq::Error::Timeout(_) => WebError::new("WEB_FETCH_TIMEOUT", "web fetch timed out"),
        _ if started.elapsed() >= timeout => {
            WebError::new("WEB_FETCH_TIMEOUT", "web fetch timed out")
        }
        ureq::Error::HostNotFound => WebError::new(
            "WEB_BLOCKED_URL",
            "the host has no address this fetch may connect to",
        ),
        other => WebError::new("WEB_PROVIDER_ERROR", format!("web fetch failed: {other}")),
    }
}

/// The reference's truncation footer.
pub const TRUNCATION_FOOTER: &str =
    "\n\n(Content truncated. Fetch a more specific URL or section for the full text.)";

/// HTML to Markdown (ATX headings, fenced code, `-` bullets; scripts,
/// styles and `noscript` dropped); the raw HTML when conversion fails.
pub fn html_to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec!["script", "style", "noscript", "head"])
        .options(htmd::options::Options {
            heading_style: htmd::options::HeadingStyle::Atx,
            code_block_style: htmd::options::CodeBlockStyle::Fenced,
            bullet_list_marker: htmd::options::BulletListMarker::Dash,
            ..Default::default()
        })
        .build();
    converter.convert(html).unwrap_or_else(|_| html.to_string())
}

fn take_chars(s: &str, n: usize) -> (&str, bool) {
    match s.char_indices().nth(n) {
        Some((at, _)) => (s.get(..at).unwrap_or(s), true),
        None => (s, false),
    }
}

/// The model-facing text of `result` (header, Markdown body, footer when
/// cut), at most `max_chars` characters, and whether it reflects a cut.
pub fn render(result: &FetchResult, max_chars: usize) -> (String, bool) {
    let header = format!("Fetched {} (HTTP {})\n\n", result.url, result.status);
    let (source, source_cut) = take_chars(&result.content, max_chars);
    let body = if result.kind == "html" {
        html_to_markdown(source)
    } else {
        source.to_string()
    };
    let prefix = format!("{header}{body}");
    let prefix_chars = prefix.chars().count();
    let truncated = result.truncated || source_cut || prefix_chars > max_chars;
    let footer = if truncated { TRUNCATION_FOOTER } else { "" };
    let footer_chars = footer.chars().count();
    if prefix_chars + footer_chars <= max_chars {
        return (format!("{prefix}{footer}"), truncated);
    }
    if max_chars < footer_chars {
        let full = format!("{prefix}{footer}");
        return (take_chars(&full, max_chars).0.to_string(), truncated);
    }
    let kept = take_chars(&prefix, max_chars - footer_chars).0;
    (format!("{kept}{TRUNCATION_FOOTER}"), truncated)
}

/// The `web_fetch` tool.
#[derive(Clone, Debug, Default)]
pub struct WebFetchTool {
    /// Its limits and address policy.
    pub config: FetchConfig,
}

impl Tool for WebFetchTool {
    fn definition(&self) -> ToolDefinition {
        let mut d = ToolDefinition::typed(
            "web_fetch",
            "Fetch the content of a specific HTTP(S) URL and return it decoded to text.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "The HTTP(S) URL to fetch."}
                },
                "required": ["url"]
            }),
        );
        d.concurrency_safe = true;
        d
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let url = call
            .arguments
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or("");
        if url.trim().is_empty() {
            return ToolOutcome::error("url must be a non-empty string");
        }
        let mut config = self.config.clone();
        if let Some(t) = ctx.timeout {
            config.timeout = config.timeout.min(t);
        }
        match fetch(url, &config, &ctx.cancel) {
            Ok(r) => {
                let (text, truncated) = render(&r, config.max_output_chars);
                let mut o = ToolOutcome::success(vec![ContentBlock::text(text)]);
                o.value = Some(json!({
                    "url": r.url,
                    "statusCode": r.status,
                    "body": {"kind": r.kind, "content": r.content},
                    "truncated": r.truncated,
                }));
                o.meta =
                    Some(json!({"url": r.url, "statusCode": r.status, "truncated": truncated}));
                o
            }
            Err(e) => web_error(e),
        }
    }
}
