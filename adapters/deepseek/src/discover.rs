//! Context-window discovery: where a server tells the context
//! window of the model it serves, and the parsers of those answers. Sans
//! I/O; the std client's `DeepSeekClient::discover_context_window` sends
//! the [`PROBES`] in order and keeps the first answer.
//!
//! Every parser takes the raw body and the model id and returns `None` on
//! anything it does not recognise (never an error: discovery is advisory).
//! A value outside [`MIN_WINDOW`]..=[`MAX_WINDOW`] is not believed.

use serde_json::Value;

/// The smallest context window believed, in tokens.
pub const MIN_WINDOW: u64 = 256;
/// The largest context window believed, in tokens.
pub const MAX_WINDOW: u64 = 1 << 32;
/// Largest discovery answer read, in bytes (OpenRouter's whole catalog is
/// a few MiB at most; anything larger is cut off and not parsed).
pub const MAX_DISCOVERY_BYTES: u64 = 8 * 1024 * 1024;

/// Which server answer a window came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowSource {
    /// `GET <base>/models`: vLLM `max_model_len`, OpenRouter
    /// `context_length`.
    Models,
    /// `GET /props` of llama.cpp's server: `default_generation_settings.n_ctx`.
    LlamaCppProps,
    /// `POST /api/show` of Ollama: `num_ctx` in `parameters`, else
    /// `model_info.<arch>.context_length`.
    OllamaShow,
    /// `GET /api/v0/models` of LM Studio: `loaded_context_length`, else
    /// `max_context_length`.
    LmStudio,
    /// `GET /model/info` of the LiteLLM proxy: `model_info.max_input_tokens`.
    LiteLlm,
}

impl WindowSource {
    /// A short name for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Models => "/models",
            WindowSource::LlamaCppProps => "llama.cpp /props",
            WindowSource::OllamaShow => "Ollama /api/show",
            WindowSource::LmStudio => "LM Studio /api/v0/models",
            WindowSource::LiteLlm => "LiteLLM /model/info",
        }
    }
}

/// Where a probe's path is joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeBase {
    /// The base URL as configured (`http://host:8000/v1`).
    Base,
    /// The scheme and authority only (`http://host:8000`).
    Root,
}

/// One discovery request.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Probe {
    /// What answers it.
    pub source: WindowSource,
    /// Where `path` is joined.
    pub base: ProbeBase,
    /// The path, starting with `/`.
    pub path: &'static str,
    /// `POST` with `{"model": <id>}` (Ollama) instead of `GET`.
    pub post_model: bool,
}

/// The probes, in the order they are tried.
pub const PROBES: [Probe; 5] = [
    Probe {
        source: WindowSource::Models,
        base: ProbeBase::Base,
        path: "/models",
        post_model: false,
    },
    Probe {
        source: WindowSource::LlamaCppProps,
        base: ProbeBase::Root,
        path: "/props",
        post_model: false,
    },
    Probe {
        source: WindowSource::OllamaShow,
        base: ProbeBase::Root,
        path: "/api/show",
        post_model: true,
    },
    Probe {
        source: WindowSource::LmStudio,
        base: ProbeBase::Root,
        path: "/api/v0/models",
        post_model: false,
    },
    Probe {
        source: WindowSource::LiteLlm,
        base: ProbeBase::Root,
        path: "/model/info",
        post_model: false,
    },
];

/// `scheme://authority` of `url`: what precedes its path, query or
/// fragment.
pub fn url_root(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url.get(after..).and_then(|rest| rest.find(['/', '?', '#'])) {
        Some(i) => url.get(..after + i).unwrap_or(url),
        None => url,
    }
}

/// Parses `body` as the answer of `source` for `model`.
pub fn parse_window(source: WindowSource, body: &[u8], model: &str) -> Option<u64> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let n = match source {
        WindowSource::Models | WindowSource::LmStudio => models_list(&v, model),
        WindowSource::LlamaCppProps => llamacpp_props(&v),
        WindowSource::OllamaShow => ollama_show(&v),
        WindowSource::LiteLlm => litellm_info(&v, model),
    }?;
    (MIN_WINDOW..=MAX_WINDOW).contains(&n).then_some(n)
}

fn uint(v: Option<&Value>) -> Option<u64> {
    v?.as_u64()
}

/// The entry of `list` (an array of objects) whose `key` is `model`; else
/// the only entry.
fn entry<'v>(list: &'v Value, key: &str, model: &str) -> Option<&'v Value> {
    let items = list.as_array()?;
    items
        .iter()
        .find(|e| e.get(key).and_then(Value::as_str) == Some(model))
        .or(match items.as_slice() {
            [only] => Some(only),
            _ => None,
        })
}

/// vLLM, OpenRouter, LM Studio: `{"data":[{"id", …}]}`.
fn models_list(v: &Value, model: &str) -> Option<u64> {
    let e = entry(v.get("data")?, "id", model)?;
    uint(e.get("max_model_len"))
        .or_else(|| uint(e.get("loaded_context_length")))
        .or_else(|| uint(e.get("max_context_length")))
        .or_else(|| uint(e.get("context_length")))
        .or_else(|| uint(e.get("top_provider")?.get("context_length")))
}

/// llama.cpp: `{"default_generation_settings":{"n_ctx"}}` (older: top
/// level `n_ctx`).
fn llamacpp_props(v: &Value) -> Option<u64> {
    uint(
        v.get("default_generation_settings")
            .and_then(|s| s.get("n_ctx")),
    )
    .or_else(|| uint(v.get("n_ctx")))
}

/// Ollama: `num_ctx` in the `parameters` text (what the server runs with),
/// else the model's `model_info.<arch>.context_length`.
fn ollama_show(v: &Value) -> Option<u64> {
    let configured = v.get("parameters").and_then(Value::as_str).and_then(|p| {
        p.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
    });
    configured.or_else(|| {
        v.get("model_info")?
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with(".context_length"))
            .and_then(|(_, n)| n.as_u64())
    })
}

/// LiteLLM: `{"data":[{"model_name","model_info":{"max_input_tokens"}}]}`.
fn litellm_info(v: &Value, model: &str) -> Option<u64> {
    let info = entry(v.get("data")?, "model_name", model)?.get("model_info")?;
    uint(info.get("max_input_tokens")).or_else(|| uint(info.get("max_tokens")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(source: WindowSource, body: &str, model: &str) -> Option<u64> {
        parse_window(source, body.as_bytes(), model)
    }

    #[test]
    fn vllm_models_max_model_len() {
        let body = r#"{"object":"list","data":[{"id":"Qwen/Qwen2.5-7B","object":"model","owned_by":"vllm","root":"Qwen/Qwen2.5-7B","max_model_len":32768,"permission":[]}]}"#;
        assert_eq!(
            parse(WindowSource::Models, body, "Qwen/Qwen2.5-7B"),
            Some(32768)
        );
        // A served name that differs: the only entry is the model.
        assert_eq!(parse(WindowSource::Models, body, "qwen"), Some(32768));
    }

    #[test]
    fn openrouter_models_context_length_by_id() {
        let body = r#"{"data":[{"id":"a/one","context_length":8192,"top_provider":{"context_length":4096}},{"id":"b/two","context_length":200000},{"id":"c/three","top_provider":{"context_length":65536}}]}"#;
        assert_eq!(parse(WindowSource::Models, body, "b/two"), Some(200000));
        assert_eq!(parse(WindowSource::Models, body, "a/one"), Some(8192));
        assert_eq!(parse(WindowSource::Models, body, "c/three"), Some(65536));
        // Several entries, none the model: nothing is guessed.
        assert_eq!(parse(WindowSource::Models, body, "z/none"), None);
        // OpenAI's own list carries no window.
        let openai = r#"{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1,"owned_by":"system"}]}"#;
        assert_eq!(parse(WindowSource::Models, openai, "gpt-4o"), None);
    }

    #[test]
    fn llamacpp_props_n_ctx() {
        let body = r#"{"default_generation_settings":{"n_ctx":8192,"params":{"n_predict":-1}},"total_slots":1,"model_path":"/m/smollm2.gguf","chat_template":"..."}"#;
        assert_eq!(parse(WindowSource::LlamaCppProps, body, "x"), Some(8192));
        assert_eq!(
            parse(WindowSource::LlamaCppProps, r#"{"n_ctx":4096}"#, "x"),
            Some(4096)
        );
        assert_eq!(
            parse(
                WindowSource::LlamaCppProps,
                r#"{"default_generation_settings":{}}"#,
                "x"
            ),
            None
        );
    }

    #[test]
    fn ollama_show_num_ctx_then_context_length() {
        let body = r#"{"modelfile":"FROM x","parameters":"stop                           \"<|eot_id|>\"\nnum_ctx                        16384","template":"t","details":{"family":"llama"},"model_info":{"general.architecture":"llama","llama.context_length":131072,"llama.embedding_length":4096}}"#;
        assert_eq!(
            parse(WindowSource::OllamaShow, body, "llama3.1"),
            Some(16384)
        );
        let body = r#"{"parameters":"stop \"x\"","model_info":{"general.architecture":"qwen2","qwen2.context_length":32768}}"#;
        assert_eq!(parse(WindowSource::OllamaShow, body, "qwen2"), Some(32768));
        assert_eq!(
            parse(
                WindowSource::OllamaShow,
                r#"{"error":"model 'x' not found"}"#,
                "x"
            ),
            None
        );
    }

    #[test]
    fn lmstudio_v0_models() {
        let body = r#"{"object":"list","data":[{"id":"qwen2-vl-7b-instruct","object":"model","type":"vlm","state":"not-loaded","max_context_length":32768},{"id":"meta-llama-3.1-8b-instruct","type":"llm","state":"loaded","loaded_context_length":4096,"max_context_length":131072}]}"#;
        assert_eq!(
            parse(WindowSource::LmStudio, body, "meta-llama-3.1-8b-instruct"),
            Some(4096)
        );
        assert_eq!(
            parse(WindowSource::LmStudio, body, "qwen2-vl-7b-instruct"),
            Some(32768)
        );
    }

    #[test]
    fn litellm_model_info_max_input_tokens() {
        let body = r#"{"data":[{"model_name":"gpt-mock","litellm_params":{"model":"openai/gpt-4o"},"model_info":{"id":"1","max_tokens":4096,"max_input_tokens":128000}},{"model_name":"small","model_info":{"max_tokens":8192,"max_input_tokens":null}}]}"#;
        assert_eq!(parse(WindowSource::LiteLlm, body, "gpt-mock"), Some(128000));
        assert_eq!(parse(WindowSource::LiteLlm, body, "small"), Some(8192));
        assert_eq!(parse(WindowSource::LiteLlm, body, "other"), None);
    }

    #[test]
    fn junk_and_absurd_values_are_not_believed() {
        for body in [
            "",
            "null",
            "[1]",
            "{\"data\":5}",
            "{\"data\":[{\"id\":\"m\",\"max_model_len\":\"8k\"}]}",
            "\u{0}",
        ] {
            assert_eq!(parse(WindowSource::Models, body, "m"), None, "{body:?}");
        }
        let tiny = r#"{"data":[{"id":"m","max_model_len":16}]}"#;
        assert_eq!(parse(WindowSource::Models, tiny, "m"), None);
        let huge = r#"{"data":[{"id":"m","max_model_len":1e30}]}"#;
        assert_eq!(parse(WindowSource::Models, huge, "m"), None);
        let neg = r#"{"n_ctx":-5}"#;
        assert_eq!(parse(WindowSource::LlamaCppProps, neg, "m"), None);
    }

    #[test]
    fn roots() {
        assert_eq!(
            url_root("http://127.0.0.1:8765/v1"),
            "http://127.0.0.1:8765"
        );
        assert_eq!(
            url_root("https://openrouter.ai/api/v1"),
            "https://openrouter.ai"
        );
        assert_eq!(url_root("http://h:1"), "http://h:1");
        assert_eq!(url_root("http://h?x=1"), "http://h");
    }
}
