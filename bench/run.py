"""Reproduce the performance table: `python bench/run.py` (options: --help).

Every server is started as a user would start it (its own CLI, or uvicorn), each run gets a fresh server,
contenders are interleaved round by round (A B A B ...), and the table shows medians with ranges. The
reference servers run from their own venvs under `bench/.venvs/`, built on first use.

Workloads:
  a  ORS call path: 8 sessions calling a never-ending counter tool (ours, reference, bare-Starlette ceiling, the
     same route answering with sse-starlette (`sse-route`, issue 37's rate baseline), and the stack's floor: a
     pure ASGI app on the same uvicorn answering the same bytes), from a minimal raw-HTTP
     load client: what the servers themselves cost (compare their CPU per call: `server_cpu_us`)
  u  the same call path as a user's client sees it: 8 sessions of `ors-client`, and of `openreward`'s async client,
     each from its own venv (bench/client_load.py), against ours and the ceiling
  b  whole ORS episodes: create_session, create, prompt, call (math submit), delete (ours, reference)
  c  Eval Protocol rollout steps on FrozenLake: tools/call + /control/reward + /control/status (ours, EP)
  d  memory: RSS of our server holding 10,000 idle math sessions
  e  control-plane latency at 256 concurrent rollouts (ours)
  o  OpenEnv WebSocket steps on FrozenLake, 8 sockets (ours at /openenv/frozen_lake/ws, OpenEnv 0.10's own server)
  r  response classes on the bare route: plain Response, StreamingResponse, EventSourceResponse (for PROFILE.md)
  s  our call path with a sync tool (a worker-thread hop per call) vs an async one (for PROFILE.md)
  k  the cost of episode records on the call path: workload a's calls with records in SQLite (the default) vs off
  l  the same for whole episodes: workload b with records in SQLite vs off
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wsload  # noqa: E402
from loadgen import Conn, Op, Result, Setup, run  # noqa: E402

from client import run_client  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "bench" / ".venvs"
REFERENCE_VENVS = {
    "openreward": ["openreward==0.1.167"],
    "eval-protocol": ["eval-protocol==0.3.33", "gymnasium"],
    "openenv": ["openenv==0.10.0", "gymnasium"],
}
HOST = "127.0.0.1"
JSON = {"content-type": "application/json"}
MATH_TASK = {"question": "What is 2+2?", "answer": "4"}
ACTIONS = ["LEFT", "DOWN", "RIGHT", "UP"]
LOGS = Path(tempfile.mkdtemp(prefix="ors-bench-"))


# Servers.


def venv_python(name: str) -> str:
    """The python of reference venv `name`, built (once) with its pinned packages."""
    python = VENVS / name / "bin" / "python"
    if not python.exists():
        print(f"building bench/.venvs/{name} (first use; about a minute) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *REFERENCE_VENVS[name]], check=True)
    return str(python)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def server_command(contender: str, port: int, args: argparse.Namespace) -> list[str]:
    ours = [str(Path(sys.executable).with_name("ors-server")), "serve", "--port", str(port)]
    ours += ["--log-level", args.log_level]
    # Records on, as a user gets them (SQLite), each run in a fresh file outside the checkout; off for "ours-off".
    ours += ["--records", "off" if contender == "ours-off" else str(LOGS / f"records-{port}.db")]
    match contender:
        case "ours" | "ours-off":
            return [*ours, "--env", "math", "--env", "bench.envs:Counter", "--env", "frozen_lake"]
        case "ours-async":
            return [*ours, "--env", "bench.envs:AsyncCounter"]
        case "ours-math":
            return [*ours, "--env", "math"]
        case "reference":
            return [venv_python("openreward"), "bench/reference_envs.py", "--port", str(port)]
        case "eval-protocol":
            return [
                venv_python("eval-protocol"),
                "-m",
                "eval_protocol.mcp_servers.frozen_lake.server",
                "--port",
                str(port),
            ]
        case "openenv":
            # As OpenEnv's docs run an environment server: uvicorn on the module's `create_app` app.
            return [venv_python("openenv"), "-m", "uvicorn", "bench.openenv_reference:app", "--port", str(port)]
        case "asgi":  # the stack's floor: a pure ASGI app answering the same bytes (bench/ceiling.py)
            return [
                sys.executable,
                "-m",
                "uvicorn",
                "bench.ceiling:asgi",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ]
        case _:  # the bare-Starlette ceiling, with our server's uvicorn loop and http settings
            return [sys.executable, "-m", "uvicorn", "bench.ceiling:app", "--port", str(port), "--log-level", "warning"]


@contextmanager
def serve(contender: str, args: argparse.Namespace) -> Iterator[tuple[int, int]]:
    """Start `contender` on a free port; yields (port, pid) once it accepts connections, then stops it."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENREWARD_DISABLE_UPDATE_CHECK": "1"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    log = LOGS / f"{contender}-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(server_command(contender, port, args), cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{contender} did not start; see {log}:\n{log.read_text()[-2000:]}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# Workloads. Each is a (setup, op) pair for `loadgen.run`; a failed check raises ValueError (an error).


def check(status: int, body: bytes, expect: bytes = b"") -> bytes:
    if status != 200 or expect not in body:
        raise ValueError(f"{status}: {body[:200]!r}")
    return body


def sse_data(body: bytes, event: str) -> str:
    """The data of the last `event` in an SSE body."""
    found = None
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        if lines and lines.get("event", "message") == event:
            found = lines.get("data", "")
    if found is None:
        raise ValueError(f"no {event} event in {body[:200]!r}")
    return found


async def ors_session(conn: Conn, env_name: str, task_spec: dict) -> str:
    headers = {"accept": "text/event-stream", **JSON}
    sid = sse_data(check(*(await conn.request("POST", "/create_session", b"{}", headers))[::2]), "task_id")
    body = json.dumps({"env_name": env_name, "task_spec": task_spec}).encode()
    check(*(await conn.request("POST", "/create", body, {"x-session-id": sid, **JSON}))[::2])
    return sid


TICK = json.dumps({"name": "tick", "input": {}}).encode()
SUBMIT = json.dumps({"name": "submit", "input": {"answer": "4"}}).encode()


async def counter_setup(conn: Conn, i: int) -> str:
    return await ors_session(conn, "counter", {"start": 0})


async def async_counter_setup(conn: Conn, i: int) -> str:
    return await ors_session(conn, "acounter", {"start": 0})


async def no_setup(conn: Conn, i: int) -> None:
    return None


def counter_call(path: str):
    async def op(conn: Conn, sid: str) -> None:
        check(*(await conn.request("POST", path, TICK, {"x-session-id": sid, **JSON}))[::2], b"event: end")

    return op


def episode(new_connection: bool):
    """One whole ORS episode; with `new_connection`, on a connection of its own (closed after it), as a client
    made per episode sends it: the connection's setup is then part of every episode, as the user sees it."""

    async def op(conn: Conn, state: None) -> None:
        sid = await ors_session(conn, "math", MATH_TASK)
        headers = {"x-session-id": sid, **JSON}
        check(*(await conn.request("GET", "/math/prompt", headers=headers))[::2], b"2+2")
        check(*(await conn.request("POST", "/math/call", SUBMIT, headers))[::2], b'"reward":1.0')
        check(*(await conn.request("POST", "/delete", headers=headers))[::2])
        if new_connection:
            conn.close()

    return op


@dataclass
class Rollout:
    mcp: str
    control: str
    session_id: str
    seed: int
    headers: dict[str, str]
    rng: random.Random
    fresh_control: bool = False
    next_id: int = 1


def rpc_result(headers: dict[str, str], body: bytes) -> dict:
    text = sse_data(body, "message") if "event-stream" in headers.get("content-type", "") else body.decode()
    reply = json.loads(text)
    if "result" not in reply:
        raise ValueError(f"JSON-RPC error: {text[:200]}")
    return reply["result"]


def rollout_setup(mcp: str, control: str, fresh_control: bool):
    async def setup(conn: Conn, i: int) -> Rollout:
        session_id, seed = uuid.uuid4().hex, 1000 + i
        info = {"name": "ors-bench", "version": "1.0", "_extra": {"session_id": session_id, "seed": seed}}
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}
        body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode()
        headers = {"accept": "application/json, text/event-stream", **JSON}
        status, got, reply = await conn.request("POST", mcp, body, headers)
        version = rpc_result(got, check(status, reply))["protocolVersion"]
        headers = {**headers, "mcp-session-id": got["mcp-session-id"], "mcp-protocol-version": version}
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        status, _, _ = await conn.request("POST", mcp, note, headers)
        if status not in (200, 202):
            raise ValueError(f"notifications/initialized: {status}")
        return Rollout(mcp, control, session_id, seed, headers, random.Random(i), fresh_control)

    return setup


async def control_request(
    conn: Conn, r: Rollout, method: str, path: str, body: bytes, headers: dict[str, str], label: str
) -> tuple[int, dict[str, str], bytes]:
    """A control-plane request; with `r.fresh_control` as Eval Protocol's client sends it
    (`eval_protocol/mcp/client/connection.py`): each on a new `httpx.AsyncClient`, so on a new connection, closed
    after it. `conn` (the MCP session's, kept) is left alone."""
    if not r.fresh_control:
        return await conn.request(method, path, body, headers, label=label)
    own = Conn(conn.host, conn.port, conn.latencies)
    try:
        return await own.request(method, path, body, headers, label=label)
    finally:
        own.close()


async def rollout_step(conn: Conn, r: Rollout) -> None:
    args = {"name": "lake_move", "arguments": {"action": r.rng.choice(ACTIONS)}}
    body = json.dumps({"jsonrpc": "2.0", "id": r.next_id, "method": "tools/call", "params": args}).encode()
    r.next_id += 1
    status, got, reply = await conn.request("POST", r.mcp, body, r.headers, label="tools/call")
    if rpc_result(got, check(status, reply)).get("isError"):
        raise ValueError(f"tool error: {reply[:200]!r}")
    control = {"mcp-session-id": r.session_id}
    reward = await control_request(conn, r, "GET", f"{r.control}/reward", b"", control, "control")
    check(*reward[::2], b"reward")
    status, _, reply = await control_request(conn, r, "GET", f"{r.control}/status", b"", control, "control")
    state = json.loads(check(status, reply))
    if state["terminated"] or state["truncated"]:
        reset = json.dumps({"seed": r.seed}).encode()
        reply = await control_request(
            conn, r, "POST", f"{r.control}/reset_session", reset, {**control, **JSON}, "reset"
        )
        check(*reply[::2])


async def create_idle(conn: Conn, count: list[int]) -> None:
    count[0] += 1
    body = json.dumps({"env_name": "math", "task_spec": MATH_TASK}).encode()
    headers = {"x-session-id": f"idle-{uuid.uuid4().hex}", **JSON}
    check(*(await conn.request("POST", "/create", body, headers))[::2])


OPENENV_PATHS = {"ours": "/openenv/frozen_lake/ws", "openenv": "/ws"}


@dataclass
class Lake:
    seed: int
    rng: random.Random


async def lake_setup(conn: wsload.WsConn, i: int) -> Lake:
    lake = Lake(2000 + i, random.Random(i))
    await lake_reset(conn, lake)
    return lake


async def lake_reset(conn: wsload.WsConn, lake: Lake) -> None:
    reply = await conn.ask(json.dumps({"type": "reset", "data": {"seed": lake.seed}}))
    if not reply.startswith(b'{"type":"observation"'):
        raise ValueError(f"reset: {reply[:200]!r}")


async def lake_step(conn: wsload.WsConn, lake: Lake) -> None:
    """One OpenEnv step (RFC 003 `call_tool`); a new episode (same seed) when it ended."""
    action = {"type": "call_tool", "tool_name": "lake_move", "arguments": {"action": lake.rng.choice(ACTIONS)}}
    reply = await conn.ask(json.dumps({"type": "step", "data": action}))
    if not reply.startswith(b'{"type":"observation"') or b'"error":null' not in reply:
        raise ValueError(f"step: {reply[:200]!r}")
    if b'"done":true' in reply:
        await lake_reset(conn, lake)


def ws_load(port: int, path: str, workers: int, duration: float) -> Result:
    asyncio.run(wsload.run(HOST, port, path, workers, min(1.0, duration), lake_setup, lake_step))  # warm-up
    return asyncio.run(wsload.run(HOST, port, path, workers, duration, lake_setup, lake_step))


# Measuring.


@dataclass
class Sample:
    rate: float
    p50: float
    p99: float
    worst: float = 0.0
    errors: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def sample(result: Result, label: str = "op") -> Sample:
    return Sample(result.rate, result.pct(label, 0.5), result.pct(label, 0.99), result.pct(label, 1.0), result.errors)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(port: int, pid: int, workers: int, duration: float, setup, op) -> tuple[Result, float]:
    """The load run's result and the server's CPU µs per operation in it (less noisy than rates on a shared
    machine: it is what the server spent, whatever else ran)."""
    asyncio.run(run(HOST, port, workers, min(1.0, duration), setup, op))  # warm-up, discarded
    before = cpu_seconds(pid)
    result = asyncio.run(run(HOST, port, workers, duration, setup, op))
    return result, 1e6 * (cpu_seconds(pid) - before) / max(result.rate * duration, 1)


def plan(workload: str, contender: str, args: argparse.Namespace) -> tuple[int, Setup, Op]:
    """How many workers run which (setup, op) for `contender` in `workload`."""
    fresh = args.connections == "client"
    match workload, contender:
        case "a", "ceiling" | "asgi":
            return args.workers, no_setup, counter_call("/counter/call")
        case "a", "sse-route":
            return args.workers, no_setup, counter_call("/sse/call")
        case "a" | "s" | "k", "ours" | "reference" | "ours-off":
            return args.workers, counter_setup, counter_call("/counter/call")
        case "s", "ours-async":
            return args.workers, async_counter_setup, counter_call("/acounter/call")
        case "r", _:
            return args.workers, no_setup, counter_call(RESPONSE_CLASS_PATHS[contender])
        case "b" | "l", _:
            return args.workers, no_setup, episode(args.connections == "client")
        case "c", "eval-protocol":
            return args.workers, rollout_setup("/mcp", "/control", fresh), rollout_step
        case "c" | "e", "ours":
            workers = args.workers if workload == "c" else args.rollouts
            return workers, rollout_setup("/frozen_lake/mcp/", "/frozen_lake/control", fresh), rollout_step
    raise ValueError(f"no plan for {contender} in {workload}")


def measure_once(workload: str, contender: str, args: argparse.Namespace) -> Sample:
    if workload == "u":
        return user_client(contender, args)
    server = "ours-math" if workload == "d" else "ceiling" if workload == "r" else contender
    with serve(server, args) as (port, pid), profiled(server, pid, workload, args):
        if workload == "d":
            return memory(port, pid, args)
        if workload == "o":
            return sample(ws_load(port, OPENENV_PATHS[contender], args.workers, args.duration))
        workers, setup, op = plan(workload, contender, args)
        result, server_cpu = load(port, pid, workers, args.duration, setup, op)
    got = control_sample(result) if workload == "e" else sample(result)
    got.extra["server_cpu_us"] = server_cpu
    return got


def user_client(contender: str, args: argparse.Namespace) -> Sample:
    """Workload u: `args.workers` sessions of a real client (`SERVER+CLIENT`) calling `tick` back to back. The
    client reports no latencies, only what it did and its own CPU time."""
    server, client = contender.split("+")
    with serve(server, args) as (port, _):
        got = run_client(client, f"http://{HOST}:{port}", "calls", args.workers, args.duration)
    cpu = 1e6 * got["cpu"] / max(got["done"], 1)
    return Sample(got["done"] / got["seconds"], math.nan, math.nan, math.nan, got["errors"], {"client_cpu_us": cpu})


def control_sample(result: Result) -> Sample:
    """Latency of every control-plane request (reward, status, reset_session), with each kind in `extra`."""
    result.latencies["all"] = result.latencies["control"] + result.latencies.get("reset", [])
    s = Sample(result.rate, result.pct("all", 0.5), result.pct("all", 0.99), result.pct("all", 1.0), result.errors)
    for label in ("control", "reset", "tools/call"):
        s.extra |= {f"{label} p99": result.pct(label, 0.99), f"{label} max": result.pct(label, 1.0)}
    return s


@contextmanager
def profiled(server: str, pid: int, workload: str, args: argparse.Namespace) -> Iterator[None]:
    """With --py-spy, sample our server's stacks while `workload` runs; prints its hottest frames after."""
    if not (args.py_spy and server.startswith("ours")):
        yield
        return
    out = LOGS / f"{workload}-{pid}.txt"
    spy = VENVS / "tools" / "bin" / "py-spy"
    if not spy.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / "tools")], check=True)
        subprocess.run([str(VENVS / "tools" / "bin" / "pip"), "install", "-q", "py-spy"], check=True)
    cmd = [str(spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--gil", "--output", str(out)]
    proc = subprocess.Popen([*cmd, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        print(top_frames(out), flush=True)


def top_frames(path: Path, n: int = 25) -> str:
    """The frames holding the most samples, inclusive (own time plus callees) and exclusive, from py-spy raw."""
    inclusive: dict[str, int] = {}
    exclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split("/")[-1] for f in stack.split(";")[1:]]
        total += int(count)
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + int(count)
        if frames:
            exclusive[frames[-1]] = exclusive.get(frames[-1], 0) + int(count)
    lines = [f"  py-spy {path} ({total} samples)"]
    for title, table in (("inclusive", inclusive), ("exclusive", exclusive)):
        lines.append(f"  top {title}:")
        for frame, count in sorted(table.items(), key=lambda kv: -kv[1])[:n]:
            lines.append(f"    {100 * count / total:5.1f}%  {frame}")
    return "\n".join(lines)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no VmRSS")


def memory(port: int, pid: int, args: argparse.Namespace) -> Sample:
    time.sleep(1)
    before = rss(pid)
    count = [0]

    async def create_all() -> Result:
        conns = [Conn(HOST, port) for _ in range(args.workers)]

        async def worker(conn: Conn) -> None:
            while count[0] < args.sessions:
                await create_idle(conn, count)

        began = time.perf_counter()
        await asyncio.gather(*(worker(conn) for conn in conns))
        return Result(count[0], time.perf_counter() - began)

    created = asyncio.run(create_all())
    time.sleep(args.settle)
    grown = rss(pid) - before
    extra = {"rss_start_mb": before / 2**20, "grown_mb": grown / 2**20, "bytes_per_session": grown / created.ops}
    return Sample(created.rate, float("nan"), float("nan"), extra=extra)


RESPONSE_CLASS_PATHS = {"plain": "/counter/call", "streaming": "/stream/call", "sse-starlette": "/sse/call"}
CONTENDERS = {
    "a": ["ours", "reference", "ceiling", "asgi", "sse-route"],
    "u": ["ours+ors-client", "ceiling+ors-client", "ours+openreward", "ceiling+openreward"],
    "b": ["ours", "reference"],
    "c": ["ours", "eval-protocol"],
    "d": ["ours"],
    "e": ["ours"],
    "r": ["plain", "streaming", "sse-starlette"],
    "s": ["ours", "ours-async"],
    "o": ["ours", "openenv"],
    "k": ["ours", "ours-off"],
    "l": ["ours", "ours-off"],
}
TITLES = {
    "a": "ORS call path, 8 sessions (calls/s)",
    "u": "ORS call path from a user's client, 8 sessions (calls/s)",
    "b": "whole ORS episodes, 8 clients (episodes/s)",
    "c": "EP rollout steps on FrozenLake, 8 rollouts (steps/s)",
    "d": "memory, 10,000 idle math sessions (creates/s)",
    "e": "control-plane latency, 256 rollouts (steps/s; latency of control requests)",
    "r": "response classes on the bare route (calls/s)",
    "s": "our call path, sync tool vs async tool (calls/s)",
    "o": "OpenEnv WebSocket steps on FrozenLake, 8 sockets (steps/s)",
    "k": "ORS call path with episode records (SQLite) vs records off (calls/s)",
    "l": "whole ORS episodes with episode records (SQLite) vs records off (episodes/s)",
}
# The goals of issue 21 (a's against the ceiling as a user's client sees it: u).
RATIOS = {"a": [("ours", "sse-route", 1.0), ("ours", "ceiling", None), ("ours", "reference", None)]}
RATIOS["b"] = [("ours", "reference", 6.0)]
RATIOS["u"] = [("ours+ors-client", "ceiling+ors-client", 0.85), ("ours+openreward", "ceiling+openreward", 0.85)]
RATIOS["c"] = [("ours", "eval-protocol", 8.0)]
RATIOS["r"] = [("sse-starlette", "plain", None), ("streaming", "plain", None)]
RATIOS["s"] = [("ours-async", "ours", None)]
RATIOS["o"] = [("ours", "openenv", 3.0)]
RATIOS["k"] = [("ours", "ours-off", None)]
RATIOS["l"] = [("ours", "ours-off", None)]
CPU_RATIOS = {
    "a": [("ours", "asgi", 3.0), ("ours", "sse-route", None), ("ours", "ceiling", None), ("reference", "ours", None)],
    "b": [("reference", "ours", None)],
    "c": [("eval-protocol", "ours", None)],
    "k": [("ours", "ours-off", None)],
    "l": [("ours", "ours-off", None)],
}
"""The servers' own CPU per operation, in the same run (`server_cpu_us`: each process' counters): num / den, with
issue 37's goal where it sets one on CPU (ours at most 3x the pure ASGI floor per call)."""


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="abcdeo", help="letters of the workloads to run (default: abcdeo)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--connections",
        choices=("client", "kept"),
        default="client",
        help="client: connections as the official clients use them (b: a new one per episode; c: Eval Protocol's "
        "control requests each on a new one, tools/call on the MCP session's); kept: one per worker throughout",
    )
    parser.add_argument("--rollouts", type=int, default=256, help="concurrent rollouts in workload e")
    parser.add_argument("--sessions", type=int, default=10_000, help="idle sessions in workload d")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds to wait before reading RSS in d")
    parser.add_argument("--log-level", default="warning", help="our server's --log-level")
    parser.add_argument("--py-spy", action="store_true", help="profile our server during each run (top frames)")
    parser.add_argument("--only", nargs="+", metavar="CONTENDER", help="run only these contenders (e.g. ours)")
    args = parser.parse_args()

    contenders = {w: [c for c in CONTENDERS[w] if not args.only or c in args.only] for w in args.workloads}
    samples: dict[str, dict[str, list[Sample]]] = {w: {c: [] for c in contenders[w]} for w in args.workloads}
    for workload in args.workloads:
        print(f"\n## ({workload}) {TITLES[workload]}", flush=True)
        for round_ in range(args.rounds):
            for contender in contenders[workload]:
                s = measure_once(workload, contender, args)
                samples[workload][contender].append(s)
                extra = " ".join(f"{k}={v:.1f}" for k, v in s.extra.items())
                print(
                    f"  round {round_ + 1} {contender:18} {s.rate:8.1f}/s  p50 {s.p50:6.2f} ms  p99 {s.p99:6.2f} ms"
                    f"  max {s.worst:7.2f} ms  errors {s.errors}  {extra}",
                    flush=True,
                )
    print("\n" + table(samples, args))


def table(samples: dict[str, dict[str, list[Sample]]], args: argparse.Namespace) -> str:
    rows = [
        f"Medians of {args.rounds} interleaved {args.duration:g} s runs (range in brackets), {args.workers} workers.",
        "",
        "| workload | server | rate /s | server CPU µs/op | p50 ms | p99 ms | same-run ratio | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload, by in samples.items():
        for contender, got in by.items():
            ratios, goals = [], []
            for num, den, goal in RATIOS.get(workload, []):
                if num == contender and by.get(den):
                    per_round = [s.rate / d.rate for s, d in zip(got, by[den], strict=True)]
                    ratios.append(f"{spread(per_round, '{:.2f}')}x vs {den}")
                    if goal is not None:
                        goals.append(f"≥ {goal:g}x: {'met' if statistics.median(per_round) >= goal else 'MISSED'}")
            for num, den, goal in CPU_RATIOS.get(workload, []):
                if num == contender and by.get(den) and "server_cpu_us" in got[0].extra:
                    per_round = [
                        s.extra["server_cpu_us"] / d.extra["server_cpu_us"] for s, d in zip(got, by[den], strict=True)
                    ]
                    ratios.append(f"CPU/op {spread(per_round, '{:.2f}')}x of {den}'s")
                    if goal is not None:
                        goals.append(f"CPU ≤ {goal:g}x: {'met' if statistics.median(per_round) <= goal else 'MISSED'}")
            ratio, goal_text = "; ".join(ratios), "; ".join(goals)
            if workload == "d":
                mb = [s.extra["grown_mb"] for s in got]
                per = [s.extra["bytes_per_session"] for s in got]
                ratio = f"{spread(mb, '{:.0f}')} MB grown, {spread(per, '{:.0f}')} B/session"
                goal_text = f"< 300 MB: {'met' if max(mb) < 300 else 'MISSED'}"
            if workload == "e":
                worst = [s.worst for s in got]
                split = [spread([s.extra[f"{k} max"] for s in got]) for k in ("control", "reset", "tools/call")]
                ratio = (
                    f"max ms: all {spread(worst)}; reward+status {split[0]}; reset {split[1]}; tools/call {split[2]}"
                )
                goal_text = f"none > 1 s: {'met' if max(worst) < 1000 else 'MISSED'}"
            rate, p50 = spread([s.rate for s in got]), spread([s.p50 for s in got], "{:.2f}")
            p99 = spread([s.p99 for s in got], "{:.2f}")
            if workload == "d":
                p50 = p99 = "–"
            cpu = spread([s.extra["server_cpu_us"] for s in got]) if "server_cpu_us" in got[0].extra else "–"
            rows.append(
                f"| {workload}: {TITLES[workload]} | {contender} | {rate} | {cpu} | {p50} | {p99} | {ratio} "
                f"| {goal_text} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
