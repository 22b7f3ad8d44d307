"""One host process, seen from the server: started, spoken to over its pipes, and killed whole.

The wire is `ors_server.hosting.host`'s (length-prefixed JSON frames, requests matched to answers by id). A host
process:

- is confined as `ors_server.sandboxes.confinement` says (the sandbox CodeAct steps and shell sessions get, from
  the same builder: uid/gid 65534, its own pid and mount namespaces, read-only views of only what it needs, a private
  `/tmp`, `no_new_privs` and the seccomp filter), in a process group of its own; with `ORS_HOST_SANDBOX=none`,
  as uid 65534 when the server is root and nothing more;
- starts with rlimits set on itself before it imports anything of the user's: address space
  (`--host-memory-bytes`), no core files;
- sees the server's environment variables except `ORS_*` (the API key and the server's settings);
- is killed with its whole group when the pool retires it, when the server stops, and, should the server die
  without stopping (SIGKILL), by itself: the end of its stdin pipe kills its group (see `host.py`);
- has its stderr logged line by line, at most `--tool-server-log-bytes` bytes per process;
- may answer a call with at most `reply_limit(--max-output-chars)` bytes (a listing with `MAX_FRAME`): the reply's
  header says its length and the request it answers, and a longer reply is refused on that header, before any of
  it is read (the host itself refuses to send one: see `host.py`).

A process that exits, writes something that is not a frame, or sends a reply longer than its bound, fails every
request waiting on it with `HostFailed` and is killed; the pool then forgets it (and starts another when needed).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from ors_server.compose.stdio import REAP_WAIT, StderrLog
from ors_server.sandboxes.confinement import Confinement, Launch, SandboxUnavailable, launch, launched
from ors_server.sandboxes.confinement import kill as kill_sandbox

logger = logging.getLogger("ors_server.hosting")

HEADER = struct.Struct(">I")
REPLY_HEADER = struct.Struct(">IQ")
"""A reply's header: its length and the id of the request it answers (see `host.py`)."""
MAX_FRAME = 256 * 1024 * 1024
"""The longest answer to `load`, `describe` or `tasks` (a description, a task listing)."""
LISTING_OPS = ("load", "describe", "tasks")
BYTES_PER_CHAR = 6
"""The most bytes one character of a result takes in a reply's JSON (a control character's `\\u00XX` escape; the
host writes UTF-8, not ASCII-only JSON)."""
REPLY_SLACK = 1024 * 1024
"""Bytes of a reply besides its blocks' characters: the envelope, metadata, reward."""


def reply_limit(max_output_chars: int) -> int:
    """The longest reply to a call (or any request but a listing) that `max_output_chars` can need; a longer
    one is refused on its length header, before a byte of it is read."""
    return BYTES_PER_CHAR * max_output_chars + REPLY_SLACK


HERE = Path(__file__).resolve().parent


class HostFailed(Exception):
    """The host process died, hung, or broke the protocol: what was asked of it will not be answered."""


class HostError(Exception):
    """The host answered a request with an error: the environment's code raised (`type`), or refused (`reason`)."""

    def __init__(self, kind: str, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason


@dataclass(frozen=True)
class HostSpec:
    """What a host process serves: a framework's adapter, the `MODULE:CLASS` target, and the interpreter."""

    framework: str
    """The adapter's name: a file `adapters/<framework>.py`."""
    target: str
    python: str
    cwd: str
    memory_bytes: int = 8 * 1024**3
    log_bytes: int = 64 * 1024
    reply_bytes: int = reply_limit(16 * 1024 * 1024)
    """The longest reply to anything but a listing (`reply_limit(--max-output-chars)`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    confinement: Confinement = field(default_factory=Confinement)

    @property
    def label(self) -> str:
        return f"{self.framework}:{self.target}"

    def command(self) -> list[str]:
        """The host's own command line (the interpreter and the bootstrap)."""
        limits = json.dumps({"RLIMIT_AS": self.memory_bytes, "RLIMIT_CORE": 0})
        return [self.python, "-c", BOOTSTRAP, limits]

    def launch(self) -> Launch:
        """How to start a host process, confined (close its fds once it has started)."""
        return launch(self.command(), self.environ(), self.cwd, self.confinement)

    def environ(self) -> dict[str, str]:
        # Not the server's settings nor its API key: a host runs code that agents reach. A foreign interpreter
        # gets none of the paths that point at the server's own packages either.
        env = {name: value for name, value in os.environ.items() if not name.startswith("ORS_")}
        if os.path.realpath(self.python) != os.path.realpath(sys.executable):
            for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
                env.pop(name, None)
        return env

    def load_request(self) -> dict[str, Any]:
        source = adapter_source(self.framework)
        return {
            "op": "load",
            "adapter": self.framework,
            "source": source,
            "target": self.target,
            "options": dict(self.options),
            "reply_bytes": self.reply_bytes,
        }


BOOTSTRAP = (
    "import os, struct\n"
    "def read(n):\n"
    "    data = b''\n"
    "    while len(data) < n:\n"
    "        chunk = os.read(0, n - len(data))\n"
    "        if not chunk: raise SystemExit(0)\n"
    "        data += chunk\n"
    "    return data\n"
    "exec(compile(read(struct.unpack('>I', read(4))[0]), 'ors-server host', 'exec'))\n"
)
"""What `-c` runs: it reads `host.py`'s source as the first frame on stdin and runs it (so the command line stays
short, and no file of the server's needs to be readable by the host's user)."""


@cache
def host_source() -> bytes:
    source = (HERE / "host.py").read_bytes()
    return HEADER.pack(len(source)) + source


@cache
def adapter_source(framework: str) -> str:
    return (HERE / "adapters" / f"{framework}.py").read_text()


def frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(data)) + data


def describe_once(spec: HostSpec, timeout: float) -> dict[str, Any]:
    """Start a host process, load the target and return its description, then kill it; synchronous (for `--env`
    loading, before any event loop). Raises HostError("LoadFailed", ...) or HostFailed, each with one line."""
    with tempfile.TemporaryFile() as stderr:
        try:
            with launched(spec.command(), spec.environ(), spec.cwd, spec.confinement) as how:
                process = subprocess.Popen(
                    how.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    cwd=how.cwd,
                    env=how.env,
                    start_new_session=True,
                    pass_fds=how.pass_fds,
                )
        except SandboxUnavailable as exc:
            raise HostFailed(str(exc)) from None
        except OSError as exc:
            raise HostFailed(f"cannot start {spec.python}: {exc.strerror or exc}") from None
        try:
            assert process.stdin is not None and process.stdout is not None
            with suppress(BrokenPipeError):
                process.stdin.write(host_source() + frame({"id": 0, **spec.load_request()}))
                process.stdin.flush()
            answer = _read_frame(process.stdout.fileno(), time.monotonic() + timeout)
        finally:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if process.stdin is not None:
                process.stdin.close()
            if process.stdout is not None:
                process.stdout.close()
        if answer is None:
            stderr.seek(0)
            lines = [line for line in stderr.read().decode("utf-8", "replace").splitlines() if line.strip()]
            said = f": {lines[-1].strip()[:300]}" if lines else ""
            code = process.returncode
            raise HostFailed(
                f"the host process ({spec.python}) did not answer within {timeout:g} s (exit code {code}){said}"
            )
    if not answer.get("ok"):
        error = answer.get("error") or {}
        raise HostError(str(error.get("type")), str(error.get("message")), error.get("reason"))
    value: dict[str, Any] = answer["value"]
    return value


def _read_frame(fd: int, deadline: float) -> dict[str, Any] | None:
    """One reply from a blocking pipe, or None at its end, past `deadline`, or on garbage."""
    buffer = b""
    needed = REPLY_HEADER.size
    header_read = False
    while True:
        while len(buffer) < needed:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            buffer += chunk
        if header_read:
            try:
                message: dict[str, Any] = json.loads(buffer[:needed])
            except ValueError:
                return None
            return message
        size, _rid = REPLY_HEADER.unpack(buffer[: REPLY_HEADER.size])
        if size > MAX_FRAME:
            return None
        buffer, needed, header_read = buffer[REPLY_HEADER.size :], size, True


class _Waiter:
    __slots__ = ("event", "answer", "op", "limit")

    def __init__(self, op: str, limit: int) -> None:
        self.event = anyio.Event()
        self.answer: dict[str, Any] | BaseException | None = None
        self.op = op
        self.limit = limit
        """The longest reply this request may get."""


class HostProcess:
    """A running host process; `request()` sends one request and waits for its answer."""

    _numbers = itertools.count(1)

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self.number = next(self._numbers)
        self.process: anyio.abc.Process | None = None
        self.pid = 0
        self.sessions = 0
        """Sessions (episodes) placed here and not yet deleted."""
        self.retired = False
        """Takes no new sessions: it hung on a call (or failed); killed when its last session goes."""
        self.dead: str | None = None
        """Why it is gone, once it is."""
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}
        self._send_lock = anyio.Lock()
        self.description: dict[str, Any] = {}

    async def run(self, started: Callable[[], None], load_timeout: float) -> None:
        """Start the process and load the target (reported started then), then pump its output until it ends.
        Run it as a task of the pool; cancelling the task kills the process."""
        spec = self.spec
        try:
            how = spec.launch()
        except SandboxUnavailable as exc:
            raise HostFailed(str(exc)) from None
        try:
            process = await anyio.open_process(
                how.argv, cwd=how.cwd, env=how.env, start_new_session=True, pass_fds=how.pass_fds
            )
        finally:
            how.close()
        self.process, self.pid = process, process.pid
        assert process.stdin is not None
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await process.stdin.send(host_source())  # what the bootstrap runs; a failure shows as the pipe's end
        stderr = StderrLog(f"host {spec.label}", process.pid, spec.log_bytes)
        try:
            async with anyio.create_task_group() as pumps:
                pumps.start_soon(self._read_answers, pumps.cancel_scope)
                pumps.start_soon(self._read_stderr, stderr)
                with anyio.fail_after(load_timeout):
                    self.description = await self.request(
                        "load", **{k: v for k, v in spec.load_request().items() if k != "op"}
                    )
                started()
        except TimeoutError:
            raise HostFailed(f"the host process of {spec.label} did not load within {load_timeout:g} s") from None
        finally:
            self._end(self.dead or "its pipes closed")
            self.kill()
            with anyio.CancelScope(shield=True), anyio.move_on_after(REAP_WAIT):
                await process.aclose()
            stderr.close()

    async def _read_answers(self, scope: anyio.CancelScope) -> None:
        assert self.process is not None and self.process.stdout is not None
        stream = BufferedByteReceiveStream(self.process.stdout)
        why = "it exited"
        try:
            while True:
                size, rid = REPLY_HEADER.unpack(await stream.receive_exactly(REPLY_HEADER.size))
                # Judged on the header alone: nothing of a reply longer than its request may need is read.
                claimed = self._waiting.get(rid)
                limit = self.spec.reply_bytes if claimed is None else claimed.limit
                if size > limit:
                    op = "" if claimed is None else f" to '{claimed.op}'"
                    why = (
                        f"it sent a reply{op} of {size} bytes, more than the {limit} it may "
                        f"({BYTES_PER_CHAR} bytes a character of --max-output-chars, and {REPLY_SLACK} more)"
                    )
                    break
                answer = json.loads(await stream.receive_exactly(size))
                waiter = self._waiting.pop(answer.get("id"), None)
                if waiter is not None:
                    waiter.answer = answer
                    waiter.event.set()
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        except ValueError:
            why = "it sent something that is not JSON"
        code = self.process.returncode
        if code is None:
            with anyio.move_on_after(1):
                code = await self.process.wait()
        self._end(f"{why} (exit code {code})" if code is not None else why)
        scope.cancel()

    async def _read_stderr(self, stderr: StderrLog) -> None:
        assert self.process is not None and self.process.stderr is not None
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in self.process.stderr:
                stderr.feed(chunk)

    def _end(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
        for waiter in self._waiting.values():
            waiter.answer = HostFailed(f"the host process of {self.spec.label} ended: {self.dead}")
            waiter.event.set()
        self._waiting.clear()

    async def request(self, op: str, **fields: Any) -> Any:
        """Ask the host; its answer's value, or HostError (the environment raised or refused), or HostFailed."""
        if self.dead is not None or self.process is None or self.process.stdin is None:
            raise HostFailed(f"the host process of {self.spec.label} ended: {self.dead or 'not started'}")
        rid = next(self._ids)
        waiter = _Waiter(op, MAX_FRAME if op in LISTING_OPS else self.spec.reply_bytes)
        self._waiting[rid] = waiter
        try:
            data = frame({"id": rid, "op": op, **fields})
            try:
                async with self._send_lock:
                    await self.process.stdin.send(data)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                raise HostFailed(f"the host process of {self.spec.label} ended: {exc}") from None
            await waiter.event.wait()
        finally:
            self._waiting.pop(rid, None)
        answer = waiter.answer
        if isinstance(answer, BaseException):
            raise answer
        assert answer is not None
        if answer.get("ok"):
            return answer.get("value")
        error = answer.get("error") or {}
        raise HostError(str(error.get("type")), str(error.get("message")), error.get("reason"))

    def kill(self) -> None:
        """Kill the process and everything it started (its group), at once."""
        if self.pid:
            kill_sandbox(self.pid)


def parse_python(python: str | None) -> str:
    """The interpreter for a host: the one given (a path, or a name on PATH), else the server's own."""
    if not python:
        return sys.executable
    import shutil

    found = shutil.which(python) if os.sep not in python else (python if os.access(python, os.X_OK) else None)
    if found is None:
        raise HostFailed(f"no interpreter {python!r} (give the path of the virtual environment's python)")
    return os.path.abspath(found)


__all__: Sequence[str] = ["HostError", "HostFailed", "HostProcess", "HostSpec", "describe_once", "parse_python"]
