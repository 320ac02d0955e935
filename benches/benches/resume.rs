//! Resume memory: not a Criterion bench, a measurement
//! run by hand (`cargo bench --bench resume`; CI only builds it).
//!
//! Generates the long session workload (`testdata/bench/gen_workloads.py`,
//! `DSH_RESUME_EVENTS` events, default 100000: about 18 MB, 261 turns),
//! places it in a plain-JSONL store root, and resumes it with `dsh-smol`
//! (`Agent::resume`: store load, validation, the kernel's session). Prints
//! the log size, RSS before, the peak RSS (`VmHWM`) and RSS after the
//! resume, and growth / log size. `DSH_RESUME_ZSTD=1`: the log re-written
//! through a zstd store first (the default encoding; log size = the
//! compressed file).

use std::io::BufRead;
use std::sync::Arc;

use dsh_core::jsonl::decode_header_line;
use dsh_core::{LlmCallConfig, SessionId};
use dsh_deepseek::{DeepSeekClient, DeepSeekConfig};
use dsh_smol::{Agent, AgentConfig};
use dsh_store::SessionStore;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The mock server process: prints its URL, serves until stdin closes.
fn serve() {
    let script = serde_json::json!({"perSession": true, "responses": [
        {"turn": {"text": ["do", "ne"]}}
    ]});
    let server =
        dsh_deepseek::mock::MockServer::start(serde_json::from_value(script).expect("script"))
            .expect("mock");
    println!("{}", server.url());
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
    drop(server);
}

fn main() {
    if std::env::var_os("DSH_RESUME_SERVER").is_some() {
        return serve();
    }
    if !std::env::args().any(|a| a == "--bench") {
        println!("resume: run with `cargo bench --bench resume` (skipped)");
        return;
    }
    let events: u64 = std::env::var("DSH_RESUME_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let workloads = dsh_benches::Workloads::generate(1, 200, events);
    let source = workloads.session_jsonl();
    let head = {
        let f = std::fs::File::open(&source).expect("session.jsonl");
        let mut line = String::new();
        std::io::BufReader::new(f)
            .read_line(&mut line)
            .expect("header line");
        line
    };
    let header = decode_header_line(head.as_bytes()).expect("header");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dsh_jsonl::JsonlConfig::new(dir.path().join("store"))
        .with_compression(dsh_jsonl::Compression::None);
    let backend =
        dsh_jsonl::JsonlBackend::new(&config.root, config.compression, true).expect("backend");
    let path = backend.transcript_path(&header).expect("path");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("session dir");
    let mut log_bytes = std::fs::copy(&source, &path).expect("copy the log");
    drop(workloads);
    let zstd = std::env::var_os("DSH_RESUME_ZSTD").is_some();
    let config = if zstd {
        // Re-write the log through a zstd store (the default encoding).
        let raw = dsh_jsonl::open(config).expect("raw store");
        let loaded = raw
            .load(&SessionId::new(header.id.as_str()))
            .expect("load raw");
        drop(raw);
        let zconfig = dsh_jsonl::JsonlConfig::new(dir.path().join("zstore"));
        let z = dsh_jsonl::open(zconfig.clone()).expect("zstd store");
        z.create(loaded.header.clone()).expect("create");
        for batch in loaded.events.chunks(4096) {
            z.append(&loaded.header.id, batch).expect("append");
        }
        drop(z);
        drop(loaded);
        let zb = dsh_jsonl::JsonlBackend::new(&zconfig.root, zconfig.compression, true)
            .expect("backend");
        log_bytes = std::fs::metadata(zb.transcript_path(&header).expect("path"))
            .expect("zstd log")
            .len();
        zconfig
    } else {
        config
    };
    let store: Arc<dyn SessionStore> = Arc::new(dsh_jsonl::open(config).expect("store"));
    let id = SessionId::new(header.id.as_str());
    let cwd = dir.path().join("ws");
    std::fs::create_dir_all(&cwd).expect("workspace");

    // `DSH_RESUME_TURN=1`: one turn after the resume, against the mock in a
    // child process (the request carries the whole history).
    let mut server = None;
    let mut url = None;
    if std::env::var_os("DSH_RESUME_TURN").is_some() {
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .env("DSH_RESUME_SERVER", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("mock server process");
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        }
        url = Some(line.trim().to_owned());
        server = Some(child);
    }
    let before = status_kib("VmRSS:");
    let hwm_before = status_kib("VmHWM:");
    let (after, hwm) = smol::block_on(async {
        let model = DeepSeekConfig {
            base_url: url.clone(),
            stream_idle_timeout_ms: 600_000,
            ..DeepSeekConfig::default()
        };
        let options = dsh_deepseek::ClientOptions {
            credentials: Some(Arc::new(|_: &str| Some(String::from("sk-bench")))),
            proxy_from_env: false,
            ..dsh_deepseek::ClientOptions::default()
        };
        let client = DeepSeekClient::with_options(model, options).expect("client");
        let call = LlmCallConfig::new("deepseek", "deepseek-v4-flash");
        let mut c = AgentConfig::new(Arc::new(client), call, &cwd);
        c.tools = dsh_smol::ToolSet::new();
        let agent = Agent::resume(c, store.clone(), &id).await.expect("resume");
        let mut after = status_kib("VmRSS:");
        let mut hwm = status_kib("VmHWM:");
        println!(
            "resumed: rss {:.1} MiB, peak {:.1} MiB",
            after as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
        if url.is_some() {
            agent.send("go").await.expect("send");
            let summary = agent
                .wait_idle(Some(std::time::Duration::from_secs(600)))
                .await
                .expect("idle");
            println!("turn after resume: {:?}", summary.reason);
            after = status_kib("VmRSS:");
            hwm = status_kib("VmHWM:");
        }
        agent.dispose().await;
        (after, hwm)
    });
    let mib = |k: u64| k as f64 / 1024.0;
    let log_mib = log_bytes as f64 / (1024.0 * 1024.0);
    println!(
        "RESULT zstd={zstd} turn={} log_mib={log_mib:.1} events={events} rss_before_mib={:.1} peak_mib={:.1} rss_after_resume_mib={:.1} peak_growth_mib={:.1} peak_growth_over_log={:.2} retained_growth_mib={:.1} (hwm before {:.1})",
        url.is_some(),
        mib(before),
        mib(hwm),
        mib(after),
        mib(hwm.saturating_sub(before)),
        mib(hwm.saturating_sub(before)) / log_mib,
        mib(after.saturating_sub(before)),
        mib(hwm_before),
    );
    if let Some(mut child) = server {
        drop(child.stdin.take());
        let _ = child.kill();
        let _ = child.wait();
    }
}
