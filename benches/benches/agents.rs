//! Many agents in one `dsh-smol` process: not a
//! Criterion bench, a measurement run by hand (`cargo bench --bench agents`;
//! CI only builds it).
//!
//! Each case runs in a child process of its own (the bench re-executes
//! itself), so one case's heap does not pollute the next one's RSS:
//!
//! 1. open the store, read RSS (`/proc/self/status` `VmRSS`);
//! 2. create `N` agents (each with an `echo` tool), read RSS;
//! 3. send every agent `go` at once; each runs one tool turn (a one-call
//!    tool step, then a text answer: two model calls, about 20 events);
//! 4. when all are idle, with the agents still alive, read RSS and count
//!    the open file descriptors; split the C heap into what live
//!    allocations hold and what freed memory the allocator keeps
//!    (`mallinfo2`), to tell dsh's memory from the allocator's.
//!
//! Printed per case: RSS per agent created and per idle agent after one
//! turn, open descriptors per idle agent, turns/s (all `N` turns over the
//! wall time from the first `send` to the last idle), and p50/p99 of the
//! turn latency (send to idle) and, with the in-process model, of the
//! step latency (model call to next model call, and second call to idle).
//!
//! Environment:
//! - `DSH_AGENTS`: the agent counts, comma separated (default `1000,10000`);
//! - `DSH_AGENTS_STORES`: `null`, `jsonl`, `redb` (default all three);
//! - `DSH_AGENTS_MODELS`: `scripted` (an in-process provider serving the
//!   chunks the DeepSeek client decodes from the mock's script) and `http`
//!   (the DeepSeek client over loopback to the mock server, run in another
//!   child process so its threads and descriptors are not counted here),
//!   each agent with a client of its own (so a pooled keep-alive connection
//!   each), and `http-shared`, the same with one client cloned into every
//!   agent (one pool for all); default `scripted,http`;
//! - `DSH_AGENTS_NOFILE`: when set, the soft `RLIMIT_NOFILE` of the agent
//!   process (the hard limit stays); unset: left as inherited.
//!
//! The mock server process raises its own soft descriptor limit to the
//! hard one: it holds one connection per concurrent request.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::TurnEndReason;
use dsh_core::{ContentBlock, GenerateOptions, LlmCallConfig, LlmError, Message, SessionId};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig};
use dsh_smol::{Agent, AgentConfig, ModelProvider};
use dsh_store::SessionStore;
use dsh_tools::{Tool, ToolCallRequest, ToolContext, ToolSet};
use serde_json::{Value, json};

const ROLE: &str = "DSH_AGENTS_ROLE";

struct Echo;

impl Tool for Echo {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::untyped("echo", "Echo", json!({"type":"object"}))
    }

    fn execute(&self, _call: &ToolCallRequest, _ctx: &ToolContext) -> ToolOutcome {
        ToolOutcome::success(vec![ContentBlock::text("ok")])
    }
}

fn script() -> Value {
    json!({"perSession": true, "keepAliveConnections": true, "responses": [
        {"turn": {
            "toolCalls": [{"id": "c1", "name": "echo", "arguments": ["{\"text\":", "\"ping\"}"]}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        }},
        {"turn": {
            "text": ["do", "ne"],
            "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
        }}
    ]})
}

fn deepseek(url: String) -> DeepSeekConfig {
    DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: 600_000,
        ..DeepSeekConfig::default()
    }
}

fn client_options() -> ClientOptions {
    ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from("sk-bench")))),
        proxy_from_env: false,
        connect_timeout: Duration::from_secs(120),
        ..ClientOptions::default()
    }
}

/// One agent's in-process model: the shared decoded replies in order,
/// with the time of each call.
struct Scripted {
    replies: Arc<Vec<Vec<dsh_core::StreamChunk>>>,
    next: AtomicUsize,
    calls: Mutex<Vec<Instant>>,
}

impl ModelProvider for Scripted {
    fn stream(
        &self,
        _opts: &GenerateOptions,
        _cancel: &CancelToken,
    ) -> Result<dsh_std::ChunkStream, LlmError> {
        if let Ok(mut c) = self.calls.lock() {
            c.push(Instant::now());
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(chunks) = self.replies.get(k) else {
            return Err(LlmError::coded("SCRIPT_EXHAUSTED", "no reply left"));
        };
        Ok(Box::new(chunks.clone().into_iter().map(Ok)))
    }
}

/// The chunks the DeepSeek client decodes from the script's two replies.
fn decoded_replies() -> Vec<Vec<dsh_core::StreamChunk>> {
    let server = MockServer::start(serde_json::from_value::<Script>(script()).expect("script"))
        .expect("mock");
    let client =
        DeepSeekClient::with_options(deepseek(server.url()), client_options()).expect("client");
    let mut opts = GenerateOptions::new(
        "deepseek",
        "deepseek-v4-flash",
        vec![Arc::new(Message::user("m", vec![ContentBlock::text("x")]))],
    );
    opts.session_id = Some(SessionId::new("decode"));
    (0..2)
        .map(|_| client.stream_chunks(&opts, &CancelToken::new()).collect())
        .collect()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The C heap as glibc's allocator sees it, in KiB, over all arenas:
/// `(in use, free but kept)`: what live allocations hold, and what freed
/// memory the allocator keeps in its arenas instead of giving it back (part
/// of RSS that no agent holds).
fn heap_kib() -> (u64, u64) {
    // SAFETY: `mallinfo2` only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    (
        ((m.uordblks + m.hblkhd) / 1024) as u64,
        (m.fordblks / 1024) as u64,
    )
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn set_nofile(soft: Option<u64>) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        lim.rlim_cur = soft.map_or(lim.rlim_max, |s| s.min(lim.rlim_max));
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

fn nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(k).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The mock server process: prints its URL, serves until stdin closes.
fn serve() {
    set_nofile(None);
    let server = MockServer::start(serde_json::from_value::<Script>(script()).expect("script"))
        .expect("mock");
    println!("{}", server.url());
    let _ = std::io::stdout().flush();
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
    drop(server);
}

fn open_store(kind: &str, dir: &std::path::Path) -> Arc<dyn SessionStore> {
    match kind {
        "jsonl" => Arc::new(
            dsh_jsonl::open(dsh_jsonl::JsonlConfig::new(dir.join("jsonl"))).expect("jsonl store"),
        ),
        "redb" => Arc::new(
            dsh_redb::open(&dir.join("store.redb"), Default::default()).expect("redb store"),
        ),
        _ => Arc::new(NullStore),
    }
}

/// One case, in this (child) process; prints one result line.
fn case(model: &str, store_kind: &str, n: usize, url: Option<String>) {
    if let Some(s) = std::env::var("DSH_AGENTS_NOFILE")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        set_nofile(Some(s));
    }
    let replies = (model == "scripted").then(|| Arc::new(decoded_replies()));
    let shared = (model == "http-shared").then(|| {
        DeepSeekClient::with_options(deepseek(url.clone().unwrap_or_default()), client_options())
            .expect("client")
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path().join("ws");
    std::fs::create_dir_all(&cwd).expect("workspace");
    let store = open_store(store_kind, dir.path());
    let base_rss = rss_kib();
    let base_heap = heap_kib();
    let base_fds = open_fds();
    let result = smol::block_on(async {
        let mut agents = Vec::with_capacity(n);
        let mut providers = Vec::with_capacity(n);
        for i in 0..n {
            let provider: Arc<dyn ModelProvider> = match &replies {
                Some(replies) => {
                    let p = Arc::new(Scripted {
                        replies: replies.clone(),
                        next: AtomicUsize::new(0),
                        calls: Mutex::new(Vec::with_capacity(2)),
                    });
                    providers.push(p.clone());
                    p
                }
                // `http-shared`: one client, cloned into every agent (its
                // pool keeps one idle connection for them all); `http`: a
                // client, and so a pooled connection, per agent.
                None => match &shared {
                    Some(client) => Arc::new(DeepSeekClient::clone(client)),
                    None => Arc::new(
                        DeepSeekClient::with_options(
                            deepseek(url.clone().unwrap_or_default()),
                            client_options(),
                        )
                        .map_err(|e| format!("client {i}: {e}"))?,
                    ),
                },
            };
            let call = LlmCallConfig::new("deepseek", "deepseek-v4-flash");
            let mut c = AgentConfig::new(provider, call, &cwd);
            let mut tools = ToolSet::new();
            tools.insert(Box::new(Echo));
            c.tools = tools;
            let agent = Agent::create(c, store.clone(), SessionId::new(format!("a{i}")))
                .await
                .map_err(|e| format!("create agent {i}: {e}"))?;
            agents.push(agent);
        }
        let created_rss = rss_kib();
        let start = Instant::now();
        let mut sent = Vec::with_capacity(n);
        for a in &agents {
            a.send("go").await.map_err(|e| format!("send: {e}"))?;
            sent.push(Instant::now());
        }
        let waits = agents.iter().map(|a| async move {
            let r = a.wait_idle(Some(Duration::from_secs(900))).await;
            (r, Instant::now())
        });
        let mut ends = Vec::with_capacity(n);
        let mut failures = 0usize;
        let mut first_error = None;
        for w in waits.collect::<Vec<_>>() {
            let (r, at) = w.await;
            match r {
                Ok(s) if s.reason == Some(TurnEndReason::Completed) => {}
                Ok(s) => {
                    failures += 1;
                    first_error.get_or_insert_with(|| format!("{:?}", s.reason));
                }
                Err(e) => {
                    failures += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            ends.push(at);
        }
        let wall = start.elapsed();
        // Let the blocking pool's idle threads and the allocator settle.
        smol::Timer::after(Duration::from_millis(500)).await;
        let idle_rss = rss_kib();
        let idle_heap = heap_kib();
        let idle_fds = open_fds();
        let mut turns: Vec<Duration> = sent
            .iter()
            .zip(&ends)
            .map(|(s, e)| e.saturating_duration_since(*s))
            .collect();
        turns.sort();
        let mut steps: Vec<Duration> = Vec::new();
        for (p, end) in providers.iter().zip(&ends) {
            let calls = p.calls.lock().map(|c| c.clone()).unwrap_or_default();
            let mut marks = calls;
            marks.push(*end);
            steps.extend(
                marks
                    .windows(2)
                    .map(|w| w[1].saturating_duration_since(w[0])),
            );
        }
        steps.sort();
        let events = match store_kind {
            "null" => String::from("-"),
            _ => store
                .load(&SessionId::new("a0"))
                .map_or_else(|e| format!("load: {e}"), |i| i.events.len().to_string()),
        };
        let line = format!(
            "RESULT model={model} store={store_kind} agents={n} nofile={} created_kib_per_agent={:.1} idle_kib_per_agent={:.1} heap_in_use_kib_per_idle_agent={:.1} heap_free_kept_kib_per_idle_agent={:.1} fds_per_idle_agent={:.2} failures={failures} turns_per_s={:.0} turn_p50_ms={:.1} turn_p99_ms={:.1} step_p50_ms={:.1} step_p99_ms={:.1} events_per_session={events} first_error={}",
            nofile(),
            created_rss.saturating_sub(base_rss) as f64 / n as f64,
            idle_rss.saturating_sub(base_rss) as f64 / n as f64,
            idle_heap.0.saturating_sub(base_heap.0) as f64 / n as f64,
            idle_heap.1.saturating_sub(base_heap.1) as f64 / n as f64,
            idle_fds.saturating_sub(base_fds) as f64 / n as f64,
            n as f64 / wall.as_secs_f64(),
            ms(percentile(&turns, 0.5)),
            ms(percentile(&turns, 0.99)),
            ms(percentile(&steps, 0.5)),
            ms(percentile(&steps, 0.99)),
            first_error
                .unwrap_or_else(|| String::from("-"))
                .replace(' ', "_"),
        );
        for a in agents {
            a.dispose().await;
        }
        Ok::<String, String>(line)
    });
    match result {
        Ok(line) => println!("{line}"),
        Err(e) => println!("RESULT model={model} store={store_kind} agents={n} error={e}"),
    }
}

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return serve(),
        Ok(spec) => {
            let parts: Vec<&str> = spec.split(':').collect();
            if let [model, store, n, rest @ ..] = parts.as_slice() {
                let url = rest
                    .first()
                    .map(|_| spec.splitn(4, ':').nth(3).unwrap_or_default().to_owned());
                return case(model, store, n.parse().expect("agent count"), url);
            }
            panic!("bad {ROLE}: {spec}");
        }
        Err(_) => {}
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // useful either: run only when asked for as a bench.
    if !std::env::args().any(|a| a == "--bench") {
        println!("agents: run with `cargo bench --bench agents` (skipped)");
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let counts = list("DSH_AGENTS", "1000,10000");
    let stores = list("DSH_AGENTS_STORES", "null,jsonl,redb");
    let models = list("DSH_AGENTS_MODELS", "scripted,http");
    for model in &models {
        for store in &stores {
            for n in &counts {
                let mut server = None;
                let mut url = None;
                if model.starts_with("http") {
                    let mut child = Command::new(&exe)
                        .env(ROLE, "server")
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("mock server process");
                    let mut line = String::new();
                    if let Some(out) = child.stdout.take() {
                        let _ = BufReader::new(out).read_line(&mut line);
                    }
                    url = Some(line.trim().to_owned());
                    server = Some(child);
                }
                let spec = match &url {
                    Some(u) => format!("{model}:{store}:{n}:{u}"),
                    None => format!("{model}:{store}:{n}"),
                };
                let out = Command::new(&exe)
                    .env(ROLE, spec)
                    .stderr(Stdio::inherit())
                    .output()
                    .expect("case process");
                let text = String::from_utf8_lossy(&out.stdout);
                match text.lines().find(|l| l.starts_with("RESULT")) {
                    Some(l) => println!("{l}"),
                    None => println!(
                        "RESULT model={model} store={store} agents={n} crashed={} {}",
                        out.status,
                        text.lines().last().unwrap_or("")
                    ),
                }
                if let Some(mut child) = server {
                    drop(child.stdin.take());
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

/// A store that discards every write.
struct NullStore;

impl SessionStore for NullStore {
    fn kind(&self) -> &'static str {
        "null"
    }
    fn locate(&self, _header: &dsh_core::session::SessionHeader) -> Option<dsh_store::Location> {
        None
    }
    fn create(
        &self,
        _header: dsh_core::session::SessionHeader,
    ) -> Result<(), dsh_store::StoreError> {
        Ok(())
    }
    fn append(
        &self,
        _id: &SessionId,
        _events: &[dsh_core::session::SessionEvent],
    ) -> Result<(), dsh_store::StoreError> {
        Ok(())
    }
    fn load(&self, id: &SessionId) -> Result<dsh_store::Inspection, dsh_store::StoreError> {
        Err(not_found(id))
    }
    fn inspect(
        &self,
        id: &SessionId,
        _cancel: &dsh_store::Cancel,
    ) -> Result<dsh_store::Inspection, dsh_store::StoreError> {
        Err(not_found(id))
    }
    fn read_from(
        &self,
        id: &SessionId,
        _from_seq: u64,
        _cancel: &dsh_store::Cancel,
    ) -> Result<
        (
            dsh_core::session::SessionHeader,
            Vec<dsh_core::session::SessionEvent>,
        ),
        dsh_store::StoreError,
    > {
        Err(not_found(id))
    }
    fn list(
        &self,
        _cancel: &dsh_store::Cancel,
    ) -> Result<Vec<dsh_core::session::SessionHeader>, dsh_store::StoreError> {
        Ok(Vec::new())
    }
    fn list_snapshots(
        &self,
        _cancel: &dsh_store::Cancel,
    ) -> Result<Vec<dsh_store::Snapshot>, dsh_store::StoreError> {
        Ok(Vec::new())
    }
    fn revision(&self, id: &SessionId) -> Result<dsh_store::Revision, dsh_store::StoreError> {
        Err(not_found(id))
    }
    fn release(&self, _id: &SessionId) -> Result<(), dsh_store::StoreError> {
        Ok(())
    }
}

fn not_found(id: &SessionId) -> dsh_store::StoreError {
    dsh_store::StoreError::NotFound {
        id: id.as_str().to_string(),
    }
}
