//! The provider's credentials, read once at start-up and taken out of the
//! process environment.
//!
//! [`capture`] runs first thing in `main`, while the process has a single
//! thread. It reads the API key variables (`DEEPSEEK_API_KEY`, the
//! `--api-key-env` variable, the config file's `api_key_env`) and
//! `DEEPSEEK_BASE_URL` into [`Secret`]s, removes them from the environment
//! (so no child, tool or helper inherits them) and, on Linux, overwrites
//! their text in the initial environment block, which is what
//! `/proc/<pid>/environ` shows to anyone allowed to read it (`remove_var`
//! alone only unlinks the entry; the original bytes stay there).
//!
//! Everything that needs one of these values asks [`lookup`]. Credentials
//! belong in those variables or in the config file, never on the command
//! line: `/proc/<pid>/cmdline` is readable by every local user.

use std::ffi::OsString;
use std::fmt;
use std::sync::OnceLock;

use dsh_deepseek::{BASE_URL_ENV, DEFAULT_API_KEY_ENV, redact_url};

/// A credential's text. Neither `Debug` nor any formatting shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The text, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A base URL that may carry credentials (`https://user:pass@host/v1`,
/// `?api_key=…`): shown and stored only through [`redact_url`]; the full
/// text goes to the HTTP client alone.
#[derive(Clone, PartialEq, Eq)]
pub struct BaseUrl(Secret);

impl BaseUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        BaseUrl(Secret::new(url))
    }

    /// The URL with credentials, for the HTTP client.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The URL fit to show: userinfo and query values redacted.
    pub fn shown(&self) -> String {
        redact_url(self.0.expose())
    }
}

impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // tty: Debug of the redacted URL ({:?} escapes control characters).
        write!(f, "BaseUrl({:?})", self.shown())
    }
}

/// What [`capture`] took out of the environment.
struct Captured {
    /// Every name it was asked for, set or not.
    names: Vec<String>,
    /// The non-empty values, by name.
    values: Vec<(String, Secret)>,
}

/// The capture of this process (set once, at start-up).
static CAPTURED: OnceLock<Captured> = OnceLock::new();

/// The names of the variables [`capture`] takes: the default keys (DeepSeek
/// and Anthropic), the base
/// URL, the value of every `--api-key-env NAME` / `--api-key-env=NAME` in
/// `args` (up to a `--`), and `file_key_env` (the config file's).
pub fn secret_names(args: &[OsString], file_key_env: Option<&str>) -> Vec<String> {
    let mut names = vec![
        DEFAULT_API_KEY_ENV.to_string(),
        dsh_anthropic::DEFAULT_API_KEY_ENV.to_string(),
        BASE_URL_ENV.to_string(),
    ];
    let mut push = |n: &str| {
        if !n.is_empty() && !n.contains(['=', '\0']) && !names.iter().any(|m| m == n) {
            names.push(n.to_string());
        }
    };
    let mut it = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(arg) = it.next() {
        if arg == "--" {
            break;
        }
        if arg == "--api-key-env" {
            if let Some(v) = it.next() {
                push(&v);
            }
        } else if let Some(v) = arg.strip_prefix("--api-key-env=") {
            push(v);
        }
    }
    if let Some(n) = file_key_env {
        push(n);
    }
    names
}

/// Reads the variables `names` into secrets and removes them from the
/// process environment (and from the initial environment block on Linux).
/// The first call wins; later ones change nothing.
///
/// # Safety
///
/// No other thread may exist (or read or write the environment) while it
/// runs: it calls `std::env::remove_var` and rewrites the bytes of the
/// removed entries. `main` calls it before anything starts a thread.
pub unsafe fn capture(names: &[String]) {
    if CAPTURED.get().is_some() {
        return;
    }
    let mut taken = Vec::new();
    for name in names {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        let value = value.to_string_lossy().into_owned();
        #[cfg(target_os = "linux")]
        // SAFETY: single-threaded, per this function's contract.
        let entries = unsafe { initial::entries_named(name) };
        // SAFETY: no other thread exists (this function's contract), so no
        // one reads the environment concurrently.
        unsafe { std::env::remove_var(name) };
        #[cfg(target_os = "linux")]
        // SAFETY: the entries were just unlinked from `environ`, so nothing
        // refers to their bytes any more; single-threaded.
        unsafe {
            initial::wipe(&entries)
        };
        if !value.is_empty() {
            taken.push((name.clone(), Secret::new(value)));
        }
    }
    let _ = CAPTURED.set(Captured {
        names: names.to_vec(),
        values: taken,
    });
}

/// The value of environment variable `name`: for a name [`capture`] was
/// asked for, the captured value (the variable is no longer in the
/// environment); for any other, the environment's value.
pub fn lookup(name: &str) -> Option<String> {
    if let Some(c) = CAPTURED.get()
        && c.names.iter().any(|n| n == name)
    {
        return c
            .values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.expose().to_string());
    }
    std::env::var(name).ok()
}

/// Hides the userinfo of every `--base-url URL` / `--base-url=URL` in
/// `args` (up to a `--`) from `/proc/<pid>/cmdline` by overwriting it with
/// `*` in the process's own argument block (Linux; elsewhere nothing is
/// overwritten). Returns whether such a URL was found; the caller parses
/// `args`, its own copy, and warns that the credentials were visible until
/// now.
///
/// # Safety
///
/// As for [`capture`]; call it before [`capture`] (it locates the
/// arguments through the initial environment array).
pub unsafe fn scrub_base_url_args(args: &[OsString]) -> bool {
    let mut hits: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    let mut i = 1;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        if arg == "--" {
            break;
        }
        let (at, offset) = if arg == "--base-url" {
            i += 1;
            (i, 0)
        } else if arg.starts_with("--base-url=") {
            (i, "--base-url=".len())
        } else {
            i += 1;
            continue;
        };
        if let Some(value) = args.get(at).and_then(|a| a.to_str())
            && let Some(range) = userinfo_range(&value[offset..])
        {
            hits.push((at, range.start + offset..range.end + offset));
        }
        i += 1;
    }
    #[cfg(target_os = "linux")]
    if !hits.is_empty() {
        // SAFETY: this function's contract (single thread, environ not yet
        // changed); the strings were checked to be the ones in `args`.
        if let Some(argv) = unsafe { initial::argv(args) } {
            for (at, range) in &hits {
                // SAFETY: `range` lies within argument `at`, whose bytes
                // were just compared with `args[at]`; nothing else refers
                // to them (std keeps its own copies).
                unsafe { std::ptr::write_bytes(argv[*at].add(range.start), b'*', range.len()) };
            }
        }
    }
    !hits.is_empty()
}

/// Says (on stderr) that `--base-url` carried credentials.
pub fn warn_credentials_on_command_line() {
    eprintln!(
        "dsh: warning: --base-url carries credentials, which other local users could \
         read in the process list until dsh hid them; put them in $DEEPSEEK_BASE_URL or \
         the config file"
    );
}

/// The byte range of the userinfo (`user:pass`) in `url`, if any.
fn userinfo_range(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..end].rfind('@')?;
    (at > 0).then_some(start..start + at)
}

#[cfg(target_os = "linux")]
mod initial {
    //! The entries of the C `environ` array: where their bytes are, and
    //! overwriting them once unlinked.

    use std::ffi::{CStr, c_char};

    unsafe extern "C" {
        /// The C library's environment array (NULL-terminated).
        static environ: *const *mut c_char;
    }

    /// The start and length (without the NUL) of every `name=value` entry.
    ///
    /// # Safety
    ///
    /// No concurrent change of the environment.
    pub(super) unsafe fn entries_named(name: &str) -> Vec<(*mut u8, usize)> {
        let mut out = Vec::new();
        // SAFETY: `environ` is the C library's NULL-terminated array of
        // NUL-terminated strings, not changed concurrently (contract).
        unsafe {
            let mut p = environ;
            if p.is_null() {
                return out;
            }
            while !(*p).is_null() {
                let entry = CStr::from_ptr(*p);
                let bytes = entry.to_bytes();
                if bytes.len() > name.len()
                    && bytes.starts_with(name.as_bytes())
                    && bytes[name.len()] == b'='
                {
                    out.push(((*p).cast::<u8>(), bytes.len()));
                }
                p = p.add(1);
            }
        }
        out
    }

    /// The argument strings of the process, found just below the initial
    /// environment array (the kernel lays out `argc`, `argv[]`, NULL,
    /// `envp[]` on the stack); `None` unless every string equals
    /// `expected` (the arguments std saw), so a moved `environ` is never
    /// mistaken for it.
    ///
    /// # Safety
    ///
    /// `environ` still is the initial array (no `setenv` yet, which holds
    /// before `main` starts anything); no other thread exists.
    pub(super) unsafe fn argv(expected: &[std::ffi::OsString]) -> Option<Vec<*mut u8>> {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: the layout above; every read is checked against what std
        // read from the same block before going further.
        unsafe {
            let envp = environ;
            let argc = expected.len();
            if envp.is_null() || argc == 0 {
                return None;
            }
            let argv = envp.cast::<*mut c_char>().wrapping_sub(argc + 1);
            if !(*envp.wrapping_sub(1)).is_null() || *argv.cast::<usize>().wrapping_sub(1) != argc {
                return None;
            }
            let mut out = Vec::with_capacity(argc);
            for (i, want) in expected.iter().enumerate() {
                let p = *argv.add(i);
                if p.is_null() || CStr::from_ptr(p).to_bytes() != want.as_bytes() {
                    return None;
                }
                out.push(p.cast::<u8>());
            }
            Some(out)
        }
    }

    /// Overwrites each entry's bytes with NULs.
    ///
    /// # Safety
    ///
    /// Each entry is writable memory that nothing refers to any more (it
    /// was removed from `environ`); no other thread exists.
    pub(super) unsafe fn wipe(entries: &[(*mut u8, usize)]) {
        for &(ptr, len) in entries {
            // SAFETY: the caller's contract; `len` bytes were read there.
            unsafe { std::ptr::write_bytes(ptr, 0, len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_format() {
        let s = Secret::new("sk-formatted-1234");
        assert!(!format!("{s:?}").contains("sk-formatted"));
        let u = BaseUrl::new("https://me:pw-1234@host.example/v1?api_key=k-99");
        let shown = format!("{u:?} {}", u.shown());
        assert!(
            !shown.contains("pw-1234") && !shown.contains("k-99"),
            "{shown}"
        );
        assert_eq!(
            u.expose(),
            "https://me:pw-1234@host.example/v1?api_key=k-99"
        );
    }

    #[test]
    fn userinfo_ranges() {
        let url = "https://me:pw@host/v1?x=a@b";
        let r = userinfo_range(url).unwrap();
        assert_eq!(&url[r], "me:pw");
        assert_eq!(userinfo_range("http://host/a@b"), None);
        assert_eq!(userinfo_range("http://@host"), None);
        assert_eq!(userinfo_range("no-scheme@host"), None);
        // Not in this process's argument block: found, nothing written.
        let args: Vec<OsString> = ["dsh", "--base-url", url, "--base-url=http://u:p@h"]
            .iter()
            .map(OsString::from)
            .collect();
        // SAFETY: the arguments are not this process's, so the check
        // against the real argv fails and nothing is written.
        assert!(unsafe { scrub_base_url_args(&args) });
        let plain: Vec<OsString> = ["dsh", "--base-url", "http://h"]
            .iter()
            .map(OsString::from)
            .collect();
        // SAFETY: as above.
        assert!(!unsafe { scrub_base_url_args(&plain) });
    }

    #[test]
    fn names_from_flags_and_file() {
        let args: Vec<OsString> = [
            "dsh",
            "run",
            "--api-key-env",
            "A_KEY",
            "--api-key-env=B_KEY",
            "--",
            "--api-key-env",
            "NOT_ME",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let names = secret_names(&args, Some("C_KEY"));
        assert_eq!(
            names,
            [
                "DEEPSEEK_API_KEY",
                "ANTHROPIC_API_KEY",
                "DEEPSEEK_BASE_URL",
                "A_KEY",
                "B_KEY",
                "C_KEY"
            ]
        );
    }
}
