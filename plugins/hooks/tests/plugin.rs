//! The hooks plugin in a kernel (UserPromptSubmit block, Stop cap,
//! SubagentStop in a child, PostToolUse context and block), and the
//! process runner (environment policy, timeout, output cap).

use dsh_core::Time;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::session::{EventData, Session, SessionEvent, SessionHeader};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, SessionId, StreamChunk};
use dsh_hooks::config::parse;
use dsh_hooks::{
    Dialect, HookRunner, HooksPlugin, ProcessRunner, RunRequest, RunResult, STOP_CAPPED, Settings,
};
use dsh_runtime::{AgentConfig, Effect, IdMode, InboxTarget, Kernel, Plugin};
use serde_json::{Value, json};

fn text_answer(t: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::text_delta(0, t),
        StreamChunk::block_end(0, ContentBlock::text(t)),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

fn tool_answer(name: &str, args: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::tool_call_delta(0, "c1", Some(name), args),
        StreamChunk::block_end(0, ContentBlock::tool_call("c1", name, args)),
        StreamChunk::finish(FinishReason::ToolCalls),
    ]
}

type Seen = Arc<Mutex<Vec<RunRequest>>>;

/// A runner answering every run with `f(request)`, recording requests.
fn runner(seen: &Seen, f: fn(&RunRequest) -> RunResult) -> Box<dyn HookRunner> {
    let seen = seen.clone();
    Box::new(move |r: &RunRequest| {
        seen.lock().unwrap().push(r.clone());
        f(r)
    })
}

/// Runs one prompt in a kernel with `plugin`; tools answer "tool ran".
fn run(
    header: SessionHeader,
    plugin: HooksPlugin,
    prompt: &str,
    script: Vec<Vec<StreamChunk>>,
) -> Vec<SessionEvent> {
    let mut config = AgentConfig::new(LlmCallConfig::new("p", "m"));
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::untyped(
            "bash",
            "Runs",
            json!({"type": "object"}),
        ))
        .unwrap();
    config.tools = tools;
    config.ids = IdMode::Sequential;
    let plugins: Vec<Box<dyn Plugin>> = vec![Box::new(plugin)];
    let mut kernel = Kernel::new(config, Session::new(header), 0, plugins).unwrap();
    kernel.set_publish_events(false);
    let mut script = VecDeque::from(script);
    let m = Message::user("u1", vec![ContentBlock::text(prompt)]);
    kernel
        .send(Time::from_millis(1), m, InboxTarget::NextTurn, true)
        .unwrap();
    while let Some(effect) = kernel.poll() {
        match effect {
            Effect::StartModel(c) => {
                for chunk in script.pop_front().expect("a scripted answer") {
                    kernel
                        .model_chunk(Time::from_millis(1), c.attempt, chunk)
                        .unwrap();
                }
                kernel.model_end(Time::from_millis(1), c.attempt).unwrap();
            }
            Effect::StartTool { exec, .. } => {
                let out = ToolOutcome::success(vec![ContentBlock::text("tool ran")]);
                kernel
                    .tool_done(Time::from_millis(1), exec.token, out, Vec::new())
                    .unwrap();
            }
            Effect::Persist { .. } => kernel.persisted(Time::from_millis(1), Ok(())).unwrap(),
            _ => {}
        }
    }
    assert!(kernel.is_idle());
    kernel.session().events().to_vec()
}

fn header(depth: u64) -> SessionHeader {
    let mut h = SessionHeader::new(SessionId::from("s1"), 1);
    h.cwd = Some("/w".into());
    if depth > 0 {
        h.delegation_depth = Some(depth);
        h.parent_session = Some(SessionId::from("parent"));
    }
    h
}

fn json_of(e: &SessionEvent) -> Value {
    serde_json::from_str(&e.to_json()).unwrap()
}

fn of_type(log: &[SessionEvent], t: &str) -> Vec<Value> {
    log.iter()
        .filter(|e| e.event_type() == t)
        .map(json_of)
        .collect()
}

fn plugin(dialect: Dialect, cfg: Value, r: Box<dyn HookRunner>) -> HooksPlugin {
    HooksPlugin::new(
        dialect,
        parse(&cfg, dialect).unwrap().config,
        r,
        Settings::default(),
    )
}

#[test]
fn user_prompt_submit_block_ends_the_turn_blocked() {
    let seen = Seen::default();
    let cfg =
        json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "x"}]}]}});
    let p = plugin(
        Dialect::ClaudeCode,
        cfg,
        runner(&seen, |_| {
            RunResult::new(Some(2), "", "no prompts today", 1.0)
        }),
    );
    let log = run(header(0), p, "hello", vec![]);
    let end = of_type(&log, "turn/end");
    assert_eq!(end[0]["data"]["reason"]["kind"], "blocked");
    assert_eq!(of_type(&log, "hook/result")[0]["data"]["decision"], "block");
    let payload: Value = serde_json::from_str(seen.lock().unwrap()[0].stdin.trim()).unwrap();
    assert_eq!(payload["prompt"], "hello");
    assert_eq!(payload["hook_event_name"], "UserPromptSubmit");
}

#[test]
fn a_stop_hook_that_always_blocks_is_capped() {
    let seen = Seen::default();
    let cfg = json!({"Stop": [{"hooks": [{"command": "x"}]}]});
    let p = plugin(
        Dialect::Codex,
        cfg,
        runner(&seen, |_| RunResult::new(Some(2), "", "again", 1.0)),
    );
    let answers = (0..=dsh_hooks::DEFAULT_STOP_BLOCK_CAP)
        .map(|_| text_answer("ok"))
        .collect();
    let log = run(header(0), p, "go", answers);
    let capped = of_type(&log, STOP_CAPPED);
    assert_eq!(capped.len(), 1, "the cap is reported");
    assert_eq!(
        capped[0]["data"]["limit"],
        dsh_hooks::DEFAULT_STOP_BLOCK_CAP
    );
    assert_eq!(
        of_type(&log, "turn/end")[0]["data"]["reason"]["kind"],
        "completed"
    );
    // Codex payloads: no trailing newline, a turn id and the model.
    let req = &seen.lock().unwrap()[0];
    assert!(!req.stdin.ends_with('\n'));
    let p: Value = serde_json::from_str(&req.stdin).unwrap();
    assert_eq!(p["turn_id"], "1");
    assert_eq!(p["transcript_path"], Value::Null);
    assert!(req.env.is_empty(), "codex sets no CLAUDE_PROJECT_DIR");
}

#[test]
fn a_child_runs_subagent_stop() {
    let seen = Seen::default();
    let cfg = json!({"hooks": {"SubagentStop": [{"hooks": [{"type": "command", "command": "x"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "never"}]}]}});
    let p = plugin(
        Dialect::ClaudeCode,
        cfg,
        runner(&seen, |_| RunResult::new(Some(0), "", "", 1.0)),
    );
    let log = run(header(1), p, "go", vec![text_answer("ok")]);
    let invoked = of_type(&log, "hook/invoked");
    assert_eq!(invoked.len(), 1);
    assert_eq!(invoked[0]["data"]["point"], "SubagentStop");
    let p: Value = serde_json::from_str(seen.lock().unwrap()[0].stdin.trim()).unwrap();
    assert_eq!(p["agent_type"], "general-purpose");
    assert_eq!(p["agent_id"], "s1");
}

#[test]
fn post_tool_use_adds_context_or_blocks() {
    let seen = Seen::default();
    let cfg = json!({"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "x"}]}]}});
    let p = plugin(
        Dialect::ClaudeCode,
        cfg.clone(),
        runner(&seen, |_| {
            RunResult::new(
                Some(0),
                r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"lint: clean"}}"#,
                "",
                1.0,
            )
        }),
    );
    let log = run(
        header(0),
        p,
        "go",
        vec![
            tool_answer("bash", r#"{"command":"ls"}"#),
            text_answer("ok"),
        ],
    );
    let ctx: Vec<_> = log
        .iter()
        .filter_map(|e| match e.data() {
            EventData::UserMessage(m) if m.source.kind() == "plugin" => {
                m.content[0].as_text().map(String::from)
            }
            _ => None,
        })
        .collect();
    assert_eq!(ctx, ["lint: clean"]);
    let p: Value = serde_json::from_str(seen.lock().unwrap()[0].stdin.trim()).unwrap();
    assert_eq!(p["tool_response"], "tool ran");
    assert_eq!(p["tool_name"], "Bash");
    // `decision: block` turns the result into an error with the reason.
    let p = plugin(
        Dialect::ClaudeCode,
        cfg,
        runner(&seen, |_| {
            RunResult::new(
                Some(0),
                r#"{"decision":"block","reason":"output leaked a path"}"#,
                "",
                1.0,
            )
        }),
    );
    let log = run(
        header(0),
        p,
        "go",
        vec![
            tool_answer("bash", r#"{"command":"ls"}"#),
            text_answer("ok"),
        ],
    );
    let r = &of_type(&log, "tool/result")[0]["data"]["message"]["content"][0];
    assert_eq!(r["isError"], true);
    assert!(r.to_string().contains("output leaked a path"), "{r}");
}

#[test]
fn ask_from_a_hook_goes_to_the_approval_service() {
    let seen = Seen::default();
    let cfg = json!({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x"}]}]}});
    let p = plugin(
        Dialect::ClaudeCode,
        cfg,
        runner(&seen, |_| {
            RunResult::new(
                Some(0),
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?"}}"#,
                "",
                1.0,
            )
        }),
    );
    // No approval service in this kernel: an ask is rejected (TL-10).
    let log = run(
        header(0),
        p,
        "go",
        vec![
            tool_answer("bash", r#"{"command":"ls"}"#),
            text_answer("ok"),
        ],
    );
    let r = &of_type(&log, "tool/result")[0]["data"]["message"]["content"][0];
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(of_type(&log, "hook/result")[0]["data"]["decision"], "ask");
}

fn request(command: &str, timeout: Duration) -> RunRequest {
    let mut r = RunRequest::clone(&dummy());
    r.command = command.into();
    r.timeout = timeout;
    r
}

fn dummy() -> RunRequest {
    // A request as the plugin makes it (the fields are public for runners).
    let seen = Seen::default();
    let cfg = json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}});
    let p = plugin(
        Dialect::ClaudeCode,
        cfg,
        runner(&seen, |_| RunResult::new(Some(0), "", "", 1.0)),
    );
    let mut h = header(0);
    h.cwd = Some(std::env::temp_dir().display().to_string());
    run(h, p, "go", vec![text_answer("ok")]);
    seen.lock().unwrap()[0].clone()
}

#[test]
fn the_runner_keeps_secrets_out_and_sets_the_project_dir() {
    let policy = dsh_tools::EnvPolicy::default().with_secret("MY_PROVIDER_KEY");
    let mut r = ProcessRunner::new(policy);
    // SAFETY: set before any thread of this test reads the environment;
    // the variable is only this test's.
    unsafe { std::env::set_var("MY_PROVIDER_KEY", "sk-canary-31337") };
    let out = r.run(&request(
        "cat > /dev/null; env | grep -c canary-31337; echo \"dir=$CLAUDE_PROJECT_DIR\"",
        Duration::from_secs(10),
    ));
    assert!(out.stdout.starts_with("0\n"), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("dir={}", std::env::temp_dir().display())),
        "{out:?}"
    );
    assert_eq!(out.exit_code, Some(0));
}

#[test]
fn the_runner_times_out_and_caps_output() {
    let mut r = ProcessRunner::new(dsh_tools::EnvPolicy::default());
    let out = r.run(&request("sleep 30", Duration::from_millis(200)));
    assert_eq!(out.exit_code, None);
    assert!(out.stderr.contains("timed out after 200 ms"), "{out:?}");
    assert!(out.duration_ms < 10_000.0);
    let out = r.run(&request(
        "head -c 3000000 /dev/zero | tr '\\0' a",
        Duration::from_secs(20),
    ));
    assert_eq!(out.stdout.len(), dsh_hooks::runner::MAX_STDOUT_BYTES);
    let out = r.run(&request("exit 2", Duration::from_secs(5)));
    assert_eq!(out.exit_code, Some(2));
}

#[test]
fn continue_false_after_a_tool_stops_the_turn() {
    let seen = Seen::default();
    let cfg = json!({"hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "x"}]}]}});
    let p = plugin(
        Dialect::ClaudeCode,
        cfg,
        runner(&seen, |_| {
            RunResult::new(
                Some(0),
                r#"{"continue":false,"stopReason":"build broke"}"#,
                "",
                1.0,
            )
        }),
    );
    // The scripted second answer is never asked for.
    let log = run(
        header(0),
        p,
        "go",
        vec![tool_answer("bash", r#"{"command":"make"}"#)],
    );
    assert_eq!(of_type(&log, "hook/result")[0]["data"]["decision"], "stop");
    let end = &of_type(&log, "turn/end")[0]["data"]["reason"];
    assert_eq!(end["kind"], "aborted", "{end}");
    assert!(end.to_string().contains("build broke"), "{end}");
}
