//! Working with the user: plan mode, `exit_plan_mode`,
//! `ask_user_question` and the `/plan` command, as one kernel plugin.
//!
//! Wire shapes follow the reference's `plan-mode`, `tool-ask-user` and
//! `user-questions` packages: `plan/mode {active}` events (the last one
//! wins), the `exit_plan_mode {plan}` tool answered `{approved: true}`, the
//! `ask_user_question {questions}` tool answered `{answers: [{id,
//! selected, custom?}]}`, and `UserQuestionError` codes (`NO_PROVIDER`
//! where nobody can answer, `DELEGATED_CALLER` in a subagent child).
//!
//! Both tools ask the front end through one channel: an
//! [`Ask::Plugin`] from plugin [`PLUGIN`] whose request is
//! `{"questions": [...]}` (the reference's `AskUserQuestionItem`s, with
//! `multiSelect`, `detail` and `intent`) and whose reply is the answer
//! object. A plan review is such a question with the `plan-review` intent.

use std::collections::BTreeSet;

use dsh_core::agent::prompt::{Assembly, PromptSection};
use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::agent::{PreStepDecision, PreStepPayload, PreToolDecision, ToolExecution};
use dsh_core::session::{EventData, SessionEvent};
use dsh_core::{ContentBlock, Message};
use dsh_runtime::{Ask, Cx, Flow, Plugin, Reply, Seams, ToolDispatch};
use serde_json::{Value, json};

/// The plugin's name, also the `plugin` of its asks.
pub const PLUGIN: &str = "interaction";
/// The plan-mode event type.
pub const PLAN_MODE: &str = "plan/mode";
/// The model-facing exit tool.
pub const EXIT_PLAN_MODE: &str = "exit_plan_mode";
/// The question tool.
pub const ASK_USER_QUESTION: &str = "ask_user_question";
/// The plan review question's id.
pub const REVIEW_ID: &str = "plan-review";
/// The review's approve label.
pub const APPROVE_LABEL: &str = "Approve";
/// The review's keep-planning label.
pub const KEEP_PLANNING_LABEL: &str = "Keep planning";
/// The result text of an approved plan (the reference's, byte for byte).
pub const APPROVED_TEXT: &str =
    "Plan approved — plan mode exited; carry out the plan starting with your next step.";

/// Section name and order of the plan guidance (the reference's).
const SECTION_NAME: &str = "plan:policy";
const SECTION_ORDER: i64 = 50;
/// The plan guidance while plan mode is active.
pub const PLAN_GUIDANCE: &str = "You are in plan mode. Explore and design before changing \
anything: read, search and think, but do not write files or run commands (those tools are \
refused while plan mode is on). When the plan is complete, present it with exit_plan_mode as \
markdown starting with a # heading; the user approves it (you then carry it out) or asks you \
to keep planning with feedback.";

/// Tools that stay usable in plan mode (besides the two of this plugin):
/// the read-only built-ins.
pub const PLAN_READ_ONLY: &[&str] = &["read", "grep", "glob", "bash_output", "todo_write"];

/// Most questions one `ask_user_question` call may carry.
const MAX_QUESTIONS: usize = 16;
/// Most options one question may carry.
const MAX_OPTIONS: usize = 32;
/// Most bytes of any one text field of a question.
const MAX_TEXT: usize = 64 * 1024;

/// Who can answer a question in this agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answerer {
    /// A front end answers asks (`dsh chat`, `dsh acp`).
    Interactive,
    /// Nobody answers (`dsh run`): questions are refused (`NO_PROVIDER`).
    Headless,
}

/// The plugin: plan-mode state folded from the log, the two tools and the
/// `plan` command.
#[derive(Clone, Debug)]
pub struct Interaction {
    answerer: Answerer,
    active: bool,
    /// An approved exit, logged at the next pre-step.
    exit_pending: bool,
    /// Whether this agent is a subagent child (its log says so).
    delegated: bool,
    /// Tools allowed in plan mode.
    allowed: BTreeSet<String>,
    /// Plan mode to enter at the first step (`--plan`).
    start_in_plan: bool,
}

impl Interaction {
    /// The plugin for an agent answered by `answerer`.
    pub fn new(answerer: Answerer) -> Self {
        Interaction {
            answerer,
            active: false,
            exit_pending: false,
            delegated: false,
            allowed: PLAN_READ_ONLY.iter().map(|s| s.to_string()).collect(),
            start_in_plan: false,
        }
    }

    /// Also allow `tool` in plan mode (a read-only MCP tool).
    #[allow(dead_code)] // for the MCP wiring: read-only MCP tools stay usable
    pub fn allow_in_plan(mut self, tool: impl Into<String>) -> Self {
        self.allowed.insert(tool.into());
        self
    }

    /// Enter plan mode before the first step (`--plan`).
    pub fn start_in_plan(mut self, on: bool) -> Self {
        self.start_in_plan = on;
        self
    }

    /// Whether a tool may run while plan mode is active.
    pub fn allowed_in_plan(&self, tool: &str) -> bool {
        tool == EXIT_PLAN_MODE || tool == ASK_USER_QUESTION || self.allowed.contains(tool)
    }

    fn plan_denial(tool: &str) -> String {
        format!(
            "plan mode is active: {tool} cannot run until the user approves a plan; \
             present it with {EXIT_PLAN_MODE}"
        )
    }

    fn exit_tool() -> ToolDefinition {
        ToolDefinition::typed(
            EXIT_PLAN_MODE,
            "Use only in plan mode. Present your plan for the user's review and, on approval, \
             leave plan mode. Send the COMPLETE plan as markdown, starting with a # heading that \
             names it. The user may approve (carry out the plan from your next step) or keep \
             planning — their feedback comes back in the tool result; revise and present again.",
            json!({
                "type": "object",
                "properties": {
                    "plan": {"type": "string", "description": "The complete plan, as markdown, starting with a # heading that names it."}
                },
                "required": ["plan"]
            }),
        )
    }

    fn ask_tool() -> ToolDefinition {
        ToolDefinition::typed(
            ASK_USER_QUESTION,
            "Ask the user a concise question when you need confirmation, a choice, or missing \
             information before proceeding. Send one or more questions, each with a stable id \
             that will be echoed in the answer.",
            json!({
                "type": "object",
                "properties": {
                    "questions": {
                        "type": "array",
                        "description": "Questions to ask the user before continuing.",
                        "items": {
                            "type": "object",
                            "additionalProperties": true,
                            "properties": {
                                "id": {"type": "string", "description": "Stable id for this question; echoed in the answer."},
                                "question": {"type": "string", "description": "The specific question to ask the user."},
                                "header": {"type": "string", "description": "Optional short heading for the question, such as \"Confirm\" or \"Choose Mode\"."},
                                "options": {
                                    "type": "array",
                                    "description": "Optional choices to show the user. If you recommend one, put it first and append \"(Recommended)\" to that label.",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": true,
                                        "properties": {
                                            "label": {"type": "string", "description": "Short user-facing option label."},
                                            "description": {"type": "string", "description": "One sentence explaining the tradeoff or impact."}
                                        },
                                        "required": ["label"]
                                    }
                                },
                                "multi_select": {"type": "boolean", "description": "Whether the user may select more than one option. Defaults to false."}
                            },
                            "required": ["id", "question"]
                        }
                    }
                },
                "required": ["questions"]
            }),
        )
    }

    fn question_error(message: impl Into<String>, code: &str) -> ToolOutcome {
        ToolOutcome::coded_error(message, "UserQuestionError", code)
    }

    /// Refusals that come before any question is shown.
    fn refusal(&self) -> Option<ToolOutcome> {
        if self.delegated {
            return Some(Self::question_error(
                "human interaction is unavailable while the calling agent is owned by another \
                 live agent; include the unresolved question or decision in the child agent's \
                 final result",
                "DELEGATED_CALLER",
            ));
        }
        if self.answerer == Answerer::Headless {
            return Some(Self::question_error(
                "no user-questions provider is registered",
                "NO_PROVIDER",
            ));
        }
        None
    }

    /// Runs `exit_plan_mode`: the first call asks, the second reads the reply.
    fn exit_plan(&mut self, cx: &mut Cx<'_>, exec: &ToolExecution) -> Flow<ToolDispatch> {
        let answer = |o: ToolOutcome| Flow::Next(ToolDispatch::Answer(o));
        if !self.active || self.exit_pending {
            return answer(ToolOutcome::error(format!(
                "{EXIT_PLAN_MODE} is only available in plan mode"
            )));
        }
        let plan = exec
            .arguments
            .get("plan")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !has_heading(plan) {
            return answer(ToolOutcome::error(format!(
                "{EXIT_PLAN_MODE} requires a non-empty markdown plan starting with a # heading"
            )));
        }
        if let Some(refused) = self.refusal() {
            return answer(refused);
        }
        match cx.reply() {
            None => Flow::Ask(Ask::Plugin {
                plugin: PLUGIN.to_string(),
                request: json!({"questions": [review_question(plan)]}),
            }),
            Some(Reply::Plugin(v)) => {
                let items: Vec<&Value> = v
                    .get("answers")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter(|e| e["id"] == REVIEW_ID).collect())
                    .unwrap_or_default();
                let item = match items.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                };
                let selected: Vec<&str> = item
                    .and_then(|i| i.get("selected"))
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let custom = item.and_then(|i| i.get("custom")).and_then(Value::as_str);
                if selected == [APPROVE_LABEL] && custom.is_none() {
                    self.exit_pending = true;
                    answer(
                        ToolOutcome::success(vec![ContentBlock::text(APPROVED_TEXT)])
                            .with_value(json!({"approved": true})),
                    )
                } else {
                    let feedback = custom.unwrap_or("");
                    answer(ToolOutcome::error(if feedback.is_empty() {
                        "The user chose to keep planning; revise the plan and present it again."
                            .to_string()
                    } else {
                        format!("The user chose to keep planning; their feedback: {feedback}")
                    }))
                }
            }
            Some(_) => answer(ToolOutcome::error(
                "The user dismissed the plan review to speak instead; stay in plan mode, stop \
                 here, and wait for their message.",
            )),
        }
    }

    /// Runs `ask_user_question`.
    fn ask(&mut self, cx: &mut Cx<'_>, exec: &ToolExecution) -> Flow<ToolDispatch> {
        let answer = |o: ToolOutcome| Flow::Next(ToolDispatch::Answer(o));
        let questions = match questions_of(&exec.arguments) {
            Ok(q) => q,
            Err((message, code)) => return answer(Self::question_error(message, code)),
        };
        if let Some(refused) = self.refusal() {
            return answer(refused);
        }
        match cx.reply() {
            None => Flow::Ask(Ask::Plugin {
                plugin: PLUGIN.to_string(),
                request: json!({"questions": questions}),
            }),
            Some(Reply::Plugin(v)) => match answers_of(v, &questions) {
                Ok(value) => answer(
                    ToolOutcome::success(vec![ContentBlock::text(value.to_string())])
                        .with_value(value),
                ),
                Err(e) => answer(Self::question_error(e, "BAD_ANSWER")),
            },
            Some(_) => answer(Self::question_error(
                "the user dismissed the question without answering",
                "ASK_CANCELLED",
            )),
        }
    }

    /// The `plan` command: `{"args": " off"|" message"|""}` in; `{"kind",
    /// "text", "message"?}` out (`message`: what to send as the prompt).
    fn plan_command(&mut self, cx: &mut Cx<'_>, value: &Value) -> Value {
        let raw = value.get("args").and_then(Value::as_str).unwrap_or("");
        let message = raw.trim();
        if message == "off" {
            if !self.active {
                return json!({"kind": "success", "text": "Plan mode is already inactive."});
            }
            self.set(cx, false);
            return json!({"kind": "success", "text": "Plan mode off."});
        }
        if !self.active {
            self.set(cx, true);
        }
        let mut out = json!({"kind": "success", "text": "Plan mode on. Use /plan off to leave."});
        if !message.is_empty() {
            out["message"] = Value::from(message);
        }
        out
    }

    fn set(&mut self, cx: &mut Cx<'_>, active: bool) {
        cx.append_plugin(PLAN_MODE, &json!({"active": active}));
        self.active = active;
        self.exit_pending = false;
        // Narrate only when the model was told the other mode before.
        if let Some(told) = mode_at_last_header(cx.session().events())
            && told != active
        {
            let text = if active {
                "The user switched this session to plan mode."
            } else {
                "The user switched this session back to the default mode."
            };
            let id = format!("plan-mode-{}", cx.next_seq());
            cx.inject(Message::user(id, vec![ContentBlock::text(text)]));
        }
    }
}

/// Whether `plan` starts (after blanks) with a level-1 heading.
fn has_heading(plan: &str) -> bool {
    let t = plan.trim();
    t.strip_prefix('#')
        .and_then(|r| r.strip_prefix([' ', '\t']))
        .is_some_and(|r| !r.trim().is_empty())
}

/// The plan review question (the reference's texts).
fn review_question(plan: &str) -> Value {
    json!({
        "id": REVIEW_ID,
        "header": "Plan review",
        "question": "Approve this plan and leave plan mode?",
        "detail": plan,
        "options": [
            {"label": APPROVE_LABEL, "description": "Leave plan mode; the plan is carried out from the next step."},
            {"label": KEEP_PLANNING_LABEL, "description": "Stay in plan mode; feedback goes back to the model."}
        ],
        "intent": {"kind": "plan-review", "approve": APPROVE_LABEL}
    })
}

/// The plan state when the last `request/header` was logged; `None`
/// before the first.
fn mode_at_last_header(events: &[SessionEvent]) -> Option<bool> {
    let mut active = false;
    let mut told = None;
    for e in events {
        match e.data() {
            EventData::RequestHeader(_) => told = Some(active),
            EventData::Plugin(p) if p.event_type == PLAN_MODE => {
                active = plan_mode_value(p.data.get()).unwrap_or(active);
            }
            _ => {}
        }
    }
    told
}

fn plan_mode_value(data: &str) -> Option<bool> {
    serde_json::from_str::<Value>(data)
        .ok()?
        .get("active")?
        .as_bool()
}

/// The model's questions, checked and converted to the front-end shape
/// (`multi_select` → `multiSelect`). Errors carry a reference code.
fn questions_of(args: &Value) -> Result<Vec<Value>, (String, &'static str)> {
    let bad = |m: String| (m, "BAD_QUESTION");
    let list = args
        .get("questions")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("questions must be an array".into()))?;
    if list.is_empty() {
        return Err((
            "ask_user_question requires at least one question".into(),
            "EMPTY_QUESTIONS",
        ));
    }
    if list.len() > MAX_QUESTIONS {
        return Err(bad(format!("at most {MAX_QUESTIONS} questions")));
    }
    let text =
        |q: &Value, key: &str, required: bool| -> Result<Option<String>, (String, &'static str)> {
            match q.get(key) {
                None | Some(Value::Null) if !required => Ok(None),
                Some(Value::String(s))
                    if s.len() <= MAX_TEXT && (!required || !s.trim().is_empty()) =>
                {
                    Ok(Some(s.clone()))
                }
                _ => Err(bad(format!(
                    "question {key} must be a string of at most {MAX_TEXT} bytes{}",
                    if required { ", not empty" } else { "" }
                ))),
            }
        };
    let mut ids = BTreeSet::new();
    let mut out = Vec::new();
    for q in list {
        let id = text(q, "id", true)?.unwrap_or_default();
        if !ids.insert(id.clone()) {
            return Err(bad(format!("duplicate question id {id:?}")));
        }
        let mut item = json!({"id": id, "question": text(q, "question", true)?});
        if let Some(h) = text(q, "header", false)? {
            item["header"] = Value::from(h);
        }
        if let Some(opts) = q.get("options").filter(|v| !v.is_null()) {
            let opts = opts
                .as_array()
                .filter(|a| a.len() <= MAX_OPTIONS)
                .ok_or_else(|| bad(format!("options must be an array of at most {MAX_OPTIONS}")))?;
            let mut list = Vec::new();
            for o in opts {
                let mut option = json!({"label": text(o, "label", true)?});
                if let Some(d) = text(o, "description", false)? {
                    option["description"] = Value::from(d);
                }
                list.push(option);
            }
            item["options"] = Value::from(list);
        }
        match q.get("multi_select") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => item["multiSelect"] = Value::from(*b),
            Some(_) => return Err(bad("multi_select must be a boolean".into())),
        }
        out.push(item);
    }
    Ok(out)
}

/// The tool's value from a front end's reply: one answer per question,
/// in question order, `selected` labels only from the offered options.
fn answers_of(reply: &Value, questions: &[Value]) -> Result<Value, String> {
    let given = reply
        .get("answers")
        .and_then(Value::as_array)
        .ok_or("the answer has no answers array")?;
    let mut out = Vec::new();
    for q in questions {
        let id = q["id"].as_str().unwrap_or("");
        let a = given
            .iter()
            .find(|a| a["id"] == id)
            .ok_or_else(|| format!("no answer to question {id:?}"))?;
        let labels: Vec<&str> = q["options"]
            .as_array()
            .map(|o| o.iter().filter_map(|o| o["label"].as_str()).collect())
            .unwrap_or_default();
        let selected: Vec<Value> = a["selected"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .filter(|l| labels.contains(l))
                    .map(Value::from)
                    .collect()
            })
            .unwrap_or_default();
        let mut item = json!({"id": id, "selected": selected});
        if let Some(c) = a["custom"].as_str() {
            item["custom"] = Value::from(c);
        }
        out.push(item);
    }
    Ok(json!({"answers": out}))
}

impl Plugin for Interaction {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn seams(&self) -> Seams {
        Seams::ASSEMBLE
            | Seams::PRE_STEP
            | Seams::TOOL_PRE_EXECUTE
            | Seams::TOOL_EXECUTE
            | Seams::EVENTS
            | Seams::COMMAND
    }

    fn tools(&mut self) -> Vec<ToolDefinition> {
        vec![Self::exit_tool(), Self::ask_tool()]
    }

    fn assemble(
        &mut self,
        _cx: &mut Cx<'_>,
        _turn: u64,
        _step: u64,
        mut value: Assembly,
    ) -> Flow<Assembly> {
        if self.active {
            value.sections.push(PromptSection::new(
                SECTION_NAME,
                SECTION_ORDER,
                PLAN_GUIDANCE,
            ));
        }
        Flow::Next(value)
    }

    fn pre_step(
        &mut self,
        cx: &mut Cx<'_>,
        _payload: &PreStepPayload,
        value: PreStepDecision,
    ) -> Flow<PreStepDecision> {
        if matches!(value, PreStepDecision::Reject) {
            return Flow::Next(value);
        }
        if self.start_in_plan {
            self.start_in_plan = false;
            // A subagent child of a planning parent is not put in plan
            // mode: nobody could approve its plan.
            if !self.active && !self.delegated {
                cx.append_plugin(PLAN_MODE, &json!({"active": true}));
                self.active = true;
            }
        }
        if self.exit_pending {
            self.exit_pending = false;
            if self.active {
                cx.append_plugin(PLAN_MODE, &json!({"active": false}));
                self.active = false;
            }
        }
        Flow::Next(value)
    }

    fn tool_pre_execute(
        &mut self,
        _cx: &mut Cx<'_>,
        exec: &ToolExecution,
        value: PreToolDecision,
    ) -> Flow<PreToolDecision> {
        if self.active && !self.exit_pending && !self.allowed_in_plan(&exec.name) {
            return Flow::Done(PreToolDecision::Deny {
                reason: Self::plan_denial(&exec.name),
            });
        }
        Flow::Next(value)
    }

    fn tool_execute(&mut self, cx: &mut Cx<'_>, value: ToolDispatch) -> Flow<ToolDispatch> {
        let ToolDispatch::Run(exec) = &value else {
            return Flow::Next(value);
        };
        match exec.name.as_str() {
            EXIT_PLAN_MODE => {
                let exec = exec.clone();
                self.exit_plan(cx, &exec)
            }
            ASK_USER_QUESTION => {
                let exec = exec.clone();
                self.ask(cx, &exec)
            }
            _ => Flow::Next(value),
        }
    }

    fn command(&mut self, cx: &mut Cx<'_>, name: &str, value: Value) -> Flow<Value> {
        match name {
            "plan" => Flow::Done(self.plan_command(cx, &value)),
            "plan-state" => Flow::Done(json!({"active": self.active})),
            _ => Flow::Next(value),
        }
    }

    fn on_event(&mut self, _cx: &mut Cx<'_>, event: &SessionEvent) {
        if let EventData::Plugin(p) = event.data() {
            if p.event_type == PLAN_MODE {
                if let Some(a) = plan_mode_value(p.data.get()) {
                    self.active = a;
                }
            } else if p.event_type == "approval/policy"
                && let Ok(v) = serde_json::from_str::<Value>(p.data.get())
                && v["source"] == "delegation"
            {
                self.delegated = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_are_required() {
        assert!(has_heading("# Plan\n- a"));
        assert!(has_heading("  \n# Plan"));
        assert!(!has_heading("## Plan"));
        assert!(!has_heading("#"));
        assert!(!has_heading("Plan"));
    }

    #[test]
    fn questions_are_checked_and_renamed() {
        let q = questions_of(&json!({"questions": [
            {"id": "a", "question": "Which?", "options": [{"label": "X"}, {"label": "Y", "description": "d"}], "multi_select": true}
        ]}))
        .unwrap();
        assert_eq!(q[0]["multiSelect"], true);
        assert_eq!(q[0]["options"][1]["description"], "d");
        assert_eq!(
            questions_of(&json!({"questions": []})).unwrap_err().1,
            "EMPTY_QUESTIONS"
        );
        assert!(questions_of(&json!({"questions": [{"id": "a"}]})).is_err());
        assert!(
            questions_of(
                &json!({"questions": [{"id": "a", "question": "q"}, {"id": "a", "question": "r"}]})
            )
            .is_err()
        );
        assert!(questions_of(&json!({"questions": "no"})).is_err());
    }

    #[test]
    fn answers_keep_offered_labels_only() {
        let q = questions_of(&json!({"questions": [
            {"id": "a", "question": "Which?", "options": [{"label": "X"}, {"label": "Y"}]}
        ]}))
        .unwrap();
        let v = answers_of(
            &json!({"answers": [{"id": "a", "selected": ["Y", "Z"], "custom": "more"}]}),
            &q,
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"answers": [{"id": "a", "selected": ["Y"], "custom": "more"}]})
        );
        assert!(answers_of(&json!({"answers": []}), &q).is_err());
        assert!(answers_of(&json!({}), &q).is_err());
    }

    #[test]
    fn plan_mode_allows_read_only_tools_only() {
        let p = Interaction::new(Answerer::Interactive).allow_in_plan("mcp_docs_search");
        for t in [
            "read",
            "grep",
            "glob",
            EXIT_PLAN_MODE,
            ASK_USER_QUESTION,
            "mcp_docs_search",
        ] {
            assert!(p.allowed_in_plan(t), "{t}");
        }
        for t in ["write", "edit", "bash", "bash_start", "subagent"] {
            assert!(!p.allowed_in_plan(t), "{t}");
        }
    }
}
