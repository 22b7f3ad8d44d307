"""The one ASGI layer between uvicorn and the faces: what five middlewares did, in one call per request.

A request used to cross Starlette's error middleware, `Observe` (metrics, access log), `Guard` (header checks,
body limit), `WorkerSide` (a worker's lookups and load header), Starlette's exception middleware, the app's router
and `FaceRouter` before its face's router tried its routes: seven calls, six wrapped `send`s, a `Request` built
twice. `Entry` does the same work in one frame, in the same order, with one wrapped `send`, then goes straight
to the route: matches are remembered by (method, path) (`RouteCache`), so a hot path is matched once.

What it keeps, as the middlewares did:
- every HTTP request is timed into `ors_request_seconds` and counted in `ors_requests`, and logged on
  `ors_server.access`; a client that leaves mid-request is counted `client_disconnected` (499), not a 500;
- the `HeaderChecks` refuse first (WebSockets too), then a declared body past the limit (413), then a chunked
  body is counted as it arrives;
- a worker answers `/_ors/lookup` after the checks and reports its load on every reply of the app;
- a domain error (`OrsError`) or the router's `HTTPException` is rendered by the request's face; anything else
  is a fixed 500 in the face's shape, and re-raised for uvicorn to log, as Starlette's error middleware does.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.routing import Match, Route, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.calls import Calls
from ors_server.errors import OrsError, Refused
from ors_server.faces import Face, FaceTable
from ors_server.http.env_ports import PortEnvs
from ors_server.http.guards import HeaderChecks, count_body, refuse_websocket
from ors_server.http.lookup import LOAD_HEADER, LOOKUP_PATH, answer_lookup, load_value
from ors_server.http.observability import (
    CLIENT_CLOSED_REQUEST,
    CLIENT_DISCONNECTED,
    STATUS_CLASSES,
    Metrics,
    access_line,
    access_log,
)
from ors_server.sessions import SessionStore

HANDLERS_KEY = "starlette.exception_handlers"
_CACHE_LIMIT = 4096


class RouteCache:
    """Each face's routes by (method, path): the route a request goes to and what it adds to the scope, found by
    the face's own router the first time and remembered (boundedly) for full matches. A route's match depends on
    the path and the method alone, so what a path matched once it matches again."""

    def __init__(self, routers: dict[str, Router]) -> None:
        self.routers = routers
        self._found: dict[tuple[str, str, str, str], tuple[Any, dict[str, Any], Any]] = {}

    async def handle(self, face: Face, scope: Scope, receive: Receive, send: Send) -> None:
        key = (face.name, scope["type"], scope.get("method", ""), scope["path"])
        found = self._found.get(key)
        if found is None:
            found = self._match(face, scope)
            if found is None:  # a partial match, a redirect or a 404: the router's own answers
                return await self.routers[face.name](scope, receive, send)
            if len(self._found) < _CACHE_LIMIT:
                self._found[key] = found
        route, child, endpoint = found
        scope.update(child)
        # Path parameters are the request's own: copied, so no handler can change the remembered ones.
        scope["path_params"] = dict(child.get("path_params", {}))
        if endpoint is None:
            return await route.handle(scope, receive, send)
        # What the route's own wrapping (`request_response`) does, without its two frames and wrapped send: what the
        # endpoint raises reaches `Entry`, which renders it by the face as the wrapping's handlers did.
        response = await endpoint(Request(scope, receive, send))
        await response(scope, receive, send)

    def _match(self, face: Face, scope: Scope) -> tuple[Any, dict[str, Any], Any] | None:
        if scope.get("root_path"):
            return None  # a mounted app: its paths are relative, leave it to the router
        for route in self.routers[face.name].routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                # A plain route to an async endpoint (a face's method) is called straight (`handle`).
                endpoint = route.endpoint if isinstance(route, Route) else None
                return route, dict(child), endpoint if inspect.iscoroutinefunction(endpoint) else None
            if match is Match.PARTIAL:
                return None
        return None


class Entry:
    """The app's whole middleware stack (see the module docstring)."""

    def __init__(
        self,
        router: Router,
        routes: RouteCache,
        faces: FaceTable,
        metrics: Metrics,
        checks: HeaderChecks,
        max_body_bytes: int,
        handlers: dict[Any, Callable[..., Any]],
        worker: tuple[SessionStore, Calls, Callable[[str], str | None]] | None = None,
        port_envs: PortEnvs | None = None,
    ) -> None:
        self.router, self.routes, self.faces, self.metrics = router, routes, faces, metrics
        self.checks = checks
        self.max_body_bytes = max_body_bytes
        self.handlers = handlers
        scoped = {key: handler for key, handler in handlers.items() if key is not Exception}
        # A WebSocket's errors are rare and its handshake not hot: Starlette's own exception middleware has them.
        self.websockets = ExceptionMiddleware(self._route, handlers=scoped)
        # What the routes' own wrapping (`request_response`) reads from the scope: the same handlers.
        self.scope_handlers: tuple[dict[Any, Any], dict[int, Any]] = (scoped, {})
        self.worker = worker
        self.port_envs = port_envs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if self.port_envs is not None and kind != "lifespan":
            self.port_envs.mark(scope)
        if kind == "http":
            return await self._http(scope, receive, send)
        if kind == "websocket":
            face = self.faces.of(scope)
            refusal = self.checks.refusal(scope)
            if refusal is not None:
                return await refuse_websocket(scope, receive, send, refusal, face.render_error(refusal))
            scope.setdefault("router", self.router)
            return await self.websockets(scope, receive, send)
        await self.router(scope, receive, send)  # the lifespan

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        face = self.faces.of(scope)
        status = 500
        started_response = False
        worker = self.worker

        async def observed_send(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                status, started_response = message["status"], True
            await send(message)

        async def reporting_send(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                assert worker is not None
                status, started_response = message["status"], True
                message = {
                    **message,
                    "headers": [*(message.get("headers") or []), (LOAD_HEADER, load_value(*worker[:2]))],
                }
            await send(message)

        outcome = None
        try:
            refusal = self.checks.refusal(scope)
            if refusal is not None:
                return await face.render_error(refusal)(scope, receive, observed_send)
            declared = b""
            chunked = False
            for name, value in scope["headers"]:
                if name == b"content-length":
                    declared = value
                elif name == b"transfer-encoding":
                    chunked = True
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                return await face.render_error(self._too_large())(scope, receive, observed_send)
            app_send = observed_send
            if worker is not None:
                if scope["path"] == LOOKUP_PATH and scope["method"] == "GET":
                    return await answer_lookup(scope, worker, observed_send)
                app_send = reporting_send
            scope[HANDLERS_KEY] = self.scope_handlers
            scope.setdefault("router", self.router)
            if chunked:
                too_large = face.render_error(self._too_large())
                return await count_body(self._guarded, face, scope, receive, app_send, self.max_body_bytes, too_large)
            try:
                await self.routes.handle(face, scope, receive, app_send)
            except (OrsError, HTTPException) as exc:
                # What the routes' own wrapping leaves: the router's 404 and 405, an error of a plain ASGI route.
                if started_response:
                    raise RuntimeError("Caught handled exception, but response already started.") from exc
                await face.render_error(_as_error(exc))(scope, receive, app_send)
                exc.__traceback__ = None
        except ClientDisconnect:
            # The client went away while sending its request: no one to answer, and not the server's fault (before,
            # this reached uvicorn as a 500 with a traceback: a log flood with many slow clients).
            outcome, status = CLIENT_DISCONNECTED, CLIENT_CLOSED_REQUEST
        except Exception:
            if not started_response:
                # A fixed message: exception text may carry environment internals or secrets.
                await face.render_error(Refused(500, "Internal server error"))(scope, receive, observed_send)
            raise  # for the server to log, as Starlette's error middleware does
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe_request(face.name, outcome or STATUS_CLASSES.get(status // 100, "other"), seconds)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(access_line(scope, status, seconds, face.name))

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.routes.handle(self.faces.of(scope), scope, receive, send)

    def _too_large(self) -> Refused:
        return Refused(413, f"request body larger than {self.max_body_bytes} bytes")

    async def _guarded(self, face: Face, scope: Scope, receive: Receive, send: Send) -> None:
        """The route, with what it raises rendered by the face (as Starlette's exception middleware does): for a
        chunked body, whose counting wraps it."""
        started = False

        async def sender(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.routes.handle(face, scope, receive, sender)
        except (OrsError, HTTPException) as exc:
            if started:
                raise RuntimeError("Caught handled exception, but response already started.") from exc
            await face.render_error(_as_error(exc))(scope, receive, sender)
            exc.__traceback__ = None


def _as_error(exc: OrsError | HTTPException) -> OrsError:
    return exc if isinstance(exc, OrsError) else Refused(exc.status_code, exc.detail, exc.headers)


class App(Starlette):
    """Starlette with `Entry` as its whole middleware stack (`entry` builds it once the app exists)."""

    entry: Callable[[App], ASGIApp]

    def build_middleware_stack(self) -> ASGIApp:
        return self.entry(self)
