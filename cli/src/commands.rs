//! Slash commands as agent commands: one registry that
//! `dsh chat` (typed lines, tab completion) and `dsh acp`
//! (`available_commands_update`) both read, logged as the reference logs
//! them: `command/run {commandId, name, args, source}` before the command
//! acts and `command/done {commandId, kind, text?}` after.
//!
//! Built-in commands are handled by the front end ([`Builtin`]); a command
//! a plugin contributes runs through the kernel's command seam
//! ([`Handler::Plugin`]: `Agent::command(name, {"args": raw})`, whose
//! result is `{"kind", "text"?}`). Other helpers register theirs with
//! [`Registry::register`] (`/skills`, MCP prompts).
//!
//! The REPL's own controls (`/quit`, `/steer`, `/followup`, `/cancel`) are
//! not agent commands and are not logged.

use serde_json::{Value, json};

use dsh_core::session::EventData;

/// Longest command name.
const MAX_NAME: usize = 64;
/// Most registered commands.
const MAX_COMMANDS: usize = 256;

/// What a command does when run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handler {
    /// Handled by the front end.
    Builtin(Builtin),
    /// A kernel plugin command of this name (`Plugin::command`).
    Plugin(String),
    /// Not run by the front end: the line goes to the model as typed (a
    /// skill's `/NAME`, which the skills plugin loads).
    Prompt,
}

/// The commands the front end itself carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Builtin {
    /// `/compact`: summarise the older history now.
    Compact,
    /// `/model`: show the model.
    Model,
    /// `/effort`: show the reasoning effort.
    Effort,
    /// `/status`: model, tokens, session, store, sandbox.
    Status,
    /// `/sessions`: the stored sessions.
    Sessions,
    /// `/resume ID`: continue another stored session.
    Resume,
    /// `/fork`: continue on a fork of this session.
    Fork,
    /// `/help`: the commands.
    Help,
    /// `/skills`: the skills found for this workspace (`/NAME` loads one).
    Skills,
}

/// One registered command.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Command {
    /// Lowercase name without the slash.
    pub name: String,
    /// One-line summary.
    pub description: String,
    /// Input hint, when the command takes input.
    pub hint: Option<String>,
    /// Whether the command may run while a turn runs.
    pub during_turn: bool,
    /// What runs it.
    pub handler: Handler,
}

impl Command {
    /// A command.
    pub fn new(name: &str, description: &str, hint: Option<&str>, handler: Handler) -> Self {
        Command {
            name: name.to_string(),
            description: description.to_string(),
            hint: hint.map(str::to_string),
            during_turn: false,
            handler,
        }
    }

    /// Allows the command while a turn runs.
    pub fn during_turn(mut self) -> Self {
        self.during_turn = true;
        self
    }
}

/// Whether `name` is a valid command name (`[a-z][a-z0-9_-]*`).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_NAME
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Splits a command line as the reference does: `/name` then the exact
/// rest (separator included); `None` when the line is not a command.
pub fn parse(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('/')?;
    let end = rest.find([' ', '\t', '\n', '\r']).unwrap_or(rest.len());
    let name = &rest[..end];
    valid_name(name).then(|| (name, &rest[end..]))
}

/// The registry.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    commands: Vec<Command>,
}

impl Registry {
    /// The built-in commands and the plugin commands dsh ships.
    pub fn standard() -> Self {
        let mut r = Registry::default();
        let b = |n, d, h, b| Command::new(n, d, h, Handler::Builtin(b));
        for c in [
            Command::new(
                "plan",
                "Enter or leave plan mode",
                Some("[off|message]"),
                Handler::Plugin("plan".into()),
            ),
            b(
                "compact",
                "Summarise the older history now",
                None,
                Builtin::Compact,
            ),
            b("model", "Show the model", None, Builtin::Model).during_turn(),
            b("effort", "Show the reasoning effort", None, Builtin::Effort).during_turn(),
            b(
                "status",
                "Model, tokens used and context left, session, store, sandbox",
                None,
                Builtin::Status,
            )
            .during_turn(),
            b(
                "sessions",
                "List the stored sessions",
                None,
                Builtin::Sessions,
            )
            .during_turn(),
            b(
                "resume",
                "Continue another stored session",
                Some("ID"),
                Builtin::Resume,
            ),
            b(
                "fork",
                "Continue on a fork of this session",
                None,
                Builtin::Fork,
            ),
            Command::new(
                "permissions",
                "Show or edit the session's tool approvals",
                Some("[TOOL ask|auto|deny]"),
                Handler::Plugin("permissions".into()),
            ),
            b(
                "skills",
                "List the skills (/NAME loads one)",
                None,
                Builtin::Skills,
            )
            .during_turn(),
            b("help", "List the commands", None, Builtin::Help).during_turn(),
        ] {
            // The built-in names are valid and distinct.
            let _ = r.register(c);
        }
        r
    }

    /// Adds a command; refuses an invalid or taken name.
    pub fn register(&mut self, command: Command) -> Result<(), String> {
        if !valid_name(&command.name) {
            return Err(format!(
                "command name {:?} must match [a-z][a-z0-9_-]*",
                command.name
            ));
        }
        if command.description.trim().is_empty() {
            return Err(format!("command {:?} needs a description", command.name));
        }
        if self.get(&command.name).is_some() {
            return Err(format!("command {:?} is already registered", command.name));
        }
        if self.commands.len() >= MAX_COMMANDS {
            return Err(format!("at most {MAX_COMMANDS} commands"));
        }
        self.commands.push(command);
        Ok(())
    }

    /// The commands, in registration order.
    pub fn list(&self) -> &[Command] {
        &self.commands
    }

    /// Whether `/name` goes to the model as typed ([`Handler::Prompt`]).
    pub fn is_prompt(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|c| matches!(c.handler, Handler::Prompt))
    }

    /// The command `name`.
    pub fn get(&self, name: &str) -> Option<&Command> {
        self.commands.iter().find(|c| c.name == name)
    }

    /// Completions of a partial line `/pre`: every `/name` starting with it.
    pub fn complete(&self, partial: &str) -> Vec<String> {
        let Some(prefix) = partial.strip_prefix('/') else {
            return Vec::new();
        };
        if prefix.contains(char::is_whitespace) {
            return Vec::new();
        }
        let mut out: Vec<String> = self
            .commands
            .iter()
            .filter(|c| c.name.starts_with(prefix))
            .map(|c| format!("/{}", c.name))
            .chain(
                crate::repl::LOCAL_COMMANDS
                    .iter()
                    .filter(|c| c.starts_with(prefix))
                    .map(|c| format!("/{c}")),
            )
            .collect();
        out.sort();
        out
    }

    /// The `/help` text.
    pub fn help(&self) -> String {
        let mut s = String::from("commands:");
        for c in &self.commands {
            s.push_str(&format!(
                "\n  /{}{} — {}",
                c.name,
                c.hint
                    .as_deref()
                    .map(|h| format!(" {h}"))
                    .unwrap_or_default(),
                c.description
            ));
        }
        s.push_str(
            "\n  /image FILE — attach an image to the next prompt (or paste its path)\n  /steer, /followup [TEXT], /cancel, /quit — lines typed during a turn steer it \
             (/followup: queue them); Ctrl-C cancels a turn, Ctrl-C twice or Ctrl-D quits",
        );
        s
    }
}

/// How a command settled: `command/done`'s `kind` and `text`, plus what
/// the front end does next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// `success` or `error`.
    pub ok: bool,
    /// The text shown and logged.
    pub text: Option<String>,
    /// A prompt to send after the command (`/plan MESSAGE`).
    pub message: Option<String>,
    /// A session to switch to (`/resume`, `/fork`).
    pub switch: Option<Switch>,
}

impl Done {
    /// A success with `text`.
    pub fn success(text: impl Into<String>) -> Self {
        Done {
            ok: true,
            text: Some(text.into()),
            ..Done::default()
        }
    }

    /// An error with `text`.
    pub fn error(text: impl Into<String>) -> Self {
        Done {
            ok: false,
            text: Some(text.into()),
            ..Done::default()
        }
    }

    /// Reads a plugin command's result `{"kind", "text"?, "message"?}`.
    pub fn from_value(v: &Value) -> Self {
        let text = v.get("text").and_then(Value::as_str).map(str::to_string);
        match v.get("kind").and_then(Value::as_str) {
            Some("success") => Done {
                ok: true,
                text,
                message: v.get("message").and_then(Value::as_str).map(str::to_string),
                switch: None,
            },
            Some("error") => Done::error(text.unwrap_or_else(|| "the command failed".into())),
            _ => Done::error("no plugin answered this command"),
        }
    }
}

/// A session change a command asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Switch {
    /// Continue stored session `id`.
    Resume(String),
    /// Fork this session at its last completed turn and continue there.
    Fork,
}

/// What a command may touch: the agent and the front end's facts.
pub trait Host {
    /// Appends an event to the session log.
    fn log(&mut self, data: EventData) -> Result<(), String>;
    /// Runs a kernel plugin command.
    fn plugin(&mut self, name: &str, args: Value) -> Result<Value, String>;
    /// Runs a built-in command (not `Help`).
    fn builtin(&mut self, builtin: Builtin, args: &str) -> Done;
}

/// Mints `commandId`s: `cmd-<8 hex>-<n>`, as the reference spells them.
#[derive(Clone, Debug)]
pub struct CommandIds {
    prefix: String,
    next: u64,
}

impl CommandIds {
    /// Ids under `seed` (the low 32 bits are shown).
    pub fn new(seed: u64) -> Self {
        CommandIds {
            prefix: format!("{:08x}", seed & 0xffff_ffff),
            next: 1,
        }
    }

    fn mint(&mut self) -> String {
        let id = format!("cmd-{}-{}", self.prefix, self.next);
        self.next += 1;
        id
    }
}

impl Registry {
    /// Runs command `name` with its raw input `args` on `host`, logging
    /// `command/run` and `command/done` around it. An unknown name is
    /// answered with an error and not logged.
    pub fn execute(
        &self,
        host: &mut dyn Host,
        ids: &mut CommandIds,
        name: &str,
        args: &str,
    ) -> Done {
        let Some(command) = self.get(name) else {
            return Done::error(format!("unknown command /{name} (/help lists them)"));
        };
        let id = ids.mint();
        let run = json!({"commandId": id, "name": name, "args": args, "source": {"kind": "user"}});
        if let Err(e) = host.log(EventData::plugin("command/run", &run)) {
            return Done::error(format!("cannot log the command: {e}"));
        }
        let done = match &command.handler {
            Handler::Builtin(Builtin::Help) => {
                // The host may add what only it knows (MCP prompts).
                let mut text = self.help();
                if let Some(more) = host.builtin(Builtin::Help, args).text
                    && !more.is_empty()
                {
                    text.push('\n');
                    text.push_str(&more);
                }
                Done::success(text)
            }
            Handler::Builtin(b) => host.builtin(*b, args),
            Handler::Plugin(p) => match host.plugin(p, json!({"args": args})) {
                Ok(v) => Done::from_value(&v),
                Err(e) => Done::error(e),
            },
            Handler::Prompt => Done {
                ok: true,
                text: None,
                message: Some(format!("/{name}{args}")),
                switch: None,
            },
        };
        let mut data = json!({"commandId": id, "kind": if done.ok { "success" } else { "error" }});
        if let Some(t) = &done.text {
            data["text"] = Value::from(t.as_str());
        }
        if let Err(e) = host.log(EventData::plugin("command/done", &data)) {
            return Done::error(format!("cannot log the command's end: {e}"));
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
        plugin: Option<Value>,
    }

    impl Host for Fake {
        fn log(&mut self, data: EventData) -> Result<(), String> {
            self.log.push(format!(
                "{} {}",
                data.event_type(),
                serde_json::to_string(&data).unwrap()
            ));
            Ok(())
        }
        fn plugin(&mut self, name: &str, args: Value) -> Result<Value, String> {
            self.log.push(format!("plugin {name} {args}"));
            self.plugin.clone().ok_or_else(|| "no plugin".to_string())
        }
        fn builtin(&mut self, b: Builtin, args: &str) -> Done {
            Done::success(format!("{b:?}{args}"))
        }
    }

    #[test]
    fn lines_parse_as_the_reference_splits_them() {
        assert_eq!(parse("/plan do it"), Some(("plan", " do it")));
        assert_eq!(parse("/plan"), Some(("plan", "")));
        assert_eq!(parse("/plan\tx"), Some(("plan", "\tx")));
        assert_eq!(parse("/Plan"), None);
        assert_eq!(parse("plan"), None);
        assert_eq!(parse("/ plan"), None);
        assert_eq!(parse("/a/b"), None);
        assert_eq!(parse("/"), None);
    }

    #[test]
    fn the_standard_list_has_the_issue_commands() {
        let r = Registry::standard();
        for n in [
            "plan",
            "compact",
            "model",
            "effort",
            "status",
            "sessions",
            "resume",
            "fork",
            "help",
            "permissions",
        ] {
            assert!(r.get(n).is_some(), "{n}");
        }
        let mut r = r;
        assert!(
            r.register(Command::new(
                "plan",
                "again",
                None,
                Handler::Plugin("x".into())
            ))
            .is_err()
        );
        assert!(
            r.register(Command::new("Bad", "x", None, Handler::Plugin("x".into())))
                .is_err()
        );
        assert!(
            r.register(Command::new(
                "release-notes",
                "Write release notes",
                None,
                Handler::Prompt
            ))
            .is_ok()
        );
        assert!(r.help().contains("/release-notes — Write release notes"));
        assert!(r.is_prompt("release-notes") && !r.is_prompt("skills"));
    }

    #[test]
    fn completion_offers_matching_names() {
        let r = Registry::standard();
        assert_eq!(r.complete("/pl"), vec!["/plan"]);
        assert_eq!(
            r.complete("/s"),
            vec!["/sessions", "/skills", "/status", "/steer"]
        );
        assert!(r.complete("/plan x").is_empty());
        assert!(r.complete("plan").is_empty());
    }

    #[test]
    fn a_command_is_logged_around_its_effect() {
        let r = Registry::standard();
        let mut host = Fake {
            plugin: Some(
                json!({"kind": "success", "text": "Plan mode on. Use /plan off to leave.", "message": "go"}),
            ),
            ..Fake::default()
        };
        let mut ids = CommandIds::new(0x228a60ef);
        let done = r.execute(&mut host, &mut ids, "plan", " go");
        assert!(done.ok);
        assert_eq!(done.message.as_deref(), Some("go"));
        assert_eq!(
            host.log,
            vec![
                r#"command/run {"commandId":"cmd-228a60ef-1","name":"plan","args":" go","source":{"kind":"user"}}"#,
                r#"plugin plan {"args":" go"}"#,
                r#"command/done {"commandId":"cmd-228a60ef-1","kind":"success","text":"Plan mode on. Use /plan off to leave."}"#,
            ]
        );
        // A plugin that does not answer settles as an error.
        host.plugin = Some(Value::Null);
        let done = r.execute(&mut host, &mut ids, "permissions", "");
        assert!(!done.ok);
        assert!(
            host.log
                .last()
                .unwrap()
                .contains(r#""commandId":"cmd-228a60ef-2","kind":"error""#)
        );
        // Unknown commands are not logged.
        let n = host.log.len();
        assert!(!r.execute(&mut host, &mut ids, "nope", "").ok);
        assert_eq!(host.log.len(), n);
    }
}
