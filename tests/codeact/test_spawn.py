"""How a step's process is started, talked to and ended, on the server's own event loop (uvloop).

uvloop starts a subprocess with fork, which copies the whole server's page tables on the event loop: every call of
every session stopped for ~10 ms at each sandbox start (each step's, or the pool's refill after each step). Steps
are started with `subprocess` instead (vfork); the event loop only watches the step's sockets, pipe and pidfd.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import tempfile
from typing import Any

import anyio
import pytest

from ors_server.codeact import Limits, SandboxMode, SandboxPool, ToolSpec, bwrap_problem, executor, run_step
from ors_server.codeact.executor import STDERR_KEEP, Started
from ors_server.sandboxes import bubblewrap
from ors_server.sandboxes.bubblewrap import as_agent
from tests.codeact.test_executor import descendants

pytestmark = pytest.mark.anyio

LIMITS = Limits(timeout=20)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"use_uvloop": True})  # the server's loop (uvicorn's default where uvloop is installed)


@pytest.fixture(
    params=[
        pytest.param(
            "bwrap", marks=pytest.mark.skipif(bwrap_problem() is not None, reason=f"no bwrap: {bwrap_problem()}")
        ),
        "none",
    ]
)
def kind(request: pytest.FixtureRequest) -> SandboxMode:
    return request.param  # type: ignore[no-any-return]


async def moved(name: str, arguments: dict[str, Any]) -> Any:
    return f"moved {arguments['action']}"


async def test_a_step_never_starts_through_the_event_loops_own_spawn(
    kind: SandboxMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a sandbox was started through the event loop (uvloop forks the whole server)")

    monkeypatch.setattr(anyio, "open_process", refused)
    code = "return [move(action=a) for a in ('LEFT', 'UP')]"
    async with SandboxPool(1, kind, LIMITS.tmp_bytes).run() as pool:
        with anyio.fail_after(60):
            await pool.filled()
        pooled = await run_step(code, [ToolSpec("move", "", ["action"])], moved, limits=LIMITS, sandbox=kind, pool=pool)
    unpooled = await run_step(code, [ToolSpec("move", "", ["action"])], moved, limits=LIMITS, sandbox=kind)
    assert pool.taken == 1
    assert pooled.value == unpooled.value == "['moved LEFT', 'moved UP']", (pooled, unpooled)


async def test_what_the_code_writes_to_its_stderr_never_blocks_it_and_is_kept_for_the_log(kind: SandboxMode) -> None:
    # Far more than a pipe holds (64 KiB): the step would hang at its timeout if nobody read the pipe meanwhile.
    code = "import os\nfor _ in range(100):\n    os.write(2, b'diag-' * 2000)\nreturn 'written'"
    with anyio.fail_after(60):
        result = await run_step(code, [], moved, limits=LIMITS, sandbox=kind)
    assert (result.error, result.value) == (None, "written")
    assert result.stderr == ("diag-" * 1000)[:STDERR_KEEP]
    # Written just before the result: still in the pipe when the result arrives, and kept.
    result = await run_step("import os\nos.write(2, b'last words')\nreturn 1", [], moved, limits=LIMITS, sandbox=kind)
    assert (result.value, result.stderr) == ("1", "last words")


async def test_the_server_kills_the_sandbox_once_the_result_arrives(
    kind: SandboxMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child no longer exits on its own after its result: its teardown competed with the server for the CPU
    # just as the server woke to read the result. A thread the code leaves running does not keep it alive either.
    started: list[Started] = []
    start = executor.start_sandbox

    async def keep(sandbox: SandboxMode, tmp_bytes: int) -> Started:
        started.append(await start(sandbox, tmp_bytes))
        return started[-1]

    monkeypatch.setattr(executor, "start_sandbox", keep)
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\nreturn 'left'"
    with anyio.fail_after(60):
        result = await run_step(code, [], moved, limits=LIMITS, sandbox=kind)
    assert (result.error, result.value) == (None, "left")
    assert len(started) == 1 and started[0].process.returncode == -signal.SIGKILL


async def test_a_step_with_a_pool_that_does_not_run_is_ended_before_it_answers(kind: SandboxMode) -> None:
    before = set(descendants(os.getpid()))
    pool = SandboxPool(1, kind, LIMITS.tmp_bytes)  # never run: it has no task to reap in the background
    result = await run_step("return 1", [], moved, limits=LIMITS, sandbox=kind, pool=pool)
    assert result.value == "1" and pool.taken == 0
    assert set(descendants(os.getpid())) - before == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="the ids are dropped only when the server runs as root")
@pytest.mark.parametrize("setpriv", [True, False], ids=["setpriv", "python"])
def test_as_agent_drops_every_id_with_either_prefix(setpriv: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not setpriv:
        monkeypatch.setattr(bubblewrap, "_setpriv", lambda: None)
    elif bubblewrap._setpriv() is None:
        pytest.skip("setpriv is not installed")
    argv = as_agent(["/bin/cat", "/proc/self/status"])
    assert argv[0].endswith("setpriv") == setpriv
    status = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    lines = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert lines["Uid"].split() == ["65534"] * 4  # real, effective, saved, file system
    assert lines["Gid"].split() == ["65534"] * 4
    assert lines["Groups"].split() == []
    assert int(lines["CapPrm"], 16) == int(lines["CapEff"], 16) == int(lines["CapAmb"], 16) == 0


@pytest.mark.parametrize("says, used", [("setpriv from util-linux 2.38.1", True), ("BusyBox v1.36.1", False)])
def test_only_util_linux_setpriv_is_used(says: str, used: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "setpriv"
    fake.write_text(f"#!/bin/sh\necho '{says}'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bubblewrap.shutil, "which", lambda name, path=None: str(fake))
    assert bubblewrap._setpriv.__wrapped__() == (str(fake) if used else None)


@pytest.mark.parametrize(
    "code, value",
    [
        ("def f():\n    return 5\nclass A:\n    def g(self):\n        return 1\nf() + A().g()", "6"),
        ("try:\n    return [i for i in range(3)]\nfinally:\n    pass", "[0, 1, 2]"),
        ("if True:\n    return 'early'\nprint('never')", "early"),
        ("x = 1", None),
    ],
)
async def test_a_steps_value_is_its_top_level_return_else_its_final_expression(code: str, value: str | None) -> None:
    # The step's code is compiled from the parser's tree (`_ast`): a return inside a def or class is not the step's.
    result = await run_step(code, [], moved, limits=LIMITS, sandbox="none")
    assert (result.error, result.value) == (None, value)


async def test_only_the_bare_mode_makes_a_directory_on_the_host(kind: SandboxMode) -> None:
    # Under bwrap the step's /tmp is a tmpfs inside its sandbox: a host directory would only be made and removed.
    mine = f"ors-codeact-{os.getpid()}.*"
    seen: list[list[str]] = []

    async def look(name: str, arguments: dict[str, Any]) -> Any:
        seen.append(glob.glob(os.path.join(tempfile.gettempdir(), mine)))
        return "looked"

    result = await run_step("look()", [ToolSpec("look")], look, limits=LIMITS, sandbox=kind)
    assert result.error is None and len(seen) == 1
    assert bool(seen[0]) == (kind == "none"), seen
