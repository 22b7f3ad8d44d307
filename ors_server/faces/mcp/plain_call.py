"""A plain `tools/call` of a 2025 protocol session, answered without the SDK's transport.

The SDK's stateful streamable HTTP transport hands each request through memory streams to the session's task,
its dispatcher and middleware, and the answer back the same way: measured in-process, ~600 of the ~850 µs of CPU
a FrozenLake move costs over MCP, and most of an Eval Protocol rollout step. The MCP face answers the commonest
request itself: a `tools/call` with no progress token, on a transport bound to an episode, in JSON mode, with the
headers the SDK would accept. It is checked and answered with the SDK's own validators and serializers for the
negotiated protocol version, so the bytes are the SDK's (tests/faces/test_mcp_plain_call.py compares them
request by request with this path switched off). Anything else goes to the SDK, which answers it (and its errors).

While such a call runs, the SDK transport's idle countdown is held as the SDK holds it for its own requests, so
a client that only calls tools is never reaped by the SDK as idle (`ors_server.internals.hold_idle`: what this
needs of the SDK's internals is there, checked at startup).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import pydantic_core
from mcp import types
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import JSONRPCRequest, JSONRPCResponse, RequestId, jsonrpc_message_adapter
from mcp_types import methods as sdk_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ors_server.faces.mcp.binding import Binding, Bindings, deleted_while_running
from ors_server.faces.mcp.handlers import Handlers
from ors_server.faces.mcp.wire import rpc_error
from ors_server.ids import WorkerTag, split
from ors_server.internals import hold_idle, sdk_transport

VERSION_HEADER = "mcp-protocol-version"


@dataclass(frozen=True)
class PlainCall:
    request_id: RequestId
    params: types.CallToolRequestParams
    version: str
    """The protocol version the session negotiated: what the answer is validated and shaped for."""


def plain_call(request: Request, body: bytes, version: str | None) -> PlainCall | None:
    """`body` as a plain `tools/call` the SDK would accept on this session (negotiated `version`), else None."""
    if version is None or version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    headers = request.headers
    header_version = headers.get(VERSION_HEADER)
    if header_version is not None and header_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # the SDK routes it to the 2026-07-28 era
    content_type = headers.get("content-type", "").split(";")[0]
    if "application/json" not in (part.strip() for part in content_type.split(",")):
        return None
    if not check_accept_headers(request)[0]:
        return None
    try:
        message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
    except ValueError:  # ValidationError included: the SDK answers it
        return None
    if not isinstance(message, JSONRPCRequest) or message.method != "tools/call":
        return None
    params = message.params or {}
    meta = params.get("_meta")
    if isinstance(meta, dict) and meta.get("progressToken") is not None:
        return None  # answered as an event stream, by the SDK
    try:
        sdk_methods.validate_client_request("tools/call", version, params)
        typed = types.CallToolRequestParams.model_validate(params, by_name=False)
    except (KeyError, ValidationError):
        return None
    return PlainCall(message.id, typed, version)


def answer(call: PlainCall, result: types.CallToolResult, transport_id: str) -> Response:
    """The SDK's JSON answer to `call`: its result shaped for the session's version, in its JSON-RPC envelope."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    shaped = sdk_methods.serialize_server_result("tools/call", call.version, dumped)
    reply = JSONRPCResponse(jsonrpc="2.0", id=call.request_id, result=shaped)
    headers = {"Content-Type": "application/json", "mcp-session-id": transport_id}
    return Response(reply.model_dump_json(by_alias=True, exclude_unset=True), headers=headers)


def negotiated_version(initialize_reply: bytes) -> str | None:
    """The protocol version of an `initialize` answer (a JSON-RPC response body), or None."""
    try:
        reply: Any = pydantic_core.from_json(initialize_reply)
        version = reply["result"]["protocolVersion"]
    except (ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, str) else None


class PlainCalls:
    """The answerer of plain calls on the transports of one session manager (the face's JSON one)."""

    answered = True
    """Answer plain calls here at all (off: the SDK answers every request; the tests compare the two)."""

    def __init__(
        self, manager: StreamableHTTPSessionManager, tag: WorkerTag | None, handlers: Handlers, bindings: Bindings
    ) -> None:
        self.manager, self.tag, self.handlers, self.bindings = manager, tag, handlers, bindings

    def answerer(self, scope: Scope, body: bytes, binding: Binding, transport_id: str) -> ASGIApp | None:
        """An answerer for `body` if it is a plain `tools/call` of this live transport, else None (the SDK's)."""
        if not self.answered:
            return None
        call = plain_call(Request(scope), body, binding.version)
        if call is None:
            return None
        found = split(transport_id) if self.tag is not None else None
        sdk_id = found[1] if found is not None and found[0] == self.tag else transport_id
        sdk = sdk_transport(self.manager, sdk_id)
        if sdk is None or sdk.is_terminated or (sdk.idle_scope is not None and sdk.idle_scope.cancel_called):
            return None
        handlers, bindings = self.handlers, self.bindings

        async def answerer(scope: Scope, receive: Receive, send: Send) -> None:
            shown = binding.session.redact(call.params.name)
            scope.setdefault("state", {})["tool"] = shown  # for the access log
            result = None
            with hold_idle(sdk), anyio.CancelScope() as waiting:
                binding.plain_calls.add(
                    waiting
                )  # `Bindings.close` cancels it, as the SDK ends its requests at a DELETE
                try:
                    result = await handlers.tool_result(
                        call.params, shown, lambda: bindings.bound_session(binding), handlers.runner(call.params)
                    )
                finally:
                    binding.plain_calls.discard(waiting)
            if result is None:
                await rpc_error(deleted_while_running(), call.request_id)(scope, receive, send)
            else:
                await answer(call, result, transport_id)(scope, receive, send)

        return answerer
