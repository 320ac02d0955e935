//! The seam for another API over the same transport: its endpoint, headers,
//! body, decoder and classifier, and the body decoder a stream reads with.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::translate::StreamDecoder;
use dsh_core::{GenerateOptions, LlmError, StreamChunk};

/// Another API spoken over this client's transport: its
/// endpoint, headers, request body, response decoder and error classifier,
/// with the same connection handling, idle watchdog, cancellation, size
/// caps and secret redaction as the chat-completions wire.
pub trait Wire: Send + Sync {
    /// The URL of a call for `base` (the configured base URL, one trailing
    /// `/` stripped).
    fn endpoint(&self, base: &str) -> String;
    /// The authentication and version headers for `key` (`content-type`
    /// is added by the client).
    fn headers(&self, key: &str) -> Vec<(&'static str, String)>;
    /// The JSON request body.
    fn body(&self, options: &GenerateOptions) -> Result<String, LlmError>;
    /// The JSON request body with images read through `attachments`
    /// (default: [`body`](Self::body), which has no image source).
    fn body_with(
        &self,
        options: &GenerateOptions,
        attachments: Option<&mut dyn crate::request::AttachmentSource>,
    ) -> Result<String, LlmError> {
        let _ = attachments;
        self.body(options)
    }
    /// A decoder for one response body, bounded to `max_event_bytes`.
    fn decoder(&self, max_event_bytes: usize) -> Box<dyn WireDecoder>;
    /// The typed error of a non-2xx response; `header` reads a response
    /// header by lowercase name.
    fn classify(
        &self,
        status: u16,
        body: &[u8],
        header: &dyn Fn(&str) -> Option<String>,
        now_unix_ms: Option<i64>,
    ) -> LlmError;
}

/// The response decoder of a [`Wire`].
pub trait WireDecoder: Send {
    /// Feeds one piece of the body; `Ok(true)` when the reply is complete
    /// (the rest of the body is not read).
    fn push(&mut self, piece: &[u8], out: &mut Vec<StreamChunk>) -> Result<bool, LlmError>;
    /// The body ended.
    fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError>;
}

/// The decoder of a response in flight (boxed as a whole in `State::Body`,
/// so the chat decoder is not boxed again).
#[allow(clippy::large_enum_variant)]
pub(super) enum BodyDecoder {
    Chat(StreamDecoder),
    Wire(Box<dyn WireDecoder>),
}

impl BodyDecoder {
    pub(super) fn push(
        &mut self,
        piece: &[u8],
        out: &mut Vec<StreamChunk>,
    ) -> Result<crate::translate::PushOutcome, LlmError> {
        match self {
            BodyDecoder::Chat(d) => d.push(piece, out),
            BodyDecoder::Wire(d) => {
                d.push(piece, out)
                    .map(|finished| crate::translate::PushOutcome {
                        comments: 0,
                        finished,
                    })
            }
        }
    }

    pub(super) fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        match self {
            BodyDecoder::Chat(d) => d.finish_into(out),
            BodyDecoder::Wire(d) => d.finish_into(out),
        }
    }
}
