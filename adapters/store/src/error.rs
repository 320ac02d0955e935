//! The errors of the persistence seam (persistence.md OP12, Q3).

use std::fmt;
use std::path::PathBuf;

use dsh_core::jsonl::LogError;

/// Why a store operation failed.
///
/// The two kinds a caller must tell apart are [`StoreError::Corruption`]
/// (stored content is damaged or invalid) and
/// [`StoreError::FormatUnsupported`] (intact, but written by another build);
/// [`StoreError::kind`] classifies every variant.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// No stored log for this id (and no state in this store). The message
    /// contains "not found" (OP5, OP8).
    NotFound {
        /// The session id.
        id: String,
    },
    /// `create` of an id this store already tracks, or that already has a
    /// stored log (OP3).
    AlreadyExists {
        /// The session id.
        id: String,
        /// Whether the conflict is a stored log (else state in memory).
        on_disk: bool,
    },
    /// A request refused before storage is touched: a header or batch that
    /// is not losslessly JSON-serializable, retired vocabulary, a `createdAt`
    /// or `fromSeq` that is not a non-negative safe integer (OP3, OP4, OP8).
    Invalid {
        /// The message (contains the reference's wording).
        message: String,
    },
    /// A batch whose seqs do not continue the stored log (OP4.7). Nothing
    /// was written.
    SeqMismatch {
        /// The session id.
        id: String,
        /// The seq the store expected at `index`.
        expected: u64,
        /// Index in the batch of the first wrong event.
        index: usize,
        /// The seq found there.
        got: u64,
    },
    /// Stored content is damaged or invalid: scan failures, header or event
    /// rule failures, identity mismatch (OP12, 6.6). Storage is left as is.
    Corruption {
        /// The session id.
        id: String,
        /// What is wrong, in the reference's words (`corrupt session log: …`,
        /// `corrupt Zstandard session log: …`, `stored session "<id>" failed
        /// validation: …`).
        message: String,
        /// The artifact, when the backend has one per session.
        location: Option<PathBuf>,
    },
    /// The log is intact but this build cannot interpret it: header
    /// `version != 0`, or an unknown event type without `ignorable: true`
    /// (OP12).
    FormatUnsupported {
        /// The session id.
        id: String,
        /// The reference's message.
        message: String,
        /// The artifact, when the backend has one per session.
        location: Option<PathBuf>,
    },
    /// Another writer (another process, or another store over the same
    /// root or database) holds this session's or this database's lock.
    Locked {
        /// What is locked (a session id or a database).
        what: String,
        /// The lock file (empty for a server store's lease).
        path: PathBuf,
    },
    /// The store's layout or configuration does not match what is on disk:
    /// the other compression's transcript in a root, an old flat layout,
    /// duplicate ids, a foreign database schema (L4, L5, KV1).
    Layout {
        /// What is wrong and what to do.
        message: String,
    },
    /// The cancel token was already cancelled; carries exactly its reason
    /// (OP11).
    Cancelled {
        /// The token's reason.
        reason: String,
    },
    /// An I/O operation failed.
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The key-value database reported an error.
    Database {
        /// What was being done.
        context: String,
        /// The database's message.
        message: String,
    },
}

/// The coarse class of a [`StoreError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`StoreError::NotFound`].
    NotFound,
    /// [`StoreError::AlreadyExists`].
    AlreadyExists,
    /// [`StoreError::Invalid`] or [`StoreError::SeqMismatch`]: the caller's
    /// request was wrong.
    Invalid,
    /// [`StoreError::Corruption`].
    Corruption,
    /// [`StoreError::FormatUnsupported`].
    FormatUnsupported,
    /// [`StoreError::Locked`].
    Locked,
    /// [`StoreError::Layout`].
    Layout,
    /// [`StoreError::Cancelled`].
    Cancelled,
    /// [`StoreError::Io`] or [`StoreError::Database`].
    Io,
}

impl StoreError {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            StoreError::Invalid { .. } | StoreError::SeqMismatch { .. } => ErrorKind::Invalid,
            StoreError::Corruption { .. } => ErrorKind::Corruption,
            StoreError::FormatUnsupported { .. } => ErrorKind::FormatUnsupported,
            StoreError::Locked { .. } => ErrorKind::Locked,
            StoreError::Layout { .. } => ErrorKind::Layout,
            StoreError::Cancelled { .. } => ErrorKind::Cancelled,
            StoreError::Io { .. } | StoreError::Database { .. } => ErrorKind::Io,
        }
    }

    /// An [`StoreError::Io`] with its context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }

    /// A [`StoreError::Corruption`].
    pub fn corruption(
        id: impl Into<String>,
        message: impl Into<String>,
        location: Option<PathBuf>,
    ) -> Self {
        StoreError::Corruption {
            id: id.into(),
            message: message.into(),
            location,
        }
    }

    /// Classifies a core [`LogError`] of session `id` (OP12): everything but
    /// `FormatUnsupported` is corruption.
    pub fn from_log(id: &str, error: LogError, location: Option<PathBuf>) -> Self {
        match error {
            LogError::FormatUnsupported { message } => StoreError::FormatUnsupported {
                id: id.to_owned(),
                message,
                location,
            },
            other => StoreError::Corruption {
                id: id.to_owned(),
                message: other.to_string(),
                location,
            },
        }
    }
}

fn raw_log(f: &mut fmt::Formatter<'_>, location: &Option<PathBuf>) -> fmt::Result {
    match location {
        Some(path) => write!(f, " (raw log: {})", path.display()),
        None => Ok(()),
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound { id } => write!(f, "session \"{id}\" not found"),
            StoreError::AlreadyExists { id, on_disk: false } => {
                write!(f, "session \"{id}\" already exists in this backend")
            }
            StoreError::AlreadyExists { id, on_disk: true } => write!(
                f,
                "session \"{id}\" already has a persisted log on disk; load/resume it instead of creating"
            ),
            StoreError::Invalid { message } => f.write_str(message),
            StoreError::SeqMismatch {
                id,
                expected,
                index,
                got,
            } => write!(
                f,
                "append seq mismatch for session \"{id}\": expected {expected} at index {index}, got {got}"
            ),
            StoreError::Corruption {
                message, location, ..
            }
            | StoreError::FormatUnsupported {
                message, location, ..
            } => {
                f.write_str(message)?;
                raw_log(f, location)
            }
            // A server store's lease has no lock file (empty path).
            StoreError::Locked { what, path } if path.as_os_str().is_empty() => write!(
                f,
                "{what} is locked by another writer; only one process may write it at a time"
            ),
            StoreError::Locked { what, path } => write!(
                f,
                "{what} is locked by another writer (lock file {}); only one process may write it at a time",
                path.display()
            ),
            StoreError::Layout { message } => f.write_str(message),
            StoreError::Cancelled { reason } => f.write_str(reason),
            StoreError::Io { context, source } => write!(f, "{context}: {source}"),
            StoreError::Database { context, message } => write!(f, "{context}: {message}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
