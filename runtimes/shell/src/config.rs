//! The one agent config of the hosted shells, and the kernel it builds.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_approval::{ApprovalPlugin, ApprovalPolicy};
use dsh_core::LlmCallConfig;
use dsh_core::agent::retry::RetryPolicy;
use dsh_core::session::Session;
use dsh_host::{Clock, ModelProvider, ProviderPrepare, ShellError};
use dsh_runtime::{IdMode, Ids, Kernel, Plugin};
use dsh_tools::{ToolSet, Workspace};

/// Loop options of the core (HEAD deltas and the retry executor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoopOptions {
    /// Run the `llm-retry` executor at the request-error seam (logs
    /// `llm/retry`).
    pub retry_executor: bool,
    /// [HEAD Δ] keep the delivered text of a cancelled stream.
    pub interrupted_prefix: bool,
    /// [HEAD Δ] latch wakes that arrive while an aborted turn winds down.
    pub wake_latch: bool,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            retry_executor: true,
            interrupted_prefix: true,
            wake_latch: true,
        }
    }
}

/// Everything needed to run an agent in a hosted shell (`dsh-std`,
/// `dsh-smol`); both re-export it as `AgentConfig`.
#[non_exhaustive]
pub struct AgentConfig {
    /// Where model calls go (e.g. `dsh_deepseek::DeepSeekClient`, or a
    /// scripted provider in tests).
    pub provider: Arc<dyn ModelProvider>,
    /// The call config of every request: provider route, model, max
    /// tokens, and the effort, temperature and stop sequences that fill
    /// each request seed lacking them.
    pub call_config: LlmCallConfig,
    /// The system prompt (one section; `{{var}}` references are rendered).
    pub system_prompt: Option<String>,
    /// The tools the model may call.
    pub tools: ToolSet,
    /// The workspace the file tools are confined to (`None`: `cwd`).
    pub workspace: Option<PathBuf>,
    /// A workspace already opened (e.g. the parent's, for a subagent): the
    /// agent's tools use this handle instead of opening `workspace` (or
    /// `cwd`) by path, so a directory moved in at that path since it was
    /// opened is not followed. `None` (the default): opened at start.
    pub opened_workspace: Option<Workspace>,
    /// `ask | auto | deny` per tool (TL-10); an `AllowAlways` answer
    /// switches the tool to `auto` for the rest of the session.
    pub approval: ApprovalPolicy,
    /// Deadline of a tool body whose definition names none (TL-14);
    /// `Duration::ZERO` (the default): none. Bash keeps its own executor
    /// default (TL-21).
    pub tool_timeout: Duration,
    /// Working directory (the session header's `cwd`; where `bash` runs).
    pub cwd: PathBuf,
    /// Core loop options.
    pub loop_options: LoopOptions,
    /// Time source (test hook: [`Clock::Fixed`]).
    pub clock: Clock,
    /// How ids are minted (test hook: [`IdMode::Sequential`]).
    pub ids: IdMode,
    /// Seed of the id and jitter generator; `None` (the default): 64 bits
    /// from the OS ([`os_seed`]).
    pub id_seed: Option<u64>,
    /// Plugins, in order, after the shell's own (provider `prepare`,
    /// approval policy).
    pub plugins: Vec<Box<dyn Plugin>>,
    /// The route's retry policy; `None`: the kernel's default.
    pub retry_policy: Option<RetryPolicy>,
    /// The most one model response may add, in bytes
    /// ([`dsh_runtime::AgentConfig::max_response_bytes`]).
    pub max_response_bytes: u64,
    /// The most steps one turn may take, `None`: no limit
    /// ([`dsh_runtime::AgentConfig::max_steps_per_turn`]).
    pub max_steps_per_turn: Option<u64>,
}

/// Prints what identifies the agent's setup; never the provider (a
/// client's credentials) or the plugins.
impl core::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("call_config", &self.call_config)
            .field("tools", &self.tools.names())
            .field("approval", &self.approval)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl AgentConfig {
    /// A config whose model calls go to `provider`, with the built-in tools
    /// confined to `cwd`, policy `auto`, no tool deadline, the default loop
    /// options and retries, the system clock and UUID ids seeded from the
    /// OS.
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        call_config: LlmCallConfig,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        AgentConfig {
            provider,
            call_config,
            system_prompt: None,
            tools: ToolSet::builtin(),
            workspace: None,
            opened_workspace: None,
            approval: ApprovalPolicy::default(),
            tool_timeout: Duration::ZERO,
            cwd: cwd.into(),
            loop_options: LoopOptions::default(),
            clock: Clock::System,
            ids: IdMode::Uuid,
            id_seed: None,
            plugins: Vec::new(),
            retry_policy: None,
            max_response_bytes: dsh_runtime::DEFAULT_MAX_RESPONSE_BYTES,
            max_steps_per_turn: Some(dsh_runtime::DEFAULT_MAX_STEPS_PER_TURN),
        }
    }

    /// The seed of the id generator: [`id_seed`](Self::id_seed), else a
    /// fresh one from the OS.
    fn seed(&self) -> u64 {
        self.id_seed.unwrap_or_else(os_seed)
    }

    /// The kernel's configuration derived from this one (fails on an
    /// invalid tool definition).
    pub fn kernel_config(&self) -> Result<dsh_runtime::AgentConfig, ShellError> {
        let tools = self
            .tools
            .registry()
            .map_err(|e| ShellError::Config(format!("tool registry: {e}")))?;
        let mut k = dsh_runtime::AgentConfig::new(self.call_config.clone());
        k.system_prompt = self.system_prompt.clone();
        k.tools = tools;
        k.tool_timeout_ms = Some(self.tool_timeout.as_millis() as u64).filter(|ms| *ms > 0);
        k.retry_executor = self.loop_options.retry_executor;
        k.interrupted_prefix = self.loop_options.interrupted_prefix;
        k.wake_latch = self.loop_options.wake_latch;
        k.retry_policy = self.retry_policy.clone();
        k.max_response_bytes = self.max_response_bytes;
        k.max_steps_per_turn = self.max_steps_per_turn;
        k.ids = self.ids;
        k.seed = self.seed();
        Ok(k)
    }

    /// The core's configuration derived from this one (fails on an invalid
    /// tool definition).
    pub fn core_config(&self) -> Result<dsh_core::agent::AgentConfig, ShellError> {
        self.kernel_config()?
            .core_config()
            .map_err(|e| ShellError::Config(e.to_string()))
    }

    /// The tools' workspace: [`opened_workspace`](Self::opened_workspace)
    /// when set (a clone sharing its handle), else opened now from
    /// `workspace` or `cwd`.
    pub fn workspace(&self) -> Result<Workspace, ShellError> {
        if let Some(opened) = &self.opened_workspace {
            return Ok(opened.clone());
        }
        let root = self.workspace.as_ref().unwrap_or(&self.cwd);
        Workspace::new(root)
            .map_err(|e| ShellError::Config(format!("workspace {}: {e}", root.display())))
    }

    /// Builds the kernel over `session` (of which the first `stored` events
    /// are already in the store) with the shell's own plugins first
    /// (provider `prepare`, the approval policy), then
    /// [`plugins`](Self::plugins); returns it with what the driver needs.
    pub fn start(mut self, session: Session, stored: u64) -> Result<Started, ShellError> {
        let provider = self.provider.clone();
        let workspace = self.workspace()?;
        let kernel_config = self.kernel_config()?;
        let mut plugins: Vec<Box<dyn Plugin>> = vec![
            Box::new(ProviderPrepare(provider.clone())),
            Box::new(ApprovalPlugin::new(Arc::new(Mutex::new(
                self.approval.clone(),
            )))),
        ];
        plugins.append(&mut self.plugins);
        let kernel = Kernel::new(kernel_config, session, stored, plugins)?;
        let mut ids = Ids::new(self.ids, self.seed() ^ 0xD1B5_4A32_D192_ED03);
        ids.continue_after(kernel.session());
        Ok(Started {
            kernel,
            provider,
            tools: Arc::new(self.tools),
            workspace,
            clock: self.clock,
            ids,
        })
    }
}

/// What [`AgentConfig::start`] hands a driver.
#[non_exhaustive]
pub struct Started {
    /// The kernel, with the shell's plugins and the config's.
    pub kernel: Kernel,
    /// Where model calls and side calls go.
    pub provider: Arc<dyn ModelProvider>,
    /// The tool bodies.
    pub tools: Arc<ToolSet>,
    /// The workspace the tools run in.
    pub workspace: Workspace,
    /// The time source.
    pub clock: Clock,
    /// The handle's id source for user messages, continuing after the
    /// session's ids.
    pub ids: Ids,
}

impl core::fmt::Debug for Started {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Started")
            .field("id", self.kernel.id())
            .field("tools", &self.tools.names())
            .finish_non_exhaustive()
    }
}

/// 64 bits from the OS (falls back to the clock and the address of a stack
/// value if the OS source fails).
pub fn os_seed() -> u64 {
    let mut buf = [0u8; 8];
    match getrandom::fill(&mut buf) {
        Ok(()) => u64::from_le_bytes(buf),
        Err(_) => {
            let t = Clock::System.now_ms() as u64;
            let local = 0u8;
            t ^ ((&local as *const u8 as u64).rotate_left(32))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider that carries a secret, as a client's credentials would.
    struct Secret(String);

    impl ModelProvider for Secret {
        fn stream(
            &self,
            opts: &dsh_core::GenerateOptions,
            cancel: &dsh_host::CancelToken,
        ) -> Result<dsh_host::ChunkStream, dsh_core::LlmError> {
            let _key = &self.0;
            dsh_host::ScriptedProvider::new([]).stream(opts, cancel)
        }
    }

    fn config() -> AgentConfig {
        AgentConfig::new(
            Arc::new(Secret("sk-secret-42".into())),
            LlmCallConfig::new("p", "m"),
            ".",
        )
    }

    #[test]
    fn debug_prints_neither_the_provider_nor_its_secrets() {
        let shown = format!("{:?}", config());
        assert!(!shown.contains("sk-secret-42"), "{shown}");
        assert!(shown.contains("call_config"), "{shown}");
    }

    #[test]
    fn a_set_seed_gives_the_kernel_that_seed() {
        let mut c = config();
        c.id_seed = Some(7);
        assert_eq!(c.kernel_config().unwrap().seed, 7);
        c.id_seed = None;
        assert_ne!(
            c.kernel_config().unwrap().seed,
            c.kernel_config().unwrap().seed
        );
    }
}
