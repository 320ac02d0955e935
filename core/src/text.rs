//! Compact text for stream chunks: [`ChunkText`] (a delta fragment, inline
//! when short) and [`ToolCallHead`] (a tool call's id and name, shared by
//! all its deltas).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::fmt;
use core::ops::Deref;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A chunk's text fragment: stored inline when it is at most 23 bytes (most
/// deltas), otherwise in one shared heap allocation, so cloning never copies
/// the text. Reads as a `str`; serializes as a JSON string.
///
/// The inline bytes past the text are zero, so a consumer can copy the whole
/// inline buffer at a fixed size and then cut it ([`ChunkText::inline_padded`]):
/// no branch on the length, which a fold of many short deltas needs.
#[derive(Clone)]
pub struct ChunkText(Repr);

#[derive(Clone)]
enum Repr {
    /// `buf[..len]` is the text; the rest is zero.
    Inline {
        len: InlineLen,
        buf: [u8; 23],
    },
    Heap(Arc<str>),
}

/// An inline length, 0..=23: an enum so that the other values are free for
/// the layout of the types around it (`ChunkText` and `StreamChunk` stay
/// small).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[rustfmt::skip]
enum InlineLen {
    L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15, L16,
    L17, L18, L19, L20, L21, L22, L23,
}

#[rustfmt::skip]
const INLINE_LENS: [InlineLen; 24] = {
    use InlineLen::*;
    [
        L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15, L16,
        L17, L18, L19, L20, L21, L22, L23,
    ]
};

impl Default for ChunkText {
    fn default() -> Self {
        ChunkText::empty()
    }
}

impl ChunkText {
    /// The longest text stored inline, in bytes.
    pub(crate) const INLINE_CAPACITY: usize = 23;

    /// A copy of `text` (inline when short).
    #[inline]
    pub fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        if let Some(&len) = INLINE_LENS.get(bytes.len()) {
            let mut buf = [0u8; 23];
            if let Some(dst) = buf.get_mut(..bytes.len()) {
                dst.copy_from_slice(bytes);
            }
            ChunkText(Repr::Inline { len, buf })
        } else {
            ChunkText(Repr::Heap(Arc::from(text)))
        }
    }

    /// The empty text.
    pub const fn empty() -> Self {
        ChunkText(Repr::Inline {
            len: InlineLen::L0,
            buf: [0; 23],
        })
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Always valid: the bytes were copied from a `str`.
            Repr::Inline { .. } => core::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Heap(s) => s,
        }
    }

    /// The text's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => buf.get(..*len as usize).unwrap_or_default(),
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    /// The length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline { len, .. } => *len as usize,
            Repr::Heap(s) => s.len(),
        }
    }

    /// Whether the text is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    /// Whether the text lives inline (no heap allocation).
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// For inline text, the whole inline buffer and the text's length: the
    /// text is `buf[..len]` and every byte after it is zero.
    #[inline]
    pub fn inline_padded(&self) -> Option<(&[u8; 23], usize)> {
        match &self.0 {
            Repr::Inline { len, buf } => Some((buf, *len as usize)),
            Repr::Heap(_) => None,
        }
    }
}

impl PartialEq for ChunkText {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for ChunkText {}

impl PartialOrd for ChunkText {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ChunkText {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        // Byte order is `str` order.
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl core::hash::Hash for ChunkText {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes, so `Borrow<str>` lookups work.
        self.as_str().hash(state)
    }
}

impl Deref for ChunkText {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ChunkText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ChunkText {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ChunkText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ChunkText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for ChunkText {
    fn from(s: &str) -> Self {
        ChunkText::new(s)
    }
}

impl From<&String> for ChunkText {
    fn from(s: &String) -> Self {
        ChunkText::new(s)
    }
}

impl From<String> for ChunkText {
    fn from(s: String) -> Self {
        if s.len() <= ChunkText::INLINE_CAPACITY {
            ChunkText::new(&s)
        } else {
            ChunkText(Repr::Heap(Arc::from(s)))
        }
    }
}

impl From<Box<str>> for ChunkText {
    fn from(s: Box<str>) -> Self {
        if s.len() <= ChunkText::INLINE_CAPACITY {
            ChunkText::new(&s)
        } else {
            ChunkText(Repr::Heap(Arc::from(s)))
        }
    }
}

impl From<ChunkText> for String {
    fn from(t: ChunkText) -> Self {
        String::from(t.as_str())
    }
}

impl PartialEq<str> for ChunkText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ChunkText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for ChunkText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<ChunkText> for str {
    fn eq(&self, other: &ChunkText) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<ChunkText> for &str {
    fn eq(&self, other: &ChunkText) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<ChunkText> for String {
    fn eq(&self, other: &ChunkText) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for ChunkText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ChunkText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ChunkText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ChunkText, E> {
                Ok(ChunkText::new(v))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ChunkText, E> {
                Ok(ChunkText::from(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// An append-only UTF-8 text buffer tuned for many short fragments.
///
/// `String::push_str` copies every fragment with a variable-length `memcpy`,
/// whose branches on the length dominate a fold of short deltas; here inline
/// fragments are copied at a fixed size (see [`TextBuf::push`]). The text is
/// `bytes[..len]`, always the concatenation of whole `str`s, so it is valid
/// UTF-8; the initialized bytes after it are room for the next fixed-size
/// copy, so that a push is one copy and one store of `len`, with no second
/// look at the vector's length.
#[derive(Clone, Debug, Default)]
pub(crate) struct TextBuf {
    bytes: Vec<u8>,
    len: usize,
}

impl TextBuf {
    /// Appends `text`. Inline text is copied as its whole zero-padded
    /// buffer into the room after the text, then the length moves by the
    /// text's own length: a fixed-size copy, with no call to `memcpy` and no
    /// branch on the length.
    #[inline(always)]
    pub(crate) fn push(&mut self, text: &ChunkText) {
        match text.inline_padded() {
            Some((padded, n)) => {
                let len = self.len;
                match self.bytes.get_mut(len..len + ChunkText::INLINE_CAPACITY) {
                    Some(room) => {
                        room.copy_from_slice(padded);
                        self.len = len + n;
                    }
                    None => self.push_bytes(padded.get(..n).unwrap_or_default()),
                }
            }
            None => self.push_bytes(text.as_bytes()),
        }
    }

    /// Appends `bytes` (a whole `str`), growing the room first when needed.
    #[inline(never)]
    fn push_bytes(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        // Room for this copy and a fixed-size one after it, doubling.
        let need = end + ChunkText::INLINE_CAPACITY;
        if self.bytes.len() < need {
            let grown = need.max(self.bytes.len().saturating_mul(2)).max(64);
            self.bytes.resize(grown, 0);
        }
        if let Some(dst) = self.bytes.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }

    /// The text's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    /// The text as a new `String`.
    pub(crate) fn to_owned_string(&self) -> String {
        TextBuf {
            bytes: self.as_bytes().to_vec(),
            len: self.len,
        }
        .into_string()
    }

    /// The text.
    pub(crate) fn into_string(self) -> String {
        let mut bytes = self.bytes;
        bytes.truncate(self.len);
        // Always valid (see the type docs); the lossy path is never taken.
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[derive(PartialEq, Eq, Hash)]
struct Head {
    id: Box<str>,
    name: Option<Box<str>>,
}

/// The call id and optional tool name of a `tool-call-delta` (SC-2), shared:
/// every delta of one call points at the same allocation, so a delta costs
/// no copy of either. Compares by value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ToolCallHead(Arc<Head>);

impl ToolCallHead {
    /// A head with call id `id` (may be empty) and an optional tool name.
    pub fn new(id: &str, name: Option<&str>) -> Self {
        ToolCallHead(Arc::new(Head {
            id: Box::from(id),
            name: name.map(Box::from),
        }))
    }

    /// [`new`](Self::new) from owned parts.
    pub fn owned(id: String, name: Option<String>) -> Self {
        ToolCallHead(Arc::new(Head {
            id: id.into_boxed_str(),
            name: name.map(String::into_boxed_str),
        }))
    }

    /// The call id (may be empty).
    #[inline]
    pub fn id(&self) -> &str {
        &self.0.id
    }

    /// The tool name, when the delta carries one.
    #[inline]
    pub fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    /// Whether both are the same shared head (a pointer comparison; equal
    /// heads made separately are not the same).
    #[inline]
    pub(crate) fn same(&self, other: &ToolCallHead) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether this head has exactly this id and name.
    #[inline]
    pub(crate) fn is(&self, id: &str, name: Option<&str>) -> bool {
        self.id() == id && self.name() == name
    }

    /// `self` when it already has this id and name (a pointer copy),
    /// otherwise a new head: the interning step of a delta producer.
    pub fn reuse(last: &mut Option<ToolCallHead>, id: &str, name: Option<&str>) -> ToolCallHead {
        if let Some(head) = last
            && head.is(id, name)
        {
            return head.clone();
        }
        let head = ToolCallHead::new(id, name);
        *last = Some(head.clone());
        head
    }
}

impl fmt::Debug for ToolCallHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCallHead")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish()
    }
}
