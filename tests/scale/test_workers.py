"""`ors-server serve --workers 2`: every face through the front, with sessions on both workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect as websockets_connect

from tests.faces.mcp_helpers import call, mcp_client, raw_initialize, text
from tests.reliability.reliability_envs import sse_events
from tests.scale.deployment import Deployment, deployment, minted_by

pytestmark = pytest.mark.anyio

COUNTER = "tests.faces.mcp_helpers:Counter"


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with deployment(tmp_path_factory.mktemp("front"), "--env", COUNTER, "--log-level", "warning") as running:
        yield running


async def ors_session(http: httpx.AsyncClient, start: int = 7) -> str:
    sid = (await http.post("/create_session")).json()["sid"]
    created = await http.post("/create", json={"env_name": "counter", "task_spec": {"start": start}}, headers=key(sid))
    assert created.status_code == 200, created.text
    return sid


def key(sid: str) -> dict[str, str]:
    return {"X-Session-ID": sid}


async def sse_call(http: httpx.AsyncClient, sid: str, name: str, arguments: dict | None = None) -> dict:
    headers = {**key(sid), "Accept": "text/event-stream"}
    answer = await http.post("/call", json={"name": name, "input": arguments or {}}, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    pieces = [data for event, data in sse_events(answer.content) if event in ("chunk", "end")]
    return json.loads("".join(pieces))


async def test_ors_sessions_are_placed_on_both_workers_and_each_plays_through_its_owner(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        sids = [await ors_session(http, start) for start in range(4)]
        assert {front.holder(sid) for sid in sids} == {0, 1}
        for start, sid in enumerate(sids):
            result = await sse_call(http, sid, "increment", {"by": 2})
            assert json.loads(result["output"]["blocks"][0]["text"]) == {"count": start + 2}
            assert (await http.post("/ping", headers=key(sid))).status_code == 200
            prompt = await http.get("/counter/prompt", headers=key(sid))
            assert prompt.json()[0]["text"] == f"count from {start + 2}"
        for sid in sids:
            assert (await http.post("/delete", headers=key(sid))).status_code == 200
            assert (await http.post("/ping", headers=key(sid))).status_code == 410  # deleted, as on one server


async def test_client_chosen_ors_ids_are_placed_on_both_workers_and_unknown_ids_answer_404(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        chosen = [f"chosen-{i}" for i in range(4)]
        for sid in chosen:
            body = {"env_name": "counter", "task_spec": {"start": 1}}
            assert (await http.post("/create", json=body, headers=key(sid))).status_code == 200
            result = await sse_call(http, sid, "increment")
            assert result["ok"] is True
        assert {front.holder(sid) for sid in chosen} == {0, 1}
        for sid in chosen:
            await http.post("/delete", headers=key(sid))
        for unknown in ("never-created-1", "never-created-2"):
            assert (await http.post("/ping", headers=key(unknown))).status_code == 404
            status = await http.get("/control/status", headers={"mcp-session-id": unknown})
            assert status.status_code == 404 and "error" in status.json()


async def test_mcp_clients_get_transport_ids_of_both_workers_and_play_through_the_front(front):
    seen = set()
    for _ in range(4):
        async with mcp_client(f"{front.url}/counter/mcp") as (session, transport_ids):
            listed = await session.list_tools()
            assert "increment" in {t.name for t in listed.tools}
            first = await session.call_tool("increment", {"by": 3})
            second = await session.call_tool("increment", {"by": 1})
            assert json.loads(text(first)) == {"count": 3} and json.loads(text(second)) == {"count": 4}
            seen.add(minted_by(transport_ids[0]))
    assert seen == {0, 1}


async def test_eval_protocol_sessions_on_both_workers_are_driven_over_mcp_and_the_control_plane(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        for worker in (0, 1):
            ep_id = f"rollout-{worker}"
            opened = await raw_initialize(http, "/counter/mcp", {"session_id": ep_id, "seed": 2})
            assert opened.status_code == 200, opened.text
            transport = opened.headers["mcp-session-id"]
            assert minted_by(transport) == front.holder(ep_id)  # the transport id names the worker of the episode
            state = await http.get("/counter/control/initial_state", headers={"mcp-session-id": ep_id})
            assert state.json() == {"observation": "count from 20\nuse increment"}
            result = await call(http, "/counter/mcp", transport, "increment", {"by": 5})
            assert json.loads(result["content"][0]["text"]) == {"count": 25}
            reward = await http.get("/counter/control/reward", headers={"mcp-session-id": ep_id})
            assert reward.json() == {"reward": 0.5, "step_count": 1}
            # The transport id names the episode too, on the control plane.
            status = await http.get("/counter/control/status", headers={"mcp-session-id": transport})
            assert status.status_code == 200 and status.json()["step_count"] == 1
            assert (await http.delete("/counter/mcp", headers={"mcp-session-id": transport})).status_code == 200


async def test_a_session_created_over_ors_is_driven_over_mcp_and_read_on_the_control_plane(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        sids = [await ors_session(http, start=10) for _ in range(2)]
        assert {front.holder(sid) for sid in sids} == {0, 1}
        for sid in sids:
            async with mcp_client(f"{front.url}/counter/mcp", headers=key(sid)) as (session, _):
                result = await session.call_tool("increment", {"by": 1})
            assert json.loads(text(result)) == {"count": 11}
            reward = await http.get("/control/reward", headers={"mcp-session-id": sid})
            assert reward.json() == {"reward": 0.5, "step_count": 1}
            after = await sse_call(http, sid, "finish")
            assert after["output"]["finished"] is True


async def test_discovery_health_and_metrics_answer_as_one_server(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        assert (await http.get("/list_environments")).json() == ["counter"]
        assert "increment" in {t["name"] for t in (await http.get("/counter/tools")).json()["tools"]}
        health = await http.get("/health")
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "workers": {"0": "ok", "1": "ok"}}
        sids = [await ors_session(http) for _ in range(2)]
        metrics = (await http.get("/metrics")).text
    for sid in sids:
        assert f'ors_live_sessions{{worker="{front.holder(sid)}",env="counter"}}' in metrics
    assert metrics.count("# TYPE ors_live_sessions gauge") == 1
    assert 'ors_front_workers{state="live"} 2' in metrics


async def test_the_front_keeps_the_host_header_so_the_mcp_rebinding_check_still_refuses_strangers(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        refused = await raw_initialize(http, "/counter/mcp", headers={"Host": "evil.example"})
        accepted = await raw_initialize(http, "/counter/mcp")
    assert refused.status_code == 421
    assert accepted.status_code == 200


async def test_the_front_bounds_request_headers_as_a_single_server_does(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        refused = await http.get("/counter/tools", headers={"X-Filler": "a" * (100 * 1024)})
        served = await http.get("/counter/tools", headers={"X-Filler": "a" * 1024})
    assert refused.status_code == 431
    assert "header" in refused.json()["detail"]
    assert served.status_code == 200


def test_the_cli_refuses_zero_workers(tmp_path: Path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ors_server.cli", "serve", "--workers", "0"], capture_output=True, timeout=60
    )
    assert done.returncode != 0 and b"--workers must be at least 1" in done.stderr


async def test_openenv_sockets_and_jsonrpc_sessions_live_on_both_workers_and_play_through_their_owner(front):
    ws_url = front.url.replace("http://", "ws://") + "/openenv/counter/ws"

    async def socket_session(sockets: AsyncExitStack, seed: int) -> tuple[str, int]:
        ws = await sockets.enter_async_context(websockets_connect(ws_url, open_timeout=30))
        await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
        await ws.recv()
        step = {"type": "call_tool", "tool_name": "increment", "arguments": {"by": 1}}
        await ws.send(json.dumps({"type": "step", "data": step}))
        count = json.loads(json.loads(await ws.recv())["data"]["observation"]["result"]["data"])["count"]
        await ws.send(json.dumps({"type": "state"}))
        sid = json.loads(await ws.recv())["data"]["episode_id"]
        return sid, count

    async with AsyncExitStack() as sockets:  # all open at once: each new one goes where there is most room
        played = [await socket_session(sockets, seed) for seed in range(4)]
    assert [count for _, count in played] == [seed * 10 + 1 for seed in range(4)]
    assert {minted_by(sid) for sid, _ in played} == {0, 1}

    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:

        async def rpc(method: str, **params: object) -> dict:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            answer = await http.post("/openenv/counter/mcp", json=body)
            assert answer.status_code == 200, answer.text
            return answer.json()

        created = [(await rpc("openenv/session/create"))["result"]["session_id"] for _ in range(4)]
        assert {minted_by(sid) for sid in created} == {0, 1}
        for sid in created:
            called = await rpc("tools/call", name="increment", arguments={"by": 3}, session_id=sid)
            assert json.loads(called["result"]["data"]) == {"count": 3}
            async with websockets_connect(f"{ws_url}?session_id={sid}", open_timeout=30) as ws:
                await ws.send(json.dumps({"type": "state"}))
                assert json.loads(await ws.recv())["data"] == {"episode_id": sid, "step_count": 1}
            closed = (await rpc("openenv/session/close", session_id=sid))["result"]
            # The worker may not have seen the socket go yet: then the session ends when it does.
            assert closed["closed"] is True or closed["closing"] is True
            with anyio.fail_after(10):
                while True:  # until the worker has ended it (nothing outside the worker can signal that)
                    if (await http.post("/ping", headers=key(sid))).status_code == 410:
                        break
                    await anyio.sleep(0.05)
