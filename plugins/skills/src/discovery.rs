//! Finding skills: `SKILL.md` folders (agentskills.io) under the skill
//! roots, their YAML frontmatter, and the roots' priority order.

use std::path::{Path, PathBuf};

/// One skill found on disk (or given in memory).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Skill {
    /// The name (`[a-z0-9]+(-[a-z0-9]+)*`).
    pub name: String,
    /// What it is for (the catalog shows it).
    pub description: String,
    /// The folder its resources are resolved against, as shown to the
    /// model.
    pub base_dir: String,
    /// Its `SKILL.md`, when it came from a file.
    pub path: Option<PathBuf>,
    /// Which root it came from (`project-dsh`, `user-claude`, ...).
    pub source: String,
    /// The body after the frontmatter, trimmed.
    pub content: String,
    /// The model may load it (`disable-model-invocation` not set).
    pub model_invocable: bool,
    /// The user may invoke it as `/<name>` (`user-invocable` not false).
    pub user_invocable: bool,
}

impl Skill {
    /// A skill with both invocations allowed.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        base_dir: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Skill {
            name: name.into(),
            description: description.into(),
            base_dir: base_dir.into(),
            path: None,
            source: String::from("runtime"),
            content: content.into(),
            model_invocable: true,
            user_invocable: true,
        }
    }
}

/// Whether `name` is a valid skill name.
pub fn is_skill_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// A folder skills are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Root {
    /// The folder.
    pub path: PathBuf,
    /// Its name in [`Skill::source`].
    pub source: &'static str,
}

/// The roots in priority order (a name found earlier wins):
/// `<project>/.dsh/skills`, `<project>/.agents/skills`,
/// `<project>/.claude/skills`, `custom` folders, `<config>/skills`
/// (`~/.config/dsh/skills`), `~/.agents/skills`, `~/.claude/skills`.
pub fn roots(
    project: &Path,
    custom: &[PathBuf],
    config_dir: Option<&Path>,
    home: Option<&Path>,
) -> Vec<Root> {
    let mut out = vec![
        Root {
            path: project.join(".dsh/skills"),
            source: "project-dsh",
        },
        Root {
            path: project.join(".agents/skills"),
            source: "project-agents",
        },
        Root {
            path: project.join(".claude/skills"),
            source: "project-claude",
        },
    ];
    out.extend(custom.iter().map(|p| Root {
        path: p.clone(),
        source: "custom",
    }));
    if let Some(c) = config_dir {
        out.push(Root {
            path: c.join("skills"),
            source: "user-dsh",
        });
    }
    if let Some(h) = home {
        out.push(Root {
            path: h.join(".agents/skills"),
            source: "user-agents",
        });
        out.push(Root {
            path: h.join(".claude/skills"),
            source: "user-claude",
        });
    }
    out
}

/// Largest `SKILL.md` read (bytes).
pub const MAX_SKILL_BYTES: u64 = 256 * 1024;
/// Most skills discovered.
pub const MAX_SKILLS: usize = 512;
/// Most entries of one root looked at.
const MAX_ENTRIES_PER_ROOT: usize = 4096;

/// What a scan found: skills by priority, and a notice per file skipped.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Scan {
    /// The skills, sorted by name.
    pub skills: Vec<Skill>,
    /// `skill file <path> ignored: <why>` lines.
    pub notices: Vec<String>,
}

/// Reads every root. A missing root is no skills; a bad file is a notice
/// naming it, never an error.
pub fn scan(roots: &[Root]) -> Scan {
    let mut scan = Scan::default();
    for root in roots {
        let Ok(dir) = std::fs::read_dir(&root.path) else {
            continue;
        };
        let mut entries: Vec<PathBuf> = dir
            .take(MAX_ENTRIES_PER_ROOT)
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            let (file, base) = if entry.is_dir() {
                (entry.join("SKILL.md"), entry.clone())
            } else if entry.extension().is_some_and(|x| x == "md") {
                (entry.clone(), root.path.clone())
            } else {
                continue;
            };
            let text = match read_capped(&file) {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => {
                    scan.notices
                        .push(format!("skill file {} ignored: {e}", file.display()));
                    continue;
                }
            };
            match parse_skill(&text) {
                Ok(mut skill) => {
                    if scan.skills.iter().any(|s| s.name == skill.name) {
                        continue;
                    }
                    if scan.skills.len() >= MAX_SKILLS {
                        scan.notices.push(format!(
                            "skill file {} ignored: more than {MAX_SKILLS} skills",
                            file.display()
                        ));
                        continue;
                    }
                    skill.base_dir = base.display().to_string();
                    skill.path = Some(file);
                    skill.source = root.source.to_string();
                    scan.skills.push(skill);
                }
                Err(e) => scan
                    .notices
                    .push(format!("skill file {} ignored: {e}", file.display())),
            }
        }
    }
    scan.skills.sort_by(|a, b| a.name.cmp(&b.name));
    scan
}

fn read_capped(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut buf = Vec::new();
    file.take(MAX_SKILL_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() as u64 > MAX_SKILL_BYTES {
        return Err(format!("larger than {MAX_SKILL_BYTES} bytes"));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| "not UTF-8 text".to_string())
}

/// Parses a `SKILL.md`: a `---` line, YAML frontmatter with `name` and
/// `description`, a `---` line, the body. The frontmatter is read as the
/// subset skills use: top-level `key: value` scalars (plain, quoted, or a
/// `|` / `>` block); nested keys are skipped.
pub fn parse_skill(text: &str) -> Result<Skill, String> {
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or_default();
    if first.trim_end_matches(['\n', '\r']) != "---" {
        return Err("missing YAML frontmatter".into());
    }
    let mut front = Vec::new();
    let mut offset = first.len();
    let mut closed = false;
    for line in lines {
        offset += line.len();
        let l = line.trim_end_matches(['\n', '\r']);
        if l == "---" {
            closed = true;
            break;
        }
        front.push(l);
    }
    if !closed {
        return Err("missing YAML frontmatter".into());
    }
    let fields = parse_frontmatter(&front).map_err(|e| format!("invalid YAML frontmatter: {e}"))?;
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let (Some(name), Some(description)) = (get("name"), get("description")) else {
        return Err("frontmatter requires name and description".into());
    };
    if !is_skill_name(&name) {
        return Err(format!("invalid skill name \"{name}\""));
    }
    if description.trim().is_empty() {
        return Err("frontmatter requires name and description".into());
    }
    let flag = |k: &str| get(k).map(|v| v.trim().to_ascii_lowercase());
    let body = text.get(offset..).unwrap_or_default();
    Ok(Skill {
        name,
        description,
        base_dir: String::new(),
        path: None,
        source: String::new(),
        content: body.trim().to_string(),
        model_invocable: flag("disable-model-invocation").as_deref() != Some("true"),
        user_invocable: flag("user-invocable").as_deref() != Some("false"),
    })
}

fn unquote(v: &str, line: usize) -> Result<String, String> {
    let v = v.trim();
    if let Some(inner) = v.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or_else(|| format!("line {line}: unterminated double-quoted string"))?;
        return serde_json::from_str::<String>(&format!("\"{inner}\""))
            .map_err(|_| format!("line {line}: bad escape in a double-quoted string"));
    }
    if let Some(inner) = v.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or_else(|| format!("line {line}: unterminated single-quoted string"))?;
        return Ok(inner.replace("''", "'"));
    }
    if v.starts_with(['[', '{', '&', '*', '!', '%', '@', '`']) {
        return Err(format!("line {line}: unsupported YAML value `{v}`"));
    }
    // A plain scalar ends at ` #` (a comment).
    let v = v.split(" #").next().unwrap_or_default().trim_end();
    Ok(v.to_string())
}

fn parse_frontmatter(lines: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(raw) = lines.get(i) {
        let n = i + 2;
        i += 1;
        if raw.trim().is_empty() || raw.trim_start().starts_with('#') {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            // Belongs to a nested mapping or list under the previous key.
            continue;
        }
        if raw.starts_with('-') {
            return Err(format!("line {n}: the frontmatter is not a mapping"));
        }
        let Some((key, value)) = raw.split_once(':') else {
            return Err(format!("line {n}: expected `key: value`"));
        };
        let key = key.trim();
        if key.is_empty() || key.contains(' ') && !key.starts_with(['"', '\'']) {
            return Err(format!("line {n}: expected `key: value`"));
        }
        if !value.is_empty() && !value.starts_with([' ', '\t']) {
            return Err(format!("line {n}: expected a space after `:`"));
        }
        let value = value.trim();
        let folded = value.starts_with('>');
        if value.starts_with('|') || folded {
            let mut block = Vec::new();
            while let Some(next) = lines.get(i) {
                if next.trim().is_empty() || next.starts_with([' ', '\t']) {
                    block.push(next.trim());
                    i += 1;
                } else {
                    break;
                }
            }
            while block.last().is_some_and(|l| l.is_empty()) {
                block.pop();
            }
            let text = if folded {
                block.join(" ")
            } else {
                block.join("\n")
            };
            out.push((key.to_string(), text));
            continue;
        }
        if value.is_empty() {
            // A nested mapping or list follows; its lines are skipped.
            out.push((key.to_string(), String::new()));
            continue;
        }
        out.push((key.to_string(), unquote(value, n)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_forms() {
        let s = parse_skill("---\nname: pdf-tools\ndescription: \"Reads: PDFs\"\nmetadata:\n  a: b\n---\n\n# Body\n").unwrap();
        assert_eq!(
            (s.name.as_str(), s.description.as_str()),
            ("pdf-tools", "Reads: PDFs")
        );
        assert_eq!(s.content, "# Body");
        let s = parse_skill(
            "---\nname: x\ndescription: >\n  one\n  two\ndisable-model-invocation: true\n---\nb",
        )
        .unwrap();
        assert_eq!(s.description, "one two");
        assert!(!s.model_invocable && s.user_invocable);
        assert!(
            parse_skill("no frontmatter")
                .unwrap_err()
                .contains("missing")
        );
        assert!(
            parse_skill("---\nname: x\n")
                .unwrap_err()
                .contains("missing")
        );
        assert!(
            parse_skill("---\nname: X Y\ndescription: d\n---\n")
                .unwrap_err()
                .contains("invalid skill name")
        );
        assert!(
            parse_skill("---\nname: x\n---\n")
                .unwrap_err()
                .contains("requires name and description")
        );
        assert!(
            parse_skill("---\nname: [x\ndescription: d\n---\n")
                .unwrap_err()
                .contains("invalid YAML")
        );
        assert!(
            parse_skill("---\njust text\n---\n")
                .unwrap_err()
                .contains("invalid YAML")
        );
    }

    #[test]
    fn names() {
        assert!(is_skill_name("a-b-1"));
        assert!(
            !is_skill_name("a--b")
                && !is_skill_name("-a")
                && !is_skill_name("A")
                && !is_skill_name("")
        );
    }
}
