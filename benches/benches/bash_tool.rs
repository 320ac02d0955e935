//! Cost of one `bash` tool step: `bash -c true` through `BashTool::execute`
//! (session, sandbox, pipes, reader threads, wait for the exit, sweep).
//!
//! - `bash_tool/true`: wall time per call.
//!
//! After the run, the CPU time per call (this process and its children,
//! from `getrusage`) and the wall time per call over the same calls are
//! printed to stderr, so a wait that sleeps instead of blocking shows as
//! wall far above CPU.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_tools::{BashTool, Tool, ToolCallRequest, ToolContext, Workspace};
use serde_json::json;

/// User plus system CPU time of `who` (`RUSAGE_SELF` or `RUSAGE_CHILDREN`).
fn cpu(who: i32) -> Duration {
    let mut r = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the zeroed buffer.
    let r = unsafe {
        libc::getrusage(who, r.as_mut_ptr());
        r.assume_init()
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.unsigned_abs())
            + Duration::from_micros(t.tv_usec.unsigned_abs())
    };
    tv(r.ru_utime) + tv(r.ru_stime)
}

fn bench(c: &mut Criterion) {
    let work = tempfile::tempdir().expect("work dir");
    let tool = BashTool::default();
    let ctx = ToolContext::new(Workspace::new(work.path()).expect("workspace"));
    let call = ToolCallRequest {
        name: "bash".into(),
        call_id: "c".into(),
        arguments: json!({"command": "true", "description": "nothing"}),
    };
    let mut calls = 0u64;
    let mut wall = Duration::ZERO;
    let cpu0 = cpu(libc::RUSAGE_SELF) + cpu(libc::RUSAGE_CHILDREN);
    let mut group = c.benchmark_group("bash_tool");
    group.sample_size(20);
    group.bench_function("true", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let o = tool.execute(&call, &ctx);
                assert!(!o.is_error(), "bash -c true failed");
            }
            let elapsed = start.elapsed();
            calls += iters;
            wall += elapsed;
            elapsed
        })
    });
    group.finish();
    let used = cpu(libc::RUSAGE_SELF) + cpu(libc::RUSAGE_CHILDREN) - cpu0;
    if let Some(n) = u32::try_from(calls).ok().filter(|n| *n > 0) {
        eprintln!(
            "bash_tool/true: {calls} calls, wall {:?}/call, CPU {:?}/call (self + children)",
            wall / n,
            used / n
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
