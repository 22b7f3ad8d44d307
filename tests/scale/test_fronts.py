"""`serve --workers 2 --fronts 2`: two front processes share the port and follow the supervisor's worker table."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from ors_server.settings import Settings
from tests.faces.mcp_helpers import call, raw_initialize
from tests.scale.deployment import Deployment, deployment, journaled_sessions_with_naps
from tests.scale.test_workers import COUNTER, key, ors_session, sse_call

pytestmark = pytest.mark.anyio

NEW_CONNECTION = {"Connection": "close"}  # every request on a connection of its own: the kernel picks its front
GRACE = Settings().shutdown_grace
MARGIN = 10.0


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    path = tmp_path_factory.mktemp("fronts")
    with deployment(path, "--env", COUNTER, "--log-level", "warning", fronts=2) as running:
        yield running


def fresh(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=30, headers=NEW_CONNECTION)


async def answering_fronts(http: httpx.AsyncClient, requests: int = 40) -> dict[int, str]:
    """Front pid -> the /metrics text it answered with, over `requests` new connections."""
    seen: dict[int, str] = {}
    for _ in range(requests):
        metrics = (await http.get("/metrics")).text
        seen[int(re.search(r'ors_front_info\{front="\d+",pid="(\d+)"\} 1', metrics)[1])] = metrics  # type: ignore[index]
    return seen


def lost_count(metrics: str) -> int:
    found = re.search(r'ors_front_requests_total\{worker="-",outcome="lost"\} (\d+)', metrics)
    return int(found[1]) if found else 0


async def test_new_connections_land_on_both_fronts_and_each_aggregates_every_worker(fronts):
    pids = fronts.front_pids()
    assert sorted(pids) == [0, 1]
    async with fresh(fronts.url) as http:
        seen = await answering_fronts(http)
        assert set(seen) == set(pids.values()), seen.keys()
        for metrics in seen.values():
            assert 'ors_front_workers{state="live"} 2' in metrics
            assert 'worker="0"' in metrics and 'worker="1"' in metrics  # both workers' scrapes, at either front
        for _ in range(6):
            health = await http.get("/health")
            assert health.json() == {"status": "ok", "workers": {"0": "ok", "1": "ok"}}


async def test_sessions_made_on_one_connection_are_driven_from_whichever_front_accepts(fronts):
    async with httpx.AsyncClient(base_url=fronts.url, timeout=30) as one:
        sids = []
        while {fronts.holder(sid) for sid in sids} != {0, 1}:
            sids.append(await ors_session(one, start=100))
        episodes = {worker: f"ep-{uuid.uuid4().hex[:6]}" for worker in (0, 1)}
        transports = {}
        for worker, ep_id in episodes.items():
            opened = await raw_initialize(one, "/counter/mcp", {"session_id": ep_id, "seed": 2})
            assert opened.status_code == 200, opened.text
            transports[worker] = opened.headers["mcp-session-id"]
    async with fresh(fronts.url) as http:
        steps = 8
        for sid in sids:
            for _ in range(steps):
                assert (await sse_call(http, sid, "increment"))["ok"] is True
            assert (await http.post("/ping", headers=key(sid))).status_code == 200
        for transport in transports.values():
            for step in range(1, steps + 1):
                result = await call(http, "/counter/mcp", transport, "increment", {"by": 1})
                assert json.loads(result["content"][0]["text"]) == {"count": 20 + step}
        for sid in sids:  # every increment reached the one session, whichever front took its connection
            last = await sse_call(http, sid, "increment")
            assert json.loads(last["output"]["blocks"][0]["text"]) == {"count": 100 + steps + 1}
            assert (await http.post("/delete", headers=key(sid))).status_code == 200
            assert (await http.post("/ping", headers=key(sid))).status_code == 410
        for ep_id in episodes.values():
            status = await http.get("/counter/control/status", headers={"mcp-session-id": ep_id})
            assert status.status_code == 200 and status.json()["step_count"] == steps
        # The requests above were spread over both fronts by the kernel.
        served = [
            sum(int(n) for n in re.findall(r'ors_front_requests_total\{worker="\d",outcome="ok"\} (\d+)', text))
            for text in (await answering_fronts(http)).values()
        ]
        assert len(served) == 2 and all(count > 0 for count in served), served


async def test_a_front_that_dies_is_replaced_and_its_port_share_keeps_serving(fronts):
    before = fronts.front_pids()
    os.kill(before[0], signal.SIGKILL)
    with anyio.fail_after(30):
        while True:  # an external process gives no event to wait on: poll, bounded
            if (now := fronts.front_pids()).get(0) not in (None, before[0]):
                break
            await anyio.sleep(0.05)
    assert now[1] == before[1]
    async with fresh(fronts.url) as http:
        with anyio.fail_after(30):
            while set(await answering_fronts(http, 10)) != set(now.values()):
                pass
        sid = await ors_session(http)
        for _ in range(6):
            assert (await sse_call(http, sid, "increment"))["ok"] is True


async def test_sigkill_of_a_worker_makes_its_sessions_410_through_every_front(tmp_path):
    with deployment(tmp_path, "--env", COUNTER, "--log-level", "warning", fronts=2) as running:
        async with fresh(running.url) as http:
            sessions: dict[int, str] = {}
            while len(sessions) < 2:
                sid = await ors_session(http)
                sessions.setdefault(running.holder(sid), sid)  # type: ignore[arg-type]
            os.kill(running.worker_pids()[1], signal.SIGKILL)
            killed = time.monotonic()
            with anyio.fail_after(10):
                while True:
                    if (await http.post("/ping", headers=key(sessions[1]))).status_code == 410:
                        break
                    await anyio.sleep(0.01)
            print(f"first 410 after {time.monotonic() - killed:.3f} s")
            # From then on every front answers it 410, while the other worker's session goes on.
            for _ in range(20):
                assert (await http.post("/ping", headers=key(sessions[1]))).status_code == 410
                assert (await http.post("/ping", headers=key(sessions[0]))).status_code == 200
            print(f"20 more 410s through both fronts by {time.monotonic() - killed:.3f} s")
            lost = {pid: lost_count(text) for pid, text in (await answering_fronts(http)).items()}
            assert len(lost) == 2 and all(count > 0 for count in lost.values()), lost


def test_sigterm_drains_every_session_once_and_leaves_no_front_behind(tmp_path: Path):
    log = tmp_path / "teardowns.log"
    env = {"ORS_TEARDOWN_LOG": str(log)}
    journaled = "tests.reliability.reliability_envs:Journaled"
    with deployment(tmp_path, "--env", journaled, fronts=2, env=env) as running:
        front_pids = running.front_pids()
        with httpx.Client(base_url=running.url, timeout=30, headers=NEW_CONNECTION) as client:
            # A call in flight on each worker when the signal lands: relayed to its client while the workers drain.
            tags, in_flight, callers = journaled_sessions_with_naps(client, running)
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(timeout=GRACE + MARGIN)
        for caller in callers:
            caller.join(timeout=10)
    assert running.process.returncode == 0, running.log_tail()
    assert len(in_flight) == 2 and all(b"rested" in body for body in in_flight.values()), in_flight
    lines = log.read_text().splitlines()
    for tag in tags:
        assert lines.count(f"teardown {tag}") == 1, (tag, lines)
    for pid in front_pids.values():  # the supervisor waited for its fronts before it exited
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "2", "--fronts", "0"], "--fronts must be at least 1"),
        (["--fronts", "2"], "--fronts needs --workers N"),
        (["--ray", "--workers", "2", "--fronts", "2"], "--fronts needs --workers N (with --ray"),
    ],
)
def test_fronts_flag_is_validated(args, message):
    from ors_server.cli import main

    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["serve", "--env", COUNTER, *args])
