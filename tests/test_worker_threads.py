"""`run_in_thread`: results, errors, context, abandonment on cancel, and threads that end when idle."""

from __future__ import annotations

import contextvars
import threading

import anyio
import pytest

from ors_server.runtime import worker_threads
from ors_server.runtime.worker_threads import run_in_thread

pytestmark = pytest.mark.anyio

REQUEST = contextvars.ContextVar("request", default="none")


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ors-worker"]


async def test_returns_what_the_function_returns_and_raises_what_it_raises():
    assert await run_in_thread(lambda: threading.current_thread().name) == "ors-worker"
    with pytest.raises(ZeroDivisionError):
        await run_in_thread(lambda: 1 / 0)
    with pytest.raises(RuntimeError, match="StopIteration"):
        await run_in_thread(lambda: next(iter(())))


async def test_the_function_sees_the_callers_context():
    REQUEST.set("r-1")
    assert await run_in_thread(REQUEST.get) == "r-1"


async def test_a_cancelled_caller_stops_waiting_while_the_thread_runs_on():
    release, finished = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(10)
        finished.set()
        return "late"

    with anyio.move_on_after(0.1) as scope:
        await run_in_thread(slow)
    assert scope.cancelled_caught and not finished.is_set()
    release.set()
    assert await anyio.to_thread.run_sync(finished.wait, 10)
    assert await run_in_thread(lambda: "next") == "next"  # the thread went back to work


async def test_concurrent_calls_get_threads_of_their_own_and_idle_ones_end(monkeypatch):
    monkeypatch.setattr(worker_threads, "IDLE_SECONDS", 0.2)
    await anyio.sleep(0.5)  # threads from earlier tests (idle for up to 10 s) are not this test's
    before = set(workers())
    barrier = threading.Barrier(6, timeout=10)

    async def one() -> None:
        await run_in_thread(barrier.wait)  # only returns once six run at the same time

    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(one)
    ours = set(workers()) - before
    assert len(ours) >= 6 - len(before)
    for thread in ours:  # each ends after IDLE_SECONDS without work
        await anyio.to_thread.run_sync(thread.join, 10)
        assert not thread.is_alive()
