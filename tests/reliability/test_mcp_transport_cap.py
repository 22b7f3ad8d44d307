"""MCP transports are bounded per episode, not only per server.

Before: the transport cap counted connections, so 50 `initialize` requests bound to one ORS session filled it
and other clients got 503 while the store held one session. Now a session takes at most
`max_mcp_transports_per_session` transports; one more is refused with 429 as a JSON-RPC error until one closes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from ors_server.environments.frozen_lake import FrozenLake
from tests.ors_envs import Live, live_server
from tests.reliability.reliability_envs import ACCEPT_MCP, initialize_body, mcp_open

LIMIT = 2
URL = "/frozen_lake/mcp/"


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server([FrozenLake], max_mcp_transports_per_session=LIMIT) as server:
        yield server


def test_one_more_transport_than_the_limit_on_one_session_is_429_until_one_closes(live):
    key = uuid.uuid4().hex
    transports = [mcp_open(live.client, URL, {"session_id": key}) for _ in range(LIMIT)]
    refused = live.client.post(URL, json=initialize_body({"session_id": key}), headers=ACCEPT_MCP)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] < 0
    assert "mcp-session-id" not in refused.headers

    # Other episodes are not affected, and closing a transport makes room.
    other = mcp_open(live.client, URL, {"session_id": uuid.uuid4().hex})
    gone = live.client.delete(URL, headers={**ACCEPT_MCP, "mcp-session-id": transports[0]})
    assert gone.status_code in (200, 204)
    assert mcp_open(live.client, URL, {"session_id": key})
    for transport in [*transports[1:], other]:
        live.client.delete(URL, headers={**ACCEPT_MCP, "mcp-session-id": transport})


def test_the_limit_holds_for_transports_opened_at_once(live):
    import concurrent.futures

    import httpx

    key = uuid.uuid4().hex

    def initialize(_: int) -> int:
        with httpx.Client(base_url=live.url, timeout=15) as client:
            return client.post(URL, json=initialize_body({"session_id": key}), headers=ACCEPT_MCP).status_code

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(initialize, range(6)))
    assert statuses.count(200) == LIMIT, statuses
    assert statuses.count(429) == 6 - LIMIT, statuses
