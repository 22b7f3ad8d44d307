"""A persistent bash driven over pipes, one command at a time, that holds no thread while a command runs.

Protocol. Each command travels to bash's stdin in a quoted here-document and is sourced from it (`. /dev/fd/N`),
so a syntax error fails only that command while `cd`, variables and functions persist. After it, bash prints an
end marker on both streams: `__ors_<token>:<exit code>:<working directory>` and a NUL on stdout, `__ors_<token>`
and a NUL on stderr. The token is new for every command, so output is told apart by marker, never by timing.

Stopping a command. When a command outlives `timeout`, the shell gets ABORT_SIGNAL, whose trap returns from the
sourced command (the rest of its list does not run, and a loop of builtins ends too), and every other process
it started is killed; the shell lives on with its state, and its markers get KILL_GRACE seconds to arrive. When
the caller is cancelled instead (the server's tool timeout), the command is stopped the same way at once and the
driver remembers the markers it is still owed: the next command drains them first, so it never returns an
earlier command's output. A shell that cannot be brought back (it exited, or ignores the signal) is replaced by
a new one in the same directory, and the result says so.

Where bash runs, and how its processes are found and killed, is the `Confinement`'s business: bubblewrap or none
(the shell environment's `confinement.py`), or a task's container (`sandboxes/container.py`).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

ABORT_SIGNAL = signal.SIGUSR1
"""Sent to the shell to abandon the command it runs (see the trap in `_script`)."""
KILL_ROUNDS = 50
"""How many times stopping a command looks again for its processes (a fork bomb keeps adding some)."""
KILL_GRACE = 2.0
"""Seconds a killed (or abandoned) command gets to let the shell report back before the shell is replaced."""
START_TIMEOUT = 10.0
"""Seconds a new shell gets to answer its first exchange."""
BUFFER_LIMIT = 256 * 1024
"""Bytes of unread output buffered per stream before reading pauses (and a chatty command blocks on the pipe)."""
MAX_TRAILER = 8192
TAIL_BYTES = 1024
"""Of a running command's output, how much is kept to find its last line (for progress reports)."""
"""The most bytes kept after an end marker (the exit code and the working directory)."""


class ShellClosed(RuntimeError):
    """The shell was closed (the session ended); no command can run any more."""


class Confinement(Protocol):
    """How bash is started and how the processes of one shell are found: inside a sandbox or not."""

    workdir: str
    """The working directory as the shell sees it."""

    def command(self) -> tuple[list[str], dict[str, Any]]:
        """A new shell's command line and `subprocess.Popen` options (environment, user, session, `pass_fds`: fds
        that are closed once it has started)."""
        ...

    def find_processes(self, launcher: int, shell: int) -> tuple[int | None, list[int]]:
        """The shell started as `launcher` (pid `shell` as bash sees itself): its pid as the server sees it, and
        the pids of every other process it started (not those that run it)."""
        ...

    def kill_all(self, launcher: int) -> None:
        """Kill the shell started by `launcher` and everything it started."""
        ...


class _Stream(asyncio.Protocol):
    """One output pipe of the shell, as the event loop delivers it."""

    def __init__(self, process: _ShellProcess, fd: int) -> None:
        self.process, self.fd = process, fd

    def data_received(self, data: bytes) -> None:
        self.process.received(self.fd, data)

    def eof_received(self) -> None:
        self.process.ended_stream(self.fd)

    def connection_lost(self, exc: Exception | None) -> None:
        self.process.ended_stream(self.fd)


class _ShellProcess:
    """The shell's process and its pipes, on the running event loop: output buffered per stream with
    back-pressure, input written without waiting, exit noticed through a pidfd.

    The process is started by `subprocess.Popen` (which can drop to another user; uvloop's subprocess support
    cannot) and its pipes handed to the loop, so no thread waits for it. Holding the transports lets `close()`
    close the pipes even while a process that escaped the kill still holds them. Writes are synchronous (into
    the transport's buffer), so a cancelled caller never leaves half a command in the shell's input.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.buffers = {1: bytearray(), 2: bytearray()}
        self.ended = {1: False, 2: False}
        self.readers: dict[int, asyncio.ReadTransport] = {}
        self.writer: asyncio.WriteTransport | None = None
        self._exited = asyncio.Event()
        self._pidfd: int | None = None
        self._waiter: asyncio.Future[None] | None = None

    @classmethod
    async def start(cls, argv: list[str], options: dict[str, Any]) -> _ShellProcess:
        pipe = subprocess.PIPE
        # Popen returns once the child has exec'd (a fork and an exec: milliseconds), as asyncio's own
        # subprocess_exec does on the loop's thread.
        try:
            popen = subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe, **options)  # noqa: ASYNC220
        finally:
            for fd in options.get("pass_fds", ()):
                os.close(fd)  # the child has its copy (bubblewrap reads its seccomp filter once)
        self = cls(popen)
        loop = asyncio.get_running_loop()
        try:
            self._pidfd = os.pidfd_open(popen.pid)
            loop.add_reader(self._pidfd, self._reap)
        except (AttributeError, OSError):  # no pidfd (Linux < 5.3): `wait` waits in a thread instead
            self._pidfd = None
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        for fd, stream in ((1, popen.stdout), (2, popen.stderr)):
            transport, _ = await loop.connect_read_pipe(lambda fd=fd: _Stream(self, fd), stream)  # type: ignore[misc]
            self.readers[fd] = transport
        writer, _ = await loop.connect_write_pipe(asyncio.Protocol, popen.stdin)
        self.writer = writer
        return self

    @property
    def pid(self) -> int:
        return self.popen.pid

    # Output.

    def received(self, fd: int, data: bytes) -> None:
        buffer = self.buffers[fd]
        buffer += data
        if len(buffer) >= BUFFER_LIMIT and fd in self.readers:
            self.readers[fd].pause_reading()
        self._wake()

    def ended_stream(self, fd: int) -> None:
        self.ended[fd] = True
        self._wake()

    def take(self, fd: int) -> bytes:
        data = bytes(self.buffers[fd])
        self.buffers[fd].clear()
        reader = self.readers.get(fd)
        if reader is not None and not reader.is_closing() and not reader.is_reading():
            reader.resume_reading()
        return data

    def unread(self, fd: int, data: bytes) -> None:
        self.buffers[fd][:0] = data

    async def changed(self) -> None:
        """Wait until more output arrives or a stream ends."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # Input.

    def write(self, data: bytes) -> bool:
        """Queue `data` for the shell's input; False if that pipe is closed."""
        if self.writer is None or self.writer.is_closing():
            return False
        self.writer.write(data)
        return True

    # The process.

    async def wait(self, seconds: float) -> int | None:
        """The exit status once the process has exited, or None if it still runs after `seconds`."""
        if self._pidfd is not None or self._exited.is_set():
            with anyio.move_on_after(seconds):
                await self._exited.wait()
        else:
            try:
                await anyio.to_thread.run_sync(self.popen.wait, seconds, abandon_on_cancel=True)
            except subprocess.TimeoutExpired:
                pass
        return self.popen.poll()

    def _reap(self) -> None:
        self._stop_watching()
        self.popen.poll()
        self._exited.set()

    def _stop_watching(self) -> None:
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def close(self) -> None:
        """Close the pipes (a waiting reader sees both streams end) and stop watching the process."""
        for transport in (*self.readers.values(), self.writer):
            if transport is not None:
                transport.close()
        if self.popen.poll() is not None or self._exited.is_set():
            self._stop_watching()
        self.ended.update({1: True, 2: True})
        self._wake()


def _marker(token: str) -> bytes:
    return f"__ors_{token}".encode()


@dataclass
class Capture:
    """One output stream of one command: keeps the first `cap` bytes, counts the rest, finds the end marker.

    After the marker comes a trailer up to a NUL byte (on stdout: `<exit code>:<working directory>`).
    """

    marker: bytes
    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0
    pending: bytes = b""
    trailer: bytes | None = None
    done: bool = False
    tail: bytes = b""
    """The last `TAIL_BYTES` of the output, however much was kept: what a running command last printed."""

    def feed(self, chunk: bytes) -> bytes:
        """Take `chunk`; once the end has been seen, return the bytes that came after it (they are not ours)."""
        if self.trailer is None:
            buffer = self.pending + chunk
            index = buffer.find(self.marker)
            if index < 0:
                # The marker may straddle two reads: hold back its length less one byte.
                split = max(len(buffer) - len(self.marker) + 1, 0)
                self._keep(buffer[:split])
                self.pending = buffer[split:]
                return b""
            self._keep(buffer[:index])
            self.pending = b""
            self.trailer = b""
            chunk = buffer[index + len(self.marker) :]
        end = chunk.find(b"\0")
        if end < 0:
            self.trailer = (self.trailer + chunk)[:MAX_TRAILER]
            return b""
        self.trailer = (self.trailer + chunk[:end])[:MAX_TRAILER]
        self.done = True
        return chunk[end + 1 :]

    def flush(self) -> None:
        """Keep what was held back (the stream ended without a marker)."""
        self._keep(self.pending)
        self.pending = b""

    def _keep(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.total += len(data)
        if data:
            self.tail = (self.tail + data)[-TAIL_BYTES:]

    def last_line(self) -> str | None:
        """The last non-empty line the command has printed so far (with what is held back in case it starts the
        end marker: the marker is never printed before the command ends)."""
        lines = (self.tail + self.pending)[-TAIL_BYTES:].decode("utf-8", errors="replace").splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), None)

    @property
    def exit_code(self) -> int | None:
        code = (self.trailer or b"").split(b":", 1)[0]
        return int(code) if self.done and code.isdigit() else None

    @property
    def cwd(self) -> str | None:
        """The shell's working directory after the command, from the stdout trailer."""
        if not self.done or self.trailer is None or b":" not in self.trailer:
            return None
        return os.fsdecode(self.trailer.split(b":", 1)[1]) or None

    def text(self, name: str) -> str:
        text = bytes(self.kept).decode("utf-8", errors="replace")
        if self.total > len(self.kept):
            text += f"\n[{name} truncated: showing the first {len(self.kept)} of {self.total} bytes]"
        return text


@dataclass
class CommandResult:
    exit_code: int | None
    stdout: str
    stderr: str
    notes: list[str]

    def render(self) -> str:
        code = "unknown" if self.exit_code is None else str(self.exit_code)
        parts = [f"exit code: {code}"]
        if self.stdout:
            parts += ["stdout:", self.stdout]
        if self.stderr:
            parts += ["stderr:", self.stderr]
        return "\n".join(parts + [f"[{note}]" for note in self.notes])


def _script(token: str, command: str) -> bytes:
    # The command is sourced, not eval'ed: `return` in the ABORT_SIGNAL trap then ends it wherever it is. The trap
    # is set again for every command, in case the previous one changed it. The marker is printed in two pieces,
    # so tracing (`set -x`) never shows it whole; `builtin` keeps a function the agent named printf from
    # swallowing it.
    return (
        f"IFS= read -r -d '' __ors_cmd <<'__ORS_EOF_{token}' || true\n{command}\n__ORS_EOF_{token}\n"
        f"trap 'return 137 2>/dev/null' {ABORT_SIGNAL.name.removeprefix('SIG')}\n"
        '. /dev/fd/60 60<<<"$__ors_cmd" </dev/null; __ors_rc=$?\n'
        f'builtin printf \'%s%s:%s:%s\\0\' __ors_ {token} "$__ors_rc" "$PWD"; '
        f"builtin printf '%s%s\\0' __ors_ {token} >&2\n"
        "unset __ors_cmd __ors_rc\n"
    ).encode()


def _signal(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class BashDriver:
    """One persistent bash. `run()` one command at a time (the session serialises calls); `close()` at any time."""

    def __init__(self, confinement: Confinement, *, timeout: float, output_cap: int) -> None:
        self.confinement = confinement
        self.timeout = timeout
        self.output_cap = output_cap
        self.cwd = confinement.workdir
        """The shell's working directory after the last command that ended (a new shell starts there)."""
        self._process: _ShellProcess | None = None
        self._shell_pid: int | None = None
        """Bash's pid as bash sees it (`$$`), once it has answered: inside a sandbox, a pid of its namespace."""
        self._owed: str | None = None
        """The token of a command whose end markers have not been read yet (it runs, or was abandoned)."""
        self._closed = False
        self._running: tuple[Capture, Capture] | None = None
        """The captures of the command `run` is running."""

    @property
    def pid(self) -> int | None:
        """The pid of the process the shell was started as (bash itself, or the sandbox around it)."""
        return None if self._process is None else self._process.pid

    async def start(self) -> None:
        """Start the shell in `cwd`; raises RuntimeError, with what the shell printed, if it does not answer."""
        if self._closed:
            raise ShellClosed("the shell has been closed")
        with anyio.CancelScope(shield=True):  # a process started must be one we hold, to kill it later
            self._process = await _ShellProcess.start(*self.confinement.command())
        self._shell_pid = None
        if self._closed:  # closed while the process was being started
            await self._discard_process()
            raise ShellClosed("the shell has been closed")
        # The first exchange puts the shell in its directory and tells its pid.
        token = uuid.uuid4().hex
        out, err = Capture(_marker(token) + b":", 4096), Capture(_marker(token), 64 * 1024)
        command = f"cd -- {shlex.quote(self.cwd)} 2>/dev/null || cd; builtin printf %s $$"
        status = await self._exchange(token, command, out, err, START_TIMEOUT)
        if status != "done" or not out.kept.isdigit():
            assert self._process is not None
            await self._read_until_end(self._process, err)
            await self._discard_process()
            if self._closed:
                raise ShellClosed("the shell has been closed")
            raise RuntimeError(f"the shell did not start: {err.text('stderr').strip() or status}")
        self._shell_pid, self._owed = int(out.kept), None
        self.cwd = out.cwd or self.cwd

    async def run(self, command: str) -> CommandResult:
        """Run `command`; returns when it ends, or after the timeout once it has been killed.

        If the caller is cancelled meanwhile, the command is killed before the cancellation goes on.
        """
        if self._closed:
            raise ShellClosed("the shell has been closed")
        notes: list[str] = []
        await self._recover(notes)
        process = self._process
        if process is None:
            raise ShellClosed("the shell has been closed")
        token = uuid.uuid4().hex
        out, err = Capture(_marker(token) + b":", self.output_cap), Capture(_marker(token), self.output_cap)
        self._running = (out, err)
        timed_out = False
        try:
            status = await self._exchange(token, command, out, err, self.timeout)
            if status == "timeout":
                timed_out = True
                notes.append(f"the command timed out after {self.timeout:g} s and was killed")
                self._stop_command()
                status = await self._collect(process, out, err, KILL_GRACE)
        except anyio.get_cancelled_exc_class():
            # Abandoned: stop the command now; the next command drains its markers.
            self._stop_command()
            raise
        if status == "done":
            self._owed = None
            self.cwd = out.cwd or self.cwd
        else:
            await self._after_loss(process, status, timed_out, notes)
        out.flush()
        err.flush()
        self._running = None
        return CommandResult(out.exit_code, out.text("stdout"), err.text("stderr"), notes)

    def last_line(self) -> str | None:
        """The last line the running command has printed (stdout, else stderr), for progress reports."""
        if self._running is None:
            return None
        out, err = self._running
        return out.last_line() or err.last_line()

    async def close(self) -> None:
        """Kill the shell and everything it started; a command running meanwhile ends. Safe to call twice."""
        self._closed = True
        await self._discard_process()

    # Keeping the shell in a known state.

    async def _recover(self, notes: list[str]) -> None:
        """Before a command: drain what an abandoned command still owes, or replace a shell that cannot be."""
        process = self._process
        if process is not None and self._shell_pid is not None:
            if self._owed is None:
                return
            out, err = Capture(_marker(self._owed) + b":", 0), Capture(_marker(self._owed), 0)
            if await self._collect(process, out, err, KILL_GRACE) == "done":
                self._owed = None
                self.cwd = out.cwd or self.cwd
                return
        had_shell = process is not None
        if await self._replace() and had_shell:
            notes.append(
                "the previous command was abandoned and left its shell busy: a new shell was started in "
                f"{self.cwd}; shell variables and functions were reset"
            )

    async def _after_loss(self, process: _ShellProcess, status: str, timed_out: bool, notes: list[str]) -> None:
        """The shell did not report back (it exited, or stayed busy after the kill): replace it."""
        if self._closed:
            notes.append("the session ended while the command ran")
            return
        if status == "exited" and not timed_out:
            code = await process.wait(KILL_GRACE)
            notes.append("the shell closed its output" if code is None else f"the shell exited with status {code}")
        if await self._replace():
            notes.append(f"a new shell was started in {self.cwd}; shell variables and functions were reset")
        else:
            notes.append("the session ended while the command ran")

    async def _replace(self) -> bool:
        """Kill the shell and start a new one in the same directory; False if the driver was closed meanwhile."""
        await self._discard_process()
        if self._closed:
            return False
        try:
            await self.start()
        except ShellClosed:
            return False
        return True

    # Talking to the shell.

    async def _exchange(self, token: str, command: str, out: Capture, err: Capture, seconds: float) -> str:
        """Send one command and collect its output, as `_collect` does."""
        assert self._process is not None
        self._owed = token
        if not self._process.write(_script(token, command)):
            return "exited"
        return await self._collect(self._process, out, err, seconds)

    @staticmethod
    async def _collect(pipes: _ShellProcess, out: Capture, err: Capture, seconds: float) -> str:
        """Read both streams until both markers arrive ('done'), `seconds` ('timeout') or EOF ('exited')."""
        with anyio.move_on_after(seconds):
            while True:
                for fd, capture in ((1, out), (2, err)):
                    if not capture.done and pipes.buffers[fd]:
                        rest = capture.feed(pipes.take(fd))
                        if capture.done:
                            pipes.unread(fd, rest)
                if out.done and err.done:
                    return "done"
                if any(pipes.ended[fd] and not capture.done for fd, capture in ((1, out), (2, err))):
                    return "exited"
                await pipes.changed()
        return "timeout"

    @staticmethod
    async def _read_until_end(pipes: _ShellProcess, err: Capture) -> None:
        """Keep what a failing shell still writes to stderr (why it failed), for a moment."""
        with anyio.move_on_after(KILL_GRACE):
            while not pipes.ended[2] or pipes.buffers[2]:
                if pipes.buffers[2]:
                    err.feed(pipes.take(2))
                else:
                    await pipes.changed()
        err.flush()

    # Processes.

    def _stop_command(self) -> None:
        """Make the shell abandon its command (ABORT_SIGNAL) and kill every other process it started."""
        launcher = self.pid
        if launcher is None or self._shell_pid is None:
            return
        signalled = False
        for _ in range(KILL_ROUNDS):
            shell, others = self.confinement.find_processes(launcher, self._shell_pid)
            if shell is not None and not signalled:
                # First, so that the trap is pending when the process the shell waits for dies.
                _signal([shell], ABORT_SIGNAL)
                signalled = True
            if not others:
                return
            _signal(others, signal.SIGKILL)

    async def _discard_process(self) -> None:
        """Kill the shell and all it started, reap it, and close its pipes (which ends any read of them)."""
        process, self._process = self._process, None
        if process is None:
            return
        self.confinement.kill_all(process.pid)
        with anyio.CancelScope(shield=True):
            # A process that escaped the kill may hold the pipes open: closing them is what ends a read.
            if await process.wait(KILL_GRACE * 2) is None:
                process.popen.kill()
                await process.wait(KILL_GRACE)
            process.close()
