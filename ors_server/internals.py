"""Every reach into what the mcp SDK and uvicorn do not publish, in one place, checked at startup.

Three features need more than the public API of those libraries gives:

    the MCP face's plain tools/call (`faces/mcp/plain_call.py`)   answers a 2025-era `tools/call` itself, so it
        finds the SDK's transport by its id (`StreamableHTTPSessionManager._server_instances`) and holds the
        transport's idle countdown while it serves, as the SDK's own `handle_request` does
        (`StreamableHTTPServerTransport._requests_in_flight`, `_idle_timeout`, `idle_scope`)
    bounded HTTP (`http/http_protocol.py`)                        subclasses uvicorn's `HttpToolsProtocol` and
        overrides its httptools parser callbacks, reading the connection state they keep
    bounded WebSockets (`http/websocket_protocol.py`)             subclasses `WebSocketsSansIOProtocol` and reads
        its connection state; its ASGI event types come from `uvicorn._types`

Those modules reach the libraries' internals only through the names below (`sdk_transport`, `hold_idle`, the
event types), and `check()` verifies that every name the three rely on is still there. pyproject.toml pins mcp
and uvicorn (and httptools and websockets, whose protocols the subclasses drive) to the releases the test suite
ran against; a newer one is taken by changing that pin, and `check()` is what says which reach broke, in one
line, before the server takes a request (`create_app`, the CLI).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import PackageNotFoundError, requires, version
from typing import TYPE_CHECKING, Any

import anyio
from uvicorn._types import ASGIReceiveEvent, ASGISendEvent

if TYPE_CHECKING:
    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["ASGIReceiveEvent", "ASGISendEvent", "UnsupportedDependency", "check", "hold_idle", "sdk_transport"]


class UnsupportedDependency(RuntimeError):
    """An installed mcp or uvicorn lacks an internal the server relies on (the message is one line)."""


@dataclass(frozen=True)
class Reach:
    """Names of `owner` (a module, or a class given as `module:Class`) that `feature` relies on.

    `members` are attributes of the owner itself (methods, constants); `state` are instance attributes, which
    exist only on instances: the owner's code must still mention them (read or assign) for them to count."""

    distribution: str
    owner: str
    feature: str
    members: tuple[str, ...] = ()
    state: tuple[str, ...] = ()


REACHES = (
    Reach(
        "mcp",
        "mcp.server.streamable_http_manager:StreamableHTTPSessionManager",
        "the MCP face's plain tools/call",
        members=("handle_request", "run"),
        state=("_server_instances",),
    ),
    Reach(
        "mcp",
        "mcp.server.streamable_http:StreamableHTTPServerTransport",
        "the MCP face's plain tools/call",
        members=("handle_request", "is_terminated"),
        state=("_requests_in_flight", "_idle_timeout", "idle_scope"),
    ),
    Reach(
        "uvicorn",
        "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol",
        "the HTTP limits (--max-header-bytes, --header-timeout, --body-timeout)",
        members=(
            "connection_made",
            "connection_lost",
            "data_received",
            "handle_websocket_upgrade",
            "on_headers_complete",
            "on_body",
            "on_message_complete",
            "on_response_complete",
            "_should_upgrade",
        ),
        state=("parser", "url", "headers", "scope", "cycle", "transport", "loop"),
    ),
    Reach(
        "uvicorn",
        "uvicorn.protocols.http.httptools_impl",
        "the HTTP limits (--max-header-bytes, --header-timeout, --body-timeout)",
        members=("STATUS_LINE",),
    ),
    Reach(
        "uvicorn",
        "uvicorn.protocols.http.httptools_impl:RequestResponseCycle",
        "the HTTP limits (--max-header-bytes, --header-timeout, --body-timeout)",
        state=("response_started", "response_complete", "disconnected", "message_event"),
    ),
    Reach(
        "uvicorn",
        "uvicorn.protocols.websockets.websockets_sansio_impl:WebSocketsSansIOProtocol",
        "the WebSocket limits (--ws-write-buffer-bytes, --ws-write-timeout)",
        members=(
            "connection_made",
            "connection_lost",
            "handle_connect",
            "pause_writing",
            "resume_writing",
            "receive",
            "send",
            "keepalive_timeout",
        ),
        state=("conn", "transport", "queue", "scope", "loop", "handshake_initiated", "handshake_complete"),
    ),
    Reach(
        "uvicorn",
        "uvicorn._types",
        "the WebSocket limits (--ws-write-buffer-bytes, --ws-write-timeout)",
        members=("ASGIReceiveEvent", "ASGISendEvent"),
    ),
)
"""What each feature relies on (`check` verifies all of it)."""


def _installed(distribution: str) -> str:
    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} (version unknown)"


def _pinned(distribution: str) -> str:
    """The requirement on `distribution` ors-server was installed with (`mcp<2.4,>=2.3`), as pyproject.toml has it."""
    try:
        requirements = requires("ors-server") or []
    except PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        name = re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0]
        if name.lower() == distribution and ";" not in requirement:
            return re.sub(r"\[.*?\]", "", requirement)
    return distribution


def _mentions(cls: type, name: str) -> bool:
    """Whether the code of `cls` (or a base class of the same library) reads or assigns the attribute `name`."""
    for klass in cls.__mro__:
        for value in vars(klass).values():
            function = getattr(value, "fget", value)  # a property's getter
            code = getattr(function, "__code__", None)
            if code is not None and name in code.co_names:
                return True
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "__slots__", ()):
            return True
    return False


def missing(reach: Reach) -> list[str]:
    """The names of `reach` that the installed library lacks."""
    module_name, _, class_name = reach.owner.partition(":")
    try:
        owner: Any = import_module(module_name)
        if class_name:
            owner = getattr(owner, class_name)
    except (ImportError, AttributeError):
        return [reach.owner]
    gone = [f"{reach.owner}.{name}" for name in reach.members if not hasattr(owner, name)]
    if isinstance(owner, type):
        gone += [f"{reach.owner}.{name}" for name in reach.state if not _mentions(owner, name)]
    return gone


@functools.cache
def check() -> None:
    """Raise `UnsupportedDependency` naming the first feature whose internals the installed libraries lack."""
    for reach in REACHES:
        gone = missing(reach)
        if gone:
            raise UnsupportedDependency(
                f"{reach.feature} relies on {', '.join(gone)}, which {_installed(reach.distribution)} lacks; "
                f"ors-server is tested with {_pinned(reach.distribution)}"
            )


# The MCP SDK's transports.


def sdk_transport(manager: StreamableHTTPSessionManager, transport_id: str) -> StreamableHTTPServerTransport | None:
    """The SDK's live transport of `transport_id` (as the SDK names it), or None."""
    return manager._server_instances.get(transport_id)


@contextmanager
def hold_idle(transport: StreamableHTTPServerTransport) -> Iterator[None]:
    """Hold the SDK transport's idle countdown while a request the SDK does not see is served (as its
    `handle_request` does for its own)."""
    scope, timeout = transport.idle_scope, transport._idle_timeout
    if scope is None or timeout is None:
        yield
        return
    transport._requests_in_flight += 1
    scope.deadline = math.inf
    try:
        yield
    finally:
        transport._requests_in_flight -= 1
        if not transport._requests_in_flight:
            scope.deadline = anyio.current_time() + timeout
