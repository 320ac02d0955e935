//! Session store benches (persistence.md): append throughput with events
//! written in batches of 100 and one at a time (`flush_every_N`: a batch
//! is appended every N events), and the load of the 100k-event workload log from disk, for the
//! JSONL store (zstd and raw), the redb store, and the PostgreSQL store when
//! `DSH_TEST_POSTGRES_URL` names a server (a fresh schema, dropped at the
//! end; without the variable it is skipped with a message). Local storage
//! lives in a temp dir.
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

/// The PostgreSQL server of the `postgres` kind.
const POSTGRES_URL_ENV: &str = dsh_postgres::raw::TEST_URL_ENV;

/// The store kinds benched: the local ones, and `postgres` when its server
/// is set.
fn kinds() -> Vec<&'static str> {
    let mut kinds = vec!["jsonl-zstd", "jsonl-raw", "redb"];
    if std::env::var(POSTGRES_URL_ENV).is_ok_and(|u| !u.is_empty()) {
        kinds.push("postgres");
    } else {
        eprintln!("store bench: SKIPPED postgres: {POSTGRES_URL_ENV} is not set");
    }
    kinds
}

/// Opens `kind`; for postgres, `dir`'s last component names a fresh
/// schema (dropped by [`drop_schema`]).
fn open(kind: &str, dir: &Path) -> Box<dyn SessionStore> {
    let coordinator = CoordinatorConfig::default();
    match kind {
        "redb" => Box::new(dsh_redb::open(&dir.join("s.redb"), coordinator).expect("redb")),
        "postgres" => {
            let url = std::env::var(POSTGRES_URL_ENV).expect("server URL");
            let mut config =
                dsh_postgres::PgConfig::new(dsh_postgres::StoreUrl::parse(&url).expect("URL"));
            config.schema = Some(schema_of(dir));
            config.coordinator = coordinator;
            Box::new(dsh_postgres::open(config).expect("postgres"))
        }
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

/// The schema a postgres store over temp dir `dir` uses.
fn schema_of(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let clean: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("dsh_bench_{clean}")
}

/// Drops the schema of a postgres store over `dir` (no-op for the others).
fn drop_schema(kind: &str, dir: &Path) {
    if kind != "postgres" {
        return;
    }
    let url = std::env::var(POSTGRES_URL_ENV).expect("server URL");
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", schema_of(dir)))
        .expect("drop the bench schema");
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
    for kind in kinds() {
        for every in [100u64, 1] {
            group.bench_function(format!("{kind}/flush_every_{every}"), |b| {
                b.iter_custom(|iters| {
                    let dir = tempfile::tempdir().expect("temp dir");
                    let store = open(kind, dir.path());
                    let mut session = 0u64;
                    let mut pos = events.len();
                    let mut id = SessionId::from("none");
                    // Events wait here until a batch of `every` is written.
                    let mut batch: Vec<SessionEvent> = Vec::new();
                    let start = Instant::now();
                    for i in 0..iters {
                        if pos == events.len() {
                            if session > 0 {
                                store.append(&id, &batch).expect("append");
                                batch.clear();
                            }
                            session += 1;
                            let mut h = header.clone();
                            h.id = SessionId::from(format!("bench-{session}"));
                            id = h.id.clone();
                            store.create(h).expect("create");
                            pos = 0;
                        }
                        batch.push(events[pos].clone());
                        pos += 1;
                        if (i + 1) % every == 0 {
                            store.append(&id, &batch).expect("append");
                            batch.clear();
                        }
                    }
                    store.append(&id, &batch).expect("append");
                    let elapsed = start.elapsed();
                    drop(store);
                    drop_schema(kind, dir.path());
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
    for kind in kinds() {
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
        drop(store);
        drop_schema(kind, dir.path());
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
