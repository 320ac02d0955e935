//! The tool bodies for the std runtime (feature `std`): each call runs a
//! child [`dsh_std::Agent`] in the same store (so its log lies beside the
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
//! A child never asks for approval (nobody would answer): its policy is the
//! parent's with every `ask` turned into `deny`.

use std::boxed::Box;
use std::format;
use std::string::{String, ToString};
use std::sync::Arc;
use std::time::Duration;
use std::vec::Vec;

use dsh_core::SessionId;
use dsh_core::agent::CancelCause;
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_std::{Agent, AgentConfig, ShellError};
use dsh_store::SessionStore;
use dsh_tools::{Tool, ToolCallRequest, ToolContext};

use crate::{
    DEFAULT_MAX_DEPTH, Mode, ParentLink, Subagents, child_depth, definition, final_output,
    fork_session, outcome, parse_request, spawn_session,
};

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_depth: DEFAULT_MAX_DEPTH,
            poll: Duration::from_millis(20),
            cancel_wait: Duration::from_millis(1_500),
        }
    }
}

/// Runs subagents for std agents: one per tool call.
pub struct Delegation {
    store: Arc<dyn SessionStore>,
    factory: ConfigFactory,
    settings: Settings,
    ids: IdSource,
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
        Delegation::with_ids(store, factory, settings, Arc::new(dsh_std::new_session_id))
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
        Subagents::new(self.settings.max_depth)
    }

    /// The `subagent` and `subagent_fork` tool bodies, for any runtime
    /// that runs `dsh_tools` bodies (`dsh_std`, `dsh_smol`); the children
    /// are `dsh_std` agents.
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
        let depth = match child_depth(link.depth, self.settings.max_depth) {
            Ok(d) => d,
            Err(e) => return Ok(e.outcome()),
        };
        if request.run_in_background {
            return Ok(ToolOutcome::coded_error(
                "background subagents are not available here; call again with run_in_background false",
                "SubagentError",
                "UNSUPPORTED",
            ));
        }
        let mut config = (self.factory)().map_err(|e| format!("child configuration: {e}"))?;
        config.approval = config.approval.delegated();
        config.plugins.push(Box::new(Subagents::child(
            self.settings.max_depth,
            mode,
            &request.description,
        )));
        self.add_tools(&mut config);
        let now = config.clock.now_ms();
        let id = (self.ids)();
        let session = match mode {
            Mode::Spawn => spawn_session(
                id,
                u64::try_from(now).unwrap_or(0),
                dsh_runtime::host::absolute_cwd(&config.cwd),
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
        child
            .followup(&request.prompt)
            .map_err(|e| format!("cannot prompt the subagent: {e}"))?;
        let summary = loop {
            match child.wait_idle(Some(self.settings.poll)) {
                Ok(summary) => break summary,
                Err(ShellError::Timeout) => {
                    if ctx.cancel.is_cancelled() {
                        child.cancel(CancelCause::Parent, false);
                        let _ = child.wait_idle(Some(self.settings.cancel_wait));
                        child.dispose();
                        return Ok(ToolOutcome::aborted());
                    }
                }
                Err(e) => return Err(format!("the subagent stopped: {e}")),
            }
        };
        let events = child.events().map_err(|e| e.to_string())?;
        child.dispose();
        let live = events.get(seed..).unwrap_or(&[]);
        Ok(outcome(summary.reason.as_ref(), final_output(live)))
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
