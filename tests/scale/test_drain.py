"""SIGTERM of a deployment: every worker drains, each session on either worker is torn down exactly once."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import httpx

from ors_server.settings import Settings
from tests.reliability.reliability_envs import mcp_open
from tests.scale.deployment import deployment, ids_on, owner

GRACE = Settings().shutdown_grace
MARGIN = 10.0


def test_sigterm_tears_every_session_on_every_worker_down_once_after_calls_in_flight_finish(tmp_path):
    log = tmp_path / "teardowns.log"
    env = {"ORS_TEARDOWN_LOG": str(log)}
    with deployment(tmp_path, "--env", "tests.reliability.reliability_envs:Journaled", env=env) as front:
        tags: list[str] = []
        with httpx.Client(base_url=front.url, timeout=30) as client:
            while {owner(t) for t in tags} != {0, 1} or len(tags) < 4:
                sid = client.post("/create_session").json()["sid"]
                created = client.post("/create", json={"task_spec": {"tag": sid}}, headers={"X-Session-ID": sid})
                assert created.status_code == 200, created.text
                tags.append(sid)
            for worker in (0, 1):
                tag = ids_on(worker, 1, f"mcp-{uuid.uuid4().hex[:6]}")[0]
                mcp_open(client, "/mcp/", {"session_id": tag, "config": {"task_spec": {"tag": tag}}})
                tags.append(tag)
            # One call in flight on each worker when the signal lands: they get the grace period to finish.
            in_flight: dict[str, bytes] = {}
            streaming = [threading.Event(), threading.Event()]
            callers = []
            for worker in (0, 1):
                sid = next(t for t in tags if owner(t) == worker)

                def call(sid: str = sid, started: threading.Event = streaming[worker]) -> None:
                    headers = {"X-Session-ID": sid, "Accept": "text/event-stream"}
                    with httpx.Client(base_url=front.url, timeout=30) as caller:
                        with caller.stream("POST", "/call", json={"name": "nap", "input": {}}, headers=headers) as r:
                            started.set()
                            in_flight[sid] = r.read()

                callers.append(threading.Thread(target=call))
                callers[-1].start()
            assert all(event.wait(10) for event in streaming)

        started = time.monotonic()
        front.process.send_signal(signal.SIGTERM)
        front.process.wait(timeout=GRACE + MARGIN)
        elapsed = time.monotonic() - started
        for caller in callers:
            caller.join(timeout=10)
    assert front.process.returncode in (0, -signal.SIGTERM), front.log_tail()
    assert elapsed < GRACE + MARGIN
    assert len(in_flight) == 2 and all(b"rested" in body for body in in_flight.values()), in_flight
    lines = log.read_text().splitlines()
    for tag in tags:
        assert lines.count(f"teardown {tag}") == 1, (tag, lines)
    for sid in in_flight:
        assert lines.index(f"nap-end {sid}") < lines.index(f"teardown {sid}"), lines
