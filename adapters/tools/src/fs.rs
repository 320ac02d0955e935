//! `read`, `write` and `edit` (TL-22), confined to the workspace.
//!
//! Failures are `Error: <message>`; filesystem ones carry
//! `{name:"FsError", code}` with the reference's codes (`FS_NOT_FOUND`,
//! `FS_NOT_REGULAR_FILE`, `FS_NOT_TEXT`, `FS_SANDBOX_DENIED`,
//! `FS_EDIT_NOT_FOUND`, `FS_AMBIGUOUS_EDIT`, `FS_IO_ERROR`; dsh adds
//! `FS_TOO_LARGE` for a file, or the text `write`/`edit` would leave, over
//! a configured size limit), argument checks are plain errors (no `info`),
//! as the reference's thrown `Error`s.
//!
//! The text normally lives on the workspace's disk; a tool given a
//! [`TextFiles`] backend reads and writes through it instead (e.g. an
//! editor's buffers over ACP `fs/*`), with the same path confinement,
//! windowing, edit rules and results.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, BufRead, BufReader, Cursor, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use serde_json::{Map, Value, json};

use crate::path::{Resolved, Workspace, cstr, is_symlink_refusal, split};
use crate::{CancelToken, Tool, ToolCallRequest, ToolContext, fs_error, prop, text};

/// Where `read`, `write` and `edit` get and put file text instead of the
/// workspace's disk. Paths are absolute and already confined to the
/// workspace. A call must return promptly once `cancel` fires.
pub trait TextFiles: Send + Sync {
    /// The whole text of `path`; `Ok(None)` when there is no such file.
    /// `Err` is a message for the model.
    fn read(&self, path: &Path, cancel: &CancelToken) -> Result<Option<String>, String>;
    /// Replaces (or creates) `path` with `content`. `Err` is a message for
    /// the model.
    fn write(&self, path: &Path, content: &str, cancel: &CancelToken) -> Result<(), String>;
}

/// An optional [`TextFiles`] backend (`None`: the workspace's disk).
pub type Files = Option<Arc<dyn TextFiles>>;

fn backend_error(message: &str, verb: &str, r: &Resolved) -> ToolOutcome {
    fs_error(
        format!("cannot {verb} \"{}\": {message}", r.display),
        "FS_IO_ERROR",
    )
}

fn not_found(verb: &str, r: &Resolved) -> ToolOutcome {
    fs_error(
        format!("cannot {verb} \"{}\": not found", r.display),
        "FS_NOT_FOUND",
    )
}

/// Prints whether a backend is set (the backend itself has no `Debug`).
fn files_debug(files: &Files) -> &'static str {
    if files.is_some() { "backend" } else { "disk" }
}

/// `read` limits (the reference's `readLimit`, `readMaxLineLength`,
/// `readMaxBytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadConfig {
    /// Default and maximum lines per call (2000).
    pub limit: usize,
    /// Characters kept per line (2000).
    pub max_line_chars: usize,
    /// Byte cap on the selected lines (51200).
    pub max_bytes: usize,
    /// Largest file `read` scans (1 GiB); a larger one is refused with
    /// `FS_TOO_LARGE`. Memory stays bounded whatever this is: lines are
    /// streamed and each kept line is cut to `max_line_chars`.
    pub max_file_bytes: u64,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            limit: 2000,
            max_line_chars: 2000,
            max_bytes: 51200,
            max_file_bytes: 1 << 30,
        }
    }
}

/// The `read` tool (parallel, TL-16).
#[derive(Clone, Default)]
pub struct ReadTool {
    /// Its limits.
    pub config: ReadConfig,
    /// Where the text comes from (`None`: the workspace's disk).
    pub files: Files,
}

/// Limits of `write` and `edit`, which hold a whole file in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EditConfig {
    /// Largest file `edit` and `write` handle, 16 MiB: an existing file
    /// `edit` loads or `write` replaces (its old text is kept for the
    /// diff), the text `write` is given, and the text an edit would
    /// produce (computed before it is built). A larger one is refused with
    /// `FS_TOO_LARGE` and the file is left unchanged.
    pub max_file_bytes: u64,
}

impl Default for EditConfig {
    fn default() -> Self {
        EditConfig {
            max_file_bytes: 16 << 20,
        }
    }
}

/// The `write` tool (exclusive).
#[derive(Clone, Default)]
pub struct WriteTool {
    /// Where the text goes (`None`: the workspace's disk).
    pub files: Files,
    /// Its limits.
    pub config: EditConfig,
}

/// The `edit` tool (exclusive).
#[derive(Clone, Default)]
pub struct EditTool {
    /// Where the text comes from and goes (`None`: the workspace's disk).
    pub files: Files,
    /// Its limits.
    pub config: EditConfig,
}

impl core::fmt::Debug for ReadTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReadTool")
            .field("config", &self.config)
            .field("files", &files_debug(&self.files))
            .finish()
    }
}

impl core::fmt::Debug for WriteTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WriteTool")
            .field("files", &files_debug(&self.files))
            .field("config", &self.config)
            .finish()
    }
}

impl core::fmt::Debug for EditTool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EditTool")
            .field("files", &files_debug(&self.files))
            .field("config", &self.config)
            .finish()
    }
}

fn file_path_arg(args: &Value) -> Result<&str, ToolOutcome> {
    match args.get("file_path").and_then(Value::as_str) {
        Some(p) if !p.trim().is_empty() => Ok(p),
        _ => Err(ToolOutcome::error("file_path must be a non-empty string")),
    }
}

/// A positive integer argument, or `None` when absent.
fn positive_int(args: &Value, key: &str) -> Result<Option<usize>, ToolOutcome> {
    match args.get(key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= 9.0e15 => Ok(Some(n as usize)),
            _ => Err(ToolOutcome::error(format!(
                "{key} must be a positive integer"
            ))),
        },
    }
}

fn io_outcome(e: &io::Error, verb: &str, r: &Resolved) -> ToolOutcome {
    let p = &r.display;
    if is_symlink_refusal(e) {
        return fs_error(
            format!("cannot {verb} \"{p}\": the path is a symbolic link"),
            "FS_SANDBOX_DENIED",
        );
    }
    match e.kind() {
        io::ErrorKind::NotFound => {
            fs_error(format!("cannot {verb} \"{p}\": not found"), "FS_NOT_FOUND")
        }
        io::ErrorKind::NotADirectory => {
            fs_error(format!("cannot {verb} \"{p}\": not found"), "FS_NOT_FOUND")
        }
        io::ErrorKind::IsADirectory => fs_error(
            format!("cannot {verb} \"{p}\": not a regular file"),
            "FS_NOT_REGULAR_FILE",
        ),
        io::ErrorKind::PermissionDenied => fs_error(
            format!("cannot {verb} \"{p}\": permission denied"),
            "FS_PERMISSION_DENIED",
        ),
        _ => fs_error(format!("cannot {verb} \"{p}\": {e}"), "FS_IO_ERROR"),
    }
}

fn not_regular(verb: &str, r: &Resolved) -> ToolOutcome {
    fs_error(
        format!("cannot {verb} \"{}\": not a regular file", r.display),
        "FS_NOT_REGULAR_FILE",
    )
}

fn not_text(verb: &str, r: &Resolved) -> ToolOutcome {
    fs_error(
        format!("cannot {verb} \"{}\": not a UTF-8 text file", r.display),
        "FS_NOT_TEXT",
    )
}

fn too_large(verb: &str, r: &Resolved, size: u64, limit: u64, setting: &str) -> ToolOutcome {
    fs_error(
        format!(
            "cannot {verb} \"{}\": the file is {size} bytes, over the {verb} limit of {limit} bytes ({setting})",
            r.display
        ),
        "FS_TOO_LARGE",
    )
}

/// A new text of `size` bytes (`None`: too large to count) refused over
/// `limit`; `what` says whose text it is.
fn check_output(
    verb: &str,
    r: &Resolved,
    what: &str,
    size: Option<u64>,
    limit: u64,
) -> Result<(), ToolOutcome> {
    match size {
        Some(n) if n <= limit => Ok(()),
        _ => {
            let size = size.map_or_else(|| "too many".to_string(), |n| n.to_string());
            Err(fs_error(
                format!(
                    "cannot {verb} \"{}\": {what} {size} bytes, over the {verb} limit of {limit} bytes (EditConfig::max_file_bytes)",
                    r.display
                ),
                "FS_TOO_LARGE",
            ))
        }
    }
}

/// A text from a [`TextFiles`] backend, refused over `limit` bytes.
fn check_size(
    verb: &str,
    r: &Resolved,
    text: Option<String>,
    limit: u64,
) -> Result<Option<String>, ToolOutcome> {
    match text {
        Some(t) if t.len() as u64 > limit => Err(too_large(
            verb,
            r,
            t.len() as u64,
            limit,
            "EditConfig::max_file_bytes",
        )),
        other => Ok(other),
    }
}

/// Reads a whole regular file of at most `limit` bytes as UTF-8 without
/// following a final symlink. The read itself stops at `limit + 1` bytes,
/// so a file that grows after the size check cannot exhaust memory.
fn read_text(ws: &Workspace, verb: &str, r: &Resolved, limit: u64) -> Result<String, ToolOutcome> {
    let file = open_checked(ws, verb, r)?;
    let meta = file.metadata().map_err(|e| io_outcome(&e, verb, r))?;
    if !meta.is_file() {
        return Err(not_regular(verb, r));
    }
    let setting = "EditConfig::max_file_bytes";
    if meta.len() > limit {
        return Err(too_large(verb, r, meta.len(), limit, setting));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    io::Read::read_to_end(&mut io::Read::take(&file, limit + 1), &mut bytes)
        .map_err(|e| io_outcome(&e, verb, r))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(verb, r, bytes.len() as u64, limit, setting));
    }
    String::from_utf8(bytes).map_err(|_| not_text(verb, r))
}

/// Incremental UTF-8 check over a byte stream cut anywhere.
#[derive(Default)]
struct Utf8Check {
    carry: [u8; 4],
    held: usize,
}

impl Utf8Check {
    /// Feeds `bytes`; false once the stream is not UTF-8.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while self.held > 0 {
            let Some((&b, rest)) = bytes.split_first() else {
                return true;
            };
            if self.held == self.carry.len() {
                return false;
            }
            self.carry[self.held] = b;
            self.held += 1;
            bytes = rest;
            match std::str::from_utf8(&self.carry[..self.held]) {
                Ok(_) => self.held = 0,
                Err(e) if e.error_len().is_some() => return false,
                Err(_) => {}
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            Err(e) if e.error_len().is_some() => false,
            Err(e) => {
                let tail = bytes.get(e.valid_up_to()..).unwrap_or(&[]);
                self.held = tail.len().min(self.carry.len());
                self.carry[..self.held].copy_from_slice(&tail[..self.held]);
                true
            }
        }
    }

    /// True when no character is left incomplete.
    fn complete(&self) -> bool {
        self.held == 0
    }
}

/// Reads one line (without its `\n`) into `buf`, keeping at most `keep`
/// bytes of it and checking all of it for UTF-8. `Ok(None)` at end of file;
/// `Ok(Some(false))` when the line is not UTF-8.
fn read_line_bounded(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    keep: usize,
) -> io::Result<Option<bool>> {
    buf.clear();
    let mut check = Utf8Check::default();
    let mut valid = true;
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        any = true;
        let (part, found) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        let room = keep.saturating_sub(buf.len());
        buf.extend_from_slice(&part[..part.len().min(room)]);
        valid = valid && check.feed(part);
        let used = part.len() + usize::from(found);
        reader.consume(used);
        if found {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    Ok(Some(valid && check.complete()))
}

/// Opens `r` for reading beneath the opened workspace (no symlink followed
/// on the way; `O_NONBLOCK` keeps a FIFO from blocking the open, and
/// callers refuse anything that is not a regular file afterwards).
/// The spill folder as a workspace when `raw` is an absolute path in it
/// (`read` may page through spilled results outside the workspace).
pub(crate) fn spill_workspace(raw: &str, ctx: &ToolContext) -> Option<Workspace> {
    let root = ctx.spill_dir.as_ref()?;
    let path = Path::new(raw);
    (path.is_absolute() && path.starts_with(root) && path != root.as_path())
        .then(|| Workspace::new(root.clone()).ok())
        .flatten()
}

fn open_checked(ws: &Workspace, verb: &str, r: &Resolved) -> Result<fs::File, ToolOutcome> {
    ws.open_beneath(&r.relative, libc::O_RDONLY | libc::O_NONBLOCK, 0)
        .map_err(|e| io_outcome(&e, verb, r))
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces (or creates) `r` atomically, in its parent directory `dir` (a
/// handle opened beneath the workspace): a fresh temp file beside it
/// (`O_EXCL`, so never a pre-planted symlink), then `renameat`, which
/// replaces a symlink rather than following it. Existing permissions are
/// kept.
fn atomic_write(ws: &Workspace, dir: &OwnedFd, r: &Resolved, content: &str) -> io::Result<()> {
    let Some(name) = split(&r.relative).1 else {
        return Err(io::Error::from(io::ErrorKind::IsADirectory));
    };
    let perms = ws
        .open_beneath(&r.relative, libc::O_PATH, 0)
        .and_then(|f| f.metadata())
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions());
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = format!(
        ".{}.dsh-{}-{n}.tmp",
        name.to_string_lossy(),
        std::process::id()
    );
    let tmp = cstr(OsStr::new(&tmp))?;
    let target = cstr(name)?;
    let result = (|| {
        // SAFETY: a valid directory fd and a NUL-terminated name; the new
        // fd is owned by the `File` made from it.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by openat and is owned by no one.
        let mut f = unsafe { fs::File::from_raw_fd(fd) };
        f.write_all(content.as_bytes())?;
        if let Some(p) = perms {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        drop(f);
        // SAFETY: valid fds and NUL-terminated names.
        let rc = unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                target.as_ptr(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    })();
    if result.is_err() {
        // SAFETY: a valid fd and a NUL-terminated name.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    result
}

/// The parent directory of `r`, opened beneath the workspace (made when
/// missing, with `create`).
fn parent_dir(
    ws: &Workspace,
    verb: &str,
    r: &Resolved,
    create: bool,
) -> Result<OwnedFd, ToolOutcome> {
    ws.open_dir_beneath(split(&r.relative).0, create)
        .map_err(|e| io_outcome(&e, verb, r))
}

fn relative_str(r: &Resolved) -> String {
    r.relative.display().to_string()
}

impl Tool for ReadTool {
    fn definition(&self) -> ToolDefinition {
        let mut d = ToolDefinition::typed(
            "read",
            "Read a UTF-8 text file and return line-numbered content.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": prop("string", "Path to read, resolved by the filesystem backend."),
                    "offset": prop("number", "1-based first line to return. Defaults to 1."),
                    "limit": prop("number", &format!("Maximum number of lines to return. Defaults to {}.", self.config.limit)),
                },
                "required": ["file_path"]
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

impl ReadTool {
    fn run(&self, call: &ToolCallRequest, ctx: &ToolContext) -> Result<ToolOutcome, ToolOutcome> {
        let args = &call.arguments;
        let raw = file_path_arg(args)?;
        let offset = positive_int(args, "offset")?.unwrap_or(1);
        let limit = positive_int(args, "limit")?.unwrap_or(self.config.limit);
        if limit > self.config.limit {
            return Err(ToolOutcome::error(format!(
                "limit must be less than or equal to {}",
                self.config.limit
            )));
        }
        // A spill file (crate::spill) is read beneath the spill folder, from
        // this machine's disk whatever the workspace's backend.
        let spill_ws = spill_workspace(raw, ctx);
        let ws = spill_ws.as_ref().unwrap_or(&ctx.workspace);
        let files = if spill_ws.is_some() {
            &None
        } else {
            &self.files
        };
        let r = ws.resolve_for(raw, "read")?;
        let keep = self
            .config
            .max_line_chars
            .saturating_add(1)
            .saturating_mul(4)
            .saturating_add(1);
        let size_limit = self.config.max_file_bytes;
        let setting = "ReadConfig::max_file_bytes";
        let mut reader: Box<dyn BufRead> = match files {
            Some(files) => match files.read(&r.path, &ctx.cancel) {
                Ok(Some(text)) if text.len() as u64 > size_limit => {
                    return Err(too_large(
                        "read",
                        &r,
                        text.len() as u64,
                        size_limit,
                        setting,
                    ));
                }
                Ok(Some(text)) => Box::new(Cursor::new(text.into_bytes())),
                Ok(None) => return Err(not_found("read", &r)),
                Err(e) => return Err(backend_error(&e, "read", &r)),
            },
            None => {
                let file = open_checked(ws, "read", &r)?;
                let meta = file.metadata().map_err(|e| io_outcome(&e, "read", &r))?;
                if !meta.is_file() {
                    return Err(not_regular("read", &r));
                }
                if meta.len() > size_limit {
                    return Err(too_large("read", &r, meta.len(), size_limit, setting));
                }
                // Stream the file: only the selected window is kept, and of
                // each line only what can be shown (`keep`: enough bytes for
                // one character more than `max_line_chars`, so a cut line is
                // still seen as cut, plus a `\r`). The scan stops at the size
                // limit even if the file grows meanwhile.
                Box::new(BufReader::new(io::Read::take(file, size_limit)))
            }
        };
        let mut buf = Vec::new();
        let mut total = 0usize;
        let mut selected: Vec<(usize, String)> = Vec::new();
        let mut bytes = 0usize;
        let mut capped = false;
        loop {
            if ctx.cancel.is_cancelled() {
                return Err(ToolOutcome::aborted());
            }
            let valid = match read_line_bounded(&mut reader, &mut buf, keep)
                .map_err(|e| io_outcome(&e, "read", &r))?
            {
                None => break,
                Some(valid) => valid,
            };
            if !valid {
                return Err(not_text("read", &r));
            }
            total += 1;
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            // A cut may split a character: keep the longest valid prefix.
            let line = match std::str::from_utf8(&buf) {
                Ok(l) => l,
                Err(e) => std::str::from_utf8(&buf[..e.valid_up_to()]).unwrap_or(""),
            };
            if total < offset || capped || selected.len() >= limit {
                continue;
            }
            let shown = truncate_line(line, self.config.max_line_chars);
            let rendered = format!("{total}: {shown}").len() + 1;
            if bytes + rendered > self.config.max_bytes && !selected.is_empty() {
                capped = true;
                continue;
            }
            bytes += rendered;
            selected.push((total, shown));
        }
        if offset > total && !(offset == 1 && total == 0) {
            return Err(ToolOutcome::error(format!(
                "offset {offset} is out of range for \"{}\" ({total} lines)",
                r.display
            )));
        }
        let footer = match selected.last() {
            Some(&(last, _)) if capped => format!(
                "(Output capped. Showing lines {offset}-{last}. Use offset={} to continue.)",
                last + 1
            ),
            Some(&(last, _)) if last < total => format!(
                "(Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
                last + 1
            ),
            _ => format!("(End of file - total {total} lines)"),
        };
        let mut out = format!("<path>{}</path>\n<type>file</type>\n<content>\n", r.display);
        if !selected.is_empty() {
            let lines: Vec<String> = selected.iter().map(|(n, t)| format!("{n}: {t}")).collect();
            out.push_str(&lines.join("\n"));
            out.push_str("\n\n");
        }
        out.push_str(&footer);
        out.push_str("\n</content>");
        let lines: Vec<Value> = selected
            .iter()
            .map(|(n, t)| json!({"number": n, "text": t}))
            .collect();
        let meta =
            json!({"path": r.display, "offset": offset, "lines": lines, "totalLines": total});
        Ok(ToolOutcome::success(text(out))
            .with_value(meta.clone())
            .with_meta(meta))
    }
}

/// Keeps the first `max` characters, marking a cut (TL-22).
fn truncate_line(line: &str, max: usize) -> String {
    match line.char_indices().nth(max) {
        None => line.to_string(),
        Some((cut, _)) => format!("{}... (line truncated to {max} chars)", &line[..cut]),
    }
}

impl Tool for WriteTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "write",
            "Create or fully replace a UTF-8 text file.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": prop("string", "Path to write, resolved by the filesystem backend."),
                    "content": prop("string", "Full UTF-8 text content to write."),
                },
                "required": ["file_path", "content"]
            }),
        )
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        match write_run(call, ctx, &self.files, &self.config) {
            Ok(o) | Err(o) => o,
        }
    }
}

fn write_run(
    call: &ToolCallRequest,
    ctx: &ToolContext,
    files: &Files,
    config: &EditConfig,
) -> Result<ToolOutcome, ToolOutcome> {
    let args = &call.arguments;
    let raw = file_path_arg(args)?;
    let Some(content) = args.get("content").and_then(Value::as_str) else {
        return Err(ToolOutcome::error("content must be a string"));
    };
    let r = ctx.workspace.resolve_for(raw, "write")?;
    check_output(
        "write",
        &r,
        "the content is",
        u64::try_from(content.len()).ok(),
        config.max_file_bytes,
    )?;
    let before = match files {
        Some(f) => {
            let text = f
                .read(&r.path, &ctx.cancel)
                .map_err(|e| backend_error(&e, "write", &r))?;
            check_size("write", &r, text, config.max_file_bytes)?
        }
        None => match ctx
            .workspace
            .open_beneath(&r.relative, libc::O_PATH, 0)
            .and_then(|f| f.metadata())
        {
            Ok(m) if m.is_file() => Some(read_text(
                &ctx.workspace,
                "write",
                &r,
                config.max_file_bytes,
            )?),
            Ok(_) => return Err(not_regular("write", &r)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_outcome(&e, "write", &r)),
        },
    };
    if ctx.cancel.is_cancelled() {
        return Err(ToolOutcome::aborted());
    }
    let dir = parent_dir(&ctx.workspace, "write", &r, true)?;
    match files {
        Some(f) => f
            .write(&r.path, content, &ctx.cancel)
            .map_err(|e| backend_error(&e, "write", &r))?,
        None => atomic_write(&ctx.workspace, &dir, &r, content)
            .map_err(|e| io_outcome(&e, "write", &r))?,
    }
    let verb = if before.is_some() {
        "Updated file"
    } else {
        "Created file"
    };
    let mut diffs = Vec::new();
    if let Some(old) = &before
        && old != content
    {
        diffs.push(diff(&r, old, content));
    }
    let value = json!({
        "path": r.display,
        "operation": if before.is_some() { "update" } else { "create" },
        "before": before,
        "after": content,
    });
    Ok(ToolOutcome::success(text(format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n{verb}\n</content>",
        r.display
    )))
    .with_value(value)
    .with_meta(json!({"diffs": diffs})))
}

fn diff(r: &Resolved, old: &str, new: &str) -> Value {
    let mut m = Map::new();
    m.insert("path".into(), Value::String(relative_str(r)));
    m.insert("oldText".into(), Value::String(old.to_string()));
    m.insert("newText".into(), Value::String(new.to_string()));
    Value::Object(m)
}

impl Tool for EditTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::typed(
            "edit",
            "Edit an existing UTF-8 text file by replacing literal text.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": prop("string", "Path to edit, resolved by the filesystem backend."),
                    "old_string": prop("string", "Literal text to replace. Must match exactly."),
                    "new_string": prop("string", "Literal replacement text. Use an empty string to delete the match."),
                    "replace_all": prop("boolean", "Replace all matches. Defaults to false; when false, old_string must appear exactly once."),
                },
                "required": ["file_path", "old_string", "new_string"]
            }),
        )
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        match edit_run(call, ctx, &self.files, &self.config) {
            Ok(o) | Err(o) => o,
        }
    }
}

fn edit_run(
    call: &ToolCallRequest,
    ctx: &ToolContext,
    files: &Files,
    config: &EditConfig,
) -> Result<ToolOutcome, ToolOutcome> {
    let args = &call.arguments;
    let raw = file_path_arg(args)?;
    let old = match args.get("old_string").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s,
        _ => return Err(ToolOutcome::error("old_string must be a non-empty string")),
    };
    let Some(new) = args.get("new_string").and_then(Value::as_str) else {
        return Err(ToolOutcome::error("new_string must be a string"));
    };
    if old == new {
        return Err(ToolOutcome::error("old_string and new_string must differ"));
    }
    let replace_all = args.get("replace_all").and_then(Value::as_bool) == Some(true);
    let r = ctx.workspace.resolve_for(raw, "edit")?;
    let before = match files {
        Some(f) => {
            let text = f
                .read(&r.path, &ctx.cancel)
                .map_err(|e| backend_error(&e, "edit", &r))?;
            check_size("edit", &r, text, config.max_file_bytes)?
                .ok_or_else(|| not_found("edit", &r))?
        }
        None => read_text(&ctx.workspace, "edit", &r, config.max_file_bytes)?,
    };
    let matches = before.matches(old).count();
    if matches == 0 {
        return Err(fs_error(
            format!("cannot edit \"{}\": old_string not found", r.display),
            "FS_EDIT_NOT_FOUND",
        ));
    }
    if matches > 1 && !replace_all {
        return Err(fs_error(
            format!(
                "cannot edit \"{}\": old_string matches {matches} locations; provide a more specific old_string or set replace_all to true",
                r.display
            ),
            "FS_AMBIGUOUS_EDIT",
        ));
    }
    // The size of the result, known before it is built: each replaced
    // match trades `old` for `new` (matches never overlap).
    let replaced = if replace_all { matches } else { 1 };
    let size = replaced
        .checked_mul(old.len())
        .and_then(|removed| before.len().checked_sub(removed))
        .and_then(|kept| kept.checked_add(replaced.checked_mul(new.len())?))
        .and_then(|n| u64::try_from(n).ok());
    check_output(
        "edit",
        &r,
        "the edited file would be",
        size,
        config.max_file_bytes,
    )?;
    let after = if replace_all {
        before.replace(old, new)
    } else {
        before.replacen(old, new, 1)
    };
    if ctx.cancel.is_cancelled() {
        return Err(ToolOutcome::aborted());
    }
    match files {
        Some(f) => f
            .write(&r.path, &after, &ctx.cancel)
            .map_err(|e| backend_error(&e, "edit", &r))?,
        None => {
            let dir = parent_dir(&ctx.workspace, "edit", &r, false)?;
            atomic_write(&ctx.workspace, &dir, &r, &after)
                .map_err(|e| io_outcome(&e, "edit", &r))?
        }
    }
    let message = if replace_all {
        format!(
            "The file {} has been updated. All occurrences were successfully replaced.",
            r.display
        )
    } else {
        format!("The file {} has been updated successfully.", r.display)
    };
    let meta = json!({"diffs": [diff(&r, &before, &after)]});
    Ok(ToolOutcome::success(text(message))
        .with_value(json!({"path": r.display, "before": before, "after": after}))
        .with_meta(meta))
}
