"""One of `--fronts M` front processes, started by the local supervisor (`fronts.FrontGroup`).

`python -m ors_server.scale.front_process` reads its spec (environments, settings, worker count, its index and
two inherited file descriptors) as JSON from `ORS_FRONT_SPEC`; the API key, if any, comes from `ORS_API_KEY`.
It accepts on the listening socket the supervisor bound (one of the port's SO_REUSEPORT group) and follows the
worker table the supervisor publishes on its control socket: one JSON line per change. It writes back one
line per worker it finds unreachable, so the supervisor replaces that process. The end of the control
stream (the supervisor stops it, or is gone) makes the front finish its connections and exit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from ors_server.http.guards import HeaderChecks
from ors_server.http.server import UvicornServer, configure_logging
from ors_server.ids import WorkerTag
from ors_server.scale.assembly import build_front, front_config
from ors_server.scale.directory import Directory
from ors_server.scale.table import Worker, WorkerTable
from ors_server.settings import Settings

SPEC_VARIABLE = "ORS_FRONT_SPEC"
LINE_LIMIT = 1 << 20
RELAY_BUFFER = 1 << 20
"""Bytes of placement reports a control socket may have queued; past that, reports are dropped (the front that
misses one looks the id up when it first sees it)."""

logger = logging.getLogger("ors_server.front")


class SupervisedTable:
    """This front's copy of the supervisor's worker table, kept current from the control socket."""

    def __init__(self, table: WorkerTable, control_fd: int) -> None:
        self.table, self.control_fd = table, control_fd
        self.server: uvicorn.Server | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.directory: Directory | None = None  # the front's, filled with the other fronts' placements
        self.checks: HeaderChecks | None = None  # the front's, told of the credentials the other fronts revoked

    @asynccontextmanager
    async def run(self) -> AsyncIterator[SupervisedTable]:
        control = socket.socket(fileno=self.control_fd)
        reader, self.writer = await asyncio.open_unix_connection(sock=control, limit=LINE_LIMIT)
        first = await reader.readline()
        if not first:
            raise RuntimeError("the supervisor closed the control socket before sending the worker table")
        self.table.apply(json.loads(first)["rows"])
        follower = asyncio.ensure_future(self._follow(reader))
        try:
            yield self
        finally:
            follower.cancel()
            self.writer.close()

    async def _follow(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            message = json.loads(line)
            if "placed" in message:
                key, tag = message["placed"]
                if self.directory is not None:
                    self.directory.put(key, WorkerTag.parse(tag))
                continue
            if "revoked" in message:
                if self.checks is not None:
                    self.checks.revoke_cookie(message["revoked"].encode())
                continue
            self.table.apply(message["rows"])
        # The supervisor is done with this front (the deployment stops) or is gone: finish and exit.
        if self.server is not None:
            self.server.should_exit = True

    def unreachable(self, worker: Worker) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(json.dumps({"unreachable": str(worker.tag)}).encode() + b"\n")

    def revoked(self, cookie: bytes) -> None:
        """Tell the other fronts (through the supervisor) of a credential an answer here revoked. Always sent, past
        the relay buffer too: a revocation missed would leave a cookie valid at another front."""
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(json.dumps({"revoked": cookie.decode("latin-1")}).encode() + b"\n")

    def placed(self, key: str, tag: WorkerTag) -> None:
        """Tell the other fronts (through the supervisor) where this front placed a new session."""
        writer = self.writer
        if writer is not None and not writer.is_closing() and writer.transport.get_write_buffer_size() < RELAY_BUFFER:
            writer.write(json.dumps({"placed": [key, str(tag)]}).encode() + b"\n")


def main() -> None:
    loaded = json.loads(os.environ[SPEC_VARIABLE])
    settings = Settings.from_json(loaded["settings"])
    configure_logging(settings.log_level)
    table = WorkerTable(loaded["workers"])
    supervised = SupervisedTable(table, loaded["control_fd"])
    front = build_front(
        settings,
        table,
        lifespan=supervised.run,
        on_unreachable=supervised.unreachable,
        name=str(loaded["index"]),
        on_placed=supervised.placed,
        on_revoked=supervised.revoked,
    )
    supervised.directory = front.directory
    supervised.checks = front.checks
    server = supervised.server = UvicornServer(front_config(front, settings))
    server.run(sockets=[socket.socket(fileno=fd) for fd in loaded["listen_fds"]])


if __name__ == "__main__":
    main()
