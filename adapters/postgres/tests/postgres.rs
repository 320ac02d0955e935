//! PostgreSQL-specific rules: the writer lease across stores (two writers,
//! a holder whose connection dies), migrations (idempotent, concurrent,
//! newer refused), the redacted URL, search by cwd/parent/time, the title
//! column, streamed reads and chunked inserts of large sessions, and
//! store-qualified revisions (KV8, R3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Scratch;
use dsh_core::SessionId;
use dsh_core::session::{EventData, SessionEvent, SessionHeader};
use dsh_postgres::{FETCH_ROWS, INSERT_CHUNK, SCHEMA_VERSION, Search, StoreUrl, raw};
use dsh_store::contract::{
    assistant_text, ev, header, one_turn, step_end, step_start, turn_end, turn_start, user,
};
use dsh_store::{Cancel, ErrorKind, SessionStore};

fn sid(id: &str) -> SessionId {
    SessionId::from(id)
}

/// `turns` complete turns of six events each, seqs from 0.
fn turns(turns: u64) -> Vec<SessionEvent> {
    let mut out = Vec::new();
    for t in 0..turns {
        let s = t * 6;
        let time = 1000 + s as i64;
        for line in [
            turn_start(s, t + 1, time),
            user(s + 1, &format!("question {t}"), time),
            step_start(s + 2, t + 1, 1, time),
            assistant_text(s + 3, t + 1, &format!("answer {t}"), time),
            step_end(s + 4, t + 1, 1, time),
            turn_end(s + 5, t + 1, time),
        ] {
            out.push(ev(&line));
        }
    }
    out
}

#[test]
fn a_second_writer_gets_the_locked_error_and_readers_are_not_blocked() {
    let Some(db) = Scratch::new() else { return };
    let a = db.try_open().unwrap();
    a.create(header("s1")).unwrap();
    a.append(&sid("s1"), &one_turn()).unwrap();
    let b = db.try_open().unwrap();
    let e = b.load(&sid("s1")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    let text = e.to_string();
    assert!(text.contains("is locked by another writer"), "{text}");
    assert!(text.contains("session \"s1\""), "{text}");
    let config: postgres::Config = db.url.parse().unwrap();
    if let Some(password) = config.get_password() {
        let password = String::from_utf8_lossy(password);
        assert!(!text.contains(&*password), "the password leaked: {text}");
    }
    let e = b
        .append(&sid("s1"), &[ev(&turn_start(6, 2, 1))])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    assert_eq!(
        b.inspect(&sid("s1"), &Cancel::new()).unwrap().events.len(),
        6
    );
    // Another session is free.
    b.create(header("s2")).unwrap();
    b.append(&sid("s2"), &one_turn()).unwrap();
    // Release hands the lease over.
    a.release(&sid("s1")).unwrap();
    b.append(&sid("s1"), &[ev(&turn_start(6, 2, 1))]).unwrap();
    assert_eq!(a.load(&sid("s1")).unwrap_err().kind(), ErrorKind::Locked);
}

#[test]
fn the_lease_of_a_dead_connection_expires_and_the_old_holder_cannot_write_after_it() {
    let Some(db) = Scratch::new() else { return };
    let a = db.try_open().unwrap();
    a.create(header("s1")).unwrap();
    a.append(&sid("s1"), &one_turn()).unwrap();
    let b = db.try_open().unwrap();
    assert_eq!(b.load(&sid("s1")).unwrap_err().kind(), ErrorKind::Locked);
    // The holder's connection dies (a crashed worker, a lost machine).
    let pid = raw::backend_pid(&a).unwrap();
    let mut admin = db.client();
    let ended: bool = admin
        .query_one("SELECT pg_terminate_backend($1, 5000)", &[&pid])
        .unwrap()
        .get(0);
    assert!(ended);
    // The next writer takes the session over and closes nothing (the log
    // was complete).
    let loaded = b.load(&sid("s1")).unwrap();
    assert_eq!(loaded.events.len(), 6);
    b.append(&sid("s1"), &[ev(&turn_start(6, 2, 1))]).unwrap();
    // The old holder reconnects on its next write and finds the lease
    // taken: nothing of it is written.
    let e = a
        .append(&sid("s1"), &[ev(&turn_start(6, 2, 2))])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    // Once the new holder lets go, the old one's stale cursor is refused
    // by the stale-writer check instead of interleaving the log.
    b.release(&sid("s1")).unwrap();
    drop(b);
    let e = a
        .append(&sid("s1"), &[ev(&turn_start(6, 2, 2))])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("expected 7"), "{e}");
    let stored = raw::records(&a, "s1").unwrap();
    assert_eq!(stored.len(), 7);
    assert!(stored[6].1.contains("\"time\":1"), "{:?}", stored[6]);
}

#[test]
fn migrations_are_recorded_once_under_concurrent_opens_and_a_newer_schema_is_refused() {
    let Some(db) = Scratch::new() else { return };
    let start = std::sync::Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let config = db.config();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                dsh_postgres::open(config).map(drop)
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let mut c = db.client();
    let rows = c
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .unwrap();
    let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let ids: i64 = c
        .query_one(
            "SELECT count(*) FROM store_meta WHERE key = 'store_id'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(ids, 1);
    // Re-opening changes nothing.
    let first = db.try_open().unwrap().backend().store_id().to_owned();
    assert_eq!(db.try_open().unwrap().backend().store_id(), first);
    c.execute(
        "INSERT INTO schema_migrations (version) VALUES ($1)",
        &[&(SCHEMA_VERSION + 1)],
    )
    .unwrap();
    let e = db.try_open().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Layout, "{e}");
    assert!(e.to_string().contains("newer than this build"), "{e}");
}

#[test]
fn the_url_never_shows_its_password() {
    for (url, shown) in [
        (
            "postgres://dsh:s3cr%21t@db.example:6543/agents",
            "postgres://dsh:***@db.example:6543/agents",
        ),
        (
            "host=db.example port=5432 user=dsh password=s3cr!t dbname=agents",
            "postgres://dsh:***@db.example:5432/agents",
        ),
        (
            "postgresql://dsh@db.example/agents?password=s3cr!t",
            "postgres://dsh:***@db.example:5432/agents",
        ),
    ] {
        let u = StoreUrl::parse(url).unwrap();
        assert!(u.has_password());
        assert_eq!(u.to_string(), shown);
        assert!(!format!("{u:?}").contains("s3cr"), "{u:?}");
    }
    let e = StoreUrl::parse("postgres://dsh:s3cr!t@h:notaport/db").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(!e.to_string().contains("s3cr"), "{e}");
}

#[test]
fn a_wrong_password_fails_without_showing_it() {
    let Some(db) = Scratch::new() else { return };
    // postgres://user:password@host:port/db with the password replaced.
    let (scheme_user, rest) = db.url.rsplit_once('@').unwrap();
    let user_end = scheme_user.rfind(':').filter(|&i| i > "postgres://".len());
    let user = user_end.map_or(scheme_user, |i| &scheme_user[..i]);
    let url = format!("{user}:wrong-pw-d5a1@{rest}");
    let mut c = dsh_postgres::PgConfig::new(StoreUrl::parse(&url).unwrap());
    c.schema = Some(db.schema.clone());
    let e = dsh_postgres::open(c).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(!e.to_string().contains("wrong-pw"), "{e}");
    assert!(e.to_string().contains(":***@"), "{e}");
}

fn header_in(id: &str, cwd: &str, created_at: u64, parent: Option<&str>) -> SessionHeader {
    let mut h = SessionHeader::new(id, created_at);
    h.cwd = Some(cwd.into());
    h.parent_session = parent.map(SessionId::from);
    h
}

#[test]
fn search_by_cwd_parent_and_creation_time() {
    let Some(db) = Scratch::new() else { return };
    let s = db.try_open().unwrap();
    for (id, cwd, at, parent) in [
        ("a", "/w/one", 1000, None),
        ("b", "/w/two", 2000, None),
        ("c", "/w/one", 3000, Some("a")),
        ("d", "/w/one", 4000, None),
    ] {
        s.create(header_in(id, cwd, at, parent)).unwrap();
        s.append(&sid(id), &one_turn()).unwrap();
    }
    s.create(header_in("e", "/w/one", 5000, None)).unwrap(); // not materialized
    let ids = |q: Search| -> Vec<String> {
        let mut v: Vec<String> = s
            .backend()
            .search(&q)
            .unwrap()
            .into_iter()
            .map(|x| x.header.id.to_string())
            .collect();
        v.sort();
        v
    };
    let mut q = Search::default();
    q.cwd = Some("/w/one".into());
    assert_eq!(ids(q.clone()), ["a", "c", "d"]);
    q.created_from = Some(2000);
    q.created_before = Some(4000);
    assert_eq!(ids(q), ["c"]);
    let mut q = Search::default();
    q.parent = Some(sid("a"));
    assert_eq!(ids(q), ["c"]);
    // Most recently active first, limited.
    s.append(&sid("a"), &[ev(&turn_start(6, 2, 1))]).unwrap();
    let mut q = Search::default();
    q.limit = Some(1);
    let top = s.backend().search(&q).unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].header.id.as_str(), "a");
}

#[test]
fn the_latest_title_event_is_the_sessions_title() {
    let Some(db) = Scratch::new() else { return };
    let s = db.try_open().unwrap();
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    assert_eq!(s.backend().title(&sid("s1")).unwrap(), None);
    let title = |seq, text: &str| {
        SessionEvent::new(
            seq,
            1,
            EventData::plugin(
                "session/title",
                &serde_json::json!({"title": text, "messageSeqs": [1], "source": {"kind": "model"}}),
            ),
        )
    };
    s.append(&sid("s1"), &[title(6, "First"), title(7, "Second\0")])
        .unwrap();
    assert_eq!(
        s.backend().title(&sid("s1")).unwrap().as_deref(),
        Some("Second")
    );
    // Events stay exactly as written.
    assert!(
        raw::records(&s, "s1").unwrap()[7]
            .1
            .contains("Second\\u0000")
    );
}

#[test]
fn a_large_session_is_inserted_in_chunks_and_read_through_the_portal() {
    let Some(db) = Scratch::new() else { return };
    let n_turns = (INSERT_CHUNK.max(FETCH_ROWS as usize) * 2 / 6 + 1) as u64;
    let all = turns(n_turns);
    assert!(all.len() > 2 * INSERT_CHUNK && all.len() > 2 * FETCH_ROWS as usize);
    let s = db.try_open().unwrap();
    s.create(header("big")).unwrap();
    s.append(&sid("big"), &all).unwrap();
    drop(s);
    let s = db.try_open().unwrap();
    let loaded = s.load(&sid("big")).unwrap();
    assert_eq!(loaded.events, all);
    let (_, tail) = s
        .read_from(&sid("big"), all.len() as u64 - 3, &Cancel::new())
        .unwrap();
    assert_eq!(tail, all[all.len() - 3..]);
}

#[test]
fn equal_histories_in_two_stores_have_different_revisions() {
    let (Some(x), Some(y)) = (Scratch::new(), Scratch::new()) else {
        return;
    };
    let a = x.try_open().unwrap();
    let b = y.try_open().unwrap();
    for s in [&a, &b] {
        s.create(header("s1")).unwrap();
        s.append(&sid("s1"), &one_turn()).unwrap();
    }
    let ra = a.revision(&sid("s1")).unwrap();
    assert_ne!(ra, b.revision(&sid("s1")).unwrap());
    assert!(ra.as_str().ends_with(":revision:1"), "{ra}");
    a.append(&sid("s1"), &[ev(&turn_start(6, 2, 1))]).unwrap();
    assert!(
        a.revision(&sid("s1"))
            .unwrap()
            .as_str()
            .ends_with(":revision:2")
    );
}

#[test]
fn a_batch_whose_commit_answer_was_lost_is_not_refused_on_retry() {
    let Some(db) = Scratch::new() else { return };
    let s = db.try_open().unwrap();
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    // The next batch reached the table, but the store never heard back
    // (simulated by writing it behind the store's back).
    let next = &turns(2)[6..];
    for e in next {
        raw::put_record(&s, "s1", e.seq(), &e.to_json()).unwrap();
    }
    s.append(&sid("s1"), next).unwrap();
    assert_eq!(raw::records(&s, "s1").unwrap().len(), 12);
    // Other events at the same seqs are still a stale writer's.
    raw::put_record(&s, "s1", 12, &turn_start(12, 3, 99)).unwrap();
    let e = s
        .append(&sid("s1"), &[ev(&turn_start(12, 3, 1))])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("expected 13"), "{e}");
}
