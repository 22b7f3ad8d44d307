"""What a client can make the server hold in memory beyond `--max-sessions`: task specs and replayable results.

Before: 150 sessions with ~4 MB task specs added 584 MB in 2 s (the default 10,000 sessions would be ~39 GB), and
finished calls' results kept for replay had no count or size cap (4 clients making 128 KiB shell calls for 45 s
grew the server from 88 to 718 MB). Now a task spec or MCP config past `max_task_spec_bytes` is refused with 413
in the face's shape, and replayable results share one global budget, `max_replay_chars`, oldest evicted first.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from environments.frozen_lake import FrozenLake
from tests.ors_envs import ENVS, Live, create, live_server, math_task, parse_sse, post_sse
from tests.reliability.reliability_envs import ACCEPT_MCP, initialize_body

SPEC_LIMIT = 8 * 1024
REPLAY_BUDGET = 100_000
RESULT = 40_000
"""Three results of this size overflow the budget; two fit."""


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    settings = {"max_task_spec_bytes": SPEC_LIMIT, "max_replay_chars": REPLAY_BUDGET, "call_linger": 60.0}
    with live_server([*ENVS, FrozenLake], **settings) as server:
        yield server


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
