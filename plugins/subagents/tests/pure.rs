//! The pure parts of the subagents plugin against the reference's
//! recordings (loop.md SA-1 to SA-3).

use std::path::Path;

use dsh_core::agent::tools::ToolOutcome;
use dsh_core::jsonl;
use dsh_core::session::{AbortCause, EventData, Session, SessionEvent, TurnEndReason};
use dsh_core::{ContentBlock, LlmFailure, SessionId, Time};
use dsh_subagents::{
    ArgsError, FORK_TOOL, LINK_KEY, Mode, ParentLink, SPAWN_TOOL, child_depth, definition,
    descriptor, final_output, fork_session, last_turn_end, outcome, parse_request, spawn_session,
};
use serde_json::{Value, json};

const SPAWN: &str = "examples-acp-agent__subagent-spawn-in-process__session";
const FORK: &str = "examples-acp-agent__subagent-fork-in-process__session";

fn load(name: &str) -> Session {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/conformance/sessions")
        .join(name);
    let bytes = jsonl::fixture_tokens(&std::fs::read(path).unwrap());
    jsonl::load_log(&bytes, &[]).unwrap().session
}

fn event_data(e: &SessionEvent) -> Value {
    serde_json::from_str::<Value>(&e.to_json()).unwrap()["data"].clone()
}

fn text_of(o: &ToolOutcome) -> String {
    o.content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            _ => String::new(),
        })
        .collect()
}

#[test]
fn sa1_tool_definitions_name_the_required_parameters() {
    for (mode, name) in [(Mode::Spawn, SPAWN_TOOL), (Mode::Fork, FORK_TOOL)] {
        let d = definition(mode);
        assert_eq!(d.schema.name, name);
        assert_eq!(Mode::of_tool(name), Some(mode));
        assert!(d.validate_arguments, "typed (TL-6)");
        // TL-16: subagent is exclusive.
        assert!(!d.concurrency_safe);
        let p = &d.schema.parameters;
        assert_eq!(p["required"], json!(["description", "prompt"]));
        assert_eq!(p["properties"]["run_in_background"]["type"], "boolean");
        // The link the plugin adds must not fail the schema.
        assert!(p.get("additionalProperties").is_none());
    }
    assert_eq!(Mode::of_tool("bash"), None);
}

#[test]
fn sa1_arguments_parse_as_the_recording_sends_them() {
    // The spawn call of the recording, verbatim.
    let args: Value = serde_json::from_str("{\"description\": \"Reply with CHILD_OK\", \"prompt\": \"Reply with exactly the word CHILD_OK and nothing else.\", \"run_in_background\":false}").unwrap();
    let r = parse_request(&args).unwrap();
    assert_eq!(r.description, "Reply with CHILD_OK");
    assert_eq!(
        r.prompt,
        "Reply with exactly the word CHILD_OK and nothing else."
    );
    assert!(!r.run_in_background);
    let bad = [
        (json!([]), ArgsError::NotAnObject),
        (json!({"prompt": "p"}), ArgsError::Missing("description")),
        (
            json!({"description": "d", "prompt": " "}),
            ArgsError::Empty("prompt"),
        ),
        (
            json!({"description": "d", "prompt": "p", "run_in_background": "yes"}),
            ArgsError::NotBoolean("run_in_background"),
        ),
    ];
    for (args, err) in bad {
        assert_eq!(parse_request(&args), Err(err));
    }
}

#[test]
fn sa1_depth_cap_is_a_clear_tool_error() {
    assert_eq!(child_depth(0, 3), Ok(1));
    assert_eq!(child_depth(2, 3), Ok(3));
    let e = child_depth(3, 3).unwrap_err();
    let o = e.outcome();
    assert!(o.is_error());
    let text = text_of(&o);
    assert!(
        text.contains("depth cap reached") && text.contains("depth 3") && text.contains("cap is 3"),
        "{text}"
    );
}

#[test]
fn sa1_spawn_child_header_matches_the_recording() {
    let recorded = load(&format!("{SPAWN}.1.jsonl"));
    let parent = load(&format!("{SPAWN}.jsonl"));
    let child = spawn_session(
        recorded.id().clone(),
        recorded.header().created_at,
        recorded.header().cwd.clone(),
        parent.id(),
        1,
    )
    .unwrap();
    assert_eq!(child.header(), recorded.header());
    assert!(child.is_empty(), "SA-2: no seed");
}

#[test]
fn sa1_descriptor_matches_the_recording_and_sits_before_the_first_step() {
    for (name, mode, label) in [
        (SPAWN, Mode::Spawn, "Reply with CHILD_OK"),
        (FORK, Mode::Fork, "Recall project codeword"),
    ] {
        let child = load(&format!("{name}.1.jsonl"));
        let events = child.events();
        let at = events
            .iter()
            .position(|e| e.event_type() == "subagent/descriptor")
            .unwrap();
        assert_eq!(event_data(&events[at]), descriptor(mode, label));
        assert_eq!(events[at + 1].event_type(), "step/start");
        assert_eq!(events[at - 1].event_type(), "agent/inbox/spliced");
        assert_eq!(events[at - 2].event_type(), "turn/start");
    }
}

#[test]
fn sa3_fork_seed_is_the_parent_through_its_last_turn_end() {
    let recorded = load(&format!("{FORK}.1.jsonl"));
    let parent_full = load(&format!("{FORK}.jsonl"));
    // The parent as it was when the model called subagent_fork: through
    // its `tool/call` (turn 2 is open).
    let call = parent_full
        .events()
        .iter()
        .find(|e| e.event_type() == "tool/call")
        .unwrap()
        .seq();
    let parent = Session::restore(
        parent_full.header().clone(),
        parent_full.events()[..=call as usize].to_vec(),
    )
    .unwrap();
    let link = ParentLink::of(&parent);
    assert_eq!(
        link.fork_at,
        Some(41),
        "the last turn/end, not the open turn"
    );
    assert_eq!(link.depth, 0);
    let end_seed = recorded
        .events()
        .iter()
        .find(|e| e.event_type() == "session/end-seed")
        .unwrap();
    let child = fork_session(
        parent,
        link.fork_at,
        recorded.id().clone(),
        Time::from_millis(end_seed.time()),
        1,
    )
    .unwrap();
    let mut expected = recorded.header().clone();
    expected.created_at = end_seed.time() as u64;
    assert_eq!(child.header(), &expected);
    assert_eq!(child.header().seed_length, Some(42));
    // The seed is byte-identical to the recorded child's, end-seed included.
    let ours: Vec<String> = child.events().iter().map(SessionEvent::to_json).collect();
    let theirs: Vec<String> = recorded.events()[..=42]
        .iter()
        .map(SessionEvent::to_json)
        .collect();
    assert_eq!(ours, theirs);
    // Turn numbering continues from the seed: the child's live turn is 2.
    let live_turn = recorded.events()[43..].iter().find_map(|e| match e.data() {
        EventData::TurnStart(t) => Some(t.turn),
        _ => None,
    });
    assert_eq!(live_turn, Some(2));
}

#[test]
fn sa3_fork_without_a_completed_turn_has_an_empty_seed() {
    let parent = Session::new(dsh_core::SessionHeader::new("p", 1));
    assert_eq!(last_turn_end(parent.events()), None);
    let child = fork_session(parent, None, SessionId::from("c"), Time::from_millis(5), 1).unwrap();
    assert!(child.is_empty());
    assert_eq!(child.header().parent_session, Some(SessionId::from("p")));
    assert_eq!(child.header().delegation_depth, Some(1));
}

#[test]
fn link_round_trips_through_the_arguments() {
    let link = ParentLink {
        session: SessionId::from("parent-1"),
        depth: 2,
        fork_at: Some(41),
    };
    let mut args = json!({"description": "d", "prompt": "p"});
    args[LINK_KEY] = link.to_value();
    assert_eq!(ParentLink::from_arguments(&args), Ok(link));
    assert_eq!(
        ParentLink::from_arguments(&json!({"description": "d"})),
        Err(ArgsError::NoLink)
    );
}

#[test]
fn sa2_outcome_maps_the_final_turn_end() {
    let child = load(&format!("{SPAWN}.1.jsonl"));
    let output = final_output(child.events());
    assert_eq!(output.as_deref(), Some("CHILD_OK"));
    let done = outcome(Some(&TurnEndReason::Completed), output);
    assert!(!done.is_error());
    assert_eq!(text_of(&done), "CHILD_OK");
    // Every other reason: an error result with no partial output.
    let failure = LlmFailure::new("SERVER_ERROR", "boom");
    let cases = [
        (
            TurnEndReason::Aborted {
                cause: AbortCause::Parent,
            },
            "aborted",
        ),
        (
            TurnEndReason::Error { error: failure },
            "SERVER_ERROR: boom",
        ),
        (TurnEndReason::MaxTokens, "output token limit"),
    ];
    for (reason, expected) in cases {
        let o = outcome(Some(&reason), Some(String::from("PARTIAL")));
        assert!(o.is_error(), "{reason:?}");
        let text = text_of(&o);
        assert!(text.contains(expected), "{text}");
        assert!(!text.contains("PARTIAL"), "no partial output: {text}");
    }
    assert!(outcome(None, None).is_error());
}
