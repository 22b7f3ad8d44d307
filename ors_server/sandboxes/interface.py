"""The `Sandbox` interface: where a session's agent commands run, whatever isolates them.

A sandbox is a private file system with a working directory, in which commands run, each in a fresh `bash`
(state such as `cd` or variables does not carry over from one `run` to the next; files do). Toolsets
(`claude-code`, `codex`, `gemini-cli`, ...) act on a session's sandbox only through this interface, so every
path they touch is resolved inside the sandbox by the sandbox itself, never on the server's host.

Backends:

- `BubblewrapSandbox` (`sandboxes/directory.py`): a host directory shown at `/work` inside bubblewrap, with the
  hardening of `ors_server.sandboxes.bubblewrap` (the shell environment's sandbox);
- a container backend (podman) implements the same interface for container tasks.

A backend implements `_run` (`run` checks the arguments and refuses once the sandbox is closed, then calls it) and,
if it has commands to kill, `close`; `read_file` and `write_file` have portable defaults made of `run` (a backend
with a faster way, such as a bind-mounted directory, may override them, keeping their contract).

Who owns a sandbox: the environment that made it (it starts it in `setup()` and closes it in `teardown()`), and
hands it to the server through `Environment.toolset_sandbox()`.
"""

from __future__ import annotations

import posixpath
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass

DEFAULT_TIMEOUT = 30.0
"""Seconds a command may run when the caller names no limit."""
MAX_TIMEOUT = 600.0
"""The longest a command may be allowed to run, whatever the caller asks."""
MAX_OUTPUT = 1024 * 1024
"""Bytes of each of stdout and stderr a command's result keeps by default."""


class SandboxClosed(RuntimeError):
    """The sandbox was closed (its session ended): no command runs in it any more."""


@dataclass(frozen=True)
class CommandResult:
    """What one command did."""

    exit_code: int
    """Its exit status (124 when it was killed at its time limit, as `timeout(1)` says)."""
    stdout: bytes
    stderr: bytes
    truncated: bool = False
    """Some output was dropped: a stream went past the caller's `max_output`."""
    timed_out: bool = False
    """It ran past its time limit and was killed, with everything it started."""

    def text(self) -> str:
        """stdout then stderr, decoded (invalid UTF-8 replaced), as a model would read them."""
        out = self.stdout.decode(errors="replace")
        err = self.stderr.decode(errors="replace")
        return out + err if not out or not err or out.endswith("\n") else f"{out}\n{err}"


class Sandbox(ABC):
    """A private file system and the commands that run in it (see the module's docstring)."""

    workdir: str
    """The working directory inside the sandbox (absolute): where commands start and relative paths resolve."""
    _closed: bool = False

    async def run(
        self,
        command: str,
        *,
        time_limit: float = DEFAULT_TIMEOUT,
        stdin: bytes | None = None,
        cwd: str | None = None,
        max_output: int = MAX_OUTPUT,
    ) -> CommandResult:
        """Run `command` with `bash -c` in a fresh shell inside the sandbox, starting in `cwd` (default
        `workdir`), with `stdin` as its input (else none). After `time_limit` seconds (capped at `MAX_TIMEOUT`) the
        command and everything it started are killed. Each stream keeps its first `max_output` bytes.
        Raises `SandboxClosed` once the sandbox is closed; a cancelled caller's command is killed."""
        if "\0" in command:
            raise ValueError("the command contains a NUL character")
        self._refuse_if_closed()
        limit = min(max(time_limit, 0.0), MAX_TIMEOUT)
        return await self._run(command, limit, stdin, self.resolve(cwd or self.workdir), max_output)

    @abstractmethod
    async def _run(
        self, command: str, time_limit: float, stdin: bytes | None, cwd: str, max_output: int
    ) -> CommandResult:
        """`run` once its arguments are checked: `time_limit` already capped, `cwd` absolute inside the sandbox."""

    @property
    def closed(self) -> bool:
        """`close()` was called: `run` raises `SandboxClosed`."""
        return self._closed

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise SandboxClosed("the sandbox is closed")

    async def close(self) -> None:
        """Kill every command still running and refuse new ones. Idempotent. What the sandbox's files are kept
        in is its owner's to remove."""
        self._closed = True

    def resolve(self, path: str) -> str:
        """`path` as an absolute path inside the sandbox: relative paths start at `workdir`."""
        if not path:
            raise ValueError("the path is empty")
        if "\0" in path:
            raise ValueError("the path contains a NUL character")
        return posixpath.normpath(path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}")

    async def read_file(self, path: str, *, max_bytes: int = MAX_OUTPUT) -> bytes:
        """The content of the file at `path` (relative to `workdir`). Raises `FileNotFoundError`,
        `IsADirectoryError`, `PermissionError` (as the sandbox's user may not read it) or `ValueError` (larger
        than `max_bytes`)."""
        target = shlex.quote(self.resolve(path))
        # The checks run inside the sandbox, as its user: the answer is what the agent itself would see.
        script = (
            f"if [ -d {target} ]; then echo directory >&2; exit 3; fi; "
            f"if [ ! -e {target} ]; then echo missing >&2; exit 3; fi; "
            f"if [ ! -r {target} ]; then echo denied >&2; exit 3; fi; "
            f"head -c {max_bytes + 1} {target}"
        )
        result = await self.run(script, max_output=max_bytes + 1)
        if result.exit_code == 3:
            _raise_file_error(result.stderr.decode(errors="replace").strip(), path)
        if result.exit_code != 0:
            raise OSError(f"cannot read {path}: {result.text().strip() or f'exit {result.exit_code}'}")
        if len(result.stdout) > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes} bytes")
        return result.stdout

    async def write_file(self, path: str, data: bytes) -> None:
        """Write `data` to the file at `path` (relative to `workdir`), making its parent directories. Raises
        `IsADirectoryError`, `PermissionError` or `OSError` (a full disk, a file-size limit)."""
        target = self.resolve(path)
        parent = shlex.quote(target.rsplit("/", 1)[0] or "/")
        quoted = shlex.quote(target)
        script = (
            f"if [ -d {quoted} ]; then echo directory >&2; exit 3; fi; mkdir -p -- {parent} 2>/dev/null; cat > {quoted}"
        )
        result = await self.run(script, stdin=data)
        if result.exit_code == 3:
            _raise_file_error("directory", path)
        if result.exit_code != 0:
            said = result.text().strip() or f"exit {result.exit_code}"
            if "Permission denied" in said or "Read-only file system" in said:
                raise PermissionError(f"{path} cannot be written ({said})")
            raise OSError(f"cannot write {path}: {said}")


def _raise_file_error(kind: str, path: str) -> None:
    if kind == "directory":
        raise IsADirectoryError(f"{path} is a directory")
    if kind == "missing":
        raise FileNotFoundError(f"{path} does not exist")
    raise PermissionError(f"{path} cannot be accessed")
