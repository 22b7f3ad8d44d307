"""CodeAct against plain tool calls: 20 FrozenLake moves in one `execute_code` step vs 20 MCP `tools/call`s.

    python bench/codeact.py [--sessions 1] [--rounds 7] [--moves 20] [--pool N] [--think 0.5] [--records off]

Starts `ors-server serve --env frozen_lake --codeact --codeact-pool N` on a free port (N defaults to
`--sessions`), then, for the same number of concurrent MCP sessions, times one round of `--moves` moves made

- as separate `tools/call`s, each on a fresh HTTP connection (a new client per request, as a stateless agent
  loop sends them; the baseline of the goal, >= 5x),
- as separate `tools/call`s over one kept connection (the `mcp` 2.x client), for reference,
- inside a single `execute_code` call (the `mcp` client), its sandbox taken from the pool;
  and, with `--pool 0` in a second server, the same step starting its own sandbox; and, for reference, the
  pooled step sent as the baseline sends its calls (httpx, a new connection): the `mcp` client's own cost per
  call (result validation among it) is then left out of both.

Each `mcp` client session is set up untimed, as the baseline's is: `initialize`, then `tools/list` (an agent lists
the tools before its first step; the SDK would otherwise list them during its first `call_tool`, to check results
against their output schemas), which also waits out the `notifications/initialized` the SDK posts in the
background. For reference the step is also timed as a fresh session's first call (that listing and the
notification's answer included, as this bench measured before).

The moves (LEFT and UP from the start) bump into the lake's edge, so no episode ends. Between rounds the bench
waits `--think` seconds, untimed, as an agent thinks between steps (the pool refills meanwhile). Prints the
median time per round of each and the ratios, all measured in this run. The sandbox is bwrap unless
`ORS_CODEACT_SANDBOX=none`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
def server(pool: int, records: str | None) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--env", "frozen_lake", "--codeact"]
    command += ["--codeact-pool", str(pool), "--port", str(port), "--log-level", "warning"]
    command += ["--records", records] if records is not None else []
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
async def mcp_session(url: str, *, settle: bool = True) -> AsyncIterator[ClientSession]:
    """An initialized `mcp` client session; `settle` also lists the tools (see the module's docstring)."""
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300))
    async with http, streamable_http_client(f"{url}/frozen_lake/mcp", http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if settle:
                await session.list_tools()
            yield session


HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def _answer(response: httpx.Response) -> dict:
    """The JSON-RPC answer, sent as JSON or as the last `data:` line of an SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


async def open_protocol_session(url: str) -> dict[str, str]:
    """Initialize an MCP protocol session (untimed, as the kept-connection client's); its request headers."""
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    request = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(f"{url}/frozen_lake/mcp", headers=HEADERS, json=request)
        headers = {**HEADERS, "mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        await http.post(
            f"{url}/frozen_lake/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
    return headers


async def fresh_connection_calls(http: httpx.AsyncClient, url: str, headers: dict[str, str], moves: int) -> None:
    """Each `tools/call` on a new TCP connection: `http` keeps none alive. (A new `httpx.AsyncClient` per call
    would also time the client's own setup, its SSL context among it: tens of milliseconds on this machine.)"""
    for i in range(moves):
        request = {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call"}
        request["params"] = {"name": "lake_move", "arguments": {"action": MOVES[i % 2]}}
        result = _answer(await http.post(f"{url}/frozen_lake/mcp", headers=headers, json=request))
        assert "result" in result and not result["result"].get("isError"), result


async def fresh_connection_step(http: httpx.AsyncClient, url: str, headers: dict[str, str], moves: int) -> None:
    """The step as one `tools/call` sent by the baseline's own client, on a new TCP connection."""
    code = f"for i in range({moves}):\n    lake_move(action={MOVES!r}[i % 2])\nprint('done')"
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    request["params"] = {"name": "execute_code", "arguments": {"code": code}}
    result = _answer(await http.post(f"{url}/frozen_lake/mcp", headers=headers, json=request))
    assert "result" in result and not result["result"].get("isError"), result
    assert result["result"]["content"][0]["text"] == "done", result


async def tool_calls(session: ClientSession, moves: int) -> None:
    for i in range(moves):
        result = await session.call_tool("lake_move", {"action": MOVES[i % 2]})
        assert not result.is_error, result


async def empty_step(session: ClientSession, moves: int) -> None:
    """The same step with no move: what a step costs apart from its moves (subtracted for the in-step move)."""
    await one_step(session, 0)


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


async def fresh_round(url: str, how, args: argparse.Namespace, *, settle: bool = True) -> float:
    # New episodes each round (FrozenLake's step limit would end long-lived ones); connecting is not timed.
    await anyio.sleep(args.think)
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(mcp_session(url, settle=settle)) for _ in range(args.sessions)]
        return await timed_round(sessions, how, args.moves)


async def fresh_connections_round(url: str, args: argparse.Namespace, how=fresh_connection_calls) -> float:
    await anyio.sleep(args.think)
    sessions = [await open_protocol_session(url) for _ in range(args.sessions)]
    limits = httpx.Limits(max_keepalive_connections=0)  # the connection is closed after every response
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for headers in sessions:
                tg.start_soon(how, http, url, headers, args.moves)
        return time.perf_counter() - started


async def measure(url: str, unpooled_url: str, args: argparse.Namespace) -> None:
    await fresh_round(url, one_step, args)  # warm up every path
    await fresh_round(unpooled_url, one_step, args)
    await fresh_round(url, tool_calls, args)
    await fresh_connections_round(url, args)
    fresh, kept, pooled, unpooled, first, raw, empty = [], [], [], [], [], [], []
    for _ in range(args.rounds):
        fresh.append(await fresh_connections_round(url, args))
        kept.append(await fresh_round(url, tool_calls, args))
        pooled.append(await fresh_round(url, one_step, args))
        empty.append(await fresh_round(url, empty_step, args))
        unpooled.append(await fresh_round(unpooled_url, one_step, args))
        first.append(await fresh_round(url, one_step, args, settle=False))
        raw.append(await fresh_connections_round(url, args, fresh_connection_step))
    rounds = [("fresh", fresh), ("kept", kept), ("pooled", pooled), ("unpooled", unpooled), ("first", first)]
    rounds += [("raw", raw), ("empty", empty)]
    m = {name: statistics.median(v) for name, v in rounds}
    sandbox = os.environ.get("ORS_CODEACT_SANDBOX") or "bwrap"
    print(
        f"{args.sessions} sessions x {args.moves} FrozenLake moves, median of {args.rounds} rounds "
        f"(sandbox {sandbox}, pool {args.pool}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})"
    )
    print(f"  {args.moves} tools/call, each on a new connection : {m['fresh'] * 1000:8.1f} ms per round")
    print(f"  {args.moves} tools/call, one kept connection      : {m['kept'] * 1000:8.1f} ms per round")
    print(f"  1 execute_code step, pooled sandbox      : {m['pooled'] * 1000:8.1f} ms per round")
    print(f"  1 execute_code step, --codeact-pool 0    : {m['unpooled'] * 1000:8.1f} ms per round")
    print(
        f"  the pooled step as a session's first call: {m['first'] * 1000:8.1f} ms per round  (+ the SDK's tools/list)"
    )
    print(f"  the pooled step sent as the baseline sends: {m['raw'] * 1000:7.1f} ms per round  (httpx, new connection)")
    # The in-step move: (the step with its moves - the same step with none) / moves, wall time; each move is a
    # round trip over the step's pipe and one pass through the call pipeline (bench/inprocess.py prices a call).
    per_move = [(p - e) / args.moves for p, e in zip(pooled, empty, strict=True)] if args.moves else [0.0]
    print(f"  1 execute_code step with no move         : {m['empty'] * 1000:8.1f} ms per round")
    print(
        f"  one in-step move ((step - empty step) / {args.moves}): {statistics.median(per_move) * 1e6:6.0f} µs "
        f"({min(per_move) * 1e6:.0f}-{max(per_move) * 1e6:.0f}), wall"
    )
    print(f"  ratio new-connection calls / pooled step : {m['fresh'] / m['pooled']:8.2f}x  (goal >= 5x)")
    print(f"  the same, both sent by the same client   : {m['fresh'] / m['raw']:8.2f}x")
    print(f"  ratio kept-connection calls / pooled step: {m['kept'] / m['pooled']:8.2f}x")
    print(f"  ratio unpooled step / pooled step        : {m['unpooled'] / m['pooled']:8.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--pool", type=int, default=None, help="--codeact-pool of the server (default: --sessions)")
    parser.add_argument("--think", type=float, default=0.5, help="untimed seconds between rounds")
    parser.add_argument("--records", default=None, help="--records of the servers (default: theirs; 'off': none)")
    args = parser.parse_args()
    args.pool = args.sessions if args.pool is None else args.pool
    with server(args.pool, args.records) as url, server(0, args.records) as unpooled_url:
        anyio.run(measure, url, unpooled_url, args)


if __name__ == "__main__":
    main()
