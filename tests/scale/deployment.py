"""`ors-server serve --workers N` as a subprocess for the tests, and ways to find and kill its workers."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from ors_server.http.lookup import LOOKUP_PATH
from ors_server.ids import split
from tests.reliability.reliability_envs import mcp_open
from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parents[2]
LOOKUP_HEADER = "x-ors-lookup"
START_TIMEOUT = 180.0
STOP_TIMEOUT = 60.0


@dataclass
class Deployment:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def worker_pids(self) -> dict[int, int]:
        """Worker slot -> pid of the live worker processes (read from /proc: their spec names their tag)."""
        return {
            int(re.match(r"w(\d+)", spec["settings"]["worker_tag"])[1]): pid  # type: ignore[index]
            for pid, spec in self._child_specs("ORS_WORKER_SPEC")
        }

    def front_pids(self) -> dict[int, int]:
        """Front index -> pid of the front processes of a `--fronts M` deployment (their spec names their index)."""
        return {spec["index"]: pid for pid, spec in self._child_specs("ORS_FRONT_SPEC")}

    def _child_specs(self, variable: str) -> Iterator[tuple[int, dict]]:
        """(pid, spec) of each child process whose environment carries the JSON spec `variable`."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        for child in children:
            try:
                environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            except OSError:
                continue  # it has just exited
            for entry in environ:
                if entry.startswith(variable.encode() + b"="):
                    yield int(child), json.loads(entry.split(b"=", 1)[1])

    def worker_sockets(self) -> dict[int, str]:
        """Worker slot -> the Unix socket the live worker serves on."""
        return {
            int(re.match(r"w(\d+)", spec["settings"]["worker_tag"])[1]): spec["uds"]  # type: ignore[index]
            for _, spec in self._child_specs("ORS_WORKER_SPEC")
        }

    def holder(self, session_id: str, api_key: str | None = None) -> int | None:
        """The worker slot that holds `session_id` live, asked of every worker directly (as a front does)."""
        headers = {LOOKUP_HEADER: session_id, **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        for index, uds in sorted(self.worker_sockets().items()):
            transport = httpx.HTTPTransport(uds=uds)
            with httpx.Client(transport=transport, base_url="http://localhost", timeout=10) as direct:
                if direct.get(LOOKUP_PATH, headers=headers).json()["held"] == "live":
                    return index
        return None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def minted_by(session_id: str) -> int:
    """The worker slot a minted id (MCP transport id, OpenEnv session id) names: where it was created."""
    tagged = split(session_id)
    assert tagged is not None, f"{session_id!r} names no worker"
    return tagged[0].index


def live_sessions(metrics: str) -> dict[int, int]:
    """Worker slot -> its live sessions (every environment), from the front's merged `/metrics`."""
    counts: dict[int, int] = {}
    for worker, value in re.findall(r'ors_live_sessions\{worker="(\d+)",env="[^"]*"\} ([0-9.]+)', metrics):
        counts[int(worker)] = counts.get(int(worker), 0) + int(float(value))
    return counts


@contextlib.contextmanager
def deployment(
    tmp_path: Path, *args: str, workers: int = 2, fronts: int = 1, env: dict[str, str] | None = None
) -> Iterator[Deployment]:
    """`ors-server serve --workers N --fronts M *args` on a free port until the block ends; then SIGTERM, bounded."""
    port = free_port()
    log = tmp_path / f"front-{port}.log"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    environment.pop("ORS_API_KEY", None)
    environment.update(env or {})
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--workers", str(workers)]
    command += ["--fronts", str(fronts)] if fronts != 1 else []
    output: IO[bytes] = log.open("wb")
    process = subprocess.Popen([*command, *args], env=environment, stdout=output, stderr=subprocess.STDOUT)
    running = Deployment(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_healthy(running)
        yield running
    finally:
        stop(process)
        output.close()


def wait_healthy(running: Deployment, within: float = START_TIMEOUT) -> None:
    wait_for_health(running.url, running.process, within=within, what="the deployment", log=running.log)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)
            raise AssertionError("the deployment ignored SIGTERM") from None


def journaled_sessions_with_naps(client: httpx.Client, running: Deployment) -> tuple[list[str], dict[str, bytes], list]:
    """At least four ORS sessions and one MCP session per worker of a 2-worker `Journaled` deployment, and a slow
    `nap` call streaming on one session of each worker. Returns the session tags, the dict each call's body lands
    in when it ends, and the callers' threads."""
    url = running.url
    tags: list[str] = []
    for _ in range(4):  # placed by load: two on each worker
        sid = client.post("/create_session").json()["sid"]
        created = client.post("/create", json={"task_spec": {"tag": sid}}, headers={"X-Session-ID": sid})
        assert created.status_code == 200, created.text
        tags.append(sid)
    for _ in (0, 1):
        tag = f"mcp-{uuid.uuid4().hex[:6]}"
        mcp_open(client, "/mcp/", {"session_id": tag, "config": {"task_spec": {"tag": tag}}})
        tags.append(tag)
    holders = {tag: running.holder(tag) for tag in tags}
    assert set(holders.values()) == {0, 1}, holders
    in_flight: dict[str, bytes] = {}
    streaming = [threading.Event(), threading.Event()]
    callers = []
    for worker in (0, 1):
        sid = next(t for t in tags[:4] if holders[t] == worker)

        def nap(sid: str = sid, started: threading.Event = streaming[worker]) -> None:
            headers = {"X-Session-ID": sid, "Accept": "text/event-stream"}
            with httpx.Client(base_url=url, timeout=30) as caller:
                with caller.stream("POST", "/call", json={"name": "nap", "input": {}}, headers=headers) as r:
                    started.set()
                    in_flight[sid] = r.read()

        callers.append(threading.Thread(target=nap))
        callers[-1].start()
    assert all(event.wait(10) for event in streaming)
    return tags, in_flight, callers
