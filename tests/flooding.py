"""Flooding clients for the tests: a WebSocket client that sends and never reads, and the figures around it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.raw_http import Flood, flood, open_websocket
from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parents[1]
FLOOD_BYTES = 256 * 1024 * 1024
"""What a flood sends at most: unbounded, a server would hold about as much."""


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def server_process(*args: str) -> Iterator[tuple[str, int]]:
    """`ors-server serve *args` in a process of its own on a free port; yields its URL and pid."""
    port = free_port()
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--log-level", "warning"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    environment.pop("ORS_API_KEY", None)
    process = subprocess.Popen([*command, *args], env=environment, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, process)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


@contextlib.contextmanager
def running(target, *args) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(timeout=120)


def flood_while_serving(url: str, pids: list[int], data: bytes) -> tuple[Flood, list[int], list[float]]:
    """Flood a new socket at `url` with `data` while another client makes requests; returns the flood, the peak
    RSS growth of each of `pids` over it, and the other client's latencies (seconds)."""
    baseline = [rss(pid) for pid in pids]
    peaks = list(baseline)
    latencies: list[float] = []
    sock = open_websocket(url, "/openenv/ws")
    result: list[Flood] = []
    with sock, httpx.Client(base_url=url, timeout=10) as other:
        with running(lambda: result.append(flood(sock, data, 30, FLOOD_BYTES))) as flooding:
            while flooding.is_alive():
                started = time.perf_counter()
                answer = other.post("/openenv/reset", json={})  # a whole episode's reset, on the same server
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
                peaks = [max(peak, rss(pid)) for peak, pid in zip(peaks, pids, strict=True)]
    return result[0], [peak - base for peak, base in zip(peaks, baseline, strict=True)], latencies


def report(what: str, flooded: Flood, growth: list[int], latencies: list[float], quiet: list[float]) -> str:
    mb = [f"{g / 2**20:.1f}" for g in growth]
    return (
        f"{what}: sent {flooded.sent / 2**20:.1f} MiB, cut={flooded.cut}, RSS growth MiB {mb}, "
        f"other client's reset: {len(latencies)} during the flood, max {max(latencies) * 1000:.0f} ms, "
        f"median {sorted(latencies)[len(latencies) // 2] * 1000:.0f} ms (quiet: median "
        f"{sorted(quiet)[len(quiet) // 2] * 1000:.0f} ms)"
    )


def quiet_latencies(url: str, count: int = 20) -> list[float]:
    latencies = []
    with httpx.Client(base_url=url, timeout=10) as client:
        for _ in range(count):
            started = time.perf_counter()
            assert client.post("/openenv/reset", json={}).status_code == 200
            latencies.append(time.perf_counter() - started)
    return latencies
