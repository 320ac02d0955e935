//! Images: `dsh run --image FILE` and `read_image` send the image
//! to a model that takes images, in the provider's format; a model that
//! does not gets a clear error before any request.

mod support;

use std::process::Stdio;

use serde_json::{Value, json};
use support::{dsh, mock_responses as mock};

/// A PNG of `w`x`h` as far as headers go (all dsh reads).
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    v.extend_from_slice(b"\0\0\0\0IEND\xaeB`\x82");
    v
}

fn image_urls(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().unwrap() {
        if let Some(parts) = m["content"].as_array() {
            for p in parts {
                if p["type"] == "image_url" {
                    out.push(p["image_url"]["url"].as_str().unwrap().to_string());
                }
            }
        }
    }
    out
}

#[test]
fn run_image_sends_the_image_in_the_provider_format() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let pic = ws.path().join("pic.png");
    let bytes = png(3, 2);
    std::fs::write(&pic, &bytes).unwrap();
    let server = mock(json!([{"turn": {"text": ["a tiny picture"]}}]));
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--images",
            "--image",
            pic.to_str().unwrap(),
            "--base-url",
            &server.url(),
            "what is this?",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let body: Value = serde_json::from_slice(&server.requests()[0].body).unwrap();
    let expected = format!("data:image/png;base64,{}", dsh_deepseek::base64(&bytes));
    assert_eq!(image_urls(&body), vec![expected]);
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    assert_eq!(
        user["content"][0],
        json!({"type": "text", "text": "what is this?"})
    );
    // Printed as evidence: the request body, truncated.
    let text = server.requests()[0].body_text();
    let at = text.find("image_url").unwrap();
    eprintln!(
        "image request body (truncated): …{}…",
        &text[at.saturating_sub(60)..(at + 120).min(text.len())]
    );
}

#[test]
fn read_image_puts_the_image_in_the_next_request() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let bytes = png(40, 30);
    std::fs::write(ws.path().join("chart.png"), &bytes).unwrap();
    let server = mock(json!([
        {"turn": {"toolCalls": [{"id": "c1", "name": "read_image", "arguments": ["{\"file_path\":\"chart.png\"}"]}]}},
        {"turn": {"text": ["seen"]}}
    ]));
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--images",
            "--yes",
            "--base-url",
            &server.url(),
            "look",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let reqs = server.requests();
    let first: Value = serde_json::from_slice(&reqs[0].body).unwrap();
    assert!(first["tools"].to_string().contains("\"read_image\""));
    let second: Value = serde_json::from_slice(&reqs[1].body).unwrap();
    let expected = format!("data:image/png;base64,{}", dsh_deepseek::base64(&bytes));
    assert_eq!(image_urls(&second), vec![expected]);
    let s = second.to_string();
    assert!(s.contains("image/png image, 40x30 px, "), "{s}");
}

#[test]
fn a_model_without_images_gets_a_clear_error_and_no_tool() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let pic = ws.path().join("pic.png");
    std::fs::write(&pic, png(3, 2)).unwrap();
    let server = mock(json!([{"turn": {"text": ["x"]}}]));
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--image",
            pic.to_str().unwrap(),
            "--base-url",
            &server.url(),
            "what?",
        ])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the model does not take images"), "{err}");
    assert!(server.requests().is_empty());
    // Not an image: refused by its bytes.
    std::fs::write(ws.path().join("fake.png"), b"not a png").unwrap();
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--images",
            "--image",
            "fake.png",
            "--base-url",
            &server.url(),
            "what?",
        ])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a PNG, JPEG, GIF or WebP"));
    // Without --images, no read_image tool is offered.
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args(["run", "--base-url", &server.url(), "hi"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let body = server.requests()[0].body_text();
    assert!(!body.contains("read_image"));
}

#[test]
fn chat_image_command_attaches_to_the_next_prompt() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let bytes = png(7, 9);
    std::fs::write(ws.path().join("shot.png"), &bytes).unwrap();
    let server = mock(json!([{"turn": {"text": ["ok"]}}, {"turn": {"text": ["ok2"]}}]));
    let mut child = dsh(data.path())
        .current_dir(ws.path())
        .args(["chat", "--images", "--base-url", &server.url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin
            .write_all(b"/image shot.png\nwhat is this?\n")
            .unwrap();
    }
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("image attached (7x9 image/png)"), "{out}");
    let body: Value = serde_json::from_slice(&server.requests()[0].body).unwrap();
    let expected = format!("data:image/png;base64,{}", dsh_deepseek::base64(&bytes));
    assert_eq!(image_urls(&body), vec![expected]);
}
