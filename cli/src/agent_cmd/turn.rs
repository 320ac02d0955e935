//! `dsh run` and the shared driver that runs one turn and renders it.

use std::io::{self, IsTerminal, Write};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use dsh_core::SessionId;
use dsh_core::session::{EventData, SessionEvent};
use dsh_std::{Agent, AgentEvent, AgentStatus, CancelCause};
use dsh_store::SessionStore;

use crate::Outcome;
use crate::render::{RenderOptions, Renderer, TurnOutcome};
use crate::sanitize::eprintln_safe;
use crate::store::{describe_location, new_session_id, now_ms};
use crate::title::Titler;

use super::{
    args::RunArgs,
    setup::setup_with,
    sources::{Ui, install_ctrlc, spawn_forwarder},
};

/// Whether a turn outcome counts as success for an exit code.
pub fn completed(outcome: &TurnOutcome) -> bool {
    outcome.reason == "completed"
}

/// How long a command waits for a pending title before it exits.
pub(super) const TITLE_WAIT: Duration = Duration::from_secs(5);

/// A titler for `agent`, which runs with `config`'s provider and call.
pub(super) fn titler_for(
    provider: Arc<dyn dsh_std::ModelProvider>,
    call: dsh_core::LlmCallConfig,
    agent: &Agent,
    enabled: bool,
) -> Titler {
    Titler::for_agent(provider, call, agent, enabled)
}

/// `dsh run PROMPT`.
pub fn run(args: RunArgs) -> Outcome {
    let setup = match setup_with(&args.agent, false, args.yes, args.plan) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let id = new_session_id(now_ms());
    let mut titler = Titler::new(
        setup.config.provider.clone(),
        setup.config.call_config.clone(),
        &[],
        setup.titles,
    );
    let agent = match Agent::create(setup.config, setup.store.clone(), id.clone()) {
        Ok(a) => a,
        Err(e) => {
            eprintln_safe!("dsh run: cannot start the agent: {e}");
            return Outcome::BadInput;
        }
    };
    let mut content = vec![dsh_core::ContentBlock::text(args.prompt.clone())];
    for path in &args.image {
        match attach_image(setup.images.as_ref(), path) {
            Ok(block) => content.push(block),
            Err(e) => {
                eprintln_safe!("dsh run: {e}");
                let _ = agent.close();
                return Outcome::BadInput;
            }
        }
    }
    let result = log_preset(&agent, args.agent.preset, &setup.sandbox)
        .and_then(|()| drive_content(&agent, content, setup.render, args.json, args.yes));
    // The answer is out; the title gets a bounded wait before exit.
    titler.turn_ended(&agent);
    let title = titler.poll(&agent, TITLE_WAIT);
    if args.json
        && let Some(seq) = title
        && let Ok(events) = agent.events()
        && let Some(ev) = events.get(seq as usize)
    {
        // `--json` prints the whole log: the title too.
        let mut line = Vec::new();
        dsh_core::jsonl::encode_event_line(ev, &mut line);
        let _ = io::stdout().write_all(&line);
    }
    let closed = agent.close();
    let location = describe_location(setup.store.as_ref(), &args.agent.store, &id);
    if let Err(e) = closed {
        // What the store did not take is not claimed as saved.
        if let Err(e) = &result {
            eprintln!("dsh run: {}", crate::sanitize::terminal(e));
        }
        eprintln!(
            "dsh run: {}",
            crate::sanitize::terminal(&format!(
                "{e}; session {} at {location} is incomplete",
                id.as_str()
            ))
        );
        return Outcome::CheckFailed;
    }
    if let Some(file) = &args.record
        && let Err(e) = record(setup.store.as_ref(), &id, file)
    {
        eprintln_safe!("dsh run: cannot record to {}: {e}", file.display());
        return Outcome::CheckFailed;
    }
    match result {
        Ok(outcome) => {
            if !args.json {
                eprintln_safe!("session {} → {location}", id.as_str());
            }
            if completed(&outcome) {
                Outcome::Ok
            } else {
                Outcome::CheckFailed
            }
        }
        Err(e) => {
            eprintln_safe!("dsh run: {e}");
            Outcome::CheckFailed
        }
    }
}

/// Logs the permission preset chosen with `--preset`, if any.
pub(super) fn log_preset(
    agent: &Agent,
    preset: Option<crate::preset::Preset>,
    sandbox: &str,
) -> Result<(), String> {
    for e in preset.map(|p| p.events(sandbox)).unwrap_or_default() {
        agent
            .append_event(e)
            .map_err(|e| format!("cannot log the permission preset: {e}"))?;
    }
    Ok(())
}

/// Writes session `id`'s stored log (header and events, JSONL) to `file`.
pub(super) fn record(
    store: &dyn SessionStore,
    id: &SessionId,
    file: &std::path::Path,
) -> Result<(), String> {
    let stored = store.load(id).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    dsh_core::jsonl::encode_header_line(&stored.header, &mut bytes);
    for e in &stored.events {
        dsh_core::jsonl::encode_event_line(e, &mut bytes);
    }
    std::fs::write(file, bytes).map_err(|e| e.to_string())
}

/// An image block for the file at `path`, stored in `store`; an error
/// when the model takes no images or the file is not an image dsh takes.
pub fn attach_image(
    store: Option<&dsh_tools::Attachments>,
    path: &std::path::Path,
) -> Result<dsh_core::ContentBlock, String> {
    let shown = path.display();
    let Some(store) = store else {
        return Err(format!(
            "cannot attach {shown}: the model does not take images (pass --images, or set `images = true` in its [models.\"ID\"] table, for one that does)"
        ));
    };
    let declared = dsh_tools::image::media_type_for_path(&path.to_string_lossy());
    let file = std::fs::File::open(path).map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let mut data = Vec::new();
    io::Read::read_to_end(
        &mut io::Read::take(file, dsh_tools::image::MAX_IMAGE_BYTES + 1),
        &mut data,
    )
    .map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    store
        .save_image(&data, declared, name)
        .map(|attachment| dsh_core::ContentBlock::Image { attachment })
        .map_err(|e| format!("cannot attach {shown}: {e}"))
}

/// [`drive_one_turn`] with a prompt of any content (text and images).
pub fn drive_content(
    agent: &Agent,
    content: Vec<dsh_core::ContentBlock>,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    drive(agent, Prompt::Content(content), render, json, approve_all)
}

pub(super) enum Prompt<'a> {
    Text(&'a str),
    Content(Vec<dsh_core::ContentBlock>),
}

/// Sends `prompt`, renders (or prints as JSON) until the turn ends; answers
/// approvals with `approve_all` (allow) or deny. Ctrl-C cancels the turn.
pub fn drive_one_turn(
    agent: &Agent,
    prompt: &str,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    drive(agent, Prompt::Text(prompt), render, json, approve_all)
}

pub(super) fn drive(
    agent: &Agent,
    prompt: Prompt<'_>,
    render: RenderOptions,
    json: bool,
    approve_all: bool,
) -> Result<TurnOutcome, String> {
    let (tx, rx) = mpsc::channel();
    spawn_forwarder(agent, tx.clone());
    install_ctrlc(tx);
    let mut out = io::stdout().lock();
    match prompt {
        Prompt::Text(text) => agent.send(text),
        Prompt::Content(content) => agent.send_content(content),
    }
    .map_err(|e| e.to_string())?;
    let mut renderer = Renderer::new(render);
    let spinner = !json && io::stdout().is_terminal();
    let mut waiting = true;
    let mut cancelled = false;
    let mut outcome = None;
    let mut errors = PendingErrors::default();
    loop {
        let msg = match rx.recv_timeout(Duration::from_millis(120)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if spinner && waiting {
                    let _ = renderer.tick(&mut out);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Ui::Event(AgentEvent::Event(ev)) => {
                if json {
                    let mut line = Vec::new();
                    dsh_core::jsonl::encode_event_line(&ev, &mut line);
                    let _ = out.write_all(&line);
                    let _ = out.flush();
                } else {
                    if first_output(&ev) {
                        waiting = false;
                    }
                    if let EventData::LlmRetry(_) = ev.data() {
                        waiting = true;
                    }
                    let _ = renderer.event(&mut out, &ev);
                }
                if let EventData::TurnEnd(_) = ev.data() {
                    outcome = Some(turn_outcome(&ev, &renderer));
                    for e in errors.after_turn(&ev) {
                        eprintln!("error: {}", crate::sanitize::terminal(&e.to_string()));
                    }
                }
            }
            Ui::Event(AgentEvent::ApprovalRequested {
                id,
                tool,
                arguments,
                ..
            }) => {
                let decision = if approve_all {
                    dsh_std::ApprovalDecision::Allow
                } else {
                    dsh_std::ApprovalDecision::Deny
                };
                if !json {
                    let verb = if approve_all {
                        "allowed"
                    } else {
                        "denied (use --yes to allow)"
                    };
                    let _ = renderer.notice(
                        &mut out,
                        &format!(
                            "{tool} {}: {verb}",
                            crate::render::summarize_arguments(&arguments, 60)
                        ),
                    );
                }
                agent.answer_approval(id, decision);
            }
            Ui::Event(AgentEvent::Status(AgentStatus::Idle)) if outcome.is_some() => break,
            Ui::Event(AgentEvent::Error(e)) => errors.push(e),
            Ui::Event(_) => {}
            Ui::Interrupt | Ui::Terminate => {
                if cancelled {
                    // Second Ctrl-C: leave now.
                    break;
                }
                cancelled = true;
                if !json {
                    let _ = renderer.notice(&mut out, "cancelling… (Ctrl-C again to quit)");
                }
                agent.cancel(CancelCause::User, false);
            }
            Ui::Line(_) | Ui::Eof | Ui::Of(..) => {}
        }
    }
    for e in errors.take() {
        eprintln!("error: {}", crate::sanitize::terminal(&e.to_string()));
    }
    outcome.ok_or_else(|| "the agent stopped before the turn ended".to_string())
}

/// Runtime error notifications, held so that the one repeating the turn's
/// own error is not shown twice.
#[derive(Default)]
pub(super) struct PendingErrors(pub(super) Vec<String>);

impl PendingErrors {
    pub(super) fn push(&mut self, e: String) {
        self.0.push(e);
    }

    /// The held errors other than the one `turn_end` reports.
    pub(super) fn after_turn(&mut self, turn_end: &SessionEvent) -> Vec<String> {
        let shown = match turn_end.data() {
            EventData::TurnEnd(end) => match &end.reason {
                dsh_core::session::TurnEndReason::Error { error } => Some(error.message.clone()),
                _ => None,
            },
            _ => None,
        };
        let mut rest = self.take();
        rest.retain(|e| Some(e) != shown.as_ref());
        rest
    }

    pub(super) fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.0)
    }
}

/// The renderer's outcome, or one read from the `turn/end` event itself
/// (JSON mode does not render).
pub(super) fn turn_outcome(ev: &SessionEvent, renderer: &Renderer) -> TurnOutcome {
    let _ = renderer;
    match ev.data() {
        EventData::TurnEnd(end) => TurnOutcome {
            turn: end.turn,
            reason: end.reason.kind().to_string(),
            error: None,
            usage: Default::default(),
        },
        _ => TurnOutcome::default(),
    }
}

/// Whether `ev` is the first visible output of a step (ends the spinner).
pub(super) fn first_output(ev: &SessionEvent) -> bool {
    matches!(
        ev.data(),
        EventData::AssistantChunk(_) | EventData::ToolCall(_) | EventData::TurnEnd(_)
    )
}
