//! The request body (streaming.md 5.4–5.8): the 5.16 example byte for byte,
//! D-15 thinking rules, W-* and I-* message rules.

use dsh_core::{GenerateOptions, ImageAttachment, LlmError};
use dsh_deepseek::{
    AttachmentSource, DeepSeekConfig, Effort, IMAGE_OMITTED, Modality, Thinking,
    build_request_body, wire_thinking,
};
use serde_json::{Value, json};

fn options(v: Value) -> GenerateOptions {
    serde_json::from_value(v).expect("valid GenerateOptions")
}

fn msg(role: &str, content: Value) -> Value {
    let source = match role {
        "assistant" => json!({"kind":"model","provider":"deepseek-official","model":"m"}),
        _ => json!({"kind":"user"}),
    };
    json!({"id":"x","role":role,"content":content,"source":source})
}

fn body(o: &GenerateOptions, c: &DeepSeekConfig) -> Result<Value, LlmError> {
    build_request_body(o, c, None).map(|s| serde_json::from_str(&s).unwrap())
}

fn messages(history: Value) -> Value {
    let o = options(json!({"provider":"deepseek-official","model":"m","messages":history}));
    body(&o, &DeepSeekConfig::default()).unwrap()["messages"].clone()
}

#[test]
fn end_to_end_example_5_16() {
    let o = options(json!({
        "provider": "deepseek-official",
        "model": "deepseek-v4-pro",
        "reasoningEffort": "max",
        "maxTokens": 8192,
        "temperature": 0.3,
        "stop": ["</end>"],
        "system": "You are a careful assistant.",
        "tools": [{"name":"read_file","description":"Read a file",
                   "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],
        "messages": [
            msg("user", json!([{"type":"text","text":"Open "},{"type":"text","text":"README.md"}])),
            msg("assistant", json!([{"type":"reasoning","text":"Need the file."},{"type":"text","text":"Reading it."},
                {"type":"tool-call","id":"call_0","name":"read_file","arguments":"{\"path\":\"README.md\"}"}])),
            {"id":"t","role":"user","content":[{"type":"tool-result","toolCallId":"call_0","content":[{"type":"text","text":"# Title"}],"isError":false}],
             "source":{"kind":"tool","callId":"call_0"}},
            msg("assistant", json!([{"type":"reasoning","text":"Summarize."},{"type":"text","text":"It has a title."}])),
            msg("user", json!([{"type":"text","text":"Thanks"},{"type":"tool-result","toolCallId":"x","content":[]}])),
        ]
    }));
    let config = DeepSeekConfig {
        thinking: Some(Thinking::Enabled),
        reasoning_effort: Some(Effort::High),
        ..DeepSeekConfig::default()
    };
    let expected = r##"{"model":"deepseek-v4-pro","messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"Open README.md"},{"role":"assistant","content":"Reading it.","reasoning_content":"Need the file.","tool_calls":[{"id":"call_0","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"README.md\"}"}}]},{"role":"tool","tool_call_id":"call_0","content":"# Title"},{"role":"assistant","content":"It has a title.","reasoning_content":"Summarize."},{"role":"user","content":"Thanks"},{"role":"tool","tool_call_id":"x","content":"(no output)"}],"stream":true,"stream_options":{"include_usage":true},"thinking":{"type":"enabled"},"reasoning_effort":"max","tools":[{"type":"function","function":{"name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}],"temperature":0.3,"max_tokens":8192,"stop":["</end>"]}"##;
    assert_eq!(build_request_body(&o, &config, None).unwrap(), expected);
}

#[test]
fn d14_minimal_body_and_optional_fields() {
    let mut o = options(json!({"provider":"p","model":"m","messages":[]}));
    let c = DeepSeekConfig::default();
    assert_eq!(
        build_request_body(&o, &c, None).unwrap(),
        r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}"#
    );
    // temperature 0 and stop [] are sent; empty tools are not; 1.0 prints as 1.
    o.temperature = Some(0.0);
    o.stop = Some(vec![]);
    o.tools = Some(vec![]);
    assert_eq!(
        build_request_body(&o, &c, None).unwrap(),
        r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true},"temperature":0,"stop":[]}"#
    );
    o.temperature = Some(1.0);
    assert!(
        build_request_body(&o, &c, None)
            .unwrap()
            .contains(r#""temperature":1,"#)
    );
    // W-1: an empty system prompt still takes the first slot.
    o.system = Some(String::new());
    assert_eq!(
        body(&o, &c).unwrap()["messages"],
        json!([{"role":"system","content":""}])
    );
}

fn thinking(
    r: Option<&str>,
    t: Option<Thinking>,
    d: Option<Effort>,
    title: bool,
) -> Result<String, String> {
    let mut o = options(json!({"provider":"p","model":"m","messages":[]}));
    o.reasoning_effort = r.map(Into::into);
    if title {
        o.purpose = Some(dsh_core::Purpose::SessionTitle);
    }
    let c = DeepSeekConfig {
        thinking: t,
        reasoning_effort: d,
        ..DeepSeekConfig::default()
    };
    wire_thinking(&o, &c).map_err(|e| e.to_string())?;
    let v = body(&o, &c).map_err(|e| e.to_string())?;
    let mut out = json!({});
    for k in ["thinking", "reasoning_effort"] {
        if let Some(x) = v.get(k) {
            out[k] = x.clone();
        }
    }
    Ok(out.to_string())
}

#[test]
fn d15_thinking_and_effort() {
    // The four examples of D-15.
    assert_eq!(
        thinking(Some("max"), None, Some(Effort::Off), false).unwrap(),
        r#"{"thinking":{"type":"enabled"},"reasoning_effort":"max"}"#
    );
    assert_eq!(
        thinking(
            Some("off"),
            Some(Thinking::Enabled),
            Some(Effort::Max),
            false
        )
        .unwrap(),
        r#"{"thinking":{"type":"disabled"}}"#
    );
    assert_eq!(
        thinking(None, Some(Thinking::Enabled), None, false).unwrap(),
        r#"{"thinking":{"type":"enabled"}}"#
    );
    assert_eq!(
        thinking(Some("high"), Some(Thinking::Disabled), None, false).unwrap_err(),
        "UNSUPPORTED_REASONING_EFFORT: DeepSeek deployment does not support reasoning effort \"high\""
    );
    // Rule 2: an unknown id.
    assert_eq!(
        thinking(Some("medium"), None, None, false).unwrap_err(),
        "UNSUPPORTED_REASONING_EFFORT: DeepSeek does not support reasoning effort \"medium\""
    );
    // Rule 1 (Q-22): a title call forces thinking off without validating.
    assert_eq!(
        thinking(Some("medium"), Some(Thinking::Enabled), None, true).unwrap(),
        r#"{"thinking":{"type":"disabled"}}"#
    );
    // Rule 7: nothing configured, nothing sent.
    assert_eq!(thinking(None, None, None, false).unwrap(), "{}");
    assert_eq!(
        thinking(None, Some(Thinking::Disabled), None, false).unwrap(),
        r#"{"thinking":{"type":"disabled"}}"#
    );
    // Default effort applies when the request has none; low is sent as is.
    assert_eq!(
        thinking(None, None, Some(Effort::Low), false).unwrap(),
        r#"{"thinking":{"type":"enabled"},"reasoning_effort":"low"}"#
    );
}

#[test]
fn w3_w4_w10_w11_assistant_and_system() {
    let m = messages(json!([
        msg(
            "system",
            json!([{"type":"text","text":"a"},{"type":"reasoning","text":"no"},{"type":"text","text":"b"}])
        ),
        msg("assistant", json!([])),
        msg("assistant", json!([{"type":"reasoning","text":"only"}])),
        msg(
            "assistant",
            json!([{"type":"text","text":"x"},{"type":"tool-call","id":"1","name":"f","arguments":"{bad"},
                                 {"type":"text","text":"y"},{"type":"video","url":"u"},
                                 {"type":"tool-call","id":"2","name":"g","arguments":""}])
        ),
    ]));
    assert_eq!(
        m,
        json!([
            {"role":"system","content":"ab"},
            {"role":"assistant","content":""},
            {"role":"assistant","content":"","reasoning_content":"only"},
            {"role":"assistant","content":"xy","tool_calls":[
                {"id":"1","type":"function","function":{"name":"f","arguments":"{bad"}},
                {"id":"2","type":"function","function":{"name":"g","arguments":""}}]}
        ])
    );
}

#[test]
fn w5_w6_w8_w12_user_messages_and_tool_results() {
    let m = messages(json!([
        msg("user", json!([])),
        msg("user", json!([{"type":"text","text":"hi"}])),
        msg(
            "user",
            json!([
                {"type":"tool-result","toolCallId":"a","content":[{"type":"text","text":"1"},{"type":"text","text":"2"}],"isError":true},
                {"type":"reasoning","text":"dropped"},
                {"type":"tool-result","toolCallId":"b","content":[{"type":"tool-result","toolCallId":"n","content":[{"type":"text","text":"nested"}]}]}
            ])
        ),
    ]));
    assert_eq!(
        m,
        json!([
            {"role":"user","content":""},
            {"role":"user","content":"hi"},
            {"role":"tool","tool_call_id":"a","content":"12"},
            {"role":"tool","tool_call_id":"b","content":"(no output)"}
        ])
    );
}

fn image(id: &str, bytes: u64) -> Value {
    json!({"type":"image","attachment":{"attachmentId":id,"mediaType":"image/png","bytes":bytes,"width":1,"height":1}})
}

struct Store(Vec<String>);

impl AttachmentSource for Store {
    fn read(&mut self, a: &ImageAttachment) -> Result<Vec<u8>, LlmError> {
        self.0.push(a.attachment_id.as_str().to_string());
        if a.attachment_id.as_str() == "missing" {
            return Err(LlmError::coded(
                "ATTACHMENT_NOT_FOUND",
                "no such attachment",
            ));
        }
        Ok(vec![b'x'; a.bytes as usize])
    }
}

fn vision_config(limit: u64) -> DeepSeekConfig {
    let mut c = DeepSeekConfig::default();
    c.models[0].input_modalities = Some(vec![Modality::Text, Modality::Image]);
    c.max_request_image_bytes = limit;
    c
}

#[test]
fn d10_image_prechecks() {
    let o = options(
        json!({"provider":"p","model":"deepseek-v4-pro","messages":[msg("user", json!([image("a",3)]))]}),
    );
    let mut store = Store(vec![]);
    assert_eq!(
        build_request_body(&o, &vision_config(100), Some(&mut store))
            .unwrap_err()
            .to_string(),
        "UNSUPPORTED_CONTENT: DeepSeek model \"deepseek-v4-pro\" does not accept image input."
    );
    let o = options(
        json!({"provider":"p","model":"deepseek-v4-flash","messages":[msg("user", json!([image("a",3)]))]}),
    );
    assert_eq!(
        build_request_body(&o, &vision_config(100), None)
            .unwrap_err()
            .to_string(),
        "UNSUPPORTED_CONTENT: DeepSeek image conversion requires the durable attachment service."
    );
    // I-1: an image in an assistant message, before anything is read.
    let o = options(
        json!({"provider":"p","model":"deepseek-v4-flash","messages":[
        msg("user", json!([image("a",3)])), msg("assistant", json!([image("b",3)]))]}),
    );
    assert_eq!(
        build_request_body(&o, &vision_config(100), Some(&mut store))
            .unwrap_err()
            .to_string(),
        "UNSUPPORTED_CONTENT: The DeepSeek chat-completions adapter cannot represent image content in a assistant message."
    );
    assert!(store.0.is_empty());
    // An attachment failure keeps its code.
    let o = options(
        json!({"provider":"p","model":"deepseek-v4-flash","messages":[msg("user", json!([image("missing",3)]))]}),
    );
    assert_eq!(
        build_request_body(&o, &vision_config(100), Some(&mut store))
            .unwrap_err()
            .failure()
            .code,
        "ATTACHMENT_NOT_FOUND"
    );
}

#[test]
fn i2_to_i6_image_path() {
    let o = options(
        json!({"provider":"p","model":"deepseek-v4-flash","messages":[
            // a: 3 bytes → cost 4; b: 6 bytes → cost 8; c, d: 3 bytes → 4 each. Total 20 > 16.
            msg("user", json!([{"type":"text","text":"look"},image("a",3),{"type":"text","text":""}])),
            {"id":"t","role":"user","source":{"kind":"tool","callId":"c1"},"content":[
                {"type":"tool-result","toolCallId":"c1","content":[image("b",6),{"type":"tool-result","toolCallId":"n","content":[image("c",3)]}]}]},
            {"id":"t2","role":"user","source":{"kind":"tool","callId":"c2"},"content":[
                {"type":"tool-result","toolCallId":"c2","content":[{"type":"text","text":"see"},image("d",3)]}]},
            msg("assistant", json!([{"type":"text","text":"ok"}])),
            msg("user", json!([{"type":"text","text":"plain"}])),
        ]}),
    );
    let mut store = Store(vec![]);
    let body = build_request_body(&o, &vision_config(16), Some(&mut store)).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    // The oldest image (a) is offloaded and never read.
    assert_eq!(store.0, vec!["b", "c", "d"]);
    let png = |n: usize| format!("data:image/png;base64,{}", "eHh4".repeat(n));
    assert_eq!(
        v["messages"],
        json!([
            {"role":"user","content":format!("look{IMAGE_OMITTED}")},
            {"role":"tool","tool_call_id":"c1","content":"(see attached image)"},
            {"role":"tool","tool_call_id":"c2","content":"see"},
            {"role":"user","content":[
                {"type":"text","text":"Attached image(s) from tool result:"},
                {"type":"image_url","image_url":{"url":png(2)}},
                {"type":"image_url","image_url":{"url":png(1)}},
                {"type":"image_url","image_url":{"url":png(1)}}]},
            {"role":"assistant","content":"ok"},
            {"role":"user","content":"plain"}
        ])
    );
    // Within budget a user image becomes an array content.
    let o = options(
        json!({"provider":"p","model":"deepseek-v4-flash","messages":[
        msg("user", json!([{"type":"text","text":"look"},image("a",3)]))]}),
    );
    let v: Value = serde_json::from_str(
        &build_request_body(&o, &vision_config(16), Some(&mut store)).unwrap(),
    )
    .unwrap();
    assert_eq!(
        v["messages"][0]["content"],
        json!([{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":png(1)}}])
    );
}

#[test]
fn base64_matches_rfc4648() {
    for (input, expected) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(dsh_deepseek::base64(input.as_bytes()), expected);
    }
}
