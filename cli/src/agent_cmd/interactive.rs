//! The interactive loop: feeds the REPL machine (`crate::repl`) with what
//! the user and the agent do, and carries out its actions.

use std::collections::VecDeque;
use std::io::{self, IsTerminal, Write};
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use dsh_core::session::EventData;
use dsh_std::{Agent, AgentEvent, AgentStatus, ApprovalRequestId, CancelCause};
use dsh_store::SessionStore;

use crate::Outcome;
use crate::render::{RenderOptions, Renderer};
use crate::sanitize::writeln_safe;
use crate::store::{StoreArgs, describe_location, now_ms};
use crate::title::Titler;

use super::{
    chat::ChatEnd,
    host::{AgentHost, Facts, image_line},
    sources::{ChatInput, Ui, spawn_tagged_forwarder},
    turn::{PendingErrors, TITLE_WAIT, first_output},
};

/// The interactive loop: feeds the [`crate::repl::Repl`] machine and
/// carries out its actions.
#[allow(clippy::too_many_arguments)]
pub(super) fn repl(
    input: &mut ChatInput,
    agent: Agent,
    store: Arc<dyn SessionStore>,
    store_args: &StoreArgs,
    render: RenderOptions,
    resumed: bool,
    mut titler: Titler,
    facts: &Facts,
    images: Option<dsh_tools::Attachments>,
) -> ChatEnd {
    // Images queued by `/image FILE` or a pasted image path go
    // with the next prompt.
    let mut pending_images: Vec<dsh_core::ContentBlock> = Vec::new();
    use crate::repl::{Action, Input, Repl};
    input.generation += 1;
    let generation = input.generation;
    spawn_tagged_forwarder(&agent, generation, input.tx.clone());
    let rx = &input.rx;
    let mut out = io::stdout().lock();
    let mut r = Renderer::new(render);
    let id = agent.session_id().clone();
    let _ = writeln_safe!(
        out,
        "dsh chat: session {}{} (/help for commands)",
        id.as_str(),
        if resumed { " (resumed)" } else { "" }
    );
    // The recap and the surface so far (for the token estimate), read in
    // place: a copy of a long log would double the resume's memory.
    let width = render.width;
    if resumed
        && let Ok((recap, surface)) = agent.with_events(move |events| {
            let recap = crate::render::recap(events, 4, width);
            (recap, crate::render::LogSurface::of(events))
        })
    {
        for line in recap {
            let _ = r.notice(&mut out, &line);
        }
        r.adopt_surface(surface);
    }
    // Piped input is a script of what the user would type, in order: a
    // line that arrives while a turn runs waits and answers the next
    // question, or becomes the next prompt when the turn ends. (On a
    // terminal a line typed during a turn steers it, and only a line typed
    // after a question answers it.)
    let piped = !io::stdin().is_terminal();
    // The skills go to the model as typed (`/NAME`: the skills plugin
    // loads that skill).
    let mut registry = crate::commands::Registry::standard();
    for (name, description) in &facts.skills {
        let _ = registry.register(crate::commands::Command::new(
            name,
            description,
            None,
            crate::commands::Handler::Prompt,
        ));
    }
    let mut machine: Repl<ApprovalRequestId> =
        Repl::new(registry, piped, io::stdout().is_terminal());
    let (held, ended) = std::mem::take(&mut input.leftover);
    machine.take_over(held, ended);
    let mut ids = crate::commands::CommandIds::new(now_ms());
    let mut errors = PendingErrors::default();
    let mut switch = None;
    let mut pending: VecDeque<Input<ApprovalRequestId>> = VecDeque::new();
    prompt(&mut out, false);
    'outer: loop {
        let _ = titler.poll(&agent, Duration::ZERO);
        if machine.finished() && pending.is_empty() {
            break;
        }
        let input = match pending.pop_front() {
            Some(i) => i,
            None => match machine.next_held() {
                Some(line) => Input::Line(line),
                None => match rx.recv_timeout(Duration::from_millis(120)) {
                    // This agent's events; an earlier agent's are dropped.
                    Ok(Ui::Of(g, _)) if g != generation => continue,
                    Ok(Ui::Of(_, ev)) => match to_input(
                        Ui::Event(ev),
                        &mut r,
                        &mut out,
                        &mut errors,
                        &mut titler,
                        &Where {
                            agent: &agent,
                            running: machine.running(),
                            facts,
                            color: render.color,
                        },
                    ) {
                        Some(i) => i,
                        None => continue,
                    },
                    Ok(msg) => match to_input(
                        msg,
                        &mut r,
                        &mut out,
                        &mut errors,
                        &mut titler,
                        &Where {
                            agent: &agent,
                            running: machine.running(),
                            facts,
                            color: render.color,
                        },
                    ) {
                        Some(i) => i,
                        None => continue,
                    },
                    Err(RecvTimeoutError::Timeout) => Input::Tick,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
            },
        };
        // `/image FILE` or a pasted image path, unless the line
        // answers an approval or a question.
        let input = match input {
            Input::Line(line) if !machine.answering() => {
                match image_line(line.trim(), images.as_ref(), &mut pending_images) {
                    Some(notice) => {
                        let _ = r.notice(&mut out, &notice);
                        if !machine.running() {
                            prompt(&mut out, false);
                        }
                        continue;
                    }
                    None => Input::Line(line),
                }
            }
            other => other,
        };
        for action in machine.handle(input) {
            match action {
                Action::Send { text, followup } => {
                    // `/mcp:SERVER:PROMPT key=value ...`: an MCP prompt.
                    let text = match crate::mcp::expand_prompt(text.trim()) {
                        Some(Ok(t)) => t,
                        Some(Err(e)) => {
                            let _ = r.notice(&mut out, &format!("error: {e}"));
                            // No turn started.
                            pending.push_back(Input::Running(false));
                            continue;
                        }
                        None => text,
                    };
                    let result = if !pending_images.is_empty() {
                        let mut content = vec![dsh_core::ContentBlock::text(text)];
                        content.append(&mut pending_images);
                        agent.send_content(content)
                    } else if followup {
                        agent.followup(&text)
                    } else {
                        agent.send(&text)
                    };
                    if let Err(e) = result {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                }
                Action::Steer(text) => {
                    if let Err(e) = agent.steer(&text) {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                }
                Action::Followup(text) => {
                    if let Err(e) = agent.followup(&text) {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                }
                Action::Cancel => agent.cancel(CancelCause::User, false),
                Action::Answer(req, decision) => agent.answer_approval(req, decision),
                Action::Reply(req, value) => agent.answer(req, dsh_std::Reply::Plugin(value)),
                Action::Dismiss(req) => agent.answer(req, dsh_std::Reply::Cancelled),
                Action::Command { name, args } => {
                    let mut host = AgentHost {
                        agent: &agent,
                        store: store.as_ref(),
                        facts,
                    };
                    let done = machine
                        .registry()
                        .execute(&mut host, &mut ids, &name, &args);
                    if done.switch.is_some() && done.ok {
                        let _ = r.notice(&mut out, done.text.as_deref().unwrap_or(""));
                        switch = done.switch;
                        break 'outer;
                    }
                    pending.push_back(Input::CommandDone(done));
                }
                Action::Notice(text) => {
                    let _ = r.notice(&mut out, &text);
                }
                Action::Print(text) => {
                    let _ = writeln_safe!(out, "{text}");
                }
                Action::Prompt => prompt(&mut out, machine.running()),
                Action::Tick => {
                    let _ = r.tick(&mut out);
                }
                Action::Idle => {
                    for e in errors.take() {
                        let _ = r.notice(&mut out, &format!("error: {e}"));
                    }
                    let _ = r.clear_status(&mut out);
                }
                Action::Quit => break 'outer,
            }
        }
    }
    let running = machine.running();
    input.leftover = machine.leftover();
    let _ = r.clear_status(&mut out);
    let _ = writeln!(out);
    drop(out);
    if running {
        agent.cancel(CancelCause::User, false);
    }
    let _ = titler.poll(&agent, TITLE_WAIT);
    let closed = agent.close();
    // After a hang-up the terminal may be gone: a failed write is ignored
    // (println! would panic).
    let mut stdout = io::stdout();
    let location = describe_location(store.as_ref(), store_args, &id);
    if let Err(e) = closed {
        // No "saved" for a log the store did not take in full.
        let _ = writeln_safe!(
            stdout,
            "error: {e}; session {} at {location} is incomplete",
            id.as_str()
        );
        return ChatEnd {
            outcome: Outcome::CheckFailed,
            switch: None,
        };
    }
    let _ = writeln_safe!(stdout, "session {} saved: {location}", id.as_str());
    if switch.is_none() {
        let _ = writeln_safe!(stdout, "resume with: dsh chat --resume {}", id.as_str());
    }
    ChatEnd {
        outcome: Outcome::Ok,
        switch,
    }
}

/// What [`to_input`] reads about the chat.
pub(super) struct Where<'a> {
    pub(super) agent: &'a Agent,
    pub(super) running: bool,
    pub(super) facts: &'a Facts,
    pub(super) color: bool,
}

/// Renders what needs rendering of `msg` and turns it into the machine's
/// input (`None`: nothing for the machine).
pub(super) fn to_input(
    msg: Ui,
    r: &mut Renderer,
    out: &mut dyn Write,
    errors: &mut PendingErrors,
    titler: &mut Titler,
    at: &Where<'_>,
) -> Option<crate::repl::Input<ApprovalRequestId>> {
    use crate::repl::Input;
    Some(match msg {
        Ui::Event(AgentEvent::Event(ev)) => {
            let _ = r.event(out, &ev);
            if let EventData::TurnEnd(_) = ev.data() {
                for e in errors.after_turn(&ev) {
                    let _ = r.notice(out, &format!("error: {e}"));
                }
                titler.turn_ended(at.agent);
            }
            if let EventData::StepStart(_) | EventData::LlmRetry(_) = ev.data() {
                Input::Waiting
            } else if first_output(&ev) {
                Input::Output
            } else {
                return None;
            }
        }
        Ui::Event(AgentEvent::Status(status)) => {
            Input::Running(!matches!(status, AgentStatus::Idle))
        }
        Ui::Event(AgentEvent::ApprovalRequested {
            id,
            tool,
            arguments,
            ..
        }) => {
            let _ = r.clear_status(out);
            let _ = r.end_line(out);
            if let Some(diff) = crate::diff::for_call(&tool, &arguments, &at.facts.cwd, at.color) {
                // tty: diff::unified sanitises every line; the colours are ours.
                let _ = write!(out, "{diff}");
            }
            // tty: approval_prompt() shows every value through sanitize::approval_value.
            let _ = write!(out, "{}", crate::render::approval_prompt(&tool, &arguments));
            let _ = out.flush();
            Input::Approval(id)
        }
        Ui::Event(AgentEvent::Asked {
            id,
            plugin,
            request,
        }) if plugin == crate::interact::PLUGIN => {
            let _ = r.clear_status(out);
            let _ = r.end_line(out);
            Input::Question(id, request)
        }
        Ui::Event(AgentEvent::Asked { id, .. }) => {
            // No front end for this plugin's asks: withdraw it.
            at.agent.answer(id, dsh_std::Reply::Cancelled);
            return None;
        }
        Ui::Event(AgentEvent::Error(e)) => {
            if at.running {
                errors.push(e);
            } else {
                let _ = r.notice(out, &format!("error: {e}"));
            }
            return None;
        }
        Ui::Event(_) | Ui::Of(..) => return None,
        Ui::Line(line) => Input::Line(line),
        Ui::Eof => Input::Eof,
        Ui::Interrupt => Input::Interrupt,
        Ui::Terminate => Input::Terminate,
    })
}

pub(super) fn prompt(out: &mut dyn Write, running: bool) {
    if !running {
        let _ = write!(out, "> ");
        let _ = out.flush();
    }
}
