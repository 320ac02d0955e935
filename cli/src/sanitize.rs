//! Text from the model or a tool, made safe for a terminal.
//!
//! Every place that prints model or tool text goes through [`terminal`]:
//! control characters would otherwise let that text clear the screen, move
//! the cursor over an approval prompt, set the window title, write the
//! clipboard (OSC 52), plant hyperlinks, or reorder what is shown (bidi
//! overrides). They are shown visibly instead, so the user sees that they
//! are there; the session log keeps the raw text.
//!
//! - C0 controls other than `\n` and `\t`, and DEL: caret notation (`^[` for
//!   ESC, `^M` for a lone CR, `^?` for DEL); a CR directly before an LF is
//!   dropped (CRLF line ends).
//! - C1 controls (U+0080..U+009F), bidirectional formatting characters,
//!   line/paragraph separators and zero-width/invisible format characters:
//!   `<U+XXXX>`.
//!
//! Whole lines go through the [`println_safe`], [`eprintln_safe`] and
//! [`writeln_safe`] macros: every print site in the CLI either uses them,
//! passes its values through [`terminal`], prints only its own static
//! text, or carries a `// tty:` comment saying why its text is safe
//! (`cli/tests/print_sites.rs` checks this).
//!
//! The mapping is per character, so text cut into stream deltas anywhere is
//! rendered the same as the whole text (an escape sequence split across two
//! deltas is as harmless as one that is not).

use std::borrow::Cow;

/// Whether `c` is shown as `<U+XXXX>`.
fn is_hidden_format(c: char) -> bool {
    matches!(
        c,
        '\u{80}'..='\u{9f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{061c}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    )
}

/// Whether `c` needs rewriting (any of the classes in the module docs).
fn needs_escape(c: char) -> bool {
    (c.is_ascii_control() && c != '\n' && c != '\t') || is_hidden_format(c)
}

/// `text` with every control and invisible format character shown visibly
/// (see the module docs). Borrows when nothing needs changing.
pub fn terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        if c.is_ascii_control() && c != '\n' && c != '\t' {
            out.push('^');
            // Caret notation: ^@..^_ for 0..31, ^? for DEL.
            out.push(if c == '\u{7f}' {
                '?'
            } else {
                char::from(c as u8 + 0x40)
            });
        } else if is_hidden_format(c) {
            out.push_str(&format!("<U+{:04X}>", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line for a value shown in an approval prompt: JSON text (strings
/// quoted, newlines and controls as JSON escapes), then [`terminal`] for
/// what JSON leaves raw (bidi and invisible characters). Values longer than
/// `max` characters are cut with a note saying how much is not shown.
pub fn approval_value(value: &serde_json::Value, max: usize) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "?".to_string());
    let shown = terminal(&json).into_owned();
    let total = shown.chars().count();
    if total <= max {
        return shown;
    }
    let head: String = shown.chars().take(max).collect();
    format!(
        "{head}… [{} more characters not shown: read the call in the session log before allowing it]",
        total - max
    )
}

/// `println!` with the whole formatted line shown through [`terminal`].
macro_rules! println_safe {
    ($($arg:tt)*) => {
        // tty: the formatted text goes through terminal().
        println!("{}", $crate::sanitize::terminal(&format!($($arg)*)))
    };
}
pub(crate) use println_safe;

/// `eprintln!` with the whole formatted line shown through [`terminal`].
macro_rules! eprintln_safe {
    ($($arg:tt)*) => {
        // tty: the formatted text goes through terminal().
        eprintln!("{}", $crate::sanitize::terminal(&format!($($arg)*)))
    };
}
pub(crate) use eprintln_safe;

/// `writeln!` to `w` with the formatted line shown through [`terminal`].
macro_rules! writeln_safe {
    ($w:expr, $($arg:tt)*) => {
        // tty: the formatted text goes through terminal().
        writeln!($w, "{}", $crate::sanitize::terminal(&format!($($arg)*)))
    };
}
pub(crate) use writeln_safe;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(terminal("héllo\n\tworld"), Cow::Borrowed(_)));
    }

    #[test]
    fn escapes_are_shown_not_obeyed() {
        // Clear screen, OSC 52 clipboard write, window title, hyperlink.
        let hostile = "a\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;title\x07\x1b]8;;http://x\x1b\\b";
        let shown = terminal(hostile);
        assert!(
            !shown.contains('\x1b') && !shown.contains('\x07'),
            "{shown}"
        );
        assert_eq!(
            shown,
            "a^[[2J^[]52;c;cm0gLXJmIH4=^G^[]0;title^G^[]8;;http://x^[\\b"
        );
    }

    #[test]
    fn carriage_returns_and_bidi() {
        assert_eq!(terminal("ls\r\x1b[Krm -rf /"), "ls^M^[[Krm -rf /");
        assert_eq!(terminal("line\r\nnext"), "line\nnext");
        assert_eq!(terminal("a\u{202e}cba"), "a<U+202E>cba");
        assert_eq!(terminal("x\u{9b}31m"), "x<U+009B>31m");
        assert_eq!(terminal("\u{7f}\u{0}"), "^?^@");
        assert_eq!(terminal("zero\u{200b}width"), "zero<U+200B>width");
    }

    #[test]
    fn per_character_so_cuts_do_not_matter() {
        let text = "x\x1b]0;t\x07y\u{202e}z";
        let whole = terminal(text).into_owned();
        for cut in (0..=text.len()).filter(|i| text.is_char_boundary(*i)) {
            let joined = format!("{}{}", terminal(&text[..cut]), terminal(&text[cut..]));
            assert_eq!(joined, whole, "cut at {cut}");
        }
    }

    #[test]
    fn approval_values_cannot_hide_their_tail() {
        let v = json!("ls -la\r\x1b[K\u{202e}");
        assert_eq!(approval_value(&v, 100), "\"ls -la\\r\\u001b[K<U+202E>\"");
        let long = json!(format!("{}; rm -rf ~", " ".repeat(50)));
        let shown = approval_value(&long, 20);
        assert!(shown.contains("more characters not shown"), "{shown}");
    }
}
