"""A CodeAct step lives no longer than its session: every way a session ends kills its running step at once.

A review found steps running on after `DELETE` or a client's disconnect until their own timeout, so churning
sessions piled up sandboxes. Every ending goes through the store's `discard` (or `reset` for an episode), which
is what these drive; the step's timeout here is far longer than the bound the test waits.
"""

from __future__ import annotations

import json
import os
import select
import threading
from typing import Any, ClassVar

import anyio
import pytest
from websockets.sync.client import connect

from ors_server import Environment, TextBlock, ToolOutput, tool
from ors_server.codeact import bwrap_problem
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.pipeline import StoreWithCalls
from tests.serving import serve

SANDBOX = "bwrap" if bwrap_problem() is None else "none"


class Signals(Environment):
    """One tool, `started`, that tells the test the step runs (the step then sleeps)."""

    name = "signals"
    reached: ClassVar[anyio.Event]

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="call started() in a step")]

    @tool
    async def started(self) -> ToolOutput:
        """Say the step runs."""
        type(self).reached.set()
        return ToolOutput(blocks=[TextBlock(text="ok")])


def children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as file:
                found.update(int(pid) for pid in file.read().split())
        except OSError:
            continue
    return found


async def exited(pid: int) -> None:
    """Return once `pid` has exited (a pidfd becomes readable then)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await anyio.wait_readable(fd)
    finally:
        os.close(fd)


@pytest.mark.anyio
@pytest.mark.parametrize("pool", [0, 2])
@pytest.mark.parametrize("ending", ["deleted", "reaped", "reset", "shutdown"])
async def test_ending_a_session_kills_its_running_step_at_once(ending: str, pool: int) -> None:
    Signals.reached = anyio.Event()
    settings = Settings(codeact=True, codeact_sandbox=SANDBOX, codeact_timeout=300, shutdown_grace=0, codeact_pool=pool)
    results: list[Any] = []
    async with StoreWithCalls(settings).run() as store:
        store.create("s", Signals, {}, None)
        session = await store.get_ready("s")
        with anyio.fail_after(60):
            await store.runtime.codeact_pool.filled()
        # The pool's waiting sandboxes are not the step's: the one the step takes is, though started before it.
        before = children() - store.runtime.codeact_pool.pids()

        async def run() -> None:
            code = "started()\nimport time\ntime.sleep(3600)"
            results.append(await store.call(session, "execute_code", {"code": code}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(30):
                await Signals.reached.wait()
                await store.runtime.codeact_pool.filled()  # the refill behind the step is done: no process starting
            step = children() - before - store.runtime.codeact_pool.pids()
            assert step, "the step's process was not found"
            if ending in ("deleted", "reaped"):  # (the reaper leaves a session alone while a call runs in it)
                assert await store.discard("s", ending)
            elif ending == "reset":
                await store.reset(session, None)
            else:
                await store.shutdown()
            # Far sooner than the step's own timeout (300 s): the kill is immediate, the bound is for a busy machine.
            with anyio.fail_after(10):
                for pid in step:
                    await exited(pid)
    assert len(results) == 1 and getattr(results[0], "reason", None) == "session_ended", results


class ThreadSignals(Signals):
    """`started` as sync code, for a server that runs on a loop of its own (in another thread)."""

    name = "thread_signals"
    reached_in_thread: ClassVar[threading.Event]

    @tool
    def started(self) -> ToolOutput:  # type: ignore[override]
        """Say the step runs."""
        type(self).reached_in_thread.set()
        return ToolOutput(blocks=[TextBlock(text="ok")])


def test_an_openenv_client_that_disconnects_mid_step_leaves_no_step_running() -> None:
    ThreadSignals.reached_in_thread = threading.Event()
    # No pool: its waiting sandboxes are children too, and the pooled step's lifetime is tested above.
    settings = Settings(codeact=True, codeact_sandbox=SANDBOX, codeact_timeout=300, codeact_pool=0)
    app = create_app([ThreadSignals], settings)
    with serve(app) as url:
        before = children()
        with connect(url.replace("http://", "ws://") + "/openenv/thread_signals/ws", open_timeout=10) as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv(timeout=10))["type"] == "observation"
            code = "started()\nimport time\ntime.sleep(3600)"
            action = {"type": "call_tool", "tool_name": "execute_code", "arguments": {"code": code}}
            ws.send(json.dumps({"type": "step", "data": action}))
            assert ThreadSignals.reached_in_thread.wait(30)
            step = children() - before
            assert step, "the step's process was not found"
        # The client is gone, mid-step: its session ends, and the step with it, long before its 300 s.
        for pid in step:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                assert select.select([fd], [], [], 10)[0], f"step process {pid} still runs"
            finally:
                os.close(fd)
