"""Assemble the server: one session store behind the ORS, MCP and control-plane faces."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from ors_server.environment import Environment
from ors_server.faces import control, ors
from ors_server.faces.mcp import McpFace
from ors_server.faces.openapi import openapi
from ors_server.guards import Guard
from ors_server.observability import Metrics, Observe
from ors_server.registry import Registry
from ors_server.sessions import SessionStore
from ors_server.settings import Settings


def create_app(environments: Sequence[type[Environment]], settings: Settings | None = None) -> Starlette:
    """The ASGI app serving `environments` (the first is the default) with `settings`."""
    settings = settings or Settings()
    registry = Registry(environments)
    store = SessionStore(settings)
    mcp = McpFace(registry, store, settings)
    metrics = Metrics(store)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with store.run(), mcp.run():
            yield

    # Starlette tries routes in order and no two patterns here overlap, so the hot paths go first:
    # tool calls, then MCP and the control plane, then discovery and the rest.
    routes = [
        *ors.env_routes(),
        *mcp.routes(),
        *control.routes(),
        *ors.root_routes(),
        Route("/metrics", metrics.endpoint),
        Route("/openapi.json", openapi),
    ]
    middleware = [
        Middleware(Observe, metrics=metrics),
        Middleware(Guard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes),
    ]
    app = Starlette(
        routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers=ors.exception_handlers()
    )
    app.state.settings = settings
    app.state.registry = registry
    app.state.store = store
    app.state.mcp = mcp
    return app
