//! A small HTTP/1.1 client codec for the model link: the request head, an
//! incremental response-head parser over a fixed-capacity buffer, and the
//! body framings (chunked, `Content-Length`, close-delimited).
//!
//! Everything is incremental and split-proof: the response may arrive in
//! pieces of any size, cut anywhere. Nothing panics on any input: malformed
//! bytes give an [`HttpError`].

use core::fmt;
use embedded_io::Write;
use heapless::{String as HString, Vec as HVec};

/// Capacity of the response-head buffer (status line and headers).
pub const MAX_HEAD: usize = 1024;

/// Capacity of a kept header value (`retry-after`, request ids); a longer
/// value is dropped rather than truncated.
pub const MAX_HEADER_VALUE: usize = 96;

/// Why a response could not be read as HTTP/1.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum HttpError {
    /// The status line and headers do not fit in [`MAX_HEAD`] bytes.
    HeadTooLarge,
    /// The first line is not `HTTP/1.x NNN reason`.
    BadStatusLine,
    /// A header line has no `:` or an empty or malformed name.
    BadHeader,
    /// `Content-Length` is not a decimal number, or repeated with another
    /// value.
    BadContentLength,
    /// A chunk-size line or a chunk's trailing CRLF is malformed.
    BadChunk,
    /// The link ended before the response head was complete.
    TruncatedHead,
    /// The link ended inside the body (before the chunked terminator or
    /// before `Content-Length` bytes).
    TruncatedBody,
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HttpError::HeadTooLarge => "the response head is too large",
            HttpError::BadStatusLine => "the status line is malformed",
            HttpError::BadHeader => "a header line is malformed",
            HttpError::BadContentLength => "the content-length is malformed",
            HttpError::BadChunk => "the chunked framing is malformed",
            HttpError::TruncatedHead => "the connection closed inside the response head",
            HttpError::TruncatedBody => "the connection closed inside the response body",
        })
    }
}

impl core::error::Error for HttpError {}

/// Writes `POST path HTTP/1.1` with `headers`, `Content-Length` and
/// `Connection: close`, then `body`, then flushes.
pub fn write_request<W: Write>(
    link: &mut W,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(), W::Error> {
    let mut len = [0u8; 20];
    let len = decimal(body.len() as u64, &mut len);
    link.write_all(b"POST ")?;
    link.write_all(path.as_bytes())?;
    link.write_all(b" HTTP/1.1\r\nhost: ")?;
    link.write_all(host.as_bytes())?;
    for (name, value) in headers {
        link.write_all(b"\r\n")?;
        link.write_all(name.as_bytes())?;
        link.write_all(b": ")?;
        link.write_all(value.as_bytes())?;
    }
    link.write_all(b"\r\ncontent-length: ")?;
    link.write_all(len)?;
    link.write_all(b"\r\nconnection: close\r\n\r\n")?;
    link.write_all(body)?;
    link.flush()
}

fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Framing {
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// `Content-Length` bytes.
    Length(u64),
    /// Until the link closes.
    Close,
}

/// A parsed response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The body framing.
    pub framing: Framing,
    /// `retry-after`, when present and short enough.
    pub retry_after: Option<HString<MAX_HEADER_VALUE>>,
    /// `x-request-id`.
    pub x_request_id: Option<HString<MAX_HEADER_VALUE>>,
    /// `x-deepseek-request-id`.
    pub x_deepseek_request_id: Option<HString<MAX_HEADER_VALUE>>,
}

/// The incremental response-head parser over a [`MAX_HEAD`]-byte buffer.
/// Interim `1xx` responses (other than `101`) are skipped.
#[derive(Clone, Debug, Default)]
pub struct HeadParser {
    buf: HVec<u8, MAX_HEAD>,
}

impl HeadParser {
    /// A parser at the start of a response.
    pub fn new() -> Self {
        HeadParser::default()
    }

    /// Feeds bytes. Returns the head and how many bytes of `input` it
    /// used (the rest starts the body) once the blank line is seen.
    pub fn push(&mut self, input: &[u8]) -> Result<Option<(Head, usize)>, HttpError> {
        for (i, b) in input.iter().enumerate() {
            if self.buf.push(*b).is_err() {
                return Err(HttpError::HeadTooLarge);
            }
            if self.buf.ends_with(b"\n\r\n") || self.buf.ends_with(b"\n\n") {
                let head = parse_head(&self.buf)?;
                self.buf.clear();
                if (100..200).contains(&head.status) && head.status != 101 {
                    continue;
                }
                return Ok(Some((head, i + 1)));
            }
        }
        Ok(None)
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\r', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r'] = s {
        s = rest;
    }
    s
}

fn kept(value: &[u8]) -> Option<HString<MAX_HEADER_VALUE>> {
    let text = core::str::from_utf8(value).ok()?;
    let mut s = HString::new();
    s.push_str(text).ok()?;
    Some(s)
}

fn parse_status(line: &[u8]) -> Result<u16, HttpError> {
    let rest = line
        .strip_prefix(b"HTTP/1.")
        .ok_or(HttpError::BadStatusLine)?;
    match rest {
        [v, b' ', a, b, c, tail @ ..]
            if v.is_ascii_digit()
                && [a, b, c].iter().all(|d| d.is_ascii_digit())
                && matches!(tail.first(), None | Some(b' ')) =>
        {
            Ok(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => Err(HttpError::BadStatusLine),
    }
}

fn parse_length(value: &[u8]) -> Result<u64, HttpError> {
    if value.is_empty() || value.len() > 19 {
        return Err(HttpError::BadContentLength);
    }
    let mut n: u64 = 0;
    for d in value {
        if !d.is_ascii_digit() {
            return Err(HttpError::BadContentLength);
        }
        n = n * 10 + u64::from(d - b'0');
    }
    Ok(n)
}

fn parse_head(buf: &[u8]) -> Result<Head, HttpError> {
    let mut lines = buf.split(|b| *b == b'\n').map(trim);
    let status = parse_status(lines.next().unwrap_or_default())?;
    let mut head = Head {
        status,
        framing: Framing::Close,
        retry_after: None,
        x_request_id: None,
        x_deepseek_request_id: None,
    };
    let mut chunked = false;
    let mut length: Option<u64> = None;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let colon = line
            .iter()
            .position(|b| *b == b':')
            .ok_or(HttpError::BadHeader)?;
        let (name, value) = line.split_at(colon);
        let value = trim(value.get(1..).unwrap_or_default());
        if name.is_empty() || name.iter().any(|b| !b.is_ascii_graphic()) {
            return Err(HttpError::BadHeader);
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding decides (RFC 9112 6.1); anything but chunked
            // is read until close.
            let last = value.rsplit(|b| *b == b',').next().map(trim);
            chunked = last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_length(value)?;
            if length.is_some_and(|m| m != n) {
                return Err(HttpError::BadContentLength);
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"retry-after") {
            head.retry_after = kept(value);
        } else if name.eq_ignore_ascii_case(b"x-request-id") {
            head.x_request_id = kept(value);
        } else if name.eq_ignore_ascii_case(b"x-deepseek-request-id") {
            head.x_deepseek_request_id = kept(value);
        }
    }
    head.framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Close,
    };
    Ok(head)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    Size { value: u64, digits: u8 },
    Extension { value: u64 },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    Trailer { line_start: bool },
    Done,
}

/// The incremental `Transfer-Encoding: chunked` decoder. Bare `\n` line
/// ends are accepted; chunk extensions and trailers are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: Chunk,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: Chunk::Size {
                value: 0,
                digits: 0,
            },
        }
    }

    /// Whether the terminating zero-size chunk and its trailer were read.
    pub fn is_done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Decodes from the front of `input`, advancing it, and returns the
    /// next piece of body data (empty when `input` ran out first, or the
    /// body is complete: bytes after it are consumed and ignored).
    pub fn next<'a>(&mut self, input: &mut &'a [u8]) -> Result<&'a [u8], HttpError> {
        while let Some((&b, rest)) = input.split_first() {
            if let Chunk::Data(left) = self.state {
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                let (data, rest) = input.split_at(n);
                *input = rest;
                let left = left - n as u64;
                self.state = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                return Ok(data);
            }
            if self.state == Chunk::Done {
                // Bytes after the body are ignored.
                *input = &[];
                return Ok(&[]);
            }
            *input = rest;
            self.state = match self.state {
                Chunk::Size { value, digits } => match b {
                    b'\r' | b'\n' | b';' | b' ' | b'\t' if digits == 0 => {
                        return Err(HttpError::BadChunk);
                    }
                    b'\r' => Chunk::SizeLf { value },
                    b'\n' => size_done(value),
                    b';' | b' ' | b'\t' => Chunk::Extension { value },
                    _ => {
                        let d = hex(b).ok_or(HttpError::BadChunk)?;
                        if digits >= 15 {
                            return Err(HttpError::BadChunk);
                        }
                        Chunk::Size {
                            value: value * 16 + d,
                            digits: digits + 1,
                        }
                    }
                },
                Chunk::Extension { value } => match b {
                    b'\n' => size_done(value),
                    _ => Chunk::Extension { value },
                },
                Chunk::SizeLf { value } => match b {
                    b'\n' => size_done(value),
                    _ => return Err(HttpError::BadChunk),
                },
                Chunk::DataCr => match b {
                    b'\r' => Chunk::DataLf,
                    b'\n' => Chunk::Size {
                        value: 0,
                        digits: 0,
                    },
                    _ => return Err(HttpError::BadChunk),
                },
                Chunk::DataLf => match b {
                    b'\n' => Chunk::Size {
                        value: 0,
                        digits: 0,
                    },
                    _ => return Err(HttpError::BadChunk),
                },
                Chunk::Trailer { line_start } => match b {
                    b'\r' => Chunk::Trailer { line_start },
                    b'\n' if line_start => Chunk::Done,
                    b'\n' => Chunk::Trailer { line_start: true },
                    _ => Chunk::Trailer { line_start: false },
                },
                // Handled above.
                Chunk::Data(left) => Chunk::Data(left),
                Chunk::Done => Chunk::Done,
            };
        }
        Ok(&[])
    }
}

fn size_done(value: u64) -> Chunk {
    if value == 0 {
        Chunk::Trailer { line_start: true }
    } else {
        Chunk::Data(value)
    }
}

fn hex(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some(u64::from(b - b'0')),
        b'a'..=b'f' => Some(u64::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(u64::from(b - b'A' + 10)),
        _ => None,
    }
}

/// A response body being read under its [`Framing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// Chunked.
    Chunked(ChunkedDecoder),
    /// This many bytes are left.
    Length(u64),
    /// Until the link closes.
    Close,
}

impl Body {
    /// The body reader for `framing`.
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Chunked => Body::Chunked(ChunkedDecoder::new()),
            Framing::Length(n) => Body::Length(n),
            Framing::Close => Body::Close,
        }
    }

    /// Whether the whole body was read (never for close-delimited).
    pub fn is_complete(&self) -> bool {
        match self {
            Body::Chunked(d) => d.is_done(),
            Body::Length(n) => *n == 0,
            Body::Close => false,
        }
    }

    /// The next piece of body data from the front of `input` (see
    /// [`ChunkedDecoder::next`]); bytes past the end of the body are
    /// consumed and ignored.
    pub fn next<'a>(&mut self, input: &mut &'a [u8]) -> Result<&'a [u8], HttpError> {
        match self {
            Body::Chunked(d) => d.next(input),
            Body::Length(left) => {
                let n = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(input.len());
                let (data, _) = input.split_at(n);
                *input = &[];
                *left -= n as u64;
                Ok(data)
            }
            Body::Close => Ok(core::mem::take(input)),
        }
    }

    /// The link closed: an error unless the body is complete or
    /// close-delimited.
    pub fn end(&self) -> Result<(), HttpError> {
        match self {
            Body::Close => Ok(()),
            _ if self.is_complete() => Ok(()),
            _ => Err(HttpError::TruncatedBody),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn head(text: &[u8]) -> Result<Option<(Head, usize)>, HttpError> {
        HeadParser::new().push(text)
    }

    #[test]
    fn request_head_has_length_and_close() {
        let mut out: Vec<u8> = Vec::new();
        write_request(
            &mut out,
            "h:1",
            "/chat/completions",
            &[("accept", "text/event-stream")],
            b"{}",
        )
        .unwrap();
        assert_eq!(
            out,
            b"POST /chat/completions HTTP/1.1\r\nhost: h:1\r\naccept: text/event-stream\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
        );
    }

    #[test]
    fn head_framings_and_headers() {
        let (h, used) = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nXYZ")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.framing, used), (200, Framing::Chunked, 47));
        let (h, _) = head(
            b"HTTP/1.0 429 Too Many\r\ncontent-length: 12\r\nRetry-After: 3\r\nx-request-id: r1\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, Framing::Length(12));
        assert_eq!(h.retry_after.as_deref(), Some("3"));
        assert_eq!(h.x_request_id.as_deref(), Some("r1"));
        let (h, _) = head(b"HTTP/1.1 200\n\n").unwrap().unwrap();
        assert_eq!((h.status, h.framing), (200, Framing::Close));
        // An interim 100 Continue is skipped.
        let (h, _) = head(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.status, 204);
    }

    #[test]
    fn head_split_anywhere_gives_the_same_head() {
        let text =
            b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\nx-deepseek-request-id: d\r\n\r\nhello";
        let (whole, used) = head(text).unwrap().unwrap();
        for cut in 0..text.len() {
            let mut p = HeadParser::new();
            let got = match p.push(&text[..cut]).unwrap() {
                Some((h, n)) => (h, n),
                None => {
                    let (h, n) = p.push(&text[cut..]).unwrap().unwrap();
                    (h, cut + n)
                }
            };
            assert_eq!(got, (whole.clone(), used));
        }
    }

    #[test]
    fn garbage_heads_are_typed_errors() {
        assert_eq!(head(b"SSH-2.0-x\r\n\r\n"), Err(HttpError::BadStatusLine));
        assert_eq!(
            head(b"HTTP/1.1 2x0 OK\r\n\r\n"),
            Err(HttpError::BadStatusLine)
        );
        assert_eq!(
            head(b"HTTP/1.1 200OK\r\n\r\n"),
            Err(HttpError::BadStatusLine)
        );
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"),
            Err(HttpError::BadHeader)
        );
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"),
            Err(HttpError::BadContentLength)
        );
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"),
            Err(HttpError::BadContentLength)
        );
        assert_eq!(head(&[b'x'; MAX_HEAD + 1]), Err(HttpError::HeadTooLarge));
        assert_eq!(head(b"HTTP/1.1 200 OK\r\n"), Ok(None));
    }

    fn dechunk(body: &[u8], step: usize) -> Result<(Vec<u8>, bool), HttpError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        for piece in body.chunks(step.max(1)) {
            let mut input = piece;
            while !input.is_empty() {
                out.extend_from_slice(d.next(&mut input)?);
            }
        }
        Ok((out, d.is_done()))
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_split() {
        let body = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\nIGNORED";
        for step in 1..body.len() {
            assert_eq!(
                dechunk(body, step).unwrap(),
                (b"hello, world".to_vec(), true)
            );
        }
        assert_eq!(
            dechunk(b"A\nabcdefghij\n0\n\n", 3).unwrap(),
            (b"abcdefghij".to_vec(), true)
        );
    }

    #[test]
    fn malformed_chunks_are_typed_errors() {
        for bad in [
            &b"zz\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5\rX",
            b"ffffffffffffffff\r\n",
        ] {
            assert_eq!(dechunk(bad, 1), Err(HttpError::BadChunk), "{bad:?}");
        }
        // Truncated: no error from the decoder, but the body is not complete.
        let mut body = Body::new(Framing::Chunked);
        let mut input = &b"5\r\nhel"[..];
        assert_eq!(body.next(&mut input), Ok(&b"hel"[..]));
        assert_eq!(body.end(), Err(HttpError::TruncatedBody));
    }

    #[test]
    fn length_and_close_bodies() {
        let mut body = Body::new(Framing::Length(3));
        let mut input = &b"abcdef"[..];
        assert_eq!(body.next(&mut input), Ok(&b"abc"[..]));
        assert!(input.is_empty() && body.is_complete() && body.end().is_ok());
        let short = Body::new(Framing::Length(3));
        assert_eq!(short.end(), Err(HttpError::TruncatedBody));
        let mut close = Body::new(Framing::Close);
        let mut input = &b"xy"[..];
        assert_eq!(close.next(&mut input), Ok(&b"xy"[..]));
        assert!(!close.is_complete() && close.end().is_ok());
    }
}
