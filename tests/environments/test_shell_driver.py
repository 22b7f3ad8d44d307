"""The bash driver on its own: the marker protocol, timeouts, cancellation and replacement, in both confinements."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ors_server.environments.shell.confinement import Bubblewrap, Unconfined, bwrap_problem, prepare_workdir
from ors_server.sandboxes.persistent_shell import BashDriver, Capture, CommandResult, ShellClosed

pytestmark = pytest.mark.anyio

BWRAP_PROBLEM = bwrap_problem()


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Under /tmp as the environment makes them: when the tests run as root, the shell runs as another user, who
    # must be able to reach the directory (pytest's tmp_path is inside a directory only its owner may enter).
    root = Path(tempfile.mkdtemp(prefix="ors-shell-test-"))
    workdir = root / "work"
    workdir.mkdir()
    prepare_workdir(root, workdir)
    yield workdir
    shutil.rmtree(root)


@pytest.fixture(params=["bwrap", "none"])
async def driver(request: pytest.FixtureRequest, workdir: Path) -> AsyncIterator[BashDriver]:
    if request.param == "bwrap" and BWRAP_PROBLEM is not None:
        pytest.skip(f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
    confinement = Bubblewrap(workdir) if request.param == "bwrap" else Unconfined(workdir)
    shell = BashDriver(confinement, timeout=1.0, output_cap=4096)
    with anyio.fail_after(15):
        await shell.start()
    try:
        yield shell
    finally:
        await shell.close()


async def run(shell: BashDriver, command: str, within: float = 10) -> CommandResult:
    with anyio.fail_after(within):
        return await shell.run(command)


def appears(path: Path, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.exists()


def test_markers_are_found_across_any_split_of_the_stream() -> None:
    stream = b"hello\n__ors_t0k3n:7:/work/a dir\0after"
    for size in (1, 2, 3, 5, 8, len(stream)):
        capture = Capture(b"__ors_t0k3n:", 1000)
        pieces = [stream[start : start + size] for start in range(0, len(stream), size)]
        fed = 0
        while not capture.done:
            rest = capture.feed(pieces[fed])
            fed += 1
        assert (bytes(capture.kept), capture.exit_code, capture.cwd) == (b"hello\n", 7, "/work/a dir")
        assert rest + b"".join(pieces[fed:]) == b"after"  # what follows the end is handed back


def test_a_capture_keeps_its_cap_and_counts_the_rest() -> None:
    capture = Capture(b"__ors_x", 4)
    capture.feed(b"abcdefgh")
    capture.feed(b"ij__ors_x\0")
    assert capture.text("stdout") == "abcd\n[stdout truncated: showing the first 4 of 10 bytes]"


async def test_state_output_and_exit_code(driver: BashDriver) -> None:
    await run(driver, "export V=1; mkdir -p sub && cd sub; f() { echo f$V; }")
    result = await run(driver, "f; echo err >&2; false")
    assert (result.exit_code, result.stdout, result.stderr, result.notes) == (1, "f1\n", "err\n", [])
    assert driver.cwd.endswith("/work/sub")


async def test_a_timed_out_command_stops_where_it_is_and_the_shell_keeps_its_state(driver: BashDriver) -> None:
    await run(driver, "export V=kept")
    result = await run(driver, "echo START; sleep 30; echo FIRST")
    assert result.exit_code == 137 and result.stdout == "START\n"
    assert result.notes == ["the command timed out after 1 s and was killed"]
    assert (await run(driver, "echo SECOND $V")).stdout == "SECOND kept\n"


async def test_a_loop_of_builtins_is_stopped_without_replacing_the_shell(driver: BashDriver) -> None:
    await run(driver, "export V=kept")
    result = await run(driver, "while :; do :; done")
    assert result.notes == ["the command timed out after 1 s and was killed"]
    assert (await run(driver, "echo $V")).stdout == "kept\n"


async def test_a_shell_that_ignores_the_stop_is_replaced_in_the_same_directory(driver: BashDriver) -> None:
    await run(driver, "mkdir deep && cd deep && export V=lost")
    result = await run(driver, "trap '' USR1; while :; do :; done")
    assert result.notes[0] == "the command timed out after 1 s and was killed"
    assert result.notes[1].startswith("a new shell was started in ") and result.notes[1].endswith(
        "/work/deep; shell variables and functions were reset"
    )
    result = await run(driver, 'echo "[$V]"; pwd')
    assert result.stdout.startswith("[]\n") and result.stdout.endswith("/work/deep\n")


async def test_a_cancelled_command_is_stopped_and_the_next_one_gets_its_own_output(driver: BashDriver) -> None:
    await run(driver, "export V=kept")
    with anyio.move_on_after(0.3) as scope:
        await driver.run("sleep 30; echo FIRST")
    assert scope.cancelled_caught
    began = time.monotonic()
    assert (await run(driver, "echo SECOND $V")).stdout == "SECOND kept\n"
    assert time.monotonic() - began < 5  # not held until the abandoned sleep would have ended
    assert (await run(driver, "echo THIRD")).stdout == "THIRD\n"


async def test_a_cancelled_loop_of_builtins_leaves_the_shell_usable(driver: BashDriver) -> None:
    await run(driver, "export V=kept")
    with anyio.move_on_after(0.3):
        await driver.run("while :; do :; done")
    result = await run(driver, "echo $V")
    assert (result.stdout, result.notes) == ("kept\n", [])


async def test_a_cancelled_command_whose_shell_cannot_be_stopped_is_replaced(driver: BashDriver) -> None:
    with anyio.move_on_after(0.3):
        await driver.run("export V=lost; trap '' USR1; while :; do :; done")
    result = await run(driver, 'echo "[$V]"')
    assert result.stdout == "[]\n"
    assert result.notes[0].startswith("the previous command was abandoned and left its shell busy")


async def test_exit_starts_a_new_shell(driver: BashDriver) -> None:
    result = await run(driver, "exit 4")
    assert result.exit_code is None and result.notes[0] == "the shell exited with status 4"
    assert (await run(driver, "echo alive")).stdout == "alive\n"


async def test_output_written_after_a_command_ended_goes_to_the_next_one(driver: BashDriver, workdir: Path) -> None:
    await run(driver, "(sleep 0.2; echo late; touch late-written) &")
    # Wait with no command running, so that "late" cannot land in the middle of the next command's own output.
    assert await anyio.to_thread.run_sync(appears, workdir / "late-written")
    assert (await run(driver, "echo now")).stdout == "late\nnow\n"


async def test_closing_during_a_command_ends_it(driver: BashDriver, workdir: Path) -> None:
    started = workdir / "started"
    os.mkfifo(started)
    started.chmod(0o666)  # the shell may run as another user
    results: list[CommandResult] = []

    async def call() -> None:
        results.append(await driver.run("echo go > started; sleep 30"))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(10):
            # Opening a FIFO blocks until the command opens it for writing: then the command is running.
            await anyio.to_thread.run_sync(started.read_text, abandon_on_cancel=True)
            await driver.close()
    assert results[0].notes[-1] == "the session ended while the command ran"
    with pytest.raises(ShellClosed):
        await driver.run("true")
    await driver.close()


async def test_a_shell_that_cannot_start_says_why(workdir: Path) -> None:
    class Broken(Unconfined):
        def command(self) -> tuple[list[str], dict[str, Any]]:
            return ["bash", "-c", "echo 'no sandbox for you' >&2; exit 3"], super().command()[1]

    shell = BashDriver(Broken(workdir), timeout=1, output_cap=100)
    with pytest.raises(RuntimeError, match="the shell did not start: no sandbox for you"):
        await shell.start()
    await shell.close()


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_the_driver_runs_on_uvloop_as_under_uvicorn(workdir: Path, sandbox: str) -> None:
    # uvicorn runs on uvloop where it is installed, whose own subprocess support cannot start a process as
    # another user: the driver must not depend on it.
    pytest.importorskip("uvloop")
    if sandbox == "bwrap" and BWRAP_PROBLEM is not None:
        pytest.skip(f"bubblewrap cannot run here: {BWRAP_PROBLEM}")

    async def episode() -> list[CommandResult]:
        shell = BashDriver(Bubblewrap(workdir) if sandbox == "bwrap" else Unconfined(workdir), timeout=1, output_cap=99)
        await shell.start()
        try:
            results = [await run(shell, "export V=1; echo $V"), await run(shell, "sleep 30")]
            with anyio.move_on_after(0.3):
                await shell.run("sleep 30; echo FIRST")
            results.append(await run(shell, "echo SECOND $V; exit 3"))
            results.append(await run(shell, "echo after"))
            return results
        finally:
            await shell.close()

    results = anyio.run(episode, backend="asyncio", backend_options={"use_uvloop": True})
    assert [(r.exit_code, r.stdout) for r in results] == [(0, "1\n"), (137, ""), (None, "SECOND 1\n"), (0, "after\n")]
    assert results[2].notes[0] == "the shell exited with status 3"
