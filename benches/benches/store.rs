//! Session store benches (persistence.md): append throughput through the
//! write-behind queue with a flush every 100 events and with a flush per
//! event, and the load of the 100k-event workload log from disk, for the
//! JSONL store (zstd and raw) and the redb store. All storage lives in a
//! temp dir.
//!
//! Run: `cargo bench -p dsh-benches --bench store -- --warm-up-time 1 --measurement-time 3`

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_benches::Workloads;
use dsh_core::SessionId;
use dsh_core::jsonl::scan_log;
use dsh_core::session::{SessionEvent, SessionHeader};
use dsh_store::{Cancel, CoordinatorConfig, Location, SessionStore};

const KINDS: [&str; 3] = ["jsonl-zstd", "jsonl-raw", "redb"];

fn open(kind: &str, dir: &Path) -> Box<dyn SessionStore> {
    let coordinator = CoordinatorConfig {
        max_pending: 1 << 20,
        ..CoordinatorConfig::default()
    };
    match kind {
        "redb" => Box::new(dsh_redb::open(&dir.join("s.redb"), coordinator).expect("redb")),
        _ => {
            let mut config = dsh_jsonl::JsonlConfig::new(dir.join("root"));
            config.coordinator = coordinator;
            if kind == "jsonl-raw" {
                config.compression = dsh_jsonl::Compression::None;
            }
            Box::new(dsh_jsonl::open(config).expect("jsonl"))
        }
    }
}

fn workload() -> (Workloads, SessionHeader, Vec<SessionEvent>, Vec<u8>) {
    let w = Workloads::generate(1, 2000, 100_000);
    let bytes = fs::read(w.session_jsonl()).expect("session.jsonl");
    let scanned = scan_log(&bytes).expect("workload log scans");
    (w, scanned.header, scanned.events, bytes)
}

fn append(c: &mut Criterion, header: &SessionHeader, events: &[SessionEvent]) {
    let mut group = c.benchmark_group("store_append");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    for kind in KINDS {
        for every in [100u64, 1] {
            group.bench_function(format!("{kind}/flush_every_{every}"), |b| {
                b.iter_custom(|iters| {
                    let dir = tempfile::tempdir().expect("temp dir");
                    let store = open(kind, dir.path());
                    let mut session = 0u64;
                    let mut pos = events.len();
                    let mut id = SessionId::from("none");
                    let start = Instant::now();
                    for i in 0..iters {
                        if pos == events.len() {
                            if session > 0 {
                                store.flush(&id).expect("flush");
                            }
                            session += 1;
                            let mut h = header.clone();
                            h.id = SessionId::from(format!("bench-{session}"));
                            id = h.id.clone();
                            store.create(h).expect("create");
                            pos = 0;
                        }
                        store
                            .enqueue(&id, std::slice::from_ref(&events[pos]))
                            .expect("enqueue");
                        pos += 1;
                        if (i + 1) % every == 0 {
                            store.flush(&id).expect("flush");
                        }
                    }
                    store.flush(&id).expect("flush");
                    let elapsed = start.elapsed();
                    drop(store);
                    elapsed
                });
            });
        }
    }
    group.finish();
}

fn load(c: &mut Criterion, header: &SessionHeader, events: &[SessionEvent], raw: &[u8]) {
    let mut group = c.benchmark_group("store_load");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = open(kind, dir.path());
            if kind == "jsonl-raw" {
                // The workload file itself, placed where the store looks.
                let Some(Location::Jsonl { path }) = store.locate(header) else {
                    panic!("no location");
                };
                fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
                fs::write(&path, raw).expect("write workload");
            } else {
                store.create(header.clone()).expect("create");
                for batch in events.chunks(100) {
                    store.append(&header.id, batch).expect("append");
                }
            }
        }
        let store = open(kind, dir.path());
        let n = store
            .inspect(&header.id, &Cancel::new())
            .expect("inspect")
            .events
            .len();
        assert!(n >= events.len(), "{kind}: {n} events");
        group.bench_function(format!("{kind}/inspect_100k"), |b| {
            b.iter(|| store.inspect(&header.id, &Cancel::new()).expect("inspect"))
        });
        group.bench_function(format!("{kind}/load_100k"), |b| {
            b.iter(|| store.load(&header.id).expect("load"))
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let (_w, header, events, raw) = workload();
    append(c, &header, &events);
    load(c, &header, &events, &raw);
}

criterion_group!(store, benches);
criterion_main!(store);
