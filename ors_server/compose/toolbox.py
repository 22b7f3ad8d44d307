"""One episode's connections to its environment's MCP tool servers, open from setup to teardown."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
from mcp import ClientSession, types

from ors_server.compose.servers import STDERR_LOG_BYTES, ToolServer
from ors_server.compose.stdio import ServerProcess
from ors_server.sandboxes.confinement import Confinement

logger = logging.getLogger("ors_server.compose")


class ToolServerFailed(Exception):
    """A tool server did not start, did not answer in time, or its connection broke."""


class _Connection:
    """One server's client session, owned by a task of its own: the SDK's transports are task-scoped context
    managers, so the task that opened one must be the task that closes it."""

    def __init__(self, server: ToolServer, log_bytes: int, confined: Confinement | None) -> None:
        self.server = server
        self.log_bytes = log_bytes
        self.confined = confined
        self.client: ClientSession | None = None
        self.process: ServerProcess | None = None
        self.launched = False
        self.killed = False
        """Its process was killed because a call timed out: the next call starts a new one."""
        self.stop = anyio.Event()
        self.stopped = anyio.Event()
        self._starting: anyio.CancelScope | None = None

    async def run(self, within: float, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + within) as scope:
                self._starting = scope
                async with self.server.connect(self.log_bytes, self.confined) as connected:
                    scope.deadline = math.inf  # connected: from here on the connection lives until `stop`
                    self._starting = None
                    self.client, self.process, started = connected.client, connected.process, True
                    task_status.started()
                    await self.stop.wait()
            if not started and self.stop.is_set():
                raise ToolServerFailed(f"tool server '{self.server.name}' was stopped while it started")
            if not started:
                raise ToolServerFailed(f"tool server '{self.server.name}' did not start within {within:g} s")
        except ToolServerFailed:
            raise
        except Exception as exc:
            if not started:
                raise ToolServerFailed(f"tool server '{self.server.name}' did not start: {_describe(exc)}") from None
            # The task lives in the store's task group: whatever ending the transport raises must stay here.
            logger.warning("tool server '%s' ended badly: %s", self.server.name, _describe(exc))
        finally:
            self.client = None
            self.stopped.set()

    def kill(self) -> None:
        """Stop a server process whose call timed out at once (whatever it computes dies with its process group);
        a server reached over HTTP is not ours to stop, and keeps its connection."""
        if self.process is not None:
            self.process.kill()
            self.killed = True
            self.stop.set()

    def end(self) -> None:
        """Ask the connection to end; one still starting is cut short (its process killed), not waited for."""
        self.stop.set()
        if self._starting is not None:
            self._starting.cancel()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Toolbox:
    """The open connections of one episode: `open` at setup, `call` per tool call, `close` at teardown."""

    def __init__(
        self, servers: Sequence[ToolServer], log_bytes: int = STDERR_LOG_BYTES, confined: Confinement | None = None
    ) -> None:
        self.log_bytes = log_bytes
        self._connections = {server.name: _Connection(server, log_bytes, confined) for server in servers}
        self._task_group: anyio.abc.TaskGroup | None = None
        self._within = 0.0
        self._closed = False

    async def open(self, task_group: anyio.abc.TaskGroup, within: float) -> None:
        """Start every server (concurrently), each within `within` seconds; if one fails, close the others and raise
        ToolServerFailed. The connections run as tasks of `task_group`, which must outlive the episode."""
        self._task_group, self._within = task_group, within
        failures: list[str] = []

        async def start(connection: _Connection) -> None:
            connection.launched = True
            try:
                await task_group.start(connection.run, within)
            except ToolServerFailed as exc:
                failures.append(str(exc))

        try:
            async with anyio.create_task_group() as starting:
                for connection in self._connections.values():
                    starting.start_soon(start, connection)
        finally:
            if failures:
                await self.close(within)
        if failures:
            raise ToolServerFailed("; ".join(sorted(failures)))

    async def list_tools(self, server: str, within: float) -> list[types.Tool]:
        """Every tool the server lists (all pages)."""
        client = self._client(server)
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(within):
                while True:
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await client.list_tools(params=params)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        return tools
        except TimeoutError:
            raise ToolServerFailed(f"tool server '{server}' did not list its tools within {within:g} s") from None
        except Exception as exc:
            raise ToolServerFailed(f"tool server '{server}' failed to list its tools: {_describe(exc)}") from None

    async def call(self, server: str, tool: str, arguments: dict[str, Any], within: float) -> types.CallToolResult:
        """Call `tool` of `server`; raises TimeoutError past `within` (a stdio server's process is killed then, and
        the next call starts a new one), ToolServerFailed if the server is gone."""
        await self._restart_if_killed(server)
        client = self._client(server)
        try:
            with anyio.fail_after(within):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            self._connections[server].kill()
            logger.warning(
                "tool server '%s' was killed: a call to '%s' did not finish within %g s", server, tool, within
            )
            raise
        except Exception as exc:
            raise ToolServerFailed(f"tool server '{server}' failed: {_describe(exc)}") from None

    async def _restart_if_killed(self, server: str) -> None:
        old = self._connections.get(server)
        if old is None or not old.killed or self._closed or self._task_group is None:
            return
        with anyio.move_on_after(self._within):
            await old.stopped.wait()  # its process reaped before another starts
        if self._closed:
            return  # the episode ended meanwhile: `_client` answers that the server is not running
        new = _Connection(old.server, self.log_bytes, old.confined)
        self._connections[server] = new
        new.launched = True
        await self._task_group.start(new.run, self._within)

    def _client(self, server: str) -> ClientSession:
        connection = self._connections.get(server)
        client = connection.client if connection is not None else None
        if client is None:
            raise ToolServerFailed(f"tool server '{server}' is not running")
        return client

    def cut(self) -> None:
        """Begin ending every connection now, without waiting (`close` waits): a server still starting is killed."""
        self._closed = True
        for connection in self._connections.values():
            connection.end()

    async def close(self, within: float) -> None:
        """End every connection (a stdio server's process group is killed) and wait for them, boundedly. Safe to
        call more than once, and on connections that never started."""
        self.cut()
        with anyio.CancelScope(shield=True), anyio.move_on_after(within):
            for connection in self._connections.values():
                if connection.launched:
                    await connection.stopped.wait()
