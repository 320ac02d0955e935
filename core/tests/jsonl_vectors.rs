//! The JSONL test vectors of spec/persistence.md (TP-1..TP-10, TP-13), the
//! crash-repair contract cases CT3–CT5, packed-row rules CK1–CK17, the
//! scanner rules SC1–SC6, header rules HL1/HL2 and the fixture tokens.

use dsh_core::jsonl::{
    self, Decoded, Decoder, LogError, Record, TOOL_NOT_STARTED_TEXT, TOOL_OUTCOME_UNKNOWN_TEXT,
    encode_batch, encode_header_line, fixture_tokens, interrupted_turn_closers, load_log, scan_log,
};
use dsh_core::session::{
    AssistantChunk, AssistantMessage, EventData, Step, ToolCall, TurnEnd, TurnEndReason, TurnStart,
};
use dsh_core::{
    ContentBlock, Message, MessageSource, Session, SessionEvent, SessionHeader, StreamChunk,
    SurfaceOp,
};
use proptest::prelude::*;

const H: &str =
    r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/w","delegationDepth":0}"#;

fn chunk(seq: u64, time: i64, turn: u64, step: u64, c: StreamChunk) -> SessionEvent {
    SessionEvent::new(seq, time, AssistantChunk::new(turn, step, c))
}

fn text(seq: u64, time: i64, index: u64, t: &str) -> SessionEvent {
    chunk(
        seq,
        time,
        2,
        1,
        StreamChunk::TextDelta {
            index,
            text: t.into(),
        },
    )
}

fn tool_delta(seq: u64, time: i64, name: Option<&str>, args: &str) -> SessionEvent {
    chunk(
        seq,
        time,
        1,
        1,
        StreamChunk::ToolCallDelta {
            index: 1,
            head: dsh_core::ToolCallHead::owned("c".into(), name.map(String::from)),
            arguments_delta: args.into(),
        },
    )
}

fn encode(events: &[SessionEvent]) -> String {
    let mut out = Vec::new();
    encode_batch(events, true, &mut out);
    String::from_utf8(out).unwrap()
}

fn decode_run(line: &str) -> Vec<SessionEvent> {
    match Decoder::new().decode_line(line.as_bytes()) {
        Ok(Record::Run(events)) => events,
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn tp1_text_run_packs() {
    let times = [1000, 1003, 1003, 1010, 1009];
    let texts = ["Hel", "lo", ",", " wor", "ld"];
    let batch: Vec<_> = (0..5)
        .map(|k| text(7 + k as u64, times[k], 0, texts[k]))
        .collect();
    let out = encode(&batch);
    assert_eq!(
        out,
        "{\"type\":\"text-chunks\",\"seq0\":7,\"time0\":1000,\"data\":{\"turn\":2,\"step\":1,\"index\":0,\"dt\":[3,0,7,-1],\"texts\":[\"Hel\",\"lo\",\",\",\" wor\",\"ld\"]}}\n"
    );
    let back = decode_run(out.trim_end());
    assert_eq!(back, batch);
    let got: Vec<i64> = back.iter().map(|e| e.time()).collect();
    assert_eq!(got, times);
}

#[test]
fn tp2_tool_call_run() {
    let batch = vec![
        tool_delta(28, 5, Some("bash"), ""),
        tool_delta(29, 5, Some("bash"), "{"),
        tool_delta(30, 6, Some("bash"), "}"),
    ];
    let out = encode(&batch);
    assert_eq!(
        out,
        "{\"type\":\"tool-call-chunks\",\"seq0\":28,\"time0\":5,\"data\":{\"turn\":1,\"step\":1,\"index\":1,\"dt\":[0,1],\"id\":\"c\",\"name\":\"bash\",\"args\":[\"\",\"{\",\"}\"]}}\n"
    );
    assert_eq!(decode_run(out.trim_end()), batch);
    let mixed = vec![
        tool_delta(28, 5, Some("bash"), ""),
        tool_delta(29, 5, Some("bash"), "{"),
        tool_delta(30, 6, None, "}"),
    ];
    let out = encode(&mixed);
    assert_eq!(out.lines().count(), 3);
    assert!(
        out.lines()
            .all(|l| l.starts_with("{\"type\":\"assistant/chunk\""))
    );
}

#[test]
fn tp3_short_runs_and_breaks_stay_verbatim() {
    let two = vec![text(0, 1, 0, "a"), text(1, 1, 0, "b")];
    assert_eq!(encode(&two).lines().count(), 2);
    let start = chunk(
        0,
        1,
        2,
        1,
        StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into(),
        },
    );
    let end = chunk(
        4,
        1,
        2,
        1,
        StreamChunk::block_end(0, ContentBlock::text("abc")),
    );
    let batch = vec![
        start,
        text(1, 1, 0, "a"),
        text(2, 1, 0, "b"),
        text(3, 1, 0, "c"),
        end,
    ];
    let out = encode(&batch);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].contains("block-start"));
    assert!(lines[1].starts_with("{\"type\":\"text-chunks\",\"seq0\":1,"));
    assert!(lines[2].contains("block-end"));
    let broken = vec![text(0, 1, 0, "a"), text(1, 1, 0, "b"), text(2, 1, 7, "c")];
    assert_eq!(encode(&broken).lines().count(), 3);
    // CK2: a marked event is never packed.
    let mut marked = vec![text(0, 1, 0, "a"), text(1, 1, 0, "b"), text(2, 1, 0, "c")];
    marked[1] = marked[1].clone().with_ignorable();
    assert_eq!(encode(&marked).lines().count(), 3);
    // CK7: a seq gap breaks the run.
    let gap = vec![text(0, 1, 0, "a"), text(1, 1, 0, "b"), text(3, 1, 0, "c")];
    assert_eq!(encode(&gap).lines().count(), 3);
}

#[test]
fn tp4_malformed_row() {
    let row = r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}}"#;
    let err = Decoder::new().decode_line(row.as_bytes()).unwrap_err();
    assert!(
        err.reason.starts_with("malformed text-chunks storage row"),
        "{err}"
    );
    let file = format!(
        "{H}\n{row}\n{}\n",
        r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
    );
    let err = scan_log(file.as_bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt session log: unparsable committed event at line 1"
    );
    for bad in [
        r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}"#,
        r#"{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a",2]}}"#,
        r#"{"type":"text-chunks","seq0":0,"time0":1,"extra":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}"#,
        r#"{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}}"#,
        r#"{"type":"text-chunks","seq0":9007199254740991,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}}"#,
    ] {
        assert!(Decoder::new().decode_line(bad.as_bytes()).is_err(), "{bad}");
    }
    // JSONL accepts a one-member row (CK15).
    let one = r#"{"type":"reasoning-chunks","seq0":3,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}"#;
    assert_eq!(decode_run(one).len(), 1);
}

#[test]
fn tp5_header_serialization() {
    let mut out = Vec::new();
    encode_header_line(&SessionHeader::new("x", 5), &mut out);
    assert_eq!(
        out,
        b"{\"type\":\"session\",\"version\":0,\"id\":\"x\",\"createdAt\":5,\"delegationDepth\":0}\n"
    );
    let back = jsonl::decode_header_line(&out).unwrap();
    assert_eq!(back.delegation_depth, Some(0));
    let err =
        jsonl::decode_header_line(br#"{"type":"session","version":0,"id":"x","createdAt":5}"#)
            .unwrap_err();
    assert!(err.is_corruption());
    assert!(
        err.to_string()
            .contains("first line is not a session header")
    );
    let err = jsonl::decode_header_line(
        br#"{"type":"session","version":1,"id":"x","createdAt":5,"delegationDepth":0}"#,
    )
    .unwrap_err();
    assert!(!err.is_corruption());
    assert_eq!(
        err.to_string(),
        "session \"x\" uses log format v1, but this harness reads only v0: the log was written by a newer harness \u{2014} upgrade the harness to open it"
    );
    let err =
        jsonl::decode_header_line(br#"{"type":"session","version":-1,"id":"x"}"#).unwrap_err();
    assert!(err.to_string().contains("no upgrade path"), "{err}");
    // HL1: every optional field, in order.
    let full = r#"{"type":"session","version":0,"id":"child-1","createdAt":1786333735000,"cwd":"/home/u/proj","parentSession":"p","seedLength":42,"origin":"subagent","delegationDepth":1,"agentPreset":"minimal"}"#;
    let h = jsonl::decode_header_line(full.as_bytes()).unwrap();
    let mut out = Vec::new();
    encode_header_line(&h, &mut out);
    assert_eq!(String::from_utf8(out).unwrap(), format!("{full}\n"));
    // HL2.5: retired header fields.
    let retired = br#"{"type":"session","version":0,"id":"x","createdAt":5,"delegationDepth":0,"sandboxMode":"x"}"#;
    assert!(jsonl::decode_header_line(retired).is_err());
    // No header line at all.
    assert!(
        scan_log(b"")
            .unwrap_err()
            .to_string()
            .contains("header-less")
    );
}

fn line(e: &SessionEvent) -> String {
    e.to_json()
}

fn am(seq: u64, time: i64, calls: &[&str]) -> SessionEvent {
    let content = calls
        .iter()
        .map(|c| ContentBlock::tool_call(*c, "bash", "{}"))
        .collect();
    let m = Message::model(format!("am{seq}"), content, MessageSource::model("p", "m"));
    SessionEvent::new(seq, time, AssistantMessage::new(1, 1, m))
        .with_surface(SurfaceOp::Append, None)
}

fn user_event(seq: u64, time: i64) -> SessionEvent {
    SessionEvent::new(
        seq,
        time,
        Message::user(format!("u{seq}"), vec![ContentBlock::text("hi")]),
    )
    .with_surface(SurfaceOp::Append, None)
}

fn turn_start(seq: u64, time: i64, turn: u64) -> SessionEvent {
    SessionEvent::new(seq, time, TurnStart::new(turn))
}

fn step(seq: u64, time: i64, turn: u64, s: u64, start: bool) -> SessionEvent {
    let st = Step::new(turn, s);
    SessionEvent::new(
        seq,
        time,
        if start {
            EventData::StepStart(st)
        } else {
            EventData::StepEnd(st)
        },
    )
}

fn tool_call(seq: u64, time: i64, call: &str) -> SessionEvent {
    SessionEvent::new(seq, time, ToolCall::new(1, 1, call.into(), "bash", "{}"))
}

fn turn_end(seq: u64, time: i64, turn: u64) -> SessionEvent {
    SessionEvent::new(seq, time, TurnEnd::new(turn, TurnEndReason::Completed))
}

fn file(events: &[SessionEvent], tail: &str) -> String {
    let mut s = format!("{H}\n");
    for e in events {
        s.push_str(&line(e));
        s.push('\n');
    }
    s.push_str(tail);
    s
}

#[test]
fn tp7_raw_torn_tail_with_two_calls() {
    let events = vec![
        turn_start(0, 10, 1),
        user_event(1, 11),
        step(2, 12, 1, 1, true),
        am(3, 13, &["c1", "c2"]),
        tool_call(4, 14, "c1"),
    ];
    let text = file(&events, r#"{"type":"tool/res"#);
    let loaded = load_log(text.as_bytes(), &[]).unwrap();
    let cut = text.len() - r#"{"type":"tool/res"#.len();
    assert_eq!(loaded.truncate_to, Some(cut));
    assert_eq!(loaded.stored, 5);
    let closers: Vec<String> = loaded.closers.iter().map(SessionEvent::to_json).collect();
    assert_eq!(closers.len(), 4);
    assert_eq!(
        closers[0],
        format!(
            r#"{{"type":"tool/result","seq":5,"time":14,"data":{{"turn":1,"step":1,"message":{{"id":"interrupted-tool-result-c1-5","role":"user","source":{{"kind":"tool","callId":"c1"}},"content":[{{"type":"tool-result","toolCallId":"c1","isError":true,"content":[{{"type":"text","text":"{TOOL_OUTCOME_UNKNOWN_TEXT}"}}]}}]}},"error":{{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}}}},"surfaceOp":"append","sourceEventSeqs":[4]}}"#
        )
    );
    assert_eq!(
        closers[1],
        format!(
            r#"{{"type":"tool/result","seq":6,"time":14,"data":{{"turn":1,"step":1,"message":{{"id":"interrupted-tool-result-c2-6","role":"user","source":{{"kind":"tool","callId":"c2"}},"content":[{{"type":"tool-result","toolCallId":"c2","isError":true,"content":[{{"type":"text","text":"{TOOL_NOT_STARTED_TEXT}"}}]}}]}},"error":{{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}}}},"surfaceOp":"append"}}"#
        )
    );
    assert_eq!(
        closers[2],
        r#"{"type":"step/end","seq":7,"time":14,"data":{"turn":1,"step":1}}"#
    );
    assert_eq!(
        closers[3],
        r#"{"type":"turn/end","seq":8,"time":14,"data":{"turn":1,"reason":{"kind":"interrupted"}}}"#
    );
    let seqs: Vec<u64> = loaded.session.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (0..=8).collect::<Vec<_>>());
    // The committed repair: the prefix, then the closers as one batch.
    let repaired = loaded.repaired_bytes(text.as_bytes(), true);
    let mut expected = text[..cut].to_string();
    for c in &closers {
        expected.push_str(c);
        expected.push('\n');
    }
    assert_eq!(String::from_utf8(repaired.clone()).unwrap(), expected);
    // The repaired file loads clean, and a resume marks the end of the seed at 9.
    let again = load_log(&repaired, &[]).unwrap();
    assert!(!again.needs_repair());
    let resumed = Session::from_seed(
        again.session.header().clone(),
        again.session.into_events(),
        20,
    )
    .unwrap();
    assert_eq!(resumed.last_event().unwrap().seq(), 9);
    assert_eq!(
        resumed.last_event().unwrap().event_type(),
        "session/end-seed"
    );
}

#[test]
fn tp8_bad_line_without_later_turn_end_is_torn() {
    let text = format!(
        "{H}\n{}\n{{not json\n{}\n",
        line(&turn_start(0, 1, 1)),
        line(&step(1, 2, 1, 1, true))
    );
    let scanned = scan_log(text.as_bytes()).unwrap();
    assert_eq!(scanned.events.len(), 1);
    let end_of_line1 = H.len() + 1 + line(&turn_start(0, 1, 1)).len() + 1;
    assert_eq!(scanned.committed, end_of_line1);
    let loaded = load_log(text.as_bytes(), &[]).unwrap();
    assert_eq!(loaded.truncate_to, Some(end_of_line1));
    assert_eq!(loaded.closers.len(), 1);
    assert_eq!(
        loaded.closers[0].to_json(),
        r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"interrupted"}}}"#
    );
}

#[test]
fn tp9_defect_before_a_turn_end_is_corruption() {
    let text = format!(
        "{H}\n{{not json\n{}\n",
        r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
    );
    let err = load_log(text.as_bytes(), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt session log: unparsable committed event at line 1"
    );
    let text = file(
        &[
            turn_start(0, 1, 1),
            step(2, 1, 1, 1, true),
            turn_end(3, 1, 1),
        ],
        "",
    );
    let err = load_log(text.as_bytes(), &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt session log: seq gap in committed region at line 2 (expected 1, got 2)"
    );
    // SC3: a gap record that itself holds the turn/end fails at once.
    let text = file(&[turn_start(0, 1, 1), turn_end(5, 1, 1)], "");
    assert!(load_log(text.as_bytes(), &[]).unwrap_err().is_corruption());
}

#[test]
fn tp10_gap_after_the_last_turn_end_is_torn() {
    let text = file(
        &[
            turn_start(0, 1, 1),
            turn_end(1, 2, 1),
            step(9, 3, 2, 1, true),
        ],
        "",
    );
    let loaded = load_log(text.as_bytes(), &[]).unwrap();
    assert_eq!(loaded.stored, 2);
    assert!(loaded.closers.is_empty(), "balanced");
    let cut = text.len() - line(&step(9, 3, 2, 1, true)).len() - 1;
    assert_eq!(loaded.truncate_to, Some(cut));
}

fn one_turn_log() -> Vec<SessionEvent> {
    let m = Message::model(
        "a",
        vec![ContentBlock::text("hello")],
        MessageSource::model("p", "m"),
    );
    vec![
        turn_start(0, 1, 1),
        user_event(1, 2),
        step(2, 3, 1, 1, true),
        SessionEvent::new(3, 4, AssistantMessage::new(1, 1, m))
            .with_surface(SurfaceOp::Append, None),
        step(4, 5, 1, 1, false),
        turn_end(5, 6, 1),
    ]
}

#[test]
fn tp13_unknown_types_need_ignorable() {
    let future = r#"{"type":"future/event","seq":6,"time":99,"data":{"payload":1}}"#;
    let text = file(&one_turn_log(), &format!("{future}\n"));
    let err = load_log(text.as_bytes(), &[]).unwrap_err();
    assert!(matches!(err, LogError::FormatUnsupported { .. }));
    assert!(
        err.to_string().contains("\"future/event\" (seq 6)"),
        "{err}"
    );
    assert!(load_log(text.as_bytes(), &["future/event"]).is_ok());
    let ignorable =
        r#"{"type":"future/event","seq":6,"time":99,"data":{"payload":1},"ignorable":true}"#;
    let text = file(&one_turn_log(), &format!("{ignorable}\n"));
    let loaded = load_log(text.as_bytes(), &[]).unwrap();
    assert_eq!(loaded.session.events()[6].to_json(), ignorable);
    // CC8: a plugin event with data null and ignorable loads unchanged.
    let null = r#"{"type":"x/y","seq":6,"time":99,"data":null,"ignorable":true}"#;
    let text = file(&one_turn_log(), &format!("{null}\n"));
    assert_eq!(
        load_log(text.as_bytes(), &[]).unwrap().session.events()[6].to_json(),
        null
    );
    // Retired vocabulary is refused.
    let mode = r#"{"type":"mode/set","seq":6,"time":99,"data":{}}"#;
    let text = file(&one_turn_log(), &format!("{mode}\n"));
    assert!(load_log(text.as_bytes(), &[]).is_err());
}

#[test]
fn ct3_open_turn_and_step_get_closers() {
    let mut events = one_turn_log();
    events.push(turn_start(6, 7, 2));
    events.push(step(7, 8, 2, 1, true));
    let text = file(&events, "");
    let loaded = load_log(text.as_bytes(), &[]).unwrap();
    let types: Vec<&str> = loaded
        .session
        .events()
        .iter()
        .map(|e| e.event_type())
        .collect();
    assert_eq!(
        types,
        [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end",
            "turn/start",
            "step/start",
            "step/end",
            "turn/end"
        ]
    );
    assert_eq!(loaded.truncate_to, None);
    let last = loaded.session.last_event().unwrap();
    assert_eq!(last.seq(), 9);
    assert!(
        last.to_json()
            .contains(r#""reason":{"kind":"interrupted"}"#)
    );
}

#[test]
fn ct4_ct5_synthetic_results() {
    let events = vec![
        turn_start(0, 1, 1),
        step(1, 1, 1, 1, true),
        am(2, 1, &["call-x"]),
    ];
    let closers = interrupted_turn_closers(&events);
    assert_eq!(closers.len(), 3);
    assert_eq!(closers[0].event_type(), "tool/result");
    let json = closers[0].to_json();
    assert!(json.contains(r#""source":{"kind":"tool","callId":"call-x"}"#));
    assert!(json.contains(r#""code":"TOOL_NOT_STARTED""#));
    assert!(closers[0].source_event_seqs().is_none());
    let events = vec![
        turn_start(0, 1, 1),
        step(1, 1, 1, 1, true),
        am(2, 1, &["call-risk"]),
        tool_call(3, 1, "call-risk"),
    ];
    let closers = interrupted_turn_closers(&events);
    let json = closers[0].to_json();
    assert!(
        json.contains(
            r#""error":{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}"#
        )
    );
    assert!(json.contains("retry only if the operation is read-only or idempotent"));
    assert!(
        json.contains("if it may have side effects, first verify external state or ask the user")
    );
    let mut all = events.clone();
    all.extend(closers);
    let mut s = Session::restore(SessionHeader::new("s", 0), all).unwrap();
    let d = s.derive_messages();
    let last = d.last().unwrap();
    assert!(matches!(
        last.content.as_slice(),
        [ContentBlock::ToolResult { tool_call_id, is_error: Some(true), .. }] if tool_call_id.as_str() == "call-risk"
    ));
    // CL4: answered calls and closed steps get nothing; no open turn, no closers.
    assert!(interrupted_turn_closers(&one_turn_log()).is_empty());
    assert!(interrupted_turn_closers(&[]).is_empty());
}

#[test]
fn scanner_fragment_empty_line_and_bad_utf8() {
    // SC5: a final fragment is ignored.
    let text = format!("{H}\n{}\n{{\"type\"", line(&turn_start(0, 1, 1)));
    let s = scan_log(text.as_bytes()).unwrap();
    assert!(s.torn);
    assert_eq!(s.events.len(), 1);
    // An empty line is unparsable: torn unless a turn/end follows.
    let text = format!("{H}\n{}\n\n", line(&turn_start(0, 1, 1)));
    assert!(scan_log(text.as_bytes()).unwrap().torn);
    let text = format!("{H}\n\n{}\n", line(&turn_end(0, 1, 1)));
    assert!(scan_log(text.as_bytes()).is_err());
    // Invalid UTF-8 in a line makes it unparsable (Q5: strict decoding).
    let mut bytes = format!("{H}\n{}\n", line(&turn_start(0, 1, 1))).into_bytes();
    bytes.extend_from_slice(b"{\"type\":\"x/y\",\"seq\":1,\"time\":1,\"data\":\"\xff\"}\n");
    let s = scan_log(&bytes).unwrap();
    assert_eq!(s.events.len(), 1);
    assert!(s.torn);
    // A JSON line that is not an event (here a bare number) has no seq: a gap.
    let text = format!("{H}\n5\n");
    let s = scan_log(text.as_bytes()).unwrap();
    assert!(s.events.is_empty() && s.torn);
}

#[test]
fn committed_invalid_events_are_corruption_naming_the_rule() {
    let bad = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":"one"}}"#;
    let err = load_log(format!("{H}\n{bad}\n").as_bytes(), &[]).unwrap_err();
    assert!(matches!(err, LogError::InvalidEvent { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("stored session \"s1\" failed validation"),
        "{err}"
    );
    // Without --fixture-tokens a "{{tools}}" string is not a tool list.
    let header_event = r#"{"type":"request/header","seq":0,"time":1,"data":{"header":{"config":{"provider":"p","model":"m"},"tools":"{{tools}}"},"reason":"initial"}}"#;
    let text = format!("{H}\n{header_event}\n");
    let err = load_log(text.as_bytes(), &[]).unwrap_err();
    assert!(err.to_string().contains("V4"), "{err}");
    let fixed = fixture_tokens(text.as_bytes());
    assert!(String::from_utf8_lossy(&fixed).contains(r#""tools":[]"#));
    load_log(&fixed, &[]).unwrap();
}

#[test]
fn fixture_tokens_substitute_exactly_the_listed_tokens() {
    let text = "{\"type\":\"session\",\"version\":0,\"id\":\"{{sessionId}}\",\"createdAt\":0,\"cwd\":\"{{cwd}}/workspace\",\"delegationDepth\":0}\n\
                {\"x\":\"{{cwd}}\",\"tools\":\"{{tools}}\",\"system\":\"{{system}}\"}\n";
    let out = String::from_utf8(fixture_tokens(text.as_bytes())).unwrap();
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap(),
        "{\"type\":\"session\",\"version\":0,\"id\":\"{{sessionId}}\",\"createdAt\":0,\"cwd\":\"/fixture-cwd/workspace\",\"delegationDepth\":0}"
    );
    assert_eq!(
        lines.next().unwrap(),
        "{\"x\":\"{{cwd}}\",\"tools\":[],\"system\":\"{{system}}\"}"
    );
}

#[test]
fn header_rules_apply_on_load() {
    let rel = r#"{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"relative/dir","delegationDepth":0}"#;
    let err = load_log(format!("{rel}\n").as_bytes(), &[]).unwrap_err();
    assert!(matches!(err, LogError::InvalidHeader { .. }));
    assert!(err.to_string().contains("HD5"), "{err}");
}

fn delta_strategy() -> impl Strategy<Value = StreamChunk> {
    let s = "[a-z\"\\\\\n é😀]{0,4}";
    prop_oneof![
        (0u64..2, s).prop_map(|(index, text)| StreamChunk::TextDelta {
            index,
            text: text.into()
        }),
        (0u64..2, s).prop_map(|(index, text)| StreamChunk::ReasoningDelta {
            index,
            text: text.into()
        }),
        (
            0u64..2,
            "c[12]",
            proptest::option::of(Just(String::from("bash"))),
            s
        )
            .prop_map(
                |(index, id, name, arguments_delta)| StreamChunk::ToolCallDelta {
                    index,
                    head: dsh_core::ToolCallHead::owned(id, name),
                    arguments_delta: arguments_delta.into(),
                }
            ),
        Just(StreamChunk::BlockStart {
            index: 0,
            block_type: "text".into()
        }),
    ]
}

proptest! {
    /// CK17: decode(pack(batch)) equals the batch, for any batch (runs,
    /// breaks, time steps of any sign, escaped and non-ASCII text).
    #[test]
    fn ck17_packing_round_trips(
        items in proptest::collection::vec((delta_strategy(), -3i64..4, 1u64..3, any::<bool>()), 0..40)
    ) {
        let mut time = 1_000i64;
        let mut seq = 0u64;
        let mut batch = Vec::new();
        for (c, dt, turn, skip) in items {
            time += dt;
            seq += if skip { 2 } else { 1 };
            batch.push(chunk(seq, time, turn, 1, c));
        }
        let mut out = Vec::new();
        encode_batch(&batch, true, &mut out);
        let mut decoder = Decoder::new();
        let mut back = Vec::new();
        for l in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match decoder.decode_line(l).unwrap() {
                Record::One(Decoded::Event(e)) => back.push(e),
                Record::Run(events) => {
                    prop_assert!(events.len() >= 3, "MIN_RUN");
                    back.extend(events)
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        prop_assert_eq!(&back, &batch);
        // Unpacked encoding decodes to the same events.
        let mut plain = Vec::new();
        encode_batch(&batch, false, &mut plain);
        prop_assert_eq!(plain.iter().filter(|b| **b == b'\n').count(), batch.len());
    }
}

#[test]
fn tp6_paths() {
    assert_eq!(
        jsonl::transcript_path(Some("/home/u/my proj"), "a/b", true).unwrap(),
        "--home-u-my~0020proj--/a~002Fb/session.jsonl.zstd"
    );
    assert_eq!(
        jsonl::transcript_path(None, "..", true).unwrap(),
        "_no-cwd/~002E~002E/session.jsonl.zstd"
    );
    assert_eq!(jsonl::project_key(Some("C:\\Users\\x")), "--C-Users-x--");
    assert_eq!(jsonl::session_id_segment("x~y").unwrap(), "x~007Ey");
    assert_eq!(jsonl::session_id_segment("."), Some("~002E".into()));
    assert_eq!(jsonl::session_id_segment(""), None);
    assert_eq!(jsonl::project_key(Some("///")), "--root--");
    assert_eq!(
        jsonl::transcript_path(Some("/w"), "s", false).unwrap(),
        "--w--/s/session.jsonl"
    );
    // An astral character is two UTF-16 units.
    assert_eq!(jsonl::session_id_segment("😀").unwrap(), "~D83D~DE00");
    let long = format!("/{}", "a".repeat(300));
    assert_eq!(jsonl::project_key(Some(&long)).len(), 251 + 4);
}

#[test]
fn tp12_batch_contiguity() {
    let stored = one_turn_log();
    let next = |seq| turn_start(seq, 1, 2);
    assert!(jsonl::check_batch_seqs("s1", 6, &[next(6), next(7)]).is_ok());
    let err = jsonl::check_batch_seqs("s1", 8, &[next(6)]).unwrap_err();
    assert!(err.contains("append seq mismatch"), "{err}");
    assert!(err.contains("expected 8 at index 0, got 6"), "{err}");
    let err = jsonl::check_batch_seqs("s1", 8, &[next(8), next(10)]).unwrap_err();
    assert!(err.contains("expected 9 at index 1, got 10"), "{err}");
    assert!(jsonl::check_batch_seqs("s1", 6, &[]).is_ok());
    assert_eq!(stored.len(), 6);
}

#[test]
fn tp14_read_from_is_the_scanned_prefix_without_closers() {
    let mut events = one_turn_log();
    events.push(turn_start(6, 7, 2));
    let text = file(&events, "{\"type\":\"ste");
    let scanned = scan_log(text.as_bytes()).unwrap();
    let from = |seq: u64| -> Vec<u64> {
        scanned
            .events
            .iter()
            .filter(|e| e.seq() >= seq)
            .map(|e| e.seq())
            .collect()
    };
    assert_eq!(from(6), [6]);
    assert!(from(7).is_empty());
    assert_eq!(from(0).len(), 7);
}

/// session.md J4/J6: a number read from a log is the number that was
/// written, to the last bit, so a re-serialized event equals its stored
/// text. serde_json's default float parsing may miss by one ulp; found by
/// the fault soak (`runtimes/smol/tests/soak.rs`) on this `llm/retry`.
#[test]
#[cfg_attr(
    not(feature = "float-roundtrip"),
    ignore = "needs the `float-roundtrip` feature"
)]
fn j6_a_float_reads_back_as_the_number_written() {
    let line = r#"{"type":"llm/retry","seq":43,"time":1796139397703,"data":{"retryId":"r","turn":1,"step":3,"provider":"deepseek","mode":"always","policyKey":"[\"always\",20,1500,0.1]","retry":2,"delayMs":43.447018567088804,"failure":{"message":"Service unavailable","code":"SERVER","status":503}}}"#;
    let e = match Decoder::new().decode_line(line.as_bytes()) {
        Ok(Record::One(Decoded::Event(e))) => e,
        other => panic!("{other:?}"),
    };
    match e.data() {
        EventData::LlmRetry(r) => assert_eq!(r.delay_ms.to_bits(), 43.447018567088804f64.to_bits()),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.to_canonical_json(), line);
}

fn decode_one(line: &str, as_str: bool) -> SessionEvent {
    let mut d = Decoder::new();
    let r = if as_str {
        d.decode_line_str(line)
    } else {
        d.decode_line(line.as_bytes())
    };
    match r {
        Ok(Record::One(Decoded::Event(e))) => e,
        other => panic!("{line}: {other:?}"),
    }
}

proptest! {
    /// J7/E9: a delta line with escaped text (every control character,
    /// quotes, backslashes, non-ASCII) reads back as the text written and
    /// writes back byte for byte, from bytes and from a UTF-8 line.
    #[test]
    fn j7_escaped_delta_lines_read_back_exactly(
        t in "[\u{0}-\u{1f}\"\\\\/a\u{7f}é😀]{0,12}",
        kind in 0u8..3,
        as_str in any::<bool>(),
    ) {
        let c = match kind {
            0 => StreamChunk::TextDelta { index: 0, text: t.as_str().into() },
            1 => StreamChunk::ReasoningDelta { index: 1, text: t.as_str().into() },
            _ => StreamChunk::ToolCallDelta {
                index: 1,
                head: dsh_core::ToolCallHead::owned("c1".into(), Some("bash".into())),
                arguments_delta: t.as_str().into(),
            },
        };
        let e = chunk(7, -5, 1, 2, c);
        let line = e.to_json();
        let back = decode_one(&line, as_str);
        prop_assert_eq!(&back, &e);
        prop_assert_eq!(back.to_json(), line);
    }
}

/// J7: escapes `write` never produces (`\/`, upper-case or needless `\u`,
/// `\u` for a short-form control) read as their text, and the line keeps
/// its exact source text, so it writes back byte for byte.
#[test]
fn j7_non_canonical_escapes_keep_their_source_text() {
    for (escaped, text) in [
        (r"a\/b", "a/b"),
        (r"\u000A", "\n"),
        (r"\u000a", "\n"),
        (r"\u001F", "\u{1f}"),
        (r"\u00e9", "é"),
        (r"\u0041", "A"),
    ] {
        let line = format!(
            r#"{{"type":"assistant/chunk","seq":3,"time":9,"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{escaped}"}}}}}}"#
        );
        for as_str in [false, true] {
            let e = decode_one(&line, as_str);
            match e.data() {
                EventData::AssistantChunk(c) => match c.view() {
                    dsh_core::session::ChunkView::TextDelta { text: got, .. } => {
                        assert_eq!(got, text, "{line}")
                    }
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }
            assert_eq!(e.to_json(), line);
            assert_ne!(e.to_canonical_json(), line);
        }
    }
}

/// J7/E9: non-delta chunks (`block-end`, `usage`, `finish`, `block-start`)
/// read in any key order give the same typed chunk as the canonical line,
/// and write back byte for byte.
#[test]
fn j7_non_delta_chunks_read_in_any_key_order() {
    let chunks = [
        r#"{"type":"block-start","index":0,"blockType":"text"}"#,
        r#"{"type":"block-end","index":1,"block":{"type":"text","text":"a\nb \"q\""}}"#,
        r#"{"type":"usage","usage":{"inputTokens":12,"outputTokens":3,"cacheReadTokens":80}}"#,
        r#"{"type":"finish","reason":{"kind":"tool-calls"}}"#,
    ];
    for c in chunks {
        let canonical = decode_one(
            &format!(
                r#"{{"type":"assistant/chunk","seq":4,"time":5,"data":{{"turn":1,"step":1,"chunk":{c}}}}}"#
            ),
            true,
        );
        // The same object with its keys reversed.
        let v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(c).unwrap();
        let mut reversed = String::from("{");
        for (i, (k, v)) in v.iter().rev().enumerate() {
            if i > 0 {
                reversed.push(',');
            }
            reversed.push_str(&format!("{}:{}", serde_json::Value::from(k.as_str()), v));
        }
        reversed.push('}');
        let line = format!(
            r#"{{"type":"assistant/chunk","seq":4,"time":5,"data":{{"turn":1,"step":1,"chunk":{reversed}}}}}"#
        );
        for as_str in [false, true] {
            let e = decode_one(&line, as_str);
            assert_eq!(e, canonical, "{line}");
            assert!(e.deviation().is_none(), "{line}: {:?}", e.deviation());
            assert_eq!(e.to_json(), line);
        }
    }
}

/// CT3/CL4: a call left unanswered in an earlier, closed turn gets no
/// closer; only the open last turn is closed (the scan may start at the
/// last turn boundary).
#[test]
fn ct3_only_the_open_last_turn_gets_closers() {
    let events = vec![
        turn_start(0, 1, 1),
        step(1, 1, 1, 1, true),
        am(2, 1, &["call-old"]),
        turn_end(3, 1, 1),
        turn_start(4, 2, 2),
        step(5, 2, 2, 1, true),
        am(6, 2, &["call-new"]),
    ];
    let closers = interrupted_turn_closers(&events);
    let types: Vec<&str> = closers.iter().map(|e| e.event_type()).collect();
    assert_eq!(types, ["tool/result", "step/end", "turn/end"]);
    assert!(closers[0].to_json().contains(r#""callId":"call-new""#));
    assert_eq!(closers[0].seq(), 7);
    assert!(closers[2].to_json().contains(r#""turn":2"#));
    // A closed last turn: nothing to close, whatever came before.
    let mut closed = events.clone();
    closed.push(step(7, 2, 2, 1, false));
    closed.push(turn_end(8, 2, 2));
    assert!(interrupted_turn_closers(&closed).is_empty());
}
