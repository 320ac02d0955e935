//! The `dsh stream assemble|check` contract, run as a real process.
//!
//! `assemble` prints one compact JSON line
//! `{"blocks":[...],"finish":{...},"usage":...|null,"replayState":...|null}`
//! (exit 0), or `{"error":"..."}` when a block cannot be assembled (BB-4,
//! exit 1). `check` prints `ok` (exit 0) or one `line N: <rule-id>: <message>`
//! per violation (exit 1). Input that is not StreamChunk JSON lines, or cannot
//! be read, is reported on stderr as `line N: ...` / `cannot read ...` with
//! exit 2 and nothing on stdout.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const DSH: &str = env!("CARGO_BIN_EXE_dsh");

/// Runs `dsh <args>` with `stdin` as standard input.
fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(DSH)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dsh starts");
    let written = child.stdin.take().expect("stdin is piped").write_all(stdin);
    // A command reading a path may exit without reading stdin.
    if let Err(e) = written {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {e}"
        );
    }
    child.wait_with_output().expect("dsh finishes")
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("output is UTF-8")
}

/// Asserts exit code, stdout and stderr exactly.
#[track_caller]
fn assert_output(out: &Output, code: i32, stdout: &str, stderr: &str) {
    assert_eq!(
        (out.status.code(), text(&out.stdout), text(&out.stderr)),
        (Some(code), stdout, stderr)
    );
}

/// The assembler vectors of streaming.md 4.7, with the expected `assemble`
/// line built from each vector's stated blocks, finish, usage and replayState.
const VECTORS: &[(&str, &str, &str)] = &[
    (
        "AV-1",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"Hi"}
{"type":"text-delta","index":0,"text":" there"}
{"type":"block-end","index":0,"block":{"type":"text","text":"Hi there"}}
{"type":"usage","usage":{"inputTokens":12,"outputTokens":2}}
{"type":"finish","reason":{"kind":"stop"}}"#,
        r#"{"blocks":[{"type":"text","text":"Hi there"}],"finish":{"kind":"stop"},"usage":{"inputTokens":12,"outputTokens":2},"replayState":null}"#,
    ),
    (
        "AV-2",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"abc"}
{"type":"block-end","index":0,"block":{"type":"text","text":"XYZ"}}"#,
        r#"{"blocks":[{"type":"text","text":"XYZ"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-3",
        r#"{"type":"reasoning-delta","index":3,"text":"a"}
{"type":"reasoning-delta","index":3,"text":"b"}"#,
        r#"{"blocks":[{"type":"reasoning","text":"ab"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-4",
        r#"{"type":"text-delta","index":7,"text":"first seen"}
{"type":"text-delta","index":2,"text":"second seen"}
{"type":"text-delta","index":7,"text":"!"}"#,
        r#"{"blocks":[{"type":"text","text":"first seen!"},{"type":"text","text":"second seen"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-5",
        r#"{"type":"block-start","index":0,"blockType":"reasoning"}
{"type":"block-start","index":1,"blockType":"text"}
{"type":"reasoning-delta","index":0,"text":"r1"}
{"type":"text-delta","index":1,"text":"t1"}
{"type":"reasoning-delta","index":0,"text":"r2"}
{"type":"text-delta","index":1,"text":"t2"}"#,
        r#"{"blocks":[{"type":"reasoning","text":"r1r2"},{"type":"text","text":"t1t2"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-6",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"ok"}
{"type":"block-end","index":0,"block":{"type":"text","text":"ok"}}
{"type":"text-delta","index":0,"text":" more"}"#,
        r#"{"blocks":[{"type":"text","text":"ok"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-7",
        r#"{"type":"block-end","index":0,"block":{"type":"text","text":"a"}}
{"type":"block-start","index":0,"blockType":"reasoning"}
{"type":"reasoning-delta","index":0,"text":"b"}"#,
        r#"{"blocks":[{"type":"text","text":"a"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-8",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"block-end","index":0,"block":{"type":"text","text":"one"}}
{"type":"block-end","index":0,"block":{"type":"text","text":"two"}}"#,
        r#"{"blocks":[{"type":"text","text":"one"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-9",
        r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"read","argumentsDelta":"{\"p\":"}
{"type":"tool-call-delta","index":0,"id":"c1","argumentsDelta":"\"x\"}"}
{"type":"finish","reason":{"kind":"tool-calls"}}"#,
        r#"{"blocks":[{"type":"tool-call","id":"c1","name":"read","arguments":"{\"p\":\"x\"}"}],"finish":{"kind":"tool-calls"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-10",
        r#"{"type":"tool-call-delta","index":0,"id":"a","name":"f","argumentsDelta":""}
{"type":"tool-call-delta","index":0,"id":"b","name":"","argumentsDelta":"{}"}"#,
        r#"{"blocks":[{"type":"tool-call","id":"b","name":"f","arguments":"{}"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-11",
        r#"{"type":"block-start","index":4,"blockType":"tool-call"}
{"type":"finish","reason":{"kind":"tool-calls"}}"#,
        r#"{"blocks":[{"type":"tool-call","id":"call-4","name":"","arguments":""}],"finish":{"kind":"tool-calls"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-12",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"partial"}
{"type":"block-end","index":0,"block":{"type":"text","text":"partial"}}
{"type":"block-start","index":1,"blockType":"tool-call"}
{"type":"tool-call-delta","index":1,"id":"c1","name":"ls","argumentsDelta":"{}"}
{"type":"block-end","index":1,"block":{"type":"tool-call","id":"c1","name":"ls","arguments":"{}"}}
{"type":"block-start","index":2,"blockType":"tool-call"}
{"type":"tool-call-delta","index":2,"id":"c2","name":"cat","argumentsDelta":"{\"a"}
{"type":"usage","usage":{"inputTokens":5,"outputTokens":9}}
{"type":"finish","reason":{"kind":"max-tokens"}}"#,
        r#"{"blocks":[{"type":"text","text":"partial"}],"finish":{"kind":"max-tokens"},"usage":{"inputTokens":5,"outputTokens":9},"replayState":null}"#,
    ),
    (
        "AV-13",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"block-end","index":0,"block":{"type":"tool-call","id":"z","name":"n","arguments":"{}"}}
{"type":"finish","reason":{"kind":"max-tokens"}}"#,
        r#"{"blocks":[],"finish":{"kind":"max-tokens"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-13 mirror",
        r#"{"type":"block-start","index":0,"blockType":"tool-call"}
{"type":"block-end","index":0,"block":{"type":"text","text":"t"}}
{"type":"finish","reason":{"kind":"max-tokens"}}"#,
        r#"{"blocks":[{"type":"text","text":"t"}],"finish":{"kind":"max-tokens"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-14",
        r#"{"type":"block-start","index":0,"blockType":"video"}
{"type":"block-end","index":0,"block":{"type":"video","url":"x"}}"#,
        r#"{"blocks":[{"type":"video","url":"x"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-15",
        r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"reasoning-delta","index":0,"text":"x"}
{"type":"block-start","index":0,"blockType":"reasoning"}
{"type":"text-delta","index":0,"text":"y"}
{"type":"text-delta","index":1,"text":"t"}
{"type":"tool-call-delta","index":1,"id":"c","name":"n","argumentsDelta":"{}"}
{"type":"tool-call-delta","index":2,"id":"d","name":"m","argumentsDelta":"{}"}
{"type":"text-delta","index":2,"text":"ignored"}"#,
        r#"{"blocks":[{"type":"text","text":"xy"},{"type":"text","text":"t"},{"type":"tool-call","id":"d","name":"m","arguments":"{}"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-16",
        r#"{"type":"text-delta","index":0,"text":"a"}
{"type":"usage","usage":{"inputTokens":1,"outputTokens":1}}
{"type":"finish","reason":{"kind":"stop"}}
{"type":"text-delta","index":0,"text":"b"}
{"type":"usage","usage":{"inputTokens":2,"outputTokens":2}}
{"type":"finish","reason":{"kind":"tool-calls"}}"#,
        r#"{"blocks":[{"type":"text","text":"ab"}],"finish":{"kind":"tool-calls"},"usage":{"inputTokens":2,"outputTokens":2},"replayState":null}"#,
    ),
    (
        "AV-17",
        r#"{"type":"text-delta","index":0,"text":"half"}
{"type":"finish","reason":{"kind":"error","failure":{"message":"boom","code":"TRANSPORT"}}}"#,
        r#"{"blocks":[{"type":"text","text":"half"}],"finish":{"kind":"error","failure":{"message":"boom","code":"TRANSPORT"}},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-18",
        r#"{"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{\"x"}}
{"type":"block-end","index":1,"block":{"type":"text","text":"t"}}
{"type":"finish","reason":{"kind":"max-tokens"},"replayState":{"response":{"r":1},"blocks":["m0","m1"]}}"#,
        r#"{"blocks":[{"type":"text","text":"t"}],"finish":{"kind":"max-tokens"},"usage":null,"replayState":{"response":{"r":1},"blocks":["m1"]}}"#,
    ),
    (
        "AV-19",
        r#"{"type":"text-delta","index":0,"text":"t"}
{"type":"finish","reason":{"kind":"stop"},"replayState":{"response":{"r":1},"blocks":["m0","m1"]}}"#,
        r#"{"blocks":[{"type":"text","text":"t"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-20",
        r#"{"type":"text-delta","index":0,"text":"t"}
{"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{}"}
{"type":"finish","reason":{"kind":"max-tokens"},"replayState":{"response":{"r":2}}}"#,
        r#"{"blocks":[{"type":"text","text":"t"}],"finish":{"kind":"max-tokens"},"usage":null,"replayState":{"response":{"r":2}}}"#,
    ),
    (
        "AV-21",
        r#"{"type":"tool-call-delta","index":0,"id":"c1","name":"f","argumentsDelta":"{}"}
{"type":"finish","reason":{"kind":"stop"},"replayState":{"response":1}}
{"type":"finish","reason":{"kind":"stop"}}"#,
        r#"{"blocks":[{"type":"tool-call","id":"c1","name":"f","arguments":"{}"}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-22",
        "",
        r#"{"blocks":[],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
    (
        "AV-23",
        r#"{"type":"tool-call-delta","index":0,"id":"","argumentsDelta":"{}"}
{"type":"block-start","index":1,"blockType":"text"}
{"type":"finish","reason":{"kind":"stop"}}"#,
        r#"{"blocks":[{"type":"tool-call","id":"","name":"","arguments":"{}"},{"type":"text","text":""}],"finish":{"kind":"stop"},"usage":null,"replayState":null}"#,
    ),
];

#[test]
fn assemble_prints_the_spec_vectors() {
    for (name, input, expected) in VECTORS {
        let out = run(&["stream", "assemble"], input.as_bytes());
        assert_eq!(
            (out.status.code(), text(&out.stdout), text(&out.stderr)),
            (Some(0), format!("{expected}\n").as_str(), ""),
            "{name}"
        );
    }
}

#[test]
fn assemble_reports_an_incomplete_unknown_block() {
    // AV-14 without its block-end, AV-24, and BB-4: the error comes before the
    // max-tokens filter.
    let cases = [
        (
            r#"{"type":"block-start","index":0,"blockType":"video"}"#,
            "video",
        ),
        (
            r#"{"type":"block-start","index":0,"blockType":"video"}
{"type":"finish","reason":{"kind":"max-tokens"},"replayState":{"response":{}}}"#,
            "video",
        ),
        (
            r#"{"type":"block-start","index":0,"blockType":"tool-result"}"#,
            "tool-result",
        ),
        (
            r#"{"type":"block-start","index":0,"blockType":"image"}"#,
            "image",
        ),
        (
            r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":" \n\t"}
{"type":"block-start","index":1,"blockType":"mystery"}
{"type":"reasoning-delta","index":2,"text":"plan"}
{"type":"tool-call-delta","index":3,"id":"c","name":"n","argumentsDelta":"{}"}
{"type":"block-end","index":4,"block":{"type":"text","text":"closed"}}"#,
            "mystery",
        ),
    ];
    for (input, kind) in cases {
        let out = run(&["stream", "assemble"], input.as_bytes());
        let expected =
            format!("{{\"error\":\"cannot assemble incomplete block of type \\\"{kind}\\\"\"}}\n");
        assert_output(&out, 1, &expected, "");
    }
    let out = run(
        &["stream", "assemble"],
        br#"{"type":"block-start","index":0,"blockType":"video"}"#,
    );
    assert_eq!(
        text(&out.stdout),
        concat!(
            r#"{"error":"cannot assemble incomplete block of type \"video\""}"#,
            "\n"
        )
    );
}

#[test]
fn a_bad_line_is_reported_on_stderr_with_nothing_on_stdout() {
    // Line 2 is blank (skipped but counted), line 3 is not JSON. The stream
    // before it would assemble (or fail to): nothing may reach stdout.
    for input in [
        "{\"type\":\"text-delta\",\"index\":0,\"text\":\"a\"}\n\n{oops\n",
        "{\"type\":\"block-start\",\"index\":0,\"blockType\":\"video\"}\n\n{oops\n",
    ] {
        for cmd in ["assemble", "check"] {
            let out = run(&["stream", cmd], input.as_bytes());
            assert_eq!(out.status.code(), Some(2), "{cmd}");
            assert_eq!(text(&out.stdout), "", "{cmd}");
            let err = text(&out.stderr);
            assert!(err.starts_with("line 3: "), "{cmd}: {err}");
            assert_eq!(err.lines().count(), 1, "{cmd}: {err}");
        }
    }
}

#[test]
fn bad_chunks_name_their_line_and_reason() {
    let cases = [
        (
            r#"{"type":"weird","index":0}"#,
            "line 1: not a valid chunk: unknown chunk type \"weird\"",
        ),
        (
            r#"{"type":"text-delta","index":-1,"text":"a"}"#,
            "line 1: not a valid chunk: \"index\" must be a non-negative integer (G-1)",
        ),
        (
            r#"{"type":"text-delta","index":0}"#,
            "line 1: not a valid chunk: text-delta chunk is missing \"text\"",
        ),
        (
            "{\"type\":\"text-delta\",\"index\":0,\"text\":\"a\"}\n[1]",
            "line 2: not a valid chunk: invalid type: sequence",
        ),
    ];
    for (input, prefix) in cases {
        let out = run(&["stream", "assemble"], input.as_bytes());
        assert_eq!(out.status.code(), Some(2), "{input}");
        assert_eq!(text(&out.stdout), "");
        assert!(
            text(&out.stderr).starts_with(prefix),
            "{input}: {}",
            text(&out.stderr)
        );
    }
    // A line that is not UTF-8.
    let out = run(
        &["stream", "check"],
        b"{\"type\":\"text-delta\",\"index\":0,\"text\":\"a\"}\n\xff\xfe\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    assert!(text(&out.stderr).starts_with("line 2: not UTF-8"));
}

#[test]
fn an_unreadable_path_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.jsonl");
    let missing = missing.to_str().expect("UTF-8 temp path");
    let dir_path = dir.path().to_str().expect("UTF-8 temp path");
    for cmd in ["assemble", "check"] {
        for path in [missing, dir_path] {
            let out = run(&["stream", cmd, path], b"");
            assert_eq!(out.status.code(), Some(2), "{cmd} {path}");
            assert_eq!(text(&out.stdout), "");
            let err = text(&out.stderr);
            assert!(err.starts_with(&format!("cannot read {path}: ")), "{err}");
        }
    }
}

#[test]
fn input_comes_from_a_path_stdin_or_dash() {
    let (_, input, expected) = VECTORS
        .iter()
        .find(|(name, _, _)| *name == "AV-9")
        .expect("AV-9 is in the table");
    let expected = format!("{expected}\n");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("stream.jsonl");
    // CRLF line ends and a trailing blank line are accepted.
    std::fs::write(&file, input.replace('\n', "\r\n") + "\r\n\r\n").expect("write input");
    let file = file.to_str().expect("UTF-8 temp path");

    // From the path: stdin is ignored.
    assert_output(
        &run(&["stream", "assemble", file], b"not json"),
        0,
        &expected,
        "",
    );
    // From stdin, with and without `-`.
    assert_output(
        &run(&["stream", "assemble"], input.as_bytes()),
        0,
        &expected,
        "",
    );
    assert_output(
        &run(&["stream", "assemble", "-"], input.as_bytes()),
        0,
        &expected,
        "",
    );
    // check reads the same ways.
    let ok_stream = r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"hi"}
{"type":"block-end","index":0,"block":{"type":"text","text":"hi"}}
{"type":"finish","reason":{"kind":"stop"}}
"#;
    let ok_file = dir.path().join("ok.jsonl");
    std::fs::write(&ok_file, ok_stream).expect("write input");
    let ok_file = ok_file.to_str().expect("UTF-8 temp path");
    assert_output(&run(&["stream", "check", ok_file], b""), 0, "ok\n", "");
    assert_output(
        &run(&["stream", "check"], ok_stream.as_bytes()),
        0,
        "ok\n",
        "",
    );
    assert_output(
        &run(&["stream", "check", "-"], ok_stream.as_bytes()),
        0,
        "ok\n",
        "",
    );
}

#[test]
fn check_accepts_a_well_formed_stream() {
    // The shape the DeepSeek adapter emits (AC-1, AC-2): deferred block-ends,
    // then usage, then the finish.
    let input = r#"{"type":"block-start","index":0,"blockType":"reasoning"}
{"type":"reasoning-delta","index":0,"text":"think"}
{"type":"block-start","index":1,"blockType":"tool-call"}
{"type":"tool-call-delta","index":1,"id":"call_1","name":"read_file","argumentsDelta":"{\"pa"}
{"type":"tool-call-delta","index":1,"id":"call_1","argumentsDelta":"th\":\"a\"}"}
{"type":"block-end","index":0,"block":{"type":"reasoning","text":"think"}}
{"type":"block-end","index":1,"block":{"type":"tool-call","id":"call_1","name":"read_file","arguments":"{\"path\":\"a\"}"}}
{"type":"usage","usage":{"inputTokens":27,"outputTokens":69,"cacheReadTokens":256,"reasoningTokens":24}}
{"type":"finish","reason":{"kind":"tool-calls"}}"#;
    assert_output(&run(&["stream", "check"], input.as_bytes()), 0, "ok\n", "");
    // A failure finish may leave blocks open (G-7).
    let input = r#"{"type":"block-start","index":0,"blockType":"text"}
{"type":"text-delta","index":0,"text":"half"}
{"type":"finish","reason":{"kind":"aborted","failure":{"message":"DeepSeek request aborted by caller","code":"ABORTED"}}}"#;
    assert_output(&run(&["stream", "check"], input.as_bytes()), 0, "ok\n", "");
}

#[test]
fn check_prints_one_line_per_violation() {
    let input = r#"{"type":"text-delta","index":0,"text":"x"}
{"type":"block-start","index":1,"blockType":"text"}

{"type":"block-start","index":1,"blockType":"text"}
{"type":"usage","usage":{"inputTokens":1,"outputTokens":1}}
{"type":"usage","usage":{"inputTokens":1,"outputTokens":1}}
{"type":"finish","reason":{"kind":"stop"}}
{"type":"text-delta","index":1,"text":"late"}"#;
    let expected = "\
line 1: G-3: text-delta for index 0, which is not open
line 4: G-2: block-start for open index 1
line 6: G-5: a second usage chunk
line 7: G-7: \"stop\" finish leaves blocks open: [1]
line 8: G-6: text-delta chunk after the terminal finish
";
    assert_output(
        &run(&["stream", "check"], input.as_bytes()),
        1,
        expected,
        "",
    );
}

#[test]
fn check_reports_contract_rules_and_a_missing_finish() {
    // AC-9: a successful finish with no block.
    assert_output(
        &run(
            &["stream", "check"],
            br#"{"type":"finish","reason":{"kind":"stop"}}"#,
        ),
        1,
        "line 1: AC-9: successful finish with no content block; an empty completion must end with an EMPTY_RESPONSE error\n",
        "",
    );
    // AC-3: block-end arguments differ from the deltas; G-8 is reported on
    // the line after the last one.
    let input = r#"{"type":"block-start","index":0,"blockType":"tool-call"}
{"type":"tool-call-delta","index":0,"id":"c","argumentsDelta":"{"}
{"type":"block-end","index":0,"block":{"type":"tool-call","id":"c","name":"f","arguments":"{}"}}"#;
    let out = run(&["stream", "check"], input.as_bytes());
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<&str> = text(&out.stdout).lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("line 3: AC-3: "), "{}", lines[0]);
    assert_eq!(
        lines[1],
        "line 4: G-8: the stream ended without a finish chunk"
    );
    // An empty stream has no finish either.
    assert_output(
        &run(&["stream", "check"], b""),
        1,
        "line 1: G-8: the stream ended without a finish chunk\n",
        "",
    );
}

#[test]
fn the_shipped_example_assembles_as_the_readme_shows() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/streams/tool-call.jsonl"
    );
    let expected = concat!(
        r#"{"blocks":[{"type":"reasoning","text":"The user wants the README."},"#,
        r#"{"type":"tool-call","id":"call_00_R","name":"read_file","arguments":"{\"path\": \"README.md\"}"}],"#,
        r#""finish":{"kind":"tool-calls"},"#,
        r#""usage":{"inputTokens":27,"outputTokens":69,"cacheReadTokens":256,"reasoningTokens":24},"#,
        r#""replayState":null}"#,
        "\n"
    );
    assert_output(&run(&["stream", "assemble", example], b""), 0, expected, "");
    assert_output(&run(&["stream", "check", example], b""), 0, "ok\n", "");
}

/// An `error` finish without a `failure` is refused
/// (FR-1), and so is one whose failure breaks LF-1.
#[test]
fn check_refuses_a_failure_finish_without_a_failure() {
    let out = run(
        &["stream", "check"],
        b"{\"type\":\"finish\",\"reason\":{\"kind\":\"error\"}}\n",
    );
    assert_output(
        &out,
        1,
        "line 1: FR-1: \"error\" finish without a failure object with string message and code\n",
        "",
    );
    let out = run(
        &["stream", "check"],
        b"{\"type\":\"finish\",\"reason\":{\"kind\":\"aborted\",\"failure\":{\"message\":\"\",\"code\":\"ABORTED\"}}}\n",
    );
    assert_output(
        &out,
        1,
        "line 1: LF-1: \"aborted\" finish failure has an empty message\n",
        "",
    );
}
