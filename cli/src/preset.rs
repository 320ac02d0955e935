//! Permission presets: one flag, `--preset`, mapped to
//! the approval policy and the sandbox together, and logged as the
//! reference logs a preset switch (`permission/preset {preset}`,
//! `sandbox/mode {mode}`, `approval/policy {policy}`).

use clap::ValueEnum;
use dsh_std::{ApprovalMode, ApprovalPolicy};
use serde_json::json;

use dsh_core::session::EventData;

/// A permission preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[non_exhaustive]
pub enum Preset {
    /// Reads run; writes, edits and commands are refused.
    ReadOnly,
    /// Reads run; writes, edits and commands ask (the default).
    WorkspaceWrite,
    /// Everything runs without asking, inside the workspace sandbox.
    FullAuto,
}

/// Tools a read-only preset refuses.
const WRITERS: &[&str] = &["write", "edit", "bash", "bash_start", "bash_kill"];

impl Preset {
    /// The reference's name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::ReadOnly => "read-only",
            Preset::WorkspaceWrite => "workspace-write",
            Preset::FullAuto => "full-auto",
        }
    }

    /// Whether every tool runs unasked.
    pub fn approve_all(self) -> bool {
        self == Preset::FullAuto
    }

    /// Applies the preset to `policy` (built for `approve_all()`).
    pub fn apply(self, policy: &mut ApprovalPolicy) {
        if self == Preset::ReadOnly {
            for t in WRITERS {
                policy.set(*t, ApprovalMode::Deny);
            }
        }
    }

    /// The `approval/policy` value logged with the preset.
    pub fn policy(self) -> &'static str {
        match self {
            Preset::FullAuto => "never",
            _ => "ask",
        }
    }

    /// The events that record the preset, in the reference's order;
    /// `sandbox` is the sandbox mode `bash` really runs under
    /// (`workspace-write` or `danger-full-access`).
    pub fn events(self, sandbox: &str) -> Vec<EventData> {
        vec![
            EventData::plugin("permission/preset", &json!({"preset": self.name()})),
            EventData::plugin("sandbox/mode", &json!({"mode": sandbox})),
            EventData::plugin("approval/policy", &json!({"policy": self.policy()})),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_map_to_policy_and_events() {
        let mut p = crate::shell::approval_policy(Preset::ReadOnly.approve_all());
        Preset::ReadOnly.apply(&mut p);
        assert_eq!(p.mode_for("write"), ApprovalMode::Deny);
        assert_eq!(p.mode_for("bash"), ApprovalMode::Deny);
        assert_eq!(p.mode_for("read"), ApprovalMode::Auto);
        let p = crate::shell::approval_policy(Preset::FullAuto.approve_all());
        assert_eq!(p.mode_for("bash"), ApprovalMode::Auto);
        let types: Vec<String> = Preset::ReadOnly
            .events("workspace-write")
            .iter()
            .map(|e| format!("{} {}", e.event_type(), serde_json::to_string(e).unwrap()))
            .collect();
        assert_eq!(
            types,
            [
                r#"permission/preset {"preset":"read-only"}"#,
                r#"sandbox/mode {"mode":"workspace-write"}"#,
                r#"approval/policy {"policy":"ask"}"#
            ]
        );
    }
}
