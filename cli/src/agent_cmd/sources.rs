//! Where a chat's events come from: the agent's event forwarders, the line
//! editor or stdin, and the interrupt and terminate signals.

use std::collections::VecDeque;
use std::io::{self, BufRead, IsTerminal};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;

use dsh_std::{Agent, AgentEvent};

/// What the event loop receives.
pub(super) enum Ui {
    Event(AgentEvent),
    Line(String),
    Eof,
    Interrupt,
    /// SIGTERM or SIGHUP: end the command the way Ctrl-C does (cancel a
    /// running turn, stop its tools' process groups, save the session),
    /// without asking twice.
    Terminate,
    /// An event of the chat's agent number `.0` (`dsh chat` switches
    /// agents on `/resume` and `/fork`: a late event of an earlier one is
    /// dropped).
    Of(u64, AgentEvent),
}

/// Forwards `agent`'s events tagged with `generation`.
pub(super) fn spawn_tagged_forwarder(agent: &Agent, generation: u64, tx: Sender<Ui>) {
    let rx = agent.subscribe();
    thread::spawn(move || {
        while let Ok(ev) = rx.recv() {
            if tx.send(Ui::Of(generation, ev)).is_err() {
                break;
            }
        }
    });
}

/// The input side of `dsh chat`, made once for every agent it switches
/// through: one stdin reader, one signal handler.
pub(super) struct ChatInput {
    pub(super) tx: Sender<Ui>,
    pub(super) rx: Receiver<Ui>,
    pub(super) generation: u64,
    /// Lines read ahead by the previous agent's REPL, and whether the
    /// input ended.
    pub(super) leftover: (VecDeque<String>, bool),
}

impl ChatInput {
    pub(super) fn start() -> Self {
        let (tx, rx) = mpsc::channel();
        spawn_stdin(tx.clone());
        install_ctrlc(tx.clone());
        ChatInput {
            tx,
            rx,
            generation: 0,
            leftover: (VecDeque::new(), false),
        }
    }
}

pub(super) fn spawn_forwarder(agent: &Agent, tx: Sender<Ui>) {
    let rx = agent.subscribe();
    thread::spawn(move || {
        while let Ok(ev) = rx.recv() {
            if tx.send(Ui::Event(ev)).is_err() {
                break;
            }
        }
    });
}

/// Reads stdin with the line editor (Tab completes commands) when stdin
/// and stdout are a terminal; `false` when it cannot.
#[cfg(unix)]
pub(super) fn spawn_editor(tx: Sender<Ui>) -> bool {
    use std::io::Read;
    if !(io::stdin().is_terminal() && io::stdout().is_terminal() && crate::line_edit::enter()) {
        return false;
    }
    thread::spawn(move || {
        let mut editor = crate::line_edit::LineEditor::new(crate::commands::Registry::standard());
        let stdin = io::stdin();
        let mut lock = stdin.lock();
        let mut byte = [0u8; 1];
        loop {
            match lock.read(&mut byte) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Ui::Eof);
                    break;
                }
                Ok(_) => {}
            }
            for edit in editor.byte(byte[0]) {
                let sent = match edit {
                    crate::line_edit::Edit::Echo(s) => {
                        // tty: the user's own keystrokes (control bytes are not echoed).
                        crate::line_edit::echo(&s);
                        true
                    }
                    crate::line_edit::Edit::Show(list) => {
                        crate::line_edit::echo(&format!("\n{list}\n> {}", editor.line()));
                        true
                    }
                    crate::line_edit::Edit::Line(l) => tx.send(Ui::Line(l)).is_ok(),
                    crate::line_edit::Edit::Eof => {
                        let _ = tx.send(Ui::Eof);
                        return;
                    }
                };
                if !sent {
                    return;
                }
            }
        }
    });
    true
}

pub(super) fn spawn_stdin(tx: Sender<Ui>) {
    #[cfg(unix)]
    if spawn_editor(tx.clone()) {
        return;
    }
    thread::spawn(move || {
        let stdin = io::stdin();
        let mut lock = stdin.lock();
        loop {
            let mut line = String::new();
            match lock.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Ui::Eof);
                    break;
                }
                Ok(_) => {
                    let text = line.trim_end_matches(['\n', '\r']).to_string();
                    if tx.send(Ui::Line(text)).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

pub(super) fn install_ctrlc(tx: Sender<Ui>) {
    install_sigterm(tx.clone());
    // Only the first handler of a process is installed; a failure leaves
    // the default (the process ends), which is still a way out.
    let _ = ctrlc::set_handler(move || {
        let _ = tx.send(Ui::Interrupt);
    });
}

/// Forwards SIGTERM and SIGHUP (the terminal went away) as
/// [`Ui::Terminate`]; where that cannot be installed the default stays,
/// which ends the process and would leave a running tool's processes
/// behind.
pub(super) fn install_sigterm(tx: Sender<Ui>) {
    crate::signals::forward(crate::signals::Set::TermHup, move || {
        tx.send(Ui::Terminate).is_ok()
    });
}
