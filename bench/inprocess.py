"""Where the call path's time goes, without HTTP: µs per `/call` driven straight through the ASGI app.

    python bench/inprocess.py [--only floor,ceiling,async,sync] [--profile sync|async]

Compares the pure ASGI floor and the bare Starlette ceiling route (bench/ceiling.py) with our app serving a sync
and an async counter tool, in one process, so the figures are our server's own cost per call (no sockets, no load
client on the other core). With --profile it prints cProfile's top frames for that tool (cProfile inflates code
that makes many small calls: for shares, sample with py-spy, as bench/PROFILE.md describes).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import pstats
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ceiling import app as ceiling_app  # noqa: E402
from bench.ceiling import asgi as floor_app  # noqa: E402
from bench.envs import AsyncCounter, Counter  # noqa: E402
from ors_server.http.app import create_app  # noqa: E402
from ors_server.settings import Settings  # noqa: E402

BODY = json.dumps({"name": "tick", "input": {}}).encode()


async def request(app, path: str, body: bytes, headers: dict[str, str]) -> None:
    raw = [(k.encode(), v.encode()) for k, v in {"host": "127.0.0.1", **headers}.items()] + [
        (b"content-length", str(len(body)).encode())
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": raw, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {},
    }  # fmt: skip
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message):
        pass

    await app(scope, receive, send)


async def per_call(app, path: str, n: int, headers: dict[str, str]) -> float:
    """CPU µs per call (this process, every thread): on a shared machine, wall time mostly measures the others."""
    for _ in range(200):  # warm up
        await request(app, path, BODY, headers)
    started = time.process_time()
    for _ in range(n):
        await request(app, path, BODY, headers)
    return (time.process_time() - started) / n * 1e6


async def ours(env, n: int, profile: bool) -> float:
    app = create_app([env], Settings())
    headers = {"x-session-id": "bench", "content-type": "application/json"}
    async with app.router.lifespan_context(app):
        await request(app, "/create", json.dumps({"task_spec": {"start": 0}}).encode(), headers)
        micros = await per_call(app, f"/{env.name}/call", n, headers)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            await per_call(app, f"/{env.name}/call", n, headers)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return micros


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="floor,ceiling,async,sync", help="which contenders, comma-separated")
    parser.add_argument("--profile", choices=["sync", "async"], default=None)
    args = parser.parse_args()
    logging.getLogger("ors_server").setLevel(logging.WARNING)
    contenders = {
        "floor": ("floor", lambda: per_call(floor_app, "/counter/call", args.n, {})),
        "ceiling": ("ceiling", lambda: per_call(ceiling_app, "/counter/call", args.n, {})),
        "async": ("ours, async tool", lambda: ours(AsyncCounter, args.n, False)),
        "sync": ("ours, sync tool", lambda: ours(Counter, args.n, False)),
    }
    chosen = [contenders[name] for name in args.only.split(",")]
    figures: dict[str, list[float]] = {label: [] for label, _ in chosen}
    for _ in range(args.rounds):  # interleaved
        for label, measure in chosen:
            figures[label].append(await measure())
    for name, values in figures.items():
        values.sort()
        print(f"{name:18} {values[len(values) // 2]:7.0f} CPU µs/call  (range {values[0]:.0f}-{values[-1]:.0f})")
    if args.profile:
        await ours(Counter if args.profile == "sync" else AsyncCounter, args.n, True)


if __name__ == "__main__":
    uvloop.run(main())  # as the server runs (uvicorn picks uvloop when it is installed)
