//! The cost of a step: the std and smol shells' per-step
//! overhead over the core machine, with a scripted in-memory provider, stub
//! tools and an in-memory store (a [`Coordinator`] over a memory backend).
//!
//! One turn of `DSH_BENCH_STEPS` (default 50) one-call tool steps plus a
//! final text step is run, interleaved, `DSH_BENCH_ROUNDS` times (default
//! 15) on each of:
//!
//! - `core`: the core machine (`dsh_core::agent::Agent`) driven by hand;
//! - `std`: a `dsh-std` agent (driver thread, tool threads, store calls);
//! - `std/shadow`: the same with the store's shadow validation on
//!   ([`CoordinatorConfig::validate_appends`]);
//! - `smol`: a `dsh-smol` agent on one executor thread.
//!
//! Each round measures wall time and process CPU time (user + system, all
//! threads) of `send` → idle. The report prints the medians per step, the
//! ratio of each shell to the core machine, and the load average, since
//! the machine may be shared. A custom harness, not criterion: the figure
//! wanted is an interleaved comparison with CPU time, which criterion does
//! not measure.

use dsh_core::Time;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::agent::{Agent as Core, AgentConfig as CoreConfig, AgentOptions, Output};
use dsh_core::session::{Session, SessionEvent, SessionHeader};
use dsh_core::{
    ContentBlock, FinishReason, GenerateOptions, LlmCallConfig, LlmError, Message, SessionId,
    StreamChunk,
};
use dsh_deepseek::CancelToken;
use dsh_store::{
    Backend, Coordinator, CoordinatorConfig, Location, Revision, SessionStore, Snapshot,
    StoreError, Stored,
};
use dsh_tools::{Tool, ToolCallRequest, ToolContext, ToolSet};
use serde_json::json;

const TOOLS: [&str; 3] = ["bash", "edit", "write"];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A tool that answers `ok` at once.
struct Stub(&'static str);

impl Tool for Stub {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::untyped(self.0, self.0, json!({"type":"object"}))
    }
    fn execute(&self, _call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        ToolOutcome::success(vec![ContentBlock::text("ok")])
    }
}

fn tool_step(i: u64) -> Vec<StreamChunk> {
    let call = ContentBlock::tool_call(format!("c{i}"), "bash", "{}");
    vec![
        StreamChunk::block_start(0, "tool_call"),
        StreamChunk::block_end(0, call),
        StreamChunk::finish(FinishReason::ToolCalls),
    ]
}

fn text_step() -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: "done".into(),
        },
        StreamChunk::block_end(0, ContentBlock::text("done")),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

/// The turn's replies: `steps` tool steps, then a text step.
fn script(steps: u64) -> Vec<Vec<StreamChunk>> {
    let mut r: Vec<_> = (0..steps).map(tool_step).collect();
    r.push(text_step());
    r
}

/// Serves the script in order without recording requests.
struct Scripted(Mutex<std::vec::IntoIter<Vec<StreamChunk>>>);

impl dsh_std::ModelProvider for Scripted {
    fn blocks(&self) -> bool {
        false
    }
    fn stream(
        &self,
        _opts: &GenerateOptions,
        _cancel: &CancelToken,
    ) -> Result<dsh_host::ChunkStream, LlmError> {
        let next = self.0.lock().ok().and_then(|mut r| r.next());
        match next {
            Some(chunks) => Ok(Box::new(chunks.into_iter().map(Ok))),
            None => Err(LlmError::coded("SCRIPT_EXHAUSTED", "no reply left")),
        }
    }
}

/// An in-memory backend: every batch is kept (cloned) in a map.
#[derive(Default)]
struct Memory {
    logs: Mutex<HashMap<SessionId, (SessionHeader, Vec<SessionEvent>)>>,
}

impl Backend for Memory {
    type Writer = ();
    type Marker = ();
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn blocks(&self) -> bool {
        false
    }
    fn locate(&self, _header: &SessionHeader) -> Option<Location> {
        None
    }
    fn has_artifact(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(self.logs.lock().unwrap().contains_key(id))
    }
    fn stored_header(&self, id: &SessionId) -> Result<Option<SessionHeader>, StoreError> {
        Ok(self.logs.lock().unwrap().get(id).map(|(h, _)| h.clone()))
    }
    fn load_stored(&self, id: &SessionId) -> Result<Option<Stored<()>>, StoreError> {
        Ok(self.logs.lock().unwrap().get(id).map(|(h, e)| Stored {
            header: h.clone(),
            events: e.clone(),
            revision: Revision::new(e.len().to_string()),
            torn: None,
            location: None,
        }))
    }
    fn read_revision(&self, id: &SessionId) -> Result<Option<Revision>, StoreError> {
        Ok(self
            .logs
            .lock()
            .unwrap()
            .get(id)
            .map(|(_, e)| Revision::new(e.len().to_string())))
    }
    fn open_writer(&self, _header: &SessionHeader) -> Result<(), StoreError> {
        Ok(())
    }
    fn append_batch(
        &self,
        _writer: &mut (),
        header: &SessionHeader,
        events: &[SessionEvent],
        _next_seq: u64,
        _materialized: bool,
    ) -> Result<(), StoreError> {
        let mut logs = self.logs.lock().unwrap();
        let log = logs
            .entry(header.id.clone())
            .or_insert_with(|| (header.clone(), Vec::new()));
        log.1.extend_from_slice(events);
        Ok(())
    }
    fn commit_repair(
        &self,
        _writer: &mut (),
        _header: &SessionHeader,
        _marker: Option<()>,
        _closers: &[SessionEvent],
        _next_seq: u64,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    fn list(&self) -> Result<Vec<Snapshot>, StoreError> {
        Ok(Vec::new())
    }
}

fn store(shadow: bool) -> Arc<dyn SessionStore> {
    let config = CoordinatorConfig::new().with_validate_appends(shadow);
    Arc::new(Coordinator::new(Memory::default(), config))
}

fn tools() -> ToolSet {
    let mut tools = ToolSet::new();
    for name in TOOLS {
        tools.insert(Box::new(Stub(name)));
    }
    tools
}

fn call_config() -> LlmCallConfig {
    LlmCallConfig::new("deepseek", "deepseek-v4-flash")
}

/// Process CPU time (user + system, all threads).
fn cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if r != 0 {
        return Duration::ZERO;
    }
    // SAFETY: initialised by the successful call (and zeroed before).
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// (wall, cpu) of `f`.
fn measure(f: impl FnOnce()) -> (Duration, Duration) {
    let (w, c) = (Instant::now(), cpu());
    f();
    (w.elapsed(), cpu().saturating_sub(c))
}

fn core_turn(steps: u64) -> (Duration, Duration) {
    let mut registry = ToolRegistry::new();
    for name in TOOLS {
        registry
            .register(ToolDefinition::untyped(
                name,
                name,
                json!({"type":"object"}),
            ))
            .unwrap();
    }
    let config = {
        let mut config = CoreConfig::default();
        config.options = {
            let mut options = AgentOptions::default();
            options.provider = Some("deepseek".into());
            options.model = Some("deepseek-v4-flash".into());
            options
        };
        config.tools = registry;
        config
    };
    let mut agent = Core::new(config, Session::new(SessionHeader::new("bench", 0))).unwrap();
    let mut replies = script(steps).into_iter();
    measure(|| {
        let now = Time::from_millis(1);
        agent
            .followup(now, Message::user("m1", vec![ContentBlock::text("go")]))
            .unwrap();
        while let Some(output) = agent.poll() {
            match output {
                Output::CallModel(call) => {
                    for c in replies.next().unwrap() {
                        agent.handle_chunk(now, call.attempt, c).unwrap();
                    }
                    agent.handle_stream_end(now, call.attempt).unwrap();
                }
                Output::ExecuteTool(exec) => {
                    let outcome = ToolOutcome::success(vec![ContentBlock::text("ok")]);
                    agent.handle_tool_result(now, exec.token, outcome).unwrap();
                }
                _ => {}
            }
        }
    })
}

fn std_turn(steps: u64, shadow: bool, work: &std::path::Path) -> (Duration, Duration) {
    let provider = Arc::new(Scripted(Mutex::new(script(steps).into_iter())));
    let mut config = dsh_std::AgentConfig::new(provider, call_config(), work);
    config.tools = tools();
    let agent =
        dsh_std::Agent::create(config, store(shadow), dsh_std::new_session_id()).expect("agent");
    let r = measure(|| {
        agent.send("go").expect("send");
        let summary = agent
            .wait_idle(Some(Duration::from_secs(120)))
            .expect("idle");
        assert_eq!(
            summary.reason,
            Some(dsh_core::session::TurnEndReason::Completed)
        );
    });
    drop(agent);
    r
}

fn smol_turn(steps: u64, work: &std::path::Path) -> (Duration, Duration) {
    let provider = Arc::new(Scripted(Mutex::new(script(steps).into_iter())));
    let mut config = dsh_smol::AgentConfig::new(provider, call_config(), work);
    config.tools = tools();
    smol::block_on(async {
        let id: SessionId = dsh_std::new_session_id();
        let agent = dsh_smol::Agent::create(config, store(false), id)
            .await
            .expect("agent");
        let (w, c) = (Instant::now(), cpu());
        agent.send("go").await.expect("send");
        let summary = agent
            .wait_idle(Some(Duration::from_secs(120)))
            .await
            .expect("idle");
        let r = (w.elapsed(), cpu().saturating_sub(c));
        assert_eq!(
            summary.reason,
            Some(dsh_core::session::TurnEndReason::Completed)
        );
        agent.dispose().await;
        r
    })
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    // `cargo bench -- --list` and friends: nothing to list.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let steps = env_u64("DSH_BENCH_STEPS", 50);
    let rounds = env_u64("DSH_BENCH_ROUNDS", 15).max(1);
    let work = tempfile::tempdir().expect("work dir");
    let names = ["core", "std", "std/shadow", "smol"];
    let mut wall: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut cpus: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let load_before = loadavg();
    // One warm-up round, not counted.
    for round in 0..=rounds {
        let r = [
            core_turn(steps),
            std_turn(steps, false, work.path()),
            std_turn(steps, true, work.path()),
            smol_turn(steps, work.path()),
        ];
        if round == 0 {
            continue;
        }
        for (i, (w, c)) in r.into_iter().enumerate() {
            wall[i].push(w);
            cpus[i].push(c);
        }
    }
    let per_step = steps + 1;
    println!(
        "step_cost: {per_step} steps a turn, {rounds} interleaved rounds, load {load_before} -> {}",
        loadavg()
    );
    let core_w = median(&mut wall[0]) / per_step as u32;
    let core_c = median(&mut cpus[0]) / per_step as u32;
    for i in 0..names.len() {
        let w = median(&mut wall[i]) / per_step as u32;
        let c = median(&mut cpus[i]) / per_step as u32;
        println!(
            "{:<11} wall {:>9.1} us/step ({:>6.1}x core)   cpu {:>9.1} us/step ({:>6.1}x core)",
            names[i],
            w.as_secs_f64() * 1e6,
            w.as_secs_f64() / core_w.as_secs_f64().max(1e-12),
            c.as_secs_f64() * 1e6,
            c.as_secs_f64() / core_c.as_secs_f64().max(1e-12),
        );
    }
}
