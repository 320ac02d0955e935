//! `dsh-system-prompt`: what the model is told (loop.md section 7, LC-12).
//!
//! [`SystemPrompt`] is a runtime-kernel [`Plugin`](dsh_runtime::Plugin)
//! that runs unchanged in every runtime. At `system-prompt/assemble` it
//! adds:
//!
//! - the stable **system sections** (SP-2): the harness identity (`-100`),
//!   working guidelines (`-50`), tool guidance derived from the schemas of
//!   the registered tools (`100`), and an environment note (`200`);
//! - the dynamic **facts** (working directory, platform, date, git branch
//!   and status) as a context section, so they reach the model only as the
//!   runtime-context message (SP-5, LC-12) and the system prompt stays
//!   byte-identical across turns for the provider's prompt cache.
//!
//! The plugin does no I/O: the facts come from a [`FactSource`] (on a std
//! host, [`host::HostFacts`]) once per turn, and the date from the kernel's
//! `now`. An embedder adds, replaces or removes sections by name.
//!
//! [`Instructions`] delivers the workspace's `AGENTS.md` (else `CLAUDE.md`)
//! files as plugin-sourced context (form `instructions`), again whenever
//! they change, and withdraws them when they are gone.
//!
//! # Features
//!
//! - `std`: (on by default) `host`: gathers the workspace facts (cwd, platform,
//!   git) on a std host.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod date;
mod instructions;
mod system_prompt;

#[cfg(feature = "std")]
pub mod host;

pub use date::utc_date;
pub use instructions::{
    INSTRUCTIONS_GONE, INSTRUCTIONS_HEADER, INSTRUCTIONS_PLUGIN, InstructionFile,
    InstructionSource, Instructions, is_instructions_source, render as render_instructions,
};
pub use system_prompt::{
    APPEND_SECTION, ENVIRONMENT_CONTEXT, ENVIRONMENT_SECTION, FactSource, Facts,
    GUIDELINES_SECTION, Git, IDENTITY_SECTION, SystemPrompt, TOOLS_SECTION, tool_guidance,
};
