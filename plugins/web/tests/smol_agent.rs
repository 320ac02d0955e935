//! The web tools in the smol runtime: the model calls
//! `web_fetch` on a local page from an allowed host, the body runs on the
//! blocking pool, the spill plugin bounds the result, and a fetch of a
//! private address is refused.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use dsh_approval::{ApprovalMode, ApprovalPolicy};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, SessionId, StreamChunk};
use dsh_host::{ScriptedProvider, ScriptedReply};
use dsh_smol::{Agent, AgentConfig};
use dsh_spill::{SpillConfig, SpillPlugin};

use dsh_web::{AddressPolicy, FetchConfig, WebFetchApproval};

fn fetch_call(id: &str, url: &str) -> ScriptedReply {
    let args = serde_json::json!({ "url": url }).to_string();
    ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::tool_call_delta(0, id, Some("web_fetch"), &args),
        StreamChunk::block_end(0, ContentBlock::tool_call(id, "web_fetch", args.as_str())),
        StreamChunk::finish(FinishReason::ToolCalls),
    ])
}

fn answer(text: &str) -> ScriptedReply {
    ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: text.into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(text)),
        StreamChunk::finish(FinishReason::Stop),
    ])
}

#[test]
fn web_fetch_runs_in_smol_with_spill_and_the_address_guard() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "word ".repeat(4000);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let provider = Arc::new(ScriptedProvider::new([
        fetch_call("f1", &format!("http://localhost:{port}/page")),
        fetch_call("f2", &format!("http://127.0.0.1:{port}/page")),
        answer("done"),
    ]));
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    let store: Arc<dyn dsh_store::SessionStore> = Arc::new(
        dsh_jsonl::open(
            dsh_jsonl::JsonlConfig::new(dir.path()).with_compression(dsh_jsonl::Compression::None),
        )
        .unwrap(),
    );
    let mut config = AgentConfig::new(
        provider.clone(),
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        std::env::temp_dir(),
    );
    config.tools = dsh_smol::ToolSet::new();
    config.approval = ApprovalPolicy::new(ApprovalMode::Auto);
    let mut policy = AddressPolicy::default();
    policy.allowed_hosts.insert("localhost".into());
    policy
        .overrides
        .insert("localhost".into(), vec!["127.0.0.1".parse().unwrap()]);
    let mut fetch = FetchConfig::default();
    fetch.policy = Arc::new(policy);
    for tool in dsh_web::tools(fetch, None) {
        config.tools.insert(tool);
    }
    config.plugins.push(Box::new(WebFetchApproval::new([
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ])));
    config.plugins.push(Box::new(SpillPlugin::new(
        SpillConfig::new(spill.path()).with_max_inline_bytes(4096),
    )));
    let id = SessionId::from("smol-web");
    smol::block_on(async {
        let agent = Agent::create(config, store.clone(), id.clone())
            .await
            .unwrap();
        agent.send("fetch it").await.unwrap();
        agent
            .wait_idle(Some(Duration::from_secs(20)))
            .await
            .unwrap();
        agent.dispose().await;
    });
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    let second = format!("{:?}", requests[1].messages);
    assert!(
        second.contains(&format!("Fetched http://localhost:{port}/page (HTTP 200)")),
        "{second}"
    );
    assert!(
        second.contains("Full formatted result stored at: "),
        "{second}"
    );
    let third = format!("{:?}", requests[2].messages);
    assert!(third.contains("non-public address 127.0.0.1"), "{third}");
    let spilled = std::fs::read_dir(spill.path().join("session-smol-web"))
        .unwrap()
        .count();
    assert_eq!(spilled, 1);
}
