//! The bash tool's process environment and Landlock sandbox (security
//! issue items: the key never reaches a tool; writes outside the workspace
//! fail from bash).
//!
//! This binary holds one test that changes the process environment, so no
//! other thread of it reads the environment while it is changed.

mod common;

use std::path::{Path, PathBuf};

use common::landlock_available;

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::sandbox::support;
use dsh_tools::{
    BashConfig, BashTool, EnvPolicy, SandboxPolicy, ToolCallRequest, ToolContext, ToolSet,
    Workspace,
};
use serde_json::json;

fn text_of(o: &ToolOutcome) -> String {
    o.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn bash(config: BashConfig, workspace: &Path, command: &str) -> ToolOutcome {
    let mut set = ToolSet::new();
    set.insert(Box::new(BashTool { config }));
    set.execute_request(
        &ToolCallRequest {
            name: "bash".into(),
            call_id: "c1".into(),
            arguments: json!({"command": command, "description": "test"}),
        },
        &ToolContext::new(Workspace::new(workspace).unwrap()),
    )
}

#[test]
fn key_is_not_inherited_and_writes_outside_the_workspace_fail() {
    // The environment a user really has: the provider key and another
    // secret-looking variable in the parent.
    // SAFETY: this binary's only test; no other thread reads the environment.
    unsafe {
        std::env::set_var("DEEPSEEK_API_KEY", "sk-canary-4711");
        std::env::set_var("MY_SERVICE_TOKEN", "tok-canary-4712");
        std::env::set_var("DSH_VISIBLE", "visible-4713");
    }
    let ws = tempfile::tempdir().unwrap();
    let out = bash(
        BashConfig::default(),
        ws.path(),
        "echo \"k=$DEEPSEEK_API_KEY t=$MY_SERVICE_TOKEN v=$DSH_VISIBLE\"; env | grep -c canary || true",
    );
    let text = text_of(&out);
    assert!(!out.is_error(), "{text}");
    assert!(text.starts_with("k= t= v=visible-4713\n0"), "{text}");

    // A policy that lets everything through still never passes the key.
    let open = BashConfig {
        env: EnvPolicy {
            ignore_default_excludes: true,
            ..EnvPolicy::default()
        },
        ..BashConfig::default()
    };
    let text = text_of(&bash(
        open,
        ws.path(),
        "echo \"k=$DEEPSEEK_API_KEY t=$MY_SERVICE_TOKEN\"",
    ));
    assert_eq!(text, "k= t=tok-canary-4712\n");

    if !landlock_available() {
        return;
    }
    // Outside the workspace: the target dir. The default policy also opens
    // the temp dirs; when the target dir is itself beneath one (a clone in
    // /tmp, as CI's fresh-clone step makes), they are closed here so the
    // target dir is really outside.
    let outside_root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut temps = vec![PathBuf::from("/tmp"), PathBuf::from("/var/tmp")];
    temps.extend(std::env::var_os("TMPDIR").map(PathBuf::from));
    let temp_dirs = !temps.iter().any(|t| outside_root.starts_with(t));
    let confined = || BashConfig {
        sandbox: SandboxPolicy {
            temp_dirs,
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    let outside = tempfile::tempdir_in(&outside_root).unwrap();
    let escape = outside.path().join("escape.txt");
    let cmd = format!(
        "echo inside > in.txt && echo out > '{}'; echo status=$?",
        escape.display()
    );
    let text = text_of(&bash(confined(), ws.path(), &cmd));
    assert!(text.contains("status=1"), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    assert!(
        !escape.exists(),
        "a write outside the workspace went through"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("in.txt")).unwrap(),
        "inside\n"
    );
    // Reads outside stay allowed; /dev/null stays writable.
    let text = text_of(&bash(
        BashConfig::default(),
        ws.path(),
        "head -c 4 /etc/hostname >/dev/null && echo read-ok",
    ));
    assert_eq!(text, "read-ok\n");

    // The same command unconfined writes the file: the check above can fail.
    let off = BashConfig {
        sandbox: SandboxPolicy::off(),
        ..BashConfig::default()
    };
    let text = text_of(&bash(off, ws.path(), &cmd));
    assert!(text.contains("status=0"), "{text}");
    assert!(escape.exists());

    // An extra writable root opens exactly that directory.
    std::fs::remove_file(&escape).unwrap();
    let extra = BashConfig {
        sandbox: SandboxPolicy {
            writable_roots: vec![outside.path().to_path_buf()],
            temp_dirs,
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    let text = text_of(&bash(extra, ws.path(), &cmd));
    assert!(text.contains("status=0"), "{text}");

    // Temp dirs can be closed too.
    let no_tmp = BashConfig {
        sandbox: SandboxPolicy {
            temp_dirs: false,
            ..SandboxPolicy::default()
        },
        ..BashConfig::default()
    };
    let other_tmp = tempfile::tempdir().unwrap();
    let cmd = format!(
        "echo x > '{}/t.txt'; echo status=$?",
        other_tmp.path().display()
    );
    let text = text_of(&bash(no_tmp, ws.path(), &cmd));
    assert!(text.contains("status=1"), "{text}");

    // Network off: a TCP connect to a listener on loopback is refused by
    // the sandbox (ABI 4+), and allowed with the network on.
    if support().confines_network() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cmd = format!("exec 3<>/dev/tcp/127.0.0.1/{port}; echo status=$?");
        let offline = BashConfig {
            sandbox: SandboxPolicy {
                network: false,
                ..SandboxPolicy::default()
            },
            ..BashConfig::default()
        };
        let text = text_of(&bash(offline, ws.path(), &cmd));
        assert!(text.contains("Permission denied"), "{text}");
        let text = text_of(&bash(BashConfig::default(), ws.path(), &cmd));
        assert!(text.contains("status=0"), "{text}");
    }
}
