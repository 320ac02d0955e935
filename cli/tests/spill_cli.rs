//! Spill: oversized tool results are kept out of the context and
//! saved whole; the model pages through them with `read`.

mod support;

use std::path::Path;

use dsh_core::jsonl::load_log;
use serde_json::json;
use support::{dsh, mock_responses as mock, transcripts};

fn call(id: &str, name: &str, args: serde_json::Value) -> serde_json::Value {
    json!({"turn": {"toolCalls": [{"id": id, "name": name, "arguments": [args.to_string()]}]}})
}

/// The texts of every `tool/result` of the only stored session.
fn results(data: &Path) -> Vec<String> {
    let logs = transcripts(&data.join("dsh/sessions"));
    assert_eq!(logs.len(), 1, "{logs:?}");
    let bytes = std::fs::read(&logs[0]).unwrap();
    // A valid log.
    load_log(&bytes, &[]).unwrap();
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            e["data"]["message"]["content"][0]["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect::<String>()
        })
        .collect()
}

#[test]
fn a_5_mb_bash_output_is_spilled_as_read_and_paged_with_read() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let spill = data.path().join("dsh/spill/bash-c1-stdout.txt");
    let server = mock(vec![
        // 5.9 MB: the lines 1..=800000.
        call(
            "c1",
            "bash",
            json!({"command": "seq 1 800000", "description": "big"}),
        ),
        call(
            "c2",
            "read",
            json!({"file_path": spill.display().to_string(), "offset": 400000, "limit": 3}),
        ),
        json!({"turn": {"text": ["done"]}}),
    ]);
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--yes",
            "--sandbox",
            "off",
            "--base-url",
            &server.url(),
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let full = std::fs::read_to_string(&spill).unwrap();
    assert_eq!(
        full.len(),
        (1..=800000)
            .map(|i: u32| i.to_string().len() + 1)
            .sum::<usize>()
    );
    assert!(full.len() > 5_000_000);
    let texts = results(data.path());
    assert!(texts[0].len() <= 64 * 1024, "{}", texts[0].len());
    assert!(
        texts[0].contains(&format!("full output: {}", spill.display())),
        "{}",
        &texts[0][texts[0].len() - 300..]
    );
    assert!(texts[0].contains("800000\n"));
    // The model reads on from the middle.
    assert!(
        texts[1].contains("400000: 400000\n400001: 400001\n400002: 400002"),
        "{}",
        texts[1]
    );
    assert!(
        texts[1].contains("Use offset=400003 to continue."),
        "{}",
        texts[1]
    );
    // The request the model got carries only the bounded result.
    let last = server.requests().last().unwrap().body_text();
    assert!(last.len() < 200 * 1024, "{}", last.len());
}

#[test]
fn an_oversized_result_gives_a_preview_and_the_path_of_the_whole() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let lines: String = (0..5000)
        .map(|i| format!("needle line {i:05} {}\n", "pad ".repeat(20)))
        .collect();
    std::fs::write(ws.path().join("big.txt"), &lines).unwrap();
    let server = mock(vec![
        call("g1", "grep", json!({"pattern": "needle"})),
        json!({"turn": {"text": ["done"]}}),
    ]);
    let o = dsh(data.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--yes",
            "--spill-bytes",
            "4096",
            "--base-url",
            &server.url(),
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let texts = results(data.path());
    let t = &texts[0];
    assert!(t.len() <= 4096, "{}", t.len());
    let (preview, notice) = t.rsplit_once("\n\n(Omitted ").unwrap();
    assert!(preview.contains("needle line 00000"), "{preview}");
    let path = notice
        .split_once(" bytes. Full formatted result stored at: ")
        .unwrap()
        .1
        .strip_suffix(". Use read with offset/limit, or grep this path to search within it.)")
        .unwrap();
    assert!(
        path.starts_with(&data.path().join("dsh/spill/session-").display().to_string()),
        "{path}"
    );
    assert!(path.ends_with("/grep-g1.txt"), "{path}");
    let whole = std::fs::read_to_string(path).unwrap();
    assert!(whole.len() > 4096 && whole.contains("needle line 00199"));
    // A `read` of a big file pages instead of spilling: within the cap.
    let big: String = (0..100_000).map(|i| format!("{i:0>50}\n")).collect();
    std::fs::write(ws.path().join("five.txt"), &big).unwrap();
    let data2 = tempfile::tempdir().unwrap();
    let server = mock(vec![
        call("r1", "read", json!({"file_path": "five.txt"})),
        json!({"turn": {"text": ["done"]}}),
    ]);
    let o = dsh(data2.path())
        .current_dir(ws.path())
        .args(["run", "--yes", "--base-url", &server.url(), "go"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let texts = results(data2.path());
    assert!(
        texts[0].len() <= 64 * 1024 && texts[0].contains("Use offset="),
        "{}",
        texts[0].len()
    );
    assert!(
        !data2.path().join("dsh/spill").exists()
            || std::fs::read_dir(data2.path().join("dsh/spill"))
                .unwrap()
                .count()
                == 0
    );
}
