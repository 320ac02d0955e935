//! Working with the user end to end against the bundled mock
//! server: `/plan` and `--plan` in `dsh chat` (a write refused in plan
//! mode, the plan reviewed and approved, the write then runs),
//! `ask_user_question` answered from piped input, refused in `dsh run`
//! (`NO_PROVIDER`) and in a subagent child (`DELEGATED_CALLER`), and the
//! approval trail (`approval/asked`, `approval/decided`) for allow, deny
//! and always-allow. Every log passes `dsh log check` and
//! `dsh replay --check`.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::{checks_and_replays, dsh, events, mock, text, transcripts};

/// Every stored log under `data`, each checked by `dsh log check` and
/// `dsh replay --check`; their lines as JSON (header first).
fn logs(data: &Path) -> Vec<Vec<Value>> {
    let paths = transcripts(&data.join("dsh"));
    assert!(!paths.is_empty(), "no session stored");
    paths
        .iter()
        .map(|p| {
            checks_and_replays(data, p);
            events(p)
        })
        .collect()
}

/// The `type`s of `lines` that belong to `kinds` (prefix match), in order,
/// each with its data.
fn of<'a>(lines: &'a [Value], kinds: &[&str]) -> Vec<(&'a str, &'a Value)> {
    lines
        .iter()
        .filter_map(|l| {
            let t = l["type"].as_str()?;
            kinds
                .iter()
                .any(|k| t.starts_with(k))
                .then_some((t, &l["data"]))
        })
        .collect()
}

/// `dsh chat` on `script` with piped `input` in a fresh workspace; the
/// output, the workspace and the data dir.
fn chat(
    script: &str,
    extra: &[&str],
    input: &[u8],
) -> (std::process::Output, tempfile::TempDir, tempfile::TempDir) {
    use std::io::Write;
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(script);
    let mut child = dsh(data.path())
        .args(["chat", "--no-title", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(30));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let o = child.wait_with_output().unwrap();
    drop(watchdog);
    assert!(
        o.status.code().is_some(),
        "killed by the watchdog: the REPL hung"
    );
    (o, ws, data)
}

/// The model writes (refused in plan mode), presents a plan, then writes
/// again (asked, allowed) and ends.
const PLAN_SCRIPT: &str = r##"{"responses":[
 {"turn":{"toolCalls":[{"id":"c1","name":"write","arguments":["{\"file_path\":\"notes.txt\",\"content\":\"early\\n\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"c2","name":"exit_plan_mode","arguments":["{\"plan\":\"# Notes\\n- write notes.txt\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"c3","name":"write","arguments":["{\"file_path\":\"notes.txt\",\"content\":\"planned\\n\"}"]}]}},
 {"turn":{"text":["DONE"]}}
]}"##;

fn assert_plan_round(lines: &[Value]) {
    let seen: Vec<String> = of(
        lines,
        &[
            "plan/",
            "tool/result",
            "approval/",
            "step/end",
            "step/start",
        ],
    )
    .iter()
    .map(|(t, d)| match *t {
        "plan/mode" => format!("plan/mode {}", d["active"]),
        "tool/result"
            if d["message"]["content"][0]["isError"] == false
                && !d["message"]["content"][0]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Plan") =>
        {
            "tool/result ok".to_string()
        }
        "tool/result" => format!(
            "tool/result {}",
            d["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(40)
                .collect::<String>()
        ),
        "approval/decided" => format!("approval/decided {}", d["outcome"]),
        "command/done" => format!("command/done {}", d["text"]),
        other => other.to_string(),
    })
    .collect();
    let want = [
        "plan/mode true",
        "step/start",
        "tool/result Error: plan mode is active: write cannot",
        "step/end",
        "step/start",
        "tool/result Plan approved — plan mode exited; carry ",
        "step/end",
        "plan/mode false",
        "step/start",
        "approval/asked",
        "approval/decided \"allowed-once\"",
        "tool/result ok",
        "step/end",
        "step/start",
        "step/end",
    ];
    let tail: Vec<&str> = seen
        .iter()
        .map(String::as_str)
        .skip_while(|s| *s != "plan/mode true")
        .collect();
    assert_eq!(tail, want, "{seen:#?}");
}

/// `/plan MESSAGE` in chat: logged as a command, plan mode on, the first
/// write refused, the plan approved from piped input ("1"), the second
/// write allowed ("y") and done.
#[test]
fn chat_plan_round_refuses_writes_until_the_plan_is_approved() {
    let (o, ws, data) = chat(PLAN_SCRIPT, &[], b"/plan make notes\n1\ny\n");
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("Plan mode on. Use /plan off to leave."),
        "{out}"
    );
    assert!(
        out.contains("? [Plan review] Approve this plan and leave plan mode?"),
        "{out}"
    );
    assert!(out.contains("  │ # Notes"), "{out}");
    // The write's approval shows its change as a unified diff.
    assert!(out.contains("+++ b/notes.txt\n"), "{out}");
    assert!(out.contains("\n+planned\nallow write?"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "planned\n"
    );
    let logs = logs(data.path());
    let lines = &logs[0];
    // The command's three events lead, as in the plan-review recording.
    let head: Vec<&str> = lines[1..4]
        .iter()
        .map(|l| l["type"].as_str().unwrap())
        .collect();
    assert_eq!(head, ["command/run", "plan/mode", "command/done"]);
    assert_eq!(lines[1]["data"]["name"], "plan");
    assert_eq!(lines[1]["data"]["args"], " make notes");
    assert_eq!(lines[1]["data"]["source"]["kind"], "user");
    assert_eq!(lines[3]["data"]["commandId"], lines[1]["data"]["commandId"]);
    assert_eq!(lines[3]["data"]["kind"], "success");
    assert_plan_round(lines);
}

/// `--plan`: plan mode from the first step; "keep planning" feedback goes
/// back to the model as the tool error.
#[test]
fn chat_plan_flag_starts_in_plan_mode_and_feedback_keeps_planning() {
    let script = r##"{"responses":[
 {"turn":{"toolCalls":[{"id":"c1","name":"exit_plan_mode","arguments":["{\"plan\":\"# Notes\\n- v1\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"c2","name":"bash","arguments":["{\"command\":\"touch x\",\"description\":\"x\"}"]}]}},
 {"turn":{"text":["ok"]}}
]}"##;
    let (o, ws, data) = chat(script, &["--plan"], b"plan it\nadd tests first\n");
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(!ws.path().join("x").exists(), "bash ran in plan mode");
    let logs = logs(data.path());
    let results: Vec<String> = of(&logs[0], &["tool/result"])
        .iter()
        .map(|(_, d)| {
            d["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        results[0],
        "Error: The user chose to keep planning; their feedback: add tests first"
    );
    assert!(
        results[1].starts_with("Error: plan mode is active: bash"),
        "{results:?}"
    );
    let modes: Vec<&Value> = of(&logs[0], &["plan/mode"])
        .iter()
        .map(|(_, d)| *d)
        .collect();
    assert_eq!(modes, [&serde_json::json!({"active": true})]);
}

const ASK_SCRIPT: &str = r##"{"responses":[
 {"turn":{"toolCalls":[{"id":"q1","name":"ask_user_question","arguments":["{\"questions\":[{\"id\":\"lang\",\"question\":\"Which language?\",\"options\":[{\"label\":\"Rust\"},{\"label\":\"Go\",\"description\":\"simpler\"}]},{\"id\":\"name\",\"question\":\"Name?\"}]}"]}]}},
 {"turn":{"text":["thanks"]}}
]}"##;

/// `ask_user_question` in chat: a numbered picker per question; a number
/// picks a label, a free line is `custom`.
#[test]
fn chat_answers_questions_from_piped_lines() {
    let (o, _ws, data) = chat(ASK_SCRIPT, &[], b"ask me\n2\nferris\n");
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("? Which language?\n  1. Rust\n  2. Go — simpler\n"),
        "{out}"
    );
    let logs = logs(data.path());
    let result = of(&logs[0], &["tool/result"])[0].1;
    let content = &result["message"]["content"][0];
    assert_eq!(content["isError"], false);
    let answer: Value =
        serde_json::from_str(content["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"answers": [
            {"id": "lang", "selected": ["Go"]},
            {"id": "name", "selected": [], "custom": "ferris"}
        ]})
    );
}

/// `dsh run` has nobody to ask: the tool fails with `NO_PROVIDER`.
#[test]
fn run_refuses_questions() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(ASK_SCRIPT);
    let o = dsh(data.path())
        .args(["run", "--no-title", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("ask me")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let logs = logs(data.path());
    let result = of(&logs[0], &["tool/result"])[0].1;
    let content = &result["message"]["content"][0];
    assert_eq!(content["isError"], true);
    assert_eq!(
        content["content"][0]["text"],
        "Error: no user-questions provider is registered"
    );
}

/// A subagent child cannot ask the user: `DELEGATED_CALLER`.
#[test]
fn a_subagent_child_is_refused_with_delegated_caller() {
    let script = r##"{"responses":[
 {"turn":{"toolCalls":[{"id":"s1","name":"subagent","arguments":["{\"description\":\"ask\",\"prompt\":\"ask the user\",\"run_in_background\":false}"]}]}},
 {"turn":{"toolCalls":[{"id":"q1","name":"ask_user_question","arguments":["{\"questions\":[{\"id\":\"a\",\"question\":\"?\"}]}"]}]}},
 {"turn":{"text":["could not ask"]}},
 {"turn":{"text":["done"]}}
]}"##;
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(script);
    let o = dsh(data.path())
        .args(["run", "--no-title", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("delegate")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let logs = logs(data.path());
    let child = logs
        .iter()
        .find(|l| l[0].get("parentSession").is_some())
        .expect("a child log");
    let result = of(child, &["tool/result"])[0].1;
    let text = result["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.starts_with("Error: human interaction is unavailable while the calling agent is owned by another live agent"),
        "{text}"
    );
}

/// Allow, deny and always-allow each leave `approval/asked` +
/// `approval/decided` (always-allow once: the next call is not asked).
#[test]
fn chat_logs_the_approval_trail() {
    let script = r##"{"responses":[
 {"turn":{"toolCalls":[{"id":"b1","name":"bash","arguments":["{\"command\":\"echo one\",\"description\":\"1\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"b2","name":"bash","arguments":["{\"command\":\"echo two\",\"description\":\"2\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"b3","name":"bash","arguments":["{\"command\":\"echo three\",\"description\":\"3\"}"]}]}},
 {"turn":{"toolCalls":[{"id":"b4","name":"bash","arguments":["{\"command\":\"echo four\",\"description\":\"4\"}"]}]}},
 {"turn":{"text":["done"]}}
]}"##;
    let (o, _ws, data) = chat(script, &[], b"go\ny\nn\na\n");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let logs = logs(data.path());
    let trail: Vec<(String, String)> = of(&logs[0], &["approval/"])
        .iter()
        .map(|(t, d)| {
            (
                t.to_string(),
                d.get("outcome")
                    .or_else(|| d.get("callId"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        trail,
        [
            pair("approval/asked", "b1"),
            pair("approval/decided", "allowed-once"),
            pair("approval/asked", "b2"),
            pair("approval/decided", "rejected"),
            pair("approval/asked", "b3"),
            pair("approval/decided", "allowed-once"),
        ]
    );
    let asked = of(&logs[0], &["approval/asked"])[0].1;
    assert_eq!(asked["toolName"], "bash");
    let decided = of(&logs[0], &["approval/decided"])[0].1;
    assert_eq!(asked["id"], decided["id"]);
}

/// `/help`, `/status` and `/permissions` run as logged commands.
#[test]
fn chat_commands_are_logged_and_listed() {
    let (o, _ws, data) = chat(
        r#"{"responses":[]}"#,
        &[],
        b"/help\n/status\n/permissions bash auto\n/permissions\n/nope\n",
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    for c in [
        "/plan [off|message]",
        "/compact",
        "/model",
        "/effort",
        "/status",
        "/sessions",
        "/resume ID",
        "/fork",
        "/permissions",
    ] {
        assert!(out.contains(c), "{c} missing from /help: {out}");
    }
    assert!(out.contains("model: deepseek-v4-flash"), "{out}");
    assert!(out.contains("bash: auto"), "{out}");
    assert!(out.contains("unknown command /nope"), "{out}");
    let logs = logs(data.path());
    let names: Vec<&str> = of(&logs[0], &["command/run"])
        .iter()
        .map(|(_, d)| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["help", "status", "permissions", "permissions"]);
    assert_eq!(of(&logs[0], &["command/done"]).len(), 4);
}

/// `--preset read-only`: logged as the reference logs a preset, and the
/// write is refused without asking.
#[test]
fn a_read_only_preset_is_logged_and_refuses_writes() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(
        r##"{"responses":[
 {"turn":{"toolCalls":[{"id":"w1","name":"write","arguments":["{\"file_path\":\"a.txt\",\"content\":\"x\"}"]}]}},
 {"turn":{"text":["refused"]}}
]}"##,
    );
    let o = dsh(data.path())
        .args([
            "run",
            "--no-title",
            "--yes",
            "--preset",
            "read-only",
            "--base-url",
            &server.url(),
            "--cwd",
        ])
        .arg(ws.path())
        .arg("write a")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(!ws.path().join("a.txt").exists());
    let logs = logs(data.path());
    let head: Vec<String> = logs[0][1..4]
        .iter()
        .map(|l| format!("{} {}", l["type"].as_str().unwrap(), l["data"]))
        .collect();
    assert_eq!(
        head,
        [
            r#"permission/preset {"preset":"read-only"}"#,
            r#"sandbox/mode {"mode":"workspace-write"}"#,
            r#"approval/policy {"policy":"ask"}"#,
        ]
    );
    assert!(of(&logs[0], &["approval/asked"]).is_empty());
    let result = of(&logs[0], &["tool/result"])[0].1;
    assert_eq!(
        result["message"]["content"][0]["content"][0]["text"],
        "Error: write is disabled by policy in this session"
    );
}

/// The reference's plan-review and approval-composer recordings: their
/// command, plan-mode, preset and approval events pass `log check`, and
/// the replay accepts everything up to their first turn. Their headers are
/// the reference's legacy ones (no `delegationDepth`; the core's replay
/// table pins them unloadable), so the header gains `"delegationDepth":0`
/// first; and their turns open with the legacy `trigger` form, which the
/// core's replay does not reproduce by design (a core matter, not this
/// plugin's). The texts dsh writes are the recording's.
#[test]
fn the_reference_plan_review_and_approval_recordings_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/sessions");
    for (name, first_turn) in [
        ("apps-web__plan-review__session.jsonl", 3),
        ("apps-web__approval-composer__session.jsonl", 5),
    ] {
        let raw = std::fs::read_to_string(dir.join(name)).unwrap();
        let (header, events) = raw.split_once('\n').unwrap();
        assert!(
            !header.contains("delegationDepth"),
            "{name} is no longer legacy"
        );
        let header = format!(
            "{},\"delegationDepth\":0}}",
            header.strip_suffix('}').unwrap()
        );
        let data = tempfile::tempdir().unwrap();
        let path = data.path().join(name);
        std::fs::write(&path, format!("{header}\n{events}")).unwrap();
        let o = dsh(data.path())
            .args(["log", "check", "--fixture-tokens"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let o = dsh(data.path())
            .args(["replay", "--check", "--fixture-tokens"])
            .arg(&path)
            .output()
            .unwrap();
        let out = text(&o.stdout);
        assert!(
            out.contains(&format!(
                "difference at seq {first_turn}: no input explains the recorded turn/start here"
            )),
            "{name}: {out}"
        );
    }
    let raw = std::fs::read_to_string(dir.join("apps-web__plan-review__session.jsonl")).unwrap();
    for text in [
        r#""data":{"commandId":"cmd-228a60ef-1","name":"plan","args":" Plan a small"#,
        r#""data":{"commandId":"cmd-228a60ef-1","kind":"success","text":"Plan mode on. Use /plan off to leave."}"#,
        r#"{"type":"text","text":"Plan approved — plan mode exited; carry out the plan starting with your next step."}"#,
        r#"{"type":"step/end","seq":288,"time":1785406808721,"data":{"turn":1,"step":1}}
{"type":"plan/mode","seq":289,"time":1785406808721,"data":{"active":false}}
{"type":"step/start""#,
    ] {
        assert!(raw.contains(text), "the recording has {text}");
    }
}

/// `/fork` continues the chat on a fork of the session: the line read
/// ahead goes to the fork, none is lost.
#[test]
fn chat_fork_continues_on_the_fork() {
    let (o, _ws, data) = chat(
        r#"{"responses":[{"turn":{"text":["Hello."]}}]}"#,
        &[],
        b"hi\n/fork\n/status\n",
    );
    let out = text(&o.stdout);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("forking this session"), "{out}");
    let logs = logs(data.path());
    assert_eq!(logs.len(), 2, "{out}");
    let ids: Vec<&str> = logs.iter().map(|l| l[0]["id"].as_str().unwrap()).collect();
    let with_status: Vec<&Vec<Value>> = logs
        .iter()
        .filter(|l| {
            of(l, &["command/run"])
                .iter()
                .any(|(_, d)| d["name"] == "status")
        })
        .collect();
    assert_eq!(with_status.len(), 1, "/status ran in one session: {ids:?}");
    let fork = with_status[0];
    assert!(
        out.contains(&format!("session: {}", fork[0]["id"].as_str().unwrap())),
        "{out} {ids:?}"
    );
    // The fork carries the first session's turn, and /status ran after it.
    assert_eq!(of(fork, &["turn/end"]).len(), 1);
}

/// `dsh run --plan`: plan mode from the first step; the write is refused
/// and, with nobody to review it, `exit_plan_mode` fails (`NO_PROVIDER`).
#[test]
fn run_plan_refuses_writes_and_cannot_review() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = mock(PLAN_SCRIPT);
    let o = dsh(data.path())
        .args([
            "run",
            "--no-title",
            "--yes",
            "--plan",
            "--base-url",
            &server.url(),
            "--cwd",
        ])
        .arg(ws.path())
        .arg("make notes")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let logs = logs(data.path());
    let results: Vec<String> = of(&logs[0], &["tool/result"])
        .iter()
        .map(|(_, d)| {
            d["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        results[0].starts_with("Error: plan mode is active: write"),
        "{results:?}"
    );
    assert_eq!(
        results[1],
        "Error: no user-questions provider is registered"
    );
    assert!(
        results[2].starts_with("Error: plan mode is active: write"),
        "{results:?}"
    );
    assert!(!ws.path().join("notes.txt").exists());
}

/// On a terminal, Tab completes a slash command (`/sta` → `/status `).
#[cfg(unix)]
#[test]
fn tab_completes_commands_on_a_terminal() {
    use rexpect::session::spawn_command;
    let data = tempfile::tempdir().unwrap();
    let server = mock(r#"{"responses":[]}"#);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.env("XDG_DATA_HOME", data.path())
        .env("XDG_CONFIG_HOME", data.path().join("config"))
        .env_remove("DEEPSEEK_API_KEY")
        .args([
            "chat",
            "--no-color",
            "--no-title",
            "--base-url",
            &server.url(),
        ]);
    let mut p = spawn_command(cmd, Some(20_000)).unwrap();
    p.exp_string("> ").unwrap();
    p.send("/sta\t").unwrap();
    p.flush().unwrap();
    p.exp_string("/status ").unwrap();
    p.send_line("").unwrap();
    p.exp_string("model: deepseek-v4-flash").unwrap();
    p.exp_string("> ").unwrap();
    p.send("/s\t").unwrap();
    p.flush().unwrap();
    p.exp_string("/sessions  /skills  /status  /steer").unwrap();
    p.send_control('u').unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}
