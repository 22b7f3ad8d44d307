"""Per-call overhead of a hosted environment against the same environment native, in one run.

    python bench/hosted.py [-n 2000] [--rounds 3] [--sessions 8] [--openreward PYTHON] [--openenv PYTHON]

Drives ORS `/call` straight through the ASGI app (no sockets, as bench/inprocess.py does) for bench/envs.py's
`Counter` served natively (in the server's process) and hosted (`--env isolated:bench.envs:Counter`: the same class
in a host process, every call a round trip over its pipes), interleaved. Prints calls/s sequentially (one session)
and with `--sessions` concurrent sessions, and the hosted/native ratio. With `--openreward PYTHON` (the python of a
venv with `openreward`), also `openreward:bench.reference_envs:Counter`, the same counter written for openreward;
with `--openenv PYTHON`, `openenv:bench.openenv_counter:CounterEnvironment`, the counter as an OpenEnv MCPEnvironment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.envs import Counter  # noqa: E402
from bench.inprocess import BODY, request  # noqa: E402
from ors_server.http.app import create_app  # noqa: E402
from ors_server.loading import resolve_environments  # noqa: E402
from ors_server.settings import Settings  # noqa: E402


async def calls_per_second(env, n: int, sessions: int) -> float:
    app = create_app([env], Settings(host_sessions=max(sessions, 1)))
    path = f"/{env.name}/call"
    async with app.router.lifespan_context(app):
        headers = [{"x-session-id": f"bench-{i}", "content-type": "application/json"} for i in range(sessions)]
        for h in headers:
            await request(app, "/create", json.dumps({"task_spec": {"start": 0}}).encode(), h)
            for _ in range(50):  # warm up (and wait out setup)
                await request(app, path, BODY, h)

        async def loop(h: dict[str, str], count: int) -> None:
            for _ in range(count):
                await request(app, path, BODY, h)

        started = time.perf_counter()
        await asyncio.gather(*(loop(h, n // sessions) for h in headers))
        elapsed = time.perf_counter() - started
    return (n // sessions) * sessions / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--openreward", metavar="PYTHON")
    parser.add_argument("--openenv", metavar="PYTHON")
    args = parser.parse_args()
    logging.getLogger("ors_server").setLevel(logging.WARNING)
    contenders = {"native": Counter}
    [contenders["hosted (isolated)"]] = resolve_environments(["isolated:bench.envs:Counter"], str(ROOT))
    if args.openreward:
        spec = f"openreward:bench.reference_envs:Counter@{args.openreward}"
        [contenders["hosted (openreward)"]] = resolve_environments([spec], str(ROOT))
    if args.openenv:
        spec = f"openenv:bench.openenv_counter:CounterEnvironment@{args.openenv}"
        [contenders["hosted (openenv)"]] = resolve_environments([spec], str(ROOT))
    figures: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):  # interleaved
        for name, env in contenders.items():
            for sessions in (1, args.sessions):
                figures.setdefault((name, sessions), []).append(await calls_per_second(env, args.n, sessions))
    medians = {key: sorted(values)[len(values) // 2] for key, values in figures.items()}
    for (name, sessions), values in figures.items():
        values.sort()
        ratio = medians[(name, sessions)] / medians[("native", sessions)]
        print(
            f"{name:20} {sessions:2} session(s): {medians[(name, sessions)]:7.0f} calls/s "
            f"(range {values[0]:.0f}-{values[-1]:.0f}), {ratio:.2f}x native"
        )


if __name__ == "__main__":
    asyncio.run(main())
