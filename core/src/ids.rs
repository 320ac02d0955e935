//! Branded identifiers (streaming.md 0.5): plain JSON strings, one newtype each.
//!
//! None of the constructors validates anything; the brand only keeps ids of
//! different kinds from being mixed up in Rust code.

use alloc::string::String;
use core::fmt;
use serde::{Deserialize, Serialize};

macro_rules! branded_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// Wraps a string as this id kind.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Unwraps the id into its string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(String::from(id))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl core::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        #[cfg(feature = "defmt")]
        impl defmt::Format for $name {
            fn format(&self, f: defmt::Formatter<'_>) {
                defmt::write!(f, "{=str}", self.0.as_str())
            }
        }
    };
}

branded_id!(
    /// The provider-issued id of a tool call; correlates a call with its result.
    CallId
);
branded_id!(
    /// The identity of a [`Message`](crate::Message), usually a UUID v4.
    MessageId
);
branded_id!(
    /// The provider's opaque request id (from a response header).
    ProviderRequestId
);
branded_id!(
    /// An adapter-owned reasoning-effort id such as `"high"` (streaming.md 7.4).
    ReasoningEffortId
);
branded_id!(
    /// The identity of a session.
    SessionId
);
branded_id!(
    /// The id of one retry chain (`llm/retry` events).
    RetryId
);
branded_id!(
    /// A content-addressed attachment id such as `"sha256:<64 hex>"`.
    AttachmentId
);
