"""A session reaped for inactivity answers 410 on every face, in the face's own shape, with a message saying it
expired after `--session-timeout` seconds; an id that never existed still answers 404."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from websockets.sync.client import connect

from ors_server.environments import BUILTIN_ENVIRONMENTS
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.faces.mcp_helpers import mcp_http_client, text
from tests.serving import serve

TIMEOUT = 1.0
EXPIRED = "expired after 1 s of inactivity"


def reaped_count(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith('ors_sessions_total{event="reaped"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def reaped() -> Iterator[tuple[httpx.Client, str]]:
    """A server with a 1 s idle timeout, and the id of a frozen_lake session it has reaped."""
    app = create_app(BUILTIN_ENVIRONMENTS, Settings(session_timeout=TIMEOUT))
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        before = reaped_count(client)
        sid = f"idle-{uuid.uuid4().hex}"
        created = client.post(
            "/create", json={"env_name": "frozen_lake", "task_spec": {"seed": 42}}, headers={"X-Session-ID": sid}
        )
        assert created.status_code == 200, created.text
        # Watch the reaper through /metrics: any request naming the session would keep it alive.
        deadline = time.monotonic() + 10 * TIMEOUT
        while reaped_count(client) == before:
            assert time.monotonic() < deadline, "the session was not reaped"
            time.sleep(0.05)
        yield client, sid


def test_ors_answers_a_reaped_id_410_saying_it_expired(reaped: tuple[httpx.Client, str]) -> None:
    client, sid = reaped
    detail = {"detail": f"Session {EXPIRED} (--session-timeout)"}
    headers = {"X-Session-ID": sid}
    ping = client.post("/ping", headers=headers)
    call = client.post("/frozen_lake/call", json={"name": "lake_move", "input": {"action": "DOWN"}}, headers=headers)
    prompt = client.get("/frozen_lake/prompt", headers=headers)
    for response in (ping, call, prompt):
        assert (response.status_code, response.json()) == (410, detail), response.text
    never = client.post("/ping", headers={"X-Session-ID": f"never-{uuid.uuid4().hex}"})
    assert (never.status_code, never.json()) == (404, {"detail": "Active environment not found"})


def test_the_control_plane_answers_a_reaped_id_410_saying_it_expired(reaped: tuple[httpx.Client, str]) -> None:
    client, sid = reaped
    # (`initial_state` is get-or-create, as Eval Protocol may ask it before `initialize`: it opens a new episode.)
    for path in ("/frozen_lake/control/status", "/frozen_lake/control/reward", "/control/info"):
        response = client.get(path, headers={"mcp-session-id": sid})
        assert (response.status_code, response.json()) == (410, {"error": f"Session {sid} {EXPIRED}"}), path


def test_openenv_answers_a_reaped_id_with_a_session_error_saying_it_expired(reaped: tuple[httpx.Client, str]) -> None:
    client, sid = reaped
    message = f"Session {sid} {EXPIRED} (--session-timeout)"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    body["params"] = {"name": "lake_move", "arguments": {"action": "DOWN"}, "session_id": sid}
    reply = client.post("/openenv/frozen_lake/mcp", json=body).json()
    assert reply["error"]["code"] == -32602 and reply["error"]["message"] == message
    url = str(client.base_url).replace("http://", "ws://") + f"/openenv/frozen_lake/ws?session_id={sid}"
    with connect(url, open_timeout=10) as ws:
        frame = json.loads(ws.recv(timeout=10))
    assert frame == {"type": "error", "data": {"message": message, "code": "SESSION_ERROR"}}


@pytest.mark.anyio
async def test_mcp_answers_a_call_naming_a_reaped_id_with_is_error_saying_it_expired(
    reaped: tuple[httpx.Client, str],
) -> None:
    client, sid = reaped
    named = mcp_http_client(headers={"X-Session-ID": sid})
    transport = streamable_http_client(f"{client.base_url}/frozen_lake/mcp", http_client=named)
    async with named, Client(transport, mode="2026-07-28") as mcp:
        result = await mcp.call_tool("lake_move", {"action": "DOWN"})
    assert result.is_error
    assert text(result) == f"Session {sid} {EXPIRED}: initialize a new MCP session."
