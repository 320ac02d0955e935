//! The compaction plugin on the kernel, sans-IO (loop.md CP-1 to CP-4,
//! LC-26, SM-4): a scripted session driven past a small context window.

use dsh_compaction::{CONTEXT_WINDOW_EXCEEDED, Compaction, CompactionConfig, locked};
use dsh_core::Time;
use dsh_core::agent::replay::{ReplayOptions, replay};
use dsh_core::session::{EventData, SurfaceOp};
use dsh_core::{
    ContentBlock, FinishReason, GenerateOptions, LlmCallConfig, LlmFailure, Message, Session,
    StreamChunk, TokenUsage,
};
use dsh_runtime::{
    AgentConfig, CancelCause, Effect, IdMode, InboxTarget, Kernel, Plugin, Reply, SideReply,
    create_session, resume_session,
};

const NOW: Time = Time::from_millis(1_000_000);

fn config(window: u64) -> CompactionConfig {
    CompactionConfig {
        context_window: Some(window),
        ..CompactionConfig::default()
    }
}

fn kernel_over(session: Session, window: u64) -> Kernel {
    let mut config_ = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config_.ids = IdMode::Sequential;
    let plugins: Vec<Box<dyn Plugin>> = vec![Box::new(Compaction::new(config(window)))];
    Kernel::new(config_, session, 0, plugins).unwrap()
}

fn kernel_over_checked(session: Session, window: u64) -> Kernel {
    let mut config_ = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config_.ids = IdMode::Sequential;
    let plugins: Vec<Box<dyn Plugin>> = vec![Box::new(Compaction::new(config(window)))];
    match Kernel::new(config_, session, 0, plugins) {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    }
}

fn kernel(window: u64) -> Kernel {
    kernel_over(create_session("c1".into(), NOW, None).unwrap(), window)
}

fn user(k: &mut Kernel, text: &str) {
    let id = format!("u{}", k.session().len());
    let m = Message::user(id, vec![ContentBlock::text(long(text))]);
    k.send(NOW, m, InboxTarget::NextTurn, true).unwrap();
}

/// A message of ~300 tokens starting with `text`.
fn long(text: &str) -> String {
    format!("{text}: {}", "lorem ipsum ".repeat(100))
}

fn reply(text: &str, input: i64, output: i64) -> Vec<StreamChunk> {
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: long(text).into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(long(text))),
        StreamChunk::usage(TokenUsage::new(input, output)),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

fn overflow() -> Vec<StreamChunk> {
    vec![StreamChunk::finish(FinishReason::Error {
        failure: LlmFailure::new(CONTEXT_WINDOW_EXCEEDED, "prompt too long"),
    })]
}

/// What the scripted world saw.
#[derive(Default)]
struct Seen {
    requests: Vec<GenerateOptions>,
    side: Vec<GenerateOptions>,
}

/// Drives the kernel until idle: model attempts take the next scripted
/// reply, side calls the next scripted summary.
fn run(
    k: &mut Kernel,
    models: &mut Vec<Vec<StreamChunk>>,
    summaries: &mut Vec<Result<SideReply, String>>,
    seen: &mut Seen,
) {
    for _ in 0..1_000 {
        let Some(e) = k.poll() else { break };
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::StartModel(call) => {
                seen.requests.push(call.request.clone());
                let chunks = models.remove(0);
                for c in chunks {
                    k.model_chunk(NOW, call.attempt, c).unwrap();
                }
                k.model_end(NOW, call.attempt).unwrap();
            }
            Effect::SideModel { id, request, .. } => {
                seen.side.push(request);
                let r = summaries.remove(0);
                k.answer(NOW, id, Reply::Model(r)).unwrap();
            }
            _ => {}
        }
    }
}

fn summary(text: &str) -> Result<SideReply, String> {
    Ok(SideReply::new(text, Some(TokenUsage::new(40, 5))))
}

fn types(s: &Session) -> Vec<String> {
    s.events()
        .iter()
        .map(|e| e.event_type().to_string())
        .collect()
}

fn tokens(r: &GenerateOptions) -> usize {
    serde_json::to_string(&r.messages).unwrap().len() / 4
}

fn assert_replays(s: &Session) {
    // The log validates as a seed (V-rules) and replays identically.
    Session::restore(s.header().clone(), s.events().to_vec()).unwrap();
    let report = replay(
        s.header().clone(),
        s.events().to_vec(),
        ReplayOptions::default(),
    );
    assert!(report.identical(), "{report:?}");
}

fn last_turn_end(s: &Session) -> String {
    s.events()
        .iter()
        .rev()
        .find(|e| e.event_type() == "turn/end")
        .map(|e| e.to_json())
        .unwrap()
}

/// CP-3 (a), CP-2, CP-1: pressure before a step summarises the older
/// surface; the derived history shrinks; the turn continues.
#[test]
fn pressure_compacts_before_the_step_and_the_conversation_continues() {
    let mut k = kernel(1_000);
    let mut models = vec![
        reply("one", 300, 50),
        reply("two", 700, 150),
        reply("three", 200, 20),
        reply("four", 260, 20),
    ];
    let mut summaries = vec![summary("the user said one and two")];
    let mut seen = Seen::default();
    for text in ["first", "second", "third", "fourth"] {
        user(&mut k, text);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    assert!(k.is_idle());
    for (i, r) in seen.requests.iter().enumerate() {
        println!(
            "turn {}: {} messages, ~{} tokens",
            i + 1,
            r.messages.len(),
            tokens(r)
        );
    }
    // Turn 3 found 850 reported tokens >= 0.8 * 1000: one summary call.
    assert_eq!(seen.side.len(), 1);
    assert_eq!(seen.side[0].purpose, Some(dsh_core::Purpose::Compaction));
    assert_eq!(seen.requests[1].messages.len(), 3);
    // Without compaction turn 3 would send 5 messages (turn 2's 3, its
    // answer, the new prompt); it sent 4: the summary replaced the first
    // exchange (the pending prompt is not on the surface yet, SM-8).
    assert_eq!(seen.requests[2].messages.len(), 4);
    let msg = tokens(&seen.requests[0]);
    assert!(
        tokens(&seen.requests[2]) + msg < tokens(&seen.requests[1]) + 2 * msg,
        "the history shrank"
    );
    let sent = serde_json::to_string(&seen.requests[2].messages).unwrap();
    assert!(!sent.contains("first:") && !sent.contains("one:"), "{sent}");
    let first = &seen.requests[2].messages[0];
    assert_eq!(
        dsh_compaction::summary_text(first).as_deref(),
        Some("the user said one and two")
    );
    // Turn 4 had no pressure (fresh usage 220): no second summary.
    assert_eq!(seen.requests[3].messages.len(), 6);
    let s = k.session();
    let t = types(s);
    let start = t.iter().position(|x| x == "compaction/start").unwrap();
    assert_eq!(
        &t[start..start + 4],
        [
            "compaction/start",
            "compaction/summary",
            "user/message",
            "compaction/end"
        ]
    );
    let replacing = &s.events()[start + 2];
    assert!(matches!(
        replacing.surface_op(),
        Some(SurfaceOp::Replace { .. })
    ));
    let src = serde_json::to_value(&**replacing.derived_message().unwrap()).unwrap();
    assert_eq!(
        src["source"],
        serde_json::json!({"kind":"plugin","plugin":"compact"})
    );
    let end = s.events()[start + 3].to_json();
    let id = format!("compaction-{}", s.events()[start].seq());
    let want = format!(r#""data":{{"compactionId":"{id}","turn":3}}"#);
    assert!(end.contains(&want), "{end}");
    assert!(s.events()[start].to_json().contains(&want));
    let summary = s.events()[start + 1].to_json();
    assert!(
        summary.contains(&format!(r#""compactionId":"{id}","summary":"#)),
        "{summary}"
    );
    assert!(!locked(s));
    assert_replays(s);
    assert!(
        last_turn_end(s).contains("completed"),
        "{}",
        last_turn_end(s)
    );
}

/// CP-3 (b), LC-26, SM-4: overflow compacts and retries once in the same
/// step.
#[test]
fn overflow_compacts_and_retries_once() {
    let mut k = kernel(1_000_000);
    let mut models = vec![
        reply("one", 10, 5),
        reply("two", 10, 5),
        overflow(),
        reply("three", 10, 5),
    ];
    let mut summaries = vec![summary("earlier: one, two")];
    let mut seen = Seen::default();
    for text in ["first", "second", "third"] {
        user(&mut k, text);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    assert_eq!(seen.side.len(), 1);
    assert_eq!(seen.requests.len(), 4);
    assert_eq!(seen.requests[2].messages.len(), 5);
    assert_eq!(seen.requests[3].messages.len(), 3);
    let s = k.session();
    let t = types(s);
    // The retry is in the same step: one step/start for turn 3.
    let turn3 = t.iter().rposition(|x| x == "turn/start").unwrap();
    assert_eq!(t[turn3..].iter().filter(|x| *x == "step/start").count(), 1);
    assert!(t.contains(&"compaction/summary".to_string()));
    assert!(last_turn_end(s).contains("completed"));
    assert_replays(s);
}

/// CP-3 (b): when compaction cannot shrink the surface the provider's
/// failure ends the turn verbatim; a second overflow in the same step is
/// not retried again.
#[test]
fn overflow_fails_clearly_when_nothing_can_be_compacted() {
    let mut k = kernel(1_000_000);
    let mut models = vec![overflow()];
    let mut summaries = vec![];
    let mut seen = Seen::default();
    user(&mut k, "only message");
    run(&mut k, &mut models, &mut summaries, &mut seen);
    assert!(seen.side.is_empty());
    let end = last_turn_end(k.session());
    assert!(end.contains(CONTEXT_WINDOW_EXCEEDED), "{end}");

    let mut k = kernel(1_000_000);
    let mut models = vec![reply("one", 1, 1), overflow(), overflow()];
    let mut summaries = vec![summary("s")];
    let mut seen = Seen::default();
    user(&mut k, "a");
    run(&mut k, &mut models, &mut summaries, &mut seen);
    user(&mut k, "b");
    run(&mut k, &mut models, &mut summaries, &mut seen);
    assert_eq!(seen.side.len(), 1);
    assert_eq!(seen.requests.len(), 3);
    let end = last_turn_end(k.session());
    assert!(end.contains(CONTEXT_WINDOW_EXCEEDED), "{end}");
    assert_replays(k.session());
}

/// CP-2: a failed summary closes the bracket with `error`; nothing is
/// replaced and the turn goes on.
#[test]
fn failed_summary_closes_the_bracket_with_error_and_the_turn_goes_on() {
    let mut k = kernel(100);
    let mut models = vec![reply("one", 90, 5), reply("two", 90, 5), reply("3", 90, 5)];
    let mut summaries = vec![Err("RATE_LIMITED: slow down".to_string())];
    let mut seen = Seen::default();
    for text in ["first", "second", "third"] {
        user(&mut k, text);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    let s = k.session();
    let end = s
        .events()
        .iter()
        .find(|e| e.event_type() == "compaction/end")
        .unwrap()
        .to_json();
    assert!(
        end.contains(r#""error":"RATE_LIMITED: slow down""#),
        "{end}"
    );
    assert!(!types(s).contains(&"compaction/summary".to_string()));
    assert_eq!(s.surface().replace_generation, 0);
    assert_eq!(seen.requests[2].messages.len(), 5);
    assert!(last_turn_end(s).contains("completed"));
    assert!(!locked(s));
    assert_replays(s);
}

/// CP-2 stale-lock rule: a crash between `compaction/start` and
/// `compaction/end` leaves a lock; after reload (a `session/end-seed`) it is
/// stale and the next compaction runs.
#[test]
fn crash_during_compaction_leaves_a_stale_lock_and_the_next_one_runs() {
    let mut k = kernel(1_000);
    let mut models = vec![reply("one", 300, 50), reply("two", 700, 150)];
    let mut summaries = vec![];
    let mut seen = Seen::default();
    for text in ["first", "second"] {
        user(&mut k, text);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    user(&mut k, "third");
    // Drive until the summary call is asked for, then "crash".
    let mut crashed = None;
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::SideModel { .. } => {
                crashed = Some(k.session().clone());
                break;
            }
            _ => {}
        }
    }
    let crashed = crashed.expect("a summary was asked for");
    assert_eq!(
        crashed.last_event().unwrap().event_type(),
        "compaction/start"
    );
    assert!(locked(&crashed), "an unmatched compaction/start is a lock");
    // The stored log holds everything up to the crash; loading it runs
    // crash repair (the open turn closes as interrupted, 6.4).
    let mut stored = crashed.events().to_vec();
    stored.extend(dsh_core::jsonl::interrupted_turn_closers(&stored));
    let resumed = resume_session(crashed.header().clone(), stored, NOW + 1).unwrap();
    assert!(!locked(&resumed), "a lock before session/end-seed is stale");
    let mut k = kernel_over_checked(resumed, 1_000);
    let mut models = vec![reply("three", 100, 10)];
    let mut summaries = vec![summary("one and two")];
    let mut seen = Seen::default();
    user(&mut k, "third again");
    run(&mut k, &mut models, &mut summaries, &mut seen);
    assert_eq!(seen.side.len(), 1, "the next compaction ran");
    let t = types(k.session());
    assert_eq!(t.iter().filter(|x| *x == "compaction/start").count(), 2);
    assert_eq!(t.iter().filter(|x| *x == "compaction/end").count(), 1);
    assert!(last_turn_end(k.session()).contains("completed"));
}

/// CP-2 pruning: old long tool results are replaced model-free first.
#[test]
fn pressure_prunes_old_tool_results_first() {
    use dsh_core::agent::tools::{ToolDefinition, ToolOutcome, ToolRegistry};
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolDefinition::untyped(
            "cat",
            "cat",
            serde_json::json!({"type":"object"}),
        ))
        .unwrap();
    let mut cfg = AgentConfig::new(LlmCallConfig::new("p", "m"));
    cfg.ids = IdMode::Sequential;
    cfg.tools = tools;
    let plugin = Compaction::new(CompactionConfig {
        context_window: Some(10_000),
        prune_min_chars: 100,
        prune_keep_recent: 1,
        ..CompactionConfig::default()
    });
    let session = create_session("p1".into(), NOW, None).unwrap();
    let mut k = Kernel::new(cfg, session, 0, vec![Box::new(plugin)]).unwrap();
    let call = |id: &str, input: i64| {
        vec![
            StreamChunk::block_start(0, "tool-call"),
            StreamChunk::block_end(0, ContentBlock::tool_call(id, "cat", "{}")),
            StreamChunk::usage(TokenUsage::new(input, 10)),
            StreamChunk::finish(FinishReason::ToolCalls),
        ]
    };
    let mut models = vec![call("c1", 100), call("c2", 8_300), reply("done", 9_000, 10)];
    let mut requests = Vec::new();
    user(&mut k, "read twice");
    for _ in 0..1_000 {
        let Some(e) = k.poll() else { break };
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::StartModel(c) => {
                requests.push(c.request.clone());
                for ch in models.remove(0) {
                    k.model_chunk(NOW, c.attempt, ch).unwrap();
                }
                k.model_end(NOW, c.attempt).unwrap();
            }
            Effect::StartTool { exec, .. } => {
                let out = ToolOutcome::success(vec![ContentBlock::text("x".repeat(2_000))]);
                k.tool_done(NOW, exec.token, out, Vec::new()).unwrap();
            }
            Effect::SideModel { .. } => panic!("pruning was enough"),
            _ => {}
        }
    }
    let s = k.session();
    let t = types(s);
    let p = t.iter().position(|x| x == "compaction/prune").unwrap();
    assert_eq!(t[p + 1], "tool/result");
    let pruned = &s.events()[p + 1];
    assert!(matches!(
        pruned.surface_op(),
        Some(SurfaceOp::Replace { .. })
    ));
    let EventData::ToolResult(r) = pruned.data() else {
        panic!()
    };
    let text = serde_json::to_string(&*r.message).unwrap();
    assert!(text.contains("pruned"), "{text}");
    // The third request saw the pruned first result and the verbatim second.
    let last = serde_json::to_string(&requests[2].messages).unwrap();
    assert_eq!(last.matches(&"x".repeat(2_000)).count(), 1);
    assert_eq!(t.iter().filter(|x| *x == "compaction/prune").count(), 1);
    assert_replays(s);
}

/// CP-3 (c): the manual run is maintenance with `turn: null`; its result
/// comes back as `AgentEvent::CommandDone`; a second run with nothing left
/// to shadow says so.
#[test]
fn manual_compaction_runs_as_maintenance_with_turn_null() {
    let mut k = kernel(1_000_000);
    let mut models = vec![reply("one", 1, 1), reply("two", 1, 1), reply("3", 1, 1)];
    let mut summaries = vec![summary("one and two")];
    let mut seen = Seen::default();
    for text in ["first", "second"] {
        user(&mut k, text);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    let before = k.session().surface().nodes.len();
    k.command(NOW, dsh_compaction::COMMAND, serde_json::json!({}))
        .unwrap();
    let mut done = Vec::new();
    for _ in 0..100 {
        let Some(e) = k.poll() else { break };
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::SideModel { id, .. } => k
                .answer(NOW, id, Reply::Model(summaries.remove(0)))
                .unwrap(),
            Effect::Publish(dsh_runtime::AgentEvent::CommandDone { name, result, .. }) => {
                done.push((name, result))
            }
            _ => {}
        }
    }
    assert_eq!(
        done,
        vec![(
            "compact".to_string(),
            Ok(serde_json::json!({"compacted": true}))
        )]
    );
    let s = k.session();
    assert!(s.surface().nodes.len() < before);
    let start = s
        .events()
        .iter()
        .find(|e| e.event_type() == "compaction/start")
        .unwrap()
        .to_json();
    assert!(start.contains(r#""turn":null"#), "{start}");
    assert!(k.is_idle());
    // The conversation continues after the manual run.
    user(&mut k, "third");
    run(&mut k, &mut models, &mut summaries, &mut seen);
    assert_eq!(seen.requests[2].messages.len(), 4, "5 without the summary");
    assert!(last_turn_end(k.session()).contains("completed"));
    assert_replays(k.session());
}

/// An abort while the summary call is in flight stops that call
/// (`Effect::CancelSide` names it) and closes the bracket; its late answer
/// is refused as stale and changes nothing.
#[test]
fn an_abort_during_the_summary_call_cancels_it() {
    let mut k = kernel(1_000);
    let mut models = vec![reply("one", 300, 50), reply("two", 700, 150)];
    let mut summaries = vec![];
    let mut seen = Seen::default();
    for text in ["first", "second"] {
        user(&mut k, text);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    user(&mut k, "third");
    let mut side = None;
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::SideModel { id, .. } => {
                side = Some(id);
                break;
            }
            _ => {}
        }
    }
    let side = side.expect("a summary was asked for");
    k.cancel(NOW, CancelCause::User, false);
    let mut cancelled = Vec::new();
    while let Some(e) = k.poll() {
        match e {
            Effect::Persist { .. } => k.persisted(NOW, Ok(())).unwrap(),
            Effect::CancelSide { id } => cancelled.push(id),
            _ => {}
        }
    }
    assert_eq!(cancelled, vec![side], "the summary call is stopped");
    let before = k.session().len();
    assert!(
        k.answer(NOW, side, Reply::Model(summary("late"))).is_err(),
        "a late answer is stale"
    );
    assert_eq!(k.session().len(), before, "and changes nothing");
    let t = types(k.session());
    assert!(t.contains(&"compaction/end".to_string()), "{t:?}");
    assert!(last_turn_end(k.session()).contains("aborted"), "{t:?}");
    assert!(!locked(k.session()), "no lock is left");
}

/// A reply of about `tokens` tokens (bytes / 4) and no usage, as a server
/// that reports none sends it.
fn reply_without_usage(text: &str, tokens: usize) -> Vec<StreamChunk> {
    let body = format!("{text}: {}", "word ".repeat(tokens * 4 / 5));
    vec![
        StreamChunk::block_start(0, "text"),
        StreamChunk::TextDelta {
            index: 0,
            text: body.clone().into(),
        },
        StreamChunk::block_end(0, ContentBlock::text(body)),
        StreamChunk::finish(FinishReason::Stop),
    ]
}

fn big_user(k: &mut Kernel, text: &str, tokens: usize) {
    let id = format!("u{}", k.session().len());
    let body = format!("{text}: {}", "word ".repeat(tokens * 4 / 5));
    let m = Message::user(id, vec![ContentBlock::text(body)]);
    k.send(NOW, m, InboxTarget::NextTurn, true).unwrap();
}

/// Four turns of ~1500-token prompts and answers against an 8k window on
/// a server that reports no usage; `estimate` is the plugin's
/// `estimate_unreported`. Returns the summary calls made.
fn eight_k_without_usage(estimate: bool) -> (usize, Session) {
    let mut config_ = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config_.ids = IdMode::Sequential;
    let plugin = Compaction::new(CompactionConfig {
        context_window: Some(8_192),
        estimate_unreported: estimate,
        ..CompactionConfig::default()
    });
    let session = create_session("c1".into(), NOW, None).unwrap();
    let mut k = Kernel::new(config_, session, 0, vec![Box::new(plugin)]).unwrap();
    let mut models: Vec<_> = ["one", "two", "three", "four"]
        .iter()
        .map(|t| reply_without_usage(t, 1_500))
        .collect();
    let mut summaries = vec![summary("the user said one and two")];
    let mut seen = Seen::default();
    for text in ["first", "second", "third", "fourth"] {
        big_user(&mut k, text, 1_500);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    assert!(k.is_idle());
    (seen.side.len(), k.session().clone())
}

/// CP-3 (a): a server that reports no usage still gets pressure
/// compaction when the plugin estimates (bytes / 4 of the surface): on an
/// 8k window, turn 4's ~9000 estimated tokens (six messages) cross 80%;
/// without the estimate nothing measures the pressure and no compaction
/// runs. The log keeps no invented usage and replays.
#[test]
fn estimated_usage_compacts_an_8k_window_without_reported_usage() {
    let (summaries, s) = eight_k_without_usage(true);
    assert_eq!(summaries, 1, "one pressure compaction");
    assert!(types(&s).iter().any(|t| t == "compaction/start"));
    assert!(
        !s.events().iter().any(
            |e| e.to_json().contains("inputTokens\":") && e.event_type() == "assistant/message"
        ),
        "no estimate is logged as reported usage"
    );
    assert_replays(&s);
    let (summaries, s) = eight_k_without_usage(false);
    assert_eq!(summaries, 0);
    assert!(!types(&s).iter().any(|t| t == "compaction/start"));
}

/// The estimate measures only sessions whose server never
/// reported usage; once a reply carries usage, the reported figure rules
/// (here below the threshold, so no compaction).
#[test]
fn reported_usage_wins_over_the_estimate() {
    let mut config_ = AgentConfig::new(LlmCallConfig::new("p", "m"));
    config_.ids = IdMode::Sequential;
    let plugin = Compaction::new(CompactionConfig {
        context_window: Some(8_192),
        estimate_unreported: true,
        ..CompactionConfig::default()
    });
    let session = create_session("c1".into(), NOW, None).unwrap();
    let mut k = Kernel::new(config_, session, 0, vec![Box::new(plugin)]).unwrap();
    let mut models: Vec<_> = ["one", "two", "three", "four"]
        .iter()
        .map(|t| {
            let mut r = reply_without_usage(t, 1_500);
            r.insert(r.len() - 1, StreamChunk::usage(TokenUsage::new(100, 10)));
            r
        })
        .collect();
    let mut summaries = vec![summary("unused")];
    let mut seen = Seen::default();
    for text in ["first", "second", "third", "fourth"] {
        big_user(&mut k, text, 1_500);
        run(&mut k, &mut models, &mut summaries, &mut seen);
    }
    assert_eq!(seen.side.len(), 0);
}

#[test]
fn the_estimate_counts_the_surface_and_the_header() {
    let mut s = create_session("c1".into(), NOW, None).unwrap();
    assert_eq!(dsh_compaction::estimated_usage(&s), 0);
    let mut k = kernel_over(s.clone(), 1_000_000);
    big_user(&mut k, "first", 1_000);
    let mut models = vec![reply_without_usage("one", 1_000)];
    run(&mut k, &mut models, &mut vec![], &mut Seen::default());
    s = k.session().clone();
    let est = dsh_compaction::estimated_usage(&s);
    // Two messages of ~1000 tokens each, plus JSON framing.
    assert!((2_000..2_200).contains(&est), "{est}");
}
