"""A stdio MCP tool server's process: started, spoken to and ended by the server, never left behind.

The `mcp` SDK's `stdio_client` hides its process, so a call that timed out could not stop the computation behind it
and the server's stderr went straight to ours. This transport speaks the same newline-delimited JSON-RPC and adds:

- Its own process group (a new session), killed whole with SIGKILL when the episode ends or a call to it times out,
  so nothing it started keeps running. (A process that starts a session of its own escapes the group: a tool
  server is the environment author's code, not a sandbox.)
- Confinement: the process runs in the sandbox host processes get (`ors_server.sandboxes.confinement`: uid/gid
  65534, its own pid and mount namespaces, read-only views of only what it needs, a private `/tmp`, `no_new_privs`,
  the seccomp filter), because a tool server works on what the agent sends. With `ORS_HOST_SANDBOX=none` it runs
  as uid/gid 65534 when the server is root, nothing more: a short Python prefix (`launch.py`) drops the ids and
  execs the command (the event loop, uvloop, cannot change a child's user), first showing it, in a mount namespace
  of its own, a command that lies under a directory 65534 cannot enter.
- Its stderr read into the server's log line by line, at most `log_bytes` bytes per process (`--tool-server-log-bytes`),
  then one line saying how much more was dropped: a tool server that floods stderr costs the log a bounded amount.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from ors_server.sandboxes import confinement
from ors_server.sandboxes.confinement import Confinement

logger = logging.getLogger("ors_server.compose")

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest JSON-RPC line a tool server may write; a longer one ends the connection (and so the process)."""
LOG_LINE_CHARS = 1000
"""Each logged stderr line is cut to this many characters."""
REAP_WAIT = 5.0
"""How long ending a connection waits for the killed process to be reaped."""


@dataclass
class StderrLog:
    """What of a tool server's stderr reaches the server's log: whole lines, up to `budget` bytes in all."""

    server: str
    pid: int
    budget: int
    logged: int = 0
    dropped: int = 0
    _partial: bytes = b""

    def feed(self, chunk: bytes) -> None:
        if self.logged >= self.budget:
            self.dropped += len(chunk)
            return
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()[: LOG_LINE_CHARS * 4]  # a line without an end is cut, not hoarded
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if self.logged >= self.budget:
            self.dropped += len(line) + 1
            return
        self.logged += len(line) + 1
        text = line.decode("utf-8", "replace").rstrip()[:LOG_LINE_CHARS]
        if text:
            logger.info("tool server '%s' (pid %d): %s", self.server, self.pid, text)
        if self.logged >= self.budget:
            logger.warning(
                "tool server '%s' (pid %d) wrote more than %d bytes to stderr: the rest is dropped",
                self.server,
                self.pid,
                self.budget,
            )

    def close(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        if self.dropped:
            logger.warning("tool server '%s' (pid %d): %d bytes of stderr dropped", self.server, self.pid, self.dropped)


class ServerProcess:
    """A started tool server process; `kill()` ends its whole process group at once."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.pid = process.pid  # the group's id too: the process leads a new session

    def kill(self) -> None:
        confinement.kill(self.pid)


Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@asynccontextmanager
async def open_stdio(
    name: str,
    command: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | None,
    log_bytes: int,
    confined: Confinement | None = None,
) -> AsyncIterator[tuple[Streams, ServerProcess]]:
    """Start the tool server, confined as `confined` says (default: in the sandbox), and bridge its stdio to an MCP
    client session's streams; on exit (however it comes), kill its process group and reap it."""
    environment = {**get_default_environment(), **(env or {})}
    with confinement.launched(command, environment, cwd or os.getcwd(), confined or Confinement()) as how:
        process = await anyio.open_process(
            how.argv, env=how.env, cwd=how.cwd, start_new_session=True, pass_fds=how.pass_fds
        )
    server = ServerProcess(process)
    stderr = StderrLog(name, server.pid, log_bytes)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        pending: list[bytes] = []  # the chunks of an unfinished line, joined once (not once per chunk)
        size = 0
        async with to_client:
            with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stdout:
                    *lines, rest = chunk.split(b"\n")
                    if lines:
                        lines[0] = b"".join([*pending, lines[0]])
                        pending, size = [], 0
                    pending.append(rest)
                    size += len(rest)
                    if size > MAX_LINE_BYTES:
                        logger.warning("tool server '%s' wrote a line longer than %d bytes", name, MAX_LINE_BYTES)
                        return
                    for line in lines:
                        if line.strip():
                            await to_client.send(_parse(line))

    async def write_stdin() -> None:
        assert process.stdin is not None
        async with from_client:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in from_client:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")

    async def read_stderr() -> None:
        assert process.stderr is not None
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                stderr.feed(chunk)

    try:
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(read_stdout)
            pumps.start_soon(write_stdin)
            pumps.start_soon(read_stderr)
            try:
                yield (from_server, to_server), server
            finally:
                server.kill()
                pumps.cancel_scope.cancel()
    finally:
        server.kill()  # also when the task group was never entered
        with anyio.CancelScope(shield=True), anyio.move_on_after(REAP_WAIT):
            await process.aclose()  # closes the pipes and reaps the process
        stderr.close()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc
