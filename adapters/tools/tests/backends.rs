//! The tools over other backends: `read`, `write` and `edit` through a
//! [`TextFiles`] backend (an editor's buffers over ACP `fs/*`) with the same
//! confinement, windowing, edit rules and results (TL-22) as on disk, the
//! disk never touched; `bash` through a [`CommandRunner`] (an editor's
//! terminal) with the same checks and result text (TL-21).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{
    BashConfig, BashTool, CancelToken, CommandOutput, CommandRun, CommandRunner, EditTool,
    ReadTool, TextFiles, Tool, ToolCallRequest, ToolContext, Workspace, WriteTool,
};
use serde_json::{Value, json};

/// Buffers by absolute path; `fail` makes every call fail.
#[derive(Default)]
struct Buffers {
    files: Mutex<BTreeMap<PathBuf, String>>,
    fail: bool,
}

impl TextFiles for Buffers {
    fn read(&self, path: &Path, _cancel: &CancelToken) -> Result<Option<String>, String> {
        if self.fail {
            return Err("the editor refused".into());
        }
        Ok(self.files.lock().unwrap().get(path).cloned())
    }
    fn write(&self, path: &Path, content: &str, _cancel: &CancelToken) -> Result<(), String> {
        if self.fail {
            return Err("the editor refused".into());
        }
        self.files
            .lock()
            .unwrap()
            .insert(path.to_path_buf(), content.to_string());
        Ok(())
    }
}

fn call(tool: &dyn Tool, root: &Path, args: Value) -> ToolOutcome {
    let ctx = ToolContext::new(Workspace::new(root).unwrap());
    tool.execute(
        &ToolCallRequest {
            name: "x".into(),
            call_id: "c".into(),
            arguments: args,
        },
        &ctx,
    )
}

fn text(o: &ToolOutcome) -> String {
    o.content[0].as_text().unwrap().to_string()
}

fn code(o: &ToolOutcome) -> String {
    o.error
        .as_ref()
        .and_then(|e| e.info.as_ref())
        .map(|i| i.code.clone())
        .unwrap_or_default()
}

#[test]
fn buffers_are_read_edited_and_written_instead_of_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let path = root.join("a.txt");
    std::fs::write(&path, "on disk\n").unwrap();
    let buffers = Arc::new(Buffers::default());
    buffers
        .files
        .lock()
        .unwrap()
        .insert(path.clone(), "one\nunsaved two\nthree\n".into());
    let files: Option<Arc<dyn TextFiles>> = Some(buffers.clone());

    // read: the buffer, windowed like a file (TL-22).
    let read = ReadTool {
        files: files.clone(),
        ..ReadTool::default()
    };
    let o = call(
        &read,
        &root,
        json!({"file_path": "a.txt", "offset": 2, "limit": 1}),
    );
    assert!(!o.is_error(), "{o:?}");
    let t = text(&o);
    assert!(t.contains("2: unsaved two"), "{t}");
    assert!(
        t.contains("(Showing lines 2-2 of 3. Use offset=3 to continue.)"),
        "{t}"
    );

    // edit: the buffer changes, the disk does not; the diff is the buffer's.
    let edit = EditTool {
        files: files.clone(),
        ..EditTool::default()
    };
    let o = call(
        &edit,
        &root,
        json!({"file_path": "a.txt", "old_string": "unsaved", "new_string": "edited"}),
    );
    assert!(!o.is_error(), "{o:?}");
    assert_eq!(
        buffers.files.lock().unwrap()[&path],
        "one\nedited two\nthree\n"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "on disk\n");
    assert_eq!(
        o.meta.as_ref().unwrap()["diffs"][0]["oldText"],
        "one\nunsaved two\nthree\n"
    );

    // write: a new buffer is created; the disk has no such file.
    let write = WriteTool {
        files: files.clone(),
        ..WriteTool::default()
    };
    let o = call(
        &write,
        &root,
        json!({"file_path": "new.txt", "content": "hi\n"}),
    );
    assert!(!o.is_error(), "{o:?}");
    assert!(text(&o).contains("Created file"));
    assert_eq!(buffers.files.lock().unwrap()[&root.join("new.txt")], "hi\n");
    assert!(!root.join("new.txt").exists());

    // Confinement still applies before the backend is asked.
    let o = call(&read, &root, json!({"file_path": "../outside.txt"}));
    assert_eq!(code(&o), "FS_SANDBOX_DENIED", "{o:?}");
    // A missing buffer is "not found", as on disk.
    let o = call(
        &edit,
        &root,
        json!({"file_path": "missing.txt", "old_string": "a", "new_string": "b"}),
    );
    assert_eq!(code(&o), "FS_NOT_FOUND", "{o:?}");
}

#[test]
fn a_failing_backend_is_an_io_error_for_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let files: Option<Arc<dyn TextFiles>> = Some(Arc::new(Buffers {
        fail: true,
        ..Buffers::default()
    }));
    let read = ReadTool {
        files,
        ..ReadTool::default()
    };
    let o = call(&read, dir.path(), json!({"file_path": "a.txt"}));
    assert_eq!(code(&o), "FS_IO_ERROR");
    assert!(text(&o).ends_with("the editor refused"), "{}", text(&o));
}

/// Records what it was asked and answers `output`.
struct Runner {
    seen: Mutex<Vec<(String, PathBuf, u128)>>,
    output: CommandOutput,
}

impl CommandRunner for Runner {
    fn run(&self, run: &CommandRun<'_>, _cancel: &CancelToken) -> Result<CommandOutput, String> {
        self.seen.lock().unwrap().push((
            run.command.to_string(),
            run.workdir.to_path_buf(),
            run.timeout.as_millis(),
        ));
        Ok(self.output.clone())
    }
}

#[test]
fn bash_through_a_runner_keeps_the_checks_and_the_result_text() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let runner = Arc::new(Runner {
        seen: Mutex::new(Vec::new()),
        output: CommandOutput {
            output: "hi\n".into(),
            exit_code: Some(2),
            ..CommandOutput::default()
        },
    });
    let bash = BashTool {
        config: BashConfig {
            runner: Some(dsh_tools::Runner(runner.clone())),
            ..BashConfig::default()
        },
    };
    let o = call(
        &bash,
        &root,
        json!({"command": "echo hi; exit 2", "description": "Say hi"}),
    );
    assert_eq!(text(&o), "hi\n[exit code: 2]");
    assert_eq!(o.value.as_ref().unwrap()["exitCode"], 2);
    assert_eq!(
        runner.seen.lock().unwrap()[0],
        ("echo hi; exit 2".to_string(), root.clone(), 120_000)
    );
    // The argument checks come first: nothing runs.
    let o = call(&bash, &root, json!({"command": "ls"}));
    assert!(o.is_error());
    assert_eq!(runner.seen.lock().unwrap().len(), 1);
    // A timeout the runner reports is marked as on a local run.
    let timed = BashTool {
        config: BashConfig {
            runner: Some(dsh_tools::Runner(Arc::new(Runner {
                seen: Mutex::new(Vec::new()),
                output: CommandOutput {
                    timed_out: true,
                    signal: Some("SIGKILL".into()),
                    ..CommandOutput::default()
                },
            }))),
            ..BashConfig::default()
        },
    };
    let o = call(
        &timed,
        &root,
        json!({"command": "sleep 9", "description": "Wait", "timeoutMs": 1000}),
    );
    assert_eq!(
        text(&o),
        "(no output)\n[timed out after 1000ms]\n[killed by signal: SIGKILL]"
    );
}
