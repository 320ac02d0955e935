//! Skills for dsh: `SKILL.md` folders (the agentskills.io format:
//! frontmatter `name` and `description`, a body loaded on demand,
//! resources beside it), as the reference offers them.
//!
//! - [`discovery`]: the roots in priority order (`.dsh/skills`,
//!   `.agents/skills`, `.claude/skills` of the project, configured
//!   folders, `~/.config/dsh/skills`, `~/.agents/skills`,
//!   `~/.claude/skills`); a bad file is a notice naming it.
//! - [`SkillsPlugin`]: before each step, the catalog as a durable
//!   `user/message` with source `{kind:"skill-catalog", form:"catalog",
//!   entries}` (outside the cache-stable system prompt; re-sent as an
//!   update when it changes; capped at [`CATALOG_MAX_BYTES`]); the
//!   model-facing `skill {name}` tool returning the reference's
//!   `<skill_content>` envelope; a `/<name>` word in the user's prompt
//!   injects that skill's content.

pub mod discovery;
mod plugin;

pub use discovery::{Root, Scan, Skill, is_skill_name, parse_skill, roots, scan};
pub use plugin::{
    CATALOG_DESCRIPTION_MAX, CATALOG_KIND, CATALOG_MAX_BYTES, Entry, FsSource, SkillSource,
    SkillsPlugin, StaticSource, TOOL_DESCRIPTION, TOOL_NAME, catalog_description, default_roots,
    entries, invoked_names, list, render_catalog, render_content, tool_definition,
};
