"""The TypeScript MCP SDK (@modelcontextprotocol/sdk 1.32, an npm install of its own) in its default mode against
`ors-server serve`, on one process and through `--workers 2`: it plays FrozenLake through an episode URL, through
`X-Session-ID` and through its protocol session at `/frozen_lake/mcp` and `/mcp` (2025-11-25, the newest era it
speaks), and reads the rewards from `structuredContent`, next to the unchanged text. Its successor's client
(@modelcontextprotocol/client 2.4) in its auto mode, which probes `server/discover`, adopts 2026-07-28 where an
episode is named and the 2025 era at the plain URLs, playing a whole episode either way."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.harness import Server, run_script, run_server

pytestmark = pytest.mark.clients

NODE = Path(shutil.which("node") or "node")


@pytest.fixture(scope="module", params=["one process", "--workers 2"])
def served(request, tmp_path_factory) -> Iterator[Server]:
    # FrozenLake is the only environment, so the default one: `/mcp` serves it too.
    args = ("--env", "frozen_lake", *(("--workers", "2") if request.param == "--workers 2" else ()))
    with run_server(tmp_path_factory.mktemp("server"), *args) as server:
        yield server


@pytest.fixture(scope="module")
def episodes(served, mcp_ts_sdk, tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("mcp-ts")
    return run_script(NODE, "mcp_ts_episode.mjs", str(mcp_ts_sdk), served.url, home=home, server=served)


@pytest.fixture(scope="module")
def auto_episodes(served, mcp_ts_client, tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("mcp-ts-auto")
    return run_script(NODE, "mcp_ts_auto_episode.mjs", str(mcp_ts_client), served.url, home=home, server=served)


def assert_rewarded(steps: list[dict]) -> None:
    """Every step's reward in `structuredContent`, beside the observation's fields; the goal's 1.0 at the end."""
    outcome = [(s["structured"]["reward"], s["structured"]["finished"]) for s in steps]
    assert outcome == [(0.0, False)] * (len(steps) - 1) + [(1.0, True)]
    for step in steps:
        observation = json.loads(step["text"])
        rewarded = {"reward": step["structured"]["reward"], "finished": step["structured"]["finished"]}
        assert step["structured"] == {**observation, **rewarded}


@pytest.mark.parametrize("way", ["episode_url", "x_session_id", "protocol_session", "plain_default_url"])
def test_the_typescript_sdk_plays_frozen_lake_and_reads_rewards_from_structured_content(episodes, way):
    played = episodes[way]
    assert played["protocol_version"] == "2025-11-25"
    assert played["session_id"]  # the 2025 era's protocol session, whichever way the episode was named
    assert_rewarded(played["steps"])


@pytest.mark.parametrize(
    ("way", "version"),
    [
        ("episode_url", "2026-07-28"),
        ("x_session_id", "2026-07-28"),
        ("plain_env_url", "2025-11-25"),
        ("plain_default_url", "2025-11-25"),
    ],
)
def test_the_typescript_sdk_2_probing_discovery_plays_frozen_lake_in_the_era_each_url_offers(
    auto_episodes, way, version
):
    played = auto_episodes[way]
    assert "error" not in played, played["error"]
    assert played["protocol_version"] == version
    assert_rewarded(played["steps"])
