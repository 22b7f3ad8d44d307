"""The sandbox of an episode run in a host process (an `isolated:` native environment's `toolset_sandbox()`), as the
server's toolsets see it: each method is a request to the host, answered there by the environment's own sandbox.

The sandbox stays in the host process, owned by the environment (which closes it in `teardown()` there); this side
holds no process and no file. Bytes cross the pipe as base64. What the sandbox raises comes back as the builtin
exception of that name (`FileNotFoundError`, `PermissionError`, `ValueError`...), which the toolsets report as they
do for a sandbox in process.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

from ors_server.sandboxes.interface import MAX_OUTPUT, CommandResult, Sandbox


class HostedSandbox(Sandbox):
    """A host process's sandbox, reached through `ask(name, payload)` (`HostedEnvironment.request`)."""

    def __init__(self, ask: Callable[[str, Any], Awaitable[Any]], workdir: str) -> None:
        self._ask = ask
        self.workdir = workdir

    async def _run(
        self, command: str, time_limit: float, stdin: bytes | None, cwd: str, max_output: int
    ) -> CommandResult:
        payload = {
            "command": command,
            "time_limit": time_limit,
            "stdin": None if stdin is None else base64.b64encode(stdin).decode(),
            "cwd": cwd,
            "max_output": max_output,
        }
        answer = await self._ask("sandbox_run", payload)
        return CommandResult(
            exit_code=answer["exit_code"],
            stdout=base64.b64decode(answer["stdout"]),
            stderr=base64.b64decode(answer["stderr"]),
            truncated=answer["truncated"],
            timed_out=answer["timed_out"],
        )

    async def read_file(self, path: str, *, max_bytes: int = MAX_OUTPUT) -> bytes:
        return base64.b64decode(await self._ask("sandbox_read", {"path": path, "max_bytes": max_bytes}))

    async def write_file(self, path: str, data: bytes) -> None:
        await self._ask("sandbox_write", {"path": path, "data": base64.b64encode(data).decode()})

    async def close(self) -> None:
        """Refuses new commands here; the sandbox itself is the environment's to close in its `teardown()`, in the
        host process."""
        await super().close()
