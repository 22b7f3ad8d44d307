"""How a CodeAct step's process is started: under bubblewrap (the default), or bare when the operator opts out.

Under bwrap the step runs in a sandbox built by `ors_server.sandboxes.bubblewrap` (the one builder shared with the shell
environment; its docstring says what every sandbox gets): as uid/gid 65534, also outside its namespaces when the
server is root; no network at all; a read-only root that holds only `/usr` (with the host's `/bin`, `/lib`...
links) and the Python installation; its own read-only `/proc`, a read-only `/dev`, and a small private tmpfs
`/tmp` (the working directory, `Limits.tmp_bytes`). Nothing of the server is there: not its code, its
virtualenv, `/etc`, `/root`, `/home`, the host's `/tmp`, nor its environment variables. CodeAct's seccomp filter
also refuses new processes (fork, vfork, clone without CLONE_THREAD): `os.system` and `subprocess` fail, a fork
bomb cannot start, and threads still work (up to `Limits.processes`). `--die-with-parent` and the parent's kill of
the process group end everything in the sandbox's pid namespace at once.

The interpreter is the server's own when uid 65534 can read it, else the system's `/usr/bin/python3.X` (or
`python3`): the step's program uses the standard library only. `bwrap_problem()` finds out which runs.

`ORS_CODEACT_SANDBOX=none` runs the step as a bare child process: a clean environment, a private temporary
working directory and the same rlimits, but the process sees the host's files and network as the server's
user does. It exists for machines without bubblewrap, and the server says so loudly at startup.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Literal

from ors_server.sandboxes.bubblewrap import as_agent, bwrap_argv, optional_flags, options_by_fd, root_dirs

SandboxMode = Literal["bwrap", "none"]
SANDBOX_ENV = "ORS_CODEACT_SANDBOX"


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


_chosen: dict[str, str] = {}
"""The interpreter `bwrap_problem()` found to run in the sandbox ('python')."""


@functools.cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot start a step here, or None when it can. Runs it once, with the steps' own flags,
    for each interpreter it may use (see the module's docstring) and keeps the first that runs: bwrap can be
    installed and still be refused by the kernel (no unprivileged user namespaces, seccomp)."""
    _chosen.clear()
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    problem = "no Python interpreter runs in the sandbox"
    for python in python_candidates():
        with tempfile.TemporaryDirectory() as workdir:
            started = launch("bwrap", "pass", workdir, None, python=python)
            try:
                done = subprocess.run(
                    started.argv,
                    env=started.env,
                    cwd=started.cwd,
                    capture_output=True,
                    timeout=30,
                    check=False,
                    pass_fds=started.pass_fds,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"bwrap did not run: {exc}"
            finally:
                started.close()
        if done.returncode == 0:
            _chosen["python"] = python
            return None
        problem = f"bwrap exited with {done.returncode}: {done.stderr.decode(errors='replace').strip()[:300]}"
    return problem


def python_executable() -> str:
    """The real interpreter (not a virtualenv's link to it)."""
    return os.path.realpath(sys.executable)


def python_candidates() -> list[str]:
    """The server's interpreter, then the system's of the same version, then the system's python3."""
    system = [f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}", "/usr/bin/python3"]
    found = [python_executable(), *[p for p in system if os.path.exists(p)]]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Launch:
    """The command and environment that start one step's process, and the fds it must inherit; `close()` the
    fds it owns (bubblewrap's options) once it has started."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    pass_fds: tuple[int, ...] = ()
    owned_fds: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.owned_fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _python_binds(python: str) -> list[str]:
    if python == python_executable():
        roots = {os.path.realpath(sys.base_prefix), os.path.dirname(python)}
    else:
        roots = {os.path.dirname(python)}
    # /usr is bound whole
    return [root for root in sorted(roots) if not (root == "/usr" or root.startswith("/usr/"))]


def launch(
    mode: SandboxMode,
    program: str,
    workdir: str,
    seccomp_fd: int | None,
    *,
    tmp_bytes: int = 16 * 1024 * 1024,
    python: str | None = None,
) -> Launch:
    """How to start `python -c program` in `mode`; `workdir` is the bare mode's working directory."""
    python = python or _chosen.get("python") or python_executable()
    command = [python, "-I", "-S", "-B", "-c", program]
    clean_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "PYTHONIOENCODING": "utf-8"}
    if mode == "none":
        return Launch(command, {**clean_env, "HOME": workdir, "TMPDIR": workdir}, workdir)
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bwrap is not installed (apt-get install bubblewrap)")
    argv, options = options_by_fd(
        bwrap_argv(
            command,
            read_only=root_dirs(*_python_binds(python)),
            tmp_bytes=tmp_bytes,
            chdir="/tmp",
            env=clean_env,
            seccomp_fd=seccomp_fd,
            flags=optional_flags(),
        )
    )
    fds = (options,) if seccomp_fd is None else (seccomp_fd, options)
    return Launch(as_agent(argv), {"PATH": "/usr/bin:/bin"}, "/", fds, owned_fds=(options,))
