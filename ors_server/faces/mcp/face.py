"""The MCP face put together: its bindings, its handlers on the SDK's `Server`, the transports they answer
through and the endpoint in front of them; the face's declaration (`face`) and its shape for a front (`shape`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from starlette.responses import Response
from starlette.routing import BaseRoute

from ors_server.calls import Calls
from ors_server.faces import Core, Face
from ors_server.faces.mcp.binding import Bindings
from ors_server.faces.mcp.handlers import Handlers
from ors_server.faces.mcp.naming import names_session
from ors_server.faces.mcp.transport import Endpoint, Transports, routes
from ors_server.faces.mcp.wire import render_error
from ors_server.ids import worker_tag
from ors_server.registry import Registry
from ors_server.sessions import SessionStore
from ors_server.settings import Settings


class McpFace:
    """The MCP endpoint of every environment, over the shared session store."""

    def __init__(self, registry: Registry, store: SessionStore, calls: Calls, settings: Settings) -> None:
        self.registry, self.store, self.calls, self.settings = registry, store, calls, settings
        self.bindings = Bindings(registry, store, settings, worker_tag(settings.worker_tag))
        self.handlers = Handlers(store, calls, settings, self.bindings)
        self.transports = Transports(self.handlers.server, settings, self.bindings, self.handlers)

    def routes(self) -> list[BaseRoute]:
        return routes(Endpoint(self.registry, self.transports))

    @asynccontextmanager
    async def run(self) -> AsyncIterator[McpFace]:
        async with self.transports.run(), anyio.create_task_group() as task_group:
            task_group.start_soon(self.bindings.sweep_forever)
            try:
                yield self
            finally:
                task_group.cancel_scope.cancel()

    def key_for(self, transport_id: str) -> str | None:
        """The store key an MCP transport session is bound to (the control plane accepts transport ids)."""
        return self.bindings.key_for(transport_id)


def shape() -> Face:
    """The face's routes and error renderer, without a face behind them (what a front needs to refuse): its
    routes lead nowhere, as a front never serves them."""
    return Face("mcp", routes(Response(status_code=404)), render_error, names_session=names_session)


def face(core: Core) -> Face:
    mcp = McpFace(core.registry, core.store, core.calls, core.settings)
    core.aliases.add(mcp.key_for)  # the control plane and a front's lookups accept transport ids
    return Face("mcp", mcp.routes(), render_error, lifespan=mcp.run, state={"mcp": mcp}, names_session=names_session)
