"""How a CodeAct step's process is started: under bubblewrap (the default), or bare when the operator opts out.

Under bwrap the step runs as uid/gid 65534 (nobody) in fresh user, pid, network, ipc, uts and cgroup
namespaces (no network at all: only a loopback nobody listens on), on a root that holds only what Python
needs, read-only: `/usr` (with the host's `/bin`, `/lib`... links), the Python installation, a private
`/proc` and minimal `/dev`, and a small private tmpfs for `/tmp` (the working directory). Nothing of the
server is there: not its code, its virtualenv, `/etc`, `/root`, `/home`, the host's `/tmp`, nor its
environment variables (bwrap itself is started with an empty environment). A seccomp filter refuses new
processes (fork, vfork, clone without CLONE_THREAD): `os.system` and `subprocess` fail, a fork bomb cannot
start, and threads still work. `--die-with-parent` and the parent's kill of the process group end
everything in the sandbox's pid namespace at once.

`ORS_CODEACT_SANDBOX=none` runs the step as a bare child process: a clean environment, a private temporary
working directory and the same rlimits, but the process sees the host's files and network as the server's
user does. It exists for machines without bubblewrap, and the server says so loudly at startup.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Literal

SandboxMode = Literal["bwrap", "none"]
SANDBOX_ENV = "ORS_CODEACT_SANDBOX"
NOBODY = "65534"
TMP_BYTES = 16 * 1024 * 1024


class SandboxUnavailable(RuntimeError):
    """The configured sandbox cannot be used on this machine."""


def sandbox_mode(value: str | None = None) -> SandboxMode:
    """The sandbox the operator chose (`ORS_CODEACT_SANDBOX`): 'bwrap' unless set to 'none'."""
    value = value if value is not None else os.environ.get(SANDBOX_ENV, "")
    value = value.strip().lower() or "bwrap"
    if value not in ("bwrap", "none"):
        raise SandboxUnavailable(f"{SANDBOX_ENV} must be 'bwrap' or 'none', got {value!r}")
    return value  # type: ignore[return-value]


def check_sandbox(mode: SandboxMode) -> None:
    """Raise SandboxUnavailable with what to do when `mode` cannot run here."""
    problem = bwrap_problem() if mode == "bwrap" else None
    if problem is not None:
        raise SandboxUnavailable(
            f"CodeAct runs agent code under bubblewrap, which cannot run here: {problem}. "
            f"To run agent code without a sandbox anyway, set {SANDBOX_ENV}=none."
        )


@functools.cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot start a step here, or None when it can. Runs it once, with the steps' own flags:
    bwrap can be installed and still be refused by the kernel (no unprivileged user namespaces, seccomp)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory() as workdir:
        started = launch("bwrap", "pass", workdir, None)
        try:
            done = subprocess.run(
                started.argv, env=started.env, cwd=started.cwd, capture_output=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap did not run: {exc}"
    if done.returncode != 0:
        return f"bwrap exited with {done.returncode}: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def python_executable() -> str:
    """The real interpreter (not a virtualenv's link to it): the sandbox binds its installation only."""
    return os.path.realpath(sys.executable)


# A classic BPF program for seccomp: deny process creation, allow everything else (threads included).
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_ARCHES = {  # audit arch, clone, clone3, other process-creating calls
    "x86_64": (0xC000003E, 56, 435, (57, 58)),  # fork, vfork
    "aarch64": (0xC00000B7, 220, 435, ()),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def no_fork_filter() -> bytes | None:
    """The seccomp program bwrap loads before exec, or None on an architecture we have no numbers for."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit_arch, clone, clone3, forks = arch
    errno = 0x00050000
    program = [
        _insn(_LD_W_ABS, 4),  # seccomp_data.arch
        _insn(_JEQ, audit_arch, jt=1),
        _insn(_RET, _KILL),
        _insn(_LD_W_ABS, 0),  # seccomp_data.nr
        _insn(_JGE, 0x40000000, jf=1),  # the x32 ABI on x86_64
        _insn(_RET, _KILL),
        # clone3 hides its flags behind a pointer: ENOSYS makes libc fall back to clone, whose flags we see.
        _insn(_JEQ, clone3, jf=1),
        _insn(_RET, errno | _ENOSYS),
    ]
    for number in forks:
        program += [_insn(_JEQ, number, jf=1), _insn(_RET, errno | _EPERM)]
    program += [
        _insn(_JEQ, clone, jf=4),
        _insn(_LD_W_ABS, 16),  # low half of args[0]: the clone flags
        _insn(_JSET, _CLONE_THREAD, jf=1),
        _insn(_RET, _ALLOW),
        _insn(_RET, errno | _EPERM),
        _insn(_RET, _ALLOW),
    ]
    return b"".join(program)


@dataclass(frozen=True)
class Launch:
    """The command and environment that start one step's process, and the fds it must inherit."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    pass_fds: tuple[int, ...] = ()


def _root_links() -> list[str]:
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _python_binds(python: str) -> list[str]:
    roots = {os.path.realpath(sys.base_prefix), os.path.dirname(python)}
    args: list[str] = []
    for root in sorted(roots):
        if root == "/usr" or root.startswith("/usr/"):
            continue  # /usr is bound whole
        args += ["--ro-bind", root, root]
    return args


def launch(mode: SandboxMode, program: str, workdir: str, seccomp_fd: int | None) -> Launch:
    """How to start `python -c program` in `mode`; `workdir` is the bare mode's working directory."""
    python = python_executable()
    command = [python, "-I", "-S", "-B", "-c", program]
    clean_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "PYTHONIOENCODING": "utf-8"}
    if mode == "none":
        return Launch(command, {**clean_env, "HOME": workdir, "TMPDIR": workdir}, workdir)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bwrap is not installed (apt-get install bubblewrap)")
    argv = [
        bwrap,
        *("--unshare-all", "--unshare-user", "--uid", NOBODY, "--gid", NOBODY, "--disable-userns"),
        *("--die-with-parent", "--new-session", "--cap-drop", "ALL"),
        *("--ro-bind", "/usr", "/usr", *_root_links(), *_python_binds(python)),
        *("--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--chdir", "/tmp"),
        "--clearenv",
        *[arg for key, value in clean_env.items() for arg in ("--setenv", key, value)],
    ]
    fds: tuple[int, ...] = ()
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
        fds = (seccomp_fd,)
    return Launch([*argv, "--", *command], {"PATH": "/usr/bin:/bin"}, "/", fds)
