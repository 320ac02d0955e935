//! JSONL-specific behaviour: paths (TP-6), packed rows on write (TP-1,
//! TP-3), header line (TP-5), zstd torn frames (TP-11), layout errors (L4,
//! L5), modes (L7), and hostile session ids (property test).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use dsh_core::SessionId;
use dsh_core::session::{EventData, SessionEvent, SessionHeader};
use dsh_jsonl::frames::{FrameWriter, decode_frame, scan_frames};
use dsh_jsonl::layout::{MAX_SEGMENT, encode_id, project_key};
use dsh_jsonl::{Compression, JsonlConfig, JsonlStore};
use dsh_store::contract::{self, ev, header, one_turn};
use dsh_store::{Cancel, ErrorKind, Location, SessionStore};
use proptest::prelude::*;

fn store(root: &Path, compression: Compression, pack: bool) -> JsonlStore {
    let mut config = JsonlConfig::new(root).with_compression(compression);
    config.pack_chunks = pack;
    dsh_jsonl::open(config).unwrap()
}

fn path_of(s: &JsonlStore, h: &SessionHeader) -> PathBuf {
    match s.locate(h) {
        Some(Location::Jsonl { path }) => path,
        other => panic!("no location: {other:?}"),
    }
}

fn sid(id: &str) -> SessionId {
    SessionId::from(id)
}

#[test]
fn tp6_locate() {
    let s = store(Path::new("/r"), Compression::Zstd, true);
    let mut h = SessionHeader::new("a/b", 1);
    h.cwd = Some("/home/u/my proj".into());
    assert_eq!(
        path_of(&s, &h),
        Path::new("/r/--home-u-my~0020proj--/a~002Fb/session.jsonl.zstd")
    );
    let h = SessionHeader::new("..", 1);
    assert_eq!(
        path_of(&s, &h),
        Path::new("/r/_no-cwd/~002E~002E/session.jsonl.zstd")
    );
    let raw = store(Path::new("/r"), Compression::None, true);
    assert_eq!(
        path_of(&raw, &h),
        Path::new("/r/_no-cwd/~002E~002E/session.jsonl")
    );
}

fn filler(n: u64) -> Vec<SessionEvent> {
    (0..n)
        .map(|k| {
            SessionEvent::new(k, 1, EventData::plugin("x/y", &serde_json::json!({"k": k})))
                .with_ignorable()
        })
        .collect()
}

fn text_delta(seq: u64, time: i64, text: &str, index: u64) -> SessionEvent {
    ev(&format!(
        "{{\"type\":\"assistant/chunk\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":2,\"step\":1,\"chunk\":{{\"type\":\"text-delta\",\"index\":{index},\"text\":{}}}}}}}",
        serde_json::to_string(text).unwrap()
    ))
}

fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap();
    let lines: Vec<String> = text.lines().map(String::from).collect();
    lines[lines.len() - n..].to_vec()
}

#[test]
fn tp1_text_run_packs_on_write_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), Compression::None, true);
    let h = header("s1");
    s.create(h.clone()).unwrap();
    s.append(&sid("s1"), &filler(7)).unwrap();
    let batch: Vec<SessionEvent> = [
        (7, 1000, "Hel"),
        (8, 1003, "lo"),
        (9, 1003, ","),
        (10, 1010, " wor"),
        (11, 1009, "ld"),
    ]
    .iter()
    .map(|(q, t, x)| text_delta(*q, *t, x, 0))
    .collect();
    s.append(&sid("s1"), &batch).unwrap();
    assert_eq!(
        last_lines(&path_of(&s, &h), 1),
        [
            "{\"type\":\"text-chunks\",\"seq0\":7,\"time0\":1000,\"data\":{\"turn\":2,\"step\":1,\"index\":0,\"dt\":[3,0,7,-1],\"texts\":[\"Hel\",\"lo\",\",\",\" wor\",\"ld\"]}}"
        ]
    );
    let (_, back) = s.read_from(&sid("s1"), 7, &Cancel::new()).unwrap();
    assert_eq!(back, batch);
    let times: Vec<i64> = back.iter().map(SessionEvent::time).collect();
    assert_eq!(times, [1000, 1003, 1003, 1010, 1009]);
}

#[test]
fn tp3_short_runs_and_disabled_packing_stay_verbatim() {
    let dir = tempfile::tempdir().unwrap();
    // Packing disabled: five verbatim lines.
    let s = store(&dir.path().join("a"), Compression::None, false);
    let h = header("s1");
    s.create(h.clone()).unwrap();
    let batch: Vec<SessionEvent> = (0..5).map(|k| text_delta(k, 1, "t", 0)).collect();
    s.append(&sid("s1"), &batch).unwrap();
    assert!(
        last_lines(&path_of(&s, &h), 5)
            .iter()
            .all(|l| l.starts_with("{\"type\":\"assistant/chunk\""))
    );
    // Two deltas, and a third with another index: verbatim even when packing.
    let s = store(&dir.path().join("b"), Compression::None, true);
    s.create(h.clone()).unwrap();
    let batch = vec![
        text_delta(0, 1, "a", 0),
        text_delta(1, 1, "b", 0),
        text_delta(2, 1, "c", 7),
    ];
    s.append(&sid("s1"), &batch).unwrap();
    assert!(
        last_lines(&path_of(&s, &h), 3)
            .iter()
            .all(|l| l.starts_with("{\"type\":\"assistant/chunk\""))
    );
    assert_eq!(s.read_from(&sid("s1"), 0, &Cancel::new()).unwrap().1, batch);
}

#[test]
fn tp5_header_line_is_written_in_order_with_delegation_depth() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), Compression::None, true);
    let h = SessionHeader::new("x", 5);
    s.create(h.clone()).unwrap();
    s.append(&sid("x"), &filler(1)).unwrap();
    let text = fs::read_to_string(path_of(&s, &h)).unwrap();
    assert_eq!(
        text.lines().next().unwrap(),
        "{\"type\":\"session\",\"version\":0,\"id\":\"x\",\"createdAt\":5,\"delegationDepth\":0}"
    );
    assert_eq!(s.load(&sid("x")).unwrap().header.delegation_depth, Some(0));
}

#[test]
fn l7_owner_only_modes_and_no_temp_files_left() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("root"), Compression::Zstd, true);
    let h = header("s1");
    s.create(h.clone()).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    let file = path_of(&s, &h);
    let session_dir = file.parent().unwrap();
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(session_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        fs::metadata(session_dir.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    let mut names: Vec<String> = fs::read_dir(session_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["session.jsonl.zstd", "session.lock"]);
}

#[test]
fn pe2_one_frame_per_durable_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), Compression::Zstd, true);
    let h = header("s1");
    s.create(h.clone()).unwrap();
    let all = one_turn();
    s.append(&sid("s1"), &all[..2]).unwrap();
    s.append(&sid("s1"), &all[2..5]).unwrap();
    s.append(&sid("s1"), &all[5..]).unwrap();
    let bytes = fs::read(path_of(&s, &h)).unwrap();
    let scan = scan_frames(&bytes).unwrap();
    assert_eq!(scan.torn, None);
    let plains: Vec<Vec<u8>> = scan
        .frames
        .iter()
        .map(|r| decode_frame(&bytes[r.clone()]).unwrap())
        .collect();
    let lines: Vec<usize> = plains
        .iter()
        .map(|p| p.iter().filter(|b| **b == b'\n').count())
        .collect();
    assert_eq!(
        lines,
        [1, 2, 3, 1],
        "header frame, then one frame per write"
    );
    assert!(plains.iter().all(|p| p.ends_with(b"\n")));
}

/// TP-11: a torn last frame: complete lines are recovered and re-written
/// with the closers as one new frame; a flipped payload byte in a complete
/// frame is corruption and leaves the file untouched.
#[test]
fn tp11_zstd_torn_frame_is_recovered_and_a_bad_checksum_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let s = store(&root, Compression::Zstd, true);
    let h = header("s1");
    let path = path_of(&s, &h);
    drop(s);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut w = FrameWriter::new().unwrap();
    let mut bytes = Vec::new();
    w.frame(
        format!("{}\n", contract::header_line("s1", "0")).as_bytes(),
        &mut bytes,
    )
    .unwrap();
    let f1 = format!(
        "{}\n{}\n",
        contract::turn_start(0, 1, 10),
        contract::user(1, "hi", 11)
    );
    w.frame(f1.as_bytes(), &mut bytes).unwrap();
    let f2_start = bytes.len();
    // A chunk line long and incompressible enough for several blocks.
    let mut x = 0x9E37_79B9u32;
    let noise: String = (0..400_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let f2 = format!(
        "{}\n{{\"type\":\"assistant/chunk\",\"seq\":3,\"time\":13,\"data\":{{\"turn\":1,\"step\":1,\"chunk\":{{\"type\":\"text-delta\",\"index\":0,\"text\":\"{noise}\"}}}}}}\n",
        contract::step_start(2, 1, 1, 12)
    );
    w.frame(f2.as_bytes(), &mut bytes).unwrap();
    let full = bytes.clone();
    bytes.truncate(f2_start + (full.len() - f2_start) * 3 / 4);
    fs::write(&path, &bytes).unwrap();

    let s = store(&root, Compression::Zstd, true);
    let view = s.inspect(&sid("s1"), &Cancel::new()).unwrap();
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "inspect leaves the torn frame"
    );
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(loaded.events, view.events);
    let types: Vec<&str> = loaded.events.iter().map(SessionEvent::event_type).collect();
    assert_eq!(
        types,
        [
            "turn/start",
            "user/message",
            "step/start",
            "step/end",
            "turn/end"
        ]
    );
    assert!(
        loaded.events[3..].iter().all(|e| e.time() == 12),
        "closers take the time of seq 2"
    );
    let after = fs::read(&path).unwrap();
    assert_eq!(after[..f2_start], bytes[..f2_start], "truncated at F2");
    let scan = scan_frames(&after).unwrap();
    assert_eq!(scan.frames.len(), 3);
    let last = decode_frame(&after[scan.frames[2].clone()]).unwrap();
    assert_eq!(
        last.iter().filter(|b| **b == b'\n').count(),
        3,
        "recovered + closers in one frame"
    );
    drop(s);

    // A flipped byte inside F1's block payload.
    let mut damaged = full[..f2_start].to_vec();
    let f1_range = scan_frames(&damaged).unwrap().frames[1].clone();
    let victim = f1_range.start + (f1_range.end - f1_range.start) / 2;
    damaged[victim] ^= 0x55;
    fs::write(&path, &damaged).unwrap();
    let s = store(&root, Compression::Zstd, true);
    let e = s.load(&sid("s1")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    assert!(
        e.to_string().starts_with("corrupt Zstandard session log"),
        "{e}"
    );
    assert!(e.to_string().contains("(raw log: "), "{e}");
    assert_eq!(fs::read(&path).unwrap(), damaged, "untouched");
}

#[test]
fn l4_other_encoding_and_flat_files_are_layout_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let z = store(&root, Compression::Zstd, true);
    z.create(header("s1")).unwrap();
    z.append(&sid("s1"), &one_turn()).unwrap();
    drop(z);
    let raw = store(&root, Compression::None, true);
    for e in [
        raw.load(&sid("s1")).unwrap_err(),
        raw.list(&Cancel::new()).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Layout, "{e}");
        assert!(
            e.to_string()
                .contains("use a separate root or the matching compression mode"),
            "{e}"
        );
    }
    let root2 = dir.path().join("root2");
    fs::create_dir_all(root2.join(project_key(Some("/w")))).unwrap();
    fs::write(
        root2.join(project_key(Some("/w"))).join("s1.jsonl"),
        b"{}\n",
    )
    .unwrap();
    let raw = store(&root2, Compression::None, true);
    let e = raw.load(&sid("s1")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Layout);
    assert!(e.to_string().contains("old flat layout"), "{e}");
}

#[test]
fn l5_identity_mismatch_is_corruption_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let s = store(&root, Compression::None, true);
    let path = path_of(&s, &header("s1"));
    drop(s);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = format!("{}\n", contract::header_line("other", "0"));
    for l in contract::one_turn_lines() {
        text.push_str(&l);
        text.push('\n');
    }
    fs::write(&path, &text).unwrap();
    let s = store(&root, Compression::None, true);
    let e = s.load(&sid("s1")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    assert!(e.to_string().contains("does not map to this file"), "{e}");
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn l6_listing_reads_headers_of_torn_logs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let s = store(&root, Compression::None, true);
    let h = header("s1");
    s.create(h.clone()).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    let path = path_of(&s, &h);
    drop(s);
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"type\":\"tur").unwrap();
    let s = store(&root, Compression::None, true);
    assert_eq!(s.list(&Cancel::new()).unwrap(), vec![h]);
}

fn segment_is_safe(seg: &str) -> bool {
    !seg.is_empty()
        && seg != "."
        && seg != ".."
        && seg.len() <= MAX_SEGMENT
        && seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-~".contains(&b))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// L2: every id maps to one safe segment, and distinct ids never collide.
    #[test]
    fn distinct_ids_map_to_distinct_safe_segments(
        a in prop_oneof![".{1,40}", "[./~\\\\\0a-z]{1,12}", ".{200,400}", "[\u{80}-\u{10FFFF}]{60,130}"],
        b in prop_oneof![".{1,40}", "[./~\\\\\0a-z]{1,12}", ".{200,400}", "[\u{80}-\u{10FFFF}]{60,130}"],
    ) {
        let sa = encode_id(&a).unwrap();
        let sb = encode_id(&b).unwrap();
        prop_assert!(segment_is_safe(&sa), "{:?} -> {:?}", a, sa);
        prop_assert!(segment_is_safe(&sb), "{:?} -> {:?}", b, sb);
        prop_assert_eq!(a == b, sa == sb);
        // A near-identical id (one more character) never collides either.
        let c = format!("{a}\0");
        prop_assert_ne!(encode_id(&c).unwrap(), sa);
    }

    /// L3: project keys are one safe segment.
    #[test]
    fn project_keys_are_safe(cwd in prop_oneof![".{0,60}", "[/\\\\:a-z.~ ]{0,30}", ".{300,500}"]) {
        let key = project_key(Some(&cwd));
        prop_assert!(segment_is_safe(&key), "{:?} -> {:?}", cwd, key);
    }
}

/// OP2: the raw artifact is the logical text, identical in both encodings,
/// without a torn fragment (Q10).
#[test]
fn op2_read_raw_returns_the_logical_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut texts = Vec::new();
    for (name, compression) in [("z", Compression::Zstd), ("r", Compression::None)] {
        let root = dir.path().join(name);
        let s = store(&root, compression, true);
        let h = header("s1");
        s.create(h.clone()).unwrap();
        s.append(&sid("s1"), &one_turn()[..3]).unwrap();
        s.append(&sid("s1"), &one_turn()[3..]).unwrap();
        let path = path_of(&s, &h);
        drop(s);
        let torn = match compression {
            Compression::None => b"{\"type\":\"x".to_vec(),
            Compression::Zstd => {
                let mut out = Vec::new();
                FrameWriter::new()
                    .unwrap()
                    .frame(b"{\"type\":\"x\"}\n", &mut out)
                    .unwrap();
                out.truncate(out.len() - 2);
                out
            }
        };
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &torn).unwrap();
        let s = store(&root, compression, true);
        let raw = s.backend().read_raw(&sid("s1")).unwrap().unwrap();
        assert_eq!(raw.filename, "session.jsonl");
        assert_eq!(raw.header, h);
        texts.push(raw.content);
        assert!(s.backend().read_raw(&sid("absent")).unwrap().is_none());
    }
    let mut want = format!("{}\n", contract::header_line("s1", "0"));
    for l in contract::one_turn_lines() {
        want.push_str(&l);
        want.push('\n');
    }
    assert_eq!(texts[0], want);
    assert_eq!(texts[1], want);
}

/// The descriptors this process holds open under `root`.
fn fds_under(root: &Path) -> Vec<PathBuf> {
    let root = fs::canonicalize(root).unwrap();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(&root))
        .collect()
}

fn store_with_locks(root: &Path, compression: Compression, held: usize) -> JsonlStore {
    let mut config = JsonlConfig::new(root).with_compression(compression);
    config.max_held_locks = held;
    dsh_jsonl::open(config).unwrap()
}

/// An idle session holds no transcript descriptor, and the store
/// holds at most `max_held_locks` session locks however many sessions it
/// writes.
#[test]
fn idle_sessions_hold_no_transcript_and_a_bounded_number_of_locks() {
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let s = store_with_locks(dir.path(), compression, 3);
        for k in 0..10 {
            let id = format!("s{k}");
            s.create(header(&id)).unwrap();
            s.append(&sid(&id), &one_turn()).unwrap();
        }
        let open = fds_under(dir.path());
        assert!(
            open.iter().all(|p| p.ends_with(dsh_jsonl::LOCK_NAME)),
            "only lock files stay open: {open:?}"
        );
        assert!(open.len() <= 3, "at most 3 locks held: {open:?}");
        // Every session still takes more events, and loads back whole.
        for k in 0..10 {
            let id = format!("s{k}");
            s.append(&sid(&id), &[ev(&contract::turn_start(6, 2, 1))])
                .unwrap();
        }
        drop(s);
        let s = store(dir.path(), compression, true);
        for k in 0..10 {
            assert_eq!(s.load(&sid(&format!("s{k}"))).unwrap().events.len(), 8);
        }
        assert!(fds_under(dir.path()).len() <= 10);
    }
}

/// Lock semantics past the cache: a session whose lock was let
/// go (the cache was full) and which another store then wrote is refused
/// with `Locked` on this store's next write, and nothing is lost.
#[test]
fn a_released_lock_taken_by_another_writer_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let a = store_with_locks(dir.path(), Compression::Zstd, 1);
    a.create(header("s1")).unwrap();
    a.append(&sid("s1"), &one_turn()).unwrap();
    // s2's lock pushes s1's out of the cache.
    a.create(header("s2")).unwrap();
    a.append(&sid("s2"), &one_turn()).unwrap();
    // While `a` holds s1's lock again nobody else can write it.
    let b = store(dir.path(), Compression::Zstd, true);
    b.load(&sid("s1")).unwrap();
    b.append(&sid("s1"), &[ev(&contract::turn_start(6, 2, 1))])
        .unwrap();
    let err = a
        .append(&sid("s1"), &[ev(&contract::turn_start(6, 2, 1))])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    b.release(&sid("s1")).unwrap();
    let err = a
        .append(&sid("s1"), &[ev(&contract::turn_start(6, 2, 1))])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    assert!(
        err.to_string().contains("changed by another writer"),
        "{err}"
    );
    drop(a);
    let c = store(dir.path(), Compression::Zstd, true);
    assert_eq!(c.load(&sid("s1")).unwrap().events.len(), 8);
}
