//! A small line editor for `dsh chat` on a terminal: the terminal is put
//! in non-canonical mode without echo (signals and output processing stay
//! as they are), and this editor echoes, edits (backspace, Ctrl-U) and
//! completes slash commands with Tab from the command registry. The editing
//! itself is sans-IO ([`LineEditor`]), tested without a terminal.

use crate::commands::Registry;

/// Longest line kept (bytes); more is dropped.
const MAX_LINE: usize = 64 * 1024;

/// What a key does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Write these bytes to the terminal.
    Echo(String),
    /// A line is complete.
    Line(String),
    /// Ctrl-D on an empty line.
    Eof,
    /// Show these completions on their own line, then the prompt and the
    /// line so far again.
    Show(String),
}

/// The line being typed.
#[derive(Clone, Debug)]
pub struct LineEditor {
    registry: Registry,
    buf: String,
    /// Bytes of an incomplete UTF-8 character.
    pending: Vec<u8>,
    /// Inside an escape sequence (arrow keys and the like are ignored).
    escape: Escape,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    None,
    Start,
    Sequence,
}

impl LineEditor {
    /// An editor completing from `registry`.
    pub fn new(registry: Registry) -> Self {
        LineEditor {
            registry,
            buf: String::new(),
            pending: Vec::new(),
            escape: Escape::None,
        }
    }

    /// The line so far.
    pub fn line(&self) -> &str {
        &self.buf
    }

    /// Takes one input byte.
    pub fn byte(&mut self, b: u8) -> Vec<Edit> {
        match self.escape {
            Escape::Start => {
                self.escape = if b == b'[' || b == b'O' {
                    Escape::Sequence
                } else {
                    Escape::None
                };
                return Vec::new();
            }
            Escape::Sequence => {
                if (0x40..=0x7e).contains(&b) {
                    self.escape = Escape::None;
                }
                return Vec::new();
            }
            Escape::None => {}
        }
        match b {
            b'\n' | b'\r' => {
                self.pending.clear();
                vec![
                    Edit::Echo("\n".into()),
                    Edit::Line(std::mem::take(&mut self.buf)),
                ]
            }
            0x04 if self.buf.is_empty() => vec![Edit::Eof],
            0x7f | 0x08 => match self.buf.pop() {
                Some(_) => vec![Edit::Echo("\x08 \x08".into())],
                None => Vec::new(),
            },
            0x15 => {
                let n = self.buf.chars().count();
                self.buf.clear();
                vec![Edit::Echo("\x08 \x08".repeat(n))]
            }
            b'\t' => self.complete(),
            0x1b => {
                self.escape = Escape::Start;
                Vec::new()
            }
            b if b < 0x20 => Vec::new(),
            b => {
                self.pending.push(b);
                match std::str::from_utf8(&self.pending) {
                    Ok(s) => {
                        let s = s.to_string();
                        self.pending.clear();
                        if self.buf.len() + s.len() > MAX_LINE {
                            return Vec::new();
                        }
                        self.buf.push_str(&s);
                        vec![Edit::Echo(s)]
                    }
                    Err(e) if e.error_len().is_some() || self.pending.len() >= 4 => {
                        self.pending.clear();
                        Vec::new()
                    }
                    Err(_) => Vec::new(),
                }
            }
        }
    }

    /// Tab: the one completion is written out; several extend the line by
    /// their common prefix, or are shown.
    fn complete(&mut self) -> Vec<Edit> {
        let all = self.registry.complete(&self.buf);
        match all.as_slice() {
            [] => Vec::new(),
            [one] => {
                let rest = format!("{} ", &one[self.buf.len()..]);
                self.buf.push_str(&rest);
                vec![Edit::Echo(rest)]
            }
            many => {
                let first = &many[0];
                let common = many.iter().fold(first.len(), |n, c| {
                    first
                        .bytes()
                        .zip(c.bytes())
                        .take(n)
                        .take_while(|(a, b)| a == b)
                        .count()
                });
                if common > self.buf.len() {
                    let rest = first[self.buf.len()..common].to_string();
                    self.buf.push_str(&rest);
                    vec![Edit::Echo(rest)]
                } else {
                    vec![Edit::Show(many.join("  "))]
                }
            }
        }
    }
}

/// The terminal mode to restore at exit, when the editor changed it.
#[cfg(unix)]
static SAVED: std::sync::Mutex<Option<rustix::termios::Termios>> = std::sync::Mutex::new(None);

/// Puts the terminal on stdin in non-canonical mode without echo; `false`
/// when it cannot (then lines are read as before).
#[cfg(unix)]
pub fn enter() -> bool {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let Ok(original) = tcgetattr(&stdin) else {
        return false;
    };
    let mut raw = original.clone();
    raw.local_modes &= !(LocalModes::ICANON | LocalModes::ECHO);
    if tcsetattr(&stdin, OptionalActions::Now, &raw).is_err() {
        return false;
    }
    if let Ok(mut s) = SAVED.lock() {
        *s = Some(original);
    }
    true
}

/// Restores the terminal mode [`enter`] changed.
#[cfg(unix)]
pub fn restore() {
    use rustix::termios::{OptionalActions, tcsetattr};
    if let Ok(mut s) = SAVED.lock()
        && let Some(t) = s.take()
    {
        let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &t);
    }
}

/// Restores nothing where the editor is not used.
#[cfg(not(unix))]
pub fn restore() {}

/// Writes `text` to the terminal on stdout without taking the stdout
/// lock (the REPL holds it while it runs).
#[cfg(unix)]
pub fn echo(text: &str) {
    let mut bytes = text.as_bytes();
    while !bytes.is_empty() {
        match rustix::io::write(std::io::stdout(), bytes) {
            Ok(0) | Err(_) => return,
            Ok(n) => bytes = &bytes[n..],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(e: &mut LineEditor, s: &str) -> Vec<Edit> {
        s.bytes().flat_map(|b| e.byte(b)).collect()
    }

    #[test]
    fn tab_completes_a_unique_command() {
        let mut e = LineEditor::new(Registry::standard());
        typed(&mut e, "/pl");
        assert_eq!(e.byte(b'\t'), vec![Edit::Echo("an ".into())]);
        assert_eq!(e.line(), "/plan ");
        let out = typed(&mut e, "off\n");
        assert_eq!(out.last(), Some(&Edit::Line("/plan off".into())));
    }

    #[test]
    fn tab_extends_or_shows_several() {
        let mut e = LineEditor::new(Registry::standard());
        typed(&mut e, "/s");
        assert_eq!(
            e.byte(b'\t'),
            vec![Edit::Show("/sessions  /skills  /status  /steer".into())]
        );
        typed(&mut e, "t");
        assert_eq!(e.byte(b'\t'), vec![Edit::Show("/status  /steer".into())]);
        typed(&mut e, "a");
        assert_eq!(e.byte(b'\t'), vec![Edit::Echo("tus ".into())]);
        // Not a command: nothing.
        let mut e = LineEditor::new(Registry::standard());
        typed(&mut e, "hello");
        assert!(e.byte(b'\t').is_empty());
    }

    #[test]
    fn editing_keys_and_utf8() {
        let mut e = LineEditor::new(Registry::standard());
        typed(&mut e, "héllo");
        assert_eq!(e.byte(0x7f), vec![Edit::Echo("\x08 \x08".into())]);
        assert_eq!(e.line(), "héll");
        // Arrow keys are ignored.
        typed(&mut e, "\x1b[A\x1bOB");
        assert_eq!(e.line(), "héll");
        typed(&mut e, "\x15");
        assert_eq!(e.line(), "");
        assert_eq!(e.byte(0x04), vec![Edit::Eof]);
        typed(&mut e, "x");
        assert!(e.byte(0x04).is_empty(), "Ctrl-D ends only an empty line");
    }
}
