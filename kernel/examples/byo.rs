//! Bring your own runtime: the kernel driven by a small hand-written loop,
//! with no dsh runtime crate, no threads and no network.
//!
//! ```text
//! cargo run -p dsh-runtime --example byo
//! ```
//!
//! The "model" is a canned script, the one tool (`add`) runs inline, the
//! "store" is a JSONL file held in memory (the header line, then one line
//! per event) and time is a counter the loop moves. Everything a real
//! runtime does is here:
//!
//! - the drain rule: drain [`Kernel::poll`] until `None`, carry out the
//!   effects, and only then feed the kernel what came back (one arrival at
//!   a time: a chunk, a stream end, a tool result, a write's
//!   acknowledgement), then drain again;
//! - sleep until [`Kernel::poll_timeout`] when nothing arrives;
//! - persist each `Persist` range as JSONL lines after the header;
//! - stop, reload the file, resume the session in a new kernel and run a
//!   second turn; the ids of the second turn continue after the first's.

use std::collections::VecDeque;
use std::error::Error;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::jsonl;
use dsh_core::session::EventData;
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk, Time};
use dsh_runtime::{
    AgentConfig, AgentEvent, AttemptId, Effect, IdMode, InboxTarget, Kernel, ToolToken,
    create_session, resume_session,
};
use serde_json::json;

/// The scripted model, one stream per model call: a tool call and the
/// answer for the first turn, one answer for the second. Every stream is
/// one [`StreamValidator`](dsh_core::StreamValidator) accepts (each block
/// opened, its deltas, closed with the same content; then the finish).
pub fn script() -> Vec<Vec<StreamChunk>> {
    let args = r#"{"a":2,"b":3}"#;
    let text = |s: &str| {
        vec![
            StreamChunk::block_start(0, "text"),
            StreamChunk::TextDelta {
                index: 0,
                text: s.into(),
            },
            StreamChunk::block_end(0, ContentBlock::text(s)),
            StreamChunk::finish(FinishReason::Stop),
        ]
    };
    vec![
        vec![
            StreamChunk::block_start(0, "tool-call"),
            StreamChunk::ToolCallDelta {
                index: 0,
                head: dsh_core::ToolCallHead::owned("call_1".into(), Some("add".into())),
                arguments_delta: args.into(),
            },
            StreamChunk::block_end(0, ContentBlock::tool_call("call_1", "add", args)),
            StreamChunk::finish(FinishReason::ToolCalls),
        ],
        text("2 + 3 = 5"),
        text("You asked what 2 + 3 is; it is 5."),
    ]
}

/// The one tool body.
fn add(arguments: &serde_json::Value) -> ToolOutcome {
    let a = arguments["a"].as_i64().unwrap_or(0);
    let b = arguments["b"].as_i64().unwrap_or(0);
    ToolOutcome::success(vec![ContentBlock::text(format!("{}", a + b))])
}

/// The agent's configuration (the same for the first run and the resume).
fn config() -> Result<AgentConfig, Box<dyn Error>> {
    let mut tools = ToolRegistry::new();
    tools.register(ToolDefinition::untyped(
        "add",
        "Adds two integers",
        json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}),
    ))?;
    let mut config = AgentConfig::new(LlmCallConfig::new("scripted", "scripted-1"));
    config.tools = tools;
    config.system_prompt = Some("You add numbers.".into());
    config.ids = IdMode::Sequential;
    Ok(config)
}

/// What comes back from the outside world, fed to the kernel one at a time
/// after a drain.
enum Arrival {
    Chunk(AttemptId, StreamChunk),
    End(AttemptId),
    ToolDone(ToolToken, Box<ToolOutcome>),
    Written,
}

/// The host side of one agent: its clock, model, store and log output.
pub struct Host {
    /// The clock (epoch ms), moved by the loop.
    pub now: Time,
    model: VecDeque<Vec<StreamChunk>>,
    /// The durable store: a JSONL file (header line, then event lines).
    pub file: Vec<u8>,
    /// How many events the file holds.
    pub stored: u64,
    /// Print what happens.
    pub verbose: bool,
}

impl Host {
    /// Runs `kernel` until it is idle with nothing left to do.
    fn run(&mut self, kernel: &mut Kernel) -> Result<(), Box<dyn Error>> {
        let mut arrivals: VecDeque<Arrival> = VecDeque::new();
        loop {
            // 1. Drain: take every effect; feed the kernel nothing meanwhile.
            let mut effects = Vec::new();
            while let Some(effect) = kernel.poll() {
                effects.push(effect);
            }
            // 2. Carry them out; what they give back waits in `arrivals`.
            for effect in effects {
                self.carry(kernel, effect, &mut arrivals);
            }
            // 3. Feed one arrival, then drain again.
            if let Some(arrival) = arrivals.pop_front() {
                self.now += 1;
                let fed = match arrival {
                    Arrival::Chunk(attempt, chunk) => kernel.model_chunk(self.now, attempt, chunk),
                    Arrival::End(attempt) => kernel.model_end(self.now, attempt),
                    Arrival::ToolDone(token, outcome) => {
                        kernel.tool_done(self.now, token, *outcome, Vec::new())
                    }
                    Arrival::Written => kernel.persisted(self.now, Ok(())),
                };
                match fed {
                    // A chunk of a stream the kernel stopped, a result of a
                    // call it already answered: harmless, drop it.
                    Err(e) if e.is_stale() => {}
                    other => other?,
                }
                continue;
            }
            // 4. Nothing arrived: sleep until the next deadline, or stop.
            match kernel.poll_timeout() {
                Some(deadline) => {
                    // A real host sleeps this long on a monotonic timer
                    // (never comparing its wall clock with the deadline);
                    // this one moves its simulated clock.
                    self.now += deadline.millis_since(kernel.now());
                    kernel.handle_timeout(self.now, deadline);
                }
                None if kernel.is_idle() => return Ok(()),
                None => return Err("the kernel waits for an input this loop never gives".into()),
            }
        }
    }

    fn carry(&mut self, kernel: &Kernel, effect: Effect, arrivals: &mut VecDeque<Arrival>) {
        match effect {
            Effect::StartModel(call) => {
                // A real runtime streams from a provider (a thread, a task,
                // a serial link); the chunks arrive one by one.
                for chunk in self.model.pop_front().unwrap_or_default() {
                    arrivals.push_back(Arrival::Chunk(call.attempt, chunk));
                }
                arrivals.push_back(Arrival::End(call.attempt));
            }
            Effect::StartTool { exec, .. } => {
                arrivals.push_back(Arrival::ToolDone(
                    exec.token,
                    Box::new(add(&exec.arguments)),
                ));
            }
            Effect::Persist { range, checkpoint } => {
                // Append the range as JSONL lines, then acknowledge.
                let events = kernel.session().events();
                let new = events
                    .get(range.start as usize..range.end as usize)
                    .unwrap_or_default();
                jsonl::encode_batch(new, false, &mut self.file);
                self.stored = range.end;
                if self.verbose {
                    println!("persist {range:?} at {checkpoint:?}");
                }
                arrivals.push_back(Arrival::Written);
            }
            Effect::Publish(AgentEvent::Status(s)) if self.verbose => println!("status {s:?}"),
            Effect::Publish(AgentEvent::Error(e)) => eprintln!("error {e}"),
            // Nothing to stop: the script and the tool finish at once.
            _ => {}
        }
    }
}

/// Runs the example: a first turn in a new session, then a second turn in
/// a kernel resumed from the stored file. Returns the host (its file holds
/// both turns).
pub fn run(verbose: bool) -> Result<Host, Box<dyn Error>> {
    let mut host = Host {
        now: Time::from_millis(1_700_000_000_000),
        model: VecDeque::from(script()),
        file: Vec::new(),
        stored: 0,
        verbose,
    };

    // First turn: a new session, its header written first.
    let session = create_session("byo-1".into(), host.now, None)?;
    jsonl::encode_header_line(session.header(), &mut host.file);
    let mut kernel = Kernel::new(config()?, session, 0, Vec::new())?;
    kernel.set_publish_events(true);
    let prompt = Message::user("u1", vec![ContentBlock::text("What is 2 + 3?")]);
    kernel.send(host.now, prompt, InboxTarget::NextTurn, true)?;
    host.run(&mut kernel)?;
    if verbose {
        println!(
            "turn {} ended {:?}",
            kernel.summary().turn,
            kernel.summary().reason
        );
    }
    drop(kernel); // the process could stop here: everything is stored

    // Reload the file (repairing a log a crash cut short) and resume.
    let loaded = jsonl::load_log(&host.file, &[])?;
    if loaded.needs_repair() {
        host.file = loaded.repaired_bytes(&host.file, false);
    }
    host.stored = loaded.session.len();
    let header = loaded.session.header().clone();
    let session = resume_session(header, loaded.session.events().to_vec(), host.now)?;
    let mut kernel = Kernel::new(config()?, session, host.stored, Vec::new())?;
    kernel.set_publish_events(true);
    let again = Message::user("u2", vec![ContentBlock::text("What did I ask?")]);
    kernel.send(host.now, again, InboxTarget::NextTurn, true)?;
    host.run(&mut kernel)?;
    if verbose {
        println!(
            "turn {} ended {:?}",
            kernel.summary().turn,
            kernel.summary().reason
        );
    }
    if host.stored != kernel.session().len() {
        return Err("the kernel went idle with events unstored".into());
    }
    Ok(host)
}

fn main() -> Result<(), Box<dyn Error>> {
    let host = run(true)?;
    let log = jsonl::load_log(&host.file, &[])?;
    println!("{} events stored; messages:", log.session.len());
    for e in log.session.events() {
        match e.data() {
            EventData::UserMessage(m) => println!("  user {}", m.id),
            EventData::AssistantMessage(a) => println!("  assistant {}", a.message.id),
            _ => {}
        }
    }
    Ok(())
}
