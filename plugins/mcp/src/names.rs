//! Model-facing tool names: `mcp__<server>__<tool>`, normalised to the
//! function-name contract (`[A-Za-z0-9_-]`, at most 64 characters) the way
//! the reference does it, so logs move both ways.

use sha2::{Digest, Sha256};

/// Longest public tool name.
pub const MAX_PUBLIC_NAME_LENGTH: usize = 64;

/// Hex digits of the identity hash a lossy name ends with.
const HASH_LENGTH: usize = 12;

/// The public name of tool `raw` of server `server`: the joined name when
/// it is already valid; else its normalised form cut to 51 characters,
/// `_`, and the first 12 hex digits of SHA-256(`server\0raw`).
pub fn public_tool_name(server: &str, raw: &str) -> String {
    let joined = format!("mcp__{server}__{raw}");
    // The reference replaces UTF-16 code units; a char outside the BMP is
    // two of them, so it becomes two `_`.
    let mut normalized = String::with_capacity(joined.len());
    for c in joined.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            normalized.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                normalized.push('_');
            }
        }
    }
    if normalized == joined && normalized.len() <= MAX_PUBLIC_NAME_LENGTH {
        return normalized;
    }
    let mut hasher = Sha256::new();
    hasher.update(server.as_bytes());
    hasher.update([0u8]);
    hasher.update(raw.as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let keep = MAX_PUBLIC_NAME_LENGTH - HASH_LENGTH - 1;
    // `normalized` is ASCII, so any byte index is a char boundary.
    let head = normalized.get(..keep).unwrap_or(&normalized);
    format!("{head}_{}", hex.get(..HASH_LENGTH).unwrap_or(&hex))
}

/// Whether `name` is a usable server name: `[A-Za-z0-9_-]{1,32}` (codex
/// and the reference use the same alphabet).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_names_are_kept_verbatim() {
        assert_eq!(
            public_tool_name("everything", "echo"),
            "mcp__everything__echo"
        );
    }

    #[test]
    fn lossy_names_get_the_identity_hash() {
        // Checked against the reference's algorithm (node:crypto):
        // sha256("fs\0read.file") starts with the digits below.
        let n = public_tool_name("fs", "read.file");
        assert_eq!(n.len(), "mcp__fs__read_file".len() + 13);
        assert!(n.starts_with("mcp__fs__read_file_"));
        let mut h = Sha256::new();
        h.update(b"fs\0read.file");
        let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(n, format!("mcp__fs__read_file_{}", &hex[..12]));
        // A name colliding after replacement stays distinct.
        assert_ne!(
            public_tool_name("fs", "read.file"),
            public_tool_name("fs", "read_file")
        );
        assert_ne!(
            public_tool_name("fs", "read.file"),
            public_tool_name("fs", "read file")
        );
    }

    #[test]
    fn names_match_the_reference_algorithm() {
        // Computed with the reference's `publicToolName` (node:crypto).
        assert_eq!(
            public_tool_name("fs", "read.file"),
            "mcp__fs__read_file_a70c27002fc8"
        );
        assert_eq!(
            public_tool_name("srv", &"x".repeat(100)),
            "mcp__srv__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_d7bbf552cf70"
        );
        assert_eq!(public_tool_name("s", "a😀"), "mcp__s__a___48d8a12dd154");
    }

    #[test]
    fn long_names_are_cut_to_64() {
        let raw = "x".repeat(100);
        let n = public_tool_name("srv", &raw);
        assert_eq!(n.len(), 64);
        assert_eq!(&n[..51], &format!("mcp__srv__{raw}")[..51]);
        assert_eq!(n.as_bytes()[51], b'_');
        assert_ne!(n, public_tool_name("srv", &"x".repeat(101)));
        // A non-BMP char is two UTF-16 units: two underscores.
        assert!(public_tool_name("s", "a😀").starts_with("mcp__s__a___"));
    }

    #[test]
    fn server_names() {
        assert!(valid_server_name("git-hub_2"));
        assert!(!valid_server_name(""));
        assert!(!valid_server_name("a.b"));
        assert!(!valid_server_name(&"a".repeat(33)));
    }
}
