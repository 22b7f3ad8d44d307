"""CodeAct against plain tool calls: 20 FrozenLake moves in one `execute_code` step vs 20 MCP `tools/call`s.

    python bench/codeact.py [--sessions 4] [--rounds 5] [--moves 20]

Starts `ors-server serve --env frozen_lake --codeact` on a free port, then, for the same number of concurrent
MCP sessions (the `mcp` 2.x client over streamable HTTP), times one round of `--moves` moves made as
separate `tools/call` round trips against one round made inside a single `execute_code` call. The moves
(LEFT and UP from the start) bump into the lake's edge, so no episode ends. Prints the median time per round
of each and their ratio, both measured in this run. The sandbox is bwrap unless `ORS_CODEACT_SANDBOX=none`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

MOVES = ("LEFT", "UP")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server() -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--env", "frozen_lake", "--codeact"]
    command += ["--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.asynccontextmanager
async def mcp_session(url: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300))
    async with http, streamable_http_client(f"{url}/frozen_lake/mcp", http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def tool_calls(session: ClientSession, moves: int) -> None:
    for i in range(moves):
        result = await session.call_tool("lake_move", {"action": MOVES[i % 2]})
        assert not result.is_error, result


async def one_step(session: ClientSession, moves: int) -> None:
    code = f"for i in range({moves}):\n    lake_move(action={MOVES!r}[i % 2])\nprint('done')"
    result = await session.call_tool("execute_code", {"code": code})
    assert not result.is_error, result
    assert result.content[0].text == "done", result  # type: ignore[union-attr]


async def timed_round(sessions: list[ClientSession], how, moves: int) -> float:
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(how, session, moves)
    return time.perf_counter() - started


async def fresh_round(url: str, how, args: argparse.Namespace) -> float:
    # New episodes each round (FrozenLake's step limit would end long-lived ones); connecting is not timed.
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(mcp_session(url)) for _ in range(args.sessions)]
        return await timed_round(sessions, how, args.moves)


async def measure(url: str, args: argparse.Namespace) -> None:
    await fresh_round(url, one_step, args)  # warm up both paths
    await fresh_round(url, tool_calls, args)
    separate, inside = [], []
    for _ in range(args.rounds):
        separate.append(await fresh_round(url, tool_calls, args))
        inside.append(await fresh_round(url, one_step, args))
    calls, step = statistics.median(separate), statistics.median(inside)
    sandbox = os.environ.get("ORS_CODEACT_SANDBOX") or "bwrap"
    print(
        f"{args.sessions} sessions x {args.moves} FrozenLake moves, median of {args.rounds} rounds (sandbox {sandbox})"
    )
    print(f"  {args.moves} MCP tools/call round trips : {calls * 1000:8.1f} ms per round")
    print(f"  1 execute_code step          : {step * 1000:8.1f} ms per round")
    print(f"  ratio (tool calls / CodeAct) : {calls / step:8.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--moves", type=int, default=20)
    args = parser.parse_args()
    with server() as url:
        anyio.run(measure, url, args)


if __name__ == "__main__":
    main()
