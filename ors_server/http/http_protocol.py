"""How much a client may make the server hold before any face runs: header bytes, and time to send a request.

uvicorn's httptools protocol (what `uvicorn[standard]` picks) buffers a header of any size (the parser grows it
by concatenation, so a 160 MiB header also stalls the event loop) and waits forever for a client that sends its
request a byte at a time. This subclass keeps httptools' speed and adds the three missing bounds: bytes before
the end of the headers, time to receive the headers, and time to receive the body. uvicorn's h11 protocol has a
header size limit but no read timeouts either, and is slower on the call path.

The subclass drives uvicorn's parser callbacks and reads the connection state it keeps: what it relies on is
listed in `ors_server.internals`, checked when the class is configured (`bounded_by`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from starlette.responses import JSONResponse, Response
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from ors_server import internals
from ors_server.errors import Refused
from ors_server.faces import FaceTable
from ors_server.http.coalescing import CoalescingTransport
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.http")

LINGER = 2.0
"""Seconds a refused connection is still read (and what arrives dropped) so the client gets the answer."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """httptools with a header size limit (431) and header and body receive timeouts (408).

    The header clock starts at the request's first byte (at connect for a new connection: one that never
    sends a byte is closed too); the body clock when the headers are in. Both stop once the request has
    arrived, so a long tool call or a long-lived keep-alive connection is not affected (idle keep-alive
    connections are uvicorn's `timeout_keep_alive`'s business). Our faces read a body as soon as its request
    starts, so the body clock measures the client, not the app.

    Starting and stopping a clock only sets a deadline: a timer per request (two, with the body's) would cost
    more than the rest of this class on the call path. One timer per connection checks the deadline; it is
    never set further ahead than the shorter timeout, so it fires before any deadline set after it, and it
    lapses when it finds no clock running.
    """

    max_header_bytes: ClassVar[int]
    header_timeout: ClassVar[float]
    body_timeout: ClassVar[float]
    faces: ClassVar[FaceTable | None]
    """Whose shape a refusal takes (by its path); without faces, ORS's `{"detail"}`."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.awaiting_headers = True
        self.header_bytes = 0
        self.read_timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None
        """When the running clock (`clock_part`, `clock_seconds`) runs out; None when no clock runs."""
        self.clock_part = "headers"
        self.clock_seconds = 0.0
        self.headers_seen = 0
        self.refused = False

    @classmethod
    def bounded_by(cls, settings: Settings, faces: FaceTable | None = None) -> type[BoundedHttpToolsProtocol]:
        """This protocol with the limits of `settings` (uvicorn builds protocols from a class)."""
        internals.check()
        limits = {
            "max_header_bytes": settings.max_header_bytes,
            "header_timeout": settings.header_timeout,
            "body_timeout": settings.body_timeout,
            "faces": faces,
        }
        return type(cls.__name__, (cls,), limits)

    # Connection events.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # A response's head and body go out in one write (`CoalescingTransport`).
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self._start_clock(self.header_timeout, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # lingering after a refusal: what the client still sends is dropped unread
        was_awaiting_headers, headers_seen = self.awaiting_headers, self.headers_seen
        if was_awaiting_headers and self.deadline is None:  # the first byte of a request on a kept-alive connection
            self._start_clock(self.header_timeout, "headers")
        super().data_received(data)
        if was_awaiting_headers and self.headers_seen == headers_seen and not self.refused:
            # Still inside one header block. Counted after parsing so that httptools holds at most one read's
            # worth past the limit; a block that ends within the read is measured in on_headers_complete.
            self.header_bytes += len(data)
            if self.header_bytes > self.max_header_bytes:
                self._refuse_large_headers()

    def on_response_complete(self) -> None:
        # The response is whole: send it now rather than at the end of this turn of the loop.
        if isinstance(self.transport, CoalescingTransport):
            self.transport.flush()
        super().on_response_complete()

    def handle_websocket_upgrade(self) -> None:
        self._cancel_timer()  # the WebSocket protocol takes the connection over, and the transport itself
        if isinstance(self.transport, CoalescingTransport):
            self.transport = self.transport.unwrapped()
        super().handle_websocket_upgrade()

    # Parser callbacks.

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.awaiting_headers = False
        self.headers_seen += 1
        self.header_bytes = 0
        self._stop_clock()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_header_bytes:
            return self._refuse_large_headers()
        super().on_headers_complete()
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self._start_clock(self.body_timeout, "body")

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        self.awaiting_headers = True
        self._stop_clock()
        super().on_message_complete()

    # Refusals.

    def _start_clock(self, seconds: float, part: str) -> None:
        now = self.loop.time()
        self.deadline, self.clock_part, self.clock_seconds = now + seconds, part, seconds
        if self.read_timer is None:
            self._arm(now)

    def _stop_clock(self) -> None:
        self.deadline = None  # an armed timer lapses when it fires

    def _arm(self, now: float) -> None:
        assert self.deadline is not None
        shortest = min(self.header_timeout, self.body_timeout)
        self.read_timer = self.loop.call_at(min(self.deadline, now + shortest), self._check_clock)

    def _cancel_timer(self) -> None:
        self.deadline = None
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

    def _check_clock(self) -> None:
        self.read_timer = None
        if self.deadline is None:
            return
        now = self.loop.time()
        if now < self.deadline:
            return self._arm(now)
        self.deadline = None
        self._timed_out(self.clock_seconds, self.clock_part)

    def _timed_out(self, seconds: float, part: str) -> None:
        if part == "headers" and self.header_bytes == 0 and not getattr(self, "url", b""):
            self.transport.close()  # nothing of a request arrived: there is no one to answer
            return
        logger.info("closed a connection: request %s not received within %s s", part, seconds)
        self._refuse(408, f"request {part} not received within {seconds} s")

    def _refuse_large_headers(self) -> None:
        self._refuse(431, f"request headers larger than {self.max_header_bytes} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` in the face's shape if nothing else is being answered on this connection, and close it."""
        if self.transport.is_closing() or self.refused:
            return
        self.refused = True
        cycle = self.cycle
        if self.awaiting_headers or "path" not in self.scope:
            busy = cycle is not None and not cycle.response_complete  # a pipelined request is still being answered
            path = bytes(getattr(self, "url", b"")).partition(b"?")[0].decode("latin-1")
        else:
            busy = cycle.response_started
            path = self.scope["path"]
        if not busy:
            self.transport.write(self._raw_error(status, path, message))
        if cycle is not None and not cycle.response_complete:
            # What connection_lost would do, at once: the app reading this request sees a disconnect and its
            # answer is dropped, rather than written after ours.
            cycle.disconnected = True
            cycle.message_event.set()
        # Close our side but keep reading a moment: closing a socket with unread data sends a reset, which
        # would destroy the answer before a client still sending its request reads it.
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER, self.transport.close)

    def _raw_error(self, status: int, path: str, message: str) -> bytes:
        refusal = Refused(status, message)
        if self.faces is None:
            response: Response = JSONResponse({"detail": message}, status)
        else:
            method = self.scope.get("method", "GET") if self.scope else "GET"
            scope = {"type": "http", "path": path or "/", "root_path": "", "method": method}
            response = self.faces.of(scope).render_error(refusal)
        head = [STATUS_LINE[status]]
        for name, value in response.raw_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"connection: close\r\n\r\n")
        return b"".join(head) + bytes(response.body)
