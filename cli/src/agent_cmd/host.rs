//! What the slash commands see and do in a chat: the [`AgentHost`], and the
//! image lines.

use std::path::PathBuf;

use dsh_core::session::EventData;
use dsh_std::Agent;
use dsh_store::SessionStore;

use super::turn::attach_image;

/// The REPL's image hook: `/image FILE`, or a line that is just
/// the path of an image file (pasted or dropped), queues the image for the
/// next prompt; returns the notice to show, `None` when the line is not
/// about an image.
pub(super) fn image_line(
    text: &str,
    store: Option<&dsh_tools::Attachments>,
    pending: &mut Vec<dsh_core::ContentBlock>,
) -> Option<String> {
    let unquote = |s: &str| s.trim().trim_matches(|c| c == '\'' || c == '"').to_string();
    let path = match text.strip_prefix("/image") {
        Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
            let p = unquote(rest);
            if p.is_empty() {
                return Some("usage: /image FILE (PNG, JPEG, GIF or WebP)".into());
            }
            p
        }
        _ => {
            let p = unquote(text);
            let is_image = dsh_tools::image::media_type_for_path(&p).is_some()
                && !p.contains('\n')
                && std::path::Path::new(&p).is_file();
            if !is_image {
                return None;
            }
            p
        }
    };
    Some(match attach_image(store, std::path::Path::new(&path)) {
        Ok(block) => {
            let shown = match &block {
                dsh_core::ContentBlock::Image { attachment: a } => {
                    format!("{}x{} {}", a.width, a.height, a.media_type)
                }
                _ => String::new(),
            };
            pending.push(block);
            format!("image attached ({shown}); it goes with your next prompt")
        }
        Err(e) => format!("error: {e}"),
    })
}

/// How long `/compact` waits for the summary.
pub(super) const COMPACT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// How long a plugin command (`/plan`, `/permissions`) may take.
pub(super) const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What `/status` and `/model` show that the agent does not know.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The provider route and model.
    pub call: dsh_core::LlmCallConfig,
    /// Where the session is stored.
    pub store: String,
    /// The sandbox mode of `bash`.
    pub sandbox: String,
    /// The workspace (write and edit diffs read the files there).
    pub cwd: PathBuf,
    /// The user-invocable skills, name and description (`/skills`).
    pub skills: Vec<(String, String)>,
}

/// The command host of `dsh chat` and `dsh acp`: the agent and the facts.
pub struct AgentHost<'a> {
    /// The agent the commands act on.
    pub agent: &'a Agent,
    /// The store (`/sessions`).
    pub store: &'a dyn SessionStore,
    /// What the agent does not know.
    pub facts: &'a Facts,
}

impl crate::commands::Host for AgentHost<'_> {
    fn log(&mut self, data: EventData) -> Result<(), String> {
        self.agent
            .append_event(data)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn plugin(&mut self, name: &str, args: serde_json::Value) -> Result<serde_json::Value, String> {
        self.agent
            .command(name, args, Some(COMMAND_TIMEOUT))
            .map_err(|e| e.to_string())
    }

    fn builtin(&mut self, builtin: crate::commands::Builtin, args: &str) -> crate::commands::Done {
        use crate::commands::{Builtin, Done, Switch};
        let call = &self.facts.call;
        let effort = call.reasoning_effort.as_ref().map_or_else(
            || "default".to_string(),
            |e| {
                serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            },
        );
        let change = |what: &str| {
            Done::error(format!(
                "changing the {what} inside a chat is not supported yet; restart with \
                 `dsh chat --resume {} --{what} VALUE`",
                self.agent.session_id().as_str()
            ))
        };
        match builtin {
            Builtin::Model if args.trim().is_empty() => {
                Done::success(format!("model: {} ({})", call.model, call.provider))
            }
            Builtin::Model => change("model"),
            Builtin::Effort if args.trim().is_empty() => {
                Done::success(format!("reasoning effort: {effort}"))
            }
            Builtin::Effort => change("effort"),
            Builtin::Status => {
                let events = self.agent.events().unwrap_or_default();
                let (mut input, mut output, mut last) = (0i64, 0i64, 0i64);
                for e in &events {
                    if let EventData::AssistantMessage(m) = e.data()
                        && let Some(u) = &m.usage
                    {
                        let this = u.input_tokens + u.cache_read_tokens.unwrap_or(0);
                        input += this;
                        output += u.output_tokens;
                        last = this;
                    }
                }
                Done::success(format!(
                    "model: {} ({}), effort {effort}\ntokens used: input {input}, output {output}; \
                     last request input {last}\nsession: {} ({} events)\nstore: {}\nsandbox: {}",
                    call.model,
                    call.provider,
                    self.agent.session_id().as_str(),
                    events.len(),
                    self.facts.store,
                    self.facts.sandbox
                ))
            }
            Builtin::Sessions => match crate::store::rows(self.store) {
                Ok(rows) if rows.is_empty() => Done::success("no sessions"),
                Ok(rows) => Done::success(
                    rows.iter()
                        .take(50)
                        .map(|r| {
                            format!(
                                "{}{}  {}",
                                "  ".repeat(r.depth),
                                r.id,
                                if r.title.is_empty() {
                                    &r.prompt
                                } else {
                                    &r.title
                                }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                Err(e) => Done::error(e),
            },
            Builtin::Resume => {
                let id = args.trim();
                if id.is_empty() {
                    return Done::error("usage: /resume ID (/sessions lists them)");
                }
                Done {
                    ok: true,
                    text: Some(format!("resuming {id}")),
                    message: None,
                    switch: Some(Switch::Resume(id.to_string())),
                }
            }
            Builtin::Fork => Done {
                ok: true,
                text: Some("forking this session".into()),
                message: None,
                switch: Some(Switch::Fork),
            },
            Builtin::Compact => match self.agent.compact_now(Some(COMPACT_TIMEOUT)) {
                Ok(v) if v["compacted"] == true => {
                    Done::success("compacted: the older history is now a summary")
                }
                Ok(v) => Done::success(format!(
                    "not compacted: {}",
                    v["reason"].as_str().unwrap_or("no compaction plugin")
                )),
                Err(e) => Done::error(e.to_string()),
            },
            Builtin::Help => Done::success(crate::mcp::prompt_help().unwrap_or_default()),
            // `/NAME` goes to the model as typed and the skills plugin
            // loads that skill.
            Builtin::Skills if self.facts.skills.is_empty() => Done::success("no skills found"),
            Builtin::Skills => Done::success(
                self.facts
                    .skills
                    .iter()
                    .map(|(name, description)| format!("/{name}: {description}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }
    }
}
