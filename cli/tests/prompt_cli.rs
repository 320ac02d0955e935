//! What the model is told: the request body of a first turn in a
//! git workspace, field by field; the system prompt and message prefix
//! byte-identical across turns (loop.md SP-5); a new runtime-context
//! message only when the git state or the working directory changes
//! (LC-12).

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use dsh_core::agent::prompt::{Assembly, RUNTIME_CONTEXT_HEADER};
use dsh_deepseek::mock::{MockServer, Script};
use serde_json::{Value, json};
use support::dsh;

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

fn reply(text: &str) -> Value {
    json!({"turn": {"text": [text], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}})
}

fn server(n: usize) -> MockServer {
    let script =
        json!({"responses": (0..n).map(|i| reply(&format!("answer {i}"))).collect::<Vec<_>>()});
    MockServer::start_on(Script::from_json(&script.to_string()).unwrap(), 0).unwrap()
}

fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .requests()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn session_id(data: &Path) -> String {
    let o = dsh(data).arg("sessions").output().unwrap();
    let listing = String::from_utf8_lossy(&o.stdout).into_owned();
    let row = listing.lines().nth(1).expect("one session");
    row.split_whitespace().next().unwrap().to_string()
}

/// `dsh chat --resume ID` with one piped line.
fn resume(data: &Path, url: &str, id: &str, cwd: &Path, line: &str) {
    let mut child = dsh(data)
        .args(["chat", "--base-url", url, "--resume", id, "--cwd"])
        .arg(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// The system text the default plugin gives for the standard tools.
fn expected_system(request: &Value) -> String {
    let mut registry = dsh_std::ToolSet::standard(dsh_tools::BashConfig::default())
        .registry()
        .unwrap();
    // The delegation tools (loop.md SA-1) every CLI agent has.
    for mode in [dsh_subagents::Mode::Spawn, dsh_subagents::Mode::Fork] {
        registry.register(dsh_subagents::definition(mode)).unwrap();
    }
    // The CLI's own interaction tools, as the request sent them.
    for t in request["tools"].as_array().unwrap() {
        let f = &t["function"];
        let name = f["name"].as_str().unwrap();
        if name == "exit_plan_mode" || name == "ask_user_question" {
            registry
                .register(dsh_core::agent::tools::ToolDefinition::typed(
                    name,
                    f["description"].as_str().unwrap(),
                    f["parameters"].clone(),
                ))
                .unwrap();
        }
    }
    // The web tools, on unless `--no-web`.
    for tool in dsh_web::tools(dsh_web::FetchConfig::default(), None) {
        registry.register(tool.definition()).unwrap();
    }
    let tools = registry.schemas();
    let assembly = dsh_system_prompt::SystemPrompt::new().apply(
        {
            let mut assembly = Assembly::default();
            assembly.tools = tools;
            // The web tools' guidance.
            assembly.sections = dsh_web::guidance();
            assembly
        },
        None,
    );
    assembly.render().unwrap()
}

fn context(ws: &Path, status: &str) -> String {
    let date = dsh_system_prompt::utc_date(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    format!(
        "{RUNTIME_CONTEXT_HEADER}Working directory: {}\nPlatform: {} {}\nDate: {date} (UTC)\n\
         Git branch: No commits yet on main\nGit status:\n{status}",
        ws.display(),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[test]
fn sp5_lc12_first_turn_body_and_a_stable_prefix_across_turns() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README.md"), "hi\n").unwrap();
    let server = server(4);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(&ws)
        .arg("hello")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // The first turn, field by field.
    let first = &bodies(&server)[0];
    assert_eq!(first["model"], "deepseek-v4-flash");
    assert_eq!(first["stream"], true);
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": expected_system(first)}),
        "the system prompt: identity, guidelines, tool guidance, environment note"
    );
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are an AI agent powered by the DeepSeek Harness SDK.\n\n"));
    assert!(
        !system.contains(ws.to_str().unwrap()),
        "no dynamic fact in the system prompt (SP-5)"
    );
    assert_eq!(messages[1], user("hello"));
    assert_eq!(messages[2], user(&context(&ws, "?? README.md")));
    assert_eq!(messages.len(), 3);
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "function");
            t["function"]["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        tools,
        [
            "ask_user_question",
            "bash",
            "bash_output",
            "bash_start",
            "bash_stop",
            "edit",
            "exit_plan_mode",
            "glob",
            "grep",
            "read",
            "subagent",
            "subagent_fork",
            "todo_write",
            "web_fetch",
            "web_search",
            "write"
        ]
    );
    for name in &tools {
        assert!(
            system.contains(&format!("- `{name}`")),
            "{name} is described"
        );
    }

    // Turn 2, nothing changed: the whole earlier request is a prefix and
    // no new runtime-context message appears.
    let id = session_id(data.path());
    resume(data.path(), &server.url(), &id, &ws, "second");
    let second = &bodies(&server)[1];
    let m2 = second["messages"].as_array().unwrap();
    assert_eq!(&m2[..3], &messages[..], "byte-identical prefix");
    assert_eq!(m2[3]["role"], "assistant");
    assert_eq!(m2[4], user("second"));
    assert_eq!(m2.len(), 5);
    assert_eq!(second["tools"], first["tools"]);

    // Turn 3, the git state changed: only a new runtime-context message.
    std::fs::write(ws.join("new.txt"), "x\n").unwrap();
    resume(data.path(), &server.url(), &id, &ws, "third");
    let third = &bodies(&server)[2];
    let m3 = third["messages"].as_array().unwrap();
    assert_eq!(&m3[..5], &m2[..]);
    assert_eq!(m3[6], user("third"));
    assert_eq!(m3[7], user(&context(&ws, "?? README.md\n?? new.txt")));
    assert_eq!(m3.len(), 8);

    // Turn 4, another working directory: again only the context changes.
    let sub = ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("f"), "").unwrap();
    resume(data.path(), &server.url(), &id, &sub, "fourth");
    let fourth = &bodies(&server)[3];
    let m4 = fourth["messages"].as_array().unwrap();
    assert_eq!(&m4[..8], &m3[..]);
    assert_eq!(m4[9], user("fourth"));
    let ctx = m4[10]["content"].as_str().unwrap();
    assert!(
        ctx.contains(&format!("Working directory: {}\n", sub.display())),
        "{ctx}"
    );
    assert_eq!(m4.len(), 11);
}

#[test]
fn system_and_append_system_flags() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let file = ws.path().join("persona.md");
    std::fs::write(&file, "You are Rusty, a careful reviewer.").unwrap();
    let server = server(1);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg(format!("--system=@{}", file.display()))
        .args(["--append-system", "Always answer in French.", "hi"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let body = &bodies(&server)[0];
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("You are Rusty, a careful reviewer.\n\n"),
        "{system}"
    );
    assert!(!system.contains("DeepSeek Harness SDK"));
    assert!(system.ends_with("\n\nAlways answer in French."), "{system}");

    let o = dsh(data.path())
        .args([
            "run",
            "--base-url",
            &server.url(),
            "--system",
            "@/nonexistent/x",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--system @/nonexistent/x"), "{err}");
}

/// The first request body of `dsh run` with `flags` and, when given, this
/// config file.
fn body_with(config: Option<&str>, flags: &[&str]) -> Value {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    if let Some(text) = config {
        let dir = data.path().join("config/dsh");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), text).unwrap();
    }
    let server = server(1);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .args(flags)
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    bodies(&server).remove(0)
}

#[test]
fn settings_model_from_flag_file_and_flag_over_file() {
    assert_eq!(body_with(None, &[])["model"], "deepseek-v4-flash");
    assert_eq!(body_with(None, &["--model", "m-flag"])["model"], "m-flag");
    let file = "model = \"m-file\"\n";
    assert_eq!(body_with(Some(file), &[])["model"], "m-file");
    assert_eq!(
        body_with(Some(file), &["--model", "m-flag"])["model"],
        "m-flag"
    );
}

#[test]
fn settings_effort_from_flag_file_and_flag_over_file() {
    let plain = body_with(None, &[]);
    assert!(plain.get("reasoning_effort").is_none());
    assert!(plain.get("thinking").is_none());
    let b = body_with(None, &["--effort", "max"]);
    assert_eq!(b["reasoning_effort"], "max");
    assert_eq!(b["thinking"], json!({"type": "enabled"}));
    let file = "effort = \"low\"\n";
    assert_eq!(body_with(Some(file), &[])["reasoning_effort"], "low");
    let b = body_with(Some(file), &["--effort", "off"]);
    assert!(b.get("reasoning_effort").is_none(), "{b}");
    assert_eq!(b["thinking"], json!({"type": "disabled"}));
}

#[test]
fn settings_temperature_from_flag_file_and_flag_over_file() {
    assert!(body_with(None, &[]).get("temperature").is_none());
    assert_eq!(
        body_with(None, &["--temperature", "0.3"])["temperature"],
        0.3
    );
    let file = "temperature = 1.5\n";
    assert_eq!(body_with(Some(file), &[])["temperature"], 1.5);
    assert_eq!(
        body_with(Some(file), &["--temperature", "0"])["temperature"],
        0
    );
}

#[test]
fn settings_max_tokens_from_flag_file_and_flag_over_file() {
    assert!(body_with(None, &[]).get("max_tokens").is_none());
    assert_eq!(body_with(None, &["--max-tokens", "123"])["max_tokens"], 123);
    let file = "max_tokens = 4096\n";
    assert_eq!(body_with(Some(file), &[])["max_tokens"], 4096);
    assert_eq!(
        body_with(Some(file), &["--max-tokens", "7"])["max_tokens"],
        7
    );
}

#[test]
fn settings_a_bad_config_file_names_the_file_and_the_key() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("config/dsh");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    for (text, key) in [
        ("temperature = 9\n", "temperature"),
        ("modle = \"x\"\n", "modle"),
        ("[tools]\nsandbox = \"nope\"\n", "tools.sandbox"),
    ] {
        std::fs::write(&path, text).unwrap();
        let o = dsh(data.path())
            .args(["run", "--base-url", "http://127.0.0.1:9", "hi"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("dsh: config file {}", path.display())),
            "{err}"
        );
        assert!(err.contains(key), "{err}");
    }
    // Bad flag values are refused by the flag parser.
    for flags in [
        ["--effort", "medium"],
        ["--temperature", "2.5"],
        ["--max-tokens", "0"],
    ] {
        let o = dsh(data.path())
            .args(["run", "--base-url", "http://127.0.0.1:9"])
            .args(flags)
            .arg("hi")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flags:?}");
    }
}

fn instructions(files: &[(&Path, &str)]) -> String {
    let mut out = String::from(dsh_system_prompt::INSTRUCTIONS_HEADER);
    for (path, text) in files {
        out.push_str(&format!(
            "\n\n<instructions path=\"{}\">\n{text}\n</instructions>",
            path.display()
        ));
    }
    out
}

/// AGENTS.md: found in the config dir, the repository root and a nested
/// directory (nearest last); not delivered again when unchanged; delivered
/// again when edited mid-session; withdrawn when deleted.
#[test]
fn agents_md_found_nested_edited_and_deleted() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    let sub = ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let conf = data.path().join("config/dsh");
    std::fs::create_dir_all(&conf).unwrap();
    let (user_md, root_md, sub_md) = (
        conf.join("AGENTS.md"),
        ws.join("AGENTS.md"),
        sub.join("CLAUDE.md"),
    );
    std::fs::write(&user_md, "User rules.\n").unwrap();
    std::fs::write(&root_md, "Use tabs.\n").unwrap();
    std::fs::write(&sub_md, "Sub rules.\n").unwrap();
    let server = server(4);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(&sub)
        .arg("one")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let first = &bodies(&server)[0];
    let m1 = first["messages"].as_array().unwrap();
    assert_eq!(
        m1[1],
        user(&instructions(&[
            (&user_md, "User rules."),
            (&root_md, "Use tabs."),
            (&sub_md, "Sub rules.")
        ]))
    );
    assert_eq!(m1[2], user("one"));
    assert!(
        m1[3]["content"]
            .as_str()
            .unwrap()
            .starts_with(RUNTIME_CONTEXT_HEADER)
    );
    assert_eq!(m1.len(), 4);
    // The log records the plugin source with the `instructions` form.
    let log = std::fs::read_dir(data.path().join("dsh/sessions"))
        .unwrap()
        .flat_map(|p| std::fs::read_dir(p.unwrap().path()).unwrap())
        .map(|s| s.unwrap().path().join("session.jsonl"))
        .next()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(
        r#""source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-agent-instructions","form":"instructions"}"#
    ), "{text}");

    // Unchanged: not delivered again.
    let id = session_id(data.path());
    resume(data.path(), &server.url(), &id, &sub, "two");
    let m2 = bodies(&server)[1]["messages"].as_array().unwrap().clone();
    assert_eq!(&m2[..4], &m1[..]);
    assert_eq!(m2[5], user("two"));
    assert_eq!(m2.len(), 6);

    // Edited mid-session: delivered again, whole, before the prompt.
    std::fs::write(&root_md, "Use spaces.\n").unwrap();
    resume(data.path(), &server.url(), &id, &sub, "three");
    let m3 = bodies(&server)[2]["messages"].as_array().unwrap().clone();
    assert_eq!(&m3[..6], &m2[..]);
    assert_eq!(
        m3[7],
        user(&instructions(&[
            (&user_md, "User rules."),
            (&root_md, "Use spaces."),
            (&sub_md, "Sub rules.")
        ]))
    );
    assert_eq!(m3[8], user("three"));
    assert_eq!(m3.len(), 9);

    // Deleted: withdrawn.
    for p in [&user_md, &root_md, &sub_md] {
        std::fs::remove_file(p).unwrap();
    }
    resume(data.path(), &server.url(), &id, &sub, "four");
    let m4 = bodies(&server)[3]["messages"].as_array().unwrap().clone();
    assert_eq!(&m4[..9], &m3[..]);
    assert_eq!(m4[10], user(dsh_system_prompt::INSTRUCTIONS_GONE));
    assert_eq!(m4[11], user("four"));
    // The deleted untracked files changed the git status too.
    assert!(
        m4[12]["content"]
            .as_str()
            .unwrap()
            .starts_with(RUNTIME_CONTEXT_HEADER)
    );
    assert_eq!(m4.len(), 13);
}

/// An oversize file is cut with a note; an unreadable one gives a notice;
/// the turn still runs.
#[test]
fn agents_md_oversize_and_unreadable() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("AGENTS.md"), "x".repeat(40_000)).unwrap();
    let sub = ws.join("sub");
    std::fs::create_dir_all(sub.join("AGENTS.md")).unwrap();
    let server = server(1);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(&sub)
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "the turn still runs: {o:?}");
    let body = &bodies(&server)[0];
    let text = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "{}\n[dsh: this file is 40000 bytes; only the first 32768 are shown]\n</instructions>",
            "x".repeat(32_768)
        )),
        "cut with a note"
    );
    assert!(
        text.contains(&format!(
            "<instructions path=\"{}\">\n[dsh: this file could not be read: ",
            sub.join("AGENTS.md").display()
        )),
        "{}",
        &text[text.len() - 300..]
    );
    assert_eq!(body["messages"][2], user("go"));
}

fn titled_server(title: &str, delay_ms: u64, n: usize) -> MockServer {
    let script = json!({
        "responses": (0..n).map(|i| reply(&format!("answer {i}"))).collect::<Vec<_>>(),
        "title": title,
        "titleDelayMs": delay_ms,
    });
    MockServer::start_on(Script::from_json(&script.to_string()).unwrap(), 0).unwrap()
}

/// The one session log under `data`.
fn log_path(data: &Path) -> std::path::PathBuf {
    std::fs::read_dir(data.join("dsh/sessions"))
        .unwrap()
        .flat_map(|p| std::fs::read_dir(p.unwrap().path()).unwrap())
        .map(|s| s.unwrap().path().join("session.jsonl"))
        .next()
        .unwrap()
}

fn log_events(data: &Path) -> Vec<Value> {
    std::fs::read_to_string(log_path(data))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// Titles: one small separate request after the first completed turn,
/// recorded once as `session/title`, kept on resume, shown by `dsh
/// sessions`.
#[test]
fn titles_recorded_once_survive_resume_and_are_listed() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = titled_server("\"Fix the parser.\"", 0, 2);
    let o = dsh(data.path())
        .args(["run", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .arg("please fix the parser")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let titles = server.title_requests();
    assert_eq!(titles.len(), 1);
    let body: Value = serde_json::from_slice(&titles[0].body).unwrap();
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with(dsh_deepseek::mock::TITLE_MARKER)
    );
    assert_eq!(body["messages"][1], user("please fix the parser"));
    assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert!(body.get("tools").is_none());

    let events = log_events(data.path());
    let recorded = of_type(&events, "session/title");
    assert_eq!(recorded.len(), 1);
    // The title model's route names the local server.
    let route = format!(
        "openai-compatible:{}",
        server.url().trim_start_matches("http://")
    );
    let prompt_seq = events
        .iter()
        .find(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "user")
        .unwrap()["seq"]
        .clone();
    assert_eq!(
        recorded[0]["data"],
        json!({"title": "Fix the parser", "messageSeqs": [prompt_seq],
               "source": {"kind": "provider", "provider": "dsh-session-title",
                          "model": {"provider": route, "model": "deepseek-v4-flash"}}})
    );
    let turn_end = of_type(&events, "turn/end")[0]["seq"].as_u64().unwrap();
    assert!(recorded[0]["seq"].as_u64().unwrap() > turn_end);
    let check = dsh(data.path())
        .args(["log", "check"])
        .arg(log_path(data.path()))
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{check:?}");

    // Resumed: no second title.
    let id = session_id(data.path());
    resume(data.path(), &server.url(), &id, ws.path(), "and the lexer");
    assert_eq!(server.title_requests().len(), 1);
    let events = log_events(data.path());
    assert_eq!(of_type(&events, "session/title").len(), 1);
    assert_eq!(of_type(&events, "turn/end").len(), 2);

    let o = dsh(data.path()).arg("sessions").output().unwrap();
    let listing = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        listing.lines().next().unwrap().contains("TITLE"),
        "{listing}"
    );
    let row = listing.lines().nth(1).unwrap();
    assert!(row.contains("  Fix the parser  "), "{listing}");
    assert!(row.ends_with("please fix the parser"), "{listing}");
}

/// A slow title never holds a turn back: the second turn of a piped chat
/// ends before the title of the first is recorded.
#[test]
fn titles_never_delay_the_next_turn() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = titled_server("Slow title", 300, 2);
    let mut child = dsh(data.path())
        .args(["chat", "--base-url", &server.url(), "--cwd"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"one\ntwo\n").unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("answer 0") && out.contains("answer 1"),
        "{out}"
    );
    let events = log_events(data.path());
    let ends: Vec<u64> = of_type(&events, "turn/end")
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(ends.len(), 2);
    let titles = of_type(&events, "session/title");
    assert_eq!(titles.len(), 1, "recorded before exit");
    assert!(titles[0]["seq"].as_u64().unwrap() > ends[1]);
    assert_eq!(titles[0]["data"]["title"], "Slow title");
}

/// No title with `--no-title` or `titles = false`; a failed title request
/// leaves the session untitled and the command successful.
#[test]
fn titles_off_or_failed() {
    for (flags, config, title) in [
        (&["--no-title"][..], None, "T"),
        (&[][..], Some("titles = false\n"), "T"),
        (&[][..], None, ""),
    ] {
        let data = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        if let Some(text) = config {
            let dir = data.path().join("config/dsh");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("config.toml"), text).unwrap();
        }
        let server = titled_server(title, 0, 1);
        let o = dsh(data.path())
            .args(["run", "--base-url", &server.url(), "--cwd"])
            .arg(ws.path())
            .args(flags)
            .arg("hi")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let expected = usize::from(title.is_empty());
        assert_eq!(
            server.title_requests().len(),
            expected,
            "{flags:?} {config:?}"
        );
        assert!(of_type(&log_events(data.path()), "session/title").is_empty());
    }
}
