//! The JSONL store's directory naming (persistence.md 5.1 L2–L4) and the
//! append contiguity rule (OP4 step 7), as pure functions.

use alloc::format;
use alloc::string::String;

use crate::session::SessionEvent;

fn push_escaped(out: &mut String, unit: u16) {
    out.push_str(&format!("~{unit:04X}"));
}

fn plain(unit: u16) -> Option<char> {
    let c = char::from_u32(u32::from(unit))?;
    (c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')).then_some(c)
}

/// L2: the directory segment of a session id; `None` for an empty id.
/// `.` → `~002E`, `..` → `~002E~002E`; otherwise every UTF-16 unit outside
/// `A–Z a–z 0–9 . _ -` becomes `~` and four uppercase hex digits.
pub fn session_id_segment(id: &str) -> Option<String> {
    match id {
        "" => None,
        "." => Some(String::from("~002E")),
        ".." => Some(String::from("~002E~002E")),
        _ => {
            let mut out = String::with_capacity(id.len());
            for unit in id.encode_utf16() {
                match plain(unit) {
                    Some(c) => out.push(c),
                    None => push_escaped(&mut out, unit),
                }
            }
            Some(out)
        }
    }
}

/// L3: the project directory of a `cwd`: separators (`/`, `\`, `:`) become
/// one `-` per run, `A–Z a–z 0–9 . _ -` are kept, other UTF-16 units become
/// `~XXXX`; leading `-` are stripped (`root` if nothing is left), the first
/// 251 characters kept, and the result wrapped as `--slug--`. No (or an
/// empty) cwd gives `_no-cwd`.
pub fn project_key(cwd: Option<&str>) -> String {
    let Some(cwd) = cwd.filter(|c| !c.is_empty()) else {
        return String::from("_no-cwd");
    };
    let mut slug = String::with_capacity(cwd.len());
    let mut in_separator_run = false;
    for unit in cwd.encode_utf16() {
        if matches!(unit, 0x2F | 0x5C | 0x3A) {
            if !in_separator_run {
                slug.push('-');
            }
            in_separator_run = true;
            continue;
        }
        in_separator_run = false;
        match plain(unit) {
            Some(c) => slug.push(c),
            None => push_escaped(&mut slug, unit),
        }
    }
    let trimmed = slug.trim_start_matches('-');
    let trimmed = if trimmed.is_empty() { "root" } else { trimmed };
    let kept: String = trimmed.chars().take(251).collect();
    format!("--{kept}--")
}

/// L1–L4: the transcript path relative to the store root:
/// `<project-key>/<id-segment>/session.jsonl[.zstd]`.
pub fn transcript_path(cwd: Option<&str>, id: &str, zstd: bool) -> Option<String> {
    let file = if zstd {
        "session.jsonl.zstd"
    } else {
        "session.jsonl"
    };
    Some(format!(
        "{}/{}/{file}",
        project_key(cwd),
        session_id_segment(id)?
    ))
}

/// OP4 step 7: every event of a batch must carry `cursor + i`. The error
/// names the first mismatch: `append seq mismatch for session "<id>":
/// expected X at index i, got Y`.
pub fn check_batch_seqs(
    session_id: &str,
    cursor: u64,
    batch: &[SessionEvent],
) -> Result<(), String> {
    for (i, e) in batch.iter().enumerate() {
        let expected = cursor + i as u64;
        if e.seq() != expected {
            return Err(format!(
                "append seq mismatch for session \"{session_id}\": expected {expected} at index {i}, got {}",
                e.seq()
            ));
        }
    }
    Ok(())
}
