"""`codex`: the Codex harness's one shell tool (`bash` with command, description and timeout), with the name and
input schema of `openreward`'s `CodexToolset`, acting on the session's sandbox."""

from __future__ import annotations

from ors_server.environment import tool
from ors_server.toolsets.actions import run_shell
from ors_server.toolsets.base import Params, Toolset
from ors_server.types import ToolOutput


class BashParams(Params):
    command: str
    description: str = ""
    timeout: float | None = 30.0


class Codex(Toolset):
    name = "codex"

    @tool
    async def bash(self, params: BashParams) -> ToolOutput:
        """Run a shell command in the sandbox and return its output and exit code (a fresh shell in the working
        directory each time; files persist). `timeout` is in seconds (default 30, at most 600)."""
        return await run_shell(self.sandbox, params.command, params.timeout)
