//! `dsh chat` and `dsh fork`: choosing the session, and chatting on it until
//! the user quits or switches session.

use std::time::Duration;

use dsh_core::SessionId;
use dsh_core::session::completed_boundary;
use dsh_std::Agent;
use dsh_store::SessionStore;

use crate::Outcome;
use crate::sanitize::eprintln_safe;
use crate::store::{new_session_id, now_ms};

use super::{
    args::{AgentArgs, ChatArgs, ForkArgs},
    host::Facts,
    interactive::repl,
    setup::setup_with,
    sources::ChatInput,
    turn::{log_preset, titler_for},
};

/// `dsh chat`.
pub fn chat(args: ChatArgs) -> Outcome {
    let start = match args.resume {
        Some(id) => Start::Resume(SessionId::new(id)),
        None => Start::New,
    };
    chat_loop(&args.agent, start, args.plan)
}

/// How `dsh chat` gets its session.
pub(super) enum Start {
    New,
    Resume(SessionId),
    Fork { parent: SessionId, at: Option<u64> },
}

/// How long `dsh chat` and `dsh fork` wait for background subagents to
/// stop and persist at exit.
pub(super) const SUBAGENT_SHUTDOWN: Duration = Duration::from_secs(3);

/// Chats on the session `start` names, then on the one `/resume` or
/// `/fork` switches to, until the user quits.
pub(super) fn chat_loop(args: &AgentArgs, mut start: Start, plan: bool) -> Outcome {
    /// Gives the terminal its mode back however the chat ends.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::line_edit::restore();
        }
    }
    let _restore = Restore;
    let mut input = ChatInput::start();
    loop {
        let setup = match setup_with(args, true, false, plan) {
            Ok(s) => s,
            Err(e) => {
                eprintln_safe!("{e}");
                return Outcome::BadInput;
            }
        };
        let provider = setup.config.provider.clone();
        let call = setup.config.call_config.clone();
        let facts = Facts {
            call: call.clone(),
            store: args.store.describe(),
            sandbox: setup.sandbox.clone(),
            cwd: setup.cwd.clone(),
            skills: setup.extensions.skills(),
        };
        let resumed = !matches!(start, Start::New);
        let agent = match &start {
            Start::New => {
                Agent::create(setup.config, setup.store.clone(), new_session_id(now_ms()))
            }
            Start::Resume(id) => Agent::resume(setup.config, setup.store.clone(), id),
            Start::Fork { parent, at } => {
                let at = match at {
                    Some(at) => *at,
                    None => match last_completed_turn(&*setup.store, parent) {
                        Ok(at) => at,
                        Err(e) => {
                            eprintln_safe!("dsh fork: {e}");
                            return Outcome::BadInput;
                        }
                    },
                };
                let new_id = new_session_id(now_ms());
                let forked = Agent::fork(
                    setup.config,
                    setup.store.clone(),
                    parent,
                    Some(at),
                    new_id.clone(),
                );
                if forked.is_ok() {
                    eprintln_safe!("forked {} → {}", parent.as_str(), new_id.as_str());
                }
                forked
            }
        };
        let agent = match agent {
            Ok(a) => a,
            Err(e) => {
                eprintln_safe!("dsh chat: cannot start the agent: {e}");
                return Outcome::BadInput;
            }
        };
        setup
            .delegation
            .attach(agent.session_id().clone(), agent.mailbox());
        if let Err(e) = log_preset(&agent, args.preset, &setup.sandbox) {
            eprintln_safe!("dsh chat: {e}");
        }
        let current = agent.session_id().clone();
        let titler = titler_for(provider, call, &agent, setup.titles);
        let end = repl(
            &mut input,
            agent,
            setup.store,
            &args.store,
            setup.render,
            resumed,
            titler,
            &facts,
            setup.images,
        );
        // Background subagents end with their parent (cause `parent`).
        setup.delegation.shutdown(SUBAGENT_SHUTDOWN);
        start = match end.switch {
            None => return end.outcome,
            Some(crate::commands::Switch::Resume(id)) => Start::Resume(SessionId::new(id)),
            Some(_) => Start::Fork {
                parent: current,
                at: None,
            },
        };
    }
}

/// `dsh fork ID [--at SEQ]`: forks the stored session and chats on the fork.
pub fn fork(args: ForkArgs) -> Outcome {
    let start = Start::Fork {
        parent: SessionId::new(args.id.clone()),
        at: args.at,
    };
    chat_loop(&args.agent, start, false)
}

/// Where `dsh fork` cuts by default (loop.md SA-3): through the stored
/// log's last `turn/end`. The log is read as stored, without the closers a
/// load would add, so a turn another process is still writing is left out
/// rather than copied as interrupted.
pub(super) fn last_completed_turn(store: &dyn SessionStore, id: &SessionId) -> Result<u64, String> {
    let (_, events) = store
        .read_from(id, 0, &dsh_store::Cancel::new())
        .map_err(|e| e.to_string())?;
    completed_boundary(&events).ok_or_else(|| {
        format!(
            "session {id} has no completed turn to fork yet (its first turn is still open); pass --at SEQ"
        )
    })
}

/// How a chat ended: its exit, and the session to continue in (`/resume`,
/// `/fork`).
pub struct ChatEnd {
    /// The exit.
    pub outcome: Outcome,
    /// A session change the user asked for.
    pub switch: Option<crate::commands::Switch>,
}
