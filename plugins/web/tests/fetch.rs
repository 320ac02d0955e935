//! `web_fetch` against local HTTP servers the test starts, and `web_search`
//! against mock providers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{CancelToken, CollectingSink, Tool, ToolCallRequest, ToolContext, Workspace};
use dsh_web::{
    AddressPolicy, ExaSearch, FetchConfig, SearchCx, SearchProvider, SearchResult, Source,
    WebError, WebFetchTool, WebSearchTool,
};
use serde_json::{Value, json};

/// A tiny HTTP/1.1 server: `route(path)` gives (status line, headers,
/// body, delay between body chunks).
type Reply = (
    &'static str,
    Vec<(String, String)>,
    Vec<u8>,
    Option<Duration>,
);

fn serve(route: impl Fn(&str) -> Reply + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let route = Arc::new(route);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let route = route.clone();
            thread::spawn(move || handle(stream, &*route));
        }
    });
    port
}

fn handle(mut stream: TcpStream, route: &(dyn Fn(&str) -> Reply + Send + Sync)) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    let (status, headers, payload, delay) = route(&path);
    let mut head = format!(
        "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n",
        payload.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    match delay {
        None => {
            let _ = stream.write_all(&payload);
        }
        Some(d) => {
            for chunk in payload.chunks(8) {
                if stream.write_all(chunk).is_err() {
                    return;
                }
                let _ = stream.flush();
                thread::sleep(d);
            }
        }
    }
}

fn h(k: &str, v: &str) -> Vec<(String, String)> {
    vec![(k.to_string(), v.to_string())]
}

fn site(path: &str) -> Reply {
    match path {
        "/page" => (
            "200 OK",
            h("content-type", "text/html; charset=utf-8"),
            b"<html><head><title>T</title><style>x{}</style></head><body><h1>Hello</h1><p>A <a href=\"https://e.org/\">link</a>.</p><script>alert(1)</script><ul><li>one</li></ul></body></html>".to_vec(),
            None,
        ),
        "/data.json" => ("200 OK", h("content-type", "application/json"), br#"{"a":1}"#.to_vec(), None),
        "/latin1" => ("200 OK", h("content-type", "text/plain; charset=iso-8859-1"), vec![b'c', b'a', b'f', 0xE9], None),
        "/missing" => ("404 Not Found", h("content-type", "text/plain"), b"no such page".to_vec(), None),
        "/binary" => ("200 OK", h("content-type", "image/png"), vec![0x89, b'P', b'N', b'G'], None),
        "/big" => ("200 OK", h("content-type", "text/plain"), vec![b'a'; 10_000_000], None),
        "/slow" => ("200 OK", h("content-type", "text/plain"), vec![b's'; 400], Some(Duration::from_millis(50))),
        p if p.starts_with("/hop/") => {
            let n: u32 = p[5..].parse().unwrap_or(0);
            if n == 0 {
                ("200 OK", h("content-type", "text/plain"), b"arrived".to_vec(), None)
            } else {
                ("302 Found", h("location", &format!("/hop/{}", n - 1)), Vec::new(), None)
            }
        }
        "/to-loopback-ip" => {
            // Filled in by the test through the query-less path below.
            ("302 Found", h("location", "http://127.0.0.1/secret"), Vec::new(), None)
        }
        _ => ("404 Not Found", h("content-type", "text/plain"), Vec::new(), None),
    }
}

/// A fetch config that lets `localhost` (and only it) reach 127.0.0.1.
fn local_config() -> FetchConfig {
    let mut policy = AddressPolicy::default();
    policy.allowed_hosts.insert("localhost".into());
    policy
        .overrides
        .insert("localhost".into(), vec!["127.0.0.1".parse().unwrap()]);
    policy
        .overrides
        .insert("public.example".into(), vec!["127.0.0.1".parse().unwrap()]);
    let mut c = FetchConfig::default();
    c.policy = Arc::new(policy);
    c
}

fn ctx() -> ToolContext {
    let dir = std::env::temp_dir();
    ToolContext::new(Workspace::new(dir).unwrap())
}

fn run(tool: &dyn Tool, args: Value) -> ToolOutcome {
    tool.execute(
        &ToolCallRequest {
            name: tool.definition().schema.name.clone(),
            call_id: "c1".into(),
            arguments: args,
        },
        &ctx(),
    )
}

fn text(o: &ToolOutcome) -> String {
    o.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn code(o: &ToolOutcome) -> String {
    let e = o.error.as_ref().expect("an error result");
    e.info.as_ref().map(|i| i.code.clone()).unwrap_or_default()
}

#[test]
fn html_json_charset_and_status_are_rendered_as_the_reference() {
    let port = serve(site);
    let tool = WebFetchTool {
        config: local_config(),
    };
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/page")}),
    );
    let t = text(&o);
    assert!(
        t.starts_with(&format!(
            "Fetched http://localhost:{port}/page (HTTP 200)\n\n"
        )),
        "{t}"
    );
    assert!(t.contains("# Hello"), "{t}");
    assert!(t.contains("[link](https://e.org/)"), "{t}");
    // Turndown's (and htmd's) list item: marker and three spaces.
    assert!(t.contains("-   one"), "{t}");
    assert!(!t.contains("alert(1)") && !t.contains("x{}"), "{t}");
    assert_eq!(
        o.meta,
        Some(
            json!({"url": format!("http://localhost:{port}/page"), "statusCode": 200, "truncated": false})
        )
    );
    assert_eq!(o.value.as_ref().unwrap()["body"]["kind"], "html");

    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/data.json")}),
    );
    assert_eq!(
        text(&o),
        format!("Fetched http://localhost:{port}/data.json (HTTP 200)\n\n{{\"a\":1}}")
    );
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/latin1")}),
    );
    assert!(text(&o).ends_with("café"), "{}", text(&o));
    // A non-2xx status is a result, not an error.
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/missing")}),
    );
    assert!(o.error.is_none());
    assert!(text(&o).starts_with(&format!(
        "Fetched http://localhost:{port}/missing (HTTP 404)"
    )));
}

#[test]
fn refusals_have_typed_errors() {
    let port = serve(site);
    let tool = WebFetchTool {
        config: local_config(),
    };
    let cases = [
        ("ftp://localhost/x".to_string(), "WEB_INVALID_URL"),
        ("file:///etc/passwd".to_string(), "WEB_INVALID_URL"),
        (
            format!("http://user:pw@localhost:{port}/page"),
            "WEB_BLOCKED_URL",
        ),
        (
            format!("http://localhost:{port}/binary"),
            "WEB_UNSUPPORTED_CONTENT_TYPE",
        ),
        (
            format!("http://localhost:{port}/big"),
            "WEB_FETCH_TOO_LARGE",
        ),
        // Loopback, private and metadata addresses, by IP or by a
        // public-looking name that resolves inside.
        (format!("http://127.0.0.1:{port}/page"), "WEB_BLOCKED_URL"),
        (
            format!("http://public.example:{port}/page"),
            "WEB_BLOCKED_URL",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "WEB_BLOCKED_URL",
        ),
        ("http://[::1]/".to_string(), "WEB_BLOCKED_URL"),
        ("http://10.0.0.1/".to_string(), "WEB_BLOCKED_URL"),
    ];
    for (url, expected) in cases {
        let o = run(&tool, json!({ "url": url }));
        assert_eq!(code(&o), expected, "{url}: {}", text(&o));
    }
    let o = run(
        &tool,
        json!({"url": format!("http://public.example:{port}/page")}),
    );
    // Printed as evidence: a fetch refused for a private address.
    eprintln!("refused: {}", text(&o));
    assert!(
        text(&o).contains("non-public address 127.0.0.1"),
        "{}",
        text(&o)
    );
}

#[test]
fn redirects_same_origin_at_most_five() {
    let port = serve(site);
    let tool = WebFetchTool {
        config: local_config(),
    };
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/hop/5")}),
    );
    assert!(o.error.is_none(), "{}", text(&o));
    assert!(
        text(&o).starts_with(&format!("Fetched http://localhost:{port}/hop/0 (HTTP 200)")),
        "{}",
        text(&o)
    );
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/hop/6")}),
    );
    assert_eq!(code(&o), "WEB_REDIRECT_BLOCKED");
    assert!(text(&o).contains("exceeded the maximum of 5 redirects"));
    // A redirect to 127.0.0.1 from an allowed name is cross-origin: not
    // followed (and 127.0.0.1 itself is not allowed).
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/to-loopback-ip")}),
    );
    assert_eq!(code(&o), "WEB_REDIRECT_BLOCKED", "{}", text(&o));
    assert!(
        text(&o).contains("cross-origin redirect to http://127.0.0.1:80"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_redirect_on_the_same_name_is_checked_again_after_resolution() {
    // `a.test` is allowed and resolves to the server; `b.test` redirects to
    // itself after the test flips its address to loopback: every hop is
    // resolved and checked, so the second hop is refused.
    let port = serve(|p| match p {
        "/start" => ("302 Found", h("location", "/next"), Vec::new(), None),
        _ => (
            "200 OK",
            h("content-type", "text/plain"),
            b"ok".to_vec(),
            None,
        ),
    });
    let mut policy = AddressPolicy::default();
    policy
        .overrides
        .insert("b.test".into(), vec!["127.0.0.1".parse().unwrap()]);
    let mut config = FetchConfig::default();
    config.policy = Arc::new(policy);
    let tool = WebFetchTool { config };
    let o = run(&tool, json!({"url": format!("http://b.test:{port}/start")}));
    assert_eq!(code(&o), "WEB_BLOCKED_URL", "{}", text(&o));
}

#[test]
fn a_slow_body_times_out() {
    let port = serve(site);
    let mut config = local_config();
    config.timeout = Duration::from_millis(500);
    let tool = WebFetchTool { config };
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/slow")}),
    );
    assert_eq!(code(&o), "WEB_FETCH_TIMEOUT", "{}", text(&o));
}

#[test]
fn long_bodies_are_cut_with_the_reference_footer() {
    let port = serve(|_| {
        (
            "200 OK",
            h("content-type", "text/plain"),
            vec![b'z'; 300_000],
            None,
        )
    });
    let tool = WebFetchTool {
        config: local_config(),
    };
    let o = run(
        &tool,
        json!({"url": format!("http://localhost:{port}/long")}),
    );
    let t = text(&o);
    assert!(t.ends_with(
        "\n\n(Content truncated. Fetch a more specific URL or section for the full text.)"
    ));
    assert!(t.chars().count() <= 200_000);
    assert_eq!(o.value.as_ref().unwrap()["truncated"], true);
}

struct Mock(Vec<SearchResult>, std::sync::Mutex<Vec<String>>);

impl SearchProvider for Mock {
    fn id(&self) -> &str {
        "mock"
    }
    fn search(
        &self,
        query: &str,
        _max: usize,
        _cx: &SearchCx<'_>,
    ) -> Result<SearchResult, WebError> {
        let mut seen = self.1.lock().unwrap();
        seen.push(query.to_string());
        self.0
            .get(seen.len() - 1)
            .cloned()
            .ok_or_else(|| WebError::new("WEB_PROVIDER_ERROR", "no more"))
    }
}

fn src(url: &str, title: Option<&str>, snippet: Option<&str>) -> Source {
    Source {
        url: url.into(),
        title: title.map(Into::into),
        snippet: snippet.map(Into::into),
        published_at: None,
    }
}

#[test]
fn search_merges_queries_and_formats_as_the_reference() {
    let mock = Arc::new(Mock(
        vec![
            SearchResult {
                content: Some("answer one".into()),
                sources: vec![
                    src("https://a.org/1", Some("A"), Some("snip")),
                    src("https://b.org/", None, None),
                ],
                truncated: false,
            },
            SearchResult {
                content: None,
                sources: vec![
                    src("https://a.org/1", Some("A"), None),
                    src("https://c.org/x", Some("C"), None),
                ],
                truncated: false,
            },
        ],
        Default::default(),
    ));
    let tool = WebSearchTool::new(Some(mock.clone()));
    let o = run(&tool, json!({"queries": ["q one", "q two", "q one"]}));
    assert_eq!(*mock.1.lock().unwrap(), vec!["q one", "q two"]);
    assert_eq!(
        text(&o),
        "### q one\n\nanswer one\n\nSources:\n- [A](https://a.org/1) \u{2014} snip\n- [b.org](https://b.org/)\n- [C](https://c.org/x)\n\nCite the relevant URLs above as markdown links in your answer."
    );
    assert_eq!(
        o.meta.as_ref().unwrap()["sources"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // Argument checks.
    let o = run(&tool, json!({"queries": []}));
    assert_eq!(text(&o), "Error: queries must contain at least one query");
    let o = run(&tool, json!({"queries": ["a", "b", "c", "d", "e"]}));
    assert_eq!(text(&o), "Error: queries must contain at most 4 queries");
    // No provider: a clear error.
    let o = run(&WebSearchTool::new(None), json!({"queries": ["x"]}));
    assert_eq!(code(&o), "WEB_PROVIDER_UNAVAILABLE");
}

#[test]
fn exa_provider_against_a_mock_server() {
    let seen = Arc::new(std::sync::Mutex::new(0));
    let s2 = seen.clone();
    let port = serve(move |p| {
        *s2.lock().unwrap() += 1;
        assert_eq!(p, "/search");
        (
            "200 OK",
            h("content-type", "application/json"),
            json!({"results": [
                {"url": "https://x.org/", "title": "X", "highlights": ["  ", "hi there"], "publishedDate": "2026-01-02"},
                {"url": "https://nohl.org/", "title": "N", "highlights": []}
            ]})
            .to_string()
            .into_bytes(),
            None,
        )
    });
    let mut exa = ExaSearch::new(Arc::new(|| Some("exa-key".to_string())));
    exa.base_url = format!("http://127.0.0.1:{port}");
    let tool = WebSearchTool::new(Some(Arc::new(exa)));
    let sink = Arc::new(CollectingSink::new());
    let c = ctx()
        .with_events(sink.clone())
        .with_cancel(CancelToken::new());
    let o = tool.execute(
        &ToolCallRequest {
            name: "web_search".into(),
            call_id: "c".into(),
            arguments: json!({"queries": ["x"]}),
        },
        &c,
    );
    assert_eq!(
        text(&o),
        "Sources:\n- [X](https://x.org/) \u{2014} hi there (2026-01-02)\n\nCite the relevant URLs above as markdown links in your answer."
    );
    assert_eq!(*seen.lock().unwrap(), 1);
}

#[test]
fn deepseek_search_maps_server_tool_results_and_logs_the_request() {
    let port = serve(|p| {
        assert_eq!(p, "/anthropic/v1/messages");
        (
            "200 OK",
            h("content-type", "application/json"),
            json!({"content": [
                {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"query": "q"}},
                {"type": "web_search_tool_result", "tool_use_id": "s", "content": [
                    {"type": "web_search_result", "url": "https://d.org/", "title": "D", "page_age": "May 1"}
                ]},
                {"type": "text", "text": "x", "citations": [{"url": "https://d.org/", "cited_text": "quoted"}]}
            ]})
            .to_string()
            .into_bytes(),
            None,
        )
    });
    let mut ds = dsh_web::DeepSeekSearch::new(Arc::new(|| Some("sk-secret-key".to_string())));
    ds.base_url = format!("http://127.0.0.1:{port}/anthropic/v1");
    let tool = WebSearchTool::new(Some(Arc::new(ds)));
    let sink = Arc::new(CollectingSink::new());
    let c = ctx().with_events(sink.clone());
    let o = tool.execute(
        &ToolCallRequest {
            name: "web_search".into(),
            call_id: "c".into(),
            arguments: json!({"queries": ["q"]}),
        },
        &c,
    );
    assert_eq!(
        text(&o),
        "Sources:\n- [D](https://d.org/) \u{2014} quoted (May 1)\n\nCite the relevant URLs above as markdown links in your answer."
    );
    let events = sink.take();
    assert_eq!(events.len(), 1);
    let logged = format!(
        "{:?} {}",
        events[0],
        serde_json::to_string(&events[0]).unwrap()
    );
    assert!(
        logged.contains("web/deepseek-search-llm-request"),
        "{logged}"
    );
    assert!(
        logged.contains("Perform a web search for the query: q"),
        "{logged}"
    );
    assert!(!logged.contains("sk-secret-key"));
}

/// The reference's `web-search-round` recording (a UI snapshot: legacy
/// header, chunks only, so `core/tests/loop_replay.rs` pins it as not
/// loadable): its `web_search` call is valid under our schema and runs,
/// merging both queries.
#[test]
fn the_recorded_web_search_round_call_runs_under_our_schema() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/conformance/sessions/apps-web__web-search-round__session.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let block = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find_map(|e| {
            let b = &e["data"]["chunk"]["block"];
            (b["type"] == "tool-call").then(|| b.clone())
        })
        .expect("the recorded tool call");
    assert_eq!(block["name"], "web_search");
    let args: Value = serde_json::from_str(block["arguments"].as_str().unwrap()).unwrap();
    let mock = Arc::new(Mock(
        vec![
            SearchResult {
                content: None,
                sources: vec![src("https://a.org/", Some("A"), None)],
                truncated: false,
            },
            SearchResult {
                content: None,
                sources: vec![src("https://b.org/", Some("B"), None)],
                truncated: false,
            },
        ],
        Default::default(),
    ));
    let tool = WebSearchTool::new(Some(mock.clone()));
    let def = tool.definition();
    assert_eq!(def.schema.name, "web_search");
    let violations = dsh_core::agent::schema::validate_value(&def.schema.parameters, &args, "");
    assert!(violations.is_empty(), "{violations:?}");
    let o = run(&tool, args);
    assert_eq!(
        *mock.1.lock().unwrap(),
        vec![
            "DeepSeek Harness snapshot search",
            "DeepSeek Harness multi-query search"
        ]
    );
    assert!(text_of_sources(&o).contains("- [A](https://a.org/)\n- [B](https://b.org/)"));
}

fn text_of_sources(o: &ToolOutcome) -> String {
    text(o)
}
