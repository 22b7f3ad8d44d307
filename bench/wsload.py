"""A minimal closed-loop WebSocket load generator: one socket per worker, raw `asyncio` streams, nothing else.

OpenEnv's own client (websockets + pydantic, a background keepalive task) costs more client CPU than the servers
it would measure on a 2-core machine, so this speaks RFC 6455 directly: an HTTP/1.1 upgrade, masked text frames
out, unmasked frames in (pings answered, no compression), like `loadgen.Conn` does for HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loadgen import Result

TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA


class WsConn:
    """One WebSocket connection: `ask(text)` sends a text frame and returns the next data frame's payload."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port, self.path = host, port, path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.writer.write(request.encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ValueError(f"upgrade refused: {head[:100]!r}")

    def _send(self, opcode: int, payload: bytes) -> None:
        assert self.writer is not None
        size = len(payload)
        if size < 126:
            header = bytes([0x80 | opcode, 0x80 | size])
        elif size < 1 << 16:
            header = bytes([0x80 | opcode, 0x80 | 126]) + size.to_bytes(2, "big")
        else:
            header = bytes([0x80 | opcode, 0x80 | 127]) + size.to_bytes(8, "big")
        mask = os.urandom(4)
        stream = (mask * (size // 4 + 1))[:size]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(size, "big")
        self.writer.write(header + mask + masked)

    async def recv(self) -> bytes:
        assert self.reader is not None
        while True:
            first, second = await self.reader.readexactly(2)
            size = second & 0x7F
            if size == 126:
                size = int.from_bytes(await self.reader.readexactly(2), "big")
            elif size == 127:
                size = int.from_bytes(await self.reader.readexactly(8), "big")
            payload = await self.reader.readexactly(size)
            opcode = first & 0x0F
            if opcode == PING:
                self._send(PONG, payload)
            elif opcode == CLOSE:
                raise ConnectionError(f"closed by the server: {payload[2:]!r}")
            elif opcode != PONG:
                return payload

    async def ask(self, text: str) -> bytes:
        self._send(TEXT, text.encode())
        return await self.recv()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


Setup = Callable[[WsConn, int], Awaitable[Any]]
Op = Callable[[WsConn, Any], Awaitable[None]]


async def run(host: str, port: int, path: str, workers: int, duration: float, setup: Setup, op: Op) -> Result:
    """`workers` sockets, each a closed loop of `op(conn, state)` for `duration` seconds after `setup(conn, i)`."""
    conns = [WsConn(host, port, path) for _ in range(workers)]
    await asyncio.gather(*(conn.open() for conn in conns))
    states = await asyncio.gather(*(setup(conn, i) for i, conn in enumerate(conns)))
    latencies: dict[str, list[float]] = {"op": []}
    ops = errors = 0
    stop = time.perf_counter() + duration

    async def loop(conn: WsConn, state: Any) -> None:
        nonlocal ops, errors
        while (started := time.perf_counter()) < stop:
            try:
                await op(conn, state)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                errors += 1
                return  # a broken socket is a broken session: this worker is done
            latencies["op"].append(time.perf_counter() - started)
            ops += 1

    began = time.perf_counter()
    await asyncio.gather(*(loop(conn, state) for conn, state in zip(conns, states, strict=True)))
    elapsed = time.perf_counter() - began
    for conn in conns:
        conn.close()
    return Result(ops, elapsed, latencies, errors)
