"""What a serving process keeps for one Harbor environment: its tasks' images and warm pools, and the containers
of its live episodes.

`run()` is entered by the app's lifespan (`ors_server.harbor.serving`): it builds every task's image in
directory-name order (a session of a task not built yet builds it at once), keeps each task's warm pool full, and
at the end removes every container it started. An episode `take()`s a container and `release()`s it at teardown.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from ors_server.harbor.images import ImageError, Images, parse_mapping
from ors_server.harbor.pool import STARTING_AT_ONCE, WarmPool
from ors_server.harbor.tasks import HarborTask
from ors_server.sandboxes.container import Container, Limits
from ors_server.sandboxes.podman import Podman, default_dir
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.harbor")

SHELL_START_TIMEOUT = 30.0


class HarborRuntime:
    """The images, pools and live containers of one Harbor environment in this process."""

    def __init__(self, env_name: str, tasks: Sequence[HarborTask], settings: Settings) -> None:
        self.env_name = env_name
        self.tasks = {task.name: task for task in tasks}
        self.settings = settings
        directory = default_dir() if settings.harbor_dir is None else settings.harbor_dir
        self.podman = Podman(Path(directory))
        self.images = Images(self.podman, parse_mapping(settings.harbor_image))
        self._built: dict[str, str | ImageError] = {}
        self._building: dict[str, anyio.Lock] = {}
        self.pools: dict[str, WarmPool] = {}
        self.live: set[Container] = set()
        self._limiter = anyio.CapacityLimiter(STARTING_AT_ONCE)

    def limits(self, task: HarborTask) -> Limits:
        network = task.allow_internet and self.settings.harbor_internet
        return Limits(
            cpus=task.cpus or self.settings.harbor_cpus,
            memory_mb=task.memory_mb or self.settings.harbor_memory_mb,
            storage_mb=task.storage_mb,
            network=network,
        )

    async def image(self, task: HarborTask) -> str:
        """The task's image, built now if it has not been (once per process; ImageError if it cannot be)."""
        lock = self._building.setdefault(task.name, anyio.Lock())
        async with lock:
            if task.name not in self._built:
                try:
                    self._built[task.name] = await self.images.for_task(task)
                except ImageError as exc:
                    logger.error("%s", exc)
                    self._built[task.name] = exc
                except OSError as exc:
                    error = ImageError(f"Harbor task {task.name}: {type(exc).__name__}: {exc}")
                    logger.error("%s", error)
                    self._built[task.name] = error
        found = self._built[task.name]
        if isinstance(found, ImageError):
            raise found
        return found

    async def start(self, task: HarborTask) -> Container:
        """A new container of the task with its shell open."""
        image = await self.image(task)
        container = await Container.start(
            self.podman,
            image,
            self.limits(task),
            task_label=f"{self.env_name}/{task.name}",
            env=task.env,
            workdir=task.workdir,
        )
        try:
            await container.open_shell(SHELL_START_TIMEOUT)
        except BaseException:
            await container.remove()
            raise
        return container

    async def take(self, task: HarborTask) -> Container:
        """A container for an episode of `task`: a warm one if ready, else one started now."""
        pool = self.pools.get(task.name)
        container = pool.take() if pool is not None else None
        if container is None:
            container = await self.start(task)
        self.live.add(container)
        return container

    async def release(self, container: Container) -> None:
        self.live.discard(container)
        await container.remove()

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            await anyio.to_thread.run_sync(self.podman.sweep_orphans)
            group.start_soon(self._prepare)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            leftover, self.live = list(self.live), set()
            for container in leftover:
                await container.remove()

    async def _prepare(self) -> None:
        """Build every task's image in order, starting each task's pool once its image is there."""
        async with anyio.create_task_group() as pools:
            for task in self.tasks.values():
                try:
                    await self.image(task)
                except ImageError:
                    continue  # logged; its sessions fail their setup with the same line
                if self.settings.harbor_pool > 0:
                    pool = WarmPool(self.settings.harbor_pool, functools.partial(self.start, task), self._limiter)
                    self.pools[task.name] = pool
                    pools.start_soon(pool.run)
