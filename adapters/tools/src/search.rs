//! `grep` and `glob`: read-only search of the workspace, built on the crates
//! ripgrep is made of (`ignore` for the walk with `.gitignore` rules,
//! `grep-regex` / `grep-searcher` for matching, `globset` for globs).
//!
//! Both stay inside the workspace (the start path is confined like the file
//! tools' paths, and the walk never follows a symbolic link), skip hidden
//! files and whatever `.gitignore` / `.ignore` files exclude, and cap their
//! output with a note that says what was left out and how to narrow the
//! search. The regex engine runs in time linear in the input, so no pattern
//! can take exponential time; a pattern whose compiled form is over
//! [`SearchConfig::regex_size_limit`] is refused.
//!
//! A workspace moved or replaced since dsh opened it is refused before the
//! walk (the check of [`Workspace::resolve`](crate::Workspace::resolve)).
//! Unlike `read`, `write` and `edit`, the walk itself still goes by path
//! (the `ignore` crate walks paths), so a swap that races between that
//! check and the walk can make one search read the replacement directory;
//! searches only read, and the next call is refused.

use std::path::{Path, PathBuf};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkBuilder;
use serde_json::{Value, json};

use crate::{Tool, ToolCallRequest, ToolContext, prop, text};

/// Limits of `grep` and `glob`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchConfig {
    /// Matching lines (grep) or paths (glob) returned (200).
    pub max_results: usize,
    /// Characters kept of a matching line (400).
    pub max_line_chars: usize,
    /// Bytes of result text (48 KiB).
    pub max_bytes: usize,
    /// Largest compiled regex, in bytes (1 MiB).
    pub regex_size_limit: usize,
    /// Heap one file's search may use for a line (8 MiB); a file with a
    /// longer line is skipped and counted.
    pub line_heap_limit: usize,
    /// Files a search visits before it stops and says so (100000).
    pub max_files_visited: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            max_results: 200,
            max_line_chars: 400,
            max_bytes: 48 * 1024,
            regex_size_limit: 1 << 20,
            line_heap_limit: 8 << 20,
            max_files_visited: 100_000,
        }
    }
}

/// The `grep` tool (read-only, parallel-safe).
#[derive(Clone, Copy, Debug, Default)]
pub struct GrepTool {
    /// Its limits.
    pub config: SearchConfig,
}

/// The `glob` tool (read-only, parallel-safe).
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobTool {
    /// Its limits.
    pub config: SearchConfig,
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, ToolOutcome> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolOutcome::error(format!("{key} must be a string"))),
    }
}

/// The start of a search: a directory or file inside the workspace.
fn start_path(ctx: &ToolContext, args: &Value, verb: &str) -> Result<PathBuf, ToolOutcome> {
    let raw = str_arg(args, "path")?.filter(|p| !p.trim().is_empty());
    // A spill file (crate::spill) is searched beneath the spill folder.
    let spill = raw.and_then(|p| crate::fs::spill_workspace(p, ctx));
    let ws = spill.as_ref().unwrap_or(&ctx.workspace);
    let r = ws.resolve_for(raw.unwrap_or("."), verb)?;
    if !r.path.exists() {
        return Err(crate::fs_error(
            format!("cannot {verb} \"{}\": not found", r.display),
            "FS_NOT_FOUND",
        ));
    }
    Ok(r.path)
}

/// A walker over `start` with ripgrep's defaults: hidden files skipped,
/// ignore files honoured (also outside a git repository), links not followed.
fn walker(start: &Path) -> ignore::Walk {
    WalkBuilder::new(start)
        .hidden(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .build()
}

/// How a walk over the files ended.
#[derive(Default)]
struct WalkEnd {
    /// Entries the walk could not read.
    unreadable: usize,
    /// Stopped at `max_files` files.
    stopped: bool,
}

/// Calls `visit` with every regular file beneath `start` ([`walker`]'s
/// rules), at most `max_files` of them; `visit` returns `false` to stop.
/// A cancelled call ends with the aborted outcome.
fn each_file(
    ctx: &ToolContext,
    start: &Path,
    max_files: usize,
    mut visit: impl FnMut(&Path) -> bool,
) -> Result<WalkEnd, ToolOutcome> {
    let mut end = WalkEnd::default();
    let mut visited = 0usize;
    for entry in walker(start) {
        if ctx.cancel.is_cancelled() {
            return Err(ToolOutcome::aborted());
        }
        let Ok(entry) = entry else {
            end.unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        visited += 1;
        if visited > max_files {
            end.stopped = true;
            break;
        }
        if !visit(entry.path()) {
            break;
        }
    }
    Ok(end)
}

/// The required, non-empty `pattern` argument.
fn pattern_arg(args: &Value) -> Result<&str, ToolOutcome> {
    match str_arg(args, "pattern")? {
        Some(p) if !p.is_empty() => Ok(p),
        _ => Err(ToolOutcome::error("pattern must be a non-empty string")),
    }
}

/// `path` relative to the workspace root, for display.
fn shown(ctx: &ToolContext, path: &Path) -> String {
    let root = ctx.workspace.canonical_root();
    path.strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// Keeps the first `max` characters of `line`, marking a cut.
fn cut_line(line: &str, max: usize) -> String {
    let line = line.trim_end_matches(['\n', '\r']);
    match line.char_indices().nth(max) {
        None => line.to_string(),
        Some((i, _)) => format!("{}... (line cut to {max} chars)", &line[..i]),
    }
}

fn glob_matcher(pattern: &str) -> Result<GlobMatcher, ToolOutcome> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolOutcome::error(format!("invalid glob \"{pattern}\": {e}")))
}

/// Whether `path` (relative to the start) matches `glob`: a glob without a
/// `/` matches the file name at any depth, as ripgrep's `-g` does.
fn glob_hit(glob: &GlobMatcher, pattern: &str, relative: &Path) -> bool {
    if pattern.contains('/') {
        glob.is_match(relative)
    } else {
        relative.file_name().is_some_and(|n| glob.is_match(n))
    }
}

const GREP_DESCRIPTION: &str = "Search file contents in the workspace with a regular expression (Rust regex syntax, linear time). Honors .gitignore and skips hidden and binary files. Returns matching lines as `path:line: text`. Use `glob` to filter files (e.g. \"*.rs\") and `path` to search a subdirectory or one file.";

const GLOB_DESCRIPTION: &str = "Find files in the workspace by glob pattern (e.g. \"**/*.rs\", \"src/**/mod.rs\", \"*.toml\"; a pattern without `/` matches file names at any depth). Honors .gitignore and skips hidden files. Returns paths relative to the workspace, sorted.";

impl Tool for GrepTool {
    fn definition(&self) -> ToolDefinition {
        let mut d = ToolDefinition::typed(
            "grep",
            GREP_DESCRIPTION,
            json!({
                "type": "object",
                "properties": {
                    "pattern": prop("string", "Regular expression to search for."),
                    "path": prop("string", "File or directory to search, inside the workspace. Defaults to the workspace root."),
                    "glob": prop("string", "Only search files matching this glob, e.g. \"*.rs\" or \"src/**/*.ts\"."),
                    "case_insensitive": prop("boolean", "Match case-insensitively. Defaults to false."),
                },
                "required": ["pattern"]
            }),
        );
        d.concurrency_safe = true;
        d
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        match self.run(call, ctx) {
            Ok(o) | Err(o) => o,
        }
    }
}

impl GrepTool {
    fn run(&self, call: &ToolCallRequest, ctx: &ToolContext) -> Result<ToolOutcome, ToolOutcome> {
        let args = &call.arguments;
        let pattern = pattern_arg(args)?;
        let case_insensitive = match args.get("case_insensitive") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ToolOutcome::error("case_insensitive must be a boolean")),
        };
        let filter = match str_arg(args, "glob")? {
            Some(g) if !g.is_empty() => Some((glob_matcher(g)?, g.to_string())),
            _ => None,
        };
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(case_insensitive)
            .size_limit(self.config.regex_size_limit)
            .dfa_size_limit(self.config.regex_size_limit)
            .build(pattern)
            .map_err(|e| ToolOutcome::error(format!("invalid pattern: {e}")))?;
        let start = start_path(ctx, args, "grep")?;
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .heap_limit(Some(self.config.line_heap_limit))
            .build();
        let cfg = &self.config;
        let mut lines: Vec<String> = Vec::new();
        let mut found: Vec<Value> = Vec::new();
        let mut bytes = 0usize;
        let mut files_with_matches = 0usize;
        let mut unsearchable = 0usize;
        let mut capped = false;
        let walk = each_file(ctx, &start, cfg.max_files_visited, |path| {
            if let Some((glob, pattern)) = &filter {
                let rel = path.strip_prefix(&start).unwrap_or(path);
                if !glob_hit(glob, pattern, rel) {
                    return true;
                }
            }
            let name = shown(ctx, path);
            let mut in_file = 0usize;
            let result = searcher.search_path(
                &matcher,
                path,
                Lossy(|line_number, line| {
                    if found.len() >= cfg.max_results {
                        capped = true;
                        return Ok(false);
                    }
                    let text = cut_line(line, cfg.max_line_chars);
                    let rendered = format!("{name}:{line_number}: {text}");
                    if bytes + rendered.len() + 1 > cfg.max_bytes && !lines.is_empty() {
                        capped = true;
                        return Ok(false);
                    }
                    bytes += rendered.len() + 1;
                    lines.push(rendered);
                    found.push(json!({"path": name, "line": line_number, "text": text}));
                    in_file += 1;
                    Ok(true)
                }),
            );
            if result.is_err() {
                unsearchable += 1;
            }
            if in_file > 0 {
                files_with_matches += 1;
            }
            !capped
        })?;
        let skipped = unsearchable + walk.unreadable;
        let mut out = if lines.is_empty() {
            "No matches found.".to_string()
        } else {
            lines.join("\n")
        };
        let mut notes = Vec::new();
        if capped {
            notes.push(format!(
                "(Showing the first {} matches; more exist. Narrow the pattern, path or glob to see the rest.)",
                found.len()
            ));
        }
        if walk.stopped {
            notes.push(stopped_note(cfg));
        }
        if skipped > 0 {
            notes.push(format!(
                "({skipped} files could not be searched: unreadable, or a line over {} bytes.)",
                cfg.line_heap_limit
            ));
        }
        for n in &notes {
            out.push_str("\n\n");
            out.push_str(n);
        }
        let value = json!({
            "matches": found,
            "filesWithMatches": files_with_matches,
            "truncated": capped || walk.stopped,
            "skippedFiles": skipped,
        });
        Ok(ToolOutcome::success(text(out)).with_value(value))
    }
}

/// The note of a walk stopped at the file limit.
fn stopped_note(cfg: &SearchConfig) -> String {
    format!(
        "(Stopped after {} files; search a subdirectory with path to cover the rest.)",
        cfg.max_files_visited
    )
}

impl Tool for GlobTool {
    fn definition(&self) -> ToolDefinition {
        let mut d = ToolDefinition::typed(
            "glob",
            GLOB_DESCRIPTION,
            json!({
                "type": "object",
                "properties": {
                    "pattern": prop("string", "Glob pattern, e.g. \"**/*.rs\"."),
                    "path": prop("string", "Directory to search, inside the workspace. Defaults to the workspace root."),
                },
                "required": ["pattern"]
            }),
        );
        d.concurrency_safe = true;
        d
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        match self.run(call, ctx) {
            Ok(o) | Err(o) => o,
        }
    }
}

impl GlobTool {
    fn run(&self, call: &ToolCallRequest, ctx: &ToolContext) -> Result<ToolOutcome, ToolOutcome> {
        let args = &call.arguments;
        let pattern = pattern_arg(args)?;
        let glob = glob_matcher(pattern)?;
        let start = start_path(ctx, args, "glob")?;
        let cfg = &self.config;
        let mut hits: Vec<String> = Vec::new();
        let walk = each_file(ctx, &start, cfg.max_files_visited, |path| {
            let rel = path.strip_prefix(&start).unwrap_or(path);
            if glob_hit(&glob, pattern, rel) {
                hits.push(shown(ctx, path));
            }
            true
        })?;
        let total = hits.len();
        hits.sort();
        let mut bytes = 0usize;
        let mut kept = 0usize;
        for h in &hits {
            if kept >= cfg.max_results || (bytes + h.len() + 1 > cfg.max_bytes && kept > 0) {
                break;
            }
            bytes += h.len() + 1;
            kept += 1;
        }
        hits.truncate(kept);
        let mut out = if hits.is_empty() {
            "No files found.".to_string()
        } else {
            hits.join("\n")
        };
        if kept < total {
            out.push_str(&format!(
                "\n\n(Showing {kept} of {total} files. Use a narrower pattern or path to see the rest.)"
            ));
        }
        if walk.stopped {
            out.push_str("\n\n");
            out.push_str(&stopped_note(cfg));
        }
        let value = json!({
            "paths": hits,
            "total": total,
            "truncated": kept < total || walk.stopped,
        });
        Ok(ToolOutcome::success(text(out)).with_value(value))
    }
}
