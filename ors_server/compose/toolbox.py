"""One episode's connections to its environment's MCP tool servers, open from setup to teardown."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
from mcp import ClientSession, types

from ors_server.compose.servers import ToolServer

logger = logging.getLogger("ors_server.compose")


class ToolServerFailed(Exception):
    """A tool server did not start, did not answer in time, or its connection broke."""


class _Connection:
    """One server's client session, owned by a task of its own: the SDK's transports are task-scoped context
    managers, so the task that opened one must be the task that closes it."""

    def __init__(self, server: ToolServer) -> None:
        self.server = server
        self.client: ClientSession | None = None
        self.launched = False
        self.stop = anyio.Event()
        self.stopped = anyio.Event()

    async def run(self, within: float, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + within) as scope:
                async with self.server.connect() as client:
                    scope.deadline = math.inf  # connected: from here on the connection lives until `stop`
                    self.client, started = client, True
                    task_status.started()
                    await self.stop.wait()
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Toolbox:
    """The open connections of one episode: `open` at setup, `call` per tool call, `close` at teardown."""

    def __init__(self, servers: Sequence[ToolServer]) -> None:
        self._connections = {server.name: _Connection(server) for server in servers}

    async def open(self, task_group: anyio.abc.TaskGroup, within: float) -> None:
        """Start every server (concurrently), each within `within` seconds; if one fails, close the others and raise
        ToolServerFailed. The connections run as tasks of `task_group`, which must outlive the episode."""
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
        """Call `tool` of `server`; raises TimeoutError past `within`, ToolServerFailed if the server is gone."""
        client = self._client(server)
        try:
            with anyio.fail_after(within):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            raise
        except Exception as exc:
            raise ToolServerFailed(f"tool server '{server}' failed: {_describe(exc)}") from None

    def _client(self, server: str) -> ClientSession:
        connection = self._connections.get(server)
        client = connection.client if connection is not None else None
        if client is None:
            raise ToolServerFailed(f"tool server '{server}' is not running")
        return client

    async def close(self, within: float) -> None:
        """End every connection (a stdio server's process is stopped: stdin closed, SIGTERM, SIGKILL) and wait for
        them, boundedly. Safe to call more than once, and on connections that never started."""
        for connection in self._connections.values():
            connection.stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(within):
            for connection in self._connections.values():
                if connection.launched:
                    await connection.stopped.wait()
