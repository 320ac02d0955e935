//! Base URLs: host and authority, the provider route, the DeepSeek and
//! loopback checks, and redaction of secrets in URLs and error messages.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::config::PROVIDER_ROUTE;
use dsh_core::LlmError;

/// The host of an `http(s)://` URL, lowercased, without port, userinfo or
/// brackets.
pub(super) fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        hostport.split(':').next().unwrap_or("")
    };
    host.to_ascii_lowercase()
}

/// The `host[:port]` of `url`, lowercased, without userinfo; any character
/// outside ASCII letters, digits and `.-:[]` becomes `_`, so the result is
/// safe in a log and on a terminal.
pub fn url_authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hostport
        .chars()
        .take(255)
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            'a'..='z' | '0'..='9' | '.' | '-' | ':' | '[' | ']' => c,
            _ => '_',
        })
        .collect()
}

/// The provider route a session records for an OpenAI-compatible endpoint
/// at `base_url`: [`PROVIDER_ROUTE`] (`deepseek-official`, the reference's
/// name) for DeepSeek's own API, else `openai-compatible:<host[:port]>`.
pub fn provider_route(base_url: &str) -> String {
    if is_deepseek_url(base_url) {
        String::from(PROVIDER_ROUTE)
    } else {
        alloc::format!("openai-compatible:{}", url_authority(base_url))
    }
}

/// Whether `url` points at DeepSeek (`deepseek.com` or a subdomain).
pub fn is_deepseek_url(url: &str) -> bool {
    let host = url_host(url);
    host == "deepseek.com" || host.ends_with(".deepseek.com")
}

/// Whether `url` points at a loopback host.
pub fn is_loopback_url(url: &str) -> bool {
    let host = url_host(url);
    host == "localhost" || host.starts_with("127.") || host == "::1"
}

/// `url` fit to show or store: userinfo (`user:KEY@`) and query values
/// (`?api_key=…`) are replaced by `<redacted>`.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let mut out = String::new();
    if let Some(s) = scheme {
        out.push_str(s);
        out.push_str("://");
    }
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            out.push_str("<redacted>@");
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    match tail.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let parts: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) => format!("{k}=<redacted>"),
                    None => String::from(kv),
                })
                .collect();
            out.push_str(&parts.join("&"));
            if let Some(f) = fragment {
                out.push('#');
                out.push_str(f);
            }
        }
        None => out.push_str(tail),
    }
    out
}

/// `error` with every occurrence of `secret` (at least 8 characters) in its
/// message replaced by `<redacted>`: a server that echoes the key in an
/// error body must not get it onto the screen or into the log.
pub(super) fn redact_error(error: LlmError, secrets: &[&str]) -> LlmError {
    let failure = error.failure();
    let hits: Vec<&&str> = secrets
        .iter()
        .filter(|s| s.len() >= 8 && failure.message.contains(**s))
        .collect();
    if hits.is_empty() {
        return error;
    }
    let mut failure = failure.clone();
    for secret in hits {
        failure.message = failure.message.replace(*secret, "<redacted>");
    }
    let fallback = LlmError::coded(&failure.code, &failure.message);
    LlmError::new(failure).unwrap_or(fallback)
}

#[cfg(test)]
mod route_tests {
    use super::{provider_route, url_authority};

    /// The route names what the user pointed dsh at; the
    /// key in a URL's userinfo or query never reaches it; control
    /// characters do not either.
    #[test]
    fn the_route_names_the_endpoint() {
        assert_eq!(
            provider_route("https://api.deepseek.com"),
            "deepseek-official"
        );
        assert_eq!(
            provider_route("https://api.deepseek.com/beta/"),
            "deepseek-official"
        );
        assert_eq!(
            provider_route("http://127.0.0.1:8765/v1"),
            "openai-compatible:127.0.0.1:8765"
        );
        assert_eq!(
            provider_route("https://user:sk-secret@Example.COM/v1?api_key=sk-2"),
            "openai-compatible:example.com"
        );
        assert_eq!(
            provider_route("http://[::1]:9/v1"),
            "openai-compatible:[::1]:9"
        );
        assert_eq!(url_authority("http://a\u{1b}]b\u{7}c/"), "a_]b_c");
        assert_eq!(url_authority(""), "");
    }
}
