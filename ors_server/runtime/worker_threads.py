"""`run_in_thread`: sync user code (tools, setup, reads, teardown) run on a worker thread for the event loop.

What `anyio.to_thread.run_sync` does, at half its cost: measured on this stack, a hop through anyio took ~70 µs
of CPU and ~85 µs of wall time, against ~35 and ~40 here, and a sync tool call takes one on every call. The
saving is in what is left out: no cancel scopes, no checkpoint when a token of the caller's `CapacityLimiter` (the
pool of its kind of work, `Runtime.limiters`, which bound the threads in use) is free, no worker lookup.

The threads are daemons, started when every thread is busy and ended after `IDLE_SECONDS` without work, so an
idle server holds none and a tool that never returns cannot hold up the process's exit. A caller that is
cancelled stops waiting at once (the thread runs on; what it returns is dropped), as `abandon_on_cancel=True`.
The thread runs the function in a copy of the caller's context (`contextvars`), as anyio does.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio

IDLE_SECONDS = 10.0
"""A worker thread with nothing to do for this long ends."""

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[[], Any]]

_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_lock = threading.Lock()
_idle = 0
"""Threads waiting for a job and not yet promised one."""


async def run_in_thread(function: Callable[[], Any], limiter: anyio.CapacityLimiter | None = None) -> Any:
    """Run `function()` on a worker thread and return what it returns (or raise what it raises), holding a token
    of `limiter` (if given) until it has."""
    if limiter is None:
        return await _run(function)
    try:
        limiter.acquire_nowait()  # the usual case: a token is free (anyio's `acquire` yields to the loop even then)
    except anyio.WouldBlock:
        await limiter.acquire()
    try:
        return await _run(function)
    finally:
        limiter.release()


async def _run(function: Callable[[], Any]) -> Any:
    global _idle
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    with _lock:
        start = _idle == 0
        if not start:
            _idle -= 1  # promised to this job
    if start:
        threading.Thread(target=_work, name="ors-worker", daemon=True).start()
    _jobs.put((loop, future, contextvars.copy_context(), function))
    return await future


def _work() -> None:
    global _idle
    while True:
        try:
            loop, future, context, function = _jobs.get(timeout=IDLE_SECONDS)
        except queue.Empty:
            with _lock:
                if _idle > 0:  # not promised to a job that is on its way: end
                    _idle -= 1
                    return
            continue
        try:
            result, error = context.run(function), None
        except BaseException as exc:  # handed to the caller, whatever it is
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:
            pass  # the loop is closed: no one waits any more
        del future, function, result, error  # not held while idle
        with _lock:
            _idle += 1


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller was cancelled and stopped waiting
    if error is None:
        future.set_result(result)
    elif isinstance(error, StopIteration):  # a Future cannot hold one
        future.set_exception(RuntimeError(f"{type(error).__name__} raised in a worker thread"))
    else:
        future.set_exception(error)
