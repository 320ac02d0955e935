//! The dialect-neutral hook protocol: what a hook's exit code, stdout and
//! stderr mean, how matchers select, and how several hooks merge.

use serde_json::{Map, Value};

/// Which tool's hook format a configuration is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// Claude Code (`.claude/settings.json`).
    ClaudeCode,
    /// Codex (`.codex/hooks.json`).
    Codex,
}

impl Dialect {
    /// The name logged on `hook/invoked.dialect` (`claude-code`, `codex`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::ClaudeCode => "claude-code",
            Dialect::Codex => "codex",
        }
    }

    /// The plugin name stamped on the messages this dialect's hooks add
    /// (`hooks-claude-code`, `hooks-codex`).
    pub fn plugin_name(self) -> &'static str {
        match self {
            Dialect::ClaudeCode => "hooks-claude-code",
            Dialect::Codex => "hooks-codex",
        }
    }

    /// The hook points this dialect runs.
    pub fn events(self) -> &'static [&'static str] {
        match self {
            Dialect::ClaudeCode => &[
                "SessionStart",
                "UserPromptSubmit",
                "PreToolUse",
                "PostToolUse",
                "Stop",
                "SubagentStop",
            ],
            Dialect::Codex => &[
                "PreToolUse",
                "PostToolUse",
                "SessionStart",
                "UserPromptSubmit",
                "Stop",
            ],
        }
    }
}

/// The exit code with which a hook blocks (stderr is the reason).
pub const BLOCKING_EXIT_CODE: i32 = 2;

/// The default per-hook timeout when a hook sets none (10 minutes, both
/// dialects).
pub const DEFAULT_TIMEOUT_MS: u64 = 600_000;

/// The default cap, in characters, of `hook/result.stderrSummary`.
pub const STDERR_SUMMARY_MAX_CHARS: usize = 500;

/// A hook's decision, as the two output channels express it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Top-level `"decision":"approve"`.
    Approve,
    /// `permissionDecision: "allow"`.
    Allow,
    /// Exit 2 or top-level `"decision":"block"`.
    Block,
    /// `permissionDecision: "deny"`.
    Deny,
    /// `permissionDecision: "ask"`.
    Ask,
}

impl Decision {
    /// The logged name (`hook/result.decision`).
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Allow => "allow",
            Decision::Block => "block",
            Decision::Deny => "deny",
            Decision::Ask => "ask",
        }
    }

    fn rank(self) -> u8 {
        match self {
            Decision::Deny | Decision::Block => 3,
            Decision::Ask => 2,
            Decision::Allow | Decision::Approve => 1,
        }
    }
}

/// What one hook run produced, decoded.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct HookOutput {
    /// The exit code; `None` when the hook could not run, timed out or died
    /// by a signal.
    pub exit_code: Option<i32>,
    /// Trimmed stderr.
    pub stderr: String,
    /// Trimmed stdout.
    pub stdout: String,
    /// `continue` from the JSON output.
    pub continue_: Option<bool>,
    /// `stopReason`.
    pub stop_reason: Option<String>,
    /// The decision, from the exit code or the JSON output.
    pub decision: Option<Decision>,
    /// The reason that goes with the decision.
    pub reason: Option<String>,
    /// `hookSpecificOutput.hookEventName`.
    pub hook_event_name: Option<String>,
    /// `hookSpecificOutput.additionalContext`.
    pub additional_context: Option<String>,
    /// `systemMessage`.
    pub system_message: Option<String>,
    /// `hookSpecificOutput.updatedInput`.
    pub updated_input: Option<Map<String, Value>>,
}

impl HookOutput {
    /// The logged `hook/result.decision`: the decision, else `stop` for
    /// `continue:false`, else `pass`.
    pub fn logged_decision(&self) -> &'static str {
        match (self.decision, self.continue_) {
            (Some(d), _) => d.as_str(),
            (None, Some(false)) => "stop",
            _ => "pass",
        }
    }
}

fn string_of(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Decodes a hook's outcome. Exit 2 blocks with stderr as the reason; on
/// exit 0 a stdout that is a JSON object carries the structured fields
/// (anything else stays plain stdout); other exits are non-blocking
/// errors. A `hookSpecificOutput` whose `hookEventName` is not
/// `expected_event` has its event-scoped fields ignored. Never fails.
pub fn parse_output(
    exit_code: Option<i32>,
    stdout: &str,
    stderr: &str,
    expected_event: Option<&str>,
) -> HookOutput {
    let mut out = HookOutput {
        exit_code,
        stderr: stderr.trim().to_string(),
        stdout: stdout.trim().to_string(),
        ..HookOutput::default()
    };
    if exit_code == Some(BLOCKING_EXIT_CODE) {
        out.decision = Some(Decision::Block);
        if !out.stderr.is_empty() {
            out.reason = Some(out.stderr.clone());
        }
    }
    if exit_code == Some(0)
        && out.stdout.starts_with('{')
        && let Ok(Value::Object(parsed)) = serde_json::from_str::<Value>(&out.stdout)
    {
        apply_structured(&mut out, &parsed, expected_event);
    }
    out
}

fn apply_structured(out: &mut HookOutput, parsed: &Map<String, Value>, expected: Option<&str>) {
    if let Some(c) = parsed.get("continue").and_then(Value::as_bool) {
        out.continue_ = Some(c);
    }
    if let Some(s) = string_of(parsed, "stopReason") {
        out.stop_reason = Some(s);
    }
    if let Some(s) = string_of(parsed, "systemMessage") {
        out.system_message = Some(s);
    }
    // The top-level `decision` is `approve` / `block` only.
    match parsed.get("decision").and_then(Value::as_str) {
        Some("approve") => out.decision = Some(Decision::Approve),
        Some("block") => out.decision = Some(Decision::Block),
        _ => {}
    }
    if let Some(r) = string_of(parsed, "reason") {
        out.reason = Some(r);
    }
    let Some(Value::Object(hso)) = parsed.get("hookSpecificOutput") else {
        return;
    };
    let name = string_of(hso, "hookEventName");
    out.hook_event_name = name.clone();
    if expected.is_some() && name.as_deref() != expected {
        return;
    }
    match hso.get("permissionDecision").and_then(Value::as_str) {
        Some("allow") => out.decision = Some(Decision::Allow),
        Some("deny") => out.decision = Some(Decision::Deny),
        Some("ask") => out.decision = Some(Decision::Ask),
        _ => {}
    }
    if let Some(r) = string_of(hso, "permissionDecisionReason") {
        out.reason = Some(r);
    }
    if let Some(c) = string_of(hso, "additionalContext") {
        out.additional_context = Some(c);
    }
    if let Some(Value::Object(u)) = hso.get("updatedInput") {
        out.updated_input = Some(u.clone());
    }
}

/// The merged decision of every hook of one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Merged {
    /// No hook decided.
    None,
    /// The strictest was allow / approve.
    Allow,
    /// The strictest was ask.
    Ask,
    /// Some hook denied or blocked.
    Deny,
}

/// The folded outcome of every hook that ran at one point.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MergedOutcome {
    /// deny > ask > allow > none.
    pub decision: Merged,
    /// The reasons of the hooks with the winning rank (deny or ask),
    /// joined with a blank line.
    pub reason: Option<String>,
    /// Some hook said `continue:false`.
    pub stop: bool,
    /// The first stopping hook's `stopReason`.
    pub stop_reason: Option<String>,
    /// Every `additionalContext`, in hook order.
    pub additional_context: Vec<String>,
    /// Every `systemMessage`, in hook order.
    pub system_messages: Vec<String>,
    /// The last `updatedInput` of a hook that did not deny.
    pub updated_input: Option<Map<String, Value>>,
}

/// Merges the outputs of the hooks of one point, in hook order:
/// deny > ask > allow, the first `continue:false` is kept, context and
/// system messages accumulate.
pub fn merge(outputs: &[HookOutput]) -> MergedOutcome {
    let mut max = 0u8;
    let mut reasons: [Vec<&str>; 4] = Default::default();
    let mut merged = MergedOutcome {
        decision: Merged::None,
        reason: None,
        stop: false,
        stop_reason: None,
        additional_context: Vec::new(),
        system_messages: Vec::new(),
        updated_input: None,
    };
    for out in outputs {
        let r = out.decision.map_or(0, Decision::rank);
        max = max.max(r);
        if r >= 2
            && let (Some(reason), Some(list)) = (&out.reason, reasons.get_mut(usize::from(r)))
            && !reason.is_empty()
        {
            list.push(reason);
        }
        if out.continue_ == Some(false) && !merged.stop {
            merged.stop = true;
            merged.stop_reason = out.stop_reason.clone();
        }
        if let Some(c) = out.additional_context.as_ref().filter(|c| !c.is_empty()) {
            merged.additional_context.push(c.clone());
        }
        if let Some(m) = out.system_message.as_ref().filter(|m| !m.is_empty()) {
            merged.system_messages.push(m.clone());
        }
        if r < 3 && out.updated_input.is_some() {
            merged.updated_input = out.updated_input.clone();
        }
    }
    merged.decision = match max {
        3 => Merged::Deny,
        2 => Merged::Ask,
        1 => Merged::Allow,
        _ => Merged::None,
    };
    merged.reason = reasons
        .get(usize::from(max))
        .filter(|l| !l.is_empty())
        .map(|l| l.join("\n\n"));
    merged
}

fn is_match_all(matcher: Option<&str>) -> bool {
    matches!(matcher, None | Some("") | Some("*"))
}

fn is_claude_literal(pattern: &str) -> bool {
    pattern
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'|')
}

/// Most bytes a compiled matcher may take (a hostile project's pattern
/// cannot make the process build a huge automaton).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
}

/// Why `matcher` is not valid in `dialect`, or `None` when it is.
pub fn matcher_error(matcher: Option<&str>, dialect: Dialect) -> Option<String> {
    let pattern = matcher.filter(|m| !is_match_all(Some(m)))?;
    if dialect == Dialect::ClaudeCode && is_claude_literal(pattern) {
        return None;
    }
    compile(pattern).err().map(|e| {
        format!(
            "invalid {} regex matcher {}: {e}",
            dialect.as_str(),
            Value::from(pattern)
        )
    })
}

/// Whether `matcher` selects `query` (a tool name, a session source):
/// absent, empty and `*` match all; in Claude Code a pattern of letters,
/// digits, `_` and `|` is a list of exact names; every other pattern is an
/// unanchored regex (an invalid one matches nothing).
pub fn matches(matcher: Option<&str>, query: &str, dialect: Dialect) -> bool {
    let Some(pattern) = matcher.filter(|m| !is_match_all(Some(m))) else {
        return true;
    };
    if dialect == Dialect::ClaudeCode && is_claude_literal(pattern) {
        return pattern.split('|').any(|p| p == query);
    }
    compile(pattern).is_ok_and(|r| r.is_match(query))
}

/// Trims `stderr` and cuts it to `max_chars` characters with `…`; `None`
/// when blank.
pub fn summarize_stderr(stderr: &str, max_chars: usize) -> Option<String> {
    let t = stderr.trim();
    if t.is_empty() {
        return None;
    }
    match t.char_indices().nth(max_chars) {
        Some((cut, _)) => Some(format!("{}…", &t[..cut])),
        None => Some(t.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_two_blocks_with_stderr() {
        let o = parse_output(Some(2), "", "  no bash here \n", Some("PreToolUse"));
        assert_eq!(o.decision, Some(Decision::Block));
        assert_eq!(o.reason.as_deref(), Some("no bash here"));
        assert_eq!(o.logged_decision(), "block");
        // JSON on a non-zero exit is ignored.
        let o = parse_output(Some(1), r#"{"decision":"block"}"#, "oops", None);
        assert_eq!(o.decision, None);
        assert_eq!(o.logged_decision(), "pass");
    }

    #[test]
    fn json_output_and_event_guard() {
        let out = r#"{"continue":false,"stopReason":"s","hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"r","updatedInput":{"command":"ls"}}}"#;
        let o = parse_output(Some(0), out, "", Some("PreToolUse"));
        assert_eq!(o.decision, Some(Decision::Deny));
        assert_eq!(o.reason.as_deref(), Some("r"));
        assert_eq!(o.continue_, Some(false));
        assert!(o.updated_input.is_some());
        // Another event's block is ignored.
        let o = parse_output(Some(0), out, "", Some("PostToolUse"));
        assert_eq!(o.decision, None);
        assert_eq!(o.hook_event_name.as_deref(), Some("PreToolUse"));
        assert_eq!(o.logged_decision(), "stop");
        // Top-level deny is not a decision; malformed JSON is plain text.
        assert_eq!(
            parse_output(Some(0), r#"{"decision":"deny"}"#, "", None).decision,
            None
        );
        assert_eq!(parse_output(Some(0), "{oops", "", None).stdout, "{oops");
    }

    #[test]
    fn merge_deny_over_ask_over_allow() {
        let allow = parse_output(
            Some(0),
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"fine"}}"#,
            "",
            Some("PreToolUse"),
        );
        let ask = parse_output(
            Some(0),
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?"}}"#,
            "",
            Some("PreToolUse"),
        );
        let deny1 = parse_output(Some(2), "", "one", None);
        let deny2 = parse_output(Some(2), "", "two", None);
        assert_eq!(merge(std::slice::from_ref(&allow)).decision, Merged::Allow);
        let m = merge(&[allow.clone(), ask.clone()]);
        assert_eq!(
            (m.decision, m.reason.as_deref()),
            (Merged::Ask, Some("sure?"))
        );
        let m = merge(&[deny1, ask, allow, deny2]);
        assert_eq!(m.decision, Merged::Deny);
        assert_eq!(m.reason.as_deref(), Some("one\n\ntwo"));
        assert_eq!(merge(&[]).decision, Merged::None);
    }

    #[test]
    fn matchers_per_dialect() {
        assert!(matches(None, "bash", Dialect::ClaudeCode));
        assert!(matches(Some("*"), "bash", Dialect::Codex));
        assert!(matches(Some("Bash|bash"), "bash", Dialect::ClaudeCode));
        assert!(!matches(Some("bas"), "bash", Dialect::ClaudeCode));
        // Codex: always an unanchored regex.
        assert!(matches(Some("bas"), "bash", Dialect::Codex));
        assert!(matches(Some("^(write|edit)$"), "edit", Dialect::ClaudeCode));
        assert!(!matches(Some("("), "(", Dialect::Codex));
        assert!(matcher_error(Some("("), Dialect::Codex).is_some());
        assert!(matcher_error(Some("a|b"), Dialect::ClaudeCode).is_none());
    }

    #[test]
    fn stderr_summary_is_capped() {
        assert_eq!(summarize_stderr("  \n", 5), None);
        assert_eq!(summarize_stderr("abcdefg", 3).as_deref(), Some("abc…"));
        assert_eq!(summarize_stderr("ééé", 3).as_deref(), Some("ééé"));
    }
}
