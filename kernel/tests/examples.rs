//! The examples are valid embedder code: every scripted stream is one the
//! [`StreamValidator`] accepts (streaming.md 2.5), `byo` stores a JSONL
//! log that loads and resumes into a second turn, and no message id
//! repeats across the two turns.

#[path = "../examples/byo.rs"]
#[allow(dead_code)] // the example's `main` is not called here
mod byo;

use std::collections::BTreeSet;

use dsh_core::jsonl;
use dsh_core::session::{EventData, TurnEndReason};
use dsh_core::{StreamChunk, StreamValidator};

/// The first rule `stream` breaks, or `None` when it is valid and finished.
fn first_violation(stream: &[StreamChunk]) -> Option<String> {
    let mut v = StreamValidator::new();
    for (i, chunk) in stream.iter().enumerate() {
        if let Err(e) = v.push(chunk) {
            return Some(format!("chunk {i}: {e}"));
        }
    }
    if !v.is_finished() {
        return Some(String::from("the stream never finished (G-8)"));
    }
    None
}

#[test]
fn byo_script_streams_pass_the_validator() {
    let script = byo::script();
    assert_eq!(script.len(), 3);
    for (n, stream) in script.iter().enumerate() {
        assert_eq!(first_violation(stream), None, "stream {n} of byo::script()");
    }
}

#[test]
fn the_validator_check_fails_on_a_bad_stream() {
    // The answer stream without its `block-start`: a delta for an index
    // that is not open (G-3).
    let mut stream = byo::script().remove(1);
    stream.remove(0);
    assert!(first_violation(&stream).unwrap().contains("G-3"));
}

#[test]
fn byo_stores_the_header_and_resumes_a_second_turn() {
    let host = byo::run(false).expect("the example runs");
    // The file starts with the header line and loads whole, no repair.
    assert!(host.file.starts_with(br#"{"type":"session""#));
    let log = jsonl::load_log(&host.file, &[]).expect("the stored log loads");
    assert!(!log.needs_repair());
    assert_eq!(log.session.len(), host.stored);
    let events = log.session.events();
    // Two turns, both completed (stream validation is on in debug builds:
    // a rejected stream ends its turn in error), split by the resume marker.
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::TurnEnd(t) => Some(t.reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        vec![TurnEndReason::Completed, TurnEndReason::Completed]
    );
    assert!(
        events
            .iter()
            .any(|e| e.data().event_type() == "session/end-seed")
    );
    // Message ids continue after the resume.
    let mut ids = BTreeSet::new();
    for e in events {
        let id = match e.data() {
            EventData::UserMessage(m) => m.id.clone(),
            EventData::AssistantMessage(a) => a.message.id.clone(),
            _ => continue,
        };
        assert!(ids.insert(id.clone()), "message id {id} repeats");
    }
    assert_eq!(ids.len(), 5, "two prompts and three answers: {ids:?}");
}
