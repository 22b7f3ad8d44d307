"""Soak: many concurrent episodes on all faces for a bounded time, with clients vanishing mid-call.

    python bench/soak.py --duration 600 --sessions 50

Starts `ors-server serve` (math and frozen_lake) on a free loopback port and runs `--sessions` concurrent
clients until `--duration` seconds have passed. Each client loops over episodes, picked at random:

    ORS      create_session, create, prompt, call `submit` (SSE), delete               on `math`
    MCP+EP   initialize with clientInfo._extra.session_id, `lake_move` calls, control  on `frozen_lake`
             reward and status after each move, DELETE of the transport

With probability `--disconnect` a call is abandoned: the client closes its socket right after sending the
request (an SSE `/call`, or a `tools/call`), then goes on with its episode logic and still deletes its session.

It reports requests, errors (5xx, hangs past `--timeout`, connection failures, unexpected shapes), leaked
sessions (`ors_live_sessions` in `/metrics` once every client has deleted its own), the server process's
resident memory, open file descriptors and threads at the start, the peak, and the end, and how many
exceptions escaped to uvicorn ("Exception in ASGI application" in the server's output; these hit vanished
clients, which is why they are reported apart from errors). Exit status 1 when there were errors or leaks.
The client is raw asyncio HTTP/1.1, so it stays lean next to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
MCP_PATH = "/frozen_lake/mcp/"
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ACTIONS = ["LEFT", "DOWN", "RIGHT", "UP"]
MAX_MOVES = 12


class Unexpected(Exception):
    """A response the protocol does not allow here (wrong status, shape or framing)."""


@dataclass
class Stats:
    requests: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    episodes: Counter[str] = field(default_factory=Counter)
    disconnects: int = 0

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{kind}: {detail[:300]}")


# A lean HTTP/1.1 client.


class Conn:
    """One keep-alive connection; `request` returns (status, lowercased headers, body)."""

    def __init__(self, port: int, stats: Stats, timeout: float) -> None:
        self.port, self.stats, self.timeout = port, stats, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    def _encode(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"host: {HOST}:{self.port}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    async def request(
        self, label: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        raw = b"" if body is None else json.dumps(body).encode()
        all_headers = {"content-type": "application/json", **(headers or {})} if body is not None else headers or {}
        self.stats.requests[label] += 1
        try:
            return await asyncio.wait_for(self._exchange(method, path, raw, all_headers), self.timeout)
        except TimeoutError:
            self.close()
            raise Unexpected(f"hang: {label} {method} {path} took over {self.timeout} s") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            self.close()
            raise Unexpected(f"connection: {label} {method} {path}: {type(exc).__name__}: {exc}") from None

    async def _exchange(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Any:
        await self._open()
        assert self.reader is not None and self.writer is not None
        self.writer.write(self._encode(method, path, body, headers))
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        got: dict[str, str] = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                got[name.strip().lower()] = value.strip()
        if got.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                parts.append((await self.reader.readexactly(size + 2))[:-2])
            while await self.reader.readline() not in (b"\r\n", b""):
                pass
            data = b"".join(parts)
        else:
            data = await self.reader.readexactly(int(got.get("content-length", "0")))
        if got.get("connection", "").lower() == "close":
            self.close()
        return status, got, data

    async def send_and_vanish(self, label: str, method: str, path: str, body: Any, headers: dict[str, str]) -> None:
        """Send a request on a fresh connection and close it after a random moment, without reading the answer."""
        self.stats.requests[label] += 1
        self.stats.disconnects += 1
        raw = json.dumps(body).encode()
        try:
            reader, writer = await asyncio.open_connection(HOST, self.port)
            writer.write(self._encode(method, path, raw, {"content-type": "application/json", **headers}))
            await writer.drain()
            if random.random() < 0.5:
                await asyncio.sleep(random.uniform(0, 0.005))
            if random.random() < 0.5:  # sometimes wait for the stream to start (task_id sent), then vanish
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
            sock = writer.get_extra_info("socket")
            if sock is not None:  # an RST rather than a FIN: the rudest disconnect there is
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise Unexpected(f"connection: vanishing {label}: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Unexpected(what)


def ok(label: str, status: int, data: bytes, allowed: tuple[int, ...] = (200,)) -> Any:
    if status >= 500:
        raise Unexpected(f"5xx: {label} answered {status}: {data[:200]!r}")
    expect(status in allowed, f"shape: {label} answered {status}: {data[:200]!r}")
    return json.loads(data) if data else None


def sse(data: bytes) -> list[tuple[str, str]]:
    events = []
    for block in data.decode("utf-8").split("\r\n\r\n"):
        name, lines = None, []
        for line in block.split("\r\n"):
            key, _, value = line.partition(":")
            if key == "event":
                name = value.removeprefix(" ")
            elif key == "data":
                lines.append(value.removeprefix(" "))
        if name is not None:
            events.append((name, "\n".join(lines)))
    return events


# Episodes.


async def ors_episode(conn: Conn, disconnect: float, tasks: int) -> None:
    status, _, data = await conn.request("ors.create_session", "POST", "/create_session")
    sid = ok("create_session", status, data)["sid"]
    headers = {"x-session-id": sid}
    body = {"env_name": "math", "split": "train", "index": random.randrange(tasks)}
    status, _, data = await conn.request("ors.create", "POST", "/create", body, headers)
    expect(ok("create", status, data) == {"sid": sid}, f"shape: create answered {data[:200]!r}")
    try:
        status, _, data = await conn.request("ors.prompt", "GET", "/math/prompt", None, headers)
        blocks = ok("prompt", status, data)
        expect(isinstance(blocks, list) and blocks and blocks[0]["type"] == "text", f"shape: prompt {data[:200]!r}")
        call = {"name": "submit", "input": {"answer": str(random.randint(0, 30))}}
        call_headers = {**headers, "accept": "text/event-stream"}
        if random.random() < disconnect:
            await conn.send_and_vanish("ors.call", "POST", "/math/call", call, call_headers)
            # The call may or may not have run; a second one either runs or is refused as finished.
            allowed_reasons: tuple[Any, ...] = (True, "episode_finished")
        else:
            allowed_reasons = (True,)
        status, got, data = await conn.request("ors.call", "POST", "/math/call", call, call_headers)
        ok("call", status, b"", (200,))
        expect(got.get("content-type", "").startswith("text/event-stream"), f"shape: call content-type {got}")
        events = [e for e in sse(data) if e[0] != ""]
        names = [name for name, _ in events]
        expect(names[:1] == ["task_id"] and names[-1:] == ["end"], f"shape: call events {names}")
        result = json.loads("".join(value.lstrip() for name, value in events if name in ("chunk", "end")))
        outcome = True if result.get("ok") else result.get("reason")
        expect(outcome in allowed_reasons, f"shape: call result {result}")
        if result.get("ok"):
            expect(result["output"]["finished"] is True, f"shape: submit did not finish: {result}")
    finally:
        status, _, data = await conn.request("ors.delete", "POST", "/delete", None, headers)
        expect(ok("delete", status, data) == {"sid": sid}, f"shape: delete answered {data[:200]!r}")


async def mcp_episode(conn: Conn, disconnect: float) -> None:
    key = uuid.uuid4().hex
    client_info = {
        "name": "reward-kit",
        "version": "1.0.0",
        "_extra": {"session_id": key, "seed": random.randint(0, 9)},
    }
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info},
    }
    status, got, data = await conn.request("mcp.initialize", "POST", MCP_PATH, init, MCP_HEADERS)
    result = ok("initialize", status, data)["result"]
    expect("tools" in result["capabilities"], f"shape: initialize {result}")
    transport = got.get("mcp-session-id")
    expect(bool(transport), "shape: initialize without mcp-session-id")
    session_headers = {**MCP_HEADERS, "mcp-session-id": transport}
    control = {"mcp-session-id": key}
    try:
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        status, _, data = await conn.request("mcp.initialized", "POST", MCP_PATH, note, session_headers)
        ok("initialized", status, data, (202,))
        for move in range(MAX_MOVES):
            action = {"name": "lake_move", "arguments": {"action": random.choice(ACTIONS)}}
            call = {"jsonrpc": "2.0", "id": move + 1, "method": "tools/call", "params": action}
            if random.random() < disconnect:
                await conn.send_and_vanish("mcp.tools_call", "POST", MCP_PATH, call, session_headers)
                break  # the client gave up on this rollout; it still cleans up below
            status, _, data = await conn.request("mcp.tools_call", "POST", MCP_PATH, call, session_headers)
            answer = ok("tools/call", status, data)["result"]
            expect(not answer.get("isError"), f"shape: tools/call isError {answer}")
            observation = json.loads(answer["content"][0]["text"])
            expect({"position", "grid"} <= set(observation), f"shape: observation {observation}")
            status, _, data = await conn.request("ep.reward", "GET", "/frozen_lake/control/reward", None, control)
            reward = ok("reward", status, data)
            expect(reward["step_count"] == move + 1, f"shape: reward {reward} after {move + 1} moves")
            status, _, data = await conn.request("ep.status", "GET", "/frozen_lake/control/status", None, control)
            state = ok("status", status, data)
            expect({"terminated", "truncated", "step_count", "total_reward"} <= set(state), f"shape: status {state}")
            if state["terminated"]:
                break
    finally:
        status, _, data = await conn.request("mcp.delete", "DELETE", MCP_PATH, None, session_headers)
        ok("mcp DELETE", status, data, (200, 204))


async def client(port: int, stats: Stats, args: argparse.Namespace, stop_at: float, tasks: int) -> None:
    conn = Conn(port, stats, args.timeout)
    while time.monotonic() < stop_at:
        kind = random.choice(["ors", "mcp"])
        try:
            if kind == "ors":
                await ors_episode(conn, args.disconnect, tasks)
            else:
                await mcp_episode(conn, args.disconnect)
            stats.episodes[kind] += 1
        except Unexpected as exc:
            text = str(exc)
            stats.error(text.split(":", 1)[0], text)
            conn.close()
        except Exception as exc:  # a client bug or a response we could not even parse
            stats.error("shape", f"{kind}: {type(exc).__name__}: {exc}")
            conn.close()
    conn.close()


# The server process.


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def resources(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kib": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


async def live_sessions(port: int, stats: Stats) -> int:
    conn = Conn(port, stats, 10)
    status, _, data = await conn.request("metrics", "GET", "/metrics")
    conn.close()
    total = 0
    for line in data.decode().splitlines():
        if line.startswith("ors_live_sessions{"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


async def wait_until_serving(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited at start with status {process.returncode}")
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(f"GET /health HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n\r\n".encode())
            if b" 200 " in await reader.readline():
                writer.close()
                return
            writer.close()
        except OSError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit("the server did not start within 30 s")


def start_server(args: argparse.Namespace, port: int, log: Any) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--host", HOST, "--port", str(port)]
    command += ["--env", "math", "--env", "frozen_lake", "--log-level", "warning"]
    command += ["--session-timeout", str(args.session_timeout), "--max-sessions", str(max(1000, 4 * args.sessions))]
    environment = {key: value for key, value in os.environ.items() if key != "ORS_API_KEY"}
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)


def stop_server(process: subprocess.Popen[bytes], stats: Stats) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        stats.error("shutdown", "the server did not exit within 30 s of SIGTERM")


async def soak(args: argparse.Namespace, process: subprocess.Popen[bytes], port: int, stats: Stats) -> dict[str, Any]:
    from ors_server.environments.math import Math

    tasks = Math.num_tasks("train")
    await wait_until_serving(port, process)
    start = resources(process.pid)
    peak = dict(start)
    started = time.monotonic()
    stop_at = started + args.duration
    workers = [asyncio.create_task(client(port, stats, args, stop_at, tasks)) for _ in range(args.sessions)]
    while not all(w.done() for w in workers):
        await asyncio.wait(workers, timeout=1.0)
        now = resources(process.pid)
        peak = {key: max(peak[key], now[key]) for key in peak}
        if time.monotonic() > stop_at + 4 * args.timeout:
            stats.error("hang", "clients still busy long after the deadline")
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            break
    elapsed = time.monotonic() - started
    # Every client deleted its own sessions; an MCP DELETE ends its episode just after answering, so give
    # the server a bounded moment to settle before counting.
    leaked = await live_sessions(port, stats)
    settle_until = time.monotonic() + args.settle
    while leaked and time.monotonic() < settle_until:
        await asyncio.sleep(0.1)
        leaked = await live_sessions(port, stats)
    end = resources(process.pid)
    total = sum(stats.requests.values())
    return {
        "duration_s": round(elapsed, 1),
        "clients": args.sessions,
        "episodes": dict(stats.episodes),
        "requests": total,
        "requests_per_s": round(total / elapsed, 1),
        "requests_by_kind": dict(sorted(stats.requests.items())),
        "disconnects": stats.disconnects,
        "leaked_sessions": leaked,
        "server": {"start": start, "peak": peak, "end": end},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=50, help="concurrent clients (default 50)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds to run (default 60)")
    parser.add_argument("--disconnect", type=float, default=0.1, help="chance a call is abandoned (default 0.1)")
    parser.add_argument("--timeout", type=float, default=30.0, help="a request slower than this is a hang")
    parser.add_argument("--session-timeout", type=float, default=900.0, help="the server's idle timeout")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait for live sessions to reach 0")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("--server-log", type=Path, default=None, help="the server's output (default: discarded)")
    args = parser.parse_args(argv)
    random.seed(args.seed)
    port = args.port or free_port()
    stats = Stats()
    log_path = args.server_log or Path(tempfile.mkstemp(prefix="soak-server-", suffix=".log")[1])
    with open(log_path, "wb") as log:
        process = start_server(args, port, log)
        try:
            report = asyncio.run(soak(args, process, port, stats))
        finally:
            stop_server(process, stats)
    server_output = log_path.read_text(errors="replace")
    if not args.server_log:
        log_path.unlink()
    report["server_exit_status"] = process.returncode
    # Exceptions that escaped to uvicorn: each would have been a 500 had its client still been listening.
    report["server_unhandled_exceptions"] = server_output.count("Exception in ASGI application")
    report["errors"] = sum(stats.errors.values())
    report["errors_by_kind"] = dict(stats.errors)
    report["error_examples"] = stats.examples
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 1 if report["errors"] or report["leaked_sessions"] else 0


if __name__ == "__main__":
    sys.exit(main())
