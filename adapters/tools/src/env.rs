//! The environment a tool process starts with.
//!
//! A tool process (bash) must not see the model provider's API key, or any
//! other secret the user keeps in the environment: whatever a command prints
//! goes to the model and into the session log. [`EnvPolicy`] decides which
//! variables of the parent environment a child inherits:
//!
//! 1. start from [`Inherit`]: everything, a small core set (`PATH`, `HOME`,
//!    `USER`, locale, terminal, temp dir), or nothing;
//! 2. unless `ignore_default_excludes`, drop every name that matches one of
//!    [`DEFAULT_EXCLUDES`] (case-insensitive globs such as `*KEY*`);
//! 3. drop every name that matches one of `exclude`;
//! 4. when `include_only` is not empty, keep only names matching one of it;
//! 5. add `set`;
//! 6. always drop the names in `secrets` (the provider's key variable), even
//!    when an earlier step would keep them or `set` names them.
//!
//! Patterns are globs over the variable name: `*` matches any run of
//! characters, `?` one character; matching ignores ASCII case.

use std::ffi::{OsStr, OsString};

/// Which part of the parent environment a tool process starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inherit {
    /// Every variable of the parent.
    #[default]
    All,
    /// Only [`CORE_VARS`].
    Core,
    /// Nothing.
    None,
}

/// The variables [`Inherit::Core`] keeps.
pub const CORE_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR",
    "TZ",
];

/// Name patterns dropped unless `ignore_default_excludes` is set.
pub const DEFAULT_EXCLUDES: &[&str] = &[
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
];

/// The environment policy of tool processes (see the module docs for the
/// order in which the fields apply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Where the environment starts from.
    pub inherit: Inherit,
    /// Do not apply [`DEFAULT_EXCLUDES`].
    pub ignore_default_excludes: bool,
    /// More name patterns to drop.
    pub exclude: Vec<String>,
    /// When not empty, only names matching one of these patterns are kept.
    pub include_only: Vec<String>,
    /// Variables to set.
    pub set: Vec<(String, String)>,
    /// Names that never reach a tool, whatever the other fields say: the
    /// provider's API key variable (`DEEPSEEK_API_KEY` by default).
    pub secrets: Vec<String>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        EnvPolicy {
            inherit: Inherit::All,
            ignore_default_excludes: false,
            exclude: Vec::new(),
            include_only: Vec::new(),
            set: Vec::new(),
            secrets: vec!["DEEPSEEK_API_KEY".to_string()],
        }
    }
}

impl EnvPolicy {
    /// Adds `name` to the variables that never reach a tool.
    pub fn with_secret(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.secrets.contains(&name) {
            self.secrets.push(name);
        }
        self
    }

    /// The environment a child gets when the parent's is `parent`.
    pub fn apply<I, K, V>(&self, parent: I) -> Vec<(OsString, OsString)>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let mut out: Vec<(OsString, OsString)> = Vec::new();
        for (k, v) in parent {
            let k: OsString = k.into();
            if self.keeps(&k) {
                out.push((k, v.into()));
            }
        }
        for (k, v) in &self.set {
            out.retain(|(name, _)| name.as_os_str() != OsStr::new(k));
            out.push((OsString::from(k), OsString::from(v)));
        }
        out.retain(|(name, _)| !self.is_secret(name));
        out
    }

    /// The environment of this process, filtered.
    pub fn current(&self) -> Vec<(OsString, OsString)> {
        self.apply(std::env::vars_os())
    }

    fn is_secret(&self, name: &OsStr) -> bool {
        self.secrets.iter().any(|s| OsStr::new(s) == name)
    }

    fn keeps(&self, name: &OsStr) -> bool {
        // A name that is not UTF-8 cannot be matched by a pattern: keep it
        // only when the policy inherits everything and lists no include set.
        let Some(n) = name.to_str() else {
            return self.inherit == Inherit::All && self.include_only.is_empty();
        };
        let inherited = match self.inherit {
            Inherit::All => true,
            Inherit::Core => CORE_VARS.contains(&n),
            Inherit::None => false,
        };
        if !inherited {
            return false;
        }
        if !self.ignore_default_excludes && DEFAULT_EXCLUDES.iter().any(|p| glob_match(p, n)) {
            return false;
        }
        if self.exclude.iter().any(|p| glob_match(p, n)) {
            return false;
        }
        if !self.include_only.is_empty() && !self.include_only.iter().any(|p| glob_match(p, n)) {
            return false;
        }
        true
    }
}

/// `*` / `?` glob over `text`, ASCII case-insensitive. Linear time (the
/// classic single-backtrack algorithm), so a hostile pattern cannot blow up.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c.eq_ignore_ascii_case(&t[ti]) => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[(OsString, OsString)]) -> Vec<String> {
        v.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    fn parent() -> Vec<(&'static str, &'static str)> {
        vec![
            ("PATH", "/bin"),
            ("HOME", "/home/u"),
            ("DEEPSEEK_API_KEY", "sk-canary"),
            ("OPENAI_API_KEY", "sk-other"),
            ("GITHUB_TOKEN", "ghp"),
            ("db_password", "x"),
            ("EDITOR", "vi"),
        ]
    }

    #[test]
    fn globs() {
        assert!(glob_match("*KEY*", "DEEPSEEK_API_KEY"));
        assert!(glob_match("*key*", "DEEPSEEK_API_KEY"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "abbc"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("KEY", "KEYS"));
        // A pathological pattern stays linear.
        let long = "a".repeat(10_000);
        assert!(!glob_match(&"*a".repeat(50), &format!("{long}b")));
    }

    #[test]
    fn default_drops_secrets_keeps_the_rest() {
        let env = EnvPolicy::default().apply(parent());
        assert_eq!(names(&env), ["PATH", "HOME", "EDITOR"]);
    }

    #[test]
    fn the_key_variable_never_passes_even_when_set_or_excludes_are_off() {
        let policy = EnvPolicy {
            ignore_default_excludes: true,
            set: vec![("DEEPSEEK_API_KEY".into(), "leak".into())],
            ..EnvPolicy::default()
        }
        .with_secret("MY_PROVIDER_CRED");
        let mut p = parent();
        p.push(("MY_PROVIDER_CRED", "c"));
        let env = policy.apply(p);
        let n = names(&env);
        assert!(!n.contains(&"DEEPSEEK_API_KEY".to_string()), "{n:?}");
        assert!(!n.contains(&"MY_PROVIDER_CRED".to_string()), "{n:?}");
        // With the default excludes off, other keys pass: the user chose so.
        assert!(n.contains(&"OPENAI_API_KEY".to_string()), "{n:?}");
    }

    #[test]
    fn core_none_include_only_exclude_set() {
        let core = EnvPolicy {
            inherit: Inherit::Core,
            ..EnvPolicy::default()
        };
        assert_eq!(names(&core.apply(parent())), ["PATH", "HOME"]);
        let none = EnvPolicy {
            inherit: Inherit::None,
            set: vec![("A".into(), "1".into())],
            ..EnvPolicy::default()
        };
        assert_eq!(names(&none.apply(parent())), ["A"]);
        let only = EnvPolicy {
            include_only: vec!["P*".into()],
            ..EnvPolicy::default()
        };
        assert_eq!(names(&only.apply(parent())), ["PATH"]);
        let ex = EnvPolicy {
            exclude: vec!["editor".into()],
            set: vec![("PATH".into(), "/x".into())],
            ..EnvPolicy::default()
        };
        let env = ex.apply(parent());
        assert_eq!(names(&env), ["HOME", "PATH"]);
        assert_eq!(env[1].1, OsString::from("/x"));
    }
}
