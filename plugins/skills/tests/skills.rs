//! The skills plugin in a kernel: the reference's `skill-load` recording
//! (catalog message and `skill` tool result reproduced field for field,
//! ids aside), and a skills tree on disk with three skills (one with bad
//! frontmatter, one with resources).

use dsh_core::Time;
use std::collections::VecDeque;
use std::path::Path;

use dsh_core::session::{EventData, Session, SessionEvent};
use dsh_core::{ContentBlock, FinishReason, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::{AgentConfig, Effect, IdMode, InboxTarget, Kernel, Plugin, create_session};
use dsh_skills::{Skill, SkillsPlugin, StaticSource};
use serde_json::Value;

fn recording(name: &str) -> (dsh_core::session::SessionHeader, Vec<SessionEvent>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/conformance/sessions")
        .join(name);
    let bytes = dsh_core::jsonl::fixture_tokens(&std::fs::read(path).unwrap());
    let s = dsh_core::jsonl::load_log(&bytes, &[]).unwrap().session;
    (s.header().clone(), s.into_events())
}

fn answers(events: &[SessionEvent]) -> VecDeque<Vec<StreamChunk>> {
    let mut out = VecDeque::new();
    let mut current = Vec::new();
    for e in events {
        if let EventData::AssistantChunk(c) = e.data() {
            current.push(c.chunk().clone());
            if c.is_finish() {
                out.push_back(std::mem::take(&mut current));
            }
        }
    }
    out
}

fn shape(e: &SessionEvent) -> Value {
    let mut v: Value = serde_json::from_str(&e.to_json()).unwrap();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in ["id", "time", "seq", "sourceEventSeqs"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

fn checked(e: &SessionEvent) -> bool {
    e.event_type() == "tool/result"
        || matches!(e.data(), EventData::UserMessage(m) if m.source.kind().starts_with("skill-"))
}

/// Runs one prompt through a kernel with `plugin`, the model answering
/// from `script`; returns the log.
fn run(
    session: Session,
    plugin: SkillsPlugin,
    prompt: Message,
    mut script: VecDeque<Vec<StreamChunk>>,
) -> Vec<SessionEvent> {
    let mut config = AgentConfig::new(LlmCallConfig::new("deepseek-official", "deepseek-v4-flash"));
    config.ids = IdMode::Sequential;
    let plugins: Vec<Box<dyn Plugin>> = vec![Box::new(plugin)];
    let mut kernel = Kernel::new(config, session, 0, plugins).unwrap();
    kernel.set_publish_events(false);
    kernel
        .send(Time::from_millis(1), prompt, InboxTarget::NextTurn, true)
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
            Effect::StartTool { exec, .. } => panic!("tool {} reached the runtime", exec.name),
            Effect::Persist { .. } => kernel.persisted(Time::from_millis(1), Ok(())).unwrap(),
            _ => {}
        }
    }
    assert!(kernel.is_idle() && script.is_empty());
    kernel.session().events().to_vec()
}

#[test]
fn skill_load_recording_replays() {
    let (header, events) = recording("examples-acp-agent__skill-load__session.jsonl");
    // The skills the recording's catalog lists; the loaded one's body is
    // the recorded tool result's instructions.
    let catalog = events
        .iter()
        .find_map(|e| match e.data() {
            EventData::UserMessage(m) if m.source.kind() == "skill-catalog" => {
                Some(serde_json::to_value(&m.source).unwrap())
            }
            _ => None,
        })
        .unwrap();
    let result_text = events
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => match &r.message.content[0] {
                ContentBlock::ToolResult { content, .. } => content[0].as_text().map(String::from),
                _ => None,
            },
            _ => None,
        })
        .unwrap();
    let body = result_text
        .split_once("<skill_instructions>\n")
        .unwrap()
        .1
        .rsplit_once("\n</skill_instructions>")
        .unwrap()
        .0
        .to_string();
    let skills: Vec<Skill> = catalog["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap();
            Skill::new(
                name,
                e["description"].as_str().unwrap(),
                format!("{{{{cwd}}}}/.dsh/skills/{name}"),
                if name == "editing-cordis-compositions" {
                    body.clone()
                } else {
                    String::new()
                },
            )
        })
        .collect();
    let plugin = SkillsPlugin::new(Box::new(StaticSource(skills)));
    let prompt = events
        .iter()
        .find_map(|e| match e.data() {
            EventData::InboxSpliced(s) if !s.inserted.is_empty() => Some((*s.inserted[0]).clone()),
            _ => None,
        })
        .unwrap();
    let produced = run(Session::new(header), plugin, prompt, answers(&events));
    let recorded: Vec<Value> = events.iter().filter(|e| checked(e)).map(shape).collect();
    let produced: Vec<Value> = produced.iter().filter(|e| checked(e)).map(shape).collect();
    assert_eq!(recorded.len(), 2, "the catalog and the tool result");
    assert_eq!(recorded, produced);
}

fn tool_call_answer(name: &str) -> Vec<StreamChunk> {
    let args = format!("{{\"name\":\"{name}\"}}");
    vec![
        StreamChunk::block_start(0, "tool-call"),
        StreamChunk::tool_call_delta(0, "c1", Some("skill"), &args),
        StreamChunk::block_end(0, ContentBlock::tool_call("c1", "skill", &args)),
        StreamChunk::finish(FinishReason::ToolCalls),
    ]
}

fn text_answer(t: &str) -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::text_delta(0, t),
        StreamChunk::block_end(0, ContentBlock::text(t)),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

#[test]
fn a_skills_tree_with_a_bad_file_and_resources() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".dsh/skills");
    std::fs::create_dir_all(root.join("pdf-forms/scripts")).unwrap();
    std::fs::create_dir_all(root.join("broken")).unwrap();
    std::fs::create_dir_all(dir.path().join(".claude/skills/release-notes")).unwrap();
    std::fs::write(
        root.join("pdf-forms/SKILL.md"),
        "---\nname: pdf-forms\ndescription: Fill PDF forms with the bundled script.\n---\n\nRun `scripts/fill.py FORM DATA`.\n",
    )
    .unwrap();
    std::fs::write(root.join("pdf-forms/scripts/fill.py"), "print('filled')\n").unwrap();
    std::fs::write(
        root.join("broken/SKILL.md"),
        "---\nname: [broken\n---\nbody\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join(".claude/skills/release-notes/SKILL.md"),
        "---\nname: release-notes\ndescription: |\n  Write release notes\n  from the git log.\n---\nUse `git log --oneline`.\n",
    )
    .unwrap();
    let roots = dsh_skills::roots(dir.path(), &[], None, None);
    let (skills, notices) = dsh_skills::list(&roots);
    assert_eq!(
        skills.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["pdf-forms", "release-notes"]
    );
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("broken/SKILL.md") && notices[0].contains("invalid YAML frontmatter"),
        "{notices:?}"
    );
    let plugin = SkillsPlugin::from_roots(roots);
    let session = create_session(
        "s1".into(),
        Time::from_millis(1),
        Some(dir.path().display().to_string()),
    )
    .unwrap();
    let prompt = Message::user("u1", vec![ContentBlock::text("Fill the form.")]);
    let log = run(
        session,
        plugin,
        prompt,
        VecDeque::from([tool_call_answer("pdf-forms"), text_answer("done")]),
    );
    let catalog = log
        .iter()
        .find_map(|e| match e.data() {
            EventData::UserMessage(m) if m.source.kind() == "skill-catalog" => Some(m.clone()),
            _ => None,
        })
        .expect("the catalog was sent");
    let text = catalog.content[0].as_text().unwrap();
    assert!(text.contains("- `pdf-forms`: Fill PDF forms with the bundled script."));
    assert!(text.contains("- `release-notes`: Write release notes from the git log."));
    assert!(!text.contains("broken"));
    let result = log
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => Some(serde_json::to_string(&r.message).unwrap()),
            _ => None,
        })
        .unwrap();
    let base = root.join("pdf-forms").display().to_string();
    assert!(
        result.contains(&format!("Base directory for this skill: {base}")),
        "{result}"
    );
    assert!(result.contains("Run `scripts/fill.py FORM DATA`."));
    assert!(result.contains("\"isError\":false"));
    // Once per change: the second step sent no second catalog.
    let catalogs = log
        .iter()
        .filter(
            |e| matches!(e.data(), EventData::UserMessage(m) if m.source.kind() == "skill-catalog"),
        )
        .count();
    assert_eq!(catalogs, 1);
}

#[test]
fn unknown_skill_is_an_error_result_and_a_changed_catalog_is_resent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".agents/skills");
    std::fs::create_dir_all(root.join("one")).unwrap();
    std::fs::write(
        root.join("one/SKILL.md"),
        "---\nname: one\ndescription: First.\n---\nBody one.\n",
    )
    .unwrap();
    let roots = dsh_skills::roots(dir.path(), &[], None, None);
    let session = create_session("s2".into(), Time::from_millis(1), None).unwrap();
    let mut source = dsh_skills::FsSource { roots };
    let mut calls = 0;
    let root2 = root.clone();
    // The second scan onwards sees a new skill (written between steps).
    let scanning = move || {
        calls += 1;
        if calls == 2 {
            std::fs::create_dir_all(root2.join("two")).unwrap();
            std::fs::write(
                root2.join("two/SKILL.md"),
                "---\nname: two\ndescription: Second.\n---\nBody two.\n",
            )
            .unwrap();
        }
        dsh_skills::SkillSource::scan(&mut source)
    };
    let plugin = SkillsPlugin::new(Box::new(scanning));
    let log = run(
        session,
        plugin,
        Message::user("u1", vec![ContentBlock::text("go")]),
        VecDeque::from([tool_call_answer("nope"), text_answer("ok")]),
    );
    let result = log
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => Some(serde_json::to_string(&r.message).unwrap()),
            _ => None,
        })
        .unwrap();
    assert!(
        result.contains("skill \\\"nope\\\" is unknown or no longer available"),
        "{result}"
    );
    assert!(result.contains("\"isError\":true"));
    let catalogs: Vec<Value> = log
        .iter()
        .filter_map(|e| match e.data() {
            EventData::UserMessage(m) if m.source.kind() == "skill-catalog" => {
                Some(serde_json::to_value(&m.source).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(catalogs.len(), 2, "{catalogs:?}");
    assert_eq!(catalogs[1]["update"], true);
    assert_eq!(catalogs[1]["entries"].as_array().unwrap().len(), 2);
}

#[test]
fn slash_name_injects_the_skill() {
    let skills = vec![Skill::new(
        "deploy",
        "Deploys.",
        "/s/deploy",
        "Run make deploy.",
    )];
    let plugin = SkillsPlugin::new(Box::new(StaticSource(skills)));
    let session = create_session("s3".into(), Time::from_millis(1), None).unwrap();
    let log = run(
        session,
        plugin,
        Message::user("u1", vec![ContentBlock::text("/deploy please")]),
        VecDeque::from([text_answer("ok")]),
    );
    let injected = log
        .iter()
        .find_map(|e| match e.data() {
            EventData::UserMessage(m) if m.source.kind() == "skill-invocation" => Some(m.clone()),
            _ => None,
        })
        .expect("the skill was injected");
    assert!(
        injected.content[0]
            .as_text()
            .unwrap()
            .contains("Run make deploy.")
    );
}
