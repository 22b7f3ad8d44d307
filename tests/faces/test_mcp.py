"""The MCP face over real HTTP: tool lists, the call pipeline, isError results, binding and the wire limits."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ors_server.environments.frozen_lake import FrozenLake
from ors_server.environments.math import Math
from tests.faces.mcp_helpers import (
    ACCEPT,
    Counter,
    call,
    mcp_client,
    mcp_http_client,
    raw_initialize,
    rpc,
    server,
    text,
)
from tests.ors_envs import count, gate, live_server, math_task, new_tag
from tests.reliability.reliability_envs import ACCEPT_MCP, mcp_open

pytestmark = pytest.mark.anyio

MATH_TASK = Math.get_task("train", 0)


def math_server():
    return server(Math, Counter)


async def test_client_session_lists_tools_and_completes_a_math_episode():
    with math_server() as base:
        async with mcp_client(f"{base}/math/mcp") as (session, transport_ids):
            tools = (await session.list_tools()).tools
            assert [t.name for t in tools] == ["submit"]
            assert {"type": "string"} in tools[0].input_schema["properties"]["answer"]["anyOf"]
            assert tools[0].description
            result = await session.call_tool("submit", {"answer": str(MATH_TASK["answer"])})
            assert not result.is_error
            assert text(result) == "Correct!"
            # The reward where MCP clients look for it; the text stays what Eval Protocol's clients parse.
            assert result.structured_content == {"reward": 1.0, "finished": True}
            assert tools[0].output_schema is not None and tools[0].output_schema["required"] == ["reward", "finished"]
            async with httpx.AsyncClient() as http:
                headers = {"mcp-session-id": transport_ids[0]}
                status = (await http.get(f"{base}/math/control/status", headers=headers)).json()
                reward = (await http.get(f"{base}/math/control/reward", headers=headers)).json()
    assert status == {"terminated": True, "truncated": False, "step_count": 1, "total_reward": 1.0}
    assert reward == {"reward": 1.0, "step_count": 1}


async def test_legacy_high_level_client_uses_the_handshake_and_keeps_its_episode():
    with math_server() as base:
        async with Client(f"{base}/mcp/", mode="legacy") as client:
            assert client.session.protocol_version == "2025-11-25"
            assert [t.name for t in (await client.list_tools()).tools] == ["submit"]
            first = await client.call_tool("submit", {"answer": str(MATH_TASK["answer"])})
            again = await client.call_tool("submit", {"answer": "0"})
    assert text(first) == "Correct!" and not first.is_error
    # The second call reached the same, now finished, episode: state survived between calls.
    assert again.is_error and "finished" in text(again)


async def test_tool_without_arguments_lists_an_empty_object_schema():
    with server(Counter) as base:
        async with mcp_client(f"{base}/counter/mcp/") as (session, _):
            tools = {t.name: t for t in (await session.list_tools()).tools}
    assert tools["finish"].input_schema == {"type": "object", "properties": {}}
    assert tools["increment"].input_schema["properties"]["by"]["type"] == "integer"


async def test_failures_come_back_as_is_error_results():
    with server(Counter) as base:
        async with mcp_client(f"{base}/mcp") as (session, _):
            unknown = await session.call_tool("fly", {})
            invalid = await session.call_tool("increment", {"by": "lots"})
            raised = await session.call_tool("explode", {})
            ok = await session.call_tool("increment", {"by": 2})
            await session.call_tool("finish", {})
            late = await session.call_tool("increment", {"by": 1})
    assert unknown.is_error and "'fly' is not a valid tool" in text(unknown)
    assert invalid.is_error and "validation" in text(invalid)
    assert raised.is_error and "kaboom at 0" in text(raised) and "Traceback" not in text(raised)
    assert not ok.is_error and json.loads(text(ok)) == {"count": 2}
    assert late.is_error and "finished" in text(late)


async def test_image_blocks_become_image_content():
    with server(Counter) as base:
        async with mcp_client(f"{base}/mcp") as (session, _):
            result = await session.call_tool("picture", {})
    assert [c.type for c in result.content] == ["text", "image"]
    assert result.content[1].mime_type == "image/png" and result.content[1].data == "iVBORw0KGgo="


async def test_trailing_slash_paths_are_served_without_redirect():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            for path in ("/mcp", "/mcp/", "/counter/mcp", "/counter/mcp/"):
                response = await raw_initialize(http, f"{base}{path}")
                assert response.status_code == 200, path
                assert response.json()["result"]["capabilities"]["tools"] is not None


async def test_raw_initialize_with_extra_binds_the_store_key_and_seeds_the_task():
    extra = {"session_id": "ep-row-1", "seed": 4, "config": {"offset": 3}, "dataset_row_id": "r", "model_id": "m"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            response = await raw_initialize(http, f"{base}/mcp/", extra)
            sid = response.headers["mcp-session-id"]
            assert sid != "ep-row-1"
            result = await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
            assert json.loads(result["content"][0]["text"]) == {"count": 44}
            # The control plane knows the episode by the EP id (and by the transport id).
            by_key = await http.get(f"{base}/control/reward", headers={"mcp-session-id": "ep-row-1"})
            by_transport = await http.get(f"{base}/control/reward", headers={"mcp-session-id": sid})
    assert by_key.json() == by_transport.json() == {"reward": 0.5, "step_count": 1}


async def test_reinitializing_a_stepped_episode_starts_an_identical_fresh_one():
    extra = {"session_id": "ep-lake", "seed": 42, "config": {"game": "FrozenLake", "map_name": "4x4"}}
    header = {"mcp-session-id": "ep-lake"}
    with server(FrozenLake) as base:
        async with httpx.AsyncClient() as http:
            first = await raw_initialize(http, f"{base}/mcp/", extra)
            start = (await http.get(f"{base}/control/initial_state", headers=header)).json()
            moved = await call(http, f"{base}/mcp/", first.headers["mcp-session-id"], "lake_move", {"action": "right"})
            assert json.loads(moved["content"][0]["text"])["position"] == 1
            # The rollout ends without reset_session and without DELETE; the same row runs again.
            second = await raw_initialize(http, f"{base}/mcp/", extra)
            again = (await http.get(f"{base}/control/initial_state", headers=header)).json()
            status = (await http.get(f"{base}/control/status", headers=header)).json()
            moved = await call(http, f"{base}/mcp/", second.headers["mcp-session-id"], "lake_move", {"action": "down"})
    assert start == again and start["position"] == 0
    assert start["grid"] == "xFHF\nFHFF\nFFFH\nFHFG"
    assert status == {"terminated": False, "truncated": False, "step_count": 0, "total_reward": 0.0}
    assert json.loads(moved["content"][0]["text"])["position"] == 4


async def test_reset_then_delete_then_reinitialize_runs_the_row_again():
    extra = {"session_id": "ep-again", "seed": 1}
    header = {"mcp-session-id": "ep-again"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            for _ in range(2):
                opened = await raw_initialize(http, f"{base}/mcp/", extra)
                sid = opened.headers["mcp-session-id"]
                result = await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
                assert json.loads(result["content"][0]["text"]) == {"count": 11}
                reset = await http.post(f"{base}/control/reset_session", headers=header, json={"seed": 1})
                assert reset.json() == {"message": "Session reset successfully"}
                closed = await http.delete(f"{base}/mcp/", headers={"mcp-session-id": sid})
                assert closed.status_code == 200
            # The MCP-created episode ended with its last transport.
            gone = await http.get(f"{base}/control/reward", headers=header)
    assert gone.status_code == 404


async def test_sessions_without_a_key_are_keyed_by_the_transport_id():
    with server(Counter) as base:
        async with mcp_client(f"{base}/mcp") as (one, ids_one), mcp_client(f"{base}/mcp") as (two, ids_two):
            await one.call_tool("increment", {"by": 5})
            result = await two.call_tool("increment", {"by": 1})
            assert json.loads(text(result)) == {"count": 1}
            async with httpx.AsyncClient() as http:
                ping = await http.post(f"{base}/ping", headers={"X-Session-ID": ids_one[0]})
        assert ping.status_code == 200


async def test_auto_client_discovers_and_adopts_the_2026_era_without_a_handshake():
    methods: list[str] = []

    async def record(request):
        if request.method == "POST":
            methods.append(json.loads(request.content).get("method"))

    http = mcp_http_client()
    http.event_hooks["request"].append(record)
    with server(Counter) as base:
        async with httpx.AsyncClient() as plain:
            sid = (await raw_initialize(plain, f"{base}/mcp", {"session_id": "auto"})).headers["mcp-session-id"]
        episode = streamable_http_client(f"{base}/mcp/episodes/auto", http_client=http)
        async with http, Client(episode) as client:
            assert client.session.protocol_version == "2026-07-28"
            await client.call_tool("increment", {"by": 3})
            result = await client.call_tool("increment", {"by": 1})
    assert sid and methods[0] == "server/discover" and "initialize" not in methods
    assert json.loads(text(result)) == {"count": 4}


async def test_sessionless_2026_client_drives_the_session_its_header_names():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            await raw_initialize(http, f"{base}/mcp", {"session_id": "named"})
        named = mcp_http_client(headers={"X-Session-ID": "named"})
        transport = streamable_http_client(f"{base}/mcp", http_client=named)
        async with named, Client(transport, mode="2026-07-28") as client:
            await client.call_tool("increment", {"by": 3})
            result = await client.call_tool("increment", {"by": 1})
        async with Client(f"{base}/mcp", mode="2026-07-28") as client:
            with pytest.raises(MCPError) as anonymous:
                await client.call_tool("increment", {"by": 1})
    assert json.loads(text(result)) == {"count": 4}
    assert "/mcp/episodes/<session_id>" in anonymous.value.error.message
    assert "X-Session-ID" in anonymous.value.error.message


async def test_unknown_environment_answers_a_json_rpc_404():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            response = await raw_initialize(http, f"{base}/nope/mcp")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "unknown environment 'nope'"


async def test_a_full_store_answers_503_with_retry_after():
    with server(Counter, max_sessions=1) as base:
        async with httpx.AsyncClient() as http:
            assert (await raw_initialize(http, f"{base}/mcp", {"session_id": "a"})).status_code == 200
            keyed = await raw_initialize(http, f"{base}/mcp", {"session_id": "b"})
            unkeyed = await raw_initialize(http, f"{base}/mcp")
    for response in (keyed, unkeyed):
        assert response.status_code == 503
        assert response.headers["retry-after"]
        assert response.json()["jsonrpc"] == "2.0" and response.json()["id"] == 0
        assert "limit" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00garbage", b"[]", b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":7}'],
)
async def test_garbage_bodies_get_a_4xx_json_rpc_error(content):
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{base}/mcp", content=content, headers=ACCEPT)
    assert 400 <= response.status_code < 500
    assert "error" in response.json()


async def test_bad_seed_in_extra_is_a_400():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            response = await raw_initialize(http, f"{base}/mcp", {"session_id": "x", "seed": "forty-two"})
    assert response.status_code == 400
    assert "seed" in response.json()["error"]["message"]


async def test_foreign_host_is_refused_but_loopback_names_are_accepted():
    with server(Counter) as base:
        port = base.rsplit(":", 1)[1]
        async with httpx.AsyncClient() as http:
            evil = await raw_initialize(http, f"{base}/mcp", headers={"host": "evil.example"})
            local = await raw_initialize(http, f"{base}/mcp", headers={"host": f"localhost:{port}"})
    assert evil.status_code == 421 and evil.json()["error"]["message"].startswith("Invalid Host header")
    assert local.status_code == 200


async def test_oversized_body_is_a_413_json_rpc_error():
    with server(Counter, max_body_bytes=1024) as base:
        async with httpx.AsyncClient() as http:
            big = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"pad": "x" * 4096}}
            fresh = await http.post(f"{base}/mcp", json=big, headers=ACCEPT)
            sid = (await raw_initialize(http, f"{base}/mcp")).headers["mcp-session-id"]
            bound = await http.post(f"{base}/mcp", json=big, headers={**ACCEPT, "mcp-session-id": sid})
    assert fresh.status_code == bound.status_code == 413
    assert "error" in fresh.json() and "error" in bound.json()


async def test_tools_list_follows_the_environment_of_the_path():
    with server(Math, Counter) as base:
        async with httpx.AsyncClient() as http:
            sid = (await raw_initialize(http, f"{base}/counter/mcp")).headers["mcp-session-id"]
            listed = await rpc(http, f"{base}/counter/mcp", sid, "tools/list", {})
            other = await http.post(
                f"{base}/math/mcp",
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={**ACCEPT, "mcp-session-id": sid},
            )
    assert {t["name"] for t in listed["result"]["tools"]} == {"increment", "finish", "explode", "picture"}
    assert other.status_code == 404


async def test_an_idle_transport_ends_its_mcp_created_episode_though_the_control_plane_polls_it():
    with server(Counter, session_timeout=0.5) as base:
        async with httpx.AsyncClient() as http:
            await raw_initialize(http, f"{base}/mcp", {"session_id": "idle-one"})
            # Polling refreshes the episode's own idle timer, so only the transport's timeout can end it.
            with anyio.fail_after(10):
                while True:
                    response = await http.get(f"{base}/control/status", headers={"mcp-session-id": "idle-one"})
                    if response.status_code == 410:  # reaped: "expired after 0.5 s of inactivity"
                        break
                    await anyio.sleep(0.05)


async def test_the_sdk_client_given_the_servers_api_key_completes_an_episode_and_is_refused_without_it():
    with server(Math, api_key="s3cret-key") as base:
        async with mcp_client(f"{base}/math/mcp", headers={"Authorization": "Bearer s3cret-key"}) as (session, _):
            result = await session.call_tool("submit", {"answer": str(MATH_TASK["answer"])})
        async with httpx.AsyncClient() as http:
            refused = await raw_initialize(http, f"{base}/math/mcp")
    assert text(result) == "Correct!" and not result.is_error
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "missing or wrong API key"


def test_a_delete_while_a_tools_call_of_the_same_session_runs_answers_the_call_404_not_500(caplog):
    caplog.set_level(logging.INFO, logger="ors_server.access")
    tag, key = new_tag(), uuid.uuid4().hex
    with live_server() as live:
        client = live.client
        transport = mcp_open(client, "/mathlike/mcp/", {"session_id": key, "config": {"task_spec": math_task(0, tag)}})
        headers = {**ACCEPT_MCP, "mcp-session-id": transport}
        answered: list[httpx.Response] = []

        def call() -> None:
            body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}
            answered.append(client.post("/mathlike/mcp/", json=body, headers=headers))

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 10
        while count(tag, "wait-start") == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        deleted = client.delete("/mathlike/mcp/", headers=headers)
        caller.join(timeout=10)
        gate(tag).set()  # the tool returns; the episode is torn down after it
        assert deleted.status_code == 200, deleted.text
        [cut] = answered
        assert cut.status_code == 404, cut.text
        assert cut.json()["id"] == 7 and cut.json()["error"]["code"] < 0
        assert key not in live.store
        later = client.post("/mathlike/mcp/", json={"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, headers=headers)
        assert later.status_code == 404
    lines = [r.getMessage() for r in caplog.records if r.name == "ors_server.access"]
    assert not [line for line in lines if "status=500" in line], lines
