"""The TypeScript MCP SDK (@modelcontextprotocol/sdk 1.32, an npm install of its own) in its default mode against
`ors-server serve`, on one process and through `--workers 2`: it plays FrozenLake through an episode URL, through
`X-Session-ID` and through its protocol session at `/frozen_lake/mcp` and `/mcp` (2025-11-25, the newest era it
speaks), and reads the rewards from `structuredContent`, next to the unchanged text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.clients.harness import run_script, run_server

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", params=["one process", "--workers 2"])
def episodes(request, mcp_ts_sdk, tmp_path_factory) -> dict:
    # FrozenLake is the only environment, so the default one: `/mcp` serves it too.
    args = ("--env", "frozen_lake", *(("--workers", "2") if request.param == "--workers 2" else ()))
    with run_server(tmp_path_factory.mktemp("server"), *args) as server:
        node = Path(shutil.which("node") or "node")
        home = tmp_path_factory.mktemp("mcp-ts")
        return run_script(node, "mcp_ts_episode.mjs", str(mcp_ts_sdk), server.url, home=home, server=server)


@pytest.mark.parametrize("way", ["episode_url", "x_session_id", "protocol_session", "plain_default_url"])
def test_the_typescript_sdk_plays_frozen_lake_and_reads_rewards_from_structured_content(episodes, way):
    played = episodes[way]
    assert played["protocol_version"] == "2025-11-25"
    assert played["session_id"]  # the 2025 era's protocol session, whichever way the episode was named
    steps = played["steps"]
    outcome = [(s["structured"]["reward"], s["structured"]["finished"]) for s in steps]
    assert outcome == [(0.0, False)] * (len(steps) - 1) + [(1.0, True)]
    for step in steps:
        observation = json.loads(step["text"])
        rewarded = {"reward": step["structured"]["reward"], "finished": step["structured"]["finished"]}
        assert step["structured"] == {**observation, **rewarded}
