"""Assemble the server: one session store behind the protocol faces listed in `FACES`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ors_server import harbor, hosting, internals
from ors_server.calls import Calls
from ors_server.environment import Environment
from ors_server.errors import OrsError, Refused
from ors_server.faces import Core, Face, FaceRouter, FaceTable, control, episodes, mcp, openenv, ors
from ors_server.http.entry import App, Entry, RouteCache
from ors_server.http.env_ports import PortEnvs
from ors_server.http.guards import HeaderChecks
from ors_server.http.observability import Metrics
from ors_server.records.reading import Reader
from ors_server.records.recorder import RecordsCollector, recorder_for
from ors_server.registry import Registry
from ors_server.sandboxes.bubblewrap import sweep_orphans
from ors_server.sessions import SessionStore
from ors_server.settings import Settings
from ors_server.ui import face as ui_face
from ors_server.ui import shape as ui_shape

FACES: list[Callable[[Core], Face]] = [
    openenv.face,  # first: its fixed `/openenv/...` prefix would otherwise read as `/{env}/...` to ORS and MCP
    ui_face,  # the web page's fixed `/ui/...` paths, none of them an ORS or MCP path
    episodes.face,  # and the episode records' `/episodes/...`
    ors.face,
    mcp.face,
    control.face,
]
"""The protocol faces the server speaks, in the order their routes are tried (see `ors_server.faces`)."""
SHAPES: list[Callable[[], Face]] = [openenv.shape, ui_shape, episodes.shape, ors.shape, mcp.shape, control.shape]
"""The same faces' routes and error renderers alone, with no core behind them: what a front needs to answer in
each face's shape (`scale.refusals`). A test holds them to `FACES`."""
DEFAULT_FACE = "ors"
"""The face that answers requests no face's route matches."""


def create_app(
    environments: Sequence[type[Environment]],
    settings: Settings | None = None,
    faces: Sequence[Callable[[Core], Face]] = FACES,
) -> Starlette:
    """The ASGI app serving `environments` (the first is the default) with `settings` through `faces`."""
    internals.check()  # the MCP face reaches into the SDK: refuse to start on a release that lacks what it needs
    settings = settings or Settings()
    registry = Registry(environments)
    by_port = registry.by_port(settings.port_envs)
    store = SessionStore(settings)
    calls = Calls(store)
    core = Core(registry, store, calls, settings)
    faces_table = FaceTable([make(core) for make in faces], default=DEFAULT_FACE)
    metrics = Metrics(store, calls, faces_table)
    recorder = recorder_for(settings, store)
    reader = None
    if recorder is not None:
        # An observer like the metrics: every episode and call is recorded (`ors_server.records`).
        calls.observe(recorder)
        metrics.registry.register(RecordsCollector(recorder))
        reader = Reader(recorder.target)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Sandbox directories of servers killed without a teardown (SIGKILL) are removed; a live server's never.
        await anyio.to_thread.run_sync(sweep_orphans)
        async with AsyncExitStack() as stack:
            if recorder is not None:
                # Outside the store: the episodes its shutdown ends are written before the recorder stops.
                await stack.enter_async_context(recorder.run())
            # Host pools outlive the store: its sessions are torn down (in their host processes) before they close.
            await stack.enter_async_context(hosting.pools(environments, settings, store))
            # Likewise Harbor tasks' containers: episodes release theirs before the runtime removes the rest.
            await stack.enter_async_context(harbor.serving(environments, settings))
            await stack.enter_async_context(store.run())
            for face in faces_table.faces:
                if face.lifespan is not None:
                    await stack.enter_async_context(face.lifespan())
            try:
                yield
            finally:
                if reader is not None:
                    await reader.close()  # ends the event streams of live episodes

    # Behind a front, the front counts failed key checks: a worker sees only the front's address.
    checks = HeaderChecks.from_settings(settings, throttled=settings.worker_tag is None)
    face_router = FaceRouter(faces_table, extra=[Route("/metrics", metrics.endpoint)])
    worker = None
    if settings.worker_tag is not None:
        # Behind a front: answer its lookups and report this worker's load on every reply (`ors_server.http.lookup`).
        worker = (store, calls, core.aliases.key_for)
    app = App(routes=[face_router], lifespan=lifespan)
    app.entry = lambda app: Entry(
        app.router,
        RouteCache(face_router.routers),
        faces_table,
        metrics,
        checks=checks,
        max_body_bytes=settings.max_body_bytes,
        handlers=_handlers(faces_table),
        worker=worker,
        # Behind a front, the front listens on the environments' ports and names the port's environment.
        port_envs=PortEnvs(by_port, behind_front=worker is not None) if by_port else None,
    )
    app.state.settings = settings
    app.state.registry = registry
    app.state.store = store
    app.state.records = reader
    app.state.calls = calls
    app.state.aliases = core.aliases
    app.state.faces = faces_table
    app.state.key_checks = checks  # the login form issues cookies and counts wrong keys with them
    for face in faces_table.faces:
        for name, value in face.state.items():
            setattr(app.state, name, value)
    return app


def _handlers(faces: FaceTable) -> dict[Any, Any]:
    """What a handler raises, rendered by the face the request belongs to."""

    async def domain_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, OrsError)
        return faces.of(request.scope).render_error(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        # The router's own 404 and 405.
        assert isinstance(exc, HTTPException)
        return faces.of(request.scope).render_error(Refused(exc.status_code, exc.detail, exc.headers))

    async def server_error(request: Request, exc: Exception) -> Response:
        # A fixed message: exception text may carry environment internals or secrets.
        return faces.of(request.scope).render_error(Refused(500, "Internal server error"))

    return {OrsError: domain_error, HTTPException: http_error, Exception: server_error}
