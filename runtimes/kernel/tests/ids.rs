//! Ids continue from the log (loop.md Q12: the core never invents ids, so
//! the runtime's source must not repeat one the log already holds): after
//! a resume, a second resume and a fork, every message id and every retry
//! chain id in the log is unique, in both [`IdMode`]s, with the default
//! seed an embedder gets (0).

use std::collections::BTreeSet;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::session::{EventData, Session};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, LlmFailure, Message, StreamChunk};
use dsh_runtime::{
    AgentConfig, Effect, IdMode, Ids, InboxTarget, Kernel, create_session, fork_session,
    resume_session,
};
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

fn config(mode: IdMode) -> AgentConfig {
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::untyped("t", "t", json!({"type":"object"})))
        .unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config.tools = tools;
    config.ids = mode;
    // The seed an embedder gets unless it sets one.
    config.seed = 0;
    config
}

/// A kernel over `session`, its events all stored, with a user-id source
/// continued the way a runtime continues it.
fn start(mode: IdMode, session: Session) -> (Kernel, Ids) {
    let stored = session.len();
    let kernel = Kernel::new(config(mode), session, stored, Vec::new()).unwrap();
    let mut users = Ids::new(mode, 0);
    users.continue_after(kernel.session());
    (kernel, users)
}

/// One turn: a retried request (a retry chain id), a tool call (a tool
/// result id), then the answer (an assistant id per step).
fn turn(k: &mut Kernel, users: &mut Ids, now: &mut i64) {
    let user = Message::user(users.user_message_id(), vec![ContentBlock::text("go")]);
    k.send(*now, user, InboxTarget::NextTurn, true).unwrap();
    let mut calls = 0;
    loop {
        let mut models = Vec::new();
        let mut tools = Vec::new();
        while let Some(e) = k.poll() {
            match e {
                Effect::Persist { .. } => k.persisted(*now, Ok(())).unwrap(),
                Effect::StartModel(c) => models.push(c.attempt),
                Effect::StartTool { exec, .. } => tools.push(exec.token),
                _ => {}
            }
        }
        if let Some(attempt) = models.pop() {
            calls += 1;
            let chunks = match calls {
                1 => vec![StreamChunk::finish(FinishReason::Error {
                    failure: LlmFailure::new("SERVER", "busy"),
                })],
                2 => vec![
                    StreamChunk::block_end(0, ContentBlock::tool_call("c", "t", "{}")),
                    StreamChunk::finish(FinishReason::ToolCalls),
                ],
                _ => vec![
                    StreamChunk::block_end(0, ContentBlock::text("done")),
                    StreamChunk::finish(FinishReason::Stop),
                ],
            };
            for c in chunks {
                *now += 1;
                k.model_chunk(*now, attempt, c).unwrap();
            }
            k.model_end(*now, attempt).unwrap();
        } else if let Some(token) = tools.pop() {
            let out = ToolOutcome::success(vec![ContentBlock::text("ok")]);
            k.tool_done(*now, token, out, Vec::new()).unwrap();
        } else if let Some(deadline) = k.poll_timeout() {
            *now = (*now).max(deadline);
            k.handle_timeout(*now);
        } else {
            break;
        }
    }
    assert!(k.is_idle(), "the turn ended");
    assert_eq!(calls, 3, "a retried call, a tool step and the answer");
}

/// Asserts every message id of `session` occurs once and each retry
/// chain (one per turn) has its own id.
fn assert_ids_unique(session: &Session, turns: usize, what: &str) {
    let mut messages = BTreeSet::new();
    let mut chains = BTreeSet::new();
    let mut retries = 0;
    let mut count = 0;
    for e in session.events() {
        if let Some(m) = e.data().message() {
            count += 1;
            assert!(
                messages.insert(m.id.as_str().to_owned()),
                "{what}: message id {} repeats",
                m.id
            );
        }
        if let EventData::LlmRetry(r) = e.data() {
            retries += 1;
            chains.insert(r.retry_id.clone().expect("a chain id").into_string());
        }
    }
    // user, assistant (tool call), tool result, assistant (answer)
    assert_eq!(count, 4 * turns, "{what}: messages per turn");
    // One retry (one chain) per turn, each chain with its own id.
    assert_eq!(retries, turns, "{what}: retries");
    assert_eq!(
        chains.len(),
        turns,
        "{what}: retry chain ids repeat: {chains:?}"
    );
}

fn resume(k: &Kernel, now: i64) -> Session {
    let s = k.session();
    resume_session(s.header().clone(), s.events().to_vec(), now).unwrap()
}

fn continues_after_resume_and_fork(mode: IdMode) {
    let what = format!("{mode:?}");
    let mut now = T0;
    let (mut k, mut users) = start(mode, create_session("s1".into(), now, None).unwrap());
    turn(&mut k, &mut users, &mut now);
    assert_ids_unique(k.session(), 1, &what);

    // Resume twice, a turn each time (V30: turn numbering continues; the
    // ids must too).
    for n in 2..=3 {
        let session = resume(&k, now);
        (k, users) = start(mode, session);
        turn(&mut k, &mut users, &mut now);
        assert_ids_unique(k.session(), n, &format!("{what} after resume {}", n - 1));
    }

    // Two forks of the same parent at its end, a turn in each.
    let parent = k.session().clone();
    for child in ["f1", "f2"] {
        let session = fork_session(
            parent.header().clone(),
            parent.events().to_vec(),
            None,
            child.into(),
            now,
        )
        .unwrap();
        let (mut k, mut users) = start(mode, session);
        turn(&mut k, &mut users, &mut now);
        assert_ids_unique(k.session(), 4, &format!("{what} fork {child}"));
    }
}

#[test]
fn sequential_ids_continue_after_resume_and_fork() {
    continues_after_resume_and_fork(IdMode::Sequential);
}

#[test]
fn uuid_ids_from_the_default_seed_continue_after_resume_and_fork() {
    continues_after_resume_and_fork(IdMode::Uuid);
}
