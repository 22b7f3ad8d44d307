"""Run one CodeAct step: the agent's code in a fresh sandboxed process, its tool calls answered by the parent.

Each step is a new process (`child.py`), so a step starts from a known state, a killed step leaves nothing
behind, and nothing of one step (or one session) is visible to the next. The parent owns every limit that
must hold even against hostile code: the wall clock (the whole process group is killed), the size of every
protocol message, and what it accepts on the protocol. The child applies the rlimits (memory, CPU, file
size, open files) to itself before the agent's code runs.

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
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from ors_server.codeact.sandbox import SandboxMode, check_sandbox, launch, no_fork_filter

KILL_WAIT = 5.0
STDERR_KEEP = 4096


@dataclass(frozen=True)
class Limits:
    """What one step may use. The wall clock counts the tool calls the code makes."""

    timeout: float = 30.0
    memory_bytes: int = 512 * 1024 * 1024
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


def _rlimits(limits: Limits) -> dict[str, int]:
    return {
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_CPU": math.ceil(limits.timeout) + 1,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }


class _ProtocolError(Exception):
    pass


async def run_step(
    code: str,
    tools: Sequence[ToolSpec],
    call_tool: ToolCaller,
    *,
    limits: Limits,
    sandbox: SandboxMode = "bwrap",
) -> StepResult:
    """Run `code` as one step and return what it printed and returned, or why it failed.

    Never raises for anything the code does; raises `SandboxUnavailable` if the sandbox cannot start.
    """
    check_sandbox(sandbox)
    result = StepResult()
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ors-codeact-"))
        seccomp_fd = None
        program = no_fork_filter() if sandbox == "bwrap" else None
        if program is not None:
            seccomp_fd = os.memfd_create("ors-codeact-seccomp")
            stack.callback(os.close, seccomp_fd)
            os.write(seccomp_fd, program)
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
        how = launch(sandbox, child_program(), workdir, seccomp_fd)
        process = await anyio.open_process(
            how.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=how.cwd,
            env=how.env,
            start_new_session=True,  # one process group: the kill reaches everything the step started
            pass_fds=how.pass_fds,
        )
        if seccomp_fd is not None:
            stack.close()  # bwrap has its copy; the filter is read once
        try:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(_drain_stderr, process, result)
                with anyio.move_on_after(limits.timeout) as scope:
                    await _converse(process, code, tools, call_tool, limits, result)
                if scope.cancelled_caught:
                    result.error = f"TimeoutError: the code did not finish within {limits.timeout:g} s and was stopped"
                await _kill(process)
        finally:
            with anyio.CancelScope(shield=True):
                await _kill(process)
    return result


async def _converse(
    process: Process,
    code: str,
    tools: Sequence[ToolSpec],
    call_tool: ToolCaller,
    limits: Limits,
    result: StepResult,
) -> None:
    assert process.stdin is not None and process.stdout is not None
    request = {
        "code": code,
        "tools": [{"name": t.name, "description": t.description, "params": list(t.params)} for t in tools],
        "limits": {
            "rlimits": _rlimits(limits),
            "output_chars": limits.output_chars,
            "memory_bytes": limits.memory_bytes,
        },
    }
    reader = BufferedByteReceiveStream(process.stdout)
    try:
        await process.stdin.send(json.dumps(request).encode() + b"\n")
        while True:
            message = await _receive(reader, limits)
            if "done" in message:
                _finish(message["done"], limits, result)
                return
            name, arguments = message.get("call"), message.get("arguments")
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise _ProtocolError("a message that is neither a tool call nor the result")
            result.tool_calls += 1
            try:
                answer: dict[str, Any] = {"ok": await call_tool(name, arguments)}
            except ToolCallFailed as exc:
                answer = {"error": str(exc)}
            await process.stdin.send(json.dumps(answer).encode() + b"\n")
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        returncode = await _returncode(process)
        result.error = _death(returncode, limits)
    except _ProtocolError as exc:
        result.error = f"the code's process broke the protocol ({exc}) and was stopped"


async def _receive(reader: BufferedByteReceiveStream, limits: Limits) -> dict[str, Any]:
    try:
        line = await reader.receive_until(b"\n", limits.message_bytes)
    except anyio.DelimiterNotFound:
        raise _ProtocolError(f"a message larger than {limits.message_bytes} bytes") from None
    try:
        message = json.loads(line)
    except ValueError:
        raise _ProtocolError("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise _ProtocolError("a message that is not an object")
    return message


def _finish(done: Any, limits: Limits, result: StepResult) -> None:
    if not isinstance(done, dict):
        raise _ProtocolError("a result that is not an object")
    cap = limits.output_chars + 200  # the child's own truncation note fits in the margin
    for key in ("output", "value", "error"):
        value = done.get(key)
        if value is not None and not isinstance(value, str):
            raise _ProtocolError(f"a result whose {key} is not text")
        if isinstance(value, str) and len(value) > cap:
            value = value[:cap]
        setattr(result, key, value if key != "output" else (value or ""))


async def _returncode(process: Process) -> int | None:
    with anyio.move_on_after(KILL_WAIT):
        return await process.wait()
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


async def _drain_stderr(process: Process, result: StepResult) -> None:
    assert process.stderr is not None
    kept = bytearray()
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        async for chunk in process.stderr:
            if len(kept) < STDERR_KEEP:
                kept += chunk[: STDERR_KEEP - len(kept)]
    result.stderr = kept.decode("utf-8", "replace")


async def _kill(process: Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(KILL_WAIT):
        await process.aclose()  # waits for the process and closes its pipes
