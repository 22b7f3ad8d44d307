"""The MCP tool servers an environment class composes: what an author declares in `mcp_servers`.

An author imports these with the rest of the authoring API, so the MCP client and its HTTP stack are imported
only when a server is connected (`connect`), not when a class declares one (tests/test_lazy_import.py).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing them at run time is what `connect` does
    from mcp import ClientSession

    from ors_server.compose.stdio import ServerProcess
    from ors_server.sandboxes.confinement import Confinement

STDERR_LOG_BYTES = 16 * 1024
"""The default of `--tool-server-log-bytes`: how much of one stdio tool server process's stderr is logged."""


@dataclass(frozen=True)
class Connected:
    """An initialized client session of a tool server, and its process when the server is one of ours."""

    client: ClientSession
    process: ServerProcess | None


SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*")
"""Letters, digits, '-' and single '_': the name prefixes its tools as `<name>__<tool>`, so no '__' in it."""


def _check_name(name: str) -> None:
    if not SERVER_NAME.fullmatch(name) or len(name) > 64:
        raise ValueError(
            f"tool server name {name!r} must be 1-64 letters, digits, '-' or single '_' (it prefixes tool names)"
        )


@dataclass(frozen=True)
class StdioServer:
    """An MCP server run as a command speaking MCP over its stdin and stdout; one process per episode.

    `command` is the program and its arguments, e.g. `[sys.executable, "-m", "mypackage.tools"]`. `env` adds
    environment variables to the server's (the server process inherits the default MCP environment, not the
    whole of ours). The process runs in a process group of its own, in the sandbox of `ors_server.sandboxes.confinement`
    (it sees only its program, its installation, the working directory and `cwd`, read-only, and writes only to
    its own `/tmp`); the group is killed (SIGKILL) when the episode ends and when a call to the server times out
    (the next call starts it again). Its stderr goes to the server's log, bounded (`ors_server.compose.stdio`).
    """

    name: str
    command: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.command:
            raise ValueError(f"tool server {self.name!r} needs a command")

    @asynccontextmanager
    async def connect(
        self, log_bytes: int = STDERR_LOG_BYTES, confined: Confinement | None = None
    ) -> AsyncIterator[Connected]:
        """A started process, confined as `confined` says, and an initialized MCP client session over its stdio."""
        from mcp import ClientSession, types

        from ors_server.compose.stdio import open_stdio

        client_info = types.Implementation(name="ors-server", version="compose")
        opened = open_stdio(self.name, self.command, self.env, self.cwd, log_bytes, confined)
        async with opened as ((read, write), process):
            async with ClientSession(read, write, client_info=client_info) as session:
                await session.initialize()
                yield Connected(session, process)


@dataclass(frozen=True)
class HttpServer:
    """An MCP server reached over streamable HTTP at `url`; one MCP session per episode (ended at its end).

    `headers` go with every request (for example an `Authorization` header).
    """

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"tool server {self.name!r} needs an http:// or https:// url, got {self.url!r}")

    @asynccontextmanager
    async def connect(
        self, log_bytes: int = STDERR_LOG_BYTES, confined: Confinement | None = None
    ) -> AsyncIterator[Connected]:
        """An initialized MCP client session (a transport session of the server; `confined` is for processes)."""
        import httpx2
        from mcp import ClientSession, types
        from mcp.client.streamable_http import streamable_http_client

        client_info = types.Implementation(name="ors-server", version="compose")
        # The client the SDK's transport takes (its own defaults: 30 s, and 300 s to read a held stream).
        http = httpx2.AsyncClient(headers=dict(self.headers), timeout=httpx2.Timeout(30, read=300))
        async with http, streamable_http_client(self.url, http_client=http) as (read, write):
            async with ClientSession(read, write, client_info=client_info) as session:
                await session.initialize()
                yield Connected(session, None)


ToolServer = StdioServer | HttpServer
