//! The `subagent` and `subagent_fork` tool bodies of the std runtime (the
//! plugin and the pure parts are `dsh-subagents`, a runtime-agnostic
//! plugin): each call runs a child [`Agent`] in the same store (so its log lies beside the
//! parent's), built from the same configuration factory as the parent.
//!
//! The body (SA-2, SA-3): build the child session ([`spawn_session`] or
//! [`fork_session`] from the parent's stored log), start the child with the
//! [`Subagents`] plugin that logs its descriptor, send the prompt as one
//! `followup`, wait until the child is idle, and map its final `turn/end`
//! ([`outcome`]). When the parent's call is cancelled (the parent's turn is
//! aborted, the parent disposed), the child is cancelled with
//! `{"kind":"parent"}` and the call ends `ABORTED`.
//!
//! With `run_in_background` the call returns at once (at most
//! [`Settings::max_background`] such children run at a time); when the
//! child is done, its mapped result reaches the parent as a user message
//! with source `{"kind":"subagent-settled","session":child}`, delivered
//! like `steer` (the parent's next step, or a new turn when it is idle)
//! through the parent's [`Mailbox`] ([`Delegation::attach`]; without one
//! the call is a clear error).
//!
//! A child never asks for approval (nobody would answer): its policy is the
//! parent's with every `ask` turned into `deny`.

use std::boxed::Box;
use std::collections::BTreeMap;
use std::format;
use std::string::{String, ToString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::vec::Vec;

use crate::{Agent, AgentConfig, InboxTarget, Mailbox, ShellError};
use dsh_core::SessionId;
use dsh_core::agent::CancelCause;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::session::EventData;
use dsh_store::SessionStore;
use dsh_tools::{Tool, ToolCallRequest, ToolContext, Workspace};
use serde_json::json;

use dsh_subagents::{
    DEFAULT_MAX_DEPTH, Mode, ParentLink, Subagents, child_depth, definition, final_output,
    fork_session, outcome, parse_request, settled_message, spawn_session, started_outcome,
};

/// The event recording a child's approval policy.
const APPROVAL_POLICY: &str = "approval/policy";

/// Builds a fresh configuration for a child agent: the same provider,
/// model, tools and plugins as the parent (the subagent pieces are added
/// by [`Delegation`]).
pub type ConfigFactory = Arc<dyn Fn() -> Result<AgentConfig, String> + Send + Sync>;

/// Limits and timing of the std body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The cap on `delegationDepth` (SA-1).
    pub max_depth: u64,
    /// How often the waiting body looks at the parent's cancel signal.
    pub poll: Duration,
    /// How long a cancelled child gets to end its turn and persist.
    pub cancel_wait: Duration,
    /// The most background children (`run_in_background`) running at once.
    pub max_background: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_depth: DEFAULT_MAX_DEPTH,
            poll: Duration::from_millis(20),
            cancel_wait: Duration::from_millis(1_500),
            max_background: 4,
        }
    }
}

/// Runs subagents for std agents: one per tool call.
pub struct Delegation {
    store: Arc<dyn SessionStore>,
    factory: ConfigFactory,
    settings: Settings,
    ids: IdSource,
    /// The secret the plugin puts in every link; a link without it was not
    /// made by this delegation's plugin (the model wrote it) and is refused.
    token: String,
    /// Background children running now.
    background: AtomicUsize,
    /// Set by [`shutdown`](Delegation::shutdown): background children are
    /// cancelled and no new one starts.
    stopping: AtomicBool,
    /// Where background results go, by parent session.
    mailboxes: Mutex<BTreeMap<SessionId, Mailbox>>,
}

/// Frees a background slot when dropped.
struct Release(Arc<Delegation>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.background.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Makes a child's session id.
pub type IdSource = Arc<dyn Fn() -> SessionId + Send + Sync>;

impl core::fmt::Debug for Delegation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Delegation")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Delegation {
    /// Children go to `store`, configured by `factory`, with the default
    /// [`Settings`].
    pub fn new(store: Arc<dyn SessionStore>, factory: ConfigFactory) -> Arc<Delegation> {
        Delegation::with_settings(store, factory, Settings::default())
    }

    /// As [`new`](Self::new), with `settings`.
    pub fn with_settings(
        store: Arc<dyn SessionStore>,
        factory: ConfigFactory,
        settings: Settings,
    ) -> Arc<Delegation> {
        Delegation::with_ids(store, factory, settings, Arc::new(crate::new_session_id))
    }

    /// As [`with_settings`](Self::with_settings), naming children with
    /// `ids` (default: UUID v4).
    pub fn with_ids(
        store: Arc<dyn SessionStore>,
        factory: ConfigFactory,
        settings: Settings,
        ids: IdSource,
    ) -> Arc<Delegation> {
        Arc::new(Delegation {
            store,
            factory,
            settings,
            ids,
            token: crate::new_session_id().as_str().to_string(),
            background: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            mailboxes: Mutex::new(BTreeMap::new()),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Makes `config` able to delegate: the [`Subagents`] plugin and the
    /// `subagent` and `subagent_fork` tools. An agent at the depth cap
    /// keeps the tools; a call gets the cap's clear error.
    pub fn install(self: &Arc<Self>, config: &mut AgentConfig) {
        config.plugins.push(Box::new(self.plugin()));
        self.add_tools(config);
    }

    /// The kernel plugin of a delegating agent (any runtime; pair it with
    /// [`tools`](Self::tools)).
    pub fn plugin(&self) -> Subagents {
        Subagents::new(self.settings.max_depth).with_token(self.token.clone())
    }

    /// The `subagent` and `subagent_fork` tool bodies, for any runtime
    /// that runs `dsh_tools` bodies (`dsh_std`, `dsh_smol`); the children
    /// are std [`Agent`]s.
    pub fn tools(self: &Arc<Self>) -> Vec<Box<dyn Tool>> {
        [Mode::Spawn, Mode::Fork]
            .into_iter()
            .map(|mode| {
                Box::new(SubagentTool {
                    mode,
                    delegation: self.clone(),
                }) as Box<dyn Tool>
            })
            .collect()
    }

    fn add_tools(self: &Arc<Self>, config: &mut AgentConfig) {
        for tool in self.tools() {
            config.tools.insert(tool);
        }
    }

    /// The tool `mode` for one call (the body of both tools).
    pub fn run(
        self: &Arc<Self>,
        mode: Mode,
        call: &ToolCallRequest,
        ctx: &ToolContext,
    ) -> ToolOutcome {
        match self.try_run(mode, call, ctx) {
            Ok(o) => o,
            Err(message) => ToolOutcome::coded_error(message, "SubagentError", "START_FAILED"),
        }
    }

    fn try_run(
        self: &Arc<Self>,
        mode: Mode,
        call: &ToolCallRequest,
        ctx: &ToolContext,
    ) -> Result<ToolOutcome, String> {
        let request = match parse_request(&call.arguments) {
            Ok(r) => r,
            Err(e) => return Ok(ToolOutcome::invalid_arguments(&[e.to_string()])),
        };
        let link = ParentLink::from_arguments(&call.arguments).map_err(|e| e.to_string())?;
        let token = call.arguments[dsh_subagents::LINK_KEY]["token"].as_str();
        if token != Some(self.token.as_str()) {
            return Err(dsh_subagents::ArgsError::NoLink.to_string());
        }
        let depth = match child_depth(link.depth, self.settings.max_depth) {
            Ok(d) => d,
            Err(e) => return Ok(e.outcome()),
        };
        if request.run_in_background {
            return self.run_in_background(mode, &request, &link, depth, &ctx.workspace);
        }
        let (child, seed) = self.start(mode, &request, &link, depth, &ctx.workspace)?;
        let summary = loop {
            match child.wait_idle(Some(self.settings.poll)) {
                Ok(summary) => break summary,
                Err(ShellError::Timeout) => {
                    if ctx.cancel.is_cancelled() {
                        child.cancel(CancelCause::Parent, false);
                        let _ = child.wait_idle(Some(self.settings.cancel_wait));
                        self.detach(child.session_id());
                        child.dispose();
                        return Ok(ToolOutcome::aborted());
                    }
                }
                Err(e) => {
                    self.detach(child.session_id());
                    return Err(format!("the subagent stopped: {e}"));
                }
            }
        };
        let events = child.events().map_err(|e| e.to_string());
        self.detach(child.session_id());
        child.dispose();
        let events = events?;
        let live = events.get(seed..).unwrap_or(&[]);
        Ok(outcome(summary.reason.as_ref(), final_output(live)))
    }

    /// Starts a child in the background (bounded by
    /// [`Settings::max_background`]); a watcher thread delivers its result
    /// to the parent's [`Mailbox`] as a `subagent-settled` message (steer:
    /// at the parent's next step, or a new turn when it is idle).
    fn run_in_background(
        self: &Arc<Self>,
        mode: Mode,
        request: &dsh_subagents::Request,
        link: &ParentLink,
        depth: u64,
        workspace: &Workspace,
    ) -> Result<ToolOutcome, String> {
        let error = |message: String, code: &str| {
            Ok(ToolOutcome::coded_error(message, "SubagentError", code))
        };
        let Some(mailbox) = self.mailbox(&link.session) else {
            return error(
                String::from(
                    "background subagents are not available for this session; call again with run_in_background false",
                ),
                "NO_BACKGROUND",
            );
        };
        if self.stopping.load(Ordering::SeqCst) {
            return error(
                String::from("the agent is shutting down; no new background subagent starts"),
                "NO_BACKGROUND",
            );
        }
        let max = self.settings.max_background;
        let reserved = self
            .background
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !reserved {
            return error(
                format!(
                    "{max} background subagents are already running; wait for one to finish or run this one in the foreground"
                ),
                "TOO_MANY",
            );
        }
        let release = Release(self.clone());
        let (child, seed) = self.start(mode, request, link, depth, workspace)?;
        let id = child.session_id().clone();
        let description = request.description.clone();
        let this = self.clone();
        let watcher = std::thread::Builder::new()
            .name(format!("dsh-subagent-{id}"))
            .spawn(move || {
                let _release = release;
                let result = loop {
                    match child.wait_idle(Some(this.settings.poll)) {
                        Ok(summary) => {
                            let events = child.events().unwrap_or_default();
                            let live = events.get(seed..).unwrap_or(&[]);
                            break outcome(summary.reason.as_ref(), final_output(live));
                        }
                        Err(ShellError::Timeout) if this.stopping.load(Ordering::SeqCst) => {
                            child.cancel(CancelCause::Parent, false);
                            let _ = child.wait_idle(Some(this.settings.cancel_wait));
                            break ToolOutcome::aborted();
                        }
                        Err(ShellError::Timeout) => {}
                        Err(e) => {
                            break ToolOutcome::error(format!("the subagent stopped: {e}"));
                        }
                    }
                };
                let child_id = child.session_id().clone();
                child.dispose();
                this.detach(&child_id);
                let message_id = (this.ids)();
                let message =
                    settled_message(message_id.as_str(), &child_id, &description, &result);
                // A parent disposed meanwhile cannot be told; the child's
                // log is stored either way.
                let _ = mailbox.send_message(message, InboxTarget::NextStep, true);
            });
        if let Err(e) = watcher {
            // The child went with the closure (disposed, slot released).
            self.detach(&id);
            return Err(format!("cannot start the subagent's watcher: {e}"));
        }
        Ok(started_outcome(&id, &request.description))
    }

    fn mailbox(&self, session: &SessionId) -> Option<Mailbox> {
        self.mailboxes
            .lock()
            .ok()
            .and_then(|m| m.get(session).cloned())
    }

    /// Lets background children of session `id` (an agent this delegation
    /// installed into) deliver their results to it through `mailbox`.
    /// Children started by this delegation are attached by it.
    pub fn attach(&self, id: SessionId, mailbox: Mailbox) {
        if let Ok(mut m) = self.mailboxes.lock() {
            m.insert(id, mailbox);
        }
    }

    /// Stops the background children (the parent is going away): each is
    /// cancelled with `{"kind":"parent"}` and persisted; waits up to
    /// `timeout` for them. No background child starts afterwards.
    pub fn shutdown(&self, timeout: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + timeout;
        while self.background.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(self.settings.poll);
        }
    }

    /// Forgets the mailbox of session `id` (a disposed agent).
    pub fn detach(&self, id: &SessionId) {
        if let Ok(mut m) = self.mailboxes.lock() {
            m.remove(id);
        }
    }

    /// Starts a child for `request`: its configuration from the factory
    /// (approvals never asked, the child plugin, the tools), its session
    /// (fresh or forked), its one `followup`. Returns it with its seed
    /// length.
    ///
    /// A child whose configured workspace is the parent's (same path) gets
    /// the parent's opened `workspace` (its handle shared), not a new one
    /// opened by path: a directory swapped in at that path since the parent
    /// opened it is refused by the child's tools as by the parent's.
    fn start(
        self: &Arc<Self>,
        mode: Mode,
        request: &dsh_subagents::Request,
        link: &ParentLink,
        depth: u64,
        workspace: &Workspace,
    ) -> Result<(Agent, usize), String> {
        let mut config = (self.factory)().map_err(|e| format!("child configuration: {e}"))?;
        if config.opened_workspace.is_none() {
            let root = config.workspace.as_ref().unwrap_or(&config.cwd);
            let root = std::env::current_dir().map_or_else(|_| root.clone(), |d| d.join(root));
            if root == workspace.root() || root == workspace.canonical_root() {
                config.opened_workspace = Some(workspace.clone());
            }
        }
        config.approval = config.approval.delegated();
        config.plugins.push(Box::new(
            Subagents::child(self.settings.max_depth, mode, &request.description)
                .with_token(self.token.clone()),
        ));
        self.add_tools(&mut config);
        let now = config.clock.now();
        let id = (self.ids)();
        let session = match mode {
            Mode::Spawn => spawn_session(
                id,
                u64::try_from(now.as_millis()).unwrap_or(0),
                dsh_host::absolute_cwd(&config.cwd),
                &link.session,
                depth,
            )
            .map_err(|e| e.to_string())?,
            Mode::Fork => {
                let parent = self
                    .store
                    .inspect(&link.session, &dsh_store::Cancel::new())
                    .map_err(|e| format!("cannot read the parent session: {e}"))?;
                let parent = dsh_core::session::Session::restore(parent.header, parent.events)
                    .map_err(|e| format!("cannot read the parent session: {e}"))?;
                fork_session(parent, link.fork_at, id, now, depth).map_err(|e| e.to_string())?
            }
        };
        let seed = session.len() as usize;
        let child = Agent::adopt(config, self.store.clone(), session)
            .map_err(|e| format!("cannot start the subagent: {e}"))?;
        self.attach(child.session_id().clone(), child.mailbox());
        // The child never asks: recorded as the reference does, before its
        // prompt (session.md `approval/policy`, last one wins).
        let prompted = child
            .append_event(EventData::plugin(
                APPROVAL_POLICY,
                &json!({"policy": "never", "source": "delegation"}),
            ))
            .map_err(|e| format!("cannot record the subagent's approval policy: {e}"))
            .and_then(|_| {
                child
                    .followup(&request.prompt)
                    .map_err(|e| format!("cannot prompt the subagent: {e}"))
            });
        if let Err(e) = prompted {
            self.detach(child.session_id());
            return Err(e);
        }
        Ok((child, seed))
    }
}

/// The `subagent` or `subagent_fork` tool of a std agent.
struct SubagentTool {
    mode: Mode,
    delegation: Arc<Delegation>,
}

impl Tool for SubagentTool {
    fn definition(&self) -> ToolDefinition {
        definition(self.mode)
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        self.delegation.run(self.mode, call, ctx)
    }
}
