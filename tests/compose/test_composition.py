"""MCP composition through the real faces: an environment's MCP tool servers (real servers written with the `mcp`
SDK: one over stdio, one over streamable HTTP) add namespaced tools that every face lists and calls like the
environment's own, through the one call pipeline; every ending of an episode ends its server process."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ors_server import Environment, HttpServer, StdioServer
from tests.compose.envs import composed, new_tag, pid_of, server_pids, stdio, wait_for_pids
from tests.compose.tool_server import http_app
from tests.faces.mcp_helpers import mcp_client
from tests.ors_envs import Live, call_result, live_server, parse_sse, post_sse, sid_header
from tests.serving import serve

pytestmark = pytest.mark.anyio

LOCAL_TOOLS = [
    "local__echo",
    "local__pid",
    "local__read",
    "local__remember",
    "local__recall",
    "local__hang",
    "local__crash",
]


def serving(envs: list[type[Environment]], **settings: Any) -> Any:
    """A live server whose endpoints wait long enough for a tool server's process to start."""
    return live_server(envs, **{"ready_wait": 20.0, **settings})


def create(live: Live, env: str, sid: str) -> None:
    response = live.client.post("/create", json={"env_name": env, "task_spec": {}}, headers=sid_header(sid))
    assert response.status_code == 200, response.text


def ors_call(live: Live, env: str, sid: str, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    response, raw = post_sse(live.client, f"/{env}/call", {"name": name, "input": arguments or {}}, sid)
    assert response.status_code == 200, raw
    events = [e for e in parse_sse(raw) if e.name != ":"]
    if events[-1].name == "error":
        return {"ok": False, "error": events[-1].data}
    return call_result(events)


def text_of(result: dict[str, Any]) -> str:
    assert result["ok"] is True, result
    return "".join(block["text"] for block in result["output"]["blocks"])


@pytest.fixture
def tag() -> Iterator[str]:
    tag = new_tag()
    yield tag
    assert wait_for_pids(tag, 0) == [], "a tool server process outlived its test"


# Listing and calling on every face.


def test_composed_tools_are_listed_namespaced_with_the_environments_own_on_ors(tag: str) -> None:
    env = composed([stdio(tag)])
    with serving([env]) as live:
        listed = live.client.get("/composed/tools").json()["tools"]
        create(live, "composed", "s1")
        assert live.client.get("/prompt", headers=sid_header("s1")).status_code == 200
        per_session = live.client.get("/task_tools", headers=sid_header("s1")).json()["tools"]
    names = [t["name"] for t in listed]
    assert names[0] == "submit" and set(LOCAL_TOOLS) <= set(names)
    echo = next(t for t in listed if t["name"] == "local__echo")
    assert echo["description"] == "Return the text."
    assert echo["input_schema"]["properties"]["text"]["type"] == "string"
    assert per_session == listed


def test_a_composed_tool_is_called_over_ors_and_counts_as_a_step(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        create(live, "composed", "s1")
        result = ors_call(live, "composed", "s1", "local__echo", {"text": "hello"})
        picture = ors_call(live, "composed", "s1", "local__picture")
        session = live.store.get("s1")
        steps, reward = session.step_count, session.total_reward
        submitted = ors_call(live, "composed", "s1", "submit", {"answer": "done"})
        metrics = live.client.get("/metrics").text
    assert text_of(result) == "hello"
    assert result["output"]["reward"] is None and result["output"]["finished"] is False
    [image] = picture["output"]["blocks"]
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert (steps, reward) == (2, 0.0)
    assert submitted["output"]["reward"] == 1.0 and submitted["output"]["finished"] is True
    assert 'ors_tool_calls_total{env="composed",outcome="ok",tool="local__echo"} 1.0' in metrics


async def test_composed_tools_are_listed_and_called_over_mcp(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        async with mcp_client(f"{live.url}/composed/mcp") as (session, _):
            listed = [t.name for t in (await session.list_tools()).tools]
            echoed = await session.call_tool("local__echo", {"text": "over mcp"})
            failed = await session.call_tool("local__fail", {})
            invalid = await session.call_tool("local__echo", {"text": 5})
    assert listed[0] == "submit" and set(LOCAL_TOOLS) <= set(listed)
    assert not echoed.is_error and [c.text for c in echoed.content] == ["over mcp"]  # type: ignore[union-attr]
    assert failed.is_error and "no luck today" in failed.content[0].text  # type: ignore[union-attr]
    assert invalid.is_error and "Tool input validation error" in invalid.content[0].text  # type: ignore[union-attr]


async def test_composed_tools_are_functions_in_execute_code(tag: str) -> None:
    sandbox = "bwrap" if shutil.which("bwrap") else "none"
    with serving([composed([stdio(tag)])], codeact=True, codeact_sandbox=sandbox) as live:
        async with mcp_client(f"{live.url}/composed/mcp") as (session, transport_ids):
            code = "n = local__remember(note='a')\nm = local__remember('b')\nprint(n, m, local__recall())"
            result = await session.call_tool("execute_code", {"code": code})
            steps = live.store.get(live.app.state.mcp.key_for(transport_ids[0])).step_count
    assert not result.is_error, result
    assert result.content[0].text.strip() == "1 2 a|b"  # type: ignore[union-attr]
    assert steps == 3


def test_each_episode_has_a_server_process_of_its_own(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        for sid in ("a", "b"):
            create(live, "composed", sid)
            ors_call(live, "composed", sid, "local__remember", {"note": f"note of {sid}"})
        recalled = {sid: text_of(ors_call(live, "composed", sid, "local__recall")) for sid in ("a", "b")}
        pids = {sid: pid_of(tag, text_of(ors_call(live, "composed", sid, "local__pid"))) for sid in ("a", "b")}
        live_pids = server_pids(tag)
    assert recalled == {"a": "note of a", "b": "note of b"}
    assert pids["a"] != pids["b"] and set(pids.values()) <= set(live_pids)


# Failing servers fail calls, not sessions or the store.


def test_a_hanging_tool_fails_that_call_at_the_timeout_and_the_session_goes_on(tag: str) -> None:
    with serving([composed([stdio(tag)])], tool_server_timeout=1.5) as live:
        create(live, "composed", "s1")
        hung = ors_call(live, "composed", "s1", "local__hang")
        after = ors_call(live, "composed", "s1", "local__echo", {"text": "still here"})
        create(live, "composed", "s2")
        other = ors_call(live, "composed", "s2", "local__echo", {"text": "and here"})
    assert hung["ok"] is False and "did not finish within 1.5 s" in hung["error"], hung
    assert text_of(after) == "still here" and text_of(other) == "and here"


def test_a_crashed_tool_server_fails_its_calls_and_not_the_session(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        create(live, "composed", "s1")
        crashed = ors_call(live, "composed", "s1", "local__crash")
        assert wait_for_pids(tag, 0) == []
        again = ors_call(live, "composed", "s1", "local__echo", {"text": "x"})
        own = ors_call(live, "composed", "s1", "submit", {"answer": "fine"})
        deleted = live.client.post("/delete", headers=sid_header("s1"))
    assert crashed["ok"] is False and "tool server 'local' failed" in crashed["error"], crashed
    assert again["ok"] is False and "tool server 'local' failed" in again["error"], again
    assert own["output"]["reward"] == 1.0 and deleted.status_code == 200


def test_a_server_that_does_not_start_fails_setup_and_listing_with_its_name(tag: str) -> None:
    broken = StdioServer("broken", ["/bin/sh", "-c", "exit 3", tag])
    with serving([composed([broken])]) as live:
        create(live, "composed", "s1")
        prompt = live.client.get("/prompt", headers=sid_header("s1"))
        tools = live.client.get("/composed/tools")
    assert prompt.status_code == 500 and "tool server 'broken' did not start" in prompt.json()["detail"]
    assert tools.status_code == 503 and "tool server 'broken' did not start" in tools.json()["detail"]


def test_a_server_that_never_answers_fails_setup_at_the_timeout_and_is_ended(tag: str) -> None:
    silent = StdioServer("silent", ["/bin/sh", "-c", "exec sleep 60", tag])
    with serving([composed([silent])], tool_server_start_timeout=1.0, ready_wait=10) as live:
        create(live, "composed", "s1")
        prompt = live.client.get("/prompt", headers=sid_header("s1"))
        assert wait_for_pids(tag, 0) == []
    assert prompt.status_code == 500 and "tool server 'silent' did not start within 1 s" in prompt.json()["detail"]


# Every ending ends the server processes.


def test_delete_ends_the_server_process_before_it_answers(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        create(live, "composed", "s1")
        pid = pid_of(tag, text_of(ors_call(live, "composed", "s1", "local__pid")))
        assert pid in server_pids(tag)
        assert live.client.post("/delete", headers=sid_header("s1")).status_code == 200
        assert server_pids(tag) == []


def test_the_reaper_ends_the_server_process(tag: str) -> None:
    with serving([composed([stdio(tag)])], session_timeout=2.0, ready_wait=0.5) as live:
        create(live, "composed", "s1")
        # Each request refreshes the session's idle timer: ask until setup is done, then leave it idle.
        deadline = time.monotonic() + 30
        while live.client.get("/prompt", headers=sid_header("s1")).status_code == 503 and time.monotonic() < deadline:
            pass
        assert len(server_pids(tag)) == 1
        assert wait_for_pids(tag, 0) == []
        assert live.store.counts["reaped"] == 1


def test_shutdown_ends_every_server_process(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        for sid in ("a", "b", "c"):
            create(live, "composed", sid)
            ors_call(live, "composed", sid, "local__pid")
        assert len(server_pids(tag)) == 3
    assert server_pids(tag) == []


def test_a_failed_setup_ends_the_server_process_at_once(tag: str) -> None:
    with serving([composed([stdio(tag)], setup_raises=True)]) as live:
        create(live, "composed", "s1")
        prompt = live.client.get("/prompt", headers=sid_header("s1"))
        assert prompt.status_code == 500 and "setup exploded" in prompt.json()["detail"]
        assert wait_for_pids(tag, 0) == []
        assert "s1" in live.store  # the session stays (answering SetupFailed) until deleted


async def test_a_reset_ends_the_old_episodes_server_and_starts_a_new_one(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        header = {"mcp-session-id": "ep"}
        async with httpx.AsyncClient(base_url=live.url, timeout=20) as http:
            assert (await http.get("/composed/control/initial_state", headers=header)).status_code == 200
            first = wait_for_pids(tag, 1)
            assert (await http.post("/composed/control/reset_session", headers=header, json={"seed": 1})).is_success
            second = wait_for_pids(tag, 1)
            await http.post("/delete", headers=sid_header("ep"))
    assert len(first) == len(second) == 1 and first != second


async def test_closing_the_mcp_session_of_an_mcp_episode_ends_its_server(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        async with mcp_client(f"{live.url}/composed/mcp") as (session, _):
            await session.call_tool("local__pid", {})
            assert len(server_pids(tag)) == 1
        assert wait_for_pids(tag, 0) == []


# A streamable-HTTP tool server.


class _Counting:
    """The HTTP tool server's app, counting MCP sessions opened (initialize) and ended (DELETE)."""

    def __init__(self, app: Any) -> None:
        self.app, self.opened, self.ended = app, 0, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE":
            self.ended += 1
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            if b"mcp-session-id" not in headers:
                self.opened += 1
        await self.app(scope, receive, send)


def test_an_http_tool_server_gets_one_mcp_session_per_episode() -> None:
    counting = _Counting(http_app())
    with serve(counting) as tools_url:
        env: type[Environment] = composed([HttpServer("remote", f"{tools_url}/mcp")], name="remote_env")
        with serving([env]) as live:
            for sid in ("a", "b"):
                create(live, "remote_env", sid)
                assert text_of(ors_call(live, "remote_env", sid, "remote__echo", {"text": sid})) == sid
            opened_while_live = counting.opened
            for sid in ("a", "b"):
                assert live.client.post("/delete", headers=sid_header(sid)).status_code == 200
            listed = [t["name"] for t in live.client.get("/remote_env/tools").json()["tools"]]
    assert opened_while_live == 2
    assert counting.ended == 2
    assert "remote__echo" in listed


def test_tool_server_names_that_could_collide_are_refused() -> None:
    with pytest.raises(ValueError, match="single '_'"):
        StdioServer("a__b", ["true"])
    with pytest.raises(TypeError, match="two servers of the same name"):
        composed([StdioServer("same", ["true"]), HttpServer("same", "http://127.0.0.1:1/mcp")])


def test_composed_tools_are_listed_and_called_over_the_openenv_socket(tag: str) -> None:
    with serving([composed([stdio(tag)])]) as live:
        ws_url = live.url.replace("http://", "ws://") + "/openenv/composed/ws"
        with connect(ws_url) as ws:

            def step(data: dict[str, Any]) -> dict[str, Any]:
                ws.send(json.dumps({"type": "step", "data": data}))
                reply = json.loads(ws.recv(timeout=30))
                assert reply["type"] == "observation", reply
                return reply["data"]

            ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"
            listed = step({"type": "list_tools"})
            called = step({"type": "call_tool", "tool_name": "local__echo", "arguments": {"text": "over openenv"}})
    assert set(LOCAL_TOOLS) <= {t["name"] for t in listed["observation"]["tools"]}
    assert called["observation"]["result"]["data"] == "over openenv" and called["done"] is False
