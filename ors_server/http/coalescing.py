"""`CoalescingTransport`: what one turn of the event loop writes to a connection goes out in one write.

uvicorn writes a response's head the moment the app starts it and the body when the app sends it: two `send()`
system calls for every response, where nearly every response here (an ORS call's one SSE body, a JSON answer) is
complete within the same turn of the loop. On loopback a send also delivers the segment to the reader inside the
call, so each is dear: sampled under load, uvicorn's two writes held the GIL for ~15% of a call's time. Writes are
gathered and handed to the real transport once: when the response is complete (the HTTP protocol flushes then),
else at the end of the current turn (`loop.call_soon`), so a response whose body comes later (a stream) still has
its head sent without waiting for it.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingTransport:
    """Wraps a transport: `write`s within one turn of the loop are joined; closing sends what is gathered first.
    Everything else is the wrapped transport's."""

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def unwrapped(self) -> asyncio.Transport:
        """The wrapped transport, with what was gathered sent (for a protocol that takes the connection over)."""
        self.flush()
        return self._transport

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
