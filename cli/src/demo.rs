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
use crate::sanitize::{eprintln_safe, println_safe};
use crate::store::{StoreArgs, describe_location, new_session_id, now_ms};

/// The bundled mock script: the model writes `hello.txt`, checks it with
/// `bash`, then answers.
pub const DEMO_SCRIPT: &str = include_str!("assets/demo-script.json");

/// The script used when the tool set has no `write` tool: `bash` writes the
/// file, then `bash` checks it.
pub const DEMO_SCRIPT_BASH: &str = include_str!("assets/demo-script-bash.json");

/// The scripted model of `dsh demo --scenario compaction`: two answers
/// whose reported usage crosses the demo's context window, the summary,
/// and two answers after the checkpoint.
pub const COMPACTION_SCRIPT: &str = include_str!("assets/demo-compaction-script.json");

/// The scripted model of `dsh demo --scenario subagent`: the parent
/// delegates to a spawned child, the child writes a file and answers, the
/// parent reports.
pub const SUBAGENT_SCRIPT: &str = include_str!("assets/demo-subagent-script.json");

/// The prompt of the subagent scenario.
pub const SUBAGENT_PROMPT: &str = "Delegate this to a subagent: create hello.txt with a one-line greeting. Then tell me what it did.";

/// The context window of the compaction scenario (tokens).
pub const COMPACTION_WINDOW: u64 = 7_000;

/// The prompts of the compaction scenario, one turn each.
pub const COMPACTION_PROMPTS: [&str; 4] = [
    "Remember: the service is called ledger, it runs on port 8080, and its tests live in tests/api.",
    "Also remember: retries use exponential backoff capped at 30 seconds; the config file is ledger.toml.",
    "What do you know about the service so far?",
    "Are you still with me?",
];

/// Which offline demo to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// One turn: the model writes a file and checks it with tools.
    #[default]
    Basic,
    /// Four turns that cross a small context window: pressure compaction
    /// summarises the older history and the conversation continues.
    Compaction,
    /// The model delegates to a spawned child agent (the `subagent` tool);
    /// the child's log is stored beside the parent's.
    Subagent,
}

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
    /// The scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::Basic)]
    scenario: Scenario,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Outcome {
    match demo(&args) {
        Ok(true) => Outcome::Ok,
        Ok(false) => Outcome::CheckFailed,
        Err(e) => {
            eprintln_safe!("dsh demo: {e}");
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
    let compaction = args.scenario == Scenario::Compaction;
    let subagent = args.scenario == Scenario::Subagent;
    let text = if compaction {
        COMPACTION_SCRIPT
    } else if subagent {
        SUBAGENT_SCRIPT
    } else if crate::shell::has_tool("write") {
        DEMO_SCRIPT
    } else {
        DEMO_SCRIPT_BASH
    };
    let script = Script::from_json(text).map_err(|e| format!("bundled script: {e}"))?;
    let server =
        MockServer::start_on(script, 0).map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let provider = Provider {
        api: crate::provider::Api::OpenAi,
        base_url: Some(crate::secrets::BaseUrl::new(server.url())),
        model: DEFAULT_MODEL.to_string(),
        images: false,
        attachments: None,
        api_key_env: "DSH_DEMO_API_KEY".to_string(),
        has_key: false,
        client: crate::provider::ClientSettings::default(),
        effort: None,
        temperature: None,
        max_tokens: None,
        context_window: None,
    };
    let store = args.store.open()?;
    let build = {
        let workspace = workspace.clone();
        move || {
            crate::shell::agent_config(
                &provider,
                workspace.clone(),
                false,
                true,
                &crate::shell::PromptSettings::default(),
            )
        }
    };
    let mut config = if subagent {
        crate::shell::delegating(store.clone(), build)?.0
    } else {
        build()?
    };
    if compaction {
        config
            .plugins
            .push(Box::new(dsh_compaction::Compaction::new(
                dsh_compaction::CompactionConfig {
                    context_window: Some(COMPACTION_WINDOW),
                    ..Default::default()
                },
            )));
    }
    let id = new_session_id(now_ms());
    println_safe!(
        "dsh demo: mock DeepSeek server at {} (scripted model, no network)",
        server.url()
    );
    println_safe!("workspace: {}", workspace.display());
    let agent = dsh_std::Agent::create(config, store.clone(), id.clone())
        .map_err(|e| format!("cannot start the agent: {e}"))?;
    let render = args.view.options();
    let prompts: &[&str] = if compaction {
        println_safe!("context window: {COMPACTION_WINDOW} tokens, compaction at 80%");
        &COMPACTION_PROMPTS
    } else if subagent {
        &[SUBAGENT_PROMPT]
    } else {
        &[DEMO_PROMPT]
    };
    let mut outcome = Err(String::from("no turn ran"));
    for prompt in prompts {
        println_safe!("> {prompt}");
        outcome = drive_one_turn(&agent, prompt, render, false, true);
        println!();
        if !outcome.as_ref().is_ok_and(completed) {
            break;
        }
    }
    if compaction && let Ok(events) = agent.events() {
        print_compaction_report(&events);
    }
    agent.dispose();
    drop(server);
    let location = describe_location(store.as_ref(), &args.store, &id);
    println!();
    println_safe!("session {}: {location}", id.as_str());
    let mut logs = vec![location.clone()];
    if subagent {
        for child in children_of(store.as_ref(), &id) {
            let at = describe_location(store.as_ref(), &args.store, &child);
            println_safe!("  subagent {}: {at}", child.as_str());
            logs.push(at);
        }
    }
    let ok = match &outcome {
        Ok(o) => completed(o),
        Err(e) => {
            eprintln_safe!("dsh demo: {e}");
            false
        }
    };
    for log in logs.iter().filter(|l| l.ends_with("session.jsonl")) {
        println_safe!("check the log:    dsh log check {log}");
        println_safe!("replay the turn:  dsh replay --check {log}");
    }
    println!("list sessions:    dsh sessions");
    println!("try a live model: export DEEPSEEK_API_KEY=sk-... && dsh chat");
    Ok(ok)
}

/// The sessions whose header names `parent` as `parentSession` (SA-1),
/// oldest first.
fn children_of(
    store: &dyn dsh_store::SessionStore,
    parent: &dsh_core::SessionId,
) -> Vec<dsh_core::SessionId> {
    let mut children: Vec<_> = store
        .list(&dsh_store::Cancel::new())
        .unwrap_or_default()
        .into_iter()
        .filter(|h| h.parent_session.as_ref() == Some(parent))
        .collect();
    children.sort_by_key(|h| h.created_at);
    children.into_iter().map(|h| h.id).collect()
}

/// Per turn: the tokens the provider reported, and the derived history
/// the next request starts from, with and without the compaction; then
/// each compaction.
fn print_compaction_report(events: &[dsh_core::session::SessionEvent]) {
    use dsh_core::session::{EventData, SurfaceOp};
    let size = |m: &dsh_core::Message| serde_json::to_string(m).map(|j| j.len() / 4).unwrap_or(0);
    println!();
    println!("turn  reported tokens  history (messages, ~tokens)  without compaction");
    let header = dsh_core::SessionHeader::new("report", 0);
    for (i, e) in events.iter().enumerate() {
        let EventData::TurnEnd(t) = e.data() else {
            continue;
        };
        let used: i64 = events[..i]
            .iter()
            .rev()
            .find_map(|e| match e.data() {
                EventData::AssistantMessage(m) => m.usage,
                _ => None,
            })
            .map(|u| u.input_tokens + u.output_tokens + u.cache_read_tokens.unwrap_or(0))
            .unwrap_or(0);
        let Ok(mut s) = dsh_core::Session::restore(header.clone(), events[..=i].to_vec()) else {
            continue;
        };
        let messages = s.derive_messages().to_vec();
        let tokens: usize = messages.iter().map(|m| size(m)).sum();
        // Every message ever appended to the surface, none replaced.
        let all: Vec<_> = events[..=i]
            .iter()
            .filter(|e| e.surface_op() == Some(SurfaceOp::Append))
            .filter_map(|e| e.derived_message())
            .collect();
        let all_tokens: usize = all.iter().map(|m| size(m)).sum();
        println_safe!(
            "{:>4}  {:>15}  {:>3} messages, ~{:<5} tokens  {:>3} messages, ~{} tokens",
            t.turn,
            used,
            messages.len(),
            tokens,
            all.len(),
            all_tokens
        );
    }
    for e in events {
        if e.event_type() == dsh_compaction::SUMMARY
            && let EventData::Plugin(p) = e.data()
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(p.data.get())
        {
            println_safe!(
                "compaction at seq {}: shadowed seqs {} (~{} tokens) replaced by a summary",
                e.seq(),
                v["shadowedSeqs"],
                v["shadowedTokenCount"]
            );
        }
    }
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
