"""The shell environment, driven through the session core: a persistent bash per session, limits, cleanup."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from environments.shell import EXERCISES, TEST, TRAIN, Shell
from ors_server.errors import SetupFailed
from ors_server.sessions import Session, SessionStore, ToolCrashed
from ors_server.settings import Settings
from ors_server.types import ToolOutput

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def shell_session(task_spec: dict[str, Any] | None = None) -> AsyncIterator[tuple[SessionStore, Session]]:
    async with SessionStore(Settings()).run() as store:
        store.create("s", Shell, task_spec or {"id": "hello_file"})
        yield store, await store.get_ready("s")


async def bash(store: SessionStore, session: Session, command: str) -> str:
    with anyio.fail_after(15):
        result = await store.call(session, "bash", {"command": command})
    assert isinstance(result, ToolOutput), result
    return result.blocks[0].text


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie awaiting its reaper counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def footprint(session: Session) -> tuple[int, Path]:
    return session.env.shell.proc.pid, session.env.root


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
        assert result.metadata == {"exit_code": 0} and result.reward == 0.0 and not result.finished


async def test_timed_out_command_is_killed_and_the_shell_lives_on() -> None:
    async with shell_session({"id": "hello_file", "command_timeout": 0.5}) as (store, session):
        await bash(store, session, "export VAR=kept")
        text = await bash(store, session, "sleep 1000")
        assert "[the command timed out after 0.5 s and was killed]" in text
        assert "new shell" not in text
        assert await bash(store, session, "echo $VAR") == "exit code: 0\nstdout:\nkept\n"


async def test_a_busy_shell_is_replaced_in_the_same_directory() -> None:
    async with shell_session({"id": "hello_file", "command_timeout": 0.3}) as (store, session):
        await bash(store, session, "mkdir deep && cd deep && export VAR=lost")
        text = await bash(store, session, "while true; do :; done")
        assert "timed out" in text and "a new shell was started in" in text
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


async def test_shell_gets_none_of_the_servers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORS_API_KEY", "do-not-leak")
    async with shell_session() as (store, session):
        assert await bash(store, session, 'echo "[$ORS_API_KEY]"') == "exit code: 0\nstdout:\n[]\n"


async def test_sessions_do_not_see_each_others_files() -> None:
    async with SessionStore(Settings()).run() as store:
        store.create("a", Shell, {"id": "hello_file"})
        store.create("b", Shell, {"id": "hello_file"})
        a, b = await store.get_ready("a"), await store.get_ready("b")
        await bash(store, a, "echo secret > mine.txt")
        assert (await bash(store, b, "ls; cat mine.txt")).startswith("exit code: 1\nstderr:\n")
        assert a.env.root != b.env.root


async def test_submit_grades_the_working_directory_and_ends_the_episode() -> None:
    async with shell_session() as (store, session):
        await bash(store, session, "printf hi > hello.txt")
        result = await store.call(session, "submit", {})
        assert isinstance(result, ToolOutput)
        assert (result.reward, result.finished, result.blocks[0].text) == (1.0, True, "Correct: the task is solved.")
    async with shell_session() as (store, session):
        result = await store.call(session, "submit", None)
        assert (result.reward, result.finished) == (0.0, True)
        assert result.blocks[0].text == "Not solved: hello.txt does not exist or is not a regular file."


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
    "symlink_release": "ln -s releases/v2 current",
    "archive_docs": "tar czf backup.tar.gz docs",
}


@pytest.mark.parametrize("exercise", sorted(EXERCISES))
def test_every_exercise_is_unsolved_at_first_and_solved_by_a_reference_command(exercise: str) -> None:
    env = Shell({"id": exercise})
    env.setup()
    try:
        assert env.exercise.check(env.workdir) is not None
        result = env.bash(env.tools["bash"].input_model(command=SOLUTIONS[exercise]))
        assert result.blocks[0].text.startswith("exit code: 0"), result.blocks[0].text
        assert env.submit().reward == 1.0
    finally:
        env.teardown()


def test_splits_hold_the_exercises() -> None:
    assert Shell.list_splits() == ["train", "test"]
    assert [task["id"] for task in Shell.list_tasks("train")] == [e.id for e in TRAIN]
    assert [task["id"] for task in Shell.list_tasks("test")] == [e.id for e in TEST]
    assert Shell.get_task("test", 0) == {"id": "sum_numbers", "instruction": TEST[0].instruction}


async def test_checks_do_not_follow_symlinks_out_of_the_working_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("hi\n")
    async with shell_session() as (store, session):
        await bash(store, session, f"ln -s {outside} hello.txt")
        result = await store.call(session, "submit", {})
        assert result.reward == 0.0


async def test_prompt_states_the_exercise_and_the_tools() -> None:
    async with shell_session() as (_, session):
        [block] = session.env.get_prompt()
        assert block.text.startswith("Create a file named hello.txt containing the text hi.")
        assert "bash tool" in block.text and "submit" in block.text


async def test_unknown_exercise_fails_setup() -> None:
    async with SessionStore(Settings()).run() as store:
        store.create("s", Shell, {"id": "nope"})
        with pytest.raises(SetupFailed, match="must name an exercise"):
            await store.get_ready("s")


async def test_nul_in_a_command_fails_the_call() -> None:
    async with shell_session() as (store, session):
        result = await store.call(session, "bash", {"command": "echo a\0b"})
        assert result == ToolCrashed("the command must not contain NUL characters")


async def test_asking_for_bwrap_without_it_fails_setup_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("ORS_SHELL_SANDBOX", "bwrap")
    async with SessionStore(Settings()).run() as store:
        store.create("s", Shell, {"id": "hello_file"})
        with pytest.raises(SetupFailed, match="bwrap is not installed"):
            await store.get_ready("s")
        root = store.get("s").env.root
    assert root is None or not root.exists()


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")


@needs_bwrap
async def test_bwrap_sandbox_has_no_network_a_read_only_system_and_a_writable_workdir() -> None:
    async with shell_session({"id": "hello_file", "sandbox": "bwrap"}) as (store, session):
        text = await bash(store, session, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert text == "exit code: 0\nstdout:\nlo\n"
        assert "Read-only file system" in await bash(store, session, "touch /usr/ors-probe")
        await bash(store, session, "echo hi > hello.txt")
        assert (await store.call(session, "submit", {})).reward == 1.0


@needs_bwrap
async def test_bwrap_timeout_kills_the_command_and_keeps_the_shell() -> None:
    task_spec = {"id": "hello_file", "sandbox": "bwrap", "command_timeout": 0.5}
    async with shell_session(task_spec) as (store, session):
        await bash(store, session, "export VAR=kept")
        text = await bash(store, session, "sleep 1000")
        assert "timed out" in text and "new shell" not in text
        assert await bash(store, session, "echo $VAR") == "exit code: 0\nstdout:\nkept\n"
        shell_pid, root = footprint(session)
        await store.discard("s")
        assert not alive(shell_pid) and not root.exists()


async def start_background_process(store: SessionStore, session: Session) -> int:
    text = await bash(store, session, "sleep 1000 >/dev/null 2>&1 & echo $!")
    return int(text.split("stdout:\n")[1])


async def test_delete_leaves_no_process_or_directory() -> None:
    async with shell_session() as (store, session):
        child = await start_background_process(store, session)
        shell_pid, root = footprint(session)
        assert alive(shell_pid) and alive(child) and root.is_dir()
        assert await store.discard("s")
        assert not alive(shell_pid) and not alive(child) and not root.exists()


async def test_reaping_leaves_no_process_or_directory() -> None:
    async with shell_session() as (store, session):
        child = await start_background_process(store, session)
        shell_pid, root = footprint(session)
        session.last_active -= store.settings.session_timeout + 1  # idle for longer than the timeout
        assert await store.reap() == 1
        assert "s" not in store
        assert not alive(shell_pid) and not alive(child) and not root.exists()


async def test_shutdown_leaves_no_process_or_directory() -> None:
    async with shell_session() as (store, session):
        child = await start_background_process(store, session)
        shell_pid, root = footprint(session)
    assert not alive(shell_pid) and not alive(child) and not root.exists()


async def test_delete_during_a_running_command_ends_it_and_cleans_up(tmp_path: Path) -> None:
    started = tmp_path / "started"
    os.mkfifo(started)
    async with shell_session() as (store, session):
        shell_pid, root = footprint(session)
        call = store.start_call(session, "bash", {"command": f"echo go > {started}; sleep 1000"})
        with anyio.fail_after(10):
            # Opening a FIFO blocks until the command opens it for writing: then the command is running.
            await anyio.to_thread.run_sync(started.read_text, abandon_on_cancel=True)
            await store.discard("s")
            result = await call.wait()
        assert isinstance(result, ToolOutput) and "[the session ended while the command ran]" in result.blocks[0].text
        assert not alive(shell_pid) and not root.exists()


def test_the_operators_bwrap_setting_cannot_be_turned_off_by_a_task_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORS_SHELL_SANDBOX", "bwrap")
    for asked in ("none", "", None):
        assert Shell(task_spec={"id": "hello_file", "sandbox": asked}).sandbox == "bwrap"
    monkeypatch.delenv("ORS_SHELL_SANDBOX")
    assert Shell(task_spec={"id": "hello_file", "sandbox": "none"}).sandbox is None
