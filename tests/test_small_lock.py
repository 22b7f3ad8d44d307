"""`SmallLock` behaves as anyio's asyncio `Lock(fast_acquire=True)` does: mutual exclusion in arrival order, the lock
handed straight to the next waiter, cancelled waiters skipped or passing it on, owner checks."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ors_server.runtime.small_lock import SmallLock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server's loop (uvloop is asyncio): the lock is asyncio's


@pytest.fixture(params=["small", "anyio"])
def make(request: pytest.FixtureRequest) -> Callable[[], Any]:
    """Each test runs on anyio's own lock too: the behaviour `SmallLock` copies."""
    return SmallLock if request.param == "small" else lambda: anyio.Lock(fast_acquire=True)


async def test_waiters_get_the_lock_in_arrival_order_and_it_stays_held_between_them(make: Callable[[], Any]) -> None:
    lock = make()
    order: list[int] = []

    async def holder(n: int) -> None:
        async with lock:
            order.append(n)
            await anyio.lowlevel.checkpoint()
            assert lock.locked()

    with anyio.fail_after(5):
        lock.acquire_nowait()
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(holder, n)
            await anyio.wait_all_tasks_blocked()
            assert order == []
            lock.release()
            assert lock.locked()  # handed to the first waiter, not left free for a newcomer
        assert order == [0, 1, 2] and not lock.locked()


async def test_a_held_lock_refuses_acquire_nowait_and_a_free_one_is_taken_without_waiting(
    make: Callable[[], Any],
) -> None:
    lock = make()
    await lock.acquire()
    with pytest.raises(RuntimeError):
        lock.acquire_nowait()  # the owner again

    async def other() -> None:
        with pytest.raises(anyio.WouldBlock):
            lock.acquire_nowait()
        with pytest.raises(RuntimeError):
            lock.release()  # not the owner

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
    lock.release()
    assert not lock.locked()
    lock.acquire_nowait()
    assert lock.locked()
    lock.release()


async def test_a_waiter_cancelled_before_its_turn_is_skipped_and_one_cancelled_after_passes_the_lock_on(
    make: Callable[[], Any],
) -> None:
    lock = make()
    got: list[str] = []

    async def waiter(name: str, scope_box: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scope_box.append(scope)
            async with lock:
                got.append(name)

    with anyio.fail_after(5):
        await lock.acquire()
        first: list[anyio.CancelScope] = []
        second: list[anyio.CancelScope] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, "first", first)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(waiter, "second", second)
            await anyio.wait_all_tasks_blocked()
            first[0].cancel()  # before its turn: skipped
            await anyio.wait_all_tasks_blocked()
            lock.release()
        assert got == ["second"] and not lock.locked()

        # Handed the lock, then cancelled before it ran: it passes the lock on to the next waiter.
        await lock.acquire()

        async def plain_waiter(name: str) -> None:
            await lock.acquire()
            got.append(name)
            lock.release()

        third = asyncio.get_running_loop().create_task(plain_waiter("third"))
        fourth = asyncio.get_running_loop().create_task(plain_waiter("fourth"))
        await anyio.wait_all_tasks_blocked()
        lock.release()  # to "third" ...
        third.cancel()  # ... cancelled before it runs
        await asyncio.wait([third, fourth])
        assert third.cancelled() and got == ["second", "fourth"] and not lock.locked()


def test_an_idle_lock_is_small() -> None:
    assert sys.getsizeof(SmallLock()) < 64
