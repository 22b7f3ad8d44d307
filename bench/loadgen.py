"""A minimal closed-loop HTTP/1.1 load generator: one keep-alive connection per worker, nothing else.

On a 2-core machine the client competes with the server for CPU, so this stays lean on purpose (no httpx,
no h11): raw `asyncio` streams, Content-Length and chunked bodies, `time.perf_counter` latencies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


class Conn:
    """One keep-alive HTTP/1.1 connection. `request` returns (status, headers, body); headers are lowercased."""

    def __init__(self, host: str, port: int, latencies: dict[str, list[float]] | None = None) -> None:
        self.host, self.port = host, port
        self.latencies = latencies if latencies is not None else {}
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, label: str = ""
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        started = time.perf_counter()
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        got = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                got[name.lower()] = value.strip()
        if got.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                parts.append((await self.reader.readexactly(size + 2))[:-2])
            while await self.reader.readline() not in (b"\r\n", b""):  # trailers
                pass
            data = b"".join(parts)
        else:
            data = await self.reader.readexactly(int(got.get("content-length", "0")))
        if label:
            self.latencies.setdefault(label, []).append(time.perf_counter() - started)
        if got.get("connection", "").lower() == "close":
            self.close()
        return status, got, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class Result:
    ops: int
    seconds: float
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: int = 0

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    def pct(self, label: str, q: float) -> float:
        """The q-quantile (0..1) of `label`'s latencies, in milliseconds."""
        values = sorted(self.latencies.get(label, [])) or [float("nan")]
        return 1000 * values[min(len(values) - 1, int(q * len(values)))]


Setup = Callable[[Conn, int], Awaitable[Any]]
Op = Callable[[Conn, Any], Awaitable[None]]


async def run(host: str, port: int, workers: int, duration: float, setup: Setup, op: Op) -> Result:
    """`workers` closed loops of `op(conn, state)` for `duration` seconds, after an untimed `setup(conn, i)`.

    Each op's latency is recorded under "op"; `Conn.request(label=...)` records single requests too.
    """
    latencies: dict[str, list[float]] = {}
    conns = [Conn(host, port, latencies) for _ in range(workers)]
    states = await asyncio.gather(*(setup(conn, i) for i, conn in enumerate(conns)))
    ops = errors = 0
    stop = time.perf_counter() + duration

    async def loop(conn: Conn, state: Any) -> None:
        nonlocal ops, errors
        op_times = latencies.setdefault("op", [])
        while (started := time.perf_counter()) < stop:
            try:
                await op(conn, state)
            except (OSError, asyncio.IncompleteReadError, AssertionError, ValueError):
                errors += 1
                conn.close()
                continue
            op_times.append(time.perf_counter() - started)
            ops += 1

    began = time.perf_counter()
    await asyncio.gather(*(loop(conn, state) for conn, state in zip(conns, states, strict=True)))
    elapsed = time.perf_counter() - began
    for conn in conns:
        conn.close()
    return Result(ops, elapsed, latencies, errors)
