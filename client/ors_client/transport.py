"""A lean HTTP/1.1 transport for httpx: keep-alive connections in a last-in-first-out stack per origin.

Why not httpx's own transport: its pool (httpcore 1.x) looks through every connection for every request and
polls each idle socket as it goes, so its cost per request grows with the number of connections (at 512 open
sessions that is most of the client's CPU); and it asks for `sniffio` on every lock it makes, a failed import
each time where sniffio is not installed. ORS traffic is plain HTTP/1.1 with small JSON bodies and SSE streams,
so this transport does only that: a request takes the most recently used idle connection, or opens one.

Pass `transport=httpx.AsyncHTTPTransport(...)` to `AsyncClient` for what this one does not do (proxies, HTTP/2).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import httpx

READ_LIMIT = 1 << 20
"""The longest header block or chunk-size line read in one piece."""
EAGER_LIMIT = 1 << 16
"""A body of a declared length up to this is read with its head; a longer one is streamed, so whoever reads it
can stop (the client's `max_body_bytes`) before it is all in memory."""
PIECE = 1 << 16
"""The most read from the connection at once while streaming a body."""
MAX_IDLE_PER_ORIGIN = 1024


class _Connection:
    __slots__ = ("reader", "writer", "loop", "timed_out", "used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.timed_out = False
        self.used = False

    def healthy(self) -> bool:
        return not self.reader.at_eof() and not self.writer.transport.is_closing()

    def close(self) -> None:
        self.writer.transport.abort()

    def _expire(self) -> None:
        self.timed_out = True
        self.writer.transport.abort()

    async def read(self, timeout: float | None, until: bytes | None = None, size: int = 0) -> bytes:
        """`readuntil(until)` or `readexactly(size)`, bounded by a timer that aborts the connection (cheaper
        than a task per read, which `asyncio.wait_for` makes before Python 3.12)."""
        timer = None if timeout is None else self.loop.call_later(timeout, self._expire)
        try:
            if until is not None:
                return await self.reader.readuntil(until)
            return await self.reader.readexactly(size)
        finally:
            if timer is not None:
                timer.cancel()

    async def read_some(self, timeout: float | None) -> bytes:
        timer = None if timeout is None else self.loop.call_later(timeout, self._expire)
        try:
            return await self.reader.read(65536)
        finally:
            if timer is not None:
                timer.cancel()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio streams, with keep-alive; short bodies of a declared length read eagerly, any other
    streamed in pieces of at most `PIECE` bytes as the caller reads."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._ssl = ssl_context
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        for stack in self._idle.values():
            for connection in stack:
                connection.close()
        self._idle.clear()

    def _release(self, origin: tuple[str, str, int], connection: _Connection) -> None:
        stack = self._idle.setdefault(origin, [])
        if self._closed or len(stack) >= MAX_IDLE_PER_ORIGIN or not connection.healthy():
            connection.close()
        else:
            stack.append(connection)

    async def _connect(self, request: httpx.Request, origin: tuple[str, str, int]) -> _Connection:
        scheme, host, port = origin
        timeout = request.extensions.get("timeout", {}).get("connect")
        context = None
        if scheme == "https":
            context = self._ssl = self._ssl or ssl.create_default_context()
        try:
            opening = asyncio.open_connection(host, port, ssl=context, limit=READ_LIMIT)
            reader, writer = await asyncio.wait_for(opening, timeout)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port}: {exc}", request=request) from exc
        return _Connection(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
        head.extend(b"%s: %s\r\n" % (name, value) for name, value in request.headers.raw)
        message = b"".join(head) + b"\r\n" + body
        timeouts = request.extensions.get("timeout", {})
        read_timeout = timeouts.get("read")
        stack = self._idle.get(origin)
        while True:
            connection = None
            while stack and connection is None:
                candidate = stack.pop()
                if candidate.healthy():
                    connection = candidate
                else:
                    candidate.close()
            reused = connection is not None
            if connection is None:
                connection = await self._connect(request, origin)
            try:
                connection.writer.write(message)
                status_line = await connection.read(read_timeout, until=b"\r\n")
                break
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                connection.close()
                if connection.timed_out:
                    raise httpx.ReadTimeout("timed out waiting for the response", request=request) from None
                # A kept-alive connection the server had closed while idle: the request never reached it.
                if reused and isinstance(exc, (asyncio.IncompleteReadError, ConnectionResetError)):
                    continue
                raise httpx.ReadError(f"no response: {type(exc).__name__}: {exc}", request=request) from exc
        try:
            status, headers, chunked, length, keep = await self._read_head(connection, status_line, read_timeout)
            if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                length = 0
            if length is not None and length <= EAGER_LIMIT:
                content = await connection.read(read_timeout, size=length) if length else b""
                if keep:
                    self._release(origin, connection)
                else:
                    connection.close()
                return httpx.Response(status, headers=headers, stream=httpx.ByteStream(content), request=request)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            connection.close()
            raise self._read_error(connection, exc, request) from None
        stream = _BodyStream(self, origin, connection, request, chunked, length, keep, read_timeout)
        return httpx.Response(status, headers=headers, stream=stream, request=request)

    @staticmethod
    def _read_error(connection: _Connection, exc: BaseException, request: httpx.Request) -> httpx.TransportError:
        if connection.timed_out:
            return httpx.ReadTimeout("timed out reading the response", request=request)
        return httpx.RemoteProtocolError(f"the response broke off: {type(exc).__name__}: {exc}", request=request)

    @staticmethod
    async def _read_head(
        connection: _Connection, status_line: bytes, timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bool, int | None, bool]:
        version, _, rest = status_line.partition(b" ")
        status = int(rest[:3])
        block = await connection.read(timeout, until=b"\r\n\r\n")
        headers: list[tuple[bytes, bytes]] = []
        chunked, length, keep = False, None, version == b"HTTP/1.1"
        for line in block.split(b"\r\n"):
            if not line:
                continue
            name, _, value = line.partition(b":")
            value = value.strip()
            headers.append((name, value))
            lowered = name.lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif lowered == b"connection":
                keep = b"close" not in value.lower() and (keep or b"keep-alive" in value.lower())
        if chunked:
            length = None
        elif length is None:
            keep = False  # the body runs to the end of the connection
        return status, headers, chunked, length, keep


class _BodyStream(httpx.AsyncByteStream):
    """A chunked, close-delimited or long body, read as the caller iterates, `PIECE` bytes at most at a time; the
    connection goes back to the pool only when the body was read to its end."""

    def __init__(
        self,
        transport: LeanTransport,
        origin: tuple[str, str, int],
        connection: _Connection,
        request: httpx.Request,
        chunked: bool,
        length: int | None,
        keep: bool,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
        self._request = request
        self._chunked = chunked
        self._length = length
        self._keep = keep
        self._timeout = timeout
        self._complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        try:
            if self._chunked:
                while True:
                    line = await connection.read(self._timeout, until=b"\r\n")
                    size = int(line.split(b";", 1)[0], 16)
                    if size < 0:
                        raise ValueError(f"a negative chunk size: {size}")
                    if size == 0:
                        while await connection.read(self._timeout, until=b"\r\n") != b"\r\n":
                            pass  # trailers
                        break
                    while size:
                        data = await connection.read(self._timeout, size=min(size, PIECE))
                        size -= len(data)
                        yield data
                    if await connection.read(self._timeout, size=2) != b"\r\n":
                        raise ValueError("a chunk does not end with CRLF")
            elif self._length is not None:
                left = self._length
                while left:
                    data = await connection.read(self._timeout, size=min(left, PIECE))
                    left -= len(data)
                    yield data
            else:
                while data := await connection.read_some(self._timeout):
                    yield data
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self._connection = None
            connection.close()
            raise LeanTransport._read_error(connection, exc, self._request) from None
        self._complete = True

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._complete and self._keep:
            self._transport._release(self._origin, connection)
        else:
            connection.close()
