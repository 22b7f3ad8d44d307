"""A Harbor task's image: built from `environment/Dockerfile` once per content hash, or named by `docker_image`.

Base images without a registry. A Dockerfile's `FROM` (and a `docker_image`) is resolved before the build:
1. an image mapped by `--harbor-image FROM=LOCAL` (matched as written, or without its registry and digest);
2. `debian:bookworm`, `debian:bookworm-slim`, `debian:12` (from any registry, any digest): `DEBIAN_BASE`, a
   Debian base made locally with mmdebstrap from the mirror apt uses, at first need (its progress is logged) or
   ahead of time by `python -m ors_server.harbor base-image`;
3. an image already in the server's storage, or one podman can pull.
An image none of these can give fails its task with one line naming the `FROM` line and the setting.

A built image is tagged with the hash of everything the build reads (the rewritten Dockerfile and every file of the
context), so it is built once and found again after a restart; processes sharing the storage (workers) build it
once between them (a lock file per image).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from ors_server.harbor.tasks import HarborTask
from ors_server.sandboxes.podman import HARBOR_LABEL, Podman, PodmanError

logger = logging.getLogger("ors_server.harbor")

DEBIAN_BASE = "localhost/ors-harbor/debian:bookworm"
"""The Debian 12 base image made locally."""
DEBIAN_NAMES = frozenset({"debian:bookworm", "debian:bookworm-slim", "debian:12", "debian:12-slim"})
"""Names (without registry and digest) that resolve to `DEBIAN_BASE`."""
BASE_BUILD_TIMEOUT = 900.0
FORMAT = "1"
"""Changes when what an image hash covers changes."""
_REGISTRY_PREFIXES = ("docker.io/library/", "docker.io/", "index.docker.io/library/", "public.ecr.aws/docker/library/")


class ImageError(RuntimeError):
    """A task's image cannot be had (one line for the user)."""


def bare_name(reference: str) -> str:
    """`reference` without its digest and the registry prefixes that name Docker Hub's official images."""
    name = reference.split("@", 1)[0]
    for prefix in _REGISTRY_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name.startswith("library/"):
        name = name[len("library/") :]
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def parse_mapping(entries: tuple[str, ...]) -> dict[str, str]:
    """`--harbor-image FROM=LOCAL` values as a mapping; ValueError naming a malformed one."""
    mapping = {}
    for entry in entries:
        source, sep, target = entry.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise ValueError(f"--harbor-image expects FROM=LOCAL, got {entry!r}")
        mapping[source.strip()] = target.strip()
    return mapping


@dataclass(frozen=True)
class FromLine:
    number: int
    image: str
    text: str


def from_lines(dockerfile: str) -> list[FromLine]:
    """The `FROM` lines that name an image (not an earlier stage), with their line numbers."""
    stages: set[str] = set()
    found = []
    for number, line in enumerate(dockerfile.splitlines(), start=1):
        words = line.split()
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        args = [word for word in words[1:] if not word.startswith("--")]
        if not args:
            continue
        image = args[0]
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
        if image.lower() not in stages and "$" not in image:
            found.append(FromLine(number, image, line.strip()))
    return found


def workdir_made(dockerfile: str) -> str:
    """A last instruction for a Dockerfile whose final `WORKDIR` no step runs in: podman would make the directory
    when a container starts, owned by the overflow id under the container's uid map (so root could not write it),
    where a build step makes it in the image, owned by root."""
    last: dict[str, int] = {}
    for number, line in enumerate(re.sub(r"\\\n", " ", dockerfile).splitlines()):
        words = line.split(None, 1)
        if words:
            last[words[0].upper()] = number
    steps = max((last.get(word, -1) for word in ("RUN", "COPY", "ADD")), default=-1)
    return "RUN true\n" if last.get("WORKDIR", -1) > steps else ""


class Images:
    """Every task's image, in one storage (see the module's docstring)."""

    def __init__(self, podman: Podman, mapping: Mapping[str, str]) -> None:
        self.podman = podman
        self.mapping = dict(mapping)
        self._locks: dict[str, anyio.Lock] = {}

    @asynccontextmanager
    async def _exclusive(self, key: str) -> AsyncIterator[None]:
        """One build of `key` at a time, in this process and among processes sharing the storage."""
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:
            directory = self.podman.directory / "locks"
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.lock", os.O_RDWR | os.O_CREAT)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await anyio.sleep(0.2)  # another process builds it: poll the lock, bounded by the caller
                yield
            finally:
                os.close(fd)

    # Resolving names.

    async def resolve(self, image: str, where: str, task: HarborTask) -> str:
        """The local image `image` stands for (pulled if it must be); ImageError naming `where` otherwise."""
        bare = bare_name(image)
        mapped = self.mapping.get(image) or self.mapping.get(bare) or self.mapping.get(bare.removesuffix(":latest"))
        if mapped is not None:
            if await self.podman.image_exists(mapped):
                return mapped
            raise ImageError(
                f"Harbor task {task.name}: {where}: --harbor-image maps it to {mapped}, which is not in the server's "
                f"image storage ({self.podman.directory})"
            )
        if bare in DEBIAN_NAMES:
            await self.debian_base()
            return DEBIAN_BASE
        if await self.podman.image_exists(image):
            return image
        try:
            await self.podman.run("pull", "--quiet", image, within=task.build_timeout)
        except (PodmanError, TimeoutError) as exc:
            raise ImageError(
                f"Harbor task {task.name}: {where}: the image cannot be had ({exc}); build or import it locally and "
                f"map it with --harbor-image {bare.removesuffix(':latest')}=LOCAL"
            ) from None
        return image

    async def debian_base(self) -> str:
        """`DEBIAN_BASE`, made now if the storage lacks it (once, whoever asks first)."""
        if await self.podman.image_exists(DEBIAN_BASE):
            return DEBIAN_BASE
        async with self._exclusive(DEBIAN_BASE):
            if not await self.podman.image_exists(DEBIAN_BASE):
                await anyio.to_thread.run_sync(build_debian_base, self.podman)
        return DEBIAN_BASE

    # Building.

    async def for_task(self, task: HarborTask) -> str:
        """The task's image, built (once per content hash) or resolved; ImageError (one line) if it cannot be."""
        if task.docker_image is not None:
            return await self.resolve(task.docker_image, f"docker_image = {task.docker_image!r}", task)
        dockerfile = (task.environment_dir / "Dockerfile").read_text(encoding="utf-8")
        lines = dockerfile.splitlines()
        for line in from_lines(dockerfile):
            local = await self.resolve(line.image, f"'{line.text}' (environment/Dockerfile line {line.number})", task)
            if local != line.image:
                lines[line.number - 1] = lines[line.number - 1].replace(line.image, local, 1)
        rewritten = "\n".join(lines) + "\n" + workdir_made(dockerfile)
        digest = await anyio.to_thread.run_sync(content_hash, task.environment_dir, rewritten)
        tag = f"localhost/ors-harbor/{_tag_name(task.name)}:{digest[:20]}"
        if await self.podman.image_exists(tag):
            return tag
        async with self._exclusive(tag):
            if await self.podman.image_exists(tag):
                return tag
            builds = self.podman.directory / "builds"
            builds.mkdir(parents=True, exist_ok=True)
            file = builds / f"{digest[:20]}.Dockerfile"
            file.write_text(rewritten, encoding="utf-8")
            logger.info("building the image of Harbor task %s (%s)", task.name, tag)
            started = anyio.current_time()
            try:
                await self.podman.run(
                    "build", "--pull=never", "--quiet", "--label", f"{HARBOR_LABEL}={task.name}", "--tag", tag,
                    "--file", str(file), str(task.environment_dir), within=task.build_timeout,
                )  # fmt: skip
            except TimeoutError:
                raise ImageError(
                    f"Harbor task {task.name}: building environment/Dockerfile took longer than build_timeout_sec "
                    f"({task.build_timeout:g} s)"
                ) from None
            except PodmanError as exc:
                raise ImageError(f"Harbor task {task.name}: building environment/Dockerfile failed: {exc}") from None
            logger.info("built the image of Harbor task %s in %.1f s", task.name, anyio.current_time() - started)
        return tag


def _tag_name(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "task"


def content_hash(context: Path, dockerfile: str) -> str:
    """The hash of what a build reads: the Dockerfile as built and every file of the context (path, mode, bytes)."""
    digest = hashlib.sha256(f"ors-harbor-image {FORMAT}\n".encode())
    digest.update(dockerfile.encode())
    for path in sorted(context.rglob("*")):
        relative = path.relative_to(context).as_posix()
        if relative == "Dockerfile":
            continue
        info = path.lstat()
        digest.update(f"\0{relative}\0{info.st_mode:o}\0".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build_debian_base(podman: Podman) -> None:
    """Make `DEBIAN_BASE` with mmdebstrap (minbase bookworm, from the mirror apt uses) and import it; its progress
    goes to the log. Blocking: run it in a thread."""
    if shutil.which("mmdebstrap") is None:
        raise ImageError(
            f"the Debian base image {DEBIAN_BASE} is needed and mmdebstrap is not installed (apt-get install "
            "mmdebstrap), or map the FROM image to a local one with --harbor-image"
        )
    tarball = podman.directory / f"debian-bookworm.{os.getpid()}.tar"
    logger.info("making the Debian base image %s with mmdebstrap (about a minute; done once)", DEBIAN_BASE)
    command = ["mmdebstrap", "--variant=minbase", "bookworm", str(tarball)]
    try:
        with subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=podman.environment
        ) as process:
            assert process.stderr is not None
            last = ""
            for line in process.stderr:
                last = line.strip() or last
                if line.startswith("I:"):
                    logger.info("Debian base image: %s", line[2:].strip())
            if process.wait(timeout=BASE_BUILD_TIMEOUT) != 0:
                raise ImageError(f"making the Debian base image with mmdebstrap failed: {last}")
        done = podman.run_sync("import", "--quiet", str(tarball), DEBIAN_BASE, timeout=BASE_BUILD_TIMEOUT)
        if done.returncode != 0:
            raise ImageError(f"importing the Debian base image failed: {done.stderr.strip()}")
        logger.info("the Debian base image %s is ready", DEBIAN_BASE)
    finally:
        tarball.unlink(missing_ok=True)
