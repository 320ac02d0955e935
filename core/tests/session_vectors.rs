//! The test vectors of spec/session.md (TV-1..TV-15) and the rules they
//! exercise: envelope (E*), JSON domain (J*), surface (S*), seeds (V*),
//! message shapes (M*), derived history (P*, D*, C*), header fold (H*),
//! end-seed (ES*), fork (F*), invariants (I*).

use std::sync::Arc;

use dsh_core::jsonl::{Decoded, Decoder, Record};
use dsh_core::session::{
    AbortCause, AssistantChunk, AssistantMessage, EpochHeader, EventData, ForkError, HeaderReason,
    InvariantChecker, LlmRetry, PluginEvent, RequestContext, RequestHeader, Step, ToolCall,
    ToolError, ToolResult, TurnEnd, TurnEndReason, TurnStart, types,
};
use dsh_core::{
    AppendError, ContentBlock, LlmCallConfig, LlmFailure, Message, MessageSource, Session,
    SessionEvent, SessionHeader, StreamChunk, SurfaceIntent, SurfaceOp, ToolSchema,
};
use serde_json::json;

fn session() -> Session {
    Session::new(SessionHeader::new("s1", 1000))
}

fn user(id: &str) -> Message {
    Message::user(id, vec![ContentBlock::text("hello")])
}

fn assistant(id: &str, text: &str) -> AssistantMessage {
    let content = if text.is_empty() {
        vec![]
    } else {
        vec![ContentBlock::text(text)]
    };
    AssistantMessage::new(
        1,
        1,
        Message::model(id, content, MessageSource::model("p", "m")),
    )
}

fn tool_result(id: &str, call: &str, text: &str) -> ToolResult {
    ToolResult::new(
        1,
        1,
        Message::tool_result(id, call, vec![ContentBlock::text(text)], false),
    )
}

fn append() -> Option<SurfaceIntent> {
    Some(SurfaceIntent::append())
}

/// Decodes one line that must be an event.
fn decode(line: &str) -> Result<SessionEvent, AppendError> {
    match Decoder::new().decode_line(line.as_bytes()) {
        Ok(Record::One(Decoded::Event(e))) => Ok(e),
        Ok(Record::One(Decoded::Invalid(i))) => Err(i.error),
        other => panic!("{line} decoded to {other:?}"),
    }
}

#[test]
fn tv1_basic_append_and_surface() {
    let mut s = session();
    assert_eq!(s.append(TurnStart::new(1), None, 1).unwrap().seq(), 0);
    assert_eq!(s.append(user("u"), append(), 2).unwrap().seq(), 1);
    assert_eq!(
        s.append(assistant("a", "hi"), append(), 3).unwrap().seq(),
        2
    );
    assert_eq!(s.surface().nodes, &[1, 2]);
    let derived = s.derive_messages();
    assert_eq!(derived.len(), 2);
    assert_eq!(derived[0].id.as_str(), "u");
    assert_eq!(derived[1].id.as_str(), "a");
    // E10: the session assigned seq and time.
    assert_eq!(s.event(2).unwrap().time(), 3);
}

#[test]
fn tv2_marker_on_a_log_only_type_is_rejected() {
    let mut s = session();
    let err = s.append(TurnStart::new(1), append(), 1).unwrap_err();
    assert!(matches!(err, AppendError::MarkerOnLogOnly { .. }), "{err}");
    assert_eq!(err.rule(), "S2");
    assert!(s.is_empty(), "log unchanged");
    let e = SessionEvent::new(0, 1, TurnStart::new(1)).with_sources(vec![]);
    assert!(matches!(
        s.append_event(e).unwrap_err(),
        AppendError::SourcesOnLogOnly { .. }
    ));
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn tv3_missing_marker_is_rejected() {
    let mut s = session();
    let err = s.append(user("u"), None, 1).unwrap_err();
    assert!(matches!(err, AppendError::MissingMarker { .. }));
    assert_eq!(err.rule(), "S3");
    assert!(
        err.to_string().contains("requires a surfaceOp marker"),
        "{err}"
    );
}

#[test]
fn tv4_empty_sources_only_on_assistant_messages() {
    let mut s = session();
    s.append(user("u0"), append(), 1).unwrap();
    let err = s
        .append(user("u1"), Some(SurfaceIntent::append_citing(vec![])), 1)
        .unwrap_err();
    assert_eq!(err, AppendError::EmptySources);
    let e = s
        .append(
            assistant("a", ""),
            Some(SurfaceIntent::append_citing(vec![])),
            2,
        )
        .unwrap();
    assert_eq!(e.seq(), 1);
    assert_eq!(e.source_event_seqs(), Some(&[][..]));
    assert_eq!(s.surface().nodes, &[0, 1]);
    // P2: an assistant message with no content derives to nothing.
    let d = s.derive_messages();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].id.as_str(), "u0");
}

fn three_users() -> Session {
    let mut s = session();
    for i in 0..3 {
        s.append(user(&format!("u{i}")), append(), i).unwrap();
    }
    s
}

#[test]
#[cfg_attr(
    not(all(feature = "error-texts", feature = "surface-replace")),
    ignore = "needs the `error-texts`, `surface-replace` features"
)]
fn tv5_range_replace() {
    let mut s = three_users();
    let missing_one = s
        .append(
            assistant("sum", "summary"),
            Some(SurfaceIntent::replace(0, 1, vec![0])),
            5,
        )
        .unwrap_err();
    assert_eq!(
        missing_one,
        AppendError::MissingCoverage { missing: vec![1] }
    );
    assert!(
        missing_one.to_string().contains("missing 1"),
        "{missing_one}"
    );
    let e = SessionEvent::new(3, 5, assistant("sum", "summary"))
        .with_surface(SurfaceOp::Replace { start: 0, end: 1 }, None);
    let missing_both = s.append_event(e).unwrap_err();
    assert!(
        missing_both.to_string().contains("missing 0, 1"),
        "{missing_both}"
    );
    assert_eq!(s.len(), 3, "rejections leave the log unchanged");
    let e = s
        .append(
            assistant("sum", "summary"),
            Some(SurfaceIntent::replace(0, 1, vec![0, 1])),
            5,
        )
        .unwrap();
    assert_eq!(e.seq(), 3);
    assert_eq!(s.surface().nodes, &[3, 2]);
    assert_eq!(s.surface().replace_generation, 1);
}

#[test]
#[cfg_attr(
    not(all(feature = "error-texts", feature = "surface-replace")),
    ignore = "needs the `error-texts`, `surface-replace` features"
)]
fn tv6_surface_order_not_numeric_order() {
    let mut s = three_users();
    s.append(
        assistant("sum", "summary"),
        Some(SurfaceIntent::replace(0, 1, vec![0, 1])),
        5,
    )
    .unwrap();
    let reversed = s
        .append(
            assistant("x", "x"),
            Some(SurfaceIntent::replace(2, 3, vec![2, 3])),
            6,
        )
        .unwrap_err();
    assert_eq!(reversed, AppendError::RangeReversed { start: 2, end: 3 });
    let gone = s
        .append(
            assistant("x", "x"),
            Some(SurfaceIntent::replace(0, 0, vec![0])),
            6,
        )
        .unwrap_err();
    assert_eq!(
        gone,
        AppendError::RangeNotFound {
            which: "start",
            seq: 0
        }
    );
    assert!(
        gone.to_string()
            .contains("start seq 0 not found in surface")
    );
    let e = s
        .append(
            assistant("y", "y"),
            Some(SurfaceIntent::replace(3, 2, vec![3, 2])),
            6,
        )
        .unwrap();
    assert_eq!(e.seq(), 4);
    assert_eq!(s.surface().nodes, &[4]);
    assert_eq!(s.surface().replace_generation, 2);
}

#[test]
fn tv7_provenance_bounds() {
    let mut s = session();
    s.append(user("u0"), append(), 1).unwrap();
    let cite = |v: Vec<u64>| Some(SurfaceIntent::append_citing(v));
    assert_eq!(
        s.append(user("u1"), cite(vec![1]), 2).unwrap_err(),
        AppendError::SourceNotEarlier {
            seq: 1,
            event_seq: 1
        }
    );
    assert_eq!(
        s.append(user("u1"), cite(vec![0, 0]), 2).unwrap_err(),
        AppendError::DuplicateSource { seq: 0 }
    );
    assert_eq!(
        s.append(user("u1"), cite(vec![1 << 53]), 2).unwrap_err(),
        AppendError::SourceNotSafeInteger { value: 1 << 53 }
    );
    // [-1] and [0.5] cannot be built in Rust; read from a log they break S6.
    for bad in ["[-1]", "[0.5]"] {
        let line = format!(
            r#"{{"type":"user/message","seq":1,"time":2,"data":{{"content":[],"source":{{"kind":"user"}},"role":"user","id":"u1"}},"sourceEventSeqs":{bad},"surfaceOp":"append"}}"#
        );
        let err = decode(&line).unwrap_err();
        assert!(err.to_string().contains("S6"), "{bad}: {err}");
    }
    assert_eq!(s.append(user("u1"), cite(vec![0]), 2).unwrap().seq(), 1);
}

fn tool_result_with(id: &str, text: &str, is_error: bool, meta: Option<&str>) -> ToolResult {
    let mut r = ToolResult::new(
        1,
        1,
        Message::tool_result(id, "c", vec![ContentBlock::text(text)], is_error),
    );
    r.meta = meta.map(|m| serde_json::value::RawValue::from_string(m.into()).unwrap());
    r
}

#[test]
#[cfg_attr(
    not(all(feature = "error-texts", feature = "surface-replace")),
    ignore = "needs the `error-texts`, `surface-replace` features"
)]
fn tv8_tool_result_rewrite() {
    let mut s = session();
    s.append(
        tool_result_with("m1", "big output", false, None),
        append(),
        1,
    )
    .unwrap();
    let replace = || Some(SurfaceIntent::replace(0, 0, vec![0]));
    for bad in [
        tool_result_with("m1", "[pruned]", true, None),
        tool_result_with("m2", "[pruned]", false, None),
        tool_result_with("m1", "[pruned]", false, Some(r#"{"x":1}"#)),
    ] {
        let err = s.append(bad, replace(), 2).unwrap_err();
        assert_eq!(err, AppendError::RewriteChangesMoreThanContent { seq: 0 });
        assert!(err.to_string().contains("may change only content"));
    }
    let e = s
        .append(
            tool_result_with("m1", "[pruned]", false, None),
            replace(),
            2,
        )
        .unwrap();
    assert_eq!(e.seq(), 1);
    assert_eq!(s.surface().nodes, &[1]);
    // Replacing a user/message node with a tool/result.
    let mut s = session();
    s.append(user("u"), append(), 1).unwrap();
    let err = s
        .append(tool_result_with("m1", "x", false, None), replace(), 2)
        .unwrap_err();
    assert_eq!(err, AppendError::RewriteTargetNotToolResult { seq: 0 });
    assert!(
        err.to_string()
            .contains("must target a current tool/result")
    );
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn tv9_seed_contiguity_and_envelope() {
    let seed = vec![
        SessionEvent::new(0, 1, TurnStart::new(1)),
        SessionEvent::new(5, 2, TurnEnd::new(1, TurnEndReason::Completed)),
    ];
    let err = Session::from_seed(SessionHeader::new("s", 0), seed, 3).unwrap_err();
    assert_eq!(err.index, 1);
    assert_eq!(
        err.error,
        AppendError::SeqMismatch {
            expected: 1,
            got: 5
        }
    );
    assert!(
        err.to_string().starts_with("seed event at index 1"),
        "{err}"
    );
    // V2: an extra envelope key.
    let err = decode(r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"extra":true}"#)
        .unwrap_err();
    assert!(err.to_string().contains("unknown envelope key"), "{err}");
    // E7: ignorable must be literally true.
    let err =
        decode(r#"{"type":"x/y","seq":0,"time":1,"data":null,"ignorable":false}"#).unwrap_err();
    assert!(err.to_string().contains("ignorable"), "{err}");
    let line = r#"{"type":"x/y","seq":0,"time":1,"data":null,"ignorable":true}"#;
    let e = decode(line).unwrap();
    assert!(e.ignorable());
    let s = Session::from_seed(SessionHeader::new("s", 0), vec![e], 3).unwrap();
    assert_eq!(s.events()[0].to_json(), line, "preserved");
}

#[test]
fn tv10_end_seed() {
    let s = Session::from_seed(SessionHeader::new("id", 0), vec![], 77).unwrap();
    assert_eq!(s.events().len(), 1);
    assert_eq!(
        s.events()[0].to_json(),
        r#"{"type":"session/end-seed","seq":0,"time":77,"data":{}}"#
    );
    assert_eq!(s.first_live_seq(), 0);
    let s2 = Session::from_seed(SessionHeader::new("id2", 0), s.events().to_vec(), 99).unwrap();
    assert_eq!(s2.events(), s.events(), "ES3: no second marker");
    assert_eq!(s2.first_live_seq(), 1);
    let s3 = Session::new(SessionHeader::new("id3", 0));
    assert!(s3.events().is_empty());
}

fn tv11_source() -> Session {
    let mut s = Session::new({
        let mut session_header = SessionHeader::new("src", 0);
        session_header.cwd = Some("/w".into());
        session_header
    });
    s.append(TurnStart::new(1), None, 1).unwrap();
    s.append(user("u1"), append(), 2).unwrap();
    s.append(TurnEnd::new(1, TurnEndReason::Completed), None, 3)
        .unwrap();
    s.append(EventData::plugin("plugin/x", &json!({"k": 1})), None, 4)
        .unwrap();
    s.append(TurnStart::new(2), None, 5).unwrap();
    s.append(user("u2"), append(), 6).unwrap();
    s
}

#[test]
fn tv11_fork() {
    let src = tv11_source();
    let child = src.fork(Some(3), "child", 100).unwrap();
    assert_eq!(child.header().seed_length, Some(4));
    assert_eq!(
        child.header().parent_session.as_ref().unwrap().as_str(),
        "src"
    );
    assert_eq!(child.header().cwd.as_deref(), Some("/w"), "F7: cwd copied");
    assert_eq!(child.header().created_at, 100);
    assert_eq!(child.events().len(), 5);
    assert_eq!(&child.events()[..4], &src.events()[..4]);
    assert_eq!(child.events()[4].event_type(), types::END_SEED);
    assert_eq!(child.events()[4].seq(), 4);
    let open = src.fork(None, "c2", 100).unwrap_err();
    assert_eq!(open, ForkError::OpenTurn { boundary: 5 });
    assert_eq!(open.code(), "OPEN_TURN");
    let bad = src.fork(Some(6), "c3", 100).unwrap_err();
    assert_eq!(bad.code(), "INVALID_BOUNDARY");
    // F3: an empty source forks to an empty seed (then the end-seed).
    let empty = session().fork(None, "c4", 1).unwrap();
    assert_eq!(empty.events().len(), 1);
}

fn header(model: &str, system: Option<&str>, tools: Option<Vec<ToolSchema>>) -> RequestHeader {
    let mut h = EpochHeader::new(LlmCallConfig::new("p", model));
    h.system = system.map(String::from);
    h.tools = tools;
    RequestHeader::new(h, HeaderReason::Initial)
}

#[test]
fn tv12_header_canonicalization() {
    let mut s = session();
    s.append(TurnStart::new(1), None, 1).unwrap();
    assert!(s.request_header().is_none(), "none before the first header");
    let mut first = header("m", Some(""), Some(vec![]));
    first.header.adapter_defaults = Some(Default::default());
    s.append(first, None, 2).unwrap();
    assert_eq!(
        serde_json::to_string(&**s.request_header().unwrap()).unwrap(),
        r#"{"config":{"provider":"p","model":"m"}}"#
    );
    let mut second = header("m2", Some("s"), None);
    second.reason = HeaderReason::Change;
    s.append(second, None, 3).unwrap();
    assert_eq!(
        serde_json::to_string(&**s.request_header().unwrap()).unwrap(),
        r#"{"config":{"provider":"p","model":"m2"},"system":"s"}"#
    );
    // 7.2: {config} equals {config, tools: []}.
    let a = EpochHeader::new(LlmCallConfig::new("p", "m"));
    let mut b = a.clone();
    b.tools = Some(vec![]);
    assert!(a.same_as(&b));
    let mut c = a.clone();
    c.tools = Some(vec![ToolSchema::new("t", "d", json!({"type": "object"}))]);
    assert!(!a.same_as(&c));
    // H3: the last request/context.
    s.append(RequestContext::new("p", "m2", Some(128000)), None, 4)
        .unwrap();
    assert_eq!(s.request_context().unwrap().context_window, Some(128000));
}

#[test]
fn tv13_json_domain() {
    let mut s = session();
    let err = s
        .append(EventData::plugin("x/y", &json!({"v": -0.0})), None, 1)
        .unwrap_err();
    assert!(matches!(err, AppendError::NotLosslessJson { .. }), "{err}");
    assert!(s.is_empty(), "log unchanged");
    let ok = s
        .append(EventData::plugin("x/y", &json!({"v": 0})), None, 1)
        .unwrap();
    assert_eq!(ok.seq(), 0);
    // A non-finite float in a typed field.
    let retry = LlmRetry {
        retry_id: None,
        turn: 1,
        step: 1,
        provider: "p".into(),
        mode: "normal".into(),
        policy_key: "[]".into(),
        retry: 1,
        max_retries: Some(2),
        delay_ms: f64::NAN,
        failure: LlmFailure::new("SERVER", "busy"),
    };
    assert!(matches!(
        s.append(retry, None, 2).unwrap_err(),
        AppendError::NotLosslessJson { .. }
    ));
    // A stored -0 is rejected on load too (V1).
    let err = decode(r#"{"type":"x/y","seq":0,"time":1,"data":{"v":-0}}"#)
        .map(|e| Session::restore(SessionHeader::new("s", 0), vec![e]))
        .unwrap()
        .unwrap_err();
    assert!(matches!(err.error, AppendError::NotLosslessJson { .. }));
}

fn tv14_prefix() -> Vec<SessionEvent> {
    let asst = AssistantMessage::new(
        1,
        1,
        Message::model(
            "a",
            vec![ContentBlock::tool_call("c1", "bash", "{}")],
            MessageSource::model("p", "m"),
        ),
    );
    vec![
        SessionEvent::new(0, 1, TurnStart::new(1)),
        SessionEvent::new(1, 1, EventData::StepStart(Step::new(1, 1))),
        SessionEvent::new(2, 1, asst).with_surface(SurfaceOp::Append, None),
        SessionEvent::new(3, 1, ToolCall::new(1, 1, "c1".into(), "bash", "{}")),
        SessionEvent::new(4, 1, EventData::StepEnd(Step::new(1, 1))),
        SessionEvent::new(5, 1, EventData::StepStart(Step::new(1, 2))),
    ]
}

#[test]
fn tv14_invariants() {
    let mut events = tv14_prefix();
    let mut late = tool_result("r", "c1", "out");
    late.step = 2;
    events.push(SessionEvent::new(6, 1, late).with_surface(SurfaceOp::Append, None));
    let v = InvariantChecker::check_log(&events).unwrap_err();
    assert_eq!((v.rule, v.seq), ("I7", 6));
    assert!(v.message.contains("no prior tool/call in this step"), "{v}");
    // A synthetic not-started result passes I7.
    let mut events = tv14_prefix();
    let mut synthetic = ToolResult::new(
        1,
        2,
        Message::tool_result("r", "c1", vec![ContentBlock::text("x")], true),
    );
    synthetic.error = Some(ToolError::new("ToolNotStartedError", "TOOL_NOT_STARTED"));
    events.push(SessionEvent::new(6, 1, synthetic).with_surface(SurfaceOp::Append, None));
    InvariantChecker::check_log(&events).unwrap();
}

#[test]
fn invariants_number_turns_and_steps() {
    let ev = |seq, d: EventData| SessionEvent::new(seq, 0, d);
    let two = vec![ev(0, TurnStart::new(2).into())];
    assert_eq!(InvariantChecker::check_log(&two).unwrap_err().rule, "I2");
    let nested = vec![
        ev(0, TurnStart::new(1).into()),
        ev(1, TurnStart::new(2).into()),
    ];
    assert_eq!(InvariantChecker::check_log(&nested).unwrap_err().rule, "I2");
    let open_step = vec![
        ev(0, TurnStart::new(1).into()),
        ev(1, EventData::StepStart(Step::new(1, 1))),
        ev(2, TurnEnd::new(1, TurnEndReason::Completed).into()),
    ];
    assert_eq!(
        InvariantChecker::check_log(&open_step).unwrap_err().rule,
        "I3"
    );
    let skip = vec![
        ev(0, TurnStart::new(1).into()),
        ev(1, EventData::StepStart(Step::new(1, 2))),
    ];
    assert_eq!(InvariantChecker::check_log(&skip).unwrap_err().rule, "I4");
    let outside = vec![ev(
        0,
        AssistantChunk::new(
            1,
            1,
            StreamChunk::TextDelta {
                index: 0,
                text: "x".into(),
            },
        )
        .into(),
    )];
    assert_eq!(
        InvariantChecker::check_log(&outside).unwrap_err().rule,
        "I6"
    );
    // I12: check does not mutate.
    let c = InvariantChecker::new();
    c.check(&ev(0, TurnStart::new(1).into())).unwrap();
    assert_eq!(c.open_turn(), None);
}

#[test]
fn tv15_derive_skips_non_messages() {
    let mut s = session();
    s.append(user("u"), append(), 1).unwrap();
    s.append(
        AssistantChunk::new(
            1,
            1,
            StreamChunk::TextDelta {
                index: 0,
                text: "x".into(),
            },
        ),
        None,
        2,
    )
    .unwrap();
    s.append(assistant("a", ""), append(), 3).unwrap();
    s.append(tool_result("t", "c", "out"), append(), 4).unwrap();
    let d = s.derive_messages().to_vec();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].id.as_str(), "u");
    assert_eq!(
        serde_json::to_value(&*d[1]).unwrap(),
        json!({"source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[{"type":"text","text":"out"}],"isError":false}],"role":"user","id":"t"})
    );
}

#[test]
fn m_rules_apply_to_live_appends() {
    let mut s = session();
    let no_id = Message::user("", vec![]);
    let err = s.append(no_id, append(), 1).unwrap_err();
    assert_eq!(err.rule(), "M1");
    let mut wrong_role = user("u");
    wrong_role.role = dsh_core::Role::Assistant;
    assert_eq!(s.append(wrong_role, append(), 1).unwrap_err().rule(), "M2");
    let mut plugin_source = assistant("a", "x");
    Arc::make_mut(&mut plugin_source.message).source = MessageSource::plugin("p");
    assert_eq!(
        s.append(plugin_source, append(), 1).unwrap_err().rule(),
        "M5"
    );
    let mut mismatched = tool_result("t", "c", "x");
    Arc::make_mut(&mut mismatched.message).source = MessageSource::Tool {
        call_id: "other".into(),
    };
    assert_eq!(s.append(mismatched, append(), 1).unwrap_err().rule(), "M6");
    // A stored message without an id (legacy shape) is invalid on load.
    let err = decode(
        r#"{"type":"user/message","seq":0,"time":1,"data":{"content":[],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
    )
    .unwrap_err();
    assert_eq!(err.rule(), "M1");
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn v4_and_retired_formats() {
    let mut s = session();
    let mut h = header("", None, None);
    assert_eq!(s.append(h.clone(), None, 1).unwrap_err().rule(), "V4");
    h.header.config.model = "m".into();
    h.header.adapter_defaults = Some({
        let mut adapter_defaults = dsh_core::AdapterDefaults::default();
        adapter_defaults.reasoning_effort = Some(true);
        adapter_defaults.max_tokens = None;
        adapter_defaults
    });
    let err = s.append(h.clone(), None, 1).unwrap_err();
    assert!(
        err.to_string().contains("requires config.reasoningEffort"),
        "{err}"
    );
    h.header.adapter_defaults = None;
    h.reason = HeaderReason::Other("fallback".into());
    assert_eq!(s.append(h, None, 1).unwrap_err().rule(), "A2");
    let delta = EventData::plugin("request/header-delta", &json!({}));
    assert_eq!(s.append(delta, None, 1).unwrap_err().rule(), "A2");
    assert!(s.is_empty());
}

#[test]
fn e9_envelope_key_order_and_spec_payloads() {
    let mut s = session();
    s.append(user("u"), append(), 1).unwrap();
    let e = s
        .append(
            tool_result("t", "c", "ok"),
            Some(SurfaceIntent::append_citing(vec![0])),
            2,
        )
        .unwrap();
    let json = e.to_json();
    assert!(
        json.starts_with(
            r#"{"type":"tool/result","seq":1,"time":2,"data":{"turn":1,"step":1,"message":"#
        ),
        "{json}"
    );
    assert!(
        json.ends_with(r#","sourceEventSeqs":[0],"surfaceOp":"append"}"#),
        "{json}"
    );
    // serde's Serialize agrees with the JSONL writer.
    assert_eq!(serde_json::to_string(e).unwrap(), json);
    let reason = TurnEndReason::Aborted {
        cause: AbortCause::Hook {
            reason: "no".into(),
        },
    };
    let end = SessionEvent::new(9, 3, TurnEnd::new(1, reason));
    assert_eq!(
        end.to_json(),
        r#"{"type":"turn/end","seq":9,"time":3,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"hook","reason":"no"}}}}"#
    );
}

/// Every example line of session.md section 4 reads into its typed payload
/// and writes back byte for byte.
#[test]
fn spec_examples_round_trip_typed() {
    let lines = [
        r#"{"type":"turn/start","seq":1,"time":1785821362944,"data":{"turn":1}}"#,
        r#"{"type":"turn/end","seq":103,"time":1785730417601,"data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        r#"{"type":"turn/end","seq":3,"time":1,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"simulated provider error (HTTP 401)","code":"AUTH"}}}}"#,
        r#"{"type":"turn/end","seq":3,"time":1,"data":{"turn":1,"reason":{"kind":"future","x":1}}}"#,
        r#"{"type":"step/start","seq":3,"time":1783352044773,"data":{"turn":1,"step":1}}"#,
        r#"{"type":"assistant/chunk","seq":9,"time":1783352045396,"data":{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"reasoning"}}}"#,
        r#"{"type":"assistant/chunk","seq":9,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"call_00_x","name":"bash","argumentsDelta":"{"}}}"#,
        r#"{"type":"assistant/chunk","seq":9,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"usage","usage":{"inputTokens":2879,"outputTokens":89,"cacheReadTokens":0,"reasoningTokens":17}}}}"#,
        r#"{"type":"tool/call","seq":64,"time":1785730417568,"data":{"turn":1,"step":1,"callId":"call_00_R","name":"bash","arguments":"{\"command\": \"echo SNAPSHOT_OK\"}"}}"#,
        r#"{"type":"todo/write","seq":16,"time":1785730442294,"data":{"todos":[{"content":"watch the kettle boil","status":"in_progress"}]}}"#,
        r#"{"type":"request/header","seq":12,"time":1786073817224,"data":{"header":{"config":{"provider":"deepseek-official","model":"deepseek-v4-flash","reasoningEffort":"high","maxTokens":256000},"adapterDefaults":{"reasoningEffort":true,"maxTokens":true},"system":"You are ...","tools":[{"name":"bash","description":"...","parameters":{"type":"object"}}]},"reason":"initial"}}"#,
        r#"{"type":"request/context","seq":8,"time":1785730417557,"data":{"provider":"deepseek-official","model":"deepseek-v4-flash","contextWindow":128000}}"#,
        r#"{"type":"session/end-seed","seq":8,"time":1786333735890,"data":{}}"#,
        r#"{"type":"llm/retry","seq":11,"time":1,"data":{"retryId":"r","turn":1,"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"[]","retry":1,"maxRetries":2,"delayMs":467.25,"failure":{"message":"busy","code":"RATE_LIMIT","status":429}}}"#,
        r#"{"type":"agent/inbox/spliced","seq":2,"time":1,"data":{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}}"#,
    ];
    for line in lines {
        let e = decode(line).unwrap();
        assert!(!matches!(e.data(), EventData::Plugin(_)), "{line} is typed");
        assert_eq!(e.to_json(), line);
        // The typed serialization (not a kept source text) reproduces it.
        let rebuilt = SessionEvent::new(e.seq(), e.time(), e.data().clone());
        assert_eq!(rebuilt.to_json(), line);
    }
}

/// J7: a core event whose text the canonical writer would not reproduce
/// (number text, key order) keeps its source text byte for byte.
#[test]
fn j7_number_text_and_key_order_are_kept() {
    for line in [
        r#"{"type":"llm/retry","seq":1,"time":1,"data":{"turn":1,"step":1,"provider":"p","mode":"always","policyKey":"[]","retry":1,"delayMs":1e+21,"failure":{"message":"m","code":"C"}}}"#,
        r#"{"type":"step/end","seq":1,"time":1,"data":{"step":1,"turn":1}}"#,
        r#"{"seq":1,"type":"turn/start","time":1,"data":{"turn":1}}"#,
        r#"{"type":"hook/result","seq":60,"time":1,"data":{"decision":"block","durationMs":4.435375000000022}}"#,
    ] {
        let e = decode(line).unwrap();
        assert_eq!(e.to_json(), line);
    }
}

#[test]
fn plugin_events_are_carried_verbatim() {
    let line = r#"{"type":"goal/change","seq":0,"time":5,"data":{"b":1,"a":[1.50,{"z":null}],"n":12345678901234567890}}"#;
    let e = decode(line).unwrap();
    match e.data() {
        EventData::Plugin(p) => {
            assert_eq!(p.event_type, "goal/change");
            assert_eq!(
                p.data.get(),
                r#"{"b":1,"a":[1.50,{"z":null}],"n":12345678901234567890}"#
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.to_json(), line);
    let built = PluginEvent::from_json("x/y", r#"{"k":[1,2]}"#).unwrap();
    assert_eq!(
        SessionEvent::new(1, 2, built).to_json(),
        r#"{"type":"x/y","seq":1,"time":2,"data":{"k":[1,2]}}"#
    );
}

#[test]
fn append_error_leaves_state_and_check_is_a_dry_run() {
    let mut s = session();
    s.append(user("u"), append(), 1).unwrap();
    let before = s.derive_messages().len();
    let e = SessionEvent::new(1, 2, user("v"));
    assert!(s.check(&e).is_err(), "S3");
    let e = e.with_surface(SurfaceOp::Append, None);
    s.check(&e).unwrap();
    assert_eq!(s.len(), 1, "check does not append");
    s.append_event(e).unwrap();
    assert_eq!(s.derive_messages().len(), before + 1);
    let wrong_seq = SessionEvent::new(7, 2, TurnStart::new(1));
    assert_eq!(
        s.append_event(wrong_seq).unwrap_err(),
        AppendError::SeqMismatch {
            expected: 2,
            got: 7
        }
    );
}

#[test]
#[cfg_attr(
    not(feature = "surface-replace"),
    ignore = "needs the `surface-replace` feature"
)]
fn fold_surface_records_replacements() {
    let mut s = three_users();
    s.append(
        assistant("sum", "summary"),
        Some(SurfaceIntent::replace(0, 1, vec![0, 1])),
        5,
    )
    .unwrap();
    let fold = dsh_core::session::fold_surface(s.events()).unwrap();
    assert_eq!(
        serde_json::to_string(&fold).unwrap(),
        r#"{"nodes":[3,2],"replacements":[{"seq":3,"start":0,"end":1,"shadowedSeqs":[0,1]}]}"#
    );
    // It throws where the incremental path rejects (S7 here).
    let mut events = s.events().to_vec();
    events.push(
        SessionEvent::new(4, 6, user("x"))
            .with_surface(SurfaceOp::Replace { start: 3, end: 2 }, Some(vec![3])),
    );
    let err = dsh_core::session::fold_surface(&events).unwrap_err();
    assert_eq!(err.index, 4);
    assert_eq!(err.error.rule(), "S7");
}

#[test]
fn h1_fold_request_header_is_pure() {
    let events = vec![
        SessionEvent::new(0, 1, TurnStart::new(1)),
        SessionEvent::new(1, 1, header("m", Some(""), None)),
        SessionEvent::new(2, 1, header("m2", Some("s"), None)),
    ];
    let folded = dsh_core::session::fold_request_header(&events, None).unwrap();
    assert_eq!(folded.config.model, "m2");
    assert_eq!(folded.system.as_deref(), Some("s"));
    let start = EpochHeader::new(LlmCallConfig::new("p", "x"));
    let kept = dsh_core::session::fold_request_header(&events[..1], Some(start.clone()));
    assert_eq!(kept, Some(start));
    let first = dsh_core::session::fold_request_header(&events[..2], None).unwrap();
    assert_eq!(first.system, None, "empty system is dropped (7.1)");
}

#[test]
#[cfg_attr(
    not(feature = "error-texts"),
    ignore = "needs the `error-texts` feature"
)]
fn decode_errors_name_their_rules() {
    let base = r#"{"type":"user/message","seq":0,"time":1,"data":{"content":[],"source":{"kind":"user"},"role":"user","id":"u"}"#;
    for (tail, rule) in [
        (r#","surfaceOp":"prepend"}"#, "S5"),
        (r#","surfaceOp":{"op":"replace","start":0}}"#, "S5"),
        (r#","surfaceOp":"append","sourceEventSeqs":5}"#, "S6"),
        (r#","surfaceOp":"append","ignorable":1}"#, "E7"),
        (r#","surfaceOp":"append","other":1}"#, "V2"),
    ] {
        let err = decode(&format!("{base}{tail}")).unwrap_err();
        assert_eq!(err.rule(), rule, "{tail}: {err}");
    }
    // An extra key in a core payload loads leniently, naming E4 as the
    // deviation; the strict decoder refuses it with the same rule.
    let end_seed = r#"{"type":"session/end-seed","seq":0,"time":1,"data":{"x":1}}"#;
    let e = decode(end_seed).unwrap();
    assert_eq!(e.deviation().map(|d| d.rule()), Some("E4"));
    assert_eq!(e.to_json(), end_seed);
    match Decoder::strict().decode_line(end_seed.as_bytes()) {
        Ok(Record::One(Decoded::Invalid(i))) => assert_eq!(i.error.rule(), "E4"),
        other => panic!("{other:?}"),
    }
    let err = decode(r#"{"type":"turn/start","seq":0,"time":1}"#).unwrap_err();
    assert!(err.to_string().contains("\"data\" is required"), "{err}");
}

#[test]
fn restore_then_mark_end_seed_resumes() {
    let src = tv11_source();
    let mut s = Session::restore(src.header().clone(), src.events()[..4].to_vec()).unwrap();
    assert_eq!(s.first_live_seq(), 4);
    s.mark_end_seed(50).unwrap();
    assert_eq!(
        s.last_event().unwrap().to_json(),
        r#"{"type":"session/end-seed","seq":4,"time":50,"data":{}}"#
    );
    s.mark_end_seed(60).unwrap();
    assert_eq!(s.len(), 5, "ES3: not marked twice");
    assert_eq!(s.first_live_seq(), 4);
    // New live events follow the marker.
    assert_eq!(s.append(TurnStart::new(2), None, 61).unwrap().seq(), 5);
}

#[test]
fn j6_plugin_values_are_written_like_json_stringify() {
    let p = PluginEvent::new(
        "x/y",
        &json!({"int": 1.0, "big": 1e21, "small": 1e-7, "frac": 0.000001, "s": "é\u{1}/", "n": -3}),
    );
    assert_eq!(
        p.data.get(),
        r#"{"int":1,"big":1e+21,"small":1e-7,"frac":0.000001,"s":"é\u0001/","n":-3}"#
    );
}
