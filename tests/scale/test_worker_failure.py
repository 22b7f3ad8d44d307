"""A worker killed mid-episode: its sessions fail fast and cleanly, the others go on, new sessions succeed."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from tests.faces.mcp_helpers import raw_initialize
from tests.scale.deployment import Deployment, deployment
from tests.scale.test_workers import COUNTER, key, ors_session, sse_call

pytestmark = pytest.mark.anyio


@pytest.fixture
def front(tmp_path) -> Iterator[Deployment]:
    with deployment(tmp_path, "--env", COUNTER, "--log-level", "warning") as running:
        yield running


async def sessions_on_both(http: httpx.AsyncClient, front: Deployment) -> dict[int, str]:
    by_worker: dict[int, str] = {}
    while len(by_worker) < 2:
        sid = await ors_session(http)
        by_worker.setdefault(front.holder(sid), sid)  # type: ignore[arg-type]
    return by_worker


async def test_sigkill_of_one_worker_loses_only_its_sessions_and_new_ones_go_to_live_workers(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        ors = await sessions_on_both(http, front)
        rollouts: dict[int, str] = {}
        while len(rollouts) < 2:
            ep_id = f"ep-{len(rollouts)}-{time.monotonic_ns()}"
            assert (await raw_initialize(http, "/counter/mcp", {"session_id": ep_id})).status_code == 200
            rollouts.setdefault(front.holder(ep_id), ep_id)  # type: ignore[arg-type]
        for sid in ors.values():
            await sse_call(http, sid, "increment")

        pids = front.worker_pids()
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        # Its ORS session answers 410 (the id names a worker that is gone), without waiting on any timeout.
        with anyio.fail_after(10):
            while True:
                if (await http.post("/ping", headers=key(ors[1]))).status_code == 410:
                    break
                await anyio.sleep(0.01)
        print(f"410 after {time.monotonic() - killed:.3f} s")
        # Its Eval Protocol session (a client-chosen id the front placed there) is lost too.
        lost = await http.get("/counter/control/status", headers={"mcp-session-id": rollouts[1]})
        assert lost.status_code == 410 and "error" in lost.json()

        # The other worker's sessions go on.
        result = await sse_call(http, ors[0], "increment")
        assert json.loads(result["output"]["blocks"][0]["text"]) == {"count": 9}
        status = await http.get("/counter/control/status", headers={"mcp-session-id": rollouts[0]})
        assert status.status_code == 200

        # New sessions succeed at once (on the live worker), and the restarted worker takes new ones.
        fresh = await ors_session(http)
        assert (await sse_call(http, fresh, "increment"))["ok"] is True
        with anyio.fail_after(60):
            while True:
                if (await http.get("/health")).json()["workers"] == {"0": "ok", "1": "ok"}:
                    break
                await anyio.sleep(0.1)
        placed = [front.holder(await ors_session(http)) for _ in range(4)]
        assert placed.count(1) >= 2, placed  # the restarted worker, empty, takes most of them
        assert front.worker_pids()[1] != pids[1]
        # The old incarnation's ids stay lost; they never reach the new worker.
        assert (await http.post("/ping", headers=key(ors[1]))).status_code == 410
        reborn = await http.get("/counter/control/status", headers={"mcp-session-id": rollouts[1]})
        assert reborn.status_code == 410
