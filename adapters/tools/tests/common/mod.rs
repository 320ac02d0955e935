//! Helpers shared by the dsh-tools integration tests.
#![allow(dead_code)]

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::sandbox::support;
use dsh_tools::{ToolCallRequest, ToolContext, ToolSet};
use serde_json::{Value, json};

/// The text blocks of `o`, joined (an error's text is `Error: <message>`).
pub fn text_of(o: &ToolOutcome) -> String {
    o.content.iter().filter_map(ContentBlock::as_text).collect()
}

/// Runs the tool `name` of `set` with `args` (call id `c1`).
pub fn call(set: &ToolSet, ctx: &ToolContext, name: &str, args: Value) -> ToolOutcome {
    set.execute_request(
        &ToolCallRequest {
            name: name.into(),
            call_id: "c1".into(),
            arguments: args,
        },
        ctx,
    )
}

/// Runs `command` with the `bash` tool of `set`.
pub fn bash(set: &ToolSet, ctx: &ToolContext, command: &str) -> ToolOutcome {
    call(
        set,
        ctx,
        "bash",
        json!({"command": command, "description": "test"}),
    )
}

/// Landlock must be there in CI (the machines have it); elsewhere a kernel
/// without it skips the confinement checks with a note.
pub fn landlock_available() -> bool {
    if support().confines_writes() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI machines have Landlock; this kernel reports none"
    );
    eprintln!("note: no Landlock on this kernel; confinement checks not run");
    false
}
