//! The `dsh chat` REPL as a sans-IO state machine:
//! [`Input`]s in (typed lines, agent status, questions, signals), [`Action`]s
//! out (send, steer, answer, run a command, print, quit). The driver in
//! `agent_cmd.rs` owns the terminal, the agent and the renderer; everything
//! that decides lives here and is tested without a terminal.

use std::collections::VecDeque;

use serde_json::{Value, json};

use crate::commands::{self, Registry};
use dsh_std::ApprovalDecision;

/// The REPL's own controls: not agent commands, not logged.
pub const LOCAL_COMMANDS: &[&str] = &["quit", "exit", "steer", "followup", "cancel", "image"];

/// Most lines held back from piped input while a turn runs.
const MAX_HELD: usize = 1024;

/// Something the REPL reacts to.
#[derive(Clone, Debug, PartialEq)]
pub enum Input<R> {
    /// A line the user typed (or piped), without its newline.
    Line(String),
    /// Standard input ended.
    Eof,
    /// Ctrl-C.
    Interrupt,
    /// SIGTERM or SIGHUP.
    Terminate,
    /// The agent is running (`true`) or idle.
    Running(bool),
    /// A step started or a retry is scheduled: the spinner runs.
    Waiting,
    /// The step's first visible output arrived.
    Output,
    /// Nothing arrived for a while.
    Tick,
    /// A tool approval was asked (its prompt is already shown).
    Approval(R),
    /// The agent asks the user questions (`{"questions": [...]}`).
    Question(R, Value),
    /// A command the REPL asked for has settled.
    CommandDone(commands::Done),
}

/// Something the driver does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action<R> {
    /// Start a turn with `text` (`followup`: as a follow-up).
    Send {
        /// The prompt.
        text: String,
        /// Queue as a follow-up rather than a message.
        followup: bool,
    },
    /// Steer the running turn.
    Steer(String),
    /// Queue a follow-up to the running turn.
    Followup(String),
    /// Cancel the running turn.
    Cancel,
    /// Answer an approval.
    Answer(R, ApprovalDecision),
    /// Answer a question ask with the answer object.
    Reply(R, Value),
    /// Withdraw a question ask (nobody will answer).
    Dismiss(R),
    /// Run registered command `name` with raw input `args`; answer with
    /// [`Input::CommandDone`].
    Command {
        /// The name.
        name: String,
        /// The exact rest of the line.
        args: String,
    },
    /// Show a notice (dimmed, on its own line).
    Notice(String),
    /// Print a line of text (sanitised by the driver).
    Print(String),
    /// Show the `> ` prompt.
    Prompt,
    /// Advance the spinner.
    Tick,
    /// The turn ended: show held errors, clear the status line.
    Idle,
    /// Leave the REPL.
    Quit,
}

/// A question or approval waiting for a line.
#[derive(Clone, Debug, PartialEq)]
enum Pending<R> {
    Approval(R),
    Question {
        id: R,
        questions: Vec<Value>,
        answers: Vec<Value>,
    },
}

/// The REPL state.
#[derive(Clone, Debug)]
pub struct Repl<R> {
    registry: Registry,
    piped: bool,
    spinner: bool,
    running: bool,
    waiting: bool,
    steer: bool,
    armed: bool,
    quit_when_idle: bool,
    input_ended: bool,
    pending: VecDeque<Pending<R>>,
    held: VecDeque<String>,
}

impl<R: Copy + PartialEq> Repl<R> {
    /// A REPL over `registry`; `piped`: input is a script, not a terminal;
    /// `spinner`: stdout is a terminal.
    pub fn new(registry: Registry, piped: bool, spinner: bool) -> Self {
        Repl {
            registry,
            piped,
            spinner,
            running: false,
            waiting: false,
            steer: true,
            armed: false,
            quit_when_idle: false,
            input_ended: false,
            pending: VecDeque::new(),
            held: VecDeque::new(),
        }
    }

    /// Whether the next line answers an approval or a question.
    pub fn answering(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a turn runs.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The registry the REPL completes and dispatches from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Takes over what an earlier machine of the same input left (`dsh
    /// chat` switching sessions): lines read ahead, and whether the input
    /// has ended.
    pub fn take_over(&mut self, held: VecDeque<String>, ended: bool) {
        self.held = held;
        if ended {
            self.input_ended = true;
            self.quit_when_idle = true;
        }
    }

    /// What this machine leaves to the next one: lines read ahead, and
    /// whether the input has ended.
    pub fn leftover(&mut self) -> (VecDeque<String>, bool) {
        (std::mem::take(&mut self.held), self.input_ended)
    }

    /// Whether nothing is left to do: the input ended, every line read
    /// was handled, and no turn runs.
    pub fn finished(&self) -> bool {
        self.input_ended && self.held.is_empty() && !self.running && self.pending.is_empty()
    }

    /// A held piped line to handle now, if one is due.
    pub fn next_held(&mut self) -> Option<String> {
        if !self.pending.is_empty() || !self.running {
            self.held.pop_front()
        } else {
            None
        }
    }

    /// Handles one input.
    pub fn handle(&mut self, input: Input<R>) -> Vec<Action<R>> {
        let mut out = Vec::new();
        match input {
            Input::Line(line) => self.line(line, &mut out),
            Input::Eof => {
                self.input_ended = true;
                if self.running && self.piped {
                    self.quit_when_idle = true;
                    self.input_ended = true;
                    if self.held.is_empty() {
                        // Asks already made get no answer: deny or withdraw
                        // them, so the turn can end.
                        for p in self.pending.drain(..) {
                            out.push(Action::Print(String::new()));
                            out.push(Action::Notice("(input ended: denied)".into()));
                            out.push(match p {
                                Pending::Approval(id) => Action::Answer(id, ApprovalDecision::Deny),
                                Pending::Question { id, .. } => Action::Dismiss(id),
                            });
                        }
                    }
                } else {
                    out.push(Action::Quit);
                }
            }
            Input::Interrupt => {
                if self.running && !self.armed {
                    self.armed = true;
                    self.pending.clear();
                    out.push(Action::Notice(
                        "cancelling… (Ctrl-C again or Ctrl-D to quit)".into(),
                    ));
                    out.push(Action::Cancel);
                } else if self.armed {
                    out.push(Action::Quit);
                } else {
                    self.armed = true;
                    out.push(Action::Notice("(Ctrl-C again or Ctrl-D to quit)".into()));
                    out.push(Action::Prompt);
                }
            }
            Input::Terminate => out.push(Action::Quit),
            Input::Running(now) => {
                if self.running && !now && self.quit_when_idle && self.held.is_empty() {
                    out.push(Action::Quit);
                    return out;
                }
                if self.running && !now {
                    self.waiting = false;
                    out.push(Action::Idle);
                    out.push(Action::Prompt);
                }
                if now {
                    self.armed = false;
                }
                self.running = now;
            }
            Input::Waiting => self.waiting = true,
            Input::Output => self.waiting = false,
            Input::Tick => {
                if self.spinner && self.waiting && self.pending.is_empty() {
                    out.push(Action::Tick);
                }
            }
            Input::Approval(id) => {
                if self.input_ended && self.held.is_empty() {
                    out.push(Action::Print(String::new()));
                    out.push(Action::Notice("(input ended: denied)".into()));
                    out.push(Action::Answer(id, ApprovalDecision::Deny));
                } else {
                    self.pending.push_back(Pending::Approval(id));
                }
            }
            Input::Question(id, request) => {
                let questions: Vec<Value> = request
                    .get("questions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if questions.is_empty() {
                    out.push(Action::Dismiss(id));
                    return out;
                }
                if self.input_ended && self.held.is_empty() {
                    out.push(Action::Notice("(input ended: question dismissed)".into()));
                    out.push(Action::Dismiss(id));
                    return out;
                }
                if let Some(first) = questions.first() {
                    for l in render_question(first) {
                        out.push(Action::Print(l));
                    }
                }
                self.pending.push_back(Pending::Question {
                    id,
                    questions,
                    answers: Vec::new(),
                });
            }
            Input::CommandDone(done) => {
                if let Some(t) = &done.text {
                    out.push(Action::Notice(if done.ok {
                        t.clone()
                    } else {
                        format!("error: {t}")
                    }));
                }
                match done.message {
                    Some(text) if !self.running => {
                        self.running = true;
                        self.waiting = true;
                        out.push(Action::Send {
                            text,
                            followup: false,
                        });
                    }
                    Some(text) => out.push(Action::Steer(text)),
                    None if !self.running => out.push(Action::Prompt),
                    None => {}
                }
            }
        }
        out
    }

    fn line(&mut self, line: String, out: &mut Vec<Action<R>>) {
        self.armed = false;
        if self.piped && self.running && self.pending.is_empty() {
            if self.held.len() < MAX_HELD {
                self.held.push_back(line);
            }
            return;
        }
        if let Some(p) = self.pending.front_mut() {
            if self.piped {
                // Show the scripted answer as if it had been typed.
                out.push(Action::Print(line.trim().to_string()));
            }
            match p {
                Pending::Approval(id) => {
                    let decision = match line.trim().to_ascii_lowercase().as_str() {
                        "y" | "yes" => ApprovalDecision::Allow,
                        "a" | "always" => ApprovalDecision::AllowAlways,
                        _ => ApprovalDecision::Deny,
                    };
                    out.push(Action::Answer(*id, decision));
                    self.pending.pop_front();
                }
                Pending::Question {
                    id,
                    questions,
                    answers,
                } => {
                    let q = questions.get(answers.len()).cloned().unwrap_or(Value::Null);
                    answers.push(parse_answer(&q, &line));
                    if let Some(next) = questions.get(answers.len()) {
                        for l in render_question(next) {
                            out.push(Action::Print(l));
                        }
                        return;
                    }
                    out.push(Action::Reply(*id, json!({"answers": answers})));
                    self.pending.pop_front();
                }
            }
            self.waiting = true;
            return;
        }
        let text = line.trim();
        if text.is_empty() {
            if !self.running {
                out.push(Action::Prompt);
            }
            return;
        }
        match text {
            "/quit" | "/exit" => return out.push(Action::Quit),
            "/followup" => {
                self.steer = false;
                return out.push(Action::Notice(
                    "lines typed during a turn now queue as follow-ups".into(),
                ));
            }
            "/steer" => {
                self.steer = true;
                return out.push(Action::Notice(
                    "lines typed during a turn now steer it".into(),
                ));
            }
            "/cancel" => return out.push(Action::Cancel),
            _ => {}
        }
        let (followup, body) = match text.strip_prefix("/followup ") {
            Some(rest) => (true, rest),
            None => (!self.steer, text),
        };
        if !followup
            && let Some((name, args)) = commands::parse(text)
            && !self.registry.is_prompt(name)
        {
            match self.registry.get(name) {
                Some(c) if self.running && !c.during_turn => {
                    out.push(Action::Notice(format!("(/{name} runs between turns)")));
                }
                Some(_) => out.push(Action::Command {
                    name: name.to_string(),
                    args: args.to_string(),
                }),
                None => {
                    let near = self.registry.complete(&format!("/{name}"));
                    out.push(Action::Notice(if near.is_empty() {
                        format!("unknown command /{name} (/help lists them)")
                    } else {
                        format!(
                            "unknown command /{name} (did you mean {}? /help lists them)",
                            near.join(", ")
                        )
                    }));
                    if !self.running {
                        out.push(Action::Prompt);
                    }
                }
            }
            return;
        }
        let body = body.to_string();
        if !self.running {
            self.waiting = true;
            self.running = true;
            out.push(Action::Send {
                text: body,
                followup,
            });
        } else if followup {
            out.push(Action::Notice("(queued as a follow-up)".into()));
            out.push(Action::Followup(body));
        } else {
            out.push(Action::Notice("(steering the running turn)".into()));
            out.push(Action::Steer(body));
        }
    }
}

/// The lines that show one question: header, question, detail (a plan),
/// numbered options, and how to answer.
pub fn render_question(q: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let s = |k: &str| q.get(k).and_then(Value::as_str).unwrap_or("");
    let header = s("header");
    out.push(if header.is_empty() {
        format!("? {}", s("question"))
    } else {
        format!("? [{header}] {}", s("question"))
    });
    if !s("detail").is_empty() {
        out.extend(s("detail").lines().map(|l| format!("  │ {l}")));
    }
    let options = q.get("options").and_then(Value::as_array);
    for (i, o) in options.into_iter().flatten().enumerate() {
        let label = o.get("label").and_then(Value::as_str).unwrap_or("");
        match o.get("description").and_then(Value::as_str) {
            Some(d) => out.push(format!("  {}. {label} — {d}", i + 1)),
            None => out.push(format!("  {}. {label}", i + 1)),
        }
    }
    let multi = q.get("multiSelect").and_then(Value::as_bool) == Some(true);
    out.push(match (options.is_some_and(|o| !o.is_empty()), multi) {
        (true, true) => "answer with numbers separated by commas, or type your own answer:".into(),
        (true, false) => "answer with a number, or type your own answer:".into(),
        _ => "type your answer:".into(),
    });
    out
}

/// The answer item `{id, selected, custom?}` a typed line gives `q`:
/// option numbers (several with commas when `multiSelect`) or an option's
/// label select; anything else is free text (`custom`). On a plan review,
/// `y`/`yes` approves.
pub fn parse_answer(q: &Value, line: &str) -> Value {
    let id = q.get("id").cloned().unwrap_or(Value::from(""));
    let labels: Vec<&str> = q
        .get("options")
        .and_then(Value::as_array)
        .map(|o| o.iter().filter_map(|o| o.get("label")?.as_str()).collect())
        .unwrap_or_default();
    let multi = q.get("multiSelect").and_then(Value::as_bool) == Some(true);
    let text = line.trim();
    let select = |picked: Vec<&str>| json!({"id": id, "selected": picked});
    if text.is_empty() {
        return select(Vec::new());
    }
    if let Some(approve) = q
        .get("intent")
        .filter(|i| i.get("kind").and_then(Value::as_str) == Some("plan-review"))
        .and_then(|i| i.get("approve")?.as_str())
        && matches!(text.to_ascii_lowercase().as_str(), "y" | "yes")
    {
        return select(vec![approve]);
    }
    if let Some(l) = labels.iter().find(|l| l.eq_ignore_ascii_case(text)) {
        return select(vec![l]);
    }
    let numbers: Option<Vec<usize>> = text
        .split(',')
        .map(|t| t.trim().parse::<usize>().ok())
        .collect();
    if let Some(ns) = numbers
        && (multi || ns.len() == 1)
        && ns.iter().all(|n| (1..=labels.len()).contains(n))
    {
        let mut picked: Vec<&str> = Vec::new();
        for n in ns {
            if let Some(l) = labels.get(n - 1)
                && !picked.contains(l)
            {
                picked.push(l);
            }
        }
        return select(picked);
    }
    json!({"id": id, "selected": [], "custom": text})
}

#[cfg(test)]
mod tests {
    use super::*;

    type A = Action<u32>;

    fn repl(piped: bool) -> Repl<u32> {
        Repl::new(Registry::standard(), piped, false)
    }

    fn line(r: &mut Repl<u32>, s: &str) -> Vec<A> {
        r.handle(Input::Line(s.into()))
    }

    #[test]
    fn an_idle_line_starts_a_turn_and_a_running_one_steers() {
        let mut r = repl(false);
        assert_eq!(
            line(&mut r, "hi"),
            vec![A::Send {
                text: "hi".into(),
                followup: false
            }]
        );
        assert!(r.running());
        assert_eq!(
            line(&mut r, "faster"),
            vec![
                A::Notice("(steering the running turn)".into()),
                A::Steer("faster".into())
            ]
        );
        line(&mut r, "/followup");
        assert_eq!(
            line(&mut r, "later").last(),
            Some(&A::Followup("later".into()))
        );
        assert_eq!(r.handle(Input::Running(false)), vec![A::Idle, A::Prompt]);
        assert!(!r.running());
    }

    #[test]
    fn commands_dispatch_through_the_registry() {
        let mut r = repl(false);
        assert_eq!(
            line(&mut r, "/plan add a flag"),
            vec![A::Command {
                name: "plan".into(),
                args: " add a flag".into()
            }]
        );
        // The command's message becomes the prompt.
        let done = commands::Done {
            ok: true,
            text: Some("Plan mode on. Use /plan off to leave.".into()),
            message: Some("add a flag".into()),
            switch: None,
        };
        assert_eq!(
            r.handle(Input::CommandDone(done)),
            vec![
                A::Notice("Plan mode on. Use /plan off to leave.".into()),
                A::Send {
                    text: "add a flag".into(),
                    followup: false
                }
            ]
        );
        // During a turn only commands that allow it run.
        assert_eq!(
            line(&mut r, "/compact"),
            vec![A::Notice("(/compact runs between turns)".into())]
        );
        assert!(matches!(line(&mut r, "/status")[0], A::Command { .. }));
        assert_eq!(line(&mut r, "/cancel"), vec![A::Cancel]);
        assert_eq!(
            line(&mut r, "/nope"),
            vec![A::Notice("unknown command /nope (/help lists them)".into())]
        );
        assert_eq!(line(&mut r, "/quit"), vec![A::Quit]);
    }

    #[test]
    fn an_unknown_command_suggests_completions() {
        let mut r = repl(false);
        assert_eq!(
            line(&mut r, "/pl"),
            vec![
                A::Notice("unknown command /pl (did you mean /plan? /help lists them)".into()),
                A::Prompt
            ]
        );
    }

    #[test]
    fn approvals_take_the_next_line() {
        let mut r = repl(false);
        line(&mut r, "run it");
        r.handle(Input::Running(true));
        assert!(r.handle(Input::Approval(7)).is_empty());
        assert_eq!(
            line(&mut r, "a"),
            vec![A::Answer(7, ApprovalDecision::AllowAlways)]
        );
        r.handle(Input::Approval(8));
        assert_eq!(
            line(&mut r, "no"),
            vec![A::Answer(8, ApprovalDecision::Deny)]
        );
        r.handle(Input::Approval(9));
        assert_eq!(
            line(&mut r, "Y"),
            vec![A::Answer(9, ApprovalDecision::Allow)]
        );
    }

    #[test]
    fn piped_lines_wait_for_the_question_or_the_turn_end() {
        let mut r = repl(true);
        line(&mut r, "run it");
        r.handle(Input::Running(true));
        // Typed ahead: held.
        assert!(line(&mut r, "y").is_empty());
        assert!(line(&mut r, "next prompt").is_empty());
        assert_eq!(r.next_held(), None);
        r.handle(Input::Approval(1));
        let held = r.next_held().unwrap();
        assert_eq!(
            line(&mut r, &held),
            vec![A::Print("y".into()), A::Answer(1, ApprovalDecision::Allow)]
        );
        assert_eq!(r.next_held(), None);
        r.handle(Input::Running(false));
        assert_eq!(r.next_held().as_deref(), Some("next prompt"));
    }

    #[test]
    fn input_ending_denies_what_is_asked_and_quits_when_idle() {
        let mut r = repl(true);
        line(&mut r, "run it");
        r.handle(Input::Running(true));
        r.handle(Input::Approval(3));
        r.handle(Input::Question(
            4,
            json!({"questions": [{"id": "a", "question": "?"}]}),
        ));
        let out = r.handle(Input::Eof);
        assert!(
            out.contains(&A::Answer(3, ApprovalDecision::Deny)),
            "{out:?}"
        );
        assert!(out.contains(&A::Dismiss(4)), "{out:?}");
        assert_eq!(
            r.handle(Input::Approval(5)).last(),
            Some(&A::Answer(5, ApprovalDecision::Deny))
        );
        assert_eq!(r.handle(Input::Running(false)), vec![A::Quit]);
        // On a terminal, Ctrl-D quits at once.
        assert_eq!(repl(false).handle(Input::Eof), vec![A::Quit]);
    }

    #[test]
    fn a_new_machine_takes_over_lines_read_ahead() {
        let mut r = repl(true);
        line(&mut r, "hi");
        r.handle(Input::Running(true));
        line(&mut r, "/fork");
        line(&mut r, "/status");
        r.handle(Input::Eof);
        r.handle(Input::Running(false));
        let held = r.next_held().unwrap();
        assert_eq!(
            line(&mut r, &held)[0],
            A::Command {
                name: "fork".into(),
                args: "".into()
            }
        );
        let (rest, ended) = r.leftover();
        let mut next = repl(true);
        next.take_over(rest, ended);
        assert!(!next.finished());
        let held = next.next_held().unwrap();
        assert!(matches!(&line(&mut next, &held)[0], A::Command { name, .. } if name == "status"));
        assert!(next.finished());
    }

    #[test]
    fn ctrl_c_cancels_then_quits() {
        let mut r = repl(false);
        line(&mut r, "go");
        r.handle(Input::Running(true));
        assert_eq!(r.handle(Input::Interrupt).last(), Some(&A::Cancel));
        assert_eq!(r.handle(Input::Interrupt), vec![A::Quit]);
        let mut idle = repl(false);
        assert_eq!(idle.handle(Input::Interrupt).last(), Some(&A::Prompt));
        assert_eq!(idle.handle(Input::Interrupt), vec![A::Quit]);
    }

    #[test]
    fn the_spinner_ticks_only_while_waiting_for_the_model() {
        let mut r: Repl<u32> = Repl::new(Registry::standard(), false, true);
        assert!(r.handle(Input::Tick).is_empty());
        r.handle(Input::Waiting);
        assert_eq!(r.handle(Input::Tick), vec![A::Tick]);
        r.handle(Input::Output);
        assert!(r.handle(Input::Tick).is_empty());
    }

    #[test]
    fn questions_are_answered_one_line_each() {
        let mut r = repl(false);
        line(&mut r, "go");
        r.handle(Input::Running(true));
        let shown = r.handle(Input::Question(
            2,
            json!({"questions": [
                {"id": "lang", "question": "Which language?", "header": "Pick", "options": [{"label": "Rust (Recommended)"}, {"label": "Go", "description": "simpler"}]},
                {"id": "extras", "question": "Which extras?", "multiSelect": true, "options": [{"label": "tests"}, {"label": "docs"}]},
                {"id": "name", "question": "Name?"}
            ]}),
        ));
        assert_eq!(shown[0], A::Print("? [Pick] Which language?".into()));
        assert!(shown.contains(&A::Print("  2. Go — simpler".into())));
        let second = line(&mut r, "2");
        assert_eq!(second[0], A::Print("? Which extras?".into()));
        line(&mut r, "1, 2");
        let done = line(&mut r, "tool-x");
        assert_eq!(
            done,
            vec![A::Reply(
                2,
                json!({"answers": [
                    {"id": "lang", "selected": ["Go"]},
                    {"id": "extras", "selected": ["tests", "docs"]},
                    {"id": "name", "selected": [], "custom": "tool-x"}
                ]})
            )]
        );
    }

    #[test]
    fn typed_answers_map_to_labels_or_free_text() {
        let q = json!({"id": "q", "options": [{"label": "Approve"}, {"label": "Keep planning"}],
            "intent": {"kind": "plan-review", "approve": "Approve"}});
        assert_eq!(parse_answer(&q, "y")["selected"], json!(["Approve"]));
        assert_eq!(parse_answer(&q, "1")["selected"], json!(["Approve"]));
        assert_eq!(
            parse_answer(&q, "keep planning")["selected"],
            json!(["Keep planning"])
        );
        assert_eq!(parse_answer(&q, "1,2")["custom"], "1,2", "single select");
        assert_eq!(parse_answer(&q, "9")["custom"], "9");
        assert_eq!(parse_answer(&q, "split step 2")["custom"], "split step 2");
        assert_eq!(parse_answer(&q, "")["selected"], json!([]));
    }
}
