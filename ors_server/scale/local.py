"""`ors-server serve --workers N`: N worker processes on this host behind one front (more: `fronts`).

The supervisor starts each worker (the unchanged server on its own Unix socket), watches it, and keeps
the front's worker table current: a worker that exits is marked dead at once (its sessions answer 410
from then on) and a new incarnation is started in its slot, which takes new sessions. SIGTERM drains
the whole deployment: each worker stops admitting, finishes its calls in flight and tears down every
one of its sessions once, while the front keeps relaying their replies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from ors_server.http.server import UvicornServer, announce, configure_logging, listen_all
from ors_server.ids import WorkerTag
from ors_server.scale import worker as worker_main
from ors_server.scale.assembly import build_front, front_config
from ors_server.scale.children import wait_or_kill
from ors_server.scale.table import Address, State, Worker, WorkerTable
from ors_server.scale.upstream import Upstream, WorkerUnreachable
from ors_server.settings import UI_SECRET_VARIABLE, Settings

logger = logging.getLogger("ors_server.workers")

START_TIMEOUT = 60.0
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)


def worker_settings(settings: Settings, count: int, tag: WorkerTag) -> Settings:
    """A worker's share of the deployment: `max_sessions` is global, so each worker holds its part."""
    return dataclasses.replace(settings, max_sessions=math.ceil(settings.max_sessions / count), worker_tag=str(tag))


async def wait_ready(address: Address, alive: asyncio.subprocess.Process | None, patience: float) -> None:
    """Until the worker answers `/health` (or its process exits, or `patience` seconds pass)."""
    upstream = Upstream(address)
    deadline = time.monotonic() + patience
    try:
        while time.monotonic() < deadline:
            if alive is not None and alive.returncode is not None:
                raise RuntimeError(f"worker at {address} exited with {alive.returncode} while starting")
            try:
                reply = await upstream.request("GET", b"/health", [(b"host", b"localhost")], b"")
                [_ async for _ in reply.body()]
                if reply.status == 200:
                    return
            except (WorkerUnreachable, OSError):
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"worker at {address} did not answer /health within {patience} s")
    finally:
        upstream.close()


class LocalWorkers:
    """Worker processes on this host, one per slot of `table`."""

    def __init__(self, envs: Sequence[str], settings: Settings, table: WorkerTable) -> None:
        self.envs, self.settings, self.table = list(envs), settings, table
        self.directory = tempfile.mkdtemp(prefix="ors-workers-")
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self.incarnations = [0] * table.size
        self.stopping = False
        self._watchers: list[asyncio.Task[None]] = []

    async def _spawn(self, index: int) -> Worker:
        self.incarnations[index] += 1
        tag = WorkerTag(index, self.incarnations[index])
        uds = os.path.join(self.directory, f"{tag}.sock")
        env = {**os.environ, worker_main.SPEC_VARIABLE: worker_main.spec(self.envs, self._settings(tag), uds)}
        if self.settings.api_key:
            env["ORS_API_KEY"] = self.settings.api_key
        env[UI_SECRET_VARIABLE] = self.settings.ui_secret  # a page login at one process holds at every other
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ors_server.scale.worker", env=env, stdin=asyncio.subprocess.DEVNULL
        )
        self.processes[index] = process
        worker = Worker(tag, Address(uds=uds), State.STARTING)
        self.table.put(worker)
        try:
            await wait_ready(worker.address, process, START_TIMEOUT)
        except BaseException:
            if process.returncode is None:
                process.kill()
            raise
        self.table.mark(tag, State.LIVE)
        logger.info("worker %s (pid %d) serving at %s", tag, process.pid, worker.address)
        return worker

    def _settings(self, tag: WorkerTag) -> Settings:
        return worker_settings(self.settings, self.table.size, tag)

    async def _watch(self, index: int) -> None:
        """Notice the worker in slot `index` exit; start its next incarnation unless the deployment stops."""
        failures = 0
        while True:
            process = self.processes[index]
            code = await process.wait()
            worker = self.table.slots[index]
            if worker is not None:
                self.table.mark(worker.tag, State.DEAD)
            if self.stopping:
                return
            logger.warning("worker %s exited with %s: starting a new one", worker.tag if worker else index, code)
            while not self.stopping:
                try:
                    await self._spawn(index)
                    failures = 0
                    break
                except Exception:
                    logger.exception("worker slot %d failed to start", index)
                    await asyncio.sleep(RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)])
                    failures += 1

    def unreachable(self, worker: Worker) -> None:
        """The front found nobody at a worker's address: make sure the process is gone, so it is replaced."""
        process = self.processes.get(worker.tag.index)
        current = self.table.slots[worker.tag.index]
        if process is not None and process.returncode is None and current is not None and current.tag == worker.tag:
            process.kill()

    @asynccontextmanager
    async def run(self) -> AsyncIterator[LocalWorkers]:
        try:
            await asyncio.gather(*(self._spawn(index) for index in range(self.table.size)))
            self._watchers = [asyncio.ensure_future(self._watch(index)) for index in range(self.table.size)]
            yield self
        finally:
            await self.stop()

    def drain(self) -> None:
        """Stop admitting: every worker gets SIGTERM and drains as a single server does."""
        self.stopping = True
        for index, process in self.processes.items():
            worker = self.table.slots[index]
            if worker is not None:
                self.table.mark(worker.tag, State.DRAINING)
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)

    async def stop(self) -> None:
        if not self.stopping:
            self.drain()
        # A worker needs its grace for calls in flight, then its teardowns; past that it is killed.
        patience = self.settings.shutdown_grace + self.settings.teardown_timeout + 5.0
        await wait_or_kill(self.processes.values(), patience, "worker")
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        shutil.rmtree(self.directory, ignore_errors=True)


def serve(envs: Sequence[str], settings: Settings, count: int) -> None:
    """Serve `envs` from `count` worker processes behind one front, in this process, on
    `settings.host:settings.port` (`scale.fronts` serves several fronts)."""
    sockets = listen_all(settings)  # before any worker starts: an address in use is one line
    configure_logging(settings.log_level)
    table = WorkerTable(count)
    workers = LocalWorkers(envs, settings, table)
    front = build_front(settings, table, lifespan=workers.run, on_unreachable=workers.unreachable)
    announce(sockets, settings.port_envs)
    # A shutdown signal drains the workers first, then the front's own connections close as their replies finish.
    UvicornServer(front_config(front, settings), on_exit=workers.drain).run(sockets=sockets)
