"""The one builder of the sandboxes agent code runs in: CodeAct steps (`codeact/`), shell sessions (`shell`), and
the processes of environments' own code, host processes and stdio tool servers (`confinement.py`).

All run their process under bubblewrap with the same hardening, built here and nowhere else (host processes and
tool servers keep the host's network, and may start processes):

- Who. Every sandbox runs as uid/gid 65534 (nobody) inside fresh user, pid, network, IPC, UTS and cgroup
  namespaces. When the server runs as root, bubblewrap itself is started as 65534 (`spawn_ids`), so the agent is
  not root outside its namespace either: files owned by root, `/proc/sys` among them, stay out of its reach.
- What it sees. `/proc` is the sandbox's own and read-only (nothing under `/proc/sys`, `/proc/sysrq-trigger` or
  `/proc/1/mem` can be written); `/dev` is minimal and read-only (its device nodes still work); the root is an
  empty read-only tmpfs holding only the read-only binds a sandbox asks for; `/tmp` is a private tmpfs of a
  fixed size. Nothing is writable but that `/tmp` and the binds a sandbox makes writable (the shell's `/work`).
  bubblewrap reads its options from a file descriptor (`options_by_fd`), so its init, pid 1 of the sandbox, shows
  no host path on its command line (`/proc/1/cmdline`, `ps`).
- What it may do. No capabilities, `no_new_privs` (bubblewrap sets it, and loads the filter below), and a
  seccomp filter that refuses `ptrace` and the calls that reach another process's memory (`process_vm_readv`,
  `process_vm_writev`, `pidfd_getfd`), so the sandbox's pid 1 (bubblewrap's init, which runs without the filter)
  cannot be taken over from inside; CodeAct's filter also refuses new processes.
- How much. rlimits, set inside the sandbox's user namespace (`Resources`): memory (address space) per process,
  processes and threads, size of one written file, open files. RLIMIT_NPROC is counted per user namespace and uid
  (Linux 5.14+); every sandbox has a user namespace of its own, so one sandbox's processes never count against
  another's budget, although all run as 65534. The limit is set inside the namespace, never on the bubblewrap
  process that creates it, so the host-wide count of uid 65534 stays capped only by the server's own limit.
  cgroups are not used (a sandbox's memory is bounded per process, times its process limit); `ENFORCEMENT`
  says so in the server's log at startup.

Per-session scratch directories on the host (`private_dir`) carry their server's pid and start time in their
name; `sweep_orphans` removes, at startup, those whose server is gone (a worker killed with SIGKILL leaves them),
and never one of a live server, however many share `/tmp`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import platform
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ors_server.sandboxes.owners import owner_alive, owner_id

logger = logging.getLogger("ors_server.sandbox")

AGENT_ID = 65534
"""The uid and gid agent code runs as (nobody / nogroup)."""
ENFORCEMENT = "rlimits (per process; processes counted per sandbox) and fixed-size tmpfs; no cgroups"
"""What enforces the sandboxes' resource limits on this server, as logged at startup."""


@dataclass(frozen=True)
class Resources:
    """What one sandbox may use, enforced by rlimits set inside it (see the module's docstring)."""

    memory_bytes: int
    """Address space of each process (RLIMIT_AS)."""
    processes: int
    """Processes and threads alive at once in the sandbox, its init included (RLIMIT_NPROC)."""
    tmp_bytes: int
    """Size of the sandbox's `/tmp`, and of a writable working directory where the server can mount a tmpfs for it
    (`mount_tmpfs`: a root server); tmpfs, so this is memory too."""
    file_bytes: int
    """Largest file a process may write (RLIMIT_FSIZE)."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""

    def rlimits(self) -> dict[str, int]:
        """The rlimits by `resource` name, for a process inside the sandbox to set on itself."""
        return {
            "RLIMIT_AS": self.memory_bytes,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_FSIZE": self.file_bytes,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }

    def ulimit(self) -> str:
        """The same rlimits as a bash `ulimit` command line (bash counts -v in KiB and -f in 1024-byte blocks)."""
        return (
            f"ulimit -H -S -v {self.memory_bytes // 1024} -u {self.processes} -f {self.file_bytes // 1024} "
            f"-n {self.open_files} -c 0"
        )


# Who runs it.


def spawn_ids() -> dict[str, Any]:
    """`subprocess` options that start bubblewrap as 65534 when the server is root (else as the server's user)."""
    if os.geteuid() != 0:
        return {}
    return {"user": AGENT_ID, "group": AGENT_ID, "extra_groups": []}


_DROP = "import os, sys; os.setgroups([]); os.setgid({id}); os.setuid({id}); os.execv(sys.argv[1], sys.argv[1:])"


@functools.cache
def _setpriv() -> str | None:
    """util-linux's `setpriv`, looked up where the system keeps it (not on the server's PATH). Only util-linux's:
    its `--reuid`/`--regid` set the saved ids too, which other implementations (busybox's) may not promise."""
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        return None
    try:
        version = subprocess.run([setpriv, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return setpriv if "util-linux" in version.stdout else None


def as_agent(argv: list[str]) -> list[str]:
    """`argv`, started as 65534 when the server is root: for event loops whose subprocesses cannot change user
    (uvloop), and for `subprocess`, which forks (rather than vforks) to change user, a prefix drops every id (real,
    effective, saved; groups) and execs it (same pid, so `--die-with-parent` still holds). The prefix is `setpriv`
    where installed, else a short Python program (an interpreter start more per sandbox: tens of ms of CPU)."""
    if os.geteuid() != 0:
        return argv
    setpriv = _setpriv()
    if setpriv is not None:
        return [setpriv, f"--reuid={AGENT_ID}", f"--regid={AGENT_ID}", "--clear-groups", "--", *argv]
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", _DROP.format(id=AGENT_ID), *argv]


# The bubblewrap command line.


def root_links(paths: Sequence[str]) -> list[str]:
    """Binds `paths` read-only at the same place; a symlink (`/bin` -> `usr/bin`) is recreated as one."""
    args: list[str] = []
    for path in paths:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


@functools.cache
def optional_flags() -> tuple[str, ...]:
    """Hardening flags this bubblewrap and kernel accept: `--disable-userns` (bubblewrap 0.8) keeps the agent from
    making user namespaces of its own; without it the sandbox is still whole."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ()
    argv = bwrap_argv(["/usr/bin/true"], read_only=root_dirs(), tmp_bytes=1024 * 1024, chdir="/", env={})
    with_flag = [argv[0], "--disable-userns", *argv[1:]]
    try:
        done = subprocess.run(with_flag, capture_output=True, timeout=30, check=False, **spawn_ids())
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--disable-userns",) if done.returncode == 0 else ()


SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def root_dirs(*extra: str) -> list[str]:
    """`/usr`, the `/bin`, `/lib`... links into it, then `extra`: the least a sandbox shows of the host."""
    return ["/usr", *SYSTEM_LINKS, *extra]


def bwrap_argv(
    command: Sequence[str],
    *,
    read_only: Sequence[str],
    tmp_bytes: int,
    chdir: str,
    env: Mapping[str, str] | None,
    writable: Sequence[tuple[str, str]] = (),
    seccomp_fd: int | None = None,
    flags: Sequence[str] = (),
    share_net: bool = False,
    more: Sequence[str] = (),
) -> list[str]:
    """The bubblewrap command that runs `command` with the hardening of the module's docstring.

    `read_only`: host paths shown at the same place (see `root_links`); `writable`: (host path, path inside)
    binds the sandbox may write; `flags`: more bubblewrap flags (`optional_flags()`); `env`: the command's whole
    environment, or None for bubblewrap's own (what it was started with); `share_net`: keep the host's network
    (processes of an environment's own code, `ors_server.sandboxes.confinement`); `more`: mount arguments applied after
    `/tmp` and the writable binds (read-only binds by fd, which may lie under `/tmp`)."""
    bwrap = shutil.which("bwrap") or "bwrap"
    argv = [
        bwrap,
        *("--unshare-all", "--unshare-user", "--uid", str(AGENT_ID), "--gid", str(AGENT_ID)),
        *(("--share-net",) if share_net else ()),
        *("--die-with-parent", "--new-session", "--cap-drop", "ALL", *flags),
        *root_links(read_only),
        *("--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp"),
    ]
    for host, inside in writable:
        argv += ["--bind", host, inside]
    argv += more
    # Last, once every mount point exists: these remounts are not recursive, so /tmp and the writable binds stay so.
    argv += ["--remount-ro", "/proc", "--remount-ro", "/dev", "--remount-ro", "/"]
    argv += ["--chdir", chdir]
    if env is not None:
        argv.append("--clearenv")
        for key, value in env.items():
            argv += ["--setenv", key, value]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return [*argv, "--", *command]


def options_by_fd(argv: Sequence[str]) -> tuple[list[str], int]:
    """`argv` (a `bwrap_argv` command line) as `bwrap --args FD -- COMMAND...`, bubblewrap's options moved into a
    new memfd that it reads at its start (the command must stay on the command line). bubblewrap's command line is
    readable by every process of its sandbox (its init is pid 1 there: `/proc/1/cmdline`, `ps`), and its options
    name host paths (the session's directory, the interpreter's installation, ...), which the agent's code must
    not learn. The caller passes the fd to bubblewrap (`pass_fds`) and closes it once bubblewrap has started."""
    end = list(argv).index("--")
    fd = os.memfd_create("ors-sandbox-options")
    data = b"".join(os.fsencode(option) + b"\0" for option in argv[1:end])
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return [argv[0], "--args", str(fd), *argv[end:]], fd


# The seccomp filter: a classic BPF program that bubblewrap loads before it runs the command.

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000


@dataclass(frozen=True)
class _Arch:
    audit: int
    denied: tuple[int, ...]
    """ptrace, process_vm_readv, process_vm_writev, pidfd_getfd: another process's memory."""
    clone: int
    clone3: int
    forks: tuple[int, ...]
    """fork, vfork (where the architecture has them)."""


_ARCHES = {
    "x86_64": _Arch(0xC000003E, (101, 310, 311, 438), 56, 435, (57, 58)),
    "aarch64": _Arch(0xC00000B7, (117, 270, 271, 438), 220, 435, ()),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program(*, no_fork: bool) -> bytes | None:
    """The filter for this machine's architecture, or None on one we have no syscall numbers for. `no_fork` also
    refuses process creation (fork, vfork, clone without CLONE_THREAD); threads still work."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    program = [
        _insn(_LD_W_ABS, 4),  # seccomp_data.arch: another ABI would bring other syscall numbers
        _insn(_JEQ, arch.audit, jt=1),
        _insn(_RET, _KILL),
        _insn(_LD_W_ABS, 0),  # seccomp_data.nr
        _insn(_JGE, 0x40000000, jf=1),  # the x32 ABI on x86_64
        _insn(_RET, _KILL),
    ]
    for number in arch.denied:
        program += [_insn(_JEQ, number, jf=1), _insn(_RET, _ERRNO | _EPERM)]
    if no_fork:
        # clone3 hides its flags behind a pointer: ENOSYS makes libc fall back to clone, whose flags we see.
        program += [_insn(_JEQ, arch.clone3, jf=1), _insn(_RET, _ERRNO | _ENOSYS)]
        for number in arch.forks:
            program += [_insn(_JEQ, number, jf=1), _insn(_RET, _ERRNO | _EPERM)]
        program += [
            _insn(_JEQ, arch.clone, jf=4),  # not clone: on to the final ALLOW
            _insn(_LD_W_ABS, 16),  # low half of args[0]: the clone flags
            _insn(_JSET, _CLONE_THREAD, jf=1),
            _insn(_RET, _ALLOW),
            _insn(_RET, _ERRNO | _EPERM),
        ]
    program.append(_insn(_RET, _ALLOW))
    return b"".join(program)


def seccomp_fd(*, no_fork: bool) -> int | None:
    """A new fd holding the filter, to pass to bubblewrap (`--seccomp`, which reads it once); the caller closes
    it once bubblewrap has started. None where there is no filter for this architecture."""
    program = seccomp_program(no_fork=no_fork)
    if program is None:
        return None
    fd = os.memfd_create("ors-sandbox-seccomp")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# Scratch directories on the host, and the orphans of servers that died.

_OWNED = re.compile(r"ors-(?:shell|codeact)-(\d+\.\d+)-")


def private_dir(kind: str) -> Path:
    """A new private directory under the temporary directory, named for this process (see `sweep_orphans`)."""
    return Path(tempfile.mkdtemp(prefix=f"ors-{kind}-{owner_id()}-"))


def sweep_orphans(where: str | None = None) -> int:
    """At a server's start: log what enforces the sandboxes' limits, and remove the scratch directories of servers
    that are no longer running; returns how many were removed."""
    logger.info("agent sandboxes: limits enforced by %s", ENFORCEMENT)
    root = Path(where or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for path in entries:
        match = _OWNED.match(path.name)
        if match is None or path.is_symlink() or not path.is_dir():
            continue
        if owner_alive(match.group(1)):
            continue
        remove_tree(path)
        removed += not path.exists()
    if removed:
        logger.info("removed %d sandbox directories left behind by servers that are gone", removed)
    return removed


_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_mount_refused: list[str] = []


def mount_tmpfs(path: Path, size: int) -> bool:
    """Mount a tmpfs of `size` bytes, owned by the agent's user, on the directory `path`: a writable directory the
    host can read whose total size is bounded. Root only; False (with one warning) where mounting is refused."""
    if os.geteuid() != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size},mode=0700,uid={AGENT_ID},gid={AGENT_ID}".encode()
    if libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) == 0:
        return True
    if not _mount_refused:
        _mount_refused.append(os.strerror(ctypes.get_errno()))
        logger.warning(
            "cannot mount a tmpfs for sandbox working directories (%s): they are on the host's disk, bounded per "
            "file only",
            _mount_refused[0],
        )
    return False


def _unmount_under(root: Path) -> None:
    """Detach every mount at or under `root` (a working directory's tmpfs), deepest first."""
    if os.geteuid() != 0:
        return
    try:
        with open("/proc/self/mountinfo") as file:
            points = [line.split()[4] for line in file]
    except OSError:
        return
    inside = [p for p in points if p == str(root) or p.startswith(f"{root}/")]
    if inside:
        libc = ctypes.CDLL(None, use_errno=True)
        for point in sorted(inside, key=len, reverse=True):
            libc.umount2(os.fsencode(point), _MNT_DETACH)


def remove_tree(root: Path) -> None:
    """Remove `root`, including directories the agent made read-only and tmpfs mounted inside it."""
    _unmount_under(root)

    def make_writable_and_retry(function: Callable[..., Any], path: str, _exc: Any) -> None:
        # Only ever below `root`: `root` itself may be gone already (another server's sweep got there first), and
        # its parent is the shared temporary directory, whose mode must never change.
        parent = os.path.dirname(path)
        if os.path.commonpath([str(root), parent]) != str(root) or not os.path.lexists(path):
            return
        try:
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            function(path)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=make_writable_and_retry)
    else:
        shutil.rmtree(root, onerror=make_writable_and_retry)


@contextlib.contextmanager
def closing_fd(fd: int | None) -> Iterator[int | None]:
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)
