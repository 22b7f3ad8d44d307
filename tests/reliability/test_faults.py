"""Faults: environments that raise or hang, a full server, and the optional API key, over real HTTP."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from ors_server.environments.frozen_lake import FrozenLake
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.ors_envs import gate, journal, new_tag, release_all
from tests.reliability.reliability_envs import (
    ACCEPT_MCP,
    Faulty,
    initialize_body,
    mcp_call,
    mcp_open,
    ors_call,
    ors_result,
)
from tests.serving import serve

FAST = {"ready_wait": 0.3, "sse_keepalive": 0.2, "shutdown_grace": 1.0, "teardown_timeout": 5.0}


@contextlib.contextmanager
def live(**settings: Any) -> Iterator[httpx.Client]:
    app = create_app([Faulty, FrozenLake], Settings(**{**FAST, **settings}))
    try:
        with serve(app) as url, httpx.Client(base_url=url, timeout=15) as client:
            yield client
    finally:
        release_all()


def create(client: httpx.Client, tag: str, headers: dict[str, str] | None = None, **task: str) -> str:
    sid = f"fault-{uuid.uuid4().hex}"
    body = {"env_name": "faulty", "task_spec": {"tag": tag, **task}, "secrets": {"TOKEN": "hunter2-secret"}}
    response = client.post("/create", json=body, headers={"X-Session-ID": sid, **(headers or {})})
    assert response.status_code == 200, response.text
    return sid


def test_a_raising_setup_fails_prompt_and_call_with_a_redacted_5xx_and_delete_still_tears_down():
    tag = new_tag()
    with live() as client:
        sid = create(client, tag, setup="raise")
        headers = {"X-Session-ID": sid}
        prompt = client.get("/faulty/prompt", headers=headers)
        called = client.post("/faulty/call", json={"name": "note", "input": {"text": "x"}}, headers=headers)
        for response in (prompt, called):
            assert response.status_code == 500
            assert "setup exploded" in response.json()["detail"]
            assert "hunter2-secret" not in response.text
        assert client.post("/delete", headers=headers).status_code == 200
        assert client.post("/ping", headers=headers).status_code == 410
    assert journal(tag).count("teardown-end") == 1
    assert "note" not in journal(tag)


def test_a_hanging_setup_answers_503_starting_and_delete_does_not_wait_for_it():
    tag = new_tag()
    with live() as client:
        sid = create(client, tag, setup="hang")
        headers = {"X-Session-ID": sid}
        prompt = client.get("/faulty/prompt", headers=headers)
        assert prompt.status_code == 503 and "detail" in prompt.json()
        assert prompt.headers["retry-after"] and prompt.headers["x-backend-state"] == "starting"
        started = time.monotonic()
        assert client.post("/delete", headers=headers).status_code == 200
        assert time.monotonic() - started < 3
        assert client.post("/ping", headers=headers).status_code == 410
        gate(tag).set()
    assert journal(tag).count("teardown-end") == 1


def test_a_raising_tool_is_contained_to_its_call_on_ors_and_mcp():
    tag = new_tag()
    with live() as client:
        sid = create(client, tag)
        events = ors_call(client, sid, "boom", {}, "faulty")
        assert [name for name, _ in events] == ["task_id", "error"]
        assert "tool exploded" in events[-1][1]
        assert ors_result(ors_call(client, sid, "note", {"text": "after"}, "faulty"))["ok"]

        config = {"task_spec": {"tag": tag}}
        transport = mcp_open(client, "/faulty/mcp/", {"session_id": uuid.uuid4().hex, "config": config})
        crashed = mcp_call(client, "/faulty/mcp/", transport, "boom", {})
        assert crashed["isError"] and "tool exploded" in crashed["content"][0]["text"]
        assert not mcp_call(client, "/faulty/mcp/", transport, "note", {"text": "after"})["isError"]
        client.delete("/faulty/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})
        client.post("/delete", headers={"X-Session-ID": sid})


def _until_ok(attempt: Any, within: float = 10.0) -> Any:
    """Call `attempt` until it returns something truthy (a call refused while a timed-out one runs on)."""
    deadline = time.monotonic() + within
    while not (result := attempt()):
        assert time.monotonic() < deadline, "still refused"
        time.sleep(0.05)
    return result


def test_a_hanging_async_tool_fails_that_call_after_tool_timeout_and_the_session_stays_usable():
    tag = new_tag()
    with live(tool_timeout=0.5) as client:
        sid = create(client, tag)
        started = time.monotonic()
        result = ors_result(ors_call(client, sid, "hang_async", {}, "faulty"))
        assert time.monotonic() - started < 5
        assert result["ok"] is False and "did not finish" in result["error"]
        after = ors_result(ors_call(client, sid, "note", {"text": "still here"}, "faulty"))
        assert after["ok"] and json.loads(after["output"]["blocks"][0]["text"]) == {"note": "still here"}

        key = uuid.uuid4().hex
        transport = mcp_open(client, "/faulty/mcp/", {"session_id": key, "config": {"task_spec": {"tag": tag}}})
        timed_out = mcp_call(client, "/faulty/mcp/", transport, "hang_async", {})
        assert timed_out["isError"] and "did not finish" in timed_out["content"][0]["text"]
        reward = client.get("/faulty/control/reward", headers={"mcp-session-id": key}).json()
        assert reward == {"reward": 0.0, "step_count": 0}
        assert not mcp_call(client, "/faulty/mcp/", transport, "note", {"text": "again"})["isError"]
        client.delete("/faulty/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})


def test_a_sync_tool_past_tool_timeout_fails_that_call_and_the_session_is_busy_until_its_thread_ends():
    # A thread cannot be stopped: the next call must never run alongside it, so it is refused at once.
    ors_tag, mcp_tag = new_tag(), new_tag()
    with live(tool_timeout=0.5) as client:
        sid = create(client, ors_tag)
        started = time.monotonic()
        result = ors_result(ors_call(client, sid, "hang", {}, "faulty"))
        assert time.monotonic() - started < 5
        assert result["ok"] is False and "did not finish" in result["error"]
        busy = ors_result(ors_call(client, sid, "note", {"text": "too soon"}, "faulty"))
        assert busy["ok"] is False and "still running" in busy["error"]
        gate(ors_tag).set()
        after = _until_ok(lambda: ors_result(ors_call(client, sid, "note", {"text": "now"}, "faulty"))["ok"])
        assert after is True
        assert journal(ors_tag).count("note") == 1

        key = uuid.uuid4().hex
        transport = mcp_open(client, "/faulty/mcp/", {"session_id": key, "config": {"task_spec": {"tag": mcp_tag}}})
        timed_out = mcp_call(client, "/faulty/mcp/", transport, "hang", {})
        assert timed_out["isError"] and "did not finish" in timed_out["content"][0]["text"]
        refused = mcp_call(client, "/faulty/mcp/", transport, "note", {"text": "too soon"})
        assert refused["isError"] and "still running" in refused["content"][0]["text"]
        reward = client.get("/faulty/control/reward", headers={"mcp-session-id": key}).json()
        assert reward == {"reward": 0.0, "step_count": 0}
        gate(mcp_tag).set()
        _until_ok(lambda: not mcp_call(client, "/faulty/mcp/", transport, "note", {"text": "again"})["isError"])
        client.delete("/faulty/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})
        client.post("/delete", headers={"X-Session-ID": sid})


def test_a_hanging_teardown_is_bounded_by_teardown_timeout_and_the_session_is_still_removed(caplog):
    caplog.set_level(logging.ERROR, logger="ors_server.sessions")
    tag = new_tag()
    with live(teardown_timeout=0.5) as client:
        sid = create(client, tag, teardown="hang")
        assert client.get("/faulty/prompt", headers={"X-Session-ID": sid}).status_code == 200
        started = time.monotonic()
        assert client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200
        assert time.monotonic() - started < 3
        assert client.post("/ping", headers={"X-Session-ID": sid}).status_code == 410
        assert client.get("/metrics").status_code == 200
    assert journal(tag).count("teardown-start") == 1
    assert any("teardown failed" in r.getMessage() and "TimeoutError" in r.getMessage() for r in caplog.records)


def test_a_raising_teardown_is_logged_redacted_and_the_session_removed(caplog):
    caplog.set_level(logging.ERROR, logger="ors_server.sessions")
    tag = new_tag()
    with live() as client:
        sid = create(client, tag, teardown="raise")
        assert client.get("/faulty/prompt", headers={"X-Session-ID": sid}).status_code == 200
        assert client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200
        assert client.post("/ping", headers={"X-Session-ID": sid}).status_code == 410
        assert ors_result(ors_call(client, create(client, new_tag()), "note", {"text": "x"}, "faulty"))["ok"]
    failures = [r.getMessage() for r in caplog.records if "teardown failed" in r.getMessage()]
    assert len(failures) == 1 and "teardown exploded" in failures[0]
    assert "hunter2-secret" not in caplog.text
    assert journal(tag).count("teardown-start") == 1


def test_at_max_sessions_every_face_refuses_new_sessions_with_503_and_retry_after():
    with live(max_sessions=2) as client:
        first, _second = create(client, new_tag()), create(client, new_tag())
        full = client.post("/create", json={"env_name": "faulty", "task_spec": {}}, headers={"X-Session-ID": "third"})
        assert full.status_code == 503 and "detail" in full.json() and full.headers["retry-after"]

        for extra in ({"session_id": uuid.uuid4().hex, "seed": 1}, None):
            refused = client.post("/frozen_lake/mcp/", json=initialize_body(extra), headers=ACCEPT_MCP)
            assert refused.status_code == 503 and refused.headers["retry-after"], refused.text
            assert refused.json()["error"]["code"] and "mcp-session-id" not in refused.headers

        state = client.get("/frozen_lake/control/initial_state", headers={"mcp-session-id": uuid.uuid4().hex})
        assert state.status_code == 503 and "error" in state.json() and state.headers["retry-after"]

        assert client.post("/delete", headers={"X-Session-ID": first}).status_code == 200
        key = uuid.uuid4().hex
        transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": key, "seed": 42})
        assert not mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": "DOWN"})["isError"]
        assert client.get("/metrics").status_code == 200


AUTH_REQUESTS = [
    ("ors", "GET", "/list_environments", None, {}),
    ("ors", "POST", "/create", {"env_name": "faulty", "task_spec": {}}, {"X-Session-ID": "auth-probe"}),
    ("ors", "GET", "/openapi.json", None, {}),
    ("ors", "GET", "/metrics", None, {}),
    ("control", "GET", "/frozen_lake/control/reward", None, {"mcp-session-id": "auth-key"}),
    ("mcp", "POST", "/frozen_lake/mcp/", initialize_body({"session_id": "auth-mcp"}), ACCEPT_MCP),
]


def face_shaped(face: str, body: dict[str, Any]) -> bool:
    if face == "ors":
        return "detail" in body
    if face == "control":
        return "error" in body
    return body.get("jsonrpc") == "2.0" and "error" in body


def test_with_an_api_key_every_face_answers_401_in_its_shape_without_it_and_serves_with_it():
    with live(api_key="k") as client:
        health = client.get("/health")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert client.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": "auth-key"}).status_code == 401
        client.post(
            "/create",
            json={"env_name": "frozen_lake", "task_spec": {"seed": 42}},
            headers={"X-Session-ID": "auth-key", "X-API-Key": "k"},
        )
        for face, method, path, body, headers in AUTH_REQUESTS:
            for wrong in ({}, {"Authorization": "Bearer nope"}, {"X-API-Key": "K"}, {"Authorization": "k"}):
                response = client.request(method, path, json=body, headers={**headers, **wrong})
                assert response.status_code == 401, (path, wrong, response.text)
                assert face_shaped(face, response.json()), (path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
            for right in ({"Authorization": "Bearer k"}, {"X-API-Key": "k"}):
                response = client.request(method, path, json=body, headers={**headers, **right})
                assert response.status_code == 200, (path, right, response.text)
                if face == "ors" and method == "POST":
                    client.post("/delete", headers={**headers, **right})
        assert client.request("POST", "/create", headers={"X-Session-ID": "x"}).status_code == 401


def test_without_an_api_key_the_key_headers_are_ignored():
    with live() as client:
        for headers in ({}, {"Authorization": "Bearer whatever"}, {"X-API-Key": "whatever"}):
            assert client.get("/list_environments", headers=headers).status_code == 200
