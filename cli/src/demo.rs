//! `dsh demo`: a real agent turn through the whole stack with no key and no
//! network. The bundled mock DeepSeek server (`dsh_deepseek::mock`) serves
//! a scripted model on 127.0.0.1; the agent streams it over HTTP/SSE, runs
//! the real `write` and `bash` tools in a fresh temporary workspace, and
//! persists the session; then the command prints where the log is and how
//! to check and replay it.

use std::path::PathBuf;

use clap::Args;
use dsh_deepseek::mock::{MockServer, Script};

use crate::Outcome;
use crate::agent_cmd::{ViewArgs, completed, drive_one_turn};
use crate::provider::{DEFAULT_MODEL, Provider};
use crate::store::{StoreArgs, describe_location, new_session_id, now_ms};

/// The bundled mock script: the model writes `hello.txt`, checks it with
/// `bash`, then answers.
pub const DEMO_SCRIPT: &str = include_str!("assets/demo-script.json");

/// The script used when the tool set has no `write` tool: `bash` writes the
/// file, then `bash` checks it.
pub const DEMO_SCRIPT_BASH: &str = include_str!("assets/demo-script-bash.json");

/// The prompt of the demo turn.
pub const DEMO_PROMPT: &str = "Create hello.txt with a short greeting, then check what you wrote.";

/// `dsh demo`
#[derive(Args)]
pub struct DemoArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    view: ViewArgs,
    /// The workspace the tools work in (default: a new temporary directory,
    /// kept afterwards so you can look at it).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Outcome {
    match demo(&args) {
        Ok(true) => Outcome::Ok,
        Ok(false) => Outcome::CheckFailed,
        Err(e) => {
            eprintln!("dsh demo: {e}");
            Outcome::BadInput
        }
    }
}

fn demo(args: &DemoArgs) -> Result<bool, String> {
    let workspace = match &args.workspace {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            d.clone()
        }
        None => tempfile::Builder::new()
            .prefix("dsh-demo-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary workspace: {e}"))?
            .keep(),
    };
    let workspace =
        std::fs::canonicalize(&workspace).map_err(|e| format!("{}: {e}", workspace.display()))?;
    let text = if crate::shell::has_tool("write") {
        DEMO_SCRIPT
    } else {
        DEMO_SCRIPT_BASH
    };
    let script = Script::from_json(text).map_err(|e| format!("bundled script: {e}"))?;
    let server =
        MockServer::start_on(script, 0).map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let provider = Provider {
        base_url: Some(server.url()),
        model: DEFAULT_MODEL.to_string(),
        api_key_env: "DSH_DEMO_API_KEY".to_string(),
        has_key: false,
        client: crate::provider::ClientSettings::default(),
        effort: None,
        temperature: None,
        max_tokens: None,
    };
    let store = args.store.open()?;
    let config = crate::shell::agent_config(
        &provider,
        workspace.clone(),
        false,
        true,
        &crate::shell::PromptSettings::default(),
    )?;
    let id = new_session_id(now_ms());
    println!(
        "dsh demo: mock DeepSeek server at {} (scripted model, no network)",
        server.url()
    );
    println!("workspace: {}", workspace.display());
    println!("> {DEMO_PROMPT}");
    let agent = dsh_std::Agent::create(config, store.clone(), id.clone())
        .map_err(|e| format!("cannot start the agent: {e}"))?;
    let render = args.view.options();
    let outcome = drive_one_turn(&agent, DEMO_PROMPT, render, false, true);
    agent.dispose();
    drop(server);
    let location = describe_location(store.as_ref(), &args.store, &id);
    println!();
    println!("session {}: {location}", id.as_str());
    let ok = match &outcome {
        Ok(o) => completed(o),
        Err(e) => {
            eprintln!("dsh demo: {e}");
            false
        }
    };
    if location.ends_with("session.jsonl") {
        println!("check the log:    dsh log check {location}");
        println!("replay the turn:  dsh replay --check {location}");
    }
    println!("list sessions:    dsh sessions");
    println!("try a live model: export DEEPSEEK_API_KEY=sk-... && dsh chat");
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_deepseek::mock::ScriptedResponse;

    #[test]
    fn bundled_scripts_parse_and_call_two_tools_then_answer() {
        tool_names(DEMO_SCRIPT, &["write", "bash"]);
        tool_names(DEMO_SCRIPT_BASH, &["bash", "bash"]);
    }

    fn tool_names(text: &str, expected: &[&str]) {
        let script = Script::from_json(text).unwrap();
        let names: Vec<Vec<String>> = script
            .responses
            .iter()
            .map(|r| match r {
                ScriptedResponse::Turn(t) => t.tool_calls.iter().map(|c| c.name.clone()).collect(),
                ScriptedResponse::Fault(_) => vec!["fault".to_string()],
            })
            .collect();
        assert_eq!(
            names,
            vec![vec![expected[0]], vec![expected[1]], Vec::<&str>::new()]
        );
        // Every tool call's argument fragments join into a JSON object.
        for r in &script.responses {
            if let ScriptedResponse::Turn(t) = r {
                for c in &t.tool_calls {
                    let args: serde_json::Value =
                        serde_json::from_str(&c.arguments.concat()).unwrap();
                    assert!(args.is_object());
                }
            }
        }
    }
}
