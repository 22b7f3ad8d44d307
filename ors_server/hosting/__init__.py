"""Environments of other frameworks (and isolated native ones), served from host processes of their own interpreter.

    --env openreward:MODULE:CLASS[@PYTHON]   an `openreward.environments.Environment` subclass
    --env openenv:MODULE:CLASS[?action=MODULE:CLASS][@PYTHON]   an OpenEnv `Environment` or `MCPEnvironment` subclass
    --env isolated:MODULE:CLASS[@PYTHON]     one of ours, in host processes (a crash or a held GIL costs only them)

`PYTHON` is the interpreter of the virtual environment that has the framework and the user's code (default: the
server's own); `MODULE` imports from the server's working directory. Loading the spec starts one host process to
describe the class (name, splits, tools) and ends it; a running server keeps a pool of host processes per hosted
environment (`pool.py`), each an interpreter running `host.py` with the framework's adapter (`adapters/`),
speaking length-prefixed JSON over its pipes (`process.py`). The server side is an `Environment` subclass
(`environment.py`), so sessions, limits, timeouts, metrics, records and scale-out are the core's, unchanged.

A new framework is an adapter file `adapters/<name>.py` (standard library and the framework only: see `host.py`)
and one line in `FRAMEWORKS`.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager

from ors_server.environment import Environment
from ors_server.hosting.environment import HostedEnvironment, HostedOutput, HostedTool, hosted_class
from ors_server.hosting.pool import HostPool
from ors_server.hosting.process import HostError, HostFailed, HostProcess, HostSpec, describe_once, parse_python
from ors_server.sandboxes.confinement import Confinement
from ors_server.sessions import SessionStore
from ors_server.settings import Settings

FRAMEWORKS: dict[str, str] = {
    "openreward": "openreward",
    "openenv": "openenv",
    "isolated": "native",
}
"""`--env` prefix -> the adapter (a file of `adapters/`) its host processes load."""

DESCRIPTIONS = "ORS_HOSTED_DESCRIPTIONS"
"""The environment variable that hands the descriptions loaded to the processes this one starts."""
LOAD_TIMEOUT = 120.0
"""Seconds the host process started at `--env` loading may take to import the class and describe it."""


class HostLoadError(Exception):
    """A hosted `--env` spec that cannot be served (the message is one line, for the user)."""


def load(
    prefix: str, rest: str, app_dir: str | None = None, confined: Confinement | None = None
) -> type[HostedEnvironment]:
    """The class `PREFIX:MODULE:CLASS[@PYTHON]` names: a host process, confined as `confined` says (default: as
    settings from the environment say), is started to describe it."""
    spec_text = f"{prefix}:{rest}"
    target, _, python = rest.partition("@")
    # `?key=value&...` after the class: options for the adapter (OpenEnv's `?action=module:Class`).
    target, _, query = target.partition("?")
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    module_name, _, class_name = target.partition(":")
    if not module_name or not class_name or ":" in class_name:
        raise HostLoadError(f"--env '{spec_text}': expected {prefix}:MODULE:CLASS[@PYTHON]")
    try:
        interpreter = parse_python(python or None)
    except HostFailed as exc:
        raise HostLoadError(f"--env '{spec_text}': {exc}") from None
    cwd = os.path.abspath(os.getcwd() if app_dir is None else app_dir)
    try:
        confined = confined or Confinement.of(Settings.from_env())
    except ValueError as exc:
        raise HostLoadError(f"--env '{spec_text}': {exc}") from None
    spec = HostSpec(FRAMEWORKS[prefix], target, interpreter, cwd, options=options, confinement=confined)
    known = json.loads(os.environ.get(DESCRIPTIONS, "{}"))
    key = json.dumps([spec.framework, target, interpreter, cwd, options])
    if key in known:
        return hosted_class(spec, known[key])
    try:
        description = describe_once(spec, LOAD_TIMEOUT)
    except (HostError, HostFailed) as exc:
        raise HostLoadError(f"--env '{spec_text}': {exc}") from None
    # Worker processes (`--workers`) inherit the environment: they reuse the description rather than start a
    # host process each to ask again (a framework's import can take seconds).
    known[key] = description
    os.environ[DESCRIPTIONS] = json.dumps(known)
    return hosted_class(spec, description)


@asynccontextmanager
async def pools(
    environments: Sequence[type[Environment]], settings: Settings, store: SessionStore | None = None
) -> AsyncIterator[None]:
    """Run a host pool for every hosted environment among `environments` until the block ends (then kill every
    process they started). Enter it outside the session store's run, so sessions are torn down before it closes.
    With `store`, the sessions of a process that dies end at once (`SessionStore.lose`), not at their next call."""
    async with AsyncExitStack() as stack:
        for env_cls in environments:
            if issubclass(env_cls, HostedEnvironment):
                await stack.enter_async_context(_serving(env_cls, settings))
                if store is not None:
                    stack.enter_context(_ending_sessions(env_cls, store))
        yield


@contextmanager
def _ending_sessions(env_cls: type[HostedEnvironment], store: SessionStore) -> Iterator[None]:
    def ended(host: HostProcess) -> None:
        for session in store.sessions():
            env = session.env
            if isinstance(env, HostedEnvironment) and env.host is host and env.lost is None:
                env.lost = f"the host process of {host.spec.label} ended: {host.dead}"
                store.lose(session, env.lost)

    pool = env_cls._pool()
    pool.on_end.append(ended)
    try:
        yield
    finally:
        pool.on_end.remove(ended)


@asynccontextmanager
async def _serving(env_cls: type[HostedEnvironment], settings: Settings) -> AsyncIterator[None]:
    # Several apps of one process (tests) may serve one class: the first opens its pool, the last closes it.
    if env_cls.pool is not None:
        env_cls.pool_users += 1
        try:
            yield
        finally:
            env_cls.pool_users -= 1
        return
    pool = HostPool(env_cls.spec, settings, env_cls.description.get("sessions_per_process"))
    async with pool.run():
        env_cls.pool, env_cls.pool_users = pool, 1
        try:
            yield
        finally:
            env_cls.pool_users -= 1
            if env_cls.pool is pool:
                env_cls.pool = None


__all__ = ["FRAMEWORKS", "HostLoadError", "HostedEnvironment", "HostedOutput", "HostedTool", "load", "pools"]
