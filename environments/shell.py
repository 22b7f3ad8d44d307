"""A stateful shell episode: the agent solves a small file-system exercise with a persistent bash, then submits.

Each session owns one `bash` process, started in its own session and process group, in a private temporary
working directory. Tool `bash` runs one command in that shell (so `cd`, `export` and functions persist
between calls) and returns its exit code, stdout and stderr; tool `submit` checks the working directory
against the exercise and ends the episode with reward 1.0 or 0.0.

Limits. Each command may run `command_timeout` seconds (default 10; task spec `"command_timeout"`); then
every process the command started is killed and the shell lives on. Only if the shell itself stays busy (a
loop of builtins) or exits (`exit`) is a new one started in the same directory, and the agent is told that
variables were lost. Each stream keeps its first `output_cap` bytes (64 KiB) and the rest is read and
dropped, with a note saying so.

Isolation. Without a sandbox there is none beyond a private working directory, a separate process group and
an environment stripped of the server's variables (so no API keys leak into the shell): commands run as the
server's user and can read and write whatever that user can, including other sessions' directories. It is
not a security boundary; run untrusted agents in a container. With `"sandbox": "bwrap"` in the task spec,
or `ORS_SHELL_SANDBOX=bwrap` in the server's environment (which a task spec cannot turn off), bash runs
inside bubblewrap (which must be installed; asking for it without it fails the session's setup): a
read-only view of the system, a private /tmp, the working directory as the only writable place, no
network, and its own pid namespace (every namespace unshared), so commands can neither reach the network
nor see or signal the server's processes.

Teardown kills the shell's whole process group and every process still in its session, then removes the
directory. A process that started a session of its own (`setsid`) escapes that sweep unless bwrap is used.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ors_server import Environment, TextBlock, ToolOutput, tool

KILL_GRACE = 2.0
"""Seconds a killed command gets to let the shell report back before the shell is replaced."""
MAX_COMMAND_CHARS = 100_000
MAX_CHECKED_BYTES = 1024 * 1024
"""The most bytes of one file the checkers read."""


class BashInput(BaseModel):
    command: str = Field(description="A bash command line, run in the episode's persistent shell.")


# The shell.


@dataclass
class _Capture:
    """One output stream of one command: keeps the first `cap` bytes, counts the rest, finds the end marker.

    The end marker is printed by the shell after the command; on stdout it is followed by `<exit code>;`.
    """

    marker: bytes
    cap: int
    with_code: bool
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0
    pending: bytes = b""
    trailer: bytes | None = None
    done: bool = False

    def feed(self, chunk: bytes) -> None:
        if self.done:
            return
        if self.trailer is not None:
            self._feed_trailer(chunk)
            return
        buffer = self.pending + chunk
        index = buffer.find(self.marker)
        if index >= 0:
            self._keep(buffer[:index])
            self.pending = b""
            if self.with_code:
                self.trailer = b""
                self._feed_trailer(buffer[index + len(self.marker) :])
            else:
                self.done = True
            return
        # The marker may straddle two reads: hold back its length less one byte.
        split = max(len(buffer) - len(self.marker) + 1, 0)
        self._keep(buffer[:split])
        self.pending = buffer[split:]

    def _feed_trailer(self, chunk: bytes) -> None:
        assert self.trailer is not None
        self.trailer += chunk
        if b";" in self.trailer:
            self.done = True

    def flush(self) -> None:
        """Keep what was held back (the stream ended without a marker)."""
        self._keep(self.pending)
        self.pending = b""

    def _keep(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.total += len(data)

    @property
    def exit_code(self) -> int | None:
        if not self.done or self.trailer is None:
            return None
        code = self.trailer.split(b";", 1)[0]
        return int(code) if code.isdigit() else None

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


def _session_members(session_id: int) -> dict[int, int] | None:
    """The live (non-zombie) processes of a session (pid -> parent pid), from /proc; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    members = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After "pid (comm)": state, ppid, pgrp, session.
        if fields[0] != b"Z" and int(fields[3]) == session_id:
            members[int(entry)] = int(fields[1])
    return members


class BashProcess:
    """A persistent bash driven through pipes, one command at a time. Thread-safe `close()`."""

    def __init__(self, workdir: Path, *, timeout: float, output_cap: int, sandbox: str | None) -> None:
        self.workdir = workdir
        self.timeout = timeout
        self.output_cap = output_cap
        self.sandbox = sandbox
        self.cwd = str(workdir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.shell_pid: int | None = None
        self._launchers: set[int] = set()
        """The processes between us and bash (bwrap's two); they must survive a command's kill."""
        self._lock = threading.Lock()
        self._closed = False
        self._busy = False
        self._env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(workdir),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }

    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the shell has been closed")
            os.makedirs(self.cwd, exist_ok=True)
            argv = ["bash", "--noprofile", "--norc"]
            if self.sandbox == "bwrap":
                bwrap = shutil.which("bwrap")
                if bwrap is None:
                    raise RuntimeError("sandbox 'bwrap' was asked for but bwrap is not installed")
                workdir = str(self.workdir)
                argv = [
                    bwrap,
                    *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"),
                    *("--bind", workdir, workdir, "--unshare-all", "--die-with-parent", "--chdir", self.cwd),
                    *argv,
                ]
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=self._env,
                start_new_session=True,
            )
            for stream in (self.proc.stdout, self.proc.stderr):
                assert stream is not None
                os.set_blocking(stream.fileno(), False)
            self.shell_pid, self._launchers = self.proc.pid, set()
            if self.sandbox == "bwrap":
                self._find_sandboxed_shell(self.proc)

    def _find_sandboxed_shell(self, proc: subprocess.Popen[bytes]) -> None:
        """Learn bash's pid under bwrap (bwrap -> bwrap, the pid namespace's init -> bash).

        Once bash has answered a first command, it is the only grandchild: later orphans would also
        become children of the namespace's init, so it is looked up now, not at the first timeout.
        """
        assert proc.stdin is not None
        proc.stdin.write(b"printf '%s%s' __ors_ ready\n")
        proc.stdin.flush()
        out = _Capture(b"__ors_ready", 0, with_code=False)
        err = _Capture(b"", 0, with_code=False, done=True)
        if self._collect(proc, out, err, time.monotonic() + 10) != "done":
            raise RuntimeError("the sandboxed shell did not start")
        members = _session_members(proc.pid) or {}
        inits = {pid for pid, parent in members.items() if parent == proc.pid}
        shells = [pid for pid, parent in members.items() if parent in inits]
        if len(shells) == 1:
            self.shell_pid, self._launchers = shells[0], {proc.pid, *inits}

    def run(self, command: str) -> CommandResult:
        """Run `command` in the shell; returns when it ends, or after the timeout once it has been killed."""
        with self._lock:
            if self._closed or self.proc is None:
                raise RuntimeError("the shell has been closed")
            self._busy = True
        try:
            return self._run(command)
        finally:
            with self._lock:
                self._busy = False
                if self._closed:
                    self._close_pipes()

    def _run(self, command: str) -> CommandResult:
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        token = uuid.uuid4().hex
        # The marker is printed in two pieces, so tracing (`set -x`) never shows it whole. The command travels
        # in a quoted here-document and runs through `eval`: a syntax error then fails only this command.
        script = (
            f"IFS= read -r -d '' __ors_cmd <<'__ORS_EOF_{token}' || true\n{command}\n__ORS_EOF_{token}\n"
            'eval "$__ors_cmd" </dev/null; __ors_rc=$?\n'
            f"printf '%s%s:%s;' __ors_ {token} \"$__ors_rc\"; printf '%s%s' __ors_ {token} >&2\n"
            "unset __ors_cmd __ors_rc\n"
        )
        marker = f"__ors_{token}".encode()
        out = _Capture(marker + b":", self.output_cap, with_code=True)
        err = _Capture(marker, self.output_cap, with_code=False)
        notes: list[str] = []
        try:
            proc.stdin.write(script.encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            status = "exited"
        else:
            status = self._collect(proc, out, err, time.monotonic() + self.timeout)
        if status == "timeout":
            notes.append(f"the command timed out after {self.timeout:g} s and was killed")
            if self._kill_command(proc):
                status = self._collect(proc, out, err, time.monotonic() + KILL_GRACE)
        if status == "done":
            self.cwd = self._shell_cwd(proc) or self.cwd
        else:
            if status == "exited" and not notes:
                try:
                    notes.append(f"the shell exited with status {proc.wait(timeout=KILL_GRACE)}")
                except subprocess.TimeoutExpired:
                    notes.append("the shell closed its output")
            self.cwd = self._shell_cwd(proc) or self.cwd
            if self._replace(proc):
                notes.append(f"a new shell was started in {self.cwd}; shell variables and functions were reset")
            else:
                notes.append("the session ended while the command ran")
        out.flush()
        err.flush()
        return CommandResult(out.exit_code, out.text("stdout"), err.text("stderr"), notes)

    def _collect(self, proc: subprocess.Popen[bytes], out: _Capture, err: _Capture, deadline: float) -> str:
        """Read both streams until both markers arrive ('done'), the deadline ('timeout') or EOF ('exited')."""
        assert proc.stdout is not None and proc.stderr is not None
        captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        with selectors.DefaultSelector() as selector:
            for fd, capture in captures.items():
                if not capture.done:
                    selector.register(fd, selectors.EVENT_READ)
            while not (out.done and err.done):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "timeout"
                for key, _ in selector.select(remaining):
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        return "exited"
                    captures[key.fd].feed(chunk)
                    if captures[key.fd].done:
                        selector.unregister(key.fd)
        return "done"

    def _kill_command(self, proc: subprocess.Popen[bytes], *, everything: bool = False) -> bool:
        """Kill every process of the shell's session but the shell (and its launchers), or `everything`.

        False if the processes cannot be found (no /proc, or bash's pid under bwrap unknown).
        """
        spare = set() if everything else {self.shell_pid, *self._launchers}
        if self.sandbox == "bwrap" and self.shell_pid == proc.pid and not everything:
            return False
        for _ in range(50):  # a fork bomb may keep adding processes for a while
            members = _session_members(proc.pid)
            if members is None:
                return False
            targets = [pid for pid in members if pid not in spare]
            if not targets:
                return True
            for pid in targets:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return True

    def _shell_cwd(self, proc: subprocess.Popen[bytes]) -> str | None:
        if self.shell_pid is None or (self.sandbox == "bwrap" and self.shell_pid == proc.pid):
            return None  # bash's pid under bwrap is unknown
        try:
            cwd = os.readlink(f"/proc/{self.shell_pid}/cwd")
        except OSError:
            return None
        return cwd if os.path.isdir(cwd) else None

    def _replace(self, proc: subprocess.Popen[bytes]) -> bool:
        """Kill the shell and start a new one in the same directory; False if the shell was closed meanwhile."""
        self._kill(proc)
        with self._lock:
            self._close_pipes()
            if self._closed:
                return False
        if not os.path.isdir(self.cwd):
            self.cwd = str(self.workdir)
        try:
            self.start()
        except RuntimeError:  # closed between the check and the start
            return False
        return True

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._kill_command(proc, everything=True)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _close_pipes(self) -> None:
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass

    def close(self) -> None:
        """Kill the shell and everything it started. Safe to call from any thread, more than once."""
        with self._lock:
            self._closed = True
            proc = self.proc
        if proc is None:
            return
        self._kill(proc)
        with self._lock:
            if not self._busy:
                self._close_pipes()


# The exercises.


def _inside(root: Path, name: str) -> Path | None:
    """`root / name` if it resolves to a place inside `root` (an agent's symlink cannot point checks outside)."""
    path = (root / name).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def _read(root: Path, name: str) -> str | None:
    """The text of the regular file `name`, at most MAX_CHECKED_BYTES of it; None if it is no such file."""
    path = _inside(root, name)
    if path is None or not path.is_file():
        return None
    with path.open("rb") as file:
        return file.read(MAX_CHECKED_BYTES).decode("utf-8", errors="replace")


def _expect_text(root: Path, name: str, expected: str) -> str | None:
    text = _read(root, name)
    if text is None:
        return f"{name} does not exist or is not a regular file"
    if text.strip() != expected:
        return f"{name} should contain {expected!r}, not {text.strip()[:200]!r}"
    return None


NAMES = "\n".join(["mara", "olu", "ines", "mara", "bo", "olu", "zed", "ines", "amal", "bo"]) + "\n"
NUMBERS = "\n".join(str(n) for n in [17, 4, 250, 33, 9, 81, 2, 640, 15, 1]) + "\n"
DATA = "".join(f"record {i}: {'ok' if i % 3 else 'retry'}\n" for i in range(37))
CONFIG = "[server]\nport=8080\ndebug=false\nworkers=4\n"


def _check_hello(root: Path) -> str | None:
    return _expect_text(root, "hello.txt", "hi")


def _check_nested(root: Path) -> str | None:
    path = _inside(root, "project/src/utils")
    return None if path is not None and path.is_dir() else "the directory project/src/utils does not exist"


def _check_count(root: Path) -> str | None:
    return _expect_text(root, "count.txt", str(DATA.count("\n")))


def _check_rename(root: Path) -> str | None:
    if (root / "draft.txt").exists():
        return "draft.txt still exists"
    return _expect_text(root, "final.txt", "final text")


def _check_unique(root: Path) -> str | None:
    text = _read(root, "unique.txt")
    expected = sorted(set(NAMES.split()))
    if text is None or text.split() != expected:
        return f"unique.txt should list {expected}, one per line"
    return None


def _check_executable(root: Path) -> str | None:
    path = _inside(root, "run.sh")
    if path is None or not path.is_file():
        return "run.sh is missing"
    if not path.stat().st_mode & stat.S_IXUSR:
        return "run.sh is not executable by its owner"
    return None if _read(root, "run.sh") == "#!/bin/sh\necho ok\n" else "run.sh was changed"


def _check_setting(root: Path) -> str | None:
    expected = CONFIG.replace("debug=false", "debug=true")
    return None if _read(root, "config.ini") == expected else f"config.ini should read {expected!r}"


def _check_clean(root: Path) -> str | None:
    build = _inside(root, "build")
    if build is None or not build.is_dir():
        return "build/ is gone"
    left = sorted(str(p.relative_to(root)) for p in build.rglob("*.tmp"))
    if left:
        return f"these .tmp files are left: {left}"
    kept = ["build/keep.txt", "build/sub/notes.md", "build/sub/deeper/data.csv"]
    missing = [name for name in kept if _read(root, name) is None]
    return f"these files should have been kept: {missing}" if missing else None


def _check_sum(root: Path) -> str | None:
    return _expect_text(root, "sum.txt", str(sum(int(n) for n in NUMBERS.split())))


def _check_largest(root: Path) -> str | None:
    return _expect_text(root, "largest.txt", "app-2.log")


def _check_link(root: Path) -> str | None:
    link = root / "current"
    if not link.is_symlink():
        return "current is not a symbolic link"
    target = _inside(root, "current")
    return None if target == (root / "releases/v2").resolve() else "current does not point to releases/v2"


def _check_archive(root: Path) -> str | None:
    path = _inside(root, "backup.tar.gz")
    if path is None or not path.is_file() or path.stat().st_size > MAX_CHECKED_BYTES:
        return "backup.tar.gz is missing (or larger than expected)"
    try:
        with tarfile.open(path, "r:gz") as archive:
            names = {name.removeprefix("./") for name in archive.getnames()}
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"backup.tar.gz is not a gzip-compressed tar archive ({exc})"
    missing = {"docs/intro.md", "docs/usage.md"} - names
    return f"backup.tar.gz lacks {sorted(missing)}" if missing else None


@dataclass(frozen=True)
class Exercise:
    id: str
    instruction: str
    check: Callable[[Path], str | None]
    """None when the working directory solves the exercise, else what is wrong."""
    files: dict[str, str] = field(default_factory=dict)


TRAIN = [
    Exercise("hello_file", "Create a file named hello.txt containing the text hi.", _check_hello),
    Exercise("nested_dirs", "Create the directory project/src/utils, with its parent directories.", _check_nested),
    Exercise(
        "count_lines",
        "Write the number of lines in data.txt to a new file count.txt.",
        _check_count,
        {"data.txt": DATA},
    ),
    Exercise("rename_file", "Rename draft.txt to final.txt.", _check_rename, {"draft.txt": "final text\n"}),
    Exercise(
        "unique_sorted",
        "Write the distinct lines of names.txt, sorted alphabetically, one per line, to unique.txt.",
        _check_unique,
        {"names.txt": NAMES},
    ),
    Exercise(
        "make_executable", "Make run.sh executable by its owner.", _check_executable, {"run.sh": "#!/bin/sh\necho ok\n"}
    ),
    Exercise(
        "replace_setting",
        "In config.ini, change the line debug=false to debug=true and leave every other line as it is.",
        _check_setting,
        {"config.ini": CONFIG},
    ),
    Exercise(
        "clean_tmp",
        "Delete every file whose name ends in .tmp anywhere under build/, and keep every other file.",
        _check_clean,
        {
            "build/a.tmp": "x\n",
            "build/keep.txt": "keep\n",
            "build/sub/b.tmp": "x\n",
            "build/sub/notes.md": "notes\n",
            "build/sub/deeper/c.tmp": "x\n",
            "build/sub/deeper/data.csv": "1,2\n",
        },
    ),
]
TEST = [
    Exercise(
        "sum_numbers",
        "numbers.txt holds one integer per line. Write their sum to sum.txt.",
        _check_sum,
        {"numbers.txt": NUMBERS},
    ),
    Exercise(
        "largest_file",
        "Write the name (only the file name) of the largest file in logs/ to largest.txt.",
        _check_largest,
        {"logs/app-1.log": "a" * 300, "logs/app-2.log": "b" * 4000, "logs/app-3.log": "c" * 1200},
    ),
    Exercise(
        "symlink_release",
        "Create a symbolic link named current that points to the directory releases/v2.",
        _check_link,
        {"releases/v1/VERSION": "1\n", "releases/v2/VERSION": "2\n"},
    ),
    Exercise(
        "archive_docs",
        "Create a gzip-compressed tar archive backup.tar.gz of the docs directory (members named docs/...).",
        _check_archive,
        {"docs/intro.md": "# Intro\n", "docs/usage.md": "# Usage\n"},
    ),
]
EXERCISES = {exercise.id: exercise for exercise in TRAIN + TEST}


# The environment.


class Shell(Environment):
    """A file-system exercise solved with a persistent bash; `submit` grades the working directory."""

    name = "shell"
    command_timeout: ClassVar[float] = 10.0
    output_cap: ClassVar[int] = 64 * 1024

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        exercise = EXERCISES.get(self.task_spec.get("id"))  # type: ignore[arg-type]
        if exercise is None:
            raise ValueError(f"task_spec 'id' must name an exercise, one of {sorted(EXERCISES)}")
        timeout = self.task_spec.get("command_timeout", self.command_timeout)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
            raise ValueError(f"task_spec 'command_timeout' must be a number of seconds in (0, 600], got {timeout!r}")
        # The operator's ORS_SHELL_SANDBOX=bwrap is a floor: a client's task spec cannot turn it off.
        operator = os.environ.get("ORS_SHELL_SANDBOX") or None
        sandbox = "bwrap" if operator == "bwrap" else (self.task_spec.get("sandbox") or operator)
        if sandbox not in (None, "none", "bwrap"):
            raise ValueError(f"sandbox must be 'bwrap' or 'none', got {sandbox!r}")
        self.exercise = exercise
        self.timeout = float(timeout)
        self.sandbox = None if sandbox == "none" else sandbox
        self.root: Path | None = None
        self.workdir: Path | None = None
        self.shell: BashProcess | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        exercises = {"train": TRAIN, "test": TEST}.get(split)
        if exercises is None:
            raise ValueError(f"unknown split {split!r}; splits: {cls.list_splits()}")
        return [{"id": e.id, "instruction": e.instruction} for e in exercises]

    def setup(self) -> None:
        # Teardown may run while an abandoned setup is still going (a session deleted during setup): the lock
        # and the flag make sure nothing is started after teardown has run.
        with self._lock:
            if self._closed:
                return
            self.root = Path(tempfile.mkdtemp(prefix="ors-shell-"))
            self.workdir = self.root / "work"
            for name, content in self.exercise.files.items():
                path = self.workdir / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
            self.workdir.mkdir(exist_ok=True)
            self.shell = BashProcess(
                self.workdir, timeout=self.timeout, output_cap=self.output_cap, sandbox=self.sandbox
            )
            self.shell.start()

    def teardown(self) -> None:
        with self._lock:
            self._closed = True
            shell, root = self.shell, self.root
        if shell is not None:
            shell.close()
        if root is not None:
            _remove_tree(root)

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"{self.exercise.instruction}\n\n"
                "You have a bash shell in a fresh working directory. Run commands with the bash tool "
                '({"command": "..."}); each call returns the exit code, stdout and stderr. The shell keeps its '
                f"state (current directory, variables) between calls, and a command may run for {self.timeout:g} s "
                "at most. When you are done, call submit to have the working directory checked; that ends the episode."
            )
        ]

    @tool
    def bash(self, params: BashInput) -> ToolOutput:
        """Run a bash command in the episode's persistent shell; returns its exit code, stdout and stderr."""
        if "\0" in params.command:
            raise ValueError("the command must not contain NUL characters")
        if len(params.command) > MAX_COMMAND_CHARS:
            raise ValueError(f"the command is longer than {MAX_COMMAND_CHARS} characters")
        if self.shell is None:
            raise RuntimeError("the shell is not running")
        result = self.shell.run(params.command)
        return ToolOutput(
            blocks=[TextBlock(text=result.render())],
            metadata={"exit_code": result.exit_code},
            reward=0.0,
        )

    @tool
    def submit(self) -> ToolOutput:
        """Have the working directory checked against the task; ends the episode."""
        if self.workdir is None:
            raise RuntimeError("the shell is not running")
        try:
            problem = self.exercise.check(self.workdir)
        except (OSError, ValueError) as exc:
            problem = f"the check could not read the working directory ({type(exc).__name__}: {exc})"
        text = "Correct: the task is solved." if problem is None else f"Not solved: {problem}."
        return ToolOutput(blocks=[TextBlock(text=text)], reward=1.0 if problem is None else 0.0, finished=True)


def _remove_tree(root: Path) -> None:
    """Remove `root`, including directories the agent made read-only."""

    def make_writable_and_retry(function: Callable[..., Any], path: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            function(path)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=make_writable_and_retry)
    else:
        shutil.rmtree(root, onerror=make_writable_and_retry)
