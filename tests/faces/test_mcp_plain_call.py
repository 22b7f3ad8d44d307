"""Plain `tools/call`s of 2025 protocol sessions, answered by the MCP face without the SDK's transport
(`ors_server.faces.mcp.plain_call`): byte for byte the SDK's answers, and the SDK transport kept alive."""

from __future__ import annotations

import json
import uuid
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


CURRENT = "2026-07-28"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": CURRENT, "io.modelcontextprotocol/clientCapabilities": {}}

# (params, extra headers, path under the server, names the episode by X-Session-ID) for sessionless 2026-07-28
# calls: every kind of result, and every request the SDK's own entry refuses or answers otherwise.
CURRENT_REQUESTS: list[tuple[Any, dict[str, str], str, bool]] = [
    ({"name": "increment", "arguments": {"by": 2}, "_meta": ENVELOPE}, {}, "/mcp", True),
    ({"name": "increment", "_meta": ENVELOPE}, {}, "/counter/mcp", True),
    ({"name": "increment", "arguments": {"by": "many"}, "_meta": ENVELOPE}, {}, "/mcp", True),  # isError
    ({"name": "nope", "arguments": {}, "_meta": ENVELOPE}, {}, "/mcp", True),
    ({"name": "explode", "arguments": {}, "_meta": ENVELOPE}, {}, "/mcp", True),
    ({"name": "picture", "arguments": {}, "_meta": {**ENVELOPE, "note": "x"}}, {}, "/mcp", True),
    ({"name": "increment", "arguments": {}, "_meta": ENVELOPE}, {}, "/mcp/episodes/{sid}", False),  # the URL names it
    ({"name": "increment", "arguments": {}, "_meta": ENVELOPE}, {"x-session-id": "no-such-episode"}, "/mcp", False),
    ({"name": "increment", "arguments": {}, "_meta": ENVELOPE}, {}, "/mcp", False),  # names none: the SDK's error
    ({"arguments": {}, "_meta": ENVELOPE}, {}, "/mcp", True),  # no name
    ({"name": "increment", "arguments": []}, {}, "/mcp", True),  # no envelope
    ({"name": "increment", "_meta": {**ENVELOPE, "progressToken": 3}}, {"accept": "application/json"}, "/mcp", True),
    ({"name": "increment", "_meta": ENVELOPE}, {"mcp-name": "finish"}, "/mcp", True),  # header mismatch
    ({"name": "increment", "_meta": ENVELOPE}, {"mcp-protocol-version": "2099-01-01"}, "/mcp", True),
    ({"name": "increment", "_meta": ENVELOPE}, {"content-type": "text/plain"}, "/mcp", True),
    ({"name": "increment", "_meta": ENVELOPE}, {"accept": "text/html"}, "/mcp", True),
    ({"name": "finish", "arguments": {}, "_meta": ENVELOPE}, {}, "/mcp", True),
    ({"name": "increment", "arguments": {}, "_meta": ENVELOPE}, {}, "/mcp", True),  # episode_finished
]


async def current_transcript() -> list[tuple[int, str, bytes]]:
    """Every request of CURRENT_REQUESTS on one episode made by ORS /create: status, content type and body."""
    got = []
    with server(Counter) as base:
        async with httpx.AsyncClient() as http:
            sid = f"ep-{uuid.uuid4().hex[:12]}"
            body = {"env_name": "counter", "task_spec": {"start": 0}}
            assert (await http.post(f"{base}/create", json=body, headers={"X-Session-ID": sid})).status_code == 200
            for i, (params, extra, path, named) in enumerate(CURRENT_REQUESTS):
                request = {"jsonrpc": "2.0", "id": f"r{i}" if i % 2 else i, "method": "tools/call", "params": params}
                headers = {**ACCEPT, "mcp-protocol-version": CURRENT, "mcp-method": "tools/call"}
                headers |= {"mcp-name": params["name"]} if isinstance(params.get("name"), str) else {}
                headers |= ({"x-session-id": sid} if named else {}) | extra
                url = base + path.format(sid=sid)
                response = await http.post(url, content=json.dumps(request), headers=headers)
                assert "mcp-session-id" not in response.headers
                got.append((response.status_code, response.headers.get("content-type", ""), response.content))
            duplicated = [(k, v) for k, v in headers.items() if k != "x-session-id"] + [("mcp-method", "tools/call")]
            response = await http.post(
                f"{base}/mcp", content=json.dumps(request), headers=duplicated + [("x-session-id", sid)]
            )
            got.append((response.status_code, response.headers.get("content-type", ""), response.content))
    return got


async def test_current_era_plain_calls_are_answered_byte_for_byte_as_the_sdk_answers_them(monkeypatch):
    answered: list[int] = []
    original = plain_call.current_answer

    def counted(*args: Any) -> Any:
        answered.append(1)
        return original(*args)

    monkeypatch.setattr(plain_call, "current_answer", counted)
    monkeypatch.setattr(PlainCalls, "answered", False)
    by_sdk = await current_transcript()
    assert not answered
    monkeypatch.setattr(PlainCalls, "answered", True)
    by_face = await current_transcript()
    assert by_face == by_sdk
    # The fast path answered every plain call (the no-such-episode one included), and nothing else.
    assert len(answered) == 10
    first = json.loads(by_sdk[0][2])["result"]
    assert first["content"][0]["text"] == '{"count": 2}' and first["resultType"] == "complete"
    assert first["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "ors-server"
    assert [status for status, _, _ in by_sdk[8:16]] != [200] * 8  # the SDK's refusals were compared too
