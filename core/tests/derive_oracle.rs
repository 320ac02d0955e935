//! C6: at every point the incrementally cached `derive_messages` equals a
//! from-scratch derivation over a replay of the log (session.md 6.3), over
//! random mixes of appends, summaries (range replacements) and tool-result
//! rewrites, and D3 (a replay derives an equal list). C4 (a returned list
//! never changes) holds by construction in Rust: `derive_messages` returns a
//! borrow that ends before the next append.

use std::sync::Arc;

use dsh_core::session::{AssistantChunk, AssistantMessage, EventData, ToolResult};
use dsh_core::{
    ContentBlock, Message, MessageSource, Session, SessionHeader, StreamChunk, SurfaceIntent,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    User,
    Assistant { content: bool },
    Tool,
    Chunk,
    Summary { at: usize, len: usize },
    Rewrite { at: usize },
    Derive,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::User),
        2 => any::<bool>().prop_map(|content| Op::Assistant { content }),
        2 => Just(Op::Tool),
        2 => Just(Op::Chunk),
        1 => (any::<usize>(), 1usize..4).prop_map(|(at, len)| Op::Summary { at, len }),
        1 => any::<usize>().prop_map(|at| Op::Rewrite { at }),
        3 => Just(Op::Derive),
    ]
}

fn tool(id: &str, text: &str) -> ToolResult {
    ToolResult::new(
        1,
        1,
        Message::tool_result(id, format!("c-{id}"), vec![ContentBlock::text(text)], false),
    )
}

fn apply(s: &mut Session, op: &Op, n: usize) {
    let id = format!("m{n}");
    let now = n as i64;
    let append = Some(SurfaceIntent::append());
    match op {
        Op::User => {
            s.append(
                Message::user(id, vec![ContentBlock::text("u")]),
                append,
                now,
            )
            .unwrap();
        }
        Op::Assistant { content } => {
            let blocks = if *content {
                vec![ContentBlock::text("a")]
            } else {
                vec![]
            };
            let m = Message::model(id, blocks, MessageSource::model("p", "m"));
            s.append(AssistantMessage::new(1, 1, m), append, now)
                .unwrap();
        }
        Op::Tool => {
            s.append(tool(&id, "output"), append, now).unwrap();
        }
        Op::Chunk => {
            let c = StreamChunk::TextDelta {
                index: 0,
                text: "x".into(),
            };
            s.append(AssistantChunk::new(1, 1, c), None, now).unwrap();
        }
        Op::Summary { at, len } => {
            let nodes = s.surface().nodes.to_vec();
            if nodes.is_empty() {
                return;
            }
            let i = at % nodes.len();
            let j = (i + len - 1).min(nodes.len() - 1);
            let shadow = nodes[i..=j].to_vec();
            let m = Message::user(id, vec![ContentBlock::text("summary")]);
            s.append(
                m,
                Some(SurfaceIntent::replace(nodes[i], nodes[j], shadow)),
                now,
            )
            .unwrap();
        }
        Op::Rewrite { at } => {
            let nodes = s.surface().nodes.to_vec();
            if nodes.is_empty() {
                return;
            }
            let seq = nodes[at % nodes.len()];
            let Some(EventData::ToolResult(old)) = s.event(seq).map(|e| e.data().clone()) else {
                return;
            };
            let mut new = (*old).clone();
            let mut msg = (*new.message).clone();
            if let Some(ContentBlock::ToolResult { content, .. }) = msg.content.first_mut() {
                *content = vec![ContentBlock::text("[pruned]")];
            }
            new.message = Arc::new(msg);
            s.append(new, Some(SurfaceIntent::replace(seq, seq, vec![seq])), now)
                .unwrap();
        }
        Op::Derive => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn cached_derive_equals_replay(ops in proptest::collection::vec(op(), 0..60)) {
        let mut s = Session::new(SessionHeader::new("s", 0));
        for (n, op) in ops.iter().enumerate() {
            apply(&mut s, op, n);
            if matches!(op, Op::Derive) || n % 7 == 0 {
                let cached = s.derive_messages().to_vec();
                prop_assert_eq!(&cached, &s.derive_messages_uncached());
                let replay = Session::restore(SessionHeader::new("r", 0), s.events().to_vec())
                    .expect("a log the session accepted replays");
                prop_assert_eq!(&cached, &replay.derive_messages_uncached());
            }
        }
        let last = s.derive_messages().to_vec();
        prop_assert_eq!(last, s.derive_messages_uncached());
    }
}

#[test]
fn cache_rebuilds_only_after_a_replacement() {
    let mut s = Session::new(SessionHeader::new("s", 0));
    let append = || Some(SurfaceIntent::append());
    s.append(Message::user("a", vec![]), append(), 1).unwrap();
    let first = s.derive_messages().to_vec();
    s.append(Message::user("b", vec![]), append(), 2).unwrap();
    let second = s.derive_messages().to_vec();
    // The cached prefix is the same shared message (no rebuild).
    assert!(Arc::ptr_eq(&first[0], &second[0]));
    assert_eq!(second.len(), 2);
    s.append(
        Message::user("sum", vec![]),
        Some(SurfaceIntent::replace(0, 1, vec![0, 1])),
        3,
    )
    .unwrap();
    let third = s.derive_messages();
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].id.as_str(), "sum");
    assert_eq!(first.len(), 1, "an earlier copy is unchanged");
}
