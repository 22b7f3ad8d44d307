"""SIGTERM of a deployment: every worker drains, each session on either worker is torn down exactly once."""

from __future__ import annotations

import signal
import time

import httpx

from ors_server.settings import Settings
from tests.scale.deployment import deployment, journaled_sessions_with_naps

GRACE = Settings().shutdown_grace
MARGIN = 10.0


def test_sigterm_tears_every_session_on_every_worker_down_once_after_calls_in_flight_finish(tmp_path):
    log = tmp_path / "teardowns.log"
    env = {"ORS_TEARDOWN_LOG": str(log)}
    with deployment(tmp_path, "--env", "tests.reliability.reliability_envs:Journaled", env=env) as front:
        with httpx.Client(base_url=front.url, timeout=30) as client:
            # One call in flight on each worker when the signal lands: they get the grace period to finish.
            tags, in_flight, callers = journaled_sessions_with_naps(client, front)

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
