"""Where a session's bash runs: inside bubblewrap (the default), or unconfined when the operator says so.

Choosing. `ORS_SHELL_SANDBOX` in the server's environment is the operator's choice: unset or `bwrap` means
every shell runs in bubblewrap, and shell sessions fail to start where it cannot run; `none` runs shells
unconfined (no isolation), with a warning logged for every such session. A task spec's `"sandbox"` can only
add confinement (`"bwrap"` under an operator's `none`), never remove it. Whether bubblewrap can run is found
out by running it once, with the flags sessions use (`bwrap_problem()`): it may be installed yet refused by the
kernel.

The sandbox is built by `ors_server.sandboxes.bubblewrap`, the one builder CodeAct's sandbox uses too (its docstring
says what every sandbox gets): bash runs in new user, pid, network, IPC, UTS and cgroup namespaces, as uid and gid 65534
(bubblewrap itself is started as 65534 when the server is root), with no capabilities, `no_new_privs` and a
seccomp filter that refuses `ptrace`; `/usr` and `/etc` (and the `/bin`, `/lib`... links to them) read-only, its
own read-only `/proc`, a read-only `/dev`, a private `/tmp` of `ORS_SHELL_DISK_BYTES`, and the session's working
directory, writable, at `/work`. Nothing else of the host is there: not the server's processes, not other
sessions' directories, not the network. Killing the namespace's first process (bubblewrap's init, which dies with
its parent) takes every process of the sandbox with it, `setsid` or not.

Limits (`shell_resources()`, from the server's environment; see `Resources`): memory per process
(`ORS_SHELL_MEMORY_BYTES`, 256 MiB), processes and threads of the session at once (`ORS_SHELL_MAX_PROCESSES`,
32, bubblewrap's init and bash included), the size of `/tmp` and, when the server runs as root, of `/work`
(`ORS_SHELL_DISK_BYTES`, 64 MiB each) and of any one file written (`ORS_SHELL_FILE_BYTES`, 64 MiB). They are
rlimits set by the shell on itself inside the sandbox (the process limit counts in the session's own user
namespace, so sessions never share a budget), and tmpfs sizes (`/work`'s is mounted by the environment).

Unconfined. bash runs in its own process session, as the server's user (uid 65534 when the server is root),
with an environment of its own and the same rlimits but the process limit (outside a user namespace of its own it
would count every process of that user); teardown kills its session's processes. Processes that leave that
session survive, and commands can read the server's command line and other sessions' files.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from ors_server import InvalidTaskSpec
from ors_server.sandboxes.bubblewrap import (
    AGENT_ID,
    Resources,
    bwrap_argv,
    optional_flags,
    options_by_fd,
    root_dirs,
    seccomp_fd,
    spawn_ids,
)

logger = logging.getLogger("ors_server.environments.shell")

SANDBOX_VARIABLE = "ORS_SHELL_SANDBOX"
Sandbox = Literal["bwrap", "none"]
WORKDIR_INSIDE = "/work"
"""Where the working directory appears inside the sandbox."""
SYSTEM_DIRS = tuple(root_dirs("/etc"))
"""What the sandbox shows of the host, read-only: enough to run the usual command-line tools."""
MiB = 1024 * 1024
LIMIT_VARIABLES = {
    "memory_bytes": ("ORS_SHELL_MEMORY_BYTES", 256 * MiB),
    "processes": ("ORS_SHELL_MAX_PROCESSES", 32),
    "tmp_bytes": ("ORS_SHELL_DISK_BYTES", 64 * MiB),
    "file_bytes": ("ORS_SHELL_FILE_BYTES", 64 * MiB),
}
"""Each limit of a shell session: the server's environment variable that sets it, and its default."""
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KILL_ROUNDS = 50
"""How many times a kill sweep looks again for processes (a fork bomb keeps adding some for a while)."""


# Choosing.


def choose_sandbox(asked: object) -> Sandbox:
    """The sandbox a session gets: the operator's `ORS_SHELL_SANDBOX` (default bwrap), raised by the task spec's
    `asked` ("bwrap" or "none"), never lowered."""
    operator = os.environ.get(SANDBOX_VARIABLE) or "bwrap"
    if operator not in ("bwrap", "none"):
        raise ValueError(f"{SANDBOX_VARIABLE} must be 'bwrap' or 'none', got {operator!r}")
    if asked not in (None, "", "none", "bwrap"):
        raise InvalidTaskSpec(f"task_spec 'sandbox' must be 'bwrap' or 'none', got {asked!r}")
    return "bwrap" if "bwrap" in (operator, asked) else "none"


def warn_unconfined() -> None:
    logger.warning(
        "shell session WITHOUT a sandbox (%s=none): its commands can read and change other sessions' files, "
        "see the server's processes and command line, and leave processes behind",
        SANDBOX_VARIABLE,
    )


def shell_resources() -> Resources:
    """A shell session's limits: the defaults of `LIMIT_VARIABLES`, or what the operator set."""
    values: dict[str, int] = {}
    for field, (variable, default) in LIMIT_VARIABLES.items():
        text = os.environ.get(variable, "").strip()
        if not text:
            values[field] = default
        elif not text.isdigit() or int(text) < 1:
            raise ValueError(f"{variable} must be a positive whole number, got {text!r}")
        else:
            values[field] = int(text)
    return Resources(open_files=1024, **values)


@functools.cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run here with the flags sessions use, or None when it can. Runs it once."""
    found = _working_bwrap_flags()
    if isinstance(found, str):
        logger.error(
            "shell sandbox: %s; shell sessions will not start (%s=none runs them unsandboxed)", found, SANDBOX_VARIABLE
        )
        return found
    logger.info("shell sandbox: bubblewrap works (%s)", " ".join(found) or "no optional flags")
    return None


@functools.cache
def _working_bwrap_flags() -> tuple[str, ...] | str:
    """The optional hardening flags this bubblewrap accepts, after running a shell with them; or why it cannot."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    with tempfile.TemporaryDirectory(prefix="ors-shell-probe-") as root:
        workdir = Path(root) / "work"
        workdir.mkdir()
        prepare_workdir(Path(root), workdir)
        sandbox = Bubblewrap(workdir, optional=optional_flags())
        argv, options = sandbox.command()
        argv = argv[: argv.index("--") + 1] + ["bash", "--noprofile", "--norc", "-c", "echo ok"]
        options.pop("start_new_session")
        try:
            result = subprocess.run(argv, capture_output=True, timeout=30, check=False, **options)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bwrap could not be run ({type(exc).__name__}: {exc})"
        finally:
            for fd in options.get("pass_fds", ()):
                os.close(fd)
    if result.returncode == 0 and result.stdout == b"ok\n":
        return optional_flags()
    return f"bwrap failed: {result.stderr.decode(errors='replace').strip() or result.returncode}"


# The working directory.


def agent_ids() -> tuple[int, int] | None:
    """The uid and gid to run commands as, when the server's own would be root; else None (run as ourselves)."""
    return (AGENT_ID, AGENT_ID) if spawn_ids() else None


def prepare_workdir(root: Path, workdir: Path) -> None:
    """Give the working directory to the user commands run as (when that is not the server's user)."""
    ids = agent_ids()
    if ids is None:
        return
    root.chmod(0o711)  # that user must pass through the session's private directory, not list it
    for path in [workdir, *workdir.rglob("*")]:
        os.chown(path, *ids, follow_symlinks=False)


# The two confinements (see `ors_server.sandboxes.persistent_shell.Confinement`).


class Bubblewrap:
    """bash inside bubblewrap: the working directory at /work, nothing else of the host writable or visible."""

    def __init__(
        self, host_workdir: Path, *, optional: tuple[str, ...] | None = None, resources: Resources | None = None
    ) -> None:
        self.host_workdir = host_workdir
        self.workdir = WORKDIR_INSIDE
        if optional is None:
            found = _working_bwrap_flags()
            optional = found if isinstance(found, tuple) else ()
        self._optional = optional
        self.resources = resources or shell_resources()

    def command(self) -> tuple[list[str], dict[str, Any]]:
        """The command and `subprocess.Popen` options of a new shell; the fds in `pass_fds` are the caller's to
        close once it has started."""
        fd = seccomp_fd(no_fork=False)
        argv, by_fd = options_by_fd(
            bwrap_argv(
                _limited_bash(self.resources, processes=True),
                read_only=SYSTEM_DIRS,
                tmp_bytes=self.resources.tmp_bytes,
                writable=[(str(self.host_workdir), WORKDIR_INSIDE)],
                chdir=WORKDIR_INSIDE,
                env=_environment(home=WORKDIR_INSIDE, path=SANDBOX_PATH),
                seccomp_fd=fd,
                flags=self._optional,
            )
        )
        options = _spawn_options(cwd="/")
        options["pass_fds"] = (by_fd,) if fd is None else (fd, by_fd)
        return argv, options

    def find_processes(self, launcher: int, shell: int) -> tuple[int | None, list[int]]:
        # The processes of the sandbox's pid namespace: bubblewrap's init is pid 1 there, the shell `shell`.
        namespace = next((ns for pid in _children(launcher) if (ns := _pid_namespace(pid))), None)
        found: tuple[int | None, list[int]] = (None, [])
        if namespace is None:
            return found
        for pid in _live_pids():
            if _pid_namespace(pid) == namespace:
                inner = _inner_pid(pid)
                if inner == shell:
                    found = (pid, found[1])
                elif inner != 1:
                    found[1].append(pid)
        return found

    def kill_all(self, launcher: int) -> None:
        # When a pid namespace's init dies, the kernel kills every process in it, and the init's exit completes
        # only once they are gone; then the launcher exits. So once the launcher has exited, nothing of the
        # sandbox is left. Without an init yet, the launcher: the init dies with it (--die-with-parent).
        _kill(_children(launcher) or [launcher])


class Unconfined:
    """bash as a plain child process in its own session: no isolation (ORS_SHELL_SANDBOX=none)."""

    def __init__(self, host_workdir: Path, *, resources: Resources | None = None) -> None:
        self.workdir = str(host_workdir)
        self.resources = resources or shell_resources()

    def command(self) -> tuple[list[str], dict[str, Any]]:
        path = os.environ.get("PATH", SANDBOX_PATH)
        options = _spawn_options(cwd=self.workdir)
        options["env"] = _environment(home=self.workdir, path=path)
        return _limited_bash(self.resources, processes=False), options

    def find_processes(self, launcher: int, shell: int) -> tuple[int | None, list[int]]:
        # bash is the launcher, and its pid is the id of the process session every process it starts is in
        # (unless it leaves it: see the module's docstring).
        return launcher, [pid for pid in _live_pids() if pid != launcher and _stat(pid, 3) == launcher]

    def kill_all(self, launcher: int) -> None:
        try:
            os.killpg(launcher, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for _ in range(KILL_ROUNDS):
            targets = [pid for pid in _live_pids() if _stat(pid, 3) == launcher]
            if not targets:
                return
            _kill(targets)


def _limited_bash(resources: Resources, *, processes: bool) -> list[str]:
    """bash that sets the session's rlimits on itself, then becomes the session's shell (same pid)."""
    limits = resources.ulimit()
    if not processes:
        limits = limits.replace(f" -u {resources.processes}", "")
    return ["bash", "--noprofile", "--norc", "-c", f"{limits} && exec bash --noprofile --norc"]


def _environment(*, home: str, path: str) -> dict[str, str]:
    # An environment of its own: nothing of the server's (API keys, secrets) reaches the shell.
    return {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb"}


def _spawn_options(*, cwd: str) -> dict[str, Any]:
    options: dict[str, Any] = {"cwd": cwd, "start_new_session": True, **spawn_ids()}
    # bubblewrap gets the sandbox's environment through --setenv; itself it needs only a PATH.
    options["env"] = {"PATH": SANDBOX_PATH}
    return options


# Processes, from /proc.


def _live_pids() -> Iterator[int]:
    """Every process that has not exited (zombies excluded)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if entry.isdigit() and _stat(int(entry), 0) not in (None, "Z"):
            yield int(entry)


def _stat(pid: int, index: int) -> Any:
    """Field `index` of /proc/PID/stat after "pid (comm)": 0 state, 1 ppid, 2 pgrp, 3 session."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode() if index == 0 else int(fields[index])


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as file:  # bubblewrap is single-threaded
            return [int(child) for child in file.read().split()]
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            return []
    except OSError:
        pass
    return [child for child in _live_pids() if _stat(child, 1) == pid]  # a kernel without that file


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _inner_pid(pid: int) -> int | None:
    """The process's pid in its own (innermost) pid namespace."""
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
