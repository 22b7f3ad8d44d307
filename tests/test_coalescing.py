"""`CoalescingTransport` over a real TCP connection: one write per turn of the loop, nothing lost or reordered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ors_server.http.coalescing import CoalescingTransport
from tests.serving import free_port

pytestmark = pytest.mark.anyio


class Counting:
    """The real transport, counting the writes that reach it."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport, self.writes = transport, []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[tuple[CoalescingTransport, Counting, asyncio.StreamReader]]:
    """A client transport wrapped as `CoalescingTransport`, and the reader of the server's end."""
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put((reader, writer))

    port = free_port()
    server = await asyncio.start_server(on_client, "127.0.0.1", port)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    reader, writer = await accepted.get()
    counting = Counting(transport)  # type: ignore[arg-type]
    try:
        yield CoalescingTransport(counting, loop), counting, reader  # type: ignore[arg-type]
    finally:
        transport.close()
        writer.close()
        server.close()
        await server.wait_closed()


async def a_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_writes_of_one_turn_go_out_as_one_and_later_ones_separately():
    async with connected() as (coalescing, counting, reader):
        await writes_of_one_turn(coalescing, counting, reader)


async def writes_of_one_turn(coalescing: CoalescingTransport, counting: Counting, reader: asyncio.StreamReader) -> None:
    coalescing.write(b"HTTP/1.1 200 OK\r\n\r\n")
    coalescing.write(b"body")
    coalescing.write(b"")
    assert counting.writes == []  # gathered until the end of this turn
    await a_turn()
    assert counting.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    coalescing.writelines([b"more", b"!"])
    await a_turn()
    assert counting.writes[1:] == [b"more!"]
    coalescing.write(b"last")
    coalescing.close()  # sends what is gathered first
    assert await reader.read() == b"HTTP/1.1 200 OK\r\n\r\nbodymore!last"


async def test_abort_drops_what_is_gathered_and_unwrapping_sends_it():
    async with connected() as (coalescing, counting, reader):
        coalescing.write(b"kept")
        assert coalescing.unwrapped() is counting and counting.writes == [b"kept"]
        coalescing.write(b"dropped")
        coalescing.abort()
        await a_turn()
        assert counting.writes == [b"kept"]
        assert await reader.read() == b"kept"
