//! Subagents end to end in the std runtime against the bundled mock
//! DeepSeek server (loop.md SA-1 to SA-3): spawn and fork children stored
//! beside the parent and linked to it, the descriptor, the fork seed,
//! cancel propagation with cause parent, the depth cap, outcome mapping.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::agent::replay::{ReplayOptions, replay};
use dsh_core::session::{EventData, InvariantChecker, SessionEvent, SessionHeader};
use dsh_core::{ContentBlock, LlmCallConfig};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{ClientOptions, DeepSeekClient, DeepSeekConfig};
use dsh_std::subagents::{Delegation, Settings};
use dsh_std::{Agent, AgentConfig, CancelCause};
use dsh_store::{Cancel, SessionStore};
use serde_json::{Value, json};

const WAIT: Option<Duration> = Some(Duration::from_secs(20));

fn client_for(url: String) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(url),
        stream_idle_timeout_ms: 20_000,
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from("sk-test-key")))),
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).unwrap()
}

struct Rig {
    server: MockServer,
    store: Arc<dyn SessionStore>,
    delegation: Arc<Delegation>,
    work: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

fn rig(script: Value, max_depth: u64) -> Rig {
    let server = MockServer::start(Script::from_json(&script.to_string()).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let cfg =
        dsh_jsonl::JsonlConfig::new(dir.path()).with_compression(dsh_jsonl::Compression::None);
    let store: Arc<dyn SessionStore> = Arc::new(dsh_jsonl::open(cfg).unwrap());
    let url = server.url();
    let root = work.path().to_path_buf();
    let factory = Arc::new(move || Ok(base_config(&url, &root)));
    let settings = Settings {
        max_depth,
        ..Settings::default()
    };
    let delegation = Delegation::with_settings(store.clone(), factory, settings);
    Rig {
        server,
        store,
        delegation,
        work,
        _dir: dir,
    }
}

fn base_config(url: &str, root: &Path) -> AgentConfig {
    let provider = Arc::new(client_for(url.to_string()));
    let mut c = AgentConfig::new(
        provider,
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        root,
    );
    c.tool_timeout = Duration::from_secs(30);
    c
}

impl Rig {
    fn parent(&self) -> Agent {
        let mut config = base_config(&self.server.url(), self.work.path());
        self.delegation.install(&mut config);
        let id = dsh_std::new_session_id();
        Agent::create(config, self.store.clone(), id).unwrap()
    }

    fn headers(&self) -> Vec<SessionHeader> {
        self.store.list(&Cancel::new()).unwrap()
    }

    fn events(&self, header: &SessionHeader) -> Vec<SessionEvent> {
        self.store.load(&header.id).unwrap().events
    }
}

fn turn(text: &str) -> Value {
    json!({"turn": {"text": [text]}})
}

fn call(name: &str, args: Value) -> Value {
    json!({"turn": {"toolCalls": [{"id": "call_1", "name": name, "arguments": [args.to_string()]}]}})
}

fn types(events: &[SessionEvent]) -> Vec<&str> {
    events.iter().map(SessionEvent::event_type).collect()
}

fn assert_log_ok(header: &SessionHeader, events: &[SessionEvent]) {
    InvariantChecker::check_log(events).unwrap();
    let report = replay(header.clone(), events.to_vec(), ReplayOptions::default());
    assert!(report.identical(), "{report:?}");
}

fn tool_result(events: &[SessionEvent]) -> (String, bool) {
    events
        .iter()
        .find_map(|e| match e.data() {
            EventData::ToolResult(r) => {
                let v = serde_json::to_value(&r.message.content).unwrap();
                let block = &v[0];
                Some((
                    block["content"][0]["text"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    block["isError"] == json!(true),
                ))
            }
            _ => None,
        })
        .expect("a tool/result")
}

fn turn_end(events: &[SessionEvent]) -> Value {
    let e = events
        .iter()
        .rev()
        .find(|e| e.event_type() == "turn/end")
        .unwrap();
    serde_json::from_str::<Value>(&e.to_json()).unwrap()["data"]["reason"].clone()
}

fn data(e: &SessionEvent) -> Value {
    serde_json::from_str::<Value>(&e.to_json()).unwrap()["data"].clone()
}

#[test]
fn sa2_spawn_runs_a_linked_child_and_returns_its_answer() {
    let args = json!({"description": "Reply with CHILD_OK", "prompt": "Reply with exactly the word CHILD_OK and nothing else.", "run_in_background": false});
    let rig = rig(
        json!({"responses": [call("subagent", args), turn("CHILD_OK"), turn("PARENT_DONE")]}),
        3,
    );
    let parent = rig.parent();
    parent.send("Delegate it.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    let pheader = rig.headers().into_iter().find(|h| h.id == pid).unwrap();
    let pevents = rig.events(&pheader);
    assert_eq!(tool_result(&pevents), ("CHILD_OK".to_string(), false));
    assert_eq!(turn_end(&pevents), json!({"kind": "completed"}));
    assert_log_ok(&pheader, &pevents);

    // SA-1: one child, beside the parent, linked to it.
    let headers = rig.headers();
    assert_eq!(headers.len(), 2);
    let child = headers.iter().find(|h| h.id != pid).unwrap();
    assert_eq!(child.parent_session.as_ref(), Some(&pid));
    assert_eq!(child.origin.as_deref(), Some("subagent"));
    assert_eq!(child.delegation_depth, Some(1));
    assert_eq!(child.seed_length, None, "SA-2: no seed");
    assert_eq!(child.cwd, pheader.cwd);
    let cevents = rig.events(child);
    assert_log_ok(child, &cevents);
    // The descriptor, after the claim and before the first step.
    let t = types(&cevents);
    let at = t.iter().position(|t| *t == "subagent/descriptor").unwrap();
    assert_eq!(
        &t[at - 3..=at + 1],
        &[
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "subagent/descriptor",
            "step/start"
        ]
    );
    assert_eq!(
        data(&cevents[at]),
        json!({"version": 2, "mode": "one-shot", "provider": "spawn", "label": "Reply with CHILD_OK"})
    );
    // The child never asks (as the reference records it), then the prompt
    // went in as one followup (next-turn).
    assert_eq!(cevents[0].event_type(), "approval/policy");
    assert_eq!(
        data(&cevents[0]),
        json!({"policy": "never", "source": "delegation"})
    );
    assert_eq!(data(&cevents[1])["target"], "next-turn");
    assert_eq!(
        data(&cevents[1])["inserted"][0]["content"][0]["text"],
        "Reply with exactly the word CHILD_OK and nothing else."
    );
    assert_eq!(turn_end(&cevents), json!({"kind": "completed"}));
    // The child's request offered the same tools, subagent included.
    let requests = rig.server.requests();
    assert_eq!(requests.len(), 3);
    let body: Value = serde_json::from_str(&requests[1].body_text()).unwrap();
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"subagent") && names.contains(&"bash"),
        "{names:?}"
    );
}

#[test]
fn sa3_fork_seeds_the_child_with_the_completed_turns() {
    let args = json!({"description": "Recall project codeword", "prompt": "What is the project codeword? Reply with that one word."});
    let rig = rig(
        json!({"responses": [
            turn("OK"),
            call("subagent_fork", args),
            turn("MARMALADE"),
            turn("PARENT_DONE")
        ]}),
        3,
    );
    let parent = rig.parent();
    parent
        .send("Remember: the project codeword is MARMALADE. Reply OK.")
        .unwrap();
    parent.wait_idle(WAIT).unwrap();
    parent.send("Ask a forked child for the codeword.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    let pheader = rig.headers().into_iter().find(|h| h.id == pid).unwrap();
    let pevents = rig.events(&pheader);
    assert_eq!(tool_result(&pevents), ("MARMALADE".to_string(), false));
    assert_log_ok(&pheader, &pevents);

    let children = rig
        .headers()
        .into_iter()
        .filter(|h| h.id != pid)
        .collect::<Vec<_>>();
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(child.parent_session.as_ref(), Some(&pid));
    assert_eq!(child.origin.as_deref(), Some("subagent"));
    assert_eq!(child.delegation_depth, Some(1));
    // SA-3: the seed is the parent through its last turn/end (turn 1),
    // not the open turn 2; then session/end-seed.
    let first_end = pevents
        .iter()
        .find(|e| e.event_type() == "turn/end")
        .unwrap()
        .seq();
    let seed = first_end + 1;
    assert_eq!(child.seed_length, Some(seed));
    let cevents = rig.events(child);
    assert_log_ok(child, &cevents);
    let lines = |es: &[SessionEvent]| es.iter().map(SessionEvent::to_json).collect::<Vec<_>>();
    assert_eq!(
        lines(&cevents[..seed as usize]),
        lines(&pevents[..seed as usize])
    );
    assert_eq!(cevents[seed as usize].event_type(), "session/end-seed");
    assert_eq!(cevents[seed as usize + 1].event_type(), "approval/policy");
    // Turn numbering continues; the first request resumes (LC-17).
    let live = &cevents[seed as usize + 1..];
    let turn_start = live
        .iter()
        .find(|e| e.event_type() == "turn/start")
        .unwrap();
    assert_eq!(data(turn_start)["turn"], 2);
    let header = live
        .iter()
        .find(|e| e.event_type() == "request/header")
        .unwrap();
    assert_eq!(data(header)["reason"], "resume");
    let descriptor = live
        .iter()
        .find(|e| e.event_type() == "subagent/descriptor")
        .unwrap();
    assert_eq!(data(descriptor)["provider"], "fork");
    // The child's request carried the parent's first exchange.
    let requests = rig.server.requests();
    let body = requests[2].body_text();
    assert!(body.contains("MARMALADE") && body.contains("What is the project codeword"));
    assert!(
        !body.contains("Ask a forked child"),
        "the open turn is excluded"
    );
}

#[test]
fn sa2_cancel_of_the_parent_cancels_the_child_with_cause_parent() {
    let args = json!({"description": "Slow task", "prompt": "Take your time."});
    let rig = rig(
        json!({"responses": [
            call("subagent", args),
            {"turn": {"text": ["never", " delivered"], "delayMs": 5000}}
        ]}),
        3,
    );
    let parent = rig.parent();
    parent.send("Delegate a slow task.").unwrap();
    // Wait until the child's request is at the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.server.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the child never asked the model");
        std::thread::sleep(Duration::from_millis(10));
    }
    parent.cancel(CancelCause::User, false);
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    let pheader = rig.headers().into_iter().find(|h| h.id == pid).unwrap();
    let pevents = rig.events(&pheader);
    assert_eq!(
        turn_end(&pevents),
        json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    assert!(tool_result(&pevents).1, "the call ends in error");
    let children = rig.children_of_id(&pid);
    assert_eq!(children.len(), 1);
    let cevents = rig.events(&children[0]);
    assert_eq!(
        turn_end(&cevents),
        json!({"kind": "aborted", "reason": {"kind": "parent"}})
    );
    assert_log_ok(&children[0], &cevents);
}

#[test]
fn sa1_depth_cap_gives_the_child_a_clear_tool_error() {
    let args = json!({"description": "Nested", "prompt": "Delegate again."});
    let rig = rig(
        json!({"responses": [
            call("subagent", args.clone()),
            call("subagent", args),
            turn("I cannot delegate further."),
            turn("PARENT_DONE")
        ]}),
        1,
    );
    let parent = rig.parent();
    parent.send("Delegate twice.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    // No grandchild.
    assert_eq!(rig.headers().len(), 2);
    let children = rig.children_of_id(&pid);
    let cevents = rig.events(&children[0]);
    let (text, is_error) = tool_result(&cevents);
    assert!(is_error);
    assert!(
        text.contains("subagent depth cap reached") && text.contains("depth 1"),
        "{text}"
    );
    let pevents = rig.events(&rig.headers().into_iter().find(|h| h.id == pid).unwrap());
    assert_eq!(
        tool_result(&pevents),
        ("I cannot delegate further.".to_string(), false)
    );
}

#[test]
fn sa2_max_tokens_child_is_an_error_result_without_partial_output() {
    let args = json!({"description": "Long", "prompt": "Write a lot."});
    let rig = rig(
        json!({"responses": [
            call("subagent", args),
            {"turn": {"text": ["PARTIAL"], "finishReason": "length"}},
            turn("PARENT_DONE")
        ]}),
        3,
    );
    let parent = rig.parent();
    parent.send("Delegate.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    let children = rig.children_of_id(&pid);
    assert_eq!(
        turn_end(&rig.events(&children[0])),
        json!({"kind": "max-tokens"})
    );
    let pevents = rig.events(&rig.headers().into_iter().find(|h| h.id == pid).unwrap());
    let (text, is_error) = tool_result(&pevents);
    assert!(is_error);
    assert!(
        text.contains("output token limit") && !text.contains("PARTIAL"),
        "{text}"
    );
}

impl Rig {
    fn children_of_id(&self, id: &dsh_core::SessionId) -> Vec<SessionHeader> {
        self.headers()
            .into_iter()
            .filter(|h| h.parent_session.as_ref() == Some(id))
            .collect()
    }
}

fn scripted_call(calls: &[(&str, Value)]) -> dsh_std::ScriptedReply {
    use dsh_core::{FinishReason, StreamChunk};
    let mut chunks: Vec<StreamChunk> = calls
        .iter()
        .enumerate()
        .flat_map(|(i, (id, args))| {
            let (i, args) = (i as u64, args.to_string());
            [
                StreamChunk::block_start(i, "tool-call"),
                StreamChunk::tool_call_delta(i, id, Some("subagent"), &args),
                StreamChunk::block_end(i, ContentBlock::tool_call(*id, "subagent", args)),
            ]
        })
        .collect();
    chunks.push(StreamChunk::finish(FinishReason::ToolCalls));
    dsh_std::ScriptedReply::Chunks(chunks)
}

fn scripted_text(text: &str) -> dsh_std::ScriptedReply {
    use dsh_core::{FinishReason, StreamChunk};
    dsh_std::ScriptedReply::Chunks(vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: text.into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(text)),
        StreamChunk::finish(FinishReason::Stop),
    ])
}

/// A delegation whose children talk to `child_url` (the mock), and a
/// parent on `parent` (scripted), attached for background results.
fn background_rig(
    child_script: Value,
    parent: Arc<dsh_std::ScriptedProvider>,
    max_background: usize,
) -> (Rig, Agent, Arc<Delegation>) {
    let rig = rig(child_script, 3);
    let url = rig.server.url();
    let root = rig.work.path().to_path_buf();
    let settings = Settings {
        max_background,
        ..Settings::default()
    };
    let delegation = Delegation::with_settings(
        rig.store.clone(),
        Arc::new(move || Ok(base_config(&url, &root))),
        settings,
    );
    let mut config = AgentConfig::new(
        parent,
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        rig.work.path(),
    );
    delegation.install(&mut config);
    let agent = Agent::create(config, rig.store.clone(), dsh_std::new_session_id()).unwrap();
    delegation.attach(agent.session_id().clone(), agent.mailbox());
    (rig, agent, delegation)
}

#[test]
fn background_child_reports_back_with_a_settled_message() {
    let args = json!({"description": "Background job", "prompt": "Say BG_DONE.", "run_in_background": true});
    let parent_model = Arc::new(dsh_std::ScriptedProvider::new([
        scripted_call(&[("c1", args)]),
        scripted_text("waiting"),
        scripted_text("GOT IT"),
    ]));
    let (rig, parent, _) = background_rig(
        json!({"responses": [{"turn": {"text": ["BG_DONE"], "delayMs": 200}}]}),
        parent_model.clone(),
        2,
    );
    parent.send("Start it in the background.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    // The settled message wakes the parent (or enters its next step).
    let deadline = Instant::now() + Duration::from_secs(20);
    while parent_model.requests().len() < 3 {
        assert!(Instant::now() < deadline, "no report from the child");
        std::thread::sleep(Duration::from_millis(20));
    }
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    let pheader = rig.headers().into_iter().find(|h| h.id == pid).unwrap();
    let pevents = rig.events(&pheader);
    let (started, is_error) = tool_result(&pevents);
    assert!(!is_error);
    assert!(
        started.starts_with("Started background subagent"),
        "{started}"
    );
    let settled = pevents
        .iter()
        .find(|e| {
            e.event_type() == "user/message" && data(e)["source"]["kind"] == "subagent-settled"
        })
        .expect("a subagent-settled message");
    let child = rig.children_of_id(&pid).remove(0);
    assert_eq!(data(settled)["source"]["session"], child.id.as_str());
    let text = data(settled)["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("finished") && text.ends_with("BG_DONE"),
        "{text}"
    );
    // The model saw it.
    let last = parent_model.requests().pop().unwrap();
    assert!(format!("{:?}", last.messages).contains("BG_DONE"));
    assert_log_ok(&pheader, &pevents);
    assert_log_ok(&child, &rig.events(&child));
}

#[test]
fn background_children_are_bounded() {
    let args = |d: &str| json!({"description": d, "prompt": "Slow.", "run_in_background": true});
    let parent_model = Arc::new(dsh_std::ScriptedProvider::new([
        scripted_call(&[("c1", args("one")), ("c2", args("two"))]),
        scripted_text("ok"),
    ]));
    let (rig, parent, _) = background_rig(
        json!({"responses": [{"turn": {"text": ["late"], "delayMs": 5000}}]}),
        parent_model,
        1,
    );
    parent.send("Start two.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    let events = parent.events().unwrap();
    drop(parent);
    let results: Vec<Value> = events
        .iter()
        .filter(|e| e.event_type() == "tool/result")
        .map(|e| data(e)["message"]["content"][0].clone())
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["isError"], json!(false));
    assert_eq!(results[1]["isError"], json!(true));
    let text = results[1]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("1 background subagents are already running"),
        "{text}"
    );
    assert_eq!(rig.children_of_id(&pid).len(), 1);
}

#[test]
fn a_link_the_model_writes_is_refused() {
    // The tools without the plugin: the only link is the model's own.
    let forged = json!({"description": "d", "prompt": "p", "_dshParent": {"session": "someone-else", "depth": 0, "forkAt": null}});
    let parent_model = Arc::new(dsh_std::ScriptedProvider::new([
        scripted_call(&[("c1", forged)]),
        scripted_text("ok"),
    ]));
    let rig = rig(json!({"responses": []}), 3);
    let mut config = AgentConfig::new(
        parent_model,
        LlmCallConfig::new("deepseek", "deepseek-v4-flash"),
        rig.work.path(),
    );
    for tool in rig.delegation.tools() {
        config.tools.insert(tool);
    }
    let agent = Agent::create(config, rig.store.clone(), dsh_std::new_session_id()).unwrap();
    agent.send("Delegate.").unwrap();
    agent.wait_idle(WAIT).unwrap();
    let events = agent.events().unwrap();
    drop(agent);
    let (text, is_error) = tool_result(&events);
    assert!(is_error);
    assert!(
        text.contains("subagents plugin is not registered"),
        "{text}"
    );
    assert_eq!(rig.headers().len(), 1, "no child was started");
}

#[test]
fn shutdown_cancels_background_children_with_cause_parent() {
    let args = json!({"description": "Slow", "prompt": "Slow.", "run_in_background": true});
    let parent_model = Arc::new(dsh_std::ScriptedProvider::new([
        scripted_call(&[("c1", args)]),
        scripted_text("ok"),
    ]));
    let (rig, parent, delegation) = background_rig(
        json!({"responses": [{"turn": {"text": ["late"], "delayMs": 5000}}]}),
        parent_model,
        2,
    );
    parent.send("Start it.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.server.requests().is_empty() {
        assert!(Instant::now() < deadline, "the child never asked the model");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = parent.session_id().clone();
    drop(parent);
    let started = Instant::now();
    delegation.shutdown(Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let child = rig.children_of_id(&pid).remove(0);
    let events = rig.events(&child);
    assert_eq!(
        turn_end(&events),
        json!({"kind": "aborted", "reason": {"kind": "parent"}})
    );
    assert_log_ok(&child, &events);
}

/// "Workspace swap", for subagents: a child started after the
/// parent's workspace was moved away and another directory put at its path
/// uses the parent's opened workspace, so its `write` is refused and lands
/// in neither directory (opened by path, the child would follow the
/// replacement and write into it).
#[test]
fn a_child_started_after_a_workspace_swap_does_not_follow_it() {
    let args = json!({"description": "Write a file", "prompt": "Write child.txt.", "run_in_background": false});
    let write = json!({"file_path": "child.txt", "content": "from the child"});
    let rig = rig(
        json!({"responses": [
            call("subagent", args),
            call("write", write),
            turn("CHILD_DONE"),
            turn("PARENT_DONE")
        ]}),
        3,
    );
    let parent = rig.parent();
    let ws = rig.work.path().to_path_buf();
    let moved = ws.with_extension("moved");
    let other = tempfile::tempdir().unwrap();
    let other_dir = other.path().join("elsewhere");
    std::fs::create_dir(&other_dir).unwrap();
    std::fs::rename(&ws, &moved).unwrap();
    std::fs::rename(&other_dir, &ws).unwrap();
    parent.send("Delegate it.").unwrap();
    parent.wait_idle(WAIT).unwrap();
    let pid = parent.session_id().clone();
    drop(parent);
    let in_other: Vec<_> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let in_moved = moved.join("child.txt").exists();
    // Put the workspace back so the rig's temp dir removes it.
    std::fs::remove_dir_all(&ws).unwrap();
    std::fs::rename(&moved, &ws).unwrap();
    assert!(
        in_other.is_empty(),
        "the child wrote {in_other:?} into the directory swapped in"
    );
    assert!(!in_moved, "the refused write still reached the workspace");
    let child = rig.headers().into_iter().find(|h| h.id != pid).unwrap();
    let (text, is_error) = tool_result(&rig.events(&child));
    assert!(is_error, "{text}");
    assert!(text.contains("was moved or replaced"), "{text}");
}
