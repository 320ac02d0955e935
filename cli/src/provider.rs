//! Which model endpoint a live command talks to, and how: DeepSeek by
//! default when `DEEPSEEK_API_KEY` is set; `--base-url`, `--model` and
//! `--api-key-env` for any OpenAI-compatible endpoint; `--effort`,
//! `--temperature`, `--max-tokens` for the requests. Every setting may also
//! come from the config file ([`crate::config_file`]); a flag overrides it.

use clap::Args;

use crate::config_file::ConfigFile;
use crate::secrets::BaseUrl;

/// The default model id.
pub const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// Provider flags shared by `chat`, `run`, `fork` and `acp`.
#[derive(Args, Clone, Debug, Default)]
pub struct ProviderArgs {
    /// The API the endpoint speaks: `openai` (OpenAI-compatible chat
    /// completions, DeepSeek's own included) or `anthropic` (the Anthropic
    /// Messages API) [default: anthropic for a base URL at
    /// api.anthropic.com or ending in /v1/messages, else openai].
    #[arg(long, value_name = "API", value_parser = ["openai", "anthropic"])]
    pub provider: Option<String>,
    /// Base URL of an OpenAI-compatible endpoint (default: `$DEEPSEEK_BASE_URL`,
    /// else <https://api.deepseek.com>). Credentials in it (`user:pass@`)
    /// belong in `$DEEPSEEK_BASE_URL` or the config file: on the command
    /// line every local user can read them.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model id [default: deepseek-v4-flash].
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// The model takes image input (`--image`, `/image`, `read_image`, ACP
    /// image prompts) [config: `[models."ID"] images = true`].
    #[arg(long)]
    pub images: bool,
    /// The environment variable holding the API key [default: DEEPSEEK_API_KEY].
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
    /// Reasoning effort: off, low, high or max (default: the model's).
    #[arg(long, value_name = "LEVEL", value_parser = effort)]
    pub effort: Option<String>,
    /// Sampling temperature, 0 to 2 (default: the server's).
    #[arg(long, value_name = "T", value_parser = temperature)]
    pub temperature: Option<f64>,
    /// Output token cap of each request (default: the server's).
    #[arg(long, value_name = "N", value_parser = max_tokens)]
    pub max_tokens: Option<u64>,
    /// The model's context window in tokens, for compaction (default: what
    /// the server tells, else DeepSeek's known windows, else 32768).
    #[arg(long, value_name = "N", value_parser = context_window)]
    pub context_window: Option<u64>,
    #[command(flatten)]
    pub client: ClientFlags,
}

/// The client flags; unset ones fall back to the config file, then to
/// [`ClientSettings::default`].
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct ClientFlags {
    /// Give up on a model response after this many seconds without data
    /// [default: 300].
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub idle_timeout: Option<f64>,
    /// Model request attempts per step, the first one included (1: never
    /// retry) [default: 6].
    #[arg(long, value_name = "N", value_parser = attempts)]
    pub attempts: Option<u64>,
    /// Longest wait before a retry, in seconds [default: 10]. A server
    /// asking (Retry-After) for a longer wait ends the turn instead, and
    /// says so.
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub max_retry_wait: Option<f64>,
    /// Largest SSE line, event or JSON body accepted from the server, in
    /// bytes [default: 16777216].
    #[arg(long, value_name = "BYTES", value_parser = event_bytes)]
    pub max_event_bytes: Option<usize>,
    /// Largest model response, in bytes: its text, reasoning and tool
    /// calls, plus 64 a chunk; past it the turn ends in error
    /// RESPONSE_TOO_LARGE [default: 33554432].
    #[arg(long, value_name = "BYTES", value_parser = response_bytes)]
    pub max_response_bytes: Option<u64>,
    /// Most model steps in one turn; at the next one the turn ends
    /// aborted (cause hook, "max steps per turn (N) reached"); 0: no limit
    /// [default: 200].
    #[arg(long, value_name = "N", value_parser = steps)]
    pub max_steps: Option<u64>,
}

/// How patiently the model client talks to the server (resolved from the
/// flags, the config file and the defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientSettings {
    /// Idle budget of a response, in seconds.
    pub idle_timeout: f64,
    /// Attempts per step, the first one included.
    pub attempts: u64,
    /// Longest retry wait, in seconds.
    pub max_retry_wait: f64,
    /// Largest SSE line, event or JSON body, in bytes.
    pub max_event_bytes: usize,
    /// Largest model response, in bytes.
    pub max_response_bytes: u64,
    /// Most steps in one turn, 0: no limit.
    pub max_steps: u64,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            idle_timeout: 300.0,
            attempts: 6,
            max_retry_wait: 10.0,
            max_event_bytes: dsh_deepseek::DEFAULT_MAX_EVENT_BYTES,
            max_response_bytes: dsh_std::DEFAULT_MAX_RESPONSE_BYTES,
            max_steps: dsh_std::DEFAULT_MAX_STEPS_PER_TURN,
        }
    }
}

impl ClientSettings {
    /// The idle budget in whole milliseconds (at least 1).
    pub fn idle_timeout_ms(&self) -> u64 {
        ((self.idle_timeout * 1000.0).round() as u64).max(1)
    }

    /// The longest retry wait in milliseconds (at least 1).
    pub fn max_retry_wait_ms(&self) -> f64 {
        (self.max_retry_wait * 1000.0).round().max(1.0)
    }

    /// The retry policy these settings give: the default policy with
    /// `attempts - 1` retries, delays capped at `--max-retry-wait`, and
    /// `STREAM_CLOSED` retryable too (streaming.md Q-5 flags its absence
    /// from the defaults as unintentional; with the interop decoder a
    /// stream that already got its `finish_reason` is complete, so what is
    /// left of `STREAM_CLOSED` is a reply really cut short).
    pub fn retry_policy(&self) -> dsh_core::agent::retry::RetryPolicy {
        use dsh_core::agent::retry::{Backoff, DEFAULT_INITIAL_DELAY_MS, RetryPolicy};
        let max = self.max_retry_wait_ms();
        let mut policy = RetryPolicy::default();
        if let RetryPolicy::Normal {
            max_retries,
            backoff,
            retryable_codes,
        } = &mut policy
        {
            retryable_codes.push(dsh_deepseek::codes::STREAM_CLOSED.to_string());
            *max_retries = self.attempts.saturating_sub(1);
            *backoff = {
                let mut backoff = Backoff::default();
                backoff.initial_delay_ms = DEFAULT_INITIAL_DELAY_MS.min(max);
                backoff.max_delay_ms = max;
                backoff
            };
        }
        policy
    }
}

/// An attempt count between 1 and 1000.
pub fn attempts(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) if (1..=1000).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a number of attempts between 1 and 1000"
        )),
    }
}

/// A reasoning effort id DeepSeek knows.
pub fn effort(text: &str) -> Result<String, String> {
    match dsh_deepseek::Effort::parse(text) {
        Some(e) => Ok(e.as_str().to_string()),
        None => Err(format!("{text:?} is not an effort (off, low, high, max)")),
    }
}

/// A finite temperature between 0 and 2.
pub fn temperature(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=2.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a temperature between 0 and 2")),
    }
}

/// A positive token count (a safe integer).
pub fn max_tokens(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) if (1..=(1u64 << 53) - 1).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a positive token count")),
    }
}

/// A context window between 512 and 2^32 tokens.
pub fn context_window(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) if (512..=(1u64 << 32)).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a context window between 512 and 4294967296 tokens"
        )),
    }
}

/// A byte limit between 1 KiB and 4 GiB.
pub fn event_bytes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(v) if (1024..=(1usize << 32)).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a byte count between 1024 and 4294967296"
        )),
    }
}

/// A response cap between 1 KiB and 4 GiB.
pub fn response_bytes(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) if (1024..=(1u64 << 32)).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a byte count between 1024 and 4294967296"
        )),
    }
}

/// A step count between 0 (no limit) and 1000000.
pub fn steps(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) if v <= 1_000_000 => Ok(v),
        _ => Err(format!(
            "{text:?} is not a number of steps between 0 (no limit) and 1000000"
        )),
    }
}

/// A positive, finite number of seconds, at most 2147483 (the timer limit).
pub fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 2_147_483.0 => Ok(v),
        _ => Err(format!(
            "{text:?} is not a number of seconds between 0 and 2147483"
        )),
    }
}

/// The API an endpoint speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    /// OpenAI-compatible chat completions (DeepSeek's API included).
    #[default]
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
}

/// The resolved endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Provider {
    /// The API spoken.
    pub api: Api,
    /// The base URL (flag, config file or `$DEEPSEEK_BASE_URL`; `None`: the
    /// adapter's default). Its credentials are shown redacted only.
    pub base_url: Option<BaseUrl>,
    /// Model id.
    pub model: String,
    /// Whether the model takes images.
    pub images: bool,
    /// The attachment store images are kept in (set by the command from
    /// its store folder; `None`: no images).
    pub attachments: Option<std::path::PathBuf>,
    /// Name of the key variable.
    pub api_key_env: String,
    /// Whether the key variable is set (non-empty). A keyless local endpoint
    /// still needs a placeholder key on the wire; see [`Provider::key_placeholder`].
    pub has_key: bool,
    /// Timeouts, retries and limits.
    pub client: ClientSettings,
    /// Reasoning effort id of every request.
    pub effort: Option<String>,
    /// Temperature of every request.
    pub temperature: Option<f64>,
    /// Output token cap of every request.
    pub max_tokens: Option<u64>,
    /// The context window the user set (flag, else the config file's
    /// entry for the model, else its `context_window`).
    pub context_window: Option<u64>,
}

impl Provider {
    /// A placeholder key to send when an explicit base URL was given and the
    /// key variable is unset (local endpoints ignore the key).
    pub fn key_placeholder(&self) -> Option<&'static str> {
        (!self.has_key).then_some("dsh-no-key")
    }
}

/// Resolves the provider from the flags over `file`.
///
/// Without a key and without any base URL (flag, file or
/// `$DEEPSEEK_BASE_URL`) there is nothing to talk to: the error says what
/// to set and points at the offline demo.
pub fn resolve_with(
    args: &ProviderArgs,
    file: &ConfigFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, String> {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    let flag_url = args
        .base_url
        .clone()
        .filter(|u| !u.is_empty())
        .map(BaseUrl::new);
    let explicit = flag_url.or_else(|| {
        file.base_url
            .clone()
            .filter(|u| !u.is_empty())
            .map(BaseUrl::new)
    });
    let api = match args.provider.as_deref().or(file.provider.as_deref()) {
        Some("anthropic") => Api::Anthropic,
        Some(_) => Api::OpenAi,
        None if explicit
            .as_ref()
            .is_some_and(|u| dsh_anthropic::is_anthropic_url(u.expose())) =>
        {
            Api::Anthropic
        }
        None => Api::OpenAi,
    };
    let default_key = match api {
        Api::Anthropic => dsh_anthropic::DEFAULT_API_KEY_ENV,
        Api::OpenAi => dsh_deepseek::DEFAULT_API_KEY_ENV,
    };
    let api_key_env = args
        .api_key_env
        .clone()
        .or_else(|| file.api_key_env.clone())
        .unwrap_or_else(|| default_key.to_string());
    let has_key = set(&api_key_env);
    if api == Api::Anthropic && !has_key && explicit.is_none() {
        return Err(format!(
            "dsh: no API key. Set {api_key_env} to an Anthropic API key, or use --base-url URL \
             for an Anthropic-compatible gateway."
        ));
    }
    let base_url = match api {
        Api::Anthropic => {
            explicit.or_else(|| Some(BaseUrl::new(dsh_anthropic::DEFAULT_BASE_URL.to_string())))
        }
        Api::OpenAi => explicit.or_else(|| {
            env(dsh_deepseek::BASE_URL_ENV)
                .filter(|u| !u.trim().is_empty())
                .map(BaseUrl::new)
        }),
    };
    if !has_key && base_url.is_none() {
        return Err(format!(
            "dsh: no API key. Set {key} to a DeepSeek API key (export {key}=sk-...), \
             or use --base-url URL [--api-key-env NAME] [--model ID] for another \
             OpenAI-compatible endpoint.\n\
             To try dsh offline with a bundled mock model, run: dsh demo",
            key = api_key_env
        ));
    }
    let model = match (args.model.clone().or_else(|| file.model.clone()), api) {
        (Some(m), _) => m,
        (None, Api::OpenAi) => DEFAULT_MODEL.to_string(),
        (None, Api::Anthropic) => {
            return Err("dsh: --model is required with the Anthropic API".to_string());
        }
    };
    if model.trim().is_empty() {
        return Err("dsh: --model must not be empty".to_string());
    }
    let context_window = args
        .context_window
        .or_else(|| file.context_window_for(&model));
    let d = ClientSettings::default();
    let f = &args.client;
    let client = ClientSettings {
        idle_timeout: f
            .idle_timeout
            .or(file.idle_timeout)
            .unwrap_or(d.idle_timeout),
        attempts: f.attempts.or(file.attempts).unwrap_or(d.attempts),
        max_retry_wait: f
            .max_retry_wait
            .or(file.max_retry_wait)
            .unwrap_or(d.max_retry_wait),
        max_event_bytes: f
            .max_event_bytes
            .or(file.max_event_bytes)
            .unwrap_or(d.max_event_bytes),
        max_response_bytes: f
            .max_response_bytes
            .or(file.max_response_bytes)
            .unwrap_or(d.max_response_bytes),
        max_steps: f.max_steps.or(file.max_steps).unwrap_or(d.max_steps),
    };
    let images = args.images
        || file
            .models
            .get(&model)
            .and_then(|m| m.images)
            .unwrap_or(false);
    Ok(Provider {
        api,
        base_url,
        images,
        attachments: None,
        model,
        api_key_env,
        has_key,
        client,
        effort: args.effort.clone().or_else(|| file.effort.clone()),
        temperature: args.temperature.or(file.temperature),
        max_tokens: args.max_tokens.or(file.max_tokens),
        context_window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ProviderArgs {
        ProviderArgs::default()
    }

    fn resolve(
        args: &ProviderArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Provider, String> {
        resolve_with(args, &ConfigFile::default(), env)
    }

    /// The Anthropic API by flag or by URL, with its own key
    /// variable and default base URL; no key and no URL is an error.
    #[test]
    fn the_anthropic_api_is_chosen_by_flag_or_url() {
        let key = |k: &str| (k == "ANTHROPIC_API_KEY").then(|| "sk-ant".to_string());
        let flag = ProviderArgs {
            provider: Some("anthropic".into()),
            model: Some("claude".into()),
            ..ProviderArgs::default()
        };
        let p = resolve(&flag, &key).unwrap();
        assert_eq!(p.api, Api::Anthropic);
        assert_eq!(p.api_key_env, "ANTHROPIC_API_KEY");
        assert!(p.has_key);
        assert_eq!(
            p.base_url.as_ref().map(|u| u.expose()),
            Some("https://api.anthropic.com")
        );
        let e = resolve(&flag, &|_| None).unwrap_err();
        assert!(e.contains("ANTHROPIC_API_KEY"), "{e}");
        let by_url = ProviderArgs {
            base_url: Some("http://127.0.0.1:4000/v1/messages".into()),
            model: Some("claude".into()),
            ..ProviderArgs::default()
        };
        let p = resolve(&by_url, &|_| None).unwrap();
        assert_eq!(p.api, Api::Anthropic);
        assert!(!p.has_key);
        let openai = ProviderArgs {
            provider: Some("openai".into()),
            ..by_url.clone()
        };
        assert_eq!(resolve(&openai, &|_| None).unwrap().api, Api::OpenAi);
        let no_model = ProviderArgs {
            model: None,
            ..by_url
        };
        assert!(
            resolve(&no_model, &|_| None)
                .unwrap_err()
                .contains("--model")
        );
    }

    #[test]
    fn flags_override_the_file_and_the_file_the_defaults() {
        let env = |k: &str| (k == "DEEPSEEK_API_KEY").then(|| "sk-x".to_string());
        let file = crate::config_file::parse(
            "model = \"m\"\nattempts = 2\nidle_timeout = 7\nmax_retry_wait = 3\nmax_event_bytes = 4096\nmax_response_bytes = 8192\nmax_steps = 7\neffort = \"low\"\ntemperature = 1\nmax_tokens = 9\napi_key_env = \"OTHER\"\nbase_url = \"http://f\"",
        )
        .unwrap();
        let p = resolve_with(&args(), &file, &env).unwrap();
        assert_eq!(p.model, "m");
        assert_eq!(
            p.client,
            ClientSettings {
                idle_timeout: 7.0,
                attempts: 2,
                max_retry_wait: 3.0,
                max_event_bytes: 4096,
                max_response_bytes: 8192,
                max_steps: 7,
            }
        );
        assert_eq!(p.effort.as_deref(), Some("low"));
        assert_eq!(p.temperature, Some(1.0));
        assert_eq!(p.max_tokens, Some(9));
        assert_eq!(p.api_key_env, "OTHER");
        assert!(!p.has_key, "the file's key variable is the one read");
        assert_eq!(p.base_url, Some(BaseUrl::new("http://f")));
        let flags = ProviderArgs {
            model: Some("f".into()),
            effort: Some("max".into()),
            temperature: Some(0.0),
            max_tokens: Some(1),
            api_key_env: Some("DEEPSEEK_API_KEY".into()),
            client: ClientFlags {
                attempts: Some(1),
                idle_timeout: Some(1.0),
                ..ClientFlags::default()
            },
            ..ProviderArgs::default()
        };
        let p = resolve_with(&flags, &file, &env).unwrap();
        assert_eq!(p.model, "f");
        assert_eq!(p.client.attempts, 1);
        assert_eq!(p.client.idle_timeout, 1.0);
        assert_eq!(p.client.max_retry_wait, 3.0, "unset flag: the file's");
        assert_eq!(p.effort.as_deref(), Some("max"));
        assert_eq!(p.temperature, Some(0.0));
        assert_eq!(p.max_tokens, Some(1));
        assert!(p.has_key);
        let none = resolve(&args(), &env).unwrap();
        assert_eq!(none.client, ClientSettings::default());
        assert_eq!(
            (none.effort, none.temperature, none.max_tokens),
            (None, None, None)
        );
    }

    #[test]
    fn item9_settings_become_the_retry_policy_and_idle_budget() {
        use dsh_core::agent::retry::RetryPolicy;
        let s = ClientSettings {
            idle_timeout: 1.5,
            attempts: 2,
            max_retry_wait: 30.0,
            ..ClientSettings::default()
        };
        assert_eq!(s.idle_timeout_ms(), 1500);
        match s.retry_policy() {
            RetryPolicy::Normal {
                max_retries,
                backoff,
                ..
            } => {
                assert_eq!(max_retries, 1);
                assert_eq!(backoff.max_delay_ms, 30_000.0);
                assert_eq!(backoff.initial_delay_ms, 500.0);
            }
            other => panic!("{other:?}"),
        }
        // The defaults are the spec's (R-5: 5 retries, 10 s cap), plus a
        // retryable STREAM_CLOSED.
        match ClientSettings::default().retry_policy() {
            RetryPolicy::Normal {
                max_retries,
                retryable_codes,
                backoff,
            } => {
                assert_eq!(max_retries, 5);
                assert_eq!(backoff, dsh_core::agent::retry::Backoff::default());
                assert_eq!(
                    retryable_codes,
                    [
                        "EMPTY_RESPONSE",
                        "RATE_LIMIT",
                        "SERVER",
                        "TIMEOUT",
                        "TRANSPORT",
                        "STREAM_CLOSED"
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        let tiny = ClientSettings {
            max_retry_wait: 0.1,
            ..ClientSettings::default()
        };
        if let RetryPolicy::Normal { backoff, .. } = tiny.retry_policy() {
            assert!(backoff.initial_delay_ms <= backoff.max_delay_ms);
        }
        assert!(seconds("0").is_err() && seconds("nan").is_err() && seconds("2.5").is_ok());
    }

    #[test]
    fn deepseek_by_default_with_a_key() {
        let env = |k: &str| (k == "DEEPSEEK_API_KEY").then(|| "sk-x".to_string());
        let p = resolve(&args(), &env).unwrap();
        assert_eq!(p.base_url, None);
        assert_eq!(p.model, "deepseek-v4-flash");
        assert!(p.has_key);
        assert_eq!(p.key_placeholder(), None);
    }

    #[test]
    fn no_key_no_url_names_the_variable_and_the_demo() {
        let err = resolve(&args(), &|_| None).unwrap_err();
        assert!(err.contains("DEEPSEEK_API_KEY"), "{err}");
        assert!(err.contains("--base-url"), "{err}");
        assert!(err.contains("dsh demo"), "{err}");
        // A blank key counts as unset.
        let err = resolve(&args(), &|_| Some("  ".into())).unwrap_err();
        assert!(err.contains("dsh demo"));
    }

    #[test]
    fn custom_key_variable_is_named_in_the_error() {
        let mut a = args();
        a.api_key_env = Some("MY_KEY".into());
        let err = resolve(&a, &|k| (k == "DEEPSEEK_API_KEY").then(|| "sk".into())).unwrap_err();
        assert!(err.contains("MY_KEY"), "{err}");
    }

    #[test]
    fn base_url_without_key_is_a_local_endpoint() {
        let mut a = args();
        a.base_url = Some("http://127.0.0.1:8080/v1".into());
        a.model = Some("llama".into());
        let p = resolve(&a, &|_| None).unwrap();
        assert_eq!(p.base_url, Some(BaseUrl::new("http://127.0.0.1:8080/v1")));
        assert!(!p.has_key);
        assert_eq!(p.key_placeholder(), Some("dsh-no-key"));
        // $DEEPSEEK_BASE_URL counts as a base URL too.
        let env = |k: &str| (k == "DEEPSEEK_BASE_URL").then(|| "http://h".to_string());
        assert!(resolve(&args(), &env).is_ok());
    }
}
