"""The shell environment through the session core: a persistent bash per session, limits, grading, cleanup,
concurrency, and the operator's choice of sandbox. Isolation between sessions is in test_shell_isolation.py."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ors_server.calls import Progress, ToolCrashed, ToolRejected
from ors_server.environments.math import Math
from ors_server.environments.shell import EXERCISES, TEST, TRAIN, Shell
from ors_server.environments.shell.confinement import _working_bwrap_flags, bwrap_problem
from ors_server.errors import SetupFailed, TaskRejected
from ors_server.settings import Settings
from ors_server.types import ToolOutput
from tests.environments.shell_helpers import (
    alive,
    bash,
    footprint,
    processes_with_argument,
    shell_session,
    start_background_process,
    unique_sleep,
    until_running,
)
from tests.pipeline import StoreWithCalls

pytestmark = pytest.mark.anyio

BWRAP_PROBLEM = bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}")


@pytest.fixture(autouse=True)
def default_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behaviour tests run in the default sandbox; where bubblewrap cannot run, in the operator's opt-out."""
    monkeypatch.delenv("ORS_SHELL_SANDBOX", raising=False)
    if BWRAP_PROBLEM is not None:
        monkeypatch.setenv("ORS_SHELL_SANDBOX", "none")


@pytest.fixture(params=["bwrap", "none"])
def sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both confinements, set the way an operator sets them."""
    if request.param == "bwrap" and BWRAP_PROBLEM is not None:
        pytest.skip(f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
    monkeypatch.setenv("ORS_SHELL_SANDBOX", request.param)
    return request.param


# One command after another.


async def test_shell_state_persists_between_commands() -> None:
    async with shell_session() as (store, session):
        assert await bash(store, session, "export VAR=hello") == "exit code: 0"
        assert await bash(store, session, "echo $VAR") == "exit code: 0\nstdout:\nhello\n"
        await bash(store, session, "mkdir sub && cd sub && greet() { echo hi from $PWD; }")
        text = await bash(store, session, "greet")
        assert text.endswith("/work/sub\n") and "hi from" in text


async def test_command_reports_exit_code_stdout_and_stderr() -> None:
    async with shell_session() as (store, session):
        assert await bash(store, session, "echo out; echo err >&2; exit_with() { return $1; }; exit_with 3") == (
            "exit code: 3\nstdout:\nout\n\nstderr:\nerr\n"
        )
        result = await store.call(session, "bash", {"command": "true"})
        assert isinstance(result, ToolOutput)
        assert result.metadata == {"exit_code": 0} and result.reward == 0.0 and not result.finished


async def test_timed_out_command_is_stopped_and_the_shell_keeps_its_state() -> None:
    async with shell_session({"id": "hello_file", "command_timeout": 0.5}) as (store, session):
        await bash(store, session, "export VAR=kept")
        text = await bash(store, session, "sleep 1000; echo FIRST")
        assert text.startswith("exit code: 137\n") and "FIRST" not in text
        assert text.endswith("[the command timed out after 0.5 s and was killed]")
        assert await bash(store, session, "echo SECOND $VAR") == "exit code: 0\nstdout:\nSECOND kept\n"


async def test_a_shell_that_will_not_stop_is_replaced_in_the_same_directory() -> None:
    async with shell_session({"id": "hello_file", "command_timeout": 0.3}) as (store, session):
        await bash(store, session, "mkdir deep && cd deep && export VAR=lost")
        text = await bash(store, session, "trap '' USR1; while true; do :; done")
        assert "timed out" in text and "[a new shell was started in " in text
        text = await bash(store, session, 'echo "[$VAR]" && pwd')
        assert text.startswith("exit code: 0\nstdout:\n[]\n") and text.endswith("/work/deep\n")


async def test_exit_starts_a_new_shell() -> None:
    async with shell_session() as (store, session):
        assert "[the shell exited with status 4]" in await bash(store, session, "exit 4")
        assert await bash(store, session, "echo alive") == "exit code: 0\nstdout:\nalive\n"


async def test_syntax_error_fails_only_that_command() -> None:
    async with shell_session() as (store, session):
        await bash(store, session, "export VAR=kept")
        assert (await bash(store, session, 'echo "unterminated')).startswith("exit code: 2\nstderr:\n")
        assert await bash(store, session, "echo $VAR") == "exit code: 0\nstdout:\nkept\n"


async def test_commands_do_not_read_the_tool_pipe() -> None:
    async with shell_session() as (store, session):
        assert await bash(store, session, "cat; read line; echo read=$?") == "exit code: 0\nstdout:\nread=1\n"


async def test_output_is_capped_per_stream() -> None:
    async with shell_session() as (store, session):
        text = await bash(store, session, "yes | head -c 10000000; yes e | head -c 100000 >&2")
        assert "[stdout truncated: showing the first 65536 of 10000000 bytes]" in text
        assert "[stderr truncated: showing the first 65536 of 100000 bytes]" in text
        assert len(text) < 3 * 65536


async def test_the_shell_gets_neither_the_servers_environment_nor_the_sessions_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORS_API_KEY", "do-not-leak-key")
    async with shell_session(secrets={"TOKEN": "do-not-leak-secret"}) as (store, session):
        text = await bash(store, session, "env; echo \"[$ORS_API_KEY]\"; cat /proc/$$/environ | tr '\\0' '\\n'")
        assert "do-not-leak" not in text and "[]" in text


async def test_a_long_command_reports_its_seconds_and_last_line_as_progress() -> None:
    """From 2 s on, at most 2 s apart: the seconds the command has run (of its timeout) and what it printed last."""
    reports: list[Progress] = []
    async with shell_session({"id": "hello_file", "command_timeout": 20}) as (store, session):
        assert isinstance(store, StoreWithCalls)
        command = "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.75; done"
        call = store.calls.start(session, "bash", {"command": command}, progress=reports.append)
        with anyio.fail_after(30):
            result = await call.wait()
    assert isinstance(result, ToolOutput) and "line-6" in result.blocks[0].text
    assert len(reports) >= 2, reports
    assert reports[0].done >= 2.0
    assert [r.done for r in reports] == sorted({r.done for r in reports})  # increasing
    assert all(r.total == 20.0 and r.message is not None and r.message.startswith("line-") for r in reports), reports


async def test_nul_in_a_command_fails_the_call() -> None:
    async with shell_session() as (store, session):
        result = await store.call(session, "bash", {"command": "echo a\0b"})
        assert result == ToolCrashed("ValueError: the command must not contain NUL characters")


# A call the server abandons (its tool timeout) must leave the shell consistent.


async def test_after_the_servers_tool_timeout_the_next_command_gets_its_own_output(sandbox: str) -> None:
    async with shell_session(settings=Settings(tool_timeout=1)) as (store, session):
        await bash(store, session, "export VAR=kept")
        result = await store.call(session, "bash", {"command": "sleep 5; echo FIRST"})
        assert isinstance(result, ToolRejected) and result.reason == "timeout"
        began = time.monotonic()
        assert await bash(store, session, "echo SECOND") == "exit code: 0\nstdout:\nSECOND\n"
        assert time.monotonic() - began < 1  # the abandoned sleep was killed, not waited for
        assert await bash(store, session, "echo THIRD $VAR") == "exit code: 0\nstdout:\nTHIRD kept\n"


async def test_after_the_servers_tool_timeout_in_a_busy_loop_the_shell_keeps_its_state(sandbox: str) -> None:
    async with shell_session(settings=Settings(tool_timeout=0.5)) as (store, session):
        await bash(store, session, "export VAR=kept; cd /tmp")
        result = await store.call(session, "bash", {"command": "while :; do :; done; echo FIRST"})
        assert isinstance(result, ToolRejected) and result.reason == "timeout"
        assert await bash(store, session, "echo $VAR; pwd") == "exit code: 0\nstdout:\nkept\n/tmp\n"


# Waiting on commands holds no thread.


async def test_many_slow_commands_run_at_once_and_other_sessions_answer_meanwhile() -> None:
    # Before the driver was asynchronous, each running command held one of the 40 worker threads: 100 commands
    # of 3 s took at least 9 s, and a math call made meanwhile waited about 3 s for a free thread.
    sessions, seconds = 100, 3
    async with StoreWithCalls(Settings(ready_wait=60)).run() as store:
        for i in range(sessions):
            store.create(f"s{i}", Shell, {"id": "hello_file"})
        shells = [await store.get_ready(f"s{i}") for i in range(sessions)]
        store.create("m", Math, Math.get_task("train", 0))
        math = await store.get_ready("m")
        began = time.monotonic()
        calls = [store.start_call(s, "bash", {"command": f"sleep {seconds}; echo done"}) for s in shells]
        with anyio.fail_after(30):
            result = await store.call(math, "submit", {"answer": "0"})
            math_took = time.monotonic() - began
            results = [await call.wait() for call in calls]
        took = time.monotonic() - began
        assert isinstance(result, ToolOutput)
        assert all(isinstance(r, ToolOutput) and r.blocks[0].text == "exit code: 0\nstdout:\ndone\n" for r in results)
        assert math_took < 1.5, f"a math call waited {math_took:.1f} s behind the shell commands"
        assert took < 2 * seconds, f"{sessions} commands of {seconds} s took {took:.1f} s"


# Grading.


async def test_submit_grades_the_working_directory_and_ends_the_episode() -> None:
    async with shell_session() as (store, session):
        await bash(store, session, "printf hi > hello.txt")
        result = await store.call(session, "submit", {})
        assert isinstance(result, ToolOutput)
        assert (result.reward, result.finished, result.blocks[0].text) == (1.0, True, "Correct: the task is solved.")
    async with shell_session() as (store, session):
        result = await store.call(session, "submit", None)
        assert isinstance(result, ToolOutput) and (result.reward, result.finished) == (0.0, True)
        assert result.blocks[0].text == "Not solved: hello.txt does not exist or is not a regular file."


async def test_submit_stops_the_episodes_processes_before_it_grades() -> None:
    async with shell_session() as (store, session):
        # A background writer could otherwise change hello.txt (or swap in a link) while the check reads it.
        argument = unique_sleep()
        await bash(
            store, session, f"(sleep {argument}; echo hi > hello.txt) >/dev/null 2>&1 & {until_running(argument)}"
        )
        [writer] = processes_with_argument(argument)
        result = await store.call(session, "submit", {})
        assert isinstance(result, ToolOutput) and result.reward == 0.0
        assert not alive(writer)


SOLUTIONS = {
    "hello_file": "echo hi > hello.txt",
    "nested_dirs": "mkdir -p project/src/utils",
    "count_lines": "wc -l < data.txt > count.txt",
    "rename_file": "mv draft.txt final.txt",
    "unique_sorted": "sort -u names.txt > unique.txt",
    "make_executable": "chmod u+x run.sh",
    "replace_setting": "sed -i 's/^debug=false$/debug=true/' config.ini",
    "clean_tmp": "find build -name '*.tmp' -type f -delete",
    "sum_numbers": "awk '{s += $1} END {print s}' numbers.txt > sum.txt",
    "largest_file": "ls -S logs | head -n 1 > largest.txt",
    "symlink_release": 'ln -s "$PWD/releases/v2" current',
    "archive_docs": "tar czf backup.tar.gz docs",
}


async def test_every_exercise_is_unsolved_at_first_and_solved_by_a_reference_command() -> None:
    async with StoreWithCalls(Settings()).run() as store:
        for exercise in sorted(EXERCISES):
            store.create(f"{exercise}-0", Shell, {"id": exercise})
            store.create(f"{exercise}-1", Shell, {"id": exercise})
        for exercise in sorted(EXERCISES):
            untouched, solved = await store.get_ready(f"{exercise}-0"), await store.get_ready(f"{exercise}-1")
            assert (await bash(store, solved, SOLUTIONS[exercise])).startswith("exit code: 0"), exercise
            for session, reward in ((untouched, 0.0), (solved, 1.0)):
                result = await store.call(session, "submit", {})
                assert isinstance(result, ToolOutput) and result.reward == reward, (exercise, result)


def test_splits_hold_the_exercises() -> None:
    assert Shell.list_splits() == ["train", "test"]
    assert [task["id"] for task in Shell.list_tasks("train")] == [e.id for e in TRAIN]
    assert [task["id"] for task in Shell.list_tasks("test")] == [e.id for e in TEST]
    assert Shell.get_task("test", 0) == {"id": "sum_numbers", "instruction": TEST[0].instruction}


async def test_checks_follow_links_as_the_agent_sees_them_and_never_out_of_the_working_directory() -> None:
    async with shell_session() as (store, session):
        await bash(store, session, 'mkdir real && echo hi > real/answer && ln -s "$PWD/real/answer" hello.txt')
        assert (await store.call(session, "submit", {})).reward == 1.0  # type: ignore[union-attr]
    for link in ("/etc/passwd", "../../../../../../../etc/passwd"):
        async with shell_session() as (store, session):
            await bash(store, session, f"ln -s {link} hello.txt")
            result = await store.call(session, "submit", {})
            assert isinstance(result, ToolOutput) and result.reward == 0.0
            assert result.blocks[0].text == "Not solved: hello.txt does not exist or is not a regular file."


async def test_prompt_states_the_exercise_and_the_tools() -> None:
    async with shell_session() as (_, session):
        assert isinstance(session.env, Shell)
        [block] = session.env.get_prompt()
        assert block.text.startswith("Create a file named hello.txt containing the text hi.")
        assert "bash tool" in block.text and "submit" in block.text


async def test_an_unknown_exercise_is_a_refused_task_spec() -> None:
    async with StoreWithCalls(Settings()).run() as store:
        store.create("s", Shell, {"id": "nope"})
        with pytest.raises(TaskRejected, match="must name an exercise"):
            await store.get_ready("s")


# Every ending leaves nothing behind.


async def test_delete_leaves_no_process_or_directory(sandbox: str) -> None:
    async with shell_session() as (store, session):
        child = await start_background_process(store, session)
        shell_pid, root = footprint(session)
        assert alive(shell_pid) and alive(child) and root.is_dir()
        assert await store.discard("s")
        assert not alive(shell_pid) and not alive(child) and not root.exists()


async def test_reaping_leaves_no_process_or_directory(sandbox: str) -> None:
    async with shell_session() as (store, session):
        child = await start_background_process(store, session)
        shell_pid, root = footprint(session)
        session.last_active -= store.settings.session_timeout + 1  # idle for longer than the timeout
        assert await store.reap() == 1
        assert "s" not in store
        assert not alive(shell_pid) and not alive(child) and not root.exists()


async def test_shutdown_leaves_no_process_or_directory(sandbox: str) -> None:
    async with shell_session() as (store, session):
        child = await start_background_process(store, session)
        shell_pid, root = footprint(session)
    assert not alive(shell_pid) and not alive(child) and not root.exists()


async def test_delete_during_a_running_command_ends_it_and_cleans_up(sandbox: str) -> None:
    async with shell_session() as (store, session):
        shell_pid, root = footprint(session)
        started = root / "work" / "started"
        os.mkfifo(started)
        started.chmod(0o666)  # the shell may run as another user
        call = store.start_call(session, "bash", {"command": "echo go > started; sleep 1000"})
        with anyio.fail_after(10):
            # Opening a FIFO blocks until the command opens it for writing: then the command is running.
            await anyio.to_thread.run_sync(started.read_text, abandon_on_cancel=True)
            await store.discard("s")
            result = await call.wait()
        assert isinstance(result, ToolOutput) and "[the session ended while the command ran]" in result.blocks[0].text
        assert not alive(shell_pid) and not root.exists()


# The operator's choice of sandbox.


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    """Forget what the sandbox probe found, before and after (the test changes what it will find)."""
    bwrap_problem.cache_clear()
    _working_bwrap_flags.cache_clear()
    yield
    bwrap_problem.cache_clear()
    _working_bwrap_flags.cache_clear()


def test_the_sandbox_is_bwrap_unless_the_operator_opts_out_and_a_task_spec_cannot_opt_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if BWRAP_PROBLEM is not None:
        pytest.skip(f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
    for operator in (None, "", "bwrap"):
        if operator is None:
            monkeypatch.delenv("ORS_SHELL_SANDBOX", raising=False)
        else:
            monkeypatch.setenv("ORS_SHELL_SANDBOX", operator)
        for asked in ("none", "", None, "bwrap"):
            assert Shell(task_spec={"id": "hello_file", "sandbox": asked}).sandbox == "bwrap"
    monkeypatch.setenv("ORS_SHELL_SANDBOX", "none")
    assert Shell(task_spec={"id": "hello_file", "sandbox": "none"}).sandbox == "none"
    assert Shell(task_spec={"id": "hello_file", "sandbox": "bwrap"}).sandbox == "bwrap"


@pytest.mark.parametrize(
    ("operator", "asked", "message"), [("docker", None, "ORS_SHELL_SANDBOX must be"), (None, "x", "'sandbox' must be")]
)
def test_unknown_sandbox_names_are_refused(
    monkeypatch: pytest.MonkeyPatch, operator: str | None, asked: str | None, message: str
) -> None:
    if operator is not None:
        monkeypatch.setenv("ORS_SHELL_SANDBOX", operator)
    with pytest.raises(ValueError, match=message):
        Shell(task_spec={"id": "hello_file", "sandbox": asked})


async def test_without_bwrap_installed_shell_sessions_are_refused_and_the_fix_is_named(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None
) -> None:
    monkeypatch.delenv("ORS_SHELL_SANDBOX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    async with StoreWithCalls(Settings()).run() as store:
        store.create("s", Shell, {"id": "hello_file"})
        with pytest.raises(SetupFailed, match="bwrap is not installed.*ORS_SHELL_SANDBOX=none"):
            await store.get_ready("s")


@pytest.fixture
def refused_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A `bwrap` first on PATH that fails as a kernel without unprivileged user namespaces makes it fail."""
    folder = Path(tempfile.mkdtemp(prefix="ors-shell-test-"))  # reachable by the user the probe runs as
    folder.chmod(0o755)
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    yield
    shutil.rmtree(folder)


async def test_a_bwrap_the_kernel_refuses_is_found_out_by_running_it(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: None, refused_bwrap: None
) -> None:
    monkeypatch.delenv("ORS_SHELL_SANDBOX", raising=False)
    async with StoreWithCalls(Settings()).run() as store:
        store.create("s", Shell, {"id": "hello_file"})
        with pytest.raises(SetupFailed, match="setting up uid map: Permission denied.*ORS_SHELL_SANDBOX=none"):
            await store.get_ready("s")


async def test_unsandboxed_shells_need_the_operators_opt_in_and_warn_at_every_session(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ORS_SHELL_SANDBOX", "none")
    with caplog.at_level(logging.WARNING, logger="ors_server.environments.shell"):
        async with StoreWithCalls(Settings()).run() as store:
            for name in ("a", "b"):
                store.create(name, Shell, {"id": "hello_file"})
                assert await bash(store, await store.get_ready(name), "echo hi") == "exit code: 0\nstdout:\nhi\n"
    warnings = [r for r in caplog.records if "WITHOUT a sandbox (ORS_SHELL_SANDBOX=none)" in r.getMessage()]
    assert len(warnings) == 2 and all(r.levelno == logging.WARNING for r in warnings)


# The sandbox toolsets act on.


@needs_bwrap
async def test_the_shells_toolset_sandbox_works_in_the_same_directory_as_its_bash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORS_SHELL_SANDBOX", "bwrap")
    async with shell_session() as (store, session):
        assert isinstance(session.env, Shell) and Shell.has_toolset_sandbox()
        sandbox = session.env.toolset_sandbox()
        assert sandbox is not None and sandbox.workdir == "/work"
        await sandbox.write_file("from_toolset.txt", b"written by a toolset\n")
        assert await bash(store, session, "cat from_toolset.txt") == "exit code: 0\nstdout:\nwritten by a toolset\n"
        await bash(store, session, "echo from bash > from_bash.txt")
        assert await sandbox.read_file("from_bash.txt") == b"from bash\n"


async def test_an_unconfined_shell_offers_no_sandbox_to_toolsets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORS_SHELL_SANDBOX", "none")
    async with shell_session() as (_store, session):
        assert isinstance(session.env, Shell) and session.env.toolset_sandbox() is None
