//! Embedding the async smol shell: one prompt, the live text printed as it
//! streams, approvals answered, then idle and dispose; then the stored
//! session (a JSONL file, header first) resumed by id for a second turn.
//!
//! ```text
//! cargo run -p dsh-smol --example embed_smol [PROMPT]
//! ```
//!
//! With `DEEPSEEK_API_KEY` set the prompt goes to DeepSeek; without it the
//! bundled mock server (`dsh_deepseek::mock`) answers one scripted turn, so
//! the example runs offline.

use std::error::Error;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::LlmCallConfig;
use dsh_core::agent::AgentStatus;
use dsh_core::session::{ChunkView, EventData};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{ClientOptions, DEFAULT_API_KEY_ENV, DeepSeekClient, DeepSeekConfig};
use dsh_smol::{
    Agent, AgentConfig, AgentEvent, ApprovalDecision, ApprovalMode, ApprovalPolicy, ModelProvider,
};

/// The mock's one agent turn: a `write` call (which asks for approval),
/// then the answer text.
const SCRIPT: &str = r#"{"responses":[
  {"turn":{"toolCalls":[{"id":"call_1","name":"write",
    "arguments":["{\"file_path\":\"hello.txt\",","\"content\":\"hello\\n\"}"]}]}},
  {"turn":{"text":["Wrote ","hello.txt ","for ","you."]}},
  {"turn":{"text":["I wrote ","hello.txt."]}}
]}"#;

/// One turn: send `prompt`, print the live text, answer approvals, wait
/// until idle.
async fn turn(agent: &Agent, prompt: &str) -> Result<(), Box<dyn Error>> {
    let events = agent.subscribe(); // a futures_core::Stream<Item = AgentEvent>
    agent.send(prompt).await?;
    while let Some(event) = events.next().await {
        match event {
            AgentEvent::Event(e) => {
                if let EventData::AssistantChunk(c) = e.data()
                    && let ChunkView::TextDelta { text, .. } = c.view()
                {
                    print!("{text}");
                    std::io::stdout().flush()?;
                }
            }
            AgentEvent::ApprovalRequested {
                id,
                tool,
                arguments,
                ..
            } => {
                // Every tool asks first (the policy above); refuse `bash`.
                let decision = if tool == "bash" {
                    ApprovalDecision::Deny
                } else {
                    ApprovalDecision::Allow
                };
                println!("[{tool} {arguments}: {decision:?}]");
                agent.answer_approval(id, decision).await;
            }
            AgentEvent::Error(message) => eprintln!("[error: {message}]"),
            AgentEvent::Status(AgentStatus::Idle) => break,
            _ => {}
        }
    }
    println!();
    let summary = agent.wait_idle(Some(Duration::from_secs(60))).await?;
    println!("turn {} ended {:?}", summary.turn, summary.reason);
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| String::from("Write hello.txt."));
    let dir = tempfile::tempdir()?; // sessions and the tools' workspace

    // The model: DeepSeek with the key from the environment, or the mock.
    let mut mock = None;
    let client = if std::env::var_os(DEFAULT_API_KEY_ENV).is_some() {
        DeepSeekClient::new(DeepSeekConfig::default())?
    } else {
        let server = MockServer::start(Script::from_json(SCRIPT)?)?;
        let model = DeepSeekConfig {
            base_url: Some(server.url()),
            ..DeepSeekConfig::default()
        };
        let options = ClientOptions {
            credentials: Some(Arc::new(|_: &str| Some(String::from("sk-mock")))),
            proxy_from_env: false,
            ..ClientOptions::default()
        };
        mock = Some(server);
        DeepSeekClient::with_options(model, options)?
    };
    let client: Arc<dyn ModelProvider> = Arc::new(client);
    let config = || {
        let call = LlmCallConfig::new("deepseek", "deepseek-v4-flash");
        let mut config = AgentConfig::new(client.clone(), call, dir.path());
        config.approval = ApprovalPolicy::new(ApprovalMode::Ask); // every tool call asks
        config
    };

    let store = Arc::new(dsh_jsonl::open(dsh_jsonl::JsonlConfig::new(dir.path()))?);
    smol::block_on(async {
        let agent = Agent::create(config(), store.clone(), "embed".into()).await?;
        turn(&agent, &prompt).await?;
        agent.dispose().await; // flushes the log, waits for the task to stop

        // Later (another process, after a crash): resume the stored
        // session by id. Its ids, turn numbers and history continue.
        let agent = Agent::resume(config(), store, &"embed".into()).await?;
        turn(&agent, "What did you write?").await?;
        agent.dispose().await;
        Ok::<_, Box<dyn Error>>(())
    })?;
    if let Ok(text) = std::fs::read_to_string(dir.path().join("hello.txt")) {
        println!("hello.txt: {text:?}");
    }
    drop(mock);
    Ok(())
}
