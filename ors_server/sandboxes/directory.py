"""`BubblewrapSandbox`: a host directory shown at `/work` inside bubblewrap, each command in a sandbox of its own.

Every `run` starts bubblewrap afresh over the same working directory, with the hardening of
`ors_server.sandboxes.bubblewrap`
(its docstring says what every sandbox gets): uid/gid 65534, new namespaces (no network), `/usr` and `/etc`
read-only, a private `/tmp`, the working directory writable at `/work`, a seccomp filter, and `Resources` set as
rlimits inside. So commands share files and nothing else: no process outlives its command (the sandbox's pid 1
ends with it, and takes everything in its namespace along), and a command killed at its time limit takes
everything it started with it.

Limits: `Resources` per command (memory per process, processes, file size, `/tmp`); at most `max_running`
commands of one sandbox at once (more wait their turn); each stream's output kept up to the caller's
`max_output` (the rest is read and dropped, so a chatty command never blocks on a full pipe).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc

from ors_server.sandboxes.bubblewrap import (
    Resources,
    as_agent,
    bwrap_argv,
    closing_fd,
    options_by_fd,
    root_dirs,
    seccomp_fd,
)
from ors_server.sandboxes.confinement import kill
from ors_server.sandboxes.interface import CommandResult, Sandbox

WORKDIR = "/work"
"""Where the host directory appears inside the sandbox."""
SYSTEM_DIRS = tuple(root_dirs("/etc"))
"""What the sandbox shows of the host, read-only: enough to run the usual command-line tools."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_CHUNK = 65536


class BubblewrapSandbox(Sandbox):
    """Commands over `host_dir` (shown at `/work`), each in its own bubblewrap sandbox (see the module).

    `host_dir` must exist and be writable by uid 65534 when the server is root; its owner makes and removes it.
    `flags`: optional bubblewrap flags known to work here (`ors_server.sandboxes.bubblewrap.optional_flags()`).
    """

    def __init__(
        self,
        host_dir: Path,
        resources: Resources,
        *,
        flags: Sequence[str] = (),
        max_running: int = 4,
        read_only: Sequence[str] = SYSTEM_DIRS,
    ) -> None:
        self.host_dir = host_dir
        self.workdir = WORKDIR
        self.resources = resources
        self._flags = tuple(flags)
        self._read_only = tuple(read_only)
        self._slots = anyio.Semaphore(max_running)
        self._running: set[anyio.abc.Process] = set()

    async def _run(
        self, command: str, time_limit: float, stdin: bytes | None, cwd: str, max_output: int
    ) -> CommandResult:
        async with self._slots:
            self._refuse_if_closed()  # again: it may have closed while this command waited for a slot
            return await self._run_in_slot(command, time_limit, stdin, cwd, max_output)

    async def _run_in_slot(
        self, command: str, time_limit: float, stdin: bytes | None, cwd: str, max_output: int
    ) -> CommandResult:
        # bash sets the limits on itself, enters `cwd` and becomes the command (arguments, so no quoting).
        inner = [
            "bash",
            "--noprofile",
            "--norc",
            "-c",
            f'{self.resources.ulimit()} && cd -- "$1" && exec bash --noprofile --norc -c "$2"',
            "bash",
            cwd,
            command,
        ]
        with closing_fd(seccomp_fd(no_fork=False)) as fd:
            argv, options = options_by_fd(
                bwrap_argv(
                    inner,
                    read_only=self._read_only,
                    tmp_bytes=self.resources.tmp_bytes,
                    writable=[(str(self.host_dir), WORKDIR)],
                    chdir=WORKDIR,
                    env={"PATH": PATH, "HOME": WORKDIR, "LANG": "C.UTF-8", "TERM": "dumb"},
                    seccomp_fd=fd,
                    flags=self._flags,
                )
            )
            with closing_fd(options):
                process = await anyio.open_process(
                    as_agent(argv),
                    env={"PATH": PATH},
                    cwd="/",
                    start_new_session=True,
                    pass_fds=(options,) if fd is None else (fd, options),
                )
        self._running.add(process)
        stdout, stderr = bytearray(), bytearray()
        dropped = [False]
        timed_out = False
        try:
            with anyio.move_on_after(time_limit) as limit:
                async with anyio.create_task_group() as streams:
                    streams.start_soon(_feed, process, stdin)
                    streams.start_soon(_collect, process.stdout, stdout, max_output, dropped)
                    streams.start_soon(_collect, process.stderr, stderr, max_output, dropped)
                code = await process.wait()
            if limit.cancelled_caught:
                timed_out = True
                _kill(process)
                with anyio.CancelScope(shield=True):
                    await process.wait()
                code = 124
        finally:
            self._running.discard(process)
            if process.returncode is None:  # the caller was cancelled
                _kill(process)
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await process.wait()
            with anyio.CancelScope(shield=True):
                await process.aclose()
        return CommandResult(code, bytes(stdout), bytes(stderr), truncated=dropped[0], timed_out=timed_out)

    async def close(self) -> None:
        await super().close()
        for process in list(self._running):
            _kill(process)


async def _feed(process: anyio.abc.Process, data: bytes | None) -> None:
    assert process.stdin is not None
    try:
        if data:
            await process.stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the command ended without reading all of it
    finally:
        with contextlib.suppress(OSError):
            await process.stdin.aclose()


async def _collect(stream: anyio.abc.ByteReceiveStream | None, into: bytearray, cap: int, dropped: list[bool]) -> None:
    assert stream is not None
    try:
        while True:
            chunk = await stream.receive(READ_CHUNK)
            room = cap - len(into)
            if len(chunk) > room:
                dropped[0] = True
            into += chunk[: max(room, 0)]
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


def _kill(process: anyio.abc.Process) -> None:
    # The sandbox's init first (pid 1 of its namespace): the kernel kills every process of the namespace, the init
    # exits once they are gone, and bubblewrap's outer process after it; so once that one is reaped, nothing of the
    # command runs. Killing the outer process first left the namespace to die a moment after the caller was told.
    kill(process.pid)
