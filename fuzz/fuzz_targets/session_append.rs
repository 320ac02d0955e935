//! Arbitrary event sequences appended to a Session: no panic; a rejected
//! append changes nothing; an accepted log always re-validates (as a seed
//! and through the JSONL codec) and its cached history equals a replay.
#![no_main]

use arbitrary::Arbitrary;
use dsh_core::jsonl;
use dsh_core::session::{
    AssistantChunk, AssistantMessage, EventData, InvariantChecker, Step, ToolCall, ToolError,
    ToolResult, TurnEnd, TurnEndReason, TurnStart,
};
use dsh_core::{
    ContentBlock, Message, MessageSource, Session, SessionEvent, SessionHeader, StreamChunk,
    SurfaceOp,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Marker {
    None,
    Append,
    AppendCiting(Vec<u8>),
    Replace(u8, u8, Vec<u8>),
    SourcesOnly(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Ev {
    TurnStart(u8),
    TurnEnd(u8),
    StepStart(u8, u8),
    StepEnd(u8, u8),
    User(String, String),
    Assistant(u8, u8, String, Option<String>, bool),
    ToolCall(u8, u8, String),
    ToolResult(u8, u8, String, String, bool, bool),
    Chunk(u8, u8, u8, String),
    Plugin(String, Option<i32>, bool),
    Float(f64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    ev: Ev,
    marker: Marker,
    time: i32,
    seq_offset: Option<u8>,
}

fn seqs(v: &[u8]) -> Vec<u64> {
    v.iter().map(|n| u64::from(*n)).collect()
}

fn data(ev: Ev) -> EventData {
    let n = u64::from;
    match ev {
        Ev::TurnStart(t) => TurnStart::new(n(t)).into(),
        Ev::TurnEnd(t) => TurnEnd::new(n(t), TurnEndReason::Completed).into(),
        Ev::StepStart(t, s) => EventData::StepStart(Step::new(n(t), n(s))),
        Ev::StepEnd(t, s) => EventData::StepEnd(Step::new(n(t), n(s))),
        Ev::User(id, text) => Message::user(id, vec![ContentBlock::text(text)]).into(),
        Ev::Assistant(t, s, id, text, call) => {
            let mut content: Vec<ContentBlock> = text.into_iter().map(ContentBlock::text).collect();
            if call {
                content.push(ContentBlock::tool_call("c1", "bash", "{}"));
            }
            AssistantMessage::new(
                n(t),
                n(s),
                Message::model(id, content, MessageSource::model("p", "m")),
            )
            .into()
        }
        Ev::ToolCall(t, s, call) => ToolCall::new(n(t), n(s), call.into(), "bash", "{}").into(),
        Ev::ToolResult(t, s, id, call, is_error, not_started) => {
            let mut r = ToolResult::new(
                n(t),
                n(s),
                Message::tool_result(id, call, vec![ContentBlock::text("out")], is_error),
            );
            if not_started {
                r.error = Some(ToolError::new("ToolNotStartedError", "TOOL_NOT_STARTED"));
            }
            r.into()
        }
        Ev::Chunk(t, s, i, text) => {
            AssistantChunk::new(n(t), n(s), StreamChunk::TextDelta { index: n(i), text: text.into() }).into()
        }
        Ev::Plugin(kind, num, neg_zero) => {
            let v = if neg_zero {
                serde_json::json!({"v": -0.0})
            } else {
                serde_json::json!({"v": num})
            };
            EventData::plugin(format!("x/{kind}"), &v)
        }
        Ev::Float(f) => {
            let v = serde_json::Number::from_f64(f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null);
            EventData::plugin("x/float", &serde_json::json!({ "f": v }))
        }
    }
}

fuzz_target!(|steps: Vec<Input>| {
    let mut s = Session::new(SessionHeader::new("f", 0));
    // The invariant checker runs beside the session: it must not panic.
    let mut invariants = InvariantChecker::new();
    for st in steps.into_iter().take(64) {
        let seq = s.len() + st.seq_offset.map_or(0, u64::from);
        let mut e = SessionEvent::new(seq, i64::from(st.time), data(st.ev));
        e = match st.marker {
            Marker::None => e,
            Marker::Append => e.with_surface(SurfaceOp::Append, None),
            Marker::AppendCiting(v) => e.with_surface(SurfaceOp::Append, Some(seqs(&v))),
            Marker::Replace(a, b, v) => e.with_surface(
                SurfaceOp::Replace {
                    start: u64::from(a),
                    end: u64::from(b),
                },
                Some(seqs(&v)),
            ),
            Marker::SourcesOnly(v) => e.with_sources(seqs(&v)),
        };
        let before_len = s.len();
        let before_nodes = s.surface().nodes.to_vec();
        match s.append_event(e.clone()) {
            Ok(_) => {
                let _ = invariants.push(&e);
            }
            Err(_) => {
                assert_eq!(s.len(), before_len, "a rejected append changes nothing");
                assert_eq!(s.surface().nodes, &before_nodes[..]);
            }
        }
    }
    let cached = s.derive_messages().to_vec();
    assert_eq!(cached, s.derive_messages_uncached());
    // An accepted log re-validates as a seed ...
    let events = s.events().to_vec();
    let mut replay = Session::restore(s.header().clone(), events.clone()).expect("re-validates");
    assert_eq!(replay.derive_messages(), &cached[..]);
    // ... and through the JSONL codec, packed or not.
    for pack in [false, true] {
        let mut bytes = Vec::new();
        jsonl::encode_header_line(s.header(), &mut bytes);
        jsonl::encode_batch(&events, pack, &mut bytes);
        let scanned = jsonl::scan_log(&bytes).expect("an accepted log scans");
        assert!(!scanned.torn);
        assert_eq!(scanned.events, events);
        Session::restore(s.header().clone(), scanned.events).expect("re-validates after JSONL");
    }
});
