//! Tool argument parsing and validation (LC-22, TL-1) on arbitrary argument
//! text against every built-in tool's schema, and the built-in bodies that
//! parse their own arguments without touching the disk: no panic, and a
//! call whose arguments fail the schema is never reported as valid.
#![no_main]

use std::sync::OnceLock;

use dsh_core::agent::schema::validate_value;
use dsh_core::agent::tools::parse_arguments;
use std::sync::Arc;

use dsh_tools::{CollectingSink, ToolCallRequest, ToolContext, ToolSet, Workspace};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn schemas() -> &'static Vec<(String, Value)> {
    static S: OnceLock<Vec<(String, Value)>> = OnceLock::new();
    S.get_or_init(|| {
        let set = ToolSet::builtin();
        set.registry()
            .expect("builtin registry")
            .schemas()
            .into_iter()
            .map(|s| (s.name, s.parameters))
            .collect()
    })
}

struct Bodies {
    _dir: tempfile::TempDir,
    set: ToolSet,
    ctx: ToolContext,
}

/// `read` and `todo_write` run for real in a temp workspace (read-only and
/// event-only: safe to call with anything); bash, write and edit do not.
fn bodies() -> &'static Bodies {
    static B: OnceLock<Bodies> = OnceLock::new();
    B.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").expect("file");
        let mut set = ToolSet::new();
        set.insert(Box::new(dsh_tools::ReadTool::default()));
        set.insert(Box::new(dsh_tools::TodoWriteTool::default()));
        let ctx = ToolContext::new(Workspace::new(dir.path()).expect("workspace"))
            .with_events(Arc::new(CollectingSink::new()));
        Bodies { _dir: dir, set, ctx }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let value = parse_arguments(raw);
    for (name, schema) in schemas() {
        let errors = validate_value(schema, &value, "arguments");
        if errors.is_empty() {
            // A valid call is an object (every built-in schema says so).
            assert!(value.is_object(), "{name}: {raw:?} passed as {value}");
        }
        for e in &errors {
            assert!(!e.is_empty(), "{name}: empty validation message");
        }
        if errors.is_empty() && (name == "read" || name == "todo_write") {
            let b = bodies();
            let outcome = b.set.execute_request(
                &ToolCallRequest {
                    name: name.clone(),
                    call_id: "fuzz".into(),
                    arguments: value.clone(),
                },
                &b.ctx,
            );
            assert!(!outcome.content.is_empty(), "{name}: no content for {raw:?}");
        }
    }
});
