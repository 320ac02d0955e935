//! redb-specific rules: schema refusal (KV1), store-qualified revisions
//! (KV8, R3), owner-only files and no symlinks (KV11), the database lock.

use std::os::unix::fs::PermissionsExt;

use dsh_core::SessionId;
use dsh_redb::{SCHEMA, raw};
use dsh_store::contract::{header, one_turn};
use dsh_store::{Cancel, CoordinatorConfig, ErrorKind, SessionStore};

fn sid(id: &str) -> SessionId {
    SessionId::from(id)
}

#[test]
fn kv1_a_database_of_another_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn
                .open_table(redb::TableDefinition::<&str, &str>::new("store_meta"))
                .unwrap();
            meta.insert("schema", "dsh-redb/0").unwrap();
        }
        txn.commit().unwrap();
    }
    let e = dsh_redb::open(&path, CoordinatorConfig::default())
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::Layout, "{e}");
    assert!(e.to_string().contains(SCHEMA), "{e}");
}

#[test]
fn kv8_equal_histories_in_two_stores_have_different_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let a = dsh_redb::open(&dir.path().join("a.redb"), CoordinatorConfig::default()).unwrap();
    let b = dsh_redb::open(&dir.path().join("b.redb"), CoordinatorConfig::default()).unwrap();
    for s in [&a, &b] {
        s.create(header("s1")).unwrap();
        s.append(&sid("s1"), &one_turn()).unwrap();
    }
    let ra = a.revision(&sid("s1")).unwrap();
    let rb = b.revision(&sid("s1")).unwrap();
    assert_ne!(ra, rb);
    assert!(ra.as_str().ends_with(":revision:1"), "{ra}");
    assert_eq!(a.list_snapshots(&Cancel::new()).unwrap()[0].revision, ra);
}

#[test]
fn kv11_owner_only_file_and_no_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    drop(dsh_redb::open(&path, CoordinatorConfig::default()).unwrap());
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let link = dir.path().join("link.redb");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let e = dsh_redb::open(&link, CoordinatorConfig::default())
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::Layout, "{e}");
    let open_dir = dir.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = dsh_redb::open(&open_dir.join("s.redb"), CoordinatorConfig::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("group- or world-writable"), "{e}");
}

#[test]
fn kv2_records_hold_the_event_text_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let s = dsh_redb::open(&dir.path().join("s.redb"), CoordinatorConfig::default()).unwrap();
    s.create(header("s1")).unwrap();
    let events = one_turn();
    s.append(&sid("s1"), &events).unwrap();
    let records = raw::records(&s, "s1").unwrap();
    let want: Vec<(u64, String)> = events.iter().map(|e| (e.seq(), e.to_json())).collect();
    assert_eq!(records, want);
}

#[test]
fn a_second_store_on_the_same_database_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let first = dsh_redb::open(&path, CoordinatorConfig::default()).unwrap();
    let e = dsh_redb::open(&path, CoordinatorConfig::default())
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::Locked, "{e}");
    drop(first);
    assert!(dsh_redb::open(&path, CoordinatorConfig::default()).is_ok());
}
