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
}

/// The resolved endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
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
        }
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
