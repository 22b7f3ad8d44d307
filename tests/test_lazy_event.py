"""`LazyEvent` behaves as `anyio.Event` does for set, is_set and wait."""

from __future__ import annotations

import anyio
import pytest

from ors_server.runtime.lazy_event import LazyEvent

pytestmark = pytest.mark.anyio


async def test_waiters_before_the_set_all_wake_and_a_wait_after_it_returns_at_once() -> None:
    event = LazyEvent()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await event.wait()
        woken.append(n)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
            assert not event.is_set() and woken == []
            assert event.statistics().tasks_waiting == 3
            event.set()
        assert sorted(woken) == [0, 1, 2] and event.is_set()
        assert event.statistics().tasks_waiting == 0
        await event.wait()


async def test_a_cancelled_waiter_leaves_the_event_usable() -> None:
    event = LazyEvent()
    with anyio.move_on_after(0.01):
        await event.wait()
    assert not event.is_set()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(event.wait)
            await anyio.wait_all_tasks_blocked()
            event.set()
