//! Reading command input: a path, or standard input when absent or `-`.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

/// Reads all of `path` (or stdin for `None` / `-`) as bytes.
pub fn read_input(path: Option<&Path>) -> Result<Vec<u8>, String> {
    match path {
        None => read_stdin(),
        Some(p) if p.as_os_str() == "-" => read_stdin(),
        Some(p) => fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display())),
    }
}

fn read_stdin() -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    io::stdin()
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read standard input: {e}"))?;
    Ok(buf)
}

/// Splits input into lines (`\n` or `\r\n`), numbering them from 1 and
/// skipping blank ones. A line that is not UTF-8 is reported as an error.
pub fn numbered_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, Result<&str, String>)> {
    bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            (
                i + 1,
                std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}")),
            )
        })
        .filter(|(_, line)| !matches!(line, Ok(l) if l.trim().is_empty()))
}
