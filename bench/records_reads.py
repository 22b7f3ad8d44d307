"""Reading one large episode while small reads go on, against a real server; then the disk it takes back.

    python bench/records_reads.py [--mb 80] [--readers 4]

A records file gets one episode of `--mb` calls of 1 MiB each and 20 small ones (written directly, as the recorder
writes them). `ors-server serve` reads it while `--readers` clients follow every page of `GET /episodes/big` and as
many export everything (`GET /episodes/export`). Printed: the server's RSS before and at its highest during those
reads, and `GET /episodes?limit=5` latencies alone (the baseline, in the same run) and during them. Then the
episode is ended and forgotten (`Database.prune`) and the space reclaimed (`Database.reclaim`): the file's bytes
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ors_server.records.db import Batch, Database  # noqa: E402

MiB = 1024 * 1024


def fill(path: str, megabytes: int) -> None:
    database = Database(path)
    try:
        now = time.time()
        for n in range(20):
            batch = Batch.empty()
            batch.episodes.append((f"s{n}", f"small-{n}", "s", 0, "math", "ors", "{}", "{}", now + n, "bench", 300, 0))
            database.write(batch)
        text = json.dumps({"blocks": [{"type": "text", "text": "x" * MiB}], "reward": 0.0, "finished": False})
        for first in range(0, megabytes, 8):
            batch = Batch.empty()
            if first == 0:
                batch.episodes.append(("big", "big", "big", 0, "math", "ors", "{}", "{}", now - 1, "bench", 0, 0))
            for n in range(first, min(first + 8, megabytes)):
                batch.calls.append(("big", n, "ors", "say", "{}", 1, text, None, None, now, 1.0, None, None, MiB, 0))
            batch.counters["big"] = (n + 1, 0.0, 0, n + 1, 8 * MiB, 0)
            database.write(batch)
    finally:
        database.close()


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def on_disk(path: str) -> int:
    return sum(os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix))


def small_read(client: httpx.Client) -> float:
    started = time.perf_counter()
    response = client.get("/episodes", params={"limit": 5})
    response.raise_for_status()
    return time.perf_counter() - started


def read_big(url: str, kind: str) -> None:
    with httpx.Client(base_url=url, timeout=600) as client:
        if kind == "export":
            with client.stream("GET", "/episodes/export") as response:
                for _ in response.iter_bytes():
                    pass
            return
        params: dict[str, str] = {}
        while True:
            page = client.get("/episodes/big", params=params).json()
            if page.get("calls_next") is None:
                return
            params = {"calls_cursor": page["calls_next"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=80, help="the large episode's size (calls of 1 MiB)")
    parser.add_argument("--readers", type=int, default=4, help="paged readers, and as many exports")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "episodes.db")
        fill(path, args.mb)
        print(f"records file: {on_disk(path) / MiB:.1f} MiB ({args.mb} MiB episode)")
        port = 20000 + os.getpid() % 20000
        server = subprocess.Popen(
            [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--records", path]
            + ["--log-level", "warning"],
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if client.get("/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise SystemExit("the server did not start")
                    time.sleep(0.1)
                alone = [small_read(client) for _ in range(30)]
                idle = rss(server.pid)
                peak = idle
                readers = [
                    threading.Thread(target=read_big, args=(url, kind))
                    for kind in ["episode"] * args.readers + ["export"] * args.readers
                ]
                started = time.monotonic()
                for reader in readers:
                    reader.start()
                during = []
                while any(reader.is_alive() for reader in readers):
                    during.append(small_read(client))
                    peak = max(peak, rss(server.pid))
                    time.sleep(0.02)
                took = time.monotonic() - started
        finally:
            server.terminate()
            server.wait(timeout=60)

        def shown(latencies: list[float]) -> str:
            ms = sorted(x * 1000 for x in latencies)
            p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
            return f"median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms ({len(ms)} reads)"

        print(f"{args.readers} paged reads + {args.readers} exports of the episode: {took:.1f} s")
        print(f"server RSS: {idle / MiB:.0f} MiB before, {peak / MiB:.0f} MiB at most during them")
        print(f"GET /episodes?limit=5 alone:  {shown(alone)}")
        print(f"GET /episodes?limit=5 during: {shown(during)}")
        print(f"ratio of medians during/alone: {statistics.median(during) / statistics.median(alone):.1f}x")

        database = Database(path)
        try:
            database.execute("UPDATE ors_episodes SET ended_at = started_at + 1, end_reason = 'deleted'")
            before = on_disk(path)
            forgotten = database.prune(keep_days=None, max_bytes=1)
            database.reclaim()
            after = on_disk(path)
            print(f"forgot {forgotten} episodes: {before / MiB:.1f} MiB on disk before, {after / 1024:.0f} KiB after")
        finally:
            database.close()


if __name__ == "__main__":
    main()
