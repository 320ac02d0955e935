//! Store selection (`--store jsonl|redb|postgres`, `--store-dir DIR`,
//! `--store-url URL`), session ids, and `dsh sessions`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use dsh_core::SessionId;
use dsh_core::session::{EventData, SessionEvent};
use dsh_core::{ContentBlock, MessageSource};
use dsh_store::{Cancel, CoordinatorConfig, Location, SessionStore};

use crate::Outcome;
use crate::data_dir::data_dir;
use crate::sanitize::{eprintln_safe, println_safe};

/// A store backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// One plain JSONL transcript per session (default).
    #[default]
    Jsonl,
    /// One redb database holding every session.
    Redb,
    /// A PostgreSQL database (`--store-url`, default `$DSH_STORE_URL`),
    /// shared by workers on many machines.
    Postgres,
}

/// The variable holding the default `--store-url`. It may carry a
/// password: it never reaches a tool process and is never printed.
pub const STORE_URL_ENV: &str = "DSH_STORE_URL";

/// A `--store-url` value; `Debug` never shows it (it may hold a password).
#[derive(Clone)]
pub struct UrlArg(pub String);

impl std::str::FromStr for UrlArg {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(UrlArg(s.to_owned()))
    }
}

impl std::fmt::Debug for UrlArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UrlArg(..)")
    }
}

/// Store flags shared by every session command.
#[derive(Args, Clone, Debug, Default)]
pub struct StoreArgs {
    /// The session store backend.
    #[arg(long, value_enum, default_value_t = StoreKind::Jsonl)]
    pub store: StoreKind,
    /// Where sessions live (default: `$XDG_DATA_HOME/dsh`, else
    /// `~/.local/share/dsh`).
    #[arg(long, value_name = "DIR")]
    pub store_dir: Option<PathBuf>,
    /// The PostgreSQL URL of `--store postgres`
    /// (`postgres://user:password@host:port/db`; default: `$DSH_STORE_URL`,
    /// which keeps the password out of the process list). Never printed
    /// with its password.
    #[arg(long, value_name = "URL")]
    pub store_url: Option<UrlArg>,
}

impl StoreArgs {
    /// The directory the store lives in.
    pub fn dir(&self) -> Result<PathBuf, String> {
        match &self.store_dir {
            Some(d) => Ok(d.clone()),
            None => data_dir().ok_or_else(|| {
                "dsh: neither XDG_DATA_HOME nor HOME is set; pass --store-dir DIR".to_string()
            }),
        }
    }

    /// The PostgreSQL URL: `--store-url`, else `$DSH_STORE_URL`.
    pub fn url(&self) -> Result<dsh_postgres::StoreUrl, String> {
        let text = match &self.store_url {
            Some(u) => u.0.clone(),
            None => std::env::var(STORE_URL_ENV).map_err(|_| {
                format!("dsh: --store postgres needs --store-url URL or {STORE_URL_ENV}")
            })?,
        };
        dsh_postgres::StoreUrl::parse(&text).map_err(|e| format!("dsh: {e}"))
    }

    /// Where the store is, for messages (a PostgreSQL URL without its
    /// password).
    pub fn describe(&self) -> String {
        match self.store {
            StoreKind::Postgres => self
                .url()
                .map(|u| u.to_string())
                .unwrap_or_else(|_| "the PostgreSQL store".into()),
            _ => self
                .dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        }
    }

    /// Opens the store. JSONL transcripts are written uncompressed
    /// (`session.jsonl`) so that `dsh log check` and `dsh replay --check`
    /// read them directly.
    pub fn open(&self) -> Result<Arc<dyn SessionStore>, String> {
        let made_dir = || {
            let dir = self.dir()?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("dsh: cannot create {}: {e}", dir.display()))?;
            Ok::<_, String>(dir)
        };
        match self.store {
            StoreKind::Postgres => {
                let url = self.url()?;
                let shown = url.to_string();
                dsh_postgres::open(dsh_postgres::PgConfig::new(url))
                    .map(|s| Arc::new(s) as Arc<dyn SessionStore>)
                    .map_err(|e| format!("dsh: cannot open the PostgreSQL store at {shown}: {e}"))
            }
            StoreKind::Jsonl => {
                let dir = made_dir()?;
                let root = dir.join("sessions");
                let config = dsh_jsonl::JsonlConfig::new(&root)
                    .with_compression(dsh_jsonl::Compression::None);
                dsh_jsonl::open(config)
                    .map(|s| Arc::new(s) as Arc<dyn SessionStore>)
                    .map_err(|e| {
                        format!(
                            "dsh: cannot open the JSONL store at {}: {e}",
                            root.display()
                        )
                    })
            }
            StoreKind::Redb => {
                let dir = made_dir()?;
                let path = dir.join("sessions.redb");
                dsh_redb::open(&path, CoordinatorConfig::default())
                    .map(|s| Arc::new(s) as Arc<dyn SessionStore>)
                    .map_err(|e| {
                        format!("dsh: cannot open the redb store at {}: {e}", path.display())
                    })
            }
        }
    }
}

/// Where a session's log is, for messages: the transcript path of a JSONL
/// store, or the database and id of a redb store.
pub fn describe_location(store: &dyn SessionStore, args: &StoreArgs, id: &SessionId) -> String {
    if let Ok(inspection) = store.inspect(id, &Cancel::new())
        && let Some(Location::Jsonl { path }) = store.locate(&inspection.header)
    {
        return path.display().to_string();
    }
    if args.store == StoreKind::Postgres {
        return format!("{} (session {})", args.describe(), id.as_str());
    }
    match args.dir() {
        Ok(d) => format!(
            "{} (session {})",
            d.join("sessions.redb").display(),
            id.as_str()
        ),
        Err(_) => format!("session {}", id.as_str()),
    }
}

/// A fresh session id: `YYYYMMDD-HHMMSS-` plus 8 random hex digits.
pub fn new_session_id(now_ms: u64) -> SessionId {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: the clock's low bits still separate ids made
        // in different milliseconds.
        bytes = (now_ms as u32).to_be_bytes();
    }
    let (date, time) = civil(now_ms);
    let compact: String = format!("{date}{time}")
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    SessionId::new(format!(
        "{}-{}-{hex}",
        compact.get(..8).unwrap_or(""),
        compact.get(8..14).unwrap_or("")
    ))
}

/// Epoch milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `("YYYY-MM-DD", "HH:MM:SS")` in UTC for epoch milliseconds.
pub fn civil(ms: u64) -> (String, String) {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60),
    )
}

fn stamp(ms: u64) -> String {
    let (d, t) = civil(ms);
    format!("{d} {t}")
}

/// The text of the first user-typed `user/message` (source `user`).
pub fn first_prompt(events: &[SessionEvent]) -> Option<String> {
    events.iter().find_map(|e| match e.data() {
        EventData::UserMessage(m) if matches!(m.source, MessageSource::User) => Some(
            m.content
                .iter()
                .filter_map(ContentBlock::as_text)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    })
}

/// One row of `dsh sessions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    /// Session id.
    pub id: String,
    /// Working directory (`-` when absent).
    pub cwd: String,
    /// `createdAt`.
    pub created: u64,
    /// Time of the last event (`createdAt` for an empty log).
    pub last: u64,
    /// First prompt, one line.
    pub prompt: String,
    /// The newest `session/title`, one line (empty when untitled).
    pub title: String,
    /// The parent session of a subagent or fork (`parentSession`).
    pub parent: Option<String>,
    /// How many listed ancestors this row has (0: a top-level session).
    pub depth: usize,
}

/// Lists the sessions of `store`, most recent activity first.
pub fn rows(store: &dyn SessionStore) -> Result<Vec<SessionRow>, String> {
    let cancel = Cancel::new();
    let (headers, problems) = store
        .list_report(&cancel)
        .map_err(|e| format!("dsh sessions: {e}"))?;
    for p in problems {
        eprintln!(
            "dsh sessions: skipped: {}",
            crate::sanitize::terminal(&p.to_string())
        );
    }
    let mut rows = Vec::with_capacity(headers.len());
    for header in headers {
        let (last, prompt, title) = match store.read_from(&header.id, 0, &cancel) {
            Ok((_, events)) => (
                events
                    .last()
                    .map(|e| e.time().max(0) as u64)
                    .unwrap_or(header.created_at),
                first_prompt(&events).unwrap_or_default(),
                crate::title::latest_title(&events).unwrap_or_default(),
            ),
            Err(e) => (
                header.created_at,
                format!("(unreadable: {e})"),
                String::new(),
            ),
        };
        rows.push(SessionRow {
            id: header.id.as_str().to_string(),
            cwd: header.cwd.clone().unwrap_or_else(|| "-".into()),
            created: header.created_at,
            last,
            prompt: crate::render::cut(&prompt.replace('\n', " "), 60),
            title: crate::render::cut(&title.replace(['\n', '\r'], " "), 40),
            parent: header
                .parent_session
                .as_ref()
                .map(|p| p.as_str().to_string()),
            depth: 0,
        });
    }
    rows.sort_by(|a, b| b.last.cmp(&a.last).then_with(|| a.id.cmp(&b.id)));
    Ok(nest(rows))
}

/// Orders `rows` (most recent first) as a tree: each session is followed
/// by its children (subagents, forks), oldest first, with `depth` set. A
/// row whose parent is not listed is a top-level row.
fn nest(rows: Vec<SessionRow>) -> Vec<SessionRow> {
    use std::collections::{BTreeMap, BTreeSet};
    let ids: BTreeSet<String> = rows.iter().map(|r| r.id.clone()).collect();
    let mut children: BTreeMap<String, Vec<SessionRow>> = BTreeMap::new();
    let mut roots = Vec::new();
    for r in rows {
        match r.parent.clone().filter(|p| ids.contains(p) && *p != r.id) {
            Some(p) => children.entry(p).or_default().push(r),
            None => roots.push(r),
        }
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    }
    let mut out = Vec::with_capacity(ids.len());
    // Depth-first, with an explicit stack (no recursion on stored data).
    let mut stack: Vec<SessionRow> = roots.into_iter().rev().collect();
    while let Some(mut r) = stack.pop() {
        let depth = r.depth;
        if let Some(kids) = children.remove(&r.id) {
            for mut k in kids.into_iter().rev() {
                k.depth = depth + 1;
                stack.push(k);
            }
        }
        r.depth = depth;
        out.push(r);
    }
    // A parent cycle leaves rows unreached: list them at the top level.
    for (_, kids) in children {
        out.extend(kids);
    }
    out
}

/// `dsh sessions`.
#[derive(Args)]
pub struct SessionsArgs {
    #[command(flatten)]
    store: StoreArgs,
}

/// Runs `dsh sessions`: a table of id, cwd, created, last activity, title,
/// first prompt; a subagent's or fork's row follows its parent's, indented.
pub fn run_sessions(args: SessionsArgs) -> Outcome {
    let store = match args.store.open() {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    let rows = match rows(store.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln_safe!("{e}");
            return Outcome::BadInput;
        }
    };
    if rows.is_empty() {
        println_safe!("no sessions in {}", args.store.describe());
        return Outcome::Ok;
    }
    // A child's id is indented under its parent's (`└ `, two columns per
    // level); the column is as wide as the widest.
    let ids: Vec<String> = rows
        .iter()
        .map(|r| {
            let id = crate::sanitize::terminal(&r.id).into_owned();
            if r.depth == 0 {
                id
            } else {
                format!("{}└ {id}", "  ".repeat(r.depth - 1))
            }
        })
        .collect();
    let width = ids
        .iter()
        .map(|i| i.chars().count())
        .max()
        .unwrap_or(0)
        .max(24);
    println_safe!(
        "{:<width$}  {:<19}  {:<19}  {:<30}  {:<40}  FIRST PROMPT",
        "ID",
        "CREATED",
        "LAST ACTIVITY",
        "CWD",
        "TITLE"
    );
    for (r, id) in rows.iter().zip(ids) {
        let title = if r.title.is_empty() { "-" } else { &r.title };
        println!(
            "{:<width$}  {:<19}  {:<19}  {:<30}  {:<40}  {}",
            id,
            stamp(r.created),
            stamp(r.last),
            crate::render::cut(&crate::sanitize::terminal(&r.cwd), 30),
            crate::sanitize::terminal(title),
            crate::sanitize::terminal(&r.prompt)
        );
    }
    Outcome::Ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::Message;
    use dsh_core::session::{SessionHeader, TurnStart};

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), ("1970-01-01".into(), "00:00:00".into()));
        // 2024-02-29T12:34:56Z = 1709210096 s.
        assert_eq!(
            civil(1_709_210_096_000),
            ("2024-02-29".into(), "12:34:56".into())
        );
    }

    #[test]
    fn session_ids_carry_the_time_and_differ() {
        let a = new_session_id(1_709_210_096_000);
        let b = new_session_id(1_709_210_096_000);
        assert!(a.as_str().starts_with("20240229-123456-"), "{}", a.as_str());
        assert_eq!(a.as_str().len(), "20240229-123456-".len() + 8);
        assert_ne!(a, b);
    }

    /// One log whose header does not match its folder
    /// is skipped (and reported on stderr); the others are still listed.
    #[test]
    fn one_mismatched_log_does_not_hide_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let args = StoreArgs {
            store: StoreKind::Jsonl,
            store_dir: Some(dir.path().to_path_buf()),
            store_url: None,
        };
        let store = args.open().unwrap();
        for id in ["s1", "s2"] {
            let mut header = SessionHeader::new(id, 1_000);
            header.cwd = Some("/work/p".into());
            store.create(header).unwrap();
            let sid = SessionId::new(id);
            let events = vec![SessionEvent::new(0, 2_000, TurnStart::new(1))];
            store.append(&sid, &events).unwrap();
            store.release(&sid).unwrap();
        }
        let loc = describe_location(store.as_ref(), &args, &SessionId::new("s2"));
        let path = std::path::PathBuf::from(&loc);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"id\":\"s2\"", "\"id\":\"zz\"", 1)).unwrap();
        let listed = rows(store.as_ref()).unwrap();
        assert_eq!(
            listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["s1"]
        );
        let (_, problems) = store.list_report(&Cancel::new()).unwrap();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].to_string().contains("names session \"zz\""),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn children_follow_their_parent_indented() {
        let row = |id: &str, parent: Option<&str>, created: u64, last: u64| SessionRow {
            id: id.into(),
            cwd: "/w".into(),
            created,
            last,
            prompt: String::new(),
            title: String::new(),
            parent: parent.map(String::from),
            depth: 0,
        };
        // Most recent activity first, as `rows` sorts them.
        let rows = vec![
            row("c2", Some("p"), 30, 90),
            row("other", None, 5, 80),
            row("p", None, 10, 70),
            row("g", Some("c1"), 25, 60),
            row("c1", Some("p"), 20, 50),
            row("orphan", Some("gone"), 1, 10),
        ];
        let out: Vec<(String, usize)> = nest(rows).into_iter().map(|r| (r.id, r.depth)).collect();
        let expected = [
            ("other", 0),
            ("p", 0),
            ("c1", 1),
            ("g", 2),
            ("c2", 1),
            ("orphan", 0),
        ];
        assert_eq!(
            out,
            expected
                .iter()
                .map(|(i, d)| (i.to_string(), *d))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn lists_id_cwd_times_and_first_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let args = StoreArgs {
            store: StoreKind::Jsonl,
            store_dir: Some(dir.path().to_path_buf()),
            store_url: None,
        };
        let store = args.open().unwrap();
        let mut header = SessionHeader::new("s1", 1_000);
        header.cwd = Some("/work/p".into());
        store.create(header).unwrap();
        let id = SessionId::new("s1");
        let events = vec![
            SessionEvent::new(0, 2_000, TurnStart::new(1)),
            SessionEvent::new(
                1,
                3_000,
                Message::user("m1", vec![ContentBlock::text("list the files\nplease")]),
            )
            .with_surface(dsh_core::session::SurfaceOp::Append, None),
        ];
        store.append(&id, &events).unwrap();
        store.release(&id).unwrap();
        let rows = rows(store.as_ref()).unwrap();
        assert_eq!(
            rows,
            vec![SessionRow {
                id: "s1".into(),
                cwd: "/work/p".into(),
                created: 1_000,
                last: 3_000,
                prompt: "list the files please".into(),
                title: String::new(),
                parent: None,
                depth: 0,
            }]
        );
        let loc = describe_location(store.as_ref(), &args, &id);
        assert!(loc.ends_with("session.jsonl"), "{loc}");
    }
}
