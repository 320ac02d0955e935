//! The translation vectors of streaming.md 5.16 (TV-1..TV-9), the
//! finish-reason (5.12) and usage (5.13) tables, the 5.16 request example,
//! and the serialization rules W-*, I-*, D-14/D-15.

use dsh_core::{StreamChunk, validate_stream};
use dsh_deepseek::{Translator, decode_body, map_finish_reason};

/// Translates payload lines; returns the chunk JSON lines, and the raised
/// error as `ERR <code>: <message>` when there is one.
fn translate(payloads: &str) -> Vec<String> {
    let mut t = Translator::new();
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for p in payloads.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match t.push_payload(p, &mut out) {
            Ok(_) => {}
            Err(e) => {
                lines.extend(out.iter().map(|c| serde_json::to_string(c).unwrap()));
                lines.push(format!("ERR {e}"));
                return lines;
            }
        }
    }
    // Each vector's chunks, closed by AC-6 on failure, pass the validator.
    let violations = validate_stream(&out);
    assert!(violations.is_empty(), "{violations:?}");
    out.iter()
        .map(|c| serde_json::to_string(c).unwrap())
        .collect()
}

fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn tv1_thinking_then_text_usage_on_finish() {
    let out = translate(
        r#"
{"choices":[{"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}
{"choices":[{"delta":{"content":null,"reasoning_content":"Let me"}}]}
{"choices":[{"delta":{"content":null,"reasoning_content":" think"}}]}
{"choices":[{"delta":{"content":"Done.","reasoning_content":null}}]}
{"choices":[{"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":5,"prompt_cache_hit_tokens":16,"completion_tokens_details":{"reasoning_tokens":3}}}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"reasoning"}
{"type":"reasoning-delta","index":0,"text":"Let me"}
{"type":"reasoning-delta","index":0,"text":" think"}
{"type":"block-start","index":1,"blockType":"text"}
{"type":"text-delta","index":1,"text":"Done."}
{"type":"block-end","index":0,"block":{"type":"reasoning","text":"Let me think"}}
{"type":"block-end","index":1,"block":{"type":"text","text":"Done."}}
{"type":"usage","usage":{"inputTokens":4,"outputTokens":5,"cacheReadTokens":16,"reasoningTokens":3}}
{"type":"finish","reason":{"kind":"stop"}}
"#
        )
    );
}

#[test]
fn tv2_text_resumes_after_a_tool_call() {
    let out = translate(
        r#"
{"choices":[{"delta":{"content":"A"}}]}
{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"k","type":"function","function":{"name":"f","arguments":"{"}}]}}]}
{"choices":[{"delta":{"content":"B"}}]}
{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}
{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"A"}
{"type":"block-start","index":1,"blockType":"tool-call"}
{"type":"tool-call-delta","index":1,"id":"k","name":"f","argumentsDelta":"{"}
{"type":"text-delta","index":0,"text":"B"}
{"type":"tool-call-delta","index":1,"id":"k","name":"f","argumentsDelta":"}"}
{"type":"block-end","index":0,"block":{"type":"text","text":"AB"}}
{"type":"block-end","index":1,"block":{"type":"tool-call","id":"k","name":"f","arguments":"{}"}}
{"type":"finish","reason":{"kind":"tool-calls"}}
"#
        )
    );
}

#[test]
fn tv3_first_appearance_order_and_trailing_usage() {
    let out = translate(
        r#"
{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}
{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}
{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":null}
{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3}}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"tool-call"}
{"type":"tool-call-delta","index":0,"id":"b","name":"g","argumentsDelta":""}
{"type":"block-start","index":1,"blockType":"tool-call"}
{"type":"tool-call-delta","index":1,"id":"a","name":"f","argumentsDelta":"{}"}
{"type":"block-end","index":0,"block":{"type":"tool-call","id":"b","name":"g","arguments":""}}
{"type":"block-end","index":1,"block":{"type":"tool-call","id":"a","name":"f","arguments":"{}"}}
{"type":"usage","usage":{"inputTokens":10,"outputTokens":3}}
{"type":"finish","reason":{"kind":"tool-calls"}}
"#
        )
    );
}

#[test]
fn tv4_empty_completion_is_an_error_after_usage() {
    let out = translate(
        r#"
{"choices":[{"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}
{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":0}}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"usage","usage":{"inputTokens":7,"outputTokens":0}}
{"type":"finish","reason":{"kind":"error","failure":{"message":"model returned a completed response with no content","code":"EMPTY_RESPONSE"}}}
"#
        )
    );
}

#[test]
fn tv5_length_without_blocks_stays_max_tokens() {
    let out = translate(
        r#"
{"choices":[{"delta":{"reasoning_content":""}}]}
{"choices":[{"delta":{},"finish_reason":"length"}]}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(r#"{"type":"finish","reason":{"kind":"max-tokens"}}"#)
    );
}

#[test]
fn tv6_content_filter_after_partial_text() {
    let out = translate(
        r#"
{"choices":[{"delta":{"content":"x"}}]}
{"choices":[{"delta":{},"finish_reason":"content_filter"}]}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"x"}
{"type":"block-end","index":0,"block":{"type":"text","text":"x"}}
{"type":"finish","reason":{"kind":"error","failure":{"message":"model stopped: content_filter","code":"CONTENT_FILTER"}}}
"#
        )
    );
}

#[test]
fn tv7_tool_call_without_id_or_name() {
    let out = translate(
        r#"
{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}
{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"tool-call"}
{"type":"tool-call-delta","index":0,"id":"","argumentsDelta":"{}"}
{"type":"block-end","index":0,"block":{"type":"tool-call","id":"","name":"","arguments":"{}"}}
{"type":"finish","reason":{"kind":"tool-calls"}}
"#
        )
    );
}

#[test]
fn tv8_in_band_error_object_is_ignored() {
    let out = translate(
        r#"
{"error":{"message":"context length exceeded","code":"context_length_exceeded"}}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"model returned a completed response with no content","code":"EMPTY_RESPONSE"}}}"#
        )
    );
}

#[test]
fn tv9_malformed_payload() {
    let out = translate("{bad json\n");
    assert_eq!(
        out,
        vec!["ERR MALFORMED_RESPONSE: malformed SSE payload: {bad json"]
    );
    // Through AC-6 it becomes an error finish with that failure.
    let chunks = decode_body(b"data: {bad json\n\n");
    assert_eq!(
        serde_json::to_string(&chunks).unwrap(),
        r#"[{"type":"finish","reason":{"kind":"error","failure":{"message":"malformed SSE payload: {bad json","code":"MALFORMED_RESPONSE"}}}]"#
    );
}

#[test]
fn t1_excerpt_counts_utf16_code_units() {
    // Q-20: an emoji is two UTF-16 units: `{` + 59 emoji = 119 units; the
    // 60th would straddle the cut and is left out whole.
    let payload = format!("{{{}", "😀".repeat(100));
    let out = translate(&payload);
    let expected = format!("{{{}", "😀".repeat(59));
    assert_eq!(
        out,
        vec![format!(
            "ERR MALFORMED_RESPONSE: malformed SSE payload: {expected}"
        )]
    );
    // With an even cut the 120 units are all there: `{x` + 59 emoji.
    let payload = format!("{{x{}", "😀".repeat(100));
    let expected = format!("{{x{}", "😀".repeat(59));
    assert_eq!(
        translate(&payload),
        vec![format!(
            "ERR MALFORMED_RESPONSE: malformed SSE payload: {expected}"
        )]
    );
}

#[test]
fn t1_excerpt_is_120_characters() {
    let payload = format!("{{{}", "é".repeat(200));
    let out = translate(&payload);
    let expected: String = payload.chars().take(120).collect();
    assert_eq!(
        out,
        vec![format!(
            "ERR MALFORMED_RESPONSE: malformed SSE payload: {expected}"
        )]
    );
}

#[test]
fn q9_non_objects_and_bad_lists_are_malformed() {
    for p in [
        "null",
        "[]",
        "5",
        "\"x\"",
        r#"{"choices":{}}"#,
        r#"{"choices":"ab"}"#,
        r#"{"choices":[null]}"#,
        r#"{"choices":[{"delta":{"tool_calls":{}}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[5]}}]}"#,
    ] {
        let out = translate(p);
        assert_eq!(out.len(), 1, "{p}");
        assert!(out[0].starts_with("ERR MALFORMED_RESPONSE"), "{p}: {out:?}");
    }
    // An error in a payload emits nothing from it: the first choice's text is
    // not emitted when the second choice is broken.
    let out = translate(r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"tool_calls":7}}]}"#);
    assert_eq!(out.len(), 1);
}

#[test]
fn lenient_fields_and_duplicate_keys() {
    let out = translate(
        r#"
{"choices":[{"delta":{"content":5,"reasoning_content":["x"]},"finish_reason":7}],"usage":"lots"}
{"choices":null}
{"choices":[{"delta":null}]}
{"choices":[{"delta":"text"}]}
{"choices":[{"delta":{"content":"a","content":"b"}}],"usage":{"prompt_tokens":"1","completion_tokens":2.9}}
{"choices":[{"delta":{},"finish_reason":""}]}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"b"}
{"type":"block-end","index":0,"block":{"type":"text","text":"b"}}
{"type":"usage","usage":{"inputTokens":0,"outputTokens":2}}
{"type":"finish","reason":{"kind":"stop"}}
"#
        )
    );
}

#[test]
fn tool_index_keys_follow_javascript_map_semantics() {
    let out = translate(
        r#"
{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"1"}},{"index":0.0,"function":{"arguments":"2"}},{"index":"0","id":"s"},{"function":{"arguments":"x"}},{"function":{"arguments":"y"}},{"index":{},"id":"o1"},{"index":{},"id":"o2"}]}}]}
{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}
[DONE]
"#,
    );
    let ends: Vec<&String> = out.iter().filter(|l| l.contains("block-end")).collect();
    assert_eq!(
        ends,
        [
            r#"{"type":"block-end","index":0,"block":{"type":"tool-call","id":"a","name":"f","arguments":"12"}}"#,
            r#"{"type":"block-end","index":1,"block":{"type":"tool-call","id":"s","name":"","arguments":""}}"#,
            r#"{"type":"block-end","index":2,"block":{"type":"tool-call","id":"","name":"","arguments":"xy"}}"#,
            r#"{"type":"block-end","index":3,"block":{"type":"tool-call","id":"o1","name":"","arguments":""}}"#,
            r#"{"type":"block-end","index":4,"block":{"type":"tool-call","id":"o2","name":"","arguments":""}}"#,
        ]
    );
}

#[test]
fn t5_latest_id_and_name_win_and_name_rides_on_every_delta() {
    let out = translate(
        r#"
{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}
{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":"}"}}]}}]}
{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c2","function":{"name":"b"}}]}}]}
{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}
[DONE]
"#,
    );
    assert_eq!(
        &out[1..4],
        &lines(
            r#"
{"type":"tool-call-delta","index":0,"id":"","argumentsDelta":"{"}
{"type":"tool-call-delta","index":0,"id":"c1","name":"a","argumentsDelta":"}"}
{"type":"tool-call-delta","index":0,"id":"c2","name":"b","argumentsDelta":""}
"#
        )[..]
    );
    assert_eq!(
        out[4],
        r#"{"type":"block-end","index":0,"block":{"type":"tool-call","id":"c2","name":"b","arguments":"{}"}}"#
    );
}

#[test]
fn t8_reasoning_after_text_gets_a_higher_index_and_choices_merge() {
    let out = translate(
        r#"
{"choices":[{"delta":{"content":"t"}},{"delta":{"reasoning_content":"r","content":"u"}}]}
[DONE]
"#,
    );
    assert_eq!(
        out,
        lines(
            r#"
{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"t"}
{"type":"block-start","index":1,"blockType":"reasoning"}
{"type":"reasoning-delta","index":1,"text":"r"}
{"type":"text-delta","index":0,"text":"u"}
{"type":"block-end","index":0,"block":{"type":"text","text":"tu"}}
{"type":"block-end","index":1,"block":{"type":"reasoning","text":"r"}}
{"type":"finish","reason":{"kind":"stop"}}
"#
        )
    );
}

#[test]
fn t9_empty_check_counts_any_block_and_spares_other_finishes() {
    // A reasoning-only response is not empty.
    let out = translate("{\"choices\":[{\"delta\":{\"reasoning_content\":\"r\"}}]}\n[DONE]");
    assert_eq!(
        out.last().unwrap(),
        r#"{"type":"finish","reason":{"kind":"stop"}}"#
    );
    // No finish reason and no block: EMPTY_RESPONSE.
    let out = translate("{}\n[DONE]");
    assert!(out[0].contains("EMPTY_RESPONSE"));
    // tool_calls with no block is kept (the validator accepts it).
    let out = translate("{\"choices\":[{\"finish_reason\":\"tool_calls\"}]}\n[DONE]");
    assert_eq!(
        out,
        vec![r#"{"type":"finish","reason":{"kind":"tool-calls"}}"#]
    );
    // Payloads after [DONE] are ignored.
    let mut t = Translator::new();
    let mut chunks = Vec::new();
    assert!(t.push_payload("[DONE]", &mut chunks).unwrap());
    assert!(
        t.push_payload(
            "{\"choices\":[{\"delta\":{\"content\":\"late\"}}]}",
            &mut chunks
        )
        .unwrap()
    );
    assert_eq!(chunks.len(), 1);
    assert!(t.end().is_ok());
    assert_eq!(
        Translator::new().end().unwrap_err().to_string(),
        "STREAM_CLOSED: SSE payload stream ended without [DONE]"
    );
}

#[test]
fn finish_reason_table_5_12() {
    let cases = [
        ("stop", r#"{"kind":"stop"}"#),
        ("tool_calls", r#"{"kind":"tool-calls"}"#),
        ("length", r#"{"kind":"max-tokens"}"#),
        (
            "content_filter",
            r#"{"kind":"error","failure":{"message":"model stopped: content_filter","code":"CONTENT_FILTER"}}"#,
        ),
        (
            "insufficient_system_resource",
            r#"{"kind":"error","failure":{"message":"model stopped: insufficient_system_resource","code":"INSUFFICIENT_SYSTEM_RESOURCE"}}"#,
        ),
        (
            "straße",
            r#"{"kind":"error","failure":{"message":"model stopped: straße","code":"STRASSE"}}"#,
        ),
    ];
    for (wire, json) in cases {
        assert_eq!(
            serde_json::to_string(&map_finish_reason(wire)).unwrap(),
            json,
            "{wire}"
        );
    }
}

#[test]
fn usage_table_5_13() {
    let cases = [
        (
            r#"{"prompt_tokens":283,"completion_tokens":69,"prompt_cache_hit_tokens":256,"prompt_cache_miss_tokens":27,"prompt_tokens_details":{"cached_tokens":256},"completion_tokens_details":{"reasoning_tokens":24}}"#,
            r#"{"inputTokens":27,"outputTokens":69,"cacheReadTokens":256,"reasoningTokens":24}"#,
        ),
        (
            r#"{"prompt_tokens":10,"completion_tokens":2,"prompt_cache_hit_tokens":8}"#,
            r#"{"inputTokens":2,"outputTokens":2,"cacheReadTokens":8}"#,
        ),
        (
            r#"{"prompt_tokens":10,"completion_tokens":1,"prompt_cache_hit_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}"#,
            r#"{"inputTokens":10,"outputTokens":1,"cacheReadTokens":0}"#,
        ),
        (
            r#"{"prompt_tokens":10,"completion_tokens":2}"#,
            r#"{"inputTokens":10,"outputTokens":2}"#,
        ),
        // Q-8: no clamp; missing counts are 0; a null cached_tokens falls back.
        (
            r#"{"prompt_tokens":5,"completion_tokens":1,"prompt_cache_hit_tokens":8}"#,
            r#"{"inputTokens":-3,"outputTokens":1,"cacheReadTokens":8}"#,
        ),
        (r#"{}"#, r#"{"inputTokens":0,"outputTokens":0}"#),
        (
            r#"{"prompt_tokens":9,"completion_tokens":1,"prompt_cache_hit_tokens":4,"prompt_tokens_details":{"cached_tokens":null}}"#,
            r#"{"inputTokens":5,"outputTokens":1,"cacheReadTokens":4}"#,
        ),
    ];
    for (wire, expected) in cases {
        let out = translate(&format!(
            "{{\"choices\":[{{\"delta\":{{\"content\":\"x\"}}}}],\"usage\":{wire}}}\n[DONE]"
        ));
        let usage = out.iter().find(|l| l.contains("\"usage\"")).unwrap();
        assert_eq!(
            *usage,
            format!(r#"{{"type":"usage","usage":{expected}}}"#),
            "{wire}"
        );
    }
    // The last usage wins (T-7).
    let out = translate(
        "{\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n{\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2}}\n[DONE]",
    );
    assert!(out.contains(&String::from(
        r#"{"type":"usage","usage":{"inputTokens":2,"outputTokens":2}}"#
    )));
}

#[test]
fn sse_errors_through_the_decoder() {
    let finish = |body: &[u8]| {
        let chunks = decode_body(body);
        assert!(validate_stream(&chunks).is_empty());
        serde_json::to_string(chunks.last().unwrap()).unwrap()
    };
    // SV-7: an empty payload is malformed.
    assert!(finish(b"data:\n\ndata: [DONE]\n\n").contains("MALFORMED_RESPONSE"));
    // SV-10 / SV-11: STREAM_CLOSED.
    let closed = r#"{"type":"finish","reason":{"kind":"error","failure":{"message":"SSE stream ended without [DONE]","code":"STREAM_CLOSED"}}}"#;
    assert_eq!(finish(b"data: {\"a\":1}\n\n"), closed);
    assert_eq!(finish(b"data: {\"a\":1}\n\ndata: [DONE]"), closed);
    // SSE-6: two spaces before [DONE] leave ` [DONE]`, which is malformed.
    assert!(finish(b"data:  [DONE]\n\n").contains("malformed SSE payload:  [DONE]"));
    // SV-9: reading stops at [DONE].
    let chunks = decode_body(b"data: [DONE]\n\ndata: {bad\n\n");
    assert_eq!(chunks.len(), 1);
    assert!(matches!(chunks[0], StreamChunk::Finish { .. }));
}
