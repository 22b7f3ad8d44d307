"""podman, as the server runs it: its own configuration and storage, and labels naming the server that owns a container.

Two settings make podman work on hosts like the one this project is developed on (Debian 12, cgroups v1 in hybrid
mode, root without CAP_SYS_RESOURCE): the `runc` runtime (crun refuses the hybrid cgroup layout) and explicit
default ulimits (podman's defaults exceed the hard limit, and raising it needs CAP_SYS_RESOURCE). They are written
to a `containers.conf` under the server's container directory and named by `CONTAINERS_CONF` for every podman
command; a `storage.conf` named by `CONTAINERS_STORAGE_CONF` keeps the images and containers under that directory
too, apart from the machine's own (`/var/lib/containers`).

Every container the server starts carries `OWNER_LABEL` = this process's pid and start time; `sweep_orphans` removes,
at a server's start, the containers whose owner is no longer running (a server killed with SIGKILL leaves them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

from ors_server.sandboxes.owners import owner_alive

logger = logging.getLogger("ors_server.harbor")

HARBOR_LABEL = "ors-server.harbor"
"""Set on every container of a Harbor task (its value: the environment and the task)."""
OWNER_LABEL = "ors-server.owner"
"""The pid and start time of the server process that started the container."""
DIR_VARIABLE = "ORS_HARBOR_DIR"
"""The server's environment variable naming the container directory when `--harbor-dir` does not."""


def default_dir() -> Path:
    """Where images, containers and the base image's build live by default: kept across restarts."""
    configured = os.environ.get(DIR_VARIABLE)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ors-server" / "harbor"


class PodmanError(RuntimeError):
    """A podman command failed; the message is its last line of stderr."""


class Podman:
    """The podman command line with the server's configuration (see the module's docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.executable = shutil.which("podman") or "podman"
        self.environment = self._configure()

    def _configure(self) -> dict[str, str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        files = hard if hard != resource.RLIM_INFINITY else 1024 * 1024
        processes = 32768
        conf = self.directory / "containers.conf"
        _write_if_changed(
            conf,
            "[containers]\n"
            f'default_ulimits = ["nofile={files}:{files}", "nproc={processes}:{processes}"]\n'
            "[engine]\n"
            'runtime = "runc"\n',
        )
        # The run root holds state that a reboot must clear (podman checks for that): under /run where possible.
        tag = hashlib.sha256(str(self.directory.resolve()).encode()).hexdigest()[:12]
        runroot = Path("/run") / f"ors-harbor-{tag}" if os.access("/run", os.W_OK) else self.directory / "run"
        storage = self.directory / "storage.conf"
        _write_if_changed(
            storage,
            f'[storage]\ndriver = "overlay"\ngraphroot = "{self.directory / "storage"}"\nrunroot = "{runroot}"\n',
        )
        return {
            "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "CONTAINERS_CONF": str(conf),
            "CONTAINERS_STORAGE_CONF": str(storage),
        }

    def argv(self, *args: str) -> list[str]:
        return [self.executable, *args]

    async def run(self, *args: str, within: float = 120.0) -> str:
        """Run `podman ARGS` and return its stdout; PodmanError with its last stderr line when it fails."""
        code, out, err = await self.call(list(args), within=within)
        if code != 0:
            lines = err.strip().splitlines()
            raise PodmanError(lines[-1] if lines else f"podman {args[0]} exited with status {code}")
        return out

    async def call(
        self, args: list[str], *, within: float, merge: bool = False, env: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        """Run `podman ARGS`: (exit status, stdout, stderr); TimeoutError (podman killed) after `within` seconds."""
        code, out, err, _ = await self.call_bytes(args, within=within, merge=merge, env=env)
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    async def call_bytes(
        self,
        args: list[str],
        *,
        within: float,
        merge: bool = False,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        max_output: int | None = None,
    ) -> tuple[int, bytes, bytes, bool]:
        """`call` with bytes: stdin given, each stream cut to `max_output` bytes (and whether one was cut).

        Output goes to files, not pipes: `podman run --detach` leaves conmon behind holding what it inherited, and a
        reader waiting for a pipe's end would wait for the container's."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
            if stdin is not None:
                given.write(stdin)
                given.seek(0)
            process = await anyio.open_process(
                self.argv(*args),
                stdin=given if stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=out if merge else err,
                env={**self.environment, **(env or {})},
            )
            try:
                with anyio.fail_after(within):
                    code = await process.wait()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    process.kill()
                    await process.wait()
                raise
            kept = []
            cut = False
            for file in (out, err):
                file.seek(0)
                data = file.read() if max_output is None else file.read(max_output + 1)
                if max_output is not None and len(data) > max_output:
                    data, cut = data[:max_output], True
                kept.append(data)
            return code, kept[0], kept[1], cut

    def run_sync(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=timeout, check=False, env=self.environment
        )

    async def image_exists(self, image: str) -> bool:
        code, _, _ = await self.call(["image", "exists", image], within=60)
        return code == 0

    async def remove(self, containers: Sequence[str]) -> None:
        """Remove containers at once (their processes killed), whatever state they are in; never raises."""
        if not containers:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.run("rm", "--force", "--time", "0", "--ignore", *containers, within=120)
            except (PodmanError, TimeoutError, OSError) as exc:
                logger.warning("could not remove containers %s: %s", " ".join(containers), exc)

    def owned(self, owner: str | None = None) -> list[tuple[str, str]]:
        """(container id, owner) of the Harbor containers in this storage, of `owner` only if given."""
        label = f"{OWNER_LABEL}={owner}" if owner else HARBOR_LABEL
        done = self.run_sync("ps", "--all", "--filter", f"label={label}", "--format", "json", timeout=60)
        if done.returncode != 0:
            return []
        return [
            (entry["Id"], entry.get("Labels", {}).get(OWNER_LABEL, "")) for entry in json.loads(done.stdout or "[]")
        ]

    def sweep_orphans(self) -> int:
        """Remove the containers whose server is gone; returns how many. Never one of a live server."""
        orphans = [cid for cid, owner in self.owned() if not owner_alive(owner)]
        if orphans:
            done = self.run_sync("rm", "--force", "--time", "0", "--ignore", *orphans, timeout=300)
            if done.returncode != 0:
                logger.warning("could not remove containers left by servers that are gone: %s", done.stderr.strip())
                return 0
            logger.info("removed %d Harbor task containers left behind by servers that are gone", len(orphans))
        return len(orphans)


def _write_if_changed(path: Path, text: str) -> None:
    # Several processes of one deployment share the directory: write atomically, only when it differs.
    if path.exists() and path.read_text() == text:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    os.replace(temporary, path)
