//! Where dsh keeps its sessions: the XDG data directory
//! (`$XDG_DATA_HOME/dsh`, else `~/.local/share/dsh`) unless `--store-dir`
//! names another.

use std::path::{Path, PathBuf};

/// The dsh data directory from the environment values given (pure, so
/// tests need not touch the process environment): `$XDG_DATA_HOME/dsh`
/// when that is set to an absolute path (the XDG spec says relative values
/// are ignored), else `$HOME/.local/share/dsh`; `None` without either.
pub fn data_dir_from(xdg_data_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    if let Some(xdg) = xdg_data_home.filter(|v| Path::new(v).is_absolute()) {
        return Some(Path::new(xdg).join("dsh"));
    }
    let home = home.filter(|h| !h.is_empty())?;
    Some(Path::new(home).join(".local").join("share").join("dsh"))
}

/// The dsh data directory of this process's environment.
pub fn data_dir() -> Option<PathBuf> {
    let xdg = std::env::var("XDG_DATA_HOME").ok();
    let home = std::env::var("HOME").ok();
    data_dir_from(xdg.as_deref(), home.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_wins_when_absolute() {
        assert_eq!(
            data_dir_from(Some("/x/data"), Some("/home/u")),
            Some(PathBuf::from("/x/data/dsh"))
        );
    }

    #[test]
    fn relative_or_empty_xdg_falls_back_to_home() {
        for xdg in [Some("rel/data"), Some(""), None] {
            assert_eq!(
                data_dir_from(xdg, Some("/home/u")),
                Some(PathBuf::from("/home/u/.local/share/dsh"))
            );
        }
    }

    #[test]
    fn nothing_without_home() {
        assert_eq!(data_dir_from(None, None), None);
        assert_eq!(data_dir_from(Some("rel"), Some("")), None);
    }
}
