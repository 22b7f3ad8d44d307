"""CodeAct: an agent's step is Python code that calls the environment's tools as functions (RFC 003).

`run_step` runs one step in a fresh sandboxed process (see `sandbox.py` for the containment and
`executor.py` for the protocol and limits); `step.py` is one `execute_code` step as the call pipeline runs it,
which answers the code's tool calls in-process.
"""

from ors_server.codeact.executor import Limits, StepResult, ToolCallFailed, ToolSpec, run_step
from ors_server.codeact.sandbox import (
    SANDBOX_ENV,
    SandboxMode,
    SandboxUnavailable,
    bwrap_problem,
    check_sandbox,
    sandbox_mode,
)

__all__ = [
    "SANDBOX_ENV",
    "Limits",
    "SandboxMode",
    "SandboxUnavailable",
    "StepResult",
    "ToolCallFailed",
    "ToolSpec",
    "bwrap_problem",
    "check_sandbox",
    "run_step",
    "sandbox_mode",
]
