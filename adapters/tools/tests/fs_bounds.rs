//! The file tools hold bounded memory whatever the file (security issue:
//! "read/write/edit load a whole file or line into memory: a huge sparse
//! file in the workspace aborts the process").
//!
//! A counting global allocator measures the peak heap of each call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::{self, File};
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;
use dsh_tools::{
    EditConfig, EditTool, ReadConfig, ReadTool, ToolCallRequest, ToolContext, ToolSet, Workspace,
    WriteTool,
};
use serde_json::{Value, json};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The measurements share one counter: one call at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` and returns its result with the heap growth it peaked at.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

fn text_of(o: &ToolOutcome) -> String {
    o.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn call(set: &ToolSet, ws: &std::path::Path, name: &str, args: Value) -> ToolOutcome {
    set.execute_request(
        &ToolCallRequest {
            name: name.into(),
            call_id: "c1".into(),
            arguments: args,
        },
        &ToolContext::new(Workspace::new(ws).unwrap()),
    )
}

fn code_of(o: &ToolOutcome) -> Option<String> {
    o.error
        .as_ref()
        .and_then(|e| e.info.as_ref())
        .map(|i| i.code.clone())
}

#[test]
fn read_of_a_huge_single_line_file_keeps_memory_bounded() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // 64 MiB of 'a' with no newline, then a second line.
    let path = dir.path().join("big.txt");
    let mut f = File::create(&path).unwrap();
    let block = vec![b'a'; 1 << 20];
    for _ in 0..64 {
        f.write_all(&block).unwrap();
    }
    f.write_all(b"\nsecond\n").unwrap();
    drop(f);
    let set = ToolSet::builtin();
    let (out, peak) = peak_of(|| call(&set, dir.path(), "read", json!({"file_path": "big.txt"})));
    let text = text_of(&out);
    assert!(!out.is_error(), "{}", &text[..text.len().min(300)]);
    assert!(
        text.contains("... (line truncated to 2000 chars)"),
        "{}",
        &text[..300]
    );
    assert!(text.contains("2: second"), "{}", &text[text.len() - 200..]);
    // The old reader held the whole 64 MiB line.
    assert!(peak < 1 << 20, "read peaked at {peak} bytes of heap");
}

#[test]
fn a_sparse_file_over_the_read_limit_is_refused_by_name() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.bin");
    File::create(&path).unwrap().set_len(8 << 30).unwrap();
    let set = ToolSet::builtin();
    let (out, peak) =
        peak_of(|| call(&set, dir.path(), "read", json!({"file_path": "sparse.bin"})));
    assert_eq!(code_of(&out).as_deref(), Some("FS_TOO_LARGE"));
    let text = text_of(&out);
    assert!(
        text.contains("over the read limit of 1073741824 bytes (ReadConfig::max_file_bytes)"),
        "{text}"
    );
    assert!(peak < 1 << 20, "{peak}");
    // edit and write (which keeps the old text for its diff) refuse too.
    for (tool, args) in [
        (
            "edit",
            json!({"file_path": "sparse.bin", "old_string": "a", "new_string": "b"}),
        ),
        (
            "write",
            json!({"file_path": "sparse.bin", "content": "small"}),
        ),
    ] {
        let (out, peak) = peak_of(|| call(&set, dir.path(), tool, args));
        assert_eq!(code_of(&out).as_deref(), Some("FS_TOO_LARGE"), "{tool}");
        assert!(
            text_of(&out).contains(&format!(
                "over the {tool} limit of 16777216 bytes (EditConfig::max_file_bytes)"
            )),
            "{}",
            text_of(&out)
        );
        assert!(peak < 1 << 20, "{tool} peaked at {peak}");
    }
    assert_eq!(fs::metadata(&path).unwrap().len(), 8 << 30);
}

#[test]
fn limits_are_settings() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "0123456789\n").unwrap();
    let mut set = ToolSet::new();
    set.insert(Box::new(ReadTool {
        config: ReadConfig {
            max_file_bytes: 10,
            ..ReadConfig::default()
        },
        ..ReadTool::default()
    }));
    let small = EditConfig { max_file_bytes: 10 };
    set.insert(Box::new(EditTool {
        config: small,
        ..EditTool::default()
    }));
    set.insert(Box::new(WriteTool {
        config: small,
        ..WriteTool::default()
    }));
    let out = call(&set, dir.path(), "read", json!({"file_path": "f.txt"}));
    assert!(
        text_of(&out).ends_with(
            "the file is 11 bytes, over the read limit of 10 bytes (ReadConfig::max_file_bytes)"
        ),
        "{}",
        text_of(&out)
    );
    let out = call(
        &set,
        dir.path(),
        "edit",
        json!({"file_path": "f.txt", "old_string": "0", "new_string": "x"}),
    );
    assert_eq!(code_of(&out).as_deref(), Some("FS_TOO_LARGE"));
    // At the limit it works.
    fs::write(dir.path().join("g.txt"), "012345678\n").unwrap();
    let out = call(
        &set,
        dir.path(),
        "edit",
        json!({"file_path": "g.txt", "old_string": "0", "new_string": "x"}),
    );
    assert!(!out.is_error(), "{}", text_of(&out));
}

#[test]
fn utf8_is_checked_across_buffer_cuts_and_past_the_kept_prefix() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let set = ToolSet::builtin();
    // 4-byte characters across every 8 KiB buffer boundary: valid.
    let line: String = "\u{1F600}".repeat(5000);
    fs::write(dir.path().join("emoji.txt"), format!("{line}\nend\n")).unwrap();
    let out = call(&set, dir.path(), "read", json!({"file_path": "emoji.txt"}));
    let text = text_of(&out);
    assert!(!out.is_error(), "{}", &text[..200]);
    let shown = format!(
        "1: {}... (line truncated to 2000 chars)",
        "\u{1F600}".repeat(2000)
    );
    assert!(text.contains(&shown), "{}", &text[..200]);
    assert!(text.contains("2: end"));
    // An invalid byte far past what is kept still makes the file not text.
    let mut bytes = vec![b'a'; 100_000];
    bytes.push(0xFF);
    bytes.extend_from_slice(b"\n");
    fs::write(dir.path().join("bad.txt"), &bytes).unwrap();
    let out = call(&set, dir.path(), "read", json!({"file_path": "bad.txt"}));
    assert_eq!(code_of(&out).as_deref(), Some("FS_NOT_TEXT"));
    // A character cut by the end of file is not text either.
    fs::write(dir.path().join("cut.txt"), [b'a', 0xE2, 0x82]).unwrap();
    let out = call(&set, dir.path(), "read", json!({"file_path": "cut.txt"}));
    assert_eq!(code_of(&out).as_deref(), Some("FS_NOT_TEXT"));
    // CRLF lines still lose their \r.
    fs::write(dir.path().join("crlf.txt"), "one\r\ntwo\r\n").unwrap();
    let out = call(&set, dir.path(), "read", json!({"file_path": "crlf.txt"}));
    assert!(
        text_of(&out).contains("1: one\n2: two\n"),
        "{}",
        text_of(&out)
    );
}

/// `out` is `FS_TOO_LARGE` with a message ending in `ending`.
fn assert_too_large(out: &ToolOutcome, ending: &str) {
    assert_eq!(
        code_of(out).as_deref(),
        Some("FS_TOO_LARGE"),
        "{}",
        text_of(out)
    );
    assert!(text_of(out).ends_with(ending), "{}", text_of(out));
}

/// Builtin `edit`/`write` with `max_file_bytes` (the default when `None`).
fn edit_set(limit: Option<u64>) -> ToolSet {
    let config = limit.map_or_else(EditConfig::default, |max_file_bytes| EditConfig {
        max_file_bytes,
    });
    let mut set = ToolSet::new();
    set.insert(Box::new(EditTool {
        config,
        ..EditTool::default()
    }));
    set.insert(Box::new(WriteTool {
        config,
        ..WriteTool::default()
    }));
    set
}

#[test]
fn a_replace_all_that_would_amplify_past_the_limit_is_refused_before_it_is_built() {
    // A 1 MiB file and a 2 KiB replacement made
    // `edit` allocate gigabytes and abort the process.
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.txt");
    let original = vec![b'a'; 1 << 20];
    fs::write(&path, &original).unwrap();
    let set = edit_set(None);
    let new = "b".repeat(2 << 10);
    let args =
        json!({"file_path": "big.txt", "old_string": "a", "new_string": new, "replace_all": true});
    let (out, peak) = peak_of(|| call(&set, dir.path(), "edit", args));
    let size = (1u64 << 20) * (2 << 10);
    assert_too_large(
        &out,
        &format!(
            "the edited file would be {size} bytes, over the edit limit of 16777216 bytes (EditConfig::max_file_bytes)"
        ),
    );
    // Only the file itself was held (plus its read buffer), never the result.
    assert!(peak < 4 << 20, "edit peaked at {peak} bytes");
    assert_eq!(fs::read(&path).unwrap(), original);
}

#[test]
fn edit_and_write_results_over_a_configured_limit_leave_the_file_unchanged() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.txt");
    fs::write(&path, "0a0b\n").unwrap();
    let set = edit_set(Some(8));
    // One replacement: 5 - 1 + 5 = 9 bytes.
    let out = call(
        &set,
        dir.path(),
        "edit",
        json!({"file_path": "f.txt", "old_string": "a", "new_string": "xxxxx"}),
    );
    assert_too_large(
        &out,
        "the edited file would be 9 bytes, over the edit limit of 8 bytes (EditConfig::max_file_bytes)",
    );
    // Every match: 5 - 2 + 2 * 3 = 9 bytes.
    let out = call(
        &set,
        dir.path(),
        "edit",
        json!({"file_path": "f.txt", "old_string": "0", "new_string": "yyy", "replace_all": true}),
    );
    assert_eq!(
        code_of(&out).as_deref(),
        Some("FS_TOO_LARGE"),
        "{}",
        text_of(&out)
    );
    let out = call(
        &set,
        dir.path(),
        "write",
        json!({"file_path": "f.txt", "content": "123456789"}),
    );
    assert_too_large(
        &out,
        "the content is 9 bytes, over the write limit of 8 bytes (EditConfig::max_file_bytes)",
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "0a0b\n");
    // A new file over the limit is not created.
    let out = call(
        &set,
        dir.path(),
        "write",
        json!({"file_path": "new.txt", "content": "123456789"}),
    );
    assert_eq!(code_of(&out).as_deref(), Some("FS_TOO_LARGE"));
    assert!(!dir.path().join("new.txt").exists());
    // At the limit both work: 5 - 2 + 2 * 2 = 7, then 8 bytes.
    let out = call(
        &set,
        dir.path(),
        "edit",
        json!({"file_path": "f.txt", "old_string": "0", "new_string": "zz", "replace_all": true}),
    );
    assert!(!out.is_error(), "{}", text_of(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "zzazzb\n");
    let out = call(
        &set,
        dir.path(),
        "write",
        json!({"file_path": "f.txt", "content": "12345678"}),
    );
    assert!(!out.is_error(), "{}", text_of(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "12345678");
}

#[test]
fn write_over_the_default_limit_is_refused() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.txt");
    fs::write(&path, "keep\n").unwrap();
    let content = "c".repeat((16 << 20) + 1);
    let out = call(
        &edit_set(None),
        dir.path(),
        "write",
        json!({"file_path": "f.txt", "content": content}),
    );
    assert_too_large(
        &out,
        "the content is 16777217 bytes, over the write limit of 16777216 bytes (EditConfig::max_file_bytes)",
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "keep\n");
}
