//! The codec as a [`dsh_deepseek::Wire`] (feature `std`).

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use dsh_core::{GenerateOptions, LlmError, StreamChunk};
use dsh_deepseek::{Wire, WireDecoder};

use crate::request::{ANTHROPIC_VERSION, RequestOptions, build_request_body};
use crate::translate::StreamDecoder;

/// The Messages API over the DeepSeek adapter's client.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AnthropicWire {
    /// Body settings.
    pub request: RequestOptions,
}

impl AnthropicWire {
    /// A wire with `request` settings.
    pub fn new(request: RequestOptions) -> Self {
        AnthropicWire { request }
    }
}

/// The Messages endpoint for a base URL: `…/v1/messages` as given, `…/v1`
/// plus `/messages`, anything else plus `/v1/messages`.
pub fn messages_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/messages") {
        String::from(base)
    } else if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    }
}

/// The provider route a session records for a Messages endpoint at
/// `base_url`: `anthropic` for Anthropic's API, else
/// `anthropic-compatible:<host[:port]>`.
pub fn provider_route(base_url: &str) -> String {
    let authority = dsh_deepseek::url_authority(base_url);
    let host = authority.split(':').next().unwrap_or("");
    if host == "api.anthropic.com" {
        String::from("anthropic")
    } else {
        format!("anthropic-compatible:{authority}")
    }
}

impl WireDecoder for StreamDecoder {
    fn push(&mut self, piece: &[u8], out: &mut Vec<StreamChunk>) -> Result<bool, LlmError> {
        StreamDecoder::push(self, piece, out)
    }

    fn finish_into(&mut self, out: &mut Vec<StreamChunk>) -> Result<(), LlmError> {
        StreamDecoder::finish_into(self, out)
    }
}

impl Wire for AnthropicWire {
    fn endpoint(&self, base: &str) -> String {
        messages_url(base)
    }

    fn headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![
            ("x-api-key", String::from(key)),
            ("anthropic-version", String::from(ANTHROPIC_VERSION)),
        ]
    }

    fn body(&self, options: &GenerateOptions) -> Result<String, LlmError> {
        build_request_body(options, &self.request, None)
    }

    fn body_with(
        &self,
        options: &GenerateOptions,
        attachments: Option<&mut dyn dsh_deepseek::AttachmentSource>,
    ) -> Result<String, LlmError> {
        build_request_body(options, &self.request, attachments)
    }

    fn decoder(&self, max_event_bytes: usize) -> Box<dyn WireDecoder> {
        Box::new(StreamDecoder::new(max_event_bytes))
    }

    fn classify(
        &self,
        status: u16,
        body: &[u8],
        header: &dyn Fn(&str) -> Option<String>,
        now_unix_ms: Option<i64>,
    ) -> LlmError {
        crate::classify::classify_http_error(
            status,
            body,
            header("retry-after").as_deref(),
            header("request-id").as_deref(),
            now_unix_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_routes() {
        assert_eq!(
            messages_url("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            messages_url("http://h:4000/v1/"),
            "http://h:4000/v1/messages"
        );
        assert_eq!(
            messages_url("http://h:4000/anthropic/v1/messages"),
            "http://h:4000/anthropic/v1/messages"
        );
        assert_eq!(provider_route("https://api.anthropic.com"), "anthropic");
        assert_eq!(
            provider_route("http://127.0.0.1:4000/v1/messages"),
            "anthropic-compatible:127.0.0.1:4000"
        );
        let h = AnthropicWire::default().headers("sk-ant-1");
        assert_eq!(h[0], ("x-api-key", String::from("sk-ant-1")));
        assert_eq!(h[1].0, "anthropic-version");
    }
}
