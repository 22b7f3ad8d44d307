"""A CodeAct step lives no longer than its session: every way a session ends kills its running step at once.

A review found steps running on after `DELETE` or a client's disconnect until their own timeout, so churning
sessions piled up sandboxes. Every ending goes through the store's `discard` (or `reset` for an episode), which
is what these drive; the step's timeout here is far longer than the bound the test waits.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import anyio
import pytest

from ors_server import Environment, TextBlock, ToolOutput, tool
from ors_server.codeact import bwrap_problem
from ors_server.sessions import SessionStore
from ors_server.settings import Settings

pytestmark = pytest.mark.anyio

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


@pytest.mark.parametrize("ending", ["deleted", "reaped", "reset", "shutdown"])
async def test_ending_a_session_kills_its_running_step_at_once(ending: str) -> None:
    Signals.reached = anyio.Event()
    settings = Settings(codeact=True, codeact_sandbox=SANDBOX, codeact_timeout=300, shutdown_grace=0)
    results: list[Any] = []
    async with SessionStore(settings).run() as store:
        store.create("s", Signals, {}, None)
        session = await store.get_ready("s")
        before = children()

        async def run() -> None:
            code = "started()\nimport time\ntime.sleep(3600)"
            results.append(await store.call(session, "execute_code", {"code": code}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(30):
                await Signals.reached.wait()
            step = children() - before
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
