//! D-5 step 2 and D-2: the API key from the environment variable named by
//! `apiKeyEnv`, and `$DEEPSEEK_BASE_URL` when the config has no base URL.
//! One test in its own binary, so no other thread reads the environment
//! while it is changed.

#![cfg(feature = "mock")]

use dsh_core::{ContentBlock, GenerateOptions, Message};
use dsh_deepseek::mock::{MockServer, Script};
use dsh_deepseek::{CancelToken, ClientOptions, DeepSeekClient, DeepSeekConfig};

#[test]
fn key_and_base_url_come_from_the_environment() {
    let server = MockServer::start(
        Script::from_json(r#"{"responses":[{"turn":{"text":["ok"]}}]}"#).unwrap(),
    )
    .unwrap();
    let config = DeepSeekConfig {
        api_key_env: "DSH_TEST_DEEPSEEK_KEY".into(),
        ..DeepSeekConfig::default()
    };
    let opts = ClientOptions {
        proxy_from_env: false,
        ..ClientOptions::default()
    };
    let client = DeepSeekClient::with_options(config, opts).unwrap();
    let o = GenerateOptions::new(
        "deepseek-official",
        "m",
        vec![std::sync::Arc::new(Message::user(
            "1",
            vec![ContentBlock::text("hi")],
        ))],
    );

    // SAFETY: this binary has a single test; no other thread touches the environment.
    unsafe { std::env::remove_var("DSH_TEST_DEEPSEEK_KEY") };
    let e = client.stream(&o, &CancelToken::new()).unwrap_err();
    assert_eq!(e.failure().code, "MISSING_CREDENTIAL");
    assert!(e.failure().message.contains("export DSH_TEST_DEEPSEEK_KEY"));
    unsafe { std::env::set_var("DSH_TEST_DEEPSEEK_KEY", "") };
    assert_eq!(
        client
            .stream(&o, &CancelToken::new())
            .unwrap_err()
            .failure()
            .code,
        "MISSING_CREDENTIAL"
    );

    unsafe {
        std::env::set_var("DSH_TEST_DEEPSEEK_KEY", "  sk-env-1\n");
        std::env::set_var("DEEPSEEK_BASE_URL", server.url());
    }
    assert_eq!(client.base_url(), server.url());
    let n = client
        .stream(&o, &CancelToken::new())
        .unwrap()
        .map(Result::unwrap)
        .count();
    assert_eq!(n, 4);
    let r = &server.requests()[0];
    assert_eq!(r.header_values("authorization"), vec!["Bearer sk-env-1"]);
    unsafe { std::env::remove_var("DEEPSEEK_BASE_URL") };
    assert_eq!(client.base_url(), "https://api.deepseek.com");
}
