//! Which model endpoint a live command talks to: DeepSeek by default when
//! `DEEPSEEK_API_KEY` is set; `--base-url`, `--model` and `--api-key-env`
//! for any OpenAI-compatible endpoint.

use clap::Args;

/// The default model id.
pub const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// Provider flags shared by `chat`, `run` and `fork`.
#[derive(Args, Clone, Debug, Default)]
pub struct ProviderArgs {
    /// Base URL of an OpenAI-compatible endpoint (default: `$DEEPSEEK_BASE_URL`,
    /// else <https://api.deepseek.com>).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model id.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// The environment variable holding the API key.
    #[arg(long, value_name = "NAME", default_value = dsh_deepseek::DEFAULT_API_KEY_ENV)]
    pub api_key_env: String,
    #[command(flatten)]
    pub client: ClientSettings,
}

/// How patiently the model client talks to the server: one struct the
/// flags fill (and, later, the config file).
#[derive(Args, Clone, Debug, PartialEq)]
pub struct ClientSettings {
    /// Give up on a model response after this many seconds without data.
    #[arg(long, value_name = "SECS", default_value_t = 300.0, value_parser = seconds)]
    pub idle_timeout: f64,
    /// Model request attempts per step, the first one included (1: never
    /// retry).
    #[arg(long, value_name = "N", default_value_t = 6,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub attempts: u64,
    /// Longest wait before a retry, in seconds. A server asking (Retry-After)
    /// for a longer wait ends the turn instead, and says so.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = seconds)]
    pub max_retry_wait: f64,
    /// Largest SSE line, event or JSON body accepted from the server, in
    /// bytes.
    #[arg(long, value_name = "BYTES", default_value_t = dsh_deepseek::DEFAULT_MAX_EVENT_BYTES,
          value_parser = event_bytes)]
    pub max_event_bytes: usize,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            idle_timeout: 300.0,
            attempts: 6,
            max_retry_wait: 10.0,
            max_event_bytes: dsh_deepseek::DEFAULT_MAX_EVENT_BYTES,
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
            *backoff = Backoff {
                initial_delay_ms: DEFAULT_INITIAL_DELAY_MS.min(max),
                max_delay_ms: max,
                ..Backoff::default()
            };
        }
        policy
    }
}

/// A byte limit between 1 KiB and 4 GiB.
fn event_bytes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(v) if (1024..=(1usize << 32)).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a byte count between 1024 and 4294967296"
        )),
    }
}

/// A positive, finite number of seconds, at most 2147483 (the timer limit).
fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 2_147_483.0 => Ok(v),
        _ => Err(format!(
            "{text:?} is not a number of seconds between 0 and 2147483"
        )),
    }
}

/// The resolved endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Provider {
    /// Explicit base URL (`None`: the adapter's default rule).
    pub base_url: Option<String>,
    /// Model id.
    pub model: String,
    /// Name of the key variable.
    pub api_key_env: String,
    /// Whether the key variable is set (non-empty). A keyless local endpoint
    /// still needs a placeholder key on the wire; see [`Provider::key_placeholder`].
    pub has_key: bool,
    /// Timeouts, retries and limits.
    pub client: ClientSettings,
}

impl Provider {
    /// A placeholder key to send when an explicit base URL was given and the
    /// key variable is unset (local endpoints ignore the key).
    pub fn key_placeholder(&self) -> Option<&'static str> {
        (!self.has_key).then_some("dsh-no-key")
    }
}

/// Resolves the provider from the flags and `env` (a lookup of environment
/// variables, so tests need not change the process environment).
///
/// Without a key and without any base URL (flag or `$DEEPSEEK_BASE_URL`)
/// there is nothing to talk to: the error says what to set and points at the
/// offline demo.
pub fn resolve(
    args: &ProviderArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, String> {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    let has_key = set(&args.api_key_env);
    let base_url = args.base_url.clone().filter(|u| !u.is_empty());
    if !has_key && base_url.is_none() && !set(dsh_deepseek::BASE_URL_ENV) {
        return Err(format!(
            "dsh: no API key. Set {key} to a DeepSeek API key (export {key}=sk-...), \
             or use --base-url URL [--api-key-env NAME] [--model ID] for another \
             OpenAI-compatible endpoint.\n\
             To try dsh offline with a bundled mock model, run: dsh demo",
            key = args.api_key_env
        ));
    }
    if args.model.trim().is_empty() {
        return Err("dsh: --model must not be empty".to_string());
    }
    Ok(Provider {
        base_url,
        model: args.model.clone(),
        api_key_env: args.api_key_env.clone(),
        has_key,
        client: args.client.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ProviderArgs {
        ProviderArgs {
            base_url: None,
            model: DEFAULT_MODEL.into(),
            api_key_env: "DEEPSEEK_API_KEY".into(),
            client: ClientSettings::default(),
        }
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
        a.api_key_env = "MY_KEY".into();
        let err = resolve(&a, &|k| (k == "DEEPSEEK_API_KEY").then(|| "sk".into())).unwrap_err();
        assert!(err.contains("MY_KEY"), "{err}");
    }

    #[test]
    fn base_url_without_key_is_a_local_endpoint() {
        let mut a = args();
        a.base_url = Some("http://127.0.0.1:8080/v1".into());
        a.model = "llama".into();
        let p = resolve(&a, &|_| None).unwrap();
        assert_eq!(p.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
        assert!(!p.has_key);
        assert_eq!(p.key_placeholder(), Some("dsh-no-key"));
        // $DEEPSEEK_BASE_URL counts as a base URL too.
        let env = |k: &str| (k == "DEEPSEEK_BASE_URL").then(|| "http://h".to_string());
        assert!(resolve(&args(), &env).is_ok());
    }
}
