//! The shared contract suite (persistence.md section 4, and the test vectors
//! of section 10 that concern stores), generic over a [`Harness`].
//!
//! A store's test file implements [`Harness`] and invokes
//! [`contract_tests!`](crate::contract_tests), which expands to one `#[test]`
//! per contract behaviour. Every check panics with a message on failure
//! (this module is test code).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_core::SessionId;
use dsh_core::jsonl::{Decoded, Decoder, Record};
use dsh_core::session::{EventData, Session, SessionEvent, SessionHeader, SurfaceOp};

use crate::{Cancel, CoordinatorConfig, ErrorKind, MAX_SAFE_INTEGER, SessionStore, StoreError};

/// Access to one store's storage for the suite: open instances, and write or
/// damage stored logs behind the store's back (the way a crash or a manual
/// edit would).
pub trait Harness {
    /// The store type.
    type Store: SessionStore;

    /// Opens a new store instance over this harness's storage.
    fn try_open(&self) -> Result<Self::Store, StoreError> {
        self.try_open_with(CoordinatorConfig::default())
    }

    /// Opens a new store instance over this harness's storage with these
    /// coordinator settings.
    fn try_open_with(&self, config: CoordinatorConfig) -> Result<Self::Store, StoreError>;

    /// Opens a new store instance; panics on error.
    fn open(&self) -> Self::Store {
        self.try_open().expect("open store")
    }

    /// Stores a log of session `id`: the `header` JSON line, then `lines`
    /// (storage records, one JSON text each, no newline), then `torn` as a
    /// torn tail when given (a JSONL store writes it as a final fragment
    /// without a newline, or a torn zstd frame; a key-value store as an
    /// undecodable record after the lines). No store is open meanwhile.
    fn write_log(
        &self,
        id: &str,
        cwd: Option<&str>,
        header: &str,
        lines: &[String],
        torn: Option<&str>,
    );

    /// Adds a torn tail after the stored log of `id` (no store is open).
    fn tear(&self, id: &str, cwd: Option<&str>, fragment: &str);

    /// The physical stored state of `id` (file bytes, or records), to check
    /// that an operation left it untouched.
    fn snapshot(&self, id: &str, cwd: Option<&str>) -> Vec<u8>;

    /// Whether a defect among `write_log`'s complete lines follows the line
    /// scan rule (6.1: torn unless a `turn/end` follows). False for a zstd
    /// store, where `write_log` puts the lines in a complete frame and any
    /// defect there is corruption (RZ5).
    fn line_scan_rule(&self) -> bool {
        true
    }
}

/// Parses one event line.
pub fn ev(line: &str) -> SessionEvent {
    match Decoder::new().decode_line(line.as_bytes()) {
        Ok(Record::One(Decoded::Event(e))) => e,
        other => panic!("not a valid event line {line}: {other:?}"),
    }
}

/// The header `H` of section 10 for `id` (cwd `/w`).
pub fn header(id: &str) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1000);
    h.cwd = Some("/w".into());
    // Always written, and read back as 0 (HL1, TP-5).
    h.delegation_depth = Some(0);
    h
}

/// The header line of `header(id)` with `version` replaced.
pub fn header_line(id: &str, version: &str) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":{version},\"id\":{},\"createdAt\":1000,\"cwd\":\"/w\",\"delegationDepth\":0}}",
        serde_json::to_string(id).unwrap()
    )
}

pub fn turn_start(seq: u64, turn: u64, time: i64) -> String {
    format!(
        "{{\"type\":\"turn/start\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn}}}}}"
    )
}

pub fn turn_end(seq: u64, turn: u64, time: i64) -> String {
    format!(
        "{{\"type\":\"turn/end\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn},\"reason\":{{\"kind\":\"completed\"}}}}}}"
    )
}

pub fn step_start(seq: u64, turn: u64, step: u64, time: i64) -> String {
    format!(
        "{{\"type\":\"step/start\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn},\"step\":{step}}}}}"
    )
}

pub fn step_end(seq: u64, turn: u64, step: u64, time: i64) -> String {
    format!(
        "{{\"type\":\"step/end\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn},\"step\":{step}}}}}"
    )
}

pub fn user(seq: u64, text: &str, time: i64) -> String {
    format!(
        "{{\"type\":\"user/message\",\"seq\":{seq},\"time\":{time},\"data\":{{\"content\":[{{\"type\":\"text\",\"text\":{}}}],\"source\":{{\"kind\":\"user\"}},\"role\":\"user\",\"id\":\"u{seq}\"}},\"surfaceOp\":\"append\"}}",
        serde_json::to_string(text).unwrap()
    )
}

pub fn assistant_text(seq: u64, turn: u64, text: &str, time: i64) -> String {
    format!(
        "{{\"type\":\"assistant/message\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn},\"step\":1,\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":{}}}],\"source\":{{\"kind\":\"model\",\"provider\":\"p\",\"model\":\"m\"}},\"id\":\"a{seq}\"}}}},\"surfaceOp\":\"append\"}}",
        serde_json::to_string(text).unwrap()
    )
}

/// `AM(k, calls)` of section 10 (turn `turn`, step 1).
pub fn assistant_calls(seq: u64, turn: u64, calls: &[&str], time: i64) -> String {
    let blocks: Vec<String> = calls
        .iter()
        .map(|c| {
            format!(
                "{{\"type\":\"tool-call\",\"id\":\"{c}\",\"name\":\"bash\",\"arguments\":\"{{}}\"}}"
            )
        })
        .collect();
    format!(
        "{{\"type\":\"assistant/message\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn},\"step\":1,\"message\":{{\"role\":\"assistant\",\"content\":[{}],\"source\":{{\"kind\":\"model\",\"provider\":\"p\",\"model\":\"m\"}},\"id\":\"a{seq}\"}}}},\"surfaceOp\":\"append\"}}",
        blocks.join(",")
    )
}

pub fn tool_call(seq: u64, turn: u64, call: &str, time: i64) -> String {
    format!(
        "{{\"type\":\"tool/call\",\"seq\":{seq},\"time\":{time},\"data\":{{\"turn\":{turn},\"step\":1,\"callId\":\"{call}\",\"name\":\"bash\",\"arguments\":\"{{}}\"}}}}"
    )
}

/// `oneTurnLog` of 4.1: seqs 0–5.
pub fn one_turn_lines() -> Vec<String> {
    vec![
        turn_start(0, 1, 1000),
        user(1, "hi", 1001),
        step_start(2, 1, 1, 1002),
        assistant_text(3, 1, "hello", 1003),
        step_end(4, 1, 1, 1004),
        turn_end(5, 1, 1005),
    ]
}

pub fn events(lines: &[String]) -> Vec<SessionEvent> {
    lines.iter().map(|l| ev(l)).collect()
}

pub fn one_turn() -> Vec<SessionEvent> {
    events(&one_turn_lines())
}

fn sid(id: &str) -> SessionId {
    SessionId::from(id)
}

fn types_of(events: &[SessionEvent]) -> Vec<&str> {
    events.iter().map(SessionEvent::event_type).collect()
}

fn seqs_of(events: &[SessionEvent]) -> Vec<u64> {
    events.iter().map(SessionEvent::seq).collect()
}

fn json_of(e: &SessionEvent) -> serde_json::Value {
    serde_json::from_str(&e.to_json()).unwrap()
}

fn expect_kind<T: std::fmt::Debug>(
    r: Result<T, StoreError>,
    kind: ErrorKind,
    needle: &str,
) -> StoreError {
    match r {
        Ok(v) => panic!("expected {kind:?} error containing {needle:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "wrong kind for error: {e}");
            assert!(
                e.to_string().contains(needle),
                "error {e:?} lacks {needle:?}"
            );
            e
        }
    }
}

fn stored(h: &impl Harness, id: &str, lines: &[String]) {
    let s = h.open();
    s.create(header(id)).unwrap();
    s.append(&sid(id), &events(lines)).unwrap();
}

/// CT1: create + append `oneTurnLog` → load returns the header and events
/// equal to the input (value and text).
pub fn ct1_round_trip(h: &impl Harness) {
    let s = h.open();
    s.create(header("s1")).unwrap();
    let input = one_turn();
    s.append(&sid("s1"), &input).unwrap();
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(loaded.header.id.as_str(), "s1");
    assert_eq!(loaded.header.cwd.as_deref(), Some("/w"));
    assert_eq!(loaded.events, input);
    let texts: Vec<String> = loaded.events.iter().map(SessionEvent::to_json).collect();
    assert_eq!(texts, one_turn_lines());
    drop(s);
    let fresh = h.open();
    assert_eq!(fresh.load(&sid("s1")).unwrap().events, input);
}

/// CT2: a createdAt beyond the safe range is rejected and does not reserve
/// the id; a valid create works and createdAt round-trips.
pub fn ct2_created_at(h: &impl Harness) {
    let s = h.open();
    let mut bad = header("s1");
    bad.created_at = MAX_SAFE_INTEGER + 1;
    expect_kind(
        s.create(bad),
        ErrorKind::Invalid,
        "session metadata createdAt must be a non-negative safe integer",
    );
    let mut good = header("s1");
    good.created_at = MAX_SAFE_INTEGER;
    s.create(good).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    drop(s);
    let s = h.open();
    assert_eq!(
        s.load(&sid("s1")).unwrap().header.created_at,
        MAX_SAFE_INTEGER
    );
}

fn open_turn_lines() -> Vec<String> {
    let mut lines = one_turn_lines();
    lines.push(turn_start(6, 2, 1006));
    lines.push(step_start(7, 2, 1, 1007));
    lines
}

/// CT3: an open turn and step: inspect shows the balanced view without
/// changing the revision; load commits `step/end, turn/end{interrupted}`,
/// changes the revision, and appends continue at 10.
pub fn ct3_open_turn(h: &impl Harness) {
    stored(h, "s1", &open_turn_lines());
    let s = h.open();
    let none = Cancel::new();
    let before = s.list_snapshots(&none).unwrap();
    let rev0 = s.revision(&sid("s1")).unwrap();
    let view = s.inspect(&sid("s1"), &none).unwrap();
    assert_eq!(seqs_of(&view.events), (0..10).collect::<Vec<_>>());
    assert_eq!(types_of(&view.events)[8..], ["step/end", "turn/end"]);
    assert_eq!(s.list_snapshots(&none).unwrap(), before);
    assert_eq!(s.revision(&sid("s1")).unwrap(), rev0);
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(
        types_of(&loaded.events),
        [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end",
            "turn/start",
            "step/start",
            "step/end",
            "turn/end"
        ]
    );
    assert_eq!(seqs_of(&loaded.events), (0..10).collect::<Vec<_>>());
    let last = json_of(&loaded.events[9]);
    assert_eq!(
        last["data"]["reason"],
        serde_json::json!({"kind":"interrupted"})
    );
    assert_eq!(last["time"], 1007, "closers carry the last stored time");
    assert_ne!(s.revision(&sid("s1")).unwrap(), rev0);
    assert_eq!(loaded.revision, s.revision(&sid("s1")).unwrap());
    s.append(
        &sid("s1"),
        &events(&[turn_start(10, 3, 1010), turn_end(11, 3, 1011)]),
    )
    .unwrap();
    drop(s);
    let s = h.open();
    assert_eq!(
        seqs_of(&s.load(&sid("s1")).unwrap().events),
        (0..12).collect::<Vec<_>>()
    );
}

/// CT4: a requested tool call with no `tool/call` gets a TOOL_NOT_STARTED
/// result before `step/end`/`turn/end`.
pub fn ct4_tool_not_started(h: &impl Harness) {
    let mut lines = open_turn_lines();
    lines.push(assistant_calls(8, 2, &["call-x"], 1008));
    stored(h, "s1", &lines);
    let s = h.open();
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(
        types_of(&loaded.events)[9..],
        ["tool/result", "step/end", "turn/end"]
    );
    let r = json_of(&loaded.events[9]);
    assert_eq!(
        r["data"]["message"]["source"],
        serde_json::json!({"kind":"tool","callId":"call-x"})
    );
    let block = &r["data"]["message"]["content"][0];
    assert_eq!(block["type"], "tool-result");
    assert_eq!(block["toolCallId"], "call-x");
    assert_eq!(block["isError"], true);
    assert_eq!(r["data"]["error"]["code"], "TOOL_NOT_STARTED");
    assert!(r.get("sourceEventSeqs").is_none());
}

/// CT5: a recorded `tool/call` with no result gets TOOL_OUTCOME_UNKNOWN,
/// and a Session built from the loaded log derives its error result.
pub fn ct5_outcome_unknown(h: &impl Harness) {
    let mut lines = open_turn_lines();
    lines.push(assistant_calls(8, 2, &["call-risk"], 1008));
    lines.push(tool_call(9, 2, "call-risk", 1009));
    stored(h, "s1", &lines);
    let s = h.open();
    let loaded = s.load(&sid("s1")).unwrap();
    let r = json_of(&loaded.events[10]);
    assert_eq!(
        r["data"]["error"],
        serde_json::json!({"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"})
    );
    assert_eq!(r["sourceEventSeqs"], serde_json::json!([9]));
    let text = r["data"]["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("retry only if the operation is read-only or idempotent"));
    assert!(
        text.contains("if it may have side effects, first verify external state or ask the user")
    );
    let session = Session::restore(loaded.header.clone(), loaded.events.clone()).unwrap();
    let messages = session.derive_messages_uncached();
    let last = serde_json::to_value(&*messages[messages.len() - 1]).unwrap();
    assert_eq!(last["content"][0]["toolCallId"], "call-risk");
    assert_eq!(last["content"][0]["isError"], true);
}

/// CT6 / TP-12 (last part): a created but never appended session is not
/// listed, until its first non-empty append.
pub fn ct6_list_excludes_unmaterialized(h: &impl Harness) {
    let s = h.open();
    let none = Cancel::new();
    s.create(header("m")).unwrap();
    s.append(&sid("m"), &[]).unwrap();
    assert!(s.list(&none).unwrap().is_empty());
    assert!(s.list_snapshots(&none).unwrap().is_empty());
    expect_kind(s.load(&sid("m")), ErrorKind::NotFound, "not found");
    s.append(&sid("m"), &one_turn()).unwrap();
    let listed = s.list(&none).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0], header("m"));
}

/// CT7: an already-cancelled token rejects observation operations with
/// exactly its reason.
pub fn ct7_cancellation(h: &impl Harness) {
    let s = h.open();
    assert!(s.list_snapshots(&Cancel::new()).unwrap().is_empty());
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    let c = Cancel::new();
    c.cancel("stopped by test");
    let reasons = [
        s.list(&c).map(|_| ()).unwrap_err(),
        s.list_snapshots(&c).map(|_| ()).unwrap_err(),
        s.inspect(&sid("s1"), &c).map(|_| ()).unwrap_err(),
        s.read_from(&sid("s1"), 0, &c).map(|_| ()).unwrap_err(),
    ];
    for e in reasons {
        assert_eq!(e.kind(), ErrorKind::Cancelled);
        assert_eq!(e.to_string(), "stopped by test");
    }
}

/// CT8 / TP-14: readFrom ranges, absent ids and out-of-range arguments.
pub fn ct8_read_from(h: &impl Harness) {
    let s = h.open();
    let none = Cancel::new();
    s.create(header("s1")).unwrap();
    let input = one_turn();
    s.append(&sid("s1"), &input).unwrap();
    assert_eq!(s.read_from(&sid("s1"), 0, &none).unwrap().1, input);
    assert_eq!(
        s.read_from(&sid("s1"), 3, &none).unwrap().1,
        input[3..].to_vec()
    );
    assert!(s.read_from(&sid("s1"), 6, &none).unwrap().1.is_empty());
    assert!(s.read_from(&sid("s1"), 106, &none).unwrap().1.is_empty());
    s.append(&sid("s1"), &events(&[turn_start(6, 2, 1006)]))
        .unwrap();
    let (hd, tail) = s.read_from(&sid("s1"), 6, &none).unwrap();
    assert_eq!(hd.id.as_str(), "s1");
    assert_eq!(seqs_of(&tail), [6], "no closers");
    expect_kind(
        s.read_from(&sid("absent"), 0, &none),
        ErrorKind::NotFound,
        "not found",
    );
    expect_kind(
        s.read_from(&sid("s1"), MAX_SAFE_INTEGER + 1, &none),
        ErrorKind::Invalid,
        "non-negative safe integer",
    );
}

/// CT9: revisions are stable while unchanged and change with an append.
pub fn ct9_revisions(h: &impl Harness) {
    let s = h.open();
    let none = Cancel::new();
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    let a = s.list_snapshots(&none).unwrap();
    let b = s.list_snapshots(&none).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[0].revision, s.revision(&sid("s1")).unwrap());
    s.append(&sid("s1"), &events(&[turn_start(6, 2, 1006)]))
        .unwrap();
    let c = s.list_snapshots(&none).unwrap();
    assert_ne!(a[0].revision, c[0].revision);
}

/// CT10, CT11, TP-12: contiguity of appends; a rejected batch writes nothing.
pub fn ct10_ct11_tp12_append_rules(h: &impl Harness) {
    let s = h.open();
    let none = Cancel::new();
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    expect_kind(
        s.append(&sid("s1"), &one_turn()),
        ErrorKind::Invalid,
        "append seq mismatch",
    );
    let six_seven = events(&[turn_start(6, 2, 1006), user(7, "x", 1007)]);
    s.append(&sid("s1"), &six_seven).unwrap();
    let e = expect_kind(
        s.append(&sid("s1"), &six_seven[..1]),
        ErrorKind::Invalid,
        "expected 8 at index 0, got 6",
    );
    assert!(matches!(
        e,
        StoreError::SeqMismatch {
            expected: 8,
            index: 0,
            got: 6,
            ..
        }
    ));
    s.append(&sid("s1"), &[]).unwrap();
    let rev = s.revision(&sid("s1")).unwrap();
    let gap = events(&[user(8, "a", 1008), user(10, "b", 1010)]);
    expect_kind(
        s.append(&sid("s1"), &gap),
        ErrorKind::Invalid,
        "expected 9 at index 1, got 10",
    );
    assert_eq!(s.revision(&sid("s1")).unwrap(), rev, "nothing written");
    assert!(s.read_from(&sid("s1"), 8, &none).unwrap().1.is_empty());
    // CT11 on a fresh session: seq 0 then 2.
    s.create(header("s2")).unwrap();
    expect_kind(
        s.append(&sid("s2"), &events(&[turn_start(0, 1, 1), user(2, "b", 2)])),
        ErrorKind::Invalid,
        "expected 1 at index 1, got 2",
    );
    assert_eq!(s.list(&none).unwrap().len(), 1, "s2 stays unmaterialized");
}

/// CT12 / TV-13: a batch holding a negative zero is rejected as not
/// losslessly JSON-serializable; `0` is accepted.
pub fn ct12_lossless(h: &impl Harness) {
    let s = h.open();
    s.create(header("s1")).unwrap();
    let neg = SessionEvent::new(
        0,
        1,
        EventData::plugin("x/y", &serde_json::json!({"v": -0.0})),
    )
    .with_ignorable();
    expect_kind(
        s.append(&sid("s1"), &[neg]),
        ErrorKind::Invalid,
        "losslessly JSON-serializable",
    );
    let zero = SessionEvent::new(0, 1, EventData::plugin("x/y", &serde_json::json!({"v": 0})))
        .with_ignorable();
    s.append(&sid("s1"), &[zero]).unwrap();
    assert_eq!(
        s.read_from(&sid("s1"), 0, &Cancel::new()).unwrap().1.len(),
        1
    );
}

/// OP4.3: retired vocabulary is rejected at append.
pub fn op4_retired_vocabulary(h: &impl Harness) {
    let s = h.open();
    s.create(header("s1")).unwrap();
    for line in [
        "{\"type\":\"request/header-delta\",\"seq\":0,\"time\":1,\"data\":{}}",
        "{\"type\":\"mode/set\",\"seq\":0,\"time\":1,\"data\":{}}",
    ] {
        expect_kind(
            s.append(&sid("s1"), &[ev(line)]),
            ErrorKind::Invalid,
            "retired",
        );
    }
    assert!(s.list(&Cancel::new()).unwrap().is_empty());
}

/// Q2 (with the shadow validation on, a debug option): an event breaking
/// a seed rule (here S6, a source that is not earlier) is refused by
/// `append`; nothing is written and the log continues normally. Off (the
/// default), the store checks contiguity only.
pub fn q2_invalid_appends_are_refused(h: &impl Harness) {
    let plain = h.open();
    plain.create(header("s0")).unwrap();
    let odd = ev(&user(0, "x", 2)).with_surface(SurfaceOp::Append, Some(vec![7]));
    plain
        .append(&sid("s0"), &[odd])
        .expect("no shadow validation by default");
    drop(plain);
    let s = h
        .try_open_with(CoordinatorConfig::new().with_validate_appends(true))
        .expect("open store");
    let none = Cancel::new();
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &events(&[turn_start(0, 1, 1)]))
        .unwrap();
    let bad = ev(&user(1, "x", 2)).with_surface(SurfaceOp::Append, Some(vec![7]));
    let good = ev(&user(2, "y", 3));
    expect_kind(
        s.append(&sid("s1"), &[bad.clone(), good]),
        ErrorKind::Invalid,
        "event seq 1 cannot be appended to session \"s1\"",
    );
    assert_eq!(s.read_from(&sid("s1"), 0, &none).unwrap().1.len(), 1);
    s.append(&sid("s1"), &events(&[user(1, "x", 2), turn_end(2, 1, 3)]))
        .unwrap();
    drop(s);
    let s = h.open();
    assert_eq!(s.load(&sid("s1")).unwrap().events.len(), 3);
}

/// TP-13 / CC17: an unknown type without `ignorable` is FormatUnsupported;
/// with `ignorable: true` it loads unchanged.
pub fn tp13_unknown_type(h: &impl Harness) {
    let mut lines = one_turn_lines();
    lines.push("{\"type\":\"future/event\",\"seq\":6,\"time\":99,\"data\":{\"payload\":1}}".into());
    stored(h, "s1", &lines);
    let mut lines = one_turn_lines();
    let ignorable = "{\"type\":\"future/event\",\"seq\":6,\"time\":99,\"data\":{\"payload\":1},\"ignorable\":true}";
    lines.push(ignorable.into());
    stored(h, "s2", &lines);
    let s = h.open();
    expect_kind(
        s.load(&sid("s1")),
        ErrorKind::FormatUnsupported,
        "session \"s1\" contains event type \"future/event\" (seq 6) unknown to this harness and not marked ignorable",
    );
    expect_kind(
        s.inspect(&sid("s1"), &Cancel::new()),
        ErrorKind::FormatUnsupported,
        "future/event",
    );
    expect_kind(
        s.read_from(&sid("s1"), 0, &Cancel::new()),
        ErrorKind::FormatUnsupported,
        "future/event",
    );
    let loaded = s.load(&sid("s2")).unwrap();
    assert_eq!(loaded.events.len(), 7);
    assert_eq!(
        json_of(&loaded.events[6]),
        serde_json::from_str::<serde_json::Value>(ignorable).unwrap()
    );
}

/// CC15: load/inspect of a missing id reject; create of an existing id (in
/// memory, or stored) rejects.
pub fn cc15_missing_and_existing(h: &impl Harness) {
    let s = h.open();
    expect_kind(s.load(&sid("nope")), ErrorKind::NotFound, "not found");
    expect_kind(
        s.inspect(&sid("nope"), &Cancel::new()),
        ErrorKind::NotFound,
        "not found",
    );
    expect_kind(s.revision(&sid("nope")), ErrorKind::NotFound, "not found");
    s.create(header("s1")).unwrap();
    expect_kind(
        s.create(header("s1")),
        ErrorKind::AlreadyExists,
        "already exists in this backend",
    );
    s.append(&sid("s1"), &one_turn()).unwrap();
    drop(s);
    let s = h.open();
    expect_kind(
        s.create(header("s1")),
        ErrorKind::AlreadyExists,
        "already has a persisted log on disk; load/resume it instead of creating",
    );
    expect_kind(
        s.append(&sid("never-created"), &one_turn()),
        ErrorKind::NotFound,
        "not found",
    );
}

/// CC5 (store part): every header field round-trips through list and load.
pub fn cc5_header_fields(h: &impl Harness) {
    let s = h.open();
    let mut hd = SessionHeader::new("child", 1_786_333_735_000);
    hd.cwd = Some("/home/u/proj".into());
    hd.parent_session = Some(SessionId::from("parent"));
    hd.seed_length = Some(42);
    hd.origin = Some("subagent".into());
    hd.delegation_depth = Some(1);
    hd.agent_preset = Some("minimal".into());
    s.create(hd.clone()).unwrap();
    s.append(&sid("child"), &one_turn()).unwrap();
    drop(s);
    let s = h.open();
    assert_eq!(s.list(&Cancel::new()).unwrap(), vec![hd.clone()]);
    assert_eq!(s.load(&sid("child")).unwrap().header, hd);
}

/// CC16: header version 99 → FormatUnsupported (newer); -1 → "no upgrade path".
pub fn cc16_versions(h: &impl Harness) {
    h.write_log(
        "s1",
        Some("/w"),
        &header_line("s1", "99"),
        &one_turn_lines(),
        None,
    );
    h.write_log(
        "s2",
        Some("/w"),
        &header_line("s2", "-1"),
        &one_turn_lines(),
        None,
    );
    let s = h.open();
    expect_kind(
        s.load(&sid("s1")),
        ErrorKind::FormatUnsupported,
        "session \"s1\" uses log format v99, but this harness reads only v0: the log was written by a newer harness \u{2014} upgrade the harness to open it",
    );
    expect_kind(
        s.inspect(&sid("s2"), &Cancel::new()),
        ErrorKind::FormatUnsupported,
        "session \"s2\" uses log format v-1, older than the supported v0, and this build ships no upgrade path for it",
    );
}

/// CC19: torn tail + open turn: a fresh instance loads seqs 0–9 and the
/// next append continues at 10.
pub fn cc19_torn_tail_open_turn(h: &impl Harness) {
    stored(h, "s1", &open_turn_lines());
    h.tear("s1", Some("/w"), "{\"type\":\"assistant/chu");
    let s = h.open();
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(seqs_of(&loaded.events), (0..10).collect::<Vec<_>>());
    assert_eq!(types_of(&loaded.events)[8..], ["step/end", "turn/end"]);
    s.append(&sid("s1"), &events(&[turn_start(10, 3, 2000)]))
        .unwrap();
    drop(s);
    let s = h.open();
    assert_eq!(
        s.read_from(&sid("s1"), 0, &Cancel::new()).unwrap().1.len(),
        11
    );
}

/// CC14: appending to a storage-only session adopts it (repairing the
/// crash tail: closers take seqs 8, 9) and continues the seq.
pub fn cc14_adopt_on_append(h: &impl Harness) {
    stored(h, "s1", &open_turn_lines());
    h.tear("s1", Some("/w"), "{\"ty");
    let s = h.open();
    expect_kind(
        s.append(&sid("s1"), &events(&[turn_start(8, 3, 3000)])),
        ErrorKind::Invalid,
        "expected 10 at index 0, got 8",
    );
    s.append(&sid("s1"), &events(&[turn_start(10, 3, 3000)]))
        .unwrap();
    let all = s.read_from(&sid("s1"), 0, &Cancel::new()).unwrap().1;
    assert_eq!(seqs_of(&all), (0..11).collect::<Vec<_>>());
    assert_eq!(types_of(&all)[8..], ["step/end", "turn/end", "turn/start"]);
}

/// TP-7: a torn tail after a `tool/call` with two requested calls.
pub fn tp7_two_calls(h: &impl Harness) {
    let lines = vec![
        turn_start(0, 1, 10),
        user(1, "go", 11),
        step_start(2, 1, 1, 12),
        assistant_calls(3, 1, &["c1", "c2"], 13),
        tool_call(4, 1, "c1", 14),
    ];
    h.write_log(
        "s1",
        Some("/w"),
        &header_line("s1", "0"),
        &lines,
        Some("{\"type\":\"tool/res"),
    );
    let s = h.open();
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(seqs_of(&loaded.events), (0..9).collect::<Vec<_>>());
    let r5 = &loaded.events[5];
    assert_eq!(r5.time(), 14);
    let j5 = json_of(r5);
    assert_eq!(j5["data"]["message"]["id"], "interrupted-tool-result-c1-5");
    assert_eq!(j5["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
    assert!(
        r5.to_json()
            .ends_with("\"surfaceOp\":\"append\",\"sourceEventSeqs\":[4]}")
    );
    let j6 = json_of(&loaded.events[6]);
    assert_eq!(j6["data"]["message"]["id"], "interrupted-tool-result-c2-6");
    assert_eq!(j6["data"]["error"]["code"], "TOOL_NOT_STARTED");
    assert!(j6.get("sourceEventSeqs").is_none());
    assert_eq!(types_of(&loaded.events)[7..], ["step/end", "turn/end"]);
    assert!(loaded.events[5..].iter().all(|e| e.time() == 14));
    drop(s);
    let s = h.open();
    assert_eq!(
        s.load(&sid("s1")).unwrap().events,
        loaded.events,
        "the repair was committed"
    );
}

/// TP-8: a bad line with no later `turn/end` is a torn tail: truncated
/// (the later valid line is lost too), and the turn is closed.
pub fn tp8_bad_line_without_turn_end(h: &impl Harness) {
    let lines = vec![
        turn_start(0, 1, 10),
        "{not json".into(),
        step_start(1, 1, 1, 11),
    ];
    h.write_log("s1", Some("/w"), &header_line("s1", "0"), &lines, None);
    let s = h.open();
    if !h.line_scan_rule() {
        return rz5_defect_in_complete_frame(h, s, "unparsable committed event at line 2");
    }
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(types_of(&loaded.events), ["turn/start", "turn/end"]);
    assert_eq!(
        json_of(&loaded.events[1])["data"]["reason"]["kind"],
        "interrupted"
    );
    assert_eq!(
        s.read_from(&sid("s1"), 0, &Cancel::new()).unwrap().1,
        loaded.events
    );
}

/// TP-9 and the hostile-input rule: a bad line or a seq gap before a
/// committed `turn/end` is corruption, with a clear message, and the stored
/// log is left untouched (never truncated) by load, inspect and append.
pub fn tp9_corruption_is_rejected_untouched(h: &impl Harness) {
    let lines = vec!["{not json".into(), turn_end(1, 1, 5)];
    h.write_log("s1", Some("/w"), &header_line("s1", "0"), &lines, None);
    let lines = vec![
        turn_start(0, 1, 1),
        step_start(2, 1, 1, 2),
        turn_end(3, 1, 3),
    ];
    h.write_log("s2", Some("/w"), &header_line("s2", "0"), &lines, None);
    let before1 = h.snapshot("s1", Some("/w"));
    let before2 = h.snapshot("s2", Some("/w"));
    {
        let s = h.open();
        let e = expect_kind(
            s.load(&sid("s1")),
            ErrorKind::Corruption,
            "corrupt session log: unparsable committed event at line 1",
        );
        assert!(matches!(e, StoreError::Corruption { .. }));
        expect_kind(
            s.inspect(&sid("s1"), &Cancel::new()),
            ErrorKind::Corruption,
            "line 1",
        );
        expect_kind(
            s.append(&sid("s1"), &events(&[turn_start(2, 2, 9)])),
            ErrorKind::Corruption,
            "line 1",
        );
        expect_kind(
            s.load(&sid("s2")),
            ErrorKind::Corruption,
            "corrupt session log: seq gap in committed region at line 2 (expected 1, got 2)",
        );
    }
    assert_eq!(h.snapshot("s1", Some("/w")), before1, "s1 untouched");
    assert_eq!(h.snapshot("s2", Some("/w")), before2, "s2 untouched");
}

/// TP-10: a gap after the last `turn/end` is a torn tail with no closers:
/// inspect leaves it, load truncates it.
pub fn tp10_gap_after_turn_end(h: &impl Harness) {
    let lines = vec![
        turn_start(0, 1, 1),
        turn_end(1, 1, 2),
        step_start(9, 2, 1, 3),
    ];
    h.write_log("s1", Some("/w"), &header_line("s1", "0"), &lines, None);
    let before = h.snapshot("s1", Some("/w"));
    let s = h.open();
    if !h.line_scan_rule() {
        return rz5_defect_in_complete_frame(h, s, "seq gap in committed region at line 3");
    }
    let view = s.inspect(&sid("s1"), &Cancel::new()).unwrap();
    assert_eq!(seqs_of(&view.events), [0, 1]);
    drop(s);
    assert_eq!(
        h.snapshot("s1", Some("/w")),
        before,
        "inspect writes nothing"
    );
    let s = h.open();
    let loaded = s.load(&sid("s1")).unwrap();
    assert_eq!(seqs_of(&loaded.events), [0, 1]);
    drop(s);
    assert_ne!(
        h.snapshot("s1", Some("/w")),
        before,
        "load removed the torn tail"
    );
    let s = h.open();
    s.append(&sid("s1"), &events(&[turn_start(2, 2, 4)]))
        .unwrap();
    assert_eq!(
        s.read_from(&sid("s1"), 0, &Cancel::new()).unwrap().1.len(),
        3
    );
}

/// RZ5: in a zstd store the same defect inside a complete frame is
/// corruption, and the file is left untouched.
fn rz5_defect_in_complete_frame<S: SessionStore>(h: &impl Harness, s: S, needle: &str) {
    drop(s);
    let before = h.snapshot("s1", Some("/w"));
    let s = h.open();
    let e = expect_kind(s.load(&sid("s1")), ErrorKind::Corruption, needle);
    drop(s);
    assert!(
        e.to_string()
            .contains("complete frame contains a torn JSONL record"),
        "{e}"
    );
    assert_eq!(h.snapshot("s1", Some("/w")), before);
}

/// TP-14: readFrom over a torn tail: no closers, no truncation.
pub fn tp14_read_from_torn(h: &impl Harness) {
    let mut lines = one_turn_lines();
    lines.push(turn_start(6, 2, 1006));
    h.write_log(
        "s1",
        Some("/w"),
        &header_line("s1", "0"),
        &lines,
        Some("{\"type\":\"user/mes"),
    );
    let before = h.snapshot("s1", Some("/w"));
    let s = h.open();
    let none = Cancel::new();
    assert_eq!(seqs_of(&s.read_from(&sid("s1"), 6, &none).unwrap().1), [6]);
    assert!(s.read_from(&sid("s1"), 7, &none).unwrap().1.is_empty());
    drop(s);
    assert_eq!(h.snapshot("s1", Some("/w")), before);
}

/// One writer per session: while one store writes a session, another store
/// over the same storage cannot write or load it (P5, extended to processes).
pub fn single_writer(h: &impl Harness) {
    let s = h.open();
    s.create(header("s1")).unwrap();
    s.append(&sid("s1"), &one_turn()).unwrap();
    match h.try_open() {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Locked, "{e}"),
        Ok(other) => {
            expect_kind(
                other.load(&sid("s1")),
                ErrorKind::Locked,
                "locked by another writer",
            );
            expect_kind(
                other.append(&sid("s1"), &events(&[turn_start(6, 2, 1)])),
                ErrorKind::Locked,
                "locked",
            );
            // Readers are not blocked.
            assert_eq!(
                other
                    .inspect(&sid("s1"), &Cancel::new())
                    .unwrap()
                    .events
                    .len(),
                6
            );
        }
    }
    s.release(&sid("s1")).unwrap();
    drop(s);
    let s = h.open();
    s.append(&sid("s1"), &events(&[turn_start(6, 2, 1)]))
        .unwrap();
}

/// Hostile ids: separators, dot names, NUL, very long and exotic strings
/// are all stored under distinct, loadable sessions.
pub fn hostile_ids(h: &impl Harness) {
    let long = "\u{10FFFF}x/".repeat(300);
    let ids = [
        "a/b",
        "a~002Fb",
        "..",
        ".",
        "../../etc/passwd",
        "a\0b",
        "\u{FFFD}\u{FEFF}",
        "C:\\x",
        &long,
        "~L",
        " ",
    ];
    let s = h.open();
    for id in ids {
        s.create(header(id)).unwrap();
        s.append(&sid(id), &one_turn()).unwrap();
    }
    drop(s);
    let s = h.open();
    let listed = s.list(&Cancel::new()).unwrap();
    assert_eq!(listed.len(), ids.len());
    for id in ids {
        let loaded = s.load(&sid(id)).unwrap();
        assert_eq!(loaded.header.id.as_str(), id);
        assert_eq!(loaded.events.len(), 6);
    }
}

/// Expands to one `#[test]` per contract behaviour, given an expression
/// that builds a fresh [`Harness`].
#[macro_export]
macro_rules! contract_tests {
    ($harness:expr) => {
        $crate::contract_tests!(@each $harness;
            ct1_round_trip, ct2_created_at, ct3_open_turn, ct4_tool_not_started,
            ct5_outcome_unknown, ct6_list_excludes_unmaterialized, ct7_cancellation,
            ct8_read_from, ct9_revisions, ct10_ct11_tp12_append_rules, ct12_lossless,
            op4_retired_vocabulary, q2_invalid_appends_are_refused, tp13_unknown_type, cc15_missing_and_existing,
            cc5_header_fields, cc16_versions, cc19_torn_tail_open_turn, cc14_adopt_on_append,
            tp7_two_calls, tp8_bad_line_without_turn_end, tp9_corruption_is_rejected_untouched,
            tp10_gap_after_turn_end, tp14_read_from_torn, single_writer,
            hostile_ids);
    };
    (@each $harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let h = $harness;
                $crate::contract::$name(&h);
            }
        )*
    };
}
