"""What one tool call from inside a CodeAct step costs the server, against an ORS `/call`: in one process, no HTTP.

    python bench/codeact_move.py [--moves 60] [--rounds 5]

A CodeAct move is the call pipeline without HTTP: the step's code sends `{"call", "arguments"}` over its pipe,
the server runs it through `Calls` and answers on the pipe. Each round drives, through the ASGI app (no sockets):
an `execute_code` step making `--moves` FrozenLake moves, the same step making none (its start and end), and
`--moves` plain ORS `/call`s of `lake_move`. Per move: (step - empty step) / moves, in this process's CPU (every
thread: the server's side; the step's own process is not counted) and in wall time (the pipe's round trips
included). The ORS calls, the same in CPU, are the goal's baseline (issue 37: an in-step move near a call's
in-process cost). Medians of `--rounds` interleaved rounds, each on new sessions (FrozenLake ends an episode at
100 steps). The sandbox is bwrap unless `ORS_CODEACT_SANDBOX=none`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.request_kinds import req  # noqa: E402
from ors_server.http.app import create_app  # noqa: E402
from ors_server.loading import resolve_environments  # noqa: E402
from ors_server.settings import Settings  # noqa: E402

J = {"content-type": "application/json"}
MOVES = ["LEFT", "UP"]  # into the lake's edge from the start: the episode never ends


async def new_session(app) -> dict[str, str]:
    headers = {"x-session-id": uuid.uuid4().hex, **J}
    await req(
        app, "POST", "/create", json.dumps({"env_name": "frozen_lake", "task_spec": {"seed": 7}}).encode(), headers
    )
    return headers


async def step(app, moves: int) -> tuple[float, float]:
    """(CPU, wall) seconds of one `execute_code` step making `moves` moves, on a new session."""
    headers = await new_session(app)
    code = f"for i in range({moves}):\n    lake_move(action={MOVES!r}[i % 2])\nprint('done')"
    body = json.dumps({"name": "execute_code", "input": {"code": code}}).encode()
    cpu, wall = time.process_time(), time.perf_counter()
    answer = await req(app, "POST", "/frozen_lake/call", body, headers)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert b"done" in answer["body"] and b'"ok":true' in answer["body"], answer
    return cpu, wall


async def calls(app, moves: int) -> tuple[float, float]:
    """(CPU, wall) seconds of `moves` ORS `/call`s of `lake_move`, on a new session."""
    headers = await new_session(app)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(moves):
        body = json.dumps({"name": "lake_move", "input": {"action": MOVES[i % 2]}}).encode()
        answer = await req(app, "POST", "/frozen_lake/call", body, headers)
        assert b'"ok":true' in answer["body"], answer
    return time.process_time() - cpu, time.perf_counter() - wall


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--moves", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("ors_server").setLevel(logging.WARNING)
    app = create_app(resolve_environments(["frozen_lake"]), Settings(codeact=True, codeact_pool=2))
    moves: dict[str, list[float]] = {"cpu": [], "wall": []}
    plain: dict[str, list[float]] = {"cpu": [], "wall": []}
    async with app.router.lifespan_context(app):
        await step(app, args.moves)  # warm up both paths
        await calls(app, args.moves)
        for _ in range(args.rounds):
            full, empty = await step(app, args.moves), await step(app, 0)
            moves["cpu"].append((full[0] - empty[0]) / args.moves)
            moves["wall"].append((full[1] - empty[1]) / args.moves)
            cpu, wall = await calls(app, args.moves)
            plain["cpu"].append(cpu / args.moves)
            plain["wall"].append(wall / args.moves)

    def shown(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e6:6.0f} µs ({min(values) * 1e6:.0f}-{max(values) * 1e6:.0f})"

    sandbox = os.environ.get("ORS_CODEACT_SANDBOX") or "bwrap"
    print(f"{args.moves} moves, medians of {args.rounds} rounds (sandbox {sandbox}, load {os.getloadavg()[0]:.1f})")
    print(f"  in-step move, server CPU : {shown(moves['cpu'])}   wall {shown(moves['wall'])}")
    print(f"  ORS /call, server CPU    : {shown(plain['cpu'])}   wall {shown(plain['wall'])}")
    ratios = [m / p for m, p in zip(moves["cpu"], plain["cpu"], strict=True)]
    print(f"  CPU ratio move / call    : {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    uvloop.run(main())
