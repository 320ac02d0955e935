//! Session titles: after the first completed turn, a short title from the
//! model (a separate small request on its own thread, so the turn never
//! waits for it), recorded once as a `session/title` event
//! (`{title, messageSeqs, source}`, session.md); `dsh sessions` shows it.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use dsh_core::session::{EventData, SessionEvent, TurnEndReason};
use dsh_core::{
    ContentBlock, GenerateOptions, LlmCallConfig, Message, MessageSource, Purpose, StreamChunk,
};
use dsh_deepseek::CancelToken;
use dsh_std::{Agent, ModelProvider};
use serde_json::{Value, json};

/// The event type of a title.
pub const TITLE_EVENT: &str = "session/title";
/// The `source.provider` of titles dsh generates.
pub const TITLE_PROVIDER: &str = "dsh-session-title";
/// The system message of a title request.
pub const TITLE_SYSTEM: &str = "Write a title for this coding-agent session. Reply with the \
title only: one line of plain text, about five words, in the language of the user's message, \
with no quotes, no Markdown and no final period.";
/// Largest part of the first prompt sent in a title request (chars).
const MAX_PROMPT_CHARS: usize = 2_000;
/// Largest title kept (chars).
const MAX_TITLE_CHARS: usize = 80;
/// Largest reply text read (bytes).
const MAX_REPLY_BYTES: usize = 4_096;

enum State {
    /// No title yet and none being made.
    Idle,
    /// A request is on its way.
    Running(Receiver<Option<String>>, u64),
    /// Recorded (or not wanted).
    Done,
}

/// Makes the title of one session.
pub struct Titler {
    provider: Arc<dyn ModelProvider>,
    call: LlmCallConfig,
    state: State,
}

/// Whether `events` already hold a title from a model.
pub fn has_title(events: &[SessionEvent]) -> bool {
    events.iter().any(|e| {
        e.data().event_type() == TITLE_EVENT
            && title_of(e)
                .and_then(|v| {
                    v.get("source")?
                        .get("kind")?
                        .as_str()
                        .map(|k| k != "fallback")
                })
                .unwrap_or(false)
    })
}

/// The data of a plugin event as JSON.
fn title_of(e: &SessionEvent) -> Option<Value> {
    match e.data() {
        EventData::Plugin(p) => serde_json::from_str(p.data.get()).ok(),
        _ => None,
    }
}

/// The newest title in `events`, if any.
pub fn latest_title(events: &[SessionEvent]) -> Option<String> {
    events
        .iter()
        .rev()
        .filter(|e| e.data().event_type() == TITLE_EVENT)
        .find_map(|e| title_of(e)?.get("title")?.as_str().map(str::to_string))
}

/// The first user-typed message after a completed turn: its seq and text.
fn first_prompt(events: &[SessionEvent]) -> Option<(u64, String)> {
    let completed = events.iter().any(|e| {
        matches!(e.data(), EventData::TurnEnd(end) if matches!(end.reason, TurnEndReason::Completed))
    });
    if !completed {
        return None;
    }
    events.iter().find_map(|e| match e.data() {
        EventData::UserMessage(m) if m.source == MessageSource::User => {
            let text: String = m
                .content
                .iter()
                .filter_map(ContentBlock::as_text)
                .collect::<Vec<_>>()
                .join("\n");
            Some((e.seq(), text))
        }
        _ => None,
    })
}

/// The title in a model reply: its first non-empty line without control
/// characters, quotes, Markdown marks or a final period, at most 80 chars.
pub fn clean_title(reply: &str) -> Option<String> {
    let line = reply.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line: String = line.chars().filter(|c| !c.is_control()).collect();
    let trimmed = line
        .trim_start_matches(['#', '*', '-', ' '])
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '*' | '“' | '”' | ' '))
        .trim_end_matches('.')
        .trim();
    let title = trimmed
        .strip_prefix("Title:")
        .map(str::trim)
        .unwrap_or(trimmed);
    if title.is_empty() {
        return None;
    }
    Some(crate::render::cut(title, MAX_TITLE_CHARS))
}

impl Titler {
    /// A titler for a session whose log so far is `events`: done already
    /// when it holds a model title, or when `enabled` is false.
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        call: LlmCallConfig,
        events: &[SessionEvent],
        enabled: bool,
    ) -> Titler {
        let state = if !enabled || has_title(events) {
            State::Done
        } else {
            State::Idle
        };
        Titler {
            provider,
            call,
            state,
        }
    }

    /// A titler for `agent`'s session as it stands (its log read in place,
    /// not copied): done already when it holds a model title, or when
    /// `enabled` is false.
    pub fn for_agent(
        provider: Arc<dyn ModelProvider>,
        call: LlmCallConfig,
        agent: &Agent,
        enabled: bool,
    ) -> Titler {
        let titled = enabled && agent.with_events(has_title).unwrap_or(false);
        Titler::new(provider, call, &[], enabled && !titled)
    }

    /// After a turn ended: starts the title request when the session has a
    /// completed turn and no title yet. Never waits.
    pub fn turn_ended(&mut self, agent: &Agent) {
        if !matches!(self.state, State::Idle) {
            return;
        }
        // Read in place: a resumed session's log is not copied for this.
        let found = agent.with_events(|events| {
            first_prompt(events).map(|(seq, prompt)| {
                (
                    seq,
                    prompt.chars().take(MAX_PROMPT_CHARS).collect::<String>(),
                )
            })
        });
        let Ok(Some((seq, prompt))) = found else {
            return;
        };
        let (tx, rx) = mpsc::channel();
        let provider = self.provider.clone();
        let call = self.call.clone();
        let session = agent.session_id().clone();
        let spawned = thread::Builder::new()
            .name("dsh-title".into())
            .spawn(move || {
                let _ = tx.send(request_title(provider.as_ref(), &call, session, &prompt));
            });
        self.state = match spawned {
            Ok(_) => State::Running(rx, seq),
            Err(_) => State::Done,
        };
    }

    /// Records the title if it has arrived (waiting at most `wait`);
    /// returns the seq of the recorded event.
    pub fn poll(&mut self, agent: &Agent, wait: Duration) -> Option<u64> {
        let State::Running(rx, seq) = &self.state else {
            return None;
        };
        let title = match rx.recv_timeout(wait) {
            Ok(title) => title,
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => None,
        };
        let mut recorded = None;
        if let Some(title) = title {
            let data = json!({
                "title": title,
                "messageSeqs": [seq],
                "source": {
                    "kind": "provider",
                    "provider": TITLE_PROVIDER,
                    "model": {"provider": self.call.provider, "model": self.call.model},
                },
            });
            recorded = agent
                .append_event(EventData::plugin(TITLE_EVENT, &data))
                .ok();
        }
        self.state = State::Done;
        recorded
    }
}

/// One title request; `None` on any failure (a session simply has no
/// title then).
fn request_title(
    provider: &dyn ModelProvider,
    call: &LlmCallConfig,
    session: dsh_core::SessionId,
    prompt: &str,
) -> Option<String> {
    let message = Message::user("title-1", vec![ContentBlock::text(prompt)]);
    let mut opts = GenerateOptions::new(
        call.provider.clone(),
        call.model.clone(),
        vec![Arc::new(message)],
    );
    opts.system = Some(TITLE_SYSTEM.to_string());
    opts.max_tokens = Some(32);
    opts.purpose = Some(Purpose::SessionTitle);
    opts.session_id = Some(session);
    let stream = provider.stream(&opts, &CancelToken::new()).ok()?;
    let mut text = String::new();
    for chunk in stream {
        match chunk.ok()? {
            StreamChunk::TextDelta { text: t, .. } => {
                if text.len() + t.len() > MAX_REPLY_BYTES {
                    break;
                }
                text.push_str(&t);
            }
            StreamChunk::Finish { .. } => break,
            _ => {}
        }
    }
    clean_title(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_clean_line() {
        assert_eq!(
            clean_title("Fix the parser\nmore"),
            Some("Fix the parser".into())
        );
        assert_eq!(
            clean_title("\n  \"Add tests.\"  "),
            Some("Add tests".into())
        );
        assert_eq!(
            clean_title("# **Title: Refactor**"),
            Some("Refactor".into())
        );
        assert_eq!(clean_title("a\u{1b}[31mb"), Some("a[31mb".into()));
        assert_eq!(clean_title("  \n "), None);
        assert_eq!(clean_title("\"\""), None);
        assert!(clean_title(&"x".repeat(500)).unwrap().chars().count() <= MAX_TITLE_CHARS);
    }

    #[test]
    fn the_mock_recognizes_title_requests() {
        assert!(TITLE_SYSTEM.starts_with(dsh_deepseek::mock::TITLE_MARKER));
    }
}
