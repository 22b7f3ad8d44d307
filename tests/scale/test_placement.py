"""Placement by load through 2 fronts and 2 workers: every new session, whatever its id and face, goes to the
worker with the most room, and every later request for it reaches that worker through either front."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from hashlib import blake2b

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect as websockets_connect

from ors_server.ids import WorkerTag
from tests.faces.mcp_helpers import call, raw_initialize
from tests.scale.deployment import Deployment, deployment, live_sessions, minted_by
from tests.scale.test_workers import COUNTER, key, sse_call

pytestmark = pytest.mark.anyio

PER_WORKER = 6  # --max-sessions 12 over 2 workers


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    path = tmp_path_factory.mktemp("placement")
    args = ("--env", COUNTER, "--log-level", "warning", "--max-sessions", str(2 * PER_WORKER))
    with deployment(path, *args, fronts=2) as running:
        yield running


def hashing_to_worker_0(prefix: str, count: int) -> list[str]:
    """Client-chosen ids that the old rule (a blake2b hash of the id to one of 4,096 slots, slot mod 2) sent all
    to worker 0."""

    def old_slot(key: str) -> int:
        return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "big") % 4096

    return [f"{prefix}-{i}" for i in range(400) if old_slot(f"{prefix}-{i}") % 2 == 0][:count]


async def create(http: httpx.AsyncClient, sid: str, start: int = 0) -> httpx.Response:
    return await http.post("/create", json={"env_name": "counter", "task_spec": {"start": start}}, headers=key(sid))


@asynccontextmanager
async def direct(running: Deployment, worker: int) -> AsyncIterator[httpx.AsyncClient]:
    """A client of one worker's own socket, past the fronts (to load that worker behind their backs)."""
    transport = httpx.AsyncHTTPTransport(uds=running.worker_sockets()[worker])
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as http:
        yield http


@asynccontextmanager
async def one_per_front(running: Deployment) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two clients, each on one keep-alive connection, accepted by different fronts (the kernel picks the front
    of each new connection, so new ones are opened until both fronts have one; bounded)."""
    clients: dict[str, httpx.AsyncClient] = {}
    spare: list[httpx.AsyncClient] = []
    try:
        for _ in range(40):
            http = httpx.AsyncClient(base_url=running.url, timeout=30, limits=httpx.Limits(max_connections=1))
            front = (await http.get("/metrics")).text.split('ors_front_info{front="', 1)[1].split('"', 1)[0]
            (spare if front in clients else clients.__setitem__(front, http) or []).append(http)
            if len(clients) == 2:
                break
        assert len(clients) == 2, "the kernel never gave a connection to the second front"
        yield [clients[name] for name in sorted(clients)]
    finally:
        for http in [*clients.values(), *spare]:
            await http.aclose()


async def balanced(running: Deployment) -> dict[int, int]:
    async with httpx.AsyncClient(base_url=running.url, timeout=30) as http:
        counts = live_sessions((await http.get("/metrics")).text)
    return counts


async def test_four_client_chosen_ids_are_spread_two_and_two(placed):
    ids = hashing_to_worker_0(f"trainer-{uuid.uuid4().hex[:6]}", 4)
    assert await balanced(placed) in ({}, {0: 0, 1: 0})
    async with httpx.AsyncClient(base_url=placed.url, timeout=30, headers={"Connection": "close"}) as http:
        for start, sid in enumerate(ids):  # each on a new connection: both fronts place
            assert (await create(http, sid, start)).status_code == 200
        holders = Counter(placed.holder(sid) for sid in ids)
        assert holders == {0: 2, 1: 2}, holders
        for start, sid in enumerate(ids):  # every later request reaches the session, through either front
            result = await sse_call(http, sid, "increment", {"by": 1})
            assert json.loads(result["output"]["blocks"][0]["text"]) == {"count": start + 1}
        for sid in ids:
            assert (await http.post("/delete", headers=key(sid))).status_code == 200


async def test_eight_sessions_spread_four_and_four_and_a_busy_worker_gets_fewer(placed):
    async with httpx.AsyncClient(base_url=placed.url, timeout=30, headers={"Connection": "close"}) as http:
        even = hashing_to_worker_0(f"even-{uuid.uuid4().hex[:6]}", 8)
        for sid in even:
            assert (await create(http, sid)).status_code == 200
        assert Counter(placed.holder(sid) for sid in even) == {0: 4, 1: 4}
        for sid in even:
            await http.post("/delete", headers=key(sid))

        # Worker 0 is already busy: 4 sessions made on it directly, past both fronts.
        async with direct(placed, 0) as worker0:
            busy = [f"busy-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
            for sid in busy:
                assert (await create(worker0, sid)).status_code == 200
            uneven = hashing_to_worker_0(f"uneven-{uuid.uuid4().hex[:6]}", 8)
            for sid in uneven:
                assert (await create(http, sid)).status_code == 200
            holders = Counter(placed.holder(sid) for sid in uneven)
            assert holders == {0: 2, 1: 6}, holders  # even totals: 4 + 2 on worker 0, 6 on worker 1
            for sid in busy:
                await worker0.post("/delete", headers=key(sid))
        for sid in uneven:
            await http.post("/delete", headers=key(sid))


async def test_a_forged_worker_tag_pins_no_session_to_a_full_or_dead_worker(placed):
    """Issue 19 item 11: an id naming worker 0 (with a valid check) used to be sent there even when it was full."""
    async with direct(placed, 0) as worker0, httpx.AsyncClient(base_url=placed.url, timeout=30) as http:
        filler = [f"fill-{uuid.uuid4().hex[:6]}-{i}" for i in range(PER_WORKER)]
        for sid in filler:
            assert (await create(worker0, sid)).status_code == 200
        assert (await create(worker0, "one-too-many")).status_code == 503  # worker 0 is full
        current = WorkerTag(0, 1).tag(uuid.uuid4().hex)  # names the full worker (its first incarnation)
        dead = WorkerTag(0, 99).tag(uuid.uuid4().hex)  # names an incarnation that never lived
        for sid in (current, dead):
            created = await create(http, sid, start=5)
            assert created.status_code == 200, created.text
            assert placed.holder(sid) == 1
            assert (await http.post("/ping", headers=key(sid))).status_code == 200
        episode = WorkerTag(0, 1).tag("ep-row")  # the same through an Eval Protocol initialize
        opened = await raw_initialize(http, "/counter/mcp", {"session_id": episode, "seed": 1})
        assert opened.status_code == 200, opened.text
        assert placed.holder(episode) == 1 and minted_by(opened.headers["mcp-session-id"]) == 1
        for sid in (current, dead, episode):
            await http.post("/delete", headers=key(sid))
        for sid in filler:
            await worker0.post("/delete", headers=key(sid))


async def test_a_session_created_through_one_front_is_driven_through_the_other_on_every_face(placed):
    ws_base = placed.url.replace("http://", "ws://") + "/openenv/counter/ws"
    async with one_per_front(placed) as (a, b):
        # ORS /create with a client-chosen id.
        sid = f"ors-{uuid.uuid4().hex[:8]}"
        assert (await create(a, sid, start=40)).status_code == 200
        result = await sse_call(b, sid, "increment", {"by": 2})
        assert json.loads(result["output"]["blocks"][0]["text"]) == {"count": 42}
        assert (await b.get("/counter/prompt", headers=key(sid))).json()[0]["text"] == "count from 42"

        # MCP initialize with X-Session-ID (creating the session), then the transport driven through B.
        named = f"mcp-{uuid.uuid4().hex[:8]}"
        opened = await raw_initialize(a, "/counter/mcp", headers=key(named))
        assert opened.status_code == 200, opened.text
        transport = opened.headers["mcp-session-id"]
        assert json.loads((await call(b, "/counter/mcp", transport, "increment", {"by": 3}))["content"][0]["text"]) == {
            "count": 3
        }
        assert (await b.get("/control/reward", headers={"mcp-session-id": named})).json()["step_count"] == 1

        # Eval Protocol: initialize with `_extra.session_id` through A; control plane and MCP through B.
        row = f"row-{uuid.uuid4().hex[:8]}"
        opened = await raw_initialize(a, "/counter/mcp", {"session_id": row, "seed": 3})
        assert opened.status_code == 200, opened.text
        state = await b.get("/counter/control/initial_state", headers={"mcp-session-id": row})
        assert state.json() == {"observation": "count from 30\nuse increment"}
        step = await call(b, "/counter/mcp", opened.headers["mcp-session-id"], "increment", {"by": 1})
        assert json.loads(step["content"][0]["text"]) == {"count": 31}
        assert (await b.get("/counter/control/status", headers={"mcp-session-id": row})).json()["step_count"] == 1

        # The control plane's initial_state opens an unknown id through A; MCP attaches to it through B.
        opened_by_control = f"ctl-{uuid.uuid4().hex[:8]}"
        state = await a.get("/counter/control/initial_state", headers={"mcp-session-id": opened_by_control})
        assert state.status_code == 200, state.text
        attached = await raw_initialize(b, "/counter/mcp", {"session_id": opened_by_control})
        assert attached.status_code == 200, attached.text
        await call(b, "/counter/mcp", attached.headers["mcp-session-id"], "increment", {"by": 1})
        status = await a.get("/counter/control/status", headers={"mcp-session-id": opened_by_control})
        assert status.json()["step_count"] == 1  # one episode, not one per front

        # OpenEnv: openenv/session/create through A; tools/call and a socket attached through B.
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        made = (await a.post("/openenv/counter/mcp", json=rpc)).json()["result"]["session_id"]
        rpc = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        rpc["params"] = {"name": "increment", "arguments": {"by": 4}, "session_id": made}
        assert json.loads((await b.post("/openenv/counter/mcp", json=rpc)).json()["result"]["data"]) == {"count": 4}
        # A socket opens its own session (through whichever front); ORS reaches it through B.
        async with websockets_connect(ws_base, open_timeout=30) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            await ws.recv()
            await ws.send(json.dumps({"type": "state"}))
            socket_sid = json.loads(await ws.recv())["data"]["episode_id"]
            assert (await b.post("/ping", headers=key(socket_sid))).status_code == 200
            assert (await a.post("/ping", headers=key(socket_sid))).status_code == 200

        every = [sid, named, row, opened_by_control, made]
        assert all(placed.holder(s) is not None for s in every)
        for s in every:
            await b.post("/delete", headers=key(s))
        # Unknown ids get their owner's 404, through either front, on ORS and on the control plane.
        for http in (a, b):
            assert (await http.post("/ping", headers=key(f"never-{uuid.uuid4().hex}"))).status_code == 404
            status = await http.get("/control/status", headers={"mcp-session-id": f"never-{uuid.uuid4().hex}"})
            assert status.status_code == 404 and "error" in status.json()
        # A deleted session answers 410 from the worker that held it, through either front.
        assert (await a.post("/ping", headers=key(sid))).status_code == 410
        assert (await b.post("/ping", headers=key(sid))).status_code == 410


async def test_clients_cannot_reach_the_workers_lookup_through_a_front(placed):
    async with httpx.AsyncClient(base_url=placed.url, timeout=30) as http:
        answer = await http.get("/_ors/lookup", headers={"x-ors-lookup": "anything"})
        created = await create(http, f"load-{uuid.uuid4().hex[:6]}")
    assert answer.status_code == 404
    assert "x-ors-load" not in created.headers  # the workers' load reports stay between worker and front


async def test_after_sigkill_of_a_worker_twenty_new_client_chosen_sessions_all_succeed(placed):
    async with one_per_front(placed) as (a, b):
        held = {}
        while set(held) != {0, 1}:  # a session on each worker, made through front A
            sid = f"before-{uuid.uuid4().hex[:8]}"
            assert (await create(a, sid)).status_code == 200
            held.setdefault(placed.holder(sid), sid)
        os.kill(placed.worker_pids()[1], signal.SIGKILL)
        fresh = hashing_to_worker_0(f"after-{uuid.uuid4().hex[:6]}", 10)
        fresh += [f"after-{uuid.uuid4().hex[:6]}-{i}" for i in range(10)]  # and ids of no particular slot
        for index, sid in enumerate(fresh):  # episodes one after another, each ended (the cap is 6 a worker)
            created = await create(a if index % 2 else b, sid)
            assert created.status_code == 200, (sid, created.text)
            assert (await sse_call(b if index % 2 else a, sid, "increment"))["ok"] is True
            assert (await a.post("/delete", headers=key(sid))).status_code == 200
        # The dead worker's session is lost through the front that placed it; the other one goes on.
        assert (await a.post("/ping", headers=key(held[1]))).status_code == 410
        assert (await b.post("/ping", headers=key(held[0]))).status_code == 200
        # The restarted worker takes new sessions.
        with anyio.fail_after(60):
            while True:  # an external process gives no event to wait on: poll, bounded
                if (await a.get("/health")).json()["workers"] == {"0": "ok", "1": "ok"}:
                    break
                await anyio.sleep(0.1)
        later = [f"later-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
        for sid in later:
            assert (await create(a, sid)).status_code == 200
        assert 1 in {placed.holder(sid) for sid in later}
        for sid in [*later, held[0]]:
            await a.post("/delete", headers=key(sid))
