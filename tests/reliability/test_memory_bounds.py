"""What a client can make the server hold in memory beyond `--max-sessions`: task specs and replayable results.

Before: 150 sessions with ~4 MB task specs added 584 MB in 2 s (the default 10,000 sessions would be ~39 GB), and
finished calls' results kept for replay had no count or size cap (4 clients making 128 KiB shell calls for 45 s
grew the server from 88 to 718 MB). Then a 3.9 MB task spec per OpenEnv `reset` was still accepted (100 sessions
held 1.6 GB): only session creation was checked. Now a task spec or config past `max_task_spec_bytes` is refused
in the face's shape by every way a face gives one (creation, reset, re-initialize), and replayable results share
one global budget, `max_replay_chars`, oldest evicted first.
"""

from __future__ import annotations

import gc
import json
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ors_server.environments.frozen_lake import FrozenLake
from tests.ors_envs import ENVS, Live, MathLike, create, live_server, math_task, parse_sse, post_sse
from tests.reliability.reliability_envs import ACCEPT_MCP, initialize_body, mcp_open

SPEC_LIMIT = 8 * 1024
REPLAY_BUDGET = 100_000
RESULT = 40_000
"""Three results of this size overflow the budget; two fit."""


class Padded(MathLike):
    """A small request that makes a large task: the task of seed `n` carries `n` bytes of padding."""

    name = "padded"

    @classmethod
    def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        return {**math_task(0), "padding": "x" * (seed or 0)}


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    settings = {"max_task_spec_bytes": SPEC_LIMIT, "max_replay_chars": REPLAY_BUDGET, "call_linger": 60.0}
    with live_server([*ENVS, FrozenLake, Padded], **settings) as server:
        yield server


def big_spec() -> dict[str, Any]:
    return {**math_task(0), "padding": "x" * (2 * SPEC_LIMIT)}


def test_a_task_spec_over_the_limit_is_refused_with_413_on_ors_create(live):
    sid = f"big-{uuid.uuid4().hex}"
    spec = {**math_task(0), "padding": "x" * (2 * SPEC_LIMIT)}
    refused = live.client.post("/create", json={"task_spec": spec}, headers={"X-Session-ID": sid})
    assert refused.status_code == 413, refused.text
    assert "task spec" in refused.json()["detail"]
    assert sid not in live.store
    assert create(live.client, math_task(0))  # a spec under the limit is served


def test_an_mcp_config_over_the_limit_is_refused_with_413_in_json_rpc_shape(live):
    key = uuid.uuid4().hex
    body = initialize_body({"session_id": key, "config": {"padding": "x" * (2 * SPEC_LIMIT)}})
    refused = live.client.post("/frozen_lake/mcp/", json=body, headers=ACCEPT_MCP)
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"]["code"] < 0 and "config" in refused.json()["error"]["message"]
    assert key not in live.store


def test_an_mcp_re_initialize_of_a_live_session_with_a_config_over_the_limit_is_refused(live):
    key = uuid.uuid4().hex
    mcp_open(live.client, "/mathlike/mcp/", {"session_id": key, "config": {"task_spec": math_task(1)}})
    body = initialize_body({"session_id": key, "config": {"task_spec": big_spec()}})
    refused = live.client.post("/mathlike/mcp/", json=body, headers=ACCEPT_MCP)
    assert refused.status_code == 413, refused.text
    assert "config" in refused.json()["error"]["message"]
    assert live.store.get(key).task_spec == math_task(1)


def ws_url(live: Live, env: str) -> str:
    return live.url.replace("http://", "ws://") + f"/openenv/{env}/ws"


def exchange(ws: Any, frame: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(frame))
    reply: dict[str, Any] = json.loads(ws.recv(timeout=10))
    return reply


def test_an_openenv_websocket_reset_with_a_task_spec_over_the_limit_is_a_validation_error(live):
    with connect(ws_url(live, "mathlike"), open_timeout=10) as ws:
        opened = exchange(ws, {"type": "reset", "data": {"task_spec": math_task(1)}})
        assert opened["type"] == "observation", opened
        refused = exchange(ws, {"type": "reset", "data": {"task_spec": big_spec()}})
        assert refused["type"] == "error" and refused["data"]["code"] == "VALIDATION_ERROR", refused
        assert "--max-task-spec-bytes" in refused["data"]["message"]
        state = exchange(ws, {"type": "state"})
        session = live.store.get(state["data"]["episode_id"])
        assert session.task_spec == math_task(1)  # the socket and its episode are as they were


def test_an_openenv_websocket_reset_whose_seed_makes_a_task_over_the_limit_is_refused(live):
    with connect(ws_url(live, "padded"), open_timeout=10) as ws:
        refused = exchange(ws, {"type": "reset", "data": {"seed": 2 * SPEC_LIMIT}})
        assert refused["type"] == "error" and "task spec" in refused["data"]["message"], refused
        assert exchange(ws, {"type": "reset", "data": {"seed": 10}})["type"] == "observation"


def test_an_openenv_http_reset_with_a_task_spec_over_the_limit_is_a_413(live):
    refused = live.client.post("/openenv/mathlike/reset", json={"task_spec": big_spec()})
    assert refused.status_code == 413 and "--max-task-spec-bytes" in refused.json()["detail"], refused.text
    assert live.client.post("/openenv/mathlike/reset", json={"task_spec": math_task(1)}).status_code == 200


def test_a_control_plane_reset_whose_seed_makes_a_task_over_the_limit_is_refused_in_its_shape(live):
    key = uuid.uuid4().hex
    headers = {"mcp-session-id": key}
    assert live.client.get("/padded/control/initial_state", headers=headers).status_code == 200
    refused = live.client.post("/padded/control/reset_session", json={"seed": 2 * SPEC_LIMIT}, headers=headers)
    assert refused.status_code == 413, refused.text
    assert "task spec" in refused.json()["error"]
    assert len(live.store.get(key).task_spec["padding"]) == 0


def echo(client: httpx.Client, sid: str, text: str) -> str:
    response, raw = post_sse(client, "/mathlike/call", {"name": "echo", "input": {"text": text}}, sid)
    assert response.status_code == 200
    return parse_sse(raw)[0].data


def replay(client: httpx.Client, sid: str, task_id: str) -> list[str]:
    body = {"name": "echo", "input": {"text": ""}, "task_id": task_id}
    _, raw = post_sse(client, "/mathlike/call", body, sid)
    return [event.name for event in parse_sse(raw)]


def test_replayable_results_share_one_budget_and_the_oldest_are_forgotten_first(live):
    # Three sessions: the budget is the server's, not a session's.
    calls = []
    for letter in "abc":
        sid = create(live.client, math_task(0))
        calls.append((sid, echo(live.client, sid, letter * RESULT)))
    (oldest_sid, oldest), *newer = calls
    assert replay(live.client, oldest_sid, oldest) == ["error"], "the oldest result outlived the budget"
    for sid, task_id in newer:
        assert replay(live.client, sid, task_id)[-1] == "end"


def test_an_ended_episode_is_let_go_though_its_calls_ended_within_the_linger(live):
    # A finished call is kept for replay (`call_linger`, 60 s here) only while a replay can name it: once its
    # episode ended, keeping it would keep the episode, its session and its environment for the linger.
    sid = create(live.client, math_task(0))
    assert post_sse(live.client, "/mathlike/call", {"name": "noargs", "input": {}}, sid)[0].status_code == 200
    episode = weakref.ref(live.app.state.store.get(sid).episode)
    assert live.client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200
    deadline = time.monotonic() + 10  # its teardown and the records' writer finish with it first
    while episode() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
        gc.collect()
    assert episode() is None, gc.get_referrers(episode())
