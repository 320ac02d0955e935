//! Incremental SSE framing (5.10).
//!
//! [`SseFramer::push`] takes the body in pieces of any size and reports each
//! dispatched `data` payload and each comment to a callback. The pieces may
//! split a line, a CRLF pair or a UTF-8 sequence anywhere: the events are the
//! same whatever the split.
//!
//! Decoding (SSE-1) is per line: line terminators are ASCII, so decoding each
//! line on its own with replacement of invalid sequences (U+FFFD, maximal
//! subparts) gives the same text as the reference's incremental decoder.
//! A `\r` ends its line at once and swallows one directly following `\n`,
//! even in the next piece (SSE-2); so a trailing `\r` at the end of the body
//! is a line terminator (the Q-13 recommendation, not the reference quirk).
//!
//! Payloads are borrowed from the input piece whenever the whole event lies in
//! it (the common case), so the hot path copies nothing.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

/// One thing the framer reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseEvent<'a> {
    /// A dispatched event's data (SSE-3), e.g. a JSON payload or `[DONE]`.
    Data(&'a str),
    /// A comment line's text after `:` and one optional space (SSE-4).
    Comment(&'a str),
    /// The data of an event whose `event` field was `error`; only reported
    /// by a framer made with `error_events` on ([`SseFramer::with_options`]),
    /// otherwise such data is a plain [`SseEvent::Data`] (SSE-5).
    Error(&'a str),
}

/// [`SseEvent`] before UTF-8 decoding (the decoder's fast path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawEvent<'a> {
    /// A dispatched event's data bytes.
    Data(&'a [u8]),
    /// A comment's bytes.
    Comment(&'a [u8]),
    /// The data bytes of an `event: error` event (error events on).
    Error(&'a [u8]),
}

/// The default bound on one SSE line and on one event's data, in bytes
/// (16 MiB).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// A line or an event's data grew beyond the framer's limit: the body is
/// not read further (an endless line would otherwise be buffered until
/// allocation fails).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SseLimitError {
    /// The limit, in bytes.
    pub limit: usize,
}

impl core::fmt::Display for SseLimitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "SSE line or event larger than the limit of {} bytes (maxEventBytes)",
            self.limit
        )
    }
}

impl core::error::Error for SseLimitError {}

impl From<SseLimitError> for dsh_core::LlmError {
    fn from(e: SseLimitError) -> Self {
        dsh_core::LlmError::coded(
            crate::codes::RESPONSE_TOO_LARGE,
            &error_text!("response too large", "{e}"),
        )
    }
}

/// The exact `[DONE]` marker (SSE-6).
pub const DONE: &str = "[DONE]";

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Where the pending event's data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// No `data` field since the last dispatch.
    None,
    /// One `data` value, at this range of the current input piece.
    Borrowed(usize, usize),
    /// In `SseFramer::data`.
    Owned,
}

/// The incremental SSE framer (see the module docs).
#[derive(Clone, Debug)]
pub struct SseFramer {
    /// A partial line carried over from the previous piece.
    line: Vec<u8>,
    /// The pending event's data when it is not borrowed.
    data: Vec<u8>,
    pending: Pending,
    /// The previous byte was a `\r` line end: skip one `\n`.
    skip_lf: bool,
    /// How many bytes of a leading BOM have been matched; `None` once past it.
    bom: Option<usize>,
    done: bool,
    /// Bound on a line and on an event's data.
    max: usize,
    /// Report `event: error` events as [`RawEvent::Error`].
    error_events: bool,
    /// The pending event has `event: error`.
    event_error: bool,
}

impl Default for SseFramer {
    fn default() -> Self {
        SseFramer::new()
    }
}

impl SseFramer {
    /// A framer at the start of a body, exactly as the reference frames
    /// (5.10), with lines and events bounded by [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        SseFramer::with_options(DEFAULT_MAX_EVENT_BYTES, false)
    }

    /// A framer bounding every line and every event's data to
    /// `max_event_bytes` (at least 1), reporting `event: error` events
    /// separately when `error_events` is on.
    pub fn with_options(max_event_bytes: usize, error_events: bool) -> Self {
        SseFramer {
            line: Vec::new(),
            data: Vec::new(),
            pending: Pending::None,
            skip_lf: false,
            bom: Some(0),
            done: false,
            max: max_event_bytes.max(1),
            error_events,
            event_error: false,
        }
    }

    fn limit<E: From<SseLimitError>>(&self, len: usize) -> Result<(), E> {
        if len > self.max {
            Err(E::from(SseLimitError { limit: self.max }))
        } else {
            Ok(())
        }
    }

    /// Whether `[DONE]` was dispatched; all later input is ignored (SSE-6).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds one piece of the body. `on_event` sees every dispatched payload
    /// and comment in order; an error from it stops framing and is returned
    /// (the framer should then be dropped).
    ///
    /// A line or an event's data longer than the limit fails with
    /// [`SseLimitError`] (converted into `E`), whatever the split.
    pub fn push<E: From<SseLimitError>>(
        &mut self,
        input: &[u8],
        on_event: &mut impl FnMut(SseEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.push_raw(input, &mut |event| match event {
            RawEvent::Data(d) => on_event(SseEvent::Data(&decode(d))),
            RawEvent::Comment(c) => on_event(SseEvent::Comment(&decode(c))),
            RawEvent::Error(d) => on_event(SseEvent::Error(&decode(d))),
        })
    }

    /// [`SseFramer::push`] without UTF-8 decoding.
    pub(crate) fn push_raw<E: From<SseLimitError>>(
        &mut self,
        mut input: &[u8],
        on_event: &mut impl FnMut(RawEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.done {
            return Ok(());
        }
        if let Some(matched) = self.bom {
            let mut m = matched;
            while m < BOM.len() {
                match input.first() {
                    None => {
                        self.bom = Some(m);
                        return Ok(());
                    }
                    Some(b) if *b == BOM[m] => {
                        m += 1;
                        input = &input[1..];
                    }
                    Some(_) => break,
                }
            }
            self.bom = None;
            if m < BOM.len() {
                // Not a BOM after all: the matched bytes start the first line.
                self.line.extend_from_slice(&BOM[..m]);
            }
        }
        let result = self.lines(input, on_event);
        // Data borrowed from this piece must outlive it.
        if let Pending::Borrowed(start, end) = self.pending {
            self.data.clear();
            self.data
                .extend_from_slice(input.get(start..end).unwrap_or_default());
            self.pending = Pending::Owned;
        }
        result
    }

    fn lines<E: From<SseLimitError>>(
        &mut self,
        input: &[u8],
        on_event: &mut impl FnMut(RawEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut pos = 0;
        if self.skip_lf {
            if input.first() == Some(&b'\n') {
                pos = 1;
            }
            if !input.is_empty() {
                self.skip_lf = false;
            }
        }
        while pos < input.len() {
            // A blank line (the end of an event, every other line of a
            // stream) needs no search: what the search below does for it.
            if input[pos] == b'\n' && self.line.is_empty() {
                self.line_borrowed(input, pos, pos, on_event)?;
                if self.done {
                    return Ok(());
                }
                pos += 1;
                continue;
            }
            let rest = &input[pos..];
            let Some(rel) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.limit(self.line.len() + rest.len())?;
                self.line.extend_from_slice(rest);
                return Ok(());
            };
            let end = pos + rel;
            let is_cr = input[end] == b'\r';
            let next = if is_cr {
                match input.get(end + 1) {
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                    None => {
                        self.skip_lf = true;
                        end + 1
                    }
                }
            } else {
                end + 1
            };
            self.limit(self.line.len() + (end - pos))?;
            if self.line.is_empty() {
                self.line_borrowed(input, pos, end, on_event)?;
            } else {
                self.line.extend_from_slice(&input[pos..end]);
                let line = core::mem::take(&mut self.line);
                let r = self.line_owned(&line, input, on_event);
                self.line = line;
                self.line.clear();
                r?;
            }
            if self.done {
                return Ok(());
            }
            pos = next;
        }
        Ok(())
    }

    /// A complete line at `input[start..end]`.
    fn line_borrowed<E: From<SseLimitError>>(
        &mut self,
        input: &[u8],
        start: usize,
        end: usize,
        on_event: &mut impl FnMut(RawEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let line = &input[start..end];
        if line.is_empty() {
            return self.dispatch(input, on_event);
        }
        match field(line) {
            Field::Comment(text) => on_event(RawEvent::Comment(text)),
            Field::Data(offset) => {
                let (vs, ve) = (start + offset, end);
                match self.pending {
                    Pending::None => self.pending = Pending::Borrowed(vs, ve),
                    Pending::Borrowed(s, e) => {
                        self.limit((e - s) + 1 + (ve - vs))?;
                        self.data.clear();
                        self.data.extend_from_slice(&input[s..e]);
                        self.data.push(b'\n');
                        self.data.extend_from_slice(&input[vs..ve]);
                        self.pending = Pending::Owned;
                    }
                    Pending::Owned => {
                        self.limit(self.data.len() + 1 + (ve - vs))?;
                        self.data.push(b'\n');
                        self.data.extend_from_slice(&input[vs..ve]);
                    }
                }
                Ok(())
            }
            Field::Event(value) => {
                self.event_error = value == b"error";
                Ok(())
            }
            Field::Other => Ok(()),
        }
    }

    /// A complete line assembled in a buffer (it spanned pieces).
    fn line_owned<E: From<SseLimitError>>(
        &mut self,
        line: &[u8],
        input: &[u8],
        on_event: &mut impl FnMut(RawEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if line.is_empty() {
            return self.dispatch(input, on_event);
        }
        match field(line) {
            Field::Comment(text) => on_event(RawEvent::Comment(text)),
            Field::Data(offset) => {
                let value = &line[offset..];
                match self.pending {
                    Pending::None => {
                        self.data.clear();
                        self.data.extend_from_slice(value);
                    }
                    Pending::Borrowed(s, e) => {
                        self.limit((e - s) + 1 + value.len())?;
                        self.data.clear();
                        self.data.extend_from_slice(&input[s..e]);
                        self.data.push(b'\n');
                        self.data.extend_from_slice(value);
                    }
                    Pending::Owned => {
                        self.limit(self.data.len() + 1 + value.len())?;
                        self.data.push(b'\n');
                        self.data.extend_from_slice(value);
                    }
                }
                self.pending = Pending::Owned;
                Ok(())
            }
            Field::Event(value) => {
                self.event_error = value == b"error";
                Ok(())
            }
            Field::Other => Ok(()),
        }
    }

    /// A blank line: dispatch the pending event, if any (SSE-3).
    fn dispatch<E>(
        &mut self,
        input: &[u8],
        on_event: &mut impl FnMut(RawEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let pending = core::mem::replace(&mut self.pending, Pending::None);
        let error = core::mem::take(&mut self.event_error) && self.error_events;
        match pending {
            Pending::None => Ok(()),
            Pending::Borrowed(s, e) if error => on_event(RawEvent::Error(&input[s..e])),
            Pending::Owned if error => {
                let data = core::mem::take(&mut self.data);
                let r = on_event(RawEvent::Error(&data));
                self.data = data;
                self.data.clear();
                r
            }
            Pending::Borrowed(s, e) => self.emit(&input[s..e], on_event),
            Pending::Owned => {
                let data = core::mem::take(&mut self.data);
                let r = self.emit(&data, on_event);
                self.data = data;
                self.data.clear();
                r
            }
        }
    }

    fn emit<E>(
        &mut self,
        data: &[u8],
        on_event: &mut impl FnMut(RawEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if data == DONE.as_bytes() {
            self.done = true;
        }
        on_event(RawEvent::Data(data))
    }
}

enum Field<'a> {
    /// A comment's text.
    Comment(&'a [u8]),
    /// A `data` field; its value starts at this offset of the line.
    Data(usize),
    /// An `event` field's value.
    Event(&'a [u8]),
    /// Any other field (SSE-5: ignored).
    Other,
}

fn field(line: &[u8]) -> Field<'_> {
    if let Some(text) = line.strip_prefix(b":") {
        return Field::Comment(text.strip_prefix(b" ").unwrap_or(text));
    }
    match memchr::memchr(b':', line) {
        Some(4) if line.starts_with(b"data") => {
            if line.get(5) == Some(&b' ') {
                Field::Data(6)
            } else {
                Field::Data(5)
            }
        }
        None if line == b"data" => Field::Data(4),
        Some(5) if line.starts_with(b"event") => {
            let value = &line[6..];
            Field::Event(value.strip_prefix(b" ").unwrap_or(value))
        }
        None if line == b"event" => Field::Event(b""),
        _ => Field::Other,
    }
}

/// UTF-8 with replacement (SSE-1).
fn decode(bytes: &[u8]) -> Cow<'_, str> {
    match core::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(String::from_utf8_lossy(bytes).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    /// Frames `pieces`, returning payloads, comments and whether `[DONE]` came.
    fn frame(pieces: &[&[u8]]) -> (Vec<String>, Vec<String>, bool) {
        let mut framer = SseFramer::new();
        let mut data = Vec::new();
        let mut comments = Vec::new();
        for piece in pieces {
            framer
                .push::<SseLimitError>(piece, &mut |e| {
                    match e {
                        SseEvent::Data(d) | SseEvent::Error(d) => data.push(d.to_string()),
                        SseEvent::Comment(c) => comments.push(c.to_string()),
                    }
                    Ok(())
                })
                .unwrap();
        }
        (data, comments, framer.is_done())
    }

    fn s(pieces: &[&str]) -> (Vec<String>, Vec<String>, bool) {
        let bytes: Vec<&[u8]> = pieces.iter().map(|p| p.as_bytes()).collect();
        frame(&bytes)
    }

    #[test]
    fn sv_vectors() {
        let done = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // SV-1
        assert_eq!(
            s(&["data: {\"a\":1}\n\ndata: [DONE]\n\n"]).0,
            done(&["{\"a\":1}", "[DONE]"])
        );
        // SV-2
        assert_eq!(
            s(&["data: {\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n"]).0,
            done(&["{\"a\":1}", "[DONE]"])
        );
        // SV-3
        assert_eq!(
            s(&["da", "ta: {\"a\"", ":1}\n", "\ndata: [DO", "NE]\n\n"]).0,
            done(&["{\"a\":1}", "[DONE]"])
        );
        // SV-4
        assert_eq!(
            s(&["data: x\r", "\n\r", "\ndata: [DONE]\n\n"]).0,
            done(&["x", "[DONE]"])
        );
        // SV-5
        assert_eq!(
            s(&["data: {\"a\":\ndata: 1}\n\ndata: [DONE]\n\n"]).0,
            done(&["{\"a\":\n1}", "[DONE]"])
        );
        // SV-6
        let (d, c, _) = s(&[": keep-alive\n\ndata: x\n\ndata: [DONE]\n\n"]);
        assert_eq!(d, done(&["x", "[DONE]"]));
        assert_eq!(c, done(&["keep-alive"]));
        // SV-7
        assert_eq!(s(&["data:\n\ndata: [DONE]\n\n"]).0, done(&["", "[DONE]"]));
        // SV-8
        let (d, _, ok) = frame(&[
            &[0x64, 0x61, 0x74, 0x61, 0x3A, 0x20, 0xE4],
            &[0xBD, 0xA0, 0x0A, 0x0A],
            b"data: [DONE]\n\n",
        ]);
        assert_eq!(d, done(&["你", "[DONE]"]));
        assert!(ok);
        // SV-9
        let (d, _, ok) = s(&["data: [DONE]\n\ndata: {\"late\":1}\n\n"]);
        assert_eq!(d, done(&["[DONE]"]));
        assert!(ok);
        // SV-10
        let (d, _, ok) = s(&["data: {\"a\":1}\n\n"]);
        assert_eq!(d, done(&["{\"a\":1}"]));
        assert!(!ok);
        // SV-11: an unterminated [DONE] is never dispatched.
        let (d, _, ok) = s(&["data: {\"a\":1}\n\ndata: [DONE]"]);
        assert_eq!(d, done(&["{\"a\":1}"]));
        assert!(!ok);
        let (_, _, ok) = s(&["data: [DONE]\n"]);
        assert!(!ok, "SSE-7: [DONE] without its blank line");
        // SV-12
        assert_eq!(
            s(&["id: 5\nretry: 100\nfoo: bar\nevent: error\ndata: x\n\ndata: [DONE]\n\n"]).0,
            done(&["x", "[DONE]"])
        );
    }

    #[test]
    fn comments_and_fields() {
        let (d, c, _) = s(&[":ping\n", ":  two\n", "data\n\n", "data:[DONE]\n\n"]);
        assert_eq!(c, vec![String::from("ping"), String::from(" two")]);
        assert_eq!(d, vec![String::from(""), String::from("[DONE]")]);
        // SSE-6: two spaces keep one.
        assert_eq!(s(&["data:  [DONE]\n\n"]).0, vec![String::from(" [DONE]")]);
        // Blank lines without data dispatch nothing; `dataX: y` is another field.
        assert_eq!(s(&["\n\n\ndatax: y\n\n"]).0, Vec::<String>::new());
    }

    #[test]
    fn q13_trailing_cr_ends_the_line() {
        let (d, _, ok) = s(&["data: x\r\rdata: [DONE]\r\r"]);
        assert_eq!(d, vec![String::from("x"), String::from("[DONE]")]);
        assert!(ok);
    }

    #[test]
    fn bom_is_stripped_once_even_when_split() {
        let (d, _, _) = frame(&[&[0xEF], &[0xBB, 0xBF], b"data: a\n\n"]);
        assert_eq!(d, vec![String::from("a")]);
        // A second BOM is data.
        let (d, _, _) = frame(&[&[0xEF, 0xBB, 0xBF, 0xEF, 0xBB, 0xBF], b"data: a\n\n"]);
        assert!(d.is_empty(), "the line starts with U+FEFF, not `data`");
        // A partial BOM followed by something else is kept (as U+FFFD).
        let (_, c, _) = frame(&[&[0xEF, 0xBB], b"\n:c\n"]);
        assert_eq!(c, vec![String::from("c")]);
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let (d, _, _) = frame(&[b"data: a\xFFb\xE4\n\n"]);
        assert_eq!(d, vec![String::from("a\u{FFFD}b\u{FFFD}")]);
    }

    /// Frames `body` split into `piece`-byte reads with a `max`-byte limit.
    fn limited(body: &[u8], piece: usize, max: usize) -> Result<Vec<String>, SseLimitError> {
        let mut framer = SseFramer::with_options(max, true);
        let mut data = Vec::new();
        for p in body.chunks(piece) {
            framer.push::<SseLimitError>(p, &mut |e| {
                match e {
                    SseEvent::Data(d) => data.push(d.to_string()),
                    SseEvent::Error(d) => data.push(alloc::format!("error:{d}")),
                    _ => {}
                }
                Ok(())
            })?;
        }
        Ok(data)
    }

    #[test]
    fn an_endless_line_is_a_typed_error_whatever_the_split() {
        // An unterminated line longer than the limit fails at once, split or not.
        let endless = vec![b'x'; 100];
        for piece in [1, 7, 100] {
            assert_eq!(
                limited(&endless, piece, 64),
                Err(SseLimitError { limit: 64 })
            );
        }
        // So does a long `data` event assembled from short lines.
        let many = "data: 0123456789\n".repeat(10);
        for piece in [1, 5, many.len()] {
            assert_eq!(
                limited(many.as_bytes(), piece, 64),
                Err(SseLimitError { limit: 64 })
            );
        }
        // At the limit it is fine.
        let ok = "data: 0123456789\n\n";
        assert_eq!(limited(ok.as_bytes(), 3, 16).unwrap(), vec!["0123456789"]);
        let e: dsh_core::LlmError = SseLimitError { limit: 64 }.into();
        assert_eq!(e.failure().code, "RESPONSE_TOO_LARGE");
        assert!(
            e.failure().message.contains("64 bytes"),
            "{}",
            e.failure().message
        );
    }

    #[test]
    fn error_events_are_reported_only_when_asked() {
        let body = b"event: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\ndata: x\n\n";
        assert_eq!(
            limited(body, 4, 1024).unwrap(),
            vec!["error:{\"error\":{\"message\":\"boom\"}}", "x"]
        );
        // SV-12: the reference framer ignores the event type.
        let (d, _, _) = frame(&[body]);
        assert_eq!(d, vec!["{\"error\":{\"message\":\"boom\"}}", "x"]);
    }
}
