"""MCP streamable HTTP face (placeholder until the MCP face lands)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from collections.abc import AsyncIterator

from starlette.routing import BaseRoute

from ors_server.registry import Registry
from ors_server.sessions import SessionStore
from ors_server.settings import Settings


class McpFace:
    def __init__(self, registry: Registry, store: SessionStore, settings: Settings) -> None:
        self.registry, self.store, self.settings = registry, store, settings

    def routes(self) -> list[BaseRoute]:
        return []

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        yield
