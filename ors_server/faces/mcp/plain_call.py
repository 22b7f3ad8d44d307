"""A plain `tools/call`, answered without the SDK's transport: of a 2025 protocol session, or (2026-07-28) a
sessionless one naming its episode.

The SDK's stateful streamable HTTP transport hands each request through memory streams to the session's task,
its dispatcher and middleware, and the answer back the same way: measured in-process, ~600 of the ~850 µs of CPU
a FrozenLake move costs over MCP, and most of an Eval Protocol rollout step. The MCP face answers the commonest
request itself: a `tools/call` with no progress token, on a transport bound to an episode, in JSON mode, with the
headers the SDK would accept. It is checked and answered with the SDK's own validators and serializers for the
negotiated protocol version, so the bytes are the SDK's (tests/faces/test_mcp_plain_call.py compares them
request by request with this path switched off). Anything else goes to the SDK, which answers it (and its errors).

A 2026-07-28 `tools/call` goes through the SDK's single-exchange entry instead (`handle_modern_request`,
`serve_one`): a runner, a dispatch context, a connection and the middleware chain built per request, ~600 of its
~1500 µs in process (bench/request_kinds.py). The face answers it itself where that entry would hand it to our
handler and answer in JSON: the same checks in the same order (Content-Type, Accept, one request, no duplicated
routing header, the SDK's classification of the envelope against the headers, the params valid for the version),
on a request that names its episode (its URL or `X-Session-ID`: else the SDK's error says how to name one) and
asks for no progress. Its result is shaped as the SDK's kernel shapes it for the version
(`serialize_server_result`, `resultType`, the `serverInfo` stamp) and written as its entry writes it. What the
fast path leaves out is the SDK's OpenTelemetry span per request (a no-op without a configured tracer), as the
2025 path does.

While a 2025 call runs, the SDK transport's idle countdown is held as the SDK holds it for its own requests, so
a client that only calls tools is never reaped by the SDK as idle (`ors_server.internals.hold_idle`: what this
needs of the SDK's internals is there, checked at startup).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import pydantic_core
from mcp import types
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types import (
    CORE_RESULT_TYPES,
    INTERNAL_ERROR,
    SERVER_INFO_META_KEY,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types import methods as sdk_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ors_server.faces.mcp.binding import Binding, Bindings, deleted_while_running, named_key
from ors_server.faces.mcp.handlers import Handlers
from ors_server.faces.mcp.wire import rpc_error
from ors_server.ids import WorkerTag, split
from ors_server.internals import hold_idle, sdk_transport

logger = logging.getLogger("ors_server.mcp")

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


def current_call(request: Request, body: bytes, message: Any, max_body: int) -> PlainCall | None:
    """`message` (`body`, parsed) as a 2026-07-28 `tools/call` the SDK's single-exchange entry, in JSON mode,
    would hand to our handler, naming its episode and asking for no progress; else None (the SDK answers it)."""
    headers = request.headers
    if headers.get(VERSION_HEADER) not in MODERN_PROTOCOL_VERSIONS or len(body) > max_body:
        return None
    content_type = headers.get("content-type")
    if content_type is None or not content_type.lower().startswith("application/json"):
        return None  # the SDK's 400
    if not check_accept_headers(request)[0]:
        return None  # its 406
    if not isinstance(message, dict) or "id" not in message or message.get("method") != "tools/call":
        return None
    if named_key(request) is None:
        return None  # its error says how to name an episode
    try:
        envelope = JSONRPCRequest.model_validate(message)
    except ValidationError:
        return None
    if find_duplicated_routing_header(headers.items()) is not None:
        return None
    verdict = classify_inbound_request(message, headers=dict(headers))
    if not isinstance(verdict, InboundModernRoute):
        return None
    params = envelope.params or {}
    if progress_token_from_params(params) is not None:
        return None
    try:
        sdk_methods.validate_client_request("tools/call", verdict.protocol_version, params)
        typed = types.CallToolRequestParams.model_validate(params, by_name=False)
    except (KeyError, ValidationError):
        return None
    return PlainCall(envelope.id, typed, verdict.protocol_version)


def current_answer(call: PlainCall, result: types.CallToolResult, server_info: dict[str, Any]) -> Response:
    """The SDK's JSON answer to a 2026-07-28 `call`: its kernel's shaping of `result`, in its entry's envelope."""
    reply: JSONRPCResponse | JSONRPCError
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    result_type = dumped.get("resultType")
    try:
        if not isinstance(result_type, str) or result_type in CORE_RESULT_TYPES:
            dumped = sdk_methods.serialize_server_result("tools/call", call.version, dumped)
    except ValidationError:
        logger.exception("tools/call returned an invalid result")
        error = ErrorData(code=INTERNAL_ERROR, message="Handler returned an invalid result")
        reply = JSONRPCError(jsonrpc="2.0", id=call.request_id, error=error)
    else:
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")
        if meta is None:
            dumped["_meta"] = {SERVER_INFO_META_KEY: server_info}
        elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
            dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: server_info}
        reply = JSONRPCResponse(jsonrpc="2.0", id=call.request_id, result=dumped)
    status = ERROR_CODE_HTTP_STATUS.get(reply.error.code, 200) if isinstance(reply, JSONRPCError) else 200
    text = json.dumps(reply.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":"))
    return Response(text, status_code=status, media_type="application/json")


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

    def current_answerer(self, scope: Scope, body: bytes, message: Any) -> ASGIApp | None:
        """An answerer for `body` if it is a plain 2026-07-28 `tools/call` (sessionless), else None (the SDK's)."""
        if not self.answered or "tools/call" in self.handlers.server.cache_hints:
            return None
        request = Request(scope)
        call = current_call(request, body, message, self.manager.max_request_body_size)
        if call is None:
            return None
        handlers, bindings = self.handlers, self.bindings

        async def answerer(scope: Scope, receive: Receive, send: Send) -> None:
            # Shown as the SDK path's handler shows a sessionless call (it has no episode to mask by yet).
            scope.setdefault("state", {})["tool"] = call.params.name
            result = await handlers.tool_result(
                call.params, call.params.name, lambda: bindings.session_for(request), handlers.runner(call.params)
            )
            stamp = handlers.server.server_info_stamp
            await current_answer(call, result, stamp)(scope, receive, send)

        return answerer
