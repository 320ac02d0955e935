//! The Messages request body: system, merged roles, tool_use and
//! tool_result, signed thinking replayed, images, max_tokens, stop
//! sequences, thinking budget and the cache_control markers.

use std::sync::Arc;

use dsh_anthropic::{RequestOptions, build_request_body, is_anthropic_url, thinking_budget};
use dsh_core::{
    ContentBlock, GenerateOptions, ImageAttachment, LlmError, Message, MessageSource,
    ReasoningEffortId, ToolSchema,
};
use dsh_deepseek::AttachmentSource;
use serde_json::{Value, json};

fn conversation() -> GenerateOptions {
    let signed = MessageSource::Model {
        provider: "anthropic".into(),
        model: "claude".into(),
        replay_state: Some(
            json!({"response": {"id": "msg_1"}, "blocks": [{"signature": "sig-1"}, {}, {}]}),
        ),
    };
    let messages = vec![
        Message::user("u1", vec![ContentBlock::text("What is the weather?")]),
        Message::model(
            "a1",
            vec![
                ContentBlock::Reasoning {
                    text: "call the tool".into(),
                },
                ContentBlock::text("Checking."),
                ContentBlock::tool_call("toolu_1", "get_weather", r#"{"city":"Paris"}"#),
            ],
            signed,
        ),
        Message::tool_result("t1", "toolu_1", vec![ContentBlock::text("18 C")], false),
        Message::user("u2", vec![ContentBlock::text("Thanks. And tomorrow?")]),
        Message::model(
            "a2",
            vec![
                // No replay state: this reasoning cannot be sent back.
                ContentBlock::Reasoning {
                    text: "unsigned".into(),
                },
                ContentBlock::tool_call("toolu_2", "get_weather", "not json"),
            ],
            MessageSource::model("openai-compatible:x", "m"),
        ),
        Message::tool_result("t2", "toolu_2", vec![ContentBlock::text("boom")], true),
    ];
    let mut o = GenerateOptions::new(
        "anthropic",
        "claude-sonnet-4-5",
        messages.into_iter().map(Arc::new).collect(),
    );
    o.system = Some("You are dsh.".into());
    o.tools = Some(vec![
        ToolSchema::new(
            "get_weather",
            "Weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
        ToolSchema::new("read", "Read a file", json!({"type": "object"})),
    ]);
    o.stop = Some(vec!["</done>".into()]);
    o.max_tokens = Some(20_000);
    o.reasoning_effort = Some(ReasoningEffortId::new("high"));
    o.temperature = Some(0.3);
    o
}

fn body(o: &GenerateOptions) -> Value {
    serde_json::from_str(&build_request_body(o, &RequestOptions::default(), None).unwrap()).unwrap()
}

#[test]
fn the_whole_request() {
    let b = body(&conversation());
    let cache = json!({"type": "ephemeral"});
    assert_eq!(
        b,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 20000,
            "stream": true,
            "system": [{"type": "text", "text": "You are dsh.", "cache_control": cache}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is the weather?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "call the tool", "signature": "sig-1"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
                    {"type": "text", "text": "Thanks. And tomorrow?"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "boom"}],
                     "is_error": true, "cache_control": cache}
                ]}
            ],
            "tools": [
                {"name": "get_weather", "description": "Weather for a city",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"name": "read", "description": "Read a file", "input_schema": {"type": "object"},
                 "cache_control": cache}
            ],
            "stop_sequences": ["</done>"],
            "thinking": {"type": "enabled", "budget_tokens": 16384}
        })
    );
}

#[test]
fn without_thinking_the_temperature_goes_and_caching_can_be_off() {
    let mut o = conversation();
    o.reasoning_effort = Some(ReasoningEffortId::new("off"));
    o.max_tokens = None;
    let mut r = RequestOptions::default();
    r.cache = false;
    let b: Value = serde_json::from_str(&build_request_body(&o, &r, None).unwrap()).unwrap();
    assert_eq!(b["temperature"], json!(0.3));
    assert_eq!(b["max_tokens"], json!(8192));
    assert!(b.get("thinking").is_none());
    assert!(!b.to_string().contains("cache_control"));
    assert_eq!(thinking_budget(Some("max"), 4_000), Some(3_999));
    assert_eq!(thinking_budget(Some("low"), 1_000), None);
    assert_eq!(thinking_budget(None, 100_000), None);
}

struct Store;
impl AttachmentSource for Store {
    fn read(&mut self, _: &ImageAttachment) -> Result<Vec<u8>, LlmError> {
        Ok(b"PNGDATA".to_vec())
    }
}

#[test]
fn images_are_base64_blocks_and_an_empty_request_is_refused() {
    let image: ImageAttachment = serde_json::from_value(json!({
        "attachmentId": "sha256:00", "mediaType": "image/png", "width": 1, "height": 1, "bytes": 7}))
    .unwrap();
    let m = Message::user(
        "u",
        vec![
            ContentBlock::text("see"),
            ContentBlock::Image { attachment: image },
        ],
    );
    let o = GenerateOptions::new("anthropic", "c", vec![Arc::new(m)]);
    let b: Value = serde_json::from_str(
        &build_request_body(&o, &RequestOptions::default(), Some(&mut Store)).unwrap(),
    )
    .unwrap();
    assert_eq!(
        b["messages"][0]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "UE5HREFUQQ=="},
               "cache_control": {"type": "ephemeral"}})
    );
    let empty = GenerateOptions::new("anthropic", "c", vec![]);
    let e = build_request_body(&empty, &RequestOptions::default(), None).unwrap_err();
    assert_eq!(e.failure().code, "INVALID_REQUEST");
}

#[test]
fn anthropic_urls() {
    assert!(is_anthropic_url("https://api.anthropic.com"));
    assert!(is_anthropic_url("https://API.anthropic.com/v1"));
    assert!(is_anthropic_url(
        "http://127.0.0.1:4000/anthropic/v1/messages"
    ));
    assert!(is_anthropic_url("http://127.0.0.1:4000/v1/messages/"));
    assert!(!is_anthropic_url("https://api.deepseek.com"));
    assert!(!is_anthropic_url(
        "https://evil.example/?u=api.anthropic.com"
    ));
    assert!(!is_anthropic_url("https://api.anthropic.com.evil.example"));
}
