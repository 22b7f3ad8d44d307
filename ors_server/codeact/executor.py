"""Run one CodeAct step: the agent's code in a fresh sandboxed process, its tool calls answered by the parent.

Each step is a new process (`child.py`), so a step starts from a known state, a killed step leaves nothing
behind, and nothing of one step (or one session) is visible to the next. The parent owns every limit that
must hold even against hostile code: the wall clock (the whole process group is killed), the size of every
protocol message, and what it accepts on the protocol. The child applies the rlimits (memory, processes and
threads, CPU, file size, open files) to itself, inside the sandbox, before the agent's code runs. Cancelling
`run_step` (the session ended) kills the process at once.

Tool calls from the code come back over the pipe as `{"call", "arguments"}`; `run_step` hands them to the
caller's `call_tool`, which runs them through the session's call pipeline in-process. Nothing is sent over
HTTP or JSON-RPC, and the session lock the step already holds is not taken again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from ors_server.codeact.sandbox import SandboxMode, check_sandbox, launch
from ors_server.sandboxes.bubblewrap import Resources, closing_fd, private_dir, remove_tree, seccomp_fd

if TYPE_CHECKING:
    from ors_server.codeact.pool import SandboxPool

KILL_WAIT = 5.0
STDERR_KEEP = 4096


@dataclass(frozen=True)
class Limits:
    """What one step may use. The wall clock counts the tool calls the code makes."""

    timeout: float = 30.0
    memory_bytes: int = 512 * 1024 * 1024
    """The address space of the step's process."""
    processes: int = 64
    """Threads the step may have at once (it cannot start processes), the sandbox's init included."""
    tmp_bytes: int = 16 * 1024 * 1024
    """The size of the step's /tmp, the only place it can write (a tmpfs: memory)."""
    output_chars: int = 64 * 1024
    """What the code prints and returns is cut to this many characters each (with a note saying so)."""
    message_bytes: int = 4 * 1024 * 1024
    """The largest protocol message the child may send (one tool call's arguments, or the final result)."""
    file_bytes: int = 8 * 1024 * 1024
    open_files: int = 64


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the code sees it: a function `name(**arguments)`; `params` allows positional arguments too."""

    name: str
    description: str = ""
    params: Sequence[str] = ()


class ToolCallFailed(Exception):
    """Raised by a `call_tool` callback: the code sees it as a `ToolError` with this message."""


ToolCaller = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Runs one tool call from the code; returns a JSON-serialisable value or raises ToolCallFailed."""


@dataclass
class StepResult:
    output: str = ""
    """What the code printed (stdout and stderr, interleaved), capped."""
    value: str | None = None
    """The code's result: a top-level `return`'s value, else the final expression's; str as is, else repr."""
    error: str | None = None
    """Why the step failed: the code's traceback, or the limit it hit. None when it ran to the end."""
    tool_calls: int = 0
    stderr: str = field(default="", repr=False)
    """The process's own diagnostics (the sandbox's, the interpreter's), for the server log."""


def child_program() -> str:
    return resources.files("ors_server.codeact").joinpath("child.py").read_text(encoding="utf-8")


def _rlimits(limits: Limits, sandbox: SandboxMode) -> dict[str, int]:
    resources = Resources(
        memory_bytes=limits.memory_bytes,
        processes=limits.processes,
        tmp_bytes=limits.tmp_bytes,
        file_bytes=limits.file_bytes,
        open_files=limits.open_files,
    )
    rlimits = {**resources.rlimits(), "RLIMIT_CPU": math.ceil(limits.timeout) + 1}
    if sandbox == "none":
        # Outside a user namespace of its own, RLIMIT_NPROC would count every process of the server's user.
        del rlimits["RLIMIT_NPROC"]
    return rlimits


class ProtocolError(Exception):
    pass


@dataclass
class Started:
    """A step's sandboxed process, started and waiting for its request (the child reads it before anything
    else), and the private directory of the bare mode (None under bwrap, whose /tmp is a tmpfs of its own)."""

    process: subprocess.Popen[bytes]
    channel: anyio.abc.SocketStream
    """The protocol, both ways: one end of a Unix socket pair whose other end is the child's stdin and stdout."""
    workdir: Path | None
    sandbox: SandboxMode
    tmp_bytes: int
    ready: bool = False
    """Whether the child said it waits for its request (its interpreter has started)."""

    def __post_init__(self) -> None:
        assert self.process.stderr is not None
        self.stderr = self.process.stderr.fileno()
        os.set_blocking(self.stderr, False)
        self.stderr_kept = bytearray()
        """The first `STDERR_KEEP` bytes the child wrote to its stderr."""
        self.reader = BufferedByteReceiveStream(self.channel)

    async def wait_ready(self, max_bytes: int) -> None:
        """Read the child's first line, `{"ready": true}`; raises `ProtocolError` for anything else, and the
        stream errors when the process died."""
        if (await _receive(self.reader, max_bytes)).get("ready") is not True:
            raise ProtocolError("a first message that is not 'ready'")
        self.ready = True

    def kill(self) -> None:
        """SIGKILL to the whole process group, at once (not once it is reaped: its ids could be another's then)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def destroy(self) -> None:
        """Kill the process group, wait for it, close its channels and remove the directory; the sandbox is never
        used again."""
        try:
            self.kill()
            await _exited(self.process)
        finally:
            try:
                await self.channel.aclose()
            finally:
                assert self.process.stderr is not None
                self.process.stderr.close()
                _remove(self.workdir)


async def start_sandbox(sandbox: SandboxMode, tmp_bytes: int) -> Started:
    """Start one step's sandbox: it then waits for its request on stdin, idle (no limit is spent waiting but the
    few milliseconds of CPU its start took, which counted against RLIMIT_CPU before the pool existed too)."""
    workdir = private_dir("codeact") if sandbox == "none" else None
    try:
        ours, theirs = socket.socketpair()
        try:
            # bwrap reads the filter once, at its start: the fd is closed as soon as the process runs.
            with closing_fd(seccomp_fd(no_fork=True) if sandbox == "bwrap" else None) as seccomp:
                how = launch(sandbox, child_program(), str(workdir or "/"), seccomp, tmp_bytes=tmp_bytes)
                try:
                    # `subprocess` starts it with vfork, in well under a millisecond. The event loop's own way
                    # (uvloop's, the server's loop) forks: it copies the server's page tables, which stops every call
                    # for ~10 ms.
                    process = subprocess.Popen(  # noqa: ASYNC220  (vfork: see above)
                        how.argv,
                        stdin=theirs.fileno(),
                        stdout=theirs.fileno(),
                        stderr=subprocess.PIPE,
                        cwd=how.cwd,
                        env=how.env,
                        start_new_session=True,  # one process group: the kill reaches everything the step started
                        pass_fds=how.pass_fds,
                    )
                finally:
                    how.close()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
    except BaseException:
        _remove(workdir)
        raise
    try:
        with anyio.CancelScope(shield=True):
            channel = await anyio.abc.UNIXSocketStream.from_socket(ours)
    except BaseException:
        ours.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()  # killed: it is gone in a moment
        assert process.stderr is not None
        process.stderr.close()
        _remove(workdir)
        raise
    return Started(process, channel, workdir, sandbox, tmp_bytes)


def _remove(workdir: Path | None) -> None:
    if workdir is not None:
        remove_tree(workdir)


async def run_step(
    code: str,
    tools: Sequence[ToolSpec],
    call_tool: ToolCaller,
    *,
    limits: Limits,
    sandbox: SandboxMode = "bwrap",
    pool: SandboxPool | None = None,
) -> StepResult:
    """Run `code` as one step and return what it printed and returned, or why it failed. With a `pool`, the step
    takes one of its pre-started sandboxes when one matches (else it starts its own); either way the sandbox
    runs this step only and is destroyed with it.

    Never raises for anything the code does; raises `SandboxUnavailable` if the sandbox cannot start.
    """
    check_sandbox(sandbox)
    result = StepResult()
    started = await pool.take(sandbox, limits.tmp_bytes) if pool is not None else None
    if started is None:
        started = await start_sandbox(sandbox, limits.tmp_bytes)
    try:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(_drain_stderr, started)
            done = False
            with anyio.move_on_after(limits.timeout) as scope:
                done = await _converse(started, code, tools, call_tool, limits, _rlimits(limits, sandbox), result)
            if scope.cancelled_caught:
                result.error = f"TimeoutError: the code did not finish within {limits.timeout:g} s and was stopped"
            if not done:
                started.kill()  # a runaway, a dead or a lying child: at once
            task_group.cancel_scope.cancel()  # the drain: whatever the step wrote to stderr is in the pipe by now
        # The step has ended: nothing of it runs on. After its result, its child waits for this kill, idle; the kill
        # comes after the step's last wait (the drain's end), since the sandbox's teardown competes for the CPU.
        started.kill()
        _keep_stderr(started, result)
    finally:
        # Also when the caller is cancelled (its session ended): the kill comes first, before any wait.
        started.kill()
        with anyio.CancelScope(shield=True):
            if pool is not None:
                await pool.discard(started)  # reaped in the background: the answer does not wait for that
            else:
                await started.destroy()
    return result


async def _converse(
    started: Started,
    code: str,
    tools: Sequence[ToolSpec],
    call_tool: ToolCaller,
    limits: Limits,
    rlimits: dict[str, int],
    result: StepResult,
) -> bool:
    """Talk with the child until its result: True once it came (in `result`), False when the child died or broke
    the protocol (`result.error` says so)."""
    channel, reader = started.channel, started.reader
    request = {
        "code": code,
        "tools": [{"name": t.name, "description": t.description, "params": list(t.params)} for t in tools],
        "limits": {
            "rlimits": rlimits,
            "output_chars": limits.output_chars,
            "memory_bytes": limits.memory_bytes,
        },
    }
    try:
        if not started.ready:
            await started.wait_ready(limits.message_bytes)
        await channel.send(json.dumps(request).encode() + b"\n")
        while True:
            message = await _receive(reader, limits.message_bytes)
            if "done" in message:
                _finish(message["done"], limits, result)
                return True
            name, arguments = message.get("call"), message.get("arguments")
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise ProtocolError("a message that is neither a tool call nor the result")
            result.tool_calls += 1
            try:
                answer: dict[str, Any] = {"ok": await call_tool(name, arguments)}
            except ToolCallFailed as exc:
                answer = {"error": str(exc)}
            await channel.send(json.dumps(answer).encode() + b"\n")
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        returncode = await _exited(started.process)
        result.error = _death(returncode, limits)
    except ProtocolError as exc:
        result.error = f"the code's process broke the protocol ({exc}) and was stopped"
    return False


async def _receive(reader: BufferedByteReceiveStream, max_bytes: int) -> dict[str, Any]:
    try:
        line = await reader.receive_until(b"\n", max_bytes)
    except anyio.DelimiterNotFound:
        raise ProtocolError(f"a message larger than {max_bytes} bytes") from None
    try:
        message = json.loads(line)
    except ValueError:
        raise ProtocolError("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message that is not an object")
    return message


def _finish(done: Any, limits: Limits, result: StepResult) -> None:
    if not isinstance(done, dict):
        raise ProtocolError("a result that is not an object")
    cap = limits.output_chars + 200  # the child's own truncation note fits in the margin
    for key in ("output", "value", "error"):
        value = done.get(key)
        if value is not None and not isinstance(value, str):
            raise ProtocolError(f"a result whose {key} is not text")
        if isinstance(value, str) and len(value) > cap:
            value = value[:cap]
        setattr(result, key, value if key != "output" else (value or ""))


async def _exited(process: subprocess.Popen[bytes]) -> int | None:
    """The process's exit status once it has exited (it is reaped then), or None if it still runs after
    `KILL_WAIT` seconds. Waits on a pidfd, which the event loop watches like a socket."""
    if process.poll() is not None:
        return process.returncode
    with anyio.move_on_after(KILL_WAIT):
        try:
            pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):  # no pidfds (not Linux, or older than 5.3): a thread waits instead
            return await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
        try:
            await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return process.wait()
    return None


def _death(returncode: int | None, limits: Limits) -> str:
    if returncode is not None and returncode < 0:
        number = -returncode
        if number == signal.SIGXCPU:
            return f"TimeoutError: the code used more than its CPU time limit ({math.ceil(limits.timeout) + 1} s)"
        if number == signal.SIGXFSZ:
            return f"OSError: the code wrote a file larger than the limit of {limits.file_bytes} bytes"
        return f"the code's process was killed by signal {signal.Signals(number).name}"
    if returncode == 0:
        return "the code ended its own process before it finished (os._exit)"
    return f"the code's process exited with status {returncode} before it finished"


async def _drain_stderr(started: Started) -> None:
    """Read the child's stderr while the step runs, so that a child writing much there never blocks on a full
    pipe; keep the first `STDERR_KEEP` bytes."""
    while _read_stderr(started):
        await anyio.wait_readable(started.stderr)


def _keep_stderr(started: Started, result: StepResult) -> None:
    """Take what is left in the stderr pipe (without waiting) and keep it as text for the server log."""
    _read_stderr(started)
    result.stderr = started.stderr_kept.decode("utf-8", "replace")


def _read_stderr(started: Started) -> bool:
    """Read what the stderr pipe holds now; False at its end."""
    while True:
        try:
            chunk = os.read(started.stderr, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        room = STDERR_KEEP - len(started.stderr_kept)
        if room > 0:
            started.stderr_kept += chunk[:room]
