"""fastmcp 4.2.3 (its own venv) in its default mode against `ors-server serve`: it discovers the 2026-07-28 era and
plays FrozenLake through an episode URL and through `X-Session-ID`; at `/frozen_lake/mcp` and `/mcp`, where nothing
names an episode, discovery offers it the 2025 era and it plays its protocol session's own episode, as it does forced
to 2025. Rewards come from `structuredContent`, next to the unchanged text."""

from __future__ import annotations

import json

import pytest

from tests.clients.harness import run_script, run_server

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def episodes(fastmcp_python, tmp_path_factory) -> dict:
    # FrozenLake is the only environment, so the default one: `/mcp` serves it too.
    with run_server(tmp_path_factory.mktemp("server"), "--env", "frozen_lake") as server:
        home = tmp_path_factory.mktemp("fastmcp")
        return run_script(fastmcp_python, "fastmcp_episode.py", server.url, home=home, server=server)


@pytest.mark.parametrize(
    ("way", "version"),
    [
        ("episode_url", "2026-07-28"),
        ("x_session_id", "2026-07-28"),
        ("plain_env_url", "2025-11-25"),
        ("plain_default_url", "2025-11-25"),
        ("protocol_session", "2025-11-25"),
    ],
)
def test_fastmcp_plays_frozen_lake_and_reads_rewards_from_structured_content(episodes, way, version):
    played = episodes[way]
    assert "error" not in played, played["error"]
    assert played["protocol_version"] == version
    steps = played["steps"]
    outcome = [(s["structured"]["reward"], s["structured"]["finished"]) for s in steps]
    assert outcome == [(0.0, False)] * (len(steps) - 1) + [(1.0, True)]
    for step in steps:
        observation = json.loads(step["text"])
        assert step["structured"] == {
            **observation,
            "reward": step["structured"]["reward"],
            "finished": step["structured"]["finished"],
        }
