"""Plain `tools/call`s of 2025 protocol sessions, answered by the MCP face without the SDK's transport
(`ors_server.faces.mcp.plain_call`): byte for byte the SDK's answers, and the SDK transport kept alive."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from ors_server.faces.mcp import plain_call
from ors_server.faces.mcp.plain_call import PlainCalls
from tests.faces.mcp_helpers import ACCEPT, Counter, call, raw_initialize, server

pytestmark = pytest.mark.anyio

VERSIONS = ["2025-03-26", "2025-06-18", "2025-11-25"]

# (params, extra headers): every kind of result and every request the fast path must leave to the SDK.
REQUESTS: list[tuple[Any, dict[str, str]]] = [
    ({"name": "increment", "arguments": {"by": 2}}, {}),
    ({"name": "increment"}, {}),  # no arguments: the model's defaults
    ({"name": "increment", "arguments": None}, {}),
    ({"name": "increment", "arguments": {"by": "many"}}, {}),  # input_validation: an isError result
    ({"name": "nope", "arguments": {}}, {}),  # not_found
    ({"name": "explode", "arguments": {}}, {}),  # the tool raises
    ({"name": "picture", "arguments": {}}, {}),  # image content
    ({"name": "increment", "arguments": {"by": 1}, "_meta": {"note": "x"}}, {}),
    ({"arguments": {}}, {}),  # no name: the SDK's invalid-params error
    ({"name": 7, "arguments": {}}, {}),
    ({"name": "increment", "arguments": []}, {}),
    ({"name": "increment", "arguments": {}}, {"content-type": "text/plain"}),  # the SDK's 415
    ({"name": "increment", "arguments": {}}, {"accept": "text/html"}),  # the SDK's 406
    ({"name": "increment", "arguments": {}}, {"mcp-protocol-version": "2024-01-01"}),  # another era's answer
    ({"name": "finish", "arguments": {}}, {}),  # finished
    ({"name": "increment", "arguments": {}}, {}),  # episode_finished
]


async def transcript(version: str, answered_plainly: list[int]) -> list[tuple[int, str, bytes]]:
    """Every request of REQUESTS on one session of protocol `version`: status, content type and body."""
    got = []
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            body = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            }
            opened = await http.post(f"{base}/mcp/", json=body, headers=ACCEPT)
            sid = opened.headers["mcp-session-id"]
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(f"{base}/mcp/", json=note, headers={**ACCEPT, "mcp-session-id": sid})
            for i, (params, extra) in enumerate(REQUESTS):
                request = {"jsonrpc": "2.0", "id": f"r{i}" if i % 2 else i, "method": "tools/call", "params": params}
                headers = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": version, **extra}
                response = await http.post(f"{base}/mcp/", content=json.dumps(request), headers=headers)
                assert response.headers.get("mcp-session-id") in (sid, None)
                got.append((response.status_code, response.headers.get("content-type", ""), response.content))
    return got


@pytest.mark.parametrize("version", VERSIONS)
async def test_plain_calls_are_answered_byte_for_byte_as_the_sdk_answers_them(version, monkeypatch):
    answered: list[int] = []
    original = plain_call.answer

    def counted(*args: Any) -> Any:
        answered.append(1)
        return original(*args)

    monkeypatch.setattr(plain_call, "answer", counted)
    monkeypatch.setattr(PlainCalls, "answered", False)
    by_sdk = await transcript(version, answered)
    assert not answered
    monkeypatch.setattr(PlainCalls, "answered", True)
    by_face = await transcript(version, answered)
    assert by_face == by_sdk
    # The fast path answered every plain call, and nothing else.
    assert len(answered) == 10
    assert by_sdk[0][0] == 200 and json.loads(by_sdk[0][2])["result"]["content"][0]["text"] == '{"count": 2}'
    assert [status for status, _, _ in by_sdk[8:14]] != [200] * 6  # the SDK's refusals were compared too


async def test_a_transport_that_only_calls_tools_outlives_the_sdks_idle_timeout():
    # The SDK ends a transport with no request in flight for `session_timeout`; calls it never sees must hold it.
    with server(Counter, session_timeout=1.0) as base:
        async with httpx.AsyncClient() as http:
            sid = (await raw_initialize(http, f"{base}/mcp/")).headers["mcp-session-id"]
            for expected in range(1, 9):  # 8 calls over ~2.4 s: more than twice the idle timeout
                result = await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
                assert json.loads(result["content"][0]["text"]) == {"count": expected}
                await anyio.sleep(0.3)
