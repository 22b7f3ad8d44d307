"""The front's HTTP client to a worker: a probe that times out leaves no connection open behind it."""

from __future__ import annotations

import asyncio

import pytest

from ors_server.scale.table import Address
from ors_server.scale.upstream import probe

pytestmark = pytest.mark.anyio


async def test_a_health_probe_that_times_out_closes_its_connection(tmp_path):
    path = str(tmp_path / "silent.sock")
    asked, closed = asyncio.Event(), asyncio.Event()

    async def silent_worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the probe's request arrives, and is never answered
        asked.set()
        if await reader.read() == b"":  # the end of the stream: the prober closed its socket
            closed.set()
        writer.close()

    server = await asyncio.start_unix_server(silent_worker, path)
    async with server:
        with pytest.raises(TimeoutError):
            await probe(Address(uds=path), 0.2)
        assert asked.is_set()
        await asyncio.wait_for(closed.wait(), 10)
