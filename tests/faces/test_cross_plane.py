"""One store, three faces: sessions created through one face are seen and driven through the others."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.faces.mcp_helpers import Counter, call, mcp_client, raw_initialize, server, text

pytestmark = pytest.mark.anyio


async def ors_create(http: httpx.AsyncClient, base: str, sid: str, start: int = 7) -> None:
    body = {"env_name": "counter", "task_spec": {"start": start}}
    response = await http.post(f"{base}/create", headers={"X-Session-ID": sid}, json=body)
    assert response.status_code == 200, response.text


async def test_an_ors_session_is_visible_on_the_control_plane():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            await ors_create(http, base, "ors-1")
            state = await http.get(f"{base}/control/initial_state", headers={"mcp-session-id": "ors-1"})
            status = await http.get(f"{base}/counter/control/status", headers={"mcp-session-id": "ors-1"})
    assert state.json() == {"observation": "count from 7\nuse increment"}
    assert status.json()["step_count"] == 0


async def test_an_mcp_2x_client_drives_an_ors_session_named_by_the_x_session_id_header():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            await ors_create(http, base, "ors-2")
            async with mcp_client(f"{base}/counter/mcp", headers={"X-Session-ID": "ors-2"}) as (session, _):
                result = await session.call_tool("increment", {"by": 1})
            # The client closed its transport (DELETE): the ORS episode lives on.
            ping = await http.post(f"{base}/ping", headers={"X-Session-ID": "ors-2"})
            reward = await http.get(f"{base}/control/reward", headers={"mcp-session-id": "ors-2"})
    assert json.loads(text(result)) == {"count": 8}
    assert ping.status_code == 200
    assert reward.json() == {"reward": 0.5, "step_count": 1}


async def test_an_eval_protocol_client_drives_an_ors_session_named_in_client_info():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            await ors_create(http, base, "ors-3", start=50)
            opened = await raw_initialize(http, f"{base}/mcp/", {"session_id": "ors-3", "seed": 9})
            sid = opened.headers["mcp-session-id"]
            first = await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
            await http.delete(f"{base}/mcp/", headers={"mcp-session-id": sid})
            # Re-initializing attaches again, without restarting an episode it did not create.
            again = await raw_initialize(http, f"{base}/mcp/", {"session_id": "ors-3", "seed": 9})
            second = await call(http, f"{base}/mcp/", again.headers["mcp-session-id"], "increment", {"by": 1})
    # The ORS task wins over the seed: the client attached to the live episode.
    assert json.loads(first["content"][0]["text"]) == {"count": 51}
    assert json.loads(second["content"][0]["text"]) == {"count": 52}


async def test_an_mcp_session_is_reachable_with_ors_ping_and_delete():
    with server(Counter) as base:
        async with mcp_client(f"{base}/mcp") as (session, transport_ids), httpx.AsyncClient() as http:
            await session.call_tool("increment", {"by": 1})
            sid = {"X-Session-ID": transport_ids[0]}
            ping = await http.post(f"{base}/ping", headers=sid)
            deleted = await http.post(f"{base}/delete", headers=sid)
            after = await session.call_tool("increment", {"by": 1})
            ping_after = await http.post(f"{base}/ping", headers=sid)
    assert ping.status_code == 200 and deleted.status_code == 200
    assert after.is_error and "ended" in text(after)
    assert ping_after.status_code in (404, 410)


async def test_an_episode_shared_by_two_transports_ends_with_the_last_one():
    extra = {"session_id": "shared"}
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            one = (await raw_initialize(http, f"{base}/mcp", extra)).headers["mcp-session-id"]
            two = (await raw_initialize(http, f"{base}/mcp", extra)).headers["mcp-session-id"]
            await http.delete(f"{base}/mcp", headers={"mcp-session-id": one})
            alive = await http.post(f"{base}/ping", headers={"X-Session-ID": "shared"})
            result = await call(http, f"{base}/mcp", two, "increment", {"by": 2})
            await http.delete(f"{base}/mcp", headers={"mcp-session-id": two})
            gone = await http.post(f"{base}/ping", headers={"X-Session-ID": "shared"})
    assert alive.status_code == 200
    assert json.loads(result["content"][0]["text"]) == {"count": 2}
    assert gone.status_code in (404, 410)


async def test_an_ors_call_and_an_mcp_call_step_the_same_episode():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            opened = await raw_initialize(http, f"{base}/mcp", {"session_id": "both"})
            await call(http, f"{base}/mcp", opened.headers["mcp-session-id"], "increment", {"by": 3})
            body = {"name": "increment", "input": {"by": 4}}
            ors = await http.post(f"{base}/counter/call", headers={"X-Session-ID": "both"}, json=body)
            reward = await http.get(f"{base}/control/reward", headers={"mcp-session-id": "both"})
    assert '\\"count\\": 7' in ors.text or '"count": 7' in ors.text
    assert reward.json() == {"reward": 0.5, "step_count": 2}


async def test_a_transport_never_drives_a_later_episode_that_reuses_its_key():
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            await ors_create(http, base, "reused", start=1)
            old = (await raw_initialize(http, f"{base}/mcp", {"session_id": "reused"})).headers["mcp-session-id"]
            await http.post(f"{base}/delete", headers={"X-Session-ID": "reused"})
            await ors_create(http, base, "reused", start=100)
            stale = await call(http, f"{base}/mcp", old, "increment", {"by": 1})
            new = (await raw_initialize(http, f"{base}/mcp", {"session_id": "reused"})).headers["mcp-session-id"]
            fresh = await call(http, f"{base}/mcp", new, "increment", {"by": 1})
    assert stale["isError"] is True and "ended" in stale["content"][0]["text"]
    assert json.loads(fresh["content"][0]["text"]) == {"count": 101}


class Unseedable(Counter):
    name = "unseedable"

    @classmethod
    def task_from_seed(cls, seed, config):
        raise LookupError(f"no row for seed {seed}")


async def test_a_failing_task_from_seed_is_a_400_on_every_face_that_opens_sessions():
    with server(Unseedable) as base:
        async with httpx.AsyncClient() as http:
            initialize = await raw_initialize(http, f"{base}/mcp", {"session_id": "row", "seed": 3})
            transportless = await raw_initialize(http, f"{base}/mcp", {"seed": 4})
            state = await http.get(f"{base}/control/initial_state", headers={"mcp-session-id": "row"})
            listed = await http.get(f"{base}/control/reward", headers={"mcp-session-id": "row"})
    assert initialize.status_code == transportless.status_code == state.status_code == 400
    assert "LookupError: no row for seed 3" in initialize.json()["error"]["message"]
    assert "LookupError: no row for seed 4" in transportless.json()["error"]["message"]
    assert "LookupError: no row for seed None" in state.json()["error"]
    assert listed.status_code == 404  # nothing was created


async def test_an_ors_sessions_own_tools_and_toolset_tools_are_listed_and_called_over_mcp():
    from ors_server.environments.shell import Shell
    from ors_server.environments.shell.confinement import bwrap_problem
    from tests.clients.contract_envs import Contract

    with server(Contract, Shell) as base:
        async with httpx.AsyncClient() as http:
            body = {"env_name": "contract", "task_spec": {"question": "2 + 2", "answer": "4", "hint": "even"}}
            created = await http.post(f"{base}/create", headers={"X-Session-ID": "own-tools"}, json=body)
            assert created.status_code == 200, created.text
            async with mcp_client(f"{base}/contract/mcp", headers={"X-Session-ID": "own-tools"}) as (session, _):
                listed = sorted(tool.name for tool in (await session.list_tools()).tools)
                hint = await session.call_tool("hint", {})
            assert listed == ["add", "hint", "submit"] and text(hint) == "even"
            if bwrap_problem() is not None:
                return  # the shell's toolset sandbox is bubblewrap's
            body = {"env_name": "shell", "task_spec": {"id": "hello_file"}, "toolset_name": "claude-code"}
            created = await http.post(f"{base}/create", headers={"X-Session-ID": "toolset"}, json=body)
            assert created.status_code == 200, created.text
            async with mcp_client(f"{base}/shell/mcp", headers={"X-Session-ID": "toolset"}) as (session, _):
                listed = sorted(tool.name for tool in (await session.list_tools()).tools)
                await session.call_tool("write", {"file_path": "hello.txt", "content": "hi"})
                read = await session.call_tool("read", {"file_path": "/work/hello.txt"})
    assert listed == ["bash", "edit", "glob", "grep", "read", "submit", "todo_write", "write"]
    assert text(read).startswith("     1\thi\n")
