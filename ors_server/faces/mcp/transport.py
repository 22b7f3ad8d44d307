"""The MCP face's transport glue: the SDK's streamable HTTP session managers (`Transports`), the raw ASGI endpoint
behind every MCP route, and the plumbing around them: whole bodies read and replayed, every refusal as a JSON-RPC
error, the SDK's own Host checks left to the Guard, a request of a bound transport counted and refreshing its
episode, and the transport an answer goes through (JSON, an event stream for progress, or a plain call's
answerer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.environment import Environment
from ors_server.errors import (
    OrsError,
    Refused,
    Unavailable,
)
from ors_server.faces import env_of, wirejson
from ors_server.faces.mcp.binding import Bindings, deleted_while_running, path_key
from ors_server.faces.mcp.handlers import Handlers
from ors_server.faces.mcp.plain_call import PlainCalls, negotiated_version
from ors_server.faces.mcp.wire import EPISODE_SCOPE_KEY, SESSION_HEADER, STREAMED_SCOPE_KEY, rpc_error
from ors_server.faces.tagging import tagged_transport
from ors_server.registry import Registry
from ors_server.settings import Settings


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

    def __init__(self, registry: Registry, transports: Transports) -> None:
        self.registry, self.transports = registry, transports

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = json_errors(scope, send)
        try:
            env_cls = env_of(self.registry, scope, scope.get("path_params", {}).get("env"))
            transport_id = Headers(scope=scope).get(SESSION_HEADER)
            if scope["method"] == "POST" and transport_id is None:
                await self.transports.open(scope, receive, send, env_cls)
            elif transport_id is not None:
                await self.transports.forward(scope, receive, send, transport_id, env_cls)
            else:
                await self.transports.transport(scope, receive, send)
        except OrsError as exc:
            await send_error(scope, send, exc)


class Transports:
    """The SDK's session managers the face answers through, and each request's way to them, bound to its episode."""

    def __init__(self, server: Server[Any], settings: Settings, bindings: Bindings, handlers: Handlers) -> None:
        self.bindings = bindings

        def manager(*, json_response: bool, stateless: bool = False) -> StreamableHTTPSessionManager:
            return StreamableHTTPSessionManager(
                app=server,
                json_response=json_response,
                stateless=stateless,
                security_settings=security(),
                session_idle_timeout=settings.session_timeout,
                max_request_body_size=settings.max_body_bytes,
                max_sessions=settings.max_sessions,
            )

        self.manager = manager(json_response=True)
        # A 2026-07-28 request that asks for progress (`_meta.progressToken`, and accepts SSE) is answered by
        # the SDK's SSE mode instead: JSON still if the handler sends nothing before it ends, else an event
        # stream with the notifications, then the result. It keeps no protocol sessions of its own.
        self.streaming_manager = manager(json_response=False)
        # A request of a 2025 protocol session that asks for progress the same way is answered by a stateless SSE
        # transport of its own: the session's transport answers in JSON, which has no room for notifications.
        # The handlers find the episode by the request's `mcp-session-id` (`Bindings.of_request`), not by the SDK
        # session.
        self.session_streaming_manager = manager(json_response=False, stateless=True)
        # Behind a front, transport ids carry the worker's tag (the SDK mints them untagged).
        self.transport = tagged_transport(self.manager.handle_request, bindings.tag)
        self.streaming = tagged_transport(self.streaming_manager.handle_request, bindings.tag)
        self.plain_calls = PlainCalls(self.manager, bindings.tag, handlers, bindings)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run(), self.streaming_manager.run(), self.session_streaming_manager.run():
            yield

    async def open(self, scope: Scope, receive: Receive, send: Send, env_cls: type[Environment]) -> None:
        """A POST without a transport id: an `initialize` (or a sessionless 2026-07-28 request)."""
        body = await read_body(receive)
        message = parsed(body)
        if not (isinstance(message, dict) and message.get("method") == "initialize"):
            transport = self.transport
            if _wants_progress(message, scope):
                transport, scope[STREAMED_SCOPE_KEY] = self.streaming, True
            else:
                transport = self.plain_calls.current_answerer(scope, body, message) or transport
            await transport(scope, replay(body, receive), send)
            return
        try:
            opening = await self.bindings.open(scope, message, env_cls)
        except OrsError as exc:
            await send_error(scope, send, exc, message.get("id"))
            return
        if opening.session is not None:
            scope[EPISODE_SCOPE_KEY] = opening.session
        refused = False

        async def bind(reply: Message) -> None:
            nonlocal refused
            if refused:
                return
            if reply["type"] == "http.response.start" and reply["status"] < 400:
                transport_id = Headers(raw=reply.get("headers") or []).get(SESSION_HEADER)
                if transport_id:
                    try:
                        self.bindings.bind(opening, transport_id)
                    except OrsError as exc:
                        # Lost a race for the last slot: refuse; the unbound transport idles out.
                        refused = True
                        await send_error(scope, send, exc, message.get("id"))
                        return
            elif reply["type"] == "http.response.body" and opening.bound and not reply.get("more_body", False):
                binding = self.bindings.get(opening.bound[-1])
                if binding is not None and binding.version is None:
                    binding.version = negotiated_version(reply.get("body", b""))
            await send(reply)

        try:
            await self.transport(scope, replay(body, receive), bind)
        finally:
            await self.bindings.opened(opening)

    async def forward(
        self, scope: Scope, receive: Receive, send: Send, transport_id: str, env_cls: type[Environment]
    ) -> None:
        """A request of an existing transport: track it, refresh its episode, and end it on DELETE."""
        binding = self.bindings.get(transport_id)
        if binding is not None and binding.session.env_cls is not env_cls:
            raise Refused(404, "Session not found")  # a transport belongs to its endpoint
        named = path_key(scope)
        if binding is not None and named is not None and binding.session.id != named:
            raise Refused(404, "Session not found")  # ... and to the episode its URL names
        deleting = scope["method"] == "DELETE"
        if binding is not None:
            binding.in_flight += 1
            binding.deleting = binding.deleting or deleting
            self.bindings.current(binding.session)  # refreshes the episode's idle timer
        status = 0
        body: list[bytes] = []
        cut = False
        transport = self.transport
        if binding is not None and scope["method"] == "POST":
            whole = await read_body(receive)
            receive = replay(whole, receive)
            if b"progressToken" in whole and _wants_progress(parsed(whole), scope):
                transport, scope[STREAMED_SCOPE_KEY] = self.session_streaming_manager.handle_request, True
            else:
                transport = self.plain_calls.answerer(scope, whole, binding, transport_id) or transport

        async def read() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))  # for the id of a request the DELETE cuts short
            return message

        async def watch(reply: Message) -> None:
            nonlocal status, cut
            if reply["type"] == "http.response.start":
                status = reply["status"]
                # A request whose transport a DELETE terminated (`deleted_while_running`).
                cut = status == 500 and binding is not None and binding.deleting and not deleting
            if not cut:
                await send(reply)
            elif not reply.get("more_body", False) and reply["type"] == "http.response.body":
                await send_error(scope, send, deleted_while_running(), request_id_of(b"".join(body)))

        try:
            await transport(scope, read, watch)
        except anyio.ClosedResourceError:
            # The transport was closed (a DELETE) while this request was in flight.
            if status == 0:
                await send_error(scope, send, Refused(404, "Session not found"))
        finally:
            if binding is not None:
                binding.in_flight -= 1
                binding.last_seen = anyio.current_time()
                if deleting and not 200 <= status < 300:
                    binding.deleting = False  # the DELETE was refused: the transport lives on
        if binding is not None and (status == 404 or (scope["method"] == "DELETE" and 200 <= status < 300)):
            with anyio.CancelScope(shield=True):
                await self.bindings.close(transport_id, "deleted" if status != 404 else "reaped")


def _wants_progress(message: Any, scope: Scope) -> bool:
    """A request that carries a progress token from a client that accepts an event stream."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not (isinstance(meta, dict) and meta.get("progressToken") is not None):
        return False
    return "text/event-stream" in Headers(scope=scope).get("accept", "")


def routes(endpoint: ASGIApp) -> list[BaseRoute]:
    """The face's routes, every one to `endpoint`."""
    # methods=None: every method reaches the transport, which answers 405 as a JSON-RPC error itself.
    paths = ("/mcp", "/{env}/mcp", "/mcp/episodes/{session_id}", "/{env}/mcp/episodes/{session_id}")
    return [Route(path + slash, endpoint, methods=None) for path in paths for slash in ("", "/")]
