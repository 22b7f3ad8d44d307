"""`execute_code` through the real faces: ORS over HTTP+SSE, MCP with the `mcp` client, the control plane.

A step's tool calls go through the session's one call pipeline: counted in steps, rewards summed, the episode
finished by them; hostile code ends its own step and nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from ors_server.codeact import bwrap_problem
from tests.faces.mcp_helpers import Counter, call, mcp_client, raw_initialize, server, text
from tests.ors_envs import call_result, parse_sse

pytestmark = pytest.mark.anyio

SANDBOX = "bwrap" if bwrap_problem() is None else "none"
SERVER_SECRET = "server-only-secret-93f1"
CLIENT_SECRET = "client-token-5be2"


@pytest.fixture(scope="module")
def codeact_server() -> Iterator[str]:
    os.environ["ORS_CODEACT_TEST_SECRET"] = SERVER_SECRET  # the server process's environment: code must not see it
    try:
        with server(Counter, codeact=True, codeact_sandbox=SANDBOX, codeact_timeout=3) as url:
            yield url
    finally:
        del os.environ["ORS_CODEACT_TEST_SECRET"]


async def ors_create(http: httpx.AsyncClient, base: str, sid: str, task_spec: dict[str, Any] | None = None) -> None:
    body = {"env_name": "counter", "task_spec": task_spec or {"start": 0}, "secrets": {"token": CLIENT_SECRET}}
    response = await http.post(f"{base}/create", headers={"X-Session-ID": sid}, json=body)
    assert response.status_code == 200, response.text


async def ors_call(http: httpx.AsyncClient, base: str, sid: str, name: str, arguments: dict[str, Any]) -> Any:
    body = {"name": name, "input": arguments}
    headers = {"X-Session-ID": sid, "Accept": "text/event-stream"}
    async with http.stream("POST", f"{base}/counter/call", json=body, headers=headers) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    assert response.status_code == 200, raw
    events = [e for e in parse_sse(raw) if e.name != ":"]
    if events[-1].name == "error":  # a crashed tool: the stream's `error` event
        return {"ok": False, "error": events[-1].data}
    return call_result(events)


async def control(http: httpx.AsyncClient, base: str, sid: str, what: str) -> Any:
    response = await http.get(f"{base}/control/{what}", headers={"mcp-session-id": sid})
    assert response.status_code == 200, response.text
    return response.json()


def names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tools]


async def test_every_face_lists_execute_code_next_to_the_environments_tools(codeact_server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        listed = (await http.get(f"{codeact_server}/counter/tools")).json()["tools"]
        await ors_create(http, codeact_server, "list-1")
        per_session = (
            await http.get(f"{codeact_server}/counter/task_tools", headers={"X-Session-ID": "list-1"})
        ).json()
    async with mcp_client(f"{codeact_server}/counter/mcp") as (session, _):
        over_mcp = (await session.list_tools()).tools
    expected = ["increment", "finish", "explode", "picture", "execute_code"]
    assert names(listed) == names(per_session["tools"]) == [t.name for t in over_mcp] == expected
    schema = next(t for t in listed if t["name"] == "execute_code")["input_schema"]
    assert schema["required"] == ["code"] and schema["properties"]["code"]["type"] == "string"


async def test_an_ors_step_calls_tools_in_process_and_records_each_call(codeact_server: str) -> None:
    code = "for by in (1, 2, 3):\n    print(increment(by=by))\nreturn [t['name'] for t in list_tools()]"
    async with httpx.AsyncClient(timeout=30) as http:
        await ors_create(http, codeact_server, "ors-step")
        result = await ors_call(http, codeact_server, "ors-step", "execute_code", {"code": code})
        reward = await control(http, codeact_server, "ors-step", "reward")
        status = await control(http, codeact_server, "ors-step", "status")
    assert result["ok"] is True
    output = result["output"]
    assert output["blocks"][0]["text"] == (
        "{\"count\": 1}\n{\"count\": 3}\n{\"count\": 6}\n['increment', 'finish', 'explode', 'picture']"
    )
    assert output["reward"] == 1.5 and output["finished"] is False
    assert reward == {"reward": 1.5, "step_count": 3}
    assert status["total_reward"] == 1.5 and status["terminated"] is False


async def test_an_mcp_step_finishes_the_episode_and_a_later_call_raises_inside_the_code(codeact_server: str) -> None:
    code = (
        "increment(by=5)\n"
        "print(finish())\n"
        "try:\n"
        "    increment(by=1)\n"
        "except ToolError as error:\n"
        "    print('refused:', error)\n"
    )
    async with mcp_client(f"{codeact_server}/counter/mcp", headers={"X-Session-ID": "mcp-step"}) as (session, _):
        result = await session.call_tool("execute_code", {"code": code})
        after = await session.call_tool("execute_code", {"code": "increment(by=1)"})
        async with httpx.AsyncClient(timeout=30) as http:  # while the MCP-created episode lives
            status = await control(http, codeact_server, "mcp-step", "status")
    assert not result.is_error
    lines = text(result).splitlines()
    assert lines[0] == '{"count": 5}'
    assert lines[1].startswith("refused: 'increment' was not run: the episode has finished")
    assert after.is_error and "episode has finished" in text(after)
    assert status == {"terminated": True, "truncated": False, "step_count": 2, "total_reward": 1.5}


async def test_a_failing_step_is_an_error_on_every_face_and_the_session_stays_usable(codeact_server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        await ors_create(http, codeact_server, "fail-1")
        failed = await ors_call(http, codeact_server, "fail-1", "execute_code", {"code": "explode()"})
        after = await ors_call(http, codeact_server, "fail-1", "execute_code", {"code": "increment(by=2)"})
    assert failed["ok"] is False and "ToolError: ValueError: kaboom at 0 with ***" in failed["error"]
    assert CLIENT_SECRET not in failed["error"]
    assert after["ok"] is True and after["output"]["blocks"][0]["text"] == '{"count": 2}'
    async with mcp_client(f"{codeact_server}/counter/mcp") as (session, _):
        syntax = await session.call_tool("execute_code", {"code": "def ("})
        missing = await session.call_tool("execute_code", {})
    assert syntax.is_error and "SyntaxError" in text(syntax)
    assert missing.is_error and "validation error" in text(missing).lower()


async def test_hostile_steps_end_themselves_and_no_other_session(codeact_server: str) -> None:
    hostile = {
        "loop": "while True:\n    pass",
        "memory": "x = bytearray(10 ** 10)",
        "env": "import os\nreturn repr(dict(os.environ))",
        "print": "for _ in range(200):\n    print('x' * 10 ** 6)",
        "escape": "().__class__.__bases__[0].__subclasses__()\n__import__('os').system('echo hi')",
    }
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=60) as http:
        for key in hostile:
            await ors_create(http, codeact_server, f"hostile-{key}")
        await ors_create(http, codeact_server, "bystander")

        async def run(key: str) -> None:
            results[key] = await ors_call(
                http, codeact_server, f"hostile-{key}", "execute_code", {"code": hostile[key]}
            )

        with anyio.fail_after(45):
            async with anyio.create_task_group() as tg:
                for key in hostile:
                    tg.start_soon(run, key)
                # Meanwhile another session's plain calls are served.
                results["bystander"] = await ors_call(http, codeact_server, "bystander", "increment", {"by": 1})
        # Every hostile session is still usable.
        for key in hostile:
            again = await ors_call(http, codeact_server, f"hostile-{key}", "execute_code", {"code": "increment()"})
            assert again["ok"] is True, (key, again)
        health = await http.get(f"{codeact_server}/health")
    assert health.status_code == 200
    assert results["bystander"]["output"]["blocks"][0]["text"] == '{"count": 1}'
    assert results["loop"] == {"ok": False, "error": "TimeoutError: the code did not finish within 3 s and was stopped"}
    assert "MemoryError" in results["memory"]["error"]
    seen = results["env"]["output"]["blocks"][0]["text"]
    assert "PATH" in seen and SERVER_SECRET not in seen and CLIENT_SECRET not in seen and "ORS_" not in seen
    printed = results["print"]["output"]["blocks"][0]["text"]
    assert printed.startswith("x" * 1000) and printed.endswith("[output truncated: 199934664 more characters]")
    assert len(printed) < 70_000
    if SANDBOX == "bwrap":
        assert results["escape"]["ok"] is True
        assert results["escape"]["output"]["blocks"][0]["text"] != "0"  # the shell never ran


async def test_codeact_per_session_through_the_task_spec_or_the_mcp_binding_config() -> None:
    with server(Counter, codeact_sandbox=SANDBOX) as base:
        async with httpx.AsyncClient(timeout=30) as http:
            listed = (await http.get(f"{base}/counter/tools")).json()["tools"]
            await ors_create(http, base, "plain")
            await ors_create(http, base, "coder", {"start": 3, "codeact": True})
            plain = (await http.get(f"{base}/counter/task_tools", headers={"X-Session-ID": "plain"})).json()
            coder = (await http.get(f"{base}/counter/task_tools", headers={"X-Session-ID": "coder"})).json()
            refused = await ors_call(http, base, "plain", "execute_code", {"code": "1"})
            ran = await ors_call(http, base, "coder", "execute_code", {"code": "increment()"})

            opened = await raw_initialize(http, f"{base}/counter/mcp", {"config": {"codeact": True}})
            transport = opened.headers["mcp-session-id"]
            bound = await http.post(
                f"{base}/counter/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={
                    "accept": "application/json, text/event-stream",
                    "mcp-session-id": transport,
                    "mcp-protocol-version": "2025-11-25",
                },
            )
            stepped = await call(http, f"{base}/counter/mcp", transport, "execute_code", {"code": "increment(by=4)"})
    assert "execute_code" not in names(listed) and "execute_code" not in names(plain["tools"])
    assert "execute_code" in names(coder["tools"])
    assert refused == {"ok": False, "error": "'execute_code' is not a valid tool", "reason": "not_found"}
    assert ran["output"]["blocks"][0]["text"] == '{"count": 4}'
    assert "execute_code" in names(bound.json()["result"]["tools"])
    assert json.loads(stepped["content"][0]["text"]) == {"count": 4}
