"""The protocol faces: thin translators from a wire protocol to the session core.

A face is a plug-in: a class that owns the face's state and serves its endpoints, built over the `Core`. Its
module has one function, `face(core: Core) -> Face`, that builds it and declares what the face is:

- `name`: a short label ("ors", "mcp", ...) used in metrics and access logs;
- `routes`: its Starlette routes: `Route`, `WebSocketRoute` or a `Mount` under a prefix of its own;
- `render_error`: the one function that turns a domain error (`ors_server.errors.OrsError`) into this face's
  wire shape. Every error of the face goes through it: the ones its handlers raise, and the refusals middleware
  makes before any handler runs (401 without the API key, 413 for a large body, 503 while shutting down).
  The headers of an error (`OrsError.headers`: `Retry-After`, `WWW-Authenticate`) are the face's to send too;
- `lifespan` (optional): an async context manager run for the life of the app, inside the session store's
  (for a task group, a session manager, connections to close at shutdown);
- `state` (optional): objects other parts of the app look up on `app.state` by name;
- `names_session` (optional): how the face's requests name their session (`Naming`: the key, whether the request
  may create it, a reply header that names it too), read from the request's headers, path and body before any
  handler runs. A scale-out front routes each request by it, so that every session's requests reach the worker
  that holds it: a face that declares none is routed as naming no session;
- `revokes` (optional): the credential (the web page's cookie) the face's answer to a request revoked, read from
  the request and the answer's status. A scale-out front revokes it too and relays it to the other fronts, so
  a logout holds at every front of a deployment.

How to add a face
    1. Write `ors_server/faces/<name>.py` with `def face(core: Core) -> Face`. Its handlers read and change
       sessions only through `core.store` (`open`, `get`, `get_ready`, `reset`, `read_prompt`,
       `initial_observation`, `discard`), call tools only through `core.calls` (`tools`, `start`, `call`,
       `find`, naming the face in `face=`), and raise `OrsError`s; they never build error responses inline.
    2. Add one line, `<name>.face`, to `FACES` in `ors_server/http/app.py`, and one, `<name>.shape`, to `SHAPES`:
       `shape() -> Face` is the same name, routes, renderer, session naming and revocation with no core behind
       them (the routes' endpoints may lead nowhere), which is all a scale-out front needs to route the face's
       requests, to refuse in its shape and to relay what its answers revoke.
    That is all: the app runs the lifespan, and one table (`FaceTable`) learns which face a request belongs to
    from the faces' routes: the app routes the request among that face's routes (`FaceRouter`), and the entry
    (`ors_server.http.entry`) renders refusals in the face's shape and label metrics with its name.

    A face served under a prefix (for example `/openenv/{env}` and `/openenv`) declares a `Mount` for each
    prefix, with its HTTP and WebSocket routes inside. A `Mount` takes every path under its prefix, so
    `Mount("/openenv/{env}")` also takes `/openenv/reset/x`: order the mounts so the right one matches first.
    Faces are tried in the order of `FACES`, and so are their routes: ORS and MCP serve `/{env}/...` patterns,
    so a face with a fixed first path segment (such as `/openenv/...`) goes before them in `FACES`, or
    `/openenv/mcp` would be read as MCP for an environment named "openenv". Requests no route matches belong to
    the default face (ORS), whatever the order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import URLPath
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Router
from starlette.types import Receive, Scope, Send

from ors_server.calls import Calls
from ors_server.environment import Environment
from ors_server.errors import OrsError
from ors_server.faces.aliases import Aliases
from ors_server.registry import Registry
from ors_server.sessions import SessionStore
from ors_server.settings import Settings


@dataclass(frozen=True)
class Core:
    """What a face is built over: the environments, the one session store, its call pipeline, and the settings."""

    registry: Registry
    store: SessionStore
    calls: Calls
    settings: Settings
    aliases: Aliases = field(default_factory=Aliases)
    """Other names of sessions, by the face that gave them (faces reach each other's names only here)."""


ErrorRenderer = Callable[[OrsError], Response]

PORT_ENV = "ors_server.port_env"
"""The scope key under which the entry puts the environment whose own port (`--env-port`) the request came in on
(behind a front, the port the front received it on)."""


def env_of(registry: Registry, scope: Scope, name: str | None) -> type[Environment]:
    """The environment `name` names; for None (a path or body that names none) the request's default: the
    environment of the port it came in on (`--env-port`), else the server's first."""
    return registry.get(name if name is not None else scope.get(PORT_ENV))


@dataclass(frozen=True)
class Naming:
    """The session a request names, as a scale-out front must know it before any worker has seen the request."""

    key: str | None = None
    """The session's key (a store key or another name of it the workers resolve); None if the request names none."""
    creates: bool = False
    """Whether the request may start a session: under `key`, or (with no key) under one the worker makes."""
    alias_header: bytes | None = None
    """A header of the reply to a create that names the same session by another id, to route by as well."""


SessionNamer = Callable[[Scope, "bytes | None"], Naming]
"""A face's reading of the session a request names, from its scope and whole body (None for a WebSocket)."""

Revoker = Callable[[Scope, int], "bytes | None"]
"""A face's reading of the credential its answer (of this status) to a request revoked, if any."""


def unnamed(scope: Scope, body: bytes | None) -> Naming:
    """The naming of a face whose requests name no session (any worker answers them)."""
    return Naming()


def revokes_nothing(scope: Scope, status: int) -> bytes | None:
    """The revocation of a face whose answers revoke no credential."""
    return None


def header_key(scope: Scope, *names: bytes) -> str | None:
    """The session key the first of the headers `names` (lower case, in order of precedence) that the request has
    gives, stripped; None if it has none of them, or the first it has is blank."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in names:
            found.setdefault(name, value)
    for name in names:
        if name in found:
            return found[name].decode("latin-1").strip() or None
    return None


@dataclass(frozen=True)
class Face:
    """One protocol face: its name, its routes and its one error renderer (see the module docstring)."""

    name: str
    routes: Sequence[BaseRoute]
    render_error: ErrorRenderer
    lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    names_session: SessionNamer = unnamed
    revokes: Revoker = revokes_nothing


SCOPE_KEY = "ors_server.face"
_CACHE_LIMIT = 4096


class FaceTable:
    """Which face a request belongs to, from the faces' own routes, tried in order as the router tries them.

    A request no face's route matches belongs to the `default` face (the first one if it is not named), which
    renders the router's own 404 for it. Matches are remembered by path (boundedly), so the routes are matched
    once per path rather than once per request.
    """

    def __init__(self, faces: Sequence[Face], default: str | None = None) -> None:
        if not faces:
            raise ValueError("a server needs at least one face")
        names = [face.name for face in faces]
        if len(set(names)) != len(names):
            raise ValueError(f"two faces share a name: {names}")
        self.faces = list(faces)
        self.default = next((face for face in faces if face.name == default), self.faces[0])
        self._by_path: dict[tuple[str, str], Face] = {}

    @property
    def names(self) -> list[str]:
        return [face.name for face in self.faces]

    def of(self, scope: Scope) -> Face:
        """The face serving this request (remembered in the scope for the middleware further in)."""
        found: Face | None = scope.get(SCOPE_KEY)
        if found is not None:
            return found
        key = (scope["type"], scope["path"])
        found = self._by_path.get(key)
        if found is None:
            found = self._match(scope)
            if len(self._by_path) < _CACHE_LIMIT:
                self._by_path[key] = found
        scope[SCOPE_KEY] = found
        return found

    def _match(self, scope: Scope) -> Face:
        # Routes match on the path alone apart from the method (PARTIAL), so a path's face does not depend on the
        # request's method, which is what makes remembering it by path sound.
        found = self._first_match(scope)
        path = scope["path"]
        if found is None and scope["type"] == "http" and path != "/":
            # As Starlette's router does: a path one slash away from a face's route is that face's, which
            # redirects it there.
            toggled = path.rstrip("/") if path.endswith("/") else path + "/"
            found = self._first_match({**scope, "path": toggled})
        return found or self.default

    def _first_match(self, scope: Scope) -> Face | None:
        for face in self.faces:
            for route in face.routes:
                match, _ = route.matches(scope)
                if match is not Match.NONE:
                    return face
        return None


class FaceRouter(BaseRoute):
    """The app's one route: a request goes to its face (`FaceTable.of`, remembered by path), whose own router
    tries that face's routes only; `extra` routes (such as `/metrics`) belong to the default face.

    Starlette's router tries its routes one by one, a regular expression each: with every face's routes in one
    list, a control-plane request was tried against forty. And so one table decides both which face a request
    belongs to (for its errors and metrics) and which face serves it.
    """

    def __init__(self, table: FaceTable, extra: Sequence[BaseRoute] = ()) -> None:
        self.table = table
        self.routers = {
            face.name: Router(routes=[*face.routes, *(extra if face is table.default else ())]) for face in table.faces
        }

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return Match.FULL, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.routers[self.table.of(scope).name](scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        for router in self.routers.values():
            try:
                return router.url_path_for(name, **path_params)
            except NoMatchFound:
                pass
        raise NoMatchFound(name, path_params)


async def deny_websocket(scope: Scope, receive: Receive, send: Send, response: Response) -> None:
    """Refuse a WebSocket handshake with `response` (an HTTP error in the face's own shape), where the server
    can send one (the ASGI `websocket.http.response` extension, which uvicorn has); elsewhere close the handshake,
    which the server answers with 403."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await response(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": "refused"})


__all__ = [
    "Core",
    "ErrorRenderer",
    "Face",
    "FaceRouter",
    "FaceTable",
    "Naming",
    "Revoker",
    "SessionNamer",
    "deny_websocket",
    "env_of",
    "header_key",
    "revokes_nothing",
    "unnamed",
]
