//! Replaying a recorded session through your own [`Kernel`]: your
//! [`AgentConfig`], your [`Plugin`]s and your tools.
//!
//! The recording's model answers become a scripted model: the
//! `assistant/chunk` events of each loop instance, one answer per attempt
//! (an answer ends at a `finish` chunk). The recording's inputs are fed
//! when the kernel reaches them: a user message sent while idle
//! (`agent/inbox/spliced` inserting into the inbox) and foreign events
//! appended by something other than the loop. Tool calls are answered by
//! your executor ([`Tools::Live`]) or from the recording
//! ([`Tools::Recorded`]). Every event the kernel writes is then compared
//! with the recorded one by [`comparable`](dsh_core::agent::replay::comparable)
//! (all fields but `time`).
//!
//! Each loop instance of the log is driven by a fresh kernel: the seed
//! ([`seed_length`]) is restored, each later `session/end-seed` (a resume)
//! ends one instance, and the next instance resumes from the recorded
//! events before it ([`resume_session`]). So every turn is replayed, and a
//! difference in one instance does not hide one in another.
//!
//! Not driven: cancellations, steering while a turn runs, approvals and
//! other asks (answer them in your plugins), side model calls, and model
//! answers that were not streamed as chunks; the report says where the
//! replay stopped.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use dsh_core::ContentBlock;
use dsh_core::StreamChunk;
use dsh_core::Time;
use dsh_core::agent::replay::{
    Difference, ReplayReport, is_core_event, recorded_outcome, seed_length,
};
use dsh_core::agent::tools::ToolOutcome;
use dsh_core::agent::{InboxTarget, ToolExecution};
use dsh_core::session::{EventData, Session, SessionEvent, SessionHeader};

use crate::Kernel;
use crate::plugin::Plugin;
use crate::session::resume_session;
use crate::types::{AgentConfig, Effect};

/// Runs a tool call during a live replay.
pub trait ToolExecutor {
    /// The outcome of `exec` (what your runtime would hand to
    /// [`Kernel::tool_done`]).
    fn execute(&mut self, exec: &ToolExecution) -> ToolOutcome;
}

impl<F: FnMut(&ToolExecution) -> ToolOutcome> ToolExecutor for F {
    fn execute(&mut self, exec: &ToolExecution) -> ToolOutcome {
        self(exec)
    }
}

/// Who answers the tool calls of a replay.
#[non_exhaustive]
pub enum Tools<'a> {
    /// Your executor runs every call; a changed tool result fails the
    /// replay.
    Live(&'a mut dyn ToolExecutor),
    /// Every call gets the recorded result (and the tool-owned events
    /// recorded with it).
    Recorded,
}

/// Replays `events` (a whole recorded log under `header`) with your
/// configuration, plugins (`plugins` makes a fresh set for each loop
/// instance) and tools, and compares every event the kernel writes with the
/// recorded one.
pub fn replay_with(
    header: &SessionHeader,
    events: &[SessionEvent],
    config: &AgentConfig,
    plugins: &mut dyn FnMut() -> Vec<Box<dyn Plugin>>,
    mut tools: Tools<'_>,
) -> ReplayReport {
    let seed = seed_length(header, events);
    let mut report = ReplayReport::new(seed);
    let mut start = seed;
    while start < events.len() {
        let end = events[start..]
            .iter()
            .position(|e| matches!(e.data(), EventData::EndSeed))
            .map_or(events.len(), |i| start + i);
        if end > start {
            instance(
                header,
                events,
                (start, end),
                config,
                plugins,
                &mut tools,
                &mut report,
            );
        }
        start = end + 1;
    }
    report
}

/// [`replay_with`] over a raw JSONL recording (persistence.md 6): the
/// store's `session.jsonl` is the fixture. A torn tail or an open last turn
/// fails the replay (replay the repaired log).
pub fn replay_jsonl_with(
    bytes: &[u8],
    config: &AgentConfig,
    plugins: &mut dyn FnMut() -> Vec<Box<dyn Plugin>>,
    tools: Tools<'_>,
) -> Result<ReplayReport, dsh_core::jsonl::LogError> {
    let loaded = dsh_core::jsonl::load_log(bytes, &[])?;
    let header = loaded.session.header().clone();
    let incomplete = loaded.truncate_to.is_some() || !loaded.closers.is_empty();
    let mut events = loaded.session.into_events();
    events.truncate(loaded.stored);
    let mut report = replay_with(&header, &events, config, plugins, tools);
    if incomplete {
        report.push(Difference::stopped(
            events.len() as u64,
            "the recording is torn or ends inside an open turn; replay the repaired log",
        ));
    }
    Ok(report)
}

/// The model answers of `events`: runs of `assistant/chunk`, each ending at
/// a `finish` chunk.
fn answers(events: &[SessionEvent]) -> VecDeque<Vec<StreamChunk>> {
    let mut out = VecDeque::new();
    let mut current = Vec::new();
    for e in events {
        if let EventData::AssistantChunk(c) = e.data() {
            current.push(c.chunk().clone());
            if c.is_finish() {
                out.push_back(core::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push_back(current);
    }
    out
}

/// The recorded answer to call `call_id`: its `tool/result` and the
/// foreign events recorded between its `tool/call` and the result.
fn recorded_answer(
    events: &[SessionEvent],
    call_id: &str,
) -> Option<(ToolOutcome, Vec<EventData>)> {
    let call = events
        .iter()
        .position(|e| matches!(e.data(), EventData::ToolCall(c) if c.call_id.0 == call_id))?;
    let mut owned = Vec::new();
    for e in &events[call + 1..] {
        match e.data() {
            EventData::ToolResult(r)
                if matches!(
                    r.message.content.first(),
                    Some(ContentBlock::ToolResult { tool_call_id, .. }) if tool_call_id.0 == call_id
                ) =>
            {
                return Some((recorded_outcome(r), owned));
            }
            _ if !is_core_event(e) => owned.push(e.data().clone()),
            _ => {}
        }
    }
    None
}

/// Drives one loop instance, `events[start..end]`, and compares.
fn instance(
    header: &SessionHeader,
    events: &[SessionEvent],
    (start, end): (usize, usize),
    config: &AgentConfig,
    plugins: &mut dyn FnMut() -> Vec<Box<dyn Plugin>>,
    tools: &mut Tools<'_>,
    report: &mut ReplayReport,
) {
    report.instances += 1;
    let part = &events[start..end];
    report.total += part.iter().filter(|e| is_core_event(e)).count();
    let time_at = |seq: usize| {
        Time::from_millis(
            events
                .get(seq.min(end.saturating_sub(1)))
                .map_or(0, SessionEvent::time),
        )
    };
    let session = if start == 0 {
        Ok(Session::new(header.clone()))
    } else {
        resume_session(header.clone(), events[..start].to_vec(), time_at(start))
    };
    let kernel = session.and_then(|s| Kernel::new(config.clone(), s, start as u64, plugins()));
    let mut kernel = match kernel {
        Ok(k) => k,
        Err(e) => {
            report.push(Difference::stopped(
                start as u64,
                format!("the recording cannot be resumed with this configuration: {e}"),
            ));
            return;
        }
    };
    kernel.set_publish_events(false);
    let mut answers = answers(part);
    let mut stopped: Option<Difference> = None;
    // Inputs and effects are bounded by the recording's length: a kernel
    // that loops without writing what the recording holds stops the replay.
    let mut budget = part.len() * 4 + 16;
    'drive: loop {
        let now = time_at(len_of(&kernel));
        while let Some(effect) = kernel.poll() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                break;
            }
            let pos = len_of(&kernel) as u64;
            let fed = match effect {
                Effect::StartModel(call) => match answers.pop_front() {
                    Some(chunks) => {
                        let mut ok = Ok(());
                        for c in chunks {
                            ok = kernel.model_chunk(now, call.attempt, c);
                            if ok.is_err() {
                                break;
                            }
                        }
                        ok.and_then(|()| kernel.model_end(now, call.attempt))
                            .map_err(|e| format!("the kernel refused the recorded answer: {e}"))
                    }
                    None => Err(String::from(
                        "the agent called the model more often than the recording answered",
                    )),
                },
                Effect::StartTool { exec, .. } => {
                    let answer = match tools {
                        Tools::Live(t) => Some((t.execute(&exec), Vec::new())),
                        Tools::Recorded => recorded_answer(part, &exec.call_id.0),
                    };
                    match answer {
                        Some((outcome, owned)) => kernel
                            .tool_done(now, exec.token, outcome, owned)
                            .map_err(|e| format!("the kernel refused the tool result: {e}")),
                        None => Err(format!(
                            "the recording has no result for tool call {}",
                            exec.call_id.0
                        )),
                    }
                }
                Effect::Persist { .. } => kernel
                    .persisted(now, Ok(()))
                    .map_err(|e| format!("the kernel refused a write: {e}")),
                Effect::SideModel { plugin, .. } => Err(format!(
                    "plugin {plugin} made a side model call, which a replay does not answer"
                )),
                _ => Ok(()),
            };
            if let Err(reason) = fed {
                stopped = Some(Difference::stopped(pos, reason));
                break 'drive;
            }
        }
        let pos = len_of(&kernel);
        if pos >= end {
            break;
        }
        budget = budget.saturating_sub(1);
        if budget == 0 {
            stopped = Some(Difference::stopped(
                pos as u64,
                "the replay stopped making progress",
            ));
            break;
        }
        let next = &events[pos];
        let fed = match next.data() {
            EventData::InboxSpliced(s)
                if kernel.is_idle()
                    && s.outcome.is_none()
                    && s.removed_count.is_none()
                    && !s.inserted.is_empty() =>
            {
                let target = match s.target {
                    dsh_core::session::InboxTarget::NextStep => InboxTarget::NextStep,
                    _ => InboxTarget::NextTurn,
                };
                let wake = events[pos + 1..end]
                    .iter()
                    .find(|e| is_core_event(e))
                    .is_some_and(|e| matches!(e.data(), EventData::TurnStart(_)));
                s.inserted
                    .iter()
                    .try_for_each(|m| kernel.send(now, (**m).clone(), target, wake))
                    .is_ok()
            }
            _ if !is_core_event(next) => kernel.append_event(now, next.data().clone()).is_ok(),
            _ => false,
        };
        if !fed {
            stopped = Some(Difference::stopped(
                pos as u64,
                format!(
                    "no input explains the recorded {} here (the agent is {})",
                    next.event_type(),
                    if kernel.is_idle() { "idle" } else { "busy" }
                ),
            ));
            break;
        }
    }
    // Compare what was written with the recording, event by event.
    let produced = kernel.session().events();
    let mut differs = None;
    for seq in start..end.max(produced.len().min(end + 1)) {
        let expected = events.get(seq).filter(|_| seq < end);
        match Difference::between(seq as u64, expected, produced.get(seq)) {
            Some(d) => {
                differs = Some(d);
                break;
            }
            None => {
                if events.get(seq).is_some_and(is_core_event) {
                    report.reproduced += 1;
                }
            }
        }
    }
    let shown = match (differs, stopped) {
        (Some(mut d), Some(s)) if d.seq >= s.seq => {
            d.reason = format!("{}; {}", s.reason, d.reason);
            Some(d)
        }
        (d, s) => d.or(s),
    };
    if let Some(d) = shown {
        report.push(d);
    }
}

/// The kernel's log length as an index.
fn len_of(kernel: &Kernel) -> usize {
    usize::try_from(kernel.session().len()).unwrap_or(usize::MAX)
}
