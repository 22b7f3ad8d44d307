"""The `execute_code` tool: listed with a session's tools when CodeAct is on, run by the call pipeline as any tool.

Its run is one step (`ors_server.codeact.step`) whose code calls the session's other tools back through the
pipeline (`ToolRun.call_tool`), within the step's hold on the episode; the step is cancelled, its sandbox killed,
when the episode ends. Its calls count in the episode one by one, so the step itself only sets what a client
reads as "the last reward" (`Episode.record_step`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ors_server.codeact.pool import SandboxPool
from ors_server.codeact.step import EXECUTE_CODE, execute_code
from ors_server.environment import Environment, ToolDef
from ors_server.runtime.tool import Refused
from ors_server.types import ToolOutput

if TYPE_CHECKING:
    from ors_server.episode import Episode
    from ors_server.runtime.tool import ToolRun

DESCRIPTION = """Run Python code as one step.

Every other tool of this environment is a Python function here: call it with keyword arguments as in its
input schema (or positionally, in the schema's order); it returns the tool's text, and raises ToolError when
the call fails (for example after the episode has finished). list_tools() lists the tools.
What the code prints, and the value of a final expression or of a top-level `return`, is the observation.
Each step runs in a fresh sandbox: nothing persists between steps, there is no network, and only /tmp is
writable."""


class ExecuteCodeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Python source to run; the environment's tools are functions in it.")


def _never_called(env: Environment, params: ExecuteCodeInput) -> ToolOutput:
    raise RuntimeError("execute_code runs as a step (ExecuteCode.run), not as an environment method")


@dataclass(frozen=True)
class ExecuteCode(ToolDef):
    """`execute_code`, whose steps take a sandbox of `pool` when it has one ready."""

    pool: SandboxPool | None = None

    async def run(self, run: ToolRun, checked: Any) -> ToolOutput:
        (params,) = checked
        with run.until_episode_ends():
            return await execute_code(
                params.code, run.tools(), run.call_tool, run.settings, run.redact, run.session_id, self.pool
            )
        raise Refused("session_ended", f"'{self.name}' was not run: the episode has ended.")

    def record(self, episode: Episode, output: ToolOutput) -> None:
        episode.record_step(output)


def execute_code_tool(pool: SandboxPool | None = None) -> ExecuteCode:
    # Exclusive: the step's code calls the session's other tools, which run within its hold on the episode.
    return ExecuteCode(EXECUTE_CODE, DESCRIPTION, ExecuteCodeInput, _never_called, exclusive=True, pool=pool)


def codeact_wanted(default: bool, *choices: Mapping[str, Any] | None) -> bool:
    """Whether a session has CodeAct: the first explicit `"codeact": true/false` among `choices` (its task
    spec, its binding config), else the server's `default` (`--codeact`)."""
    for choice in choices:
        if choice and isinstance(choice.get("codeact"), bool):
            return bool(choice["codeact"])
    return default


__all__ = ["DESCRIPTION", "EXECUTE_CODE", "ExecuteCode", "ExecuteCodeInput", "codeact_wanted", "execute_code_tool"]
