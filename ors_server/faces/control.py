"""Eval Protocol's control plane: `/{env}/control/*` and `/control/*` (the default environment).

Eval Protocol reads reward and termination here, next to the MCP data plane, with the header
`mcp-session-id: <EP session id>` (the `clientInfo._extra.session_id` it sent at `initialize`, not the MCP
transport id). That value is a store key, so these routes see every session whichever face created it;
an MCP transport id is accepted too and mapped to its key.

    GET  initial_state   the episode's first observation; creates an unknown session (seeded)
    GET  reward          {"reward", "step_count"}  (the last call's reward; 0.0 after a failed call)
    GET  status          {"terminated", "truncated", "step_count", "total_reward"}
    GET  info            the last call's metadata
    POST reset_session   {"seed"}: rebuild the episode, clear the counters (200 for unknown ids too)

Errors are `{"error": ...}`: 400 without the header, 404 `Session <id> not found` for an unknown id.
Counters are read without any lock, and a reset swaps in a new episode without waiting for a call running in the
old one, so answers never wait behind a running tool call (EP gives reward and status 3 s).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Scope

from ors_server.environment import Environment
from ors_server.errors import BadRequest, OrsError, Refused, SessionDeleted, SessionExpired, SessionNotFound
from ors_server.faces import Core, Face, Naming, env_of, header_key, wirejson
from ors_server.faces.aliases import Aliases
from ors_server.registry import Registry
from ors_server.sessions import Session, SessionStore

logger = logging.getLogger("ors_server.control")

HEADER = "mcp-session-id"


class _MissingHeader(BadRequest):
    def __init__(self) -> None:
        super().__init__("Missing mcp-session-id header")


Handler = Callable[["ControlFace", Request], Awaitable[Response]]


def render_error(exc: OrsError) -> Response:
    """The control plane's one error shape: `{"error": message}`."""
    return JSONResponse({"error": exc.message}, exc.status, headers=exc.headers)


def _control(handler: Handler) -> Handler:
    """Name an unknown session as Eval Protocol's server does; every other error goes to `render_error`."""

    @functools.wraps(handler)
    async def wrapped(face: ControlFace, request: Request) -> Response:
        try:
            return await handler(face, request)
        except SessionExpired as exc:
            # Eval Protocol's client treats every status but 200 alike (a warning), so the 410 costs it nothing.
            message = f"Session {_raw_key(request)} expired after {exc.timeout:g} s of inactivity"
            return render_error(Refused(410, message))
        except (SessionNotFound, SessionDeleted):
            return render_error(Refused(404, f"Session {_raw_key(request)} not found"))
        except OrsError as exc:
            return render_error(exc)
        except ClientDisconnect:
            raise  # the client is gone: not a server error (counted apart by the entry)
        except Exception:
            logger.exception("control-plane request failed")
            return render_error(Refused(500, "Internal server error"))

    return wrapped


def _raw_key(request: Request) -> str:
    return (request.headers.get(HEADER) or "").strip()


class ControlFace:
    """The control plane over one core: each endpoint reads the session the `mcp-session-id` header names."""

    def __init__(self, registry: Registry, store: SessionStore, aliases: Aliases) -> None:
        self.registry, self.store, self.aliases = registry, store, aliases

    def _key(self, request: Request) -> str:
        """The store key named by the header: an EP session id, or an MCP transport id mapped to its key."""
        raw = _raw_key(request)
        if not raw:
            raise _MissingHeader()
        return self.aliases.key_for(raw) or raw

    def _env(self, request: Request) -> type[Environment]:
        return env_of(self.registry, request.scope, request.path_params.get("env"))

    def _env_name(self, request: Request) -> str | None:
        return None if request.path_params.get("env") is None else self._env(request).name

    def _session(self, request: Request) -> Session:
        """The live session named by the header (refreshing its idle timer), without taking its lock."""
        return self.store.get(self._key(request), self._env_name(request))

    @_control
    async def initial_state(self, request: Request) -> Response:
        # EP may ask before (or without) an MCP initialize: an unknown key opens the episode from what is known.
        env_name = self._env_name(request)
        session, _ = await self.store.open(
            self._key(request), self._env(request), config={}, created_by="control", any_env=env_name is None
        )
        session = await self.store.get_ready(session.id, env_name)
        observation = await self.store.initial_observation(session)
        return JSONResponse(observation if isinstance(observation, dict) else {"observation": observation})

    @_control
    async def reward(self, request: Request) -> Response:
        session = self._session(request)
        return JSONResponse({"reward": session.last_reward, "step_count": session.step_count})

    @_control
    async def status(self, request: Request) -> Response:
        session = self._session(request)
        return JSONResponse(
            {
                "terminated": session.finished and not session.truncated,
                "truncated": session.finished and session.truncated,
                "step_count": session.step_count,
                "total_reward": session.total_reward,
            }
        )

    @_control
    async def info(self, request: Request) -> Response:
        return JSONResponse(self._session(request).info)

    @_control
    async def reset_session(self, request: Request) -> Response:
        key = self._key(request)
        raw = await request.body()
        try:
            body = wirejson.loads(raw) if raw.strip() else {}
        except wirejson.MalformedJson:
            raise BadRequest('body must be JSON: {"seed": <int or null>}') from None
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object: {"seed": <int or null>}')
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise BadRequest("seed must be an integer or null")
        try:
            session = self.store.get(key, self._env_name(request))
        except (SessionNotFound, SessionDeleted):
            session = None
        if session is not None:
            await self.store.reset(session, seed)
        return JSONResponse({"message": "Session reset successfully"})


_ENDPOINTS = [
    ("/initial_state", "initial_state", ["GET"]),
    ("/reward", "reward", ["GET"]),
    ("/status", "status", ["GET"]),
    ("/info", "info", ["GET"]),
    ("/reset_session", "reset_session", ["POST"]),
]


def routes(face: ControlFace | None) -> list[BaseRoute]:
    """`/control/*` for the default environment, then `/{env}/control/*`, to `face`'s endpoints (or, with no
    face, to nowhere: the shape a front needs)."""
    nowhere = Response(status_code=404)
    return [
        Route(prefix + path, getattr(face, name) if face is not None else nowhere, methods=methods)
        for prefix in ("/control", "/{env}/control")
        for path, name, methods in _ENDPOINTS
    ]


def names_session(scope: Scope, body: bytes | None) -> Naming:
    """A control-plane request names its session by `mcp-session-id` (Eval Protocol's id, or an MCP transport id
    of it); `GET /control/initial_state` opens an unknown one."""
    creates = scope["method"] == "GET" and scope["path"].rstrip("/").endswith("/initial_state")
    return Naming(header_key(scope, HEADER.encode()), creates)


def shape() -> Face:
    """The face's routes, error renderer and session naming, without a face behind them (what a front needs)."""
    return Face("control", routes(None), render_error, names_session=names_session)


def face(core: Core) -> Face:
    control = ControlFace(core.registry, core.store, core.aliases)
    return Face("control", routes(control), render_error, names_session=names_session)
