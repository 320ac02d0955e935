//! Cases the kernel fuzz target (`fuzz/fuzz_targets/kernel.rs`) found,
//! kept as plain tests. Their inputs are in `fuzz/corpus/kernel/` too.

use dsh_core::Time;
use dsh_core::{ContentBlock, LlmCallConfig, Message};
use dsh_runtime::{AgentConfig, Effect, IdMode, InboxTarget, Kernel, create_session};

/// Disposal while the first write is pending, and that write fails: the
/// kernel still finishes (it does not retry the same range forever), and
/// `store_error` says part of the log is unwritten. `Effect::Finished` is
/// therefore "nothing runs any more", not "everything is stored".
#[test]
fn a_disposal_whose_write_fails_finishes_with_a_store_error() {
    let mut config = AgentConfig::new(LlmCallConfig::new("mock", "mock"));
    config.ids = IdMode::Sequential;
    let session = create_session("f1".into(), Time::from_millis(1_000), None).unwrap();
    let mut k = Kernel::new(config, session, 0, Vec::new()).unwrap();
    let hi = Message::user("u1", vec![ContentBlock::text("hi")]);
    k.send(Time::from_millis(1_000), hi, InboxTarget::NextStep, true)
        .unwrap();
    let mut persist = None;
    while let Some(e) = k.poll() {
        if let Effect::Persist { range, .. } = e {
            persist = Some(range);
        }
    }
    assert!(
        persist.is_some(),
        "the turn's first checkpoint asks for a write"
    );
    k.dispose(Time::from_millis(1_001));
    k.persisted(Time::from_millis(1_002), Err("disk full".into()))
        .unwrap();
    let mut finished = false;
    let mut writes = 0;
    for _ in 0..16 {
        let Some(e) = k.poll() else { break };
        match e {
            Effect::Finished => finished = true,
            Effect::Persist { .. } => {
                writes += 1;
                k.persisted(Time::from_millis(1_003), Err("disk full".into()))
                    .unwrap();
            }
            _ => {}
        }
    }
    assert!(finished, "disposal finishes");
    assert!(
        writes <= 1,
        "the failed range is not retried forever: {writes}"
    );
    assert!(k.store_error().is_some_and(|e| e.contains("disk full")));
    assert!(k.summary().store_error.is_some());
}
