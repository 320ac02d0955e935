//! The user's own hooks and skills in `dsh run`: hook scripts
//! of both dialects written as the Claude Code and Codex docs show them
//! (bash and Python), each checked in the session log and in the request
//! the model got; project hooks run only in a trusted folder; a skills
//! tree with a bad file.
//!
//! Needs `python3` and `bash`: without them the Python cases skip with a
//! printed reason, and fail when `CI=true`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_deepseek::mock::{MockServer, Script};
use serde_json::Value;
use support::{needs, transcripts};

fn dsh(data: &Path, home: &Path) -> Command {
    let mut c = support::dsh(data);
    c.env("HOME", home);
    c
}

struct Ws {
    data: tempfile::TempDir,
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Ws {
    fn new() -> Ws {
        let ws = Ws {
            data: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
        };
        // The workspace is a repository: its root is the project.
        std::fs::create_dir(ws.ws.path().join(".git")).unwrap();
        ws
    }

    fn file(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.ws.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        if rel.ends_with(".sh") || rel.ends_with(".py") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        p
    }

    fn trust(&self) {
        let o = dsh(self.data.path(), self.home.path())
            .arg("trust")
            .arg(self.ws.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    }

    /// `dsh run --json --yes PROMPT` against `script`: (log lines, stderr,
    /// request bodies, exit code).
    fn run(&self, script: &str, prompt: &str) -> (Vec<Value>, String, Vec<Value>, Option<i32>) {
        self.run_with(script, prompt, &["--yes"])
    }

    /// As [`Ws::run`] with `flags` instead of `--yes`.
    fn run_with(
        &self,
        script: &str,
        prompt: &str,
        flags: &[&str],
    ) -> (Vec<Value>, String, Vec<Value>, Option<i32>) {
        let server = MockServer::start_on(Script::from_json(script).unwrap(), 0).unwrap();
        let o = dsh(self.data.path(), self.home.path())
            .args(["run", "--json", "--sandbox", "off", "--no-title"])
            .args(flags)
            .arg("--base-url")
            .arg(server.url())
            .arg("--cwd")
            .arg(self.ws.path())
            .arg(prompt)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let bodies = server
            .requests()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect();
        (
            log,
            String::from_utf8_lossy(&o.stderr).into_owned(),
            bodies,
            o.status.code(),
        )
    }
}

fn of_type<'a>(log: &'a [Value], t: &str) -> Vec<&'a Value> {
    log.iter().filter(|e| e["type"] == t).collect()
}

fn bash_call(command: &str) -> String {
    let args = serde_json::json!({"command": command, "description": "run it"}).to_string();
    format!(
        r#"{{"turn":{{"toolCalls":[{{"id":"c1","name":"bash","arguments":[{}]}}]}}}}"#,
        Value::String(args)
    )
}

fn script(turns: &[String]) -> String {
    format!(r#"{{"responses":[{}]}}"#, turns.join(","))
}

fn text(t: &str) -> String {
    format!(r#"{{"turn":{{"text":["{t}"]}}}}"#)
}

/// The tool result texts of the log.
fn results(log: &[Value]) -> Vec<String> {
    of_type(log, "tool/result")
        .iter()
        .map(|e| {
            e["data"]["message"]["content"][0]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// The Python validator of the Claude Code hooks docs ("Bash command
/// validation"), unchanged but for its rule: it blocks `rm -rf`.
const CC_VALIDATOR_PY: &str = r#"#!/usr/bin/env python3
import json
import re
import sys

# Define validation rules as a list of (regex pattern, message) tuples
VALIDATION_RULES = [
    (
        r"\brm\s+-rf\b",
        "rm -rf is not allowed in this project",
    ),
]


def validate_command(command: str) -> list[str]:
    issues = []
    for pattern, message in VALIDATION_RULES:
        if re.search(pattern, command):
            issues.append(message)
    return issues


try:
    input_data = json.load(sys.stdin)
except json.JSONDecodeError as e:
    print(f"Error: Invalid JSON input: {e}", file=sys.stderr)
    sys.exit(1)

tool_name = input_data.get("tool_name", "")
tool_input = input_data.get("tool_input", {})
command = tool_input.get("command", "")

if tool_name != "Bash" or not command:
    sys.exit(1)

# Validate the command
issues = validate_command(command)

if issues:
    for message in issues:
        print(f"• {message}", file=sys.stderr)
    # Exit code 2 blocks tool call and shows stderr to Claude
    sys.exit(2)
"#;

/// The settings that run it, as the docs write them.
const CC_SETTINGS: &str = r#"{
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/bash_command_validator.py"
          }
        ]
      }
    ]
  }
}"#;

#[test]
fn claude_code_docs_validator_denies_by_pattern_only_in_a_trusted_folder() {
    if !needs("python3") {
        return;
    }
    let w = Ws::new();
    w.file(".claude/settings.json", CC_SETTINGS);
    w.file(".claude/hooks/bash_command_validator.py", CC_VALIDATOR_PY);
    let s = script(&[bash_call("rm -rf build; echo RAN"), text("done")]);
    // Untrusted: the project's hook does not run, and the user is told.
    let (log, err, _, code) = w.run(&s, "clean up");
    assert_eq!(code, Some(0), "{err}");
    assert!(of_type(&log, "hook/invoked").is_empty());
    assert!(results(&log)[0].contains("RAN"), "{log:?}");
    assert!(
        err.contains("untrusted folder") && err.contains(".claude/settings.json"),
        "{err}"
    );
    // Trusted: it runs and blocks.
    w.trust();
    let (log, err, bodies, code) = w.run(&s, "clean up");
    assert_eq!(code, Some(0), "{err}");
    let invoked = of_type(&log, "hook/invoked");
    assert_eq!(invoked.len(), 1, "{log:?}");
    assert_eq!(invoked[0]["data"]["dialect"], "claude-code");
    assert_eq!(invoked[0]["data"]["matcher"], "Bash");
    let result = of_type(&log, "hook/result")[0]["data"].clone();
    assert_eq!(result["decision"], "block");
    assert_eq!(result["exitCode"], 2);
    assert_eq!(
        result["stderrSummary"],
        "• rm -rf is not allowed in this project"
    );
    let r = &results(&log)[0];
    assert_eq!(r, "Error: • rm -rf is not allowed in this project");
    // The model was told.
    let second = bodies[1].to_string();
    assert!(
        second.contains("rm -rf is not allowed in this project"),
        "{second}"
    );
    // A harmless command passes the same hook.
    let s = script(&[bash_call("echo fine"), text("done")]);
    let (log, _, _, _) = w.run(&s, "say fine");
    assert_eq!(of_type(&log, "hook/result")[0]["data"]["decision"], "pass");
    assert!(results(&log)[0].contains("fine"));
}

#[test]
fn user_level_hooks_rewrite_input_add_context_and_block_stop_once() {
    if !needs("python3") {
        return;
    }
    let w = Ws::new();
    // User-level hooks (~/.claude/settings.json) run without trust.
    let hooks = w.home.path().join(".claude");
    std::fs::create_dir_all(&hooks).unwrap();
    let rewrite = hooks.join("rewrite.sh");
    std::fs::write(
        &rewrite,
        "#!/bin/bash\n# PreToolUse: run a safer command instead.\ncat > /dev/null\necho '{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"allow\",\"updatedInput\":{\"command\":\"echo REWRITTEN\"}}}'\n",
    )
    .unwrap();
    let context = hooks.join("context.py");
    std::fs::write(
        &context,
        "#!/usr/bin/env python3\nimport json\nimport sys\n\ninput_data = json.load(sys.stdin)\nprompt = input_data.get(\"prompt\", \"\")\n# Plain stdout on exit 0 is added to the context.\nprint(f\"Project codename: BLUEBIRD (prompt was {len(prompt)} chars)\")\nsys.exit(0)\n",
    )
    .unwrap();
    let stop = hooks.join("stop.sh");
    std::fs::write(
        &stop,
        "#!/bin/bash\nINPUT=$(cat)\nif echo \"$INPUT\" | grep -q '\"stop_hook_active\":true'; then\n  exit 0\nfi\necho '{\"decision\": \"block\", \"reason\": \"Also say GOODBYE.\"}'\n",
    )
    .unwrap();
    for p in [&rewrite, &context, &stop] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let settings = serde_json::json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": rewrite}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": context}]}],
        "Stop": [{"hooks": [{"type": "command", "command": stop, "timeout": 30}]}]
    }});
    std::fs::write(hooks.join("settings.json"), settings.to_string()).unwrap();
    let s = script(&[bash_call("rm -rf /"), text("done"), text("GOODBYE")]);
    let (log, err, bodies, code) = w.run(&s, "do it");
    assert_eq!(code, Some(0), "{err}");
    // The rewritten command ran; the log keeps the model's call.
    assert_eq!(results(&log)[0].trim(), "REWRITTEN", "{log:?}");
    let call = &of_type(&log, "tool/call")[0]["data"]["arguments"];
    assert!(call.as_str().unwrap().contains("rm -rf /"));
    // The context reached the first request.
    let first = bodies[0].to_string();
    assert!(
        first.contains("Project codename: BLUEBIRD (prompt was 5 chars)"),
        "{first}"
    );
    // Stop blocked once: a third request carries the reason; then ended.
    assert_eq!(bodies.len(), 3, "{log:?}");
    assert!(bodies[2].to_string().contains("Also say GOODBYE."));
    let stops: Vec<_> = of_type(&log, "hook/result")
        .into_iter()
        .filter(|e| e["data"]["point"] == "Stop")
        .map(|e| e["data"]["decision"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stops, ["block", "pass"]);
    let end = of_type(&log, "turn/end");
    assert_eq!(end[0]["data"]["reason"]["kind"], "completed");
    // The stored log (hook events, rewritten call, Stop continuation)
    // replays through the loop.
    let stored = transcripts(&w.data.path().join("dsh"));
    assert_eq!(stored.len(), 1);
    let o = dsh(w.data.path(), w.home.path())
        .args(["replay", "--check"])
        .arg(&stored[0])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn codex_hooks_deny_and_block_the_prompt() {
    let w = Ws::new();
    w.file(
        ".codex/hooks/deny.sh",
        "#!/bin/bash\n# Codex PreToolUse: block force pushes.\ninput=$(cat)\nif echo \"$input\" | grep -q 'push --force'; then\n  echo 'force push is blocked' >&2\n  exit 2\nfi\nexit 0\n",
    );
    w.file(
        ".codex/hooks/prompt.sh",
        "#!/bin/bash\n# Codex UserPromptSubmit: refuse prompts naming a secret.\nif grep -q 'password'; then\n  echo '{\"decision\":\"block\",\"reason\":\"no secrets in prompts\"}'\nfi\n",
    );
    let ws = w.ws.path().display().to_string();
    w.file(
        ".codex/hooks.json",
        &serde_json::json!({"hooks": {
            "PreToolUse": [{"matcher": "^bash$", "hooks": [{"type": "command", "command": format!("{ws}/.codex/hooks/deny.sh"), "timeout": 10}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": format!("{ws}/.codex/hooks/prompt.sh")}]}]
        }})
        .to_string(),
    );
    w.trust();
    let s = script(&[bash_call("git push --force"), text("done")]);
    let (log, err, bodies, code) = w.run(&s, "ship it");
    assert_eq!(code, Some(0), "{err}");
    let invoked = of_type(&log, "hook/invoked");
    assert_eq!(invoked.len(), 2);
    assert_eq!(invoked[1]["data"]["handlerId"], "codex:PreToolUse:2");
    assert_eq!(results(&log)[0], "Error: force push is blocked");
    assert!(bodies[1].to_string().contains("force push is blocked"));
    // A blocked prompt ends the turn `blocked` without a model call.
    let s = script(&[text("never")]);
    let (log, _, bodies, _) = w.run(&s, "my password is hunter2");
    assert!(bodies.is_empty());
    let end = of_type(&log, "turn/end");
    assert_eq!(end[0]["data"]["reason"]["kind"], "blocked", "{log:?}");
}

#[test]
fn skills_catalog_tool_and_bad_frontmatter_notice() {
    let w = Ws::new();
    w.file(
        ".dsh/skills/pdf-forms/SKILL.md",
        "---\nname: pdf-forms\ndescription: Fill PDF forms.\n---\nRun `scripts/fill.py`.\n",
    );
    w.file(".dsh/skills/pdf-forms/scripts/fill.py", "print('x')\n");
    w.file(".claude/skills/broken/SKILL.md", "---\nname: [oops\n---\n");
    let call = serde_json::json!({"name": "pdf-forms"}).to_string();
    let s = script(&[
        format!(
            r#"{{"turn":{{"toolCalls":[{{"id":"c1","name":"skill","arguments":[{}]}}]}}}}"#,
            Value::String(call)
        ),
        text("DONE"),
    ]);
    // Without `--yes`: loading a skill is not asked about.
    let (log, err, bodies, code) =
        w.run_with(&s, "Load the pdf-forms skill, then reply DONE.", &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("broken/SKILL.md") && err.contains("invalid YAML frontmatter"),
        "{err}"
    );
    let first = bodies[0].to_string();
    assert!(first.contains("- `pdf-forms`: Fill PDF forms."), "{first}");
    // The skill tool is offered.
    assert!(
        bodies[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "skill")
    );
    let r = &results(&log)[0];
    assert!(r.starts_with("<skill_content name=\"pdf-forms\">"), "{r}");
    assert!(r.contains("Run `scripts/fill.py`."));
    assert!(bodies[1].to_string().contains("<skill_instructions>"));
    let catalog: Vec<_> = of_type(&log, "user/message")
        .into_iter()
        .filter(|e| e["data"]["source"]["kind"] == "skill-catalog")
        .collect();
    assert_eq!(catalog.len(), 1);
    assert_eq!(catalog[0]["data"]["source"]["form"], "catalog");
}

#[test]
fn acp_offers_the_skills_as_available_commands() {
    use std::io::{BufRead, BufReader, Write};
    let w = Ws::new();
    w.file(
        ".agents/skills/release-notes/SKILL.md",
        "---\nname: release-notes\ndescription: Write release notes.\n---\nUse git log.\n",
    );
    let server =
        MockServer::start_on(Script::from_json(r#"{"responses":[]}"#).unwrap(), 0).unwrap();
    let mut child = dsh(w.data.path(), w.home.path())
        .args(["acp", "--base-url"])
        .arg(server.url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    let new = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": w.ws.path(), "mcpServers": []}});
    writeln!(stdin, "{init}\n{new}").unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut found = None;
    for _ in 0..10 {
        let Some(Ok(line)) = lines.next() else { break };
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["params"]["update"]["sessionUpdate"] == "available_commands_update" {
            found = Some(v);
            break;
        }
    }
    drop(stdin);
    let _ = child.wait();
    let v = found.expect("an available_commands_update");
    // The skill follows the built-in commands in the one list.
    let list = v["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap();
    assert_eq!(
        list.last(),
        Some(&serde_json::json!({"name": "release-notes", "description": "Write release notes."})),
        "{list:?}"
    );
    assert!(list.iter().any(|c| c["name"] == "skills"), "{list:?}");
}

/// Every `session.jsonl` under `dir`, parsed.
fn logs(dir: &Path) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(logs(&p));
        } else if p.file_name().is_some_and(|n| n == "session.jsonl") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push(
                text.lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn a_subagent_inherits_the_hooks_and_skills() {
    let w = Ws::new();
    let hooks = w.home.path().join(".claude");
    std::fs::create_dir_all(&hooks).unwrap();
    let settings = serde_json::json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
            "command": "grep -q 'rm -rf' && { echo 'not in a child either' >&2; exit 2; }; exit 0"}]}],
        "SubagentStop": [{"hooks": [{"type": "command", "command": "cat > /dev/null"}]}]
    }});
    std::fs::write(hooks.join("settings.json"), settings.to_string()).unwrap();
    w.file(
        ".dsh/skills/tidy/SKILL.md",
        "---\nname: tidy\ndescription: Tidy the workspace.\n---\nDelete nothing.\n",
    );
    let delegate = serde_json::json!({"description": "clean", "prompt": "clean up"}).to_string();
    let s = script(&[
        format!(
            r#"{{"turn":{{"toolCalls":[{{"id":"p1","name":"subagent","arguments":[{}]}}]}}}}"#,
            Value::String(delegate)
        ),
        bash_call("rm -rf build"),
        text("child done"),
        text("all done"),
    ]);
    let (_, err, bodies, code) = w.run(&s, "delegate the cleanup");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(bodies.len(), 4);
    // The child's first request had the skills catalog.
    assert!(
        bodies[1]
            .to_string()
            .contains("- `tidy`: Tidy the workspace.")
    );
    let all = logs(&w.data.path().join("dsh"));
    let child = all
        .iter()
        .find(|l| l[0].get("parentSession").is_some())
        .expect("the child's log");
    let points: Vec<&str> = child
        .iter()
        .filter(|e| e["type"] == "hook/invoked")
        .map(|e| e["data"]["point"].as_str().unwrap())
        .collect();
    assert_eq!(points, ["PreToolUse", "SubagentStop"]);
    let result = child
        .iter()
        .find(|e| e["type"] == "tool/result")
        .unwrap()
        .to_string();
    assert!(result.contains("Error: not in a child either"), "{result}");
}

#[test]
fn acp_sessions_run_the_hooks() {
    use std::io::{BufRead, BufReader, Write};
    let w = Ws::new();
    let hooks = w.home.path().join(".claude");
    std::fs::create_dir_all(&hooks).unwrap();
    let settings = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "echo 'bash is disabled by policy in this session' >&2; exit 2"}]}]}});
    std::fs::write(hooks.join("settings.json"), settings.to_string()).unwrap();
    let s = script(&[bash_call("echo HELLO"), text("blocked")]);
    let server = MockServer::start_on(Script::from_json(&s).unwrap(), 0).unwrap();
    let mut child = dsh(w.data.path(), w.home.path())
        .args(["acp", "--base-url"])
        .arg(server.url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |until: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        let mut seen = Vec::new();
        for _ in 0..200 {
            let Some(Ok(line)) = lines.next() else { break };
            let v: Value = serde_json::from_str(&line).unwrap();
            let done = until(&v);
            seen.push(v);
            if done {
                break;
            }
        }
        seen
    };
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    let new = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": w.ws.path(), "mcpServers": []}});
    writeln!(stdin, "{init}\n{new}").unwrap();
    let seen = next(&|v| v["id"] == 1);
    let session = seen.last().unwrap()["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let prompt = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "run it"}]}});
    writeln!(stdin, "{prompt}").unwrap();
    let seen = next(&|v| v["id"] == 2);
    drop(stdin);
    let _ = child.wait();
    let all = Value::Array(seen).to_string();
    assert!(
        all.contains("Error: bash is disabled by policy in this session"),
        "{all}"
    );
    // The body never ran.
    assert!(!all.contains("HELLO\\n"), "{all}");
}

#[test]
fn chat_without_a_terminal_does_not_ask_and_does_not_run_untrusted_hooks() {
    use std::io::Write;
    let w = Ws::new();
    let marker = w.ws.path().join("ran");
    w.file(
        ".claude/settings.json",
        &serde_json::json!({"hooks": {"UserPromptSubmit": [{"hooks": [
            {"type": "command", "command": format!("touch {}", marker.display())}]}]}})
        .to_string(),
    );
    let server =
        MockServer::start_on(Script::from_json(&script(&[text("hi")])).unwrap(), 0).unwrap();
    let mut child = dsh(w.data.path(), w.home.path())
        .args(["chat", "--no-title", "--base-url"])
        .arg(server.url())
        .arg("--cwd")
        .arg(w.ws.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("untrusted folder"), "{err}");
    assert!(
        !err.contains("[y/N]"),
        "no question without a terminal: {err}"
    );
    assert!(!marker.exists(), "the untrusted hook ran");
    // The line was the prompt, not an answer to a trust question.
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn dsh_trust_lists_and_revokes() {
    let w = Ws::new();
    let sub = w.ws.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let out = |args: &[&str]| {
        let o = dsh(w.data.path(), w.home.path())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let ws = std::fs::canonicalize(w.ws.path())
        .unwrap()
        .display()
        .to_string();
    // Without a path: the repository root of the current directory.
    let o = dsh(w.data.path(), w.home.path())
        .arg("trust")
        .current_dir(&sub)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("trusted: {ws}")),
        "{o:?}"
    );
    assert_eq!(out(&["trust", "--list"]).trim(), ws);
    assert!(out(&["trust", "--revoke", &ws]).contains("no longer trusted"));
    assert_eq!(out(&["trust", "--list"]).trim(), "");
    assert!(out(&["trust", "--revoke", &ws]).contains("was not trusted"));
}
