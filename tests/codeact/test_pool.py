"""The pool of pre-started CodeAct sandboxes: a pooled step is contained exactly as an unpooled one, no sandbox
serves two steps, the pool stays within its size, and nothing of it outlives its shutdown.

Every test of `test_executor.py` runs here again with each step taken from a pool (its `run_step` is replaced,
for this module's run, by one that fills a pool of the step's kind first and checks the step came from it).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from ors_server.codeact import Limits, SandboxMode, SandboxPool, StepResult, ToolSpec, run_step
from tests.codeact import test_executor as unpooled
from tests.codeact.test_executor import *  # noqa: F403  (the isolation tests, run again with pooled steps)
from tests.codeact.test_executor import LIMITS, descendants, needs_bwrap

pytestmark = pytest.mark.anyio


async def pooled_run_step(
    code: str, tools: Any, call_tool: Any, *, limits: Limits, sandbox: SandboxMode = "bwrap"
) -> StepResult:
    try:
        async with SandboxPool(1, sandbox, limits.tmp_bytes).run() as pool:
            with anyio.fail_after(60):
                await pool.filled()
            # No refill behind this step: some tests look at every process the test has started.
            pool.size = 0
            result = await run_step(code, tools, call_tool, limits=limits, sandbox=sandbox, pool=pool)
            assert pool.taken == 1
            return result
    except BaseExceptionGroup as group:  # the pool's task group wraps what the step raised (SandboxUnavailable)
        assert len(group.exceptions) == 1
        raise group.exceptions[0] from None


@pytest.fixture(autouse=True)
def pooled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(unpooled, "run_step", pooled_run_step)
    yield


async def answer(name: str, arguments: dict[str, Any]) -> Any:
    return "answered"


@pytest.fixture(params=[pytest.param("bwrap", marks=needs_bwrap), "none"])
def kind(request: pytest.FixtureRequest) -> SandboxMode:
    return request.param  # type: ignore[no-any-return]


async def test_two_steps_from_one_pool_never_share_a_sandbox(kind: SandboxMode) -> None:
    code = (
        "import os\n"
        "seen = os.path.exists('/tmp/left-behind')\n"
        "open('/tmp/left-behind', 'w').write('x')\n"
        "return (seen, os.getpid(), os.readlink('/proc/self/ns/pid'))"
    )
    if kind == "none":  # the bare mode's working directory is private: the file is written there
        code = code.replace("/tmp/left-behind", "left-behind")
    async with SandboxPool(2, kind, LIMITS.tmp_bytes).run() as pool:
        values = []
        for _ in range(3):
            with anyio.fail_after(60):
                await pool.filled()
            result = await run_step(code, [], answer, limits=LIMITS, sandbox=kind, pool=pool)
            assert result.error is None and result.value is not None, result
            values.append(eval(result.value))
        assert pool.taken == 3
    assert [seen for seen, _, _ in values] == [False, False, False]
    if kind == "bwrap":
        assert len({namespace for _, _, namespace in values}) == 3  # a pid namespace of its own each time


async def test_the_pool_is_bounded_and_leaves_no_process_after_shutdown(kind: SandboxMode) -> None:
    before = set(descendants(os.getpid()))
    async with SandboxPool(2, kind, LIMITS.tmp_bytes).run() as pool:
        with anyio.fail_after(60):
            await pool.filled()
        assert len(pool) == 2 and pool.started == 2
        # Several steps at once: those the pool cannot serve start their own; the pool never holds more than 2.
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(
                    functools.partial(run_step, "return 1", [], answer, limits=LIMITS, sandbox=kind, pool=pool)
                )
        assert 1 <= pool.taken <= 4
        with anyio.fail_after(60):
            await pool.filled()
        assert len(pool) == 2 and pool.started == 2 + pool.taken
        assert len(set(descendants(os.getpid())) - before) >= 2  # the waiting members
    assert len(pool) == 0
    assert set(descendants(os.getpid())) - before == set()


async def test_a_pool_of_another_kind_or_of_size_0_is_not_used() -> None:
    async with SandboxPool(1, "none", 1024 * 1024).run() as pool:
        with anyio.fail_after(60):
            await pool.filled()
        result = await run_step("return 1", [ToolSpec("x")], answer, limits=LIMITS, sandbox="none", pool=pool)
        assert result.value == "1" and pool.taken == 0  # its /tmp size differs from the step's
    async with SandboxPool(0, "none", LIMITS.tmp_bytes).run() as empty:
        result = await run_step("return 1", [], answer, limits=LIMITS, sandbox="none", pool=empty)
        assert result.value == "1" and empty.taken == 0 and empty.started == 0
