//! Web tools through `dsh run`: a fetch refused for a private
//! address, a fetch from an allowed local host whose large result is
//! spilled, and the approval that a fetch from a new host needs.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;

use dsh_deepseek::mock::MockServer;
use serde_json::{Value, json};
use support::{dsh, mock_responses as mock};

fn fetch_call(url: &str) -> Value {
    json!({"turn": {"toolCalls": [{"id": "f1", "name": "web_fetch", "arguments": [json!({"url": url}).to_string()]}]}})
}

/// The text of the `tool` message of the last request.
fn last_tool_text(server: &MockServer) -> String {
    let body: Value = serde_json::from_slice(&server.requests().last().unwrap().body).unwrap();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            m["content"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| m["content"].to_string())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Serves one big text page on 127.0.0.1 to every connection.
fn big_page(bytes: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body: String = (0..)
                .map(|i| format!("line {i:07}\n"))
                .take(bytes / 13)
                .collect();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn a_fetch_of_a_private_address_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let port = big_page(1000);
    let server = mock(
        json!([fetch_call(&format!("http://127.0.0.1:{port}/")), {"turn": {"text": ["done"]}}]),
    );
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args(["run", "--yes", "--base-url", &server.url(), "fetch it"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = last_tool_text(&server);
    // Printed as evidence of the refusal.
    eprintln!("tool result: {t}");
    assert!(t.contains("non-public address 127.0.0.1"), "{t}");
}

#[test]
fn without_approval_a_new_host_is_not_fetched() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(json!([fetch_call("https://example.com/"), {"turn": {"text": ["done"]}}]));
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args(["run", "--base-url", &server.url(), "fetch it"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = last_tool_text(&server);
    assert!(!t.contains("Fetched"), "{t}");
    assert!(
        t.to_lowercase().contains("den") || t.contains("approv") || t.contains("reject"),
        "{t}"
    );
}

#[test]
fn a_large_web_result_from_an_allowed_host_is_spilled_and_paged() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A 4.9 MB page: the fetch keeps its first 100 000 characters (the
    // reference's cap) and the spill keeps the result out of the context.
    let port = big_page(4_900_000);
    let server = mock(
        json!([fetch_call(&format!("http://127.0.0.1:{port}/big")), {"turn": {"text": ["done"]}}]),
    );
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--web-allow-host",
            "127.0.0.1",
            "--base-url",
            &server.url(),
            "fetch it",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = last_tool_text(&server);
    assert!(t.len() <= 64 * 1024 + 64, "{}", t.len());
    assert!(
        t.starts_with(&format!("Fetched http://127.0.0.1:{port}/big (HTTP 200)")),
        "{}",
        &t[..200]
    );
    let notice = t
        .rsplit_once("Full formatted result stored at: ")
        .unwrap()
        .1;
    let path = notice.split_once(". Use read").unwrap().0;
    let whole = std::fs::read_to_string(path).unwrap();
    assert!(whole.contains("line 0007691\n"));
    assert!(
        whole.ends_with(
            "(Content truncated. Fetch a more specific URL or section for the full text.)"
        )
    );
}
