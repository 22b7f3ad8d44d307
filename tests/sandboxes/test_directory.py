"""The bubblewrap backend of the `Sandbox` interface, driven as a toolset drives it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from ors_server.sandboxes.bubblewrap import AGENT_ID, Resources, optional_flags, remove_tree
from ors_server.sandboxes.directory import BubblewrapSandbox
from ors_server.sandboxes.interface import SandboxClosed

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
MiB = 1024 * 1024


def _host_processes_running(argument: str) -> list[int]:
    """Pids of the host's live processes with `argument` on their command line (each sandbox sees only its own
    pid namespace, so this is looked up from outside)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                words = file.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as file:
                state = file.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argument.encode() in words and state != b"Z":
            found.append(int(entry))
    return found


def _agent_directory() -> tuple[Path, Path]:
    # Not under pytest's tmp_path, whose parents the agent's user may not pass through.
    root = Path(tempfile.mkdtemp(prefix="ors-sandbox-test-"))
    root.chmod(0o711)
    host = root / "work"
    host.mkdir()
    if os.geteuid() == 0:
        os.chown(host, AGENT_ID, AGENT_ID)
    return root, host


@pytest.fixture
async def sandbox() -> AsyncIterator[BubblewrapSandbox]:
    root, host = _agent_directory()
    resources = Resources(memory_bytes=256 * MiB, processes=32, tmp_bytes=16 * MiB, file_bytes=1 * MiB)
    box = BubblewrapSandbox(host, resources, flags=optional_flags())
    yield box
    await box.close()
    remove_tree(root)


async def test_a_command_runs_in_the_working_directory_as_the_agent_user(sandbox: BubblewrapSandbox) -> None:
    result = await sandbox.run("pwd; id -u; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, f"/work\n{AGENT_ID}\n".encode(), b"oops\n")
    assert result.text() == f"/work\n{AGENT_ID}\noops\n"


async def test_commands_share_files_and_not_shell_state(sandbox: BubblewrapSandbox) -> None:
    await sandbox.run("mkdir sub && echo kept > sub/file && cd sub && export GONE=1")
    result = await sandbox.run('pwd; cat sub/file; echo "[$GONE]"')
    assert result.stdout == b"/work\nkept\n[]\n"
    assert await anyio.Path(sandbox.host_dir / "sub" / "file").read_text() == "kept\n"


async def test_files_written_and_read_through_the_sandbox_land_in_its_directory(sandbox: BubblewrapSandbox) -> None:
    await sandbox.write_file("deep/er/notes.txt", b"line 1\n\x00binary\n")
    assert await anyio.Path(sandbox.host_dir / "deep" / "er" / "notes.txt").read_bytes() == b"line 1\n\x00binary\n"
    assert await sandbox.read_file("/work/deep/er/notes.txt") == b"line 1\n\x00binary\n"


async def test_file_errors_are_the_ones_python_raises(sandbox: BubblewrapSandbox) -> None:
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("missing.txt")
    with pytest.raises(IsADirectoryError):
        await sandbox.read_file("/work")
    with pytest.raises(PermissionError):
        await sandbox.write_file("/usr/planted", b"x")  # the host's /usr is read-only inside
    await sandbox.write_file("big", b"x" * 100)
    with pytest.raises(ValueError, match="larger than 10 bytes"):
        await sandbox.read_file("big", max_bytes=10)


async def test_paths_outside_the_working_directory_are_the_sandboxs_not_the_hosts(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file(str(secret))
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("../secret.txt")
    await sandbox.write_file("/tmp/scratch", b"private")  # the sandbox's own /tmp, gone with the command
    assert not await anyio.Path("/tmp/scratch").exists()


async def test_the_process_list_names_no_host_path(sandbox: BubblewrapSandbox) -> None:
    # bubblewrap's init is pid 1 of the sandbox, with bubblewrap's own command line: its options named the host
    # directory shown at /work.
    seen = (await sandbox.run("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")).text()
    assert "bwrap --args " in seen, seen
    assert str(sandbox.host_dir) not in seen and "--bind" not in seen and "--setenv" not in seen, seen


async def test_a_command_past_its_time_limit_is_killed_with_what_it_started(sandbox: BubblewrapSandbox) -> None:
    with anyio.fail_after(20):
        result = await sandbox.run("(sleep 61.25; echo late) & echo started; sleep 61.5", time_limit=1)
    assert result.timed_out and result.exit_code == 124 and result.stdout == b"started\n"
    assert _host_processes_running("61.25") == [] and _host_processes_running("61.5") == []


async def test_output_past_the_cap_is_dropped_and_said(sandbox: BubblewrapSandbox) -> None:
    result = await sandbox.run("head -c 300000 /dev/zero", max_output=1000)
    assert result.truncated and len(result.stdout) == 1000 and result.exit_code == 0


async def test_a_cancelled_caller_leaves_no_command_running(sandbox: BubblewrapSandbox) -> None:
    with anyio.move_on_after(1):
        await sandbox.run("sleep 62.75 > marker", time_limit=60)
    assert await anyio.Path(sandbox.host_dir / "marker").exists()  # it did start
    assert _host_processes_running("62.75") == []


async def test_a_closed_sandbox_kills_its_commands_and_refuses_new_ones(sandbox: BubblewrapSandbox) -> None:
    results = []

    async def long() -> None:
        results.append(await sandbox.run("touch started; sleep 60", time_limit=60))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(long)
            await sandbox.run("until [ -e started ]; do sleep 0.01; done")  # the long command runs
            await sandbox.close()
    assert results[0].exit_code != 0
    with pytest.raises(SandboxClosed):
        await sandbox.run("true")
