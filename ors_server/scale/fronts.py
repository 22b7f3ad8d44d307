"""`ors-server serve --workers N --fronts M`: M front processes share the port, one supervisor keeps them.

The front costs CPU on every request (bench/scale.py: ~375-470 us each), so on one host one front process
is the first limit; M fronts spread that cost over M cores.

The port: the supervisor binds M listening sockets to it with SO_REUSEPORT, one per front slot, and hands
each to its front process (an inherited file descriptor). The kernel spreads new connections over them by a
hash of the connection, without waking every front for every connection (one socket shared by all would),
and no other process can take the port over. The supervisor keeps every socket open, so a front that
crashes loses no connection: those queued on its socket wait (about a restart's time) for its next process.

The worker table: the supervisor alone starts and watches the workers; every change of its table (a worker
live, draining, dead, a new incarnation) is published at once as one JSON line on each front's control socket
(a socketpair), so every front answers a dead incarnation's ids 410 as soon as the supervisor sees its
process exit. A front that finds a worker unreachable says so on the same socket; the supervisor then ends
that process and starts the next incarnation, as with one front.

Placements: each front places new sessions by the load the workers report to it (`front`), and says where
it placed each one on its control socket; the supervisor passes that line on to every other front, so each
knows every session of the host without a lookup (and answers 410 for it once its worker is gone). A front
whose control socket has fallen `RELAY_BUFFER` behind misses some lines: it looks those ids up instead.

SIGTERM (or SIGINT) of the supervisor drains the deployment once: the workers drain as with one front while
every front keeps relaying their replies; then each front's control socket is closed, and the front finishes
its connections and exits. Front processes run in their own session, so a terminal's Ctrl-C reaches only
the supervisor, which orders that shutdown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from ors_server.http.server import bind, configure_logging
from ors_server.ids import WorkerTag
from ors_server.scale import front_process
from ors_server.scale.children import wait_or_kill
from ors_server.scale.local import RESTART_BACKOFF, LocalWorkers
from ors_server.scale.table import WorkerTable
from ors_server.settings import UI_SECRET_VARIABLE, Settings

logger = logging.getLogger("ors_server.fronts")


def loop_time() -> float:
    return asyncio.get_running_loop().time()


STEADY = 10.0  # a front that ran this long before exiting restarts at once, with no backoff


def listeners(host: str, port: int, count: int, flag: str = "--port") -> list[socket.socket]:
    """`count` listening sockets on one address, in one SO_REUSEPORT group (port 0: the first one's port).

    A plain bind first: an address in use, even by another SO_REUSEPORT group of ours, is refused (CannotListen)
    instead of silently shared with that other deployment."""
    bind(host, port, flag=flag).close()
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = bind(host, port, reuse_port=True, flag=flag)
            sockets.append(sock)
            port = sock.getsockname()[1]  # the port chosen for the first, when 0 was asked for
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def front_listeners(settings: Settings, count: int) -> list[list[socket.socket]]:
    """For each of `count` fronts, its sockets: one of the port's SO_REUSEPORT group, then one of each environment
    port's (`--env-port`)."""
    groups: list[list[socket.socket]] = []
    try:
        groups.append(listeners(settings.host, settings.port, count))
        for port, name in settings.port_envs.items():
            groups.append(listeners(settings.host, port, count, flag=f"--env-port {name}=PORT"))
    except BaseException:
        for sock in (sock for group in groups for sock in group):
            sock.close()
        raise
    return [list(sockets) for sockets in zip(*groups, strict=True)]


class FrontGroup:
    """The front processes of a deployment, one per set of listening sockets; each restarted when it exits."""

    def __init__(
        self, envs: Sequence[str], settings: Settings, table: WorkerTable, sockets: list[list[socket.socket]]
    ) -> None:
        self.envs, self.settings, self.table, self.sockets = list(envs), settings, table, sockets
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self.channels: dict[int, asyncio.StreamWriter] = {}
        self.on_unreachable: Any = None
        self.stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    def _message(self) -> bytes:
        return json.dumps({"version": self.table.version, "rows": self.table.rows()}).encode() + b"\n"

    def publish(self) -> None:
        """Send the current table to every front (called on every change of the table)."""
        message = self._message()
        for channel in self.channels.values():
            if not channel.is_closing():
                channel.write(message)

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        ours, theirs = socket.socketpair()
        listening = self.sockets[index]
        spec = {
            "envs": self.envs,
            "app_dir": os.getcwd(),
            "settings": self.settings.to_json(),
            "workers": self.table.size,
            "index": index,
            "listen_fds": [sock.fileno() for sock in listening],
            "control_fd": theirs.fileno(),
        }
        env = {**os.environ, front_process.SPEC_VARIABLE: json.dumps(spec)}
        if self.settings.api_key:
            env["ORS_API_KEY"] = self.settings.api_key
        env[UI_SECRET_VARIABLE] = self.settings.ui_secret  # a page login at one process holds at every other
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "ors_server.scale.front_process",
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(*(sock.fileno() for sock in listening), theirs.fileno()),
                start_new_session=True,
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=front_process.LINE_LIMIT)
        self.processes[index], self.channels[index] = process, writer
        writer.write(self._message())
        self._tasks.append(asyncio.ensure_future(self._listen(index, reader)))
        shown = ", ".join(str(sock.getsockname()) for sock in listening)
        logger.info("front %d (pid %d) accepting on %s", index, process.pid, shown)
        return process

    async def _listen(self, index: int, reader: asyncio.StreamReader) -> None:
        """A front's reports: workers it found unreachable, and sessions it placed (passed on to the others)."""
        while line := await reader.readline():
            report = json.loads(line)
            if "placed" in report:
                self._relay(index, line)
                continue
            if "revoked" in report:  # every other front refuses that credential too, whatever its backlog
                self._relay(index, line, always=True)
                continue
            tag = WorkerTag.parse(report["unreachable"])
            worker = self.table.slots[tag.index] if tag.index < self.table.size else None
            if worker is not None and worker.tag == tag and self.on_unreachable is not None:
                self.on_unreachable(worker)

    def _relay(self, sender: int, line: bytes, always: bool = False) -> None:
        """Tell every other front where a session was placed, so that each knows it (and answers 410 for it once
        its worker is gone) without a lookup. A front that does not keep up misses some: it looks them up."""
        for index, channel in self.channels.items():
            if index != sender and not channel.is_closing():
                if always or channel.transport.get_write_buffer_size() < front_process.RELAY_BUFFER:
                    channel.write(line)

    async def _watch(self, index: int, process: asyncio.subprocess.Process) -> None:
        failures = 0
        while True:
            started = loop_time()
            code = await process.wait()
            channel = self.channels.pop(index, None)
            if channel is not None:
                channel.close()
            if self.stopping:
                return
            logger.warning("front %d (pid %d) exited with %s: starting a new one", index, process.pid, code)
            if loop_time() - started > STEADY:
                failures = 0
            while not self.stopping:
                if failures:
                    await asyncio.sleep(RESTART_BACKOFF[min(failures - 1, len(RESTART_BACKOFF) - 1)])
                failures += 1
                try:
                    process = await self._spawn(index)
                    break
                except Exception:
                    logger.exception("front %d failed to start", index)

    async def start(self) -> None:
        started = await asyncio.gather(*(self._spawn(index) for index in range(len(self.sockets))))
        self._tasks += [asyncio.ensure_future(self._watch(i, p)) for i, p in enumerate(started)]

    async def stop(self, patience: float) -> None:
        """End of the control stream: each front finishes its connections and exits (killed past `patience`)."""
        self.stopping = True
        for channel in self.channels.values():
            channel.close()
        await wait_or_kill(self.processes.values(), patience, "front")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for listening in self.sockets:
            for sock in listening:
                sock.close()


async def _supervise(envs: Sequence[str], settings: Settings, count: int, sockets: list[list[socket.socket]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    table = WorkerTable(count)
    workers = LocalWorkers(envs, settings, table)
    fronts = FrontGroup(envs, settings, table, sockets)
    fronts.on_unreachable = workers.unreachable
    table.listener = fronts.publish
    try:
        async with workers.run():
            await fronts.start()
            await stop.wait()
            logger.info("stopping: the workers drain while the fronts relay their replies")
            workers.drain()
        # The workers are gone (drained, or killed past their patience): now the fronts.
    finally:
        # A front's uvicorn gives its open connections up to this long to finish, then closes them.
        await fronts.stop(patience=settings.shutdown_grace + settings.teardown_timeout + 10.0)


def serve(envs: Sequence[str], settings: Settings, count: int, fronts: int) -> None:
    """Serve `envs` from `count` worker processes behind `fronts` front processes sharing the port."""
    sockets = front_listeners(settings, fronts)
    configure_logging(settings.log_level)
    asyncio.run(_supervise(envs, settings, count, sockets))
