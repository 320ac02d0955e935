//! Context-window discovery over HTTP against the mock server
//! standing in for vLLM, llama.cpp, Ollama and LiteLLM: the probes' order,
//! methods and key, the first answer winning, the size cap, and a server
//! that tells nothing.

use std::sync::Arc;
use std::time::Duration;

use dsh_deepseek::discover::{MAX_DISCOVERY_BYTES, WindowSource};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{ClientOptions, DeepSeekClient, DeepSeekConfig};
use serde_json::{Value, json};

const KEY: &str = "sk-test-SECRET-4242";

fn server(other_paths: Value) -> MockServer {
    let script = json!({"responses": [], "otherPaths": other_paths});
    MockServer::start(serde_json::from_value::<Script>(script).unwrap()).unwrap()
}

fn client(url: String) -> DeepSeekClient {
    let config = DeepSeekConfig {
        base_url: Some(url),
        ..DeepSeekConfig::default()
    };
    let options = ClientOptions {
        credentials: Some(Arc::new(|_: &str| Some(String::from(KEY)))),
        proxy_from_env: false,
        ..ClientOptions::default()
    };
    DeepSeekClient::with_options(config, options).unwrap()
}

fn discover(s: &MockServer, model: &str) -> Option<(u64, WindowSource)> {
    client(format!("{}/v1", s.url())).discover_context_window(
        model,
        Duration::from_secs(5),
        Duration::from_secs(20),
    )
}

/// `(method, path)` of the probes the server saw.
fn probes(s: &MockServer) -> Vec<(String, String)> {
    s.other_requests()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect()
}

#[test]
fn vllm_models_answers_first() {
    let s = server(json!({"/v1/models": {"data": [{"id": "m", "max_model_len": 32768}]}}));
    assert_eq!(discover(&s, "m"), Some((32768, WindowSource::Models)));
    assert_eq!(probes(&s), vec![("GET".into(), "/v1/models".into())]);
    // The key goes as on a chat call; no request reached the script.
    let r = &s.other_requests()[0];
    assert_eq!(
        r.header_values("authorization"),
        vec![format!("Bearer {KEY}")]
    );
    assert!(s.requests().is_empty());
}

#[test]
fn llamacpp_props_after_a_models_list_without_a_window() {
    let s = server(json!({
        "/v1/models": {"object": "list", "data": [{"id": "smollm2", "object": "model"}]},
        "/props": {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}
    }));
    assert_eq!(
        discover(&s, "smollm2"),
        Some((8192, WindowSource::LlamaCppProps))
    );
    assert_eq!(
        probes(&s),
        vec![
            ("GET".into(), "/v1/models".into()),
            ("GET".into(), "/props".into())
        ]
    );
}

#[test]
fn ollama_show_is_a_post_naming_the_model() {
    let s = server(json!({
        "/api/show": {"parameters": "num_ctx 4096", "model_info": {"llama.context_length": 131072}}
    }));
    assert_eq!(
        discover(&s, "llama3.1:8b"),
        Some((4096, WindowSource::OllamaShow))
    );
    let show = s.other_requests().pop().unwrap();
    assert_eq!(
        (show.method.as_str(), show.path.as_str()),
        ("POST", "/api/show")
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&show.body).unwrap(),
        json!({"model": "llama3.1:8b"})
    );
}

#[test]
fn litellm_model_info_last() {
    let s = server(json!({
        "/model/info": {"data": [{"model_name": "gpt-mock", "model_info": {"max_input_tokens": 128000}}]}
    }));
    assert_eq!(
        discover(&s, "gpt-mock"),
        Some((128000, WindowSource::LiteLlm))
    );
    assert_eq!(probes(&s).len(), 5, "every probe tried in order");
    assert_eq!(probes(&s)[4].1, "/model/info");
}

#[test]
fn a_server_that_tells_nothing_gives_none() {
    let s = server(json!({}));
    assert_eq!(discover(&s, "m"), None);
    assert_eq!(probes(&s).len(), 5);
    // A server that is not there: one failed connection ends discovery.
    let gone = s.url();
    drop(s);
    assert_eq!(
        client(format!("{gone}/v1")).discover_context_window(
            "m",
            Duration::from_secs(5),
            Duration::from_secs(20)
        ),
        None
    );
}

#[test]
fn an_answer_over_the_cap_is_not_read() {
    let padding = "x".repeat(MAX_DISCOVERY_BYTES as usize);
    let s = server(json!({
        "/v1/models": {"data": [{"id": "m", "max_model_len": 32768}], "pad": padding}
    }));
    // The oversized list is dropped; nothing else tells.
    assert_eq!(discover(&s, "m"), None);
}
