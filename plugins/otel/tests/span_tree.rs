//! The span tree built from recorded turns (testdata/conformance, recorded
//! by the reference implementation): part 3. Events are fed in
//! seq order through `OtelPlugin::observe`, exactly what the kernel's
//! `on_event` hands the plugin.

use std::sync::{Arc, Mutex};

use dsh_core::jsonl::{fixture_tokens, load_log};
use dsh_otel::attr;
use dsh_otel::{AttrValue, OtelConfig, OtelPlugin, SpanData, Status, span_id, trace_id};

fn recording_path(name: &str) -> String {
    format!(
        "{}/../../testdata/conformance/sessions/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The session id and the spans of the log `bytes` (fixture tokens
/// substituted); `None` when it does not load (legacy headers).
fn trace(bytes: &[u8], config: OtelConfig) -> Option<(String, Vec<SpanData>)> {
    let loaded = load_log(&fixture_tokens(bytes), &[]).ok()?;
    let id = loaded.session.id().as_str().to_string();
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let mut plugin = OtelPlugin::new(config, move |s: SpanData| sink.lock().unwrap().push(s));
    for e in loaded.session.events() {
        plugin.observe(&id, e);
    }
    let spans = out.lock().unwrap().clone();
    Some((id, spans))
}

fn spans_of(name: &str, config: OtelConfig) -> (String, Vec<SpanData>) {
    trace(&std::fs::read(recording_path(name)).unwrap(), config).expect("a valid recording")
}

const TOOL_TURN: &str = "examples-acp-agent__tool-call-turn__session.jsonl";
const RETRY_TURN: &str = "examples-acp-agent__empty-response-retry__session.jsonl";
const ERROR_TURN: &str = "examples-acp-agent__error-finish__session.jsonl";

fn str_attr<'a>(s: &'a SpanData, key: &str) -> &'a str {
    match s.attr(key) {
        Some(AttrValue::Str(v)) => v,
        other => panic!("{}: {key} is {other:?}", s.name),
    }
}

fn int_attr(s: &SpanData, key: &str) -> i64 {
    match s.attr(key) {
        Some(AttrValue::Int(v)) => *v,
        other => panic!("{}: {key} is {other:?}", s.name),
    }
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Every string an exported span carries: names, attribute values, event
/// attribute values, status messages.
fn all_text(spans: &[SpanData]) -> String {
    let mut out = String::new();
    let mut push = |v: &AttrValue| match v {
        AttrValue::Str(s) => out.push_str(s),
        AttrValue::StrArray(a) => a.iter().for_each(|s| out.push_str(s)),
        _ => {}
    };
    for s in spans {
        s.attributes.iter().for_each(|a| push(&a.value));
        for e in &s.events {
            e.attributes.iter().for_each(|a| push(&a.value));
        }
    }
    for s in spans {
        out.push_str(&s.name);
        if let Status::Error(m) = &s.status {
            out.push_str(m);
        }
    }
    out
}

/// The two-step tool turn: one trace, the turn at the root, two steps
/// under it, one model attempt in each step, the bash call in step 1;
/// GenAI attributes from the recorded usage, finish and model.
#[test]
fn a_recorded_two_step_tool_turn_gives_one_trace_of_steps_attempts_and_the_tool() {
    let (id, spans) = spans_of(TOOL_TURN, OtelConfig::default());
    assert_eq!(spans.len(), 6, "{spans:#?}");
    let trace = trace_id(&id, 1);
    assert!(spans.iter().all(|s| s.trace_id == trace));

    let turn = named(&spans, "invoke_agent dsh");
    assert_eq!(turn.len(), 1);
    let turn = turn[0];
    assert_eq!(turn.parent, None);
    assert_eq!(turn.span_id, span_id(&id, 1), "the turn/start seq");
    assert_eq!(str_attr(turn, attr::OPERATION_NAME), "invoke_agent");
    assert_eq!(str_attr(turn, attr::CONVERSATION_ID), id);
    assert_eq!(str_attr(turn, attr::DSH_TURN_END), "completed");
    assert_eq!(turn.status, Status::Unset);
    // The last span to end: the root comes after its children.
    assert_eq!(spans.last().unwrap().span_id, turn.span_id);

    let steps = named(&spans, "step");
    assert_eq!(steps.len(), 2);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s.parent, Some(turn.span_id));
        assert_eq!(int_attr(s, attr::DSH_STEP), i as i64 + 1);
    }
    let chats = named(&spans, "chat deepseek-v4-flash");
    assert_eq!(chats.len(), 2);
    for (chat, step) in chats.iter().zip(&steps) {
        assert_eq!(chat.parent, Some(step.span_id));
        assert_eq!(str_attr(chat, attr::OPERATION_NAME), "chat");
        assert_eq!(str_attr(chat, attr::PROVIDER_NAME), "deepseek");
        assert_eq!(str_attr(chat, attr::SYSTEM), "deepseek");
        assert_eq!(str_attr(chat, attr::REQUEST_MODEL), "deepseek-v4-flash");
        assert_eq!(str_attr(chat, attr::RESPONSE_MODEL), "deepseek-v4-flash");
        assert_eq!(chat.status, Status::Unset);
    }
    // Step 1: 2879 uncached + 0 cached in, 89 out, stopped for tools.
    assert_eq!(int_attr(chats[0], attr::USAGE_INPUT_TOKENS), 2879);
    assert_eq!(int_attr(chats[0], attr::USAGE_OUTPUT_TOKENS), 89);
    assert_eq!(int_attr(chats[0], attr::USAGE_CACHE_READ), 0);
    assert_eq!(
        chats[0].attr(attr::RESPONSE_FINISH_REASONS),
        Some(&AttrValue::StrArray(vec!["tool_calls".into()]))
    );
    // Step 2: cached tokens count in the input (170 + 2816).
    assert_eq!(int_attr(chats[1], attr::USAGE_INPUT_TOKENS), 2986);
    assert_eq!(int_attr(chats[1], attr::USAGE_CACHE_READ), 2816);
    assert_eq!(int_attr(chats[1], attr::USAGE_OUTPUT_TOKENS), 28);
    assert_eq!(
        chats[1].attr(attr::RESPONSE_FINISH_REASONS),
        Some(&AttrValue::StrArray(vec!["stop".into()]))
    );
    // The attempt runs from the request/context (seq 8) to its finish
    // chunk (seq 62); its id is that of its first chunk (seq 9).
    assert_eq!(chats[0].start_ns, 1_785_730_417_557 * 1_000_000);
    assert_eq!(chats[0].end_ns, 1_785_730_417_567 * 1_000_000);
    assert_eq!(chats[0].span_id, span_id(&id, 9));

    let tools = named(&spans, "execute_tool bash");
    assert_eq!(tools.len(), 1);
    let tool = tools[0];
    assert_eq!(tool.parent, Some(steps[0].span_id));
    assert_eq!(str_attr(tool, attr::OPERATION_NAME), "execute_tool");
    assert_eq!(str_attr(tool, attr::TOOL_NAME), "bash");
    assert_eq!(
        str_attr(tool, attr::TOOL_CALL_ID),
        "call_00_Rn2Mz1y8uZN62ukEXiNO2077"
    );
    assert_eq!(tool.span_id, span_id(&id, 64), "the tool/call seq");
    assert_eq!(tool.start_ns, 1_785_730_417_568 * 1_000_000);
    assert_eq!(tool.end_ns, 1_785_730_417_585 * 1_000_000);
    assert_eq!(tool.status, Status::Unset);

    // Ids are unique.
    let mut ids: Vec<_> = spans.iter().map(|s| s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), spans.len());
}

/// Without the opt-in no prompt, answer, reasoning or tool text is on any
/// span; with it, each is where the conventions put it.
#[test]
fn message_and_tool_text_appear_only_with_content_capture() {
    let secrets = [
        "Use the bash tool",
        "SNAPSHOT_OK",
        "echo",
        "DONE",
        "The user wants",
    ];
    let (_, plain) = spans_of(TOOL_TURN, OtelConfig::default());
    let text = all_text(&plain);
    for s in secrets {
        assert!(!text.contains(s), "{s:?} leaked: {text}");
    }
    let (_, full) = spans_of(TOOL_TURN, OtelConfig::default().with_content(true));
    let turn = named(&full, "invoke_agent dsh")[0];
    assert!(str_attr(turn, attr::INPUT_MESSAGES).contains("Use the bash tool to run exactly"));
    // The runtime-context snapshot is the plugin's, not the user's.
    assert!(!str_attr(turn, attr::INPUT_MESSAGES).contains("Current runtime context"));
    let tool = named(&full, "execute_tool bash")[0];
    assert!(str_attr(tool, attr::TOOL_CALL_ARGUMENTS).contains("echo SNAPSHOT_OK"));
    assert_eq!(str_attr(tool, attr::TOOL_CALL_RESULT), "SNAPSHOT_OK\n");
    let chats = named(&full, "chat deepseek-v4-flash");
    let out: serde_json::Value =
        serde_json::from_str(str_attr(chats[1], attr::OUTPUT_MESSAGES)).unwrap();
    assert_eq!(out[0]["role"], "assistant");
    assert_eq!(out[0]["parts"][1]["content"], "DONE");
}

/// A retried attempt: two model spans in the step, the failed one with an
/// error status, an `exception` and the retry event, the second marked as
/// retry 1.
#[test]
fn a_retried_attempt_is_two_chat_spans_with_the_retry_as_an_event() {
    let (_, spans) = spans_of(RETRY_TURN, OtelConfig::default());
    let chats = named(&spans, "chat deepseek-v4-flash");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let step = named(&spans, "step")[0];
    assert!(chats.iter().all(|c| c.parent == Some(step.span_id)));
    let failed = chats[0];
    assert_eq!(failed.status, Status::Error("EMPTY_RESPONSE".into()));
    assert_eq!(str_attr(failed, attr::ERROR_TYPE), "EMPTY_RESPONSE");
    let names: Vec<&str> = failed.events.iter().map(|e| e.name).collect();
    assert_eq!(names, vec![attr::EVENT_EXCEPTION, attr::EVENT_RETRY]);
    let retry = &failed.events[1];
    assert!(
        retry
            .attributes
            .iter()
            .any(|a| a.key == attr::DSH_RETRY && a.value == AttrValue::Int(1))
    );
    assert!(
        retry
            .attributes
            .iter()
            .any(|a| a.key == attr::DSH_RETRY_MAX && a.value == AttrValue::Int(2))
    );
    let second = chats[1];
    assert_eq!(int_attr(second, attr::DSH_RETRY), 1);
    assert_eq!(second.status, Status::Unset);
    assert_eq!(str_attr(second, attr::RESPONSE_MODEL), "deepseek-v4-flash");
    assert!(second.start_ns >= failed.end_ns);
}

/// A provider error ends the attempt and the turn with an error status,
/// `error.type` the failure code, and an `exception` event.
#[test]
fn a_provider_error_marks_the_attempt_and_the_turn_failed() {
    let (_, spans) = spans_of(ERROR_TURN, OtelConfig::default());
    let chat = named(&spans, "chat deepseek-v4-flash")[0];
    assert_eq!(chat.status, Status::Error("AUTH".into()));
    assert_eq!(
        chat.attr(attr::RESPONSE_FINISH_REASONS),
        Some(&AttrValue::StrArray(vec!["error".into()]))
    );
    let turn = named(&spans, "invoke_agent dsh")[0];
    assert_eq!(turn.status, Status::Error("AUTH".into()));
    assert_eq!(str_attr(turn, attr::DSH_TURN_END), "error");
    let e = &turn.events[0];
    assert_eq!(e.name, attr::EVENT_EXCEPTION);
    assert!(e.attributes.iter().any(|a| a.key == attr::EXCEPTION_MESSAGE
        && a.value == AttrValue::Str("simulated provider error (HTTP 401)".into())));
}

/// The same log gives the same spans, ids and times included.
#[test]
fn the_same_log_gives_the_same_spans() {
    for name in [TOOL_TURN, RETRY_TURN, ERROR_TURN] {
        assert_eq!(
            spans_of(name, OtelConfig::default()),
            spans_of(name, OtelConfig::default())
        );
    }
}

/// Every recording traces without a panic, and every span's parent is a
/// span of the same trace.
#[test]
fn every_recording_traces_into_well_formed_trees() {
    let dir = recording_path("");
    let mut traced = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some((_, spans)) = trace(&std::fs::read(&path).unwrap(), OtelConfig::default()) else {
            continue; // legacy headers (conformance README)
        };
        for s in &spans {
            assert!(s.end_ns >= s.start_ns);
            if let Some(p) = s.parent {
                assert!(
                    spans
                        .iter()
                        .any(|q| q.span_id == p && q.trace_id == s.trace_id),
                    "{}: {} has no parent in its trace",
                    path.display(),
                    s.name
                );
            }
        }
        traced += usize::from(!spans.is_empty());
    }
    assert!(traced >= 20, "only {traced} recordings gave spans");
}

/// Names come from the model: a huge tool name is cut on the span, and
/// the span still closes with its result.
#[test]
fn a_huge_tool_name_is_cut() {
    let long = "b".repeat(100_000);
    let text = std::fs::read_to_string(recording_path(TOOL_TURN))
        .unwrap()
        .replace(r#""name":"bash""#, &format!(r#""name":"{long}""#));
    let (_, spans) = trace(text.as_bytes(), OtelConfig::default()).expect("still a valid log");
    let tool = spans
        .iter()
        .find(|s| s.name.starts_with("execute_tool "))
        .expect("the tool span");
    assert_eq!(
        tool.name.len(),
        "execute_tool ".len() + dsh_otel::MAX_NAME_BYTES
    );
    assert_eq!(
        str_attr(tool, attr::TOOL_NAME).len(),
        dsh_otel::MAX_NAME_BYTES
    );
    assert_eq!(tool.status, Status::Unset);
}
