"""CodeAct: an agent's step is Python code that calls the environment's tools as functions (RFC 003).

`run_step` runs one step in a fresh sandboxed process (see `sandbox.py` for the containment, `executor.py` for
the protocol and limits, and `pool.py` for the few sandboxes started ahead of time, each used by one step only);
`step.py` is one `execute_code` step as the call pipeline runs it,
which answers the code's tool calls in-process.
"""

from ors_server.codeact.executor import Limits, StepResult, ToolCallFailed, ToolSpec, run_step
from ors_server.codeact.pool import SandboxPool
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
    "SandboxPool",
    "SandboxUnavailable",
    "StepResult",
    "ToolCallFailed",
    "ToolSpec",
    "bwrap_problem",
    "check_sandbox",
    "run_step",
    "sandbox_mode",
]
