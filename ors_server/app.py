"""Assemble the server: one session store behind the ORS, MCP and control-plane faces."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from ors_server.environment import Environment
from ors_server.faces import control, ors
from ors_server.faces.mcp import McpFace
from ors_server.registry import Registry
from ors_server.sessions import SessionStore
from ors_server.settings import Settings


def create_app(environments: Sequence[type[Environment]], settings: Settings | None = None) -> Starlette:
    """The ASGI app serving `environments` (the first is the default) with `settings`."""
    settings = settings or Settings()
    registry = Registry(environments)
    store = SessionStore(settings)
    mcp = McpFace(registry, store, settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with store.run(), mcp.run():
            yield

    # Root routes first, then the faces that own fixed prefixes, then `/{env}/...` and the bare paths.
    routes = [*ors.root_routes(), *control.routes(), *mcp.routes(), *ors.env_routes()]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=ors.exception_handlers())
    app.state.settings = settings
    app.state.registry = registry
    app.state.store = store
    return app
