"""How the processes that run an environment's own code start: host processes (`hosting/`) and stdio tool servers
(`compose/`). Their code works on what agents send, and may run agent-written code.

Under bubblewrap (the default, `ORS_HOST_SANDBOX=bwrap`) such a process runs in a sandbox built by
`ors_server.sandboxes.bubblewrap`, the builder CodeAct steps and shell sessions use (its docstring says what every
sandbox gets): as uid/gid 65534, also outside its namespaces when the server is root; in pid, mount, IPC, UTS and cgroup
namespaces of its own, so it sees no other process (not the server's `/proc/<pid>/cmdline`, not another host's
`/proc/<pid>/mem`) and can signal none; `no_new_privs`, no capabilities, and the seccomp filter that refuses
`ptrace` and the calls that reach another process's memory. It shares the host's network (a framework's environment
may call services), unlike CodeAct steps.

What it sees, read-only (`visible_paths`): `/usr` and the `/bin`, `/lib`... links, the few files of `/etc` that
name resolution, TLS and user lookups read (`ETC_ENTRIES`), the command's program with the installation and virtual
environment it belongs to, the directories a virtual environment's `.pth` files and editable installs point at,
`PYTHONPATH`, absolute paths among the command's arguments (a script's directory), the working directory, and the
operator's `--host-path`s. Its own read-only `/proc`, a minimal read-only `/dev`, and a private `/tmp` of
`--host-tmp-bytes` (a tmpfs: memory), which is also its `HOME` and `TMPDIR`: the only place it can write. The
records database (its WAL and shared-memory files too) and the API key file are never shown, even inside a shown
directory: that directory is then shown entry by entry, without them (an entry made after the start is not shown).
When the server is root, bubblewrap is started as 65534 through `compose/launch.py`, which first opens, in a mount
namespace of its own, the closed directories above those paths (a Python under `/root`, mode 0700) to show only
the entries on the way: what such a directory holds besides is not shown.

`ORS_HOST_SANDBOX=none` (for machines without bubblewrap, or whose kernel refuses it) starts the command as before:
as uid 65534 when the server is root (through `compose/launch.py`), in a process group of its own, but seeing the
host's files and processes as that user does; the server says so loudly at startup. Without bubblewrap the default
mode refuses to start such processes, saying what to do.
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import re
import shutil
import signal
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ors_server.sandboxes.bubblewrap import AGENT_ID, bwrap_argv, optional_flags, options_by_fd, root_dirs, seccomp_fd

logger = logging.getLogger("ors_server.confinement")

SANDBOX_ENV = "ORS_HOST_SANDBOX"
Mode = Literal["bwrap", "none"]
ETC_ENTRIES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/mime.types",
    "/etc/protocols",
    "/etc/services",
)
"""What of `/etc` a sandboxed process sees: name resolution, TLS roots, user and group names, the time zone."""
MAX_ENTRIES = 256
"""The most entries of one directory shown one by one (a directory holding a hidden file); past it, none are."""
LAUNCH = Path(__file__).resolve().parents[1] / "compose" / "launch.py"


class SandboxUnavailable(RuntimeError):
    """The configured confinement cannot be used on this machine (the message says what to do)."""


@dataclass(frozen=True)
class Confinement:
    """How an environment's processes are confined (see the module's docstring), from the settings."""

    mode: Mode = "bwrap"
    tmp_bytes: int = 64 * 1024 * 1024
    """The size of the sandbox's `/tmp` (`--host-tmp-bytes`)."""
    paths: tuple[str, ...] = ()
    """More host paths shown read-only (`--host-path`)."""
    hidden: tuple[str, ...] = field(default_factory=tuple)
    """Files never shown: the records database and its companions, the API key file."""

    @classmethod
    def of(cls, settings: object) -> Confinement:
        """The confinement `settings` (a `Settings`) ask for."""
        from ors_server.records.db import is_postgres, resolve

        hidden: list[str] = []
        records = resolve(getattr(settings, "records", None))
        if records is not None and not is_postgres(records):
            hidden += [records + suffix for suffix in ("", "-wal", "-shm", "-journal")]
        key_file = getattr(settings, "api_key_file", None)
        if key_file:
            hidden.append(os.path.abspath(key_file))
        return cls(
            mode=getattr(settings, "host_sandbox", "bwrap"),
            tmp_bytes=getattr(settings, "host_tmp_bytes", cls.tmp_bytes),
            paths=tuple(os.path.abspath(p) for p in getattr(settings, "host_paths", ())),
            hidden=tuple(hidden),
        )


def mode_from_environment() -> Mode:
    """The operator's choice (`ORS_HOST_SANDBOX`): 'bwrap' unless set to 'none'."""
    value = os.environ.get(SANDBOX_ENV, "").strip().lower() or "bwrap"
    if value not in ("bwrap", "none"):
        raise SandboxUnavailable(f"{SANDBOX_ENV} must be 'bwrap' or 'none', got {value!r}")
    return value  # type: ignore[return-value]


@dataclass
class Launch:
    """The command line, environment and inherited fds that start one confined process; `close()` the fds once
    it has started (bubblewrap reads the seccomp filter at its start)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    pass_fds: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.pass_fds:
            try:
                os.close(fd)
            except OSError:
                pass


@contextmanager
def launched(command: Sequence[str], env: Mapping[str, str], cwd: str, confinement: Confinement) -> Iterator[Launch]:
    """How to start `command` confined as `confinement` says; its fds are closed when the block ends."""
    how = launch(command, env, cwd, confinement)
    try:
        yield how
    finally:
        how.close()


def launch(command: Sequence[str], env: Mapping[str, str], cwd: str, confinement: Confinement) -> Launch:
    """How to start `command` (with `env`, in `cwd`) confined as `confinement` says."""
    if confinement.mode == "none":
        warn_unconfined()
        if os.geteuid() != 0:
            return Launch(list(command), dict(env), cwd)
        argv = [os.path.realpath(sys.executable), "-I", "-S", str(LAUNCH), str(AGENT_ID), *command]
        return Launch(argv, dict(env), cwd)
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "the environment's processes run under bubblewrap, which is not installed (apt-get install "
            f"bubblewrap); to run them without a sandbox anyway, set {SANDBOX_ENV}=none"
        )
    inside = {**env, "HOME": "/tmp", "TMPDIR": "/tmp"}
    shown = visible_paths(command, env, cwd, confinement.paths)
    seccomp = seccomp_fd(no_fork=False)
    etc = [arg for p in ETC_ENTRIES if os.path.exists(p) for arg in ("--ro-bind", os.path.realpath(p), p)]
    argv, by_fd = options_by_fd(
        bwrap_argv(
            command,
            read_only=root_dirs(),
            tmp_bytes=confinement.tmp_bytes,
            chdir=os.path.abspath(cwd) if _enterable(cwd) else "/tmp",
            env=None,
            seccomp_fd=seccomp,
            flags=optional_flags(),
            share_net=True,
            more=[*etc, *_binds(shown, confinement.hidden)],
        )
    )
    if os.geteuid() == 0:
        # bubblewrap runs as 65534 (so nothing in the sandbox is root outside it either), and can reach what it
        # binds only once the launcher has opened the closed directories above those paths (a Python under /root).
        shows = [arg for path in shown for arg in ("--show", path)]
        argv = [os.path.realpath(sys.executable), "-I", "-S", str(LAUNCH), str(AGENT_ID), *shows, *argv]
    # bubblewrap passes its own environment on (not --setenv: a command line is readable by every local process).
    return Launch(argv, inside, "/", (by_fd,) if seccomp is None else (seccomp, by_fd))


def visible_paths(command: Sequence[str], env: Mapping[str, str], cwd: str, extra: Sequence[str] = ()) -> list[str]:
    """The host paths `command` needs to see (see the module's docstring), outermost first, none twice."""
    found: list[str] = []
    program = shutil.which(command[0], path=env.get("PATH")) or command[0]
    program = os.path.abspath(os.path.join(cwd, program))
    real = os.path.realpath(program)
    found += [real, _above_bin(real), _above_bin(program)]
    for home in {_above_bin(real), _above_bin(program)}:
        found += _python_links(home)
    found += [os.path.abspath(os.path.join(cwd, p)) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for argument in command[1:]:
        if argument.startswith("/") and os.path.exists(argument):
            found.append(argument if os.path.isdir(argument) else os.path.dirname(argument))
    found += [os.path.abspath(cwd), *extra]
    return _outermost([os.path.normpath(p) for p in found if p and os.path.exists(p)])


def _enterable(directory: str) -> bool:
    """Whether uid 65534 may enter `directory` itself (its ancestors are opened where needed): when the server is
    root, a working directory of mode 0700 (a `mkdtemp`) is not, and the process then starts in its `/tmp`."""
    if os.geteuid() != 0:
        return True
    try:
        info = os.stat(directory)
    except OSError:
        return False
    return bool(info.st_mode & stat.S_IXOTH) or info.st_uid == AGENT_ID


def _above_bin(program: str) -> str:
    """The installation or virtual environment a program belongs to: the directory above its `bin/`."""
    directory = os.path.dirname(program)
    return os.path.dirname(directory) if os.path.basename(directory) in ("bin", "Scripts") else directory


_MAPPING = re.compile(r"^MAPPING\s*(?::[^=]*)?=\s*(\{.*\})\s*$", re.MULTILINE)


def _python_links(home: str) -> list[str]:
    """Where a virtual environment's `.pth` files point: their directory lines, and the package directories of
    setuptools' editable installs (`__editable___*_finder.py`'s MAPPING)."""
    if home in ("/", "/usr") or not os.path.isdir(os.path.join(home, "lib")):
        return []
    found: list[str] = []
    for site in Path(home, "lib").glob("python3*/site-packages"):
        for pth in site.glob("*.pth"):
            try:
                lines = pth.read_text(errors="replace").splitlines()
            except OSError:
                continue
            found += [line.strip() for line in lines if line.strip().startswith("/")]
        for finder in site.glob("__editable__*finder.py"):
            try:
                match = _MAPPING.search(finder.read_text(errors="replace"))
                mapping = ast.literal_eval(match.group(1)) if match else {}
            except (OSError, ValueError, SyntaxError):
                continue
            found += [str(path) for path in mapping.values() if isinstance(path, str)]
    return found


def _outermost(paths: list[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if path in ("/", "/usr") or path.startswith("/usr/") or path == "/proc" or path.startswith("/proc/"):
            continue
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _binds(paths: Sequence[str], hidden: Sequence[str]) -> list[str]:
    """bubblewrap arguments showing `paths` read-only, without `hidden`."""
    hidden_real = {os.path.realpath(h) for h in hidden}
    args: list[str] = []
    for path in paths:
        args += ["--ro-bind", path, path]
        for parent in sorted({os.path.dirname(h) for h in hidden_real}):
            if parent == path or parent.startswith(path.rstrip("/") + "/"):
                args += _without(parent, hidden_real)
    return args


def _without(directory: str, hidden: set[str]) -> list[str]:
    """Show `directory` entry by entry, leaving out `hidden` (an empty tmpfs in its place, then read-only)."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    shown = [e for e in entries if os.path.join(directory, e) not in hidden]
    if len(shown) == len(entries) and not _may_appear(directory, hidden):
        return []
    args = ["--perms", "0755", "--tmpfs", directory]
    if len(shown) <= MAX_ENTRIES:
        for entry in shown:
            args += ["--ro-bind", os.path.join(directory, entry), os.path.join(directory, entry)]
    else:
        logger.warning("%s has more than %d entries: sandboxed processes see it empty", directory, MAX_ENTRIES)
    return [*args, "--remount-ro", directory]


def _may_appear(directory: str, hidden: set[str]) -> bool:
    """A hidden file belongs in `directory`, whether or not it exists yet (a WAL appears with the first write)."""
    return any(os.path.dirname(h) == directory for h in hidden)


def kill(pid: int) -> None:
    """End the process `pid` started (its group) and everything in its sandbox, at once. Under bubblewrap the
    sandbox's init is killed, not bubblewrap: the kernel then kills every process of the pid namespace and the
    init exits only once they are gone, and bubblewrap exits after it; so once `pid` is reaped, nothing of the
    sandbox runs (killing bubblewrap first would leave the namespace to die a moment later)."""
    inits = _sandbox_inits(pid)
    for init in inits:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(init, signal.SIGKILL)
    if not inits:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _sandbox_inits(pid: int) -> list[int]:
    """The children of `pid` when it is bubblewrap (the init of its pid namespace), else none."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "bwrap":
            return []
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(child) for child in children]


@functools.cache
def warn_unconfined() -> None:
    logger.warning(
        "%s=none: host processes and stdio tool servers run WITHOUT a sandbox: they see this machine's files and "
        "processes as uid %d (or as the server's user, when it is not root) does",
        SANDBOX_ENV,
        AGENT_ID,
    )
