//! The calls a hosted agent's handle sends its driver, and how the driver
//! answers them: one definition for every hosted shell, whatever its
//! channels (std `mpsc`, `async-channel`).

use std::collections::BTreeMap;

use dsh_core::Message;
use dsh_core::agent::InboxTarget;
use dsh_core::session::{EventData, SessionEvent};
use dsh_runtime::exec::{self, Dispatch, Input};
use dsh_runtime::{AgentEvent, Kernel, KernelError, TurnSummary};

/// Where the answer to one handle call goes: the sending half of the
/// caller's one-shot channel, wrapped.
pub type Answer<T> = Box<dyn FnOnce(T) + Send>;

/// Where live events go: returns `false` once the subscriber is gone (it is
/// then dropped).
pub type Sink = Box<dyn FnMut(&AgentEvent) -> bool + Send>;

/// A reader of the session events, run by the driver over the events in
/// place (no copy of the log).
pub type Visitor = Box<dyn FnOnce(&[SessionEvent]) + Send>;

/// The result of a plugin command: its value or its error text.
pub type CommandResult = Result<serde_json::Value, String>;

/// What reaches a driver. The large payloads are boxed: an async channel
/// keeps a block of slots of this size alive for every idle agent.
#[non_exhaustive]
pub enum Msg {
    /// An input from work in flight (a stream chunk or end, a tool result,
    /// a side answer): not a handle call. Boxed, as every large payload.
    Work(Box<Input>),
    /// An input from a handle call (a cancel, an answer, disposal).
    Feed(Box<Input>),
    /// Delivers `message` to `target` (IB-6), waking the agent when
    /// `wakeup`.
    Send {
        /// The message.
        message: Box<Message>,
        /// Next turn or next step.
        target: InboxTarget,
        /// Whether the agent wakes for it.
        wakeup: bool,
        /// Where the kernel's answer goes.
        reply: Answer<Result<(), KernelError>>,
    },
    /// A new live subscriber.
    Subscribe(Sink),
    /// A copy of the session events so far.
    Snapshot(Answer<Vec<SessionEvent>>),
    /// Runs a reader over the session events in place.
    Visit(Visitor),
    /// Appends a foreign event at the end of the log; answers its seq.
    Append {
        /// The event.
        data: Box<EventData>,
        /// Where the seq (or the refusal) goes.
        reply: Answer<Result<u64, KernelError>>,
    },
    /// Runs plugin command `name`; the answer comes when it is done.
    Command {
        /// The command's name.
        name: String,
        /// Its arguments.
        args: Box<serde_json::Value>,
        /// Where its result goes.
        reply: Answer<CommandResult>,
    },
    /// Answers when the agent is idle with nothing pending (IB-13); a
    /// shell that tracks idleness itself does not send it.
    WaitIdle(Answer<TurnSummary>),
    /// Disposes the agent (LC-40); the answer, if asked for, is the last
    /// failed write's message when part of the log is unwritten.
    Dispose(Option<Answer<Option<String>>>),
}

impl core::fmt::Debug for Msg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self {
            Msg::Work(_) => "Work",
            Msg::Feed(_) => "Feed",
            Msg::Send { .. } => "Send",
            Msg::Subscribe(_) => "Subscribe",
            Msg::Snapshot(_) => "Snapshot",
            Msg::Visit(_) => "Visit",
            Msg::Append { .. } => "Append",
            Msg::Command { .. } => "Command",
            Msg::WaitIdle(_) => "WaitIdle",
            Msg::Dispose(_) => "Dispose",
        };
        f.debug_tuple("Msg").field(&name).finish()
    }
}

/// The callers a driver keeps between calls: live subscribers and the
/// callers of running plugin commands, by command id.
#[derive(Default)]
pub struct Callers {
    subscribers: Vec<Sink>,
    commands: BTreeMap<u64, Answer<CommandResult>>,
}

impl core::fmt::Debug for Callers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Callers")
            .field("subscribers", &self.subscribers.len())
            .field("commands", &self.commands.len())
            .finish()
    }
}

impl Callers {
    /// No subscriber and no running command.
    pub fn new() -> Self {
        Callers::default()
    }

    /// Whether anyone subscribes to live events.
    pub fn has_subscribers(&self) -> bool {
        !self.subscribers.is_empty()
    }

    /// Gives `event` to every subscriber; drops those that are gone.
    pub fn publish(&mut self, event: &AgentEvent) {
        self.subscribers.retain_mut(|s| s(event));
    }

    /// Answers the caller of command `id` (from
    /// [`Dispatch::command_done`]).
    pub fn command_done(&mut self, id: u64, result: &CommandResult) {
        if let Some(reply) = self.commands.remove(&id) {
            reply(result.clone());
        }
    }
}

/// A runtime's I/O that answers handle calls: [`Dispatch`] plus the
/// callers it keeps.
pub trait Host: Dispatch {
    /// The subscribers and command callers.
    fn callers(&mut self) -> &mut Callers;

    /// Runs after the kernel took a call and before its caller is
    /// answered (a blocking shell carries the call's effects here, so the
    /// handle returns after them); default: nothing.
    fn settle(&mut self, kernel: &mut Kernel) {
        let _ = kernel;
    }
}

/// Gives `msg` to `kernel` and answers its caller. [`Msg::WaitIdle`] and
/// [`Msg::Dispose`] are the shell's own (idleness and disposal differ per
/// shell): they come back as `Some`.
pub fn handle<H: Host + ?Sized>(kernel: &mut Kernel, host: &mut H, msg: Msg) -> Option<Msg> {
    let now = host.now();
    match msg {
        Msg::Work(input) | Msg::Feed(input) => {
            let _ = exec::feed(kernel, host, *input);
        }
        Msg::Send {
            message,
            target,
            wakeup,
            reply,
        } => {
            let r = kernel.send(now, *message, target, wakeup);
            host.settle(kernel);
            reply(r);
        }
        Msg::Subscribe(sink) => {
            host.callers().subscribers.push(sink);
            kernel.set_publish_events(true);
        }
        Msg::Snapshot(reply) => reply(kernel.session().events().to_vec()),
        Msg::Visit(read) => read(kernel.session().events()),
        Msg::Append { data, reply } => {
            let r = kernel.append_event(now, *data);
            host.settle(kernel);
            reply(r);
        }
        Msg::Command { name, args, reply } => match kernel.command(now, &name, *args) {
            Ok(id) => {
                host.callers().commands.insert(id, reply);
            }
            Err(e) => reply(Err(e.to_string())),
        },
        other => return Some(other),
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_gone_subscriber_is_dropped_and_the_others_keep_receiving() {
        let mut callers = Callers::new();
        let (tx, rx) = mpsc::channel();
        let (gone_tx, gone_rx) = mpsc::channel::<AgentEvent>();
        drop(gone_rx);
        callers.subscribers.push(Box::new(move |e: &AgentEvent| {
            gone_tx.send(e.clone()).is_ok()
        }));
        callers
            .subscribers
            .push(Box::new(move |e: &AgentEvent| tx.send(e.clone()).is_ok()));
        callers.publish(&AgentEvent::Error("one".into()));
        assert_eq!(callers.subscribers.len(), 1);
        callers.publish(&AgentEvent::Error("two".into()));
        assert_eq!(rx.try_iter().count(), 2);
        assert!(callers.has_subscribers());
    }

    #[test]
    fn a_command_is_answered_once_by_its_id() {
        let mut callers = Callers::new();
        let (tx, rx) = mpsc::channel();
        for id in [1, 2] {
            let tx = tx.clone();
            callers.commands.insert(
                id,
                Box::new(move |r: CommandResult| {
                    let _ = tx.send((id, r));
                }),
            );
        }
        callers.command_done(2, &Ok(serde_json::json!({"done": true})));
        callers.command_done(2, &Err("again".into()));
        callers.command_done(7, &Err("unknown".into()));
        let got: Vec<_> = rx.try_iter().collect();
        assert_eq!(got, vec![(2, Ok(serde_json::json!({"done": true})))]);
        assert_eq!(callers.commands.len(), 1);
    }
}
