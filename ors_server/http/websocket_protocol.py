"""How much a WebSocket client may make the server hold: what is queued to it, and for how long it may not read.

uvicorn's WebSocket protocol (`websockets-sansio`, what `--ws auto` picks when the `websockets` package is there)
answers every ping at once with a pong written into the connection's buffer, whether or not the client reads:
a client that sends pings as fast as it can and never reads grew a server by ~27 MB/s, 1.1 GB on one
connection, and the event loop spent its time on that socket. Its keepalive then "closed" the connection with
`transport.close()`, which waits for the buffer to drain and so never ends for a peer that does not read.

This subclass applies TCP's own flow control to the connection: once the buffer queued to the client passes
`write_buffer_bytes`, nothing more is read from it (so no more pongs are made, and its sends back up into its
own kernel buffers) until it has read enough (down to a quarter of that). A client that makes no progress at all
reading for `write_timeout` seconds is closed (1008) and its socket aborted, which drops what was queued; so
is any connection our keepalive gives up on. What one connection holds is then bounded by the buffer limit plus
the one message being written (a tool result, at most `--max-output-chars`) plus the kernel's socket buffers.
What the subclass relies on of uvicorn's class is listed in `ors_server.internals`, checked in `bounded_by`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from uvicorn.config import Config
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.http11 import Request

from ors_server import internals
from ors_server.internals import ASGIReceiveEvent, ASGISendEvent
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.ws")

ABORT_AFTER = 2.0
"""Seconds a failed connection's close frame gets to leave before the socket is aborted (what is unsent dropped)."""


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol with a bounded send buffer, read back-pressure and a write timeout."""

    write_buffer_bytes: ClassVar[int]
    write_timeout: ClassVar[float]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.held_for_writes = False
        """Reading is paused because the client does not read what we write (uvicorn's `read_paused` is apart:
        reading paused until the app takes the message it has)."""
        self.stall_timer: asyncio.TimerHandle | None = None
        self.stalled_at = 0
        """Bytes queued when the stall timer was armed: fewer when it fires is progress."""

    @classmethod
    def bounded_by(cls, settings: Settings) -> type[BoundedWebSocketProtocol]:
        """This protocol with the limits of `settings` (uvicorn builds protocols from a class)."""
        internals.check()
        limits = {"write_buffer_bytes": settings.ws_write_buffer_bytes, "write_timeout": settings.ws_write_timeout}
        return type(cls.__name__, (cls,), limits)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport.set_write_buffer_limits(high=self.write_buffer_bytes)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_connect(self, event: Request) -> None:
        # `websockets` refuses a handshake with two Origin headers itself, in plain text, before any app runs. Show
        # it one so the handshake reaches the app, whose entry refuses every duplicate in the face's own shape; the
        # app's scope gets the headers as they came (set before its task first runs).
        origins = event.headers.get_all("Origin")
        if len(origins) < 2:
            return super().handle_connect(event)
        received = [(name.encode("ascii"), value.encode("latin-1")) for name, value in event.headers.raw_items()]
        del event.headers["Origin"]
        event.headers["Origin"] = origins[0]
        super().handle_connect(event)
        if self.handshake_initiated and not self.handshake_complete:
            self.scope["headers"] = received

    # Flow control.

    def pause_writing(self) -> None:
        super().pause_writing()
        # The client is not reading what we write: stop reading what it sends, so that nothing more is answered
        # into the buffer (pongs to a ping flood) and its sends wait in its own kernel buffers.
        self.held_for_writes = True
        self.transport.pause_reading()
        self._arm()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm()
        self.held_for_writes = False
        if not self.read_paused:
            self.transport.resume_reading()

    async def receive(self) -> ASGIReceiveEvent:
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            if not self.held_for_writes:  # else reading resumes when the client has read (resume_writing)
                self.transport.resume_reading()
        return message

    def _arm(self) -> None:
        self._disarm()
        self.stalled_at = self.transport.get_write_buffer_size()
        self.stall_timer = self.loop.call_later(self.write_timeout, self._check_progress)

    def _disarm(self) -> None:
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None

    def _check_progress(self) -> None:
        self.stall_timer = None
        if self.transport.is_closing():
            return
        if self.transport.get_write_buffer_size() < self.stalled_at:
            return self._arm()  # slow, but reading: another period
        logger.info("closed a WebSocket whose client read nothing of its replies for %s s", self.write_timeout)
        self._fail(1008, "client does not read")

    # Endings that do not wait on a client that does not read.

    def _fail(self, code: int, reason: str) -> None:
        """Send a close frame, and abort the socket if it has not left within ABORT_AFTER seconds."""
        if not self.close_sent:
            self.conn.fail(code, reason)
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
        self.transport.close()
        self.loop.call_later(ABORT_AFTER, self.transport.abort)

    def keepalive_timeout(self) -> None:
        # uvicorn's own closes with `transport.close()`, which waits forever on a buffer the client never reads.
        self.pong_timer = None
        self.pending_ping_payload = None
        if self.close_sent or self.transport.is_closing():
            return
        self._fail(1011, "keepalive ping timeout")

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            # A handshake refused with an HTTP answer (401, 400, ...) is complete: without this, uvicorn logs an
            # error for every refused handshake, a log flood any client could cause.
            self.handshake_complete = True
