//! Behaviour of the built-in tools (loop.md §5.4) against the spec's texts
//! and the reference conformance logs.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::EventData;
use dsh_tools::{
    CancelToken, CollectingSink, TodoWriteTool, Tool, ToolCallRequest, ToolContext, ToolSet,
    Workspace,
};
use serde_json::{Value, json};

struct Env {
    dir: tempfile::TempDir,
    outside: tempfile::TempDir,
    set: ToolSet,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
            outside: tempfile::tempdir().unwrap(),
            set: ToolSet::builtin(),
        }
    }
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn ctx(&self) -> ToolContext {
        ToolContext::new(Workspace::new(self.root()).unwrap())
    }
    fn call(&self, name: &str, args: Value) -> ToolOutcome {
        self.call_ctx(name, args, &self.ctx())
    }
    fn call_ctx(&self, name: &str, args: Value, ctx: &ToolContext) -> ToolOutcome {
        self.set.execute_request(
            &ToolCallRequest {
                name: name.into(),
                call_id: "call_1".into(),
                arguments: args,
            },
            ctx,
        )
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }
    fn shown(&self, rel: &str) -> String {
        self.root().join(rel).display().to_string()
    }
}

fn text_of(o: &ToolOutcome) -> String {
    assert_eq!(o.content.len(), 1, "{o:?}");
    o.content[0].as_text().unwrap().to_string()
}

fn code_of(o: &ToolOutcome) -> Option<String> {
    o.error
        .as_ref()
        .and_then(|e| e.info.as_ref())
        .map(|i| i.code.clone())
}

/// A plain (no `info`) error with exactly this message.
fn assert_plain_error(o: &ToolOutcome, message: &str) {
    let e = o.error.as_ref().expect("an error");
    assert_eq!(e.message, message);
    assert!(e.info.is_none(), "{o:?}");
    assert_eq!(text_of(o), format!("Error: {message}"));
}

fn assert_fs_error(o: &ToolOutcome, code: &str) {
    let e = o
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("expected {code}, got {o:?}"));
    let info = e.info.as_ref().unwrap();
    assert_eq!(
        (info.name.as_str(), info.code.as_str()),
        ("FsError", code),
        "{o:?}"
    );
    assert_eq!(text_of(o), format!("Error: {}", e.message));
}

/// The vendored test data (`testdata/` at the repository root).
fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// The tool schemas the reference sent, from a recorded `request/header`.
fn reference_tools() -> Vec<Value> {
    let path = testdata_dir()
        .join("conformance/sessions/examples-headless-agent__compaction-recovery__session.jsonl");
    let log = fs::read_to_string(path).unwrap();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "request/header"
            && let Some(tools) = v["data"]["header"]["tools"].as_array()
        {
            return tools.clone();
        }
    }
    panic!("no request/header with tools");
}

fn schema_json(d: &ToolDefinition) -> Value {
    json!({"name": d.schema.name, "description": d.schema.description, "parameters": d.schema.parameters})
}

// ---------------------------------------------------------------- schemas

#[test]
fn tl1_schemas_match_the_reference() {
    let reference = reference_tools();
    let find = |n: &str| reference.iter().find(|t| t["name"] == n).unwrap().clone();
    let set = ToolSet::builtin();
    let registry = set.registry().unwrap();
    assert_eq!(set.names(), ["bash", "edit", "read", "todo_write", "write"]);
    for name in ["read", "write", "edit", "todo_write"] {
        assert_eq!(
            schema_json(registry.get(name).unwrap()),
            find(name),
            "{name}"
        );
    }
    // bash: the reference advertises background jobs (`run_in_background`)
    // and `$DSH_*`/sandbox text this executor does not have; every other
    // property is the reference's.
    let bash = schema_json(registry.get("bash").unwrap());
    let mut want = find("bash")["parameters"].clone();
    want["properties"]
        .as_object_mut()
        .unwrap()
        .remove("run_in_background");
    assert_eq!(bash["parameters"], want);
    // TL-16 classification.
    for (name, parallel) in [
        ("read", true),
        ("write", false),
        ("edit", false),
        ("bash", false),
        ("todo_write", false),
    ] {
        assert_eq!(
            registry.get(name).unwrap().concurrency_safe,
            parallel,
            "{name}"
        );
        assert!(
            registry.get(name).unwrap().timeout_ms.is_none(),
            "TL-14 {name}"
        );
    }
}

#[test]
fn tl8_unknown_tool_and_tl6_typed_validation() {
    let env = Env::new();
    let o = env.call("nope", json!({}));
    assert_eq!(text_of(&o), "Error: unknown tool \"nope\"");
    assert_eq!(code_of(&o).as_deref(), Some("UNKNOWN_TOOL"));
    // TL-7: invalid JSON arrives as a string.
    let o = env.call("read", json!("{\"file_path\": "));
    assert_eq!(
        text_of(&o),
        "Error: invalid arguments: \"arguments\" must be an object"
    );
    assert_eq!(code_of(&o).as_deref(), Some("INVALID_ARGS"));
    let o = env.call("bash", json!({"command": "true"}));
    assert_eq!(
        text_of(&o),
        "Error: invalid arguments: missing required property \"description\""
    );
}

#[test]
fn tl13_cancelled_before_dispatch_and_tl12_panics() {
    struct Boom;
    impl Tool for Boom {
        fn definition(&self) -> ToolDefinition {
            ToolDefinition::untyped("boom", "", json!({}))
        }
        fn execute(&self, _: &ToolCallRequest, _: &ToolContext) -> ToolOutcome {
            panic!("kaboom")
        }
    }
    let mut env = Env::new();
    env.set.insert(Box::new(Boom));
    let o = env.call("boom", json!({}));
    assert_plain_error(&o, "kaboom");
    let ctx = env.ctx();
    ctx.cancel.cancel();
    let o = env.call_ctx(
        "bash",
        json!({"command": "touch x", "description": "d"}),
        &ctx,
    );
    assert_eq!(text_of(&o), "Error: tool call aborted before dispatch");
    assert_eq!(code_of(&o).as_deref(), Some("ABORTED_BEFORE_DISPATCH"));
    assert!(!env.p("x").exists());
}

// ---------------------------------------------------------------- read

#[test]
fn tl22_read_matches_the_fs_read_log() {
    let env = Env::new();
    fs::write(env.p("greeting.txt"), "hello\n").unwrap();
    let o = env.call("read", json!({"file_path": "greeting.txt"}));
    let p = env.shown("greeting.txt");
    assert_eq!(
        text_of(&o),
        format!(
            "<path>{p}</path>\n<type>file</type>\n<content>\n1: hello\n\n(End of file - total 1 lines)\n</content>"
        )
    );
    assert_eq!(
        o.meta,
        Some(
            json!({"path": p, "offset": 1, "lines": [{"number": 1, "text": "hello"}], "totalLines": 1})
        )
    );
    assert_eq!(
        serde_json::to_string(o.meta.as_ref().unwrap()).unwrap(),
        format!(
            "{{\"path\":\"{p}\",\"offset\":1,\"lines\":[{{\"number\":1,\"text\":\"hello\"}}],\"totalLines\":1}}"
        ),
        "key order as logged"
    );
    // Absolute paths inside the workspace work too.
    let o = env.call("read", json!({"file_path": env.p("greeting.txt")}));
    assert!(!o.is_error());
}

#[test]
fn tl22_read_windows_footers_and_truncation() {
    let env = Env::new();
    let body: String = (1..=5).map(|i| format!("l{i}\n")).collect();
    fs::write(env.p("f.txt"), body).unwrap();
    let p = env.shown("f.txt");
    let o = env.call(
        "read",
        json!({"file_path": "f.txt", "offset": 2, "limit": 2}),
    );
    assert_eq!(
        text_of(&o),
        format!(
            "<path>{p}</path>\n<type>file</type>\n<content>\n2: l2\n3: l3\n\n(Showing lines 2-3 of 5. Use offset=4 to continue.)\n</content>"
        )
    );
    let o = env.call("read", json!({"file_path": "f.txt", "offset": 5}));
    assert!(text_of(&o).ends_with("5: l5\n\n(End of file - total 5 lines)\n</content>"));
    let o = env.call("read", json!({"file_path": "f.txt", "offset": 7}));
    assert_plain_error(
        &o,
        &format!("offset 7 is out of range for \"{p}\" (5 lines)"),
    );
    let o = env.call("read", json!({"file_path": "f.txt", "limit": 2001}));
    assert_plain_error(&o, "limit must be less than or equal to 2000");
    let o = env.call("read", json!({"file_path": "f.txt", "offset": 0}));
    assert_plain_error(&o, "offset must be a positive integer");
    let o = env.call("read", json!({"file_path": "  "}));
    assert_plain_error(&o, "file_path must be a non-empty string");

    // Empty file: the footer alone.
    fs::write(env.p("empty.txt"), "").unwrap();
    let o = env.call("read", json!({"file_path": "empty.txt"}));
    let e = env.shown("empty.txt");
    assert_eq!(
        text_of(&o),
        format!(
            "<path>{e}</path>\n<type>file</type>\n<content>\n(End of file - total 0 lines)\n</content>"
        )
    );

    // Long lines are cut to 2000 characters (not bytes).
    let long = "é".repeat(2001);
    fs::write(env.p("long.txt"), format!("{long}\n")).unwrap();
    let o = env.call("read", json!({"file_path": "long.txt"}));
    let want = format!(
        "1: {}... (line truncated to 2000 chars)\n",
        "é".repeat(2000)
    );
    assert!(text_of(&o).contains(&want));

    // The 51200-byte cap ends the window with the capped footer: each line
    // below renders as "N: " + 1000 x + "\n".
    let line = "x".repeat(1000);
    let big: String = (0..100).map(|_| format!("{line}\n")).collect();
    fs::write(env.p("big.txt"), big).unwrap();
    let o = env.call("read", json!({"file_path": "big.txt"}));
    let t = text_of(&o);
    // lines 1-9: 1004 bytes each, 10-50: 1005 each: 9036 + 41*1005 = 50241;
    // line 51 would make 51246 > 51200.
    assert!(
        t.ends_with(
            "\n\n(Output capped. Showing lines 1-50. Use offset=51 to continue.)\n</content>"
        ),
        "{}",
        &t[t.len() - 120..]
    );
    assert!(t.contains(&format!("\n50: {line}\n")));
}

#[test]
fn read_error_cases() {
    let env = Env::new();
    let o = env.call("read", json!({"file_path": "missing.txt"}));
    assert_fs_error(&o, "FS_NOT_FOUND");
    assert_eq!(
        text_of(&o),
        format!(
            "Error: cannot read \"{}\": not found",
            env.shown("missing.txt")
        )
    );
    fs::create_dir(env.p("d")).unwrap();
    let o = env.call("read", json!({"file_path": "d"}));
    assert_fs_error(&o, "FS_NOT_REGULAR_FILE");
    assert_eq!(
        text_of(&o),
        format!(
            "Error: cannot read \"{}\": not a regular file",
            env.shown("d")
        )
    );
    // A FIFO is refused without blocking on the open.
    let fifo = std::ffi::CString::new(env.p("fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    for (tool, args) in [
        ("read", json!({"file_path": "fifo"})),
        ("write", json!({"file_path": "fifo", "content": "x"})),
        (
            "edit",
            json!({"file_path": "fifo", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        assert_fs_error(&env.call(tool, args), "FS_NOT_REGULAR_FILE");
    }
    fs::write(env.p("bin"), [0xff, 0xfe, b'\n']).unwrap();
    assert_fs_error(
        &env.call("read", json!({"file_path": "bin"})),
        "FS_NOT_TEXT",
    );
}

// ---------------------------------------------------------------- write

#[test]
fn tl22_write_created_then_updated() {
    let env = Env::new();
    let o = env.call(
        "write",
        json!({"file_path": "notes.txt", "content": "hello world"}),
    );
    let p = env.shown("notes.txt");
    assert_eq!(
        text_of(&o),
        format!("<path>{p}</path>\n<type>file</type>\n<content>\nCreated file\n</content>")
    );
    assert_eq!(o.meta, Some(json!({"diffs": []})));
    assert_eq!(
        fs::read_to_string(env.p("notes.txt")).unwrap(),
        "hello world"
    );
    let o = env.call("write", json!({"file_path": "notes.txt", "content": "bye"}));
    assert_eq!(
        text_of(&o),
        format!("<path>{p}</path>\n<type>file</type>\n<content>\nUpdated file\n</content>")
    );
    assert_eq!(
        o.meta,
        Some(json!({"diffs": [{"path": "notes.txt", "oldText": "hello world", "newText": "bye"}]}))
    );
    assert_eq!(fs::read_to_string(env.p("notes.txt")).unwrap(), "bye");
    // Parents are created; no temp files are left behind.
    let o = env.call("write", json!({"file_path": "a/b/c.txt", "content": "x"}));
    assert!(!o.is_error(), "{o:?}");
    assert_eq!(fs::read_to_string(env.p("a/b/c.txt")).unwrap(), "x");
    let names: Vec<_> = fs::read_dir(env.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn write_error_cases() {
    let env = Env::new();
    assert_plain_error(
        &env.call("write", json!({"file_path": "", "content": "x"})),
        "file_path must be a non-empty string",
    );
    fs::create_dir(env.p("d")).unwrap();
    assert_fs_error(
        &env.call("write", json!({"file_path": "d", "content": "x"})),
        "FS_NOT_REGULAR_FILE",
    );
    // A regular file used as a directory.
    fs::write(env.p("f"), "x").unwrap();
    let o = env.call("write", json!({"file_path": "f/g", "content": "x"}));
    assert!(o.is_error());
    assert_eq!(fs::read_to_string(env.p("f")).unwrap(), "x");
}

// ---------------------------------------------------------------- edit

#[test]
fn tl22_edit_matches_the_fs_edit_log() {
    let env = Env::new();
    fs::write(env.p("config.txt"), "mode=DEBUG\nlevel=info").unwrap();
    let o = env.call(
        "edit",
        json!({"file_path": "config.txt", "old_string": "DEBUG", "new_string": "RELEASE"}),
    );
    assert_eq!(
        text_of(&o),
        format!(
            "The file {} has been updated successfully.",
            env.shown("config.txt")
        )
    );
    assert_eq!(
        serde_json::to_string(o.meta.as_ref().unwrap()).unwrap(),
        r#"{"diffs":[{"path":"config.txt","oldText":"mode=DEBUG\nlevel=info","newText":"mode=RELEASE\nlevel=info"}]}"#
    );
    assert_eq!(
        fs::read_to_string(env.p("config.txt")).unwrap(),
        "mode=RELEASE\nlevel=info"
    );

    fs::write(env.p("r.txt"), "a-a-a").unwrap();
    let o = env.call(
        "edit",
        json!({"file_path": "r.txt", "old_string": "a", "new_string": "", "replace_all": true}),
    );
    assert_eq!(
        text_of(&o),
        format!(
            "The file {} has been updated. All occurrences were successfully replaced.",
            env.shown("r.txt")
        )
    );
    assert_eq!(fs::read_to_string(env.p("r.txt")).unwrap(), "--");
}

#[test]
fn edit_error_cases() {
    let env = Env::new();
    fs::write(env.p("e.txt"), "one two two").unwrap();
    let call = |args: Value| env.call("edit", args);
    assert_plain_error(
        &call(json!({"file_path": "", "old_string": "a", "new_string": "b"})),
        "file_path must be a non-empty string",
    );
    assert_plain_error(
        &call(json!({"file_path": "e.txt", "old_string": "", "new_string": "b"})),
        "old_string must be a non-empty string",
    );
    assert_plain_error(
        &call(json!({"file_path": "e.txt", "old_string": "one", "new_string": "one"})),
        "old_string and new_string must differ",
    );
    let o = call(json!({"file_path": "e.txt", "old_string": "three", "new_string": "3"}));
    assert_fs_error(&o, "FS_EDIT_NOT_FOUND");
    let o = call(json!({"file_path": "e.txt", "old_string": "two", "new_string": "2"}));
    assert_fs_error(&o, "FS_AMBIGUOUS_EDIT");
    assert_eq!(
        text_of(&o),
        format!(
            "Error: cannot edit \"{}\": old_string matches 2 locations; provide a more specific old_string or set replace_all to true",
            env.shown("e.txt")
        )
    );
    let o = call(json!({"file_path": "nope.txt", "old_string": "a", "new_string": "b"}));
    assert_fs_error(&o, "FS_NOT_FOUND");
    assert!(!env.p("nope.txt").exists());
    fs::create_dir(env.p("d")).unwrap();
    assert_fs_error(
        &call(json!({"file_path": "d", "old_string": "a", "new_string": "b"})),
        "FS_NOT_REGULAR_FILE",
    );
    assert_eq!(fs::read_to_string(env.p("e.txt")).unwrap(), "one two two");
}

// ---------------------------------------------------------------- hostile paths

#[test]
fn hostile_paths_are_refused_by_every_file_tool() {
    let env = Env::new();
    let out = env.outside.path();
    fs::write(out.join("secret.txt"), "secret").unwrap();
    fs::create_dir(env.p("sub")).unwrap();
    symlink(out.join("secret.txt"), env.p("link.txt")).unwrap();
    symlink(out, env.p("outdir")).unwrap();
    symlink(out.join("new.txt"), env.p("dangling.txt")).unwrap();
    let secret = out.join("secret.txt").display().to_string();
    let hostile = [
        secret.clone(),
        format!(
            "../{}/secret.txt",
            out.file_name().unwrap().to_string_lossy()
        ),
        "sub/../../escape.txt".to_string(),
        "link.txt".to_string(),
        "outdir/secret.txt".to_string(),
        "sub/../outdir/secret.txt".to_string(),
        "missing/../outdir/secret.txt".to_string(),
        "dangling.txt".to_string(),
        "a\0b".to_string(),
    ];
    for path in &hostile {
        let calls = [
            ("read", json!({"file_path": path})),
            ("write", json!({"file_path": path, "content": "pwned"})),
            (
                "edit",
                json!({"file_path": path, "old_string": "secret", "new_string": "pwned"}),
            ),
        ];
        for (tool, args) in calls {
            let o = env.call(tool, args);
            assert_fs_error(&o, "FS_SANDBOX_DENIED");
            let shown = path.escape_debug().to_string();
            assert!(
                text_of(&o).starts_with(&format!("Error: cannot {tool} \"{shown}\": ")),
                "{}",
                text_of(&o)
            );
        }
    }
    assert_eq!(
        fs::read_to_string(out.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!out.join("new.txt").exists());
    assert_eq!(fs::read_dir(out).unwrap().count(), 1);
    assert!(!env.root().parent().unwrap().join("escape.txt").exists());
    // A symlink that stays inside is followed.
    fs::write(env.p("sub/in.txt"), "inside").unwrap();
    symlink(env.p("sub/in.txt"), env.p("inlink.txt")).unwrap();
    let o = env.call("read", json!({"file_path": "inlink.txt"}));
    assert!(text_of(&o).contains("1: inside"), "{o:?}");
}

// ---------------------------------------------------------------- todo_write

#[test]
fn tl23_todo_write_matches_the_log_and_appends_the_event() {
    let env = Env::new();
    let sink = Arc::new(CollectingSink::new());
    let ctx = env.ctx().with_events(sink.clone());
    let args = json!({"todos": [
        {"content": "read the code", "status": "in_progress"},
        {"content": "watch the background build", "status": "in_progress"},
        {"content": "write the fix", "status": "pending"}
    ]});
    let o = env.call_ctx("todo_write", args, &ctx);
    assert_eq!(
        text_of(&o),
        "Updated todo list: 1 pending, 2 in progress, 0 completed."
    );
    let events = sink.take();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type(), "todo/write");
    let EventData::TodoWrite(w) = &events[0] else {
        panic!("{:?}", events[0]);
    };
    assert_eq!(
        serde_json::to_string(&**w).unwrap(),
        r#"{"todos":[{"content":"read the code","status":"in_progress"},{"content":"watch the background build","status":"in_progress"},{"content":"write the fix","status":"pending"}]}"#
    );
}

#[test]
fn todo_write_error_cases() {
    let env = Env::new();
    let sink = Arc::new(CollectingSink::new());
    let ctx = env.ctx().with_events(sink.clone());
    let call = |args: Value| env.call_ctx("todo_write", args, &ctx);
    assert_plain_error(
        &call(json!({"todos": [{"content": " ", "status": "pending"}]})),
        "invalid todo: `content` must be a non-empty string",
    );
    assert_plain_error(
        &call(json!({"todos": [
            {"content": "a \"b\"", "status": "pending"},
            {"content": "a \"b\"", "status": "completed"}
        ]})),
        r#"invalid todos: duplicate content "a \"b\"""#,
    );
    // Schema violations are caught before the body (TL-6).
    let o = call(json!({"todos": [{"content": "x", "status": "done"}]}));
    assert_eq!(code_of(&o).as_deref(), Some("INVALID_ARGS"));
    let o = call(json!({"todos": [{"content": "x", "status": "pending", "extra": 1}]}));
    assert_eq!(code_of(&o).as_deref(), Some("INVALID_ARGS"));
    assert!(sink.take().is_empty());

    let single = TodoWriteTool {
        allow_parallel_in_progress: false,
    };
    let two = json!({"todos": [
        {"content": "a", "status": "in_progress"},
        {"content": "b", "status": "in_progress"}
    ]});
    let req = ToolCallRequest {
        name: "todo_write".into(),
        call_id: "c".into(),
        arguments: two,
    };
    assert_plain_error(
        &single.execute(&req, &ctx),
        "invalid todos: at most one task may be in_progress, got 2",
    );
    assert!(
        single
            .definition()
            .schema
            .description
            .contains("AT MOST ONE")
    );
    // No owning session.
    let o = env.call("todo_write", json!({"todos": []}));
    assert_plain_error(&o, "todo_write requires an owning agent session");
    assert!(sink.take().is_empty());
}

// ---------------------------------------------------------------- bash

fn bash(env: &Env, command: &str) -> ToolOutcome {
    env.call("bash", json!({"command": command, "description": "test"}))
}

#[test]
fn tl21_bash_result_texts() {
    let env = Env::new();
    assert_eq!(text_of(&bash(&env, "echo TERMINAL_OK")), "TERMINAL_OK\n");
    assert_eq!(text_of(&bash(&env, "true")), "(no output)");
    let o = bash(&env, "echo out; echo err >&2; exit 3");
    assert!(!o.is_error(), "a non-zero exit is not isError");
    assert_eq!(text_of(&o), "out\n[stderr]\nerr\n[exit code: 3]");
    assert_eq!(
        text_of(&bash(&env, "printf out; printf err >&2")),
        "out\n[stderr]\nerr"
    );
    assert_eq!(
        text_of(&bash(&env, "exit 1")),
        "(no output)\n[exit code: 1]"
    );
    assert_eq!(
        text_of(&bash(&env, "printf x; kill -TERM $$")),
        "x\n[killed by signal: SIGTERM]"
    );
    // Runs in the workspace by default, or in `workdir`.
    fs::create_dir(env.p("w")).unwrap();
    let root = fs::canonicalize(env.root()).unwrap();
    assert_eq!(
        text_of(&bash(&env, "pwd -P")),
        format!("{}\n", root.display())
    );
    let o = env.call(
        "bash",
        json!({"command": "pwd -P", "description": "d", "workdir": "w"}),
    );
    assert_eq!(text_of(&o), format!("{}\n", root.join("w").display()));
    let v = o.value.unwrap();
    assert_eq!(v["kind"], "foreground");
    assert_eq!(v["exitCode"], 0);
    assert_eq!(v["signal"], Value::Null);
}

#[test]
fn bash_error_cases() {
    let env = Env::new();
    let call = |args: Value| env.call("bash", args);
    assert_plain_error(
        &call(json!({"command": " ", "description": "d"})),
        "invalid command: expected a non-empty string",
    );
    assert_plain_error(
        &call(json!({"command": "true", "description": ""})),
        "invalid description: expected a non-empty string",
    );
    assert_plain_error(
        &call(json!({"command": "true", "description": "d", "timeoutMs": -5})),
        "invalid timeoutMs: expected a positive number, got -5",
    );
    assert_plain_error(
        &call(json!({"command": "true", "description": "d", "timeoutMs": 0})),
        "invalid timeoutMs: expected a positive number, got 0",
    );
    assert_plain_error(
        &call(json!({"command": "true", "description": "d", "run_in_background": true})),
        "background execution is disabled for this bash tool",
    );
    let o = call(json!({"command": "true", "description": "d", "workdir": "nope"}));
    assert!(o.is_error());
    assert!(text_of(&o).starts_with("Error: invalid workdir: "));
    // Spawn failure is an infrastructure error.
    let mut set = ToolSet::new();
    set.insert(Box::new(dsh_tools::BashTool {
        config: dsh_tools::BashConfig {
            shell: PathBuf::from("/nonexistent/bash"),
            ..Default::default()
        },
    }));
    let o = set.execute_request(
        &ToolCallRequest {
            name: "bash".into(),
            call_id: "c".into(),
            arguments: json!({"command": "true", "description": "d"}),
        },
        &env.ctx(),
    );
    assert!(o.is_error());
    assert!(text_of(&o).starts_with("Error: failed to start bash: "));
}

#[test]
fn tl21_output_is_truncated_to_its_tail() {
    let env = Env::new();
    let mut set = ToolSet::new();
    set.insert(Box::new(dsh_tools::BashTool {
        config: dsh_tools::BashConfig {
            max_output_bytes: 10,
            ..Default::default()
        },
    }));
    let run = |ctx: &ToolContext, command: &str| {
        set.execute_request(
            &ToolCallRequest {
                name: "bash".into(),
                call_id: "call/1".into(),
                arguments: json!({"command": command, "description": "d"}),
            },
            ctx,
        )
    };
    let o = run(&env.ctx(), "printf 0123456789abcdef; exit 2");
    assert_eq!(
        text_of(&o),
        "6789abcdef\n[output truncated; full output: (unavailable)]\n[exit code: 2]"
    );
    // With a spill directory the full output is kept there; stderr is
    // capped on its own.
    let spill = tempfile::tempdir().unwrap();
    let mut ctx = env.ctx();
    ctx.spill_dir = Some(spill.path().to_path_buf());
    let o = run(&ctx, "printf 0123456789abcdef; printf ABCDEFGHIJKL >&2");
    let out = spill.path().join("bash-call_1-stdout.txt");
    let err = spill.path().join("bash-call_1-stderr.txt");
    assert_eq!(
        text_of(&o),
        format!(
            "6789abcdef\n[output truncated; full output: {}]\n[stderr]\nCDEFGHIJKL\n[output truncated; full output: {}]",
            out.display(),
            err.display()
        )
    );
    assert_eq!(fs::read_to_string(out).unwrap(), "0123456789abcdef");
    assert_eq!(fs::read_to_string(err).unwrap(), "ABCDEFGHIJKL");
    // The tail starts at a character boundary.
    let o = run(&env.ctx(), "printf 'aééééé'");
    assert_eq!(
        text_of(&o),
        "ééééé\n[output truncated; full output: (unavailable)]"
    );
    let o = run(&env.ctx(), "printf 'ééééé'");
    assert_eq!(text_of(&o), "ééééé");
}

/// Whether `pid` is gone (no such process, or a zombie awaiting its reaper).
fn gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if !alive {
        return true;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

fn wait_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !pids.iter().all(|p| gone(*p)) {
        assert!(Instant::now() < deadline, "processes {pids:?} still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pids_in(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[test]
fn tl21_timeout_kills_the_process_group() {
    let env = Env::new();
    let start = Instant::now();
    let o = env.call(
        "bash",
        json!({
            "command": "sleep 30 & echo $!; (sleep 30 & echo $!; wait) & sleep 0.05; echo $$; sleep 30",
            "description": "d",
            "timeoutMs": 400
        }),
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(!o.is_error(), "a timeout is reported, not an error");
    let t = text_of(&o);
    assert!(
        t.ends_with("\n[timed out after 400ms]\n[killed by signal: SIGKILL]"),
        "{t}"
    );
    let pids = pids_in(&t);
    assert_eq!(pids.len(), 3, "{t}");
    wait_gone(&pids);
    assert_eq!(o.value.unwrap()["timedOut"], true);
}

#[test]
fn cancel_kills_the_process_group_and_aborts() {
    let env = Env::new();
    let cancel = CancelToken::new();
    let ctx = env.ctx().with_cancel(cancel.clone());
    let pidfile = env.p("pids");
    let killer = {
        let cancel = cancel.clone();
        let pidfile = pidfile.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(5);
            while fs::read_to_string(&pidfile).map_or(0, |s| s.lines().count()) < 2 {
                assert!(Instant::now() < deadline);
                std::thread::sleep(Duration::from_millis(10));
            }
            cancel.cancel();
        })
    };
    let start = Instant::now();
    let o = env.call_ctx(
        "bash",
        json!({"command": "sleep 30 & echo $! > pids.tmp; echo $$ >> pids.tmp; mv pids.tmp pids; sleep 30", "description": "d"}),
        &ctx,
    );
    killer.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(text_of(&o), "Error: tool call aborted");
    assert_eq!(code_of(&o).as_deref(), Some("ABORTED"));
    wait_gone(&pids_in(&fs::read_to_string(&pidfile).unwrap()));
}

#[test]
fn bash_calls_sharing_a_cancel_token_each_get_their_own_exit() {
    // Each call's exit wakes every waiter on the shared token; a call woken
    // by another's exit keeps waiting for its own. The short call starts
    // once the long one's command runs (so the long call is waiting).
    let env = Env::new();
    let ctx = env.ctx();
    let started = env.p("started");
    let run = |command: &str| {
        // The tool itself: a tool set runs exclusive tools one at a time.
        dsh_tools::BashTool::default().execute(
            &ToolCallRequest {
                name: "bash".into(),
                call_id: "c".into(),
                arguments: json!({"command": command, "description": "d", "timeoutMs": 60000}),
            },
            &ctx,
        )
    };
    let (short, long) = std::thread::scope(|s| {
        let long = s.spawn(|| run("echo > started; sleep 0.5; echo late; exit 4"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !started.exists() {
            assert!(Instant::now() < deadline, "the long command did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        (run("echo early; exit 3"), long.join().unwrap())
    });
    assert_eq!(text_of(&short), "early\n[exit code: 3]");
    assert_eq!(text_of(&long), "late\n[exit code: 4]");
    let v = long.value.unwrap();
    assert_eq!(v["timedOut"], false);
    assert_eq!(v["exitCode"], 4);
}

#[test]
fn bash_reports_stdout_stderr_and_exit_code_of_a_quick_command() {
    let env = Env::new();
    let o = bash(&env, "echo out; echo err >&2; exit 7");
    assert_eq!(text_of(&o), "out\n[stderr]\nerr\n[exit code: 7]");
    let v = o.value.unwrap();
    assert_eq!(v["exitCode"], 7);
    assert_eq!(v["timedOut"], false);
    assert_eq!(v["signal"], Value::Null);
}

#[test]
fn bash_with_a_timeout_too_far_to_represent_runs_without_a_deadline() {
    let env = Env::new();
    let mut tool = dsh_tools::BashTool::default();
    tool.config.max_timeout_ms = f64::MAX;
    let o = tool.execute(
        &ToolCallRequest {
            name: "bash".into(),
            call_id: "c".into(),
            arguments: json!({"command": "echo ok", "description": "d", "timeoutMs": 1e300}),
        },
        &env.ctx(),
    );
    assert_eq!(text_of(&o), "ok\n");
    assert_eq!(o.value.unwrap()["timedOut"], false);
}

#[test]
fn background_children_do_not_outlive_a_normal_exit() {
    let env = Env::new();
    let start = Instant::now();
    let o = bash(&env, "sleep 30 & echo $!");
    assert!(start.elapsed() < Duration::from_secs(5), "pipes held open");
    wait_gone(&pids_in(&text_of(&o)));
}

#[test]
fn cancel_token_wakes_waiters() {
    let t = CancelToken::new();
    assert!(!t.wait_timeout(Duration::from_millis(5)));
    let t2 = t.clone();
    let h = std::thread::spawn(move || t2.wait_timeout(Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(20));
    t.cancel();
    assert!(h.join().unwrap());
    assert!(t.is_cancelled());
}

#[test]
fn content_blocks_are_text() {
    let env = Env::new();
    let o = bash(&env, "echo hi");
    assert!(matches!(&o.content[0], b if b.block_type() == "text"));
    let _: &ContentBlock = &o.content[0];
}

#[test]
fn a_process_that_leaves_the_group_does_not_hang_the_call() {
    let env = Env::new();
    let mut set = ToolSet::new();
    set.insert(Box::new(dsh_tools::BashTool {
        config: dsh_tools::BashConfig {
            drain_grace: Duration::from_millis(200),
            ..Default::default()
        },
    }));
    let start = Instant::now();
    // `setsid` puts the sleep in a new session (so the group kill misses
    // it) while it still holds stdout open.
    let o = set.execute_request(
        &ToolCallRequest {
            name: "bash".into(),
            call_id: "c".into(),
            arguments: json!({"command": "setsid sleep 5 & echo $!", "description": "d"}),
        },
        &env.ctx(),
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let pids = pids_in(&text_of(&o));
    assert_eq!(pids.len(), 1, "{o:?}");
    // SAFETY: cleaning up the escaped test process.
    unsafe {
        libc::kill(pids[0], libc::SIGKILL);
    }
}
