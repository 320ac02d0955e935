//! `dsh-approval`: the pre-execute approval policy (TL-9 steps 4-5, TL-10)
//! as a kernel plugin: per tool `ask`, `auto` or `deny`, with per-tool
//! overrides and a default.
//!
//! [`ApprovalPolicy::pre_execute`] is the `tools/pre-execute` decision;
//! an `ask` is answered by a front end with an [`ApprovalDecision`], which
//! [`ApprovalPolicy::resolve`] turns into the core's [`ApprovalOutcome`]
//! (and remembers `AllowAlways`). [`ApprovalPlugin`] puts both on the
//! kernel's seams; it is a plugin, not part of the tool bodies
//! (`dsh-tools`), so a front end can use it with any set of tools.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dsh_core::agent::{ApprovalOutcome, PreToolDecision, ToolExecution, ToolToken};
use dsh_runtime::{Ask, Cx, Flow, Plugin, Reply, Seams};

/// What the policy does with a call before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalMode {
    /// Ask the user through the shell's approval channel.
    Ask,
    /// Run without asking.
    Auto,
    /// Refuse: the model sees the TL-10 denial result.
    Deny,
}

impl ApprovalMode {
    /// Parses `ask`, `auto` or `deny`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ask" => Some(ApprovalMode::Ask),
            "auto" => Some(ApprovalMode::Auto),
            "deny" => Some(ApprovalMode::Deny),
            _ => None,
        }
    }

    /// The config string.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Ask => "ask",
            ApprovalMode::Auto => "auto",
            ApprovalMode::Deny => "deny",
        }
    }
}

pub use dsh_runtime::ApprovalDecision;

/// Per-tool modes with a default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalPolicy {
    default: ApprovalMode,
    overrides: BTreeMap<String, ApprovalMode>,
}

impl Default for ApprovalPolicy {
    /// Everything runs (`auto`), the reference with no policy loaded.
    fn default() -> Self {
        ApprovalPolicy::new(ApprovalMode::Auto)
    }
}

impl ApprovalPolicy {
    /// A policy whose every tool has `default`.
    pub fn new(default: ApprovalMode) -> Self {
        ApprovalPolicy {
            default,
            overrides: BTreeMap::new(),
        }
    }

    /// Sets the mode of one tool.
    pub fn with(mut self, tool: impl Into<String>, mode: ApprovalMode) -> Self {
        self.set(tool, mode);
        self
    }

    /// Sets the mode of one tool.
    pub fn set(&mut self, tool: impl Into<String>, mode: ApprovalMode) {
        self.overrides.insert(tool.into(), mode);
    }

    /// This policy for a delegated agent (a subagent), which has no one to
    /// ask: every `ask` becomes `deny`.
    pub fn delegated(&self) -> ApprovalPolicy {
        let fix = |m: ApprovalMode| match m {
            ApprovalMode::Ask => ApprovalMode::Deny,
            other => other,
        };
        ApprovalPolicy {
            default: fix(self.default),
            overrides: self
                .overrides
                .iter()
                .map(|(k, m)| (k.clone(), fix(*m)))
                .collect(),
        }
    }

    /// The policy as text: the default, then each override.
    pub fn describe(&self) -> String {
        let mut s = format!("default: {}", self.default.as_str());
        for (tool, mode) in &self.overrides {
            s.push_str(&format!("\n{tool}: {}", mode.as_str()));
        }
        s
    }

    /// The default mode.
    pub fn default_mode(&self) -> ApprovalMode {
        self.default
    }

    /// The mode for `tool`: its override, else the default.
    pub fn mode_for(&self, tool: &str) -> ApprovalMode {
        self.overrides.get(tool).copied().unwrap_or(self.default)
    }

    /// The denial reason for `tool` (TL-10 shows it as `Error: <reason>`).
    pub fn denial_reason(tool: &str) -> String {
        format!("{tool} is disabled by policy in this session")
    }

    /// The `tools/pre-execute` decision for a call of `tool` (TL-9 step 4).
    /// Unknown tools go through the policy too (TL-8).
    pub fn pre_execute(&self, tool: &str) -> PreToolDecision {
        match self.mode_for(tool) {
            ApprovalMode::Auto => PreToolDecision::Allow,
            ApprovalMode::Deny => PreToolDecision::Deny {
                reason: ApprovalPolicy::denial_reason(tool),
            },
            ApprovalMode::Ask => PreToolDecision::Ask {
                reason: Some(format!("tool \"{tool}\" requires approval")),
            },
        }
    }

    /// Applies a front end's answer for `tool` (TL-9 step 5): `None` means
    /// the approval was cancelled. `AllowAlways` switches the tool to
    /// `auto` for the rest of the session.
    pub fn resolve(&mut self, tool: &str, decision: Option<ApprovalDecision>) -> ApprovalOutcome {
        match decision {
            Some(ApprovalDecision::Allow) => ApprovalOutcome::AllowedOnce,
            Some(ApprovalDecision::AllowAlways) => {
                self.set(tool, ApprovalMode::Auto);
                ApprovalOutcome::AllowedOnce
            }
            Some(ApprovalDecision::Deny) => ApprovalOutcome::Rejected,
            // A decision this version does not know runs nothing.
            Some(_) => ApprovalOutcome::Rejected,
            None => ApprovalOutcome::Cancelled,
        }
    }
}

/// The approval policy as a kernel plugin (TL-9 steps 4-5, TL-10): the
/// `tools/pre-execute` decision comes from the shared policy, and every
/// `ask` goes to a front end through the kernel
/// ([`AgentEvent::ApprovalRequested`](dsh_runtime::AgentEvent)); the
/// answer is resolved by the policy (`AllowAlways` sticks). A withdrawn ask
/// (abort, disposal) is `cancelled`.
///
/// Every ask and its answer are logged as the reference logs them
/// (session.md `approval/asked {id, toolName, callId?, reason?}`,
/// `approval/decided {id, outcome}`); the id is `approval-<seq of the
/// asked event>`, unique in the session. The plugin's command
/// `permissions` shows the policy and edits one tool's mode (`/permissions`).
#[derive(Clone, Debug, Default)]
pub struct ApprovalPlugin {
    /// The policy, shared with whoever inspects or edits it.
    pub policy: Arc<Mutex<ApprovalPolicy>>,
    /// Open asks: the tool token and the logged approval id.
    asked: Vec<(ToolToken, String)>,
}

/// Most asks open at once that the plugin tracks for the log (one per
/// running tool call; the core runs at most a batch at a time).
const MAX_OPEN_ASKS: usize = 1024;

/// The logged `outcome` of a resolved approval (the reference's words).
pub fn outcome_name(outcome: ApprovalOutcome) -> &'static str {
    match outcome {
        ApprovalOutcome::AllowedOnce => "allowed-once",
        ApprovalOutcome::Rejected => "rejected",
        ApprovalOutcome::Cancelled => "cancelled",
        _ => "unavailable",
    }
}

impl ApprovalPlugin {
    /// A plugin over `policy`.
    pub fn new(policy: Arc<Mutex<ApprovalPolicy>>) -> Self {
        ApprovalPlugin {
            policy,
            asked: Vec::new(),
        }
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, ApprovalPolicy> {
        self.policy.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Plugin for ApprovalPlugin {
    fn name(&self) -> &str {
        "approval-policy"
    }

    fn seams(&self) -> Seams {
        Seams::TOOL_PRE_EXECUTE | Seams::TOOL_APPROVAL | Seams::COMMAND
    }

    fn tool_pre_execute(
        &mut self,
        _cx: &mut Cx<'_>,
        exec: &ToolExecution,
        value: PreToolDecision,
    ) -> Flow<PreToolDecision> {
        match value {
            PreToolDecision::Allow => Flow::Next(self.policy().pre_execute(&exec.name)),
            other => Flow::Next(other),
        }
    }

    fn tool_approval(
        &mut self,
        cx: &mut Cx<'_>,
        exec: &ToolExecution,
        reason: Option<&str>,
        _value: ApprovalOutcome,
    ) -> Flow<ApprovalOutcome> {
        let decision = match cx.reply() {
            None => {
                let id = format!("approval-{}", cx.next_seq());
                let mut data = serde_json::json!({
                    "id": id,
                    "toolName": exec.name,
                    "callId": exec.call_id.0,
                });
                if let Some(r) = reason {
                    data["reason"] = serde_json::Value::from(r);
                }
                cx.append_plugin("approval/asked", &data);
                if self.asked.len() < MAX_OPEN_ASKS {
                    self.asked.push((exec.token, id));
                }
                return Flow::Ask(Ask::Approval {
                    call_id: exec.call_id.0.clone(),
                    tool: exec.name.clone(),
                    arguments: exec.raw_arguments.clone(),
                    reason: reason.map(String::from),
                });
            }
            Some(Reply::Approval(d)) => Some(*d),
            Some(_) => None,
        };
        let outcome = self.policy().resolve(&exec.name, decision);
        if let Some(at) = self.asked.iter().position(|(t, _)| *t == exec.token) {
            let (_, id) = self.asked.swap_remove(at);
            cx.append_plugin(
                "approval/decided",
                &serde_json::json!({"id": id, "outcome": outcome_name(outcome)}),
            );
        }
        Flow::Done(outcome)
    }

    /// `permissions`: `{"args": ""}` shows the policy; `{"args": "TOOL
    /// ask|auto|deny"}` sets one tool's mode. The result is the command
    /// result `{"kind", "text"}`.
    fn command(
        &mut self,
        _cx: &mut Cx<'_>,
        name: &str,
        value: serde_json::Value,
    ) -> Flow<serde_json::Value> {
        if name != "permissions" {
            return Flow::Next(value);
        }
        let args = value.get("args").and_then(|a| a.as_str()).unwrap_or("");
        let words: Vec<&str> = args.split_whitespace().collect();
        let result = match words.as_slice() {
            [] => serde_json::json!({"kind": "success", "text": self.policy().describe()}),
            [tool, mode] => match ApprovalMode::parse(mode) {
                Some(m) if tool.len() <= 128 => {
                    self.policy().set(*tool, m);
                    serde_json::json!({"kind": "success", "text": format!("{tool}: {}", m.as_str())})
                }
                _ => {
                    serde_json::json!({"kind": "error", "text": "usage: /permissions [TOOL ask|auto|deny]"})
                }
            },
            _ => {
                serde_json::json!({"kind": "error", "text": "usage: /permissions [TOOL ask|auto|deny]"})
            }
        };
        Flow::Done(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [ApprovalMode::Ask, ApprovalMode::Auto, ApprovalMode::Deny] {
            assert_eq!(ApprovalMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(ApprovalMode::parse("maybe"), None);
    }

    #[test]
    fn delegated_policy_denies_what_would_ask() {
        let p = ApprovalPolicy::new(ApprovalMode::Ask)
            .with("read", ApprovalMode::Auto)
            .with("bash", ApprovalMode::Ask)
            .delegated();
        assert_eq!(p.mode_for("read"), ApprovalMode::Auto);
        assert_eq!(p.mode_for("bash"), ApprovalMode::Deny);
        assert_eq!(p.mode_for("write"), ApprovalMode::Deny);
        let auto = ApprovalPolicy::new(ApprovalMode::Auto).delegated();
        assert_eq!(auto.mode_for("bash"), ApprovalMode::Auto);
    }

    #[test]
    fn overrides_win_over_the_default() {
        let p = ApprovalPolicy::new(ApprovalMode::Ask)
            .with("read", ApprovalMode::Auto)
            .with("bash", ApprovalMode::Deny);
        assert_eq!(p.pre_execute("read"), PreToolDecision::Allow);
        assert_eq!(
            p.pre_execute("bash"),
            PreToolDecision::Deny {
                reason: "bash is disabled by policy in this session".into()
            }
        );
        assert_eq!(
            p.pre_execute("write"),
            PreToolDecision::Ask {
                reason: Some("tool \"write\" requires approval".into())
            }
        );
        // TL-8: unknown tools are subject to the policy as well.
        assert_eq!(p.mode_for("nope"), ApprovalMode::Ask);
        assert_eq!(
            ApprovalPolicy::default().pre_execute("bash"),
            PreToolDecision::Allow
        );
    }

    #[test]
    fn decisions_map_to_tl10_outcomes_and_allow_always_sticks() {
        let mut p = ApprovalPolicy::new(ApprovalMode::Ask);
        assert_eq!(
            p.resolve("bash", Some(ApprovalDecision::Allow)),
            ApprovalOutcome::AllowedOnce
        );
        assert_eq!(p.mode_for("bash"), ApprovalMode::Ask);
        assert_eq!(
            p.resolve("bash", Some(ApprovalDecision::Deny)),
            ApprovalOutcome::Rejected
        );
        assert_eq!(p.resolve("bash", None), ApprovalOutcome::Cancelled);
        assert_eq!(p.mode_for("bash"), ApprovalMode::Ask);
        assert_eq!(
            p.resolve("bash", Some(ApprovalDecision::AllowAlways)),
            ApprovalOutcome::AllowedOnce
        );
        assert_eq!(p.pre_execute("bash"), PreToolDecision::Allow);
        assert_eq!(p.mode_for("edit"), ApprovalMode::Ask);
    }
}
