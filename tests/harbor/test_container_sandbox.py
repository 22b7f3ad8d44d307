"""A task's container as a `Sandbox` (what toolsets act on): fresh commands beside the agent's shell, in the same
file system, with stdin, a working directory, a time limit that kills what the command started, and files."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from ors_server.harbor.runtime import HarborRuntime
from ors_server.sandboxes.container import ContainerSandbox
from ors_server.sandboxes.interface import SandboxClosed
from tests.harbor.harbor_helpers import base_image_ready, harbor_env, needs_podman, settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sandbox() -> AsyncIterator[ContainerSandbox]:
    needs_podman()
    await anyio.to_thread.run_sync(base_image_ready)
    env_cls = harbor_env()
    runtime = HarborRuntime(env_cls.name, env_cls.harbor_tasks, settings(harbor_pool=0))
    [task] = [task for task in env_cls.harbor_tasks if task.name == "answer-file"]
    container = await runtime.start(task)
    try:
        yield ContainerSandbox(container)
    finally:
        await container.remove()


async def test_commands_share_the_file_system_with_the_shell_but_not_its_state(sandbox):
    shell = sandbox.container.shell
    assert shell is not None
    await shell.run("cd /tmp && export ONLY_IN_SHELL=1 && echo from-shell > /app/note")
    result = await sandbox.run('pwd; cat note; echo "[$ONLY_IN_SHELL]"')
    assert (result.exit_code, result.stdout) == (0, b"/app\nfrom-shell\n[]\n")


async def test_stdin_cwd_and_files(sandbox):
    assert (await sandbox.run("tr a-z A-Z", stdin=b"quiet\n")).stdout == b"QUIET\n"
    assert (await sandbox.run("pwd", cwd="/tmp")).stdout == b"/tmp\n"
    await sandbox.write_file("deep/dir/file.txt", b"content")
    assert await sandbox.read_file("/app/deep/dir/file.txt") == b"content"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("missing")


async def test_a_command_past_its_time_limit_is_killed_with_what_it_started(sandbox):
    result = await sandbox.run("sleep 60 & sleep 60; echo never", time_limit=1)
    assert result.timed_out and result.exit_code == 124 and b"never" not in result.stdout
    left = await sandbox.run("cat /proc/[0-9]*/comm")
    assert b"sleep" not in left.stdout, left  # neither running nor a zombie: the container's init reaps orphans


async def test_output_past_max_output_is_cut_and_said(sandbox):
    result = await sandbox.run("head -c 5000 /dev/zero | tr '\\0' x", max_output=100)
    assert result.truncated and result.stdout == b"x" * 100


async def test_a_closed_sandbox_refuses_commands(sandbox):
    await sandbox.close()
    with pytest.raises(SandboxClosed):
        await sandbox.run("true")
