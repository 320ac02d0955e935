//! `dsh sse translate`, `dsh deepseek request` and `dsh mock-server`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use dsh_deepseek::{CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig};

fn dsh(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn sse_translate_prints_chunks_and_a_failure_finish() {
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\n";
    let (code, out, _) = dsh(&["sse", "translate"], body);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        concat!(
            "{\"type\":\"block-start\",\"index\":0,\"blockType\":\"text\"}\n",
            "{\"type\":\"text-delta\",\"index\":0,\"text\":\"Hi\"}\n",
            "{\"type\":\"finish\",\"reason\":{\"kind\":\"error\",\"failure\":{\"message\":\"SSE stream ended without [DONE]\",\"code\":\"STREAM_CLOSED\"}}}\n"
        )
    );
    let (code, out, _) = dsh(&["sse", "translate", "-"], "data: [DONE]\n\n");
    assert_eq!(code, 0);
    assert!(out.contains("EMPTY_RESPONSE"));
    let (code, _, err) = dsh(&["sse", "translate", "/nonexistent/body.sse"], "");
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"));
}

#[test]
fn deepseek_request_prints_the_body() {
    let options = r#"{"provider":"deepseek-official","model":"deepseek-v4-pro","reasoningEffort":"off","system":"S",
        "messages":[{"id":"1","role":"assistant","content":[{"type":"reasoning","text":"r"}],"source":{"kind":"model","provider":"deepseek-official","model":"x"}}]}"#;
    let (code, out, _) = dsh(&["deepseek", "request", "--thinking", "enabled"], options);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "{\"model\":\"deepseek-v4-pro\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"r\"}],\"stream\":true,\"stream_options\":{\"include_usage\":true},\"thinking\":{\"type\":\"disabled\"}}\n"
    );
    let (code, _, err) = dsh(
        &["deepseek", "request", "--thinking", "disabled"],
        r#"{"provider":"p","model":"m","messages":[],"reasoningEffort":"high"}"#,
    );
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "UNSUPPORTED_REASONING_EFFORT: DeepSeek deployment does not support reasoning effort \"high\""
    );
    let (code, _, _) = dsh(&["deepseek", "request"], "{not json");
    assert_eq!(code, 2);
}

#[test]
fn mock_server_prints_its_url_and_serves_until_stdin_closes() {
    let dir = std::env::temp_dir().join(format!("dsh-cli-mock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("script.json");
    std::fs::write(&script, r#"{"responses":[{"turn":{"text":["Hello"]}}]}"#).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["mock-server", "--script"])
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let url = url.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let config = DeepSeekConfig {
        base_url: Some(url),
        ..DeepSeekConfig::default()
    };
    let opts = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some("sk-cli".to_string()))),
        proxy_from_env: false,
        ..ClientOptions::default()
    };
    let client = DeepSeekClient::with_options(config, opts).unwrap();
    let options = dsh_core::GenerateOptions::new("deepseek-official", "m", vec![]);
    let chunks: Vec<String> = client
        .stream_chunks(&options, &CancelToken::new())
        .map(|c| serde_json::to_string(&c).unwrap())
        .collect();
    assert_eq!(chunks.len(), 4);
    assert_eq!(
        chunks[1],
        r#"{"type":"text-delta","index":0,"text":"Hello"}"#
    );
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}
