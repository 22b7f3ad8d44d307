"""The OpenEnv face's WebSocket transport: `/ws`, one session per socket, one reply per frame (reset, step, state,
close and `mcp` frames), in order."""

from __future__ import annotations

import logging
from contextlib import suppress
from typing import Any

import anyio
from pydantic import ValidationError
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from ors_server.environment import Environment
from ors_server.errors import BadRequest, CapacityReached, EnvironmentNotFound, InvalidTask, OrsError, TaskTooLarge
from ors_server.faces import deny_websocket, wirejson
from ors_server.faces.openenv import native
from ors_server.faces.openenv.jsonrpc import JsonRpc
from ors_server.faces.openenv.sessions import OpenEnvFace, Socket
from ors_server.faces.openenv.wire import (
    CREATED_BY,
    FrameError,
    ListToolsAction,
    ResetRequest,
    StepFrame,
    described,
    dumps,
    invalid_frame,
    list_tools_payload,
    parse_action,
    render_error,
    reset_payload,
    step_payload,
)
from ors_server.records.labels import HEADER as LABELS_HEADER
from ors_server.records.labels import parse_header as parse_labels
from ors_server.sessions import Session

logger = logging.getLogger("ors_server.openenv")


class SocketChannel:
    """The `/ws` endpoint over the face's sessions; `mcp` frames go to the face's JSON-RPC."""

    def __init__(self, face: OpenEnvFace, rpc: JsonRpc) -> None:
        self.face, self.rpc = face, rpc

    async def endpoint(self, websocket: WebSocket) -> None:
        face = self.face
        path_env = websocket.path_params.get("env")
        try:
            env_cls = face.env_of(websocket.scope, path_env)
            labels = parse_labels(websocket.headers.get(LABELS_HEADER))
        except (EnvironmentNotFound, BadRequest) as exc:
            await deny_websocket(websocket.scope, websocket.receive, websocket.send, render_error(exc))
            return
        await websocket.accept()
        try:
            socket = await face.open_socket(env_cls, websocket.query_params.get("session_id"), path_env, labels)
        except (FrameError, OrsError) as exc:
            await websocket.send_text((exc if isinstance(exc, FrameError) else _refusal(exc, face, env_cls)).frame())
            await websocket.close(1000)
            return
        try:
            await _serve(websocket, self, socket)
        finally:
            with anyio.CancelScope(shield=True):
                await face.close_socket(socket)

    async def _ready(self, socket: Socket) -> Session:
        """The socket's session once set up; a session that ended elsewhere closes the socket."""
        session = socket.session
        if not self.face.current(session):
            socket.ended = True
            raise FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        try:
            return await self.face.store.get_ready(session.id)
        except OrsError as exc:
            raise FrameError("EXECUTION_ERROR", exc.message) from None

    async def handle(self, socket: Socket, raw: str) -> str | None:
        """The one reply to one frame, or None for `close` (which gets none)."""
        try:
            try:
                message = wirejson.loads(raw)
            except wirejson.MalformedJson as exc:
                raise FrameError("INVALID_JSON", f"Invalid JSON: {exc}") from None
            kind = message.get("type", "") if isinstance(message, dict) else None
            if kind == "step":
                return dumps({"type": "observation", "data": await self._step(socket, message)})
            if kind == "reset":
                return dumps({"type": "observation", "data": await self._reset(socket, message.get("data"))})
            if kind == "state":
                return dumps({"type": "state", "data": await self._state(socket)})
            if kind == "mcp":
                return dumps({"type": "mcp", "data": await self._mcp_frame(socket, message.get("data"))})
            if kind == "close":
                return None
            if kind is None:
                raise FrameError("VALIDATION_ERROR", "Invalid message: a frame is a JSON object with a 'type'")
            raise FrameError("UNKNOWN_TYPE", f"Unknown message type: {kind}")
        except FrameError as error:
            return error.frame()
        except Exception:
            logger.exception("OpenEnv frame failed", extra={"session_id": socket.session.id})
            return FrameError("EXECUTION_ERROR", "internal server error").frame()

    async def _step(self, socket: Socket, message: dict[str, Any]) -> dict[str, Any]:
        try:
            data = StepFrame.model_validate(message).data
            action = parse_action(socket.session.env_cls, data)
        except ValidationError as exc:
            raise invalid_frame(exc) from None
        session = await self._ready(socket)
        hosted = described(session.env_cls) is not None
        if isinstance(action, ListToolsAction):
            if hosted:
                listed: dict[str, Any] = await native.ask(self.face.store, session, "list_tools")
                return listed
            return list_tools_payload(await self.face.calls.tools(session.env_cls, session))
        result = await self.face.calls.call(session, action.name, action.arguments, face=CREATED_BY)
        answered = native.step_data(result) if hosted else None
        return answered if answered is not None else step_payload(action.name, result, session)

    async def _reset(self, socket: Socket, data: Any) -> dict[str, Any]:
        if described(socket.session.env_cls) is not None:
            return await self._native_reset(socket, data)
        try:
            request = ResetRequest.model_validate(data if data is not None else {})
        except ValidationError as exc:
            raise invalid_frame(exc) from None
        session = socket.session
        if not self.face.current(session):
            socket.ended = True
            raise FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        try:
            await self.face.reset(session, request)
            return reset_payload(await self.face.store.initial_observation(session))
        except TaskTooLarge as exc:
            raise FrameError("VALIDATION_ERROR", exc.message) from None
        except OrsError as exc:
            raise FrameError("EXECUTION_ERROR", exc.message) from None

    async def _state(self, socket: Socket) -> dict[str, Any]:
        session = socket.session
        if not self.face.current(session):
            socket.ended = True
            raise FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        if described(session.env_cls) is not None:
            state: dict[str, Any] = await native.ask(self.face.store, await self._ready(socket), "state")
            return state
        return {"episode_id": session.id, "step_count": session.step_count}

    async def _native_reset(self, socket: Socket, data: Any) -> dict[str, Any]:
        """A reset of an OpenEnv class: a new episode whose task is the frame's data, `reset()`'s keyword arguments
        (the class keeps those its signature takes), answered with the class's reset observation."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise FrameError("VALIDATION_ERROR", "Invalid message: a reset's data is an object")
        session = socket.session
        if not self.face.current(session):
            socket.ended = True
            raise FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        try:
            await self.face.store.reset(session, None, {"task_spec": data})
        except TaskTooLarge as exc:
            raise FrameError("VALIDATION_ERROR", exc.message) from None
        except OrsError as exc:
            raise FrameError("EXECUTION_ERROR", exc.message) from None
        observation: dict[str, Any] = await native.ask(self.face.store, await self._ready(socket), "reset_observation")
        return observation

    async def _mcp_frame(self, socket: Socket, data: Any) -> dict[str, Any]:
        return await self.rpc.answer(data, socket.session.env_cls, None, bound=socket.session)


def _refusal(exc: OrsError, face: OpenEnvFace, env_cls: type[Environment]) -> FrameError:
    """Why a socket gets no session, as OpenEnv's error envelope (sent once, then the socket closes)."""
    if isinstance(exc, CapacityReached):
        return FrameError(
            "CAPACITY_REACHED", exc.message, active_sessions=len(face.store), max_sessions=face.settings.max_sessions
        )
    if isinstance(exc, InvalidTask):
        return FrameError("FACTORY_ERROR", exc.message, factory_name=env_cls.name)
    return FrameError("SESSION_ERROR", exc.message)


async def _answer(
    websocket: WebSocket, channel: SocketChannel, socket: Socket, text: str
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
        reply = await channel.handle(socket, text)
        task_group.cancel_scope.cancel()
    return reply, waiting


async def _serve(websocket: WebSocket, channel: SocketChannel, socket: Socket) -> None:
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
        reply, waiting = await _answer(websocket, channel, socket, text)
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
