//! The skills plugin: the catalog message, the `skill` tool and the
//! `/<name>` gesture.

use std::path::PathBuf;

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{PreStepDecision, PreStepPayload};
use dsh_core::session::EventData;
use dsh_core::{ContentBlock, Message, MessageSource};

type JsonObject = serde_json::Map<String, Value>;
use dsh_runtime::{Cx, Flow, Plugin, Seams, ToolDispatch};
use serde_json::{Value, json};

use crate::discovery::{Root, Scan, Skill, is_skill_name, scan};

/// The model-facing tool's name.
pub const TOOL_NAME: &str = "skill";
/// The tool's description (the reference's text).
pub const TOOL_DESCRIPTION: &str = "Load the full instructions for an available skill. Call this with the exact skill name from the session skill catalog before acting on a task that names or clearly matches that skill.";
/// The longest catalog description (characters), as the reference.
pub const CATALOG_DESCRIPTION_MAX: usize = 500;
/// The most text the catalog's entries may take (bytes); skills past it
/// are left out of the catalog (the `skill` tool still loads them).
pub const CATALOG_MAX_BYTES: usize = 32 * 1024;
/// The `MessageSource.kind` of the catalog.
pub const CATALOG_KIND: &str = "skill-catalog";

/// Where a plugin's skills come from.
pub trait SkillSource: Send {
    /// The skills now (re-read each step, so edits show up) and notices.
    fn scan(&mut self) -> Scan;
}

/// Skills read from folders.
#[derive(Clone, Debug)]
pub struct FsSource {
    /// The roots, in priority order.
    pub roots: Vec<Root>,
}

impl SkillSource for FsSource {
    fn scan(&mut self) -> Scan {
        scan(&self.roots)
    }
}

/// A fixed list of skills (tests, embedders).
#[derive(Clone, Debug, Default)]
pub struct StaticSource(pub Vec<Skill>);

impl SkillSource for StaticSource {
    fn scan(&mut self) -> Scan {
        let mut skills = self.0.clone();
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Scan {
            skills,
            notices: Vec::new(),
        }
    }
}

impl<F: FnMut() -> Scan + Send> SkillSource for F {
    fn scan(&mut self) -> Scan {
        self()
    }
}

fn escape_attr(v: &str) -> String {
    v.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

fn escape_text(v: &str) -> String {
    v.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The text the `skill` tool returns and a `/<name>` invocation injects.
pub fn render_content(skill: &Skill) -> String {
    [
        format!("<skill_content name=\"{}\">", escape_attr(&skill.name)),
        "<skill_resources>".into(),
        format!("Base directory for this skill: {}", escape_text(&skill.base_dir)),
        "Resolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.".into(),
        "</skill_resources>".into(),
        String::new(),
        "<skill_instructions>".into(),
        skill.content.clone(),
        "</skill_instructions>".into(),
        "</skill_content>".into(),
    ]
    .join("\n")
}

/// A catalog description: whitespace runs become one space; cut to `max`
/// characters with `...`.
pub fn catalog_description(v: &str, max: usize) -> String {
    let normalized = v.split_whitespace().collect::<Vec<_>>().join(" ");
    if normalized.chars().count() <= max {
        return normalized;
    }
    let kept: String = normalized.chars().take(max.saturating_sub(3)).collect();
    format!("{kept}...")
}

/// One catalog entry.
pub type Entry = (String, String);

fn render_entries(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|(n, d)| format!("- `{n}`: {}", escape_text(d)))
        .collect()
}

/// The catalog text: the first one of a session, or (`update`) a
/// replacement.
pub fn render_catalog(entries: &[Entry], update: bool) -> String {
    let mut lines = vec!["<system-reminder>".to_string()];
    if update {
        lines.push("The available skill catalog changed. This complete catalog replaces every earlier available-skills list in this session:".into());
    } else {
        lines.push("A skill is a reusable set of task-specific instructions. The following skills are available in this session:".into());
    }
    lines.push(String::new());
    lines.push("<available_skills>".into());
    lines.extend(render_entries(entries));
    lines.push("</available_skills>".into());
    lines.push(String::new());
    if !update {
        lines.push("If the user names a skill, or the task clearly matches a skill's description, call the `skill` tool with the exact skill name before taking task actions. Load all applicable skills, then follow their full instructions. This catalog contains summaries only; do not infer or follow a skill's instructions until it has been loaded.".into());
        lines.push("A user may also invoke a skill directly; its <skill_content> block then appears in this conversation. Follow it, and do not call the `skill` tool again for that skill.".into());
    } else if entries.is_empty() {
        lines.push("No skills are currently available through the `skill` tool. Do not use names from earlier skill catalogs.".into());
        lines.push("A user may still invoke a skill directly; its <skill_content> block then appears in this conversation. Follow it, and do not call the `skill` tool for it.".into());
    } else {
        lines.push("Use only names in this replacement catalog. If the user names a listed skill, or the task clearly matches its description, call the `skill` tool with the exact name before acting.".into());
        lines.push("A user may also invoke a skill directly; its <skill_content> block then appears in this conversation. Follow it, and do not call the `skill` tool again for that skill.".into());
    }
    lines.push("</system-reminder>".into());
    lines.join("\n")
}

fn catalog_message(id: String, entries: &[Entry], update: bool) -> Message {
    let mut m = Message::user(
        id,
        vec![ContentBlock::text(render_catalog(entries, update))],
    );
    let mut source = JsonObject::new();
    source.insert("kind".into(), CATALOG_KIND.into());
    source.insert("form".into(), "catalog".into());
    if update {
        source.insert("update".into(), true.into());
    }
    source.insert(
        "entries".into(),
        Value::Array(
            entries
                .iter()
                .map(|(n, d)| json!({"name": n, "description": d}))
                .collect(),
        ),
    );
    m.source = MessageSource::Other(source);
    m
}

fn entries_of(source: &MessageSource) -> Option<Vec<Entry>> {
    let MessageSource::Other(o) = source else {
        return None;
    };
    if o.get("kind").and_then(Value::as_str) != Some(CATALOG_KIND) {
        return None;
    }
    o.get("entries")?
        .as_array()?
        .iter()
        .map(|e| {
            Some((
                e.get("name")?.as_str()?.to_string(),
                e.get("description")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The `skill` tool's definition (the reference's name, text and
/// parameter).
pub fn tool_definition() -> ToolDefinition {
    ToolDefinition::typed(
        TOOL_NAME,
        TOOL_DESCRIPTION,
        json!({
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "The exact skill name from the available skills list."
                }
            },
            "required": ["name"],
            "additionalProperties": false
        }),
    )
}

/// The skills plugin.
pub struct SkillsPlugin {
    source: Box<dyn SkillSource>,
    notices: Vec<String>,
    noticed: Vec<String>,
}

impl SkillsPlugin {
    /// A plugin over `source`.
    pub fn new(source: Box<dyn SkillSource>) -> Self {
        SkillsPlugin {
            source,
            notices: Vec::new(),
            noticed: Vec::new(),
        }
    }

    /// A plugin over the folders `roots`.
    pub fn from_roots(roots: Vec<Root>) -> Self {
        Self::new(Box::new(FsSource { roots }))
    }

    /// Notices (bad `SKILL.md` files) not yet taken; each is given once.
    pub fn take_notices(&mut self) -> Vec<String> {
        core::mem::take(&mut self.notices)
    }

    fn scan(&mut self) -> Scan {
        let scan = self.source.scan();
        for n in &scan.notices {
            if !self.noticed.contains(n) {
                self.noticed.push(n.clone());
                self.notices.push(n.clone());
            }
        }
        scan
    }

    fn load(&mut self, name: &str) -> Result<Skill, String> {
        if !is_skill_name(name) {
            return Err(format!("invalid skill name \"{name}\""));
        }
        let skill = self
            .scan()
            .skills
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("skill \"{name}\" is unknown or no longer available"))?;
        if !skill.model_invocable {
            return Err(format!(
                "skill \"{name}\" is not available for model invocation"
            ));
        }
        Ok(skill)
    }
}

/// The catalog entries of `skills` within the size cap.
pub fn entries(skills: &[Skill]) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut size = 0usize;
    for s in skills.iter().filter(|s| s.model_invocable) {
        let d = catalog_description(&s.description, CATALOG_DESCRIPTION_MAX);
        size += s.name.len() + d.len() + 6;
        if size > CATALOG_MAX_BYTES {
            break;
        }
        out.push((s.name.clone(), d));
    }
    out
}

/// The `/<name>` tokens of `text` (a word that is `/` plus a skill name).
pub fn invoked_names(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        if let Some(name) = word.strip_prefix('/')
            && is_skill_name(name)
            && !out.iter().any(|n| n == name)
        {
            out.push(name.to_string());
        }
    }
    out
}

impl Plugin for SkillsPlugin {
    fn name(&self) -> &str {
        "tool-skill"
    }

    fn seams(&self) -> Seams {
        Seams::PRE_STEP | Seams::TOOL_EXECUTE
    }

    fn tools(&mut self) -> Vec<ToolDefinition> {
        vec![tool_definition()]
    }

    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        let PreStepDecision::Enter(mut messages) = value else {
            return Flow::Next(value);
        };
        let scan = self.scan();
        let current = entries(&scan.skills);
        // The newest catalog in the log, and whether it is still on the
        // surface (a compaction may have folded it away).
        let session = cx.session();
        let surface = session.surface();
        let mut published = false;
        let mut visible: Option<Vec<Entry>> = None;
        for e in session.events().iter().rev() {
            if let EventData::UserMessage(m) = e.data()
                && let Some(en) = entries_of(&m.source)
            {
                published = true;
                if surface.nodes.contains(&e.seq()) {
                    visible = Some(en);
                    break;
                }
            }
        }
        let send = visible.as_ref() != Some(&current) && (published || !current.is_empty());
        if send {
            let id = format!("skill-catalog-{}-{}", payload.turn, payload.step);
            messages.push(catalog_message(id, &current, published));
        }
        // `/<name>` in the user's own words loads that skill for this step.
        let mut names = Vec::new();
        for m in payload
            .messages
            .iter()
            .filter(|m| matches!(m.source, MessageSource::User))
        {
            let text: String = m.content.iter().filter_map(|b| b.as_text()).collect();
            for n in invoked_names(&text) {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        for name in names {
            let Some(skill) = scan
                .skills
                .iter()
                .find(|s| s.name == name && s.user_invocable)
            else {
                continue;
            };
            let mut m = Message::user(
                format!("skill-invocation-{}-{}-{name}", payload.turn, payload.step),
                vec![ContentBlock::text(render_content(skill))],
            );
            let mut source = JsonObject::new();
            source.insert("kind".into(), "skill-invocation".into());
            source.insert("name".into(), name.clone().into());
            source.insert("form".into(), "instructions".into());
            m.source = MessageSource::Other(source);
            messages.push(m);
        }
        Flow::Next(PreStepDecision::Enter(messages))
    }

    fn tool_execute(&mut self, _cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        let ToolDispatch::Run(exec) = &value else {
            return Flow::Next(value);
        };
        if exec.name != TOOL_NAME {
            return Flow::Next(value);
        }
        let name = exec
            .arguments
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let outcome = match self.load(&name) {
            Ok(skill) => ToolOutcome::success(vec![ContentBlock::text(render_content(&skill))]),
            Err(e) => ToolOutcome::error(e),
        };
        Flow::Done(ToolDispatch::Answer(outcome))
    }
}

/// The skills a `/skills` command lists and `/<name>` loads, read from
/// `roots` now: (name, description, user-invocable) and the notices.
pub fn list(roots: &[Root]) -> (Vec<Skill>, Vec<String>) {
    let s = scan(roots);
    (s.skills, s.notices)
}

/// The folders of [`crate::discovery::roots`] for a workspace.
pub fn default_roots(
    project: &std::path::Path,
    custom: &[PathBuf],
    config_dir: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) -> Vec<Root> {
    crate::discovery::roots(project, custom, config_dir, home)
}
