//! The [`SystemPrompt`] plugin.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use dsh_core::ToolSchema;
use dsh_core::agent::prompt::{Assembly, HARNESS_IDENTITY, PromptSection};
use dsh_runtime::{Cx, Flow, Plugin, Seams};
use serde_json::Value;

use crate::date::utc_date;

/// Name of the harness identity section (SP-2, band `-100`).
pub const IDENTITY_SECTION: &str = "harness:identity";
/// Name of the working-guidelines section (`-50`).
pub const GUIDELINES_SECTION: &str = "dsh:guidelines";
/// Name of the tool guidance section (`100`, the tool band of SP-2).
pub const TOOLS_SECTION: &str = "tools";
/// Name of the environment note (`200`).
pub const ENVIRONMENT_SECTION: &str = "environment";
/// Name of the appended text section (`1000`, after everything else).
pub const APPEND_SECTION: &str = "append";
/// Name of the dynamic facts context section (LC-12).
pub const ENVIRONMENT_CONTEXT: &str = "environment";

/// Most git status lines shown; the rest are counted.
const MAX_STATUS_LINES: usize = 30;
/// Most characters of a tool description in the guidance.
const MAX_DESCRIPTION_CHARS: usize = 300;

const GUIDELINES: &str = "You work as a coding agent in the user's workspace, through the tools \
listed below. Inspect files before you change them and never guess their contents. Keep changes \
minimal and focused on the request. After changing code, run the relevant build or tests when you \
can, and report what you did and what you could not verify. Be concise.";

const ENVIRONMENT_NOTE: &str = "The working directory, platform, date and the git state of the \
workspace arrive in a runtime-context message; a later runtime-context message supersedes earlier \
ones. Relative paths are relative to the working directory.";

/// The git state of the workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Git {
    /// The branch line (`main...origin/main [ahead 1]`, `HEAD (no branch)`).
    pub branch: String,
    /// Changed paths in `git status --porcelain` form (at most the first
    /// lines are kept by the gatherer).
    pub status: Vec<String>,
    /// How many more status lines there were.
    pub more: usize,
}

/// The dynamic facts of one turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The working directory (absolute).
    pub cwd: String,
    /// The platform (`linux x86_64`).
    pub platform: String,
    /// The git state; `None` outside a repository.
    pub git: Option<Git>,
}

impl Facts {
    /// The context text for these facts on `date`.
    pub fn render(&self, date: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Working directory: {}", self.cwd);
        if !self.platform.is_empty() {
            let _ = writeln!(out, "Platform: {}", self.platform);
        }
        let _ = write!(out, "Date: {date} (UTC)");
        match &self.git {
            None => out.push_str("\nGit: not a git repository"),
            Some(git) => {
                let _ = write!(out, "\nGit branch: {}", git.branch);
                if git.status.is_empty() && git.more == 0 {
                    out.push_str("\nGit status: clean");
                } else {
                    out.push_str("\nGit status:");
                    for line in git.status.iter().take(MAX_STATUS_LINES) {
                        let _ = write!(out, "\n{line}");
                    }
                    let more = git.more + git.status.len().saturating_sub(MAX_STATUS_LINES);
                    if more > 0 {
                        let _ = write!(out, "\n… and {more} more changed paths");
                    }
                }
            }
        }
        out
    }
}

/// Where the facts come from: called once per turn, at its first
/// assembly. A std host uses [`crate::host::HostFacts`].
pub trait FactSource: Send {
    /// The facts now.
    fn gather(&mut self) -> Facts;
}

impl<F: FnMut() -> Facts + Send> FactSource for F {
    fn gather(&mut self) -> Facts {
        self()
    }
}

/// The system-prompt plugin (see the crate docs).
pub struct SystemPrompt {
    identity: String,
    guidelines: bool,
    extra: Vec<PromptSection>,
    removed: Vec<String>,
    facts: Option<Box<dyn FactSource>>,
    cached: Option<(u64, String)>,
}

impl Default for SystemPrompt {
    fn default() -> Self {
        SystemPrompt::new()
    }
}

impl core::fmt::Debug for SystemPrompt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SystemPrompt")
            .field("identity", &self.identity)
            .field("extra", &self.extra)
            .field("removed", &self.removed)
            .finish_non_exhaustive()
    }
}

impl SystemPrompt {
    /// The default prompt: identity, guidelines, tool guidance and the
    /// environment note; no facts (add a [`FactSource`]).
    pub fn new() -> Self {
        SystemPrompt {
            identity: HARNESS_IDENTITY.to_owned(),
            guidelines: true,
            extra: Vec::new(),
            removed: Vec::new(),
            facts: None,
            cached: None,
        }
    }

    /// Replaces the identity section's text (`--system`).
    pub fn with_identity(mut self, text: impl Into<String>) -> Self {
        self.identity = text.into();
        self
    }

    /// Adds text after every other section (`--append-system`).
    pub fn with_appended(self, text: impl Into<String>) -> Self {
        let order = 1_000 + self.extra.len() as i64;
        self.with_section(PromptSection::new(APPEND_SECTION, order, text))
    }

    /// Adds `section`, replacing any section of the same name (the
    /// plugin's own or one already in the assembly).
    pub fn with_section(mut self, section: PromptSection) -> Self {
        self.removed.retain(|n| *n != section.name);
        if section.name != APPEND_SECTION {
            self.extra.retain(|s| s.name != section.name);
        }
        self.extra.push(section);
        self
    }

    /// Removes the section named `name` (the plugin's own or one already
    /// in the assembly).
    pub fn without_section(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.extra.retain(|s| s.name != name);
        if name == GUIDELINES_SECTION {
            self.guidelines = false;
        }
        self.removed.push(name);
        self
    }

    /// Gathers the dynamic facts from `source` once per turn.
    pub fn with_facts(mut self, source: impl FactSource + 'static) -> Self {
        self.facts = Some(Box::new(source));
        self
    }

    /// The system sections for `tools` (pure: the same tools give the same
    /// sections).
    pub fn sections(&self, tools: &[ToolSchema]) -> Vec<PromptSection> {
        let mut out = Vec::new();
        out.push(PromptSection::new(
            IDENTITY_SECTION,
            -100,
            self.identity.clone(),
        ));
        if self.guidelines {
            out.push(PromptSection::new(GUIDELINES_SECTION, -50, GUIDELINES));
        }
        out.push(PromptSection::new(TOOLS_SECTION, 100, tool_guidance(tools)));
        out.push(PromptSection::new(
            ENVIRONMENT_SECTION,
            200,
            ENVIRONMENT_NOTE,
        ));
        out
    }

    /// Applies this plugin to an assembly: adds its sections, the
    /// embedder's additions and removals, and (with `facts`) the context.
    pub fn apply(&self, mut value: Assembly, facts: Option<&str>) -> Assembly {
        let own = self.sections(&value.tools);
        value.sections.extend(own);
        for extra in &self.extra {
            let slot = (extra.name != APPEND_SECTION)
                .then(|| value.sections.iter().position(|s| s.name == extra.name))
                .flatten();
            match slot {
                Some(i) => value.sections[i] = extra.clone(),
                None => value.sections.push(extra.clone()),
            }
        }
        value.sections.retain(|s| !self.removed.contains(&s.name));
        if let Some(text) = facts {
            value
                .contexts
                .push(PromptSection::new(ENVIRONMENT_CONTEXT, 0, text));
        }
        value
    }
}

/// The tool guidance for `tools` (SP-2 tool band): one line per tool from
/// its schema (name, the description's first paragraph, required and
/// optional arguments), then hints for the built-in tools present.
pub fn tool_guidance(tools: &[ToolSchema]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# Tools\n\nUse the tools to read, search and change the workspace. Arguments are JSON \
         objects matching each tool's schema.\n",
    );
    for t in tools {
        let summary = summary(&t.description);
        let _ = write!(out, "\n- `{}`", t.name);
        if !summary.is_empty() {
            let _ = write!(out, ": {summary}");
        }
        let (required, optional) = arguments(&t.parameters);
        if !required.is_empty() {
            let _ = write!(out, " Required: {}.", required.join(", "));
        }
        if !optional.is_empty() {
            let _ = write!(out, " Optional: {}.", optional.join(", "));
        }
    }
    let has = |n: &str| tools.iter().any(|t| t.name == n);
    let mut hints: Vec<&str> = Vec::new();
    if has("grep") || has("glob") {
        hints.push(
            "Search with `grep` (file contents) and `glob` (file names) rather than shell \
             commands; they honour .gitignore and are fast.",
        );
    }
    if has("read") {
        hints.push("Read a file with `read` before editing it.");
    }
    if has("edit") {
        hints.push(
            "Change existing files with `edit` (exact text replacement); use `write` for new \
             files.",
        );
    }
    if has("bash") {
        hints.push(
            "Use `bash` for builds, tests, git and other commands; it runs in the working \
             directory and is not interactive.",
        );
    }
    if has("bash_start") && has("bash_output") {
        hints.push(
            "Run servers, watchers and other long-running commands with `bash_start`, read \
             their output with `bash_output`, and stop them with `bash_stop` when done.",
        );
    }
    if !hints.is_empty() {
        out.push_str("\n\n");
        out.push_str(&hints.join("\n"));
    }
    out
}

/// The first paragraph of a description, on one line, capped.
fn summary(description: &str) -> String {
    let para = description.trim().split("\n\n").next().unwrap_or("");
    let mut line: String = para.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > MAX_DESCRIPTION_CHARS {
        line = line.chars().take(MAX_DESCRIPTION_CHARS).collect();
        line.push('…');
    }
    line
}

/// The required and optional property names of a JSON Schema object.
fn arguments(parameters: &Value) -> (Vec<String>, Vec<String>) {
    let required: Vec<String> = parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(|s| format!("`{s}`"))
                .collect()
        })
        .unwrap_or_default();
    let optional = parameters
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.keys()
                .map(|k| format!("`{k}`"))
                .filter(|k| !required.contains(k))
                .collect()
        })
        .unwrap_or_default();
    (required, optional)
}

impl Plugin for SystemPrompt {
    fn name(&self) -> &str {
        "system-prompt"
    }

    fn seams(&self) -> Seams {
        Seams::ASSEMBLE
    }

    fn assemble(
        &mut self,
        cx: &mut Cx<'_>,
        turn: u64,
        _step: u64,
        value: Assembly,
    ) -> Flow<Assembly> {
        if let Some(source) = self.facts.as_mut()
            && self.cached.as_ref().is_none_or(|(t, _)| *t != turn)
        {
            let text = source.gather().render(&utc_date(cx.now().as_millis()));
            self.cached = Some((turn, text));
        }
        let facts = self.cached.as_ref().map(|(_, text)| text.as_str());
        Flow::Next(self.apply(value, facts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use serde_json::json;

    fn schema(name: &str, description: &str, parameters: Value) -> ToolSchema {
        ToolSchema::new(name, description, parameters)
    }

    fn tools() -> Vec<ToolSchema> {
        vec![
            schema(
                "bash",
                "Run a shell command.\n\nMore detail here.",
                json!({"type":"object","properties":{"command":{},"timeout":{}},"required":["command"]}),
            ),
            schema(
                "grep",
                "Search file contents.",
                json!({"type":"object","properties":{"pattern":{}},"required":["pattern"]}),
            ),
        ]
    }

    #[test]
    fn sp2_sections_in_bands_and_tool_guidance_from_schemas() {
        let p = SystemPrompt::new();
        let a = p.apply(
            {
                let mut assembly = Assembly::default();
                assembly.tools = tools();
                assembly
            },
            None,
        );
        let names: Vec<(&str, i64)> = a.sections.iter().map(|s| (&*s.name, s.order)).collect();
        assert_eq!(
            names,
            [
                (IDENTITY_SECTION, -100),
                (GUIDELINES_SECTION, -50),
                (TOOLS_SECTION, 100),
                (ENVIRONMENT_SECTION, 200)
            ]
        );
        assert_eq!(a.sections[0].text, HARNESS_IDENTITY);
        let guidance = &a.sections[2].text;
        assert!(
            guidance.contains(
                "\n- `bash`: Run a shell command. Required: `command`. Optional: `timeout`."
            ),
            "{guidance}"
        );
        assert!(!guidance.contains("More detail"), "{guidance}");
        assert!(guidance.contains("- `grep`: Search file contents. Required: `pattern`."));
        assert!(guidance.contains("Search with `grep`"));
        assert!(!guidance.contains("`edit`"), "no hint for an absent tool");
        assert!(a.contexts.is_empty(), "no facts, no context (SP-5)");
        // No tools: no tool section text (dropped at render, SP-3).
        assert_eq!(tool_guidance(&[]), "");
    }

    #[test]
    fn embedders_add_replace_and_remove_sections() {
        let mut base = Assembly::default();
        base.sections
            .push(PromptSection::new("system", 0, "persona"));
        let p = SystemPrompt::new()
            .with_identity("You are Bob.")
            .with_appended("Tail A")
            .with_section(PromptSection::new("system", 0, "replaced persona"))
            .with_section(PromptSection::new("mine", 50, "added"))
            .without_section(GUIDELINES_SECTION)
            .with_appended("Tail B");
        let a = p.apply(base, None);
        let rendered = a.render().unwrap();
        assert_eq!(
            rendered.split("\n\n").next().unwrap(),
            "You are Bob.",
            "the identity is replaced"
        );
        assert!(rendered.contains("replaced persona"));
        assert!(!rendered.contains("\npersona"));
        assert!(rendered.contains("added"));
        assert!(!rendered.contains("You work as a coding agent"));
        assert!(rendered.ends_with("Tail A\n\nTail B"), "{rendered}");
        let p = SystemPrompt::new().without_section(IDENTITY_SECTION);
        assert!(
            !p.apply(Assembly::default(), None)
                .render()
                .unwrap()
                .contains(HARNESS_IDENTITY)
        );
    }

    #[test]
    fn facts_render_with_capped_status() {
        let mut f = Facts {
            cwd: "/repo".into(),
            platform: "linux x86_64".into(),
            git: None,
        };
        assert_eq!(
            f.render("2026-12-01"),
            "Working directory: /repo\nPlatform: linux x86_64\nDate: 2026-12-01 (UTC)\nGit: not a git repository"
        );
        f.git = Some(Git {
            branch: "main".into(),
            status: Vec::new(),
            more: 0,
        });
        assert!(
            f.render("d")
                .ends_with("Git branch: main\nGit status: clean")
        );
        f.git = Some(Git {
            branch: "main".into(),
            status: (0..40).map(|i| format!("?? f{i}")).collect(),
            more: 2,
        });
        let text = f.render("d");
        assert!(
            text.contains("\n?? f29\n… and 12 more changed paths"),
            "{text}"
        );
        assert!(!text.contains("f30"));
    }
}
