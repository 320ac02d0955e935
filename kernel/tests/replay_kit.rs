//! "Testing your agent", with public API only: record a two-turn
//! session (the second turn in a resumed kernel) with a custom tool, as a
//! runtime would store it, then replay the log with the same
//! configuration and tool through `dsh_runtime::replay`.

use dsh_core::Time;
use std::collections::VecDeque;

use dsh_core::agent::ToolExecution;
use dsh_core::agent::prompt::PromptSection;
use dsh_core::agent::replay::{ReplayOptions, replay_jsonl};
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
use dsh_core::jsonl::{encode_header_line, load_log};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk, TokenUsage};
use dsh_runtime::replay::{Tools, replay_jsonl_with};
use dsh_runtime::{
    AgentConfig, Effect, IdMode, InboxTarget, Kernel, Plugin, Seams, create_session, resume_session,
};
use serde_json::json;

const NOW: Time = Time::from_millis(1_700_000_000_000);

/// The agent under test: one custom tool, `shout`.
fn config() -> AgentConfig {
    let mut tools = ToolRegistry::new();
    let shout = ToolDefinition::untyped(
        "shout",
        "Upper-cases a text",
        json!({"type":"object","properties":{"text":{"type":"string"}}}),
    );
    tools.register(shout).unwrap();
    let mut config = AgentConfig::new(LlmCallConfig::new("mock", "mock"));
    config.tools = tools;
    config.ids = IdMode::Sequential;
    config
}

/// The tool's body.
fn shout(exec: &ToolExecution) -> ToolOutcome {
    let text = exec.arguments["text"].as_str().unwrap_or_default();
    ToolOutcome::success(vec![ContentBlock::text(text.to_uppercase())])
}

/// The same tool after a change: it forgot to upper-case.
fn shout_changed(exec: &ToolExecution) -> ToolOutcome {
    let text = exec.arguments["text"].as_str().unwrap_or_default();
    ToolOutcome::success(vec![ContentBlock::text(text)])
}

/// A plugin of the agent under test: one system-prompt section.
struct Persona(&'static str);

impl Plugin for Persona {
    fn name(&self) -> &str {
        "persona"
    }
    fn seams(&self) -> Seams {
        Seams::NONE
    }
    fn sections(&mut self) -> Vec<PromptSection> {
        vec![PromptSection::new("persona", 0, self.0)]
    }
}

fn plugins() -> Vec<Box<dyn Plugin>> {
    vec![Box::new(Persona("You are terse."))]
}

/// The scripted model: turn 1 calls `shout`, then answers; turn 2 answers.
fn model() -> VecDeque<Vec<StreamChunk>> {
    VecDeque::from([
        vec![
            StreamChunk::block_start(0, "tool-call"),
            StreamChunk::tool_call_delta(0, "call-1", Some("shout"), r#"{"text":"#),
            StreamChunk::tool_call_delta(0, "call-1", None, r#""hello"}"#),
            StreamChunk::block_end(
                0,
                ContentBlock::tool_call("call-1", "shout", r#"{"text":"hello"}"#),
            ),
            StreamChunk::finish(FinishReason::ToolCalls),
        ],
        vec![
            StreamChunk::block_start(0, "text"),
            StreamChunk::text_delta(0, "It says "),
            StreamChunk::text_delta(0, "HELLO."),
            StreamChunk::block_end(0, ContentBlock::text("It says HELLO.")),
            StreamChunk::usage(TokenUsage::new(120, 7)),
            StreamChunk::finish(FinishReason::Stop),
        ],
        vec![
            StreamChunk::block_start(0, "text"),
            StreamChunk::text_delta(0, "Goodbye."),
            StreamChunk::block_end(0, ContentBlock::text("Goodbye.")),
            StreamChunk::finish(FinishReason::Stop),
        ],
    ])
}

/// Runs `kernel` until idle like a runtime: the model answers from
/// `script`, tools run `shout`, every persisted range is appended to `log`
/// as JSONL lines (the store's `session.jsonl`).
fn drive(kernel: &mut Kernel, script: &mut VecDeque<Vec<StreamChunk>>, log: &mut Vec<u8>) {
    while let Some(effect) = kernel.poll() {
        match effect {
            Effect::StartModel(call) => {
                for chunk in script.pop_front().expect("a scripted answer") {
                    kernel.model_chunk(NOW, call.attempt, chunk).unwrap();
                }
                kernel.model_end(NOW, call.attempt).unwrap();
            }
            Effect::StartTool { exec, .. } => {
                kernel
                    .tool_done(NOW, exec.token, shout(&exec), Vec::new())
                    .unwrap();
            }
            Effect::Persist { range, .. } => {
                for seq in range {
                    let event = kernel.session().event(seq).unwrap();
                    log.extend_from_slice(event.to_json().as_bytes());
                    log.push(b'\n');
                }
                kernel.persisted(NOW, Ok(())).unwrap();
            }
            _ => {}
        }
    }
    assert!(kernel.is_idle());
}

/// A two-turn recording: turn 1 in a fresh kernel, turn 2 after a resume
/// (a second loop instance, after `session/end-seed`).
fn record() -> Vec<u8> {
    let mut script = model();
    let mut log = Vec::new();
    let session = create_session("kit-1".into(), NOW, None).unwrap();
    encode_header_line(session.header(), &mut log);
    let mut kernel = Kernel::new(config(), session, 0, plugins()).unwrap();
    let hi = Message::user("u1", vec![ContentBlock::text("Shout hello.")]);
    kernel.send(NOW, hi, InboxTarget::NextTurn, true).unwrap();
    drive(&mut kernel, &mut script, &mut log);
    drop(kernel);

    // Resume from the stored log, as `dsh chat --resume` does.
    let loaded = load_log(&log, &[]).unwrap();
    let stored = loaded.session.len();
    let header = loaded.session.header().clone();
    let session = resume_session(header, loaded.session.into_events(), NOW).unwrap();
    let mut kernel = Kernel::new(config(), session, stored, plugins()).unwrap();
    let bye = Message::user("u2", vec![ContentBlock::text("Bye.")]);
    kernel.send(NOW, bye, InboxTarget::NextTurn, true).unwrap();
    drive(&mut kernel, &mut script, &mut log);
    assert!(script.is_empty());
    log
}

#[test]
fn a_recorded_two_turn_session_replays_with_its_own_tool() {
    let log = record();
    let text = String::from_utf8(log.clone()).unwrap();
    assert_eq!(text.matches(r#""type":"turn/end""#).count(), 2);
    assert_eq!(text.matches(r#""type":"session/end-seed""#).count(), 1);
    let mut tool = shout;
    let report = replay_jsonl_with(&log, &config(), &mut plugins, Tools::Live(&mut tool)).unwrap();
    report.assert_ok();
    assert_eq!(report.instances, 2);
    assert_eq!(report.seed, 0);
    // Every event is compared; the loop's own (all but the end-seed marker)
    // are counted.
    assert_eq!(report.total, text.lines().count() - 2);
    assert_eq!(report.reproduced, report.total);
    // Answered from the recording, it replays too.
    let report = replay_jsonl_with(&log, &config(), &mut plugins, Tools::Recorded).unwrap();
    report.assert_ok();
}

#[test]
fn a_changed_tool_fails_the_replay_and_says_where() {
    let log = record();
    let mut tool = shout_changed;
    let report = replay_jsonl_with(&log, &config(), &mut plugins, Tools::Live(&mut tool)).unwrap();
    assert!(!report.identical());
    let shown = report.to_string();
    println!("{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert!(
        lines[0].starts_with("reproduced ") && lines[0].contains("2 loop instances replayed"),
        "{shown}"
    );
    assert!(
        lines[1].contains("(path .data.message.content[0].content[0].text): tool/result differs"),
        "{shown}"
    );
    assert!(lines[2].starts_with("  recorded: ") && lines[2].contains(r#""text":"HELLO""#));
    assert!(lines[3].starts_with("  produced: ") && lines[3].contains(r#""text":"hello""#));
    // The test helper panics with the same text.
    let panic = std::panic::catch_unwind(|| report.assert_ok()).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.ends_with(&shown), "{message}");
}

#[test]
fn an_edit_of_the_first_turn_fails_the_replay() {
    // The first instance of a resumed log is replayed too.
    let log = String::from_utf8(record()).unwrap();
    let changed = edit(&log, "assistant/message", "It says HELLO.", "It says HI.");
    assert_ne!(changed, log);
    let mut tool = shout;
    let report = replay_jsonl_with(
        changed.as_bytes(),
        &config(),
        &mut plugins,
        Tools::Live(&mut tool),
    )
    .unwrap();
    assert_eq!(report.differences.len(), 1, "{report}");
    assert!(
        report.to_string().contains("assistant/message differs"),
        "{report}"
    );
}

/// `log` with `from` replaced by `to` in the first line of type `kind`.
fn edit(log: &str, kind: &str, from: &str, to: &str) -> String {
    let tag = format!(r#"{{"type":"{kind}","#);
    let mut done = false;
    let out: String = log
        .lines()
        .map(|l| {
            if !done && l.starts_with(&tag) && l.contains(from) {
                done = true;
                format!("{}\n", l.replacen(from, to, 1))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert!(done, "no {kind} line holds {from}");
    out
}

#[test]
fn an_edit_of_anything_the_loop_derives_in_the_first_turn_fails() {
    // Messages, parsed tool calls, turn and step boundaries and
    // usage, in the first of two loop instances, under both replays: the
    // core's (`dsh replay --check`) and the kernel's with the user's tool.
    let log = String::from_utf8(record()).unwrap();
    // A tool result is an input to the core's replay (answered from the
    // recording); only a live tool checks it.
    let edits = [
        ("assistant/message", "It says HELLO.", "It says HI.", true),
        (
            "assistant/message",
            r#""outputTokens":7"#,
            r#""outputTokens":8"#,
            true,
        ),
        ("tool/call", r#"\"hello\""#, r#"\"howdy\""#, true),
        ("step/end", r#""step":1"#, r#""step":3"#, true),
        ("turn/end", r#""completed""#, r#""error""#, true),
        ("tool/result", "HELLO", "HOWDY", false),
    ];
    for (kind, from, to, derived) in edits {
        let changed = edit(&log, kind, from, to);
        let core = replay_jsonl(changed.as_bytes(), ReplayOptions::default());
        let r = core.unwrap();
        assert_eq!(r.identical(), !derived, "core replay, edit of {kind}: {r}");
        if derived {
            assert!(r.to_string().contains(&format!("{kind} differs")), "{r}");
        }
        let mut tool = shout;
        let live = Tools::Live(&mut tool);
        let r = replay_jsonl_with(changed.as_bytes(), &config(), &mut plugins, live).unwrap();
        assert!(r.to_string().contains(&format!("{kind} differs")), "{r}");
    }
    // The unedited log passes both.
    replay_jsonl(log.as_bytes(), ReplayOptions::default())
        .unwrap()
        .assert_ok();
}

#[test]
fn a_changed_plugin_fails_the_replay() {
    // The user's plugins run in the replay: a changed prompt section shows
    // in the first request's header of each loop instance.
    let log = record();
    let mut changed = || -> Vec<Box<dyn Plugin>> { vec![Box::new(Persona("You are verbose."))] };
    let mut tool = shout;
    let report = replay_jsonl_with(&log, &config(), &mut changed, Tools::Live(&mut tool)).unwrap();
    assert_eq!(report.differences.len(), 2, "{report}");
    for d in &report.differences {
        assert!(d.reason.starts_with("request/header differs"), "{report}");
        assert!(d.expected.as_deref().unwrap().contains("You are terse."));
        assert!(d.produced.as_deref().unwrap().contains("You are verbose."));
    }
}
