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

Errors
    A frame that cannot be served gets OpenEnv's error envelope (`INVALID_JSON`, `UNKNOWN_TYPE`,
    `VALIDATION_ERROR`, `EXECUTION_ERROR`) and the socket stays usable; a failed tool call is an observation with
    an `error`, as in OpenEnv. Refusals when a socket opens (`CAPACITY_REACHED`, `SESSION_ERROR`,
    `FACTORY_ERROR`) are one error frame, then a close. JSON-RPC errors are HTTP 200 with an `error` object.
    Middleware refusals (API key, body size) and plain HTTP errors are FastAPI's `{"detail": ...}`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from ors_server import ids, wirejson
from ors_server.calls import CallResult, Calls, ToolCrashed, ToolRejected
from ors_server.environment import Environment, ToolDef
from ors_server.errors import (
    BadRequest,
    CapacityReached,
    EnvironmentNotFound,
    InvalidTask,
    NotFound,
    OrsError,
    SessionDeleted,
    SessionExpired,
    SetupFailed,
    TaskTooLarge,
    Unavailable,
)
from ors_server.faces import Core, Face, deny_websocket
from ors_server.faces.ors import BodyInvalid, read_body
from ors_server.registry import Registry
from ors_server.sessions import Session, SessionStore, State
from ors_server.settings import Settings
from ors_server.types import ImageBlock, TextBlock, ToolOutput

logger = logging.getLogger("ors_server.openenv")

CREATED_BY = "openenv"
PREFIX = "/openenv"


# Wire models: what OpenEnv's clients send, validated as OpenEnv's own server validates it.


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Sent by clients that dump OpenEnv's pydantic actions (`model_dump()` adds it); ignored."""


class CallToolAction(_Action):
    """Call one tool of the environment: a step of the episode."""

    type: Literal["call_tool"] = "call_tool"
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ListToolsAction(_Action):
    """List the environment's tools with their input schemas (not a step)."""

    type: Literal["list_tools"] = "list_tools"


class ResetRequest(BaseModel):
    """`reset(**kwargs)`: every key is optional; keys OpenEnv's clients may send for other servers are ignored."""

    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)
    task_spec: dict[str, Any] | None = None
    split: str | None = None
    index: int | None = Field(default=None, ge=0)

    def config(self) -> dict[str, Any]:
        """The task config for `task_from_seed`: the task form the client named, if any."""
        return {key: getattr(self, key) for key in ("task_spec", "split", "index") if getattr(self, key) is not None}


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = None


class _StepFrame(BaseModel):
    type: Literal["step"]
    data: dict[str, Any]


ErrorType = Literal["execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout"]


class ToolError(BaseModel):
    error_type: ErrorType
    message: str


class CallToolObservation(BaseModel):
    """The observation of a `call_tool` step: the tool's result (FastMCP's `CallToolResult` dump) or an error."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    tool_name: str
    result: dict[str, Any] | None
    error: ToolError | None


class EpisodeState(BaseModel):
    model_config = ConfigDict(extra="allow")
    episode_id: str | None = Field(description="The session id: ORS `/ping` and `/delete` take it.")
    step_count: int = Field(ge=0, description="Tool calls that returned a result in this episode.")


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    # Without the input: an action may carry whatever the agent typed.
    return [dict(error) for error in exc.errors(include_url=False, include_context=False, include_input=False)]


class _FrameError(Exception):
    """An error envelope: `{"type": "error", "data": {"message", "code", **extra}}`."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra

    def frame(self) -> str:
        return _dumps({"type": "error", "data": {"message": self.message, "code": self.code, **self.extra}})


def _invalid(exc: ValidationError) -> _FrameError:
    return _FrameError("VALIDATION_ERROR", "Invalid message", errors=_errors(exc))


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


# Actions.


@dataclass(frozen=True)
class _ToolCall:
    name: str
    arguments: dict[str, Any]


_LIST_TOOLS = ListToolsAction()


def _unknown_session(key: Any, exc: OrsError) -> str:
    """OpenEnv's message for a session id that names no live session, saying so when it was reaped."""
    if isinstance(exc, SessionExpired):
        return f"Session {key} expired after {exc.timeout:g} s of inactivity (--session-timeout)"
    return f"Unknown session_id: {key}"


def parse_action(env_cls: type[Environment], data: dict[str, Any]) -> _ToolCall | ListToolsAction:
    """The action a step's data names; raises ValidationError for data that is no action."""
    kind = data.get("type")
    if kind == "list_tools":
        return ListToolsAction.model_validate(data)
    if kind is None and len(env_cls.tools) == 1:
        # The only tool's arguments. A typed client's `model_dump()` adds `metadata`, which is not an argument.
        [spec] = env_cls.tools.values()
        if "metadata" in data and "metadata" not in ((spec.schema or {}).get("properties") or {}):
            data = {key: value for key, value in data.items() if key != "metadata"}
        return _ToolCall(spec.name, data)
    # Anything else must be a call_tool action (an unknown `type` fails on the literal).
    action = CallToolAction.model_validate(data)
    return _ToolCall(action.tool_name, action.arguments)


def action_schema(env_cls: type[Environment]) -> dict[str, Any]:
    """The JSON Schema of a step's data: RFC 003's two actions, and for a one-tool environment its arguments."""
    options = [CallToolAction.model_json_schema(), ListToolsAction.model_json_schema()]
    schema: dict[str, Any] = {"description": "RFC 003 actions: call_tool (a step of the episode) or list_tools."}
    if len(env_cls.tools) == 1:
        [spec] = env_cls.tools.values()
        arguments = dict(spec.schema or {"type": "object", "properties": {}})
        if "$defs" in arguments:
            schema["$defs"] = arguments.pop("$defs")
        arguments["title"] = f"{spec.name} arguments"
        arguments["description"] = (
            f"This environment has one tool, so a step whose data has no `type` is the arguments of `{spec.name}`."
        )
        options.append(arguments)
        schema["description"] += f" Data without a `type` is the arguments of the only tool, `{spec.name}`."
    schema["anyOf"] = options
    return schema


# Rendering results.


def tool_specs(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """The tools (`Calls.tools`) as a `list_tools` observation lists them (`input_schema`, as OpenEnv's `Tool`)."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.schema or {"type": "object", "properties": {}}}
        for t in tools
    ]


def mcp_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """The tools as JSON-RPC `tools/list` answers them: MCP `Tool` dumps, camelCase."""
    return [
        {
            "name": spec["name"],
            "title": None,
            "description": spec["description"],
            "inputSchema": spec["input_schema"],
            "outputSchema": None,
            "icons": None,
            "annotations": None,
            "meta": None,
            "execution": None,
        }
        for spec in tool_specs(tools)
    ]


def call_tool_result(output: ToolOutput) -> dict[str, Any]:
    """A tool's output as FastMCP's `CallToolResult` dump, the shape OpenEnv's clients read (`data` above all:
    `MCPToolClient.call_tool` returns it)."""
    content: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in output.blocks:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text, "annotations": None, "meta": None})
            texts.append(block.text)
        elif isinstance(block, ImageBlock):
            content.append(
                {"type": "image", "data": block.data, "mimeType": block.mimeType, "annotations": None, "meta": None}
            )
    data = "\n".join(texts) if texts else None
    return {"content": content, "structured_content": None, "meta": None, "data": data, "is_error": False}


def tool_error(name: str, result: ToolRejected | ToolCrashed) -> ToolError:
    """A failed call as `CallToolObservation.error`, typed as OpenEnv types its MCP environments' failures."""
    if isinstance(result, ToolCrashed):
        message = f"Error calling tool '{name}': {result.message}"
        lowered = result.message.lower()
        kind: ErrorType = "invalid_args" if "invalid" in lowered or "argument" in lowered else "execution_error"
        return ToolError(error_type=kind, message=message)
    if result.reason == "not_found":
        return ToolError(error_type="tool_not_found", message=f"Unknown tool: '{name}'")
    if result.reason == "input_validation":
        return ToolError(error_type="invalid_args", message=result.message)
    if result.reason == "timeout":
        return ToolError(error_type="timeout", message=result.message)
    return ToolError(error_type="execution_error", message=result.message)


def step_payload(name: str, result: CallResult, session: Session) -> dict[str, Any]:
    """The `data` of the observation frame a `call_tool` step answers."""
    if isinstance(result, ToolOutput):
        metadata = result.metadata or {}
        observation = {"metadata": metadata, "tool_name": name, "result": call_tool_result(result), "error": None}
        payload: dict[str, Any] = {"observation": observation, "reward": result.reward, "done": result.finished}
        if metadata:
            payload["metadata"] = metadata  # OpenEnv copies non-empty observation metadata to the top level
        return payload
    name = session.redact(name)  # the name the client asked for may be any string, a secret value too
    error = tool_error(name, result).model_dump()
    observation = {"metadata": {}, "tool_name": name, "result": None, "error": error}
    return {"observation": observation, "reward": None, "done": session.finished}


def list_tools_payload(tools: Sequence[ToolDef]) -> dict[str, Any]:
    return {"observation": {"metadata": {}, "tools": tool_specs(tools)}, "reward": None, "done": False}


def reset_payload(observation: Any) -> dict[str, Any]:
    """The episode's initial observation as a reset's observation: a JSON object as is (the control plane's
    `initial_state` rule), anything else as `{"observation": value}`."""
    fields = dict(observation) if isinstance(observation, dict) else {"observation": observation}
    fields.setdefault("metadata", {})
    return {"observation": fields, "reward": 0.0, "done": False}


# JSON-RPC.

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
SERVER_UNAVAILABLE = -32000


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _rpc_reply(request_id: Any, result: Any = None, error: _RpcError | None = None) -> dict[str, Any]:
    if error is not None:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": error.code, "message": error.message, "data": error.data},
        }
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


# The face.


def _server_version() -> str:
    try:
        return dist_version("ors-server")
    except PackageNotFoundError:
        return "0"


@dataclass
class _Socket:
    """One connected `/ws` socket and the session it drives."""

    session: Session
    owned: bool
    """The socket opened the session, so the session ends with the socket."""
    idle: anyio.CancelScope | None = None
    """Set while the socket waits for its next frame: cancelled when the session ends elsewhere."""
    ended: bool = False


class OpenEnvFace:
    """The OpenEnv endpoints of every environment, over the shared session store."""

    def __init__(self, registry: Registry, store: SessionStore, calls: Calls, settings: Settings) -> None:
        self.registry, self.store, self.calls, self.settings = registry, store, calls, settings
        self._sockets: dict[str, _Socket] = {}
        self._close_on_detach: set[str] = set()
        """Sessions `openenv/session/close` asked to end while a socket was attached: they end with it."""
        store.on_end.append(self._ended)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[OpenEnvFace]:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(self._keep_connected_alive)
            try:
                yield self
            finally:
                task_group.cancel_scope.cancel()

    async def _keep_connected_alive(self) -> None:
        # A connected socket is activity even when it is quiet: refresh its session more often than the reaper
        # looks, so only sessions without a live peer (ping timeouts close those sockets) are ever reaped.
        while True:
            await anyio.sleep(min(5.0, self.settings.session_timeout / 4))
            for socket in list(self._sockets.values()):
                socket.session.touch()

    def _new_id(self) -> str:
        # Behind a front, the id names this worker, so the front routes `?session_id=` and ORS requests to it.
        return ids.mint(self.settings.worker_tag)

    def env_of(self, env_name: str | None) -> type[Environment]:
        return self.registry.get(env_name)

    # Sessions of sockets.

    async def open_socket(self, env_cls: type[Environment], requested: str | None, path_env: str | None) -> _Socket:
        """The session a new socket drives: a new one, or the live session `requested` (attached, not owned)."""
        if requested is None:
            session, _ = await self.store.open(self._new_id(), env_cls, config={}, created_by=CREATED_BY)
            socket = _Socket(session, owned=True)
        else:
            try:
                session = self.store.get(self.store.check_id(requested), path_env)
            except BadRequest as exc:
                raise _FrameError("SESSION_ERROR", exc.message) from None
            except (NotFound, SessionDeleted) as exc:
                raise _FrameError("SESSION_ERROR", _unknown_session(requested, exc)) from None
            if session.id in self._sockets:
                raise _FrameError("SESSION_ERROR", f"Session {session.id} already has an attached WebSocket")
            socket = _Socket(session, owned=False)
        self._sockets[session.id] = socket
        return socket

    async def close_socket(self, socket: _Socket) -> None:
        """The socket is gone: detach it, and end its session if the socket owned it or a close was asked for."""
        session = socket.session
        if self._sockets.get(session.id) is socket:
            del self._sockets[session.id]
        if socket.owned or session.id in self._close_on_detach:
            self._close_on_detach.discard(session.id)
            if self._current(session):
                await self.store.discard(session.id, "deleted")

    def _ended(self, session: Session, how: str) -> None:
        self._close_on_detach.discard(session.id)
        socket = self._sockets.get(session.id)
        if socket is not None and socket.session is session:
            socket.ended = True
            if socket.idle is not None:
                socket.idle.cancel()

    def _current(self, session: Session) -> bool:
        """Whether `session` is still the live session under its id (refreshing its idle timer)."""
        try:
            return self.store.get(session.id) is session
        except OrsError:
            return False

    async def _ready(self, socket: _Socket) -> Session:
        """The socket's session once set up; a session that ended elsewhere closes the socket."""
        session = socket.session
        if not self._current(session):
            socket.ended = True
            raise _FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        try:
            return await self.store.get_ready(session.id)
        except OrsError as exc:
            raise _FrameError("EXECUTION_ERROR", exc.message) from None

    # Frames.

    async def handle(self, socket: _Socket, raw: str) -> str | None:
        """The one reply to one frame, or None for `close` (which gets none)."""
        try:
            try:
                message = wirejson.loads(raw)
            except wirejson.MalformedJson as exc:
                raise _FrameError("INVALID_JSON", f"Invalid JSON: {exc}") from None
            kind = message.get("type", "") if isinstance(message, dict) else None
            if kind == "step":
                return _dumps({"type": "observation", "data": await self._step(socket, message)})
            if kind == "reset":
                return _dumps({"type": "observation", "data": await self._reset(socket, message.get("data"))})
            if kind == "state":
                return _dumps({"type": "state", "data": await self._state(socket)})
            if kind == "mcp":
                return _dumps({"type": "mcp", "data": await self._mcp_frame(socket, message.get("data"))})
            if kind == "close":
                return None
            if kind is None:
                raise _FrameError("VALIDATION_ERROR", "Invalid message: a frame is a JSON object with a 'type'")
            raise _FrameError("UNKNOWN_TYPE", f"Unknown message type: {kind}")
        except _FrameError as error:
            return error.frame()
        except Exception:
            logger.exception("OpenEnv frame failed", extra={"session_id": socket.session.id})
            return _FrameError("EXECUTION_ERROR", "internal server error").frame()

    async def _step(self, socket: _Socket, message: dict[str, Any]) -> dict[str, Any]:
        try:
            data = _StepFrame.model_validate(message).data
            action = parse_action(socket.session.env_cls, data)
        except ValidationError as exc:
            raise _invalid(exc) from None
        session = await self._ready(socket)
        if isinstance(action, ListToolsAction):
            return list_tools_payload(await self.calls.tools(session.env_cls, session))
        result = await self.calls.call(session, action.name, action.arguments, face=CREATED_BY)
        return step_payload(action.name, result, session)

    async def _reset(self, socket: _Socket, data: Any) -> dict[str, Any]:
        try:
            request = ResetRequest.model_validate(data if data is not None else {})
        except ValidationError as exc:
            raise _invalid(exc) from None
        session = socket.session
        if not self._current(session):
            socket.ended = True
            raise _FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        try:
            await self.reset(session, request)
            return reset_payload(await self.store.initial_observation(session))
        except TaskTooLarge as exc:
            raise _FrameError("VALIDATION_ERROR", exc.message) from None
        except OrsError as exc:
            raise _FrameError("EXECUTION_ERROR", exc.message) from None

    async def reset(self, session: Session, request: ResetRequest) -> None:
        """A new episode in `session`: its task from the request's seed and task form, else the session's own
        (a seed alone reseeds a session made from an explicit task spec). A task the environment cannot make is
        refused before the current episode is touched."""
        config = request.config() or (None if request.seed is None or session.config is not None else {})
        await self.store.reset(session, request.seed, config)
        if session.state is State.SETUP_FAILED:
            raise SetupFailed(session.episode.setup_error or "setup failed")
        if session.state is State.DELETED:
            raise SessionDeleted()

    async def _state(self, socket: _Socket) -> dict[str, Any]:
        session = socket.session
        if not self._current(session):
            socket.ended = True
            raise _FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        return {"episode_id": session.id, "step_count": session.step_count}

    async def _mcp_frame(self, socket: _Socket, data: Any) -> dict[str, Any]:
        return await self.rpc(data, socket.session.env_cls, None, bound=socket.session)

    # JSON-RPC, over POST /mcp and in `mcp` frames.

    async def rpc(
        self, message: Any, env_cls: type[Environment], path_env: str | None, bound: Session | None = None
    ) -> dict[str, Any]:
        """The JSON-RPC response to `message`. `bound` is the session of the socket an `mcp` frame came on."""
        request_id = message.get("id") if isinstance(message, dict) else None
        try:
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                raise _RpcError(INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request")
            method, params = message.get("method"), message.get("params", {})
            if not isinstance(method, str):
                raise _RpcError(INVALID_REQUEST, "Invalid request: 'method' must be a string")
            if not isinstance(params, dict):
                raise _RpcError(INVALID_REQUEST, "Invalid request: 'params' must be an object")
            return _rpc_reply(request_id, await self._rpc_method(method, params, env_cls, path_env, bound))
        except _RpcError as error:
            return _rpc_reply(request_id, error=error)
        except OrsError as exc:
            return _rpc_reply(request_id, error=self._rpc_error_of(exc))
        except Exception:
            logger.exception("OpenEnv JSON-RPC request failed")
            return _rpc_reply(request_id, error=_RpcError(INTERNAL_ERROR, "Internal error"))

    async def _rpc_method(
        self,
        method: str,
        params: dict[str, Any],
        env_cls: type[Environment],
        path_env: str | None,
        bound: Session | None,
    ) -> Any:
        if method == "tools/list":
            session = self._named(params, path_env) or bound
            listed = await self.calls.tools(session.env_cls, session) if session else await self.calls.tools(env_cls)
            return {"tools": mcp_tools(listed)}
        if method == "tools/call":
            return await self._rpc_call(params, env_cls, path_env, bound)
        if method == "openenv/session/create":
            session, _ = await self.store.open(self._new_id(), env_cls, config={}, created_by=CREATED_BY)
            return {"session_id": session.id}
        if method == "openenv/session/close":
            session = self._named(params, path_env)
            if session is None:
                raise _RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
            if session.id in self._sockets:
                self._close_on_detach.add(session.id)
                return {"session_id": session.id, "closed": False, "closing": True}
            await self.store.discard(session.id, "deleted")
            return {"session_id": session.id, "closed": True}
        raise _RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _named(self, params: dict[str, Any], path_env: str | None) -> Session | None:
        """The live session `params.session_id` names (None when it names none)."""
        key = params.get("session_id")
        if key is None:
            return None
        try:
            return self.store.get(self.store.check_id(str(key)), path_env)
        except BadRequest as exc:
            raise _RpcError(INVALID_PARAMS, exc.message) from None
        except (NotFound, SessionDeleted) as exc:
            raise _RpcError(INVALID_PARAMS, _unknown_session(key, exc)) from None

    async def _rpc_call(
        self, params: dict[str, Any], env_cls: type[Environment], path_env: str | None, bound: Session | None
    ) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not name:
            raise _RpcError(INVALID_PARAMS, "Missing 'name' in params")
        if not isinstance(arguments, dict):
            raise _RpcError(INVALID_PARAMS, "Invalid params - 'arguments' must be an object")
        session = self._named(params, path_env) or bound
        if session is not None:
            result = await self.calls.call(await self.store.get_ready(session.id), name, arguments, face=CREATED_BY)
        else:
            # No session named: a throw-away episode for this one call, as OpenEnv makes a throw-away env.
            result = await self.one_off(env_cls, lambda s: self.calls.call(s, name, arguments, face=CREATED_BY))
        if isinstance(result, ToolOutput):
            # Like OpenEnv's /mcp: no reward or done here, though the call is a step of the episode.
            return call_tool_result(result)
        error = tool_error(session.redact(name) if session is not None else name, result)
        code = (
            INVALID_PARAMS
            if error.error_type == "invalid_args" and isinstance(result, ToolRejected)
            else INTERNAL_ERROR
        )
        raise _RpcError(code, error.message)

    def _rpc_error_of(self, exc: OrsError) -> _RpcError:
        """The one mapper from the domain error tree to this face's JSON-RPC errors."""
        if isinstance(exc, CapacityReached):
            data = {"active_sessions": len(self.store), "max_sessions": self.settings.max_sessions}
            return _RpcError(SERVER_UNAVAILABLE, f"Server at capacity: {exc.message}", data)
        if isinstance(exc, Unavailable):
            return _RpcError(SERVER_UNAVAILABLE, exc.message)
        if isinstance(exc, BadRequest | NotFound | SessionDeleted):
            return _RpcError(INVALID_PARAMS, exc.message)
        return _RpcError(INTERNAL_ERROR, exc.message)

    async def one_off(self, env_cls: type[Environment], use: Any, seed: int | None = None, config: Any = None) -> Any:
        """`await use(session)` in a new session of `env_cls` that ends right after (OpenEnv's stateless routes)."""
        session, _ = await self.store.open(
            self._new_id(), env_cls, seed=seed, config=config or {}, created_by=CREATED_BY
        )
        try:
            return await use(await self.store.get_ready(session.id))
        finally:
            with anyio.CancelScope(shield=True):
                await self.store.discard(session.id, "deleted")


def render_error(exc: OrsError) -> Response:
    """HTTP errors in FastAPI's shape, as OpenEnv's server (a FastAPI app) answers them."""
    detail = exc.errors if isinstance(exc, BodyInvalid) else exc.message
    return JSONResponse({"detail": detail}, exc.status, headers=exc.headers)


# Handlers.


def _face(request: Request | WebSocket) -> OpenEnvFace:
    return request.app.state.openenv


def _path_env(request: Request | WebSocket) -> str | None:
    return request.path_params.get("env")


async def socket_endpoint(websocket: WebSocket) -> None:
    face = _face(websocket)
    path_env = _path_env(websocket)
    try:
        env_cls = face.env_of(path_env)
    except EnvironmentNotFound as exc:
        await deny_websocket(websocket.scope, websocket.receive, websocket.send, render_error(exc))
        return
    await websocket.accept()
    try:
        socket = await face.open_socket(env_cls, websocket.query_params.get("session_id"), path_env)
    except (_FrameError, OrsError) as exc:
        await websocket.send_text((exc if isinstance(exc, _FrameError) else _refusal(exc, face, env_cls)).frame())
        await websocket.close(1000)
        return
    try:
        await _serve(websocket, face, socket)
    finally:
        with anyio.CancelScope(shield=True):
            await face.close_socket(socket)


def _refusal(exc: OrsError, face: OpenEnvFace, env_cls: type[Environment]) -> _FrameError:
    """Why a socket gets no session, as OpenEnv's error envelope (sent once, then the socket closes)."""
    if isinstance(exc, CapacityReached):
        return _FrameError(
            "CAPACITY_REACHED", exc.message, active_sessions=len(face.store), max_sessions=face.settings.max_sessions
        )
    if isinstance(exc, InvalidTask):
        return _FrameError("FACTORY_ERROR", exc.message, factory_name=env_cls.name)
    return _FrameError("SESSION_ERROR", exc.message)


async def _answer(
    websocket: WebSocket, face: OpenEnvFace, socket: _Socket, text: str
) -> tuple[str | None, Message | None]:
    """The reply to one frame, and what the client sent meanwhile. The socket is read while the frame runs: a
    disconnect then stops the wait at once (the socket's end ends its session, and so a CodeAct step it runs),
    and a frame sent meanwhile is kept for its turn."""
    reply: str | None = None
    waiting: Message | None = None
    async with anyio.create_task_group() as task_group:

        async def listen() -> None:
            nonlocal waiting
            waiting = await websocket.receive()
            if waiting["type"] == "websocket.disconnect":
                task_group.cancel_scope.cancel()

        task_group.start_soon(listen)
        reply = await face.handle(socket, text)
        task_group.cancel_scope.cancel()
    return reply, waiting


async def _serve(websocket: WebSocket, face: OpenEnvFace, socket: _Socket) -> None:
    """Answer frames one at a time, in order, until `close`, a disconnect or the session's end elsewhere."""
    waiting: Message | None = None
    while not socket.ended:
        if waiting is None:
            with anyio.CancelScope() as idle:
                socket.idle = idle
                message = await websocket.receive()
            socket.idle = None
            if idle.cancelled_caught:
                break
        else:
            message, waiting = waiting, None
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            try:
                text = (message.get("bytes") or b"").decode()
            except UnicodeDecodeError:
                text = ""  # not JSON either: answered INVALID_JSON
        reply, waiting = await _answer(websocket, face, socket, text)
        if waiting is not None and waiting["type"] == "websocket.disconnect":
            return
        if reply is None:
            break
        try:
            await websocket.send_text(reply)
        except (WebSocketDisconnect, OSError):
            return
    with suppress(RuntimeError, WebSocketDisconnect, OSError):
        await websocket.close(1000)


async def jsonrpc_endpoint(request: Request) -> Response:
    face = _face(request)
    path_env = _path_env(request)
    env_cls = face.env_of(path_env)
    raw = await request.body()
    try:
        message = wirejson.loads(raw)
    except wirejson.MalformedJson:
        return JSONResponse(_rpc_reply(None, error=_RpcError(PARSE_ERROR, "Parse error")))
    return JSONResponse(await face.rpc(message, env_cls, path_env))


async def health(request: Request) -> Response:
    _face(request).env_of(_path_env(request))
    return JSONResponse({"status": "healthy"})


async def metadata(request: Request) -> Response:
    env_cls = _face(request).env_of(_path_env(request))
    doc = (env_cls.__doc__ or "").strip()
    return JSONResponse(
        {
            "name": env_cls.name,
            "description": doc.splitlines()[0] if doc else f"The {env_cls.name} environment, served by ors-server.",
            "readme_content": None,
            "version": _server_version(),
            "author": None,
            "documentation_url": None,
        }
    )


_SCHEMAS: dict[str, dict[str, Any]] = {}


def _schemas(env_cls: type[Environment]) -> dict[str, Any]:
    if env_cls.name not in _SCHEMAS:
        _SCHEMAS[env_cls.name] = _build_schemas(env_cls)
    return _SCHEMAS[env_cls.name]


def _build_schemas(env_cls: type[Environment]) -> dict[str, Any]:
    return {
        "action": action_schema(env_cls),
        "observation": CallToolObservation.model_json_schema(),
        "state": EpisodeState.model_json_schema(),
        "reset_observation": {
            "type": "object",
            "description": "The episode's initial observation: a JSON object as the environment gives it, "
            "anything else as {'observation': value}.",
        },
    }


async def schema(request: Request) -> Response:
    return JSONResponse(_schemas(_face(request).env_of(_path_env(request))))


_OPERATIONS = {
    "/ws": ("get", "The session channel (WebSocket): reset, step, state, close and mcp frames."),
    "/mcp": ("post", "OpenEnv's JSON-RPC: tools/list, tools/call, openenv/session/create and openenv/session/close."),
    "/health": ("get", "Health check."),
    "/schema": ("get", "JSON Schemas of the action, observation and state."),
    "/metadata": ("get", "What this environment is."),
    "/reset": ("post", "Reset a fresh environment (stateless: a new episode per request)."),
    "/step": ("post", "Step a fresh environment (stateless: a new episode per request)."),
    "/state": ("get", "The state of a fresh environment."),
}


async def openapi(request: Request) -> Response:
    env_cls = _face(request).env_of(_path_env(request))
    paths = {
        path: {method: {"summary": summary, "responses": {"200": {"description": "OK"}}}}
        for path, (method, summary) in _OPERATIONS.items()
    }
    info = {"title": f"{env_cls.name} (OpenEnv face of ors-server)", "version": _server_version()}
    return JSONResponse({"openapi": "3.1.0", "info": info, "paths": paths})


async def stateless_reset(request: Request) -> Response:
    face = _face(request)
    env_cls = face.env_of(_path_env(request))
    body: ResetRequest = await read_body(request, ResetRequest, empty_ok=True)

    async def observe(session: Session) -> Any:
        return await face.store.initial_observation(session)

    observation = await face.one_off(env_cls, observe, seed=body.seed, config=body.config())
    return JSONResponse({"metadata": None, **reset_payload(observation)})


async def stateless_step(request: Request) -> Response:
    face = _face(request)
    env_cls = face.env_of(_path_env(request))
    body: StepRequest = await read_body(request, StepRequest)
    try:
        action = parse_action(env_cls, body.action)
    except ValidationError as exc:
        raise BodyInvalid(_errors(exc)) from None
    if isinstance(action, ListToolsAction):
        return JSONResponse({"metadata": None, **list_tools_payload(await face.calls.tools(env_cls))})

    async def call(session: Session) -> dict[str, Any]:
        result = await face.calls.call(session, action.name, action.arguments, face=CREATED_BY)
        return step_payload(action.name, result, session)

    return JSONResponse({"metadata": None, **(await face.one_off(env_cls, call))})


async def stateless_state(request: Request) -> Response:
    _face(request).env_of(_path_env(request))
    return JSONResponse({"episode_id": None, "step_count": 0})


def routes() -> list[BaseRoute]:
    """The face's routes; their handlers find the face on `app.state`."""
    inner: list[BaseRoute] = [
        WebSocketRoute("/ws", socket_endpoint),
        Route("/mcp", jsonrpc_endpoint, methods=["POST"]),
        Route("/health", health),
        Route("/schema", schema),
        Route("/metadata", metadata),
        Route("/openapi.json", openapi),
        Route("/reset", stateless_reset, methods=["POST"]),
        Route("/step", stateless_step, methods=["POST"]),
        Route("/state", stateless_state),
    ]
    # `/openenv/{env}/...` cannot match `/openenv/ws` (one segment short), so the order is only for clarity.
    return [Mount(PREFIX + "/{env}", routes=inner), Mount(PREFIX, routes=inner)]


def shape() -> Face:
    """The face's routes and error renderer, without a face behind them (what a front needs to refuse)."""
    return Face("openenv", routes(), render_error)


def face(core: Core) -> Face:
    openenv = OpenEnvFace(core.registry, core.store, core.calls, core.settings)
    return Face("openenv", routes(), render_error, lifespan=openenv.run, state={"openenv": openenv})


__all__ = ["OpenEnvFace", "face", "render_error"]
