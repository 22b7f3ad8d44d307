"""The front's HTTP/1.1 client to one worker: pooled keep-alive connections, responses streamed as they come.

Written on asyncio streams and httptools (uvicorn's own parser, already installed with `uvicorn[standard]`)
rather than with a general client: the front's CPU per request is the price of every call through it, and
a general client's per-request machinery (httpx measured ~4x aiohttp's CPU here) is most of that price.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httptools

from ors_server.scale.table import Address

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {
    b"expect",  # the front has the whole body already: no 100-continue dance with the worker
    b"content-length",  # set from the body the front forwards
}
CONNECT_TIMEOUT = 5.0
IDLE_CONNECTIONS = 64
READ_SIZE = 64 * 1024


class WorkerUnreachable(Exception):
    """Nothing answered at the worker's address: it is gone (refused, reset before a reply, or no socket)."""


class _Reply:
    """httptools callbacks, collected for the reader."""

    __slots__ = ("headers", "chunks", "head_done", "done")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.head_done = False
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class Response:
    """A worker's reply: status and headers now, the body as it streams in."""

    def __init__(self, connection: _Connection, reply: _Reply, parser: Any, head_only: bool) -> None:
        self._connection, self._reply, self._parser = connection, reply, parser
        self.status: int = parser.get_status_code()
        self.headers = [(name, value) for name, value in reply.headers if name not in HOP_BY_HOP]
        self._head_only = head_only
        self.streaming = not any(name == b"content-length" for name, _ in reply.headers)

    async def body(self) -> AsyncIterator[bytes]:
        """The body in the chunks it arrives in; the connection goes back to the pool once it is read."""
        reply, reader = self._reply, self._connection.reader
        delimited = not self.streaming or any(
            name == b"transfer-encoding" and b"chunked" in value.lower() for name, value in reply.headers
        )
        while True:
            if reply.chunks:
                chunks, reply.chunks = reply.chunks, []
                for chunk in chunks:
                    yield chunk
            if reply.done or self._head_only:
                break
            data = await reader.read(READ_SIZE)
            if not data:
                if delimited:
                    self._connection.close()
                    raise ConnectionResetError("the worker closed the connection mid-reply")
                break  # a body delimited by the end of the connection
            self._parser.feed_data(data)
        self._connection.release(self._parser.should_keep_alive() and (reply.done or self._head_only))

    def close(self) -> None:
        """Abandon the rest of the body (the client went away): the connection cannot be reused."""
        self._connection.close()


class _Connection:
    def __init__(self, pool: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pool, self.reader, self.writer = pool, reader, writer
        self.closed = False

    def release(self, reusable: bool) -> None:
        if reusable and not self.closed and not self.pool.closed and len(self.pool.idle) < IDLE_CONNECTIONS:
            self.pool.idle.append(self)
        else:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()

    async def exchange(self, head: bytes, body: bytes, head_only: bool) -> Response:
        self.writer.write(head + body if len(body) < READ_SIZE else head)
        if len(body) >= READ_SIZE:
            self.writer.write(body)
        reply = _Reply()
        parser = httptools.HttpResponseParser(reply)
        while not reply.head_done:
            data = await self.reader.read(READ_SIZE)
            if not data:
                raise EOFError("the worker closed the connection before replying")
            parser.feed_data(data)
        return Response(self, reply, parser, head_only)


class Upstream:
    """Keep-alive connections to one worker."""

    def __init__(self, address: Address) -> None:
        self.address = address
        self.idle: list[_Connection] = []
        self.closed = False  # closed pools take no connection back (one in use when its worker died)

    async def _connect(self) -> _Connection:
        try:
            if self.address.uds:
                opened = asyncio.open_unix_connection(self.address.uds, limit=READ_SIZE)
            else:
                opened = asyncio.open_connection(self.address.host, self.address.port, limit=READ_SIZE)
            reader, writer = await asyncio.wait_for(opened, CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise WorkerUnreachable(f"{self.address}: {exc}") from exc
        return _Connection(self, reader, writer)

    async def request(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> Response:
        """Send one request and return once the worker's status and headers are in.

        A pooled connection the worker has meanwhile closed fails before any byte of a reply arrives;
        the request is then sent once more on a new connection (bodies are buffered, so this is safe).
        Raises WorkerUnreachable when a new connection cannot be made or dies before replying."""
        lines = [method.encode(), b" ", target, b" HTTP/1.1\r\n"]
        for name, value in headers:
            if name not in NOT_FORWARDED:
                lines += [name, b": ", value, b"\r\n"]
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            lines += [b"content-length: ", str(len(body)).encode(), b"\r\n"]
        lines.append(b"\r\n")
        head = b"".join(lines)
        head_only = method == "HEAD"
        while self.idle:
            connection = self.idle.pop()
            if connection.reader.at_eof():
                connection.close()
                continue
            try:
                return await connection.exchange(head, body, head_only)
            except (OSError, EOFError):
                connection.close()
            except BaseException:  # cancelled (a probe's or a scrape's timeout) mid-exchange: never pooled again
                connection.close()
                raise
        connection = await self._connect()
        try:
            return await connection.exchange(head, body, head_only)
        except (OSError, EOFError) as exc:
            connection.close()
            raise WorkerUnreachable(f"{self.address}: {exc}") from exc
        except BaseException:  # a parser error, or cancelled (a timeout) before the reply: the socket is closed
            connection.close()
            raise

    def close(self) -> None:
        self.closed = True
        while self.idle:
            self.idle.pop().close()


async def probe(address: Address, patience: float) -> int:
    """The status of `GET /health` at `address` on a connection of its own; raises WorkerUnreachable when nothing
    listens there and TimeoutError when the worker does not answer within `patience` seconds."""
    async with asyncio.timeout(patience):
        upstream = Upstream(address)
        reply = await upstream.request("GET", b"/health", [(b"host", address.authority.encode())], b"")
        try:
            async for _ in reply.body():
                pass
        finally:
            reply.close()
            upstream.close()
        return reply.status
