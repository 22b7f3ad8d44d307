"""Worker side of placement: where a session lives, and how loaded each worker is, as its fronts learn it.

A front places every new session on the worker with the most room and remembers where it put it; a front
that meets an id it has not seen asks the workers. This module is what a worker answers (only a worker:
a server started with `Settings.worker_tag`):

- `GET /_ors/lookup` with the header `x-ors-lookup: <id>`: whether this worker holds that id (`"live"`, a
  session or MCP transport id it serves; `"deleted"`, one it answers 410 for; or null) and its load. The
  request passes the same Host and API-key checks as any other; the front never forwards this path from a
  client.
- every other HTTP reply carries `x-ors-load: <sessions> <running calls> <max sessions>`, so each front's
  view of every worker's load is as fresh as its last exchange with it. The front takes the header off.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.calls import Calls
from ors_server.sessions import SessionStore

LOOKUP_PATH = "/_ors/lookup"
KEY_HEADER = b"x-ors-lookup"
LOAD_HEADER = b"x-ors-load"


def load_value(store: SessionStore, calls: Calls) -> bytes:
    return f"{len(store)} {calls.running} {store.settings.max_sessions}".encode()


def parse_load(value: bytes) -> tuple[int, int, int] | None:
    """(sessions, running calls, max sessions) from an `x-ors-load` value; None if it is not one."""
    parts = value.split()
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


class WorkerSide:
    """ASGI middleware of a worker (inside the Host/API-key guard): answers lookups, reports its load."""

    def __init__(
        self, app: ASGIApp, store: SessionStore, calls: Calls, transport_key: Callable[[str], str | None]
    ) -> None:
        self.app, self.store, self.calls, self.transport_key = app, store, calls, transport_key

    def holds(self, key: str) -> str | None:
        held = self.store.holds(key)
        if held is None and self.transport_key(key) is not None:
            held = "live"  # an MCP transport id bound to one of this worker's sessions
        return held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == LOOKUP_PATH and scope["method"] == "GET":
            key = next((v.decode("latin-1") for n, v in scope["headers"] if n == KEY_HEADER), "")
            body = json.dumps({"held": self.holds(key) if key else None}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": [*headers, self._load()]})
            await send({"type": "http.response.body", "body": body})
            return

        async def reporting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or []), self._load()]}
            await send(message)

        await self.app(scope, receive, reporting_send)

    def _load(self) -> tuple[bytes, bytes]:
        return LOAD_HEADER, load_value(self.store, self.calls)
