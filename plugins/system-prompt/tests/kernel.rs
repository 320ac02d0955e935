//! The plugins inside a bare runtime kernel (no std host, no I/O): what
//! the model receives over several turns of one session (loop.md SP-5,
//! LC-12; workspace instructions edited and deleted mid-session).

use dsh_core::Time;
use std::sync::{Arc, Mutex};

use dsh_core::agent::InboxTarget;
use dsh_core::agent::prompt::{HARNESS_IDENTITY, RUNTIME_CONTEXT_HEADER};
use dsh_core::{ContentBlock, FinishReason, GenerateOptions, LlmCallConfig, Message, StreamChunk};
use dsh_runtime::{AgentConfig, Effect, IdMode, Kernel, Plugin, create_session};
use dsh_system_prompt::{
    Facts, INSTRUCTIONS_GONE, InstructionFile, Instructions, SystemPrompt, render_instructions,
};

type Shared<T> = Arc<Mutex<T>>;

/// A kernel with both plugins over facts and files the test changes.
fn kernel(facts: Shared<Facts>, files: Shared<Vec<InstructionFile>>) -> Kernel {
    let mut config = AgentConfig::new(LlmCallConfig::new("mock", "mock"));
    config.ids = IdMode::Sequential;
    let session =
        create_session("s1".into(), Time::from_millis(1_000), Some("/repo".into())).unwrap();
    let plugins: Vec<Box<dyn Plugin>> = vec![
        Box::new(SystemPrompt::new().with_facts(move || facts.lock().unwrap().clone())),
        Box::new(Instructions::new(move || files.lock().unwrap().clone())),
    ];
    Kernel::new(config, session, 0, plugins).unwrap()
}

/// Runs one turn for `prompt`; returns the request the model got.
fn turn(kernel: &mut Kernel, n: u64, prompt: &str) -> GenerateOptions {
    let now = Time::from_millis(86_400_000 * 20_000 + n as i64); // 2024-10-04
    let m = Message::user(format!("u{n}"), vec![ContentBlock::text(prompt)]);
    kernel.send(now, m, InboxTarget::NextTurn, true).unwrap();
    let mut request = None;
    while let Some(effect) = kernel.poll() {
        match effect {
            Effect::StartModel(call) => {
                request = Some(call.request.clone());
                for chunk in [
                    StreamChunk::block_start(0, "text"),
                    StreamChunk::TextDelta {
                        index: 0,
                        text: format!("answer {n}").into(),
                    },
                    StreamChunk::block_end(0, ContentBlock::text(format!("answer {n}"))),
                    StreamChunk::finish(FinishReason::Stop),
                ] {
                    kernel.model_chunk(now, call.attempt, chunk).unwrap();
                }
                kernel.model_end(now, call.attempt).unwrap();
            }
            Effect::Persist { .. } => kernel.persisted(now, Ok(())).unwrap(),
            _ => {}
        }
    }
    request.expect("one model request")
}

fn texts(r: &GenerateOptions) -> Vec<String> {
    r.messages
        .iter()
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| b.as_text())
                .collect::<String>()
        })
        .collect()
}

#[test]
fn sp5_lc12_stable_prefix_and_instructions_mid_session() {
    let facts = Arc::new(Mutex::new(Facts {
        cwd: "/repo".into(),
        platform: "test os".into(),
        git: None,
    }));
    let files = Arc::new(Mutex::new(vec![InstructionFile {
        path: "/repo/AGENTS.md".into(),
        text: Ok("Use tabs.".into()),
        cut_from: None,
    }]));
    let mut k = kernel(facts.clone(), files.clone());
    let context = |cwd: &str| {
        format!(
            "{RUNTIME_CONTEXT_HEADER}Working directory: {cwd}\nPlatform: test os\nDate: 2024-10-04 (UTC)\nGit: not a git repository"
        )
    };

    let r1 = turn(&mut k, 1, "one");
    let system = r1.system.clone().unwrap();
    assert!(system.starts_with(HARNESS_IDENTITY));
    assert!(!system.contains("/repo"), "no fact in the system prompt");
    assert_eq!(
        texts(&r1),
        [
            render_instructions(&files.lock().unwrap()),
            "one".into(),
            context("/repo")
        ]
    );

    // Nothing changed: the earlier request is a prefix, no new context.
    let r2 = turn(&mut k, 2, "two");
    assert_eq!(r2.system, r1.system);
    assert_eq!(&r2.messages[..3], &r1.messages[..]);
    assert_eq!(texts(&r2)[3..], ["answer 1", "two"]);

    // The working directory and the instructions change mid-session.
    facts.lock().unwrap().cwd = "/repo/sub".into();
    files.lock().unwrap()[0].text = Ok("Use spaces.".into());
    let r3 = turn(&mut k, 3, "three");
    assert_eq!(r3.system, r1.system, "byte-identical system prompt");
    assert_eq!(&r3.messages[..5], &r2.messages[..]);
    assert_eq!(
        texts(&r3)[5..],
        [
            "answer 2".to_string(),
            render_instructions(&files.lock().unwrap()),
            "three".into(),
            context("/repo/sub")
        ]
    );

    // The file is deleted: the instructions are withdrawn, once.
    files.lock().unwrap().clear();
    let r4 = turn(&mut k, 4, "four");
    assert_eq!(&r4.messages[..9], &r3.messages[..]);
    assert_eq!(texts(&r4)[9..], ["answer 3", INSTRUCTIONS_GONE, "four"]);
    let r5 = turn(&mut k, 5, "five");
    assert_eq!(texts(&r5)[12..], ["answer 4", "five"]);
}
