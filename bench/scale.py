"""Scaling out, measured: `python bench/scale.py` (options: --help).

  cpu    a CPU-bound environment (a tool burning ~15 ms of pure Python), 8 sessions in closed loops:
         calls/s of one server process vs `--workers 1` vs `--workers 2` behind the front
  hop    the front's cost for cheap calls at concurrency 1: p50/p99 of `POST /ping` and of a no-op SSE `/call`,
         direct (one server process) vs through the front (`--workers 1`), and the front's CPU per request
  ws     WebSocket message round trip: an echo server direct vs through the front, and the front's CPU per message
  openenv  OpenEnv WebSocket `state` frames on one socket, direct vs through the front, and the front's CPU per frame
  kill   time from SIGKILL of a worker to its session's first 410 at the front
  placed a CPU-bound tool, 4 sessions with client-chosen ids (ones the old hash rule put on one worker) in closed
         loops: calls/s with `--workers 1` vs `--workers 2`, and where the 4 sessions were placed
  lookup what finding a session costs at the front (`--workers 2`): p50 of the first request for an id the front
         has not seen (it asks the workers) vs later ones (its directory), and of a create through the front

Contenders are interleaved round by round and medians shown with ranges: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import Conn, run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
ENV = "bench.scale_envs:Burn"
SSE = {"accept": "text/event-stream", "content-type": "application/json"}
LOGS = Path(tempfile.mkdtemp(prefix="ors-scale-bench-"))
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (its children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def worker_spec(front: int, slot: int) -> dict:
    """The spec (JSON in its environment) of the worker process in `slot`."""
    for child in Path(f"/proc/{front}/task/{front}/children").read_text().split():
        for entry in Path(f"/proc/{child}/environ").read_bytes().split(b"\0"):
            if entry.startswith(b"ORS_WORKER_SPEC="):
                spec = json.loads(entry.split(b"=", 1)[1])
                if spec["settings"]["worker_tag"].startswith(f"w{slot}-"):
                    return spec
    raise LookupError(slot)


async def worker_conn(front: int, slot: int) -> Conn:
    """A connection to one worker's own Unix socket, past the front."""
    conn = Conn("localhost", 0)
    conn.reader, conn.writer = await asyncio.open_unix_connection(worker_spec(front, slot)["uds"])
    return conn


async def holds(conn: Conn, sid: str) -> bool:
    """Whether the worker on `conn` holds `sid` live (its lookup answer, as a front reads it)."""
    _, _, body = await conn.request("GET", "/_ors/lookup", b"", {"x-ors-lookup": sid})
    return json.loads(body)["held"] == "live"


def worker_pid(front: int, slot: int) -> int:
    """The pid of the worker process in `slot` (its spec in the environment names its tag)."""
    for child in Path(f"/proc/{front}/task/{front}/children").read_text().split():
        if f'"worker_tag": "w{slot}-'.encode() in Path(f"/proc/{child}/environ").read_bytes():
            return int(child)
    raise LookupError(slot)


@contextmanager
def server(workers: int | None, fronts: int = 1) -> Iterator[tuple[int, int]]:
    """`ors-server serve` (one process, or `--workers N` behind the front); yields (port, pid) once healthy."""
    port = free_port()
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--env", ENV]
    command += ["--log-level", "warning"] + (["--workers", str(workers)] if workers else [])
    command += ["--fronts", str(fronts)] if fronts > 1 else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = LOGS / f"server-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start; see {log}:\n{log.read_text()[-2000:]}")
            try:
                with socket.create_connection((HOST, port), timeout=1) as sock:
                    sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
                    if b" 200 " in sock.recv(200):
                        break
            except OSError:
                pass
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def new_session(conn: Conn, sid: str | None = None) -> str:
    if sid is None:
        status, _, body = await conn.request("POST", "/create_session")
        sid = json.loads(body)["sid"]
    created = json.dumps({"env_name": "burn", "task_spec": {}}).encode()
    status, _, body = await conn.request("POST", "/create", created, {"x-session-id": sid, **SSE})
    if status != 200:
        raise ValueError(body)
    return sid


def call(tool: str, arguments: dict):
    payload = json.dumps({"name": tool, "input": arguments}).encode()

    async def op(conn: Conn, sid: str) -> None:
        status, _, body = await conn.request("POST", "/call", payload, {"x-session-id": sid, **SSE}, label="call")
        if status != 200 or b"event: end" not in body:
            raise ValueError(body[:200])

    return op


async def ping(conn: Conn, sid: str) -> None:
    status, _, _ = await conn.request("POST", "/ping", b"", {"x-session-id": sid}, label="ping")
    if status != 200:
        raise ValueError(status)


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def server_cpu(pid: int) -> float:
    """CPU seconds of a server process and its worker processes."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return cpu_seconds(pid) + sum(cpu_seconds(int(child)) for child in children)


BARE_BURN = """
import sys, time
stop, n = time.perf_counter() + float(sys.argv[1]), 0
while time.perf_counter() < stop:
    total = 0
    for i in range(200_000):
        total += i * i % 7
    n += 1
print(n)
"""


def bare_ceiling(processes: int, duration: float) -> float:
    """Burn loops/s of `processes` plain Python processes at once: what the machine gives right now, no server."""
    procs = [
        subprocess.Popen([sys.executable, "-c", BARE_BURN, str(duration)], stdout=subprocess.PIPE)
        for _ in range(processes)
    ]
    return sum(int(proc.communicate()[0]) for proc in procs) / duration


def cpu_bound(args: argparse.Namespace) -> None:
    contenders = {"one process": None, "--workers 1": 1, "--workers 2": 2}
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    cores: dict[str, list[float]] = {name: [] for name in contenders}
    bare: list[float] = []
    for _ in range(args.rounds):
        one, two = bare_ceiling(1, args.duration / 2), bare_ceiling(2, args.duration / 2)
        bare.append(two / one)
        print(f"  bare Python: 1 process {one:.1f} loops/s, 2 processes {two:.1f} loops/s", flush=True)
        for name, workers in contenders.items():
            with server(workers) as (port, pid):
                before = server_cpu(pid)
                result = asyncio.run(run(HOST, port, 8, args.duration, lambda c, i: new_session(c), call("burn", {})))
                used = (server_cpu(pid) - before) / result.seconds
            rates[name].append(result.rate)
            cores[name].append(used)
            print(f"  {name}: {result.rate:.1f} calls/s on {used:.2f} cores ({result.errors} errors)", flush=True)
    print("\ncpu: 8 sessions calling a ~15 ms pure-Python tool (calls/s, median (range))")
    print("  (cores: the CPU the server's processes got; on a shared machine that, not the design, can cap the rate)")
    base = statistics.median(rates["one process"])
    for name, values in rates.items():
        print(
            f"  {name:12} {spread(values, '{:.1f}')}   x{statistics.median(values) / base:.2f}"
            f"   on {spread(cores[name], '{:.2f}')} cores"
        )
    ratios = [w2 / w1 for w1, w2 in zip(rates["one process"], rates["--workers 2"], strict=True)]
    print(f"  --workers 2 / one process, per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"  the machine's own ceiling, 2 / 1 bare Python processes, per round: {', '.join(f'{r:.2f}' for r in bare)}")


def hop(args: argparse.Namespace) -> None:
    rows: dict[str, dict[str, list[float]]] = {}
    front_cpu: dict[str, list[float]] = {"ping": [], "call": []}
    for _ in range(args.rounds):
        for name, workers in (("direct", None), ("front", 1)):
            with server(workers) as (port, pid):
                for label, op in (("ping", ping), ("call", call("noop", {}))):

                    async def measure(op=op) -> tuple:
                        conn = Conn(HOST, port)
                        sid = await new_session(conn)
                        for _ in range(200):  # warm up: connections, caches
                            await op(conn, sid)
                        before = cpu_seconds(pid)
                        result = await run(HOST, port, 1, args.duration, lambda c, i: asyncio.sleep(0, sid), op)
                        return result, cpu_seconds(pid) - before

                    result, cpu = asyncio.run(measure())
                    key = f"{label} {name}"
                    rows.setdefault(key, {"p50": [], "p99": []})
                    rows[key]["p50"].append(result.pct("op", 0.5))
                    rows[key]["p99"].append(result.pct("op", 0.99))
                    if name == "front":
                        front_cpu[label].append(cpu / result.ops * 1e6)
                    print(f"  {key}: p50 {result.pct('op', 0.5):.3f} ms, {result.ops} requests", flush=True)
    print("\nhop: cheap requests at concurrency 1 (ms, median (range) over rounds)")
    for label in ("ping", "call"):
        d, f = rows[f"{label} direct"], rows[f"{label} front"]
        added50 = [b - a for a, b in zip(d["p50"], f["p50"], strict=True)]
        added99 = [b - a for a, b in zip(d["p99"], f["p99"], strict=True)]
        print(f"  {label}: direct p50 {spread(d['p50'], '{:.3f}')}, p99 {spread(d['p99'], '{:.3f}')}")
        print(f"  {label}: front  p50 {spread(f['p50'], '{:.3f}')}, p99 {spread(f['p99'], '{:.3f}')}")
        print(f"  {label}: added  p50 {spread(added50, '{:+.3f}')}, p99 {spread(added99, '{:+.3f}')}")
        print(f"  {label}: front CPU per request {spread(front_cpu[label], '{:.0f}')} us")


ECHO_APP = """
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

async def echo(ws):
    await ws.accept()
    try:
        while True:
            await ws.send_text(await ws.receive_text())
    except Exception:
        pass

app = Starlette(routes=[WebSocketRoute("/ws", echo)])
"""

FRONT_APP = """
import sys
import uvicorn
from ors_server.http.guards import HeaderChecks
from ors_server.http.hosts import AllowedHosts
from ors_server.scale.front import Front
from ors_server.ids import WorkerTag
from ors_server.scale.refusals import Refusals
from ors_server.scale.table import Address, Worker, WorkerTable
from ors_server.settings import Settings
from bench.scale_envs import Burn

table = WorkerTable(1)
table.put(Worker(WorkerTag(0, 1), Address(uds=sys.argv[2])))
checks = HeaderChecks(AllowedHosts(Settings()), None)
front = Front(table, Refusals(), checks=checks, max_body_bytes=1 << 20)
uvicorn.run(front, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", server_header=False)
"""


def websocket(args: argparse.Namespace) -> None:
    import websockets

    uds = str(LOGS / "echo.sock")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (LOGS / "echo_app.py").write_text(ECHO_APP)
    echo_port, front_port = free_port(), free_port()
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(LOGS), "echo_app:app", "--port", str(echo_port)],
            env=env,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(LOGS), "echo_app:app", "--uds", uds],
            env=env,
            stderr=subprocess.DEVNULL,
        ),
    ]
    time.sleep(3)
    front = subprocess.Popen([sys.executable, "-c", FRONT_APP, str(front_port), uds], env=env, cwd=ROOT)
    servers.append(front)
    time.sleep(3)
    results: dict[str, list[float]] = {"direct": [], "front": []}
    p99: dict[str, list[float]] = {"direct": [], "front": []}
    cpu: list[float] = []

    async def rounds(port: int, count: int) -> list[float]:
        async with websockets.connect(f"ws://{HOST}:{port}/ws", compression=None) as ws:
            for _ in range(200):
                await ws.send("x" * 64)
                await ws.recv()
            times = []
            for _ in range(count):
                started = time.perf_counter()
                await ws.send("x" * 64)
                await ws.recv()
                times.append(time.perf_counter() - started)
            return sorted(times)

    try:
        for _ in range(args.rounds):
            for name, port in (("direct", echo_port), ("front", front_port)):
                before = cpu_seconds(front.pid)
                times = asyncio.run(rounds(port, args.messages))
                if name == "front":
                    cpu.append((cpu_seconds(front.pid) - before) / (args.messages + 200) * 1e6)
                results[name].append(1000 * times[len(times) // 2])
                p99[name].append(1000 * times[int(len(times) * 0.99)])
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(10)
    report_added(f"ws: 64-byte text message round trips, {args.messages} per round", "message", results, p99, cpu)


def report_added(
    title: str, unit: str, p50: dict[str, list[float]], p99: dict[str, list[float]], cpu: list[float]
) -> None:
    """Latency direct and through the front (ms per round), what the front adds, and its CPU per `unit`."""
    added = [f - d for d, f in zip(p50["direct"], p50["front"], strict=True)]
    print(f"\n{title} (ms, median (range))")
    print(f"  direct p50 {spread(p50['direct'], '{:.3f}')}, p99 {spread(p99['direct'], '{:.3f}')}")
    print(f"  front  p50 {spread(p50['front'], '{:.3f}')}, p99 {spread(p99['front'], '{:.3f}')}")
    print(f"  added  p50 {spread(added, '{:+.3f}')}; front CPU per {unit} {spread(cpu, '{:.0f}')} us")


def openenv(args: argparse.Namespace) -> None:
    import websockets

    results: dict[str, list[float]] = {"direct": [], "front": []}
    p99: dict[str, list[float]] = {"direct": [], "front": []}
    cpu: list[float] = []

    async def frames(port: int, count: int, pid: int, through_front: bool) -> list[float]:
        async with websockets.connect(f"ws://{HOST}:{port}/openenv/burn/ws", compression=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {}}))
            await ws.recv()
            for _ in range(200):
                await ws.send('{"type": "state"}')
                await ws.recv()
            before = cpu_seconds(pid)
            times = []
            for _ in range(count):
                started = time.perf_counter()
                await ws.send('{"type": "state"}')
                await ws.recv()
                times.append(time.perf_counter() - started)
            if through_front:
                cpu.append((cpu_seconds(pid) - before) / count * 1e6)
            return sorted(times)

    for _ in range(args.rounds):
        for name, workers in (("direct", None), ("front", 1)):
            with server(workers) as (port, pid):
                times = asyncio.run(frames(port, args.messages, pid, workers is not None))
            results[name].append(1000 * times[len(times) // 2])
            p99[name].append(1000 * times[int(len(times) * 0.99)])
    report_added(
        f"openenv: WebSocket `state` frames on one socket, {args.messages} per round", "frame", results, p99, cpu
    )


def kill(args: argparse.Namespace) -> None:
    times = []
    with server(2) as (port, pid):
        for _ in range(args.rounds):

            async def once(victim: int) -> float:
                conn, worker1 = Conn(HOST, port), await worker_conn(pid, 1)
                while True:  # a session on worker 1 (asked of worker 1 itself)
                    sid = await new_session(conn)
                    if await holds(worker1, sid):
                        break
                worker1.close()
                await ping(conn, sid)
                os.kill(victim, signal.SIGKILL)
                killed = time.perf_counter()
                while True:
                    status, _, _ = await conn.request("POST", "/ping", b"", {"x-session-id": sid})
                    if status == 410:
                        return time.perf_counter() - killed

            times.append(asyncio.run(once(worker_pid(pid, 1))) * 1000)

            async def restarted() -> None:
                conn = Conn(HOST, port)
                while True:
                    if b'"1":"ok"' in (await conn.request("GET", "/health"))[2].replace(b" ", b""):
                        return
                    await asyncio.sleep(0.2)

            asyncio.run(restarted())
    print(f"\nkill: SIGKILL of a worker to its session's first 410 at the front: {spread(times, '{:.1f}')} ms")


def old_hash_slot(key: str) -> int:
    """Where the old rule (before placement by load) sent a client-chosen id: blake2b to 4,096 slots, mod N."""
    from hashlib import blake2b

    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "big") % 4096


def placed(args: argparse.Namespace) -> None:
    contenders = {"--workers 1": 1, "--workers 2": 2}
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    bare: list[float] = []
    placements: list[str] = []
    for round_ in range(args.rounds):
        one, two = bare_ceiling(1, args.duration / 2), bare_ceiling(2, args.duration / 2)
        bare.append(two / one)
        print(f"  bare Python: 1 process {one:.1f} loops/s, 2 processes {two:.1f} loops/s", flush=True)
        # Four ids of a trainer's choosing that the old rule sent all to worker 0 of 2.
        ids = [f"trainer-{round_}-{i}" for i in range(400) if old_hash_slot(f"trainer-{round_}-{i}") % 2 == 0][:4]
        for name, workers in contenders.items():
            with server(workers) as (port, pid):
                result = asyncio.run(
                    run(HOST, port, 4, args.duration, lambda c, i, ids=ids: new_session(c, ids[i]), call("burn", {}))
                )
                if workers == 2:

                    async def where(ids: list[str] = ids) -> str:
                        conns = [await worker_conn(pid, slot) for slot in (0, 1)]
                        on = [sum([await holds(c, sid) for sid in ids]) for c in conns]
                        for c in conns:
                            c.close()
                        return f"{on[0]}:{on[1]}"

                    placements.append(asyncio.run(where()))
            rates[name].append(result.rate)
            print(f"  {name}: {result.rate:.1f} calls/s ({result.errors} errors)", flush=True)
    print("\nplaced: 4 sessions with client-chosen ids calling a ~15 ms pure-Python tool (calls/s, median (range))")
    for name, values in rates.items():
        print(f"  {name:12} {spread(values, '{:.1f}')}")
    ratios = [w2 / w1 for w1, w2 in zip(rates["--workers 1"], rates["--workers 2"], strict=True)]
    print(f"  --workers 2 / --workers 1, per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"  sessions on worker 0:1 with --workers 2, per round: {', '.join(placements)}")
    print(f"  the machine's own ceiling, 2 / 1 bare Python processes, per round: {', '.join(f'{r:.2f}' for r in bare)}")


def lookup(args: argparse.Namespace) -> None:
    first: list[float] = []
    later: list[float] = []
    creates: list[float] = []
    direct_creates: list[float] = []
    ids = 200
    for round_ in range(args.rounds):
        with server(2) as (port, pid):

            async def measure(round_: int = round_, port: int = port, pid: int = pid) -> None:
                conn = Conn(HOST, port, {})
                worker = await worker_conn(pid, 0)
                warm = await new_session(conn, f"warm-{round_}")
                for _ in range(100):
                    await ping(conn, warm)
                # Sessions made on a worker behind the front's back: the front has never seen their ids.
                unseen = [f"unseen-{round_}-{i}" for i in range(ids)]
                for sid in unseen:
                    await new_session(worker, sid)
                for sid in unseen:
                    started = time.perf_counter()
                    await ping(conn, sid)
                    first.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await ping(conn, sid)
                    later.append(time.perf_counter() - started)
                for i in range(ids):  # creates: through the front (lookup, placement) and on a worker directly
                    started = time.perf_counter()
                    await new_session(conn, f"made-{round_}-{i}")
                    creates.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await new_session(worker, f"direct-{round_}-{i}")
                    direct_creates.append(time.perf_counter() - started)
                conn.close()
                worker.close()

            asyncio.run(measure())
            print(f"  round {round_ + 1}: done", flush=True)

    def p50(values: list[float]) -> float:
        return statistics.median(values) * 1000

    print(f"\nlookup: {ids} ids per round over {args.rounds} rounds, --workers 2, one front (ms, p50)")
    print(f"  first POST /ping of an id the front has not seen (it asks the workers): {p50(first):.3f}")
    print(f"  later POST /ping of the same id (the front's directory):                {p50(later):.3f}")
    print(f"  added by the lookup, first request: {p50(first) - p50(later):+.3f}; later requests: none (a dict hit)")
    print(f"  POST /create with a new client-chosen id through the front: {p50(creates):.3f}")
    print(f"  the same on a worker's own socket, no front:               {p50(direct_creates):.3f}")
    from ors_server.ids import WorkerTag
    from ors_server.scale.directory import Directory

    directory, tag = Directory(), WorkerTag(0, 1)
    keys = [f"key-{i}" for i in range(100_000)]
    for key in keys:
        directory.put(key, tag)
    started = time.perf_counter()
    for key in keys:
        directory.get(key)
    print(f"  a directory hit itself: {(time.perf_counter() - started) / len(keys) * 1e6:.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parts = ["cpu", "hop", "ws", "openenv", "kill", "placed", "lookup"]
    parser.add_argument("parts", nargs="*", default=parts, choices=parts)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per load run")
    parser.add_argument("--messages", type=int, default=3000, help="WebSocket round trips per round")
    args = parser.parse_args()
    print(f"logs: {LOGS}")
    for part in args.parts:
        parts_run = {"cpu": cpu_bound, "hop": hop, "ws": websocket, "openenv": openenv, "kill": kill}
        {**parts_run, "placed": placed, "lookup": lookup}[part](args)


if __name__ == "__main__":
    main()
