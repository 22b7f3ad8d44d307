"""WebSocket floods through the front: a client that never reads is bounded and closed there as on one server,
and one that floods an OpenEnv socket and then drops its connection leaves neither a session on the worker nor a
file descriptor in the front (before, both stayed for good: the front's close of its socket to the worker waited
without a bound on a worker that had stopped reading)."""

from __future__ import annotations

import json
import os
import time

import httpx

from tests.flooding import flood_while_serving, quiet_latencies, report
from tests.raw_http import flood, frame, open_websocket
from tests.scale.deployment import deployment

PING = frame(0x9, b"p" * 125)
RSS_BOUND = 64 * 1024 * 1024
FAULTY = "tests.reliability.reliability_envs:Faulty"
# A step whose reply is as large as itself: a client that does not read backs the worker's replies up fast.
NOTE = {"type": "step", "data": {"type": "call_tool", "tool_name": "note", "arguments": {"text": "x" * 60_000}}}


def test_a_ping_flood_through_the_front_stays_bounded_is_closed_and_others_are_served(tmp_path):
    args = ("--env", "frozen_lake", "--ws-write-timeout", "2", "--log-level", "warning")
    with deployment(tmp_path, *args, workers=1) as front:
        pids = [front.process.pid, *front.worker_pids().values()]
        quiet = quiet_latencies(front.url)
        flooded, growth, latencies = flood_while_serving(front.url, pids, PING * 1000)
    print(report("ping flood through the front (front, worker)", flooded, growth, latencies, quiet))
    assert flooded.cut, f"the front never closed a client that read nothing ({flooded.sent} bytes sent)"
    assert max(growth) < RSS_BOUND, growth
    assert latencies


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def sockets_to(pid: int, client_port: int) -> int:
    """How many of `pid`'s descriptors are TCP connections from `client_port` (the process's count of descriptors
    alone moves with its pooled connections to the worker, which other requests open and close meanwhile)."""
    inodes = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == client_port:
                    found += 1
    return found


def sessions(url: str) -> tuple[float, float]:
    """(live sessions, sessions deleted) summed over the workers, from the front's merged /metrics."""
    live = deleted = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("ors_live_sessions{"):
            live += float(line.split()[-1])
        elif line.startswith("ors_sessions_total{") and 'event="deleted"' in line:
            deleted += float(line.split()[-1])
    return live, deleted


def test_a_client_that_floods_an_openenv_socket_and_drops_leaves_no_session_and_no_descriptor(tmp_path):
    # A long write timeout: the worker's own limit would end this too, later; here the front must not wait on it.
    args = ("--env", FAULTY, "--ws-write-timeout", "120", "--log-level", "warning")
    with deployment(tmp_path, *args, workers=1) as front:
        pid = front.process.pid
        assert sessions(front.url) == (0, 0)
        before = fds(pid)
        sock = open_websocket(front.url, "/openenv/ws")
        client_port = sock.getsockname()[1]
        step = frame(0x1, json.dumps(NOTE).encode())
        flooded = flood(sock, step * 20, seconds=5, most=256 * 1024 * 1024)
        during = fds(pid)
        assert sessions(front.url)[0] == 1
        assert sockets_to(pid, client_port) == 1
        sock.close()  # dropped, with unread replies: a reset
        deadline = time.monotonic() + 30
        while (sockets_to(pid, client_port) or sessions(front.url) != (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.5)  # another process gives no event to wait on
        after, left, kept = fds(pid), sessions(front.url), sockets_to(pid, client_port)
    print(f"flood then drop: sent {flooded.sent / 2**20:.1f} MiB; front fds {before} -> {during} -> {after}")
    assert left == (0, 1), f"live and deleted sessions after the drop: {left}"
    assert kept == 0, "the front still holds the dropped client's connection"
