//! Tool bodies: the `tools/execute` seam and deadlines.

use super::*;

impl Kernel {
    pub(super) fn execute(&mut self, exec: ToolExecution) {
        if !self.seams().contains(Seams::TOOL_EXECUTE) {
            self.start_tool(exec);
            return;
        }
        let seat = Seat::Kernel {
            token: exec.token.get(),
            call: KernelCall::ToolExecute {
                value: ToolDispatch::Run(exec),
            },
        };
        self.run_and_end(seat, 0, None);
    }

    pub(super) fn start_tool(&mut self, exec: ToolExecution) {
        let declared = self
            .core
            .config()
            .tools
            .get(&exec.name)
            .and_then(|d| d.timeout_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(ceil_ms);
        let timeout_ms = declared.or(self.tool_timeout_ms.filter(|ms| *ms > 0));
        let deadline = timeout_ms.map(|ms| self.now.add_millis(ms));
        self.tools.insert(
            exec.token,
            Running {
                timeout_ms,
                deadline,
                phase: Phase::Running,
            },
        );
        self.effects
            .push_back(Effect::StartTool { exec, timeout_ms });
    }
}
