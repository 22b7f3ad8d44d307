"""The OpenEnv face: OpenEnv 0.10's own clients (`GenericEnvClient`, typed `EnvClient`s, `MCPToolClient`) drive
our sessions, unchanged (the contract is what those clients do: tests/clients/test_openenv_client.py runs them
against this face, and tests/faces/test_openenv.py pins each frame and route).

Mounted at `/openenv/{env}` for every environment and at `/openenv` for the default one:

    WS   /ws[?session_id=]   the session channel: reset, step, state, close and mcp frames, one reply each
    POST /mcp                OpenEnv's JSON-RPC dialect (not MCP streamable HTTP): tools/list, tools/call,
                             openenv/session/create, openenv/session/close
    GET  /health, /schema, /metadata, /openapi.json
    POST /reset, POST /step, GET /state    OpenEnv's stateless simulation routes: a fresh episode per request

Sessions
    Every session here is a store session (its id is what `state()` calls `episode_id`, and what ORS `/ping`,
    `/delete`, the control plane and `/metrics` see). A socket without `?session_id=` opens a new session that
    ends when the socket closes or drops; a socket attached with `?session_id=` (a session made by
    `openenv/session/create`, ORS `/create` or any other face) only detaches. A session with a connected socket
    is never reaped for inactivity; a socket whose peer is gone is found by the server's WebSocket pings.
    A session that ends elsewhere (ORS `/delete`, shutdown) closes its socket (1000), and the client's next
    call opens a new session, as OpenEnv's clients do after any close by the far end.

Actions
    RFC 003's `{"type": "list_tools"}` and `{"type": "call_tool", "tool_name", "arguments"}`. In an
    environment with exactly one tool, a step whose data has no `type` is that tool's arguments, so
    `step({"action": "LEFT"})` plays FrozenLake. Tool calls go through the store's one call pipeline; a
    `ToolOutput`'s reward and `finished` become the step's `reward` and `done`. `reset` starts a new episode in
    the same session: its `seed` and `task_spec` / `split` / `index` pick the task through
    `Environment.task_from_seed`, the rule the MCP face applies to Eval Protocol's seeds and configs.

OpenEnv's own environments (`--env openenv:...`, hosted) are answered in OpenEnv's own words: see `native`.

Modules: `native` (OpenEnv classes' own answers), `wire` (the shapes every transport shares), `sessions` (which
socket drives which session), `websocket`, `jsonrpc` and `http` (the three transports).

Errors
    A frame that cannot be served gets OpenEnv's error envelope (`INVALID_JSON`, `UNKNOWN_TYPE`,
    `VALIDATION_ERROR`, `EXECUTION_ERROR`) and the socket stays usable; a failed tool call is an observation with
    an `error`, as in OpenEnv. Refusals when a socket opens (`CAPACITY_REACHED`, `SESSION_ERROR`,
    `FACTORY_ERROR`) are one error frame, then a close. JSON-RPC errors are HTTP 200 with an `error` object.
    Middleware refusals (API key, body size) and plain HTTP errors are FastAPI's `{"detail": ...}`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.types import Scope

from ors_server.faces import Core, Face, Naming
from ors_server.faces.openenv.http import StatelessHttp
from ors_server.faces.openenv.jsonrpc import JsonRpc
from ors_server.faces.openenv.sessions import OpenEnvFace
from ors_server.faces.openenv.websocket import SocketChannel
from ors_server.faces.openenv.wire import PREFIX, render_error


def routes(face: OpenEnvFace | None) -> list[BaseRoute]:
    """The face's routes to its three transports over `face` (or, with no face, to nowhere: the shape a front
    needs to refuse)."""
    if face is None:
        nowhere = Response(status_code=404)
        to: dict[str, Any] = {name: nowhere for name in ("ws", "mcp", *(name for _, name, _ in _HTTP))}
    else:
        jsonrpc, http = JsonRpc(face), StatelessHttp(face)
        to = {"ws": SocketChannel(face, jsonrpc).endpoint, "mcp": jsonrpc.endpoint}
        to.update({name: getattr(http, name) for _, name, _ in _HTTP})
    inner: list[BaseRoute] = [
        WebSocketRoute("/ws", to["ws"]),
        Route("/mcp", to["mcp"], methods=["POST"]),
        *(Route(path, to[name], methods=methods) for path, name, methods in _HTTP),
    ]
    # `/openenv/{env}/...` cannot match `/openenv/ws` (one segment short), so the order is only for clarity.
    return [Mount(PREFIX + "/{env}", routes=inner), Mount(PREFIX, routes=inner)]


_HTTP = [
    ("/health", "health", ["GET"]),
    ("/schema", "schema", ["GET"]),
    ("/metadata", "metadata", ["GET"]),
    ("/openapi.json", "openapi", ["GET"]),
    ("/reset", "reset", ["POST"]),
    ("/step", "step", ["POST"]),
    ("/state", "state", ["GET"]),
]
"""The plain HTTP routes: path, the `StatelessHttp` method serving it, methods."""


def names_session(scope: Scope, body: bytes | None) -> Naming:
    """A socket names the session it attaches to by `?session_id=` (without one, it makes one); a JSON-RPC request
    names one in `params.session_id` (`tools/call`, `openenv/session/close`, ...) or makes one
    (`openenv/session/create`). The plain HTTP routes are stateless."""
    if scope["type"] == "websocket":
        found = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_id")
        key = found[0].strip() or None if found else None
        return Naming(key, creates=key is None)
    if body is None or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("/mcp"):
        return Naming()
    try:
        message: Any = json.loads(body)
    except (ValueError, RecursionError):
        return Naming()
    if not isinstance(message, dict):
        return Naming()
    params = message.get("params")
    key = params.get("session_id") if isinstance(params, dict) else None
    named = (str(key).strip() or None) if key is not None else None
    return Naming(named, creates=message.get("method") == "openenv/session/create")


def shape() -> Face:
    """The face's routes, error renderer and session naming, without a face behind them (what a front needs)."""
    return Face("openenv", routes(None), render_error, names_session=names_session)


def face(core: Core) -> Face:
    openenv = OpenEnvFace(core.registry, core.store, core.calls, core.settings)
    return Face("openenv", routes(openenv), render_error, lifespan=openenv.run, names_session=names_session)


__all__ = ["OpenEnvFace", "face", "render_error", "shape"]
