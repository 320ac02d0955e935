//! The user's own hooks (Claude Code and Codex dialects) and skills
//! (`SKILL.md` folders), found for a workspace and installed as plugins
//! on every agent configuration built for it (subagents included: they
//! are built by the same closure).

use std::path::{Path, PathBuf};

use dsh_hooks::config::{Loaded, Source, load, project_root, sources};
use dsh_hooks::{Dialect, HooksPlugin, Origin, ProcessRunner, Settings};
use dsh_skills::{Root, SkillsPlugin};
use dsh_std::AgentConfig;
use dsh_tools::EnvPolicy;

use crate::sanitize::eprintln_safe;

/// What was found for one workspace.
#[derive(Clone, Debug)]
pub struct Extensions {
    /// The hooks that will run.
    pub hooks: Loaded,
    /// The skill roots, in priority order; empty when no skill was found
    /// at start (then no skills plugin is installed).
    pub skill_roots: Vec<Root>,
    /// The environment of hook processes (the tool policy).
    pub env: EnvPolicy,
    /// `CLAUDE_PROJECT_DIR`.
    pub project: PathBuf,
    /// The model (Codex payloads).
    pub model: String,
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn config_dir() -> Option<PathBuf> {
    crate::config_file::path(&|n| std::env::var(n).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// How `load_for` may ask about an untrusted folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Never (run, acp): untrusted project hooks do not run.
    Never,
    /// Ask once on the terminal (chat).
    Terminal,
}

/// Finds the hooks and skills of the workspace `cwd`. Project hooks load
/// only when the project folder is trusted; with [`Ask::Terminal`] an
/// untrusted folder with hooks is asked about once. Notices (bad files,
/// untrusted hooks) are printed to stderr.
pub fn load_for(
    cwd: &Path,
    file: &crate::config_file::ConfigFile,
    env: EnvPolicy,
    model: &str,
    ask: Ask,
) -> Extensions {
    let project = project_root(cwd);
    let extra: Vec<Source> = file
        .hooks
        .iter()
        .map(|p| Source::new(p.clone(), Dialect::ClaudeCode, Origin::User))
        .collect();
    let list = sources(home().as_deref(), &project, &extra);
    let trusted = crate::trust::is_trusted(&project);
    let mut hooks = load(&list, trusted);
    if !hooks.untrusted.is_empty() && ask == Ask::Terminal && ask_trust(&project, &hooks.untrusted)
    {
        match crate::trust::trust(&project) {
            Ok(_) => hooks = load(&list, true),
            Err(e) => eprintln_safe!("dsh: {e}"),
        }
    }
    for n in &hooks.notices {
        eprintln_safe!("dsh: {n}");
    }
    let custom = file.skills.clone().unwrap_or_default();
    let skill_roots = dsh_skills::roots(
        &project,
        &custom,
        config_dir().as_deref(),
        home().as_deref(),
    );
    let (found, notices) = dsh_skills::list(&skill_roots);
    for n in notices {
        eprintln_safe!("dsh: {n}");
    }
    // Without a skill at start, no `skill` tool: the model is not offered
    // a tool it cannot use (a skill added later shows after a restart).
    let skill_roots = if found.is_empty() {
        Vec::new()
    } else {
        skill_roots
    };
    Extensions {
        hooks,
        skill_roots,
        env,
        project,
        model: model.to_string(),
    }
}

/// Asks on the terminal whether to trust `project`; `false` when stdin is
/// not a terminal.
fn ask_trust(project: &Path, files: &[PathBuf]) -> bool {
    use std::io::{BufRead, IsTerminal};
    if !std::io::stdin().is_terminal() {
        return false;
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    eprintln_safe!(
        "dsh: {} has hooks ({}) that run commands on this machine.\nTrust this folder and run them? [y/N] ",
        project.display(),
        names.join(", ")
    );
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes" | "Yes")
}

impl Extensions {
    /// Adds the hooks (one plugin per dialect with hooks) and the skills
    /// plugin to `config`.
    pub fn install(&self, config: &mut AgentConfig) {
        for (dialect, cfg) in [
            (Dialect::ClaudeCode, &self.hooks.claude_code),
            (Dialect::Codex, &self.hooks.codex),
        ] {
            if cfg.is_empty() {
                continue;
            }
            let mut settings = Settings::default();
            settings.project_dir = Some(self.project.clone());
            settings.model = self.model.clone();
            config.plugins.push(Box::new(HooksPlugin::new(
                dialect,
                cfg.clone(),
                Box::new(ProcessRunner::new(self.env.clone())),
                settings,
            )));
        }
        if !self.skill_roots.is_empty() {
            config
                .plugins
                .push(Box::new(SkillsPlugin::from_roots(self.skill_roots.clone())));
        }
    }

    /// The skills `/skills` lists: `(name, description)`, sorted.
    pub fn skills(&self) -> Vec<(String, String)> {
        dsh_skills::list(&self.skill_roots)
            .0
            .into_iter()
            .filter(|s| s.user_invocable)
            .map(|s| (s.name, s.description))
            .collect()
    }
}

/// The user-invocable skills of the workspace `cwd` (`name`,
/// `description`), for a front end's command list; notices are dropped
/// (the session's start printed them).
pub fn skill_commands(cwd: &Path) -> Vec<(String, String)> {
    let file = crate::config_file::load(&|n| std::env::var(n).ok()).unwrap_or_default();
    let custom = file.skills.unwrap_or_default();
    let roots = dsh_skills::roots(
        &project_root(cwd),
        &custom,
        config_dir().as_deref(),
        home().as_deref(),
    );
    dsh_skills::list(&roots)
        .0
        .into_iter()
        .filter(|s| s.user_invocable)
        .map(|s| (s.name, s.description))
        .collect()
}
