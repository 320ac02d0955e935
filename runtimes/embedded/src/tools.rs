//! Tools as plain function pointers with JSON arguments.
//!
//! ```
//! use dsh_embedded::{Tool, ToolError, ToolOutput};
//! fn led(args: &str, out: &mut ToolOutput) -> Result<(), ToolError> {
//!     if args.contains("\"on\":true") {
//!         out.push_str("led on");
//!         Ok(())
//!     } else {
//!         out.push_str("nothing to do");
//!         Err(ToolError)
//!     }
//! }
//! const LED: Tool = Tool {
//!     name: "led",
//!     description: "Switch the LED",
//!     parameters: r#"{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"]}"#,
//!     run: led,
//! };
//! ```

use alloc::string::String;
use alloc::vec;
use core::fmt;

use dsh_core::ContentBlock;
use dsh_core::agent::tools::ToolOutcome;

/// A tool body: the call's arguments as compact JSON text, and the output
/// to write the result into. `Err(ToolError)` makes the output text the
/// error message the model sees (`Error: <text>`, TL-12).
pub type ToolFn = fn(args: &str, out: &mut ToolOutput) -> Result<(), ToolError>;

/// A tool the model may call.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    /// The name the model calls it by.
    pub name: &'static str,
    /// The description sent to the model.
    pub description: &'static str,
    /// The JSON schema of the arguments (the core validates calls against
    /// it before the body runs, TL-6; keywords outside the TL-3 subset are
    /// refused at registration).
    pub parameters: &'static str,
    /// The body.
    pub run: ToolFn,
}

/// A tool body failed; its output text is the error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ToolError;

/// Where a tool body writes its result text (also a [`fmt::Write`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolOutput {
    text: String,
}

impl ToolOutput {
    /// An empty output.
    pub fn new() -> Self {
        ToolOutput::default()
    }

    /// Appends text.
    pub fn push_str(&mut self, s: &str) {
        self.text.push_str(s);
    }

    /// The text so far.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The core's result for this output: text content on success, the
    /// text as error message on failure.
    pub fn into_outcome(self, result: Result<(), ToolError>) -> ToolOutcome {
        match result {
            Ok(()) => ToolOutcome::success(vec![ContentBlock::text(self.text)]),
            Err(ToolError) => ToolOutcome::error(self.text),
        }
    }
}

impl fmt::Write for ToolOutput {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.text.push_str(s);
        Ok(())
    }
}
