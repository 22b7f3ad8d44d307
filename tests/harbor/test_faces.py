"""A Harbor task is an episode on every face: MCP in both eras (episode URL; Eval Protocol's `initialize`), the
control plane, OpenEnv's session channel; and its episodes are recorded and read back as any other."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client
from websockets.sync.client import connect

from tests.faces.mcp_helpers import call, raw_initialize
from tests.harbor.harbor_helpers import START_WAIT, Episode, harbor_server, solution, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    records = Path(tmp_path_factory.mktemp("records")) / "episodes.db"
    with harbor_server(harbor_pool=1, records=str(records), ready_wait=60.0) as client:
        yield client


async def test_an_mcp_client_of_the_current_era_solves_a_task_through_its_episode_url(live):
    episode = Episode(live, "answer-file")
    base = str(live.base_url).rstrip("/")
    async with Client(f"{base}/tb/mcp/episodes/{episode.sid}") as client:
        prompt = (await client.get_prompt("task")).messages[0].content.text
        shell = await client.call_tool("bash", {"command": solution("answer-file")})
        graded = await client.call_tool("submit", {})
    episode.delete()
    assert prompt.startswith("Write the number 42")
    assert shell.structured_content["finished"] is False and not shell.is_error
    assert (graded.structured_content["reward"], graded.structured_content["finished"]) == (1.0, True)
    assert "reward: 1" in graded.content[0].text


async def test_an_eval_protocol_session_plays_over_mcp_2025_and_the_control_plane_reads_its_end(live):
    base = str(live.base_url).rstrip("/")
    sid = f"ep-{uuid.uuid4().hex[:10]}"
    extra = {"session_id": sid, "seed": 0, "config": {"task_spec": {"name": "column-sum"}}}
    async with httpx.AsyncClient(timeout=START_WAIT) as http:
        opened = await raw_initialize(http, f"{base}/tb/mcp", extra)
        assert opened.status_code == 200, opened.text
        transport = opened.headers["mcp-session-id"]
        header = {"mcp-session-id": sid}
        state = (await http.get(f"{base}/tb/control/initial_state", headers=header)).json()
        shell = await call(http, f"{base}/tb/mcp", transport, "bash", {"command": solution("column-sum")})
        graded = await call(http, f"{base}/tb/mcp", transport, "submit")
        reward = (await http.get(f"{base}/tb/control/reward", headers=header)).json()
        status = (await http.get(f"{base}/tb/control/status", headers=header)).json()
        await http.delete(f"{base}/tb/mcp", headers={"mcp-session-id": transport})
    assert "numbers.csv" in json.dumps(state)
    assert shell["isError"] is False
    assert graded["structuredContent"]["reward"] == 1.0
    assert reward["reward"] == 1.0
    assert status["terminated"] is True and status["truncated"] is False


def test_an_openenv_client_resets_a_task_steps_bash_and_submit_and_is_done(live):
    url = str(live.base_url).rstrip("/").replace("http://", "ws://") + "/openenv/tb/ws"
    with connect(url, open_timeout=30) as ws:

        def ask(frame: dict) -> dict:
            ws.send(json.dumps(frame))
            return json.loads(ws.recv(timeout=START_WAIT))

        reset = ask({"type": "reset", "data": {"task_spec": {"name": "needs-marker"}}})
        step = {"type": "call_tool", "tool_name": "bash", "arguments": {"command": solution("needs-marker")}}
        shell = ask({"type": "step", "data": step})
        graded = ask({"type": "step", "data": {"type": "call_tool", "tool_name": "submit", "arguments": {}}})
    assert reset["type"] == "observation", reset
    assert "/srv/site" in json.dumps(reset["data"]["observation"])
    assert (shell["data"]["reward"], shell["data"]["done"]) == (0.0, False)
    assert (graded["data"]["reward"], graded["data"]["done"]) == (1.0, True)


def test_an_episode_is_recorded_with_its_calls_and_reward(live):
    episode = Episode(live, "offline")
    episode.bash(solution("offline"))
    assert episode.submit()["reward"] == 1.0
    episode.delete()

    def recorded() -> dict | None:
        listed = live.get("/episodes", params={"env": "tb"}).json()
        return next((item for item in listed["episodes"] if item.get("session_id") == episode.sid), None)

    wait_for(lambda: recorded() is not None, 30, "the episode's record")
    summary = recorded()
    assert summary is not None
    shown = live.get(f"/episodes/{summary['id']}").json()
    assert [call["tool"] for call in shown["calls"]] == ["bash", "submit"]
    assert shown["calls"][-1]["output"]["reward"] == 1.0
    assert (shown["reward"], shown["finished"], shown["task"]["name"]) == (1.0, True, "offline")
    assert live.get("/ui").status_code == 200
