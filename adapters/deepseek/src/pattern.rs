//! A tiny case-insensitive pattern matcher for the shared classifiers (3.5).
//!
//! The classifiers are written as regular expressions in the reference
//! (JavaScript, `i` flag, no `u` flag). This module implements exactly the
//! subset they use, with JavaScript's semantics, so the patterns can be kept
//! verbatim as the spec writes them:
//!
//! - the haystack is matched as UTF-16 code units (so `.{0,40}` counts units);
//! - case-insensitivity folds ASCII letters only (JavaScript never folds a
//!   non-ASCII character onto an ASCII one without the `u` flag);
//! - `\s` is JavaScript's whitespace set, `\b` is the ASCII word boundary,
//!   `.` excludes `\n`, `\r`, U+2028 and U+2029;
//! - `^`/`$` anchor at the ends of the input (no multiline mode).
//!
//! Syntax: literals, `\`-escapes, `.`, `[...]` classes with ranges, negation
//! and `\s`/`\d`/`\w` inside, `(?:...)` / `(...)` groups, `|`, and the
//! quantifiers `?`, `*`, `+`, `{m}`, `{m,}`, `{m,n}`.
//!
//! Matching is a Pike VM (a breadth-first NFA simulation): time is
//! proportional to input length × program size, with no backtracking blow-up
//! on long or adversarial provider messages.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

#[derive(Clone, Debug)]
enum Pred {
    /// A code unit, ASCII letters stored lowercase.
    Lit(u16),
    /// `.`
    Dot,
    /// A class: ranges plus the `\s`/`\d`/`\w` shorthands, maybe negated.
    Class {
        negated: bool,
        ranges: Vec<(u16, u16)>,
        space: bool,
        digit: bool,
        word: bool,
    },
}

#[derive(Clone, Copy, Debug)]
enum Look {
    Start,
    End,
    WordBoundary,
}

#[derive(Clone, Debug)]
enum Node {
    Unit(Pred),
    Look(Look),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

#[derive(Clone, Debug)]
enum Inst {
    Unit(Pred),
    Look(Look),
    Split(usize, usize),
    Jmp(usize),
    Match,
}

/// A compiled pattern.
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    prog: Vec<Inst>,
}

/// Why a pattern did not compile (only reachable with a bad literal pattern).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PatternError(pub &'static str);

/// JavaScript's `\s` (WhiteSpace and LineTerminator).
pub(crate) fn is_js_space(u: u16) -> bool {
    matches!(
        u,
        0x09..=0x0D
            | 0x20
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
            | 0xFEFF
    )
}

fn is_word(u: u16) -> bool {
    matches!(u, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x5F)
}

fn fold(u: u16) -> u16 {
    if (0x41..=0x5A).contains(&u) {
        u + 0x20
    } else {
        u
    }
}

fn other_case(u: u16) -> Option<u16> {
    match u {
        0x41..=0x5A => Some(u + 0x20),
        0x61..=0x7A => Some(u - 0x20),
        _ => None,
    }
}

impl Pred {
    fn matches(&self, u: u16) -> bool {
        match self {
            Pred::Lit(l) => fold(u) == *l,
            Pred::Dot => !matches!(u, 0x0A | 0x0D | 0x2028 | 0x2029),
            Pred::Class {
                negated,
                ranges,
                space,
                digit,
                word,
            } => {
                let hit = |v: u16| {
                    ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&v))
                        || (*space && is_js_space(v))
                        || (*digit && (0x30..=0x39).contains(&v))
                        || (*word && is_word(v))
                };
                let inside = hit(u) || other_case(u).is_some_and(hit);
                inside != *negated
            }
        }
    }
}

struct Parser<'a> {
    chars: &'a [char],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn alternation(&mut self) -> Result<Node, PatternError> {
        let mut branches = vec![self.concat()?];
        while self.eat('|') {
            branches.push(self.concat()?);
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap_or(Node::Concat(Vec::new()))
        } else {
            Node::Alt(branches)
        })
    }

    fn concat(&mut self) -> Result<Node, PatternError> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quantified(atom)?;
            items.push(atom);
        }
        Ok(Node::Concat(items))
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.pos;
        let mut n: u32 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            n = n.saturating_mul(10).saturating_add(d);
            self.pos += 1;
        }
        (self.pos > start).then_some(n)
    }

    fn quantified(&mut self, atom: Node) -> Result<Node, PatternError> {
        let (min, max) = match self.peek() {
            Some('?') => (0, Some(1)),
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('{') => {
                self.pos += 1;
                let min = self.number().ok_or(PatternError("bad {m,n}"))?;
                let max = if self.eat(',') {
                    self.number()
                } else {
                    Some(min)
                };
                if !self.eat('}') {
                    return Err(PatternError("unclosed {m,n}"));
                }
                self.pos -= 1;
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.pos += 1;
        if matches!(atom, Node::Look(_)) {
            return Err(PatternError("quantified assertion"));
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
        })
    }

    fn atom(&mut self) -> Result<Node, PatternError> {
        let c = self.peek().ok_or(PatternError("unexpected end"))?;
        self.pos += 1;
        match c {
            '(' => {
                if self.eat('?') && !self.eat(':') {
                    return Err(PatternError("only (?: groups are supported"));
                }
                let inner = self.alternation()?;
                if !self.eat(')') {
                    return Err(PatternError("unclosed group"));
                }
                Ok(inner)
            }
            '[' => self.class(),
            '.' => Ok(Node::Unit(Pred::Dot)),
            '^' => Ok(Node::Look(Look::Start)),
            '$' => Ok(Node::Look(Look::End)),
            '\\' => {
                let e = self.peek().ok_or(PatternError("trailing \\"))?;
                self.pos += 1;
                Ok(match e {
                    'b' => Node::Look(Look::WordBoundary),
                    's' => Node::Unit(shorthand(true, false, false)),
                    'd' => Node::Unit(shorthand(false, true, false)),
                    'w' => Node::Unit(shorthand(false, false, true)),
                    other => Node::Unit(Pred::Lit(lit(other)?)),
                })
            }
            other => Ok(Node::Unit(Pred::Lit(lit(other)?))),
        }
    }

    fn class(&mut self) -> Result<Node, PatternError> {
        let negated = self.eat('^');
        let mut ranges = Vec::new();
        let (mut space, mut digit, mut word) = (false, false, false);
        loop {
            let c = self.peek().ok_or(PatternError("unclosed class"))?;
            self.pos += 1;
            let lo = match c {
                ']' => break,
                '\\' => {
                    let e = self.peek().ok_or(PatternError("trailing \\"))?;
                    self.pos += 1;
                    match e {
                        's' => {
                            space = true;
                            continue;
                        }
                        'd' => {
                            digit = true;
                            continue;
                        }
                        'w' => {
                            word = true;
                            continue;
                        }
                        other => unit(other)?,
                    }
                }
                other => unit(other)?,
            };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|n| *n != ']') {
                self.pos += 1;
                let hi = self.peek().ok_or(PatternError("bad range"))?;
                self.pos += 1;
                let hi = unit(hi)?;
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok(Node::Unit(Pred::Class {
            negated,
            ranges,
            space,
            digit,
            word,
        }))
    }
}

fn shorthand(space: bool, digit: bool, word: bool) -> Pred {
    Pred::Class {
        negated: false,
        ranges: Vec::new(),
        space,
        digit,
        word,
    }
}

fn unit(c: char) -> Result<u16, PatternError> {
    u16::try_from(u32::from(c)).map_err(|_| PatternError("astral pattern character"))
}

fn lit(c: char) -> Result<u16, PatternError> {
    unit(c).map(fold)
}

fn compile(node: &Node, prog: &mut Vec<Inst>) {
    match node {
        Node::Unit(p) => prog.push(Inst::Unit(p.clone())),
        Node::Look(l) => prog.push(Inst::Look(*l)),
        Node::Concat(items) => items.iter().for_each(|n| compile(n, prog)),
        Node::Alt(branches) => {
            let mut jumps = Vec::new();
            for (i, branch) in branches.iter().enumerate() {
                if i + 1 < branches.len() {
                    let split = prog.len();
                    prog.push(Inst::Split(split + 1, 0));
                    compile(branch, prog);
                    jumps.push(prog.len());
                    prog.push(Inst::Jmp(0));
                    let next = prog.len();
                    prog[split] = Inst::Split(split + 1, next);
                } else {
                    compile(branch, prog);
                }
            }
            let end = prog.len();
            for j in jumps {
                prog[j] = Inst::Jmp(end);
            }
        }
        Node::Repeat { node, min, max } => {
            for _ in 0..*min {
                compile(node, prog);
            }
            match max {
                None => {
                    let split = prog.len();
                    prog.push(Inst::Split(split + 1, 0));
                    compile(node, prog);
                    prog.push(Inst::Jmp(split));
                    let end = prog.len();
                    prog[split] = Inst::Split(split + 1, end);
                }
                Some(max) => {
                    let mut splits = Vec::new();
                    for _ in *min..*max {
                        splits.push(prog.len());
                        prog.push(Inst::Split(0, 0));
                        compile(node, prog);
                    }
                    let end = prog.len();
                    for s in splits {
                        prog[s] = Inst::Split(s + 1, end);
                    }
                }
            }
        }
    }
}

impl Pattern {
    /// Compiles `pattern` (see the module docs for the syntax).
    pub(crate) fn new(pattern: &str) -> Result<Pattern, PatternError> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut parser = Parser {
            chars: &chars,
            pos: 0,
        };
        let node = parser.alternation()?;
        if parser.pos != chars.len() {
            return Err(PatternError("unbalanced )"));
        }
        let mut prog = Vec::new();
        compile(&node, &mut prog);
        prog.push(Inst::Match);
        Ok(Pattern { prog })
    }

    /// Whether the pattern matches anywhere in `haystack`.
    pub(crate) fn is_match(&self, haystack: &str) -> bool {
        let units: Vec<u16> = haystack.encode_utf16().collect();
        let n = self.prog.len();
        let mut clist = Threads::new(n);
        let mut nlist = Threads::new(n);
        for pos in 0..=units.len() {
            // Unanchored search: a new thread starts at every position.
            if self.add(&mut clist, 0, pos, &units) {
                return true;
            }
            if clist.dense.is_empty() {
                continue;
            }
            let Some(&u) = units.get(pos) else {
                break;
            };
            nlist.clear();
            for i in 0..clist.dense.len() {
                let pc = clist.dense[i];
                if let Some(Inst::Unit(p)) = self.prog.get(pc)
                    && p.matches(u)
                    && self.add(&mut nlist, pc + 1, pos + 1, &units)
                {
                    return true;
                }
            }
            core::mem::swap(&mut clist, &mut nlist);
        }
        false
    }

    /// Adds the thread `pc` at `pos`, following jumps and assertions;
    /// returns true when it reaches `Match`.
    fn add(&self, list: &mut Threads, pc: usize, pos: usize, units: &[u16]) -> bool {
        let mut stack = vec![pc];
        while let Some(pc) = stack.pop() {
            if !list.insert(pc) {
                continue;
            }
            match self.prog.get(pc) {
                Some(Inst::Match) => return true,
                Some(Inst::Jmp(t)) => stack.push(*t),
                Some(Inst::Split(a, b)) => {
                    stack.push(*b);
                    stack.push(*a);
                }
                Some(Inst::Look(look)) => {
                    let before = pos.checked_sub(1).and_then(|p| units.get(p)).copied();
                    let after = units.get(pos).copied();
                    let ok = match look {
                        Look::Start => pos == 0,
                        Look::End => pos == units.len(),
                        Look::WordBoundary => {
                            before.is_some_and(is_word) != after.is_some_and(is_word)
                        }
                    };
                    if ok {
                        stack.push(pc + 1);
                    }
                }
                Some(Inst::Unit(_)) | None => {}
            }
        }
        false
    }
}

/// A sparse set of program counters.
struct Threads {
    dense: Vec<usize>,
    sparse: Vec<usize>,
}

impl Threads {
    fn new(n: usize) -> Self {
        Threads {
            dense: Vec::with_capacity(n),
            sparse: vec![0; n + 1],
        }
    }

    fn clear(&mut self) {
        self.dense.clear();
    }

    fn insert(&mut self, pc: usize) -> bool {
        let Some(&slot) = self.sparse.get(pc) else {
            return false;
        };
        if self.dense.get(slot) == Some(&pc) {
            return false;
        }
        if let Some(s) = self.sparse.get_mut(pc) {
            *s = self.dense.len();
        }
        self.dense.push(pc);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, h: &str) -> bool {
        Pattern::new(p).unwrap().is_match(h)
    }

    #[test]
    fn basics() {
        assert!(m("abc", "xxABCxx"));
        assert!(!m("^abc", "xabc"));
        assert!(m("abc$", "xabc"));
        assert!(m(r"\bout\b", "run out now"));
        assert!(!m(r"\bout\b", "without"));
        assert!(m(r"a{2,3}b", "aab"));
        assert!(!m(r"xa{2,3}b", "xab"));
        assert!(m(r"a(?:b|c)+d", "abcbd"));
        assert!(m(r"[^A-Za-z0-9]x", "-x"));
        assert!(!m(r"[^A-Za-z0-9]x", "ax"));
        assert!(m(r"a[\s_-]b", "a_b"));
        assert!(m(r"a[\s_-]b", "a\u{3000}b"));
        assert!(m(r"a.{0,2}b", "a12b"));
        assert!(!m(r"a.{0,2}b", "a123b"));
        assert!(!m(r"a.b", "a\nb"));
        // An astral character is two UTF-16 units for `.`.
        assert!(!m(r"a.b", "a😀b"));
        assert!(m(r"a..b", "a😀b"));
        assert!(m("model(?:'s)?", "MODEL'S"));
    }

    #[test]
    fn bad_patterns_are_errors() {
        assert!(Pattern::new("(?=a)").is_err());
        assert!(Pattern::new("(a").is_err());
        assert!(Pattern::new("a)").is_err());
        assert!(Pattern::new("[a").is_err());
    }

    #[test]
    fn long_inputs_do_not_blow_up() {
        let p = Pattern::new(r"\b(?:max)(?:\s+(?:allowed))?\s+context\s+x\b").unwrap();
        let hay: alloc::string::String = core::iter::once("max")
            .chain(core::iter::repeat_n(" ", 20_000))
            .collect();
        assert!(!p.is_match(&hay));
    }
}
