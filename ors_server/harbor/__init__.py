"""Harbor-format tasks (terminal-bench style) served as environments, one podman container per episode.

    --env harbor:DIR[?name=NAME]

Every task directory under DIR (or DIR itself, if it is one) is a task of one environment named NAME (default:
DIR's base name, lowercased), split `test`, in directory-name order (`tasks.py` reads them). An episode gets a
container of the task's image (`images.py`: built once per content hash and kept across restarts, base images
resolved without a registry), taken from a warm pool (`pool.py`) when one is ready; `bash` runs in one shell kept
open in it and `submit` runs the task's tests there (`environment.py`). Isolation and limits: `container.py`. podman
is run with the server's own configuration and storage, and every container is labelled with the server process
that owns it (`podman.py`), so that the containers of a server that died are removed at the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from ors_server.environment import Environment
from ors_server.harbor.environment import HarborEnvironment, harbor_class
from ors_server.harbor.runtime import HarborRuntime
from ors_server.harbor.tasks import read_tasks
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.harbor")

PREFIX = "harbor"


class HarborLoadError(Exception):
    """A `harbor:` spec that cannot be served (one line)."""


def load(rest: str, app_dir: str | None = None) -> type[HarborEnvironment]:
    """The environment `harbor:DIR[?name=NAME]` names; each task that cannot be used is named in one warning."""
    spec = f"{PREFIX}:{rest}"
    target, _, query = rest.partition("?")
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - {"name"}
    if not target or unknown:
        raise HarborLoadError(f"--env '{spec}': expected harbor:DIR[?name=NAME]")
    root = Path(os.getcwd() if app_dir is None else app_dir, target).resolve()
    if not root.is_dir():
        raise HarborLoadError(f"--env '{spec}': {root} is not a directory")
    if shutil.which("podman") is None:
        raise HarborLoadError(f"--env '{spec}': Harbor tasks run in podman containers, and podman is not installed")
    tasks, problems = read_tasks(root)
    for problem in problems:
        logger.warning("%s: skipped", problem)
    if not tasks:
        raise HarborLoadError(f"--env '{spec}': no usable Harbor task (task.toml, instruction.md, ...) in {root}")
    name = options.get("name") or root.name.lower()
    return harbor_class(name, root, tasks)


@asynccontextmanager
async def serving(environments: Sequence[type[Environment]], settings: Settings) -> AsyncIterator[None]:
    """Run a runtime (images, pools, containers) for every Harbor environment among `environments` until the
    block ends, then remove every container it started. Enter it outside the session store's run."""
    async with AsyncExitStack() as stack:
        for env_cls in environments:
            if issubclass(env_cls, HarborEnvironment):
                await stack.enter_async_context(_serving(env_cls, settings))
        yield


@asynccontextmanager
async def _serving(env_cls: type[HarborEnvironment], settings: Settings) -> AsyncIterator[None]:
    # Several apps of one process (tests) may serve one class: the first runs its runtime, the last ends it.
    if env_cls.runtime is not None:
        env_cls.runtime_users += 1
        try:
            yield
        finally:
            env_cls.runtime_users -= 1
        return
    runtime = HarborRuntime(env_cls.name, env_cls.harbor_tasks, settings)
    env_cls.runtime, env_cls.runtime_users = runtime, 1
    try:
        async with runtime.run():
            yield
    finally:
        env_cls.runtime_users -= 1
        if env_cls.runtime is runtime:
            env_cls.runtime = None


__all__ = ["PREFIX", "HarborEnvironment", "HarborLoadError", "HarborRuntime", "load", "serving"]
