//! Property tests of the response cap: whatever a server
//! streams, the kernel accepts no more than the cap, every chunk it
//! accepted is in the log in order, and the turn ends either completed
//! (the stream fit) or in error `RESPONSE_TOO_LARGE`.

use dsh_core::Time;
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::AttemptId;
use dsh_runtime::{
    AgentConfig, CHUNK_OVERHEAD_BYTES, Effect, IdMode, InboxTarget, Kernel, create_session,
};
use proptest::prelude::*;

const NOW: Time = Time::from_millis(1_000_000);

/// Drains, answering every persist; the attempt of a started model call.
fn drain(k: &mut Kernel) -> Option<AttemptId> {
    let mut started = None;
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::StartModel(call) => started = Some(call.attempt),
            _ => {}
        }
    }
    started
}

/// How many `assistant/chunk` events are logged.
fn chunks_logged(k: &Kernel) -> usize {
    k.session()
        .events()
        .iter()
        .filter(|e| e.event_type() == "assistant/chunk")
        .count()
}

/// The text of every logged text or reasoning delta, in order.
fn logged_deltas(k: &Kernel) -> Vec<String> {
    k.session()
        .events()
        .iter()
        .filter(|e| e.event_type() == "assistant/chunk")
        .filter_map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
            v["data"]["chunk"]["text"].as_str().map(str::to_string)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_cap_bounds_what_is_accepted_and_keeps_it_all(
        cap in 256u64..4096,
        chunks in proptest::collection::vec((any::<bool>(), 0usize..300), 0..80),
    ) {
        let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
        config.ids = IdMode::Sequential;
        config.max_response_bytes = cap;
        // These streams are bare deltas (no block-start); stream validation
        // has its own tests (kernel.rs).
        config.validate_streams = false;
        let session = create_session("b1".into(), NOW, None).unwrap();
        let mut k = Kernel::new(config, session, 0, Vec::new()).unwrap();
        let hi = Message::user("u1", vec![ContentBlock::text("hi")]);
        k.send(NOW, hi, InboxTarget::NextTurn, true).unwrap();
        let attempt = drain(&mut k).expect("a model call");
        let mut accepted = Vec::new();
        let mut counted = 0u64;
        let mut refused = false;
        for (i, (reasoning, len)) in chunks.iter().enumerate() {
            let text: String = core::iter::repeat_n(char::from(b'a' + (i % 26) as u8), *len).collect();
            let chunk = if *reasoning {
                StreamChunk::ReasoningDelta { index: 0, text: text.as_str().into() }
            } else {
                StreamChunk::TextDelta { index: 1, text: text.as_str().into() }
            };
            let before = chunks_logged(&k);
            match k.model_chunk(NOW, attempt, chunk) {
                Ok(()) if chunks_logged(&k) > before => {
                    counted += *len as u64 + CHUNK_OVERHEAD_BYTES;
                    accepted.push(text);
                }
                Ok(()) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("unexpected refusal: {e}"),
            }
            drain(&mut k);
        }
        if !refused {
            match k.model_chunk(NOW, attempt, StreamChunk::finish(FinishReason::Stop)) {
                Ok(()) => {
                    if k.model_end(NOW, attempt).is_err() {
                        refused = true;
                    }
                }
                Err(e) => prop_assert!(e.is_stale(), "{e}"),
            }
        }
        drain(&mut k);
        prop_assert!(counted <= cap, "{counted} accepted past the cap {cap}");
        prop_assert_eq!(logged_deltas(&k), accepted);
        let v = serde_json::to_value(k.summary().reason.expect("the turn ended")).unwrap();
        if refused {
            prop_assert_eq!(&v["error"]["code"], "RESPONSE_TOO_LARGE", "{}", v);
        } else if v["kind"] == "error" {
            // The finish itself went past the cap, or nothing came.
            let code = v["error"]["code"].as_str().unwrap_or_default();
            prop_assert!(code == "RESPONSE_TOO_LARGE" || code == "EMPTY_RESPONSE", "{}", v);
        } else {
            prop_assert_eq!(&v["kind"], "completed", "{}", v);
        }
        prop_assert!(k.is_idle());
    }
}
