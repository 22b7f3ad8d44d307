"""The MCP face's transport glue: the raw ASGI endpoint behind every MCP route, and the request and response
plumbing around the SDK's streamable HTTP transport (whole bodies read and replayed, every refusal as a
JSON-RPC error, the SDK's own Host checks left to the Guard)."""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.errors import (
    OrsError,
    Refused,
    Unavailable,
)
from ors_server.faces import env_of, wirejson
from ors_server.faces.mcp.wire import SESSION_HEADER, rpc_error

if TYPE_CHECKING:
    from ors_server.faces.mcp.sessions import McpFace


def security() -> TransportSecuritySettings:
    # Host and Origin are checked once for every face by the Guard (ors_server.http.hosts), with the same rules as
    # the SDK's but case-insensitive names; the SDK still checks a POST's Content-Type.
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


async def read_body(receive: Receive) -> bytes:
    """The whole request body (bounded by the `Guard` middleware, which answers 413 past the limit)."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise Refused(400, "client disconnected")
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def request_id_of(body: bytes) -> Any:
    """The JSON-RPC id of a request body (None if it has none or is no request)."""
    try:
        message = wirejson.loads(body)
    except wirejson.MalformedJson:
        return None
    return message.get("id") if isinstance(message, dict) else None


def parsed(body: bytes) -> Any:
    try:
        return wirejson.loads(body)
    except wirejson.MalformedJson:
        return None  # the transport answers the parse error


def replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def send_error(scope: Scope, send: Send, exc: OrsError, request_id: Any = None) -> None:
    await rpc_error(exc, request_id)(scope, no_receive, send)


async def no_receive() -> Message:
    return {"type": "http.disconnect"}


def json_errors(scope: Scope, send: Send) -> Send:
    """Wrap `send` so every error response is a JSON-RPC error (the SDK answers some refusals in plain text,
    e.g. 421 for a bad Host or 413 for a large body), and a 503 carries Retry-After."""
    held: dict[str, Any] = {}

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            status = message["status"]
            content_type = Headers(raw=message.get("headers") or []).get("content-type", "")
            if status >= 400 and not content_type.startswith("application/json"):
                held["status"], held["body"] = status, b""
                return
            if status == 503:
                headers = MutableHeaders(raw=list(message.get("headers") or []))
                headers.setdefault("retry-after", str(Unavailable.retry_after))
                message = {**message, "headers": headers.raw}
        elif message["type"] == "http.response.body" and "status" in held:
            held["body"] += message.get("body", b"")
            if not message.get("more_body", False):
                status = held["status"]
                text = held["body"].decode("utf-8", "replace").strip() or HTTPStatus(status).phrase
                retry = {"Retry-After": str(Unavailable.retry_after)} if status == 503 else None
                await send_error(scope, send, Refused(status, text, retry))
            return
        await send(message)

    return wrapped


class Endpoint:
    """The raw ASGI endpoint behind every MCP route (a class instance, so Starlette serves it as ASGI)."""

    def __init__(self, face: McpFace) -> None:
        self.face = face

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = json_errors(scope, send)
        try:
            env_cls = env_of(self.face.registry, scope, scope.get("path_params", {}).get("env"))
            transport_id = Headers(scope=scope).get(SESSION_HEADER)
            if scope["method"] == "POST" and transport_id is None:
                await self.face.open(scope, receive, send, env_cls)
            elif transport_id is not None:
                await self.face.forward(scope, receive, send, transport_id, env_cls)
            else:
                await self.face.transport(scope, receive, send)
        except OrsError as exc:
            await send_error(scope, send, exc)


def routes(endpoint: ASGIApp) -> list[BaseRoute]:
    """The face's routes, every one to `endpoint`."""
    # methods=None: every method reaches the transport, which answers 405 as a JSON-RPC error itself.
    paths = ("/mcp", "/{env}/mcp", "/mcp/episodes/{session_id}", "/{env}/mcp/episodes/{session_id}")
    return [Route(path + slash, endpoint, methods=None) for path in paths for slash in ("", "/")]
