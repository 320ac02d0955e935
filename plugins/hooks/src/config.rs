//! Hook configurations: the two dialects' JSON shapes and where the files
//! are found.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::protocol::{Dialect, matcher_error};

/// One configured command hook.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CommandHook {
    /// The shell command line.
    pub command: String,
    /// The hook's own timeout in seconds (`timeout`; Codex also
    /// `timeoutSec`).
    pub timeout_sec: Option<f64>,
}

/// A matcher and the hooks it selects.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MatcherGroup {
    /// The pattern; `None` matches all.
    pub matcher: Option<String>,
    /// The hooks, in order.
    pub hooks: Vec<CommandHook>,
}

/// The hooks of one dialect: hook point → groups, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct HookConfig {
    /// `(point, groups)` in the order points were first seen.
    pub points: Vec<(String, Vec<MatcherGroup>)>,
}

impl HookConfig {
    /// The groups of `point`.
    pub fn groups(&self, point: &str) -> &[MatcherGroup] {
        self.points
            .iter()
            .find(|(p, _)| p == point)
            .map_or(&[], |(_, g)| g.as_slice())
    }

    /// Appends `other`'s groups after this config's (a later file adds to
    /// an earlier one).
    pub fn extend(&mut self, other: HookConfig) {
        for (point, groups) in other.points {
            match self.points.iter_mut().find(|(p, _)| *p == point) {
                Some((_, g)) => g.extend(groups),
                None => self.points.push((point, groups)),
            }
        }
    }

    /// Whether no hook is configured.
    pub fn is_empty(&self) -> bool {
        self.points.iter().all(|(_, g)| g.is_empty())
    }
}

/// A parsed file: the runnable hooks and notes on what was skipped.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Parsed {
    /// The hooks.
    pub config: HookConfig,
    /// One line per skipped hook (a `prompt` hook, an async Codex hook).
    pub skipped: Vec<String>,
}

/// Most hooks one file may configure (a hostile file cannot make every
/// tool call start thousands of processes).
pub const MAX_HOOKS_PER_FILE: usize = 256;

/// Parses a settings object with a `hooks` key, or a bare event map, in
/// `dialect`. Unknown events and malformed entries are skipped; an invalid
/// regex matcher fails the file.
pub fn parse(raw: &Value, dialect: Dialect) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    let Some(root) = raw.as_object() else {
        return Err("the hook config is not a JSON object".into());
    };
    let map: &Map<String, Value> = match root.get("hooks") {
        Some(Value::Object(h)) => h,
        Some(_) => return Err("`hooks` is not an object".into()),
        None => root,
    };
    let mut count = 0usize;
    for &event in dialect.events() {
        let Some(Value::Array(raw_groups)) = map.get(event) else {
            continue;
        };
        let mut groups = Vec::new();
        for group in raw_groups {
            let Some(group) = group.as_object() else {
                continue;
            };
            let Some(Value::Array(raw_hooks)) = group.get("hooks") else {
                continue;
            };
            let mut hooks = Vec::new();
            for hook in raw_hooks {
                let Some(hook) = hook.as_object() else {
                    continue;
                };
                let kind = hook
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("command");
                if kind != "command" {
                    parsed
                        .skipped
                        .push(format!("unsupported \"{kind}\" hook on {event}"));
                    continue;
                }
                if dialect == Dialect::Codex && hook.get("async") == Some(&Value::Bool(true)) {
                    parsed.skipped.push(format!("async hook on {event}"));
                    continue;
                }
                let Some(command) = hook.get("command").and_then(Value::as_str) else {
                    continue;
                };
                let timeout = hook.get("timeout").and_then(Value::as_f64).or_else(|| {
                    (dialect == Dialect::Codex)
                        .then(|| hook.get("timeoutSec").and_then(Value::as_f64))
                        .flatten()
                });
                count += 1;
                if count > MAX_HOOKS_PER_FILE {
                    return Err(format!("more than {MAX_HOOKS_PER_FILE} hooks"));
                }
                hooks.push(CommandHook {
                    command: command.to_string(),
                    timeout_sec: timeout.filter(|t| t.is_finite() && *t > 0.0),
                });
            }
            if hooks.is_empty() {
                continue;
            }
            let matcher = match event {
                "UserPromptSubmit" | "Stop" => None,
                _ => group
                    .get("matcher")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            };
            if let Some(e) = matcher_error(matcher.as_deref(), dialect) {
                return Err(format!("{e} on event \"{event}\""));
            }
            groups.push(MatcherGroup { matcher, hooks });
        }
        if !groups.is_empty() {
            parsed.config.points.push((event.to_string(), groups));
        }
    }
    Ok(parsed)
}

/// Largest hook config file read (bytes).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Where a configuration file comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// The user's own (`~/.claude`, `~/.codex`, dsh's config): always runs.
    User,
    /// The project folder: runs only when the folder is trusted.
    Project,
}

/// A hook config file to read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// Its dialect.
    pub dialect: Dialect,
    /// User or project.
    pub origin: Origin,
}

impl Source {
    /// A source.
    pub fn new(path: PathBuf, dialect: Dialect, origin: Origin) -> Self {
        Source {
            path,
            dialect,
            origin,
        }
    }
}

/// The files hooks are read from, in order: `~/.claude/settings.json`,
/// `<project>/.claude/settings.json`, `<project>/.claude/settings.local.json`
/// (claude-code), `~/.codex/hooks.json`, `<project>/.codex/hooks.json`
/// (codex), then `extra` (dsh's own config, user level).
pub fn sources(home: Option<&Path>, project: &Path, extra: &[Source]) -> Vec<Source> {
    let mut out = Vec::new();
    if let Some(h) = home {
        out.push(Source::new(
            h.join(".claude/settings.json"),
            Dialect::ClaudeCode,
            Origin::User,
        ));
    }
    out.push(Source::new(
        project.join(".claude/settings.json"),
        Dialect::ClaudeCode,
        Origin::Project,
    ));
    out.push(Source::new(
        project.join(".claude/settings.local.json"),
        Dialect::ClaudeCode,
        Origin::Project,
    ));
    if let Some(h) = home {
        out.push(Source::new(
            h.join(".codex/hooks.json"),
            Dialect::Codex,
            Origin::User,
        ));
    }
    out.push(Source::new(
        project.join(".codex/hooks.json"),
        Dialect::Codex,
        Origin::Project,
    ));
    out.extend(extra.iter().cloned());
    // The user's home may be the project: read each file once.
    let mut seen: Vec<PathBuf> = Vec::new();
    out.retain(|s| {
        if seen.contains(&s.path) {
            false
        } else {
            seen.push(s.path.clone());
            true
        }
    });
    out
}

/// The repository root of `cwd` (the nearest folder with `.git`), else
/// `cwd`.
pub fn project_root(cwd: &Path) -> PathBuf {
    let mut dir = Some(cwd);
    while let Some(d) = dir {
        if d.join(".git").exists() {
            return d.to_path_buf();
        }
        dir = d.parent();
    }
    cwd.to_path_buf()
}

/// What [`load`] found.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Loaded {
    /// The claude-code hooks of every file read.
    pub claude_code: HookConfig,
    /// The codex hooks of every file read.
    pub codex: HookConfig,
    /// Notices for the user: unreadable or invalid files, skipped hooks,
    /// project hooks not run because the folder is not trusted.
    pub notices: Vec<String>,
    /// Project files with hooks that were not loaded (untrusted folder).
    pub untrusted: Vec<PathBuf>,
}

/// Reads `sources`; project files only when `trusted`. A missing file is
/// no hooks; an unreadable or invalid one is a notice naming it.
pub fn load(sources: &[Source], trusted: bool) -> Loaded {
    let mut loaded = Loaded::default();
    for s in sources {
        let text = match read_capped(&s.path) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                loaded
                    .notices
                    .push(format!("hooks: cannot read {}: {e}", s.path.display()));
                continue;
            }
        };
        let value: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                loaded
                    .notices
                    .push(format!("hooks: {} is not JSON: {e}", s.path.display()));
                continue;
            }
        };
        match parse(&value, s.dialect) {
            Ok(p) => {
                if p.config.is_empty() {
                    continue;
                }
                if s.origin == Origin::Project && !trusted {
                    loaded.untrusted.push(s.path.clone());
                    continue;
                }
                for skip in p.skipped {
                    loaded
                        .notices
                        .push(format!("hooks: {}: skipping {skip}", s.path.display()));
                }
                match s.dialect {
                    Dialect::ClaudeCode => loaded.claude_code.extend(p.config),
                    Dialect::Codex => loaded.codex.extend(p.config),
                }
            }
            Err(e) => loaded
                .notices
                .push(format!("hooks: {} ignored: {e}", s.path.display())),
        }
    }
    if !loaded.untrusted.is_empty() {
        let files: Vec<String> = loaded
            .untrusted
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        loaded.notices.push(format!(
            "hooks: not running the hooks of an untrusted folder ({}); run `dsh trust` there to allow them",
            files.join(", ")
        ));
    }
    loaded
}

fn read_capped(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut buf = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("larger than {MAX_CONFIG_BYTES} bytes"));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| "not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_settings_parse() {
        let raw = json!({"permissions": {}, "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "check.sh", "timeout": 30},
                {"type": "prompt", "prompt": "x"}
            ]}],
            "Stop": [{"matcher": "ignored", "hooks": [{"type": "command", "command": "stop.sh"}]}],
            "Unknown": [{"hooks": [{"type": "command", "command": "x"}]}]
        }});
        let p = parse(&raw, Dialect::ClaudeCode).unwrap();
        let g = p.config.groups("PreToolUse");
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].matcher.as_deref(), Some("Bash"));
        assert_eq!(g[0].hooks[0].timeout_sec, Some(30.0));
        assert_eq!(p.config.groups("Stop")[0].matcher, None);
        assert_eq!(p.skipped, vec!["unsupported \"prompt\" hook on PreToolUse"]);
        assert!(p.config.groups("Unknown").is_empty());
    }

    #[test]
    fn codex_parse_and_bad_matcher() {
        let raw = json!({"hooks": {"PreToolUse": [{"matcher": "(", "hooks": [{"command": "x"}]}]}});
        assert!(
            parse(&raw, Dialect::Codex)
                .unwrap_err()
                .contains("invalid codex regex")
        );
        let raw = json!({"PreToolUse": [{"matcher": "^bash$", "hooks": [
            {"command": "x", "timeoutSec": 5}, {"command": "y", "async": true}]}]});
        let p = parse(&raw, Dialect::Codex).unwrap();
        assert_eq!(p.config.groups("PreToolUse")[0].hooks.len(), 1);
        assert_eq!(
            p.config.groups("PreToolUse")[0].hooks[0].timeout_sec,
            Some(5.0)
        );
        assert_eq!(p.skipped.len(), 1);
        assert!(parse(&json!([1]), Dialect::Codex).is_err());
    }

    #[test]
    fn untrusted_project_files_are_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("p");
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::create_dir_all(project.join(".claude")).unwrap();
        let cfg = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"true"}]}]}}"#;
        std::fs::write(home.join(".claude/settings.json"), cfg).unwrap();
        std::fs::write(project.join(".claude/settings.json"), cfg).unwrap();
        std::fs::write(project.join(".claude/settings.local.json"), "{oops").unwrap();
        let s = sources(Some(&home), &project, &[]);
        let l = load(&s, false);
        assert_eq!(l.claude_code.groups("Stop").len(), 1);
        assert_eq!(l.untrusted.len(), 1);
        assert!(
            l.notices
                .iter()
                .any(|n| n.contains("settings.local.json is not JSON"))
        );
        let l = load(&s, true);
        assert_eq!(l.claude_code.groups("Stop").len(), 2);
        assert!(l.untrusted.is_empty());
    }
}
