"""One container of a Harbor task, and the persistent shell an episode drives inside it.

Who runs what. The container's processes run as the image's user (root for most tasks) inside a user namespace of
their own: uid and gid 0..65535 inside are `ID_BASE`.. on the host, so a task's root is not the host's root, and
owns nothing of the host. Nothing of the host is mounted in but its init program (read-only); the container has its
own pid, mount, IPC and UTS namespaces, and no network (`--network none`) unless the task says `allow_internet =
true` and the server was started with `--harbor-internet`. Its CPUs, memory and processes are bounded by its cgroup
(`cpus`, `memory_mb` from `task.toml`, else the server's defaults; `PIDS_LIMIT`); `storage_mb` is enforced where the
storage driver can (overlay on XFS with project quotas), and said once in the log where it cannot. The first process
is catatonit in pause mode (`init_program`), which reaps orphans; the agent's shell is a `podman exec -i ... bash`
kept open for the whole episode (`BashDriver`), so a command costs a round trip on a pipe, not a `podman exec`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ors_server.sandboxes.interface import CommandResult, Sandbox, SandboxClosed
from ors_server.sandboxes.owners import owner_id
from ors_server.sandboxes.persistent_shell import BashDriver
from ors_server.sandboxes.podman import HARBOR_LABEL, OWNER_LABEL, Podman, PodmanError

logger = logging.getLogger("ors_server.containers")

ID_BASE = 1_000_000
"""The host uid (and gid) of a container's uid 0; its 65536 ids follow."""
ID_COUNT = 65536
PIDS_LIMIT = 4096
"""Processes and threads one container may run at once."""
KILL_ROUNDS = 20
"""How many times a kill sweep looks again for processes (a command may keep starting some)."""
MARK = "ORS_SANDBOX_RUN"
"""The environment variable that marks a sandbox command's processes (see `Container.kill_marked`)."""
OUTPUT_CAP = 64 * 1024
"""Bytes of a command's stdout (and of its stderr) returned to the agent; the rest is counted."""


@dataclass(frozen=True)
class Limits:
    """What one container may use."""

    cpus: float
    memory_mb: int
    storage_mb: int | None
    network: bool


@functools.cache
def storage_quota(podman: Podman) -> bool:
    """Whether the storage driver can bound a container's disk (`--storage-opt size`): overlay on XFS only."""
    done = podman.run_sync("info", "--format", "{{json .Store.GraphStatus}}", timeout=60)
    try:
        backing = json.loads(done.stdout or "{}").get("Backing Filesystem", "")
    except ValueError:
        backing = ""
    if backing != "xfs":
        logger.warning(
            "Harbor tasks: storage_mb is not enforced: the container storage is overlay on %s, which has no "
            "per-container quota (XFS with project quotas has)",
            backing or "an unknown file system",
        )
    return backing == "xfs"


def run_argv(
    image: str, limits: Limits, labels: Mapping[str, str], env: Mapping[str, str], workdir: str | None
) -> list[str]:
    """`podman run` arguments of a task's container (see the module's docstring)."""
    argv = [
        "run", "--detach", "--rm",
        "--network", "bridge" if limits.network else "none",
        "--uidmap", f"0:{ID_BASE}:{ID_COUNT}", "--gidmap", f"0:{ID_BASE}:{ID_COUNT}",
        "--cpus", f"{limits.cpus:g}",
        "--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m",
        "--pids-limit", str(PIDS_LIMIT),
    ]  # fmt: skip
    if limits.storage_mb is not None:
        argv += ["--storage-opt", f"size={limits.storage_mb}m"]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    if workdir:
        argv += ["--workdir", workdir]
    init = init_program()
    if init is None:
        return [*argv, "--entrypoint", "sleep", image, "infinity"]
    return [*argv, "--volume", f"{init}:{INIT_INSIDE}:ro", "--entrypoint", INIT_INSIDE, image, "-P"]


INIT_INSIDE = "/run/ors-init"
"""Where the container's first process, catatonit, is mounted (read-only) inside it."""


@functools.cache
def init_program() -> str | None:
    """podman's catatonit (a static binary), which the container runs as its first process in pause mode: it runs
    nothing but reaps every orphan (the agent's killed commands' children), so none lingers as a zombie. Without it
    the first process is `sleep infinity`, and a warning says orphans stay zombies until the container goes."""
    for path in ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit", "/usr/libexec/catatonit/catatonit"):
        if os.access(path, os.X_OK):
            return path
    logger.warning("catatonit is not installed: orphans in Harbor task containers stay zombies until they end")
    return None


class Container:
    """A started container of a task's image; `remove()` ends it and everything in it."""

    def __init__(self, podman: Podman, cid: str, workdir: str, init_pid: int) -> None:
        self.podman = podman
        self.id = cid
        self.workdir = workdir
        self.init_pid = init_pid
        self.shell: BashDriver | None = None
        self.removed = False

    @classmethod
    async def start(
        cls,
        podman: Podman,
        image: str,
        limits: Limits,
        *,
        task_label: str,
        env: Mapping[str, str] = {},  # noqa: B006 (read only)
        workdir: str | None = None,
    ) -> Container:
        if limits.storage_mb is not None and not storage_quota(podman):
            limits = Limits(limits.cpus, limits.memory_mb, None, limits.network)
        labels = {HARBOR_LABEL: task_label, OWNER_LABEL: owner_id()}
        # Shielded: a container started must be one we hold, to remove it later.
        with anyio.CancelScope(shield=True):
            cid = (await podman.run(*run_argv(image, limits, labels, env, workdir), within=120)).strip()
            try:
                found = json.loads(await podman.run("container", "inspect", cid, within=60))[0]
            except BaseException:
                await podman.remove([cid])
                raise
        container = cls(podman, cid, found["Config"].get("WorkingDir") or "/", int(found["State"]["Pid"]))
        return container

    async def open_shell(self, command_timeout: float) -> BashDriver:
        """Start the episode's persistent shell in the container's working directory."""

        shell = BashDriver(ContainerShell(self), timeout=command_timeout, output_cap=OUTPUT_CAP)
        try:
            await shell.start()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await shell.close()
            raise
        self.shell = shell
        return shell

    async def copy_in(self, source: Path, destination: str) -> None:
        await self.podman.run("cp", f"{source}/.", f"{self.id}:{destination}", within=120)

    async def exec(self, script: str, *, within: float, env: Mapping[str, str] = {}) -> tuple[int, str]:  # noqa: B006
        """Run `script` with bash in the container (not in the agent's shell); its exit code and output (stdout
        and stderr), or TimeoutError after `within` seconds (what it started runs on until the container is removed)."""
        options = [f"--env={key}={value}" for key, value in env.items()]
        code, output, _ = await self.podman.call(
            ["exec", *options, self.id, "bash", "-c", script], within=within, merge=True
        )
        return code, output

    def _namespace(self) -> str | None:
        try:
            return os.readlink(f"/proc/{self.init_pid}/ns/pid")
        except OSError:
            return None

    def processes(self) -> Iterator[tuple[int, int]]:
        """(host pid, pid inside) of the container's processes but its first (its init), read from the
        host's /proc (the server must be root to read them)."""
        namespace = self._namespace()
        if namespace is None:
            return
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") != namespace:
                    continue
                with open(f"/proc/{pid}/status") as file:
                    inner = next((int(line.split()[-1]) for line in file if line.startswith("NSpid:")), None)
            except (OSError, ValueError):
                continue
            if inner is not None and inner != 1:
                yield pid, inner

    def kill_marked(self, token: str) -> None:
        """Kill every process of the container whose environment carries `MARK=token` (what one sandbox command
        started, however it detached), and every process of their sessions."""
        marker = f"{MARK}={token}".encode()
        for _ in range(KILL_ROUNDS):
            marked: set[int] = set()
            sessions: set[str] = set()
            inside = list(self.processes())
            for pid, _inner in inside:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as file:
                        if marker in file.read().split(b"\0"):
                            marked.add(pid)
                            sessions.add(_session(pid))
                except OSError:
                    continue
            marked |= {pid for pid, _inner in inside if _session(pid) in sessions - {""}}
            if not marked:
                return
            for pid in marked:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    async def remove(self) -> None:
        """Close the shell and remove the container; safe to call twice, never raises."""
        with anyio.CancelScope(shield=True):
            if self.shell is not None:
                await self.shell.close()
            if not self.removed:
                self.removed = True
                await self.podman.remove([self.id])


def _session(pid: int) -> str:
    """The process's session id (as the host numbers it), or "" once it has gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[3].decode()
    except (OSError, IndexError):
        return ""


class ContainerShell:
    """The shell's `Confinement` (see `ors_server.sandboxes.persistent_shell`): bash started by `podman exec -i`,
    its processes found in the container's pid namespace on the host (the server must be root to see them)."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.workdir = container.workdir

    def command(self) -> tuple[list[str], dict[str, Any]]:
        container = self.container
        argv = container.podman.argv(
            "exec", "--interactive", "--workdir", self.workdir, container.id, "bash", "--noprofile", "--norc"
        )
        return argv, {"env": container.podman.environment, "start_new_session": True}

    def find_processes(self, launcher: int, shell: int) -> tuple[int | None, list[int]]:
        found: int | None = None
        others = []
        for pid, inner in self.container.processes():
            if inner == shell:
                found = pid
            else:
                others.append(pid)
        return found, others

    def kill_all(self, launcher: int) -> None:
        for pid in [launcher, *(pid for pid, _ in self.container.processes())]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class ContainerSandbox(Sandbox):
    """A task's container as toolsets see it (`Sandbox`): each `run` is a fresh `bash -c` started by `podman exec`
    as the image's user, beside the agent's persistent shell, in the same file system.

    Its time limit is kept inside the container by coreutils' `timeout` (TERM, then KILL two seconds later; exit
    status 124), and outside by killing the `podman exec` client a few seconds after that; when it ends, every
    process it started is killed (they carry a mark in their environment: `Container.kill_marked`). Its output is
    spooled to files on the host and each stream cut to `max_output`. `close()` only refuses further commands: the
    container is its episode's, removed at teardown."""

    KILL_AFTER = 2.0

    def __init__(self, container: Container) -> None:
        self.container = container
        self.workdir = container.workdir

    @property
    def closed(self) -> bool:
        return self._closed or self.container.removed

    async def _run(
        self, command: str, time_limit: float, stdin: bytes | None, cwd: str, max_output: int
    ) -> CommandResult:
        container = self.container
        token = uuid.uuid4().hex
        argv = ["exec", "--interactive", "--workdir", cwd]
        argv += ["--env", f"{MARK}={token}", container.id]
        argv += ["timeout", f"--kill-after={self.KILL_AFTER:g}", f"{time_limit:g}", "bash", "-c", command]
        try:
            code, out, err, cut = await container.podman.call_bytes(
                argv, within=time_limit + self.KILL_AFTER + 10, stdin=stdin or b"", max_output=max_output
            )
        except TimeoutError:
            code, out, err, cut = 124, b"", b"", False
        finally:
            # Nothing a command started outlives it (`timeout` signals its process group only).
            await anyio.to_thread.run_sync(container.kill_marked, token)
        if container.removed:
            raise SandboxClosed("the sandbox was closed while the command ran")
        return CommandResult(exit_code=code, stdout=out, stderr=err, truncated=cut, timed_out=code in (124, 137))


__all__ = ["Container", "ContainerSandbox", "ContainerShell", "Limits", "PodmanError"]
