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
Counters are read without the session lock, so answers never wait behind a running tool call (EP gives
reward and status 3 s).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ors_server.environment import Environment
from ors_server.errors import (
    BadRequest,
    OrsError,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    SessionStarting,
    Unavailable,
)
from ors_server.registry import Registry
from ors_server.sessions import Session, SessionStore
from ors_server.types import TextBlock

logger = logging.getLogger("ors_server.control")

HEADER = "mcp-session-id"


class _MissingHeader(BadRequest):
    def __init__(self) -> None:
        super().__init__("Missing mcp-session-id header")


class _UnknownSession(OrsError):
    status = 404

    def __init__(self, key: str) -> None:
        super().__init__(f"Session {key} not found")


class _StateFailed(OrsError):
    status = 500


Handler = Callable[[Request], Awaitable[Response]]


def _control(handler: Handler) -> Handler:
    """The one mapper from the domain error tree to the control plane's `{"error"}` shape."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except (SessionNotFound, SessionDeleted):
            return JSONResponse({"error": f"Session {_raw_key(request)} not found"}, 404)
        except OrsError as exc:
            headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Unavailable) else None
            return JSONResponse({"error": exc.message}, exc.status, headers=headers)
        except Exception:
            logger.exception("control-plane request failed")
            return JSONResponse({"error": "Internal server error"}, 500)

    return wrapped


def _store(request: Request) -> SessionStore:
    return request.app.state.store


def _raw_key(request: Request) -> str:
    return (request.headers.get(HEADER) or "").strip()


def _key(request: Request) -> str:
    """The store key named by the header: an EP session id, or an MCP transport id mapped to its key."""
    raw = _raw_key(request)
    if not raw:
        raise _MissingHeader()
    mcp = getattr(request.app.state, "mcp", None)
    mapped = mcp.key_for(raw) if mcp is not None else None
    return mapped or raw


def _env(request: Request) -> type[Environment]:
    registry: Registry = request.app.state.registry
    return registry.get(request.path_params.get("env"))


def _env_name(request: Request) -> str | None:
    return None if request.path_params.get("env") is None else _env(request).name


def _session(request: Request) -> Session:
    """The live session named by the header (refreshing its idle timer), without taking its lock."""
    return _store(request).get(_key(request), _env_name(request))


async def _call_user(function: Callable[..., Any]) -> Any:
    if inspect.iscoroutinefunction(function):
        return await function()
    result = await anyio.to_thread.run_sync(function, abandon_on_cancel=True)
    return await result if inspect.isawaitable(result) else result


@_control
async def initial_state(request: Request) -> Response:
    store, key = _store(request), _key(request)
    env_name = _env_name(request)
    for _ in range(3):
        try:
            store.get(key, env_name)
            break
        except (SessionNotFound, SessionDeleted):
            # EP asks before (or without) an MCP initialize: create the episode from what is known.
            env_cls = _env(request)
            task = await anyio.to_thread.run_sync(env_cls.task_from_seed, None, {})
            try:
                store.create(key, env_cls, task, seed=None, config={}, created_by="control")
            except SessionExists:
                continue
            break
    session = await store.get_ready(key, env_name)
    env = session.env
    if env is None:
        raise SessionStarting()
    try:
        initial_observation = getattr(env, "initial_observation", None)
        if callable(initial_observation):
            observation = await _call_user(initial_observation)
        else:
            blocks = await _call_user(env.get_prompt)
            observation = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise _StateFailed(session.redact(f"could not build the initial state: {text}")) from None
    return JSONResponse(observation if isinstance(observation, dict) else {"observation": observation})


@_control
async def reward(request: Request) -> Response:
    session = _session(request)
    return JSONResponse({"reward": session.last_reward, "step_count": session.step_count})


@_control
async def status(request: Request) -> Response:
    session = _session(request)
    return JSONResponse(
        {
            "terminated": session.finished and not session.truncated,
            "truncated": session.finished and session.truncated,
            "step_count": session.step_count,
            "total_reward": session.total_reward,
        }
    )


@_control
async def info(request: Request) -> Response:
    return JSONResponse(_session(request).info)


@_control
async def reset_session(request: Request) -> Response:
    key = _key(request)
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        raise BadRequest('body must be JSON: {"seed": <int or null>}') from None
    if not isinstance(body, dict):
        raise BadRequest('body must be a JSON object: {"seed": <int or null>}')
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise BadRequest("seed must be an integer or null")
    store = _store(request)
    try:
        session = store.get(key, _env_name(request))
    except (SessionNotFound, SessionDeleted):
        session = None
    if session is not None:
        await store.reset(session, seed)
    return JSONResponse({"message": "Session reset successfully"})


_ENDPOINTS: list[tuple[str, Handler, list[str]]] = [
    ("/initial_state", initial_state, ["GET"]),
    ("/reward", reward, ["GET"]),
    ("/status", status, ["GET"]),
    ("/info", info, ["GET"]),
    ("/reset_session", reset_session, ["POST"]),
]


def routes() -> list[BaseRoute]:
    """`/control/*` for the default environment, then `/{env}/control/*`."""
    return [
        Route(prefix + path, endpoint, methods=methods)
        for prefix in ("/control", "/{env}/control")
        for path, endpoint, methods in _ENDPOINTS
    ]
