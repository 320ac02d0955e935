//! The fast reader's cursor: a subset of JSON read straight from the
//! payload's bytes into a [`Payload`].

use alloc::borrow::Cow;
use alloc::string::String;

use super::{Choice, Delta, Function, List, Payload, Str, ToolCall, ToolKey};

/// The value of four hex digits (either case), as in a `\u` escape.
pub(super) fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        Some(acc * 16 + u32::from(v))
    })
}

/// The longest prefix [`parse_slice_fast`](super::fast::parse_slice_fast) remembers, in bytes.
pub(super) const FAST_MAX_PREFIX: usize = 1024;

/// The fast reader's cursor over a payload known to be valid UTF-8.
pub(super) struct Fast<'a> {
    pub(super) s: &'a str,
    pub(super) i: usize,
    /// Where the last `content`, `reasoning_content`, `reasoning` and tool
    /// `arguments` string read lies: after its opening quote, at its
    /// closing quote (for [`shape_of`](super::fast::shape_of)).
    pub(super) spans: [Option<(usize, usize)>; 4],
}

/// Nesting deeper than this takes the serde path.
pub(super) const FAST_MAX_DEPTH: usize = 64;

impl<'a> Fast<'a> {
    pub(super) fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    /// Whether a number starts here. Where serde reads a value with
    /// `deserialize_any` it range-checks numbers (and may fail), so those
    /// places leave numbers to the serde path.
    pub(super) fn at_number(&self) -> bool {
        matches!(self.peek(), Some(b'-' | b'0'..=b'9'))
    }

    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    pub(super) fn eat(&mut self, b: u8) -> Option<()> {
        self.ws();
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// A string without escapes or control characters; the cursor is on
    /// its opening quote. One pass, without a call: the strings of a
    /// payload are short.
    pub(super) fn string(&mut self) -> Option<&'a str> {
        let start = self.i + 1;
        let rest = self.s.as_bytes().get(start..)?;
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.i = start + len + 1;
        // Quotes are ASCII, so both ends are character boundaries.
        self.s.get(start..start + len)
    }

    /// A string value, the cursor on its opening quote: borrowed when it
    /// has no escape, unescaped into an owned string otherwise (tool-call
    /// arguments are JSON text, full of `\"`). Takes the escapes serde_json
    /// takes, with the same result; a lone surrogate, an unknown escape or
    /// a control character returns `None` (the serde path then reports it).
    pub(super) fn string_value(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.s.as_bytes();
        let start = self.i + 1;
        let stop = |from: usize| {
            bytes
                .get(from..)?
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .map(|k| from + k)
        };
        let mut end = stop(start)?;
        if bytes[end] == b'"' {
            self.i = end + 1;
            return self.s.get(start..end).map(Cow::Borrowed);
        }
        let mut out = String::with_capacity(end - start + 16);
        let mut from = start;
        loop {
            // Quotes and backslashes are ASCII: both ends are boundaries.
            out.push_str(self.s.get(from..end)?);
            match bytes[end] {
                b'"' => {
                    self.i = end + 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {}
                _ => return None,
            }
            let (c, len) = match *bytes.get(end + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'/' => ('/', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'u' => {
                    let unit = hex4(bytes.get(end + 2..end + 6)?)?;
                    match unit {
                        0xD800..=0xDBFF => {
                            // A high surrogate must be followed by an escaped low one.
                            if bytes.get(end + 6..end + 8)? != b"\\u" {
                                return None;
                            }
                            let low = hex4(bytes.get(end + 8..end + 12)?)?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                            (char::from_u32(c)?, 12)
                        }
                        0xDC00..=0xDFFF => return None,
                        _ => (char::from_u32(unit)?, 6),
                    }
                }
                _ => return None,
            };
            out.push(c);
            from = end + len;
            end = stop(from)?;
        }
    }

    /// A number, validated and skipped; its text.
    pub(super) fn number(&mut self) -> Option<&'a str> {
        let bytes = self.s.as_bytes();
        let start = self.i;
        let digits = |i: &mut usize| {
            let from = *i;
            while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        let mut i = start;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        if bytes.get(i) == Some(&b'0') {
            i += 1;
        } else if !digits(&mut i) {
            return None;
        }
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.i = i;
        self.s.get(start..i)
    }

    pub(super) fn literal(&mut self, word: &str) -> Option<()> {
        self.s
            .get(self.i..)?
            .starts_with(word)
            .then(|| self.i += word.len())
    }

    /// Any value, validated and skipped; `Some(true)` when it was `null`.
    pub(super) fn skip(&mut self, depth: usize) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(|_| false),
            b'n' => self.literal("null").map(|_| true),
            b't' => self.literal("true").map(|_| false),
            b'f' => self.literal("false").map(|_| false),
            b'{' => {
                self.object(depth, |r, _| r.skip(depth + 1).map(|_| ()))?;
                Some(false)
            }
            b'[' => {
                self.array(depth, |r| r.skip(depth + 1).map(|_| ()))?;
                Some(false)
            }
            _ => self.number().map(|_| false),
        }
    }

    /// An object (the cursor on `{`), calling `entry` with each key; the
    /// callback reads the value.
    pub(super) fn object(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        if depth >= FAST_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            entry(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array (the cursor on `[`), calling `item` for each element.
    pub(super) fn array(
        &mut self,
        depth: usize,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if depth >= FAST_MAX_DEPTH {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            item(self)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// [`Str`]: a string is kept, any other value is read as absent.
    pub(super) fn str_field(&mut self, depth: usize) -> Option<Str<'a>> {
        if self.at_number() {
            return None;
        }
        if self.peek()? == b'"' {
            return Some(Str(Some(self.string_value()?)));
        }
        self.skip(depth)?;
        Some(Str(None))
    }

    /// [`str_field`](Self::str_field) for a string a [`Shape`](super::fast::Shape) can vary
    /// (`slot`: the index into `spans`), also noting where it lies.
    pub(super) fn str_span(&mut self, depth: usize, slot: usize) -> Option<Str<'a>> {
        let open = self.i + 1;
        let value = self.str_field(depth)?;
        let span = value.0.is_some().then(|| (open, self.i - 1));
        if let Some(s) = self.spans.get_mut(slot) {
            *s = span;
        }
        Some(value)
    }

    /// [`FillList`](super::lenient::FillList): `null` is empty, an array of objects is its items, any
    /// other value (or a non-object element) is `NotAnArray`.
    pub(super) fn list<T: Default>(
        &mut self,
        depth: usize,
        list: &mut List<T>,
        mut fill: impl FnMut(&mut Self, &mut T) -> Option<()>,
    ) -> Option<()> {
        *list = List::default();
        if self.at_number() {
            return None;
        }
        if self.peek()? != b'[' {
            if !self.skip(depth)? {
                *list = List::NotAnArray;
            }
            return Some(());
        }
        let mut all_objects = true;
        let List::Items(few) = list else {
            return None;
        };
        self.array(depth, |r| {
            let slot = few.push_default();
            if r.peek()? == b'{' {
                fill(r, slot)
            } else if r.at_number() {
                None
            } else {
                all_objects = false;
                r.skip(depth + 1).map(|_| ())
            }
        })?;
        if !all_objects {
            *list = List::NotAnArray;
        }
        Some(())
    }

    /// [`FillObject`](super::lenient::FillObject): reset, then an object fills `T`; any other value
    /// leaves it default.
    pub(super) fn fill<T: Default>(
        &mut self,
        depth: usize,
        slot: &mut T,
        fill: impl FnOnce(&mut Self, &mut T) -> Option<()>,
    ) -> Option<()> {
        *slot = T::default();
        if self.at_number() {
            return None;
        }
        if self.peek()? == b'{' {
            fill(self, slot)
        } else {
            self.skip(depth).map(|_| ())
        }
    }

    /// The top-level object's entries, the cursor at its first key (after
    /// `{`, or after a remembered prefix). `mark` is set to the position
    /// after each comma that follows only ignored entries.
    pub(super) fn payload(
        &mut self,
        out: &mut Payload<'a>,
        mark: &mut Option<usize>,
    ) -> Option<()> {
        let mut ignored_only = true;
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            match key {
                "choices" => {
                    ignored_only = false;
                    self.list(1, &mut out.choices, |r, c| r.choice(2, c))?;
                }
                "usage" => {
                    ignored_only = false;
                    // A usage object takes the serde path; `null` is no usage.
                    if !self.skip(1)? {
                        return None;
                    }
                    out.usage = None;
                }
                "error" => {
                    ignored_only = false;
                    if self.at_number() {
                        return None;
                    }
                    out.error = !self.skip(1)?;
                }
                _ => {
                    self.skip(1)?;
                }
            }
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    if ignored_only {
                        *mark = Some(self.i);
                    }
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object (the cursor on `{`) whose entries `entry` reads: it
    /// returns `Some(false)` for a key whose value it does not read, and
    /// that value is skipped.
    pub(super) fn fields(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&mut Self, &'a str) -> Option<bool>,
    ) -> Option<()> {
        self.object(depth, |r, key| {
            if !entry(r, key)? {
                r.skip(depth + 1)?;
            }
            Some(())
        })
    }

    pub(super) fn choice(&mut self, depth: usize, c: &mut Choice<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "delta" => {
                    c.has_delta = r.peek() == Some(b'{');
                    r.fill(depth + 1, &mut c.delta, |r, d| r.delta(depth + 1, d))?;
                }
                // Left to serde.
                "message" => return None,
                "finish_reason" => c.finish_reason = r.str_field(depth + 1)?,
                _ => return Some(false),
            }
            Some(true)
        })
    }

    pub(super) fn delta(&mut self, depth: usize, d: &mut Delta<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "content" => d.content = r.str_span(depth + 1, 0)?,
                "reasoning_content" => d.reasoning_content = r.str_span(depth + 1, 1)?,
                "reasoning" => d.reasoning = r.str_span(depth + 1, 2)?,
                "tool_calls" => r.list(depth + 1, &mut d.tool_calls, |r, t| {
                    r.tool_call(depth + 2, t)
                })?,
                _ => return Some(false),
            }
            Some(true)
        })
    }

    pub(super) fn tool_call(&mut self, depth: usize, t: &mut ToolCall<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "index" => t.key = r.tool_key(depth + 1)?,
                "id" => t.id = r.str_field(depth + 1)?,
                "function" => {
                    let mut f = Function::default();
                    r.fill(depth + 1, &mut f, |r, f| r.function(depth + 1, f))?;
                    t.name = f.name;
                    t.arguments = f.arguments;
                }
                _ => return Some(false),
            }
            Some(true)
        })
    }

    pub(super) fn function(&mut self, depth: usize, f: &mut Function<'a>) -> Option<()> {
        self.fields(depth, |r, key| {
            match key {
                "name" => f.name = r.str_field(depth + 1)?,
                "arguments" => f.arguments = r.str_span(depth + 1, 3)?,
                _ => return Some(false),
            }
            Some(true)
        })
    }

    /// [`ToolKey`] for the values the fast path takes: small non-negative
    /// integers, strings, `null`, booleans, arrays and objects.
    pub(super) fn tool_key(&mut self, depth: usize) -> Option<ToolKey> {
        Some(match self.peek()? {
            b'"' => ToolKey::Str(String::from(self.string()?)),
            b'n' => self.literal("null").map(|_| ToolKey::Null)?,
            b't' => self.literal("true").map(|_| ToolKey::Bool(true))?,
            b'f' => self.literal("false").map(|_| ToolKey::Bool(false))?,
            b'[' | b'{' => self.skip(depth).map(|_| ToolKey::Unique)?,
            _ => {
                let text = self.number()?;
                // Fractions, exponents, signs and long numbers: serde path.
                if text.len() > 15 || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let v: u64 = text.parse().ok()?;
                ToolKey::Number(if v == 0 { 0 } else { (v as f64).to_bits() })
            }
        })
    }
}
