"""Eval Protocol's control plane over real HTTP: the routes, their error shapes, resets and speed under load."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from tests.faces.mcp_helpers import Counter, Gate, Sleepy, call, mcp_client, raw_initialize, server, text

pytestmark = pytest.mark.anyio

ENDPOINTS = [("GET", "initial_state"), ("GET", "reward"), ("GET", "status"), ("GET", "info"), ("POST", "reset_session")]


@pytest.mark.parametrize("method,name", ENDPOINTS)
async def test_requests_without_the_header_are_a_400(method, name):
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            bare = await http.request(method, f"{base}/control/{name}", json={"seed": 1})
            prefixed = await http.request(method, f"{base}/counter/control/{name}", json={"seed": 1})
    assert bare.status_code == prefixed.status_code == 400
    assert bare.json() == prefixed.json() == {"error": "Missing mcp-session-id header"}


@pytest.mark.parametrize("name", ["reward", "status", "info"])
async def test_unknown_ids_are_a_404_naming_the_session(name):
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{base}/control/{name}", headers={"mcp-session-id": "nobody"})
    assert response.status_code == 404
    assert response.json() == {"error": "Session nobody not found"}


async def test_initial_state_creates_an_unknown_session_with_the_prompt_as_observation():
    header = {"mcp-session-id": "fresh"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            state = await http.get(f"{base}/control/initial_state", headers=header)
            reward = await http.get(f"{base}/control/reward", headers=header)
            status = await http.get(f"{base}/control/status", headers=header)
            info = await http.get(f"{base}/control/info", headers=header)
    assert state.status_code == 200
    assert state.json() == {"observation": "count from 0\nuse increment"}
    assert reward.json() == {"reward": 0.0, "step_count": 0}
    assert status.json() == {"terminated": False, "truncated": False, "step_count": 0, "total_reward": 0.0}
    assert info.json() == {}


async def test_counters_follow_calls_and_a_failed_call_zeroes_the_last_reward():
    header = {"mcp-session-id": "counting"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            sid = (await raw_initialize(http, f"{base}/mcp/", {"session_id": "counting"})).headers["mcp-session-id"]
            await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
            after_ok = (await http.get(f"{base}/control/reward", headers=header)).json()
            failed = await call(http, f"{base}/mcp/", sid, "explode")
            after_failure = (await http.get(f"{base}/control/reward", headers=header)).json()
            await call(http, f"{base}/mcp/", sid, "finish")
            status = (await http.get(f"{base}/control/status", headers=header)).json()
    assert after_ok == {"reward": 0.5, "step_count": 1}
    assert failed["isError"] is True
    assert after_failure == {"reward": 0.0, "step_count": 1}
    assert status == {"terminated": True, "truncated": False, "step_count": 2, "total_reward": 1.5}


async def test_reset_session_rebuilds_the_episode_with_the_new_seed_and_clears_counters():
    header = {"mcp-session-id": "resettable"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            opened = await raw_initialize(http, f"{base}/mcp/", {"session_id": "resettable", "seed": 2})
            sid = opened.headers["mcp-session-id"]
            first = await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
            await call(http, f"{base}/mcp/", sid, "finish")
            reset = await http.post(f"{base}/control/reset_session", headers=header, json={"seed": 3})
            status = (await http.get(f"{base}/control/status", headers=header)).json()
            second = await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
    assert json.loads(first["content"][0]["text"]) == {"count": 21}
    assert reset.status_code == 200 and reset.json() == {"message": "Session reset successfully"}
    assert status == {"terminated": False, "truncated": False, "step_count": 0, "total_reward": 0.0}
    assert json.loads(second["content"][0]["text"]) == {"count": 31}


async def test_reset_session_of_an_unknown_id_succeeds_and_creates_nothing():
    header = {"mcp-session-id": "ghost"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            reset = await http.post(f"{base}/control/reset_session", headers=header, json={"seed": None})
            reward = await http.get(f"{base}/control/reward", headers=header)
    assert reset.json() == {"message": "Session reset successfully"}
    assert reward.status_code == 404


@pytest.mark.parametrize("content", [b'{"seed": "42"}', b'{"seed": true}', b'{"seed": 1.5}', b"{oops", b"[1]"])
async def test_reset_session_with_a_bad_body_is_a_400(content):
    header = {"mcp-session-id": "any", "content-type": "application/json"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{base}/control/reset_session", headers=header, content=content)
    assert response.status_code == 400
    assert set(response.json()) == {"error"}


async def test_a_path_naming_another_environment_is_a_400():
    with server(Counter, Sleepy) as base:
        async with httpx.AsyncClient() as http:
            await http.get(f"{base}/control/initial_state", headers={"mcp-session-id": "c1"})
            response = await http.get(f"{base}/sleepy/control/status", headers={"mcp-session-id": "c1"})
    assert response.status_code == 400
    assert "counter" in response.json()["error"]


async def test_a_slow_tool_does_not_delay_control_requests():
    Gate.started.clear()
    Gate.release.clear()
    with server(Sleepy, Counter) as base:
        async with mcp_client(f"{base}/sleepy/mcp") as (slow, slow_ids), httpx.AsyncClient() as http:
            await http.get(f"{base}/counter/control/initial_state", headers={"mcp-session-id": "other"})
            results = []

            async def run_slow() -> None:
                results.append(await slow.call_tool("wait", {}))

            try:
                async with anyio.create_task_group() as task_group:
                    task_group.start_soon(run_slow)
                    with anyio.fail_after(5):
                        await anyio.to_thread.run_sync(Gate.started.wait, 5)
                    # Well under the 10 s the slow tool holds its session (EP allows 3 s per request).
                    with anyio.fail_after(5):
                        for key in ("other", slow_ids[0]):
                            for name in ("reward", "status", "info"):
                                response = await http.get(f"{base}/control/{name}", headers={"mcp-session-id": key})
                                assert response.status_code == 200
                    Gate.release.set()
            finally:
                Gate.release.set()
            after = await http.get(f"{base}/control/reward", headers={"mcp-session-id": slow_ids[0]})
    assert not results[0].is_error and text(results[0]) == "{}"
    assert after.json() == {"reward": 0.25, "step_count": 1}


async def test_control_requests_refresh_the_idle_timer():
    header = {"mcp-session-id": "kept"}
    with server(Counter, session_timeout=1.0) as base:
        async with httpx.AsyncClient() as http:
            await http.get(f"{base}/control/initial_state", headers=header)
            with anyio.fail_after(10):
                for _ in range(25):
                    response = await http.get(f"{base}/control/status", headers=header)
                    assert response.status_code == 200
                    await anyio.sleep(0.1)
