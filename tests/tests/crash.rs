//! Crash injection (persistence.md AP4, 6.5, KV5): a child process appends
//! events in batches of a few and prints each seq whose batch append
//! returned; the test waits for the first returned append, kills it with SIGKILL at a random moment after that, then
//! loads the log and checks:
//!
//! - the log loads (a torn tail is repaired, never reported as corruption);
//! - every event whose flush had returned is in the stored prefix (the
//!   events before the repair closers, which do not count);
//! - the stored prefix is exactly the previous load followed by what the
//!   writer generated from there (nothing lost, duplicated or garbled);
//! - an open turn is closed exactly by the closers of 6.4
//!   (`load == stored prefix ++ interrupted_turn_closers(prefix)`).
//!
//! The default run makes 70 kills per store: JSONL (zstd and raw), redb,
//! and PostgreSQL when `DSH_TEST_POSTGRES_URL` names a server (each run in
//! a fresh schema; without the variable it is skipped with a message, and
//! under `CI=true` that is a failure). `DSH_CRASH_KILLS=N` sets the total
//! across the stores run (e.g. 1200), and `DSH_CRASH_SEED` replays a run.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_core::SessionId;
use dsh_core::jsonl::interrupted_turn_closers;
use dsh_core::session::{EventData, SessionEvent};
use dsh_integration::crash::{TurnGen, open_store};
use dsh_store::Cancel;

const WRITER: &str = env!("CARGO_BIN_EXE_dsh-crash-writer");

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs the writer once, waits for its first returned flush, and kills it
/// `delay_us` later; returns the highest seq whose flush returned.
fn run_and_kill(kind: &str, path: &Path, id: &str, every: u64, delay_us: u64) -> u64 {
    let mut child = Command::new(WRITER)
        .args([kind, &path.display().to_string(), id, &every.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsh-crash-writer");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30));
    match &first {
        Ok(line) if line.starts_with("ready ") => {}
        other => {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "writer did not start: {other:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let flushed = |l: &str| l.strip_prefix("F ").and_then(|s| s.parse::<u64>().ok());
    let first_flush = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(line) => flushed(&line),
        Err(_) => None,
    };
    let Some(first_flush) = first_flush else {
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait");
        panic!(
            "no flush returned; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::thread::sleep(Duration::from_micros(delay_us));
    child.kill().expect("SIGKILL the writer");
    let status = child.wait().expect("wait for the writer");
    assert!(!status.success(), "the writer must die by the signal");
    reader.join().expect("reader thread");
    rx.try_iter()
        .filter_map(|l| flushed(&l))
        .fold(first_flush, u64::max)
}

/// Asserts that `stored` is `previous` followed by what the writer
/// generates after it (the same `TurnGen` continuation the writer uses).
fn assert_generated(kind: &str, k: u64, previous: &[SessionEvent], stored: &[SessionEvent]) {
    assert!(
        stored.len() >= previous.len(),
        "{kind} kill {k}: the stored log ({} events) is shorter than the previous load ({})",
        stored.len(),
        previous.len()
    );
    for (i, (a, b)) in previous.iter().zip(stored).enumerate() {
        assert_eq!(
            a.to_json(),
            b.to_json(),
            "{kind} kill {k}: seq {i} changed since the previous load"
        );
    }
    let turns = previous
        .iter()
        .filter(|e| matches!(e.data(), EventData::TurnStart(_)))
        .count() as u64;
    let mut generator = TurnGen::new(previous.len() as u64, turns + 1);
    for e in &stored[previous.len()..] {
        assert_eq!(
            e.to_json(),
            generator.next_event().to_json(),
            "{kind} kill {k}: seq {} is not what the writer generated",
            e.seq()
        );
    }
}

struct Outcome {
    kills: u64,
    flushed_seqs_checked: u64,
    repairs_with_closers: u64,
    repairs: u64,
}

/// A fresh schema on the PostgreSQL test server, dropped at the end.
struct PgSchema {
    url: String,
    name: String,
}

impl PgSchema {
    fn new(url: String, rng: &mut Rng) -> Self {
        PgSchema {
            url,
            name: format!("dsh_crash_{:016x}", rng.next()),
        }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

fn crash_loop(kind: &str, kills: u64, rng: &mut Rng) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let schema = (kind == "postgres").then(|| {
        let url = dsh_postgres::raw::test_server().expect("server URL");
        PgSchema::new(url, rng)
    });
    let path = match (kind, &schema) {
        (_, Some(schema)) => std::path::PathBuf::from(&schema.name),
        ("redb", None) => dir.path().join("sessions.redb"),
        _ => dir.path().join("root"),
    };
    let mut outcome = Outcome {
        kills: 0,
        flushed_seqs_checked: 0,
        repairs_with_closers: 0,
        repairs: 0,
    };
    let mut previous: Vec<SessionEvent> = Vec::new();
    let mut session = 0u64;
    for k in 0..kills {
        // A new session every 40 kills keeps each child's load short.
        if k % 40 == 0 {
            session += 1;
            previous.clear();
        }
        let id = format!("crash-{session}");
        let every = 1 + rng.below(8);
        let delay_us = rng.below(25_000);
        let flushed = run_and_kill(kind, &path, &id, every, delay_us);
        outcome.kills += 1;

        let store = open_store(kind, &path).expect("open the store after the kill");
        let sid = SessionId::from(id.as_str());
        let prefix = match store.read_from(&sid, 0, &Cancel::new()) {
            Ok((_, events)) => events,
            Err(e) => panic!("{kind} kill {k}: read_from failed: {e}"),
        };
        // Every flushed event is stored: the closers repair adds do not count.
        assert!(
            (prefix.len() as u64) > flushed,
            "{kind} kill {k}: flushed seq {flushed} lost (stored prefix has {} events)",
            prefix.len()
        );
        outcome.flushed_seqs_checked += 1;
        assert_generated(kind, k, &previous, &prefix);
        let expected_closers = interrupted_turn_closers(&prefix);
        let revision = store.revision(&sid).expect("revision");
        let loaded = store
            .load(&sid)
            .unwrap_or_else(|e| panic!("{kind} kill {k}: load failed: {e}"));
        let got: Vec<String> = loaded.events.iter().map(SessionEvent::to_json).collect();
        let want: Vec<String> = prefix
            .iter()
            .chain(expected_closers.iter())
            .map(SessionEvent::to_json)
            .collect();
        assert_eq!(
            got, want,
            "{kind} kill {k}: load = stored prefix ++ closers"
        );
        if loaded.revision != revision {
            outcome.repairs += 1;
        }
        if !expected_closers.is_empty() {
            outcome.repairs_with_closers += 1;
            let last = loaded.events.last().expect("closers");
            assert_eq!(last.event_type(), "turn/end");
            assert!(
                last.to_json()
                    .contains("\"reason\":{\"kind\":\"interrupted\"}")
            );
        }
        assert!(
            interrupted_turn_closers(&loaded.events).is_empty(),
            "balanced"
        );
        previous = loaded.events;
        drop(store);
    }
    outcome
}

#[test]
fn sigkill_at_random_moments_never_loses_flushed_events() {
    let mut kinds = vec!["jsonl", "jsonl-raw", "redb"];
    if dsh_postgres::raw::test_server().is_some() {
        kinds.push("postgres");
    }
    let total: u64 = std::env::var("DSH_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(70 * kinds.len() as u64);
    let seed: u64 = std::env::var("DSH_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("crash test: DSH_CRASH_SEED={seed} DSH_CRASH_KILLS={total}");
    let mut rng = Rng(seed);
    let per = total.div_ceil(kinds.len() as u64);
    for kind in kinds.iter().copied() {
        let o = crash_loop(kind, per, &mut rng);
        eprintln!(
            "crash test: {kind}: {} kills survived; {} loads committed a repair, {} of them closing an open turn; {} kills had a returned flush to verify",
            o.kills, o.repairs, o.repairs_with_closers, o.flushed_seqs_checked
        );
        assert_eq!(o.kills, per);
        assert_eq!(o.flushed_seqs_checked, per, "every kill followed a flush");
    }
}

/// AP3: a failed append (here EFBIG from a file-size limit, with SIGXFSZ
/// ignored) is rolled back to the previous length: the writer reports the
/// error, the transcript holds no partial batch, and every flushed event
/// is present.
#[test]
fn a_failed_append_is_rolled_back() {
    for (kind, file) in [
        ("jsonl-raw", "session.jsonl"),
        ("jsonl", "session.jsonl.zstd"),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        let script = format!(
            "trap '' XFSZ; ulimit -f 16; exec \"$0\" {kind} '{}' limited 1",
            root.display()
        );
        let out = Command::new("sh")
            .args(["-c", &script, WRITER])
            .output()
            .expect("run the writer under a file-size limit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{kind}: {stderr}");
        assert!(stderr.contains("append to"), "{kind}: {stderr}");
        let flushed = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("F ").and_then(|s| s.parse::<u64>().ok()))
            .max()
            .expect("some flushes succeeded");
        let path = root.join("--crash--").join("limited").join(file);
        let bytes = std::fs::read(&path).expect("transcript");
        assert!(bytes.len() <= 16 * 512, "{kind}: the limit held");
        let store = open_store(kind, &root).expect("open");
        let sid = SessionId::from("limited");
        let rev = store.revision(&sid).expect("revision");
        let (_, stored) = store.read_from(&sid, 0, &Cancel::new()).expect("read");
        assert_eq!(
            stored.len() as u64,
            flushed + 1,
            "{kind}: exactly the flushed events"
        );
        // No torn tail: only closers (if a turn is open) are written by load.
        let loaded = store.load(&sid).expect("load");
        let closers = interrupted_turn_closers(&stored);
        assert_eq!(loaded.events.len(), stored.len() + closers.len());
        if closers.is_empty() {
            assert_eq!(
                store.revision(&sid).expect("revision"),
                rev,
                "{kind}: nothing to repair"
            );
        }
        if kind == "jsonl-raw" {
            assert!(bytes.ends_with(b"\n"), "no partial line was left");
        } else {
            let scan = dsh_jsonl::frames::scan_frames(&bytes).expect("frames");
            assert_eq!(scan.torn, None, "no partial frame was left");
        }
    }
}
