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

from starlette.types import Scope, Send

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


async def answer_lookup(
    scope: Scope, worker: tuple[SessionStore, Calls, Callable[[str], str | None]], send: Send
) -> None:
    """Answer a front's `GET /_ors/lookup` (after the Host and API-key checks): whether this worker holds the id in
    `x-ors-lookup` (a session, or an MCP transport id bound to one of its sessions), and its load."""
    store, calls, transport_key = worker
    key = next((v.decode("latin-1") for n, v in scope["headers"] if n == KEY_HEADER), "")
    held = store.holds(key) if key else None
    if key and held is None and transport_key(key) is not None:
        held = "live"
    body = json.dumps({"held": held}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send(
        {"type": "http.response.start", "status": 200, "headers": [*headers, (LOAD_HEADER, load_value(store, calls))]}
    )
    await send({"type": "http.response.body", "body": body})
