//! Compact text for stream chunks: [`ChunkText`] (a delta fragment, inline
//! when short) and [`ToolCallHead`] (a tool call's id and name, shared by
//! all its deltas).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use core::borrow::Borrow;
use core::fmt;
use core::ops::Deref;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smol_str::SmolStr;

/// A chunk's text fragment: stored inline when it is at most 23 bytes (most
/// deltas), otherwise in one shared heap allocation, so cloning never copies
/// the text. Reads as a `str`; serializes as a JSON string.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkText(SmolStr);

impl ChunkText {
    /// The longest text stored inline, in bytes.
    pub const INLINE_CAPACITY: usize = 23;

    /// A copy of `text` (inline when short).
    #[inline]
    pub fn new(text: &str) -> Self {
        ChunkText(SmolStr::new(text))
    }

    /// The empty text.
    pub const fn empty() -> Self {
        ChunkText(SmolStr::new_inline(""))
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Whether the text lives inline (no heap allocation).
    pub fn is_inline(&self) -> bool {
        !self.0.is_heap_allocated()
    }
}

impl Deref for ChunkText {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.0.as_str()
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
        ChunkText(SmolStr::from(s))
    }
}

impl From<Box<str>> for ChunkText {
    fn from(s: Box<str>) -> Self {
        ChunkText(SmolStr::from(s))
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
    pub fn same(&self, other: &ToolCallHead) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether this head has exactly this id and name.
    #[inline]
    pub fn is(&self, id: &str, name: Option<&str>) -> bool {
        self.id() == id && self.name() == name
    }

    /// `self` when it already has this id and name (a pointer copy),
    /// otherwise a new head: the interning step of a delta producer.
    pub fn reuse(last: &mut Option<ToolCallHead>, id: &str, name: Option<&str>) -> ToolCallHead {
        if let Some(head) = last {
            if head.is(id, name) {
                return head.clone();
            }
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
