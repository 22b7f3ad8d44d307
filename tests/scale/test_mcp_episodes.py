"""MCP 2026-07-28 through `ors-server serve --workers 2`: the front routes an episode URL and `X-Session-ID` to the
worker that owns the session, and `server/discover` is answered through it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.methods import validate_server_result

from tests.faces.mcp_helpers import mcp_http_client, play_lake
from tests.faces.test_mcp_eras import discover
from tests.scale.deployment import Deployment, deployment

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    args = ("--env", "frozen_lake", "--env", "tests.ors_envs:MathLike", "--log-level", "warning")
    with deployment(tmp_path_factory.mktemp("mcp"), *args) as running:
        yield running


async def lake_sessions(http: httpx.AsyncClient, front: Deployment, count: int = 4) -> list[str]:
    """Sessions created over ORS until both workers hold some (placement is by load)."""
    sids = []
    for seed in range(count):
        sid = f"ep-{uuid.uuid4().hex[:12]}"
        body = {"env_name": "frozen_lake", "task_spec": {"seed": seed}}
        assert (await http.post("/create", json=body, headers={"X-Session-ID": sid})).status_code == 200
        sids.append(sid)
    assert {front.holder(sid) for sid in sids} == {0, 1}
    return sids


async def test_discover_through_the_front(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        for path, newest in (("/mcp", "2025-11-25"), ("/frozen_lake/mcp/episodes/x", "2026-07-28")):
            answer = await discover(http, path)
            assert answer.status_code == 200, answer.text
            validate_server_result("server/discover", "2026-07-28", answer.json()["result"])
            assert answer.json()["result"]["supportedVersions"][-1] == newest  # the current era where it is named


async def test_episode_urls_reach_the_owning_worker_on_either_worker(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        sids = await lake_sessions(http, front)
    for sid in sids:
        async with Client(f"{front.url}/frozen_lake/mcp/episodes/{sid}") as client:
            assert client.session.protocol_version == "2026-07-28"
            await play_lake(client)


async def test_x_session_id_reaches_the_owning_worker_on_either_worker(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        sids = await lake_sessions(http, front)
    for sid in sids:
        named = mcp_http_client(headers={"X-Session-ID": sid})
        async with named, Client(streamable_http_client(f"{front.url}/mcp", http_client=named)) as client:
            await play_lake(client)


async def test_a_2025_client_initializing_on_an_episode_url_is_routed_to_its_owner(front):
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        # Grouped by worker, so that placing by load (which alternates between equal workers) cannot pass for routing.
        sids = sorted(await lake_sessions(http, front), key=front.holder)
        prompts = [(await http.get("/prompt", headers={"X-Session-ID": sid})).json()[0]["text"] for sid in sids]
    for sid, prompt in zip(sids, prompts, strict=True):
        async with Client(f"{front.url}/mcp/episodes/{sid}", mode="legacy") as client:
            # The episode created over ORS (its seeded map), not a new one on another worker under the same id.
            assert (await client.get_prompt("task")).messages[0].content.text == prompt
            await play_lake(client)


async def test_progress_notifications_reach_the_client_through_the_front_from_either_worker(front):
    """A current-era call with a progress token is answered as an event stream, which the front relays."""
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        sids = []
        for _ in range(4):
            sid = f"pr-{uuid.uuid4().hex[:12]}"
            body = {"env_name": "mathlike", "task_spec": {"question": "1+1", "answer": "2"}}
            assert (await http.post("/create", json=body, headers={"X-Session-ID": sid})).status_code == 200
            sids.append(sid)
    assert {front.holder(sid) for sid in sids} == {0, 1}
    for sid in sids:
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))  # noqa: B023 (each client is done before the loop moves on)

        async with Client(f"{front.url}/mathlike/mcp/episodes/{sid}") as client:
            result = await client.call_tool("count", {"steps": 5}, progress_callback=on_progress)
        assert result.structured_content == {"reward": 1.0, "finished": False}
        assert seen == [(float(n), 5.0, f"step {n}") for n in range(1, 6)]
