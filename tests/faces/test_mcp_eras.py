"""Both MCP eras on every MCP endpoint: `server/discover` (2026-07-28) beside the `initialize` handshake (2025),
episodes named by their URL or `X-Session-ID` without a protocol session, rewards in `structuredContent`."""

from __future__ import annotations

import json
import logging
import uuid

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.methods import validate_server_result

from ors_server.environments.frozen_lake import FrozenLake
from tests.faces.mcp_helpers import ACCEPT, Counter, mcp_http_client, play_lake, server

pytestmark = pytest.mark.anyio

CURRENT = "2026-07-28"


def lake_server():
    return server(FrozenLake, Counter)


async def create(http: httpx.AsyncClient, base: str, env: str = "frozen_lake", task: dict | None = None) -> str:
    sid = f"ep-{uuid.uuid4().hex[:12]}"
    body = {"env_name": env, "task_spec": task or {"seed": 7}}
    created = await http.post(f"{base}/create", json=body, headers={"X-Session-ID": sid})
    assert created.status_code == 200, created.text
    return sid


async def discover(http: httpx.AsyncClient, url: str) -> httpx.Response:
    meta = {"io.modelcontextprotocol/protocolVersion": CURRENT, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
    headers = {**ACCEPT, "mcp-protocol-version": CURRENT, "mcp-method": "server/discover"}
    return await http.post(url, json=body, headers=headers)


@pytest.mark.parametrize(
    ("path", "named", "versions"),
    [
        ("/mcp", False, ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]),
        ("/mcp/", False, ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]),
        ("/frozen_lake/mcp", False, ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]),
        ("/frozen_lake/mcp", True, [CURRENT]),
        ("/counter/mcp/episodes/any-id", False, [CURRENT]),
        ("/mcp/episodes/any-id/", False, [CURRENT]),
    ],
)
async def test_discover_offers_the_current_era_only_where_an_episode_is_named(path, named, versions):
    headers = {"X-Session-ID": "any-id"} if named else {}
    with lake_server() as base:
        async with httpx.AsyncClient(headers=headers) as http:
            answer = await discover(http, f"{base}{path}")
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    validate_server_result("server/discover", CURRENT, result)  # raises on anything the 2026 schema refuses
    assert result["supportedVersions"] == versions
    assert {"tools", "prompts"} <= set(result["capabilities"])


async def test_an_auto_client_adopts_the_current_era_and_plays_frozen_lake_through_the_episode_url():
    with lake_server() as base:
        async with httpx.AsyncClient() as http:
            sid = await create(http, base)
            async with Client(f"{base}/frozen_lake/mcp/episodes/{sid}") as client:
                assert client.session.protocol_version == CURRENT
                steps = await play_lake(client)
            reward = (await http.get(f"{base}/control/reward", headers={"mcp-session-id": sid})).json()
    assert reward == {"reward": 1.0, "step_count": len(steps)}


@pytest.mark.parametrize("path", ["/frozen_lake/mcp", "/mcp"])
async def test_a_plain_client_at_a_url_naming_no_episode_negotiates_2025_and_plays_a_whole_episode(path):
    # mcp 2.x's Client(url) as users write it: its default mode probes server/discover first. Where nothing names an
    # episode the 2026-07-28 era could act on none, so the probe is told 2025 and the client plays its own episode.
    with lake_server() as base:
        async with Client(f"{base}{path}") as client:
            steps = await play_lake(client)  # checks every step's reward in structuredContent
            version = client.session.protocol_version
    assert steps[-1]["reward"] == 1.0 and version == "2025-11-25"


async def test_an_auto_client_plays_frozen_lake_through_x_session_id():
    with lake_server() as base:
        async with httpx.AsyncClient() as http:
            sid = await create(http, base)
        named = mcp_http_client(headers={"X-Session-ID": sid})
        async with named, Client(streamable_http_client(f"{base}/frozen_lake/mcp", http_client=named)) as client:
            assert client.session.protocol_version == CURRENT
            await play_lake(client)


async def test_the_default_environments_episode_url_under_mcp():
    with lake_server() as base:  # FrozenLake is the first, so the default environment
        async with httpx.AsyncClient() as http:
            sid = await create(http, base)
        async with Client(f"{base}/mcp/episodes/{sid}/", mode=CURRENT) as client:
            await play_lake(client)


async def test_a_client_forced_to_2025_plays_through_its_protocol_session_and_through_an_episode_url():
    with lake_server() as base:
        async with Client(f"{base}/frozen_lake/mcp", mode="legacy") as client:
            assert client.session.protocol_version == "2025-11-25"
            await play_lake(client)
        async with httpx.AsyncClient() as http:
            sid = await create(http, base)
        async with Client(f"{base}/frozen_lake/mcp/episodes/{sid}", mode="legacy") as client:
            await play_lake(client)
        async with httpx.AsyncClient() as http:
            status = (await http.get(f"{base}/control/status", headers={"mcp-session-id": sid})).json()
    assert status["terminated"] and status["total_reward"] == 1.0


async def test_a_current_era_call_naming_no_episode_is_a_json_rpc_error_saying_how_to_name_one():
    with lake_server() as base:
        async with Client(f"{base}/frozen_lake/mcp", mode=CURRENT) as client:
            # Discovery, tools/list and prompts/list need no episode.
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == ["lake_move"]
            assert tools[0].output_schema["required"] == ["reward", "finished"]
            assert [p.name for p in (await client.list_prompts()).prompts] == ["task"]
            with pytest.raises(MCPError) as refused:
                await client.call_tool("lake_move", {"action": "DOWN"})
    message = refused.value.error.message
    assert "/frozen_lake/mcp/episodes/<session_id>" in message and "X-Session-ID" in message


async def test_an_episode_url_naming_an_unknown_session_is_an_is_error_result():
    with lake_server() as base:
        async with Client(f"{base}/frozen_lake/mcp/episodes/nobody", mode=CURRENT) as client:
            result = await client.call_tool("lake_move", {"action": "DOWN"})
    assert result.is_error and "nobody" in result.content[0].text


async def test_a_2025_transport_opened_on_one_episode_url_is_refused_on_another():
    with lake_server() as base:
        async with httpx.AsyncClient() as http:
            one, two = await create(http, base), await create(http, base)
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
            init["params"] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            }
            opened = await http.post(f"{base}/frozen_lake/mcp/episodes/{one}", json=init, headers=ACCEPT)
            transport = opened.headers["mcp-session-id"]
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            headers = {**ACCEPT, "mcp-session-id": transport, "mcp-protocol-version": "2025-11-25"}
            elsewhere = await http.post(f"{base}/frozen_lake/mcp/episodes/{two}", json=body, headers=headers)
            home = await http.post(f"{base}/frozen_lake/mcp/episodes/{one}", json=body, headers=headers)
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["message"] == "Session not found"
    assert home.status_code == 200 and json.loads(home.text)["result"]["tools"][0]["name"] == "lake_move"


@pytest.mark.parametrize("mode", ["auto", CURRENT, "legacy"])
async def test_the_task_statement_is_the_prompt_task_and_the_resource_ors_task_in_both_eras(mode):
    with lake_server() as base:
        async with httpx.AsyncClient() as http:
            sid = await create(http, base, "counter", {"start": 40})
            statement = [
                block["text"]
                for block in (await http.get(f"{base}/counter/prompt", headers={"X-Session-ID": sid})).json()
            ]
        async with Client(f"{base}/counter/mcp/episodes/{sid}", mode=mode) as client:
            assert [p.name for p in (await client.list_prompts()).prompts] == ["task"]
            prompt = await client.get_prompt("task")
            assert [r.uri for r in (await client.list_resources()).resources] == ["ors://task"]
            resource = await client.read_resource("ors://task")
            with pytest.raises(MCPError):
                await client.read_resource("ors://other")
    assert statement == ["count from 40", "use increment"]
    assert [m.content.text for m in prompt.messages] == statement
    assert [c.text for c in resource.contents] == statement
    assert {c.mime_type for c in resource.contents} == {"text/plain"}


async def test_a_2025_protocol_session_reads_its_own_episodes_task_as_the_resource():
    with lake_server() as base:
        async with Client(f"{base}/counter/mcp", mode="legacy") as client:
            await client.call_tool("increment", {"by": 2})
            resource = await client.read_resource("ors://task")
            prompt = await client.get_prompt("task")
    assert [c.text for c in resource.contents] == [m.content.text for m in prompt.messages]
    assert resource.contents[0].text == "count from 2"


async def test_reading_the_task_resource_naming_no_episode_says_how_to_name_one():
    with lake_server() as base:
        async with Client(f"{base}/counter/mcp", mode=CURRENT) as client:
            assert [r.name for r in (await client.list_resources()).resources] == ["task"]
            with pytest.raises(MCPError) as refused:
                await client.read_resource("ors://task")
    assert "/counter/mcp/episodes/<session_id>" in refused.value.error.message


async def test_the_access_log_names_the_session_of_an_episode_url(caplog):
    caplog.set_level(logging.INFO, logger="ors_server.access")
    with lake_server() as base:
        async with httpx.AsyncClient() as http:
            sid = await create(http, base)
        async with Client(f"{base}/frozen_lake/mcp/episodes/{sid}", mode=CURRENT) as client:
            await client.call_tool("lake_move", {"action": "DOWN"})
    lines = [r.getMessage() for r in caplog.records if r.name == "ors_server.access" and "/episodes/" in r.getMessage()]
    assert lines and all(f"session={sid}" in line for line in lines)
    assert any("tool=lake_move" in line for line in lines)
