//! The on-disk layout (persistence.md 5.1, L2–L4): project directory from
//! the cwd, session directory from the escaped id, fixed transcript name.

use sha2::{Digest, Sha256};

/// The longest file-name segment the layout produces (POSIX `NAME_MAX`).
pub const MAX_SEGMENT: usize = 255;

/// The project directory of sessions without a cwd.
pub const NO_CWD: &str = "_no-cwd";

/// The session directory name of `id` (L2, the core's
/// [`session_id_segment`](dsh_core::jsonl::session_id_segment)): `.` →
/// `~002E`, `..` → `~002E~002E`; otherwise each UTF-16 code unit outside
/// `A–Z a–z 0–9 . _ -` (including `~`, `/`, NUL) becomes `~` and four
/// uppercase hex digits. Injective, and the result is one safe path segment
/// (never `.` or `..`, no separator, no NUL). `None` for the empty id.
///
/// Extension (not in the reference): a segment that would be longer than
/// [`MAX_SEGMENT`] bytes (where the reference fails with ENAMETOOLONG) is
/// `~L<first 188 bytes of the escaped form>~<SHA-256 of the id, hex>`. A
/// plain segment never holds `~L` (every `~` there is followed by four hex
/// digits), so the two forms never collide.
pub fn encode_id(id: &str) -> Option<String> {
    let out = dsh_core::jsonl::session_id_segment(id)?;
    if out.len() <= MAX_SEGMENT {
        return Some(out);
    }
    let digest = Sha256::digest(id.as_bytes());
    let mut long = String::with_capacity(MAX_SEGMENT);
    long.push_str("~L");
    long.push_str(out.get(..188).unwrap_or(&out));
    long.push('~');
    for b in digest {
        long.push_str(&format!("{b:02x}"));
    }
    Some(long)
}

/// The project directory name of `cwd` (L3, the core's function): `/`,
/// `\` and `:` become `-` (a run of them one `-`), `A–Z a–z 0–9 . _ -` are
/// kept, other UTF-16 units are escaped as in [`encode_id`]; leading `-` are
/// stripped, an empty result is `root`, at most 251 characters are kept, and
/// the result is wrapped as `--<slug>--`. No cwd → `_no-cwd`.
pub fn project_key(cwd: Option<&str>) -> String {
    dsh_core::jsonl::project_key(cwd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tp6_paths() {
        // persistence.md TP-6.
        assert_eq!(
            project_key(Some("/home/u/my proj")),
            "--home-u-my~0020proj--"
        );
        assert_eq!(encode_id("a/b").unwrap(), "a~002Fb");
        assert_eq!(project_key(None), "_no-cwd");
        assert_eq!(encode_id("..").unwrap(), "~002E~002E");
        assert_eq!(project_key(Some("C:\\Users\\x")), "--C-Users-x--");
        assert_eq!(encode_id("x~y").unwrap(), "x~007Ey");
    }

    #[test]
    fn l2_special_and_non_bmp() {
        assert_eq!(encode_id("."), Some("~002E".into()));
        assert_eq!(encode_id(""), None);
        assert_eq!(encode_id("a\0b").unwrap(), "a~0000b");
        // One astral character is two UTF-16 code units.
        assert_eq!(encode_id("\u{1F600}").unwrap(), "~D83D~DE00");
        assert_eq!(encode_id("...").unwrap(), "...");
    }

    #[test]
    fn l3_root_and_runs() {
        assert_eq!(project_key(Some("/")), "--root--");
        assert_eq!(project_key(Some("//a::b")), "--a-b--");
        assert_eq!(project_key(Some("")), "_no-cwd");
        let long = format!("/{}", "a".repeat(400));
        assert_eq!(project_key(Some(&long)).len(), 255);
    }

    #[test]
    fn long_ids_fit_one_segment() {
        let id = "\u{4E2D}".repeat(200);
        let seg = encode_id(&id).unwrap();
        assert!(seg.len() <= MAX_SEGMENT, "{}", seg.len());
        assert!(seg.starts_with("~L~4E2D"));
        let other = format!("{id}x");
        assert_ne!(encode_id(&other).unwrap(), seg);
    }
}
