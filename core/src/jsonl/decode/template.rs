//! The canonical-line templates' reading tools: a cursor over the exact
//! text the writer produces, the `assistant/chunk` delta template, and the
//! length a canonical chunk line has.

use alloc::string::String;

use crate::json::MAX_SAFE_INTEGER;
use crate::session::{EventData, SessionEvent};
use crate::text::ToolCallHead;

/// The position of the first byte of `bytes` that ends the plain run of a
/// JSON string: `"`, `\\` or a control character (below 0x20).
///
/// Sixteen bytes per step, eight per `u64` word. For a word `x`, a lane's
/// `lane - k` borrows (sets its high bit) exactly when the lane is below
/// `k`, so `(x ^ q) - 1`, `(x ^ b) - 1` and `x - 0x20` flag a quote, a
/// backslash and a control character in a lane whose high bit is clear; the
/// `!x` mask drops the lanes whose high bit is set. A borrow only reaches
/// the lanes above a flagged one, so the lowest flagged lane is exact.
pub(in crate::jsonl) fn find_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    /// High bit of each candidate lane of `x`; the lowest one is exact.
    #[inline(always)]
    fn hits(x: u64) -> u64 {
        let quote = (x ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES);
        let backslash = (x ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES);
        let control = x.wrapping_sub(ONES * 0x20);
        (quote | backslash | control) & !x & HIGH
    }
    #[inline(always)]
    fn word(b: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        u64::from_le_bytes(w)
    }
    let mut pairs = bytes.chunks_exact(16);
    let mut base = 0;
    for pair in &mut pairs {
        let (a, b) = pair.split_at(8);
        let (ha, hb) = (hits(word(a)), hits(word(b)));
        if ha | hb != 0 {
            return Some(if ha != 0 {
                base + (ha.trailing_zeros() / 8) as usize
            } else {
                base + 8 + (hb.trailing_zeros() / 8) as usize
            });
        }
        base += 16;
    }
    let mut tail = pairs.remainder();
    if let Some((a, after)) = tail.split_at_checked(8) {
        let h = hits(word(a));
        if h != 0 {
            return Some(base + (h.trailing_zeros() / 8) as usize);
        }
        base += 8;
        tail = after;
    }
    tail.iter()
        .position(|c| *c == b'"' || *c == b'\\' || *c < 0x20)
        .map(|i| base + i)
}

/// Whether every byte of the little-endian word `x` is an ASCII digit.
fn eight_digits(x: u64) -> bool {
    const HIGH_NIBBLES: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    // A byte is a digit when its high nibble is 3 and adding 6 keeps it 3;
    // a byte whose +6 carries into the next lane fails the first test.
    (x & HIGH_NIBBLES) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES) >> 4)
        == 0x3333_3333_3333_3333
}

/// The value of the eight ASCII digits of the little-endian word `x` (the
/// first digit in the lowest byte): pairs, then quadruples, then the whole,
/// each step within its lanes (at most 99, 9999 and 99999999).
fn eight_digits_value(x: u64) -> u64 {
    let x = x & 0x0f0f_0f0f_0f0f_0f0f;
    let x = (x * 10 + (x >> 8)) & 0x00ff_00ff_00ff_00ff;
    let x = (x * 100 + (x >> 16)) & 0x0000_ffff_0000_ffff;
    (x * 10_000 + (x >> 32)) & 0xffff_ffff
}

/// A cursor over one line for the canonical-line templates.
pub(in crate::jsonl) struct Cursor<'a> {
    pub(in crate::jsonl) b: &'a [u8],
    /// The same line when it is known to be UTF-8.
    pub(in crate::jsonl) s: Option<&'a str>,
    pub(in crate::jsonl) i: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `line`; `text` is `line` when it is known
    /// to be UTF-8.
    pub(in crate::jsonl) fn new(line: &'a [u8], text: Option<&'a str>) -> Self {
        Cursor {
            b: line,
            s: text,
            i: 0,
        }
    }

    pub(in crate::jsonl) fn lit(&mut self, s: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + s.len())? == s {
            self.i += s.len();
            Some(())
        } else {
            None
        }
    }

    /// A canonical non-negative integer (no leading zero) within `max`,
    /// which is at most [`MAX_SAFE_INTEGER`].
    pub(in crate::jsonl) fn uint(&mut self, max: u64) -> Option<u64> {
        self.digits(max, false)
    }

    /// [`uint`](Self::uint); `wide` when the number usually has eight
    /// digits or more (a time), whose first eight are then read in one step.
    #[inline(always)]
    fn digits(&mut self, max: u64, wide: bool) -> Option<u64> {
        // Sixteen digits hold every value up to MAX_SAFE_INTEGER, and
        // seventeen fit a u64 unchecked: a longer run is out of range.
        let rest = self.b.get(self.i..)?;
        let mut n = 0u64;
        let mut len = 0;
        if wide && let Some(word) = rest.get(..8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            let x = u64::from_le_bytes(w);
            if eight_digits(x) {
                n = eight_digits_value(x);
                len = 8;
            }
        }
        while let Some(&c) = rest.get(len) {
            let d = c.wrapping_sub(b'0');
            if d > 9 || len == 17 {
                break;
            }
            n = n * 10 + u64::from(d);
            len += 1;
        }
        if len == 0 || len > 16 || (len > 1 && rest[0] == b'0') || n > max.min(MAX_SAFE_INTEGER) {
            return None;
        }
        self.i += len;
        Some(n)
    }

    /// A canonical safe integer; `-0` is left to the general path.
    pub(in crate::jsonl) fn int(&mut self) -> Option<i64> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
            let n = self.digits(MAX_SAFE_INTEGER, true)?;
            if n == 0 {
                return None;
            }
            return Some(-(n as i64));
        }
        self.digits(MAX_SAFE_INTEGER, true).map(|n| n as i64)
    }

    /// The body of a string without escapes or control characters, after
    /// its opening quote; consumes the closing quote.
    pub(in crate::jsonl) fn plain_str(&mut self) -> Option<&'a str> {
        let start = self.i;
        let rel = find_special(self.b.get(start..)?)?;
        let end = start + rel;
        if self.b[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        self.text(start, end)
    }

    /// The text of `b[start..end]`, where both ends sit next to ASCII bytes.
    pub(in crate::jsonl) fn text(&self, start: usize, end: usize) -> Option<&'a str> {
        match self.s {
            // Both ends are char boundaries: no second UTF-8 scan.
            Some(s) => s.get(start..end),
            None => core::str::from_utf8(&self.b[start..end]).ok(),
        }
    }

    /// The body of a string after its opening quote, as
    /// [`canonical_str`](Self::canonical_str) reads it: borrowed from the
    /// line when it has no escape, else unescaped into `buf`.
    pub(in crate::jsonl) fn body<'s>(&mut self, buf: &'s mut String) -> Option<&'s str>
    where
        'a: 's,
    {
        let start = self.i;
        if let Some(plain) = self.plain_str() {
            return Some(plain);
        }
        self.i = start;
        self.canonical_str(buf)?;
        Some(buf.as_str())
    }

    /// The body of a string after its opening quote, unescaped into `out`,
    /// accepted only when every escape is the one `write::push_str` writes
    /// (so the line writes back identically); consumes the closing quote.
    pub(in crate::jsonl) fn canonical_str(&mut self, out: &mut String) -> Option<()> {
        out.clear();
        loop {
            let start = self.i;
            let rel = find_special(self.b.get(start..)?)?;
            let end = start + rel;
            out.push_str(self.text(start, end)?);
            match self.b[end] {
                b'"' => {
                    self.i = end + 1;
                    return Some(());
                }
                b'\\' => {}
                _ => return None,
            }
            let (c, len) = match *self.b.get(end + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'u' => {
                    // `\u00XX` in lower-case hex, only for the control
                    // characters without a short form.
                    let hex = self.b.get(end + 2..end + 6)?;
                    let digit = |c: u8| match c {
                        b'0'..=b'9' => Some(c - b'0'),
                        b'a'..=b'f' => Some(c - b'a' + 10),
                        _ => None,
                    };
                    if hex[0] != b'0' || hex[1] != b'0' || hex[2] > b'1' {
                        return None;
                    }
                    let v = digit(hex[2])? * 16 + digit(hex[3])?;
                    if matches!(v, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                        return None;
                    }
                    (char::from(v), 6)
                }
                _ => return None,
            };
            out.push(c);
            self.i = end + len;
        }
    }
}

/// The canonical `assistant/chunk` delta line, read without serde: exactly
/// the text `write_event_json` produces (ids and names without escapes, the
/// payload with the escapes `write` uses). Such a line writes back
/// identically, so no source text is kept. Any other line returns `None`
/// and takes the general path. `text` is `line` when it is known to be UTF-8;
/// `buf` is scratch space for the unescaped payload.
pub(super) fn fast_chunk(
    line: &[u8],
    text: Option<&str>,
    buf: &mut String,
    last: &mut Option<ToolCallHead>,
) -> Option<SessionEvent> {
    let mut c = Cursor::new(line, text);
    c.lit(b"{\"type\":\"assistant/chunk\",\"seq\":")?;
    let seq = c.uint(MAX_SAFE_INTEGER)?;
    c.lit(b",\"time\":")?;
    let time = c.int()?;
    c.lit(b",\"data\":{\"turn\":")?;
    let turn = c.uint(MAX_SAFE_INTEGER)?;
    c.lit(b",\"step\":")?;
    let step = c.uint(MAX_SAFE_INTEGER)?;
    c.lit(b",\"chunk\":{\"type\":\"")?;
    let kind = if c.lit(b"text-delta\"").is_some() {
        0
    } else if c.lit(b"reasoning-delta\"").is_some() {
        1
    } else {
        c.lit(b"tool-call-delta\"")?;
        2
    };
    c.lit(b",\"index\":")?;
    let index = c.uint(u64::from(u32::MAX))?;
    let (mut id, mut name) = ("", None);
    if kind == 2 {
        c.lit(b",\"id\":\"")?;
        id = c.plain_str()?;
        if c.lit(b",\"name\":\"").is_some() {
            name = Some(c.plain_str()?);
        }
        c.lit(b",\"argumentsDelta\":\"")?;
    } else {
        c.lit(b",\"text\":\"")?;
    }
    let payload = c.body(buf)?;
    c.lit(b"}}}")?;
    if c.i != line.len() {
        return None;
    }
    let data =
        crate::session::AssistantChunk::delta(turn, step, kind, index, id, name, payload, last);
    Some(SessionEvent::new(seq, time, data))
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The length of the canonical line of a delta `assistant/chunk` event
/// whose strings need no escapes (see `write::write_event_json`).
pub(super) fn canonical_chunk_len(e: &SessionEvent) -> Option<usize> {
    let EventData::AssistantChunk(c) = e.data() else {
        return None;
    };
    if e.extra().is_some() {
        return None;
    }
    let time = digits(e.time().unsigned_abs()) + usize::from(e.time() < 0);
    // {"type":"assistant/chunk","seq":S,"time":T,"data":{"turn":U,"step":V,"chunk":C}}
    let envelope =
        32 + digits(e.seq()) + 8 + time + 8 + 8 + digits(c.turn) + 8 + digits(c.step) + 9 + 2;
    let chunk = match c.view() {
        // {"type":"text-delta","index":I,"text":"X"}
        crate::session::ChunkView::TextDelta { index, text } => {
            30 + digits(index) + 8 + text.len() + 2
        }
        crate::session::ChunkView::ReasoningDelta { index, text } => {
            35 + digits(index) + 8 + text.len() + 2
        }
        // {"type":"tool-call-delta","index":I,"id":"D"[,"name":"N"],"argumentsDelta":"A"}
        crate::session::ChunkView::ToolCallDelta {
            index,
            id,
            name,
            arguments_delta,
        } => {
            35 + digits(index)
                + 6
                + id.len()
                + 2
                + name.map_or(0, |n| 8 + n.len() + 2)
                + 18
                + arguments_delta.len()
                + 2
        }
        crate::session::ChunkView::Other(_) => return None,
    };
    Some(envelope + chunk)
}

#[cfg(test)]
mod tests {
    use super::{Cursor, find_special};

    /// `len` pseudo-random bytes: one in `odds` from `alphabet`, the others
    /// from the `plain.1` bytes starting at `plain.0`.
    fn mixed_bytes(
        state: &mut u32,
        len: usize,
        alphabet: &[u8],
        odds: usize,
        plain: (u8, usize),
    ) -> alloc::vec::Vec<u8> {
        (0..len)
            .map(|_| {
                *state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let r = (*state >> 16) as usize;
                if r.is_multiple_of(odds) {
                    alphabet[(r / odds) % alphabet.len()]
                } else {
                    plain.0 + (r % plain.1) as u8
                }
            })
            .collect()
    }

    #[test]
    fn canonical_integers_and_nothing_else() {
        let read = |text: &str, max: u64| {
            let mut c = Cursor::new(text.as_bytes(), Some(text));
            let narrow = c.uint(max).map(|n| (n, c.i));
            let mut c = Cursor::new(text.as_bytes(), Some(text));
            let wide = c.digits(max, true).map(|n| (n, c.i));
            assert_eq!(narrow, wide, "{text}");
            narrow
        };
        let safe = crate::json::MAX_SAFE_INTEGER;
        assert_eq!(read("0}", safe), Some((0, 1)));
        assert_eq!(read("7", safe), Some((7, 1)));
        assert_eq!(read("1785246131791,", safe), Some((1_785_246_131_791, 13)));
        assert_eq!(read("9007199254740991", safe), Some((safe, 16)));
        // Out of range, a leading zero, no digit, too long for any safe value.
        assert_eq!(read("9007199254740992", safe), None);
        assert_eq!(read("4294967296", u64::from(u32::MAX)), None);
        assert_eq!(
            read("4294967295", u64::from(u32::MAX)),
            Some((4_294_967_295, 10))
        );
        assert_eq!(read("01", safe), None);
        assert_eq!(read("-1", safe), None);
        assert_eq!(read("", safe), None);
        assert_eq!(read("00000000000000000001", safe), None);
        assert_eq!(read("123456789012345678901234", safe), None);
        // Whole words of digits and the digits after them.
        assert_eq!(read("12345678", safe), Some((12_345_678, 8)));
        assert_eq!(read("12345678,", safe), Some((12_345_678, 8)));
        assert_eq!(read("123456789", safe), Some((123_456_789, 9)));
        assert_eq!(read("1234567/9", safe), Some((1_234_567, 7)));
        assert_eq!(read("1234567:9", safe), Some((1_234_567, 7)));
        assert_eq!(
            read("1234567890123456", safe),
            Some((1_234_567_890_123_456, 16))
        );
        assert_eq!(read("12345678901234567", safe), None);
        assert_eq!(read("01234567", safe), None);
        assert_eq!(read("99999999", 99_999_998), None);
        // Against the plain reading, on digits mixed with neighbours of the
        // digit range.
        let alphabet = [b'0', b'1', b'5', b'9', b'/', b':', b'*', 0xf9, 0xff, b','];
        let mut state = 11u32;
        for len in 0..24 {
            for _ in 0..300 {
                let bytes = mixed_bytes(&mut state, len, &alphabet, 3, (b'0', 10));
                let digits = bytes.iter().take_while(|c| c.is_ascii_digit()).count();
                let naive = (digits > 0 && digits <= 16 && (digits == 1 || bytes[0] != b'0'))
                    .then(|| {
                        bytes[..digits]
                            .iter()
                            .fold(0u64, |n, c| n * 10 + u64::from(c - b'0'))
                    })
                    .filter(|n| *n <= safe)
                    .map(|n| (n, digits));
                for wide in [false, true] {
                    let mut c = Cursor::new(&bytes, None);
                    let got = c.digits(safe, wide).map(|n| (n, c.i));
                    assert_eq!(got, naive, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn special_byte_search_matches_the_naive_one() {
        // Bytes around each special one (0x1f/0x20, 0x21/0x23, 0x5b/0x5d,
        // 0xa2/0xdc with the high bit) trip inexact lane tricks.
        let alphabet = [
            b'"', b'\\', 0x00, 0x01, 0x1f, 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x80, 0x81, 0xa0, 0xa2,
            0xdc, 0x7f, 0xff, b'a',
        ];
        let mut state = 7u32;
        for len in 0..80 {
            for _ in 0..200 {
                // Mostly plain bytes, so the first special one lands at
                // every position of a word.
                let bytes = mixed_bytes(&mut state, len, &alphabet, 4, (b'a', 26));
                let naive = bytes
                    .iter()
                    .position(|c| *c == b'"' || *c == b'\\' || *c < 0x20);
                assert_eq!(find_special(&bytes), naive, "{bytes:?}");
            }
        }
    }
}
