//! `bash` in the client's terminal (ACP `terminal/*`), opt-in with
//! `dsh acp --client-terminal` when the client offers `terminal`: the
//! editor runs `bash -c COMMAND` in the workspace and shows it live in the
//! tool call; the timeout and cancellation kill it there.

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1::{
    CreateTerminalRequest, CreateTerminalResponse, KillTerminalRequest, ReleaseTerminalRequest,
    SessionNotification, SessionUpdate, Terminal, TerminalExitStatus, TerminalOutputRequest,
    TerminalOutputResponse, ToolCallContent, ToolCallUpdate, ToolCallUpdateFields,
    WaitForTerminalExitRequest,
};
use dsh_tools::{CancelToken, CommandOutput, CommandRun, CommandRunner};
use serde_json::Value;

use super::rpc::{POLL, Peer};

/// How long a killed command may take to report its exit.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// A [`CommandRunner`] that runs commands in the client's terminals.
pub struct ClientTerminal {
    peer: Arc<Peer>,
    session: String,
}

impl ClientTerminal {
    /// A runner over `peer` for `session`.
    pub fn new(peer: Arc<Peer>, session: String) -> Self {
        ClientTerminal { peer, session }
    }
}

impl CommandRunner for ClientTerminal {
    fn run(&self, run: &CommandRun<'_>, cancel: &CancelToken) -> Result<CommandOutput, String> {
        let create = CreateTerminalRequest::new(self.session.clone(), "bash")
            .args(vec!["-c".to_string(), run.command.to_string()])
            .cwd(run.workdir.to_path_buf())
            .output_byte_limit(run.max_output_bytes as u64);
        let created = self.peer.call("terminal/create", &create, cancel)?;
        let id = serde_json::from_value::<CreateTerminalResponse>(created)
            .map_err(|e| format!("unreadable terminal/create answer: {e}"))?
            .terminal_id;
        // The editor shows the terminal inside the tool call.
        let embed = ToolCallUpdateFields::new()
            .content(vec![ToolCallContent::Terminal(Terminal::new(id.clone()))]);
        self.peer.notify(
            "session/update",
            &SessionNotification::new(
                self.session.clone(),
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(run.call_id.to_string(), embed)),
            ),
        );
        let exit = self.peer.start(
            "terminal/wait_for_exit",
            &WaitForTerminalExitRequest::new(self.session.clone(), id.clone()),
        );
        let deadline = Instant::now() + run.timeout;
        let mut killed_at: Option<Instant> = None;
        let mut timed_out = false;
        let exited = loop {
            match exit.recv_timeout(POLL) {
                Ok(answer) => break answer.map_err(String::from),
                Err(RecvTimeoutError::Disconnected) => break Err("the client disconnected".into()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            match killed_at {
                Some(at) if now >= at + KILL_GRACE => {
                    break Err("the killed command did not report its exit".into());
                }
                Some(_) => {}
                None if cancel.is_cancelled() || now >= deadline => {
                    timed_out = !cancel.is_cancelled();
                    killed_at = Some(now);
                    let kill = KillTerminalRequest::new(self.session.clone(), id.clone());
                    self.peer.request("terminal/kill", &kill, |_| {});
                }
                None => {}
            }
        };
        // Read what it printed even when waiting failed, then let it go.
        let output = self.peer.call(
            "terminal/output",
            &TerminalOutputRequest::new(self.session.clone(), id.clone()),
            &CancelToken::new(),
        );
        self.peer.request(
            "terminal/release",
            &ReleaseTerminalRequest::new(self.session.clone(), id),
            |_| {},
        );
        let output = serde_json::from_value::<TerminalOutputResponse>(output?)
            .map_err(|e| format!("unreadable terminal/output answer: {e}"))?;
        let status = match (output.exit_status.clone(), exited) {
            (Some(s), _) => s,
            (None, Ok(v)) => exit_status(&v),
            (None, Err(e)) if cancel.is_cancelled() => {
                let _ = e;
                TerminalExitStatus::new()
            }
            (None, Err(e)) => return Err(e),
        };
        Ok(CommandOutput {
            output: output.output,
            truncated: output.truncated,
            exit_code: status.exit_code.and_then(|c| i32::try_from(c).ok()),
            signal: status.signal,
            timed_out,
        })
    }
}

/// The exit status in a `terminal/wait_for_exit` answer.
fn exit_status(v: &Value) -> TerminalExitStatus {
    let code = v
        .get("exitCode")
        .and_then(Value::as_u64)
        .and_then(|c| u32::try_from(c).ok());
    let signal = v.get("signal").and_then(Value::as_str).map(str::to_string);
    TerminalExitStatus::new().exit_code(code).signal(signal)
}
