//! Session log benches over `session.jsonl` of the shared workload generator
//! (100k events, no packed rows):
//!
//! - `session/load_validate_derive`: bytes → header, scan, typed decode,
//!   seed validation, derived history (target ≥ 2M events/s);
//! - `session/append_derive/<n>`: one `user/message` append plus
//!   `derive_messages` on a session of a fixed size `n` (`1k` and `1M`
//!   synthetic events, `100k-workload`: the loaded workload, the name
//!   refbench's M3 append row reads;
//!   every measured append lands on a session of `n` to `1.01 n` events: the
//!   session is put back to its `n`-event copy, untimed, every `n/100`
//!   appends, with room reserved for those appends so that the copy's exact
//!   capacity does not put a reallocation of the whole log into the timed
//!   region) (target ≤ 1 µs, flat in n);
//! - `session/load_long_text/<escapes>`: the same load of a synthetic log
//!   of 500 turns, each a user message of 16,000 characters (8 MB), with no
//!   escape (`plain`) or a `\n` every 80 or every 20 characters: the string
//!   scan of long texts (tool results, messages) in bytes per second;
//! - the heap held by the loaded 100k-event session, measured with a counting
//!   global allocator and printed (target ≤ 1.2× the file's bytes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_core::jsonl;
use dsh_core::session::{AssistantChunk, EventData, Step, TurnStart};
use dsh_core::{ContentBlock, Message, Session, SessionHeader, StreamChunk, SurfaceIntent};

/// Counts the bytes currently allocated through the global allocator.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn load(bytes: &[u8]) -> Session {
    let mut loaded = jsonl::load_log(bytes, &[]).expect("the workload loads");
    black_box(loaded.session.derive_messages().len());
    loaded.session
}

/// A synthetic session of about `n` events: turns of a user message, a step
/// of reasoning deltas and a step end.
fn synthetic(n: u64) -> Session {
    let mut s = Session::new(SessionHeader::new("bench", 0));
    let mut turn = 0;
    while s.len() + 8 < n {
        turn += 1;
        s.append(TurnStart::new(turn), None, 1).unwrap();
        let m = Message::user(format!("u{turn}"), vec![ContentBlock::text("hello")]);
        s.append(m, Some(SurfaceIntent::append()), 1).unwrap();
        s.append(EventData::StepStart(Step::new(turn, 1)), None, 1)
            .unwrap();
        for _ in 0..64.min(n - s.len() - 4) {
            let c = StreamChunk::ReasoningDelta {
                index: 0,
                text: "word".into(),
            };
            s.append(AssistantChunk::new(turn, 1, c), None, 1).unwrap();
        }
        s.append(EventData::StepEnd(Step::new(turn, 1)), None, 1)
            .unwrap();
        s.append(
            dsh_core::session::TurnEnd::new(turn, dsh_core::session::TurnEndReason::Completed),
            None,
            1,
        )
        .unwrap();
    }
    s
}

/// The log of 500 turns, each one user message of 16,000 characters with a
/// `\n` every `escape_every` characters (none when 0).
fn long_text_log(escape_every: usize) -> Vec<u8> {
    let text: String = (0..16_000)
        .map(|i| {
            if escape_every > 0 && i % escape_every == 0 {
                '\n'
            } else {
                char::from(b'a' + (i % 26) as u8)
            }
        })
        .collect();
    let mut s = Session::new(SessionHeader::new("bench", 0));
    for turn in 1..=500 {
        s.append(TurnStart::new(turn), None, 1).unwrap();
        let m = Message::user(format!("u{turn}"), vec![ContentBlock::text(text.clone())]);
        s.append(m, Some(SurfaceIntent::append()), 1).unwrap();
        s.append(
            dsh_core::session::TurnEnd::new(turn, dsh_core::session::TurnEndReason::Completed),
            None,
            1,
        )
        .unwrap();
    }
    let mut out = Vec::new();
    jsonl::encode_header_line(s.header(), &mut out);
    for e in s.events() {
        jsonl::encode_event_line(e, &mut out);
    }
    out
}

fn benches(c: &mut Criterion) {
    let workloads = Workloads::generate(1, 2000, 100_000);
    let bytes = std::fs::read(workloads.session_jsonl()).expect("session.jsonl");

    // Heap held by the loaded session (input bytes excluded).
    let before = LIVE.load(Ordering::Relaxed);
    let session = load(&bytes);
    let held = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "heap held by the loaded {}-event session: {} bytes = {:.3} x the file's {} bytes",
        session.len(),
        held,
        held as f64 / bytes.len() as f64,
        bytes.len()
    );
    let events = session.len();
    drop(session);

    let mut g = c.benchmark_group("session");
    g.throughput(Throughput::Elements(events));
    g.bench_function("load_validate_derive", |b| {
        b.iter_with_large_drop(|| load(black_box(&bytes)))
    });
    g.finish();

    let mut g = c.benchmark_group("session/load_long_text");
    for (name, every) in [("plain", 0), ("nl-every-80", 80), ("nl-every-20", 20)] {
        let log = long_text_log(every);
        g.throughput(Throughput::Bytes(log.len() as u64));
        g.bench_function(name, |b| b.iter_with_large_drop(|| load(black_box(&log))));
    }
    g.finish();

    let mut g = c.benchmark_group("session/append_derive");
    let msg = Arc::new(Message::user("m", vec![ContentBlock::text("more")]));
    let mut sessions = [
        ("1k", synthetic(1_000)),
        ("100k-workload", load(&bytes)),
        ("1M", synthetic(1_000_000)),
    ];
    for (name, base) in sessions.iter_mut() {
        base.derive_messages();
        let base = &*base;
        // Appends between two resets: the session grows by at most 1%.
        let run = (base.len() / 100).max(10);
        g.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let mut s = base.clone();
                    let k = left.min(run);
                    // A clone holds exactly its events; room for the run is
                    // made untimed, as a growing log has it (amortized).
                    s.reserve(k as usize);
                    let start = Instant::now();
                    for _ in 0..k {
                        s.append(
                            EventData::UserMessage(msg.clone()),
                            Some(SurfaceIntent::append()),
                            5,
                        )
                        .unwrap();
                        black_box(s.derive_messages().len());
                    }
                    timed += start.elapsed();
                    left -= k;
                }
                timed
            })
        });
    }
    g.finish();
}

criterion_group!(session_benches, benches);
criterion_main!(session_benches);
