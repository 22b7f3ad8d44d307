"""The OpenEnv face's JSON-RPC (OpenEnv's dialect, not MCP streamable HTTP): `POST /mcp` and the `mcp` frames of
its sockets. tools/list, tools/call, openenv/session/create and openenv/session/close; errors are HTTP 200 with
an `error` object."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ors_server.calls import ToolRejected
from ors_server.environment import Environment
from ors_server.errors import BadRequest, CapacityReached, NotFound, OrsError, SessionDeleted, Unavailable
from ors_server.faces import wirejson
from ors_server.faces.openenv import native
from ors_server.faces.openenv.sessions import OpenEnvFace
from ors_server.faces.openenv.wire import (
    CREATED_BY,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_UNAVAILABLE,
    RpcError,
    call_tool_result,
    mcp_tools,
    rpc_reply,
    tool_error,
    unknown_session,
)
from ors_server.records.labels import HEADER as LABELS_HEADER
from ors_server.records.labels import parse_header as parse_labels
from ors_server.sessions import Session
from ors_server.types import ToolOutput

logger = logging.getLogger("ors_server.openenv")


class JsonRpc:
    """OpenEnv's JSON-RPC over the face's sessions."""

    def __init__(self, face: OpenEnvFace) -> None:
        self.face = face

    async def endpoint(self, request: Request) -> Response:
        path_env = request.path_params.get("env")
        env_cls = self.face.env_of(request.scope, path_env)
        labels = parse_labels(request.headers.get(LABELS_HEADER))
        raw = await request.body()
        try:
            message = wirejson.loads(raw)
        except wirejson.MalformedJson:
            return JSONResponse(rpc_reply(None, error=RpcError(PARSE_ERROR, "Parse error")))
        return JSONResponse(await self.answer(message, env_cls, path_env, labels=labels))

    async def answer(
        self,
        message: Any,
        env_cls: type[Environment],
        path_env: str | None,
        bound: Session | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The JSON-RPC response to `message`. `bound` is the session of the socket an `mcp` frame came on;
        `labels` those of the request (`X-Episode-Labels`), for a session it creates."""
        request_id = message.get("id") if isinstance(message, dict) else None
        try:
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                raise RpcError(INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request")
            method, params = message.get("method"), message.get("params", {})
            if not isinstance(method, str):
                raise RpcError(INVALID_REQUEST, "Invalid request: 'method' must be a string")
            if not isinstance(params, dict):
                raise RpcError(INVALID_REQUEST, "Invalid request: 'params' must be an object")
            return rpc_reply(request_id, await self._rpc_method(method, params, env_cls, path_env, bound, labels))
        except RpcError as error:
            return rpc_reply(request_id, error=error)
        except OrsError as exc:
            return rpc_reply(request_id, error=self._rpc_error_of(exc))
        except Exception:
            logger.exception("OpenEnv JSON-RPC request failed")
            return rpc_reply(request_id, error=RpcError(INTERNAL_ERROR, "Internal error"))

    async def _rpc_method(
        self,
        method: str,
        params: dict[str, Any],
        env_cls: type[Environment],
        path_env: str | None,
        bound: Session | None,
        labels: dict[str, str] | None = None,
    ) -> Any:
        if method == "tools/list":
            session = self._named(params, path_env) or bound
            listed = (
                await self.face.calls.tools(session.env_cls, session)
                if session
                else await self.face.calls.tools(env_cls)
            )
            return {"tools": mcp_tools(listed)}
        if method == "tools/call":
            return await self._rpc_call(params, env_cls, path_env, bound)
        if method == "openenv/session/create":
            session, _ = await self.face.store.open(
                self.face.new_id(), env_cls, config={}, created_by=CREATED_BY, labels=labels
            )
            return {"session_id": session.id}
        if method == "openenv/session/close":
            session = self._named(params, path_env)
            if session is None:
                raise RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
            if session.id in self.face.sockets:
                self.face.close_on_detach.add(session.id)
                return {"session_id": session.id, "closed": False, "closing": True}
            await self.face.store.discard(session.id, "deleted")
            return {"session_id": session.id, "closed": True}
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _named(self, params: dict[str, Any], path_env: str | None) -> Session | None:
        """The live session `params.session_id` names (None when it names none)."""
        key = params.get("session_id")
        if key is None:
            return None
        try:
            return self.face.store.get(self.face.store.check_id(str(key)), path_env)
        except BadRequest as exc:
            raise RpcError(INVALID_PARAMS, exc.message) from None
        except (NotFound, SessionDeleted) as exc:
            raise RpcError(INVALID_PARAMS, unknown_session(key, exc)) from None

    async def _rpc_call(
        self, params: dict[str, Any], env_cls: type[Environment], path_env: str | None, bound: Session | None
    ) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "Missing 'name' in params")
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params - 'arguments' must be an object")
        session = self._named(params, path_env) or bound
        if session is not None:
            result = await self.face.calls.call(
                await self.face.store.get_ready(session.id), name, arguments, face=CREATED_BY
            )
        else:
            # No session named: a throw-away episode for this one call, as OpenEnv makes a throw-away env.
            result = await self.face.one_off(
                env_cls, lambda s: self.face.calls.call(s, name, arguments, face=CREATED_BY)
            )
        try:
            answered = native.rpc_result(result)
        except RuntimeError as exc:
            raise RpcError(INTERNAL_ERROR, str(exc)) from None
        if answered is not None:
            return answered
        if isinstance(result, ToolOutput):
            # Like OpenEnv's /mcp: no reward or done here, though the call is a step of the episode.
            return call_tool_result(result)
        error = tool_error(session.redact(name) if session is not None else name, result)
        code = (
            INVALID_PARAMS
            if error.error_type == "invalid_args" and isinstance(result, ToolRejected)
            else INTERNAL_ERROR
        )
        raise RpcError(code, error.message)

    def _rpc_error_of(self, exc: OrsError) -> RpcError:
        """The one mapper from the domain error tree to this face's JSON-RPC errors."""
        if isinstance(exc, CapacityReached):
            data = {"active_sessions": len(self.face.store), "max_sessions": self.face.settings.max_sessions}
            return RpcError(SERVER_UNAVAILABLE, f"Server at capacity: {exc.message}", data)
        if isinstance(exc, Unavailable):
            return RpcError(SERVER_UNAVAILABLE, exc.message)
        if isinstance(exc, BadRequest | NotFound | SessionDeleted):
            return RpcError(INVALID_PARAMS, exc.message)
        return RpcError(INTERNAL_ERROR, exc.message)
