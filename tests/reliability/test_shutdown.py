"""SIGTERM with live sessions: `ors-server serve` drains, tears every session down exactly once, and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

import httpx

from ors_server.settings import Settings
from tests.reliability.reliability_envs import mcp_open
from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parents[2]
GRACE = Settings().shutdown_grace
MARGIN = 5.0


def start_server(port: int, log: Path, output: IO[bytes]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "ORS_TEARDOWN_LOG": str(log),
    }
    env.pop("ORS_API_KEY", None)
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port)]
    command += ["--env", "tests.reliability.reliability_envs:Journaled", "--log-level", "warning"]
    return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)


def test_sigterm_with_live_sessions_tears_each_down_exactly_once_and_exits_within_the_grace_period(tmp_path):
    log = tmp_path / "teardowns.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    output = (tmp_path / "server.out").open("wb")
    process = start_server(port, log, output)
    try:
        wait_for_health(url, process)
        tags = [f"ors-{i}-{uuid.uuid4().hex[:8]}" for i in range(5)]
        with httpx.Client(base_url=url, timeout=10) as client:
            for tag in tags:
                created = client.post("/create", json={"task_spec": {"tag": tag}}, headers={"X-Session-ID": tag})
                assert created.status_code == 200, created.text
            for i in range(2):
                tag = f"mcp-{i}-{uuid.uuid4().hex[:8]}"
                mcp_open(client, "/mcp/", {"session_id": tag, "config": {"task_spec": {"tag": tag}}})
                tags.append(tag)
            # One call in flight when the signal lands: it has the grace period to finish.
            in_flight: dict[str, bytes] = {}
            streaming = threading.Event()

            def call() -> None:
                headers = {"X-Session-ID": tags[0], "Accept": "text/event-stream"}
                with httpx.Client(base_url=url, timeout=30) as caller:
                    with caller.stream("POST", "/call", json={"name": "nap", "input": {}}, headers=headers) as answer:
                        streaming.set()
                        try:
                            in_flight["body"] = answer.read()
                        except httpx.TransportError:
                            in_flight["body"] = b"<stream ended by the shutdown>"

            caller = threading.Thread(target=call)
            caller.start()
            assert streaming.wait(10)

        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=GRACE + MARGIN)
        elapsed = time.monotonic() - started
        caller.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()
    # uvicorn re-raises the signal once it has shut down, so the exit status is SIGTERM's.
    assert process.returncode in (0, -signal.SIGTERM), (tmp_path / "server.out").read_text()
    assert elapsed < GRACE + MARGIN
    assert in_flight, "the in-flight call never ended"
    lines = log.read_text().splitlines()
    for tag in tags:
        assert lines.count(f"teardown {tag}") == 1, (tag, lines)
    # The call in flight was drained (it finished) before its session was torn down.
    assert lines.index(f"nap-end {tags[0]}") < lines.index(f"teardown {tags[0]}"), lines
