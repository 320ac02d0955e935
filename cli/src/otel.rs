//! Trace export: the `--otlp-endpoint` and `--otel-content`
//! flags, and the process's one exporter, shared by the agent and every
//! subagent (`dsh run`, `dsh chat`, `dsh fork`, `dsh acp`).
//!
//! Off unless an endpoint is given: the flag, else the config file's
//! `otlp_endpoint`, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_ENDPOINT`. Header values (`OTEL_EXPORTER_OTLP_HEADERS`)
//! are sent, never printed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;

use crate::sanitize::eprintln_safe;
use dsh_otel::export::{ExportConfig, Exporter};
use dsh_otel::{OtelConfig, OtelPlugin};
use dsh_std::AgentConfig;

/// Trace export flags.
#[derive(Args, Clone, Debug, Default)]
pub struct OtelArgs {
    /// Export traces (OTLP/HTTP protobuf) to the collector at URL (spans
    /// go to URL/v1/traces); default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT`; none: no export.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Put prompt, answer and tool text on exported spans (without it:
    /// ids, names, models, token counts and error codes only).
    #[arg(long)]
    pub otel_content: bool,
}

/// Installs the trace plugin into agent configurations.
#[derive(Clone)]
pub struct Tracing {
    exporter: Arc<Exporter>,
    content: bool,
}

impl Tracing {
    /// Adds the trace plugin to `config`.
    pub fn install(&self, config: &mut AgentConfig) {
        let otel = OtelConfig::default().with_content(self.content);
        config
            .plugins
            .push(Box::new(OtelPlugin::new(otel, self.exporter.sink())));
    }
}

/// The process's exporter and how long shutdown waits for it.
static EXPORTER: Mutex<Option<(Arc<Exporter>, Duration)>> = Mutex::new(None);

/// The tracing `args` and the config file select: `None` when export is
/// off. Starts the process's exporter on first use.
pub fn tracing(
    args: &OtelArgs,
    file: &crate::config_file::ConfigFile,
) -> Result<Option<Tracing>, String> {
    let env = |name: &str| std::env::var(name).ok();
    let flag = args
        .otlp_endpoint
        .as_deref()
        .or(file.otlp_endpoint.as_deref());
    let Some(config) = ExportConfig::from_env(flag, &env).map_err(|e| format!("dsh: {e}"))? else {
        return Ok(None);
    };
    let content = args.otel_content || file.otel_content.unwrap_or(false);
    let mut slot = EXPORTER
        .lock()
        .map_err(|_| String::from("dsh: the trace exporter is unusable"))?;
    let exporter = match &*slot {
        Some((e, _)) => e.clone(),
        None => {
            // Shutdown waits for one request, plus a margin.
            let wait = config.request_timeout + Duration::from_secs(1);
            let e = Arc::new(Exporter::start(config).map_err(|e| format!("dsh: {e}"))?);
            *slot = Some((e.clone(), wait));
            e
        }
    };
    Ok(Some(Tracing { exporter, content }))
}

/// Sends what is queued (waiting at most one request timeout) and says on
/// stderr when spans were lost. A no-op when export is off.
pub fn shutdown() {
    let Some((exporter, wait)) = EXPORTER.lock().ok().and_then(|mut s| s.take()) else {
        return;
    };
    let r = exporter.shutdown(wait);
    if r.dropped > 0 || !r.finished {
        let why = r.last_error.as_deref().unwrap_or("queue full");
        let pending = if r.finished {
            ""
        } else {
            "; the collector did not answer in time"
        };
        eprintln_safe!(
            "dsh: traces: {} span(s) not exported ({why}){pending}",
            r.dropped
        );
    }
}
